/* Partial residency where the room is not a whole number of models: the
 * README's table under "Issue 23's policy targets, on fixed costs".
 *
 *     sim_partial_room [ROOM...]     (default 2 2.5 3.5)
 *
 * Six models of 520 MB per device (8 layers of 50 MB, 20 MB of batch
 * reserve, the rest embeddings and head) on 2 devices with room for ROOM of
 * them (bytes only, no max_loaded), Gamma CV 1 arrivals at 8/(i+1)
 * requests/s for 60 s, seeds 1-10, sim_targets' fixed costs (load 220 ms, a
 * batch of 1 27 ms .. of 32 257 ms, overlap); per policy the p99 and mean
 * latency averaged over the seeds and the bytes its loads moved. Not part of
 * the build: built as tools/sim_targets.c is, against a build's
 * libshardswap_lib.a. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "sched/sim.h"
#include "workload/arrival.h"
#include "workload/stats.h"

#include "sim_costs.h"

#define MB (1000ull * 1000)
#define N_MODELS 6
#define SEEDS 10

/* sim_costs.h's fixed costs (one-token requests), and the six models with
 * room for `room` of them. */
static void costs(struct sim_config *c, uint64_t *bytes, uint64_t *kv, uint64_t *lb, double room)
{
    costs_fixed(c, false);
    c->n_models = N_MODELS;
    c->n_devices = 2;
    for (int i = 0; i < 2 * N_MODELS; i++) {
        bytes[i] = 520 * MB;
        kv[i] = 20 * MB;
        lb[i] = 50 * MB;
    }
    c->bytes = bytes;
    c->kv_bytes = kv;
    c->layer_bytes = lb;
    c->layers = 8;
    c->budget[0] = c->budget[1] = (uint64_t)(520.0 * MB * room);
    c->max_batch = 32;
}

/* One seed under c: its p99 and mean into *p99, *mean, the bytes moved into
 * *moved; negative on error (err_msg says why). */
static int run_seed(const struct sim_config *c, uint64_t seed, double *p99, double *mean,
                    uint64_t *moved)
{
    struct arrival_spec spec = {
        .kind = ARRIVAL_GAMMA, .n_models = N_MODELS, .cv = 1, .duration_s = 60, .seed = seed};
    for (int i = 0; i < N_MODELS; i++)
        spec.rates[i] = 8.0 / (i + 1);
    struct arrival *ev;
    size_t n;
    int rc = arrival_generate(&spec, &ev, &n);
    if (rc < 0)
        return rc;
    struct sim_request *rq = calloc(n, sizeof(*rq));
    double *lat = calloc(n, sizeof(double));
    struct sim_stats st;
    struct latency_stats ls;
    rc = rq && lat ? 0 : err_set(ERR_NOMEM, "out of memory for %zu requests", n);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rq[i] = (struct sim_request){.arrival = ev[i].t, .model = ev[i].model};
    if (rc == 0)
        rc = sim_run(c, rq, n, &st);
    for (size_t i = 0; rc == 0 && i < n; i++)
        lat[i] = rq[i].done - rq[i].arrival;
    if (rc == 0 && (rc = stats_latency_compute(lat, n, &ls)) == 0) {
        *p99 = ls.p99;
        *mean = ls.mean;
        *moved = st.bytes_loaded;
    }
    free(rq);
    free(lat);
    free(ev);
    return rc;
}

int main(int argc, char **argv)
{
    static const char *const pols[] = {"swapwise", "swapwise-partial", "clairvoyant",
                                       "clairvoyant-partial", "computron"};
    double rooms[16] = {2, 2.5, 3.5};
    int n_rooms = argc > 1 ? argc - 1 : 3;
    for (int r = 0; r < n_rooms && r < 16; r++)
        if (argc > 1 && !((rooms[r] = atof(argv[r + 1])) >= 1)) {
            fprintf(stderr, "sim_partial_room: room %s: expected models >= 1\n", argv[r + 1]);
            return 2;
        }
    printf("%-6s %-20s %9s %9s %9s\n", "room", "policy", "p99 ms", "mean ms", "moved GB");
    for (int r = 0; r < n_rooms && r < 16; r++)
        for (size_t p = 0; p < sizeof(pols) / sizeof(pols[0]); p++) {
            uint64_t bytes[2 * N_MODELS], kv[2 * N_MODELS], lb[2 * N_MODELS];
            struct sim_config c;
            costs(&c, bytes, kv, lb, rooms[r]);
            if (!(c.policy = sched_policy_find_sim(pols[p]))) {
                fprintf(stderr, "sim_partial_room: %s\n", err_msg());
                return 1;
            }
            double p99 = 0, mean = 0, gb = 0;
            for (int seed = 1; seed <= SEEDS; seed++) {
                double sp99 = 0, smean = 0;
                uint64_t moved = 0;
                if (run_seed(&c, (uint64_t)seed, &sp99, &smean, &moved) < 0) {
                    fprintf(stderr, "sim_partial_room: %s, room %g, seed %d: %s\n", pols[p],
                            rooms[r], seed, err_msg());
                    return 1;
                }
                p99 += sp99 / SEEDS;
                mean += smean / SEEDS;
                gb += (double)moved / 1e9 / SEEDS;
            }
            printf("%-6.2f %-20s %9.0f %9.0f %9.1f\n", rooms[r], pols[p], p99 * 1e3, mean * 1e3,
                   gb);
        }
    return 0;
}
