/* The rig the engine's test programs (tests/test_engine_*.c) share: the six
 * fixture models (tiny, so thousands of requests run in seconds) and their
 * transformers references, requests whose on_token and on_done check every
 * output against those references, and an engine over two CPU devices (TP=2)
 * with room for a given number of models. rig_close checks that the
 * budgets' high-water marks stayed within the budgets.
 * Ordering is made by a gate, never by timing: the largest model, pinned on
 * devices with room for one model, keeps every other model off them, so
 * their requests wait until the test unpins it.
 * A program's main is test_main(argc, argv, rig_setup). Include after the
 * system headers; this includes test.h. */
#ifndef SHARDSWAP_TESTS_ENGINE_RIG_H
#define SHARDSWAP_TESTS_ENGINE_RIG_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/timing.h"
#include "engine/engine.h"
#include "sched/sched.h"
#include "test.h"

#include "fixture_expect.h"
#define N_MODELS 6
static const char *names[N_MODELS] = {"pre_ln_f32",         "post_ln_proj", "pre_ln_f16",
                                      "bf16_nobias_untied", "no_final_ln",  "decoder_prefix_f32"};

static struct expect expects[N_MODELS][3];

static inline void load_expectations(void)
{
    for (int m = 0; m < N_MODELS; m++)
        expect_load(names[m], expects[m]);
}

/* ---- requests and their callbacks ---- */

struct job {
    struct engine *e;
    int fix, which, max_tokens; /* fixture model and prompt */
    bool plain;                 /* submitted without on_token */
    bool cancel_at_first;       /* on_token cancels it at its first token */
    bool stop_at_first;         /* on_token ends it (engine_stop) at its first token */
    double hold_until;          /* on_token holds the runner until then (deadline test) */
    bool hold_until_removed;    /* on_token holds the runner until its model is removed */
    atomic_int first_token;     /* on_token has run */
    int cancel_rc;
    int n_streamed;
    int32_t streamed[16];
    atomic_int done_count;
    /* copied by on_done */
    int status, n_out;
    int32_t out[16];
    char error[160];
    struct engine_req_timings t;
};

static atomic_int wrong, completed, bad_thread;
static pthread_mutex_t progress_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t progress = PTHREAD_COND_INITIALIZER;
static _Thread_local bool caller_thread; /* the test's own threads, never an engine thread */

static inline void on_token(struct engine_req *r, int32_t id, void *ctx)
{
    struct job *j = ctx;
    if (caller_thread)
        atomic_fetch_add(&bad_thread, 1);
    if (j->n_streamed < 16)
        j->streamed[j->n_streamed] = id;
    j->n_streamed++;
    if (j->cancel_at_first && j->n_streamed == 1)
        j->cancel_rc = engine_cancel(j->e, r);
    if (j->stop_at_first && j->n_streamed == 1)
        j->cancel_rc = engine_stop(j->e, r);
    while (j->hold_until > 0 && time_now() <= j->hold_until)
        ; /* a test-only breach of the contract: the deadline passes before the next step */
    atomic_store(&j->first_token, 1);
    while (j->hold_until_removed && engine_find_model(j->e, names[j->fix]) >= 0)
        sched_yield(); /* test-only too: the removal begins before the next step */
}

static inline void on_done(struct engine_req *r, void *ctx)
{
    struct job *j = ctx;
    if (caller_thread)
        atomic_fetch_add(&bad_thread, 1);
    const struct expect *x = &expects[j->fix][j->which];
    const int32_t *out = engine_req_output(r, &j->n_out);
    memcpy(j->out, out, sizeof(int32_t) * (size_t)(j->n_out < 16 ? j->n_out : 16));
    j->status = engine_req_status(r);
    snprintf(j->error, sizeof(j->error), "%s", engine_req_error(r));
    engine_req_timings(r, &j->t);
    /* whatever the status, the tokens it has are the reference's first ones,
     * and every one of them was streamed, in order */
    bool ok = (j->status != 0 || j->n_out == j->max_tokens || j->stop_at_first) &&
              j->n_out <= j->max_tokens &&
              memcmp(j->out, x->out, (size_t)j->n_out * sizeof(int32_t)) == 0 &&
              (j->plain || (j->n_streamed == j->n_out &&
                            memcmp(j->streamed, j->out, (size_t)j->n_out * sizeof(int32_t)) == 0));
    if (!ok && atomic_fetch_add(&wrong, 1) < 3) {
        fprintf(stderr, "model %s prompt %d status %d (%s) batch %d, %d streamed: got",
                names[j->fix], j->which, j->status, j->error, j->t.batch_size, j->n_streamed);
        for (int i = 0; i < j->n_out; i++)
            fprintf(stderr, " %d", j->out[i]);
        fprintf(stderr, " expected");
        for (int i = 0; i < j->max_tokens; i++)
            fprintf(stderr, " %d", x->out[i]);
        fprintf(stderr, "\n");
    }
    atomic_fetch_add(&j->done_count, 1);
    pthread_mutex_lock(&progress_lock);
    atomic_fetch_add(&completed, 1);
    pthread_cond_broadcast(&progress);
    pthread_mutex_unlock(&progress_lock);
}

/* Waits until more than `seen` requests have completed, or *stop. */
static inline void progress_wait_stop(int seen, const atomic_bool *stop)
{
    pthread_mutex_lock(&progress_lock);
    while (atomic_load(&completed) <= seen && !(stop && atomic_load(stop)))
        pthread_cond_wait(&progress, &progress_lock);
    pthread_mutex_unlock(&progress_lock);
}

static inline void progress_wait(int seen)
{
    progress_wait_stop(seen, NULL);
}

static inline void job_init(struct job *j, struct engine *e, int fix, int which, int max_tokens)
{
    memset(j, 0, sizeof(*j));
    j->e = e;
    j->fix = fix;
    j->which = which;
    j->max_tokens = max_tokens;
}

static inline struct engine_request_params job_params(struct job *j, int id, uint64_t seed)
{
    const struct expect *x = &expects[j->fix][j->which];
    return (struct engine_request_params){.model = id,
                                          .prompt = x->prompt,
                                          .n_prompt = x->n_prompt,
                                          .max_tokens = j->max_tokens,
                                          .sampling = {.temperature = 0, .top_p = 1, .seed = seed},
                                          .on_token = on_token,
                                          .on_done = on_done,
                                          .ctx = j};
}

/* Submits; a full queue waits for a completion and tries again. */
static inline int submit_retry(struct engine *e, const struct engine_request_params *p,
                               struct engine_req **out)
{
    for (;;) {
        int seen = atomic_load(&completed);
        int rc = engine_submit(e, p, out);
        if (rc != ERR_BUSY)
            return rc;
        progress_wait(seen);
    }
}

/* ---- the rig ---- */

struct rig {
    struct device *devs[2];
    struct swap_manager *mgr;
    struct workers *w;
    struct engine *e;
    struct swap_model *sm[N_MODELS];
    int id[N_MODELS];
    int big;                 /* the largest model: the gate */
    struct dbuf *ballast[2]; /* the rest of the devices' memory while the gate is closed */
};

/* Device memory for the `room` largest models, or budget bytes when not 0,
 * and a host budget (0: 256 MiB); TP=2 over both devices. */
/* The rigs' engines wait for an unpin (the gate below relies on it) unless
 * a test clears this. */
static bool rig_wait_for_unpin = true;
/* The rigs' engines' on_sched_op and on_move (NULL: none). */
static void (*rig_on_sched_op)(void *ctx, const struct sched_carried *op);
static void (*rig_on_move)(void *ctx, const struct engine_move *mv);

/* Registers fixture m as g->sm[m] (TP=2 over both devices), computing in
 * f32: transformers' f32 references exactly, however batched. Again after
 * engine_remove_model, which unregisters it. */
static inline void rig_register(struct rig *g, int m)
{
    static const int both[2] = {0, 1};
    struct placement pl = {.tp = 2, .pp = 1, .devices = both};
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/%s", FIXTURES, names[m]);
    CHECK(swap_register(g->mgr, names[m], dir, &pl, false, &g->sm[m]) == 0);
    swap_model_set_compute(g->sm[m], KERN_COMPUTE_F32);
}

static inline void rig_open_budget(struct rig *g, const char *policy, int max_loaded, int queue_cap,
                                   int max_batch, int room, uint64_t budget, uint64_t host_budget)
{
    memset(g, 0, sizeof(*g));
    /* probe the models' bytes on a roomy manager first */
    struct device *probe[2];
    for (int d = 0; d < 2; d++)
        CHECK(device_open_cpu(d, 64u << 20, &probe[d]) == 0);
    struct swap_config cfg = {.host_budget = 256u << 20};
    struct swap_manager *pm;
    CHECK(swap_manager_create(probe, 2, &cfg, &pm) == 0);
    static const int both[2] = {0, 1};
    struct placement pl = {.tp = 2, .pp = 1, .devices = both};
    uint64_t b1 = 0, b2 = 0, batch = 0;
    char dir[512];
    /* the largest batch the engine may run: max_batch of the longest prompt
     * (16) and answer (16), with room for joiners */
    struct model_exec_shape shape = {.batch = max_batch ? max_batch : 8, .max_len = 16 + 16 + 64};
    shape.max_tokens = shape.batch * 16;
    for (int m = 0; m < N_MODELS; m++) {
        struct swap_model *x;
        snprintf(dir, sizeof(dir), "%s/%s", FIXTURES, names[m]);
        CHECK(swap_register(pm, names[m], dir, &pl, false, &x) == 0);
        for (int d = 0; d < 2; d++) {
            uint64_t bb = group_exec_bytes(x, pm, &shape, d);
            batch = bb > batch ? bb : batch;
        }
        uint64_t b = swap_model_device_bytes(x, 0) > swap_model_device_bytes(x, 1)
                         ? swap_model_device_bytes(x, 0)
                         : swap_model_device_bytes(x, 1);
        if (b > b1) {
            b2 = b1;
            b1 = b;
            g->big = m;
        } else if (b > b2) {
            b2 = b;
        }
    }
    swap_manager_destroy(pm);
    for (int d = 0; d < 2; d++) {
        device_close(probe[d]);
        CHECK(device_open_cpu(d, budget ? budget : b1 + (room > 1 ? b2 : 0) + room * batch + 4096,
                              &g->devs[d]) == 0);
    }
    if (host_budget)
        cfg.host_budget = host_budget;
    CHECK(swap_manager_create(g->devs, 2, &cfg, &g->mgr) == 0);
    CHECK(workers_create(g->mgr, &g->w) == 0);
    struct engine_config ec = {.policy = policy,
                               .max_batch = max_batch,
                               .queue_cap = queue_cap,
                               .max_loaded = max_loaded,
                               .wait_for_unpin = rig_wait_for_unpin,
                               .on_sched_op = rig_on_sched_op,
                               .on_move = rig_on_move};
    CHECK(engine_create(g->mgr, g->w, &ec, &g->e) == 0);
    for (int m = 0; m < N_MODELS; m++) {
        rig_register(g, m);
        CHECK((g->id[m] = engine_add_model(g->e, g->sm[m])) == m);
    }
}

static inline void rig_open(struct rig *g, const char *policy, int max_loaded, int queue_cap,
                            int max_batch, int room)
{
    rig_open_budget(g, policy, max_loaded, queue_cap, max_batch, room, 0, 0);
}

static inline void rig_close(struct rig *g)
{
    for (int d = 0; d < 2; d++)
        device_free(g->ballast[d]);
    engine_destroy(g->e);
    workers_destroy(g->w);
    for (int d = 0; d < 2; d++)
        CHECK(device_high_water(g->devs[d]) <= device_budget(g->devs[d]));
    swap_manager_destroy(g->mgr);
    for (int d = 0; d < 2; d++)
        device_close(g->devs[d]);
}

/* With room for one model: the largest, loaded and pinned, keeps every other
 * model off the devices until gate_open. */
static inline void gate_close(struct rig *g)
{
    CHECK(engine_pin_model(g->e, g->id[g->big], true) == 0);
    CHECK_MSG(engine_load_model(g->e, g->id[g->big]) == 0, "%s", err_msg());
    CHECK(swap_wait_loaded(g->mgr, g->sm[g->big]) == 0);
    /* the memory beside it (kept for batches) is taken too, so no other
     * model fits however small */
    for (int d = 0; d < 2; d++) {
        uint64_t rest = device_largest_free(g->devs[d]);
        if (rest > 0)
            CHECK(device_alloc(g->devs[d], rest, &g->ballast[d]) == 0);
    }
}

static inline void gate_open(struct rig *g)
{
    for (int d = 0; d < 2; d++) {
        device_free(g->ballast[d]);
        g->ballast[d] = NULL;
    }
    CHECK(engine_pin_model(g->e, g->id[g->big], false) == 0);
}

/* A model other than the gate. */
static inline int not_big(const struct rig *g, int k)
{
    return (g->big + 1 + k) % N_MODELS;
}

/* submitted = ok + failed + cancelled + timed_out once drained, overall and
 * summed over the models still served. */
static inline void check_stats_add_up(struct rig *g, const char *what)
{
    struct engine_stats st;
    engine_get_stats(g->e, &st);
    CHECK_MSG(st.submitted == st.ok + st.failed + st.cancelled + st.timed_out &&
                  st.completed == st.submitted,
              "%s: submitted %llu, ok %llu, failed %llu, cancelled %llu, timed out %llu", what,
              (unsigned long long)st.submitted, (unsigned long long)st.ok,
              (unsigned long long)st.failed, (unsigned long long)st.cancelled,
              (unsigned long long)st.timed_out);
    for (int m = 0; m < N_MODELS; m++) {
        struct engine_model_stats ms;
        if (engine_model_stats(g->e, g->id[m], &ms) < 0)
            continue;
        CHECK_MSG(ms.submitted == ms.ok + ms.failed + ms.cancelled + ms.timed_out &&
                      ms.queue_len == 0 && ms.running == 0 && ms.latency.n == ms.ok,
                  "%s: model %s: submitted %llu, ok %llu, failed %llu, cancelled %llu, timed "
                  "out %llu, queued %d, running %d",
                  what, ms.name, (unsigned long long)ms.submitted, (unsigned long long)ms.ok,
                  (unsigned long long)ms.failed, (unsigned long long)ms.cancelled,
                  (unsigned long long)ms.timed_out, ms.queue_len, ms.running);
    }
}

static inline uint64_t host_bytes(int model)
{
    char dir[512];
    uint64_t dev[2], host = 0;
    snprintf(dir, sizeof(dir), "%s/%s", FIXTURES, names[model]);
    CHECK(swap_layout_bytes(dir, 2, 1, NULL, dev, &host) == 0);
    return host;
}

/* One request of fixture t (its which-th expectation, max_tokens n) to
 * model id, waited for: it gives n tokens. */
static inline void answer_one(struct rig *g, int t, int id, int which, uint64_t seed, int n)
{
    struct job j;
    job_init(&j, g->e, t, which, n);
    struct engine_request_params p = job_params(&j, id, seed);
    struct engine_req *h;
    CHECK(engine_submit(g->e, &p, &h) == 0);
    CHECK(engine_req_wait(h) == 0 && j.n_out == n);
    engine_req_release(h);
}

/* Runs on the test's own thread before the cases. */
static inline void rig_setup(void)
{
    caller_thread = true;
    load_expectations();
}

#endif
