/* OPT (Zhang et al. 2022) as transformers' OPTForCausalLM computes it.
 *
 * A model object is one shard of a checkpoint: a tensor-parallel rank and a
 * pipeline stage (a contiguous range of layers). With tp_size 1 and the full
 * layer range it is the whole model.
 *
 * Sharding plan (Megatron): q/k/v and fc1 are split by output rows
 * (column-parallel: each rank owns n_heads/tp heads and ffn/tp hidden units);
 * out_proj and fc2 are split by input columns (row-parallel) and their outputs
 * summed across ranks by the all-reduce hook; biases of row-parallel layers
 * are added by rank 0 only. The embedding table and the head are split by
 * vocabulary rows (vocab-parallel): a rank looks up only the ids in its range
 * and the all-reduce assembles the embeddings; each rank computes the logits
 * of its range and the gather hook assembles them. Splitting them, rather than
 * replicating, keeps every rank's share of a load equal to 1/tp of the model
 * (the tables are 8% of opt-1.3b). Position embeddings, project_in/out and
 * LayerNorms are replicated. The first stage owns the embeddings, the last
 * the final LayerNorm, project_out and the head (a tied head on a last stage
 * that is not also the first holds its own copy of its embedding rows).
 *
 * Two ways to hold the weights:
 * - views straight into a memory-mapped checkpoint (opt_model_open*): zero
 *   copies, for one process running one model;
 * - blobs (opt_shard_layout/fill/bind): each shard's tensors packed into one
 *   buffer per layer plus one for the embeddings and head, the unit the swap
 *   engine moves between disk, host and device. Matrices keep the checkpoint
 *   dtype; vectors are widened to f32.
 */
#ifndef SHARDSWAP_MODEL_OPT_H
#define SHARDSWAP_MODEL_OPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/kernels.h"
#include "format/opt_config.h"
#include "format/safetensors.h"

struct opt_shard {
    int tp_rank, tp_size;
    int layer_begin, layer_end; /* [begin, end) */
};

struct opt_layer {
    struct weight_view q, k, v, o, fc1, fc2;
    const float *q_b, *k_b, *v_b, *fc1_b; /* (rows of q, k, v, fc1) or NULL */
    const float *o_b, *fc2_b;             /* (hidden), NULL unless bias and tp_rank 0 */
    const float *ln1_g, *ln1_b;           /* self_attn_layer_norm (hidden) or NULL */
    const float *ln2_g, *ln2_b;           /* final_layer_norm of the layer (hidden) or NULL */
};

/* Collectives of the tensor-parallel group a shard runs in; all NULL when
 * tp_size is 1. They belong to an execution (a batch), not to the weights,
 * so they live in the KV cache object. */
struct opt_tp_hooks {
    /* buf[0..n) = sum over the ranks of buf[0..n), in place */
    void (*allreduce)(void *ctx, float *buf, size_t n);
    /* root's out (rows, total_cols) gets every rank's column block */
    void (*gather_cols)(void *ctx, int root, const float *local, int rows, int local_cols,
                        int col0, float *out, int total_cols);
    void *ctx;
};

struct opt_model {
    struct opt_config cfg;
    struct opt_shard shard;
    int heads_local, ffn_local;     /* per TP rank */
    int vocab_begin, vocab_local;   /* this rank's rows of the embedding and head */
    struct st_checkpoint *ck;       /* the views' checkpoint, when bound to one */
    bool owns_ck;

    /* first stage */
    struct weight_view embed;       /* (vocab_local, embed_dim) */
    struct weight_view pos;         /* (max_pos + 2, hidden) */
    struct weight_view project_in;  /* (hidden, embed_dim), data NULL when absent */
    /* last stage */
    const float *final_ln_g, *final_ln_b;
    struct weight_view project_out; /* (embed_dim, hidden), data NULL when absent */
    struct weight_view lm_head;     /* (vocab_local, embed_dim), maybe the embed view */
    bool head_is_embed;             /* tied head on the first stage: lm_head = embed */

    struct opt_layer *layers;       /* layer_end - layer_begin */
    float *params;                  /* widened small parameters (checkpoint binding) */
};

/* Opens DIR (config.json + safetensors) as the whole model, viewing the
 * mapped checkpoint. */
int opt_model_open(const char *dir, struct opt_model **out);
/* Binds one shard to views of an open checkpoint; ck stays the caller's. */
int opt_model_open_shard(const struct opt_config *cfg, struct st_checkpoint *ck,
                         const struct opt_shard *shard, struct opt_model **out);
void opt_model_close(struct opt_model *m); /* NULL-safe */

/* Checks that shard is valid for cfg (TP divides heads and ffn, the layer
 * range is inside the model); a one-line error otherwise. */
int opt_shard_check(const struct opt_config *cfg, const struct opt_shard *shard);

/* The blobs of a shard: blob 0 holds the first/last-stage tensors
 * (embeddings, head, final LayerNorm; empty on middle stages), blob 1 + i the
 * tensors of local layer i. */
struct opt_part;
struct opt_layout {
    int n_blobs;
    size_t *blob_bytes;       /* (n_blobs) */
    struct opt_part *parts;   /* every tensor slice of the shard */
    int n_parts;
};

/* Creates an unbound shard (no weights yet) and its layout against ck:
 * checks every tensor the shard needs (presence, shape, dtype, alignment). */
int opt_shard_open(const struct opt_config *cfg, const struct st_checkpoint *ck,
                   const struct opt_shard *shard, struct opt_model **m,
                   struct opt_layout *layout);
void opt_layout_free(struct opt_layout *layout);
/* Copies this shard's slices of blob b's tensors from ck into dst
 * (layout->blob_bytes[b] bytes), reading nothing of other shards' slices. */
int opt_shard_fill(const struct opt_model *m, const struct opt_layout *layout,
                   const struct st_checkpoint *ck, int b, void *dst);
/* Points the shard's views for blob b at base (a filled copy of the blob). */
void opt_shard_bind(struct opt_model *m, const struct opt_layout *layout, int b,
                    const void *base);

/* KV cache and scratch of a batch of sequences that advance together.
 * Sequences are left-padded: key_ok marks which cached positions are real. */
struct opt_kv {
    int batch, max_len, len;   /* len positions are filled, for every sequence */
    int layers, heads, head_dim;
    float *k, *v;              /* (layers, batch, heads, max_len, head_dim) */
    uint8_t *key_ok;           /* (batch, max_len) */
    int *n_real;               /* (batch) real tokens so far: the next position id - 1 */
    struct opt_tp_hooks tp;    /* the TP group this batch runs in (zeroed by init) */
};

int opt_kv_init(const struct opt_model *m, int batch, int max_len, struct opt_kv **out);
void opt_kv_reset(struct opt_kv *kv);
/* Frees slot b for a new sequence: its cached keys stop being visible and
 * its position count restarts (continuous batching). */
void opt_kv_clear_slot(struct opt_kv *kv, int b);
void opt_kv_free(struct opt_kv *kv); /* NULL-safe */

/* Runs t_new tokens of each sequence of the batch through the whole model
 * (tp_size 1, all layers), appending to the cache.
 * ids, mask: (batch, t_new); mask 1 = real token, 0 = left padding (padding
 *            may only precede a sequence's first real token).
 * logits:    (batch, t_new, vocab) when all_positions, else (batch, vocab) for
 *            the last position; caller-owned.
 * Errors: ids outside the vocabulary, the cache or position table full. */
int opt_forward(struct opt_model *m, struct opt_kv *kv, const int32_t *ids, const uint8_t *mask,
                int t_new, bool all_positions, float *logits);

/* The stages of opt_forward, for pipeline-parallel workers. x is
 * (batch * t_new, hidden) activations between stages. */
/* Checks room for t_new more positions and records which are real keys. */
int opt_kv_begin(struct opt_kv *kv, const uint8_t *mask, int t_new);
/* Embeds ids (first stage): x (batch * t_new, hidden). Position ids follow
 * transformers: the running count of real tokens, + 2; pads get row 1.
 * Under TP every rank of the stage calls it (the all-reduce joins them). */
int opt_forward_embed(const struct opt_model *m, const struct opt_kv *kv, const int32_t *ids,
                      const uint8_t *mask, int t_new, float *x);
/* One decoder layer (index local to the shard), in place on x. */
void opt_forward_layer(const struct opt_model *m, int layer, struct opt_kv *kv, int t_new,
                       float *x);
/* Last stage: final LayerNorm, project_out and head on rows[0..n_rows) of x.
 * logits (n_rows, vocab) receives the full logits on TP rank 0; other ranks
 * pass NULL (they contribute their vocabulary block). */
int opt_forward_head(const struct opt_model *m, const struct opt_kv *kv, const float *x,
                     const int *rows, int n_rows, float *logits);
/* Marks the t_new positions filled once every layer has run. */
void opt_kv_commit(struct opt_kv *kv, const uint8_t *mask, int t_new);

/* Bytes of weights this shard streams per forward step (for bandwidth math). */
size_t opt_model_weight_bytes(const struct opt_model *m);

#endif
