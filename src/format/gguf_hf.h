/* A GGUF file read as the Hugging Face checkpoint it was converted from:
 * config.json's fields from the metadata, transformers' tensor names from
 * llama.cpp's, and the converter's Q/K row permutation named so that the
 * loader undoes it. The families then parse one config and plan one set of
 * names, whichever format the weights came in.
 *
 * Architectures (general.architecture): llama (Llama 2/3, Mistral, as
 * llama.cpp converts them all) and qwen2.
 */
#ifndef SHARDSWAP_FORMAT_GGUF_HF_H
#define SHARDSWAP_FORMAT_GGUF_HF_H

#include <jansson.h>
#include <stddef.h>

#include "core/dtype.h"
#include "format/gguf.h"

/* config.json as transformers would write it for g (*root: the caller's
 * json_decref): model_type and architectures from general.architecture,
 * dimensions from ARCH.embedding_length, .feed_forward_length,
 * .block_count, .attention.head_count(_kv), .attention.key_length,
 * .context_length, .vocab_size (else token_embd's rows), norms from
 * .attention.layer_norm_rms_epsilon, rope from .rope.freq_base,
 * .rope.dimension_count, .rope.scaling.{type,factor} and the rope_freqs
 * tensor (llama3-style per-frequency factors, as "rope_freq_factors"),
 * biases and a tied head from which tensors exist, token ids from
 * tokenizer.ggml.*. One-line errors name the file and the key. */
int gguf_hf_config(const struct gguf_file *g, json_t **root);

/* How one GGUF tensor appears in the checkpoint. */
struct gguf_hf_tensor {
    char name[128];      /* transformers' name ("model.layers.3.self_attn.q_proj.weight"),
                            or the GGUF name when it has none */
    int rope_perm_heads; /* > 0: the rows are in llama.cpp's rotary order over this many
                            heads (llama's q and k); see gguf_hf_perm_row */
};
/* 0, or ERR_UNSUPPORTED / ERR_FORMAT naming the file when g's architecture or
 * head counts are not readable (gguf_hf_config says the same first). */
int gguf_hf_tensor_map(const struct gguf_file *g, const struct gguf_tensor *t,
                       struct gguf_hf_tensor *out);
/* The tensor's dtype: 0, or ERR_UNSUPPORTED naming the tensor and its ggml type. */
int gguf_hf_dtype(const struct gguf_tensor *t, enum dtype *out);

/* The file row holding transformers' row r of a matrix (or element r of a
 * bias) whose rows llama.cpp permuted over heads of head_dim rows: within a
 * head, transformers' rotate_half pairs (i, i + head_dim/2) sit at
 * (2i, 2i + 1) in the file. */
static inline size_t gguf_hf_perm_row(size_t r, size_t head_dim)
{
    size_t head = r / head_dim, w = r % head_dim, half = head_dim / 2;
    return head * head_dim + 2 * (w % half) + w / half;
}

#endif
