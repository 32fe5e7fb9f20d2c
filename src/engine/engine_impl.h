/* The engine's state, shared by the files that implement engine.h. Not for
 * callers outside src/engine/. */
#ifndef SHARDSWAP_ENGINE_ENGINE_IMPL_H
#define SHARDSWAP_ENGINE_ENGINE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/event.h"
#include "core/hist.h"
#include "engine/engine.h"
#include "engine/forecast.h"
#include "engine/sched.h"
#include "model/sampler.h"

/* A request's phase. QUEUED -> RUNNING only under the engine lock (when a
 * runner takes it), QUEUED -> DONE only under the engine lock (cancelled,
 * expired or removed in its queue); RUNNING -> CANCELLING (engine_cancel)
 * and RUNNING/CANCELLING -> DONE (its runner) by compare-and-swap. */
enum phase { PH_QUEUED, PH_RUNNING, PH_CANCELLING, PH_DONE };

struct engine_req {
    atomic_int refs;  /* the engine's (until on_done returned) + the caller's */
    atomic_int phase;
    atomic_bool stop_ok; /* PH_CANCELLING by engine_stop: it completes ok */
    struct event done; /* set once the results are final */
    struct engine *e;
    int model_id;
    struct emodel *m; /* while queued or running */
    int n_prompt, max_tokens;
    struct sampler_params sampling;
    struct sampler sampler;
    double deadline; /* INFINITY: none */
    void (*on_token)(struct engine_req *r, int32_t token, void *ctx);
    void (*on_done)(struct engine_req *r, void *ctx);
    void *ctx;
    /* results: written by the thread that completes it, before done is set */
    int n_output;
    int status;
    char error[160];
    struct engine_req_timings t;
    /* a model's queue (engine lock), then the engine's finished list */
    struct engine_req *prev, *next;
    int32_t *prompt; /* (n_prompt) into ids */
    int32_t *output; /* (max_tokens) into ids */
    int32_t ids[];   /* prompt, then output: one allocation */
};

enum admin { ADMIN_NONE, ADMIN_LOAD, ADMIN_UNLOAD };

struct emodel {
    struct engine *e;
    int id;
    struct swap_model *sm;
    struct engine_req *head, *tail; /* its queue */
    int queue_len;
    int n_running;        /* sequences in its batch */
    bool running;         /* the runner has a batch */
    bool go;              /* the scheduler dispatched a batch */
    bool offload_pending; /* chosen as a victim, or unloaded, while running */
    bool was_loading;
    bool pinned;
    bool removed;         /* engine_remove_model began: no submission, no action */
    bool stop;            /* its runner exits */
    atomic_bool removing; /* its batch's sequences leave at the next boundary */
    int users;            /* admin callers waiting on it, submissions validating against its
                           * swap_model outside the lock: neither is freed under them */
    enum admin admin;     /* an admin request for the scheduler thread */
    int admin_rc;
    char admin_msg[160];
    double last_used, loaded_at;
    struct forecast arrivals;
    /* device memory for its batches: the largest batch it may run (max_batch
     * sequences of the longest prompt and answer submitted so far), held
     * free for it while it is resident; what its batch in flight has
     * allocated of it (engine lock) */
    int max_batch; /* sequences per batch: the engine's, or less */
    int longest_prompt, longest_seq;
    bool decodes; /* some request asked for more than one token */
    bool warned_nonfinite; /* its logits were NaN or Inf once (runner thread only) */
    uint64_t reserve[SCHED_MAX_DEVICES], batch_bytes[SCHED_MAX_DEVICES];
    bool mem_wait; /* its batch did not fit at all: not served until memory is freed */
    pthread_t tid;
    bool started;
    pthread_cond_t go_cond;
    /* statistics (engine lock) */
    uint64_t loads, evictions, unloads, bytes_loaded, batches;
    uint64_t submitted, ok, failed, cancelled, timed_out, rejected;
    double load_s, compute_s;
    struct hist latency, ttft, load;
};

struct engine {
    /* every field here and in the emodels; never held across a copy or a
     * wait on the swap manager (under it, only the manager's non-waiting
     * calls: swap_load, swap_offload, swap_compact, swap_use_begin, queries);
     * engine.h says what else is never done under it */
    pthread_mutex_t lock;
    pthread_cond_t wake;   /* the scheduler's: something changed */
    pthread_cond_t idle;   /* every request completed */
    pthread_cond_t admin;  /* an admin request was carried out; a runner stopped */
    struct swap_manager *mgr;
    struct workers *w;
    const struct sched_policy *policy;
    struct engine_config cfg;
    struct emodel **models; /* (cap) by id; NULL once removed */
    int n_ids, cap, n_live;
    pthread_t sched_tid;
    bool sched_started, stop;
    uint64_t outstanding;     /* accepted requests whose on_done has not returned */
    int n_queued_deadlines;   /* queued requests with a deadline */
    struct engine_req *finished, *finished_tail; /* completed in a queue: on_done pending */
    struct engine_stats stats;
    double load_s; /* the latest load's time, for the policy's forecasts */
    double *step_s; /* [b]: a first step's time for b requests (moving average; 0: none yet) */
    double wake_at; /* a policy's SCHED_WAKE, on the time_now() clock */
    int batches_running; /* runners holding a batch's device memory */
};


/* ---- registry.c: the registry, admin calls, statistics ---- */
struct emodel *model_get(struct engine *e, int id);
struct emodel *model_named(struct engine *e, const struct engine_request_params *p);
void model_unuse(struct emodel *m);

/* ---- request.c: request handles ---- */
void req_account(struct engine *e, struct emodel *m, struct engine_req *r);
void req_set_status(struct engine_req *r, int status, const char *why);
void req_finish_running(struct emodel *m, struct engine_req *r, int status, const char *why);
void req_complete(struct engine *e, struct engine_req *r);

/* ---- queue.c: per-model queues and the batch rule (lock held) ---- */
void queue_push(struct emodel *m, struct engine_req *r);
void queue_fail(struct emodel *m, struct engine_req *r, int status, const char *why);
int queue_take(struct emodel *m, struct engine_req **out, int n, bool same_params);
void queue_give_back(struct emodel *m, struct engine_req **r, int n,
                     struct engine_req **cancelled, int *n_cancelled);

/* ---- reserve.c: memory reserves and batch shapes ---- */
void reserve_grow(struct engine *e, struct emodel *m, int n_prompt, int max_tokens);
int request_fits_ever(struct engine *e, struct swap_model *sm, int n_prompt, int max_tokens);
void mem_wait_clear(struct engine *e);
int batch_alloc(struct emodel *m, struct engine_req **first, int n, struct group_batch **gb,
                int *max_prompt);
void batch_release(struct emodel *m, struct group_batch *gb);

/* ---- runner.c: the batch runner ---- */
void *runner_main(void *arg); /* the thread of emodel arg */

/* ---- sched_loop.c: the scheduler thread ---- */
void load_check(struct engine *e, struct emodel *m, bool loading);
void *sched_main(void *arg);     /* the thread of engine arg */
void engine_on_swap(void *ctx); /* the swap manager's listener (ctx: the engine) */

#endif
