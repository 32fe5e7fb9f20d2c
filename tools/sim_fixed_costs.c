/* `bench workload --simulate` on fixed costs, for before/after checks.
 *
 *     sim_fixed_costs MODEL_DIR [SEEDS]
 *
 * bench workload --simulate measures a load's and batches' times on this
 * machine before it simulates, so two binaries never simulate on the same
 * costs and their latencies can only be close. This program runs the same
 * simulation (workload/simulate.h: the stack's shard bytes and budgets, the
 * arrivals, the policies, sched/sim.h) on made-up costs instead, over
 * Computron's 19 configs on MODEL_DIR (an opt-1.3b-shaped checkpoint on two
 * CPU devices, as bench workload's defaults), and prints every summary field
 * with 17 significant digits: two libraries that simulate alike print the
 * same bytes. tools/bench_before_after.py compiles it against each tree's
 * headers and libshardswap_lib.a (its build's link line) and compares the
 * outputs. Not part of the build: it links the library's internals. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/stack.h"
#include "workload/computron.h"
#include "workload/replay.h"
#include "workload/simulate.h"

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: sim_fixed_costs MODEL_DIR [SEEDS]\n");
        return 2;
    }
    int seeds = argc == 3 ? atoi(argv[2]) : 5;
    const char *paths[1] = {argv[1]};
    struct replay_rig rig = {.paths = paths, .n_models = 1, .tp = 2, .device_kind = "cpu"};
    /* costs of the order a 2-layer opt-1.3b has on two CPU devices, chosen so
     * that loads matter (several configs swap often) */
    struct sim_config costs;
    memset(&costs, 0, sizeof(costs));
    costs.load_s = 0.075;
    costs.max_batch = 32;
    for (int b = 1; b <= 32; b++)
        costs.batch_s[b] = 0.012 + 0.0035 * b;
    costs.overlap_tail = 0.5;
    costs.overlap_loads = false;
    const char *policies[2] = {"computron", "swapwise"};
    const double slo = 0.25, duration = 20;
    for (int k = 0; k < WORKLOAD_COMPUTRON_CONFIGS; k++) {
        struct workload_config c;
        workload_computron(k, &c);
        struct simulate_summary s[2];
        int rc = simulate_workload(&rig, &c, &costs, policies, 2, 1, seeds, duration, slo, s);
        if (rc < 0) {
            fprintf(stderr, "sim_fixed_costs: computron:%d: %s\n", k, err_msg());
            return 1;
        }
        for (int p = 0; p < 2; p++)
            printf("computron:%d %s mean %.17g p50 %.17g p90 %.17g p99 %.17g max %.17g slo %.17g "
                   "swaps %.17g worst_p99_ratio %.17g\n",
                   k, policies[p], s[p].mean, s[p].p50, s[p].p90, s[p].p99, s[p].max, s[p].slo,
                   s[p].swaps, s[p].worst_p99_ratio);
    }
    return 0;
}
