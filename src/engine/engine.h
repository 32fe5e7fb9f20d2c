/* The multi-model serving engine: a live registry of models, per-model
 * queues, a batcher, and an event-driven scheduler that decides which model
 * to serve and which to swap, by a pluggable policy (sched.h).
 *
 *   engine_submit(params) -> a request handle, queued on its model (bounded:
 *   a full queue is an immediate ERR_BUSY, never a hang)
 *   scheduler thread: wakes on submissions, finished batches, finished
 *   swaps, admin calls, queued deadlines and the times a policy asks for
 *   (never polls); asks the policy for actions: start a load (evicting named
 *   victims, deferred for those with a batch in flight), or dispatch a batch
 *   of a resident model; carries out admin loads and unloads; completes
 *   requests that leave a queue without running (cancelled, timed out, model
 *   removed)
 *   runner pool (one thread per device plus one, however many models): a
 *   dispatched batch runs as the model's tasks on it, one step each, the
 *   models served at once taking turns: prefill, then decode steps on the
 *   device workers; sequences that finish, are cancelled or pass their
 *   deadline leave at step boundaries and waiting requests of the same model
 *   join the freed slots (continuous batching); every request samples with
 *   its own parameters and generator; a paused batch gives its thread back
 *
 * Threads and callbacks (who calls what):
 * - on_token(req, id, ctx): on a runner thread (the pool's), once per generated
 *   token, in order, between two steps of the batch. It holds up every
 *   sequence of the batch while it runs, and a thread of the runner pool
 *   that other models' steps take turns on: it must not block, must not take a
 *   lock another thread holds for long, and must not call into the engine
 *   except engine_cancel(), engine_req_release() and the engine_req_*
 *   accessors. A consumer that may be slow copies the token into its own
 *   queue and returns.
 * - on_done(req, ctx): exactly once per request engine_submit accepted, on an
 *   engine thread (a runner thread, or the scheduler thread for a
 *   request that never ran, where it holds up scheduling while it runs),
 *   never on the thread calling into the engine and never under an engine
 *   lock. Same rules as on_token. It may run before engine_submit has
 *   returned; the engine's reference keeps the handle valid until it returns.
 * - Every other function may be called from any thread that is not an engine
 *   thread (not from a callback), except where it says otherwise.
 *
 * Locks: one engine lock guards the registry, the queues, every model's
 * flags and statistics, the admin requests and the engine's counters. It is
 * never held across a forward, a callback, a thread join, a wait on another
 * thread, or a copy: the swap manager calls made under it (swap_use_begin,
 * swap_offload, swap_load, swap_compact, swap_trim, swap_residency) only take the swap
 * manager's lock, which nests inside it (the swap manager calls its listener
 * outside its own lock), and start copies without waiting for them (a model
 * still copying back is not loaded until that copy's end wakes the
 * scheduler, since swap_load would wait for it). A request's phase and
 * reference count are atomics, taken without a lock; its results are
 * written by the one thread that completes it, before it is marked done.
 */
#ifndef SHARDSWAP_ENGINE_ENGINE_H
#define SHARDSWAP_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/workers.h"
#include "model/sampler.h"
#include "swap/swap.h"

struct engine;
struct engine_req; /* a request handle (opaque) */
struct engine_model_stats; /* below */
struct sched_carried;      /* sched/sched.h */
struct engine_move;        /* below */

struct engine_config {
    const char *policy;   /* sched_policy_find() name; NULL = the default */
    int max_batch;        /* sequences per batch (default 8) */
    int queue_cap;        /* waiting requests per model (default 1024) */
    int max_loaded;       /* for policies that count models (computron); 0 = unlimited */
    /* start a batch on a model whose layers are still arriving: worth it
     * when copies take no compute (GPU copy engines, an emulated link), not
     * when a CPU core does the copy (measured slower on 2 cores) */
    bool overlap_loads;
    /* a request that cannot run while the pinned models stay on its
     * devices (its model's weights and a batch of it alone do not fit what
     * they leave) waits for an unpin (true), or fails at once with ERR_BUSY
     * saying so (false: what a server wants, an answer) */
    bool wait_for_unpin;
    /* optional: told of each operation the policy's actions carried out
     * (sched.h's sched_carried: a batch, a load, an offload and why), its
     * model the engine's id. On the scheduler thread under the engine lock:
     * it must not block or call into the engine. For a trace, or a test
     * holding the engine's decisions against the simulator's. */
    void (*on_sched_op)(void *ctx, const struct sched_carried *op);
    void *sched_op_ctx;
    /* optional: told of each change of a model's residency (engine_move
     * below), for a log. Under the engine lock, on the scheduler thread or
     * on a thread reading a model's statistics (which may notice a load's
     * end first): it may write a line and nothing more (no blocking, no
     * lock, no call into the engine). */
    void (*on_move)(void *ctx, const struct engine_move *mv);
    void *move_ctx;
};

/* What happened to a model's residency, for engine_config.on_move. */
enum engine_move_kind {
    ENGINE_MOVE_LOADED,      /* its load completed: bytes copied in seconds */
    ENGINE_MOVE_LOAD_FAILED, /* its load failed (why): it left its devices again */
    ENGINE_MOVE_EVICTED,     /* it leaves to make room for for_model */
    ENGINE_MOVE_PREEMPTED,   /* likewise, its batch paused (its KV caches stay) */
    ENGINE_MOVE_TRIMMED,     /* it gave up its last layers on device for for_model */
    ENGINE_MOVE_IDLE,        /* it leaves after seconds idle, past its keep_alive */
    ENGINE_MOVE_UNLOADED,    /* an admin unloaded it */
};
struct engine_move {
    enum engine_move_kind kind;
    const char *model;     /* its name */
    const char *for_model; /* EVICTED, PREEMPTED, TRIMMED: the model it makes room for */
    int device;            /* TRIMMED: where it gave up layers; else -1 */
    /* LOADED: the bytes copied; TRIMMED: the bytes given up; otherwise the
     * bytes of its weights it held on its devices when it was told to leave */
    uint64_t bytes;
    /* LOADED: the load's time; IDLE: how long it was idle; EVICTED,
     * PREEMPTED, UNLOADED: how long since its last load began */
    double seconds;
    double keep_alive; /* IDLE: its keep_alive (NAN: the policy's own) */
    bool deferred;     /* it leaves at the end of its batch in flight */
    const char *why;   /* LOAD_FAILED: the message */
};

/* mgr and w stay the caller's and must outlive the engine. Starts the
 * scheduler thread. */
int engine_create(struct swap_manager *mgr, struct workers *w, const struct engine_config *cfg,
                  struct engine **out);
/* Waits until every submitted request has completed (on_done returned) and
 * no batch is in flight (a batch ends just after its last request's
 * on_done: its model is then idle, and a keep-alive counts from there). */
void engine_drain(struct engine *e);
/* Drains, then stops the threads and frees the engine. NULL-safe. Nothing
 * else may be called on e meanwhile. */
void engine_destroy(struct engine *e);

/* ---- the model registry (admin; any time, also while serving) ---- */

/* Starts serving a model registered with mgr. The engine takes the
 * registration over: engine_remove_model unregisters it (swap_unregister),
 * and the model pointer is invalid from then on; until then the caller may
 * keep reading it (swap.h's accessors, swap_residency, swap_wait_loaded) but
 * must not hold it in use (swap_use_begin) or move it itself. A model still
 * served at engine_destroy stays registered until swap_manager_destroy; on
 * an error it stays the caller's. Returns its id (>= 0; ids are never
 * reused, so a checkpoint removed and registered and added again gets a new
 * one) or an error: ERR_INVALID when a model of the same name is served
 * already, or SCHED_MAX_MODELS are; ERR_NOMEM naming the model when its
 * runner state (a batch's first requests, its paused batch) cannot be
 * allocated. It starts no thread. Its pinned flag starts as
 * swap_model_pinned(model). */
int engine_add_model(struct engine *e, struct swap_model *model);
/* Serves adapter (swap_register_adapter's, over a model this engine serves):
 * requests naming it run in its base's batches with its weights added. The
 * engine takes the registration over as engine_add_model does. Returns its
 * id, or ERR_INVALID (its base is not served here, the name is taken).
 * engine_remove_model of an adapter: its queued requests fail as a model's
 * do ("model X was removed"), its sequences in a batch leave at the next
 * boundary, it is offloaded and unregistered; of a base that still has
 * adapters: ERR_BUSY naming one (remove the adapters first). */
int engine_add_adapter(struct engine *e, struct swap_model *adapter);
/* The id of adapter id's base, -1 when id is a model, ERR_NOT_FOUND. */
int engine_model_base(struct engine *e, int id);
/* The registration model id is served with (engine_add_model's or
 * engine_add_adapter's), NULL when id is not served; valid until
 * engine_remove_model(id) returns. */
struct swap_model *engine_model_swap(struct engine *e, int id);
/* The id of the model served under name, or ERR_NOT_FOUND. */
int engine_find_model(struct engine *e, const char *name);
/* The ids of the models served, ascending: fills up to max of them into ids
 * and returns how many there are (which may exceed max). */
int engine_list_models(struct engine *e, int *ids, int max);
/* Stops serving model id: its queued requests complete at once with
 * ERR_NOT_FOUND ("model X was removed"), the sequences of its batch in flight
 * leave at the next step boundary with the same status, then its runner
 * stops, the model is offloaded from its devices (waiting for a load in
 * progress to end first) and unregistered: its host copy returns to the
 * host budget and its checkpoint is unmapped. Returns once that is done;
 * the swap_model it was added with is invalid then. When last is not NULL
 * it receives the model's statistics as they stand at the end (every
 * request of it completed), with removal_unloads 1 when the removal took it
 * off its devices (it was resident or loading), else 0: what a caller that
 * keeps counting a removed model's departures needs, since
 * engine_model_stats knows it no more. ERR_NOT_FOUND when id is not served
 * (*last untouched). */
int engine_remove_model(struct engine *e, int id, struct engine_model_stats *last);
/* Sequences one batch of model id takes: 1 ..engine_config.max_batch (its
 * default). Its device memory reserve follows. */
int engine_set_max_batch(struct engine *e, int id, int max_batch);
/* How long model id stays resident once idle (nothing queued, no batch in
 * flight), counted from the end of its last batch: seconds >= 0 (0: it
 * leaves as soon as it is idle), INFINITY (never) or NAN (the policy's own:
 * lru's 300 s, never for the others; the default). Reading its state
 * (engine_model_stats, engine_list_models) is not activity. swapwise,
 * clairvoyant and lru honour it; computron and fifo ignore it. ERR_INVALID
 * for a negative number, ERR_NOT_FOUND when id is not served. */
int engine_set_keep_alive(struct engine *e, int id, double seconds);
/* The order in which waiting models get their loads and batches under
 * swapwise, clairvoyant and lru (computron and fifo keep arrival order): a
 * model whose oldest request has waited longer than max_queue_wait seconds
 * (> 0; 0, the default: no bound) goes before those that have not, then the
 * higher priority (-ENGINE_PRIORITY_MAX..ENGINE_PRIORITY_MAX, default 0), then
 * the older request. ERR_INVALID out of range, ERR_NOT_FOUND when id is not
 * served. */
#define ENGINE_PRIORITY_MAX 1000
int engine_set_priority(struct engine *e, int id, int priority, double max_queue_wait);
/* For this many seconds after a load of model id starts, swapwise,
 * clairvoyant and lru evict it for another model only when no other model
 * can make the room, and never to prefetch one (0, the default: no such
 * time). ERR_INVALID when negative or not finite, ERR_NOT_FOUND when id is
 * not served. */
int engine_set_min_resident(struct engine *e, int id, double seconds);
/* A pinned model is never chosen as a victim to make room for another.
 * Pinning does not load it (engine_load_model does). */
int engine_pin_model(struct engine *e, int id, bool pinned);
/* Whether model id can ever run beside the models pinned now (the others
 * pinned, when it is): on every device of it, their weights and batch
 * reserves (a batch of one sequence of one position at the least) plus its
 * own weights and such a batch within the budget (of an adapter: its base's
 * weights, its own and such a batch at its rank, beside the pinned models
 * other than its base). ERR_NOMEM naming the
 * pinned models, the model, the device and the bytes when not (an admin's
 * add is refused for it, as the config check at start refuses such a
 * pinned set); ERR_NOT_FOUND when id is not served. */
int engine_check_pinned_room(struct engine *e, int id);
/* Starts loading the model onto its devices now, through the scheduler
 * thread, evicting nothing: ERR_BUSY when it does not fit the devices' free
 * memory now (or that memory is not in one piece). Returns once the load is
 * under way (or the model was resident already); swap_wait_loaded() waits
 * for its end. Of an adapter whose base is not on its devices: the base's
 * load first (evicting nothing), then, once it is there, the adapter's; a
 * refusal of either names the adapter and its base. */
int engine_load_model(struct engine *e, int id);
/* Offloads the model from its devices, through the scheduler thread: at once
 * when idle, at the end of its batch in flight (which takes no more joiners),
 * or at the end of a load in progress. Its queued requests stay queued, and
 * the model is loaded again on demand when the policy serves them. Returns
 * once the offload has started or been deferred. ERR_BUSY when it is pinned.
 * An adapter leaves (its base stays) at once when no sequence of its base's
 * batch holds it, else with the last of them, no new one of it joining
 * meanwhile. */
int engine_unload_model(struct engine *e, int id);

/* The shape of the execution context of a batch of n sequences whose
 * longest prompt is max_prompt and longest prompt + max_tokens is seq (a
 * decoding batch keeps room for requests joining later), for a model of
 * max_pos positions: what the engine allocates on the model's devices for
 * the batch (group_exec_bytes, swap_layout_bytes size it). */
struct model_exec_shape engine_batch_shape(int max_pos, int n, int max_prompt, int seq,
                                         bool decodes);

/* ---- requests ---- */

struct engine_request_params {
    const char *model_name; /* the model by name; NULL: by id */
    int model;              /* the id engine_add_model returned (when model_name is NULL) */
    const int32_t *prompt;  /* copied by engine_submit */
    int n_prompt;
    int max_tokens;         /* >= 1 */
    struct sampler_params sampling;
    /* the request completes with ERR_TIMEOUT when it has not completed by
     * then, queued or running (a running one leaves at its next step
     * boundary, keeping the tokens it has); both 0: no deadline; both set:
     * the earlier */
    double deadline;  /* absolute, on the time_now() clock */
    double timeout_s; /* relative to the submission */
    void (*on_token)(struct engine_req *r, int32_t token, void *ctx); /* may be NULL */
    void (*on_done)(struct engine_req *r, void *ctx);                 /* may be NULL */
    void *ctx; /* the caller's, passed to both */
};

/* Validates p (model, prompt length against the model's positions, token ids
 * against its vocabulary, max_tokens, sampling parameters), copies the prompt
 * and queues the request. On success the request completes exactly once
 * (on_done); *out, when out is not NULL, is the caller's reference to it,
 * released with engine_req_release (the engine holds its own until on_done
 * has returned). Errors: ERR_INVALID, ERR_NOT_FOUND (no such model, or it was
 * removed), ERR_BUSY when the model's queue is full; on_done is then not
 * called and *out is NULL. */
int engine_submit(struct engine *e, const struct engine_request_params *p,
                  struct engine_req **out);
/* Cancels r (a handle the caller holds, or the one a callback got): a queued
 * request leaves its queue at once, a running one leaves its batch at the
 * next step boundary (its slot and KV positions go to a waiting request);
 * either completes with ERR_CANCELLED, keeping the tokens it has (a running
 * one also when it would have finished at that step). Returns 0 when r will
 * complete as cancelled (also when cancelled twice before it completed),
 * ERR_INVALID when it has completed, or is completing, already. Also from
 * on_token and on_done. */
int engine_cancel(struct engine *e, struct engine_req *r);
/* Ends r as engine_cancel does, but a running request then completes ok
 * (status 0, counted and timed as such) with the tokens it has: for a
 * caller that met its own end condition (a stop string) in the output. A
 * queued one is cancelled. Same returns and threads as engine_cancel. */
int engine_stop(struct engine *e, struct engine_req *r);
/* Drops the caller's reference; the handle is freed once the engine's is
 * dropped too. NULL-safe. Also from callbacks. */
void engine_req_release(struct engine_req *r);

/* Accessors: any thread holding a reference, and callbacks. Results (status,
 * error, output, timings) are final inside on_done and once
 * engine_req_done() is true; inside on_token, output holds the tokens so far. */
bool engine_req_done(const struct engine_req *r); /* true once on_done has returned */
/* Blocks until r has completed and its on_done has returned; returns its
 * status. Never from a callback. */
int engine_req_wait(struct engine_req *r);
/* 0, or ERR_CANCELLED, ERR_TIMEOUT, ERR_NOT_FOUND (model removed), ERR_BUSY
 * (its model's weights and a batch of it alone cannot fit beside the pinned
 * models on its devices, unless engine_config.wait_for_unpin), or the error that failed its batch (message in
 * engine_req_error). */
int engine_req_status(const struct engine_req *r);
const char *engine_req_error(const struct engine_req *r); /* "" when status is 0 */
/* The generated tokens (EOS not included); *n their number. Owned by r. */
const int32_t *engine_req_output(const struct engine_req *r, int *n);
void *engine_req_ctx(const struct engine_req *r);
int engine_req_model(const struct engine_req *r); /* the model's id */

struct engine_req_timings {
    double t_arrival, t_start, t_first_token, t_done; /* time_now() clock; 0: not reached */
    int batch_size;    /* sequences in its batch at its first step */
    int slot;          /* its sequence slot in that batch */
    uint64_t batch_id; /* which batch it ran in (1, 2, ... per engine; 0: none) */
};
void engine_req_timings(const struct engine_req *r, struct engine_req_timings *t);

/* ---- statistics: readable at any time, from any thread ---- */

struct engine_stats {
    uint64_t submitted, completed, rejected, batches, loads, evictions;
    uint64_t trims; /* victims of trimming loads that gave up layers (swap_trim) */
    uint64_t ok, failed, cancelled, timed_out; /* completed, by outcome */
    double swap_s;        /* summed load times (request of a load -> on device) */
    double compute_s;     /* summed batch run times (counted as batches run) */
    /* loads of adapters, the bytes they copied and their summed times
     * (counted apart: loads and swap_s are the models' alone) */
    uint64_t adapter_loads, adapter_bytes_loaded;
    double adapter_load_s;
};
void engine_get_stats(struct engine *e, struct engine_stats *st);

/* A latency summary over a fixed-bucket histogram: 8 buckets per doubling
 * from 1 us, so percentiles are within 9% (the bucket's upper edge, capped
 * at the maximum); mean and max are exact. */
struct engine_latency {
    uint64_t n;
    double mean, p50, p90, p99, max; /* seconds; 0 when n == 0 */
};

/* A Prometheus histogram: how many observations were <= each of the fixed
 * upper bounds engine_hist_le[] (cumulative, seconds), their count and sum. */
#define ENGINE_HIST_LE 14
extern const double engine_hist_le[ENGINE_HIST_LE]; /* 0.005 .. 120 s */
struct engine_hist {
    uint64_t le[ENGINE_HIST_LE];
    uint64_t count;
    double sum;
};

#define ENGINE_MAX_SHARDS 64

struct engine_model_stats {
    int id;
    char name[64];
    int base;               /* an adapter's base's id; -1 for a model */
    bool pinned;
    int queue_len;          /* waiting requests */
    int running;            /* sequences in its batch in flight */
    enum residency residency;
    int n_shards;           /* tp * pp; shards beyond ENGINE_MAX_SHARDS are not listed */
    struct {
        int device;
        uint64_t bytes;        /* its device bytes */
        int n_blobs;           /* embeddings, layers, ... (the units a load moves) */
        int blobs_ready;       /* of which on the device and ready now */
    } shards[ENGINE_MAX_SHARDS];
    uint64_t loads, evictions, unloads; /* evictions: by the policy; unloads: by the admin */
    uint64_t idle_unloads;  /* by the policy, idle past its keep-alive */
    /* by the policy, as the victim of a load while its batch was paused (or
     * pausing) by a SCHED_PREEMPT; preemptions: its batches paused */
    uint64_t preempt_unloads, preemptions;
    int paused;             /* sequences of its paused batch (of running) */
    uint64_t removal_unloads; /* by engine_remove_model: 0 while served; its last stats say */
    double keep_alive;      /* engine_set_keep_alive's (NAN: the policy's own) */
    int priority;           /* engine_set_priority's */
    double max_queue_wait;  /* engine_set_priority's (0: no bound) */
    double min_resident;    /* engine_set_min_resident's (0: none) */
    uint64_t bytes_loaded;  /* host -> device, over its loads (a partly resident one's: the
                             * missing blobs only) */
    /* as the victim of a trimming load (partial residency): times it gave
     * up its last layers on a device, and the device bytes they held */
    uint64_t trims, bytes_trimmed;
    double load_s;          /* summed load times */
    double compute_s;       /* summed batch run times */
    uint64_t batches;
    /* requests by outcome: submitted = ok + failed + cancelled + timed_out
     * + those still queued or running; rejected were refused (queue full) */
    uint64_t submitted, ok, failed, cancelled, timed_out, rejected;
    struct engine_latency latency; /* arrival -> done, of ok requests */
    struct engine_latency ttft;    /* arrival -> first token, of ok requests */
    /* the same as Prometheus histograms, and the loads' durations (request
     * of a load -> every shard on its device) */
    struct engine_hist latency_hist, ttft_hist, load_hist;
};
/* Fills *out for model id; ERR_NOT_FOUND when it is not served. */
int engine_model_stats(struct engine *e, int id, struct engine_model_stats *out);
/* The real tokens (prompt and generated, not padding) the router of model
 * id chose each expert of each layer for, over its batches so far (each a
 * token's top-k experts, so a layer's row sums to top-k x its tokens):
 * *layers and *experts give the shape (0 experts: a model without experts,
 * or none of its batches ran yet), and when cap >= layers x experts the
 * counts are copied into out, row-major (else out is untouched: ask again
 * with room). Counted on this process: a pipeline stage whose shards are
 * all on other processes (mpirun) counts nothing here, its rows stay 0.
 * Counted as each step ends. ERR_NOT_FOUND when id is not served. */
int engine_model_expert_tokens(struct engine *e, int id, uint64_t *out, size_t cap, int *layers,
                               int *experts);

#endif
