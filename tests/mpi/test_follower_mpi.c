/* cluster/follower under mpirun (2 and 3 processes): process 0 plays rank
 * 0's part by hand (the engine's proxy will do the same): it keeps a view
 * of every other process's device (device_open_remote), places the blobs
 * and batch contexts there, and sends REGISTER, LOAD, BATCH_OPEN, STEP,
 * BATCH_CLOSE, OFFLOAD, UNREGISTER and SHUTDOWN; the other processes run
 * follower_serve. A model's shards over the processes (TP 2, PP 2, TP 2 x
 * PP 2; process 0 holding some shards itself) give the whole model's
 * logits within 1e-5 for the prefill and four decode steps, the followers'
 * devices hold exactly the placements the views chose, and commands that
 * cannot work are answered with an error that names them. */
#include <pthread.h>
#include <string.h>

#include "backend/device.h"
#include "cluster/follower.h"
#include "cluster/proto.h"
#include "comm/comm.h"
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
#define MIB (1u << 20)

static int next_tag = 100;
static uint64_t seq;
static struct device *dev[N_DEV]; /* process 0: its own and views of the others' */
static int proc_of[N_DEV];

/* ---- process 0's side ---- */

/* Sends m (with its seq) to process p. */
static int send_as(int p, const struct proto_msg *m)
{
    struct strbuf b = {0};
    int rc = proto_encode(m, &b);
    if (rc == 0)
        rc = mpi_world_send(world, p, CTL, b.p, b.len);
    strbuf_free(&b);
    return rc;
}

/* Sends m to process p as a new command (the next seq). */
static int send_to(int p, struct proto_msg *m)
{
    m->seq = ++seq;
    return send_as(p, m);
}

/* The next answer from p (the caller frees it). */
static int answer_from(int p, struct proto_msg *m)
{
    void *buf = NULL;
    size_t n = 0;
    int rc = mpi_world_recv(world, p, CTL, &buf, &n);
    if (rc == 0)
        rc = proto_decode(buf, n, m);
    free(buf);
    return rc;
}

/* Sends m to every follower and checks each REPLY; 0 or the first error. */
static int command_all(struct proto_msg *m, char *why, size_t cap)
{
    int first = 0;
    m->seq = ++seq; /* one command to all: one seq */
    for (int p = 1; p < procs; p++)
        CHECK(send_as(p, m) == 0);
    for (int p = 1; p < procs; p++) {
        struct proto_msg r;
        CHECK(answer_from(p, &r) == 0);
        CHECK(r.kind == PROTO_REPLY && r.seq == m->seq);
        if (r.status < 0 && first == 0) {
            first = r.status;
            snprintf(why, cap, "%s", r.message ? r.message : "");
        }
        proto_msg_free(&r);
    }
    return first;
}

/* A command to every follower that must succeed. */
static void command_ok(struct proto_msg *m)
{
    char why[512] = "";
    int rc = command_all(m, why, sizeof why);
    CHECK_MSG(rc == 0, "%s: %s", proto_kind_name(m->kind), why);
}

struct lshard {
    int index, stage, rank, device;
    struct model *m;
    struct model_layout layout;
    struct dbuf **blobs; /* on the local device, or placements on a view */
    struct dbuf *ctx;    /* a view's placement of the batch context */
    struct model_exec *ex;
    struct model_stage_io io;
    const int32_t *ids;
    const uint8_t *mask;
    int t_new;
    bool all;
    float *logits;
    int rc;
};

static void *lshard_step(void *arg)
{
    struct lshard *s = arg;
    int wait_rc;
    s->rc = model_forward_stage(s->m, s->ex, &s->io, s->ids, s->mask, s->t_new, s->all, s->logits,
                                &wait_rc);
    return NULL;
}

static void leader_layout(const char *name, const char *dir, int tp, int pp)
{
    struct model_config *cfg = NULL;
    struct st_checkpoint *ck = NULL;
    CHECK(model_config_load(dir, &cfg) == 0 && st_open(dir, &ck) == 0);
    if (!cfg || !ck)
        return;
    const int V = cfg->info.vocab, L = cfg->info.n_layers, n = tp * pp;
    float *pre = malloc(sizeof(float) * B * T * V), *steps = malloc(sizeof(float) * STEPS * B * V);
    float *got = malloc(sizeof(float) * B * T * V);
    int32_t step_ids[STEPS * B], ids[B * T];
    uint8_t mask[B * T];
    reference(dir, KERN_COMPUTE_F32, pre, steps, step_ids);
    make_batch(V, ids, mask);
    static uint32_t model_id;
    uint32_t id = ++model_id;

    /* every shard's layout (for sizes), loaded here when local */
    int32_t devices[N_DEV];
    struct lshard sh[N_DEV] = {0};
    for (int i = 0; i < n; i++) {
        devices[i] = i;
        struct lshard *s = &sh[i];
        *s = (struct lshard){.index = i, .stage = i / tp, .rank = i % tp, .device = i};
        struct model_shard spec = {.tp_rank = s->rank,
                                   .tp_size = tp,
                                   .layer_begin = L * s->stage / pp,
                                   .layer_end = L * (s->stage + 1) / pp};
        CHECK(model_shard_open(cfg, ck, &spec, &s->m, &s->layout) == 0);
        s->blobs = calloc((size_t)s->layout.n_blobs, sizeof *s->blobs);
    }
    struct proto_msg reg = {.kind = PROTO_REGISTER,
                            .model = id,
                            .name = (char *)name,
                            .path = (char *)dir,
                            .tp = (uint32_t)tp,
                            .pp = (uint32_t)pp,
                            .devices = devices,
                            .n_devices = (uint32_t)n,
                            .compute = "f32"};
    command_ok(&reg);

    /* LOAD: place every remote blob on its view; load the local ones here */
    struct proto_place places[256];
    for (int p = 1; p < procs; p++) {
        uint32_t k = 0;
        for (int i = 0; i < n; i++) {
            if (proc_of[i] != p)
                continue;
            for (int b = 0; b < sh[i].layout.n_blobs; b++) {
                if (sh[i].layout.blob_bytes[b] == 0)
                    continue;
                CHECK(device_alloc(dev[i], sh[i].layout.blob_bytes[b], &sh[i].blobs[b]) == 0);
                places[k++] =
                    (struct proto_place){(uint32_t)i, (uint32_t)b, dbuf_offset(sh[i].blobs[b])};
            }
        }
        struct proto_msg load = {.kind = PROTO_LOAD, .model = id, .places = places, .n_places = k};
        CHECK(send_to(p, &load) == 0);
        struct proto_msg r;
        CHECK(answer_from(p, &r) == 0 && r.status == 0);
        CHECK_MSG(r.status == 0, "load on %d: %s", p, r.message);
        proto_msg_free(&r);
    }
    for (int i = 0; i < n; i++) {
        if (proc_of[i] != 0)
            continue;
        for (int b = 0; b < sh[i].layout.n_blobs; b++) {
            size_t bytes = sh[i].layout.blob_bytes[b];
            if (bytes == 0)
                continue;
            CHECK(device_alloc(dev[i], bytes, &sh[i].blobs[b]) == 0);
            CHECK(model_shard_fill(sh[i].m, &sh[i].layout, ck, b, dbuf_ptr(sh[i].blobs[b])) == 0);
            model_shard_bind(sh[i].m, &sh[i].layout, b, dbuf_ptr(sh[i].blobs[b]));
        }
        sh[i].m->compute = KERN_COMPUTE_F32;
    }

    /* BATCH_OPEN: contexts placed on the views, tags shared by every process */
    struct model_exec_shape shape = {.batch = B, .max_len = T + STEPS, .max_rows = B * T};
    int32_t gtags[N_DEV], ctags[N_DEV];
    for (int s = 0; s < pp; s++)
        gtags[s] = tp > 1 ? next_tag++ : -1;
    for (int i = 0; i < (pp - 1) * tp; i++)
        ctags[i] = next_tag++;
    struct comm_group *group[N_DEV] = {0};
    struct comm_channel *chan[N_DEV] = {0};
    for (int s = 0; s < pp; s++) {
        int po[N_DEV];
        bool mine = false;
        for (int r = 0; r < tp; r++)
            mine |= (po[r] = proc_of[s * tp + r]) == 0;
        if (tp > 1 && mine)
            CHECK(comm_group_create_mpi(world, tp, po, gtags[s], &group[s]) == 0);
    }
    for (int i = 0; i < (pp - 1) * tp; i++) {
        int from = proc_of[i], to = proc_of[i + tp];
        if (from == 0 && to == 0)
            CHECK(comm_channel_create(&chan[i]) == 0);
        else if (from == 0 || to == 0)
            CHECK(comm_channel_create_mpi(world, from == 0 ? to : from, ctags[i], &chan[i]) == 0);
    }
    uint64_t batch_id = 1000 + id;
    for (int p = 1; p < procs; p++) {
        uint32_t k = 0;
        for (int i = 0; i < n; i++) {
            if (proc_of[i] != p)
                continue;
            size_t bytes = model_exec_bytes(sh[i].m, dev[i], &shape);
            CHECK(bytes > 0 && device_alloc(dev[i], bytes, &sh[i].ctx) == 0);
            places[k++] =
                (struct proto_place){.shard = (uint32_t)i, .offset = dbuf_offset(sh[i].ctx)};
        }
        struct proto_msg open = {.kind = PROTO_BATCH_OPEN,
                                 .batch = batch_id,
                                 .model = id,
                                 .batch_size = B,
                                 .max_len = T + STEPS,
                                 .max_tokens = B * T,
                                 .max_rows = B * T,
                                 .places = places,
                                 .n_places = k,
                                 .group_tags = gtags,
                                 .n_group_tags = (uint32_t)pp,
                                 .channel_tags = ctags,
                                 .n_channel_tags = (uint32_t)((pp - 1) * tp)};
        CHECK(send_to(p, &open) == 0);
    }
    int n_local = 0;
    struct lshard *local[N_DEV];
    for (int i = 0; i < n; i++) {
        if (proc_of[i] != 0)
            continue;
        struct lshard *s = &sh[i];
        struct comm *c = group[s->stage] ? comm_group_rank(group[s->stage], s->rank) : NULL;
        CHECK(model_exec_init(s->m, dev[i], c, &shape, &s->ex) == 0);
        s->io = (struct model_stage_io){.in = s->stage > 0 ? chan[i - tp] : NULL,
                                        .out = s->stage < pp - 1 ? chan[i] : NULL};
        local[n_local++] = s;
    }
    for (int p = 1; p < procs; p++) {
        struct proto_msg r;
        CHECK(answer_from(p, &r) == 0);
        CHECK_MSG(r.status == 0, "batch open on %d: %s", p, r.message);
        proto_msg_free(&r);
    }

    /* the steps: prefill at every position, then the reference's greedy ids */
    const int holder = (pp - 1) * tp;
    for (int st = -1; st < STEPS; st++) {
        struct proto_msg step = {.kind = PROTO_STEP,
                                 .batch = batch_id,
                                 .t_new = st < 0 ? T : 1,
                                 .flags = st < 0 ? PROTO_STEP_ALL_POSITIONS : 0,
                                 .ids = st < 0 ? ids : &step_ids[st * B],
                                 .n_ids = st < 0 ? B * T : B,
                                 .mask = st < 0 ? mask : NULL,
                                 .n_mask = st < 0 ? B * T : 0};
        for (int p = 1; p < procs; p++)
            CHECK(send_to(p, &step) == 0);
        pthread_t t[N_DEV];
        for (int k = 0; k < n_local; k++) {
            struct lshard *s = local[k];
            s->ids = step.ids, s->mask = step.n_mask ? mask : NULL, s->t_new = (int)step.t_new;
            s->all = st < 0, s->logits = got;
            pthread_create(&t[k], NULL, lshard_step, s);
        }
        for (int k = 0; k < n_local; k++) {
            pthread_join(t[k], NULL);
            CHECK_MSG(local[k]->rc == 0, "shard %d here: %s", local[k]->index, err_msg());
        }
        for (int p = 1; p < procs; p++) {
            struct proto_msg r;
            CHECK(answer_from(p, &r) == 0 && r.kind == PROTO_STEP_DONE);
            CHECK_MSG(r.status == 0, "step on %d: %s", p, r.message);
            if (proc_of[holder] == p) {
                CHECK(r.n_logits == (uint32_t)((st < 0 ? B * T : B) * V));
                if (r.n_logits)
                    memcpy(got, r.logits, sizeof(float) * r.n_logits);
            } else {
                CHECK(r.n_logits == 0);
            }
            proto_msg_free(&r);
        }
        double e = st < 0 ? test_rel_err(got, pre, (size_t)B * T * V)
                          : test_rel_err(got, steps + (size_t)st * B * V, (size_t)B * V);
        CHECK_MSG(e <= TOL, "%s tp %d pp %d: step %d: rel err %g", name, tp, pp, st, e);
    }

    /* a step on a batch that is not open is an error naming it, and the
     * follower goes on */
    struct proto_msg bad = {.kind = PROTO_BATCH_CLEAR, .batch = 77777, .slot = 0};
    char why[512] = "";
    if (procs > 1) {
        CHECK(command_all(&bad, why, sizeof why) == ERR_INVALID);
        CHECK_MSG(strstr(why, "no batch 77777") != NULL, "%s", why);
    }

    /* what cannot work is answered with an error naming it: the model
     * registered again, offloaded under an open batch */
    if (procs > 1) {
        CHECK(command_all(&reg, why, sizeof why) == ERR_INVALID);
        CHECK_MSG(strstr(why, "registered already") != NULL, "%s", why);
        struct proto_msg busy = {.kind = PROTO_OFFLOAD, .model = id};
        CHECK(command_all(&busy, why, sizeof why) == ERR_BUSY);
        CHECK_MSG(strstr(why, "batch open") != NULL, "%s", why);
    }

    struct proto_msg close = {.kind = PROTO_BATCH_CLOSE, .batch = batch_id};
    command_ok(&close);
    struct proto_msg off = {.kind = PROTO_OFFLOAD, .model = id};
    command_ok(&off);
    struct proto_msg unreg = {.kind = PROTO_UNREGISTER, .model = id};
    command_ok(&unreg);
    for (int i = 0; i < n; i++) {
        model_exec_free(sh[i].ex);
        device_free(sh[i].ctx);
        for (int b = 0; b < sh[i].layout.n_blobs; b++)
            device_free(sh[i].blobs[b]);
        free(sh[i].blobs);
        model_close(sh[i].m);
        model_layout_free(&sh[i].layout);
    }
    for (int i = 0; i < N_DEV; i++) {
        comm_group_destroy(group[i]);
        comm_channel_destroy(chan[i]);
    }
    for (int d = 0; d < N_DEV; d++)
        CHECK(device_used(dev[d]) == 0);
    free(pre);
    free(steps);
    free(got);
    st_close(ck);
    model_config_free(cfg);
}

/* A step on a batch whose model was registered but never loaded is
 * answered with an error by the process holding the shard (never run on
 * unbound weights), and every process goes on. TP 2 on devices 0 and 1:
 * shard 1 is process 1's. */
static void step_before_load(const char *dir)
{
    static const uint32_t id = 999;
    int32_t devices[2] = {0, 1};
    struct proto_msg reg = {.kind = PROTO_REGISTER,
                            .model = id,
                            .name = "unloaded",
                            .path = (char *)dir,
                            .tp = 2,
                            .pp = 1,
                            .devices = devices,
                            .n_devices = 2,
                            .compute = "f32"};
    command_ok(&reg);
    struct model *m = NULL;
    struct model_layout lay = {0};
    struct model_config *cfg = NULL;
    struct st_checkpoint *ck = NULL;
    CHECK(model_config_load(dir, &cfg) == 0 && st_open(dir, &ck) == 0);
    struct model_shard spec = {
        .tp_rank = 1, .tp_size = 2, .layer_begin = 0, .layer_end = cfg ? cfg->info.n_layers : 0};
    CHECK(cfg && ck && model_shard_open(cfg, ck, &spec, &m, &lay) == 0);
    struct model_exec_shape shape = {.batch = 1, .max_len = 8, .max_tokens = 4, .max_rows = 1};
    struct dbuf *ctx = NULL;
    CHECK(m && device_alloc(dev[1], model_exec_bytes(m, dev[1], &shape), &ctx) == 0);
    struct proto_place place = {.shard = 1, .offset = ctx ? dbuf_offset(ctx) : 0};
    int32_t gtags[1] = {next_tag++};
    struct proto_msg open = {.kind = PROTO_BATCH_OPEN,
                             .batch = 5555,
                             .model = id,
                             .batch_size = 1,
                             .max_len = 8,
                             .max_tokens = 4,
                             .max_rows = 1,
                             .places = &place,
                             .n_places = 1,
                             .group_tags = gtags,
                             .n_group_tags = 1};
    command_ok(&open);
    int32_t ids[2] = {1, 2};
    struct proto_msg step = {.kind = PROTO_STEP, .batch = 5555, .t_new = 2, .ids = ids, .n_ids = 2};
    for (int p = 1; p < procs; p++)
        CHECK(send_to(p, &step) == 0);
    for (int p = 1; p < procs; p++) {
        struct proto_msg r;
        CHECK(answer_from(p, &r) == 0 && r.kind == PROTO_STEP_DONE);
        if (p == 1)
            CHECK_MSG(r.status == ERR_INVALID && r.message && strstr(r.message, "not loaded"),
                      "process 1 answered %d: %s", r.status, r.message ? r.message : "");
        else
            CHECK(r.status == 0);
        proto_msg_free(&r);
    }
    struct proto_msg close = {.kind = PROTO_BATCH_CLOSE, .batch = 5555};
    command_ok(&close);
    struct proto_msg unreg = {.kind = PROTO_UNREGISTER, .model = id};
    command_ok(&unreg);
    device_free(ctx);
    model_close(m);
    model_layout_free(&lay);
    st_close(ck);
    model_config_free(cfg);
}

TEST(serve_models)
{
    /* job device d on process d % procs */
    for (int d = 0; d < N_DEV; d++)
        proc_of[d] = d % procs;
    if (me != 0) {
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
        return;
    }
    for (int d = 0; d < N_DEV; d++) {
        if (proc_of[d] == 0)
            CHECK(device_open_cpu(d, 64 * MIB, &dev[d]) == 0);
        else
            CHECK(device_open_remote(proc_of[d], DEVICE_CPU, "cpu", 64 * MIB, &dev[d]) == 0);
    }
    static const char *fixtures[] = {"pre_ln_f32", "llama_gqa_f32", "qwen2_bias_f32"};
    for (size_t k = 0; k < sizeof fixtures / sizeof fixtures[0]; k++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/%s", FIXTURES, fixtures[k]);
        leader_layout(fixtures[k], dir, 2, 1);
        leader_layout(fixtures[k], dir, 1, 2);
        leader_layout(fixtures[k], dir, 2, 2);
    }
    step_before_load(FIXTURES "/llama_gqa_f32");
    struct proto_msg bye = {.kind = PROTO_SHUTDOWN};
    command_ok(&bye);
    for (int d = 0; d < N_DEV; d++)
        device_close(dev[d]);
}
