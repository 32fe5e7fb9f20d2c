/* The fixed costs tools/sim_targets.c and tools/sim_partial_room.c
 * simulate on, of the order bench workload --simulate --link-gbps 1
 * measures on a 2-layer opt-1.3b over two CPU devices (sim_targets.c says
 * which): the one copy, so the two tools' tables stay comparable. A header
 * of tools, not of the build. */
#ifndef SHARDSWAP_TOOLS_SIM_COSTS_H
#define SHARDSWAP_TOOLS_SIM_COSTS_H

#include <stdbool.h>
#include <string.h>

#include "sched/sim.h"

/* c cleared, then the load, overlap and batch costs; with chat the prefill
 * and decode steps too. */
static inline void costs_fixed(struct sim_config *c, bool chat)
{
    memset(c, 0, sizeof(*c));
    c->load_s = 0.220;
    c->overlap_tail = 0.5;
    c->overlap_loads = true; /* --link-gbps: copies take no compute */
    /* piecewise linear through the measured 1, 2, 8, 32 */
    static const int at[] = {1, 2, 8, 32};
    static const double t[] = {0.027, 0.034, 0.093, 0.257};
    for (int b = 1; b <= 32; b++) {
        int k = 0;
        while (k < 2 && b > at[k + 1])
            k++;
        c->batch_s[b] = t[k] + (t[k + 1] - t[k]) * (b - at[k]) / (at[k + 1] - at[k]);
    }
    if (chat) {
        c->base_prompt = 8;
        c->prefill_token_s = 0.0008;
        for (int b = 1; b <= 32; b++)
            c->step_s[b] = 0.017 + (0.032 - 0.017) * (b - 1) / 7.0;
    }
}

#endif
