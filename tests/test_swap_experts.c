/* Expert-level residency (placement.expert_residency) on the mixture-of-
 * experts fixtures, CPU devices:
 *   - bitwise: a model whose experts were all trimmed away stays resident,
 *     counts them missing, and its next forward (the experts loaded on
 *     demand) gives logits bit for bit those of the same model with every
 *     expert resident, which are bit for bit those of the model registered
 *     without expert residency; TP 1, TP 2, TP 2 with expert parallelism
 *     and PP 2, every MoE fixture;
 *   - trim_order: the hotness is the router's real tokens (one step: its
 *     counts exactly); a trim gives up the coldest expert first (ties: the
 *     later layer, the higher expert), freeing exactly its bytes, the model
 *     still resident; then every other expert before the last layer; a
 *     load brings every byte back, and the logits are the same;
 *   - refused: a model without routed experts, in one line;
 *   - room: a step lacking device room for an expert evicts the coldest
 *     experts of another idle model (which stays resident) and computes the
 *     same logits; with nothing to evict it fails at once with a one-line
 *     error naming the device, and succeeds again once room is back.
 * Budgets are checked exactly (device_used against the blobs' bytes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/workers.h"
#include "sharded_ref.h"
#include "swap/swap.h"
#include "test.h"

#define FIXTURES SHARDSWAP_SOURCE_DIR "/tests/fixtures/models"
#define MAX_DEV 4

static const char *const moe_fixtures[] = {"mixtral_moe_f32", "qwen3_moe_bf16", "qwen2_moe_f32"};

struct xrig {
    struct device *devs[MAX_DEV];
    int n;
    struct swap_manager *mgr;
    struct workers *w;
};

static void xrig_open(struct xrig *g, int n, uint64_t budget)
{
    memset(g, 0, sizeof(*g));
    g->n = n;
    for (int i = 0; i < n; i++)
        CHECK(device_open_cpu(i, budget, &g->devs[i]) == 0);
    struct swap_config cfg = {.host_budget = 256u << 20};
    CHECK(swap_manager_create(g->devs, n, &cfg, &g->mgr) == 0);
    CHECK(workers_create(g->mgr, &g->w) == 0);
}

static struct swap_model *xrig_add(struct xrig *g, const char *name, const char *dir, int tp,
                                   int pp, bool ep, bool experts)
{
    static const int devices[MAX_DEV] = {0, 1, 2, 3};
    struct placement pl = {
        .tp = tp, .pp = pp, .devices = devices, .expert_parallel = ep, .expert_residency = experts};
    struct swap_model *m = NULL;
    int rc = swap_register(g->mgr, name, dir, &pl, false, &m);
    CHECK_MSG(rc == 0, "register %s: %s", name, err_msg());
    return m;
}

static void xrig_close(struct xrig *g)
{
    workers_destroy(g->w);
    swap_manager_destroy(g->mgr);
    for (int i = 0; i < g->n; i++) {
        CHECK(device_used(g->devs[i]) == 0);
        device_close(g->devs[i]);
    }
}

static void load_wait(struct xrig *g, struct swap_model *m)
{
    CHECK_MSG(swap_load(g->mgr, m, NULL) == 0, "%s", err_msg());
    CHECK(swap_wait_loaded(g->mgr, m) == 0);
}

static const struct model_exec_shape shape = {
    .batch = B, .max_len = T, .max_tokens = B * T, .max_rows = B * T};

/* The batch's prefill, every position's logits into out (B, T, V), on a
 * context of its own; routed (when not NULL) gets the router's counts.
 * Returns once the model is idle again. */
static int forward(struct xrig *g, struct swap_model *m, float *out, uint64_t *routed)
{
    int32_t ids[B * T];
    uint8_t mask[B * T];
    ref_batch(swap_model_info(m)->vocab, ids, mask);
    struct group_exec *gb = NULL;
    CHECK(swap_use_begin(g->mgr, m) == 0);
    int rc = group_exec_create(g->mgr, m, &shape, &gb);
    if (rc == 0)
        rc = group_forward(g->w, gb, ids, mask, T, true, true, out);
    if (rc == 0 && routed)
        group_exec_routed(gb, routed);
    group_exec_free(gb);
    swap_use_end(g->mgr, m);
    /* an expert's copy job ends just after its event: until then the model
     * is in transition (a trim or offload would be refused) */
    swap_wait_idle(g->mgr, m);
    return rc;
}

static uint64_t round64(uint64_t n)
{
    return (n + 63) / 64 * 64;
}

/* The model's expert blobs on device d (all of them, or those there now):
 * device bytes, or the host bytes a load copies. */
static uint64_t expert_bytes(const struct swap_model *m, int d, bool present, bool device)
{
    uint64_t n = 0;
    for (int s = 0; s < swap_model_shard_count(m); s++) {
        const struct swap_shard *sh = swap_model_shard(m, s);
        if (d >= 0 && swap_shard_device(sh) != d)
            continue;
        for (int b = swap_shard_n_dense_blobs(sh); b < swap_shard_n_blobs(sh); b++) {
            if (present && !device_event_done(swap_shard_blob_ready(sh, b)))
                continue;
            n += device ? round64(swap_shard_blob_bytes(sh, b)) : swap_shard_blob_bytes(sh, b);
        }
    }
    return n;
}

static size_t n_logits(const struct swap_model *m)
{
    return (size_t)B * T * swap_model_info(m)->vocab;
}

static void check_layout(const char *name, int tp, int pp, bool ep)
{
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/%s", FIXTURES, name);
    struct xrig g;
    xrig_open(&g, tp * pp, 64u << 20);
    struct swap_model *plain = xrig_add(&g, "plain", dir, tp, pp, ep, false);
    struct swap_model *m = xrig_add(&g, "experts", dir, tp, pp, ep, true);
    if (!plain || !m) {
        xrig_close(&g);
        return;
    }
    const size_t nl = n_logits(m);
    float *ref = malloc(nl * sizeof(float)), *all = malloc(nl * sizeof(float)),
          *got = malloc(nl * sizeof(float));
    load_wait(&g, plain);
    CHECK_MSG(forward(&g, plain, ref, NULL) == 0, "%s", err_msg());
    CHECK(swap_offload(g.mgr, plain, false) == 0);
    swap_wait_idle(g.mgr, plain);
    /* every expert resident: the layout differs, the computation does not */
    load_wait(&g, m);
    CHECK(swap_model_missing_bytes(g.mgr, m) == 0);
    CHECK_MSG(forward(&g, m, all, NULL) == 0, "%s", err_msg());
    CHECK_MSG(memcmp(all, ref, nl * sizeof(float)) == 0, "%s tp %d pp %d%s: all resident differs",
              name, tp, pp, ep ? " ep" : "");
    /* every expert trimmed away, device by device: still resident */
    struct swap_stats st0, st1;
    swap_get_stats(g.mgr, &st0);
    for (int d = 0; d < tp * pp; d++) {
        const uint64_t want = expert_bytes(m, d, true, true), used = device_used(g.devs[d]);
        uint64_t freed = 0;
        CHECK(swap_trim(g.mgr, m, d, want, &freed) == 0);
        CHECK_MSG(freed == want && device_used(g.devs[d]) == used - want,
                  "%s device %d: trim freed %llu of %llu", name, d, (unsigned long long)freed,
                  (unsigned long long)want);
    }
    CHECK(swap_residency(g.mgr, m) == RES_ON_DEVICE);
    CHECK(expert_bytes(m, -1, true, true) == 0);
    CHECK(swap_model_missing_bytes(g.mgr, m) == expert_bytes(m, -1, false, false));
    CHECK(swap_model_experts_resident(g.mgr, m) == 0);
    /* the next forward brings the routed ones back on demand */
    CHECK_MSG(forward(&g, m, got, NULL) == 0, "%s", err_msg());
    CHECK_MSG(memcmp(got, ref, nl * sizeof(float)) == 0,
              "%s tp %d pp %d%s: experts loaded on demand differ (%g)", name, tp, pp,
              ep ? " ep" : "", test_rel_err(got, ref, nl));
    swap_get_stats(g.mgr, &st1);
    CHECK(st1.experts_loaded > st0.experts_loaded);
    CHECK(swap_model_missing_bytes(g.mgr, m) ==
          expert_bytes(m, -1, false, false) - expert_bytes(m, -1, true, false));
    CHECK(swap_residency(g.mgr, m) == RES_ON_DEVICE);
    /* a whole load of a model offloaded with holes brings every expert */
    CHECK(swap_offload(g.mgr, m, false) == 0);
    swap_wait_idle(g.mgr, m);
    load_wait(&g, m);
    CHECK(swap_model_missing_bytes(g.mgr, m) == 0);
    CHECK(expert_bytes(m, -1, true, true) == expert_bytes(m, -1, false, true));
    printf("%-16s tp %d pp %d%s: bitwise after %llu experts loaded on demand\n", name, tp, pp,
           ep ? " ep" : "", (unsigned long long)(st1.experts_loaded - st0.experts_loaded));
    free(ref);
    free(all);
    free(got);
    xrig_close(&g);
}

TEST(bitwise)
{
    for (size_t i = 0; i < sizeof(moe_fixtures) / sizeof(moe_fixtures[0]); i++) {
        check_layout(moe_fixtures[i], 1, 1, false);
        check_layout(moe_fixtures[i], 2, 1, false);
        check_layout(moe_fixtures[i], 2, 1, true);
        check_layout(moe_fixtures[i], 1, 2, false);
    }
}

TEST(trim_order)
{
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/mixtral_moe_f32", FIXTURES);
    struct xrig g;
    xrig_open(&g, 1, 64u << 20);
    struct swap_model *m = xrig_add(&g, "m", dir, 1, 1, false, true);
    if (!m) {
        xrig_close(&g);
        return;
    }
    const size_t nl = n_logits(m);
    float *ref = malloc(nl * sizeof(float)), *got = malloc(nl * sizeof(float));
    load_wait(&g, m);
    const uint64_t full = device_used(g.devs[0]);
    int layers = 0, experts = 0;
    CHECK(swap_model_expert_hot(g.mgr, m, NULL, 0, &layers, &experts) == 0);
    CHECK(layers == swap_model_info(m)->n_layers && experts == 4);
    uint64_t routed[2 * 4] = {0};
    float hot[2 * 4];
    CHECK_MSG(forward(&g, m, ref, routed) == 0, "%s", err_msg());
    /* one step: the hotness is the router's counts */
    CHECK(swap_model_expert_hot(g.mgr, m, hot, 8, &layers, &experts) == 0);
    for (int i = 0; i < layers * experts; i++)
        CHECK_MSG(hot[i] == (float)routed[i], "hot[%d] %g, routed %llu", i, hot[i],
                  (unsigned long long)routed[i]);
    /* the coldest: the lowest hotness, ties to the later layer, then the
     * higher expert */
    int cold = 0;
    for (int i = 1; i < layers * experts; i++) {
        const int l = i / experts, e = i % experts, cl = cold / experts, ce = cold % experts;
        if (hot[i] < hot[cold] || (hot[i] == hot[cold] && (l > cl || (l == cl && e > ce))))
            cold = i;
    }
    const struct swap_shard *sh = swap_model_shard(m, 0);
    const int nd = swap_shard_n_dense_blobs(sh), nb = swap_shard_n_blobs(sh);
    CHECK(nb == nd + layers * experts); /* layer-major, expert order */
    const int cold_blob = nd + cold;
    uint64_t freed = 0;
    struct swap_stats st0, st1;
    swap_get_stats(g.mgr, &st0);
    CHECK(swap_trim(g.mgr, m, 0, 1, &freed) == 0);
    swap_get_stats(g.mgr, &st1);
    const uint64_t xb = round64(swap_shard_blob_bytes(sh, cold_blob));
    CHECK_MSG(freed == xb && device_used(g.devs[0]) == full - xb, "freed %llu, expected %llu",
              (unsigned long long)freed, (unsigned long long)xb);
    CHECK(st1.experts_evicted == st0.experts_evicted + 1 &&
          st1.bytes_trimmed == st0.bytes_trimmed + xb);
    for (int b = 0; b < nb; b++)
        CHECK_MSG(device_event_done(swap_shard_blob_ready(sh, b)) == (b != cold_blob),
                  "blob %d (the coldest: %d)", b, cold_blob);
    CHECK(swap_residency(g.mgr, m) == RES_ON_DEVICE);
    CHECK(swap_model_missing_bytes(g.mgr, m) == swap_shard_blob_bytes(sh, cold_blob));
    /* the other experts all go before the last layer does */
    const uint64_t rest = expert_bytes(m, 0, true, true);
    const uint64_t last = round64(swap_shard_blob_bytes(sh, nd - 1));
    CHECK(swap_trim(g.mgr, m, 0, rest + 1, &freed) == 0);
    CHECK_MSG(freed == rest + last, "freed %llu, expected %llu + %llu", (unsigned long long)freed,
              (unsigned long long)rest, (unsigned long long)last);
    CHECK(device_used(g.devs[0]) == full - xb - rest - last);
    CHECK(swap_residency(g.mgr, m) == RES_PARTIAL);
    for (int b = 0; b < nb; b++)
        CHECK_MSG(device_event_done(swap_shard_blob_ready(sh, b)) == (b < nd - 1), "blob %d", b);
    /* a load brings back every byte, from the host tier */
    const uint64_t host_used = (swap_get_stats(g.mgr, &st0), st0.host_used);
    load_wait(&g, m);
    swap_get_stats(g.mgr, &st1);
    CHECK(device_used(g.devs[0]) == full);
    CHECK(st1.host_used == host_used);
    CHECK(st1.bytes_h2d - st0.bytes_h2d ==
          expert_bytes(m, 0, false, false) + swap_shard_blob_bytes(sh, nd - 1));
    CHECK(swap_model_missing_bytes(g.mgr, m) == 0);
    CHECK_MSG(forward(&g, m, got, NULL) == 0, "%s", err_msg());
    CHECK(memcmp(got, ref, nl * sizeof(float)) == 0);
    free(ref);
    free(got);
    xrig_close(&g);
}

TEST(room)
{
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/mixtral_moe_f32", FIXTURES);
    struct xrig g;
    xrig_open(&g, 1, 64u << 20);
    struct swap_model *a = xrig_add(&g, "a", dir, 1, 1, false, true);
    struct swap_model *b = xrig_add(&g, "b", dir, 1, 1, false, true);
    if (!a || !b) {
        xrig_close(&g);
        return;
    }
    const size_t nl = n_logits(b);
    float *ref = malloc(nl * sizeof(float)), *got = malloc(nl * sizeof(float));
    load_wait(&g, a);
    load_wait(&g, b);
    CHECK(forward(&g, a, got, NULL) == 0);
    CHECK_MSG(forward(&g, b, ref, NULL) == 0, "%s", err_msg());
    uint64_t freed = 0;
    CHECK(swap_trim(g.mgr, b, 0, expert_bytes(b, 0, true, true), &freed) == 0 && freed > 0);
    /* the device full but for the batch's context and less than one expert */
    const struct swap_shard *sh = swap_model_shard(b, 0);
    const uint64_t xb = round64(swap_shard_blob_bytes(sh, swap_shard_n_dense_blobs(sh)));
    const uint64_t ctx = group_exec_bytes(b, g.mgr, &shape, 0);
    struct device *dev = g.devs[0];
    const uint64_t free_now = device_budget(dev) - device_used(dev);
    struct dbuf *filler = NULL;
    CHECK(free_now > ctx + xb);
    CHECK(device_alloc(dev, free_now - round64(ctx) - (xb - 64), &filler) == 0);
    /* b's experts come from a's coldest, a staying resident */
    struct swap_stats st0, st1;
    swap_get_stats(g.mgr, &st0);
    CHECK_MSG(forward(&g, b, got, NULL) == 0, "%s", err_msg());
    swap_get_stats(g.mgr, &st1);
    CHECK(memcmp(got, ref, nl * sizeof(float)) == 0);
    CHECK(st1.experts_evicted > st0.experts_evicted);
    CHECK(swap_residency(g.mgr, a) == RES_ON_DEVICE && swap_model_missing_bytes(g.mgr, a) > 0);
    CHECK(expert_bytes(a, 0, true, true) < expert_bytes(a, 0, false, true));
    /* nothing left to evict: the step fails at once, naming the device */
    CHECK(swap_trim(g.mgr, a, 0, expert_bytes(a, 0, true, true), &freed) == 0);
    CHECK(swap_residency(g.mgr, a) == RES_ON_DEVICE);
    CHECK(swap_trim(g.mgr, b, 0, expert_bytes(b, 0, true, true), &freed) == 0);
    struct dbuf *filler2 = NULL; /* what the trims freed, but less than one expert */
    CHECK(device_alloc(dev, device_budget(dev) - device_used(dev) - round64(ctx) - (xb - 64),
                       &filler2) == 0);
    int rc = forward(&g, b, got, NULL);
    CHECK_MSG(rc == ERR_BUSY && strstr(err_msg(), "no room on device") &&
                  strstr(err_msg(), "model b"),
              "rc %d: '%s'", rc, err_msg());
    printf("refused: %s\n", err_msg());
    CHECK(swap_residency(g.mgr, b) == RES_ON_DEVICE);
    /* room back: served again, the same logits */
    device_free(filler);
    device_free(filler2);
    CHECK_MSG(forward(&g, b, got, NULL) == 0, "%s", err_msg());
    CHECK(memcmp(got, ref, nl * sizeof(float)) == 0);
    free(ref);
    free(got);
    xrig_close(&g);
}

/* A model without routed experts is refused in one line, nothing kept. */
TEST(refused)
{
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/qwen2_bias_f32", FIXTURES);
    struct xrig g;
    xrig_open(&g, 1, 64u << 20);
    static const int dev0[1] = {0};
    struct placement pl = {.tp = 1, .pp = 1, .devices = dev0, .expert_residency = true};
    struct swap_model *m = NULL;
    int rc = swap_register(g.mgr, "dense", dir, &pl, false, &m);
    CHECK_MSG(rc == ERR_INVALID && !m && strstr(err_msg(), "expert residency needs routed experts"),
              "rc %d: '%s'", rc, err_msg());
    struct swap_stats st;
    swap_get_stats(g.mgr, &st);
    CHECK(st.host_used == 0 && device_used(g.devs[0]) == 0);
    xrig_close(&g);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
