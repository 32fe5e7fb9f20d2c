/* The shard step: one shard's part of a forward step, written once for
 * process 0's device workers (workers.c) and every follower under mpirun
 * (cluster/follower.c), which differ only in how they queue it and answer.
 *
 * A step waits for the shard's blobs (swap/store.h: one readiness event per
 * blob) on its compute stream: all of them before computing, or, with
 * overlap, each as the forward reaches it, so a step on a shard still
 * loading computes on the layers already there. A blob whose load failed
 * still lets the forward run through its collectives in step with the
 * other shards (the memory stays mapped, garbage), and the step then fails
 * with the loader's message. With expert residency a sparse layer asks
 * for the routed experts the shard lacks and waits on their events the
 * same way; one that finds no room fails the step with the manager's
 * message, after the forward ran on without it. */
#ifndef SHARDSWAP_ENGINE_STEP_H
#define SHARDSWAP_ENGINE_STEP_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"
#include "swap/store.h"
#include "swap/swap.h"

struct shard_step {
    const struct store_shard *sh;  /* the shard: its view, layout and blob events */
    struct model_exec *ex;         /* its execution context (the stream it computes on) */
    struct comm_channel *in, *out; /* PP: from the previous stage, to the next (NULL at the ends) */
    const int32_t *ids;            /* (batch, t_new) */
    const uint8_t *mask;           /* (batch, t_new) or NULL, as model_forward's */
    int t_new;
    bool all_positions, overlap;
    float *logits; /* (batch, vocab), or (batch, t_new, vocab) with all_positions: TP rank 0
                    * of the last stage writes them */
    const char
        *who; /* what a failed load's message starts with ("model m stage 0 rank 1"), or NULL */
    /* expert-level residency (process 0's steps of a model with it): the
     * manager that brings the shard's routed experts in on demand
     * (swap_experts_request), and the shard; NULL: every expert is there */
    struct swap_manager *mgr;
    const struct swap_shard *shard;
};

/* On the shard's device compute thread. 0, or the forward's error, or,
 * when the forward ran but a blob did not load, that error with "WHO: its
 * weights did not load: " and the loader's message (err_msg()). */
int shard_step_run(const struct shard_step *st);

#endif
