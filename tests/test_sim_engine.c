/* The simulator and the engine take the same actions on the same trace.
 *
 * Two cases (TEST(lru), TEST(swapwise_preempt)). The first: a hand-written
 * trace of four models with device room for two, each with
 * its own controls (sched.h's sched_model):
 *   model 0: keep_alive 0.2 s (it leaves its devices once idle that long),
 *            priority 0;
 *   model 1: min_resident 1e6 s (a victim only when no other model makes
 *            the room);
 *   model 2: priority 5;
 *   model 3: pinned (never a victim).
 * It runs through sim_run on the simulated clock and through a real engine
 * on two CPU devices with fixture models, both under lru, and the operations
 * each carried out for the policy's actions (sched_carried: a batch, a load,
 * an offload as a victim or by keep-alive, deferred or not) must be the same
 * sequence, and the one worked out by hand below.
 *
 * The engine runs on the real clock (its view_build reads time_now(), loads
 * and batches take what they take), so it cannot be stepped in lockstep with
 * simulated time. The trace is instead made of phases whose order no timing
 * decides: each phase waits until its requests have completed and its
 * batches ended (engine_drain), and the operations it expects have been
 * carried out (for the keep-alive, until the unload was); the one moment
 * two requests wait together is made by holding a batch in its on_token
 * until both are queued and the scheduler has chosen to evict its model.
 * The controls take values whose effect does not depend on how long
 * anything takes (a min_resident far beyond the test, a keep-alive that is
 * waited for). Nothing here asserts a time.
 *
 * The second (preempt_case below): token-level preemption under
 * swapwise-preempt, a long answer of one model paused for another's request
 * (the pause, the preempted offload, the other model's load and batch, the
 * reload and the resume), the same operations in both, on a trace where
 * none of swapwise's costs (forecast, measured load and batch times)
 * decides anything. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "engine/engine.h"
#include "sched/sched.h"
#include "sched/sim.h"
#include "test.h"

#include "fixture_expect.h"
#include "sim_setup.h"

/* A trace's models and their controls, in the simulator's form and the
 * engine's, and how it is run. */
struct scenario {
    const char *policy;
    int n; /* models */
    const char *const *names;
    const double *keep_alive;
    const int *priority;
    const double *max_queue_wait;
    const double *min_resident;
    const bool *pinned;
    int max_loaded; /* 0: bytes decide */
    int max_batch;
    const int *max_tokens; /* per model: 1 (one-token requests) or a chat answer's length */
    /* the devices hold both models' weights and reserves less half a layer,
     * and the simulator is given the engine's bytes, reserves and layers:
     * each load lacks room for half a layer of the other model */
    bool trim_room;
};

/* ---- lru: keep-alive, priority, min_resident, pin ---- */

#define N 4
static const char *names[N] = {"pre_ln_f32", "decoder_prefix_f32", "post_ln_proj", "no_final_ln"};

/* the controls, per model, in the simulator's form and the engine's */
static const double keep_alive[N] = {0.2, NAN, NAN, NAN};
static const int priority[N] = {0, 0, 5, 0};
static const double max_queue_wait[N] = {0, 0, 0, 0};
static const double min_resident[N] = {0, 1e6, 0, 0};
static const bool pinned[N] = {false, false, false, true};
static const int one_token[N] = {1, 1, 1, 1};
static const struct scenario lru_case = {.policy = "lru",
                                         .n = N,
                                         .names = names,
                                         .keep_alive = keep_alive,
                                         .priority = priority,
                                         .max_queue_wait = max_queue_wait,
                                         .min_resident = min_resident,
                                         .pinned = pinned,
                                         .max_batch = 4,
                                         .max_tokens = one_token};

/* The trace: (phase, model) in order of arrival; the simulator's times. */
struct arrival_at {
    double t;
    int model;
};
static const struct arrival_at trace[] = {
    {0, 0},                          /* 1: 0 loads, serves, and leaves 0.2 s idle */
    {10, 1},                         /* 2: 1 loads (room for two) */
    {20, 2},                         /* 3: 2 loads beside it */
    {30, 3},                         /* 4: 3 needs room: 2 goes, not 1 (min_resident) */
    {40, 1}, {40.02, 0}, {40.03, 2}, /* 5: while 1 runs, 0 then 2 wait: 2 first (priority) */
    {50, 3},                         /* 6: 0 has left by then; 3 (pinned) serves */
};
#define N_ARRIVALS (int)(sizeof(trace) / sizeof(trace[0]))

/* What both must do, worked out from lru's rules: sN a batch of N, lN a
 * load, eN an eviction, uN an unload by keep-alive, d deferred to the end of
 * the batch in flight. Phase 5: 0's load needs room, and the only model that
 * can make it is 1 (3 is pinned), within its min_resident but busy: 1 goes
 * at its batch's end; 2, of higher priority, loads first, serves, is chosen
 * to go at its batch's end for 0, which loads, serves and leaves. Phase 6
 * (the simulator ends with its last request, so 0's unload needs one after
 * it): 3 serves where it stays. */
static const char *expected = "l0 s0 u0 l1 s1 l2 s2 e2 l3 s3 s1 e1d l2 s2 e2d l0 s0 u0 s3";
/* the operations expected by the end of each phase */
static const int phase_ops[] = {3, 5, 7, 10, 18, 19};

/* ---- swapwise-preempt: a long answer paused for another model ----
 * Two models, one resident at a time (max_loaded 1; the bytes would hold
 * both): a's request generates PRE_TOKENS tokens; b's arrives while a's
 * batch runs and may wait PRE_WAIT (its max_queue_wait, far below a's batch).
 * Past it, with nothing loading and no room for b but a's, swapwise-preempt
 * pauses a's batch and loads b with a as the victim: a's weights leave at
 * the pause (reason preempted), its KV caches stay; b loads and gets its
 * batch, and swapwise (its requests waiting from the pause, a's after b's)
 * loads a again with b, now serving, as the victim at its batch's end; a's
 * batch resumes.
 *
 * Why no cost decides anything here: before the pause no load starts while
 * a's batch holds the devices (copies take compute), so swapwise never
 * takes a as a deferred victim; each later decision has one model with
 * work, and every fork is between operations that wait for each other in
 * both orders (a's pause and b's load's end; b's batch's end and a's load's
 * end: a's resume needs both). No forecast (one arrival each), no prefetch
 * (no overlap_loads), no keep-alive (swapwise's own: never), and
 * batches_long, which swaps the victim's last batch for an eviction, sees
 * no ended batch when b's load ends (a's paused; the simulator and the
 * engine both leave idle_since at a pause) and only one model with work
 * afterwards. */
#define PRE_TOKENS 32 /* a's answer (the fixture's context is 64) */
#define PRE_HOLD 4    /* a's batch is held at this token until the pause is asked */
#define PRE_WAIT 1e-3
/* two models' controls at their defaults */
static const double two_nan[2] = {NAN, NAN};
static const int two_zero_i[2] = {0, 0};
static const double two_zero[2] = {0, 0};
static const bool two_false[2] = {false, false};
static const char *pre_names[2] = {"pre_ln_f32", "post_ln_proj"};
static const double pre_max_queue_wait[2] = {0, PRE_WAIT};
static const int pre_tokens[2] = {PRE_TOKENS, 8};
static const struct scenario preempt_case = {.policy = "swapwise-preempt",
                                             .n = 2,
                                             .names = pre_names,
                                             .keep_alive = two_nan,
                                             .priority = two_zero_i,
                                             .max_queue_wait = pre_max_queue_wait,
                                             .min_resident = two_zero,
                                             .pinned = two_false,
                                             .max_loaded = 1,
                                             .max_batch = 1,
                                             .max_tokens = pre_tokens};
/* a at 0 (its 1 s load, then its batch from 1 s to 1.41 s: a prefill of
 * 0.1 s and 31 steps of 0.01 s), b at 1.2 s: the pause is asked at 1.201 s */
static const struct arrival_at pre_trace[] = {{0, 0}, {1.2, 1}};
/* pN a pause asked for; eNp an offload of a paused (or pausing) batch's
 * model, reason preempted */
static const char *pre_expected = "l0 s0 p0 e0pd l1 s1 e1d l0 s0";
#define PRE_OPS 9

/* ---- swapwise-partial: loads that trim their victims ----
 * Two models whose weights and reserves fill the devices but for half a
 * layer: a, then b, then a again, each request alone (drained between).
 * b's load lacks half a layer on each device, so a, idle, is asked for it
 * on each (a trim per device): its batches' reserve leaves, and at least
 * one layer, so that it is no longer resident; it keeps the rest. a's
 * second load needs back only what it gave up, which b, idle, gives
 * likewise. No cost decides anything: one model has work at a time. */
#define TRIM_TOKENS 6
static const char *trim_names[2] = {"pre_ln_f32", "decoder_prefix_f32"};
static const int trim_tokens[2] = {TRIM_TOKENS, TRIM_TOKENS};
static const struct scenario trim_case = {.policy = "swapwise-partial",
                                          .n = 2,
                                          .names = trim_names,
                                          .keep_alive = two_nan,
                                          .priority = two_zero_i,
                                          .max_queue_wait = two_zero,
                                          .min_resident = two_zero,
                                          .pinned = two_false,
                                          .max_batch = 1,
                                          .max_tokens = trim_tokens,
                                          .trim_room = true};
static const struct arrival_at trim_trace[] = {{0, 0}, {10, 1}, {20, 0}};
/* tN:D a trim of model N on device D */
static const char *trim_expected = "l0 s0 t0:0 t0:1 l1 s1 t1:0 t1:1 l0 s0";
static const int trim_phase_ops[] = {2, 6, 10};

/* ---- the operations carried out, from either side ---- */

struct oplog {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int n;
    char s[512];
};

static void oplog_init(struct oplog *l)
{
    memset(l, 0, sizeof(*l));
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->cond, NULL);
}

static void oplog_free(struct oplog *l)
{
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->cond);
}

static void oplog_add(struct oplog *l, const struct sched_carried *op)
{
    const char *k = op->op == SCHED_OP_SERVE     ? "s"
                    : op->op == SCHED_OP_LOAD    ? "l"
                    : op->op == SCHED_OP_PREEMPT ? "p"
                    : op->op == SCHED_OP_TRIM    ? "t"
                    : op->idle                   ? "u"
                                                 : "e";
    pthread_mutex_lock(&l->lock);
    size_t len = strlen(l->s);
    if (op->op == SCHED_OP_TRIM)
        snprintf(l->s + len, sizeof(l->s) - len, "%st%d:%d", len ? " " : "", op->model, op->device);
    else
        snprintf(l->s + len, sizeof(l->s) - len, "%s%s%d%s%s", len ? " " : "", k, op->model,
                 op->preempted ? "p" : "", op->deferred ? "d" : "");
    l->n++;
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
}

/* Waits until l holds n operations; false after 60 s without (a hang
 * guard: the comparison then says what was carried out). */
static bool oplog_wait(struct oplog *l, int n)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    pthread_mutex_lock(&l->lock);
    int rc = 0;
    while (l->n < n && rc == 0)
        rc = pthread_cond_timedwait(&l->cond, &l->lock, &until);
    bool ok = l->n >= n;
    pthread_mutex_unlock(&l->lock);
    return ok;
}

static void sim_op(void *ctx, double now, const struct sched_carried *op)
{
    (void)now;
    oplog_add(ctx, op);
}

/* ---- the rig's sizes, for both ---- */

#define MAX_BATCH 4

/* What the engine's view counts for each model on each device (its weights
 * and the reserve of a batch of its first prompt with its tokens to
 * generate, reserve_grow's: of MAX_BATCH, or with trim_room the scenario's
 * max_batch), the reserve alone, the last layer's blob, and the devices'
 * budget: room for the two largest models (for the lru case never three,
 * checked), or with trim_room both less half the smallest layer. */
struct sizes {
    uint64_t need[N][2], reserve[N][2], layer[N][2];
    int layers;
    uint64_t budget;
};

static void sizes_measure(const struct scenario *sc, struct sizes *z)
{
    memset(z, 0, sizeof(*z));
    static const int both[2] = {0, 1};
    struct placement pl = {.tp = 2, .pp = 1, .devices = both};
    struct swap_config cfg = {.host_budget = 256u << 20};
    struct device *probe[2];
    for (int d = 0; d < 2; d++)
        CHECK(device_open_cpu(d, 64u << 20, &probe[d]) == 0);
    struct swap_manager *pm;
    CHECK(swap_manager_create(probe, 2, &cfg, &pm) == 0);
    uint64_t most_m[N] = {0}, smallest_layer = UINT64_MAX;
    char dir[512];
    struct expect x[3];
    for (int m = 0; m < sc->n; m++) {
        struct swap_model *sm;
        snprintf(dir, sizeof(dir), "%s/%s", FIXTURES, sc->names[m]);
        CHECK(swap_register(pm, sc->names[m], dir, &pl, false, &sm) == 0);
        expect_load(sc->names[m], x);
        int np = x[0].n_prompt, k = sc->max_tokens[m];
        struct model_exec_shape shape =
            engine_batch_shape(swap_model_info(sm)->max_pos,
                               sc->trim_room ? sc->max_batch : MAX_BATCH, np, np + k, k > 1);
        for (int d = 0; d < 2; d++) {
            const struct swap_shard *sh = swap_model_shard(sm, d);
            z->reserve[m][d] = group_exec_bytes(sm, pm, &shape, d);
            z->need[m][d] = swap_model_device_bytes(sm, d) + z->reserve[m][d];
            z->layer[m][d] = swap_shard_blob_bytes(sh, swap_shard_n_blobs(sh) - 1);
            z->layers = swap_shard_n_blobs(sh) - 1;
            most_m[m] = z->need[m][d] > most_m[m] ? z->need[m][d] : most_m[m];
            smallest_layer = z->layer[m][d] < smallest_layer ? z->layer[m][d] : smallest_layer;
        }
    }
    swap_manager_destroy(pm);
    for (int d = 0; d < 2; d++)
        device_close(probe[d]);
    uint64_t b1 = 0, b2 = 0, sum = 0, most = 0;
    for (int m = 0; m < sc->n; m++) {
        sum += most_m[m];
        most = most_m[m] > most ? most_m[m] : most;
        if (most_m[m] > b1)
            b2 = b1, b1 = most_m[m];
        else if (most_m[m] > b2)
            b2 = most_m[m];
    }
    if (sc->trim_room) {
        z->budget = b1 + b2 - smallest_layer / 2;
        return;
    }
    z->budget = b1 + b2 + 4096; /* any two */
    /* never three: the three smallest (all but the largest) exceed it */
    if (sc->n > 2)
        CHECK_MSG(sum - most > z->budget, "three models fit a budget of %llu bytes",
                  (unsigned long long)z->budget);
}

/* ---- the simulator ---- */

/* Runs trace t[0..n) of scenario sc; chat requests (max_tokens > 1) get a
 * prefill of 0.1 s and decode steps of 0.01 s (setup's batch_s, and
 * step_s). */
static void run_sim(const struct scenario *sc, const struct arrival_at *t, int n, struct oplog *log)
{
    uint64_t bytes[2 * N];
    struct sim_config c;
    setup(&c, sc->policy, sc->n, 2, bytes); /* room for two */
    c.max_loaded = sc->max_loaded;          /* 0: bytes decide, as in the engine */
    c.max_batch = sc->max_batch;
    for (int b = 1; b <= SIM_MAX_BATCH; b++)
        c.step_s[b] = 0.01;
    c.keep_alive = sc->keep_alive;
    c.priority = sc->priority;
    c.max_queue_wait = sc->max_queue_wait;
    c.min_resident = sc->min_resident;
    c.pinned = sc->pinned;
    c.on_op = sim_op;
    c.on_op_ctx = log;
    uint64_t kv[2 * N], layer[2 * N];
    if (sc->trim_room) { /* the engine's bytes, reserves, layers and budget */
        struct sizes z;
        sizes_measure(sc, &z);
        for (int m = 0; m < sc->n; m++)
            for (int d = 0; d < 2; d++) {
                bytes[m * 2 + d] = z.need[m][d];
                kv[m * 2 + d] = z.reserve[m][d];
                layer[m * 2 + d] = z.layer[m][d];
            }
        c.budget[0] = c.budget[1] = z.budget;
        c.kv_bytes = kv;
        c.layer_bytes = layer;
        c.layers = z.layers;
    }
    struct sim_request r[16];
    for (int i = 0; i < n; i++) {
        int m = t[i].model, k = sc->max_tokens[m];
        r[i] = (struct sim_request){
            .arrival = t[i].t, .model = m, .n_prompt = 8, .n_output = k > 1 ? k : 0};
    }
    struct sim_stats st;
    CHECK_MSG(sim_run(&c, r, (size_t)n, &st) == 0, "%s", err_msg());
}

/* ---- the engine ---- */

struct job {
    atomic_bool hold;    /* on_token waits while set */
    atomic_bool at_hold; /* on_token has begun waiting (or been called) */
    bool hold_preempt;   /* on_token waits at token PRE_HOLD until a pause was asked */
    int n_tok;
};

static atomic_int done_ok, done_bad;
static atomic_bool preempt_asked; /* a SCHED_OP_PREEMPT was carried out */

/* Spins while held: a test-only breach of on_token's contract, the batch
 * stays in flight. A hold for a pause gives up after 60 s (a hang guard: the
 * comparison then says what was carried out). */
static void on_token(struct engine_req *r, int32_t id, void *ctx)
{
    (void)r;
    (void)id;
    struct job *j = ctx;
    j->n_tok++;
    atomic_store(&j->at_hold, true);
    while (atomic_load(&j->hold))
        ;
    if (!j->hold_preempt || j->n_tok != PRE_HOLD)
        return;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do
        clock_gettime(CLOCK_MONOTONIC, &t);
    while (!atomic_load(&preempt_asked) && t.tv_sec - t0.tv_sec < 60);
}

static void on_done(struct engine_req *r, void *ctx)
{
    (void)ctx;
    atomic_fetch_add(engine_req_status(r) == 0 ? &done_ok : &done_bad, 1);
}

static void engine_op(void *ctx, const struct sched_carried *op)
{
    /* the scheduler thread, under the engine lock: no call back in */
    if (op->op == SCHED_OP_PREEMPT)
        atomic_store(&preempt_asked, true);
    oplog_add(ctx, op);
}

struct rig {
    struct device *devs[2];
    struct swap_manager *mgr;
    struct workers *w;
    struct engine *e;
    struct swap_model *sm[N];
    struct expect x[N][3];
};

/* Devices of sizes_measure's budget; the engine under sc's policy with its
 * controls. */
static void rig_open(struct rig *g, const struct scenario *sc, struct oplog *log)
{
    memset(g, 0, sizeof(*g));
    static const int both[2] = {0, 1};
    struct placement pl = {.tp = 2, .pp = 1, .devices = both};
    struct swap_config cfg = {.host_budget = 256u << 20};
    struct sizes z;
    sizes_measure(sc, &z);
    char dir[512];
    for (int m = 0; m < sc->n; m++)
        expect_load(sc->names[m], g->x[m]);
    for (int d = 0; d < 2; d++)
        CHECK(device_open_cpu(d, z.budget, &g->devs[d]) == 0);
    CHECK(swap_manager_create(g->devs, 2, &cfg, &g->mgr) == 0);
    CHECK(workers_create(g->mgr, &g->w) == 0);
    struct engine_config ec = {.policy = sc->policy,
                               .max_batch = sc->max_batch,
                               .max_loaded = sc->max_loaded,
                               .on_sched_op = engine_op,
                               .sched_op_ctx = log};
    CHECK(engine_create(g->mgr, g->w, &ec, &g->e) == 0);
    for (int m = 0; m < sc->n; m++) {
        snprintf(dir, sizeof(dir), "%s/%s", FIXTURES, sc->names[m]);
        CHECK(swap_register(g->mgr, sc->names[m], dir, &pl, false, &g->sm[m]) == 0);
        swap_model_set_compute(g->sm[m], KERN_COMPUTE_F32);
        CHECK(engine_add_model(g->e, g->sm[m]) == m); /* the simulator's index */
        CHECK(engine_set_keep_alive(g->e, m, sc->keep_alive[m]) == 0);
        CHECK(engine_set_priority(g->e, m, sc->priority[m], sc->max_queue_wait[m]) == 0);
        CHECK(engine_set_min_resident(g->e, m, sc->min_resident[m]) == 0);
        CHECK(engine_pin_model(g->e, m, sc->pinned[m]) == 0);
    }
    atomic_store(&done_ok, 0);
    atomic_store(&done_bad, 0);
    atomic_store(&preempt_asked, false);
}

static void rig_close(struct rig *g)
{
    engine_destroy(g->e);
    workers_destroy(g->w);
    for (int d = 0; d < 2; d++)
        CHECK(device_high_water(g->devs[d]) <= device_budget(g->devs[d]));
    swap_manager_destroy(g->mgr);
    for (int d = 0; d < 2; d++)
        device_close(g->devs[d]);
}

static void submit(struct rig *g, const struct scenario *sc, int m, struct job *j)
{
    const struct expect *x = &g->x[m][0];
    struct engine_request_params p = {.model = m,
                                      .prompt = x->prompt,
                                      .n_prompt = x->n_prompt,
                                      .max_tokens = sc->max_tokens[m],
                                      .sampling = {.temperature = 0, .top_p = 1, .seed = 1},
                                      .on_token = on_token,
                                      .on_done = on_done,
                                      .ctx = j};
    CHECK_MSG(engine_submit(g->e, &p, NULL) == 0, "%s", err_msg());
}

static void check_all_done(int n)
{
    CHECK_MSG(atomic_load(&done_ok) == n && atomic_load(&done_bad) == 0,
              "%d requests ok, %d failed", atomic_load(&done_ok), atomic_load(&done_bad));
}

/* The engine on the lru trace's phases, each waited for (its operations,
 * its requests' completions). */
static void run_engine_lru(struct oplog *log)
{
    struct rig g;
    rig_open(&g, &lru_case, log);
    static struct job jobs[N_ARRIVALS];
    int phase = 0, i = 0;
    for (; i < 4; i++, phase++) { /* phases 1-4: one request each */
        submit(&g, &lru_case, trace[i].model, &jobs[i]);
        engine_drain(g.e);
        if (!oplog_wait(log, phase_ops[phase]))
            break;
    }
    if (i == 4) { /* phase 5: 1's batch held until 0 and 2 wait */
        atomic_store(&jobs[4].hold, true);
        submit(&g, &lru_case, trace[4].model, &jobs[4]);
        while (!atomic_load(&jobs[4].at_hold))
            ;
        submit(&g, &lru_case, trace[5].model, &jobs[5]);
        submit(&g, &lru_case, trace[6].model, &jobs[6]);
        /* the scheduler has seen them with 1 running (its deferred
         * eviction), before the batch ends */
        oplog_wait(log, phase_ops[3] + 2);
        atomic_store(&jobs[4].hold, false);
        engine_drain(g.e);
        if (oplog_wait(log, phase_ops[4])) { /* phase 6 */
            submit(&g, &lru_case, trace[7].model, &jobs[7]);
            engine_drain(g.e);
            oplog_wait(log, phase_ops[5]);
        }
    }
    check_all_done(N_ARRIVALS);
    rig_close(&g);
}

/* The engine on the preemption trace: b is submitted once a's batch has
 * produced a token, and that batch is held at token PRE_HOLD until the
 * scheduler has asked it to pause, so b waits with a's batch in flight
 * whatever the machine's speed; the rest waits on engine_drain. */
static void run_engine_preempt(struct oplog *log)
{
    struct rig g;
    rig_open(&g, &preempt_case, log);
    struct job ja = {.hold_preempt = true}, jb = {0};
    submit(&g, &preempt_case, 0, &ja);
    while (!atomic_load(&ja.at_hold))
        ;
    submit(&g, &preempt_case, 1, &jb);
    engine_drain(g.e);
    oplog_wait(log, PRE_OPS);
    check_all_done(2);
    CHECK_MSG(ja.n_tok == PRE_TOKENS && jb.n_tok == 8, "a: %d tokens, b: %d", ja.n_tok, jb.n_tok);
    struct engine_model_stats ms;
    CHECK(engine_model_stats(g.e, 0, &ms) == 0);
    CHECK_MSG(ms.preemptions == 1 && ms.preempt_unloads == 1 && ms.loads == 2,
              "a: %llu pauses, %llu preempted unloads, %llu loads",
              (unsigned long long)ms.preemptions, (unsigned long long)ms.preempt_unloads,
              (unsigned long long)ms.loads);
    rig_close(&g);
}

/* The engine on the trim trace: each request alone, drained, and the
 * operations its phase expects waited for. Then a's two loads copied fewer
 * bytes than two whole ones (its reload only what it had given up), and
 * each model gave up layers. */
static void run_engine_trim(struct oplog *log)
{
    struct rig g;
    rig_open(&g, &trim_case, log);
    struct job jobs[3] = {{0}};
    for (int i = 0; i < 3; i++) {
        submit(&g, &trim_case, trim_trace[i].model, &jobs[i]);
        engine_drain(g.e);
        if (!oplog_wait(log, trim_phase_ops[i]))
            break;
    }
    check_all_done(3);
    struct engine_model_stats a, b;
    CHECK(engine_model_stats(g.e, 0, &a) == 0 && engine_model_stats(g.e, 1, &b) == 0);
    CHECK_MSG(a.loads == 2 && a.bytes_loaded < 2 * swap_model_total_bytes(g.sm[0]) &&
                  a.trims >= 1 && b.trims >= 1 && a.bytes_trimmed > 0 && b.bytes_trimmed > 0,
              "a: %llu loads of %llu bytes (whole: %llu each), %llu trims; b: %llu trims",
              (unsigned long long)a.loads, (unsigned long long)a.bytes_loaded,
              (unsigned long long)swap_model_total_bytes(g.sm[0]), (unsigned long long)a.trims,
              (unsigned long long)b.trims);
    rig_close(&g);
}

/* The simulator on trace t[0..n) of sc must carry out `want`, and the
 * engine (run_engine, on the same trace's phases) the simulator's
 * operations. */
static void compare(const struct scenario *sc, const struct arrival_at *t, int n,
                    const char *want, void (*run_engine)(struct oplog *))
{
    struct oplog sim, eng;
    oplog_init(&sim);
    oplog_init(&eng);
    run_sim(sc, t, n, &sim);
    CHECK_MSG(strcmp(sim.s, want) == 0, "simulator: %s\nexpected:  %s", sim.s, want);
    run_engine(&eng);
    CHECK_MSG(strcmp(eng.s, sim.s) == 0, "engine:    %s\nsimulator: %s", eng.s, sim.s);
    oplog_free(&sim);
    oplog_free(&eng);
}

TEST(lru)
{
    compare(&lru_case, trace, N_ARRIVALS, expected, run_engine_lru);
}

TEST(swapwise_preempt)
{
    compare(&preempt_case, pre_trace, 2, pre_expected, run_engine_preempt);
}

TEST(swapwise_partial)
{
    compare(&trim_case, trim_trace, 3, trim_expected, run_engine_trim);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
