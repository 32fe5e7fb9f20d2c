/* config.json for OPT, as transformers' OPTConfig writes it. The fields we
 * read and their defaults when absent (OPTConfig's own defaults):
 *
 *   hidden_size, ffn_dim, num_hidden_layers, num_attention_heads,
 *   vocab_size, max_position_embeddings                      required integers
 *   word_embed_proj_dim       hidden_size
 *   do_layer_norm_before      true
 *   _remove_final_layer_norm  false
 *   enable_bias               true
 *   layer_norm_elementwise_affine true
 *   tie_word_embeddings       true
 *   activation_function       "relu"
 *   pad_token_id 1, bos_token_id 2, eos_token_id 2
 *   torch_dtype (or "dtype")  "float32"
 */
#include <stdio.h>
#include <string.h>

#include "format/hf_config.h"
#include "model/opt/opt.h"

static int cfg_act(json_t *root, const char *what, enum opt_act *out)
{
    static const struct {
        const char *name;
        enum opt_act act;
    } acts[] = {
        {"relu", OPT_ACT_RELU},           {"gelu", OPT_ACT_GELU},
        {"gelu_new", OPT_ACT_GELU_TANH},  {"gelu_pytorch_tanh", OPT_ACT_GELU_TANH},
        {"gelu_fast", OPT_ACT_GELU_TANH}, {"silu", OPT_ACT_SILU},
        {"swish", OPT_ACT_SILU},
    };
    const char *v;
    int rc = hf_get_str(root, what, "activation_function", &v);
    if (rc < 0)
        return rc;
    if (!v) {
        *out = OPT_ACT_RELU;
        return 0;
    }
    for (size_t i = 0; i < sizeof(acts) / sizeof(acts[0]); i++) {
        if (strcmp(v, acts[i].name) == 0) {
            *out = acts[i].act;
            return 0;
        }
    }
    return err_set(ERR_UNSUPPORTED,
                   "%s: activation_function \"%s\" is not supported (expected relu, gelu, "
                   "gelu_new, gelu_pytorch_tanh, gelu_fast, silu)",
                   what, v);
}

extern const struct arch_ops opt_arch;

int opt_config_parse(json_t *root, const char *what, struct model_config **out)
{
    int rc = arch_config_alloc(&opt_arch, out);
    if (rc < 0)
        return rc;
    struct opt_config *c = (struct opt_config *)*out;
    struct model_info *in = &c->base.info;
    int eos;
    bool remove_final_ln;
    if ((rc = hf_get_int(root, what, "hidden_size", true, 0, 1, HF_DIM_MAX, &in->hidden)) < 0 ||
        (rc = hf_get_int(root, what, "ffn_dim", true, 0, 1, HF_DIM_MAX, &in->ffn)) < 0 ||
        (rc = hf_get_int(root, what, "num_hidden_layers", true, 0, 1, 4096, &in->n_layers)) < 0 ||
        (rc = hf_get_int(root, what, "num_attention_heads", true, 0, 1, 4096, &in->n_heads)) < 0 ||
        (rc = hf_get_int(root, what, "vocab_size", true, 0, 1, HF_DIM_MAX, &in->vocab)) < 0 ||
        (rc = hf_get_int(root, what, "max_position_embeddings", true, 0, 1, HF_DIM_MAX,
                         &in->max_pos)) < 0 ||
        (rc = hf_get_int(root, what, "word_embed_proj_dim", false, in->hidden, 1, HF_DIM_MAX,
                         &c->embed_dim)) < 0 ||
        (rc = hf_get_int(root, what, "pad_token_id", false, 1, -1, HF_DIM_MAX, &in->pad_id)) < 0 ||
        (rc = hf_get_int(root, what, "bos_token_id", false, 2, -1, HF_DIM_MAX, &in->bos_id)) < 0 ||
        (rc = hf_get_int(root, what, "eos_token_id", false, 2, -1, HF_DIM_MAX, &eos)) < 0 ||
        (rc = hf_get_bool(root, what, "do_layer_norm_before", true, &c->pre_ln)) < 0 ||
        (rc = hf_get_bool(root, what, "_remove_final_layer_norm", false, &remove_final_ln)) < 0 ||
        (rc = hf_get_bool(root, what, "enable_bias", true, &c->bias)) < 0 ||
        (rc = hf_get_bool(root, what, "layer_norm_elementwise_affine", true, &c->ln_affine)) < 0 ||
        (rc = hf_get_bool(root, what, "tie_word_embeddings", true, &c->tie_embeddings)) < 0 ||
        (rc = cfg_act(root, what, &c->act)) < 0 || (rc = hf_get_dtype(root, what, &in->dtype)) < 0)
        return rc;
    c->final_ln = c->pre_ln && !remove_final_ln;
    if (in->hidden % in->n_heads != 0)
        return err_set(ERR_FORMAT,
                       "%s: hidden_size %d is not a multiple of num_attention_heads %d", what,
                       in->hidden, in->n_heads);
    in->n_kv_heads = in->n_heads;
    in->head_dim = in->hidden / in->n_heads;
    for (int i = 0; i < 3; i++) {
        int id = i == 0 ? in->pad_id : i == 1 ? in->bos_id : eos;
        if (id >= in->vocab)
            return err_set(ERR_FORMAT, "%s: %s_token_id %d is outside the vocabulary (size %d)",
                           what, i == 0 ? "pad" : i == 1 ? "bos" : "eos", id, in->vocab);
    }
    in->n_eos = eos >= 0;
    in->eos_ids[0] = eos;
    snprintf(in->architecture, sizeof(in->architecture), "OPTForCausalLM");
    return 0;
}

const char *opt_act_name(enum opt_act a)
{
    switch (a) {
    case OPT_ACT_RELU: return "relu";
    case OPT_ACT_GELU: return "gelu";
    case OPT_ACT_GELU_TANH: return "gelu_new";
    case OPT_ACT_SILU: return "silu";
    }
    return "?";
}

void opt_describe(const struct model_config *mc, char *buf, size_t cap)
{
    const struct opt_config *c = ARCH_CONFIG(struct opt_config, mc);
    snprintf(buf, cap,
             "embed_dim %d, %s, activation %s, bias %s, final layer norm %s, "
             "layer norm affine %s, tied head %s",
             c->embed_dim, c->pre_ln ? "pre-LN" : "post-LN", opt_act_name(c->act),
             c->bias ? "yes" : "no", c->final_ln ? "yes" : "no", c->ln_affine ? "yes" : "no",
             c->tie_embeddings ? "yes" : "no");
}

int opt_config_save(const struct model_config *mc, const char *dir)
{
    const struct opt_config *c = ARCH_CONFIG(struct opt_config, mc);
    const struct model_info *in = &mc->info;
    char path[4096];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    json_t *root = json_pack(
        "{s:[s], s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:b, s:b, s:b, s:b, s:s, "
        "s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:s, s:b}",
        "architectures", "OPTForCausalLM", "model_type", "opt", "activation_function",
        opt_act_name(c->act), "hidden_size", in->hidden, "ffn_dim", in->ffn, "num_hidden_layers",
        in->n_layers, "num_attention_heads", in->n_heads, "vocab_size", in->vocab,
        "max_position_embeddings", in->max_pos, "word_embed_proj_dim", c->embed_dim,
        "do_layer_norm_before", c->pre_ln, "_remove_final_layer_norm", c->pre_ln && !c->final_ln,
        "enable_bias", c->bias, "layer_norm_elementwise_affine", c->ln_affine,
        "tie_word_embeddings", c->tie_embeddings, "torch_dtype", dtype_torch_name(in->dtype),
        "pad_token_id", in->pad_id, "bos_token_id", in->bos_id, "eos_token_id",
        in->n_eos ? in->eos_ids[0] : -1, "dropout", 0.1, "attention_dropout", 0.0, "init_std",
        0.02, "layerdrop", 0.0, "prefix", "</s>", "use_cache", 1);
    if (!root)
        return err_set(ERR_NOMEM, "%s: cannot build config JSON", path);
    return hf_write_config(root, path);
}
