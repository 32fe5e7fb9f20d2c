/* Workload replay (workload/replay.h), its summaries (workload/summary.h)
 * and the simulated comparison over seeds (workload/simulate.h): summaries
 * against hand-computed values, then a short real-time replay, the warm
 * latency, the cost measurement and the simulated comparison on two
 * generated opt-125m models cut to one layer, and the errors of a model
 * that is not there. Timings vary; checks are on counts and orderings. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "model/random.h"
#include "test.h"
#include "workload/replay.h"
#include "workload/simulate.h"
#include "workload/summary.h"

static char tmp[64];

TEST(summary)
{
    /* model 0: latencies 1, 3 (queue 0.5, 1); model 1: latency 2 and one failure */
    struct request_record r[4] = {
        {.id = 0, .model = 0, .t_arrival = 0, .t_start = 0.5, .t_done = 1},
        {.id = 1, .model = 1, .t_arrival = 1, .t_start = 1, .t_done = 3},
        {.id = 2, .model = 0, .t_arrival = 2, .t_start = 3, .t_done = 5},
        {.id = 3, .model = 1, .t_arrival = 3, .status = ERR_TIMEOUT},
    };
    struct summary s;
    double *lat = NULL;
    size_t n = 0;
    CHECK(summary_compute(r, 4, -1, 2.5, &s, &lat, &n) == 0);
    CHECK(s.all.n == 3 && n == 3 && s.failed == 1);
    CHECK(lat && lat[0] == 1 && lat[1] == 2 && lat[2] == 3); /* record order */
    CHECK(fabs(s.all.mean - 2) < 1e-12 && s.all.p50 == 2 && s.all.max == 3);
    CHECK(fabs(s.slo_attain - 2.0 / 3) < 1e-12);
    CHECK(fabs(s.throughput - 3.0 / 5) < 1e-12); /* 3 done over 0 .. 5 s */
    CHECK(fabs(s.queue_s - 1.5) < 1e-12);
    free(lat);

    CHECK(summary_compute(r, 4, 1, 2.5, &s, NULL, NULL) == 0);
    CHECK(s.all.n == 1 && s.failed == 1 && s.all.mean == 2 && s.slo_attain == 1);
    CHECK(summary_compute(r, 4, 7, 1, &s, NULL, NULL) == 0);
    CHECK(s.all.n == 0 && isnan(s.all.p99) && isnan(s.slo_attain) && s.throughput == 0);
}

static int make_model(const char *dir)
{
    struct model_config *cfg;
    if (model_preset("opt-125m", &cfg) < 0)
        return -1;
    cfg->info.n_layers = 1;
    mkdir(dir, 0755);
    struct model_random_opts o = {.dtype = DTYPE_F16, .seed = 1};
    int rc = model_random_write(cfg, dir, &o);
    model_config_free(cfg);
    return rc;
}

TEST(replay)
{
    char d0[128], d1[128];
    snprintf(d0, sizeof(d0), "%s/m0", tmp);
    snprintf(d1, sizeof(d1), "%s/m1", tmp);
    CHECK_MSG(make_model(d0) == 0 && make_model(d1) == 0, "%s", err_msg());
    const char *paths[] = {d0, d1};
    struct replay_rig rig = {.paths = paths, .n_models = 2, .tp = 1};

    /* the same arrivals for the same seed, and the rates' proportions */
    struct workload_config c = {.n_models = 2, .rates = {8, 2}, .cv = 1, .max_loaded = 1,
                                .max_batch = 4};
    struct arrival *ev = NULL, *ev2 = NULL;
    size_t n = 0, n2 = 0;
    CHECK(replay_arrivals(&c, 1, 3, &ev, &n) == 0 && n > 0);
    CHECK(replay_arrivals(&c, 1, 3, &ev2, &n2) == 0 && n2 == n);
    int same = ev && ev2;
    for (size_t i = 0; same && i < n; i++)
        same = ev[i].t == ev2[i].t && ev[i].model == ev2[i].model;
    CHECK(same);
    free(ev2);

    struct replay_result res;
    CHECK_MSG(replay_run(&rig, &c, "swapwise", ev, n, 0, &res) == 0, "%s", err_msg());
    CHECK(res.n == n && res.recs && res.st.completed == n && res.st.ok == n);
    for (size_t i = 0; res.recs && i < res.n; i++) {
        const struct request_record *q = &res.recs[i];
        CHECK(q->status == 0 && q->model == ev[i].model && q->n_output == 1);
        CHECK(q->t_arrival >= 0 && q->t_arrival <= q->t_start && q->t_start <= q->t_done);
    }
    CHECK(res.st.loads >= 1 && res.wall_s > 0);
    replay_result_free(&res);
    CHECK(res.recs == NULL);
    replay_result_free(NULL);

    /* round robin: one blocking request after the other, alternating */
    c.round_robin = true;
    CHECK_MSG(replay_run(&rig, &c, "computron", NULL, 0, 4, &res) == 0, "%s", err_msg());
    CHECK(res.n == 4 && res.st.ok == 4 && res.st.loads == 4); /* max_loaded 1: every one swaps */
    for (size_t i = 0; res.recs && i + 1 < res.n; i++)
        CHECK(res.recs[i].model == (int)(i % 2) && res.recs[i].t_done <= res.recs[i + 1].t_arrival);
    replay_result_free(&res);
    c.round_robin = false;

    double warm = 0;
    CHECK_MSG(replay_warm_latency(&rig, &warm) == 0 && warm > 0, "%s", err_msg());

    struct sim_config costs;
    memset(&costs, 0, sizeof(costs));
    CHECK_MSG(replay_measure_costs(&rig, 4, &costs) == 0, "%s", err_msg());
    CHECK(costs.load_s > 0 && costs.max_batch == 4 && !costs.overlap_loads);
    for (int b = 1; b <= 4; b++)
        CHECK(costs.batch_s[b] > 0);
    CHECK(costs.batch_s[5] == 0); /* nothing past max_batch */

    /* the simulated comparison: every seed summarized, the first policy its own reference */
    const char *pols[] = {"computron", "swapwise", "lru", "fifo", "clairvoyant"};
    struct simulate_summary s[5], floor;
    CHECK_MSG(simulate_workload_floor(&rig, &c, &costs, pols, 5, 1, 3, 5, 10 * warm, s, &floor) ==
                  0, "%s", err_msg());
    for (int p = 0; p < 5; p++) {
        CHECK(s[p].mean > 0 && s[p].p50 <= s[p].p99 && s[p].p99 <= s[p].max && s[p].swaps >= 1 &&
              s[p].slo >= 0 && s[p].slo <= 1);
        /* the floor bounds each request's latency, so every statistic of it */
        CHECK_MSG(floor.mean <= s[p].mean && floor.p50 <= s[p].p50 && floor.p99 <= s[p].p99 &&
                      floor.max <= s[p].max && floor.slo >= s[p].slo,
                  "%s: p99 %g under the floor's %g", pols[p], s[p].p99, floor.p99);
    }
    CHECK(floor.mean > 0 && floor.swaps == 0 && floor.worst_p99_ratio > 0 &&
          floor.worst_p99_ratio <= 1);
    CHECK(s[0].worst_p99_ratio == 0 && s[1].worst_p99_ratio > 0);
    const char *bad[] = {"nosuch"};
    CHECK(simulate_workload(&rig, &c, &costs, bad, 1, 1, 1, 5, 1, s) == ERR_INVALID &&
          strstr(err_msg(), "nosuch"));
    free(ev);

    /* a model that does not exist: the error names its path */
    const char *missing[] = {"/nonexistent/model"};
    struct replay_rig none = {.paths = missing, .n_models = 1, .tp = 1};
    CHECK(replay_warm_latency(&none, &warm) < 0 && strstr(err_msg(), "/nonexistent/model"));
    c.n_models = 1;
    CHECK(replay_run(&none, &c, "swapwise", NULL, 0, 0, &res) < 0 &&
          strstr(err_msg(), "/nonexistent/model"));
    replay_result_free(&res);
}

static void setup(void)
{
    test_scratch_dir(tmp, sizeof(tmp), "replay");
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
