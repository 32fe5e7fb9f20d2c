/* The engine end to end on the fixture models (tiny, so thousands of
 * requests run in seconds), under both policies:
 * - churn: 10k requests over 6 models with device memory for 2; every request
 *   completes exactly once with its own model's greedy continuation (the
 *   fixtures' transformers references, cut to the request's max_tokens),
 *   whatever batch, padding or join it went through;
 * - no starvation: a lone request for a cold model completes while two other
 *   models receive a continuous stream;
 * - free device memory in pieces: the engine takes the explicit fragmentation
 *   step (swap_compact) and serves the model;
 * - submissions are taken at once while the scheduler's load must wait for a
 *   copy back (the engine lock is never held across a wait on the manager);
 * - budgets' high-water marks stay within the budgets; a full queue rejects. */
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/timing.h"
#include "engine/engine.h"
#include "test.h"

#define FIXTURES SHARDSWAP_SOURCE_DIR "/tests/fixtures/models"
#define N_MODELS 6
static const char *names[N_MODELS] = {"pre_ln_f32", "post_ln_proj", "pre_ln_f16",
                                      "bf16_nobias_untied", "no_final_ln", "decoder_prefix_f32"};

struct expect {
    int n_prompt, n_out;
    int32_t prompt[16], out[16];
};
static struct expect expects[N_MODELS][3];

static void load_expectations(void)
{
    for (int m = 0; m < N_MODELS; m++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s/expected.json", FIXTURES, names[m]);
        json_t *j = json_load_file(path, 0, NULL);
        json_t *same = json_object_get(j, "same_as");
        if (same) {
            snprintf(path, sizeof(path), "%s/%s/expected.json", FIXTURES, json_string_value(same));
            json_decref(j);
            j = json_load_file(path, 0, NULL);
        }
        json_t *g = json_object_get(j, "greedy");
        for (int i = 0; i < 3; i++) {
            json_t *e = json_array_get(g, (size_t)i);
            json_t *p = json_object_get(e, "prompt"), *o = json_object_get(e, "output");
            struct expect *x = &expects[m][i];
            x->n_prompt = (int)json_array_size(p);
            x->n_out = (int)json_array_size(o);
            for (int k = 0; k < x->n_prompt && k < 16; k++)
                x->prompt[k] = (int32_t)json_integer_value(json_array_get(p, (size_t)k));
            for (int k = 0; k < x->n_out && k < 16; k++)
                x->out[k] = (int32_t)json_integer_value(json_array_get(o, (size_t)k));
        }
        json_decref(j);
    }
}

struct job {
    struct engine_request r;
    int32_t out[16];
    int which;
    atomic_int done_count;
};

static atomic_int wrong, completed;

static void on_done(struct engine_request *r)
{
    struct job *j = (struct job *)r->ctx;
    const struct expect *x = &expects[r->model][j->which];
    bool ok = r->status == 0 && r->n_output == r->max_tokens &&
              memcmp(r->output, x->out, (size_t)r->n_output * sizeof(int32_t)) == 0;
    if (!ok && atomic_fetch_add(&wrong, 1) < 3) {
        fprintf(stderr, "model %d prompt %d status %d (%s) batch %d: got", r->model, j->which,
                r->status, r->error, r->batch_size);
        for (int i = 0; i < r->n_output; i++)
            fprintf(stderr, " %d", r->output[i]);
        fprintf(stderr, " expected");
        for (int i = 0; i < r->max_tokens; i++)
            fprintf(stderr, " %d", x->out[i]);
        fprintf(stderr, "\n");
    }
    atomic_fetch_add(&j->done_count, 1);
    atomic_fetch_add(&completed, 1);
}

struct rig {
    struct device *devs[2];
    struct swap_manager *mgr;
    struct workers *w;
    struct engine *e;
    struct swap_model *sm[N_MODELS];
};

/* Devices of budget bytes (0: room for the two largest models) and a host
 * budget (0: 256 MiB), TP=2 over both. */
static void rig_open_budget(struct rig *g, const char *policy, int max_loaded, int queue_cap,
                            uint64_t budget, uint64_t host_budget)
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
    uint64_t b1 = 0, b2 = 0;
    char dir[512];
    for (int m = 0; m < N_MODELS; m++) {
        struct swap_model *x;
        snprintf(dir, sizeof(dir), "%s/%s", FIXTURES, names[m]);
        CHECK(swap_register(pm, names[m], dir, &pl, false, &x) == 0);
        uint64_t b = swap_model_device_bytes(x, 0) > swap_model_device_bytes(x, 1)
                         ? swap_model_device_bytes(x, 0)
                         : swap_model_device_bytes(x, 1);
        if (b > b1) {
            b2 = b1;
            b1 = b;
        } else if (b > b2) {
            b2 = b;
        }
    }
    swap_manager_destroy(pm);
    for (int d = 0; d < 2; d++) {
        device_close(probe[d]);
        CHECK(device_open_cpu(d, budget ? budget : b1 + b2 + 4096, &g->devs[d]) == 0);
    }
    if (host_budget)
        cfg.host_budget = host_budget;
    CHECK(swap_manager_create(g->devs, 2, &cfg, &g->mgr) == 0);
    CHECK(workers_create(g->mgr, &g->w) == 0);
    struct engine_config ec = {.policy = policy, .max_batch = 8, .queue_cap = queue_cap,
                               .max_loaded = max_loaded};
    CHECK(engine_create(g->mgr, g->w, &ec, &g->e) == 0);
    for (int m = 0; m < N_MODELS; m++) {
        snprintf(dir, sizeof(dir), "%s/%s", FIXTURES, names[m]);
        CHECK(swap_register(g->mgr, names[m], dir, &pl, false, &g->sm[m]) == 0);
        CHECK(engine_add_model(g->e, g->sm[m]) == m);
    }
}

static void rig_open(struct rig *g, const char *policy, int max_loaded, int queue_cap)
{
    rig_open_budget(g, policy, max_loaded, queue_cap, 0, 0);
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

static void job_init(struct job *j, int model, int which, int max_tokens, uint64_t seed)
{
    memset(j, 0, sizeof(*j));
    const struct expect *x = &expects[model][which];
    j->which = which;
    j->r.model = model;
    j->r.prompt = x->prompt;
    j->r.n_prompt = x->n_prompt;
    j->r.max_tokens = max_tokens;
    j->r.sampling = (struct sampler_params){.temperature = 0, .top_p = 1, .seed = seed};
    j->r.output = j->out;
    j->r.on_done = on_done;
    j->r.ctx = j;
}

static void submit_retry(struct engine *e, struct job *j)
{
    int rc;
    while ((rc = engine_submit(e, &j->r)) == ERR_BUSY)
        usleep(200);
    CHECK_MSG(rc == 0, "submit: %s", err_msg());
}

static void test_churn(const char *policy, int n_req)
{
    struct rig g;
    rig_open(&g, policy, 2, 64);
    struct job *jobs = calloc((size_t)n_req, sizeof(*jobs));
    atomic_store(&wrong, 0);
    atomic_store(&completed, 0);
    uint64_t x = 42;
    double t0 = time_now();
    for (int i = 0; i < n_req; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        /* skewed: model 0 gets half the traffic, bursts of the same model */
        int model = (x >> 60) < 8 ? 0 : (int)((x >> 33) % N_MODELS);
        int which = (int)((x >> 20) % 3);
        int max_tokens = 1 + (int)((x >> 40) % 12);
        job_init(&jobs[i], model, which, max_tokens, x);
        submit_retry(g.e, &jobs[i]);
    }
    engine_drain(g.e);
    double dt = time_now() - t0;
    int once = 0;
    for (int i = 0; i < n_req; i++)
        once += atomic_load(&jobs[i].done_count) == 1;
    struct engine_stats st;
    engine_get_stats(g.e, &st);
    printf("churn %-9s: %d requests in %.2f s, %llu batches, %llu loads, %d wrong\n", policy,
           n_req, dt, (unsigned long long)st.batches, (unsigned long long)st.loads,
           atomic_load(&wrong));
    CHECK_MSG(once == n_req, "%s: %d of %d requests completed exactly once", policy, once, n_req);
    CHECK_MSG(atomic_load(&wrong) == 0, "%s: %d requests got another output", policy,
              atomic_load(&wrong));
    CHECK(st.completed == (uint64_t)n_req && st.loads >= 4);
    rig_close(&g);
    free(jobs);
}

/* Model 5's single request must complete while models 0 and 1 stay busy. */
static void test_starvation(const char *policy)
{
    struct rig g;
    rig_open(&g, policy, 2, 100000);
    enum { STREAM = 20000 };
    struct job *jobs = calloc(STREAM, sizeof(*jobs));
    struct job lone;
    atomic_store(&wrong, 0);
    /* warm up models 0 and 1 so they are resident and busy */
    int i = 0;
    for (; i < 64; i++) {
        job_init(&jobs[i], i % 2, i % 3, 4, (uint64_t)i);
        submit_retry(g.e, &jobs[i]);
    }
    job_init(&lone, 5, 0, 3, 7);
    submit_retry(g.e, &lone);
    double t0 = time_now();
    while (atomic_load(&lone.done_count) == 0 && i < STREAM && time_now() - t0 < 20) {
        job_init(&jobs[i], i % 2, i % 3, 4, (uint64_t)i);
        submit_retry(g.e, &jobs[i]);
        i++;
        if (i % 32 == 0)
            usleep(1000);
    }
    CHECK_MSG(atomic_load(&lone.done_count) == 1, "%s: the lone request starved (%d submitted "
                                                  "around it)", policy, i);
    printf("starvation %-9s: lone request done after %.3f s with %d others submitted\n", policy,
           lone.r.t_done - lone.r.t_arrival, i);
    engine_drain(g.e);
    CHECK(atomic_load(&wrong) == 0);
    rig_close(&g);
    free(jobs);
}

/* Free device memory in pieces: a load the policy starts (the free bytes
 * suffice) is refused as fragmented, and the engine takes the explicit step
 * (swap_compact on sched_defrag_victim's choice, counted) and serves it.
 * Device memory, by hand before the first request (blobs of 26..68 KB):
 * pre_ln_f16 | bf16_nobias_untied | no_final_ln | tail, then the first and
 * third leave: post_ln_proj's three blobs fit the free bytes but not the two
 * holes. */
static void test_fragmentation(const char *policy)
{
    struct rig g;
    rig_open_budget(&g, policy, 0, 64, 329984, 0);
    const int a = 2, b = 3, c = 4, w = 1; /* indices into names[] */
    for (int i = 0; i < 3; i++) {
        struct swap_model *x = g.sm[i == 0 ? a : i == 1 ? b : c];
        CHECK(swap_load(g.mgr, x, NULL) == 0 && swap_wait_loaded(g.mgr, x) == 0);
    }
    CHECK(swap_offload(g.mgr, g.sm[a], false) == 0 && swap_offload(g.mgr, g.sm[c], false) == 0);
    struct swap_room why;
    CHECK(swap_load(g.mgr, g.sm[w], &why) == ERR_BUSY);
    CHECK_MSG(why.kind == SWAP_ROOM_FRAGMENTED && why.device == 0 && why.free >= why.need,
              "%s: not the fragmentation this test needs: %s", policy, err_msg());
    struct job j;
    job_init(&j, w, 0, 4, 1);
    submit_retry(g.e, &j);
    double t0 = time_now();
    while (atomic_load(&j.done_count) == 0 && time_now() - t0 < 20)
        usleep(1000);
    if (atomic_load(&j.done_count) == 0) { /* it would wait forever: stop here */
        CHECK_MSG(false, "%s: the engine never loaded the model into fragmented memory", policy);
        exit(test_finish());
    }
    CHECK(j.r.status == 0);
    struct engine_stats st;
    struct swap_stats ss;
    engine_get_stats(g.e, &st);
    swap_get_stats(g.mgr, &ss);
    CHECK_MSG(ss.compactions == 1 && st.evictions == 1 && st.loads == 1,
              "%s: %llu compactions, %llu evictions, %llu loads", policy,
              (unsigned long long)ss.compactions, (unsigned long long)st.evictions,
              (unsigned long long)st.loads);
    CHECK(swap_residency(g.mgr, g.sm[b]) == RES_IN_HOST); /* the only model that could go */
    CHECK(swap_residency(g.mgr, g.sm[w]) == RES_ON_DEVICE);
    CHECK(atomic_load(&wrong) == 0);
    rig_close(&g);
}

static uint64_t host_bytes(int model)
{
    char dir[512];
    uint64_t dev[2], host = 0;
    snprintf(dir, sizeof(dir), "%s/%s", FIXTURES, names[model]);
    CHECK(swap_layout_bytes(dir, 2, 1, dev, &host) == 0);
    return host;
}

/* The engine lock is never held across a wait on the swap manager: while
 * the scheduler's load of model 0 is refused because model 0 is still
 * copying back to the host (a slowed link: about a second), submissions are
 * taken at once, and the load happens when the copy back ends. */
static void test_no_wait_under_lock(const char *policy)
{
    const int x = 0, y = 1, z = 2;
    struct rig g;
    rig_open_budget(&g, policy, 0, 64, 64u << 20, host_bytes(x) + host_bytes(y) + host_bytes(z) / 2);
    /* x, y, z resident; z's host copy pushed x's out: x's offload copies back */
    for (int i = 0; i < 3; i++) {
        struct swap_model *m = g.sm[i == 0 ? x : i == 1 ? y : z];
        CHECK(swap_load(g.mgr, m, NULL) == 0 && swap_wait_loaded(g.mgr, m) == 0);
    }
    for (int d = 0; d < 2; d++)
        CHECK(device_cpu_set_link(g.devs[d], 150e3) == 0);
    CHECK(swap_offload(g.mgr, g.sm[x], false) == 0);
    CHECK(swap_residency(g.mgr, g.sm[x]) == RES_OFFLOADING);
    struct job jx, jz;
    job_init(&jx, x, 0, 3, 1);
    job_init(&jz, z, 1, 3, 2);
    submit_retry(g.e, &jx);
    usleep(50000); /* the scheduler meets the copy back */
    double t0 = time_now();
    submit_retry(g.e, &jz);
    double dt = time_now() - t0;
    bool still = swap_residency(g.mgr, g.sm[x]) == RES_OFFLOADING;
    CHECK_MSG(dt < 0.25, "%s: engine_submit took %.3f s during a copy back", policy, dt);
    CHECK(still); /* the check above measured what it means to */
    swap_wait_idle(g.mgr, g.sm[x]);
    for (int d = 0; d < 2; d++)
        CHECK(device_cpu_set_link(g.devs[d], 0) == 0);
    engine_drain(g.e);
    CHECK(atomic_load(&jx.done_count) == 1 && atomic_load(&jz.done_count) == 1);
    CHECK(jx.r.status == 0 && jz.r.status == 0 && atomic_load(&wrong) == 0);
    printf("no wait under lock %-9s: submit took %.1f ms during a copy back\n", policy, dt * 1e3);
    rig_close(&g);
}

/* A full queue is an immediate rejection, and bad requests are refused. */
static void test_rejections(void)
{
    struct rig g;
    rig_open(&g, "swapwise", 0, 4);
    struct job jobs[64];
    int busy = 0;
    for (int i = 0; i < 64; i++) {
        job_init(&jobs[i], 3, 0, 12, 1);
        int rc = engine_submit(g.e, &jobs[i].r);
        busy += rc == ERR_BUSY;
        CHECK(rc == 0 || rc == ERR_BUSY);
    }
    CHECK(busy > 0);
    struct job bad;
    job_init(&bad, 0, 0, 1, 1);
    bad.r.model = 7; /* only 6 models */
    CHECK(engine_submit(g.e, &bad.r) == ERR_INVALID);
    job_init(&bad, 0, 0, 1, 1);
    bad.r.max_tokens = 0;
    CHECK(engine_submit(g.e, &bad.r) == ERR_INVALID);
    job_init(&bad, 0, 0, 1, 1);
    bad.r.sampling.top_p = 2;
    CHECK(engine_submit(g.e, &bad.r) == ERR_INVALID);
    int32_t big = 1 << 20;
    job_init(&bad, 0, 0, 1, 1);
    bad.r.prompt = &big;
    bad.r.n_prompt = 1;
    CHECK(engine_submit(g.e, &bad.r) == ERR_INVALID && strstr(err_msg(), "vocabulary"));
    engine_drain(g.e);
    rig_close(&g);
}

int main(void)
{
    load_expectations();
    test_rejections();
    test_fragmentation("swapwise");
    test_fragmentation("computron");
    test_no_wait_under_lock("swapwise");
    test_no_wait_under_lock("computron");
    test_churn("swapwise", 10000);
    test_churn("computron", 10000);
    test_starvation("swapwise");
    test_starvation("computron");
    return test_finish();
}
