/* Chat traffic (workload/chat.h): the length distributions against their
 * analytical quantiles, Zipf popularity, reproducibility per request, the
 * chat config's parsing, token SLOs on hand-made records, the simulator's
 * prefill and decode terms on exact scenarios, and Computron's one-token
 * requests unchanged by them. Fixed seeds throughout; each tolerance is
 * stated next to its check. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "sched/sim.h"
#include "test.h"
#include "sim_setup.h"
#include "workload/arrival.h"
#include "workload/chat.h"
#include "workload/computron.h"
#include "workload/summary.h"

#define N_DRAWS 20000

static int cmp_int(const void *a, const void *b)
{
    return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

static double phi(double z) /* standard normal CDF */
{
    return 0.5 * erfc(-z / sqrt(2));
}

/* Sample quantiles of a clipped log-normal against exp(mu + sigma z_q): the
 * sample q-quantile of n draws has a standard deviation of about
 * sqrt(q(1-q)/n) / f(x_q), which relative to x_q is
 * sigma sqrt(2 pi q(1-q)/n) / exp(-z_q^2/2): 0.9% at the median and 1.2% at
 * p90 for sigma 1 and n = 20000. The tolerances, 4% and 5%, are about four
 * of them. The share clipped to max is P(X >= max - 1/2) within 0.004 (four
 * binomial standard deviations at p ~ 0.02). */
static void check_dist(const struct chat_dist *d, int which)
{
    int *x = malloc(sizeof(int) * N_DRAWS);
    struct chat_lengths l;
    chat_lengths_default(&l);
    size_t at_max = 0, out_of_range = 0;
    for (int k = 0; k < N_DRAWS; k++) {
        int p, o;
        chat_lengths_draw(&l, 7, 0, (uint64_t)k, &p, &o);
        x[k] = which ? o : p;
        out_of_range += x[k] < 1 || x[k] > d->max;
        at_max += x[k] == d->max;
    }
    qsort(x, N_DRAWS, sizeof(int), cmp_int);
    double med = x[N_DRAWS / 2], p90 = x[N_DRAWS * 9 / 10];
    double want_med = d->median, want_p90 = d->median * exp(d->sigma * 1.2815516);
    double want_clip = 1 - phi(log((d->max - 0.5) / d->median) / d->sigma);
    CHECK(out_of_range == 0);
    CHECK_MSG(fabs(med / want_med - 1) < 0.04, "%s median %g, expected %g",
              which ? "output" : "prompt", med, want_med);
    CHECK_MSG(fabs(p90 / want_p90 - 1) < 0.05, "%s p90 %g, expected %g",
              which ? "output" : "prompt", p90, want_p90);
    CHECK_MSG(fabs((double)at_max / N_DRAWS - want_clip) < 0.004, "%s at max %g, expected %g",
              which ? "output" : "prompt", (double)at_max / N_DRAWS, want_clip);
    free(x);
}

TEST(lengths_quantiles)
{
    struct chat_lengths l;
    chat_lengths_default(&l);
    CHECK(l.prompt.median == 200 && l.prompt.sigma == 1.0 && l.prompt.max == 1536);
    CHECK(l.output.median == 100 && l.output.sigma == 0.8 && l.output.max == 512);
    check_dist(&l.prompt, 0);
    check_dist(&l.output, 1);
}

/* A distribution clipped hard at both ends: median 10, sigma 1, max 5 puts
 * P(X >= 4.5) = 0.788 at 5 and P(X < 1.5) = 0.029 at 1 (within 0.012 and
 * 0.005: four binomial standard deviations of 20000 draws) */
TEST(lengths_clipping)
{
    struct chat_dist d = {10, 1.0, 5};
    struct rng r;
    rng_seed(&r, 3, 0);
    int lo = 0, hi = 0, bad = 0;
    for (int k = 0; k < N_DRAWS; k++) {
        int x = chat_dist_draw(&d, &r);
        bad += x < 1 || x > 5;
        lo += x == 1;
        hi += x == 5;
    }
    CHECK(bad == 0);
    CHECK_MSG(fabs((double)hi / N_DRAWS - (1 - phi(log(0.45)))) < 0.012, "at 5: %d", hi);
    CHECK_MSG(fabs((double)lo / N_DRAWS - phi(log(0.15))) < 0.005, "at 1: %d", lo);
}

/* chat:20:100 is 20 Zipf(1) rates summing to 100 req/s; over 200 s every
 * model's share of the arrivals is its rate's within four binomial standard
 * deviations. */
TEST(zipf_shares)
{
    struct workload_flags f = {.config = "chat:20:100"};
    struct workload_config c;
    CHECK_MSG(workload_config_from_flags(&f, &c) == 0, "%s", err_msg());
    CHECK(c.chat && c.n_models == 20 && c.cv == 1 && c.zipf == 1 && c.max_loaded == 5 &&
          c.max_batch == 8 && c.slo_ttft_s == CHAT_SLO_TTFT_S);
    double sum = 0, h = 0;
    for (int i = 0; i < 20; i++) {
        sum += c.rates[i];
        h += 1.0 / (i + 1);
    }
    CHECK(fabs(sum - 100) < 1e-9 && fabs(c.rates[0] - 100 / h) < 1e-9 &&
          fabs(c.rates[0] / c.rates[3] - 4) < 1e-9);
    struct arrival_spec spec = {.kind = ARRIVAL_GAMMA, .n_models = 20, .cv = c.cv,
                                .duration_s = 200, .seed = 5};
    memcpy(spec.rates, c.rates, sizeof(double) * 20);
    struct arrival *ev;
    size_t n;
    CHECK(arrival_generate(&spec, &ev, &n) == 0 && n > 15000);
    size_t count[20] = {0};
    for (size_t i = 0; i < n; i++)
        count[ev[i].model]++;
    for (int i = 0; i < 20; i++) {
        double p = c.rates[i] / 100, share = (double)count[i] / (double)n;
        CHECK_MSG(fabs(share - p) < 4 * sqrt(p * (1 - p) / (double)n), "model %d: %g of %g", i,
                  share, p);
    }
    free(ev);
    /* the exponent and the CV are the config's */
    f.config = "chat:200:50:2:0.5";
    CHECK(workload_config_from_flags(&f, &c) == 0 && c.n_models == 200 && c.cv == 2 &&
          c.zipf == 0.5 && fabs(c.rates[0] / c.rates[3] - 2) < 1e-9 && c.max_loaded == 50);
}

TEST(config_errors)
{
    const char *bad[] = {"chat:", "chat:20", "chat:0:10", "chat:257:10", "chat:2.5:10",
                         "chat:20:0", "chat:20:10:0", "chat:20:10:1:-1", "chat:20:10:1:1:3",
                         "chat:20:x", "chat:20:10:"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct workload_flags f = {.config = bad[i]};
        struct workload_config c;
        CHECK_MSG(workload_config_from_flags(&f, &c) == ERR_INVALID &&
                      strstr(err_msg(), "chat:MODELS:RATE[:CV[:ZIPF]]"),
                  "%s: %s", bad[i], err_msg());
    }
}

/* The same seed gives the same requests; a model added to the spec leaves
 * every other model's arrival times and lengths as they were. */
TEST(reproducible)
{
    struct chat_lengths l;
    chat_lengths_default(&l);
    struct arrival_spec a = {.kind = ARRIVAL_GAMMA, .n_models = 20, .cv = 2, .duration_s = 30,
                             .seed = 11};
    arrival_rates_powerlaw(20, 1, 40, a.rates);
    struct arrival_spec b = a;
    b.n_models = 21;
    b.rates[20] = 7;
    struct arrival *ea = NULL, *ea2 = NULL, *eb = NULL;
    size_t na = 0, na2 = 0, nb = 0;
    CHECK(arrival_generate(&a, &ea, &na) == 0 && arrival_generate(&a, &ea2, &na2) == 0 &&
          arrival_generate(&b, &eb, &nb) == 0 && na == na2 && nb > na);
    struct chat_request *la = calloc(na, sizeof(*la)), *la2 = calloc(na, sizeof(*la2)),
                        *lb = calloc(nb, sizeof(*lb));
    chat_requests_make(&l, a.seed, ea, na, la);
    chat_requests_make(&l, a.seed, ea2, na2, la2);
    chat_requests_make(&l, b.seed, eb, nb, lb);
    size_t diff = 0;
    for (size_t i = 0; i < na; i++) /* field by field: struct arrival has padding */
        diff += ea[i].t != ea2[i].t || ea[i].model != ea2[i].model ||
                la[i].n_prompt != la2[i].n_prompt || la[i].n_output != la2[i].n_output;
    CHECK(diff == 0);
    /* b without model 20 is a, request by request */
    size_t j = 0, bad = 0;
    for (size_t i = 0; i < nb; i++) {
        if (eb[i].model == 20)
            continue;
        bad += j >= na || eb[i].t != ea[j].t || eb[i].model != ea[j].model ||
               lb[i].n_prompt != la[j].n_prompt || lb[i].n_output != la[j].n_output;
        j++;
    }
    CHECK_MSG(bad == 0 && j == na, "%zu requests differ", bad);
    /* another seed, other lengths */
    chat_requests_make(&l, a.seed + 1, ea, na, la2);
    CHECK(memcmp(la, la2, na * sizeof(*la)) != 0);
    free(ea);
    free(ea2);
    free(eb);
    free(la);
    free(la2);
    free(lb);
}

/* Five hand-made records, SLO TTFT <= 1 s and TPOT <= 0.1 s:
 *   0: TTFT 0.5, 11 tokens over 0.5 s after the first: TPOT 0.05   met
 *   1: TTFT 1.5                                                    missed
 *   2: TTFT 0.2, 3 tokens, 0.4 s after the first: TPOT 0.2         missed
 *   3: TTFT 1.0, one token: TPOT 0                                 met
 *   4: failed                                                      missed
 * attainment 2/5; goodput 2 / (last done 4.0 - first arrival 0) */
TEST(token_slo)
{
    struct request_record r[5] = {
        {.model = 0, .t_arrival = 0, .t_first_token = 0.5, .t_done = 1.0, .n_output = 11},
        {.model = 0, .t_arrival = 1, .t_first_token = 2.5, .t_done = 2.6, .n_output = 2},
        {.model = 1, .t_arrival = 2, .t_first_token = 2.2, .t_done = 2.6, .n_output = 3},
        {.model = 1, .t_arrival = 3, .t_first_token = 4.0, .t_done = 4.0, .n_output = 1},
        {.model = 1, .t_arrival = 3.5, .t_done = 3.6, .status = ERR_TIMEOUT},
    };
    struct token_summary s;
    CHECK(summary_tokens(r, 5, -1, 1.0, 0.1, &s) == 0);
    CHECK_MSG(s.n == 5 && s.met == 2 && fabs(s.attain - 0.4) < 1e-12 &&
                  fabs(s.goodput - 0.5) < 1e-12,
              "n %zu met %zu attain %g goodput %g", s.n, s.met, s.attain, s.goodput);
    CHECK(s.ttft.n == 4 && fabs(s.ttft.max - 1.5) < 1e-12 && fabs(s.tpot.max - 0.2) < 1e-12 &&
          fabs(s.tpot.min) < 1e-12);
    /* model 1: records 2..4, one met; goodput 1 / (4.0 - 2) */
    CHECK(summary_tokens(r, 5, 1, 1.0, 0.1, &s) == 0);
    CHECK(s.n == 3 && s.met == 1 && fabs(s.goodput - 0.5) < 1e-12);
    /* a looser TPOT lets record 2 in */
    CHECK(summary_tokens(r, 5, -1, 1.0, 0.2, &s) == 0 && s.met == 3);
    /* nothing: NaN attainment, no goodput */
    CHECK(summary_tokens(r, 5, 7, 1.0, 0.1, &s) == 0 && s.n == 0 && isnan(s.attain) &&
          s.goodput == 0);
}



static void chat_costs(struct sim_config *c)
{
    c->base_prompt = 8;
    c->prefill_token_s = 0.001;
    for (int b = 1; b <= SIM_MAX_BATCH; b++)
        c->step_s[b] = 0.01 + 0.01 * b;
}

/* Exact times: a cold request of 108 prompt tokens and 11 outputs: load 1,
 * prefill 0.1 + 100 x 0.001, first token at 1.2, then 10 steps of 0.02:
 * done at 1.4. Two in one batch (3 and 5 outputs, 8 and 58 prompt tokens):
 * prefill 0.2 + 0.05 = 0.25, first tokens at 1.25; steps 1-2 with both
 * (0.03 each): the first done at 1.31; steps 3-4 with one (0.02 each): the
 * second done at 1.35. */
TEST(sim_prefill_decode)
{
    const char *both[] = {"computron", "swapwise"};
    for (int p = 0; p < 2; p++) {
        uint64_t bytes[2];
        struct sim_config c;
        struct sim_stats st;
        setup(&c, both[p], 1, 1, bytes);
        chat_costs(&c);
        struct sim_request r = {.arrival = 0, .n_prompt = 108, .n_output = 11};
        CHECK(sim_run(&c, &r, 1, &st) == 0);
        CHECK_MSG(fabs(r.first_token - 1.2) < 1e-12 && fabs(r.done - 1.4) < 1e-12,
                  "%s: first %g done %g", both[p], r.first_token, r.done);
        struct sim_request r2[2] = {{.arrival = 0, .n_prompt = 8, .n_output = 3},
                                    {.arrival = 0, .n_prompt = 58, .n_output = 5}};
        CHECK(sim_run(&c, r2, 2, &st) == 0);
        CHECK_MSG(fabs(r2[0].first_token - 1.25) < 1e-12 &&
                      fabs(r2[1].first_token - 1.25) < 1e-12 && fabs(r2[0].done - 1.31) < 1e-12 &&
                      fabs(r2[1].done - 1.35) < 1e-12 && r2[1].batch_size == 2,
                  "%s: done %g %g", both[p], r2[0].done, r2[1].done);
    }
}

/* Computron's one-token requests (n_output 0) cost batch_s alone: the chat
 * terms set or not, config 13's simulated times are the same bytes. */
TEST(computron_unchanged)
{
    struct workload_config w;
    CHECK(workload_computron(13, &w) == 0 && !w.chat);
    struct arrival_spec spec = {.kind = ARRIVAL_GAMMA, .n_models = w.n_models, .cv = w.cv,
                                .duration_s = 20, .seed = 2};
    memcpy(spec.rates, w.rates, sizeof(double) * (size_t)w.n_models);
    struct arrival *ev;
    size_t n;
    CHECK(arrival_generate(&spec, &ev, &n) == 0 && n > 100);
    uint64_t bytes[2 * 6];
    struct sim_request *ra = calloc(n, sizeof(*ra)), *rb = calloc(n, sizeof(*rb));
    struct sim_config c;
    struct sim_stats sa, sb;
    setup(&c, "swapwise", w.n_models, w.max_loaded, bytes);
    c.max_batch = w.max_batch;
    c.overlap_loads = true;
    for (size_t i = 0; i < n; i++)
        ra[i] = rb[i] = (struct sim_request){.arrival = ev[i].t, .model = ev[i].model};
    CHECK(sim_run(&c, ra, n, &sa) == 0);
    chat_costs(&c);
    CHECK(sim_run(&c, rb, n, &sb) == 0);
    CHECK(memcmp(ra, rb, n * sizeof(*ra)) == 0 && sa.loads == sb.loads &&
          sa.compute_s == sb.compute_s);
    size_t same = 0;
    for (size_t i = 0; i < n; i++)
        same += ra[i].first_token == ra[i].done;
    CHECK(same == n);
    free(ra);
    free(rb);
    free(ev);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
