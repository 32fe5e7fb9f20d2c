/* cluster/leader under mpirun (2 and 3 processes): process 0 drives the
 * followers (every other process, follower_serve) through the leader only,
 * holding no device itself, just views of theirs (device_open_view).
 *
 * models: a model's shards on the followers (TP 2, PP 2, TP 2 x PP 2; with
 *   2 processes every shard on one follower), each shard loaded by its own
 *   LOAD, give the single-process reference's logits within 1e-5 for the
 *   prefill and four decode steps; a step while one of two shards on one
 *   follower is not yet loaded comes back as that follower's error.
 * abort: a step failing on one process while another waits for it in a
 *   collective: BATCH_ABORT sets the waiting one free, every process
 *   answers, and the model serves again in a fresh batch.
 * concurrent: two threads calling two followers (one follower with 2
 *   processes) each get the answers to their own commands.
 * errors: a follower's error comes back with its message; calls the leader
 *   refuses name why.
 * stopped: a follower stopped (SIGSTOP) makes the call waiting on it, and
 *   every later call to it, fail naming the process once its heartbeats
 *   stop (the test's only wait is the heartbeat timeout; ctest's TIMEOUT is
 *   the hang guard), a command above MPI's eager limit included;
 *   the other follower still answers; continued, it is told to shut down. */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/device.h"
#include "cluster/follower.h"
#include "cluster/leader.h"
#include "cluster/proto.h"
#include "comm/mpi.h"
#include "core/error.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "mpi/mpi_test.h"
#include "sharded_ref.h"
#include "test.h"

#define FIXTURES SHARDSWAP_SOURCE_DIR "/tests/fixtures/models"
#define TOL 1e-5
#define STEPS SHARDED_STEPS
#define N_DEV 4
#define CTL 9000
#define PID_TAG 9001
#define MIB (1u << 20)
#define BEAT_INTERVAL 0.2
#define BEAT_TIMEOUT 3.0

static struct leader *lead;
static struct device *view[N_DEV]; /* process 0's views of the followers' devices */
static int proc_of[N_DEV];

/* Job device d is on follower 1 + d % (procs - 1); process 0 has none. */
static void place_devices(void)
{
    for (int d = 0; d < N_DEV; d++)
        proc_of[d] = 1 + d % (procs - 1);
}

/* A follower's whole part: heartbeats, its devices, serving until SHUTDOWN. */
static void follow(void)
{
    struct mpi_watch_config wc = {.interval_s = BEAT_INTERVAL, .timeout_s = BEAT_TIMEOUT};
    CHECK(mpi_world_watch(world, &wc) == 0);
    struct device *mine[N_DEV] = {0};
    for (int d = 0; d < N_DEV; d++)
        if (proc_of[d] == me)
            CHECK(device_open_cpu(d, 64 * MIB, &mine[d]) == 0);
    struct follower *f = NULL;
    CHECK(follower_create(world, mine, proc_of, N_DEV, CTL, &f) == 0);
    CHECK_MSG(f && follower_serve(f) == 0, "%s", err_msg());
    follower_destroy(f);
    for (int d = 0; d < N_DEV; d++) {
        if (mine[d])
            CHECK_MSG(device_used(mine[d]) == 0, "device %d still holds bytes", d);
        device_close(mine[d]);
    }
}

static void lead_open(void)
{
    for (int d = 0; d < N_DEV; d++)
        CHECK(device_open_view(proc_of[d], DEVICE_CPU, "cpu", 64 * MIB, &view[d]) == 0);
    struct leader_config cfg = {
        .ctl_tag = CTL, .beat_interval_s = BEAT_INTERVAL, .beat_timeout_s = BEAT_TIMEOUT};
    CHECK_MSG(leader_create(world, &cfg, &lead) == 0, "%s", err_msg());
}

static void lead_close(void)
{
    CHECK_MSG(lead && leader_shutdown(lead) == 0, "%s", err_msg());
    leader_destroy(lead);
    lead = NULL;
    for (int d = 0; d < N_DEV; d++) {
        CHECK_MSG(device_used(view[d]) == 0, "view of device %d still holds placements", d);
        device_close(view[d]);
        view[d] = NULL;
    }
}

/* ---- models ---- */

struct lshard {
    struct model *m;
    struct model_layout layout;
    struct dbuf **blobs; /* placements on the view */
    struct dbuf *ctx;
};

static uint32_t model_id; /* the last one registered */

/* LOAD of shard i alone: its blobs placed on the view of its device. */
static int load_shard(uint32_t id, struct lshard *s, int i, int device)
{
    struct proto_place places[256];
    uint32_t k = 0;
    for (int b = 0; b < s->layout.n_blobs; b++) {
        if (s->layout.blob_bytes[b] == 0)
            continue;
        CHECK(k < 256 && device_alloc(view[device], s->layout.blob_bytes[b], &s->blobs[b]) == 0);
        places[k++] = (struct proto_place){(uint32_t)i, (uint32_t)b, dbuf_offset(s->blobs[b])};
    }
    struct proto_msg load = {.kind = PROTO_LOAD, .model = id, .places = places, .n_places = k};
    return leader_call(lead, proc_of[device], &load);
}

/* REGISTER of model id (tp x pp shards on job devices devs[], f32) with
 * every follower. */
static void register_all(uint32_t id, const char *name, const char *dir, int tp, int pp,
                         int32_t *devs)
{
    struct proto_msg reg = {.kind = PROTO_REGISTER,
                            .model = id,
                            .name = (char *)name,
                            .path = (char *)dir,
                            .tp = (uint32_t)tp,
                            .pp = (uint32_t)pp,
                            .devices = devs,
                            .n_devices = (uint32_t)(tp * pp),
                            .compute = "f32"};
    CHECK_MSG(leader_call_all(lead, &reg) == 0, "%s: %s", name, err_msg());
}

/* The tp x pp shards of ref's model, with room for their placements. */
static void shards_open(const struct sharded_case *ref, struct lshard *sh, int tp, int pp)
{
    const int L = ref->layers;
    for (int i = 0; i < tp * pp; i++) {
        struct model_shard spec = {.tp_rank = i % tp,
                                   .tp_size = tp,
                                   .layer_begin = L * (i / tp) / pp,
                                   .layer_end = L * (i / tp + 1) / pp};
        CHECK(model_shard_open(ref->cfg, ref->ck, &spec, &sh[i].m, &sh[i].layout) == 0);
        sh[i].blobs = calloc((size_t)sh[i].layout.n_blobs, sizeof *sh[i].blobs);
    }
}

/* Model id offloaded and forgotten everywhere (its batches closed), its n
 * shards and their placements on the views freed. */
static void model_end(uint32_t id, struct lshard *sh, int n)
{
    struct proto_msg off = {.kind = PROTO_OFFLOAD, .model = id};
    CHECK_MSG(leader_call_all(lead, &off) == 0, "%s", err_msg());
    struct proto_msg unreg = {.kind = PROTO_UNREGISTER, .model = id};
    CHECK_MSG(leader_call_all(lead, &unreg) == 0, "%s", err_msg());
    for (int i = 0; i < n; i++) {
        device_free(sh[i].ctx);
        for (int b = 0; b < sh[i].layout.n_blobs; b++)
            device_free(sh[i].blobs[b]);
        free(sh[i].blobs);
        model_close(sh[i].m);
        model_layout_free(&sh[i].layout);
    }
}

/* One BATCH_OPEN of model id (shards sh on devices[]) for all: each
 * follower takes its shards' places (contexts placed on the views, freed
 * first when placed before), with fresh tags. */
static int open_batch(uint32_t id, struct lshard *sh, const int *devices, int tp, int pp,
                      uint64_t batch_id)
{
    static int next_tag = 100;
    const int n = tp * pp;
    struct model_exec_shape shape = {.batch = B, .max_len = T + STEPS, .max_rows = B * T};
    struct proto_place places[N_DEV];
    for (int i = 0; i < n; i++) {
        device_free(sh[i].ctx);
        size_t bytes = model_exec_bytes(sh[i].m, view[devices[i]], &shape);
        CHECK(bytes > 0 && device_alloc(view[devices[i]], bytes, &sh[i].ctx) == 0);
        places[i] = (struct proto_place){.shard = (uint32_t)i, .offset = dbuf_offset(sh[i].ctx)};
    }
    int32_t gtags[N_DEV], ctags[N_DEV];
    for (int s = 0; s < pp; s++)
        gtags[s] = tp > 1 ? next_tag++ : -1;
    for (int i = 0; i < (pp - 1) * tp; i++)
        ctags[i] = next_tag++;
    struct proto_msg open = {.kind = PROTO_BATCH_OPEN,
                             .batch = batch_id,
                             .model = id,
                             .batch_size = B,
                             .max_len = T + STEPS,
                             .max_tokens = B * T,
                             .max_rows = B * T,
                             .places = places,
                             .n_places = (uint32_t)n,
                             .group_tags = gtags,
                             .n_group_tags = (uint32_t)pp,
                             .channel_tags = ctags,
                             .n_channel_tags = (uint32_t)((pp - 1) * tp)};
    return leader_call_all(lead, &open);
}

/* The model at dir as tp x pp shards on devices[], through the leader.
 * early: every shard on one follower; a step before its last shard is
 * loaded must come back as that follower's error. */
static void run_layout(const char *name, const char *dir, int tp, int pp, const int *devices,
                       bool early)
{
    struct sharded_case ref;
    if (!sharded_case_open(dir, &ref))
        return;
    const int V = ref.vocab, n = tp * pp;
    float *got = malloc(sizeof(float) * B * T * V);
    uint32_t id = ++model_id;

    struct lshard sh[N_DEV] = {0};
    int32_t devs[N_DEV];
    for (int i = 0; i < n; i++)
        devs[i] = devices[i];
    shards_open(&ref, sh, tp, pp);
    register_all(id, name, dir, tp, pp, devs);

    /* every shard by its own LOAD; the last one after the early step */
    for (int i = 0; i < n - (early ? 1 : 0); i++)
        CHECK_MSG(load_shard(id, &sh[i], i, devices[i]) == 0, "%s: load shard %d: %s", name, i,
                  err_msg());

    uint64_t batch_id = 1000 + id;
    CHECK_MSG(open_batch(id, sh, devices, tp, pp, batch_id) == 0, "%s: batch open: %s", name,
              err_msg());

    struct proto_msg prefill = {.kind = PROTO_STEP,
                                .batch = batch_id,
                                .t_new = T,
                                .flags = PROTO_STEP_ALL_POSITIONS,
                                .ids = ref.ids,
                                .n_ids = B * T,
                                .mask = ref.mask,
                                .n_mask = B * T};
    size_t n_got = 0;
    if (early) {
        int rc = leader_step(lead, &prefill, got, (size_t)B * T * V, &n_got);
        char want[64];
        snprintf(want, sizeof want, "shard %d of model %u is not loaded", n - 1, id);
        CHECK_MSG(rc == ERR_INVALID && strstr(err_msg(), want) && strstr(err_msg(), "process 1"),
                  "%s: a step before the last load gave %d: %s", name, rc, err_msg());
        CHECK_MSG(load_shard(id, &sh[n - 1], n - 1, devices[n - 1]) == 0, "%s: %s", name,
                  err_msg());
    }

    /* the steps: prefill at every position, then the reference's greedy ids */
    for (int st = -1; st < STEPS; st++) {
        struct proto_msg step = prefill;
        if (st >= 0) {
            step = (struct proto_msg){.kind = PROTO_STEP,
                                      .batch = batch_id,
                                      .t_new = 1,
                                      .ids = &ref.step_ids[st * B],
                                      .n_ids = B};
        }
        size_t rows = st < 0 ? (size_t)B * T : B;
        int rc = leader_step(lead, &step, got, (size_t)B * T * V, &n_got);
        CHECK_MSG(rc == 0, "%s tp %d pp %d: step %d: %s", name, tp, pp, st, err_msg());
        CHECK_MSG(n_got == rows * (size_t)V, "%s: step %d: %zu logits", name, st, n_got);
        double e = st < 0 ? test_rel_err(got, ref.pre, rows * V)
                          : test_rel_err(got, ref.steps + (size_t)st * B * V, rows * V);
        CHECK_MSG(rc == 0 && e <= TOL, "%s tp %d pp %d: step %d: rel err %g", name, tp, pp, st, e);
    }

    struct proto_msg close = {.kind = PROTO_BATCH_CLOSE, .batch = batch_id};
    CHECK_MSG(leader_call_all(lead, &close) == 0, "%s", err_msg());
    model_end(id, sh, n);
    free(got);
    sharded_case_close(&ref);
}

TEST(models)
{
    place_devices();
    if (me != 0) {
        follow();
        return;
    }
    lead_open();
    static const int every[N_DEV] = {0, 1, 2, 3};
    static const char *fixtures[] = {"pre_ln_f32", "llama_gqa_f32"};
    for (size_t k = 0; k < sizeof fixtures / sizeof fixtures[0]; k++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/%s", FIXTURES, fixtures[k]);
        run_layout(fixtures[k], dir, 2, 1, every, false);
        run_layout(fixtures[k], dir, 1, 2, every, false);
        run_layout(fixtures[k], dir, 2, 2, every, false);
    }
    /* two shards on follower 1: devices 0 and procs - 1 */
    const int one[2] = {0, procs - 1};
    run_layout("qwen2_bias_f32", FIXTURES "/qwen2_bias_f32", 2, 1, one, true);
    lead_close();
}

/* ---- a step failing on one process while another waits for it ---- */

/* TP 2 over devices 0 and 1 (with 3 processes, processes 1 and 2: the
 * all-reduce crosses them), shard 0 not loaded: process 1 fails the step
 * at once, and with 3 processes process 2's shard waits in the all-reduce
 * for a part that never comes. leader_wait_failed says so, BATCH_ABORT
 * sets process 2 free, every process answers (no hang: ctest's TIMEOUT is
 * the guard), the first error is process 1's; then, loaded, a fresh batch
 * of the same model gives the reference's logits. */
TEST(abort)
{
    place_devices();
    if (me != 0) {
        follow();
        return;
    }
    lead_open();
    struct sharded_case ref;
    const char *dir = FIXTURES "/llama_gqa_f32";
    if (!sharded_case_open(dir, &ref)) {
        lead_close();
        return;
    }
    const int V = ref.vocab, devices[2] = {0, 1};
    uint32_t id = ++model_id;
    struct lshard sh[2] = {0};
    shards_open(&ref, sh, 2, 1);
    int32_t devs[2] = {0, 1};
    register_all(id, "abort", dir, 2, 1, devs);
    CHECK_MSG(load_shard(id, &sh[1], 1, devices[1]) == 0, "%s", err_msg());
    uint64_t batch_id = 5000 + id;
    CHECK_MSG(open_batch(id, sh, devices, 2, 1, batch_id) == 0, "%s", err_msg());
    struct proto_msg prefill = {.kind = PROTO_STEP,
                                .batch = batch_id,
                                .t_new = T,
                                .flags = PROTO_STEP_ALL_POSITIONS,
                                .ids = ref.ids,
                                .n_ids = B * T,
                                .mask = ref.mask,
                                .n_mask = B * T};
    float *got = malloc(sizeof(float) * B * T * V);
    size_t n_got = 0;
    struct leader_call *c = NULL;
    CHECK_MSG(leader_begin(lead, NULL, 0, &prefill, &c) == 0, "%s", err_msg());
    if (c) {
        CHECK(leader_wait_failed(lead, c));
        struct proto_msg abort = {
            .kind = PROTO_BATCH_ABORT, .batch = batch_id, .status = ERR_CANCELLED};
        CHECK_MSG(leader_post(lead, NULL, 0, &abort) == 0, "%s", err_msg());
        int rc = leader_end(lead, c, got, (size_t)B * T * V, &n_got);
        CHECK_MSG(rc == ERR_INVALID && strstr(err_msg(), "process 1") &&
                      strstr(err_msg(), "shard 0 of model") && strstr(err_msg(), "not loaded"),
                  "the step answered %d: %s", rc, err_msg());
    }
    struct proto_msg close = {.kind = PROTO_BATCH_CLOSE, .batch = batch_id};
    CHECK_MSG(leader_call_all(lead, &close) == 0, "%s", err_msg());

    /* loaded, a fresh batch serves */
    CHECK_MSG(load_shard(id, &sh[0], 0, devices[0]) == 0, "%s", err_msg());
    CHECK_MSG(open_batch(id, sh, devices, 2, 1, batch_id + 1) == 0, "%s", err_msg());
    prefill.batch = batch_id + 1;
    int rc = leader_step(lead, &prefill, got, (size_t)B * T * V, &n_got);
    CHECK_MSG(rc == 0 && n_got == (size_t)B * T * V, "after the abort: %d: %s", rc, err_msg());
    double e = rc == 0 ? test_rel_err(got, ref.pre, (size_t)B * T * V) : 1;
    CHECK_MSG(e <= TOL, "after the abort: rel err %g", e);
    close.batch = batch_id + 1;
    CHECK_MSG(leader_call_all(lead, &close) == 0, "%s", err_msg());
    model_end(id, sh, 2);
    free(got);
    sharded_case_close(&ref);
    lead_close();
}

/* ---- concurrent callers ---- */

#define ROUNDS 200

struct caller {
    int index, proc;
    int failures;
    char why[512];
};

/* Commands that fail with a message naming the caller's own model id, and
 * now and then a register and unregister that succeed. */
static void *caller_main(void *arg)
{
    struct caller *c = arg;
    int32_t devs[1] = {c->proc - 1}; /* job device proc - 1 is on follower proc */
    for (int k = 0; k < ROUNDS && c->failures == 0; k++) {
        uint32_t id = (uint32_t)((c->index + 1) * 100000 + k);
        struct proto_msg unreg = {.kind = PROTO_UNREGISTER, .model = id};
        char want[64];
        snprintf(want, sizeof want, "no model %u is registered", id);
        int rc = leader_call(lead, c->proc, &unreg);
        if (rc != ERR_INVALID || !strstr(err_msg(), want)) {
            c->failures++;
            snprintf(c->why, sizeof c->why, "round %d: %d: %s", k, rc, err_msg());
        }
        if (k % 50 != 0)
            continue;
        struct proto_msg reg = {.kind = PROTO_REGISTER,
                                .model = id,
                                .name = "tiny",
                                .path = FIXTURES "/pre_ln_f32",
                                .tp = 1,
                                .pp = 1,
                                .devices = devs,
                                .n_devices = 1,
                                .compute = "f32"};
        if (leader_call(lead, c->proc, &reg) < 0 || leader_call(lead, c->proc, &unreg) < 0) {
            c->failures++;
            snprintf(c->why, sizeof c->why, "round %d: %s", k, err_msg());
        }
    }
    return NULL;
}

TEST(concurrent)
{
    place_devices();
    if (me != 0) {
        follow();
        return;
    }
    lead_open();
    struct caller c[2] = {{.index = 0, .proc = 1}, {.index = 1, .proc = procs - 1}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, caller_main, &c[i]);
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        CHECK_MSG(c[i].failures == 0, "caller of process %d: %s", c[i].proc, c[i].why);
    }
    lead_close();
}

/* ---- errors ---- */

TEST(errors)
{
    place_devices();
    if (me != 0) {
        follow();
        return;
    }
    lead_open();
    /* a follower's error, with its message, the lowest process's first */
    struct proto_msg bad = {.kind = PROTO_BATCH_CLEAR, .batch = 77777, .slot = 0};
    CHECK(leader_call_all(lead, &bad) == ERR_INVALID);
    CHECK_MSG(strstr(err_msg(), "process 1") && strstr(err_msg(), "no batch 77777"), "%s",
              err_msg());
    int32_t devs[1] = {0};
    struct proto_msg reg = {.kind = PROTO_REGISTER,
                            .model = 5,
                            .name = "nowhere",
                            .path = FIXTURES "/no_such_model",
                            .tp = 1,
                            .pp = 1,
                            .devices = devs,
                            .n_devices = 1,
                            .compute = "f32"};
    CHECK(leader_call(lead, 1, &reg) < 0);
    CHECK_MSG(strstr(err_msg(), "model nowhere"), "%s", err_msg());
    /* what the leader refuses itself */
    CHECK(leader_call(lead, 0, &bad) == ERR_INVALID && strstr(err_msg(), "not a follower"));
    CHECK(leader_call(lead, procs, &bad) == ERR_INVALID && strstr(err_msg(), "not a follower"));
    struct proto_msg reply = {.kind = PROTO_REPLY};
    CHECK(leader_call(lead, 1, &reply) == ERR_INVALID && strstr(err_msg(), "not a command"));
    float x;
    size_t got;
    CHECK(leader_step(lead, &bad, &x, 1, &got) == ERR_INVALID && strstr(err_msg(), "leader_step"));
    /* the followers go on */
    struct proto_msg unreg = {.kind = PROTO_UNREGISTER, .model = 5};
    CHECK(leader_call_all(lead, &unreg) == ERR_INVALID && strstr(err_msg(), "no model 5"));
    CHECK_MSG(leader_shutdown(lead) == 0, "%s", err_msg());
    CHECK(leader_call_all(lead, &unreg) == ERR_INVALID && strstr(err_msg(), "shut down"));
    leader_destroy(lead);
    lead = NULL;
    for (int d = 0; d < N_DEV; d++) {
        device_close(view[d]);
        view[d] = NULL;
    }
}

/* ---- a stopped follower ---- */

TEST(stopped)
{
    place_devices();
    const int last = procs - 1;
    if (me != 0) {
        int pid = (int)getpid();
        CHECK(mpi_world_send(world, 0, PID_TAG, &pid, sizeof pid) == 0);
        follow();
        return;
    }
    int pid = 0;
    void *p = NULL;
    size_t n = 0;
    CHECK(mpi_world_recv(world, last, PID_TAG, &p, &n) == 0 && n == sizeof pid);
    if (p)
        memcpy(&pid, p, sizeof pid);
    free(p);
    for (int q = 1; q < last; q++) { /* the others' pids: not needed */
        CHECK(mpi_world_recv(world, q, PID_TAG, &p, &n) == 0);
        free(p);
    }
    lead_open();
    struct proto_msg unreg = {.kind = PROTO_UNREGISTER, .model = 1};
    CHECK(leader_call_all(lead, &unreg) == ERR_INVALID); /* everyone answers */

    CHECK(pid > 0 && kill(pid, SIGSTOP) == 0);
    char want[64];
    snprintf(want, sizeof want, "process %d is not answering", last);
    /* first a command far above MPI's eager limit: no hang whether its send
     * completes or is given up once the follower is lost (over loopback
     * OpenMPI completes it; the other follower, with 3 processes, answers
     * that no such batch is open) */
    enum { BIG = 1 << 20 };
    int32_t *big = calloc(BIG, sizeof *big);
    struct proto_msg step = {
        .kind = PROTO_STEP, .batch = 4242, .t_new = 1, .ids = big, .n_ids = BIG};
    float logit;
    size_t got;
    int rc = leader_step(lead, &step, &logit, 1, &got);
    CHECK_MSG(rc < 0 && strstr(err_msg(), procs > 2 ? "no batch 4242" : want),
              "a large step with a follower stopped: %d: %s", rc, err_msg());
    free(big);
    rc = leader_call(lead, last, &unreg);
    CHECK_MSG(rc == ERR_UNREACHABLE && strstr(err_msg(), want), "a call to the stopped one: %d: %s", rc,
              err_msg());
    rc = leader_call_all(lead, &unreg);
    CHECK_MSG(rc < 0 && strstr(err_msg(), procs > 2 ? "no model 1" : want), "%d: %s", rc,
              err_msg());
    if (procs > 2) {
        CHECK(leader_call(lead, 1, &unreg) == ERR_INVALID && strstr(err_msg(), "no model 1"));
    }

    /* continued: heard again, then told to shut down (a peer still lost at
     * close would end the job) */
    CHECK(kill(pid, SIGCONT) == 0);
    for (int i = 0; i < 60 * 100 && mpi_world_proc_lost(world, last); i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    CHECK(!mpi_world_proc_lost(world, last));
    lead_close();
}
