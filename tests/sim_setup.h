/* A simulated rig every simulator test starts from: n models of 200 MB on
 * each of 2 devices with room for `room` of them, a load of 1 s and a batch
 * of b costing 0.1 b s. */
#ifndef SHARDSWAP_TESTS_SIM_SETUP_H
#define SHARDSWAP_TESTS_SIM_SETUP_H

#include <string.h>

#include "sched/sched.h"
#include "sched/sim.h"

#define MB (1000ull * 1000)

static void setup(struct sim_config *c, const char *policy, int n, int room, uint64_t *bytes)
{
    memset(c, 0, sizeof(*c));
    c->policy = sched_policy_find_sim(policy);
    c->n_models = n;
    c->n_devices = 2;
    for (int i = 0; i < 2 * n; i++)
        bytes[i] = 200 * MB;
    c->bytes = bytes;
    c->budget[0] = c->budget[1] = 200 * MB * (uint64_t)room;
    c->max_loaded = room;
    c->max_batch = 8;
    c->load_s = 1.0;
    for (int b = 1; b <= SIM_MAX_BATCH; b++)
        c->batch_s[b] = 0.1 * b;
    c->overlap_tail = 0.5;
}

#endif
