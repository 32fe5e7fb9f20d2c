/* OPT (Zhang et al. 2022) as transformers' OPTForCausalLM computes it.
 *
 * A model object is one shard of a checkpoint: a tensor-parallel rank and a
 * pipeline stage (a contiguous range of layers). With tp_size 1 and the full
 * layer range it is the whole model.
 *
 * Sharding plan (Megatron): q/k/v and fc1 are split by output rows
 * (column-parallel: each rank owns n_heads/tp heads and ffn/tp hidden units);
 * out_proj and fc2 are split by input columns (row-parallel) and their outputs
 * summed across ranks by the all-reduce; biases of row-parallel layers
 * are added by rank 0 only. The embedding table and the head are split by
 * vocabulary rows (vocab-parallel): a rank looks up only the ids in its range
 * and the all-reduce assembles the embeddings; each rank computes the logits
 * of its range and the gather assembles them. Splitting them, rather than
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

#include "backend/device.h"
#include "backend/kernels.h"
#include "backend/weight.h"
#include "comm/comm.h"
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
    /* the precision of its linear layers: opt_compute_default of the
     * checkpoint's matrices when opened; the caller may change it (every
     * shard of a model alike) */
    enum kern_compute compute;
    float *params;                  /* widened small parameters (checkpoint binding) */
    /* opt_model_open_on: the device holding the weights and the blobs there
     * (n_blobs of them, owned; NULL where a blob is empty); NULL and 0 for
     * views of a mapped checkpoint and for the swap engine's shards */
    struct device *dev;
    struct dbuf **blobs;
    int n_blobs;
};

/* Opens DIR (config.json + safetensors) as the whole model, viewing the
 * mapped checkpoint. */
int opt_model_open(const char *dir, struct opt_model **out);
/* Binds one shard to views of an open checkpoint; ck stays the caller's. */
int opt_model_open_shard(const struct opt_config *cfg, struct st_checkpoint *ck,
                         const struct opt_shard *shard, struct opt_model **out);
/* Frees the model and, for opt_model_open_on, its blobs (before its device
 * is closed). NULL-safe. */
void opt_model_close(struct opt_model *m);

struct opt_exec_shape; /* below */

/* Opens DIR as the whole model (one full shard) with its weights in memory
 * of dev, any backend: the blob layout of opt_shard_open, one device_alloc
 * per blob, each filled in host memory from dev's backend (pinned where it
 * pins), copied with device_copy_h2d and bound; the checkpoint is closed
 * before it returns. m->dev is dev; m owns the blobs; dev stays the
 * caller's and must outlive m. ERR_NOMEM naming the device when the weights
 * do not fit its budget. Runs on the calling thread; nothing else may copy
 * on dev meanwhile (it waits with device_sync). */
int opt_model_open_on(const char *dir, struct device *dev, struct opt_model **out);
/* The device bytes opt_model_open_on(dir) takes (*weights: every blob
 * rounded up to 64 bytes, as device_alloc counts it) and an opt_exec of
 * shape beside it on any backend (*exec: opt_exec_bytes_bound), for sizing
 * a device before it is opened. */
int opt_model_device_bytes(const char *dir, const struct opt_exec_shape *shape,
                           uint64_t *weights, uint64_t *exec);

/* The precision a checkpoint whose matrices are stored in `weights` computes
 * in unless told otherwise: bf16 for bf16 weights (as transformers runs a
 * bf16 model), f32 for f32 and f16. */
enum kern_compute opt_compute_default(enum dtype weights);

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

/* The execution context of a batch of sequences on one shard: the device,
 * its compute stream, the shard's TP handle, the KV cache, the activations
 * and every scratch buffer a forward step needs. All of it is one device
 * allocation made once per batch, inside the device's budget (opt_exec_bytes
 * says how much before anything is allocated); a forward step allocates
 * nothing. Sequences are left-padded: key_ok marks which cached positions
 * are real. Used by one thread at a time (the device's compute thread). */
struct opt_exec_shape {
    int batch;      /* sequences */
    int max_len;    /* positions each sequence may reach */
    int max_tokens; /* batch * t_new of the largest step (0: batch * max_len) */
    int max_rows;   /* rows of logits one step returns (0: batch) */
};

struct opt_exec {
    struct device *dev;
    struct stream *stream;   /* compute stream, owned */
    struct comm *tp;         /* this shard's rank in its stage's TP group; NULL when tp is 1 */
    struct opt_exec_shape shape;
    int len;                 /* positions filled, for every sequence */
    int layers, heads, head_dim;
    struct dbuf *mem;        /* everything below that is on the device */
    float *k, *v;            /* (layers, batch, heads, max_len, head_dim) */
    uint8_t *key_ok;         /* (batch, max_len) */
    float *x;                /* (max_tokens, hidden) activations between stages */
    float *h, *q, *kn, *vn, *attn, *f, *e, *scores; /* per-step scratch */
    float *logits_local, *logits; /* (max_rows, vocab_local), (max_rows, vocab) */
    int32_t *ids, *rows;     /* (max_tokens) token ids, position rows / head rows */
    /* host side */
    uint8_t *key_ok_host;    /* (batch, max_len) mirror of key_ok */
    int *n_real;             /* (batch) real tokens so far: the next position id - 1 */
    int32_t *rows_host;      /* (max_tokens) */
    bool owns_dev;           /* opt_exec_open_cpu's device, closed with the context */
};

/* Device bytes opt_exec_init takes for this shape on dev (NULL: on a CPU
 * device, for sizing one before opening it); 0 when the shape is invalid or
 * too large for any device. */
size_t opt_exec_bytes(const struct opt_model *m, const struct device *dev,
                      const struct opt_exec_shape *shape);
/* Allocates the context on dev: ERR_INVALID for a bad shape, ERR_NOMEM
 * (naming the device and bytes) when it does not fit dev's budget now. tp
 * stays the caller's and may be NULL. */
int opt_exec_init(const struct opt_model *m, struct device *dev, struct comm *tp,
                  const struct opt_exec_shape *shape, struct opt_exec **out);
void opt_exec_reset(struct opt_exec *ex);
/* Frees slot b for a new sequence: its cached keys stop being visible and
 * its position count restarts (continuous batching). */
void opt_exec_clear_slot(struct opt_exec *ex, int b);
void opt_exec_free(struct opt_exec *ex); /* NULL-safe */
/* For one model computed on the host (opt_model_open's views): a CPU device
 * of exactly the context's bytes, owned by the context, and the context on
 * it. */
int opt_exec_open_cpu(const struct opt_model *m, const struct opt_exec_shape *shape,
                      struct opt_exec **out);
/* The context of a whole model wherever its weights are: on m->dev
 * (opt_model_open_on; the context takes shape's bytes of its budget, and
 * the thread that runs its forwards is m->dev's compute thread,
 * device_compute_thread_init) or, for host views (m->dev NULL),
 * opt_exec_open_cpu. */
int opt_exec_open(const struct opt_model *m, const struct opt_exec_shape *shape,
                  struct opt_exec **out);
/* opt_exec_bytes on a CPU device, plus room for an attention scratch of
 * every head of every sequence at once (batch x heads x step x max_len
 * floats): enough on any backend whose kern_attention_scratch stays within
 * that, for sizing a GPU before it is opened. 0 when the shape is invalid. */
size_t opt_exec_bytes_bound(const struct opt_model *m, const struct opt_exec_shape *shape);

/* Runs t_new tokens of each sequence of the batch through the whole model
 * (tp_size 1, all layers), appending to the cache.
 * ids, mask: (batch, t_new) host; mask 1 = real token, 0 = left padding
 *            (padding may only precede a sequence's first real token).
 * logits:    host (batch, t_new, vocab) when all_positions, else (batch,
 *            vocab) for the last position; caller-owned.
 * Errors: ids outside the vocabulary, the cache or position table full, a
 * step larger than the context's shape, a kernel failure. */
int opt_forward(struct opt_model *m, struct opt_exec *ex, const int32_t *ids, const uint8_t *mask,
                int t_new, bool all_positions, float *logits);

/* The stages of opt_forward, for pipeline-parallel workers; the
 * activations between stages are ex->x (batch * t_new, hidden). */
/* Checks room for t_new more positions and the step's size against the
 * shape, and records which new positions are real keys. */
int opt_exec_begin(struct opt_exec *ex, const uint8_t *mask, int t_new);
/* Embeds ids (first stage) into ex->x. Position ids follow transformers:
 * the running count of real tokens, + 2; pads get row 1. Under TP every
 * rank of the stage calls it (the all-reduce joins them). */
int opt_forward_embed(const struct opt_model *m, struct opt_exec *ex, const int32_t *ids,
                      const uint8_t *mask, int t_new);
/* One decoder layer (index local to the shard), in place on ex->x. */
int opt_forward_layer(const struct opt_model *m, int layer, struct opt_exec *ex, int t_new);
/* Last stage: final LayerNorm, project_out and head on the last position of
 * every sequence (or every position with all_positions) of ex->x. logits
 * (host, (rows, vocab)) receives the full logits on TP rank 0; other ranks
 * pass NULL (they contribute their vocabulary block). */
int opt_forward_head(const struct opt_model *m, struct opt_exec *ex, int t_new,
                     bool all_positions, float *logits);
/* Marks the t_new positions filled once every layer has run. */
void opt_exec_commit(struct opt_exec *ex, const uint8_t *mask, int t_new);

/* Bytes of weights this shard streams per forward step (for bandwidth math). */
size_t opt_model_weight_bytes(const struct opt_model *m);

#endif
