/* The multi-model serving engine: per-model queues, a batcher, and an
 * event-driven scheduler that decides which model to serve and which to swap,
 * by a pluggable policy (sched.h).
 *
 *   engine_submit(request) -> queue of its model (bounded: a full queue is an
 *   immediate ERR_BUSY, never a hang)
 *   scheduler thread: wakes on submissions, finished batches, finished
 *   swaps and the deadlines a policy asks for (never polls); asks the policy
 *   for actions: start a load (evicting named victims, deferred for those
 *   with a batch in flight), or dispatch a batch of a resident model; keeps
 *   what the policy forecasts from: each model's arrivals, the latest load's
 *   time and a moving average of first-step times per batch size
 *   runner thread of the model: runs the batch on the device workers:
 *   prefill, then decode steps; sequences that finish leave, waiting requests
 *   of the same model join at step boundaries (continuous batching); every
 *   request samples with its own parameters and generator
 *   request->on_done(request) when it completes, on the runner thread
 */
#ifndef SHARDSWAP_ENGINE_ENGINE_H
#define SHARDSWAP_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/workers.h"
#include "model/sampler.h"
#include "swap/swap.h"

struct engine_request {
    /* filled by the caller; prompt and output stay the caller's */
    int model;                   /* index returned by engine_add_model */
    const int32_t *prompt;
    int n_prompt;
    int max_tokens;              /* >= 1 */
    struct sampler_params sampling;
    int32_t *output;             /* room for max_tokens ids */
    void (*on_done)(struct engine_request *r);
    void *ctx;                   /* the caller's */
    /* filled by the engine */
    int n_output;
    int status;                  /* 0, or a negative error code (message in error) */
    char error[160];
    double t_arrival, t_start, t_first_token, t_done; /* time_now() clock */
    int batch_size;              /* sequences in its batch at its first step */
    /* the engine's */
    struct engine_request *next;
    struct sampler sampler;
    int slot;
};

struct engine_config {
    const char *policy;   /* sched_policy_find() name; NULL = the default */
    int max_batch;        /* sequences per batch (default 8) */
    int queue_cap;        /* waiting requests per model (default 1024) */
    int max_loaded;       /* for policies that count models (computron); 0 = unlimited */
    /* start a batch on a model whose layers are still arriving: worth it
     * when copies take no compute (GPU copy engines, an emulated link), not
     * when a CPU core does the copy (measured slower on 2 cores) */
    bool overlap_loads;
};

struct engine_stats {
    uint64_t submitted, completed, rejected, batches, loads, evictions;
    double swap_s;        /* summed load times (request of a load -> on device) */
    double compute_s;     /* summed batch run times */
};

struct engine;

/* mgr and w stay the caller's and must outlive the engine. */
int engine_create(struct swap_manager *mgr, struct workers *w, const struct engine_config *cfg,
                  struct engine **out);
/* Adds a registered model; returns its index (>= 0) or an error. Models are
 * added before the first submission. */
int engine_add_model(struct engine *e, struct swap_model *model);
/* Queues r (validated: model index, prompt length against the model's
 * positions, max_tokens, sampling parameters). ERR_BUSY when the model's
 * queue is full. On error r->on_done is not called. Thread-safe. */
int engine_submit(struct engine *e, struct engine_request *r);
/* Waits until every submitted request has completed. */
void engine_drain(struct engine *e);
/* Drains, then stops the threads and frees the engine. NULL-safe. */
void engine_destroy(struct engine *e);
void engine_get_stats(struct engine *e, struct engine_stats *st);

#endif
