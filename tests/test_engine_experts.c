/* Expert-level residency through the engine (swapwise-partial, one CPU
 * device, the Mixtral fixture computing in f32, batches of one):
 *   - on_demand: two models with expert residency on a device just short
 *     of both with their batches' reserves by all of one model's experts.
 *     B's load trims A's experts (A stays resident, nothing evicted); A's
 *     next request makes room for the experts it lacks by trimming B's
 *     (B stays resident too) and is served in place, its steps loading
 *     the routed experts on demand; then B's the same way. Every answer is
 *     transformers' greedy ids, stats.experts_loaded > 0, no eviction.
 *   - dense_victim: the same with a model without expert residency beside
 *     A. A, trimmed of its experts for it, gets a request while it sits
 *     idle and resident: the room for A's absent experts is made before
 *     A's batch (the dense model's last layers trimmed), so A's steps find
 *     it; served, never the step's "no room on device" (which a step
 *     lacking room gets when no idle model's experts can make it).
 *   - sizing: swap_layout_bytes_ep with expert blobs gives, to the byte,
 *     what a whole load places (every expert blob rounded on its own).
 * Sizes are computed from the models' own bytes, never guessed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/workers.h"
#include "swap/swap.h"
#include "test.h"

#include "fixture_expect.h"

#define FIX "mixtral_moe_f32"
#define N_OUT 12

static struct expect x[3];

struct erig {
    struct device *dev;
    struct swap_manager *mgr;
    struct workers *w;
    struct engine *e;
};

static struct swap_model *reg(struct swap_manager *mgr, const char *name, bool experts)
{
    static const int dev0[1] = {0};
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/%s", FIXTURES, FIX);
    struct placement pl = {.tp = 1, .pp = 1, .devices = dev0, .expert_residency = experts};
    struct swap_model *m = NULL;
    CHECK_MSG(swap_register(mgr, name, dir, &pl, false, &m) == 0, "%s", err_msg());
    if (m)
        swap_model_set_compute(m, KERN_COMPUTE_F32);
    return m;
}

/* The engine's reserve for m's batches here: one sequence of the longest
 * prompt and N_OUT tokens (reserve.c sizes it so). */
static uint64_t reserve_of(struct swap_manager *mgr, struct swap_model *m)
{
    int longest = 0;
    for (int i = 0; i < 3; i++)
        longest = x[i].n_prompt > longest ? x[i].n_prompt : longest;
    struct model_exec_shape sh =
        engine_batch_shape(swap_model_info(m)->max_pos, 1, longest, longest + N_OUT, true);
    return group_exec_bytes(m, mgr, &sh, 0);
}

static void erig_open(struct erig *g, uint64_t budget)
{
    memset(g, 0, sizeof(*g));
    CHECK(device_open_cpu(0, budget, &g->dev) == 0);
    struct swap_config cfg = {.host_budget = 64u << 20};
    CHECK(swap_manager_create(&g->dev, 1, &cfg, &g->mgr) == 0);
    CHECK(workers_create(g->mgr, &g->w) == 0);
    struct engine_config ec = {.policy = "swapwise-partial", .max_batch = 1, .queue_cap = 16};
    CHECK(engine_create(g->mgr, g->w, &ec, &g->e) == 0);
}

static void erig_close(struct erig *g)
{
    engine_destroy(g->e);
    workers_destroy(g->w);
    CHECK(device_high_water(g->dev) <= device_budget(g->dev));
    swap_manager_destroy(g->mgr);
    device_close(g->dev);
}

/* Prompt `which` to model id, waited for: ok, transformers' greedy ids. */
static void answer(struct erig *g, int id, const char *who, int which)
{
    struct engine_request_params p = {.model = id,
                                      .prompt = x[which].prompt,
                                      .n_prompt = x[which].n_prompt,
                                      .max_tokens = N_OUT,
                                      .sampling = {.temperature = 0, .top_p = 1}};
    struct engine_req *h = NULL;
    CHECK_MSG(engine_submit(g->e, &p, &h) == 0, "%s", err_msg());
    if (!h)
        return;
    engine_req_wait(h);
    int n = 0;
    const int32_t *out = engine_req_output(h, &n);
    CHECK_MSG(engine_req_status(h) == 0, "%s prompt %d: %s", who, which, engine_req_error(h));
    CHECK_MSG(n == N_OUT && memcmp(out, x[which].out, N_OUT * sizeof(int32_t)) == 0,
              "%s prompt %d: not transformers' greedy ids", who, which);
    engine_req_release(h);
}

static void model_counts(struct erig *g, int id, uint64_t *evictions, uint64_t *trims)
{
    struct engine_model_stats ms;
    CHECK(engine_model_stats(g->e, id, &ms) == 0);
    *evictions = ms.evictions;
    *trims = ms.trims;
}

/* The device bytes of m's experts (all of them: it is fully loaded). */
static uint64_t experts_all(struct swap_manager *mgr, struct swap_model *m)
{
    return swap_model_expert_bytes(mgr, m, 0);
}

/* The longest prompt first: the reserves are their largest from the
 * first request on. */
static int longest_prompt(void)
{
    int best = 0;
    for (int i = 1; i < 3; i++)
        best = x[i].n_prompt > x[best].n_prompt ? i : best;
    return best;
}

TEST(on_demand)
{
    /* sizes, on a roomy probe */
    struct erig g;
    erig_open(&g, 64u << 20);
    struct swap_model *pa = reg(g.mgr, "a", true);
    CHECK(swap_load(g.mgr, pa, NULL) == 0 && swap_wait_loaded(g.mgr, pa) == 0);
    const uint64_t w = swap_model_device_bytes(pa, 0), xb = experts_all(g.mgr, pa),
                   res = reserve_of(g.mgr, pa);
    erig_close(&g);
    CHECK(xb > 0 && xb < w);
    /* both weights and reserves but all of one model's experts */
    erig_open(&g, 2 * (w + res) - xb);
    struct swap_model *a = reg(g.mgr, "a", true), *b = reg(g.mgr, "b", true);
    int ia = engine_add_model(g.e, a), ib = engine_add_model(g.e, b);
    const int first = longest_prompt();
    struct swap_stats s0, s1;
    answer(&g, ia, "a", first);
    answer(&g, ib, "b", first);
    /* b's load took a's experts, a stayed */
    CHECK(swap_residency(g.mgr, a) == RES_ON_DEVICE && swap_residency(g.mgr, b) == RES_ON_DEVICE);
    CHECK_MSG(experts_all(g.mgr, a) == 0, "a keeps %llu expert bytes",
              (unsigned long long)experts_all(g.mgr, a));
    swap_get_stats(g.mgr, &s0);
    for (int k = 0; k < 3; k++) { /* served in place, each trimming the other's experts */
        answer(&g, ia, "a", (first + 1 + k) % 3);
        CHECK(swap_residency(g.mgr, a) == RES_ON_DEVICE &&
              swap_residency(g.mgr, b) == RES_ON_DEVICE);
        answer(&g, ib, "b", (first + 1 + k) % 3);
        CHECK(swap_residency(g.mgr, a) == RES_ON_DEVICE &&
              swap_residency(g.mgr, b) == RES_ON_DEVICE);
    }
    swap_get_stats(g.mgr, &s1);
    uint64_t ev_a, tr_a, ev_b, tr_b;
    model_counts(&g, ia, &ev_a, &tr_a);
    model_counts(&g, ib, &ev_b, &tr_b);
    printf("experts loaded on demand %llu, evicted %llu; trims a %llu b %llu; evictions a %llu b "
           "%llu (expert bytes %llu, reserve %llu)\n",
           (unsigned long long)(s1.experts_loaded - s0.experts_loaded),
           (unsigned long long)s1.experts_evicted, (unsigned long long)tr_a,
           (unsigned long long)tr_b, (unsigned long long)ev_a, (unsigned long long)ev_b,
           (unsigned long long)xb, (unsigned long long)res);
    CHECK(s1.experts_loaded > s0.experts_loaded);
    CHECK(ev_a == 0 && ev_b == 0);
    CHECK(tr_a > 0 && tr_b > 0);
    erig_close(&g);
}

TEST(dense_victim)
{
    struct erig g;
    erig_open(&g, 64u << 20);
    struct swap_model *pa = reg(g.mgr, "a", true), *pc = reg(g.mgr, "c", false);
    CHECK(swap_load(g.mgr, pa, NULL) == 0 && swap_wait_loaded(g.mgr, pa) == 0);
    const uint64_t wa = swap_model_device_bytes(pa, 0), wc = swap_model_device_bytes(pc, 0),
                   xb = experts_all(g.mgr, pa), ra = reserve_of(g.mgr, pa),
                   rc = reserve_of(g.mgr, pc);
    erig_close(&g);
    erig_open(&g, wa + ra + wc + rc - xb);
    struct swap_model *a = reg(g.mgr, "a", true), *c = reg(g.mgr, "c", false);
    int ia = engine_add_model(g.e, a), ic = engine_add_model(g.e, c);
    const int first = longest_prompt();
    answer(&g, ia, "a", first);
    answer(&g, ic, "c", first);
    CHECK(swap_residency(g.mgr, a) == RES_ON_DEVICE && experts_all(g.mgr, a) == 0);
    struct swap_stats s0, s1;
    swap_get_stats(g.mgr, &s0);
    /* c idle and resident, a lacking every expert: the room is made
     * before a's batch, c giving up its last layers */
    answer(&g, ia, "a", (first + 1) % 3);
    swap_get_stats(g.mgr, &s1);
    CHECK(s1.experts_loaded > s0.experts_loaded);
    CHECK(swap_residency(g.mgr, a) == RES_ON_DEVICE);
    uint64_t ev_c, tr_c, ev_a, tr_a;
    model_counts(&g, ic, &ev_c, &tr_c);
    model_counts(&g, ia, &ev_a, &tr_a);
    CHECK_MSG(tr_c > 0 || ev_c > 0, "c neither trimmed nor evicted");
    CHECK(ev_a == 0);
    answer(&g, ic, "c", (first + 2) % 3);
    answer(&g, ia, "a", (first + 2) % 3);
    erig_close(&g);
}

/* swap_layout_bytes_ep's device bytes with expert blobs are what a whole
 * load places, to the byte (and its host bytes what the blobs hold). */
TEST(sizing)
{
    static const int devs[2] = {0, 1};
    char dir[512];
    const char *fx[] = {"mixtral_moe_f32", "qwen3_moe_bf16", "qwen2_moe_f32"};
    for (int f = 0; f < 3; f++) {
        snprintf(dir, sizeof(dir), "%s/%s", FIXTURES, fx[f]);
        for (int tp = 1; tp <= 2; tp++)
            for (int ep = 0; ep <= (tp > 1); ep++) {
                struct device *d[2];
                for (int i = 0; i < tp; i++)
                    CHECK(device_open_cpu(i, 64u << 20, &d[i]) == 0);
                struct swap_config cfg = {.host_budget = 64u << 20};
                struct swap_manager *mgr;
                CHECK(swap_manager_create(d, tp, &cfg, &mgr) == 0);
                struct placement pl = {.tp = tp,
                                       .pp = 1,
                                       .devices = devs,
                                       .expert_parallel = ep,
                                       .expert_residency = true};
                struct swap_model *m = NULL;
                CHECK_MSG(swap_register(mgr, "m", dir, &pl, false, &m) == 0, "%s", err_msg());
                uint64_t need[2] = {0}, host = 0;
                CHECK(swap_layout_bytes_ep(dir, tp, 1, ep, true, NULL, need, &host) == 0);
                CHECK(swap_load(mgr, m, NULL) == 0 && swap_wait_loaded(mgr, m) == 0);
                for (int i = 0; i < tp; i++)
                    CHECK_MSG(
                        need[i] == device_used(d[i]) && need[i] == swap_model_device_bytes(m, i),
                        "%s tp %d%s shard %d: sized %llu, placed %llu", fx[f], tp, ep ? " ep" : "",
                        i, (unsigned long long)need[i], (unsigned long long)device_used(d[i]));
                CHECK(host == swap_model_total_bytes(m));
                swap_manager_destroy(mgr);
                for (int i = 0; i < tp; i++)
                    device_close(d[i]);
            }
    }
}

static void setup(void)
{
    expect_load(FIX, x);
    for (int i = 0; i < 3; i++)
        CHECK(x[i].n_out >= N_OUT);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
