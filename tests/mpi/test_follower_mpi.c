/* cluster/follower under mpirun (2 and 3 processes): process 0 plays rank
 * 0's part (the engine's proxy will do the same): it keeps a view of every
 * other process's device (device_open_view), places the blobs and batch
 * contexts there, runs its own shards, and sends REGISTER, LOAD,
 * BATCH_OPEN, STEP, BATCH_CLOSE, OFFLOAD, UNREGISTER and SHUTDOWN through
 * the leader (cluster/leader.h); the other processes run follower_serve. A model's shards over the
 * processes (TP 2, PP 2, TP 2 x PP 2; process 0 holding some shards itself) give the whole model's
 * logits within 1e-5 for the prefill and four decode steps, the followers'
 * devices hold exactly the placements the views chose, and commands that
 * cannot work are answered with an error that names them. */
#include <pthread.h>
#include <string.h>

#include "backend/device.h"
#include "cluster/follower.h"
#include "cluster/leader.h"
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
static struct leader *lead;
static struct device *dev[N_DEV]; /* process 0: its own and views of the others' */
static int proc_of[N_DEV];

/* ---- process 0's side ---- */

/* A command to every follower that must succeed. */
static void command_ok(const struct proto_msg *m)
{
    CHECK_MSG(leader_call_all(lead, m) == 0, "%s: %s", proto_kind_name(m->kind), err_msg());
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
    struct sharded_case ref;
    if (!sharded_case_open(dir, &ref))
        return;
    const int V = ref.vocab, L = ref.layers, n = tp * pp;
    float *got = malloc(sizeof(float) * B * T * V);
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
        CHECK(model_shard_open(ref.cfg, ref.ck, &spec, &s->m, &s->layout) == 0);
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
        CHECK_MSG(leader_call(lead, p, &load) == 0, "load on %d: %s", p, err_msg());
    }
    for (int i = 0; i < n; i++) {
        if (proc_of[i] != 0)
            continue;
        for (int b = 0; b < sh[i].layout.n_blobs; b++) {
            size_t bytes = sh[i].layout.blob_bytes[b];
            if (bytes == 0)
                continue;
            CHECK(device_alloc(dev[i], bytes, &sh[i].blobs[b]) == 0);
            CHECK(model_shard_fill(sh[i].m, &sh[i].layout, ref.ck, b, dbuf_ptr(sh[i].blobs[b])) == 0);
            model_shard_bind(sh[i].m, &sh[i].layout, b, dbuf_ptr(sh[i].blobs[b]));
        }
        model_set_compute(sh[i].m, KERN_COMPUTE_F32);
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
    /* one BATCH_OPEN for every follower: each takes its own shards' places */
    uint64_t batch_id = 1000 + id;
    {
        uint32_t k = 0;
        for (int i = 0; i < n; i++) {
            if (proc_of[i] == 0)
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
        command_ok(&open);
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

    /* the steps: prefill at every position, then the reference's greedy ids */
    const int holder = (pp - 1) * tp;
    for (int st = -1; st < STEPS; st++) {
        struct proto_msg step = {.kind = PROTO_STEP,
                                 .batch = batch_id,
                                 .t_new = st < 0 ? T : 1,
                                 .flags = st < 0 ? PROTO_STEP_ALL_POSITIONS : 0,
                                 .ids = st < 0 ? ref.ids : &ref.step_ids[st * B],
                                 .n_ids = st < 0 ? B * T : B,
                                 .mask = st < 0 ? ref.mask : NULL,
                                 .n_mask = st < 0 ? B * T : 0};
        pthread_t t[N_DEV];
        for (int k = 0; k < n_local; k++) {
            struct lshard *s = local[k];
            s->ids = step.ids, s->mask = step.n_mask ? ref.mask : NULL, s->t_new = (int)step.t_new;
            s->all = st < 0, s->logits = got;
            pthread_create(&t[k], NULL, lshard_step, s);
        }
        /* the followers' part while ours runs; the holder's logits into got */
        size_t n_got = 0;
        int rc = leader_step(lead, &step, got, (size_t)B * T * V, &n_got);
        CHECK_MSG(rc == 0, "step: %s", err_msg());
        CHECK(n_got == (proc_of[holder] != 0 ? (size_t)(st < 0 ? B * T : B) * V : 0));
        for (int k = 0; k < n_local; k++) {
            pthread_join(t[k], NULL);
            CHECK_MSG(local[k]->rc == 0, "shard %d here: %s", local[k]->index, err_msg());
        }
        double e = st < 0 ? test_rel_err(got, ref.pre, (size_t)B * T * V)
                          : test_rel_err(got, ref.steps + (size_t)st * B * V, (size_t)B * V);
        CHECK_MSG(e <= TOL, "%s tp %d pp %d: step %d: rel err %g", name, tp, pp, st, e);
    }

    /* a step on a batch that is not open is an error naming it, and the
     * follower goes on */
    struct proto_msg bad = {.kind = PROTO_BATCH_CLEAR, .batch = 77777, .slot = 0};
    if (procs > 1) {
        CHECK(leader_call_all(lead, &bad) == ERR_INVALID);
        CHECK_MSG(strstr(err_msg(), "no batch 77777") != NULL, "%s", err_msg());
    }

    /* what cannot work is answered with an error naming it: the model
     * registered again, offloaded under an open batch */
    if (procs > 1) {
        CHECK(leader_call_all(lead, &reg) == ERR_INVALID);
        CHECK_MSG(strstr(err_msg(), "registered already") != NULL, "%s", err_msg());
        struct proto_msg busy = {.kind = PROTO_OFFLOAD, .model = id};
        CHECK(leader_call_all(lead, &busy) == ERR_BUSY);
        CHECK_MSG(strstr(err_msg(), "batch open") != NULL, "%s", err_msg());
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
    free(got);
    sharded_case_close(&ref);
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
    float logit;
    size_t n_got = 0;
    int rc = leader_step(lead, &step, &logit, 1, &n_got); /* only process 1 fails */
    CHECK_MSG(rc == ERR_INVALID && strstr(err_msg(), "process 1") &&
                  strstr(err_msg(), "not loaded"),
              "the step answered %d: %s", rc, err_msg());
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
            CHECK(device_open_view(proc_of[d], DEVICE_CPU, "cpu", 64 * MIB, &dev[d]) == 0);
    }
    struct leader_config cfg = {.ctl_tag = CTL}; /* no heartbeats: nobody is stopped here */
    CHECK_MSG(leader_create(world, &cfg, &lead) == 0, "%s", err_msg());
    static const char *fixtures[] = {"pre_ln_f32", "llama_gqa_f32", "qwen2_bias_f32"};
    for (size_t k = 0; k < sizeof fixtures / sizeof fixtures[0]; k++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/%s", FIXTURES, fixtures[k]);
        leader_layout(fixtures[k], dir, 2, 1);
        leader_layout(fixtures[k], dir, 1, 2);
        leader_layout(fixtures[k], dir, 2, 2);
    }
    step_before_load(FIXTURES "/llama_gqa_f32");
    CHECK_MSG(leader_shutdown(lead) == 0, "%s", err_msg());
    leader_destroy(lead);
    lead = NULL;
    for (int d = 0; d < N_DEV; d++)
        device_close(dev[d]);
}
