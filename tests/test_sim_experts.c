/* Expert-level residency on the simulated clock (sched/sim.h's
 * sim_config.moe): an expert loaded on demand adds exactly its copy to the
 * step, a load's victims give up their coldest experts first and stay
 * resident, a model with work holds room for its absent experts (made by
 * the policy before its batch, as for a load) and with expert residency off
 * a mixture of experts simulates bit for bit as it did without its shape. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/random.h"
#include "sched/sim.h"
#include "test.h"
#include "workload/arrival.h"
#include "workload/computron.h"
#include "workload/simulate.h"

#include "sim_setup.h" /* after test.h, whose test_main names a parameter setup */

/* One device of 130 MB, a load of 1 s per whole model, a batch of 0.1 s.
 * Model 0: 100 MB, 2 sparse layers of 4 experts of 10 MB (20 MB dense);
 * model 1: 50 MB, 1 sparse layer of 4 experts of 10 MB. Every token routes
 * to top_k experts; zipf 60 makes the ranks' order certain (rank 0, then
 * rank 1, ...), so which experts are hot does not depend on the seed. */
static void two_models(struct sim_config *c, uint64_t *bytes, struct sim_moe *moe, int top_k)
{
    setup(c, "swapwise-partial", 2, 1, bytes); /* its loads trim their victims */
    c->n_devices = 1;
    bytes[0] = 100 * MB;
    bytes[1] = 50 * MB;
    c->budget[0] = 130 * MB;
    c->max_loaded = 0;
    c->max_batch = 1;
    for (int b = 1; b <= SIM_MAX_BATCH; b++)
        c->batch_s[b] = 0.1;
    memset(moe, 0, 2 * sizeof(*moe));
    moe[0] = (struct sim_moe){.sparse_layers = 2,
                              .n_experts = 4,
                              .top_k = top_k,
                              .zipf = 60,
                              .seed = 7,
                              .expert_bytes = {10 * MB}};
    moe[1] = (struct sim_moe){.sparse_layers = 1,
                              .n_experts = 4,
                              .top_k = top_k,
                              .zipf = 60,
                              .seed = 8,
                              .expert_bytes = {10 * MB}};
    c->moe = moe;
    c->link_bytes_per_s = 100e6; /* 10 MB in 0.1 s */
    c->copy_latency_s = 0.01;
}

/* a (model 0) at 0, b (model 1) at 2, a again at 4. Every expert is routed
 * (top_k 4): a loads 0..1 and runs 1..1.1; b's load lacks 20 MB, so a gives
 * up two experts, the last two of layer 1 (all are equally hot: the later
 * layer and the higher expert go first), stays resident, and b loads 2..3
 * and runs 3..3.1. At 4 a has a request and wants room for its two absent
 * experts (20 MB), which the full device lacks: it is shown partly
 * resident, and its "load" trims idle b's two coldest experts (b stays
 * resident) and copies nothing; a is served in place, its step copies
 * layer 1's two experts into the room held for them and waits 0.01 + 20
 * MB / 100 MB/s = 0.21 s: done at 4 + 0.21 + 0.1 (three steps in all, each
 * routed: two of a, one of b; two trims, nothing streamed). Without expert
 * residency b's load evicts a whole, and a's second request reloads it
 * over b: 4..5, done 5.1. */
static void test_on_demand_time(void)
{
    for (int on = 0; on < 2; on++) {
        uint64_t bytes[4]; /* setup fills two devices' */
        struct sim_moe moe[2];
        struct sim_config c;
        two_models(&c, bytes, moe, 4);
        c.expert_residency = on;
        struct sim_request r[3] = {
            {.arrival = 0, .model = 0}, {.arrival = 2, .model = 1}, {.arrival = 4, .model = 0}};
        struct sim_stats st;
        CHECK_MSG(sim_run(&c, r, 3, &st) == 0, "%s", err_msg());
        CHECK_MSG(fabs(r[0].done - 1.1) < 1e-12 && fabs(r[1].done - 3.1) < 1e-12,
                  "on %d: %.9f %.9f", on, r[0].done, r[1].done);
        double want = on ? 4 + 0.21 + 0.1 : 5.1;
        CHECK_MSG(fabs(r[2].done - want) < 1e-12,
                  "on %d: a's second request done at %.9f, "
                  "expected %.9f",
                  on, r[2].done, want);
        if (on) {
            CHECK_MSG(st.loads == 2 && st.evictions == 0 && st.trims == 2 &&
                          st.bytes_loaded == 150 * MB && st.expert_loads == 2 &&
                          st.expert_bytes_loaded == 20 * MB && st.expert_trims == 4 &&
                          st.expert_streamed == 0 && fabs(st.expert_wait_s - 0.21) < 1e-12 &&
                          st.steps == 3 && st.high_water[0] == 130 * MB,
                      "loads %llu evictions %llu bytes %llu experts %llu (%llu B, %llu "
                      "trimmed) wait %g steps %llu high %llu",
                      (unsigned long long)st.loads, (unsigned long long)st.evictions,
                      (unsigned long long)st.bytes_loaded, (unsigned long long)st.expert_loads,
                      (unsigned long long)st.expert_bytes_loaded,
                      (unsigned long long)st.expert_trims, st.expert_wait_s,
                      (unsigned long long)st.steps, (unsigned long long)st.high_water[0]);
        } else {
            CHECK(st.loads == 3 && st.evictions == 2 && st.bytes_loaded == 250 * MB &&
                  st.expert_loads == 0 && st.steps == 0);
        }
    }
}

/* The same trace with top_k 2: a's tokens route to its two most popular
 * experts of each layer, so six of its eight are cold. b's load takes two
 * of the cold ones; at 4 a wants room for those two, and its "load" trims
 * b's two cold ones for it (four trimmed in all); its step finds its hot
 * ones there and waits for nothing: done at 4.1, no expert copied. */
static void test_cold_first(void)
{
    uint64_t bytes[4]; /* setup fills two devices' */
    struct sim_moe moe[2];
    struct sim_config c;
    two_models(&c, bytes, moe, 2);
    c.expert_residency = true;
    struct sim_request r[3] = {
        {.arrival = 0, .model = 0}, {.arrival = 2, .model = 1}, {.arrival = 4, .model = 0}};
    struct sim_stats st;
    CHECK_MSG(sim_run(&c, r, 3, &st) == 0, "%s", err_msg());
    CHECK_MSG(fabs(r[2].done - 4.1) < 1e-12 && st.expert_loads == 0 && st.expert_trims == 4 &&
                  st.loads == 2 && st.evictions == 0,
              "done %.9f, %llu experts copied, %llu trimmed, %llu loads", r[2].done,
              (unsigned long long)st.expert_loads, (unsigned long long)st.expert_trims,
              (unsigned long long)st.loads);
}

/* The trace's actions (sim_config.trace) of a run of two_models' rig with
 * top_k 4 over r, into buf (NUL-terminated); its statistics into st. */
static void traced(struct sim_config *c, struct sim_request *r, size_t n, struct sim_stats *st,
                   char *buf, size_t size)
{
    FILE *f = fmemopen(buf, size, "w");
    CHECK(f != NULL);
    c->trace = f;
    CHECK_MSG(sim_run(c, r, n, st) == 0, "%s", err_msg());
    fclose(f);
    c->trace = NULL;
}

/* The room for absent experts is made before the batch, by the policy, as
 * for a load (the trace of test_on_demand_time's run): at 4 a "loads" with
 * b as its victim (b stays resident, its two coldest experts trimmed: the
 * trace shows it R), then a is served in place, nothing copied by the
 * load. An idle model's absent experts are free memory: a request of b at
 * 5, after a's batch, needs b's two trimmed experts back, and their room
 * is a's two coldest (a idle again, its held room given back): b is served
 * at 5 after a trimming "load" of its own, done 5 + 0.21 + 0.1. */
static void test_room_before_batch(void)
{
    uint64_t bytes[4]; /* setup fills two devices' */
    struct sim_moe moe[2];
    struct sim_config c;
    two_models(&c, bytes, moe, 4);
    c.expert_residency = true;
    struct sim_request r[4] = {{.arrival = 0, .model = 0},
                               {.arrival = 2, .model = 1},
                               {.arrival = 4, .model = 0},
                               {.arrival = 5, .model = 1}};
    struct sim_stats st;
    char buf[4096];
    traced(&c, r, 4, &st, buf, sizeof(buf));
    CHECK_MSG(strstr(buf, "   4.0000 load  0 -1 | 1R 0R\n   4.0000 serve 0 batch 1 |") &&
                  strstr(buf, "   5.0000 load  1 -0 | 0R 1R\n   5.0000 serve 1 batch 1 |"),
              "trace:\n%s", buf);
    CHECK_MSG(fabs(r[2].done - 4.31) < 1e-12 && fabs(r[3].done - 5.31) < 1e-12 && st.loads == 2 &&
                  st.evictions == 0 && st.trims == 3 && st.expert_loads == 4 &&
                  st.expert_trims == 6 && st.expert_streamed == 0 && st.high_water[0] == 130 * MB,
              "done %.9f %.9f, %llu loads %llu evictions %llu trims, %llu experts copied "
              "(%llu trimmed, %llu streamed)",
              r[2].done, r[3].done, (unsigned long long)st.loads, (unsigned long long)st.evictions,
              (unsigned long long)st.trims, (unsigned long long)st.expert_loads,
              (unsigned long long)st.expert_trims, (unsigned long long)st.expert_streamed);
}

/* A trimming load whose resident victim's experts on the device do not
 * cover what it lacks: the victim gives every expert there and at least
 * one layer, and is partly resident after. a (100 MB: 80 of experts, 2
 * layers of 50) at 0, then c (model 1 made 120 MB, its 4 experts 10 MB)
 * at 2: c lacks 90 MB of 130, a's experts give 80 and its last layer's
 * rest 10 (layer_rest: 50 - 40), so a keeps 10 MB, partly resident (p),
 * and c loads 2..3 (no eviction). With c's needs within a's experts
 * (test_on_demand_time) a stays resident. */
static void test_trim_past_experts(void)
{
    uint64_t bytes[4]; /* setup fills two devices' */
    struct sim_moe moe[2];
    struct sim_config c;
    two_models(&c, bytes, moe, 4);
    c.expert_residency = true;
    c.layers = 2;
    bytes[1] = 120 * MB;
    struct sim_request r[2] = {{.arrival = 0, .model = 0}, {.arrival = 2, .model = 1}};
    struct sim_stats st;
    char buf[4096];
    traced(&c, r, 2, &st, buf, sizeof(buf));
    CHECK_MSG(strstr(buf, "   2.0000 load  1 -0 | 0p 1L\n"), "trace:\n%s", buf);
    CHECK_MSG(fabs(r[1].done - 3.1) < 1e-12 && st.evictions == 0 && st.trims == 1 &&
                  st.expert_trims == 8 && st.expert_streamed == 0 && st.high_water[0] == 130 * MB,
              "done %.9f, %llu evictions %llu trims %llu experts trimmed, high %llu", r[1].done,
              (unsigned long long)st.evictions, (unsigned long long)st.trims,
              (unsigned long long)st.expert_trims, (unsigned long long)st.high_water[0]);
}

/* Six models of 200 MB on 2 devices with room for 2.5, churned by Gamma
 * arrivals: chat requests, so batches run prefills and decode steps. */
static struct sim_request *churn(struct sim_config *c, uint64_t *bytes, size_t *n)
{
    setup(c, "swapwise-partial", 6, 2, bytes);
    c->budget[0] = c->budget[1] = 500 * MB;
    c->max_loaded = 0;
    c->base_prompt = 8;
    c->prefill_token_s = 0.0005;
    for (int b = 1; b <= SIM_MAX_BATCH; b++)
        c->step_s[b] = 0.01 + 0.001 * b;
    struct arrival_spec spec = {
        .kind = ARRIVAL_GAMMA, .n_models = 6, .cv = 2, .duration_s = 120, .seed = 3};
    for (int i = 0; i < 6; i++)
        spec.rates[i] = 2.0 / (i + 1);
    struct arrival *ev;
    CHECK(arrival_generate(&spec, &ev, n) == 0 && *n > 100);
    struct sim_request *rq = calloc(*n, sizeof(*rq));
    for (size_t i = 0; i < *n; i++)
        rq[i] = (struct sim_request){.arrival = ev[i].t,
                                     .model = ev[i].model,
                                     .n_prompt = 1 + (int)(i * 37 % 60),
                                     .n_output = 1 + (int)(i * 11 % 20)};
    free(ev);
    return rq;
}

/* The MoE shape of churn's models: 4 sparse layers of 16 experts of 2.5
 * MB per device (160 MB of the 200), top 2, Zipf skew 1. */
static void churn_moe(struct sim_moe *moe, int n)
{
    for (int i = 0; i < n; i++)
        moe[i] = (struct sim_moe){.sparse_layers = 4,
                                  .n_experts = 16,
                                  .top_k = 2,
                                  .zipf = 1,
                                  .seed = 100 + (uint64_t)i,
                                  .drift_steps = 50,
                                  .expert_bytes = {2500 * 1000, 2500 * 1000}};
}

/* With expert residency off, a shape changes nothing: every time and
 * statistic equal, bit for bit, those of the same run without it. */
static void test_off_unchanged(void)
{
    const char *pols[] = {"swapwise", "swapwise-partial", "lru"};
    for (int p = 0; p < 3; p++) {
        uint64_t bytes[12];
        struct sim_config c;
        size_t n;
        struct sim_request *a = churn(&c, bytes, &n), *b = malloc(n * sizeof(*b));
        memcpy(b, a, n * sizeof(*b));
        c.policy = sched_policy_find_sim(pols[p]);
        c.layers = 4;
        struct sim_stats sa, sb;
        CHECK_MSG(sim_run(&c, a, n, &sa) == 0, "%s", err_msg());
        struct sim_moe moe[6];
        churn_moe(moe, 6);
        c.moe = moe;
        c.copy_latency_s = 0.001;
        CHECK_MSG(sim_run(&c, b, n, &sb) == 0, "%s", err_msg());
        CHECK_MSG(memcmp(a, b, n * sizeof(*a)) == 0 && memcmp(&sa, &sb, sizeof(sa)) == 0,
                  "%s: the shape changed the results with expert residency off", pols[p]);
        free(a);
        free(b);
    }
}

/* Under churn with expert residency on: every request served, the budgets
 * never exceeded, experts copied on demand and fewer bytes moved by loads
 * than without it; the same again on a second run (deterministic). */
static void test_churn(void)
{
    uint64_t bytes[12];
    struct sim_config c;
    size_t n;
    struct sim_request *a = churn(&c, bytes, &n), *b = malloc(n * sizeof(*b));
    memcpy(b, a, n * sizeof(*b));
    struct sim_request *off = malloc(n * sizeof(*off));
    memcpy(off, a, n * sizeof(*off));
    c.layers = 4;
    struct sim_moe moe[6];
    churn_moe(moe, 6);
    c.moe = moe;
    struct sim_stats so, sa, sb;
    CHECK_MSG(sim_run(&c, off, n, &so) == 0, "%s", err_msg());
    c.expert_residency = true;
    c.copy_latency_s = 0.001;
    CHECK_MSG(sim_run(&c, a, n, &sa) == 0, "%s", err_msg());
    CHECK_MSG(sim_run(&c, b, n, &sb) == 0, "%s", err_msg());
    CHECK(memcmp(a, b, n * sizeof(*a)) == 0 && memcmp(&sa, &sb, sizeof(sa)) == 0);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += !(a[i].batch_size >= 1 && a[i].start >= a[i].arrival && a[i].done > a[i].start);
    CHECK_MSG(bad == 0 && sa.expert_loads > 0 && sa.expert_trims > 0 && sa.steps > n &&
                  sa.bytes_loaded < so.bytes_loaded && sa.high_water[0] <= c.budget[0] &&
                  sa.high_water[1] <= c.budget[1],
              "%zu bad, %llu experts copied, %llu trimmed, %llu steps, %llu MB loaded "
              "against %llu off, high water %llu MB",
              bad, (unsigned long long)sa.expert_loads, (unsigned long long)sa.expert_trims,
              (unsigned long long)sa.steps, (unsigned long long)(sa.bytes_loaded / MB),
              (unsigned long long)(so.bytes_loaded / MB),
              (unsigned long long)(sa.high_water[0] / MB));
    free(a);
    free(b);
    free(off);
}

/* Shapes that do not fit their model: one-line errors naming them. */
static void test_bad_shapes(void)
{
    uint64_t bytes[4]; /* setup fills two devices' */
    struct sim_moe moe[2];
    struct sim_config c;
    two_models(&c, bytes, moe, 2);
    c.expert_residency = true;
    struct sim_request r = {.arrival = 0, .model = 0};
    struct sim_stats st;
    moe[0].top_k = 5;
    CHECK(sim_run(&c, &r, 1, &st) == ERR_INVALID && strstr(err_msg(), "top_k"));
    moe[0].top_k = 2;
    moe[1].expert_bytes[0] = 20 * MB; /* 80 MB of experts in 50 */
    CHECK(sim_run(&c, &r, 1, &st) == ERR_INVALID && strstr(err_msg(), "model 1"));
    moe[1].expert_bytes[0] = 10 * MB;
    c.copy_latency_s = -1;
    CHECK(sim_run(&c, &r, 1, &st) == ERR_INVALID && strstr(err_msg(), "copy_latency_s"));
}

/* The MoE presets' shapes as the simulator takes them: their weights the
 * bytes gen-model writes for the preset in bf16 (within 0.01%: norms of
 * another width aside), most of them routed experts. */
static void test_shapes(void)
{
    const char *names[] = {"mixtral-8x7b", "qwen3-30b-a3b"};
    for (int i = 0; i < 2; i++) {
        struct simulate_moe_shape sh;
        struct model_config *cfg = NULL;
        CHECK(simulate_moe_shape(names[i], 0, &sh) == 0 && model_preset(names[i], &cfg) == 0);
        if (!cfg)
            continue;
        double gen = (double)model_checkpoint_bytes(cfg, DTYPE_BF16);
        double routed = (double)sh.expert * sh.n_experts * sh.layers;
        CHECK_MSG(fabs((double)sh.weights - gen) <= 1e-4 * gen && routed > 0.9 * gen &&
                      routed < (double)sh.weights,
                  "%s: %.0f bytes, gen-model writes %.0f; %.0f routed", names[i],
                  (double)sh.weights, gen, routed);
        model_config_free(cfg);
    }
    struct simulate_moe_shape sh;
    CHECK(simulate_moe_shape("opt-1.3b", 0, &sh) == ERR_INVALID && strstr(err_msg(), "opt-1.3b"));
}

/* simulate_workload_experts on chat traffic (3 mixtral-shaped models cut
 * to 2 layers, room for 1.5): off, no expert is copied and the routing
 * skew changes nothing; on, experts are copied and a second run gives the
 * same numbers (deterministic). */
static void test_workload(void)
{
    struct workload_config c;
    struct workload_flags wf = {.config = "chat:3:0.5"};
    CHECK(workload_config_from_flags(&wf, &c) == 0);
    struct sim_config costs;
    memset(&costs, 0, sizeof(costs));
    costs.max_batch = c.max_batch;
    costs.load_s = 0.2;
    costs.overlap_tail = 0.5;
    costs.overlap_loads = true;
    costs.base_prompt = 8;
    costs.prefill_token_s = 0.0001;
    for (int b = 1; b <= SIM_MAX_BATCH; b++) {
        costs.batch_s[b] = 0.01 + 0.002 * b;
        costs.step_s[b] = 0.005 + 0.001 * b;
    }
    struct simulate_moe m = {.tp = 2, .room = 1.5, .copy_latency_s = 5e-5, .zipf = 1};
    CHECK(simulate_moe_shape("mixtral-8x7b", 2, &m.shape) == 0 && m.shape.layers == 2);
    const char *pol[] = {"swapwise-partial"}; /* its loads trim: experts go */
    struct simulate_summary off[2], on[2];
    for (int k = 0; k < 2; k++) {
        m.residency = false;
        m.zipf = k;
        CHECK_MSG(simulate_workload_experts(&c, &costs, pol, 1, 1, 2, 30, 1, &m, &off[k]) == 0,
                  "%s", err_msg());
        m.residency = true;
        m.zipf = 1;
        CHECK_MSG(simulate_workload_experts(&c, &costs, pol, 1, 1, 2, 30, 1, &m, &on[k]) == 0, "%s",
                  err_msg());
    }
    CHECK(memcmp(&off[0], &off[1], sizeof(off[0])) == 0 && off[0].expert_loads_per_step == 0 &&
          off[0].throughput > 0);
    CHECK(memcmp(&on[0], &on[1], sizeof(on[0])) == 0 && on[0].expert_loads_per_step > 0 &&
          on[0].throughput > 0);
}

int main(void)
{
    test_shapes();
    test_workload();
    test_on_demand_time();
    test_cold_first();
    test_room_before_batch();
    test_trim_past_experts();
    test_off_unchanged();
    test_churn();
    test_bad_shapes();
    return test_finish();
}
