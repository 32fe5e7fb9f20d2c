/* A model of any family, as everything above model/ sees it.
 *
 * A family (OPT, the Llama family, ...) is a folder under model/ behind one
 * ops table (model/arch.h). What is the same for every family is written
 * once here: the config dispatch, the shard layout (which slice of which
 * checkpoint tensor a TP rank / PP stage holds, packed into blobs), binding,
 * the execution context of a batch, the forward driver, random checkpoints.
 * Callers read struct model_info, never a family's config.
 *
 * A shard (struct model) and a batch's execution context (struct
 * model_exec) are opaque handles here, read through accessors; their
 * fields are in model_impl.h, for model/ and its families. What callers
 * fill in or read whole stays plain values: the info, the shard spec, the
 * blob layout's sizes, a context's shape, a stage's I/O.
 *
 * A model object is one shard of a checkpoint: a tensor-parallel rank and a
 * pipeline stage (a contiguous range of layers). With tp_size 1 and the
 * full layer range it is the whole model.
 *
 * Two ways to hold the weights:
 * - views straight into a memory-mapped checkpoint (model_open*): zero
 *   copies, for one process running one model;
 * - blobs (model_shard_open/fill/bind): each shard's tensors packed into
 *   one buffer per layer plus one for the embeddings and head, the unit the
 *   swap engine moves between disk, host and device. Matrices keep the
 *   checkpoint dtype; vectors are widened to f32.
 */
#ifndef SHARDSWAP_MODEL_MODEL_H
#define SHARDSWAP_MODEL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/device.h"
#include "backend/kernels.h"
#include "backend/weight.h"
#include "comm/comm.h"
#include "format/safetensors.h"

#define MODEL_MAX_EOS 8

/* What every layer above the model reads of a checkpoint. */
struct model_info {
    const char *family;     /* the family's name ("opt", "llama"); static */
    char architecture[64];  /* config.json's architectures[0] (or the family's class) */
    int vocab;              /* vocab_size */
    int max_pos;            /* positions a sequence may reach */
    const char *max_pos_from; /* the config field that sets it, for messages; static */
    int hidden;             /* hidden_size */
    int n_layers;
    int n_heads, n_kv_heads, head_dim;
    int ffn;                /* the MLP's hidden units */
    int bos_id, pad_id;     /* -1 when the model declares none */
    int eos_ids[MODEL_MAX_EOS]; /* generation stops at any of them */
    int n_eos;
    enum dtype dtype;       /* the storage dtype config.json declares */
};

/* True when id is one of the model's end-of-sequence ids. */
bool model_info_is_eos(const struct model_info *info, int32_t id);

/* A parsed config.json of some family: the info and, past it, the family's
 * own fields (one allocation, model_config_free). */
struct arch_ops;
struct model_config {
    const struct arch_ops *arch;
    struct model_info info;
    /* kern_weight_ops of every weight type the checkpoint holds (a GGUF's
     * quantized blocks; 0 for plain types) */
    uint64_t weight_ops;
};

/* Reads DIR/config.json, dispatched on model_type (and architectures),
 * then DIR/generation_config.json when present (its eos_token_id, one id or
 * a list, replaces config.json's). Errors name the file and the field; an
 * unsupported model_type names it and lists the supported ones. A GGUF
 * checkpoint (a .gguf file, the first of a split set, or a directory with
 * one and no config.json) gives its metadata as config.json instead
 * (format/gguf_hf.h). */
int model_config_load(const char *dir, struct model_config **out);
/* The same from config.json's text in memory (`what` names it). */
int model_config_parse(const char *json, const char *what, struct model_config **out);
/* A copy of c (the family's fields too). */
int model_config_dup(const struct model_config *c, struct model_config **out);
void model_config_free(struct model_config *c); /* NULL-safe */
/* Writes c as a transformers-style config.json and generation_config.json
 * into dir (gen-model). */
int model_config_save(const struct model_config *c, const char *dir);
/* One line per config field that changes the computation (inspect). */
void model_config_describe(const struct model_config *c, char *buf, size_t cap);
/* "opt, llama, mistral, qwen2" for messages. */
const char *model_families(void);

struct model_shard {
    int tp_rank, tp_size;
    int layer_begin, layer_end; /* [begin, end) */
    /* a mixture of experts' routed experts placed whole on the TP ranks
     * (model_expert_range), not each split across them; attention, the
     * dense layers and a shared expert stay split. Refused for a model
     * without routed experts. */
    bool expert_parallel;
    /* expert-level residency: each routed expert the shard holds gets a
     * blob of its own (model_layout.expert_blob), after the layer blobs, so
     * it can come and go alone; the layer's blob keeps the rest */
    bool expert_blobs;
};

/* Checks that shard is valid for c (TP divides what it must, the layer
 * range is inside the model); a one-line error naming the numbers. */
int model_shard_check(const struct model_config *c, const struct model_shard *shard);

/* The routed experts [*begin, *end) of the n_experts of every sparse layer
 * that shard computes: under expert parallelism a contiguous range,
 * n_experts * r / tp up to n_experts * (r + 1) / tp for TP rank r (sizes
 * differ by at most one), each expert whole; otherwise all of them, each
 * split across the ranks. */
void model_expert_range(const struct model_shard *shard, int n_experts, int *begin, int *end);

/* The kernels (backend/kernels.h: KERN_OP_BITs) a forward of c calls: its
 * family's for this config (OPT's activation and biases, Llama's RMSNorm,
 * rotary and gated MLP), the head's, and its weight types' (c->weight_ops). Every shard is held to all of them,
 * whatever its stage. */
uint64_t model_required_ops(const struct model_config *c);
/* 0 when d runs every kernel of model_required_ops(c), attention of c's
 * head_dim included; else ERR_UNSUPPORTED with one line naming d and what
 * it lacks ("device cuda:0 has no rmsnorm kernel"). */
int model_check_device(const struct model_config *c, const struct device *d);

/* One shard of a model: opaque above model/ (model_impl.h), read through
 * the accessors below. */
struct model;

/* Opens DIR (config.json + safetensors) as the whole model, viewing the
 * mapped checkpoint. */
int model_open(const char *dir, struct model **out);
/* Binds one shard to views of an open checkpoint; ck stays the caller's. */
int model_open_shard(const struct model_config *cfg, struct st_checkpoint *ck,
                     const struct model_shard *shard, struct model **out);
/* Frees the model and, for model_open_on, its blobs (before its device is
 * closed). NULL-safe. */
void model_close(struct model *m);

/* What a shard is, for the layers above model/. Each reads a field fixed
 * once the shard is opened (the precision: until the caller changes it). */
/* The checkpoint's info (the shard's own copy of its config's). */
const struct model_info *model_info(const struct model *m);
/* The precision of its linear layers: model_compute_default of the
 * checkpoint's matrices when opened. */
enum kern_compute model_compute(const struct model *m);
/* Changes it, for views of a mapped checkpoint or bound blobs whose dtype
 * stays (every shard of a model alike); blobs that are still to be filled
 * take model_layout_set_compute instead. */
void model_set_compute(struct model *m, enum kern_compute c);
/* The matrices' dtype as the shard holds them: the checkpoint's, or bf16
 * (model_layout_set_compute). */
enum dtype model_weight_dtype(const struct model *m);
/* Multiply-adds of one forward step per token and per row of logits (a
 * routed expert's are not among them: model_expert_cost). */
void model_macs(const struct model *m, double *per_token, double *per_row);
/* The routed experts' matrices of the shard, all of them (0 for a model
 * without experts): their bytes, and their multiply-adds for one token
 * through each. Every sparse layer's experts are alike, so one (layer,
 * expert) takes these over sparse layers x experts. */
void model_expert_cost(const struct model *m, size_t *bytes, double *macs);
/* model_open_on's device, which holds the weights; NULL for views of a
 * mapped checkpoint and for the swap engine's shards. */
struct device *model_weights_device(const struct model *m);

struct model_exec_shape; /* below */

/* Opens DIR as the whole model (one full shard) with its weights in memory
 * of dev, any backend: the blob layout of model_shard_open, one
 * device_alloc per blob, each filled in host memory from dev's backend
 * (pinned where it pins), copied with device_copy_h2d and bound; the
 * checkpoint is closed before it returns. model_weights_device(m) is dev;
 * m owns the blobs; dev stays the caller's and must outlive m. ERR_NOMEM
 * naming the device when the weights do not fit its budget, ERR_UNSUPPORTED
 * when dev lacks a kernel the model calls (model_check_device). Runs on the
 * calling thread; nothing else may copy on dev meanwhile (it waits with
 * device_sync).
 * compute: the precision (model_layout_set_compute), or NULL for the
 * checkpoint's (model_compute_default). */
int model_open_on(const char *dir, struct device *dev, const enum kern_compute *compute,
                  struct model **out);
/* The device bytes model_open_on(dir) takes (*weights: every blob rounded
 * up to 64 bytes, as device_alloc counts it) and a model_exec of shape
 * beside it on any backend (*exec: model_exec_bytes_bound), for sizing a
 * device before it is opened. */
int model_device_bytes(const char *dir, const struct model_exec_shape *shape, uint64_t *weights,
                       uint64_t *exec);

/* The precision a checkpoint whose matrices are stored in `weights`
 * computes in unless told otherwise: bf16 for bf16 weights (as transformers
 * runs a bf16 model) and for GGUF block types (x quantized per block, as
 * llama.cpp computes them; f32 mode computes their dequantized rows
 * exactly), f32 for f32 and f16. */
enum kern_compute model_compute_default(enum dtype weights);

/* The blobs of a shard: blob 0 holds the first/last-stage tensors
 * (embeddings, head, final norm; empty on middle stages), blob 1 + i the
 * tensors of local layer i. With model_shard.expert_blobs, blobs
 * [n_dense, n_blobs) hold one routed expert each (its gate, up and down
 * slices), local layer by local layer and in the shard's expert order;
 * expert_blob maps (local layer, expert) to its blob, -1 where the shard
 * holds no such expert (a dense layer, another rank's expert). */
struct model_part;
struct model_layout {
    int n_blobs;
    int n_dense;              /* 1 + local layers: the blobs every step reads */
    int n_experts;            /* expert_blob's columns (0: no expert blobs) */
    int *expert_blob;         /* (local layers, n_experts), or NULL */
    size_t *blob_bytes;       /* (n_blobs) */
    struct model_part *parts; /* every tensor slice of the shard */
    int n_parts;
};

/* Creates an unbound shard (no weights yet) and its layout against ck:
 * checks every tensor the shard needs (presence, shape, dtype, alignment). */
int model_shard_open(const struct model_config *cfg, const struct st_checkpoint *ck,
                     const struct model_shard *shard, struct model **m,
                     struct model_layout *layout);
void model_layout_free(struct model_layout *layout);
/* Copies this shard's slices of blob b's tensors from ck into dst
 * (layout->blob_bytes[b] bytes), reading nothing of other shards' slices. */
int model_shard_fill(const struct model *m, const struct model_layout *layout,
                     const struct st_checkpoint *ck, int b, void *dst);
/* Sets the shard's precision (model_compute) and what its blobs hold: in bf16
 * mode an f16 checkpoint's matrices are stored as bf16 (the same bytes, so
 * the layout keeps its sizes and offsets), rounded once as the blobs are
 * filled, as transformers converts a checkpoint it loads in bf16. Prefill
 * and decode then run the bf16 kernels (AMX, VDPBF16PS) instead of rounding
 * f16 blocks on every call. Before the layout's first model_shard_fill. */
void model_layout_set_compute(struct model *m, struct model_layout *layout, enum kern_compute c);
/* Lays out each matrix its blob holds as dev's kernels want it
 * (kern_weight_pack: on a CPU that measured it faster, a Q4_K matrix's rows
 * packed in groups of 16, core/qpack.h; the same bytes, so sizes and
 * offsets stay), packed as the blobs are filled; an embedding table only
 * looked up keeps its rows (one a tied head shares is packed: kern_embed
 * reads its rows back). Before the layout's first
 * model_shard_fill, with the device the blobs are filled for. */
void model_layout_set_pack(struct model_layout *layout, struct device *dev);
/* Points the shard's views for blob b at base (a filled copy of the blob). */
void model_shard_bind(struct model *m, const struct model_layout *layout, int b,
                      const void *base);

/* The execution context of a batch of sequences on one shard: the device,
 * its compute stream, the shard's TP handle, the KV cache, the activations
 * and every scratch buffer a forward step needs. All of it is one device
 * allocation made once per batch, inside the device's budget
 * (model_exec_bytes says how much before anything is allocated); a forward
 * step allocates nothing. Sequences are left-padded: key_ok marks which
 * cached positions are real. Used by one thread at a time (the device's
 * compute thread). */
struct model_exec_shape {
    int batch;      /* sequences */
    int max_len;    /* positions each sequence may reach */
    int max_tokens; /* batch * t_new of the largest step (0: batch * max_len) */
    int max_rows;   /* rows of logits one step returns (0: batch) */
    int max_lora_rank; /* the largest rank of the LoRA adapters its sequences may use
                        * (model/adapter.h; 0: none) */
};

/* The shape with its defaults filled in (what model_exec_init keeps in
 * the context); false when invalid. */
bool model_exec_shape_resolve(const struct model_exec_shape *in, struct model_exec_shape *out);

/* Opaque above model/ (model_impl.h); the accessors below. */
struct model_exec;

/* Device bytes model_exec_init takes for this shape on dev (NULL: on a CPU
 * device, for sizing one before opening it); 0 when the shape is invalid
 * or too large for any device. */
size_t model_exec_bytes(const struct model *m, const struct device *dev,
                        const struct model_exec_shape *shape);
/* Allocates the context on dev: ERR_INVALID for a bad shape, ERR_NOMEM
 * (naming the device and bytes) when it does not fit dev's budget now. tp
 * stays the caller's and may be NULL. */
int model_exec_init(const struct model *m, struct device *dev, struct comm *tp,
                    const struct model_exec_shape *shape, struct model_exec **out);
/* model_exec_init with its memory at offset `off` of dev (device_alloc_at):
 * the placement rank 0's view of dev chose, carried out by the process
 * that owns dev (cluster/). */
int model_exec_init_at(const struct model *m, struct device *dev, struct comm *tp,
                       const struct model_exec_shape *shape, uint64_t off,
                       struct model_exec **out);
void model_exec_reset(struct model_exec *ex);
/* Frees slot b for a new sequence: its cached keys stop being visible and
 * its position count restarts (continuous batching). */
void model_exec_clear_slot(struct model_exec *ex, int b);
void model_exec_free(struct model_exec *ex); /* NULL-safe */
/* The context's compute stream (its device's; owned by the context): what
 * a caller makes wait for a blob's readiness event before a step. */
struct stream *model_exec_stream(const struct model_exec *ex);
/* Sequence slots of the context (its shape's batch). */
int model_exec_batch(const struct model_exec *ex);
/* Positions local layer `layer`'s KV cache holds per sequence: the
 * shape's max_len, or fewer for a layer attending within a sliding window
 * of W keys, whose cache is a ring of the last W + (the longest step) - 1
 * positions. */
int model_exec_kv_rows(const struct model_exec *ex, int layer);
/* The router's choices on this shard since the context was opened: how
 * many real tokens (not padding) each expert of each of the shard's local
 * layers was chosen for, (layers, *experts) counts, row i the shard's
 * layer_begin + i (0 for a dense layer); NULL and *experts 0 for a model
 * without experts. Owned by the context; read between steps, on the thread
 * that runs them or after it. */
const uint64_t *model_exec_routed(const struct model_exec *ex, int *experts);
/* For one model computed on the host (model_open's views): a CPU device of
 * exactly the context's bytes, owned by the context, and the context on it. */
int model_exec_open_cpu(const struct model *m, const struct model_exec_shape *shape,
                        struct model_exec **out);
/* The context of a whole model wherever its weights are: on model_weights_device
 * (model_open_on; the context takes shape's bytes of its budget, and the
 * thread that runs its forwards is that device's compute thread,
 * device_compute_thread_init) or, for host views (none),
 * model_exec_open_cpu. */
int model_exec_open(const struct model *m, const struct model_exec_shape *shape,
                    struct model_exec **out);
/* model_exec_bytes on a CPU device, plus room for an attention scratch of
 * every head of every sequence at once (batch x heads x step x max_len
 * floats): enough on any backend whose kern_attention_scratch stays within
 * that, for sizing a GPU before it is opened. 0 when the shape is invalid. */
size_t model_exec_bytes_bound(const struct model *m, const struct model_exec_shape *shape);
/* That room alone, 64-byte rounded, for a shard of a model with this info
 * split tp_size ways (every family splits the query heads evenly: n_heads /
 * tp_size of them per shard), for sizing a GPU from a config before any
 * shard is opened. 0 when the shape is invalid. */
size_t model_exec_scratch_bound(const struct model_info *info, int tp_size,
                                const struct model_exec_shape *shape);

/* Runs t_new tokens of each sequence of the batch through the whole model
 * (tp_size 1, all layers), appending to the cache.
 * ids, mask: (batch, t_new) host; mask 1 = real token, 0 = left padding
 *            (padding may only precede a sequence's first real token).
 * logits:    host (batch, t_new, vocab) when all_positions, else (batch,
 *            vocab) for the last position; caller-owned.
 * Errors: ids outside the vocabulary, the cache or positions full, a step
 * larger than the context's shape, a kernel failure. */
int model_forward(struct model *m, struct model_exec *ex, const int32_t *ids, const uint8_t *mask,
                  int t_new, bool all_positions, float *logits);

/* The stages of model_forward, for pipeline-parallel workers; the
 * activations between stages are the context's (batch * t_new, hidden). */
/* Checks room for t_new more positions (the cache and the model's
 * positions) and the step's size against the shape, records which new
 * positions are real keys and, for families that use them, each new
 * token's position. Every stage calls it. */
int model_exec_begin(const struct model *m, struct model_exec *ex, const uint8_t *mask, int t_new);
/* Embeds ids (first stage) into the activations. Under TP every rank of the stage
 * calls it (the all-reduce joins them). */
int model_forward_embed(const struct model *m, struct model_exec *ex, const int32_t *ids,
                        const uint8_t *mask, int t_new);
/* One decoder layer (index local to the shard), in place on the activations. */
int model_forward_layer(const struct model *m, int layer, struct model_exec *ex, int t_new);
/* Last stage: final norm and head on the last position of every sequence
 * (or every position with all_positions) of the activations. logits (host, (rows,
 * vocab)) receives the full logits on TP rank 0; other ranks pass NULL
 * (they contribute their vocabulary block). */
int model_forward_head(const struct model *m, struct model_exec *ex, int t_new,
                       bool all_positions, float *logits);
/* Marks the t_new positions filled once every layer has run. */
void model_exec_commit(struct model_exec *ex, const uint8_t *mask, int t_new);

/* One shard's part of a forward step, as a pipeline stage: its inputs (the
 * embeddings on the first stage, else the previous stage's activations
 * received on in), its layers, and its outputs (the logits on the last
 * stage, else the activations sent on out), in that order; the forward
 * driver of every caller that runs shards (the device workers, and a
 * process running the shards of a model spread over processes).
 *   in, out:  NULL on the first / last stage;
 *   wait:     when not NULL, called before blob b is first used (0: the
 *             embeddings and head, 1 + l: local layer l) on the compute
 *             thread; a failure is remembered in *wait_rc and the step goes
 *             on computing, so the collectives and channels stay in step
 *             with the other shards, and the caller reports it;
 *   logits:   as model_forward_head (TP rank 0 of the last stage).
 * Returns 0 or the first compute, collective or channel error. */
struct model_stage_io {
    struct comm_channel *in, *out;
    int (*wait)(void *arg, int blob);
    /* when not NULL, called by a sparse layer (local index `layer`) once
     * the router chose, on the compute thread: rows[e] of the step's rows
     * go to expert e and real[e] of them are real tokens (not padding), for
     * each of the layer's n_experts; the shard computes those of its
     * experts with rows. It returns once they can be read on the compute
     * stream (loaded on demand, waited for as blobs are); an expert it
     * cannot have gets ok[e] = 0 (ok starts all 1) and the block computes
     * without it, weight 0, and goes on so the collectives stay in step;
     * its error is remembered as a wait's */
    int (*experts)(void *arg, int layer, const int *rows, const int *real, int n_experts,
                   uint8_t *ok);
    void *arg;
};
int model_forward_stage(const struct model *m, struct model_exec *ex,
                        const struct model_stage_io *io, const int32_t *ids, const uint8_t *mask,
                        int t_new, bool all_positions, float *logits, int *wait_rc);

/* Bytes of weights this shard streams per forward step (for bandwidth
 * math): every matrix but the lookup tables and the routed experts, whose
 * reads depend on the routing (model_expert_cost). */
size_t model_weight_bytes(const struct model *m);

#endif
