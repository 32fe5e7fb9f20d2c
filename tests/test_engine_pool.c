/* The engine's runner pool: models own no thread.
 * - many_models: 300 models (the six OPT fixtures under 300 names, TP=2 over
 *   two CPU devices with room for four at a time) each answer one greedy
 *   request, all submitted at once; every answer equals its fixture's
 *   transformers reference exactly (f32 compute), and the process's thread
 *   count (/proc/self/task) never grows past what it was with one model
 *   served: engine_create starts the scheduler and a pool of one runner per
 *   device plus one, and adding or serving a model starts none.
 * - remove_paused: a model whose batch is paused (swapwise-preempt, one
 *   model resident at a time) is removed while the model that preempted it
 *   holds a pool thread: the paused batch is dropped on the pool, its
 *   requests end "removed" on an engine thread, and the other model's
 *   answer is its reference.
 * Nothing here depends on timing: the checks read counts and outputs. */
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/engine.h"
#include "sched/sched.h"
#include "test.h"

#include "fixture_expect.h"

#define N_FIX 6
static const char *fixtures[N_FIX] = {"pre_ln_f32",         "post_ln_proj", "pre_ln_f16",
                                      "bf16_nobias_untied", "no_final_ln",  "decoder_prefix_f32"};
static struct expect expects[N_FIX][3];

enum { N_MODELS = 300, MAX_TOKENS = 8, N_DEVICES = 2, ROOM = 4 };

/* The threads of this process now. */
static int thread_count(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

struct answer {
    int fix, which;
    atomic_int done;
    int status, n_out;
    int32_t out[MAX_TOKENS];
};

static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static int n_done;

static void on_done(struct engine_req *r, void *ctx)
{
    struct answer *a = ctx;
    const int32_t *out = engine_req_output(r, &a->n_out);
    memcpy(a->out, out, sizeof(int32_t) * (size_t)(a->n_out < MAX_TOKENS ? a->n_out : MAX_TOKENS));
    a->status = engine_req_status(r);
    atomic_fetch_add(&a->done, 1);
    pthread_mutex_lock(&done_lock);
    n_done++;
    pthread_cond_broadcast(&done_cond);
    pthread_mutex_unlock(&done_lock);
}

static const int both[N_DEVICES] = {0, 1};

static int model_register(struct swap_manager *mgr, const char *name, int fix,
                          struct swap_model **out)
{
    struct placement pl = {.tp = N_DEVICES, .pp = 1, .devices = both};
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/%s", FIXTURES, fixtures[fix]);
    int rc = swap_register(mgr, name, dir, &pl, false, out);
    if (rc == 0)
        swap_model_set_compute(*out, KERN_COMPUTE_F32);
    return rc;
}

/* Device bytes for ROOM of the largest fixture with a batch of max_batch
 * each, measured on a roomy manager. */
static uint64_t device_room(int max_batch)
{
    struct device *probe[N_DEVICES];
    for (int d = 0; d < N_DEVICES; d++)
        CHECK(device_open_cpu(d, 64u << 20, &probe[d]) == 0);
    struct swap_config cfg = {.host_budget = 256u << 20};
    struct swap_manager *pm;
    CHECK(swap_manager_create(probe, N_DEVICES, &cfg, &pm) == 0);
    struct model_exec_shape shape = {.batch = max_batch, .max_len = 16 + MAX_TOKENS + 64};
    shape.max_tokens = shape.batch * 16;
    uint64_t most = 0;
    for (int f = 0; f < N_FIX; f++) {
        struct swap_model *x;
        CHECK(model_register(pm, fixtures[f], f, &x) == 0);
        for (int d = 0; d < N_DEVICES; d++) {
            uint64_t b = swap_model_device_bytes(x, d) + group_exec_bytes(x, pm, &shape, d);
            most = b > most ? b : most;
        }
    }
    swap_manager_destroy(pm);
    for (int d = 0; d < N_DEVICES; d++)
        device_close(probe[d]);
    return ROOM * most + 4096;
}

static void submit(struct engine *e, int id, struct answer *a)
{
    const struct expect *x = &expects[a->fix][a->which];
    struct engine_request_params p = {.model = id,
                                      .prompt = x->prompt,
                                      .n_prompt = x->n_prompt,
                                      .max_tokens = MAX_TOKENS,
                                      .sampling = {.temperature = 0, .top_p = 1},
                                      .on_done = on_done,
                                      .ctx = a};
    CHECK_MSG(engine_submit(e, &p, NULL) == 0, "model %d: %s", id, err_msg());
}

/* Waits until n requests are done; the most threads seen meanwhile. */
static int wait_done(int n)
{
    int most = thread_count();
    pthread_mutex_lock(&done_lock);
    while (n_done < n) {
        pthread_cond_wait(&done_cond, &done_lock);
        int t = thread_count();
        most = t > most ? t : most;
    }
    pthread_mutex_unlock(&done_lock);
    return most;
}

static bool answer_ok(const struct answer *a)
{
    const struct expect *x = &expects[a->fix][a->which];
    return atomic_load(&a->done) == 1 && a->status == 0 && a->n_out == MAX_TOKENS &&
           memcmp(a->out, x->out, sizeof(int32_t) * MAX_TOKENS) == 0;
}

TEST(many_models)
{
    const int max_batch = 4;
    uint64_t budget = device_room(max_batch);
    struct device *devs[N_DEVICES];
    for (int d = 0; d < N_DEVICES; d++)
        CHECK(device_open_cpu(d, budget, &devs[d]) == 0);
    struct swap_config cfg = {.host_budget = 256u << 20};
    struct swap_manager *mgr;
    CHECK(swap_manager_create(devs, N_DEVICES, &cfg, &mgr) == 0);
    struct workers *w;
    CHECK(workers_create(mgr, &w) == 0);

    int before = thread_count();
    struct engine_config ec = {.max_batch = max_batch, .queue_cap = 16};
    struct engine *e;
    CHECK_MSG(engine_create(mgr, w, &ec, &e) == 0, "%s", err_msg());
    int engine_threads = thread_count() - before;
    CHECK_MSG(engine_threads == 1 + N_DEVICES + 1,
              "engine_create started %d threads; expected the scheduler and %d runners",
              engine_threads, N_DEVICES + 1);

    static struct swap_model *sm[N_MODELS];
    static struct answer ans[N_MODELS];
    int id[N_MODELS];
    /* one model served first: whatever the libraries start on a first
     * forward (their own pools) is started by then */
    for (int i = 0; i < N_MODELS; i++) {
        char name[32];
        snprintf(name, sizeof(name), "m%03d-%s", i, fixtures[i % N_FIX]);
        CHECK_MSG(model_register(mgr, name, i % N_FIX, &sm[i]) == 0, "%s", err_msg());
        CHECK_MSG((id[i] = engine_add_model(e, sm[i])) == i, "%s", err_msg());
        ans[i] = (struct answer){.fix = i % N_FIX, .which = i % 3};
        if (i == 0) {
            submit(e, id[0], &ans[0]);
            wait_done(1);
        }
    }
    int warm = thread_count();
    for (int i = 1; i < N_MODELS; i++)
        submit(e, id[i], &ans[i]);
    int most = wait_done(N_MODELS);
    engine_drain(e);
    printf("threads: %d before the engine, %d with it, %d with one model served, at most %d "
           "serving %d\n",
           before, before + engine_threads, warm, most, N_MODELS);
    CHECK_MSG(most <= warm && thread_count() <= warm,
              "%d models: up to %d threads while serving, %d after; %d with one served", N_MODELS,
              most, thread_count(), warm);
    int wrong = 0;
    for (int i = 0; i < N_MODELS; i++)
        if (!answer_ok(&ans[i]) && wrong++ < 3)
            fprintf(stderr, "model %d (%s prompt %d): done %d, status %d, %d tokens\n", i,
                    fixtures[ans[i].fix], ans[i].which, atomic_load(&ans[i].done), ans[i].status,
                    ans[i].n_out);
    CHECK_MSG(wrong == 0, "%d of %d models answered wrong", wrong, N_MODELS);
    struct engine_stats st;
    engine_get_stats(e, &st);
    CHECK_MSG(st.loads >= N_MODELS, "%llu loads", (unsigned long long)st.loads);

    engine_destroy(e);
    workers_destroy(w);
    swap_manager_destroy(mgr);
    for (int d = 0; d < N_DEVICES; d++)
        device_close(devs[d]);
}

/* ---- a paused batch dropped by a removal ---- */

struct pjob {
    int fix, which, max_tokens;
    bool hold_a; /* model a's: held at its 4th token until a's pause is asked */
    bool hold_b; /* model b's: held at its first token until a's requests are done */
    int n_tok;
    int status, n_out;
    int32_t out[32];
    char error[160];
    atomic_int done;
};

static atomic_bool pre_asked, on_caller;
static atomic_int a_done;
static _Thread_local bool caller_thread;

static void pre_on_sched_op(void *ctx, const struct sched_carried *op)
{
    (void)ctx; /* the scheduler thread, under the engine lock: a flag and no more */
    if (op->op == SCHED_OP_PREEMPT && op->model == 0)
        atomic_store(&pre_asked, true);
}

static void pre_on_token(struct engine_req *r, int32_t id, void *ctx)
{
    (void)r;
    (void)id;
    struct pjob *j = ctx;
    j->n_tok++;
    /* test-only breaches of the contract, which order the test's steps */
    while (j->hold_a && j->n_tok == 4 && !atomic_load(&pre_asked))
        sched_yield();
    while (j->hold_b && j->n_tok == 1 && atomic_load(&a_done) < 2)
        sched_yield();
}

static void pre_on_done(struct engine_req *r, void *ctx)
{
    struct pjob *j = ctx;
    if (caller_thread)
        atomic_store(&on_caller, true);
    const int32_t *out = engine_req_output(r, &j->n_out);
    memcpy(j->out, out, sizeof(int32_t) * (size_t)(j->n_out < 32 ? j->n_out : 32));
    j->status = engine_req_status(r);
    snprintf(j->error, sizeof(j->error), "%s", engine_req_error(r));
    if (j->hold_a)
        atomic_fetch_add(&a_done, 1);
    atomic_fetch_add(&j->done, 1);
}

static void pre_submit(struct engine *e, int id, struct pjob *j)
{
    const struct expect *x = &expects[j->fix][j->which];
    struct engine_request_params p = {.model = id,
                                      .prompt = x->prompt,
                                      .n_prompt = x->n_prompt,
                                      .max_tokens = j->max_tokens,
                                      .sampling = {.temperature = 0, .top_p = 1},
                                      .on_token = pre_on_token,
                                      .on_done = pre_on_done,
                                      .ctx = j};
    CHECK_MSG(engine_submit(e, &p, NULL) == 0, "submit: %s", err_msg());
}

TEST(remove_paused)
{
    uint64_t budget = device_room(2);
    struct device *devs[N_DEVICES];
    for (int d = 0; d < N_DEVICES; d++)
        CHECK(device_open_cpu(d, budget, &devs[d]) == 0);
    struct swap_config cfg = {.host_budget = 256u << 20};
    struct swap_manager *mgr;
    CHECK(swap_manager_create(devs, N_DEVICES, &cfg, &mgr) == 0);
    struct workers *w;
    CHECK(workers_create(mgr, &w) == 0);
    struct engine_config ec = {.policy = "swapwise-preempt",
                               .max_batch = 2,
                               .queue_cap = 16,
                               .max_loaded = 1,
                               .on_sched_op = pre_on_sched_op};
    struct engine *e;
    CHECK_MSG(engine_create(mgr, w, &ec, &e) == 0, "%s", err_msg());
    const int a = 0, b = 1;
    struct swap_model *sm[2];
    for (int k = 0; k < 2; k++) {
        CHECK(model_register(mgr, fixtures[k], k, &sm[k]) == 0);
        CHECK(engine_add_model(e, sm[k]) == k);
    }
    CHECK(engine_set_priority(e, b, 0, 1e-3) == 0);
    struct pjob ja[2] = {{.fix = a, .which = 0, .max_tokens = 32, .hold_a = true},
                         {.fix = a, .which = 1, .max_tokens = 32, .hold_a = true}};
    struct pjob jb = {.fix = b, .which = 0, .max_tokens = MAX_TOKENS, .hold_b = true};
    pre_submit(e, a, &ja[0]);
    pre_submit(e, a, &ja[1]);
    while (ja[0].n_tok < 1)
        sched_yield(); /* a's batch is running */
    pre_submit(e, b, &jb);
    /* a pauses once asked; b is loaded and served, and holds its thread */
    struct engine_model_stats ms;
    int rc;
    do {
        sched_yield();
        rc = engine_model_stats(e, a, &ms);
    } while (rc == 0 && ms.paused == 0 && atomic_load(&ja[0].done) == 0);
    CHECK(rc == 0);
    CHECK_MSG(ms.paused > 0, "a's batch ended before it paused");
    CHECK_MSG(engine_remove_model(e, a, NULL) == 0, "%s", err_msg());
    for (int k = 0; k < 2; k++)
        CHECK_MSG(atomic_load(&ja[k].done) == 1 && ja[k].status == ERR_NOT_FOUND &&
                      strstr(ja[k].error, "removed") != NULL,
                  "a's request %d: done %d, status %d (%s)", k, atomic_load(&ja[k].done),
                  ja[k].status, ja[k].error);
    engine_drain(e);
    CHECK_MSG(atomic_load(&jb.done) == 1 && jb.status == 0 && jb.n_out == MAX_TOKENS &&
                  memcmp(jb.out, expects[b][0].out, sizeof(int32_t) * MAX_TOKENS) == 0,
              "b: done %d, status %d, %d tokens", atomic_load(&jb.done), jb.status, jb.n_out);
    CHECK(!atomic_load(&on_caller));
    engine_destroy(e);
    workers_destroy(w);
    swap_manager_destroy(mgr);
    for (int d = 0; d < N_DEVICES; d++)
        device_close(devs[d]);
}

static void setup(void)
{
    caller_thread = true;
    for (int f = 0; f < N_FIX; f++)
        expect_load(fixtures[f], expects[f]);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
