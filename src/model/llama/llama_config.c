/* config.json of the Llama family, as transformers' LlamaConfig,
 * MistralConfig, Qwen2Config, Qwen3Config, Phi3Config, MixtralConfig and
 * Qwen3MoeConfig write it. The fields read and their defaults when absent
 * (the configs' own):
 *
 *   hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
 *   vocab_size                          required integers
 *   num_key_value_heads                 num_attention_heads (1..heads, dividing them)
 *   head_dim                            hidden_size / num_attention_heads (Qwen3: 128)
 *   num_local_experts                   Mixtral: 8 (1..128); Qwen3-MoE: num_experts, 128
 *   num_experts_per_tok                 Mixtral: 2, Qwen3-MoE: 8 (at most the experts)
 *   moe_intermediate_size               Qwen3-MoE: 768 (Mixtral's experts: intermediate_size)
 *   norm_topk_prob                      Qwen3-MoE: false (Mixtral always renormalises)
 *   decoder_sparse_step, mlp_only_layers  Qwen3-MoE: 1, [] (the dense layers)
 *   shared_expert_intermediate_size     Qwen2-MoE: 5632 (its gated shared expert); refused
 *                                       elsewhere
 *   qkv_bias                            Qwen2-MoE: true (no o_proj bias)
 *   router_aux_loss_coef, router_jitter_noise  ignored (training only)
 *   max_position_embeddings             required (Mistral: 131072)
 *   hidden_act                          "silu"
 *   rms_norm_eps                        1e-6
 *   rope_theta                          10000
 *   rope_scaling                        null, or {rope_type (or type): default, linear,
 *                                       dynamic, llama3, longrope (Phi-3; "su" and "yarn"
 *                                       there are its older names); factor; low_freq_factor,
 *                                       high_freq_factor, original_max_position_embeddings;
 *                                       longrope: short_factor, long_factor (rot_dim / 2
 *                                       each), attention_factor}
 *   rope_parameters                     transformers 5's spelling of both, preferred
 *   partial_rotary_factor               1.0 (at top level or in rope_parameters)
 *   original_max_position_embeddings    Phi-3: 4096, where rope_scaling does not say it
 *   attention_bias, mlp_bias            false (Qwen2: q/k/v biases always, none on o_proj;
 *                                       Phi-3: none; Qwen3: no mlp_bias)
 *   tie_word_embeddings                 false
 *   sliding_window                      Mistral, Phi-3: null or a window (every layer);
 *                                       Qwen2, Qwen3: only with use_sliding_window true, on
 *                                       the layers layer_types names "sliding_attention",
 *                                       else on layers >= max_window_layers (28)
 *   bos_token_id, eos_token_id (one or a list), pad_token_id
 *   torch_dtype (or "dtype")            float32
 *   rope_freq_factors                   absent; a list of rot_dim / 2 positive numbers,
 *                                       each rotary frequency's divisor (not a transformers
 *                                       field: what format/gguf_hf.c reads from a GGUF's
 *                                       rope_freqs tensor, with the default rope)
 *
 * Sequences are limited to max_position_embeddings, and for rope "dynamic"
 * to original_max_position_embeddings (below it dynamic NTK scaling is the
 * default rope). A context past the sliding window is served: those layers
 * attend within the window (the mask transformers applies).
 *
 * LongRoPE as transformers computes it: inv_freq[i] = 1 / (f[i] *
 * theta^(2i / rot_dim)) with f the short factors while a sequence's length
 * is at most original_max_position_embeddings and the long ones past it
 * (transformers picks them per forward call by its largest position; here
 * per sequence and step, the same for one sequence, and a sequence's result
 * does not depend on the others in its batch); cos and sin are scaled by
 * attention_factor, else sqrt(1 + ln(factor) / ln(original)) with factor
 * (else max_position_embeddings / original) above 1. Keys cached before
 * the switch keep their short rotation, as transformers' cache keeps them.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "format/hf_config.h"
#include "model/llama/llama.h"

extern const struct arch_ops llama_arch;

static int cfg_act(json_t *root, const char *what, enum kern_act *out)
{
    static const struct {
        const char *name;
        enum kern_act act;
    } acts[] = {
        {"silu", KERN_ACT_SILU},           {"swish", KERN_ACT_SILU},
        {"gelu", KERN_ACT_GELU},           {"gelu_new", KERN_ACT_GELU_TANH},
        {"gelu_pytorch_tanh", KERN_ACT_GELU_TANH}, {"relu", KERN_ACT_RELU},
    };
    const char *v;
    int rc = hf_get_str(root, what, "hidden_act", &v);
    if (rc < 0)
        return rc;
    if (!v) {
        *out = KERN_ACT_SILU;
        return 0;
    }
    for (size_t i = 0; i < sizeof(acts) / sizeof(acts[0]); i++)
        if (strcmp(v, acts[i].name) == 0) {
            *out = acts[i].act;
            return 0;
        }
    return err_set(ERR_UNSUPPORTED,
                   "%s: hidden_act \"%s\" is not supported (expected silu, gelu, gelu_new, "
                   "gelu_pytorch_tanh, relu)",
                   what, v);
}

/* rope_theta and the scaling: from rope_parameters (transformers 5), else
 * rope_theta + rope_scaling. */
/* LongRoPE's factor list `key` of scaling: rot_dim / 2 positive numbers. */
static int cfg_factors(json_t *scaling, const char *what, const char *key, int n, float *out)
{
    json_t *a = json_object_get(scaling, key);
    if (!json_is_array(a) || (int)json_array_size(a) != n)
        return err_set(ERR_FORMAT,
                       "%s: rope %s must be a list of %d numbers (rotary dims / 2), got %s%zu",
                       what, key, n, json_is_array(a) ? "" : "no list, size ",
                       json_is_array(a) ? json_array_size(a) : 0);
    for (int i = 0; i < n; i++) {
        json_t *v = json_array_get(a, (size_t)i);
        double d = json_number_value(v);
        if (!json_is_number(v) || !(d > 0 && d < 1e12))
            return err_set(ERR_FORMAT, "%s: rope %s[%d] must be a positive number", what, key, i);
        out[i] = (float)d; /* torch.tensor(list, dtype=float32) */
    }
    return 0;
}

static int cfg_longrope(json_t *root, json_t *scaling, const char *what, struct llama_config *c)
{
    const struct model_info *in = &c->base.info;
    const int half = c->rot_dim / 2;
    int rc, dflt_orig;
    double factor, attn;
    if (half > LLAMA_LONGROPE_MAX)
        return err_set(ERR_UNSUPPORTED,
                       "%s: longrope over %d rotary dims is not supported (at most "
                       "%d)",
                       what, c->rot_dim, 2 * LLAMA_LONGROPE_MAX);
    if ((rc = hf_get_int(root, what, "original_max_position_embeddings", false,
                         c->variant == LLAMA_VARIANT_PHI3 ? 4096 : in->max_pos, 1, HF_DIM_MAX,
                         &dflt_orig)) < 0 ||
        (rc = hf_get_int(scaling, what, "original_max_position_embeddings", false, dflt_orig, 1,
                         HF_DIM_MAX, &c->rope_orig_max_pos)) < 0 ||
        (rc = hf_get_num(scaling, what, "factor", false, (double)in->max_pos / c->rope_orig_max_pos,
                         1e-6, 1e6, &factor)) < 0)
        return rc;
    if (c->rope_orig_max_pos < 2 && factor > 1 && !json_object_get(scaling, "attention_factor"))
        return err_set(ERR_FORMAT,
                       "%s: rope original_max_position_embeddings %d must be at "
                       "least 2",
                       what, c->rope_orig_max_pos);
    double dflt_attn = factor <= 1 ? 1 : sqrt(1 + log(factor) / log((double)c->rope_orig_max_pos));
    if ((rc = hf_get_num(scaling, what, "attention_factor", false, dflt_attn, 1e-6, 1e6, &attn)) <
            0 ||
        (rc = cfg_factors(scaling, what, "short_factor", half, c->short_factor)) < 0 ||
        (rc = cfg_factors(scaling, what, "long_factor", half, c->long_factor)) < 0)
        return rc;
    c->rope_factor = factor;
    c->rope_attn_factor = attn;
    return 0;
}

static int cfg_rope(json_t *root, const char *what, struct llama_config *c)
{
    json_t *rp = json_object_get(root, "rope_parameters");
    json_t *scaling = json_object_get(root, "rope_scaling");
    json_t *theta_from = root;
    int rc;
    if (rp && !json_is_null(rp)) {
        if (!json_is_object(rp))
            return err_set(ERR_FORMAT, "%s: field \"rope_parameters\" must be an object", what);
        scaling = rp;
        if (json_object_get(rp, "rope_theta"))
            theta_from = rp;
    }
    if ((rc = hf_get_num(theta_from, what, "rope_theta", false, 10000.0, 1e-3, 1e12,
                         &c->rope_theta)) < 0)
        return rc;
    c->rope = ROPE_DEFAULT;
    c->rope_factor = 1.0;
    c->rope_attn_factor = 1.0;
    if (!scaling || json_is_null(scaling))
        return 0;
    if (!json_is_object(scaling))
        return err_set(ERR_FORMAT, "%s: field \"rope_scaling\" must be an object or null", what);
    const char *type;
    if ((rc = hf_get_rope_type(scaling, what, &type)) < 0)
        return rc;
    if (!type)
        return 0;
    if (strcmp(type, "linear") == 0)
        c->rope = ROPE_LINEAR;
    else if (strcmp(type, "dynamic") == 0)
        c->rope = ROPE_DYNAMIC;
    else if (strcmp(type, "llama3") == 0)
        c->rope = ROPE_LLAMA3;
    else if (strcmp(type, "longrope") == 0 ||
             (c->variant == LLAMA_VARIANT_PHI3 &&
              (strcmp(type, "su") == 0 || strcmp(type, "yarn") == 0)))
        c->rope = ROPE_LONGROPE;
    else
        return err_set(ERR_UNSUPPORTED,
                       "%s: rope type \"%s\" is not supported (expected default, linear, dynamic, "
                       "llama3 or longrope)",
                       what, type);
    if (c->rope == ROPE_LONGROPE)
        return cfg_longrope(root, scaling, what, c);
    const struct model_info *in = &c->base.info;
    if ((rc = hf_get_num(scaling, what, "factor", true, 1, 1e-6, 1e6, &c->rope_factor)) < 0)
        return rc;
    if (c->rope == ROPE_LINEAR)
        return 0;
    if ((rc = hf_get_int(scaling, what, "original_max_position_embeddings", c->rope == ROPE_LLAMA3,
                         in->max_pos, 1, HF_DIM_MAX, &c->rope_orig_max_pos)) < 0)
        return rc;
    if (c->rope == ROPE_DYNAMIC)
        return 0;
    if ((rc = hf_get_num(scaling, what, "low_freq_factor", true, 1, 1e-6, 1e6,
                         &c->low_freq_factor)) < 0 ||
        (rc = hf_get_num(scaling, what, "high_freq_factor", true, 4, 1e-6, 1e6,
                         &c->high_freq_factor)) < 0)
        return rc;
    if (c->high_freq_factor <= c->low_freq_factor)
        return err_set(ERR_FORMAT, "%s: rope high_freq_factor %g must exceed low_freq_factor %g",
                       what, c->high_freq_factor, c->low_freq_factor);
    return 0;
}

/* rope_freq_factors: a GGUF's per-frequency divisors (format/gguf_hf.h). */
static int cfg_freq_factors(json_t *root, const char *what, struct llama_config *c)
{
    json_t *f = json_object_get(root, "rope_freq_factors");
    if (!f || json_is_null(f))
        return 0;
    size_t half = (size_t)c->rot_dim / 2;
    if (!json_is_array(f) || json_array_size(f) != half)
        return err_set(ERR_FORMAT,
                       "%s: rope_freq_factors must be a list of %zu numbers (one per "
                       "rotary frequency)",
                       what, half);
    if (c->rope != ROPE_DEFAULT)
        return err_set(ERR_UNSUPPORTED, "%s: rope_freq_factors with rope scaling is not supported",
                       what);
    for (size_t i = 0; i < half; i++) {
        json_t *v = json_array_get(f, i);
        double d = json_number_value(v);
        if (!json_is_number(v) || !(d > 0 && d < 1e12))
            return err_set(ERR_FORMAT, "%s: rope_freq_factors[%zu] is not a positive number", what,
                           i);
        c->freq_factors[i] = (float)d;
    }
    c->rope = ROPE_FACTORS;
    return 0;
}

/* The sliding window that applies (0: none). */
static int cfg_window(json_t *root, const char *what, struct llama_config *c)
{
    int rc;
    const bool qwen = c->variant == LLAMA_VARIANT_QWEN2 || c->variant == LLAMA_VARIANT_QWEN3 ||
                      c->variant == LLAMA_VARIANT_QWEN3_MOE ||
                      c->variant == LLAMA_VARIANT_QWEN2_MOE;
    bool use = c->variant == LLAMA_VARIANT_MISTRAL || c->variant == LLAMA_VARIANT_PHI3 ||
               c->variant == LLAMA_VARIANT_MIXTRAL;
    if (qwen && (rc = hf_get_bool(root, what, "use_sliding_window", false, &use)) < 0)
        return rc;
    c->sliding_window = 0;
    if (!use)
        return 0;
    if ((rc = hf_get_int(root, what, "sliding_window", false, 0, 1, HF_DIM_MAX,
                         &c->sliding_window)) < 0)
        return rc;
    if (c->sliding_window == 0)
        return 0;
    if (c->variant != LLAMA_VARIANT_QWEN2 && c->variant != LLAMA_VARIANT_QWEN3 &&
        c->variant != LLAMA_VARIANT_QWEN2_MOE)
        return layer_windows_parse(NULL, what, c->base.info.n_layers, LAYERS_ALL, 0, &c->windows);
    int from;
    if ((rc = hf_get_int(root, what, "max_window_layers", false, 28, 0, HF_DIM_MAX, &from)) < 0)
        return rc;
    return layer_windows_parse(root, what, c->base.info.n_layers, LAYERS_FROM, from, &c->windows);
}

static enum llama_variant variant_of(json_t *root)
{
    const char *mt = json_string_value(json_object_get(root, "model_type"));
    return strcmp(mt, "mistral") == 0     ? LLAMA_VARIANT_MISTRAL
           : strcmp(mt, "qwen2") == 0     ? LLAMA_VARIANT_QWEN2
           : strcmp(mt, "qwen3") == 0     ? LLAMA_VARIANT_QWEN3
           : strcmp(mt, "phi3") == 0      ? LLAMA_VARIANT_PHI3
           : strcmp(mt, "mixtral") == 0   ? LLAMA_VARIANT_MIXTRAL
           : strcmp(mt, "qwen3_moe") == 0 ? LLAMA_VARIANT_QWEN3_MOE
           : strcmp(mt, "qwen2_moe") == 0 ? LLAMA_VARIANT_QWEN2_MOE
                                          : LLAMA_VARIANT_LLAMA;
}

static const char *const variant_names[] = {"llama", "mistral", "qwen2",     "qwen3",
                                            "phi3",  "mixtral", "qwen3_moe", "qwen2_moe"};
static const char *const variant_archs[] = {
    "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",    "Qwen3ForCausalLM",
    "Phi3ForCausalLM",  "MixtralForCausalLM", "Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM"};

const char *llama_variant_arch(enum llama_variant v)
{
    return variant_archs[v];
}

/* The experts: Mixtral's num_local_experts on every layer, renormalised;
 * Qwen3-MoE's num_experts (or num_local_experts, the name transformers 5
 * saves) on the layers not in mlp_only_layers whose index + 1 is a multiple
 * of decoder_sparse_step, renormalised when norm_topk_prob; Qwen2-MoE's as
 * Qwen3-MoE's, with a shared expert. */
static int cfg_moe(json_t *root, const char *what, struct llama_config *c)
{
    const struct model_info *in = &c->base.info;
    const bool qwen2 = c->variant == LLAMA_VARIANT_QWEN2_MOE;
    const bool qwen = c->variant == LLAMA_VARIANT_QWEN3_MOE || qwen2;
    const char *experts_key =
        qwen && json_object_get(root, "num_experts") ? "num_experts" : "num_local_experts";
    int rc, step = 1;
    if ((rc = hf_get_int(root, what, experts_key, false,
                         qwen2  ? 60
                         : qwen ? 128
                                : 8,
                         1, MODEL_MAX_EXPERTS, &c->n_experts)) < 0 ||
        (rc = hf_get_int(root, what, "num_experts_per_tok", false,
                         qwen2  ? 4
                         : qwen ? 8
                                : 2,
                         1, MODEL_MAX_EXPERTS, &c->top_k)) < 0)
        return rc;
    if (c->top_k > c->n_experts)
        return err_set(ERR_FORMAT, "%s: num_experts_per_tok %d exceeds the %d experts (%s)", what,
                       c->top_k, c->n_experts, experts_key);
    c->moe_ffn = in->ffn;
    c->norm_topk = true;
    json_t *shared = json_object_get(root, "shared_expert_intermediate_size");
    if (qwen2 && (rc = hf_get_int(root, what, "shared_expert_intermediate_size", false, 5632, 1,
                                  HF_DIM_MAX, &c->shared_ffn)) < 0)
        return rc;
    if (!qwen2 && shared && !json_is_null(shared) &&
        !(json_is_integer(shared) && !json_integer_value(shared)))
        return err_set(ERR_UNSUPPORTED,
                       "%s: shared experts (shared_expert_intermediate_size) are "
                       "supported in qwen2_moe only",
                       what);
    if (!qwen) {
        for (int l = 0; l < in->n_layers; l++)
            c->moe_bits[l / 64] |= (uint64_t)1 << (l % 64);
        return 0;
    }
    if ((rc = hf_get_int(root, what, "moe_intermediate_size", false, qwen2 ? 1408 : 768, 1,
                         HF_DIM_MAX, &c->moe_ffn)) < 0 ||
        (rc = hf_get_bool(root, what, "norm_topk_prob", false, &c->norm_topk)) < 0 ||
        (rc = hf_get_int(root, what, "decoder_sparse_step", false, 1, 1, HF_DIM_MAX, &step)) < 0)
        return rc;
    json_t *only = json_object_get(root, "mlp_only_layers");
    if (only && !json_is_null(only) && !json_is_array(only))
        return err_set(ERR_FORMAT, "%s: mlp_only_layers must be a list of layer indices", what);
    for (int l = 0; l < in->n_layers; l++)
        if ((l + 1) % step == 0)
            c->moe_bits[l / 64] |= (uint64_t)1 << (l % 64);
    for (size_t i = 0; json_is_array(only) && i < json_array_size(only); i++) {
        json_t *v = json_array_get(only, i);
        json_int_t l = json_integer_value(v);
        if (!json_is_integer(v) || l < 0 || l >= in->n_layers)
            return err_set(ERR_FORMAT, "%s: mlp_only_layers[%zu] must be a layer index in [0, %d)",
                           what, i, in->n_layers);
        c->moe_bits[l / 64] &= ~((uint64_t)1 << (l % 64));
    }
    return 0;
}

/* transformers 5 writes partial_rotary_factor into rope_parameters. */
static int cfg_partial_in_rope(json_t *root, const char *what, double *partial)
{
    json_t *rp = json_object_get(root, "rope_parameters");
    if (!json_is_object(rp))
        return 0;
    return hf_get_num(rp, what, "partial_rotary_factor", false, *partial, 1e-6, 1, partial);
}

int llama_config_parse(json_t *root, const char *what, struct model_config **out)
{
    int rc = arch_config_alloc(&llama_arch, out);
    if (rc < 0)
        return rc;
    struct llama_config *c = (struct llama_config *)*out;
    struct model_info *in = &c->base.info;
    c->variant = variant_of(root);
    double eps, partial;
    bool attn_bias;
    if ((rc = hf_get_int(root, what, "hidden_size", true, 0, 1, HF_DIM_MAX, &in->hidden)) < 0 ||
        (rc = hf_get_int(root, what, "intermediate_size", true, 0, 1, HF_DIM_MAX, &in->ffn)) < 0 ||
        (rc = hf_get_int(root, what, "num_hidden_layers", true, 0, 1, 4096, &in->n_layers)) < 0 ||
        (rc = hf_get_int(root, what, "num_attention_heads", true, 0, 1, 4096, &in->n_heads)) < 0 ||
        (rc = hf_get_int(root, what, "num_key_value_heads", false, in->n_heads, 1, 4096,
                         &in->n_kv_heads)) < 0 ||
        (rc = hf_get_int(root, what, "vocab_size", true, 0, 1, HF_DIM_MAX, &in->vocab)) < 0 ||
        (rc = hf_get_int(root, what, "max_position_embeddings", true, 0, 1, HF_DIM_MAX,
                         &in->max_pos)) < 0 ||
        (rc = hf_get_num(root, what, "rms_norm_eps", false, 1e-6, 1e-30, 1, &eps)) < 0 ||
        (rc = hf_get_num(root, what, "partial_rotary_factor", false, 1, 1e-6, 1, &partial)) < 0 ||
        (rc = cfg_partial_in_rope(root, what, &partial)) < 0 ||
        (rc = hf_get_bool(root, what, "attention_bias", false, &attn_bias)) < 0 ||
        (rc = hf_get_bool(root, what, "mlp_bias", false, &c->mlp_bias)) < 0 ||
        (rc = hf_get_bool(root, what, "tie_word_embeddings", false, &c->tie_embeddings)) < 0 ||
        (rc = hf_get_int(root, what, "bos_token_id", false, -1, -1, HF_DIM_MAX, &in->bos_id)) < 0 ||
        (rc = hf_get_int(root, what, "pad_token_id", false, -1, -1, HF_DIM_MAX, &in->pad_id)) < 0 ||
        (rc = hf_get_ids(root, what, "eos_token_id", in->vocab, in->eos_ids, MODEL_MAX_EOS,
                         &in->n_eos)) < 0 ||
        (rc = cfg_act(root, what, &c->act)) < 0 || (rc = hf_get_dtype(root, what, &in->dtype)) < 0)
        return rc;
    if (in->n_heads % in->n_kv_heads != 0)
        return err_set(ERR_FORMAT,
                       "%s: num_key_value_heads %d does not divide num_attention_heads %d", what,
                       in->n_kv_heads, in->n_heads);
    /* an explicit head_dim (Mistral Nemo: 128 with hidden 5120 and 32 heads) */
    const bool qwen3 = c->variant == LLAMA_VARIANT_QWEN3, phi3 = c->variant == LLAMA_VARIANT_PHI3;
    const bool moe = c->variant == LLAMA_VARIANT_MIXTRAL || c->variant == LLAMA_VARIANT_QWEN3_MOE ||
                     c->variant == LLAMA_VARIANT_QWEN2_MOE;
    if (in->hidden % in->n_heads != 0 && !json_object_get(root, "head_dim") && !qwen3)
        return err_set(ERR_FORMAT,
                       "%s: hidden_size %d is not a multiple of num_attention_heads %d (and no "
                       "head_dim is given)",
                       what, in->hidden, in->n_heads);
    if ((rc = hf_get_int(root, what, "head_dim", false, qwen3 ? 128 : in->hidden / in->n_heads, 2,
                         4096, &in->head_dim)) < 0)
        return rc;
    if ((long)in->head_dim * in->n_heads > HF_DIM_MAX)
        return err_set(ERR_FORMAT, "%s: %d heads of head_dim %d exceed %d", what, in->n_heads,
                       in->head_dim, HF_DIM_MAX);
    c->rot_dim = (int)(in->head_dim * partial);
    if (c->rot_dim < 2 || c->rot_dim % 2)
        return err_set(ERR_FORMAT,
                       "%s: partial_rotary_factor %g of head_dim %d gives %d rotary dims "
                       "(expected an even number >= 2)",
                       what, partial, in->head_dim, c->rot_dim);
    c->rms_eps = eps;
    c->qkv_bias = (attn_bias && !phi3) || c->variant == LLAMA_VARIANT_QWEN2;
    c->o_bias = attn_bias && !phi3 && c->variant != LLAMA_VARIANT_QWEN2;
    c->mlp_bias = c->mlp_bias && !phi3 && !qwen3 && !moe; /* none has the field */
    if (c->variant == LLAMA_VARIANT_QWEN2_MOE) {          /* qkv_bias (true), none on o_proj */
        c->o_bias = false;
        if ((rc = hf_get_bool(root, what, "qkv_bias", true, &c->qkv_bias)) < 0)
            return rc;
    }
    if ((rc = cfg_rope(root, what, c)) < 0 || (rc = cfg_freq_factors(root, what, c)) < 0 ||
        (rc = cfg_window(root, what, c)) < 0 || (moe && (rc = cfg_moe(root, what, c)) < 0))
        return rc;
    if (in->bos_id >= in->vocab || in->pad_id >= in->vocab)
        return err_set(ERR_FORMAT, "%s: %s_token_id %d is outside the vocabulary (size %d)",
                       what, in->bos_id >= in->vocab ? "bos" : "pad",
                       in->bos_id >= in->vocab ? in->bos_id : in->pad_id, in->vocab);
    /* the positions a sequence may reach, as computed here (see the top) */
    c->max_pos_config = in->max_pos;
    if (c->rope == ROPE_DYNAMIC && c->rope_orig_max_pos < in->max_pos) {
        in->max_pos = c->rope_orig_max_pos;
        in->max_pos_from = "original_max_position_embeddings (dynamic rope past it is not "
                           "implemented)";
    }
    snprintf(in->architecture, sizeof(in->architecture), "%s", variant_archs[c->variant]);
    return 0;
}

static const char *rope_name(enum rope_kind r)
{
    return r == ROPE_LINEAR     ? "linear"
           : r == ROPE_DYNAMIC  ? "dynamic"
           : r == ROPE_LLAMA3   ? "llama3"
           : r == ROPE_LONGROPE ? "longrope"
           : r == ROPE_FACTORS  ? "frequency factors"
                                : "default";
}

static const char *act_name(enum kern_act a)
{
    return a == KERN_ACT_SILU ? "silu" : a == KERN_ACT_GELU ? "gelu"
                                     : a == KERN_ACT_GELU_TANH ? "gelu_pytorch_tanh"
                                                               : "relu";
}

void llama_describe(const struct model_config *mc, char *buf, size_t cap)
{
    const struct llama_config *c = ARCH_CONFIG(struct llama_config, mc);
    snprintf(buf, cap,
             "model_type %s, rms_norm_eps %g, %s, rope %s (theta %g, factor %g, %d rotary dims%s), "
             "q/k/v bias %s, o bias %s, mlp bias %s, q/k norm %s, fused qkv and gate_up %s, tied "
             "head %s, sliding window %d, experts %d (top %d of width %d%s)",
             variant_names[c->variant], c->rms_eps, act_name(c->act), rope_name(c->rope),
             c->rope_theta, c->rope_factor, c->rot_dim,
             c->rope == ROPE_LONGROPE ? ", long past original_max_position_embeddings" : "",
             c->qkv_bias ? "yes" : "no", c->o_bias ? "yes" : "no", c->mlp_bias ? "yes" : "no",
             llama_qk_norm(c) ? "yes" : "no", llama_fused(c) ? "yes" : "no",
             c->tie_embeddings ? "yes" : "no", c->sliding_window, c->n_experts, c->top_k,
             c->moe_ffn, c->n_experts && c->norm_topk ? ", renormalised" : "");
    if (c->shared_ffn && strlen(buf) < cap)
        snprintf(buf + strlen(buf), cap - strlen(buf), ", a shared expert of width %d",
                 c->shared_ffn);
}

void llama_inv_freq(const struct llama_config *c, bool long_ctx, float *inv)
{
    const int dim = c->rot_dim, half = dim / 2;
    if (c->rope == ROPE_LONGROPE) {
        /* 1 / (ext_factors * base ** (arange(0, dim, 2) / dim)), in float32 */
        const float *f = long_ctx ? c->long_factor : c->short_factor;
        for (int i = 0; i < half; i++)
            inv[i] = 1.0f / (f[i] * powf((float)c->rope_theta, (float)(2 * i) / (float)dim));
        return;
    }
    /* transformers: 1 / base ** (arange(0, dim, 2) / dim), in float32 */
    for (int i = 0; i < half; i++)
        inv[i] = 1.0f / powf((float)c->rope_theta, (float)(2 * i) / (float)dim);
    if (c->rope == ROPE_LINEAR) {
        for (int i = 0; i < half; i++)
            inv[i] /= (float)c->rope_factor;
    } else if (c->rope == ROPE_FACTORS) {
        for (int i = 0; i < half; i++)
            inv[i] /= c->freq_factors[i];
    } else if (c->rope == ROPE_LLAMA3) {
        const float factor = (float)c->rope_factor, lo = (float)c->low_freq_factor,
                    hi = (float)c->high_freq_factor, old = (float)c->rope_orig_max_pos;
        const float lo_wavelen = old / lo, hi_wavelen = old / hi;
        for (int i = 0; i < half; i++) {
            float wavelen = 2.0f * (float)M_PI / inv[i];
            float f = wavelen > lo_wavelen ? inv[i] / factor : inv[i];
            if (!(wavelen < hi_wavelen) && !(wavelen > lo_wavelen)) {
                float smooth = (old / wavelen - lo) / (hi - lo);
                f = (1 - smooth) * f / factor + smooth * f;
            }
            inv[i] = f;
        }
    }
}

int llama_config_save(const struct model_config *mc, const char *dir)
{
    const struct llama_config *c = ARCH_CONFIG(struct llama_config, mc);
    const struct model_info *in = &mc->info;
    char path[4096];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    json_t *root = json_pack(
        "{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:i, s:f, s:f, s:b, s:b, s:b, s:i, s:s, "
        "s:b}",
        "architectures", variant_archs[c->variant], "model_type", variant_names[c->variant],
        "hidden_size", in->hidden, "intermediate_size", in->ffn, "num_hidden_layers",
        in->n_layers, "num_attention_heads", in->n_heads, "num_key_value_heads", in->n_kv_heads,
        "head_dim", in->head_dim, "hidden_act", act_name(c->act), "max_position_embeddings",
        c->max_pos_config, "rms_norm_eps",
        c->rms_eps, "rope_theta", c->rope_theta, "attention_bias",
        c->variant != LLAMA_VARIANT_QWEN2 && c->qkv_bias, "mlp_bias", c->mlp_bias,
        "tie_word_embeddings", c->tie_embeddings, "vocab_size", in->vocab, "torch_dtype",
        dtype_torch_name(in->dtype), "use_cache", 1);
    if (!root)
        return err_set(ERR_NOMEM, "%s: cannot build config JSON", path);
    if (c->rope == ROPE_FACTORS) {
        json_t *f = json_array();
        for (int i = 0; i < c->rot_dim / 2; i++)
            json_array_append_new(f, json_real(c->freq_factors[i]));
        json_object_set_new(root, "rope_freq_factors", f);
        json_object_set_new(root, "rope_scaling", json_null());
    } else if (c->rope != ROPE_DEFAULT) {
        json_t *s = json_pack("{s:s, s:f}", "rope_type", rope_name(c->rope), "factor",
                              c->rope_factor);
        if (c->rope != ROPE_LINEAR)
            json_object_set_new(s, "original_max_position_embeddings",
                                json_integer(c->rope_orig_max_pos));
        if (c->rope == ROPE_LLAMA3) {
            json_object_set_new(s, "low_freq_factor", json_real(c->low_freq_factor));
            json_object_set_new(s, "high_freq_factor", json_real(c->high_freq_factor));
        }
        if (c->rope == ROPE_LONGROPE) {
            json_t *sf = json_array(), *lf = json_array();
            for (int i = 0; i < c->rot_dim / 2; i++) {
                json_array_append_new(sf, json_real(c->short_factor[i]));
                json_array_append_new(lf, json_real(c->long_factor[i]));
            }
            json_object_set_new(s, "short_factor", sf);
            json_object_set_new(s, "long_factor", lf);
            json_object_set_new(s, "attention_factor", json_real(c->rope_attn_factor));
            json_object_set_new(root, "original_max_position_embeddings",
                                json_integer(c->rope_orig_max_pos));
        }
        json_object_set_new(root, "rope_scaling", s);
    } else {
        json_object_set_new(root, "rope_scaling", json_null());
    }
    if (c->rot_dim != in->head_dim)
        json_object_set_new(root, "partial_rotary_factor",
                            json_real((double)c->rot_dim / in->head_dim));
    if (c->variant == LLAMA_VARIANT_QWEN2 || c->variant == LLAMA_VARIANT_QWEN3 ||
        c->variant == LLAMA_VARIANT_QWEN3_MOE || c->variant == LLAMA_VARIANT_QWEN2_MOE)
        json_object_set_new(root, "use_sliding_window", json_boolean(c->sliding_window > 0));
    if (c->variant != LLAMA_VARIANT_LLAMA)
        json_object_set_new(root, "sliding_window",
                            c->sliding_window ? json_integer(c->sliding_window) : json_null());
    if ((c->variant == LLAMA_VARIANT_QWEN2 || c->variant == LLAMA_VARIANT_QWEN2_MOE) &&
        c->sliding_window)
        json_object_set_new(root, "layer_types", layer_windows_json(&c->windows, in->n_layers));
    if (c->n_experts > 0) {
        json_object_set_new(
            root, c->variant == LLAMA_VARIANT_MIXTRAL ? "num_local_experts" : "num_experts",
            json_integer(c->n_experts));
        json_object_set_new(root, "num_experts_per_tok", json_integer(c->top_k));
        json_object_set_new(root, "router_aux_loss_coef", json_real(0.001));
    }
    if (c->variant == LLAMA_VARIANT_QWEN2_MOE) {
        json_object_set_new(root, "qkv_bias", json_boolean(c->qkv_bias));
        json_object_set_new(root, "shared_expert_intermediate_size", json_integer(c->shared_ffn));
    }
    if (c->variant == LLAMA_VARIANT_QWEN3_MOE || c->variant == LLAMA_VARIANT_QWEN2_MOE) {
        json_t *only = json_array();
        for (int l = 0; l < in->n_layers; l++)
            if (!llama_moe_layer(c, l))
                json_array_append_new(only, json_integer(l));
        json_object_set_new(root, "moe_intermediate_size", json_integer(c->moe_ffn));
        json_object_set_new(root, "norm_topk_prob", json_boolean(c->norm_topk));
        json_object_set_new(root, "decoder_sparse_step", json_integer(1));
        json_object_set_new(root, "mlp_only_layers", only);
    }
    if (in->bos_id >= 0)
        json_object_set_new(root, "bos_token_id", json_integer(in->bos_id));
    if (in->pad_id >= 0)
        json_object_set_new(root, "pad_token_id", json_integer(in->pad_id));
    if (in->n_eos == 1)
        json_object_set_new(root, "eos_token_id", json_integer(in->eos_ids[0]));
    return hf_write_config(root, path);
}
