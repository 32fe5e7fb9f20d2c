/* A stopped process stalls no model that has no shard on it (cluster/job.h,
 * engine/workers.h): process 0's models keep their own latency while
 * another process is silent, until and after its heartbeats time out.
 *
 * Devices: 0 is process 0's, 1 is process 1's; with 3 processes device 2 is
 * process 2's. Models, every one resident at once (budgets sized for all):
 *   near  pre_ln_f32 on device 0 alone (wholly on process 0)
 *   tp    llama_gqa_f32, TP 2 over devices 0 and 1: its shard on device 0
 *         waits in an all-reduce for process 1 when that process is silent
 *   far   post_ln_proj on device 1 alone (no shard on process 0); far2
 *         and far3 the same, under their names
 *   side  (3 processes) qwen2_bias_f32, TP 2 over devices 0 and 2: shares
 *         device 0 with tp and near, has no shard on process 1
 *   third (3 processes) pre_ln_f32 on device 2 alone (wholly on process 2:
 *         every step of it is a command process 0 sends)
 *   tp12  (3 processes) llama_gqa_f32, TP 2 over devices 1 and 2: its shard
 *         on process 2 shares device 2 with third and waits in an
 *         all-reduce for process 1 when that process is silent
 *
 * stopped_latency: near's normal latency is the median of five 2-token
 *   requests. Process 1 is stopped (SIGSTOP) with a step of tp and one of
 *   each far in flight (they wait for it until its heartbeats time out, 8
 *   s): four, as many batches waiting for it as a runner pool has threads
 *   (devices + 1) with 3 processes, one more with 2. Near's next requests
 *   (three, and more until 3 s after the stop; side's and third's too,
 *   whose normal latencies are measured alike: they run on the runner pool
 *   of the models spanning process 2, not on process 1's, and third's steps
 *   on process 2's compute lane of its class, not behind tp12's step,
 *   which waits there too) must each take no
 *   more than BOUND_FACTOR times that median plus BOUND_SLACK_S (4 x + 1.5
 *   s): a few of its own latencies, far below the heartbeat timeout, and
 *   relative to the same build's latency (so an ASan build's slower steps
 *   scale the bound). Every answer equals transformers' greedy reference.
 *   Then tp's and far's requests fail naming process 1 (the server's 503
 *   process_unavailable); continued (SIGCONT), process 1 stays lost (the
 *   loss is final: its state is unknown), so its models still fail at once
 *   naming it, and near still serves; the job closes.
 *
 * stopped_send: process 0 has a command to process 1 that MPI cannot
 *   finish while process 1 is stopped (a STEP of far with a 60-token
 *   prompt, past MPI's eager limit, which this program lowers to
 *   EAGER_LIMIT bytes so that a fixture's prompt passes it as a long prompt
 *   of a real model does: MPI then waits for process 1 to take it), and
 *   third's requests (with 2 processes near's) must each keep to the same
 *   bound against third's own median latency, while far's request fails
 *   naming process 1 once its heartbeats time out. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster/job.h"
#include "comm/mpi.h"
#include "core/error.h"
#include "core/timing.h"
#include "engine/engine.h"
#include "engine/stack.h"
#include "test.h"

#include "fixture_expect.h"

enum { M_NEAR, M_TP, M_FAR, M_FAR2, M_FAR3, M_SIDE, M_THIRD, M_TP12, N_MODELS };
static const char *names[N_MODELS] = {"near", "tp", "far", "far2", "far3", "side", "third", "tp12"};
static const char *fixtures[N_MODELS] = {"pre_ln_f32",   "llama_gqa_f32", "post_ln_proj",
                                         "post_ln_proj", "post_ln_proj",  "qwen2_bias_f32",
                                         "pre_ln_f32",   "llama_gqa_f32"};
static char paths[N_MODELS][512];
static struct expect expects[N_MODELS][3];

#define BEAT_INTERVAL 0.2
#define BEAT_TIMEOUT 8.0
/* MPI's eager limit over TCP, in bytes (OpenMPI's default is 64 KiB): a
 * message above it leaves only once its receiver has matched it */
#define EAGER_LIMIT "256"
#define JOB_TEST_ENV "OMPI_MCA_btl_tcp_eager_limit", EAGER_LIMIT
#include "mpi/job_test.h"
/* a stopped process's latency bound: a few of the model's own latencies
 * plus room for the machine's noise (an oversubscribed test machine
 * delays a request by tenths of a second now and then), far below the
 * heartbeat timeout that a request waiting on the process takes */
#define BOUND_FACTOR 4.0
#define BOUND_SLACK_S 1.5
#define TOKENS 2
#define WINDOW_S 3.0

static const int dev_near[] = {0}, dev_tp[] = {0, 1}, dev_far[] = {1}, dev_side[] = {0, 2},
                 dev_third[] = {2}, dev_tp12[] = {1, 2};
#define LONG_PROMPT 60 /* tokens: a STEP of about 350 bytes */
static struct stack_model_config models[N_MODELS];
static struct stack_config cfg;
static int n_models;

static void config_make(void)
{
    const int *devs[N_MODELS] = {dev_near, dev_tp,   dev_far,   dev_far,
                                 dev_far,  dev_side, dev_third, dev_tp12};
    const int tp[N_MODELS] = {1, 2, 1, 1, 1, 2, 1, 2};
    n_models = procs > 2 ? N_MODELS : M_SIDE;
    for (int m = 0; m < n_models; m++) {
        snprintf(paths[m], sizeof paths[m], "%s/%s", FIXTURES, fixtures[m]);
        expect_load(fixtures[m], expects[m]);
        models[m] = (struct stack_model_config){
            .name = names[m], .path = paths[m], .tp = tp[m], .devices = devs[m], .compute = "f32"};
    }
    cfg = (struct stack_config){.device_kind = "cpu",
                                .n_devices = procs > 2 ? 3 : 2,
                                .procs = {0, 1, 2},
                                .procs_set = true,
                                .n_procs = procs,
                                .engine = {.max_batch = 4},
                                .models = models,
                                .n_models = n_models};
}

static struct engine_req *submit(struct stack *s, int m, int which, int max_tokens)
{
    const struct expect *x = &expects[m][which];
    struct engine_request_params p = {.model_name = names[m],
                                      .prompt = x->prompt,
                                      .n_prompt = x->n_prompt,
                                      .max_tokens = max_tokens,
                                      .sampling = {.temperature = 0, .top_p = 1, .seed = 1}};
    struct engine_req *r = NULL;
    CHECK_MSG(engine_submit(s->engine, &p, &r) == 0 && r, "submit to %s: %s", names[m], err_msg());
    return r;
}

/* Waits for r: 0 when it returned the first max_tokens of transformers'
 * greedy answer; releases r. */
static int finish(struct engine_req *r, int m, int which, int max_tokens)
{
    if (!r)
        return -1;
    const struct expect *x = &expects[m][which];
    int st = engine_req_wait(r);
    CHECK_MSG(st == 0, "%s prompt %d: status %d (%s)", names[m], which, st, engine_req_error(r));
    int n = 0;
    const int32_t *out = engine_req_output(r, &n);
    int want = max_tokens < x->n_out ? max_tokens : x->n_out;
    bool same = st == 0 && n == want && memcmp(out, x->out, sizeof(int32_t) * (size_t)n) == 0;
    CHECK_MSG(st != 0 || same, "%s (%s) prompt %d: %d tokens, not transformers' %d", names[m],
              fixtures[m], which, n, want);
    engine_req_release(r);
    return same ? 0 : -1;
}

/* Seconds a TOKENS-token request to model m takes, its answer checked. */
static double timed(struct stack *s, int m, int which)
{
    double t0 = time_now();
    finish(submit(s, m, which, TOKENS), m, which, TOKENS);
    return time_now() - t0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of five timed requests to m. */
static double normal_latency(struct stack *s, int m)
{
    double t[5];
    for (int i = 0; i < 5; i++)
        t[i] = timed(s, m, i % 3);
    qsort(t, 5, sizeof t[0], cmp_double);
    return t[2];
}

/* r (a model of process 1) failed, naming process 1. */
static void check_unavailable(struct engine_req *r, int m)
{
    if (!r)
        return;
    int st = engine_req_wait(r);
    CHECK_MSG(st < 0 && strstr(engine_req_error(r), "process 1"),
              "%s with process 1 stopped: status %d (%s)", names[m], st, engine_req_error(r));
    engine_req_release(r);
}

TEST(stopped_latency)
{
    struct stack *s = NULL;
    CHECK_MSG(cluster_job_lead(job, &cfg) == 0, "%s", err_msg());
    CHECK_MSG(stack_open(&cfg, &s) == 0, "%s", err_msg());
    if (!s)
        return;
    for (int m = 0; m < n_models; m++) /* every model resident and answering right */
        finish(submit(s, m, 0, expects[m][0].n_out), m, 0, expects[m][0].n_out);
    double normal[N_MODELS] = {0};
    for (int m = 0; m < n_models; m++)
        if (m == M_NEAR || m == M_SIDE || m == M_THIRD)
            normal[m] = normal_latency(s, m);

    CHECK(kill(pids[1], SIGSTOP) == 0);
    /* tp's step waits on device 0 (its all-reduce) and the fars' in the
     * leader, each until the heartbeats time out: as many batches waiting
     * as a runner pool has threads (devices + 1) with 3 processes */
    struct engine_req *waiting[N_MODELS] = {0};
    for (int m = M_TP; m < M_SIDE; m++)
        waiting[m] = submit(s, m, 1, TOKENS);
    if (procs > 2) /* its shard on process 2 waits there, on device 2 */
        waiting[M_TP12] = submit(s, M_TP12, 1, TOKENS);
    struct timespec settle = {0, 300 * 1000 * 1000};
    nanosleep(&settle, NULL);
    double t_stop = time_now();
    /* three rounds at least, and for WINDOW_S after the stop */
    for (int i = 0; i < 3 || time_now() - t_stop < WINDOW_S; i++)
        for (int m = 0; m < n_models; m++) {
            if (m != M_NEAR && m != M_SIDE && m != M_THIRD)
                continue;
            double took = timed(s, m, i % 3), bound = BOUND_FACTOR * normal[m] + BOUND_SLACK_S;
            CHECK_MSG(took <= bound,
                      "%s with process 1 stopped: %.3f s at %.2f s after the stop, above its "
                      "bound %.3f s (%.0f x its normal %.3f s + %.1f s)",
                      names[m], took, time_now() - t_stop, bound, BOUND_FACTOR, normal[m],
                      BOUND_SLACK_S);
        }
    CHECK_MSG(time_now() - t_stop < BEAT_TIMEOUT - 1.0,
              "the timed requests ran until %.1f s after the stop, near the heartbeat timeout "
              "(%.0f s): they did not measure a silent process",
              time_now() - t_stop, BEAT_TIMEOUT);
    for (int m = M_TP; m < N_MODELS; m++)
        check_unavailable(waiting[m], m);

    CHECK(kill(pids[1], SIGCONT) == 0);
    /* the loss is final: process 1's models fail at once, near serves */
    double t0 = time_now();
    check_unavailable(submit(s, M_FAR, 2, TOKENS), M_FAR);
    CHECK_MSG(time_now() - t0 < BEAT_TIMEOUT / 2, "far after process 1 was lost took %.1f s",
              time_now() - t0);
    finish(submit(s, M_NEAR, 2, TOKENS), M_NEAR, 2, TOKENS);
    stack_close(s);
    cluster_job_release(job);
}

/* A request to model m with a LONG_PROMPT-token prompt (transformers'
 * prompt repeated: its answer is not checked, it is to fail). */
static struct engine_req *submit_long(struct stack *s, int m)
{
    const struct expect *x = &expects[m][0];
    int32_t prompt[LONG_PROMPT];
    for (int i = 0; i < LONG_PROMPT; i++)
        prompt[i] = x->prompt[i % x->n_prompt];
    struct engine_request_params p = {.model_name = names[m],
                                      .prompt = prompt,
                                      .n_prompt = LONG_PROMPT,
                                      .max_tokens = TOKENS,
                                      .sampling = {.temperature = 0, .top_p = 1, .seed = 1}};
    struct engine_req *r = NULL;
    CHECK_MSG(engine_submit(s->engine, &p, &r) == 0 && r, "submit to %s: %s", names[m], err_msg());
    return r;
}

TEST(stopped_send)
{
    struct stack *s = NULL;
    CHECK_MSG(cluster_job_lead(job, &cfg) == 0, "%s", err_msg());
    CHECK_MSG(stack_open(&cfg, &s) == 0, "%s", err_msg());
    if (!s)
        return;
    const int timed_model = procs > 2 ? M_THIRD : M_NEAR;
    const int warm[] = {M_FAR, timed_model};
    for (int i = 0; i < 2; i++) /* resident and answering right */
        finish(submit(s, warm[i], 0, expects[warm[i]][0].n_out), warm[i], 0,
               expects[warm[i]][0].n_out);
    double normal = normal_latency(s, timed_model);

    CHECK(kill(pids[1], SIGSTOP) == 0);
    /* far's STEP cannot leave until process 1 takes it, which it does not */
    struct engine_req *waiting = submit_long(s, M_FAR);
    struct timespec settle = {0, 300 * 1000 * 1000};
    nanosleep(&settle, NULL);
    double t_stop = time_now();
    for (int i = 0; i < 3 || time_now() - t_stop < WINDOW_S; i++) {
        double took = timed(s, timed_model, i % 3), bound = BOUND_FACTOR * normal + BOUND_SLACK_S;
        CHECK_MSG(took <= bound,
                  "%s with a command to stopped process 1 unsent: %.3f s at %.2f s after the "
                  "stop, above its bound %.3f s (%.0f x its normal %.3f s + %.1f s)",
                  names[timed_model], took, time_now() - t_stop, bound, BOUND_FACTOR, normal,
                  BOUND_SLACK_S);
    }
    CHECK_MSG(time_now() - t_stop < BEAT_TIMEOUT - 1.0,
              "the timed requests ran until %.1f s after the stop, near the heartbeat timeout "
              "(%.0f s): they did not measure a silent process",
              time_now() - t_stop, BEAT_TIMEOUT);
    check_unavailable(waiting, M_FAR);
    CHECK(kill(pids[1], SIGCONT) == 0);
    finish(submit(s, timed_model, 1, TOKENS), timed_model, 1, TOKENS);
    stack_close(s);
    cluster_job_release(job);
}
