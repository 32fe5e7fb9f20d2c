/* GGUF as a Hugging Face checkpoint: see gguf_hf.h.
 *
 * The converter (llama.cpp's convert_hf_to_gguf.py) writes, for arch llama,
 * q_proj and k_proj (weights and biases) with each head's rows reordered by
 * LlamaModel.permute: reshape(heads, 2, head_dim / 2, ...).swapaxes(1, 2), so
 * that ggml's rope, which rotates adjacent pairs, computes what
 * transformers' rotate_half computes on pairs (i, i + head_dim / 2). k uses
 * the KV head count. qwen2 is converted without it (its ggml rope is the
 * rotate_half one). The loader copies those rows back into transformers'
 * order (model/layout.c), so one forward serves both formats.
 */
#include "format/gguf_hf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "format/hf_config.h"

struct arch_map {
    const char *gguf;         /* general.architecture */
    const char *model_type;   /* config.json's */
    const char *architecture; /* config.json's architectures[0] */
    bool permuted;            /* the converter permuted q and k */
};

static const struct arch_map archs[] = {
    {"llama", "llama", "LlamaForCausalLM", true},
    {"qwen2", "qwen2", "Qwen2ForCausalLM", false},
};

static int arch_of(const struct gguf_file *g, const struct arch_map **out)
{
    struct gguf_str a;
    int rc = gguf_get_str(g, "general.architecture", &a);
    if (rc < 0)
        return rc;
    if (!a.p)
        return err_set(ERR_FORMAT, "%s: metadata key 'general.architecture' is missing",
                       gguf_path(g));
    for (size_t i = 0; i < sizeof(archs) / sizeof(archs[0]); i++)
        if (a.n == strlen(archs[i].gguf) && memcmp(a.p, archs[i].gguf, a.n) == 0) {
            *out = &archs[i];
            return 0;
        }
    return err_set(ERR_UNSUPPORTED,
                   "%s: general.architecture \"%.*s\" is not supported (supported: llama, qwen2)",
                   gguf_path(g), a.n > 64 ? 64 : (int)a.n, a.p);
}

/* "ARCH.suffix" into buf. */
static const char *akey(char *buf, size_t cap, const struct arch_map *a, const char *suffix)
{
    snprintf(buf, cap, "%s.%s", a->gguf, suffix);
    return buf;
}

static int heads_of(const struct gguf_file *g, const struct arch_map *a, int64_t *heads,
                    int64_t *kv_heads)
{
    char k[96];
    int rc =
        gguf_get_int(g, akey(k, sizeof(k), a, "attention.head_count"), true, 0, 1, 4096, heads);
    if (rc == 0)
        rc = gguf_get_int(g, akey(k, sizeof(k), a, "attention.head_count_kv"), false, *heads, 1,
                          4096, kv_heads);
    return rc;
}

int gguf_hf_dtype(const struct gguf_tensor *t, enum dtype *out)
{
    switch (t->type) {
    case GGML_TYPE_F32:
        *out = DTYPE_F32;
        return 0;
    case GGML_TYPE_F16:
        *out = DTYPE_F16;
        return 0;
    case GGML_TYPE_BF16:
        *out = DTYPE_BF16;
        return 0;
    case GGML_TYPE_Q8_0:
        *out = DTYPE_Q8_0;
        return 0;
    case GGML_TYPE_Q4_0:
        *out = DTYPE_Q4_0;
        return 0;
    case GGML_TYPE_Q5_0:
        *out = DTYPE_Q5_0;
        return 0;
    case GGML_TYPE_Q5_1:
        *out = DTYPE_Q5_1;
        return 0;
    case GGML_TYPE_Q4_K:
        *out = DTYPE_Q4_K;
        return 0;
    case GGML_TYPE_Q5_K:
        *out = DTYPE_Q5_K;
        return 0;
    case GGML_TYPE_Q6_K:
        *out = DTYPE_Q6_K;
        return 0;
    default:
        return err_set(ERR_UNSUPPORTED,
                       "%s: tensor '%s' has type %s, which is not supported (supported: F32, F16, "
                       "BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)",
                       t->file, t->name, ggml_type_info(t->type)->name);
    }
}

static int set_int(json_t *root, const char *hf_key, const struct gguf_file *g, const char *key,
                   bool required, int64_t dflt, int64_t lo, int64_t hi, bool *present)
{
    int64_t v;
    int rc = gguf_get_int(g, key, required, dflt, lo, hi, &v);
    if (rc < 0)
        return rc;
    if (present)
        *present = gguf_find(g, key) != NULL;
    if (!present || *present || required)
        json_object_set_new(root, hf_key, json_integer(v));
    return 0;
}

/* The rope: theta, a scaling type, and llama3-style factors from rope_freqs. */
static int config_rope(const struct gguf_file *g, const struct arch_map *a, json_t *root)
{
    char k[96];
    double theta, factor;
    struct gguf_str type;
    int rc;
    if ((rc = gguf_get_num(g, akey(k, sizeof(k), a, "rope.freq_base"), false, 10000.0, 1e-3, 1e12,
                           &theta)) < 0 ||
        (rc = gguf_get_str(g, akey(k, sizeof(k), a, "rope.scaling.type"), &type)) < 0)
        return rc;
    json_object_set_new(root, "rope_theta", json_real(theta));
    json_t *scaling = json_null();
    if (type.p && !(type.n == 4 && memcmp(type.p, "none", 4) == 0)) {
        if (!(type.n == 6 && memcmp(type.p, "linear", 6) == 0)) {
            json_decref(scaling);
            return err_set(ERR_UNSUPPORTED,
                           "%s: %s \"%.*s\" is not supported (expected none or linear)",
                           gguf_path(g), k, type.n > 32 ? 32 : (int)type.n, type.p);
        }
        if ((rc = gguf_get_num(g, akey(k, sizeof(k), a, "rope.scaling.factor"), true, 1, 1e-6, 1e6,
                               &factor)) < 0)
            return rc;
        scaling = json_pack("{s:s, s:f}", "rope_type", "linear", "factor", factor);
    }
    json_object_set_new(root, "rope_scaling", scaling);
    const struct gguf_tensor *f = gguf_tensor_find(g, "rope_freqs.weight");
    if (!f)
        return 0;
    if (f->type != GGML_TYPE_F32 || f->ndim != 1 || f->ne[0] > 4096)
        return err_set(ERR_FORMAT,
                       "%s: tensor 'rope_freqs.weight' is not a 1-d F32 tensor of at most 4096 "
                       "factors",
                       f->file);
    json_t *list = json_array();
    for (uint64_t i = 0; i < f->ne[0]; i++) {
        float v;
        memcpy(&v, (const char *)f->data + i * 4, 4);
        json_array_append_new(list, json_real(v));
    }
    json_object_set_new(root, "rope_freq_factors", list);
    return 0;
}

int gguf_hf_config(const struct gguf_file *g, json_t **out)
{
    *out = NULL;
    const struct arch_map *a;
    int rc = arch_of(g, &a);
    if (rc < 0)
        return rc;
    char k[96];
    int64_t experts;
    if ((rc = gguf_get_int(g, akey(k, sizeof(k), a, "expert_count"), false, 0, 0, INT64_MAX,
                           &experts)) < 0)
        return rc;
    if (experts > 0) /* llama.cpp's mixtures of experts: 3-D expert tensors and a router */
        return err_set(ERR_UNSUPPORTED,
                       "%s: %s is %lld: a mixture of experts in GGUF is not supported "
                       "(expected a dense model; load its safetensors checkpoint instead)",
                       gguf_path(g), k, (long long)experts);
    json_t *root = json_object();
    if (!root)
        return err_set(ERR_NOMEM, "out of memory");
    int64_t heads, kv_heads, vocab;
    bool present;
    json_object_set_new(root, "model_type", json_string(a->model_type));
    json_object_set_new(root, "architectures", json_pack("[s]", a->architecture));
    json_object_set_new(root, "hidden_act", json_string("silu"));
    if ((rc = set_int(root, "hidden_size", g, akey(k, sizeof(k), a, "embedding_length"), true, 0, 1,
                      HF_DIM_MAX, NULL)) < 0 ||
        (rc = set_int(root, "intermediate_size", g, akey(k, sizeof(k), a, "feed_forward_length"),
                      true, 0, 1, HF_DIM_MAX, NULL)) < 0 ||
        (rc = set_int(root, "num_hidden_layers", g, akey(k, sizeof(k), a, "block_count"), true, 0,
                      1, 4096, NULL)) < 0 ||
        (rc = set_int(root, "max_position_embeddings", g, akey(k, sizeof(k), a, "context_length"),
                      true, 0, 1, HF_DIM_MAX, NULL)) < 0 ||
        (rc = set_int(root, "head_dim", g, akey(k, sizeof(k), a, "attention.key_length"), false, 0,
                      2, 4096, &present)) < 0 ||
        (rc = heads_of(g, a, &heads, &kv_heads)) < 0)
        goto fail;
    json_object_set_new(root, "num_attention_heads", json_integer(heads));
    json_object_set_new(root, "num_key_value_heads", json_integer(kv_heads));
    double eps;
    if ((rc = gguf_get_num(g, akey(k, sizeof(k), a, "attention.layer_norm_rms_epsilon"), true, 0,
                           1e-30, 1, &eps)) < 0)
        goto fail;
    json_object_set_new(root, "rms_norm_eps", json_real(eps));
    /* rotary dims below head_dim: a partial rotary factor */
    int64_t hd = json_integer_value(json_object_get(root, "head_dim"));
    if (!hd)
        hd = json_integer_value(json_object_get(root, "hidden_size")) / heads;
    int64_t rot;
    if ((rc = gguf_get_int(g, akey(k, sizeof(k), a, "rope.dimension_count"), false, hd, 2, hd,
                           &rot)) < 0)
        goto fail;
    if (rot != hd)
        json_object_set_new(root, "partial_rotary_factor", json_real((double)rot / (double)hd));
    if ((rc = config_rope(g, a, root)) < 0)
        goto fail;
    /* the vocabulary: the key, else the embedding's rows */
    const struct gguf_tensor *embd = gguf_tensor_find(g, "token_embd.weight");
    int64_t rows = embd && embd->ndim == 2 ? (int64_t)embd->ne[1] : 0;
    if ((rc = gguf_get_int(g, akey(k, sizeof(k), a, "vocab_size"), rows == 0, rows, 1, HF_DIM_MAX,
                           &vocab)) < 0)
        goto fail;
    json_object_set_new(root, "vocab_size", json_integer(vocab));
    /* biases and the head: from the tensors, as the converter wrote what the model had */
    bool o_bias = gguf_tensor_find(g, "blk.0.attn_output.bias") != NULL;
    bool q_bias = gguf_tensor_find(g, "blk.0.attn_q.bias") != NULL;
    json_object_set_new(root, "attention_bias", json_boolean(o_bias || (q_bias && a->permuted)));
    json_object_set_new(root, "mlp_bias",
                        json_boolean(gguf_tensor_find(g, "blk.0.ffn_up.bias") != NULL));
    json_object_set_new(root, "tie_word_embeddings",
                        json_boolean(gguf_tensor_find(g, "output.weight") == NULL));
    enum dtype dt = DTYPE_F32;
    if (embd)
        (void)gguf_hf_dtype(embd, &dt); /* a block type: "float32"; another, the loader's error */
    json_object_set_new(root, "torch_dtype", json_string(dtype_torch_name(dt)));
    /* token ids: bos; eos with llama.cpp's other end-of-generation ids (end of
     * turn, end of message), as generation_config.json lists them; a padding
     * id outside the vocabulary (some converters write one) is dropped */
    bool seen;
    if ((rc = set_int(root, "bos_token_id", g, "tokenizer.ggml.bos_token_id", false, 0, 0,
                      vocab - 1, &seen)) < 0)
        goto fail;
    static const char *const eos_keys[] = {"tokenizer.ggml.eos_token_id",
                                           "tokenizer.ggml.eot_token_id",
                                           "tokenizer.ggml.eom_token_id"};
    json_t *eos = json_array();
    for (size_t i = 0; i < sizeof(eos_keys) / sizeof(eos_keys[0]); i++) {
        int64_t id;
        if ((rc = gguf_get_int(g, eos_keys[i], false, -1, 0, vocab - 1, &id)) < 0) {
            json_decref(eos);
            goto fail;
        }
        bool dup = id < 0;
        for (size_t j = 0; !dup && j < json_array_size(eos); j++)
            dup = json_integer_value(json_array_get(eos, j)) == id;
        if (!dup)
            json_array_append_new(eos, json_integer(id));
    }
    json_object_set_new(root, "eos_token_id", eos);
    int64_t pad;
    if (gguf_get_int(g, "tokenizer.ggml.padding_token_id", false, -1, 0, vocab - 1, &pad) == 0 &&
        pad >= 0)
        json_object_set_new(root, "pad_token_id", json_integer(pad));
    *out = root;
    return 0;
fail:
    json_decref(root);
    return rc;
}

/* llama.cpp's per-layer tensor names and transformers'. */
static const struct {
    const char *gguf, *hf;
} layer_names[] = {
    {"attn_norm", "input_layernorm"}, {"ffn_norm", "post_attention_layernorm"},
    {"attn_q", "self_attn.q_proj"},   {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},   {"attn_output", "self_attn.o_proj"},
    {"ffn_gate", "mlp.gate_proj"},    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
};

int gguf_hf_tensor_map(const struct gguf_file *g, const struct gguf_tensor *t,
                       struct gguf_hf_tensor *out)
{
    const struct arch_map *a;
    int rc = arch_of(g, &a);
    if (rc < 0)
        return rc;
    out->rope_perm_heads = 0;
    snprintf(out->name, sizeof(out->name), "%s", t->name);
    const char *dot = strrchr(t->name, '.');
    if (!dot || (strcmp(dot, ".weight") != 0 && strcmp(dot, ".bias") != 0))
        return 0;
    int base = (int)(dot - t->name);
    if (base == 10 && strncmp(t->name, "token_embd", 10) == 0)
        snprintf(out->name, sizeof(out->name), "model.embed_tokens%s", dot);
    else if (base == 11 && strncmp(t->name, "output_norm", 11) == 0)
        snprintf(out->name, sizeof(out->name), "model.norm%s", dot);
    else if (base == 6 && strncmp(t->name, "output", 6) == 0)
        snprintf(out->name, sizeof(out->name), "lm_head%s", dot);
    unsigned layer;
    int n = 0;
    if (sscanf(t->name, "blk.%u.%n", &layer, &n) != 1 || n == 0 || layer > 100000)
        return 0;
    const char *part = t->name + n;
    int len = (int)(dot - part);
    for (size_t i = 0; i < sizeof(layer_names) / sizeof(layer_names[0]); i++) {
        if ((size_t)len != strlen(layer_names[i].gguf) ||
            strncmp(part, layer_names[i].gguf, (size_t)len) != 0)
            continue;
        snprintf(out->name, sizeof(out->name), "model.layers.%u.%s%s", layer, layer_names[i].hf,
                 dot);
        if (a->permuted && (i == 2 || i == 3)) {
            int64_t heads, kv_heads;
            if ((rc = heads_of(g, a, &heads, &kv_heads)) < 0)
                return rc;
            out->rope_perm_heads = (int)(i == 2 ? heads : kv_heads);
        }
        return 0;
    }
    return 0;
}
