/* A model whose shards live in several processes (tests/CMakeLists.txt
 * runs this as 2 and 3 processes of one job) computes what the whole model
 * computes in one process: every f32 fixture family (OPT, Llama with GQA,
 * Mistral's head_dim, Qwen2's biases) under TP 2, PP 2 and TP 2 x PP 2,
 * shards placed round-robin over the processes (and the other way round),
 * with TP groups over comm/mpi and PP channels between processes (a
 * mailbox where both stages are in one process): the left-padded batch's
 * logits at every position and four decode steps through the sharded KV
 * caches, within max |diff| / max |ref| <= 1e-5, as test_sharded states for
 * threads (sums in another order: f32 rounding, nothing more). */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "backend/device.h"
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
#define MAX_SHARDS 4

static int next_tag;

/* One shard of this process and what it runs on. */
struct shard {
    int stage, rank;
    struct model *m;
    struct device *dev;
    struct model_exec *ex;
    struct model_stage_io io;
    /* the step in progress */
    const int32_t *ids;
    const uint8_t *mask;
    int t_new;
    bool all_positions;
    float *logits;
    int rc;
    char msg[512];
};

static void *shard_step(void *arg)
{
    struct shard *sh = arg;
    int wait_rc = 0;
    sh->rc = model_forward_stage(sh->m, sh->ex, &sh->io, sh->ids, sh->mask, sh->t_new,
                                 sh->all_positions, sh->logits, &wait_rc);
    snprintf(sh->msg, sizeof sh->msg, "%s", sh->rc < 0 ? err_msg() : "");
    return NULL;
}

/* Runs one step on every local shard at once (TP ranks meet in
 * collectives); 0 or the first error, printed. */
static int step_all(struct shard *local, int n_local)
{
    pthread_t t[MAX_SHARDS];
    for (int i = 0; i < n_local; i++)
        pthread_create(&t[i], NULL, shard_step, &local[i]);
    int rc = 0;
    for (int i = 0; i < n_local; i++) {
        pthread_join(t[i], NULL);
        if (local[i].rc < 0 && rc == 0) {
            rc = local[i].rc;
            fprintf(stderr, "process %d, stage %d rank %d: %s\n", me, local[i].stage, local[i].rank,
                    local[i].msg);
        }
    }
    return rc;
}

struct layout {
    int tp, pp;
    int proc_of[MAX_SHARDS]; /* shard s * tp + r -> process */
    bool ep;                 /* routed experts whole on the TP ranks */
};

/* The groups and channels of a layout, made in every process in the same
 * order with the same tags (next_tag counts alike everywhere). */
struct wiring {
    struct comm_group *group[MAX_SHARDS]; /* per stage, when this process holds a rank */
    struct comm_channel *send[MAX_SHARDS], *recv[MAX_SHARDS]; /* per shard: its out and in */
    struct comm_channel *shared[MAX_SHARDS]; /* mailboxes inside this process, owned here */
};

static int wire(const struct layout *l, struct wiring *wr)
{
    memset(wr, 0, sizeof *wr);
    int rc = 0;
    for (int s = 0; s < l->pp && rc == 0; s++) {
        int tag = next_tag++;
        const int *proc_of = &l->proc_of[s * l->tp];
        bool mine = false;
        for (int r = 0; r < l->tp; r++)
            mine |= proc_of[r] == me;
        if (l->tp > 1 && mine)
            rc = comm_group_create_mpi(world, l->tp, proc_of, tag, &wr->group[s]);
    }
    for (int s = 0; s + 1 < l->pp && rc == 0; s++)
        for (int r = 0; r < l->tp && rc == 0; r++) {
            int from = s * l->tp + r, to = from + l->tp, tag = next_tag++;
            int pf = l->proc_of[from], pt = l->proc_of[to];
            if (pf == me && pt == me) {
                rc = comm_channel_create(&wr->shared[from]);
                wr->send[from] = wr->recv[to] = wr->shared[from];
            } else if (pf == me) {
                rc = comm_channel_create_mpi(world, pt, tag, &wr->send[from]);
            } else if (pt == me) {
                rc = comm_channel_create_mpi(world, pf, tag, &wr->recv[to]);
            }
        }
    if (rc < 0)
        fprintf(stderr, "process %d: wiring: %s\n", me, err_msg());
    return rc;
}

static void unwire(const struct layout *l, struct wiring *wr)
{
    for (int i = 0; i < l->tp * l->pp; i++) {
        comm_group_destroy(wr->group[i]);
        if (wr->shared[i])
            comm_channel_destroy(wr->shared[i]);
        else if (wr->send[i])
            comm_channel_destroy(wr->send[i]);
        if (wr->recv[i] && !(i >= l->tp && wr->shared[i - l->tp]))
            comm_channel_destroy(wr->recv[i]);
    }
}

static void check_layout(const char *name, const char *dir, const struct layout *l)
{
    struct sharded_case ref;
    if (!sharded_case_open(dir, &ref))
        return;
    const int V = ref.vocab, L = ref.layers;
    float *got_pre = calloc((size_t)B * T * V, sizeof(float));
    float *got_step = calloc((size_t)B * V, sizeof(float));

    struct wiring wr;
    int rc = wire(l, &wr);
    struct shard local[MAX_SHARDS] = {0};
    int n_local = 0, holder = -1; /* holder: the local index of TP rank 0 of the last stage */
    for (int i = 0; i < l->tp * l->pp && rc == 0; i++) {
        if (l->proc_of[i] != me)
            continue;
        struct shard *sh = &local[n_local];
        sh->stage = i / l->tp;
        sh->rank = i % l->tp;
        struct model_shard spec = {.tp_rank = sh->rank,
                                   .tp_size = l->tp,
                                   .layer_begin = L * sh->stage / l->pp,
                                   .layer_end = L * (sh->stage + 1) / l->pp,
                                   .expert_parallel = l->ep};
        struct model_exec_shape shape = {.batch = B, .max_len = T + STEPS, .max_rows = B * T};
        struct comm *tp =
            wr.group[sh->stage] ? comm_group_rank(wr.group[sh->stage], sh->rank) : NULL;
        if ((rc = model_open_shard(ref.cfg, ref.ck, &spec, &sh->m)) == 0 &&
            (rc = device_open_cpu(i, 64u << 20, &sh->dev)) == 0)
            rc = model_exec_init(sh->m, sh->dev, tp, &shape, &sh->ex);
        CHECK_MSG(rc == 0, "%s shard %d: %s", name, i, err_msg());
        sh->io = (struct model_stage_io){.in = wr.recv[i], .out = wr.send[i]};
        if (sh->stage == l->pp - 1 && sh->rank == 0)
            holder = n_local;
        n_local++;
    }
    /* prefill, every position; then the reference's greedy steps */
    for (int s = -1; s < STEPS && rc == 0; s++) {
        for (int i = 0; i < n_local; i++) {
            local[i].ids = s < 0 ? ref.ids : &ref.step_ids[s * B];
            local[i].mask = s < 0 ? ref.mask : NULL;
            local[i].t_new = s < 0 ? T : 1;
            local[i].all_positions = s < 0;
            local[i].logits = s < 0 ? got_pre : got_step;
        }
        rc = step_all(local, n_local);
        CHECK_MSG(rc == 0, "%s tp %d pp %d: step %d failed", name, l->tp, l->pp, s);
        if (rc == 0 && holder >= 0) {
            double e = s < 0 ? test_rel_err(got_pre, ref.pre, (size_t)B * T * V)
                             : test_rel_err(got_step, ref.steps + (size_t)s * B * V, (size_t)B * V);
            CHECK_MSG(e <= TOL,
                      "%s tp %d pp %d%s over processes (%d %d %d %d): step %d: rel err %g", name,
                      l->tp, l->pp, l->ep ? " ep" : "", l->proc_of[0], l->proc_of[1], l->proc_of[2],
                      l->proc_of[3], s, e);
        }
    }
    for (int i = 0; i < n_local; i++) {
        model_exec_free(local[i].ex);
        model_close(local[i].m);
        if (local[i].dev)
            CHECK(device_used(local[i].dev) == 0);
        device_close(local[i].dev);
    }
    unwire(l, &wr);
    free(got_pre);
    free(got_step);
    sharded_case_close(&ref);
}

static void check_fixture_ep(const char *name, bool ep)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", FIXTURES, name);
    /* round-robin from process 0, and from the last process backwards */
    for (int variant = 0; variant < 2; variant++) {
        struct layout ls[] = {{2, 1, {0}, ep}, {1, 2, {0}, ep}, {2, 2, {0}, ep}};
        for (size_t k = 0; k < sizeof ls / sizeof ls[0]; k++) {
            for (int i = 0; i < ls[k].tp * ls[k].pp; i++)
                ls[k].proc_of[i] = variant == 0 ? i % procs : (procs - 1) - i % procs;
            check_layout(name, dir, &ls[k]);
        }
    }
}

static void check_fixture(const char *name)
{
    check_fixture_ep(name, false);
}

TEST(opt)
{
    check_fixture("pre_ln_f32");
    check_fixture("post_ln_proj");
}

TEST(llama)
{
    check_fixture("llama_gqa_f32");
    check_fixture("mistral_headdim_f32");
    check_fixture("qwen2_bias_f32");
}

/* Phi-3's fused projections split per rank, partial rotary, LongRoPE (the
 * Qwen3 fixture is bf16: test_sharded covers it) */
TEST(phi3)
{
    check_fixture("phi3_partial_f32");
    check_fixture("phi3_longrope_f32");
}

/* Mixtral: every rank routes alike from its whole router, each expert split
 * across the processes of the TP group */
TEST(moe)
{
    check_fixture("mixtral_moe_f32");
    check_fixture("qwen2_moe_f32"); /* and a shared expert, split as the others */
}

/* The same with each expert whole on one process of the TP group
 * (expert parallelism): the layer's all-reduce across the processes sums
 * the ranks' shares */
TEST(moe_ep)
{
    check_fixture_ep("mixtral_moe_f32", true);
    check_fixture_ep("qwen2_moe_f32", true);
}
