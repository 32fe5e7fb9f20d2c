/* The simulator and the engine take the same actions on the same trace.
 *
 * One hand-written trace of four models with device room for two, each with
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
 * waited for). Nothing here asserts a time. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/sched.h"
#include "engine/sim.h"
#include "test.h"

#include "fixture_expect.h"
#include "sim_setup.h"

#define N 4
static const char *names[N] = {"pre_ln_f32", "decoder_prefix_f32", "post_ln_proj", "no_final_ln"};

/* the controls, per model, in the simulator's form and the engine's */
static const double keep_alive[N] = {0.2, NAN, NAN, NAN};
static const int priority[N] = {0, 0, 5, 0};
static const double max_queue_wait[N] = {0, 0, 0, 0};
static const double min_resident[N] = {0, 1e6, 0, 0};
static const bool pinned[N] = {false, false, false, true};

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
    const char *k = op->op == SCHED_OP_SERVE  ? "s"
                    : op->op == SCHED_OP_LOAD ? "l"
                    : op->idle                ? "u"
                                              : "e";
    pthread_mutex_lock(&l->lock);
    size_t len = strlen(l->s);
    snprintf(l->s + len, sizeof(l->s) - len, "%s%s%d%s", len ? " " : "", k, op->model,
             op->deferred ? "d" : "");
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

static void engine_op(void *ctx, const struct sched_carried *op)
{
    oplog_add(ctx, op); /* the scheduler thread, under the engine lock: no call back in */
}

/* ---- the simulator ---- */

static void run_sim(struct oplog *log)
{
    uint64_t bytes[2 * N];
    struct sim_config c;
    setup(&c, "lru", N, 2, bytes); /* room for two of the four */
    c.max_loaded = 0;              /* bytes decide, as in the engine */
    c.keep_alive = keep_alive;
    c.priority = priority;
    c.max_queue_wait = max_queue_wait;
    c.min_resident = min_resident;
    c.pinned = pinned;
    c.on_op = sim_op;
    c.on_op_ctx = log;
    struct sim_request r[N_ARRIVALS];
    for (int i = 0; i < N_ARRIVALS; i++)
        r[i] = (struct sim_request){.arrival = trace[i].t, .model = trace[i].model};
    struct sim_stats st;
    CHECK_MSG(sim_run(&c, r, N_ARRIVALS, &st) == 0, "%s", err_msg());
}

/* ---- the engine ---- */

struct job {
    atomic_bool hold;    /* on_token waits while set */
    atomic_bool at_hold; /* on_token has begun waiting */
};

static atomic_int done_ok, done_bad;

static void on_token(struct engine_req *r, int32_t id, void *ctx)
{
    (void)r;
    (void)id;
    struct job *j = ctx;
    atomic_store(&j->at_hold, true);
    while (atomic_load(&j->hold))
        ; /* a test-only breach of on_token's contract: the batch stays in flight */
}

static void on_done(struct engine_req *r, void *ctx)
{
    (void)ctx;
    atomic_fetch_add(engine_req_status(r) == 0 ? &done_ok : &done_bad, 1);
}

struct rig {
    struct device *devs[2];
    struct swap_manager *mgr;
    struct workers *w;
    struct engine *e;
    struct swap_model *sm[N];
    struct expect x[N][3];
};

#define MAX_BATCH 4

/* Devices with room for the two largest models and two batches' memory,
 * never three models (checked); the engine under lru with the controls. */
static void rig_open(struct rig *g, struct oplog *log)
{
    memset(g, 0, sizeof(*g));
    static const int both[2] = {0, 1};
    struct placement pl = {.tp = 2, .pp = 1, .devices = both};
    struct swap_config cfg = {.host_budget = 256u << 20};
    struct device *probe[2];
    for (int d = 0; d < 2; d++)
        CHECK(device_open_cpu(d, 64u << 20, &probe[d]) == 0);
    struct swap_manager *pm;
    CHECK(swap_manager_create(probe, 2, &cfg, &pm) == 0);
    /* each model's bytes as the engine's view counts them: its weights and
     * the reserve for a batch of MAX_BATCH of its first prompt with one
     * token to generate (reserve_grow), the larger device's */
    uint64_t need[N];
    char dir[512];
    for (int m = 0; m < N; m++) {
        struct swap_model *x;
        snprintf(dir, sizeof(dir), "%s/%s", FIXTURES, names[m]);
        CHECK(swap_register(pm, names[m], dir, &pl, false, &x) == 0);
        expect_load(names[m], g->x[m]);
        int np = g->x[m][0].n_prompt;
        struct model_exec_shape shape =
            engine_batch_shape(swap_model_info(x)->max_pos, MAX_BATCH, np, np + 1, false);
        need[m] = 0;
        for (int d = 0; d < 2; d++) {
            uint64_t b = swap_model_device_bytes(x, d) + group_batch_bytes(x, pm, &shape, d);
            need[m] = b > need[m] ? b : need[m];
        }
    }
    swap_manager_destroy(pm);
    uint64_t b1 = 0, b2 = 0, sum = 0, most = 0;
    for (int m = 0; m < N; m++) {
        sum += need[m];
        most = need[m] > most ? need[m] : most;
        if (need[m] > b1)
            b2 = b1, b1 = need[m];
        else if (need[m] > b2)
            b2 = need[m];
    }
    uint64_t budget = b1 + b2 + 4096; /* any two */
    /* never three: the three smallest (all but the largest) exceed it */
    CHECK_MSG(sum - most > budget, "three models fit a budget of %llu bytes",
              (unsigned long long)budget);
    for (int d = 0; d < 2; d++) {
        device_close(probe[d]);
        CHECK(device_open_cpu(d, budget, &g->devs[d]) == 0);
    }
    CHECK(swap_manager_create(g->devs, 2, &cfg, &g->mgr) == 0);
    CHECK(workers_create(g->mgr, &g->w) == 0);
    struct engine_config ec = {
        .policy = "lru", .max_batch = MAX_BATCH, .on_sched_op = engine_op, .sched_op_ctx = log};
    CHECK(engine_create(g->mgr, g->w, &ec, &g->e) == 0);
    for (int m = 0; m < N; m++) {
        snprintf(dir, sizeof(dir), "%s/%s", FIXTURES, names[m]);
        CHECK(swap_register(g->mgr, names[m], dir, &pl, false, &g->sm[m]) == 0);
        swap_model_set_compute(g->sm[m], KERN_COMPUTE_F32);
        CHECK(engine_add_model(g->e, g->sm[m]) == m); /* the simulator's index */
        CHECK(engine_set_keep_alive(g->e, m, keep_alive[m]) == 0);
        CHECK(engine_set_priority(g->e, m, priority[m], max_queue_wait[m]) == 0);
        CHECK(engine_set_min_resident(g->e, m, min_resident[m]) == 0);
        CHECK(engine_pin_model(g->e, m, pinned[m]) == 0);
    }
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

static void submit(struct rig *g, int m, struct job *j)
{
    const struct expect *x = &g->x[m][0];
    struct engine_request_params p = {.model = m,
                                      .prompt = x->prompt,
                                      .n_prompt = x->n_prompt,
                                      .max_tokens = 1,
                                      .sampling = {.temperature = 0, .top_p = 1, .seed = 1},
                                      .on_token = on_token,
                                      .on_done = on_done,
                                      .ctx = j};
    CHECK_MSG(engine_submit(g->e, &p, NULL) == 0, "%s", err_msg());
}

/* The engine on the trace's phases, each waited for (its operations, its
 * requests' completions). */
static void run_engine(struct oplog *log)
{
    struct rig g;
    rig_open(&g, log);
    static struct job jobs[N_ARRIVALS];
    int phase = 0, i = 0;
    for (; i < 4; i++, phase++) { /* phases 1-4: one request each */
        submit(&g, trace[i].model, &jobs[i]);
        engine_drain(g.e);
        if (!oplog_wait(log, phase_ops[phase]))
            break;
    }
    if (i == 4) { /* phase 5: 1's batch held until 0 and 2 wait */
        atomic_store(&jobs[4].hold, true);
        submit(&g, trace[4].model, &jobs[4]);
        while (!atomic_load(&jobs[4].at_hold))
            ;
        submit(&g, trace[5].model, &jobs[5]);
        submit(&g, trace[6].model, &jobs[6]);
        /* the scheduler has seen them with 1 running (its deferred
         * eviction), before the batch ends */
        oplog_wait(log, phase_ops[3] + 2);
        atomic_store(&jobs[4].hold, false);
        engine_drain(g.e);
        if (oplog_wait(log, phase_ops[4])) { /* phase 6 */
            submit(&g, trace[7].model, &jobs[7]);
            engine_drain(g.e);
            oplog_wait(log, phase_ops[5]);
        }
    }
    CHECK_MSG(atomic_load(&done_ok) == N_ARRIVALS && atomic_load(&done_bad) == 0,
              "%d requests ok, %d failed", atomic_load(&done_ok), atomic_load(&done_bad));
    rig_close(&g);
}

int main(void)
{
    struct oplog sim, eng;
    oplog_init(&sim);
    oplog_init(&eng);
    run_sim(&sim);
    CHECK_MSG(strcmp(sim.s, expected) == 0, "simulator: %s\nexpected:  %s", sim.s, expected);
    run_engine(&eng);
    CHECK_MSG(strcmp(eng.s, sim.s) == 0, "engine:    %s\nsimulator: %s", eng.s, sim.s);
    oplog_free(&sim);
    oplog_free(&eng);
    return test_finish();
}
