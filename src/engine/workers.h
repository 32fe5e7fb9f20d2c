/* Device workers: compute lanes (threads) per device, each running the
 * shards placed on its device, in the order their jobs were submitted.
 *
 * A forward of a model is one job per shard, submitted to all of the model's
 * devices under one lock, so every device sees the jobs of all models in the
 * same relative order: two models sharing devices can never wait on each
 * other's collectives (the deadlock of interleaved all-reduces). Under
 * mpirun the groups are classed by the other processes they span (those
 * wholly on this process are one class): each class has its own lock and
 * its own lane on every device, so a step waiting for a silent process
 * holds up only its class, never a model with no shard on that process.
 *
 * A shard's job waits, layer by layer, for the readiness event of the blob it
 * is about to use, so a forward on a model that is still loading starts as
 * soon as its first layers are in (layer overlap).
 */
#ifndef SHARDSWAP_ENGINE_WORKERS_H
#define SHARDSWAP_ENGINE_WORKERS_H

#include <stdbool.h>
#include <stdint.h>

#include "swap/swap.h"

struct workers;

/* One compute thread per device of mgr (device_compute_thread_init: a CPU
 * device's thread computes on one core). */
int workers_create(struct swap_manager *mgr, struct workers **out);
void workers_destroy(struct workers *w); /* NULL-safe; waits for queued jobs */

/* The per-execution state of a batch of sequences on one model: an
 * execution context per shard (KV cache, activations and scratch, allocated
 * on the shard's device inside its budget), the TP groups of each stage and
 * the channels between stages. Everything is allocated here, before the
 * batch's first step; a step allocates nothing on a device. A batch runs on
 * its model's shards as registered: free it before swap_unregister. */
struct group_exec;
/* Device bytes a batch of this shape takes on device `device` (0 when the
 * model has no shard there; UINT64_MAX when the shape fits no device). */
uint64_t group_exec_bytes(const struct swap_model *model, struct swap_manager *mgr,
                          const struct model_exec_shape *shape, int device);
/* ERR_NOMEM naming the device and bytes when a shard's context does not fit
 * its device's budget now (nothing is left allocated then). */
int group_exec_create(struct swap_manager *mgr, const struct swap_model *model,
                      const struct model_exec_shape *shape, struct group_exec **out);
/* 0, or the error of the forward that failed on it: a failed step leaves the
 * shards' KV caches out of step and its groups and channels aborted, so every
 * later group_forward on gb fails at once (ERR_BUSY is never it: free gb and
 * create another). */
int group_exec_failed(const struct group_exec *gb);
/* Frees sequence slot b on every shard for a new sequence. */
void group_exec_clear_slot(struct group_exec *gb, int b);
/* Positions still free in the KV caches. */
int group_exec_room(const struct group_exec *gb);
/* The longest step (positions per sequence) the batch was sized for. */
int group_exec_max_step(const struct group_exec *gb);
void group_exec_free(struct group_exec *gb); /* NULL-safe */
/* The largest LoRA adapter rank the batch was sized for (max_lora_rank). */
int group_exec_lora_rank(const struct group_exec *gb);
/* Sequence b's adapter from the next step on: per[b], an adapter
 * (swap_register_adapter's) of the batch's model that is on its devices
 * and in use, or NULL for the base alone (per NULL: every one). Each
 * shard's context gets the adapter's shard of the same index
 * (model_exec_set_adapters). Between steps, on the thread that runs them;
 * host memory only. ERR_INVALID naming a rank the batch was not sized for. */
int group_exec_set_adapters(struct group_exec *gb, struct swap_model *const *per);
/* The router's counts since gb was created (model_exec_routed): for a
 * model with experts, the experts per layer, and when out is not NULL the
 * real tokens routed to each expert of each layer of the whole model,
 * (n_layers, experts) row-major into out (n_layers: the model's). Each
 * stage counts once, from its lowest-ranked shard on this process (every
 * TP rank of a stage routes alike); the rows of a stage with no shard on
 * this process stay 0 (its contexts count on their own process). 0 (out
 * untouched) for a model without experts. Between steps, on the thread
 * that runs them. */
int group_exec_routed(const struct group_exec *gb, uint64_t *out);

/* Runs t_new tokens of every sequence (ids, mask: (batch, t_new), mask as in
 * model_forward) through every shard of the model on its device and waits.
 * When a shard fails, its worker aborts the batch's stage groups and
 * channels, so every other shard returns instead of waiting for it, and
 * group_forward returns the first shard's error with its message (raised
 * again on the calling thread: err_msg() there tells it); gb is failed from
 * then on (group_exec_failed). A step gb was not sized for fails before
 * any shard runs and leaves gb usable.
 * logits: (batch, vocab) for the last position, or (batch, t_new, vocab) with
 * all_positions. overlap = false waits for the whole model to be on its
 * devices before computing (for measuring what overlap buys). The model must
 * be resident or loading, and in use (swap_use_begin) for the duration. */
int group_forward(struct workers *w, struct group_exec *gb, const int32_t *ids, const uint8_t *mask,
                  int t_new, bool all_positions, bool overlap, float *logits);

#endif
