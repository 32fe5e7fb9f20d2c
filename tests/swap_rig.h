/* The rig the sharded-execution tests share (test_sharded, test_gguf_model,
 * test_gguf_quant): tp x pp CPU devices, a swap manager and workers, and a
 * model registered on them in order. Include after the system headers; this
 * includes test.h. */
#ifndef SHARDSWAP_TESTS_SWAP_RIG_H
#define SHARDSWAP_TESTS_SWAP_RIG_H

#include <string.h>

#include "backend/device.h"
#include "engine/workers.h"
#include "swap/swap.h"
#include "test.h"

#define RIG_MAX_DEVICES 8

struct rig {
    struct device *devs[RIG_MAX_DEVICES];
    int n;
    struct swap_manager *mgr;
    struct workers *w;
    struct swap_model *model;
};

/* Registers the model at path (a directory or a GGUF file) as name, its
 * routed experts whole on the TP ranks when ep. Returns swap_register's
 * result (the rest is checked here). */
static inline int rig_open_placed(struct rig *g, const char *name, const char *path, int tp, int pp,
                                  bool ep)
{
    memset(g, 0, sizeof(*g));
    int placement[RIG_MAX_DEVICES];
    g->n = tp * pp;
    for (int i = 0; i < g->n; i++) {
        CHECK(device_open_cpu(i, 64u << 20, &g->devs[i]) == 0);
        placement[i] = i;
    }
    struct swap_config cfg = {.host_budget = 256u << 20};
    CHECK(swap_manager_create(g->devs, g->n, &cfg, &g->mgr) == 0);
    CHECK(workers_create(g->mgr, &g->w) == 0);
    struct placement pl = {.tp = tp, .pp = pp, .devices = placement, .expert_parallel = ep};
    return swap_register(g->mgr, name, path, &pl, false, &g->model);
}

static inline int rig_open(struct rig *g, const char *name, const char *path, int tp, int pp)
{
    return rig_open_placed(g, name, path, tp, pp, false);
}

/* Frees everything; every device's memory must be back. */
static inline void rig_close(struct rig *g)
{
    workers_destroy(g->w);
    swap_manager_destroy(g->mgr);
    for (int i = 0; i < g->n; i++) {
        CHECK(device_used(g->devs[i]) == 0);
        device_close(g->devs[i]);
    }
}

#endif
