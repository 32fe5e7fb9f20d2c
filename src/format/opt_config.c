/* config.json for OPT, as transformers' OPTConfig writes it. The fields we
 * read and their defaults when absent (OPTConfig's own defaults):
 *
 *   model_type                "opt" (required; anything else is refused)
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
#include "format/opt_config.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fs.h"

/* Upper bound on any dimension: keeps every size product far from overflow. */
#define OPT_DIM_MAX (1 << 20)

static int cfg_int(json_t *root, const char *what, const char *key, bool required, int dflt,
                   int lo, int hi, int *out)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (required)
            return err_set(ERR_FORMAT, "%s: missing required field \"%s\" (expected an integer)",
                           what, key);
        *out = dflt;
        return 0;
    }
    if (!json_is_integer(v))
        return err_set(ERR_FORMAT, "%s: field \"%s\" must be an integer", what, key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return err_set(ERR_FORMAT, "%s: field \"%s\" is %lld, expected %d..%d", what, key,
                       (long long)x, lo, hi);
    *out = (int)x;
    return 0;
}

static int cfg_bool(json_t *root, const char *what, const char *key, bool dflt, bool *out)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return 0;
    }
    if (!json_is_boolean(v))
        return err_set(ERR_FORMAT, "%s: field \"%s\" must be true or false", what, key);
    *out = json_is_true(v);
    return 0;
}

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
    json_t *v = json_object_get(root, "activation_function");
    if (!v || json_is_null(v)) {
        *out = OPT_ACT_RELU;
        return 0;
    }
    if (!json_is_string(v))
        return err_set(ERR_FORMAT, "%s: field \"activation_function\" must be a string", what);
    for (size_t i = 0; i < sizeof(acts) / sizeof(acts[0]); i++) {
        if (strcmp(json_string_value(v), acts[i].name) == 0) {
            *out = acts[i].act;
            return 0;
        }
    }
    return err_set(ERR_UNSUPPORTED,
                   "%s: activation_function \"%s\" is not supported (expected relu, gelu, "
                   "gelu_new, gelu_pytorch_tanh, gelu_fast, silu)",
                   what, json_string_value(v));
}

static int cfg_dtype(json_t *root, const char *what, enum dtype *out)
{
    json_t *v = json_object_get(root, "torch_dtype");
    if (!v || json_is_null(v))
        v = json_object_get(root, "dtype"); /* newer transformers spell it so */
    if (!v || json_is_null(v)) {
        *out = DTYPE_F32;
        return 0;
    }
    if (!json_is_string(v) || dtype_parse(json_string_value(v), out) < 0)
        return err_set(ERR_UNSUPPORTED,
                       "%s: torch_dtype %s is not supported (expected float32, float16 or "
                       "bfloat16)",
                       what, json_is_string(v) ? json_string_value(v) : "(not a string)");
    return 0;
}

static int cfg_from_json(json_t *root, const char *what, struct opt_config *c)
{
    int rc;
    if (!json_is_object(root))
        return err_set(ERR_FORMAT, "%s: expected a JSON object", what);
    json_t *mt = json_object_get(root, "model_type");
    if (!mt || !json_is_string(mt))
        return err_set(ERR_FORMAT, "%s: missing \"model_type\" (expected \"opt\")", what);
    if (strcmp(json_string_value(mt), "opt") != 0)
        return err_set(ERR_UNSUPPORTED,
                       "%s: architecture \"%s\" is not supported (only \"opt\" is)", what,
                       json_string_value(mt));
    memset(c, 0, sizeof(*c));
    bool remove_final_ln;
    if ((rc = cfg_int(root, what, "hidden_size", true, 0, 1, OPT_DIM_MAX, &c->hidden)) < 0 ||
        (rc = cfg_int(root, what, "ffn_dim", true, 0, 1, OPT_DIM_MAX, &c->ffn)) < 0 ||
        (rc = cfg_int(root, what, "num_hidden_layers", true, 0, 1, 4096, &c->n_layers)) < 0 ||
        (rc = cfg_int(root, what, "num_attention_heads", true, 0, 1, 4096, &c->n_heads)) < 0 ||
        (rc = cfg_int(root, what, "vocab_size", true, 0, 1, OPT_DIM_MAX, &c->vocab)) < 0 ||
        (rc = cfg_int(root, what, "max_position_embeddings", true, 0, 1, OPT_DIM_MAX,
                      &c->max_pos)) < 0 ||
        (rc = cfg_int(root, what, "word_embed_proj_dim", false, c->hidden, 1, OPT_DIM_MAX,
                      &c->embed_dim)) < 0 ||
        (rc = cfg_int(root, what, "pad_token_id", false, 1, -1, OPT_DIM_MAX, &c->pad_id)) < 0 ||
        (rc = cfg_int(root, what, "bos_token_id", false, 2, -1, OPT_DIM_MAX, &c->bos_id)) < 0 ||
        (rc = cfg_int(root, what, "eos_token_id", false, 2, -1, OPT_DIM_MAX, &c->eos_id)) < 0 ||
        (rc = cfg_bool(root, what, "do_layer_norm_before", true, &c->pre_ln)) < 0 ||
        (rc = cfg_bool(root, what, "_remove_final_layer_norm", false, &remove_final_ln)) < 0 ||
        (rc = cfg_bool(root, what, "enable_bias", true, &c->bias)) < 0 ||
        (rc = cfg_bool(root, what, "layer_norm_elementwise_affine", true, &c->ln_affine)) < 0 ||
        (rc = cfg_bool(root, what, "tie_word_embeddings", true, &c->tie_embeddings)) < 0 ||
        (rc = cfg_act(root, what, &c->act)) < 0 || (rc = cfg_dtype(root, what, &c->torch_dtype)) < 0)
        return rc;
    c->final_ln = c->pre_ln && !remove_final_ln;
    if (c->hidden % c->n_heads != 0)
        return err_set(ERR_FORMAT,
                       "%s: hidden_size %d is not a multiple of num_attention_heads %d", what,
                       c->hidden, c->n_heads);
    for (int i = 0; i < 3; i++) {
        int id = i == 0 ? c->pad_id : i == 1 ? c->bos_id : c->eos_id;
        if (id >= c->vocab)
            return err_set(ERR_FORMAT, "%s: %s_token_id %d is outside the vocabulary (size %d)",
                           what, i == 0 ? "pad" : i == 1 ? "bos" : "eos", id, c->vocab);
    }
    return 0;
}

int opt_config_parse(const char *json, const char *what, struct opt_config *cfg)
{
    json_error_t jerr;
    json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return err_set(ERR_FORMAT, "%s: invalid JSON at line %d: %s", what, jerr.line, jerr.text);
    int rc = cfg_from_json(root, what, cfg);
    json_decref(root);
    return rc;
}

int opt_config_load(const char *dir, struct opt_config *cfg)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof(path), "%s/config.json", dir) >= sizeof(path))
        return err_set(ERR_INVALID, "%s: path too long (expected at most %zu bytes)", dir,
                       sizeof(path) - sizeof("/config.json"));
    /* a FIFO, directory or device named config.json is refused before reading */
    int fd;
    int rc = fs_open_regular(path, &fd, NULL);
    if (rc == ERR_NOT_FOUND)
        return err_set(ERR_NOT_FOUND, "%s: cannot open (expected a Hugging Face model "
                                      "directory with config.json)", path);
    if (rc)
        return rc;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        rc = err_set(ERR_IO, "%s: cannot read: %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    json_error_t jerr;
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    fclose(f);
    if (!root)
        return err_set(ERR_FORMAT, "%s: invalid JSON at line %d: %s", path, jerr.line, jerr.text);
    rc = cfg_from_json(root, path, cfg);
    json_decref(root);
    return rc;
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

int opt_config_save(const struct opt_config *c, const char *dir)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    const char *dt = c->torch_dtype == DTYPE_F16    ? "float16"
                     : c->torch_dtype == DTYPE_BF16 ? "bfloat16"
                                                    : "float32";
    json_t *root = json_pack(
        "{s:[s], s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:b, s:b, s:b, s:b, s:s, "
        "s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:s, s:b}",
        "architectures", "OPTForCausalLM", "model_type", "opt", "activation_function",
        opt_act_name(c->act), "hidden_size", c->hidden, "ffn_dim", c->ffn, "num_hidden_layers",
        c->n_layers, "num_attention_heads", c->n_heads, "vocab_size", c->vocab,
        "max_position_embeddings", c->max_pos, "word_embed_proj_dim", c->embed_dim,
        "do_layer_norm_before", c->pre_ln, "_remove_final_layer_norm", c->pre_ln && !c->final_ln,
        "enable_bias", c->bias, "layer_norm_elementwise_affine", c->ln_affine,
        "tie_word_embeddings", c->tie_embeddings, "torch_dtype", dt, "pad_token_id", c->pad_id,
        "bos_token_id", c->bos_id, "eos_token_id", c->eos_id, "dropout", 0.1, "attention_dropout",
        0.0, "init_std", 0.02, "layerdrop", 0.0, "prefix", "</s>", "use_cache", 1);
    if (!root)
        return err_set(ERR_NOMEM, "%s: cannot build config JSON", path);
    int rc = 0;
    if (json_dump_file(root, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0)
        rc = err_set(ERR_IO, "%s: cannot write", path);
    json_decref(root);
    return rc;
}
