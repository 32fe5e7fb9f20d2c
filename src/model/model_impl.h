/* The structs behind model.h's handles: a shard (struct model) and the
 * execution context of a batch (struct model_exec). Internal to model/ and
 * its families (through arch.h); everything above model/ holds pointers and
 * reads them through model.h's accessors. */
#ifndef SHARDSWAP_MODEL_MODEL_IMPL_H
#define SHARDSWAP_MODEL_MODEL_IMPL_H

#include "model/model.h"

struct model {
    const struct arch_ops *arch;
    struct model_config *cfg;      /* owned copy */
    const struct model_info *info; /* &cfg->info */
    struct model_shard shard;
    int heads_local, kv_heads_local; /* per TP rank */
    int kv_head_begin;               /* this rank's first KV head */
    int ffn_local;
    int vocab_begin, vocab_local; /* this rank's rows of the embedding and head */
    /* the precision of its linear layers: model_compute_default of the
     * checkpoint's matrices when opened; the caller may change it (every
     * shard of a model alike) */
    enum kern_compute compute;
    enum dtype weight_dtype;     /* the matrices as the shard holds them (the last one planned):
                                  * the checkpoint's, or bf16 (model_layout_set_compute) */
    void *w;                     /* the family's views of this shard (arch.h), owned */
    void *layers;                /* the family's views of each local layer, owned */
    size_t streamed_bytes;       /* weight bytes one forward step reads (not lookup tables,
                                  * not routed experts) */
    size_t expert_bytes;         /* every routed expert's matrices */
    double expert_macs;          /* their multiply-adds, were each to take one token */
    double macs_token, macs_row; /* multiply-adds per token, per row of logits */
    struct st_checkpoint *ck;    /* the views' checkpoint, when bound to one */
    bool owns_ck;
    float *params; /* widened small parameters (checkpoint binding) */
    /* model_open_on: the device holding the weights and the blobs there
     * (n_blobs of them, owned; NULL where a blob is empty); NULL and 0 for
     * views of a mapped checkpoint and for the swap engine's shards */
    struct device *dev;
    struct dbuf **blobs;
    int n_blobs;
};

struct model_exec {
    struct device *dev;
    struct stream *stream; /* compute stream, owned */
    struct comm *tp;       /* this shard's rank in its stage's TP group; NULL when tp is 1 */
    struct model_exec_shape shape;
    int len;                               /* positions filled, for every sequence */
    int layers, heads, kv_heads, head_dim; /* this shard's */
    struct dbuf *mem;                      /* everything below that is on the device */
    /* layer i's caches at k + kv_at[i], v + kv_at[i]: (batch, kv_heads, max_len,
     * head_dim), or (batch, kv_heads, ring[i], head_dim) for a layer attending
     * within ring_window keys whose ring (position p at row p % ring[i]) is
     * shorter than max_len; ring[i] 0 otherwise */
    float *k, *v;
    size_t *kv_at; /* (layers) host, owned */
    int *ring;     /* (layers) host, owned */
    int ring_window;
    uint8_t *key_ok;                       /* (batch, max_len) */
    float *x;                              /* (max_tokens, hidden) activations between stages */
    float *h;                              /* (max_tokens, hidden) */
    float *q, *attn;                       /* (max_tokens, heads * head_dim) */
    float *kn, *vn;                        /* (max_tokens, kv_heads * head_dim) */
    float *f;                              /* (max_tokens, the family's MLP width) */
    float *e;                              /* (max_tokens, the family's extra width) or NULL */
    float *scores;                         /* attention scratch */
    float *aux;                   /* the family's per-batch tables (rotary frequencies) or NULL */
    bool aux_ready;               /* filled (by the first model_exec_begin) */
    float *logits_local, *logits; /* (max_rows, vocab_local), (max_rows, vocab) */
    int32_t *ids, *rows;          /* (max_tokens) token ids, position rows / head rows */
    int32_t *pos;                 /* (max_tokens) each new token's position, or NULL */
    /* host side */
    void *host;           /* (max_tokens, the family's host width) scratch, or NULL */
    uint64_t *routed;     /* (layers, experts) tokens routed to each expert, or NULL */
    int experts;
    uint8_t *key_ok_host; /* (batch, max_len) mirror of key_ok */
    int *n_real;          /* (batch) real tokens so far: the next position */
    int32_t *rows_host;   /* (max_tokens) */
    int32_t *pos_host;    /* (max_tokens) positions of the step's tokens (0-based) */
    bool owns_dev;        /* model_exec_open_cpu's device, closed with the context */
    /* LoRA (model_exec_set_adapters): sequence b's adapter shard or NULL,
     * adapters NULL when none is attached; the scratch of kern_lora for the
     * shape's max_lora_rank (device; NULL when 0); a step's runs of
     * sequences and their pairs (host, batch + 1 and batch) */
    const struct model **adapters;
    /* during model_forward_stage: its io (the experts hook) and where a
     * failed wait is remembered; NULL outside it */
    const struct model_stage_io *io;
    int *io_rc;
    float *lora_scratch;
    int *lora_seg;
    struct lora_pair *lora_pairs;
};

#endif
