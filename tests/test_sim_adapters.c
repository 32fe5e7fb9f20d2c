/* LoRA adapters on the simulated clock (sched/sim.h): a tiny trace whose
 * loads, evictions and bytes are counted by hand, an adapter whose request
 * waits for its load, room made by evicting the least recently used idle
 * adapter, adapters leaving with their base; and the simulator without
 * adapter requests giving, bit for bit, what it gave before adapters
 * existed (a hash of every request's times and the statistics, recorded
 * from the simulator as it was). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/adapter.h"
#include "sched/sim.h"
#include "test.h"
#include "workload/arrival.h"
#include "workload/simulate.h"

/* after test.h: its test_main takes a parameter named setup */
#include "sim_setup.h"

/* FNV-1a over the bytes of n doubles and a few counters. */
static uint64_t hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Every policy over a churn trace (6 models, room for 2, one-token and
 * chat requests), its requests' times and statistics hashed together. With
 * adapters registered (3 of model 0, 2 of model 1) but never named, the
 * simulator must not notice them. */
static uint64_t churn_hash(bool registered)
{
    const char *all[] = {"computron", "swapwise", "lru", "fifo", "clairvoyant", "swapwise-preempt"};
    uint64_t h = 1469598103934665603ull;
    struct arrival_spec spec = {
        .kind = ARRIVAL_GAMMA, .n_models = 6, .cv = 4, .duration_s = 300, .seed = 7};
    for (int i = 0; i < 6; i++)
        spec.rates[i] = 4.0 / (i + 1);
    struct arrival *ev;
    size_t n;
    CHECK(arrival_generate(&spec, &ev, &n) == 0 && n > 500);
    struct sim_request *rq = calloc(n, sizeof(*rq));
    const int base[5] = {0, 0, 0, 1, 1};
    const uint64_t abytes[10] = {5 * MB, 5 * MB, 6 * MB, 6 * MB, 7 * MB,
                                 7 * MB, 8 * MB, 8 * MB, 9 * MB, 9 * MB};
    const double aload[5] = {0.01, 0.012, 0.014, 0.016, 0.018};
    for (size_t p = 0; p < sizeof(all) / sizeof(all[0]); p++) {
        uint64_t bytes[2 * 6];
        struct sim_config c;
        setup(&c, all[p], 6, 2, bytes);
        for (int b = 1; b <= SIM_MAX_BATCH; b++)
            c.step_s[b] = 0.01 + 0.001 * b;
        c.base_prompt = 16;
        c.prefill_token_s = 0.0005;
        c.overlap_loads = p % 2 == 1;
        if (registered) {
            c.n_adapters = 5;
            c.adapter_base = base;
            c.adapter_bytes = abytes;
            c.adapter_load_s = aload;
        }
        for (size_t i = 0; i < n; i++)
            rq[i] = (struct sim_request){.arrival = ev[i].t,
                                         .model = ev[i].model,
                                         .n_prompt = i % 3 ? 0 : 8 + (int)(i % 40),
                                         .n_output = i % 3 ? 0 : 1 + (int)(i % 17)};
        struct sim_stats st;
        CHECK_MSG(sim_run(&c, rq, n, &st) == 0, "%s: %s", all[p], err_msg());
        for (size_t i = 0; i < n; i++) {
            h = hash_bytes(h, &rq[i].start, sizeof(double));
            h = hash_bytes(h, &rq[i].first_token, sizeof(double));
            h = hash_bytes(h, &rq[i].done, sizeof(double));
            h = hash_bytes(h, &rq[i].batch_size, sizeof(int));
        }
        const uint64_t counts[] = {st.loads, st.evictions,    st.batches,      st.preemptions,
                                   st.trims, st.bytes_loaded, st.high_water[0]};
        h = hash_bytes(h, counts, sizeof(counts));
        h = hash_bytes(h, &st.swap_s, sizeof(double));
        h = hash_bytes(h, &st.compute_s, sizeof(double));
    }
    free(rq);
    free(ev);
    return h;
}

/* The simulator before adapters gave this hash for churn_hash's trace. */
#define CHURN_HASH_BEFORE 0x4ad8c2f537083059ull

TEST(no_adapters_bitwise)
{
    uint64_t before = churn_hash(false);
    printf("churn hash 0x%016llx\n", (unsigned long long)before);
    CHECK_MSG(before == CHURN_HASH_BEFORE, "0 adapters: hash 0x%016llx, before 0x%016llx",
              (unsigned long long)before, (unsigned long long)CHURN_HASH_BEFORE);
}

TEST(registered_unused_bitwise)
{
    uint64_t h = churn_hash(true);
    CHECK_MSG(h == CHURN_HASH_BEFORE,
              "adapters registered, never named: hash 0x%016llx, "
              "before 0x%016llx",
              (unsigned long long)h, (unsigned long long)CHURN_HASH_BEFORE);
}

/* A base of 200 MB per device (2 devices) and three adapters of 10 MB per
 * device loading in 0.05 s each, with room for the base and two of them
 * (225 MB per device); a second model of 200 MB, room for one model at a
 * time. Loads 1 s, a batch of b 0.1 b s (sim_setup.h).
 *   t=0    r0 (adapter A0) and r1 (the base alone): the base loads 0..1,
 *          A0 after it, 1..1.05; r1 runs alone 1..1.1 (r0 waits for A0),
 *          r0 1.1..1.2
 *   t=2    r2 (A1): room free, A1 loads 2..2.05, runs 2.05..2.15
 *   t=3    r3 (A2): no room: A0 (idle since 1.1) leaves, A2 loads 3..3.05,
 *          runs 3.05..3.15
 *   t=4    r4 (A0): A1 (idle since 2.05) leaves, A0 loads 4..4.05, runs
 *          4.05..4.15
 *   t=5    r5 (model 1): the base leaves, with A2 and A0; model 1 loads
 *          5..6, runs 6..6.1
 *   t=7    r6 (A1): model 1 leaves, the base loads 7..8, A1 8..8.05, runs
 *          8.05..8.15
 * Loads: 3 of models (6 x 200 MB), 5 of adapters (10 x 10 MB); adapters
 * left: 2 as victims and 2 with their base. */
TEST(tiny_trace)
{
    uint64_t bytes[2 * 2];
    struct sim_config c;
    setup(&c, "swapwise", 2, 1, bytes);
    c.budget[0] = c.budget[1] = 225 * MB;
    const int base[3] = {0, 0, 0};
    const uint64_t abytes[6] = {10 * MB, 10 * MB, 10 * MB, 10 * MB, 10 * MB, 10 * MB};
    const double aload[3] = {0.05, 0.05, 0.05};
    c.n_adapters = 3;
    c.adapter_base = base;
    c.adapter_bytes = abytes;
    c.adapter_load_s = aload;
    struct sim_request r[7] = {
        {.arrival = 0, .model = 0, .adapter = 1}, {.arrival = 0, .model = 0},
        {.arrival = 2, .model = 0, .adapter = 2}, {.arrival = 3, .model = 0, .adapter = 3},
        {.arrival = 4, .model = 0, .adapter = 1}, {.arrival = 5, .model = 1},
        {.arrival = 7, .model = 0, .adapter = 2},
    };
    const double done[7] = {1.2, 1.1, 2.15, 3.15, 4.15, 6.1, 8.15};
    struct sim_stats st;
    CHECK_MSG(sim_run(&c, r, 7, &st) == 0, "%s", err_msg());
    for (int i = 0; i < 7; i++)
        CHECK_MSG(fabs(r[i].done - done[i]) < 1e-9, "request %d done at %.9g, expected %g", i,
                  r[i].done, done[i]);
    CHECK_MSG(st.loads == 3 && st.bytes_loaded == 6 * 200 * MB && st.evictions == 2,
              "models: %llu loads, %llu bytes, %llu evictions", (unsigned long long)st.loads,
              (unsigned long long)st.bytes_loaded, (unsigned long long)st.evictions);
    CHECK_MSG(st.adapter_loads == 5 && st.adapter_bytes_loaded == 10 * 10 * MB &&
                  st.adapter_evictions == 4 && fabs(st.adapter_swap_s - 0.25) < 1e-12,
              "adapters: %llu loads, %llu bytes, %llu left, %g s",
              (unsigned long long)st.adapter_loads, (unsigned long long)st.adapter_bytes_loaded,
              (unsigned long long)st.adapter_evictions, st.adapter_swap_s);
    CHECK_MSG(st.high_water[0] == 220 * MB && st.high_water[1] == 220 * MB, "high water %llu, %llu",
              (unsigned long long)st.high_water[0], (unsigned long long)st.high_water[1]);
}

/* Two models resident (200 MB each of 410 MB per device) and an adapter of
 * 20 MB of model 0 (loading in 0.1 s) that fits beside neither: nothing of
 * model 0 can run, so the policy makes the room as for a load of model 0
 * (model 1 leaves), and the adapter loads then. Under swapwise (one load
 * and one batch at a time):
 *   t=0    r0 (model 0), r1 (model 1): model 0 loads 0..1, model 1 1..2
 *   t=2    r2 (the adapter) arrives; r0 runs 2..2.1, r1 2.1..2.2
 *   t=2.1  model 0 is idle with only r2, whose adapter has no room: the
 *          policy loads model 0 with model 1 as the victim, which leaves at
 *          the end of its batch, 2.2; the adapter loads 2.2..2.3, r2 runs
 *          2.3..2.4 */
TEST(room_from_policy)
{
    uint64_t bytes[2 * 2];
    struct sim_config c;
    setup(&c, "swapwise", 2, 2, bytes);
    c.budget[0] = c.budget[1] = 410 * MB;
    const int base[1] = {0};
    const uint64_t abytes[2] = {20 * MB, 20 * MB};
    const double aload[1] = {0.1};
    c.n_adapters = 1;
    c.adapter_base = base;
    c.adapter_bytes = abytes;
    c.adapter_load_s = aload;
    c.trace = getenv("SIM_TRACE") ? stderr : NULL;
    struct sim_request r[3] = {{.arrival = 0, .model = 0},
                               {.arrival = 0, .model = 1},
                               {.arrival = 2, .model = 0, .adapter = 1}};
    struct sim_stats st;
    CHECK_MSG(sim_run(&c, r, 3, &st) == 0, "%s", err_msg());
    CHECK_MSG(fabs(r[0].done - 2.1) < 1e-9 && fabs(r[1].done - 2.2) < 1e-9 &&
                  fabs(r[2].done - 2.4) < 1e-9,
              "done at %g, %g, %g", r[0].done, r[1].done, r[2].done);
    CHECK_MSG(st.loads == 2 && st.evictions == 1 && st.adapter_loads == 1 &&
                  st.adapter_bytes_loaded == 40 * MB,
              "%llu loads, %llu evictions, %llu adapter loads, %llu bytes",
              (unsigned long long)st.loads, (unsigned long long)st.evictions,
              (unsigned long long)st.adapter_loads, (unsigned long long)st.adapter_bytes_loaded);
}

/* Requests naming an adapter of another model, an adapter that never fits
 * beside its base: one line each. */
TEST(refusals)
{
    uint64_t bytes[2 * 2];
    struct sim_config c;
    setup(&c, "swapwise", 2, 1, bytes);
    const int base[1] = {1};
    const uint64_t abytes[2] = {10 * MB, 10 * MB};
    const double aload[1] = {0.1};
    c.n_adapters = 1;
    c.adapter_base = base;
    c.adapter_bytes = abytes;
    c.adapter_load_s = aload;
    c.budget[0] = c.budget[1] = 205 * MB;
    struct sim_request r = {.arrival = 0, .model = 1, .adapter = 1};
    struct sim_stats st;
    CHECK_MSG(sim_run(&c, &r, 1, &st) == ERR_INVALID &&
                  strstr(err_msg(), "adapter 0 never fits device 0 beside its base"),
              "%s", err_msg());
    c.budget[0] = c.budget[1] = 210 * MB;
    r.model = 0;
    CHECK_MSG(sim_run(&c, &r, 1, &st) == ERR_INVALID &&
                  strstr(err_msg(), "request 0: adapter 1 over model 0"),
              "%s", err_msg());
    r.model = 1;
    CHECK_MSG(sim_run(&c, &r, 1, &st) == 0, "%s", err_msg());
}

/* Churn: 2 bases and 12 adapters (of both), room for one base and a few
 * adapters, thousands of requests over them and the bases alone: under
 * every policy each request is done once, after its arrival and its own
 * batch's compute, and no device holds more than its budget. */
TEST(churn)
{
    const char *all[] = {"computron", "swapwise", "lru", "fifo", "clairvoyant", "swapwise-preempt"};
    struct arrival_spec spec = {
        .kind = ARRIVAL_GAMMA, .n_models = 14, .cv = 2, .duration_s = 400, .seed = 11};
    for (int i = 0; i < 14; i++)
        spec.rates[i] = 3.0 / (i + 1);
    struct arrival *ev;
    size_t n;
    CHECK(arrival_generate(&spec, &ev, &n) == 0 && n > 1000);
    struct sim_request *rq = calloc(n, sizeof(*rq));
    int base[12];
    uint64_t abytes[24];
    double aload[12];
    for (int k = 0; k < 12; k++) {
        base[k] = k % 2;
        abytes[2 * k] = abytes[2 * k + 1] = (5 + (uint64_t)k) * MB;
        aload[k] = 0.02 + 0.005 * k;
    }
    for (size_t p = 0; p < sizeof(all) / sizeof(all[0]); p++) {
        uint64_t bytes[2 * 2];
        struct sim_config c;
        setup(&c, all[p], 2, 1, bytes);
        c.budget[0] = c.budget[1] = 240 * MB;
        c.n_adapters = 12;
        c.adapter_base = base;
        c.adapter_bytes = abytes;
        c.adapter_load_s = aload;
        c.overlap_loads = p % 2 == 0;
        c.trace = getenv("SIM_TRACE") ? stderr : NULL;
        if (getenv("SIM_TRACE"))
            fprintf(stderr, "policy %s\n", all[p]);
        for (size_t i = 0; i < n; i++) {
            /* streams 0, 1: the bases alone; 2..13: adapter 0..11 */
            int a = ev[i].model >= 2 ? ev[i].model - 1 : 0;
            rq[i] = (struct sim_request){.arrival = ev[i].t,
                                         .model = a ? base[a - 1] : ev[i].model,
                                         .adapter = a,
                                         .n_prompt = i % 2 ? 0 : 20,
                                         .n_output = i % 2 ? 0 : 1 + (int)(i % 9)};
        }
        struct sim_stats st;
        CHECK_MSG(sim_run(&c, rq, n, &st) == 0, "%s: %s", all[p], err_msg());
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += !(rq[i].start >= rq[i].arrival && rq[i].done >= rq[i].start + 0.1 - 1e-9 &&
                     rq[i].batch_size >= 1);
        CHECK_MSG(bad == 0, "%s: %zu requests with bad times", all[p], bad);
        CHECK_MSG(st.high_water[0] <= c.budget[0] && st.high_water[1] <= c.budget[1] &&
                      st.adapter_loads > 12 && st.adapter_evictions > 0,
                  "%s: high water %llu, %llu adapter loads, %llu left", all[p],
                  (unsigned long long)st.high_water[0], (unsigned long long)st.adapter_loads,
                  (unsigned long long)st.adapter_evictions);
    }
    free(rq);
    free(ev);
}

/* bench workload --adapters sizes its simulated adapters by shape
 * (simulate_adapter_bytes): on one device that is what model_adapter_bytes
 * allocates for a PEFT adapter over every projection of the same rank
 * (a Llama's and an OPT's fixtures), and split two ways each device holds
 * less than the whole and together at least as much. */
TEST(adapter_bytes)
{
    const struct {
        const char *base, *adapter;
        int rank;
    } cases[] = {{"llama_gqa_f32", "llama_r16_all_rslora", 16}, {"pre_ln_f32", "opt_r8_all", 8}};
    for (int i = 0; i < 2; i++) {
        char base[512], dir[512];
        snprintf(base, sizeof(base), "%s/tests/fixtures/models/%s", SHARDSWAP_SOURCE_DIR,
                 cases[i].base);
        snprintf(dir, sizeof(dir), "%s/tests/fixtures/lora/%s", SHARDSWAP_SOURCE_DIR,
                 cases[i].adapter);
        struct model_config *cfg = NULL;
        uint64_t want = 0, one[1] = {0}, two[2] = {0};
        int rank = 0;
        CHECK_MSG(model_config_load(base, &cfg) == 0 &&
                      model_adapter_bytes(dir, cfg, base, &want, &rank) == 0,
                  "%s: %s", dir, err_msg());
        model_config_free(cfg);
        CHECK(simulate_adapter_bytes(base, 1, cases[i].rank, one) == 0 &&
              simulate_adapter_bytes(base, 2, cases[i].rank, two) == 0);
        CHECK_MSG(one[0] == want && rank == cases[i].rank,
                  "%s: %llu bytes by shape, %llu by model_adapter_bytes (rank %d)",
                  cases[i].adapter, (unsigned long long)one[0], (unsigned long long)want, rank);
        CHECK_MSG(two[0] < one[0] && two[0] == two[1] && two[0] + two[1] >= one[0],
                  "%s: split %llu + %llu of %llu", cases[i].adapter, (unsigned long long)two[0],
                  (unsigned long long)two[1], (unsigned long long)one[0]);
    }
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
