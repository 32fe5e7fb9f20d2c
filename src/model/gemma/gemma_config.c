/* config.json of the Gemma family, as transformers' Gemma2Config,
 * Gemma3TextConfig and Gemma3Config (its text_config) write it. Absent
 * fields take those classes' defaults (Gemma 2 / Gemma 3), as transformers
 * fills them (the Hub's Gemma 3 multimodal configs state only a few):
 *
 *   vocab_size                     256000 / 262208
 *   hidden_size, intermediate_size 2304, 9216
 *   num_hidden_layers              26
 *   num_attention_heads            8
 *   num_key_value_heads            4 (dividing the heads)
 *   head_dim                       256
 *   max_position_embeddings        8192 / 131072
 *   rms_norm_eps                   1e-6
 *   hidden_activation              gelu_pytorch_tanh (older: hidden_act)
 *   query_pre_attn_scalar          256
 *   attention_bias                 false
 *   attn_logit_softcapping         Gemma 2: 50 (null: none); Gemma 3 ignores it, as transformers
 * does final_logit_softcapping        Gemma 2: 30; Gemma 3: null (none) sliding_window 4096
 *   layer_types                    per layer "sliding_attention" / "full_attention"; absent:
 *                                  every sliding_window_pattern-th layer (2 / 6) is global
 *   rope_theta                     10000 / 1e6 (Gemma 3's global layers)
 *   rope_local_base_freq           Gemma 3's local layers: 10000
 *   rope_scaling                   Gemma 3's global layers: null, or linear with factor
 *   rope_parameters                transformers 5's spelling of the three: Gemma 2
 *                                  {rope_type, rope_theta}; Gemma 3 {full_attention: {...},
 *                                  sliding_attention: {...}}
 *   use_bidirectional_attention    false (true, the embedding models': refused)
 *   bos_token_id, eos_token_id, pad_token_id   2, 1, 0
 *   torch_dtype (or dtype)         float32
 *
 * model_type gemma3 (Gemma3ForConditionalGeneration) reads all of these
 * from its "text_config" object (ids and dtype also from the top level),
 * and image_token_index (262144) to refuse image input.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "format/hf_config.h"
#include "model/gemma/gemma.h"

extern const struct arch_ops gemma_arch;

static const char *const variant_types[] = {"gemma2", "gemma3_text", "gemma3"};
static const char *const variant_archs[] = {"Gemma2ForCausalLM", "Gemma3ForCausalLM",
                                            "Gemma3ForConditionalGeneration"};

static int cfg_act(json_t *root, const char *what, enum kern_act *out)
{
    const char *v;
    int rc = hf_get_str(root, what, "hidden_activation", &v);
    if (rc == 0 && !v)
        rc = hf_get_str(root, what, "hidden_act", &v);
    if (rc < 0)
        return rc;
    if (!v || strcmp(v, "gelu_pytorch_tanh") == 0 || strcmp(v, "gelu_new") == 0)
        *out = KERN_ACT_GELU_TANH;
    else if (strcmp(v, "gelu") == 0)
        *out = KERN_ACT_GELU;
    else
        return err_set(ERR_UNSUPPORTED,
                       "%s: hidden_activation \"%s\" is not supported (expected "
                       "gelu_pytorch_tanh, gelu_new or gelu)",
                       what, v);
    return 0;
}

/* One rope setting: {rope_type (or type), rope_theta, factor}: default, or
 * linear when linear_ok. theta_from: where rope_theta is read (the object
 * itself in rope_parameters; the config's top level in the older spelling). */
static int rope_one(json_t *o, json_t *theta_from, const char *theta_key, const char *what,
                    double dflt, bool linear_ok, double *theta, double *factor)
{
    int rc;
    *factor = 1;
    if (o && !json_is_null(o) && !json_is_object(o))
        return err_set(ERR_FORMAT, "%s: a rope setting must be an object or null", what);
    if ((rc = hf_get_num(theta_from, what, theta_key, false, dflt, 1e-3, 1e12, theta)) < 0)
        return rc;
    if (!o || json_is_null(o))
        return 0;
    const char *type;
    if ((rc = hf_get_rope_type(o, what, &type)) < 0)
        return rc;
    if (!type)
        return 0;
    if (strcmp(type, "linear") != 0 || !linear_ok)
        return err_set(ERR_UNSUPPORTED,
                       "%s: rope type \"%s\" is not supported here (expected default%s)", what,
                       type, linear_ok ? " or linear" : "");
    return hf_get_num(o, what, "factor", true, 1, 1e-6, 1e6, factor);
}

static int cfg_rope(json_t *root, const char *what, struct gemma_config *c)
{
    json_t *rp = json_object_get(root, "rope_parameters");
    double f;
    int rc;
    if (rp && !json_is_null(rp) && !json_is_object(rp))
        return err_set(ERR_FORMAT, "%s: field \"rope_parameters\" must be an object", what);
    c->rope_factor = 1;
    if (c->variant == GEMMA_2) {
        bool in_rp = rp && !json_is_null(rp) && json_object_get(rp, "rope_theta");
        return rope_one(rp && !json_is_null(rp) ? rp : json_object_get(root, "rope_scaling"),
                        in_rp ? rp : root, "rope_theta", what, 10000.0, false, &c->rope_theta, &f);
    }
    if (rp && !json_is_null(rp)) {
        json_t *full = json_object_get(rp, "full_attention");
        json_t *local = json_object_get(rp, "sliding_attention");
        if (!json_is_object(full) || !json_is_object(local))
            return err_set(ERR_FORMAT,
                           "%s: field \"rope_parameters\" must hold full_attention and "
                           "sliding_attention objects",
                           what);
        if ((rc = rope_one(full, full, "rope_theta", what, 1e6, true, &c->rope_theta,
                           &c->rope_factor)) < 0)
            return rc;
        return rope_one(local, local, "rope_theta", what, 10000.0, false, &c->rope_local_theta, &f);
    }
    if ((rc = rope_one(json_object_get(root, "rope_scaling"), root, "rope_theta", what, 1e6, true,
                       &c->rope_theta, &c->rope_factor)) < 0)
        return rc;
    return hf_get_num(root, what, "rope_local_base_freq", false, 10000.0, 1e-3, 1e12,
                      &c->rope_local_theta);
}

/* A soft-capping value: a positive number, or null / absent (dflt). */
static int cfg_softcap(json_t *root, const char *what, const char *key, double dflt, double *out)
{
    json_t *v = json_object_get(root, key);
    if (v && json_is_null(v)) {
        *out = 0;
        return 0;
    }
    return hf_get_num(root, what, key, false, dflt, 1e-6, 1e9, out);
}

static int cfg_dims(json_t *t, const char *what, struct gemma_config *c)
{
    struct model_info *in = &c->base.info;
    const bool g2 = c->variant == GEMMA_2;
    int rc;
    if ((rc = hf_get_int(t, what, "vocab_size", false, g2 ? 256000 : 262208, 1, HF_DIM_MAX,
                         &in->vocab)) < 0 ||
        (rc = hf_get_int(t, what, "hidden_size", false, 2304, 1, HF_DIM_MAX, &in->hidden)) < 0 ||
        (rc = hf_get_int(t, what, "intermediate_size", false, 9216, 1, HF_DIM_MAX, &in->ffn)) < 0 ||
        (rc = hf_get_int(t, what, "num_hidden_layers", false, 26, 1, MODEL_MAX_LAYERS,
                         &in->n_layers)) < 0 ||
        (rc = hf_get_int(t, what, "num_attention_heads", false, 8, 1, 4096, &in->n_heads)) < 0 ||
        (rc = hf_get_int(t, what, "num_key_value_heads", false, 4, 1, 4096, &in->n_kv_heads)) < 0 ||
        (rc = hf_get_int(t, what, "head_dim", false, 256, 2, 4096, &in->head_dim)) < 0 ||
        (rc = hf_get_int(t, what, "max_position_embeddings", false, g2 ? 8192 : 131072, 1,
                         HF_DIM_MAX, &in->max_pos)) < 0)
        return rc;
    if (in->n_heads % in->n_kv_heads != 0)
        return err_set(ERR_FORMAT,
                       "%s: num_key_value_heads %d does not divide num_attention_heads %d", what,
                       in->n_kv_heads, in->n_heads);
    if (in->head_dim % 2)
        return err_set(ERR_FORMAT, "%s: head_dim %d must be even (rotary pairs)", what,
                       in->head_dim);
    if ((long)in->head_dim * in->n_heads > HF_DIM_MAX)
        return err_set(ERR_FORMAT, "%s: %d heads of head_dim %d exceed %d", what, in->n_heads,
                       in->head_dim, HF_DIM_MAX);
    return 0;
}

static int cfg_layers(json_t *t, const char *what, struct gemma_config *c)
{
    const bool g2 = c->variant == GEMMA_2;
    bool bidir;
    int pattern, rc;
    if ((rc = hf_get_num(t, what, "rms_norm_eps", false, 1e-6, 1e-30, 1, &c->rms_eps)) < 0 ||
        (rc = cfg_act(t, what, &c->act)) < 0 ||
        (rc = hf_get_bool(t, what, "attention_bias", false, &c->attn_bias)) < 0 ||
        (rc = hf_get_num(t, what, "query_pre_attn_scalar", false, 256, 1e-6, 1e9,
                         &c->query_pre_attn_scalar)) < 0 ||
        (rc = cfg_softcap(t, what, "final_logit_softcapping", g2 ? 30.0 : 0, &c->final_softcap)) <
            0 ||
        (rc = hf_get_bool(t, what, "use_bidirectional_attention", false, &bidir)) < 0 ||
        (rc = hf_get_int(t, what, "sliding_window_pattern", false, g2 ? 2 : 6, 1, HF_DIM_MAX,
                         &pattern)) < 0 ||
        (rc = cfg_rope(t, what, c)) < 0)
        return rc;
    if (g2 && (rc = cfg_softcap(t, what, "attn_logit_softcapping", 50.0, &c->attn_softcap)) < 0)
        return rc;
    if (bidir)
        return err_set(ERR_UNSUPPORTED,
                       "%s: use_bidirectional_attention true (an embedding model) is not "
                       "supported (expected a causal language model)",
                       what);
    json_t *sw = json_object_get(t, "sliding_window");
    if (sw && json_is_null(sw))
        c->sliding_window = 0;
    else if ((rc = hf_get_int(t, what, "sliding_window", false, 4096, 1, HF_DIM_MAX,
                              &c->sliding_window)) < 0)
        return rc;
    return layer_windows_parse(t, what, c->base.info.n_layers, LAYERS_PATTERN, pattern,
                               &c->windows);
}

/* bos, eos, pad, dtype: from t, else from the top level (Gemma 3 multimodal). */
static int cfg_ids(json_t *t, json_t *root, const char *what, struct gemma_config *c)
{
    struct model_info *in = &c->base.info;
    json_t *from;
    int rc;
    from = json_object_get(t, "bos_token_id") ? t : root;
    if ((rc = hf_get_int(from, what, "bos_token_id", false, 2, -1, HF_DIM_MAX, &in->bos_id)) < 0)
        return rc;
    from = json_object_get(t, "pad_token_id") ? t : root;
    if ((rc = hf_get_int(from, what, "pad_token_id", false, 0, -1, HF_DIM_MAX, &in->pad_id)) < 0)
        return rc;
    from = json_object_get(t, "eos_token_id") ? t : root;
    if ((rc = hf_get_ids(from, what, "eos_token_id", in->vocab, in->eos_ids, MODEL_MAX_EOS,
                         &in->n_eos)) < 0)
        return rc;
    if (in->n_eos == 0 && !json_object_get(from, "eos_token_id") && in->vocab > 1) {
        in->eos_ids[0] = 1;
        in->n_eos = 1;
    }
    from = json_object_get(t, "torch_dtype") || json_object_get(t, "dtype") ? t : root;
    if ((rc = hf_get_dtype(from, what, &in->dtype)) < 0)
        return rc;
    if (in->bos_id >= in->vocab || in->pad_id >= in->vocab)
        return err_set(ERR_FORMAT, "%s: %s_token_id %d is outside the vocabulary (size %d)", what,
                       in->bos_id >= in->vocab ? "bos" : "pad",
                       in->bos_id >= in->vocab ? in->bos_id : in->pad_id, in->vocab);
    c->image_token = -1;
    if (c->variant == GEMMA_3_MM) {
        int image;
        if ((rc = hf_get_int(root, what, "image_token_index", false, 262144, -1, HF_DIM_MAX,
                             &image)) < 0)
            return rc;
        c->image_token = image < in->vocab ? image : -1;
    }
    return 0;
}

int gemma_config_parse(json_t *root, const char *what, struct model_config **out)
{
    int rc = arch_config_alloc(&gemma_arch, out);
    if (rc < 0)
        return rc;
    struct gemma_config *c = (struct gemma_config *)*out;
    const char *mt = json_string_value(json_object_get(root, "model_type"));
    c->variant = strcmp(mt, "gemma2") == 0   ? GEMMA_2
                 : strcmp(mt, "gemma3") == 0 ? GEMMA_3_MM
                                             : GEMMA_3;
    json_t *t = root;
    if (c->variant == GEMMA_3_MM) {
        t = json_object_get(root, "text_config");
        if (!json_is_object(t))
            return err_set(ERR_FORMAT,
                           "%s: model_type gemma3 needs a \"text_config\" object (the language "
                           "model's; the vision tower is not loaded)",
                           what);
        const char *tmt = json_string_value(json_object_get(t, "model_type"));
        if (tmt && strcmp(tmt, "gemma3_text") != 0)
            return err_set(ERR_UNSUPPORTED,
                           "%s: text_config model_type \"%s\" is not supported (expected "
                           "gemma3_text)",
                           what, tmt);
    }
    if ((rc = cfg_dims(t, what, c)) < 0 || (rc = cfg_layers(t, what, c)) < 0 ||
        (rc = cfg_ids(t, root, what, c)) < 0)
        return rc;
    c->max_pos_config = c->base.info.max_pos;
    snprintf(c->base.info.architecture, sizeof(c->base.info.architecture), "%s",
             variant_archs[c->variant]);
    return 0;
}

void gemma_describe(const struct model_config *mc, char *buf, size_t cap)
{
    const struct gemma_config *c = ARCH_CONFIG(struct gemma_config, mc);
    int local = 0;
    for (int i = 0; i < mc->info.n_layers; i++)
        local += layer_windowed(&c->windows, i);
    snprintf(buf, cap,
             "model_type %s, rms_norm_eps %g, query_pre_attn_scalar %g, soft-capping attention "
             "%g final %g, sliding window %d on %d of %d layers, rope theta %g (local %g, "
             "linear factor %g), q/k norms %s, attention bias %s",
             variant_types[c->variant], c->rms_eps, c->query_pre_attn_scalar, c->attn_softcap,
             c->final_softcap, c->sliding_window, c->sliding_window ? local : 0, mc->info.n_layers,
             c->rope_theta, c->variant == GEMMA_2 ? c->rope_theta : c->rope_local_theta,
             c->rope_factor, gemma_qk_norm(c) ? "yes" : "no", c->attn_bias ? "yes" : "no");
}

void gemma_inv_freq(const struct gemma_config *c, bool local, float *inv)
{
    const int dim = c->base.info.head_dim, half = dim / 2;
    const double base = local && c->variant != GEMMA_2 ? c->rope_local_theta : c->rope_theta;
    const float factor = local ? 1.0f : (float)c->rope_factor;
    /* transformers: 1 / base ** (arange(0, dim, 2) / dim), in float32 */
    for (int i = 0; i < half; i++)
        inv[i] = 1.0f / powf((float)base, (float)(2 * i) / (float)dim) / factor;
}

int gemma_config_save(const struct model_config *mc, const char *dir)
{
    const struct gemma_config *c = ARCH_CONFIG(struct gemma_config, mc);
    const struct model_info *in = &mc->info;
    char path[4096];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    const enum gemma_variant v = c->variant == GEMMA_3_MM ? GEMMA_3 : c->variant;
    json_t *root = json_pack(
        "{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:s, s:I, s:b, s:b, s:s, s:i, "
        "s:i}",
        "architectures", variant_archs[v], "model_type", variant_types[v], "vocab_size", in->vocab,
        "hidden_size", in->hidden, "intermediate_size", in->ffn, "num_hidden_layers", in->n_layers,
        "num_attention_heads", in->n_heads, "num_key_value_heads", in->n_kv_heads, "head_dim",
        in->head_dim, "max_position_embeddings", c->max_pos_config, "rms_norm_eps", c->rms_eps,
        "hidden_activation", c->act == KERN_ACT_GELU ? "gelu" : "gelu_pytorch_tanh",
        "query_pre_attn_scalar", (json_int_t)llround(c->query_pre_attn_scalar), /* an int to transformers */
        "attention_bias", c->attn_bias,
        "tie_word_embeddings", true, "torch_dtype", dtype_torch_name(in->dtype), "pad_token_id",
        in->pad_id, "bos_token_id", in->bos_id);
    if (!root)
        return err_set(ERR_NOMEM, "out of memory");
    json_object_set_new(root, "rope_theta", json_real(c->rope_theta));
    json_object_set_new(root, "sliding_window",
                        c->sliding_window ? json_integer(c->sliding_window) : json_null());
    json_object_set_new(root, "layer_types", layer_windows_json(&c->windows, in->n_layers));
    json_object_set_new(root, "final_logit_softcapping",
                        c->final_softcap > 0 ? json_real(c->final_softcap) : json_null());
    if (v == GEMMA_2) {
        json_object_set_new(root, "attn_logit_softcapping",
                            c->attn_softcap > 0 ? json_real(c->attn_softcap) : json_null());
    } else {
        json_object_set_new(root, "rope_local_base_freq", json_real(c->rope_local_theta));
        json_t *s = json_null();
        if (c->rope_factor != 1)
            s = json_pack("{s:s, s:f}", "rope_type", "linear", "factor", c->rope_factor);
        json_object_set_new(root, "rope_scaling", s);
    }
    if (in->n_eos == 1)
        json_object_set_new(root, "eos_token_id", json_integer(in->eos_ids[0]));
    return hf_write_config(root, path);
}
