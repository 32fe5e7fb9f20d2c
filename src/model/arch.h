/* What a model family implements: one static const table per family, with
 * designated initializers, listed in model/arch.c. Internal to model/:
 * everything above model/ goes through model.h.
 *
 * A third family implements, in model/<family>/:
 *   - config_parse: config.json (a JSON object) -> a struct that begins
 *     with struct model_config, its info filled (every dimension checked,
 *     nothing allocated from a hostile size first); config_size its size;
 *     config_save, describe;
 *   - shard_check: what TP x PP layouts it can shard (one-line errors
 *     naming the numbers); shard_init: the per-rank numbers of struct
 *     model (heads_local, kv_heads_local, kv_head_begin, ffn_local; the
 *     vocabulary range is generic); its views are m->w (weights_size
 *     bytes) and m->layers (layer_size bytes per local layer), zeroed and
 *     owned by the generic code;
 *   - plan: every tensor slice the shard holds, through plan_matrix,
 *     plan_head, plan_table and plan_vector (below), pointing at its views;
 *   - exec_dims: the widths of the execution context's buffers, and
 *     exec_prepare to fill its per-batch tables (optional);
 *   - embed, layer, head: the forward as a flat list of kernel-table calls
 *     on the context's buffers, a layer its norms around the attention and
 *     MLP blocks of model/block.h; required_ops: which kernels those call
 *     for a config (a device lacking one is refused at registration);
 *   - presets and tensors: random checkpoints in its real layout.
 */
#ifndef SHARDSWAP_MODEL_ARCH_H
#define SHARDSWAP_MODEL_ARCH_H

#include <jansson.h>

#include "core/error.h"
#include "model/model_impl.h"
#include "model/window.h"

/* Widths of one shard's execution-context buffers (model.h's model_exec). */
struct exec_dims {
    int ffn_width;    /* floats per token of ex->f */
    int extra_width;  /* floats per token of ex->e (0: none) */
    size_t aux_floats; /* ex->aux (0: none) */
    int host_width;    /* 4-byte slots per token of ex->host, host memory (0: none) */
    int experts;       /* counters per layer of ex->routed (0: none) */
    bool positions;   /* the layers read ex->pos */
    /* the layers set in *windows (global indices) attend within `window`
     * keys and keep their KV caches in rings (model/exec.c); 0 or NULL:
     * no layer does */
    int window;
    const struct layer_windows *windows;
};

struct model_planner;

/* A tensor in a random checkpoint, in the family's state_dict order. */
enum tensor_init { TENSOR_NORMAL, TENSOR_ZERO, TENSOR_ONE };
struct tensor_spec {
    char name[96];
    int ndim;
    int64_t shape[2];
    enum tensor_init init;
    int zero_row; /* row left zero (a padding embedding), or -1 */
};

/* Fills t (zero_row -1); name printf-style. */
void tensor_spec_set(struct tensor_spec *t, int ndim, int64_t rows, int64_t cols,
                     enum tensor_init init, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* The projections of a decoder layer a LoRA adapter may target, as the
 * shared blocks run them (block.h). */
enum lora_slot { LORA_Q, LORA_K, LORA_V, LORA_O, LORA_GATE, LORA_UP, LORA_DOWN, LORA_SLOTS };

struct arch_ops {
    const char *name;                 /* "opt", "llama" */
    const char *const *model_types;   /* config.json model_type values, NULL-terminated */
    size_t config_size;               /* bytes of its config struct */
    size_t weights_size, layer_size;  /* bytes of its views: m->w, each of m->layers */
    int (*config_parse)(json_t *root, const char *what, struct model_config **out);
    /* config.json of c into dir (generation_config.json is generic) */
    int (*config_save)(const struct model_config *c, const char *dir);
    void (*describe)(const struct model_config *c, char *buf, size_t cap);
    int (*shard_check)(const struct model_config *c, const struct model_shard *s);
    int (*shard_init)(struct model *m);
    /* ck: for names and optional tensors (prefix, a separate head) */
    int (*plan)(struct model *m, const struct st_checkpoint *ck, struct model_planner *p);
    void (*exec_dims)(const struct model *m, struct exec_dims *d);
    int (*exec_prepare)(const struct model *m, struct model_exec *ex); /* may be NULL */
    int (*embed)(const struct model *m, struct model_exec *ex, const int32_t *ids,
                 const uint8_t *mask, int t_new);
    int (*layer)(const struct model *m, int layer, struct model_exec *ex, int t_new);
    int (*head)(const struct model *m, struct model_exec *ex, int t_new, bool all_positions,
                float *logits);
    /* KERN_OP_BITs of every kernel embed, layer and head call for c */
    uint64_t (*required_ops)(const struct model_config *c);
    /* random checkpoints: "a|b|c", a preset's config, its tensors (*out malloc'd) */
    const char *preset_names;
    int (*preset)(const char *name, struct model_config **out); /* ERR_NOT_FOUND: not ours */
    int (*tensors)(const struct model_config *c, struct tensor_spec **out, int *n);
    /* LoRA adapters (model/adapter.h), module names as PEFT sees them in the
     * transformers model: layer N's prefix (printf with N: "model.layers.%d."),
     * each slot's module under it ("self_attn.q_proj"; NULL: none, as OPT has
     * no gate), modules whose pairs a file may hold but this reader does not
     * take (Phi-3's fused ones, refused by name; NULL-terminated) and the
     * modules outside the layers (embeddings, head: refused when targeted;
     * NULL-terminated). lora_layer NULL: the family takes no adapters. */
    const char *lora_layer;
    const char *lora_modules[LORA_SLOTS];
    const char *lora_refused[4];
    const char *lora_outside[6];
};

/* Every family, NULL-terminated (arch.c). */
extern const struct arch_ops *const model_archs[];

/* A family's config struct for a model_config it allocated (container). */
#define ARCH_CONFIG(type, c) ((const type *)(c))

/* Allocates a zeroed config of arch's size with info.family set. */
int arch_config_alloc(const struct arch_ops *arch, struct model_config **out);

/* ---- the plan (layout.c) ---- */

/* A (rows, cols) matrix of the checkpoint sliced to rows [r0, r0 + nr) x
 * cols [c0, c0 + nc), bound to *view; read once per forward step. */
int plan_matrix(struct model_planner *p, int blob, const char *name, int rows, int cols, int r0,
                int nr, int c0, int nc, struct weight_view *view);
/* The same for a matrix that multiplies only the rows that get logits
 * (the head). */
int plan_head(struct model_planner *p, int blob, const char *name, int rows, int cols, int r0,
              int nr, int c0, int nc, struct weight_view *view);
/* The same for a matrix of routed expert `expert` of the layer, which
 * multiplies only the tokens routed to it: counted apart from what every
 * token reads (model_expert_cost); with model_shard.expert_blobs it goes
 * into that expert's own blob instead of the layer's. */
int plan_expert(struct model_planner *p, int blob, int expert, const char *name, int rows, int cols,
                int r0, int nr, int c0, int nc, struct weight_view *view);
/* The same for a lookup table (embeddings): not counted as streamed. */
int plan_table(struct model_planner *p, int blob, const char *name, int rows, int cols, int r0,
               int nr, int c0, int nc, struct weight_view *view);
/* The last planned matrix also binds to *also (a tied head), which then
 * counts as streamed. */
void plan_also(struct model_planner *p, struct weight_view *also);
/* A vector of n elements sliced to [i0, i0 + count), widened to f32. */
int plan_vector(struct model_planner *p, int blob, const char *name, int n, int i0, int count,
                const float **vec);
/* The same, with `add` added to every element in f32 as it is widened
 * (Gemma's RMSNorm weights: 1 + w). */
int plan_vector_plus(struct model_planner *p, int blob, const char *name, int n, int i0, int count,
                     float add, const float **vec);
/* The vocabulary-parallel embedding and head as every family ties them.
 * plan_vocab_embed (first stage): the table embed_name (vocab, width),
 * this rank's rows, into *embed; when this stage is also the last and the
 * checkpoint has no "lm_head.weight", *head is bound to the same memory.
 * plan_vocab_head (last stage): "lm_head.weight" when the checkpoint has
 * it, else (tie) nothing more on a first stage, or its own copy of the
 * embedding's rows; ERR_NOT_FOUND when it has none and tie is false. */
int plan_vocab_embed(struct model_planner *p, const struct model *m, const struct st_checkpoint *ck,
                     const char *embed_name, int width, struct weight_view *embed,
                     struct weight_view *head);
int plan_vocab_head(struct model_planner *p, const struct model *m, const struct st_checkpoint *ck,
                    const char *embed_name, int width, bool tie, struct weight_view *head);
/* A tensor name, printf-style, in the planner's buffer (valid until the
 * next call): what the plan_* calls take. */
const char *plan_name(struct model_planner *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The checkpoint tensor name of a layout's part i. */
const char *model_part_name(const struct model_layout *layout, int i);
/* Allocates m's blobs on dev (m->blobs, m->dev), fills them from ck (on
 * this process's CPU device in place; elsewhere through one host staging
 * buffer of the largest blob's size, then copied) and binds them
 * (device_model.c; model_open_on and adapters). */
int model_upload_blobs(struct model *m, const struct model_layout *lay,
                       const struct st_checkpoint *ck, struct device *dev);

/* ---- helpers for the forward ---- */

/* Runs one kernel call; on failure leaves the function with its code. */
#define TRY(call)                                                                                  \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ < 0)                                                                               \
            return rc_;                                                                            \
    } while (0)

/* Sums partial results over the TP ranks (row-parallel outputs, embeddings). */
static inline int model_reduce(struct model_exec *ex, float *y, size_t n)
{
    return ex->tp ? comm_allreduce_sum(ex->tp, ex->stream, y, n) : 0;
}

/* Local layer `layer`'s KV cache in ex: its geometry (a ring's window and
 * size when the layer keeps one), and its k and v caches. */
static inline struct kv_geom model_layer_kv(const struct model_exec *ex, int layer, float **kc,
                                            float **vc)
{
    struct kv_geom g = {.batch = ex->shape.batch,
                        .heads = ex->heads,
                        .kv_heads = ex->kv_heads,
                        .head_dim = ex->head_dim,
                        .max_t = ex->shape.max_len,
                        .window = ex->ring[layer] ? ex->ring_window : 0,
                        .ring = ex->ring[layer]};
    *kc = ex->k + ex->kv_at[layer];
    *vc = ex->v + ex->kv_at[layer];
    return g;
}

/* Checks ids against the vocabulary and copies them to ex->ids. */
int model_embed_ids(const struct model *m, struct model_exec *ex, const int32_t *ids, int n);
/* The rows that get logits (every position, or each sequence's last),
 * gathered from ex->x into ex->h; *n_rows how many. */
int model_head_rows(const struct model *m, struct model_exec *ex, int t_new, bool all_positions,
                    int *n_rows);
/* This rank's vocabulary block of head @ x (n_rows of it), every block
 * into rank 0's logits, and the host copy when logits is not NULL. */
int model_head_logits(const struct model *m, struct model_exec *ex, const struct weight_view *head,
                      const float *x, int n_rows, float *logits);
/* The same with every logit soft-capped first: cap * tanh(logit / cap)
 * (Gemma 2's final_logit_softcapping; cap 0: none). */
int model_head_logits_capped(const struct model *m, struct model_exec *ex,
                             const struct weight_view *head, const float *x, int n_rows, float cap,
                             float *logits);

#endif
