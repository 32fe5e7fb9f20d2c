/* Scheduling policies: given a snapshot of the engine (queues, residency,
 * batches in flight, memory), what to do next. Pure functions of the
 * snapshot, so tests can feed hand-made scenarios on a simulated clock.
 *
 * The engine calls decide() whenever something changed and carries out the
 * actions it returns, in order (sched_act), then calls again; an empty
 * answer means wait for the next event. The simulator (sim.h) does the same
 * on a simulated clock, through the same sched_act.
 *
 * sched/ depends on nothing of the runtime: each policy is one file
 * (policy_<name>.c, found by name in policy.c), sched_act is act.c, the
 * victim loop every policy chooses through is evict.h, and the engine
 * (engine/) and the simulator (sim.h) are its two executors.
 */
#ifndef SHARDSWAP_SCHED_SCHED_H
#define SHARDSWAP_SCHED_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "sched/forecast.h"

#define SCHED_MAX_DEVICES 64
#define SCHED_MAX_VICTIMS 16
#define SCHED_MAX_MODELS 4096 /* models one engine serves */
#define SCHED_PRIORITY_MAX 1000 /* sched_model.priority's bound either way */

struct sched_model {
    /* waiting requests, a paused batch's sequences included (they wait for
     * a SCHED_SERVE that resumes them), so every policy brings a paused
     * batch's model back as it would a queue */
    int queue_len;
    double head_arrival;  /* arrival time of the oldest waiting request (paused ones too) */
    /* sequences of its batch paused by a SCHED_PREEMPT (0: none): their KV
     * caches stay on the devices while its weights may leave; a SCHED_SERVE
     * of the model, resident again, resumes them at the step where they stopped */
    int paused;
    /* a SCHED_PREEMPT was carried out and its batch, still in flight
     * (running), pauses at its next step boundary */
    bool preempt_pending;
    /* running: when its batch in flight began or resumed; paused: when it
     * paused (its sequences wait from then on) */
    double batch_start;
    /* of bytes, what its batch in flight or paused holds on each device
     * (its KV caches and activations: a paused batch's stay there) */
    uint64_t batch_bytes[SCHED_MAX_DEVICES];
    bool resident;        /* on its devices or loading */
    bool loading;
    bool running;         /* a batch is in flight (the model cannot be evicted) */
    /* its shards span other processes (under mpirun): its batches run on
     * compute lanes of their own (engine/workers.h) and may wait there on a
     * silent process until its heartbeats time out, so a batch of it in
     * flight keeps no other model's batch off its devices (it still waits
     * for theirs to start its own) */
    bool apart;
    bool offload_pending; /* an eviction waits for its batch to end */
    bool pinned;
    double last_used;     /* last dispatch or load, for LRU */
    double loaded_at;     /* when its current residency began */
    /* the end of its last batch, or loaded_at when none ended since: the
     * start of the idle time a keep-alive counts (reads of its state, admin
     * listings and metrics scrapes leave it alone) */
    double idle_since;
    /* seconds idle (from idle_since) after which it leaves by SCHED_UNLOAD:
     * NAN the policy's own (lru: SCHED_LRU_KEEP_ALIVE_S; the others: never),
     * INFINITY never, 0 as soon as it is idle. swapwise, clairvoyant and lru
     * honour it; computron and fifo never unload an idle model. */
    double keep_alive;
    /* when several models wait, a model whose oldest request has waited
     * longer than its max_queue_wait (> 0; 0: no bound) goes first, then the
     * higher priority, then the older request (sched_first_waiting): the
     * order of swapwise's and lru's loads and batches. computron and fifo
     * keep arrival order. */
    int priority; /* -SCHED_PRIORITY_MAX..SCHED_PRIORITY_MAX */
    double max_queue_wait;
    /* seconds from loaded_at during which swapwise, clairvoyant and lru take
     * it as a victim only when no other model can make the room (and never
     * to prefetch another); 0: none. No thrash: a model just loaded gets to
     * serve. */
    double min_resident;
    /* the arrival of its next request not yet queued (INFINITY: none): only
     * the simulator knows it, for the policies marked needs_future; the
     * engine leaves INFINITY */
    double next_arrival;
    struct forecast arrivals; /* its requests so far, to forecast the next */
    double batch_s;       /* expected time of its next batch's first step (0: unknown) */
    /* loading: the share of a whole load the one in progress moves (a
     * partly resident model's reload moves only what is missing: its
     * largest missing share over the devices, which load in parallel);
     * 0: unknown, a whole one. Its expected end is loaded_at + load_s x it. */
    double load_frac;
    /* of memory per device: what it frees when it leaves whole and needs when
     * it comes back from nothing (its weights, and its batches' reserve) */
    uint64_t bytes[SCHED_MAX_DEVICES];
    /* of bytes, what it holds on each device now: bytes[d] while resident
     * (or loading), 0 when gone, and between for a model partly resident
     * (not resident: a SCHED_LOAD with trim took its last layers, and kept
     * its first ones there). A load of it needs bytes - resident_bytes; an
     * eviction of it frees resident_bytes. The policies read a resident
     * model as holding bytes whatever this says (a view that leaves it 0
     * has whole models only). A partly resident model does not count toward
     * max_loaded, may be a victim (its rest leaves) and, idle past its
     * keep_alive, is unloaded as a resident one is. */
    uint64_t resident_bytes[SCHED_MAX_DEVICES];
};

struct sched_view {
    double now;
    int n_models, n_devices;
    const struct sched_model *models;
    uint64_t free_bytes[SCHED_MAX_DEVICES]; /* device budget - used */
    int max_loaded;                         /* 0 = unlimited */
    int max_batch;                          /* requests one batch takes (0: unknown) */
    bool any_loading;
    bool any_running;
    /* the devices copy without taking compute (GPUs' copy engines): a batch
     * may start on a model whose layers are still arriving */
    bool overlap_loads;
    double load_s; /* how long a load takes (the latest measured; 0: none yet) */
};

enum sched_kind {
    SCHED_SERVE, /* dispatch a batch of `model` (resident, not running) */
    SCHED_LOAD,  /* evict `victims` (offload now, or deferred when running), then load `model` */
    SCHED_WAKE,  /* decide again at time `at` even if nothing else happens by then */
    SCHED_UNLOAD, /* `model` leaves its devices (resident, no batch in flight), nothing follows */
    /* `model`'s batch in flight pauses at its next step boundary (token-level
     * preemption): its sequences and their KV caches stay, on its devices,
     * and count as queued (sched_model.paused); a later SCHED_LOAD may take
     * the model as a victim (its weights leave, the caches stay; the unload
     * counts as reason preempted) and a SCHED_SERVE resumes the batch */
    SCHED_PREEMPT,
};

struct sched_action {
    enum sched_kind kind;
    int model;
    int n_victims;
    int victims[SCHED_MAX_VICTIMS];
    /* SCHED_LOAD, partial residency: the victims leave only as far as the
     * load needs. In order, each victim with no batch in flight gives up
     * its last layers on the devices where the load still lacks room
     * (ops->trim), keeping its first ones for its own next load; one that
     * would keep nothing, or has a batch in flight, leaves whole. Need per
     * device: the load's bytes - resident_bytes, less the view's free bytes
     * and what the victims before gave (a victim whose load already fits
     * stays untouched). A victim whose trims fell short keeps what is left
     * and the next one is asked for the rest; when all of them still leave
     * the load short, the trimmed ones leave whole, in order, until it
     * fits. Each trim is told to ops->carried as SCHED_OP_TRIM. Without
     * ops->trim: every victim leaves whole, as without trim. */
    bool trim;
    double at; /* SCHED_WAKE */
};

struct sched_policy {
    const char *name;
    const char *help;
    /* Fills up to max actions; returns how many (0: wait for an event). */
    int (*decide)(const struct sched_view *v, struct sched_action *out, int max);
    /* Computron cut batches at the first request with different sampling
     * parameters; ours mixes them. */
    bool batch_same_params_only;
    /* reads sched_model.next_arrival: only the simulator can run it */
    bool needs_future;
};

/* swapwise-preempt's bound: a waiting model whose oldest request has waited
 * this long (or its own max_queue_wait, when set) preempts a batch that has
 * run at least as long, when the policy's load of it needs that batch's model
 * to leave. */
#define SCHED_PREEMPT_WAIT_S 0.5

/* A policy the engine runs: "swapwise" (the default), "swapwise-preempt",
 * "swapwise-partial", "computron", "lru" or "fifo". NULL and a message when unknown, or when the
 * name is one that needs the future arrivals (sched_policy_find_sim's only). */
const struct sched_policy *sched_policy_find(const char *name);
/* A policy the simulator runs: the engine's, "clairvoyant" and
 * "clairvoyant-partial". NULL and a message when unknown. */
const struct sched_policy *sched_policy_find_sim(const char *name);
const char *sched_policy_names(void);     /* the engine's, "a|b|..." */
const char *sched_policy_names_sim(void); /* the simulator's */
const char *sched_policy_default(void);
/* lru's keep-alive: a resident model idle this long leaves (Ollama's 5 minutes) */
#define SCHED_LRU_KEEP_ALIVE_S 300.0

/* How a batch is formed, one rule for the engine's queues and the
 * simulator's: a batch takes requests from its model's queue head in FIFO
 * order, at most max; with same_params_only (the policy's
 * batch_same_params_only) it stops at the first request whose sampling
 * differs from the first one's. True when the request now at the head joins
 * a batch that already holds `taken`; same_as_first: it samples as the
 * batch's first request (not read when taken is 0). */
bool sched_batch_joins(bool same_params_only, int taken, int max, bool same_as_first);

/* One operation an executor carried out for an action (sched_act): a batch
 * dispatched (or a paused one resumed), a load started, a model sent off its
 * devices, as the victim of a load (SCHED_LOAD: reason evicted, or preempted
 * when its batch is paused or pausing) or by a keep-alive (SCHED_UNLOAD:
 * reason idle), or a batch asked to pause (SCHED_PREEMPT); deferred: it
 * leaves at the end of its batch in flight (or at its pause). */
enum sched_op {
    SCHED_OP_SERVE,
    SCHED_OP_LOAD,
    SCHED_OP_OFFLOAD,
    SCHED_OP_PREEMPT,
    SCHED_OP_TRIM, /* a victim of a SCHED_LOAD with trim gave up its last layers on `device` */
};
struct sched_carried {
    enum sched_op op;
    int model; /* the view's index */
    int device;     /* SCHED_OP_TRIM: where */
    uint64_t bytes; /* SCHED_OP_TRIM: the bytes it gave up there */
    bool idle; /* SCHED_OP_OFFLOAD: a keep-alive's unload (else an eviction) */
    bool preempted; /* SCHED_OP_OFFLOAD: its batch is paused or pausing (not idle) */
    bool deferred;
};

/* What carries out actions: the engine (engine.c, under its lock) and the
 * simulator (sim.c, on its clock). Every slot but carried is required; each acts on the
 * executor's live state, which may have moved on since the view decide()
 * saw (an earlier action of the same answer may have started a batch).
 * Models are view indices. */
struct sched_exec_ops {
    /* a batch of model is in flight now */
    bool (*running)(void *ctx, int model);
    /* dispatches a batch of model (not running); false when it cannot start
     * now (not resident, still loading without overlap, no memory) */
    bool (*serve)(void *ctx, int model);
    /* model leaves its devices (resident, or partly resident: the rest of
     * it goes): now, or with defer when its batch in flight ends. One that may not leave (gone already, a load still arriving
     * with no batch) stays; the load that follows finds whether there is room.
     * True when it leaves or will leave. */
    bool (*offload)(void *ctx, int model, bool defer);
    /* starts model's load (not resident); false when it cannot start now */
    bool (*load)(void *ctx, int model);
    /* asks model's batch in flight (running, not pausing) to pause at its
     * next step boundary, keeping its KV caches; false when it cannot */
    bool (*preempt)(void *ctx, int model);
    /* model's batch is paused, or asked to pause and still in flight */
    bool (*pausing)(void *ctx, int model);
    /* optional (NULL: victims of a trimming load leave whole): model, with
     * no batch in flight and resident or partly resident, gives up its last
     * layers on device (whole layers, last first, never its embeddings and
     * head) until at least `bytes` more are free there, or every layer it
     * has there is gone. A resident model becomes partly resident: memory
     * held for it only while resident (its batches' reserve) leaves too,
     * on every device, each device's share counted in what the first trim
     * asked there gives up. Returns the bytes it gave
     * up there, possibly more than asked (whole layers; 0: none: it cannot
     * now, e.g. a shard another process owns) */
    uint64_t (*trim)(void *ctx, int model, int device, uint64_t bytes);
    /* decide again at `at` even if nothing else happens by then */
    void (*wake)(void *ctx, double at);
    /* optional: told of each operation above that succeeded, as sched_act
     * carried it out (a trace, a test comparing executors) */
    void (*carried)(void *ctx, const struct sched_carried *c);
};

/* Carries out one of the actions decide() returned for view v: SCHED_WAKE
 * asks for a wake-up; SCHED_SERVE dispatches a batch (or resumes the paused
 * one) unless one is in flight; SCHED_PREEMPT asks the batch in flight to
 * pause, unless none is or a pause is already asked for;
 * SCHED_LOAD offloads each victim (deferred to the end of its batch when one
 * is in flight), then starts the load; SCHED_UNLOAD offloads the model
 * (deferred likewise). Each operation that succeeds is told to ops->carried
 * when there is one, in the order carried out. True when something was started,
 * false when the action could not happen now (and for SCHED_WAKE): the
 * caller decides again after its next event. The one place these semantics
 * live; the engine and the simulator differ only in their ops. */
bool sched_act(const struct sched_exec_ops *ops, void *ctx, const struct sched_view *v,
               const struct sched_action *a);

/* The fragmentation step's victim, for a SCHED_LOAD of incoming that the
 * swap manager refused because device's free bytes suffice but no free block
 * holds one of its blobs: the least recently used model with bytes on
 * device that may leave now (resident or partly resident, not loading, no
 * batch in flight, not already leaving, not pinned); -1 when none may. Offloading it lets its
 * blocks join the free memory around them. Every policy uses this one. */
int sched_defrag_victim(const struct sched_view *v, int incoming, int device);

#endif
