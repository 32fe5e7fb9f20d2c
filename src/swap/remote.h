/* What process 0 of a job under mpirun asks of the processes that own the
 * devices it sees as views (backend/remote: device_proc(d) > 0), in the
 * words of the swap manager and the device workers: load a shard's blobs
 * at the offsets chosen on the view, offload them, open a batch's
 * execution contexts, run a step, close the batch. cluster/remote.h
 * implements it over the leader's command channel (cluster/leader.h);
 * nothing under cluster/ is visible from here, so the manager and the
 * workers call through this table (docs/ARCHITECTURE.md: "Processes").
 *
 * Every call blocks until the owner answers, so none is made under the
 * manager's lock: loads and offloads run on the view's loader thread, the
 * batch calls on the thread of group_batch_create / group_forward. Errors
 * come back with the owner's message ("process P: ..."); a lost process
 * fails every call naming it. */
#ifndef SHARDSWAP_SWAP_REMOTE_H
#define SHARDSWAP_SWAP_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct swap_model;
struct swap_shard;
struct model_exec_shape;
struct comm_group;
struct comm_channel;

/* A step sent and not yet waited for (step_send, step_wait). */
struct swap_remote_step;

struct swap_remote {
    void *ctx;
    /* Loads shard sh of model on its device's owner, blob b at offset
     * offsets[b] of that device (UINT64_MAX for an empty blob); returns
     * once every blob is there. The first call for a model registers it
     * with every process first (name, checkpoint path, placement,
     * precision: the model's as they are then, fixed from its first
     * load). */
    int (*load)(void *ctx, const struct swap_model *model, const struct swap_shard *sh,
                const uint64_t *offsets);
    /* The owner of sh's device lets sh's blobs go (device memory only: the
     * owner keeps no host copy, so the next load reads its checkpoint). */
    int (*offload)(void *ctx, const struct swap_model *model, const struct swap_shard *sh);
    /* The model is gone from the manager (swap_unregister): every process
     * forgets it. No call for it is in progress or follows. */
    void (*forget)(void *ctx, const struct swap_model *model);

    /* A batch of model of this shape: shard i's context at offsets[i] of
     * its device when the device is another process's (the others' entries
     * unread). Creates this process's ends of the TP group of each stage
     * (groups[s], NULL where this process holds no rank or tp is 1) and of
     * the channels between stages (chans[i] for shard i -> i + tp, NULL
     * where this process holds no end; a mailbox when it holds both), and
     * opens the batch on every other process with the same tags. *id names
     * the batch in the calls below. */
    int (*batch_open)(void *ctx, const struct swap_model *model,
                      const struct model_exec_shape *shape, const uint64_t *offsets,
                      struct comm_group **groups, struct comm_channel **chans, uint64_t *id);
    int (*batch_clear)(void *ctx, uint64_t id, int slot);
    /* Closes the batch everywhere and gives its tags back (groups and
     * channels from batch_open are the caller's to destroy first). */
    void (*batch_close)(void *ctx, uint64_t id);
    /* Sends one step of the batch to every other process (ids, mask:
     * batch * t_new, as group_forward's) and returns without waiting, so
     * the caller can queue its own shards' part in the same order; *out is
     * waited for once by step_wait, which fills logits[0..n) when another
     * process holds TP rank 0 of the last stage (*got: floats written, 0
     * when this process holds it). */
    int (*step_send)(void *ctx, uint64_t id, const int32_t *ids, const uint8_t *mask, int batch,
                     int t_new, bool all_positions, bool overlap, struct swap_remote_step **out);
    int (*step_wait)(void *ctx, struct swap_remote_step *step, float *logits, size_t n,
                     size_t *got);
};

#endif
