/* What process 0 of a job under mpirun asks of the processes that own the
 * devices it sees as views (backend/view: device_proc(d) > 0), in the
 * words of the swap manager and the device workers: load a shard's blobs
 * at the offsets chosen on the view, offload them, open a batch's
 * execution contexts, run a step, close the batch. cluster/peers.h
 * implements it over the leader's command channel (cluster/leader.h);
 * nothing under cluster/ is visible from here, so the manager and the
 * workers call through this table (docs/ARCHITECTURE.md: "Processes").
 *
 * Calls block until the owner answers (but load_send, step_send and
 * batch_abort), so none is made under the manager's lock: loads and
 * offloads run on the view's loader thread, the batch calls on the thread
 * of group_exec_create / group_forward. Errors
 * come back with the owner's message ("process P: ..."); a lost process
 * fails every call naming it. */
#ifndef SHARDSWAP_SWAP_PEERS_H
#define SHARDSWAP_SWAP_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct swap_model;
struct swap_shard;
struct model_exec_shape;
struct comm_group;
struct comm_channel;

/* A load and a step sent and not yet waited for (load_send, load_wait;
 * step_send, step_wait). */
struct swap_peer_load;
struct swap_peer_step;

struct swap_peers {
    void *ctx;
    /* Sends the load of shard sh of model to its device's owner, blob b at
     * offset offsets[b] of that device (UINT64_MAX for an empty blob), and
     * returns once the command has left, before the blobs are there: any
     * step sent after it reaches the owner after it, and the owner's part
     * of that step waits there blob by blob (so it computes while the rest
     * loads). *out is given to load_wait exactly once. The first call for a
     * model registers it with every process first (name, checkpoint path,
     * placement, precision: the model's as they are then, fixed from its
     * first load) and waits for that answer. */
    int (*load_send)(void *ctx, const struct swap_model *model, const struct swap_shard *sh,
                     const uint64_t *offsets, struct swap_peer_load **out);
    /* Waits for that load's answer: 0 once every blob is there, or its error
     * (the blobs stay placed until the offload that follows). Frees it. */
    int (*load_wait)(void *ctx, struct swap_peer_load *load);
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
                     int t_new, bool all_positions, bool overlap, struct swap_peer_step **out);
    int (*step_wait)(void *ctx, struct swap_peer_step *step, float *logits, size_t n, size_t *got);
    /* The batch's step in flight stops on every other process (their ends
     * of its collectives and channels aborted with rc): for a shard here
     * that failed mid-step, whose peers there wait for it. Never waits; any
     * thread. The batch runs no more steps. */
    void (*batch_abort)(void *ctx, uint64_t id, int rc);
};

#endif
