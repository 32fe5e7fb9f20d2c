/* The engine's state, shared by the files that implement engine.h, one per
 * role:
 *
 *   request.c     request handles: engine_submit, reference count, phase
 *                 changes, completion, cancel and stop, accessors
 *   queue.c       per-model queues and the batch rule (queue_take)
 *   reserve.c     memory reserves, batch shapes, a batch's allocation
 *                 (halved until it fits)
 *   runner.c      the batch runner (a model's batch work as tasks on the
 *                 engine's runner pool): continuous batching, sampling,
 *                 EOS, streaming, pauses
 *   sched_loop.c  the scheduler thread: view, executor, loads and
 *                 defragmentation, admin loads and unloads, deadlines,
 *                 pinned blocks
 *   registry.c    the registry, admin calls, statistics
 *   engine.c      lifecycle: create, drain, destroy
 *
 * Not for callers outside src/engine/.
 *
 * Who may touch a field: each one below says which of these it is.
 *   [lock]    the engine lock (struct engine.lock), for every read and write
 *   [fixed]   written before the object is published (a request before it is
 *             queued, a model before it enters engine.models, the engine
 *             before its threads start) and never again: read without a lock
 *             until it is freed
 *   [atomic]  read and written without a lock; the comment says by whom
 *   [runner]  only the runner task of the request's (or the model's) model,
 *             on a pool thread: a model has at most one task posted or
 *             running at a time (while engine_model.running)
 *   [done]    written by the one thread that completes the request (its
 *             runner task without the lock, or, for one that never ran, whoever
 *             fails it in its queue under the lock), before done is set; read
 *             by others in on_token/on_done or once done is set
 *
 * The engine lock. It guards every [lock] field here. Held, it may make:
 * the swap manager's calls that do not wait (swap_load, swap_offload,
 * swap_compact, swap_trim, swap_use_begin, swap_residency,
 * swap_model_load_seconds, swap_model_resident_bytes, swap_model_missing_bytes),
 * whose lock nests inside it; device queries (device_used, device_budget,
 * device_event_done); the allocation and freeing of a batch's execution
 * contexts (group_exec_create, group_exec_free in batch_alloc and
 * batch_release: allocations, no copy and no wait), so the scheduler's view
 * of free memory and the reserves it holds change together; the policy's
 * decide() and sched_act (pure, or the calls above); waits on its own
 * condition variables (wake, idle, admin); posting a model's runner task
 * (workq_post waits for nothing). Never under it:
 * a forward (group_forward), a callback (on_token, on_done), a thread join,
 * a wait on another thread or subsystem (swap_wait_idle, swap_use_end, which
 * may carry out a deferred offload, swap_unregister, event_wait), a copy.
 * Lock order, outermost first: the server's request list (it calls
 * engine_cancel under it), the engine lock, the swap manager's lock, a
 * device's lock.
 */
#ifndef SHARDSWAP_ENGINE_ENGINE_IMPL_H
#define SHARDSWAP_ENGINE_ENGINE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/event.h"
#include "core/hist.h"
#include "core/workq.h"
#include "engine/engine.h"
#include "model/sampler.h"
#include "sched/forecast.h"
#include "sched/sched.h"

struct runner; /* runner.c's: a model's batch work, in flight or paused */

/* A request's phase. QUEUED -> RUNNING only under the engine lock (when a
 * runner takes it), QUEUED -> DONE only under the engine lock (cancelled,
 * expired or removed in its queue); RUNNING -> CANCELLING (engine_cancel)
 * and RUNNING/CANCELLING -> DONE (its runner) by compare-and-swap. */
enum phase { PH_QUEUED, PH_RUNNING, PH_CANCELLING, PH_DONE };

struct engine_req {
    atomic_int refs;  /* [atomic] the engine's (until on_done returned) + the caller's */
    atomic_int phase; /* [atomic] enum phase: who changes it when, above */
    atomic_bool stop_ok; /* [atomic] PH_CANCELLING by engine_stop: it completes ok (set
                          * under the lock by engine_stop, read by its runner) */
    struct event done; /* set once the results are final (its own lock) */
    struct engine *e;  /* [fixed] */
    int model_id;      /* [fixed] */
    struct engine_model *m; /* [lock] while queued or running; NULL once failed in its queue */
    int n_prompt, max_tokens;       /* [fixed] */
    struct sampler_params sampling; /* [fixed] */
    struct sampler sampler;         /* [runner] (initialised at submit, freed with r) */
    double deadline; /* [fixed] INFINITY: none */
    void (*on_token)(struct engine_req *r, int32_t token, void *ctx); /* [fixed] */
    void (*on_done)(struct engine_req *r, void *ctx);                 /* [fixed] */
    void *ctx;                                                        /* [fixed] */
    /* results: written by the thread that completes it, before done is set */
    int n_output;   /* [done]; [runner] while it runs (on_token reads it) */
    int status;     /* [done] */
    char error[512]; /* [done] */
    struct engine_req_timings t; /* [done]; t_arrival [fixed]; slot, t_start, batch_size,
                                  * batch_id, t_first_token [runner] */
    /* a model's queue (engine lock), then the engine's finished list */
    struct engine_req *prev, *next; /* [lock]; the scheduler's alone once it took the
                                     * finished list */
    int32_t *prompt; /* [fixed] (n_prompt) into ids */
    int32_t *output; /* [fixed] (max_tokens) into ids: [done] */
    int32_t ids[];   /* prompt, then output: one allocation */
};

enum admin { ADMIN_NONE, ADMIN_LOAD, ADMIN_UNLOAD };

struct engine_model {
    struct engine *e;      /* [fixed] */
    int id;                /* [fixed] */
    struct swap_model *sm; /* [fixed] until engine_remove_model unregisters it (users and
                            * its runner's end keep it valid for readers outside the lock) */
    /* an adapter (engine_add_adapter): its base [fixed], NULL for a model. An
     * adapter has its own queue, controls and statistics but no runner: its
     * requests run in its base's batches (queue_take takes from the base's
     * queue and its adapters' in arrival order), and the scheduler's view
     * folds it into its base (view_build) */
    struct engine_model *base;
    /* a base's adapters, a list through next_adapter [lock] */
    struct engine_model *adapters, *next_adapter;
    /* a base: the largest rank of its adapters so far, what its batches'
     * contexts are sized for (max_lora_rank); [atomic] written under the
     * lock, read by its runner without it */
    atomic_int lora_rank;
    /* an adapter: its sequences in a batch, each holding it in use
     * (swap_use_begin in queue_take, swap_use_end as it leaves: adapter_unuse)
     * [lock]; removal waits for 0 */
    int seq_uses;
    /* an adapter whose load found no room on its devices, none of the idle
     * adapters there could make it, and nothing was leaving: the view shows
     * its base short of its bytes, for the policy to make room as for a
     * load (sched_loop.c) [lock] */
    bool room_blocked;
    struct engine_req *head, *tail; /* [lock] its queue */
    int queue_len;                  /* [lock] */
    int n_running;        /* [lock] sequences in its batch */
    bool running;         /* [lock] its runner task is posted or running: the scheduler
                           * dispatched a batch (or a removal drops its paused one) */
    bool offload_pending; /* [lock] chosen as a victim, or unloaded, while running; an
                           * adapter unloaded while sequences hold it: no new one joins,
                           * it leaves with the last (adapter_unuse clears it) */
    bool admin_base;      /* [lock] an adapter's admin load started its base's load first */
    bool was_loading;     /* [lock] */
    bool pinned;          /* [lock] */
    bool removed;         /* [lock] engine_remove_model began: no submission, no action */
    atomic_bool removing; /* [atomic] its batch's sequences leave at the next boundary (set
                           * under the lock by engine_remove_model, read by its runner) */
    /* token-level preemption (SCHED_PREEMPT): pause is set under the lock by
     * the scheduler's exec_preempt and read by its runner at each step
     * boundary, where the batch pauses (held) instead of taking the next
     * step; cleared under the lock when the runner has paused (or ended) */
    atomic_bool pause;    /* [atomic] */
    struct runner *run;   /* [fixed] its runner state (runner.c's), with its paused batch */
    int n_paused;         /* [lock] sequences of its paused batch (0: none) */
    double paused_arrival; /* [lock] the earliest arrival among them */
    double batch_start;   /* [lock] when its batch in flight began or resumed */
    uint64_t preemptions, preempt_unloads; /* [lock] batches paused; offloads of a model
                                            * whose batch was paused or pausing */
    int users;            /* [lock] admin callers waiting on it, submissions validating
                           * against its swap_model outside the lock: neither is freed
                           * under them */
    enum admin admin;     /* [lock] an admin request for the scheduler thread */
    int admin_rc;         /* [lock] */
    char admin_msg[160];  /* [lock] */
    double last_used, loaded_at; /* [lock] */
    /* [lock] the share of a whole load its last load copied (sched_model.load_frac) */
    double load_frac;
    double idle_since;           /* [lock] the end of its last batch (time_now()) */
    double keep_alive;           /* [lock] sched_model.keep_alive (NAN: the policy's) */
    uint64_t idle_unloads;       /* [lock] SCHED_UNLOADs carried out */
    int priority;                /* [lock] sched_model.priority */
    double max_queue_wait;       /* [lock] sched_model.max_queue_wait (0: none) */
    double min_resident;         /* [lock] sched_model.min_resident (0: none) */
    struct forecast arrivals;    /* [lock] */
    /* device memory for its batches: the largest batch it may run (max_batch
     * sequences of the longest prompt and answer submitted so far), held
     * free for it while it is resident; what its batch in flight has
     * allocated of it (engine lock) */
    int max_batch; /* [lock] sequences per batch: the engine's, or less */
    /* [lock] the longest prompt and max_tokens submitted so far: a batch of
     * them needs longest_prompt + longest_out positions (every prompt is
     * left-padded to the longest, so a short prompt's long answer starts
     * after the longest prompt) */
    int longest_prompt, longest_out;
    bool decodes; /* [lock] some request asked for more than one token */
    bool warned_nonfinite; /* [runner] its logits were NaN or Inf once */
    uint64_t reserve[SCHED_MAX_DEVICES], batch_bytes[SCHED_MAX_DEVICES]; /* [lock] */
    bool mem_wait; /* [lock] its batch did not fit at all: not served until memory is freed */
    /* [lock] -1, or the device on which its batch found enough free bytes
     * but none in one block: the scheduler offloads an idle model there
     * (sched_loop.c: defrag_batches, swap_compact, as for a load) before it
     * is served again; frag_none: the last such step found no model to
     * offload, so the next failure is the batch's own error */
    int frag_device;
    bool frag_none;
    /* [lock] partial residency: the rest of its reserve per device, freed
     * in the view's terms when a trim made it stop being resident, not yet
     * counted in what a trim returned (exec_trim); view_build clears it, as
     * a fresh view counts that memory free */
    uint64_t trim_credit[SCHED_MAX_DEVICES];
    /* statistics (engine lock) */
    uint64_t loads, evictions, unloads, bytes_loaded, batches;       /* [lock] */
    uint64_t load_bytes; /* [lock] what its load in progress copies (for on_move) */
    uint64_t trims, bytes_trimmed;                                   /* [lock] */
    uint64_t submitted, ok, failed, cancelled, timed_out, rejected;  /* [lock] */
    double load_s, compute_s;                                        /* [lock] */
    /* [lock] the real tokens its router chose each expert of each layer
     * for, (n_layers, experts) row-major, over its batches (runner.c adds
     * each step's, read from the batch's contexts on its thread); NULL
     * until its first batch with experts (runner.c allocates it, runner_free
     * frees it) */
    uint64_t *expert_tokens;
    int expert_layers, experts;
    struct hist latency, ttft, load;                                 /* [lock] */
};

enum { RUNNER_APART_POOLS = 16 };

struct engine {
    /* every [lock] field here, in the emodels and in the queued requests;
     * what is done and never done under it: the head of this file */
    pthread_mutex_t lock;
    pthread_cond_t wake;   /* the scheduler's: something changed */
    pthread_cond_t idle;   /* every request completed */
    pthread_cond_t admin;  /* an admin request was carried out; a runner task ended */
    struct swap_manager *mgr;          /* [fixed] */
    struct workers *w;                 /* [fixed] */
    struct workq runners;              /* [fixed] the runner pool (runner.c) */
    /* the runner pools of the models with shards on other processes, one
     * per set of other processes spanned (runner.c): key [lock], started
     * by the first model of its set (runner_create) and then [fixed]; past
     * RUNNER_APART_POOLS sets the last pool is shared */
    struct runner_pool {
        uint64_t key; /* bit p: a shard on process p (mod 64) */
        struct workq q;
    } runners_apart[RUNNER_APART_POOLS];
    int n_runners_apart;               /* [lock] */
    const struct sched_policy *policy; /* [fixed] */
    struct engine_config cfg;          /* [fixed] */
    struct engine_model **models;      /* [lock] (cap) by id; NULL once removed */
    int n_ids, cap, n_live; /* [lock] */
    pthread_t sched_tid;    /* [fixed] */
    bool sched_started, stop; /* sched_started [fixed]; stop [lock] */
    uint64_t outstanding;     /* [lock] accepted requests whose on_done has not returned */
    int n_queued_deadlines;   /* [lock] queued requests with a deadline */
    struct engine_req *finished, *finished_tail; /* [lock] completed in a queue: on_done
                                                  * pending */
    struct engine_stats stats; /* [lock] */
    double load_s;  /* [lock] the latest load's time, for the policy's forecasts */
    double *step_s; /* [fixed] pointer; [lock] entries: [b]: a first step's time for b
                     * requests (moving average; 0: none yet) */
    double wake_at; /* [lock] a policy's SCHED_WAKE, on the time_now() clock */
    int batches_running; /* [lock] runners holding a batch's device memory */
};

/* ---- the calls between the files; "lock held": the caller holds the
 * engine lock; "no lock": the caller must not ---- */

/* registry.c: the registry, admin calls, statistics */
struct engine_model *model_get(struct engine *e, int id); /* lock held; NULL: unknown, removed */
/* The model p names, by name or id, or NULL with ERR_NOT_FOUND's message (lock held). */
struct engine_model *model_named(struct engine *e, const struct engine_request_params *p);
void model_unuse(struct engine_model *m); /* drops a users++ (lock held) */

/* request.c: request handles */
void req_account(struct engine *e, struct engine_model *m, struct engine_req *r); /* lock held */
void req_set_status(struct engine_req *r, int status, const char *why); /* [done] fields */
/* Completes a request its runner ran (the runner thread, no lock). */
void req_finish_running(struct engine_model *m, struct engine_req *r, int status, const char *why);
/* on_done, done, the engine's reference dropped (an engine thread, no lock). */
void req_complete(struct engine *e, struct engine_req *r);

/* queue.c: per-model queues and the batch rule (lock held) */
void queue_push(struct engine_model *m, struct engine_req *r);
/* Out of its queue with a final status, onto the finished list for the
 * scheduler thread's on_done. */
void queue_fail(struct engine_model *m, struct engine_req *r, int status, const char *why);
/* Up to n requests for m's runner (PH_RUNNING) by sched_batch_joins; expired
 * ones are failed instead. From m's queue and its adapters' (each request
 * stays its own model's: r->m), in arrival order, those of an adapter only
 * while it is on its devices (RES_ON_DEVICE), its rank within m's lora_rank
 * (queue_take_ranked: within max_rank), each taken into use (seq_uses). */
int queue_take(struct engine_model *m, struct engine_req **out, int n, bool same_params);
/* Taken requests back to the head of their queues, in order; cancelled ones
 * to *cancelled; the adapters of those given back to *unuse (the caller's
 * adapter_unuse for each, once the lock is let go). */
void queue_give_back(struct engine_model *m, struct engine_req **r, int n,
                     struct engine_req **cancelled, int *n_cancelled, struct engine_model **unuse,
                     int *n_unuse);
/* A request of an adapter that leaves a batch, or goes back to its queue,
 * lets go of the adapter (swap_use_end, then seq_uses; no lock: it takes
 * it). Nothing for a model's. */
void adapter_unuse(struct engine_model *a);
/* The adapter of base m (of rank max_rank at most) that waits for room on
 * its devices past its bound: not on them, its oldest request older than
 * its max_queue_wait (SCHED_PREEMPT_WAIT_S when none is set) at now; the
 * oldest such, or NULL (lock held). While one is, requests of m's other
 * adapters (not pinned) that arrived after its oldest do not join m's batch
 * (queue_peek), and those adapters, once no sequence holds them, may leave
 * for it though requests wait for them (sched_loop.c: adapter_victim). */
struct engine_model *adapter_starving(struct engine_model *m, double now, int max_rank);
/* The request queue_take_ranked would take next, or NULL (lock held). */
struct engine_req *queue_peek(struct engine_model *m, int max_rank);
/* As queue_take, taking adapters' requests of rank max_rank at most. */
int queue_take_ranked(struct engine_model *m, struct engine_req **out, int n, bool same_params,
                      int max_rank);

/* reserve.c: memory reserves and batch shapes */
void reserve_grow(struct engine *e, struct engine_model *m, int n_prompt,
                  int max_tokens); /* lock held */
/* Every model's reserve again, beside the pinned models (lock held). */
void reserves_refit(struct engine *e);
/* Of device d, a batch of one request of n_prompt + max_tokens of model sm,
 * with room for adapters of rank lora_rank (0: none) (UINT64_MAX: none can
 * be had; no lock needed). */
uint64_t request_batch_bytes(struct engine *e, struct swap_model *sm, int n_prompt, int max_tokens,
                             int lora_rank, int d);
/* ERR_INVALID with the bytes when a batch of this request can never fit (no lock). */
int request_fits_ever(struct engine *e, struct swap_model *sm, int n_prompt, int max_tokens);
void mem_wait_clear(struct engine *e); /* lock held */
/* The runner's batch of the first n requests, halved until it fits; returns
 * its size (0: nothing to run). The runner thread, no lock (it takes it). */
int batch_alloc(struct engine_model *m, struct engine_req **first, int n, struct group_exec **gb,
                int *max_prompt);
void batch_release(struct engine_model *m, struct group_exec *gb); /* no lock (it takes it) */

/* runner.c: the batch runner */
int runner_pool_size(const struct engine *e); /* the pool's threads: devices + 1 */
/* Starts e->runners (engine_create, before any model); ERR_NOMEM when a
 * thread cannot start. */
int runner_pool_start(struct engine *e);
/* m->run for m (e, id, sm set), sized for the engine's max_batch, on the
 * pool of the processes m spans (started here for the first model of that
 * set; lock held): ERR_NOMEM naming the model when it cannot be had (the
 * add fails). */
int runner_create(struct engine_model *m);
void runner_free(struct engine_model *m); /* m->run, which holds no paused batch; NULL-safe */
/* Posts m's task for the serve the scheduler dispatched: m->running set,
 * swap_use_begin taken (lock held). */
void runner_serve(struct engine_model *m);
/* When m holds a paused batch and no task: posts the task that drops it (as
 * removed, or cancelled), sets m->running until it has (lock held). Returns
 * whether it did. */
bool runner_drop_held(struct engine_model *m);

/* sched_loop.c: the scheduler thread */
void load_check(struct engine *e, struct engine_model *m, bool loading); /* lock held */
/* The bytes of m's weights on its devices now (lock held). */
uint64_t model_held_bytes(struct engine *e, const struct engine_model *m);
/* Tells cfg.on_move, if any, that m left or leaves its devices (kind) for
 * for_model (NULL: none), holding bytes there when told to (lock held). */
void move_leave(struct engine *e, struct engine_model *m, enum engine_move_kind kind,
                const struct engine_model *for_model, bool deferred, uint64_t bytes);
void *sched_main(void *arg);    /* the thread of engine arg */
void engine_on_swap(void *ctx); /* the swap manager's listener (ctx: the engine; no lock) */

#endif
