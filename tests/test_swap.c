/* The swap engine: residency transitions, eviction policies, budgets, the
 * disk tier, and memory that returns to where it started. Models are small
 * generated checkpoints (different seeds) on CPU devices. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "engine/workers.h"
#include "model/opt_random.h"
#include "swap/swap.h"
#include "test.h"
#include "tiny_opt.h"

#define N_MODELS 5
static char tmp[] = "/tmp/shardswap_swap_XXXXXX";
static char dirs[N_MODELS][128];

static void make_models(void)
{
    CHECK(mkdtemp(tmp) != NULL);
    struct opt_config c;
    tiny_opt_config(&c, 4, 1000);
    for (int i = 0; i < N_MODELS; i++) {
        snprintf(dirs[i], sizeof(dirs[i]), "%s/m%d", tmp, i);
        mkdir(dirs[i], 0755);
        struct opt_random_opts o = {.dtype = DTYPE_F16, .seed = 100 + (uint64_t)i};
        CHECK(opt_random_write(&c, dirs[i], &o) == 0);
    }
}

struct rig {
    struct device *devs[2];
    struct swap_manager *mgr;
    struct workers *w;
    struct swap_model *m[N_MODELS];
};

/* Two devices of dev_budget bytes; every model TP=2 over both. */
static void rig_open(struct rig *r, uint64_t dev_budget, uint64_t host_budget,
                     const char *policy, int max_loaded)
{
    memset(r, 0, sizeof(*r));
    for (int d = 0; d < 2; d++)
        CHECK(device_open_cpu(d, dev_budget, &r->devs[d]) == 0);
    struct swap_config cfg = {.host_budget = host_budget, .policy = policy,
                              .max_loaded = max_loaded};
    CHECK(swap_manager_create(r->devs, 2, &cfg, &r->mgr) == 0);
    CHECK(workers_create(r->mgr, &r->w) == 0);
    static const int both[2] = {0, 1};
    struct placement pl = {.tp = 2, .pp = 1, .devices = both};
    for (int i = 0; i < N_MODELS; i++) {
        char name[16];
        snprintf(name, sizeof(name), "m%d", i);
        int rc = swap_register(r->mgr, name, dirs[i], &pl, false, &r->m[i]);
        CHECK_MSG(rc == 0, "register %s: %s", name, err_msg());
    }
}

static void rig_close(struct rig *r)
{
    workers_destroy(r->w);
    swap_manager_destroy(r->mgr);
    for (int d = 0; d < 2; d++) {
        CHECK(device_used(r->devs[d]) == 0);
        device_close(r->devs[d]);
    }
}

static bool budgets_kept(struct rig *r)
{
    struct swap_stats st;
    swap_get_stats(r->mgr, &st);
    bool ok = st.host_high_water <= st.host_budget && st.host_used <= st.host_budget;
    for (int d = 0; d < 2; d++)
        ok = ok && device_high_water(r->devs[d]) <= device_budget(r->devs[d]);
    return ok;
}

/* The model's logits for one prompt through the workers vs opt_forward. */
static double check_output(struct rig *r, int i)
{
    const int32_t ids[5] = {2, 17, 400, 9, 123};
    struct opt_model *ref;
    CHECK(opt_model_open(dirs[i], &ref) == 0);
    const int V = ref->cfg.vocab;
    float *a = malloc((size_t)V * sizeof(float)), *b = malloc((size_t)V * sizeof(float));
    struct opt_exec *kv;
    CHECK(opt_exec_open_cpu(ref, &(struct opt_exec_shape){.batch = 1, .max_len = 5, .max_rows = 5}, &kv) == 0);
    CHECK(opt_forward(ref, kv, ids, NULL, 5, false, b) == 0);
    struct group_batch *gb;
    CHECK(swap_use_begin(r->mgr, r->m[i]) == 0);
    CHECK(group_batch_create(r->mgr, r->m[i], &(struct opt_exec_shape){.batch = 1, .max_len = 5, .max_rows = 5}, &gb) == 0);
    CHECK(group_forward(r->w, gb, ids, NULL, 5, false, true, a) == 0);
    swap_use_end(r->mgr, r->m[i]);
    double e = test_rel_err(a, b, (size_t)V);
    group_batch_free(gb);
    opt_exec_free(kv);
    opt_model_close(ref);
    free(a);
    free(b);
    return e;
}

static void test_transitions(void)
{
    struct rig r;
    rig_open(&r, 8u << 20, 64u << 20, "lru-bytes", 0);
    struct swap_model *m = r.m[0];
    CHECK(swap_residency(r.mgr, m) == RES_ON_DISK);
    CHECK(swap_prefetch_host(r.mgr, m) == 0);
    CHECK(swap_residency(r.mgr, m) == RES_IN_HOST);
    CHECK(swap_load(r.mgr, m) == 0);
    enum residency st = swap_residency(r.mgr, m);
    CHECK(st == RES_LOADING || st == RES_ON_DEVICE);
    CHECK(swap_wait_loaded(r.mgr, m) == 0);
    CHECK(swap_residency(r.mgr, m) == RES_ON_DEVICE);
    CHECK(check_output(&r, 0) <= 1e-5);
    /* work in flight: an offload is refused, or deferred to its end */
    CHECK(swap_use_begin(r.mgr, m) == 0);
    CHECK(swap_offload(r.mgr, m, false) == ERR_BUSY);
    CHECK(strstr(err_msg(), "work in flight") != NULL);
    CHECK(swap_offload(r.mgr, m, true) == 0);
    CHECK(swap_residency(r.mgr, m) == RES_ON_DEVICE);
    swap_use_end(r.mgr, m);
    swap_wait_idle(r.mgr, m);
    CHECK(swap_residency(r.mgr, m) == RES_IN_HOST);
    CHECK(device_used(r.devs[0]) == 0 && device_used(r.devs[1]) == 0);
    /* a load that meets an offload request: refused while loading, or
     * deferred to its end (links held to 20 MB/s so the load surely lasts) */
    for (int d = 0; d < 2; d++)
        CHECK(device_cpu_set_link(r.devs[d], 20e6) == 0);
    CHECK(swap_load(r.mgr, m) == 0);
    CHECK(swap_residency(r.mgr, m) == RES_LOADING);
    CHECK(swap_offload(r.mgr, m, false) == ERR_BUSY);
    CHECK(strstr(err_msg(), "still loading") != NULL);
    CHECK(swap_wait_loaded(r.mgr, m) == 0);
    CHECK(swap_offload(r.mgr, m, false) == 0);
    CHECK(swap_residency(r.mgr, m) == RES_IN_HOST);
    CHECK(swap_load(r.mgr, m) == 0);
    CHECK(swap_residency(r.mgr, m) == RES_LOADING);
    CHECK(swap_offload(r.mgr, m, true) == 0); /* deferred: the load ends first */
    CHECK(swap_wait_loaded(r.mgr, m) == 0);
    swap_wait_idle(r.mgr, m);
    CHECK(swap_residency(r.mgr, m) == RES_IN_HOST);
    for (int d = 0; d < 2; d++)
        CHECK(device_cpu_set_link(r.devs[d], 0) == 0);
    CHECK(swap_use_begin(r.mgr, m) == ERR_INVALID); /* not loaded */
    CHECK(budgets_kept(&r));
    rig_close(&r);
}

/* lru-count with max_loaded 2: the third load evicts the least recently used. */
static void test_lru_count(void)
{
    struct rig r;
    rig_open(&r, 8u << 20, 64u << 20, "lru-count", 2);
    for (int i = 0; i < 2; i++) {
        CHECK(swap_load(r.mgr, r.m[i]) == 0);
        CHECK(swap_wait_loaded(r.mgr, r.m[i]) == 0);
    }
    CHECK(swap_use_begin(r.mgr, r.m[0]) == 0); /* m0 used last, and busy */
    swap_use_end(r.mgr, r.m[0]);
    CHECK(swap_load(r.mgr, r.m[2]) == 0);
    CHECK(swap_wait_loaded(r.mgr, r.m[2]) == 0);
    CHECK(swap_residency(r.mgr, r.m[1]) == RES_IN_HOST); /* the LRU one went */
    CHECK(swap_residency(r.mgr, r.m[0]) == RES_ON_DEVICE);
    /* never evict a model with a batch in flight: both residents busy -> ERR_BUSY */
    CHECK(swap_use_begin(r.mgr, r.m[0]) == 0);
    CHECK(swap_use_begin(r.mgr, r.m[2]) == 0);
    CHECK(swap_load(r.mgr, r.m[3]) == ERR_BUSY);
    CHECK(strstr(err_msg(), "cannot make room for model m3") != NULL);
    swap_use_end(r.mgr, r.m[2]);
    CHECK(swap_load(r.mgr, r.m[3]) == 0); /* m2 is idle now, m0 still busy */
    CHECK(swap_wait_loaded(r.mgr, r.m[3]) == 0);
    CHECK(swap_residency(r.mgr, r.m[2]) == RES_IN_HOST);
    CHECK(swap_residency(r.mgr, r.m[0]) == RES_ON_DEVICE);
    swap_use_end(r.mgr, r.m[0]);
    CHECK(check_output(&r, 3) <= 1e-5);
    CHECK(budgets_kept(&r));
    rig_close(&r);
}

/* lru-bytes with room for about two models per device; pinned never goes. */
static void test_lru_bytes_and_pinned(void)
{
    /* probe one model's bytes per device */
    struct rig probe;
    rig_open(&probe, 64u << 20, 64u << 20, "lru-bytes", 0);
    uint64_t per = swap_model_device_bytes(probe.m[0], 0);
    rig_close(&probe);

    struct rig r;
    rig_open(&r, per * 2 + per / 2, 64u << 20, "lru-bytes", 0);
    swap_manager_destroy(r.mgr); /* re-register with m0 pinned */
    workers_destroy(r.w);
    struct swap_config cfg = {.host_budget = 64u << 20, .policy = "lru-bytes"};
    CHECK(swap_manager_create(r.devs, 2, &cfg, &r.mgr) == 0);
    CHECK(workers_create(r.mgr, &r.w) == 0);
    static const int both[2] = {0, 1};
    struct placement pl = {.tp = 2, .pp = 1, .devices = both};
    for (int i = 0; i < N_MODELS; i++) {
        char name[16];
        snprintf(name, sizeof(name), "m%d", i);
        CHECK(swap_register(r.mgr, name, dirs[i], &pl, i == 0, &r.m[i]) == 0);
    }
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < N_MODELS; i++) {
            CHECK(swap_load(r.mgr, r.m[i]) == 0);
            CHECK(swap_wait_loaded(r.mgr, r.m[i]) == 0);
            CHECK(swap_residency(r.mgr, r.m[0]) == RES_ON_DEVICE); /* pinned stays */
            CHECK(budgets_kept(&r));
        }
    CHECK(check_output(&r, 0) <= 1e-5 && check_output(&r, 4) <= 1e-5);
    struct swap_stats st;
    swap_get_stats(r.mgr, &st);
    CHECK(st.evictions >= 10);
    /* m0 (pinned) and m4 are resident, with no room for a third: a load
     * that may not evict is refused and moves nothing... */
    CHECK(swap_residency(r.mgr, r.m[4]) == RES_ON_DEVICE);
    CHECK(swap_load_no_evict(r.mgr, r.m[1]) == ERR_BUSY);
    CHECK(strstr(err_msg(), "does not fit") != NULL);
    struct swap_stats after;
    swap_get_stats(r.mgr, &after);
    CHECK(after.evictions == st.evictions && after.loads == st.loads);
    CHECK(swap_residency(r.mgr, r.m[4]) == RES_ON_DEVICE);
    enum residency m1 = swap_residency(r.mgr, r.m[1]);
    CHECK(m1 != RES_LOADING && m1 != RES_ON_DEVICE);
    /* ...and goes ahead once the caller has made room */
    CHECK(swap_offload(r.mgr, r.m[4], false) == 0);
    CHECK(swap_load_no_evict(r.mgr, r.m[1]) == 0 && swap_wait_loaded(r.mgr, r.m[1]) == 0);
    CHECK(check_output(&r, 1) <= 1e-5 && budgets_kept(&r));
    rig_close(&r);
}

/* A host budget for 2 models: the disk tier takes the rest, host copies of
 * resident models may go, and their offload copies back or drops to disk. */
static void test_disk_tier(void)
{
    struct rig probe;
    rig_open(&probe, 64u << 20, 64u << 20, "lru-bytes", 0);
    uint64_t host = swap_model_total_bytes(probe.m[0]);
    rig_close(&probe);

    struct rig r;
    rig_open(&r, 64u << 20, host * 2 + host / 2, "lru-bytes", 0);
    for (int i = 0; i < 3; i++) {
        CHECK(swap_load(r.mgr, r.m[i]) == 0);
        CHECK(swap_wait_loaded(r.mgr, r.m[i]) == 0);
        CHECK(budgets_kept(&r));
    }
    /* m0's host copy went for m2's: all three are on their devices */
    for (int i = 0; i < 3; i++)
        CHECK(swap_residency(r.mgr, r.m[i]) == RES_ON_DEVICE);
    /* offloading m0 copies it back when the host has room, else drops it to disk */
    CHECK(swap_offload(r.mgr, r.m[0], false) == 0);
    swap_wait_idle(r.mgr, r.m[0]);
    enum residency st0 = swap_residency(r.mgr, r.m[0]);
    CHECK(st0 == RES_IN_HOST || st0 == RES_ON_DISK);
    CHECK(swap_load(r.mgr, r.m[0]) == 0);
    CHECK(swap_wait_loaded(r.mgr, r.m[0]) == 0);
    CHECK(check_output(&r, 0) <= 1e-5); /* the bytes that came back are the right ones */
    CHECK(budgets_kept(&r));
    rig_close(&r);
}

/* Too large: refused at registration with the numbers. */
static void test_too_large(void)
{
    struct device *devs[2];
    for (int d = 0; d < 2; d++)
        CHECK(device_open_cpu(d, 100000, &devs[d]) == 0);
    struct swap_config cfg = {.host_budget = 64u << 20};
    struct swap_manager *mgr;
    CHECK(swap_manager_create(devs, 2, &cfg, &mgr) == 0);
    static const int both[2] = {0, 1};
    struct placement pl = {.tp = 2, .pp = 1, .devices = both};
    struct swap_model *m = NULL;
    CHECK(swap_register(mgr, "big", dirs[0], &pl, false, &m) == ERR_NOMEM && m == NULL);
    CHECK_MSG(strstr(err_msg(), "needs") && strstr(err_msg(), "budget is 100000"), "%s",
              err_msg());
    static const int same[2] = {0, 0};
    pl.devices = same;
    CHECK(swap_register(mgr, "twice", dirs[0], &pl, false, &m) == ERR_INVALID);
    swap_manager_destroy(mgr);
    for (int d = 0; d < 2; d++) {
        device_close(devs[d]);
        CHECK(device_open_cpu(d, 64u << 20, &devs[d]) == 0);
    }
    cfg.host_budget = 1000;
    CHECK(swap_manager_create(devs, 2, &cfg, &mgr) == 0);
    pl.devices = both;
    CHECK(swap_register(mgr, "big", dirs[0], &pl, false, &m) == ERR_NOMEM);
    CHECK(strstr(err_msg(), "host budget is 1000") != NULL);
    swap_manager_destroy(mgr);
    for (int d = 0; d < 2; d++)
        device_close(devs[d]);
}

/* 100 load/offload cycles over all models leave memory where it started. */
static void test_cycles(void)
{
    struct rig r;
    rig_open(&r, 8u << 20, 64u << 20, "lru-bytes", 0);
    for (int i = 0; i < 100; i++) {
        struct swap_model *m = r.m[i % N_MODELS];
        CHECK(swap_load(r.mgr, m) == 0);
        if (i % 3 == 0)
            CHECK(swap_wait_loaded(r.mgr, m) == 0);
        CHECK(swap_offload(r.mgr, m, true) == 0);
    }
    for (int i = 0; i < N_MODELS; i++)
        swap_wait_idle(r.mgr, r.m[i]);
    for (int d = 0; d < 2; d++)
        CHECK(device_used(r.devs[d]) == 0);
    CHECK(budgets_kept(&r));
    struct swap_stats st;
    swap_get_stats(r.mgr, &st);
    CHECK(st.loads == 100);
    rig_close(&r);
}

int main(void)
{
    make_models();
    test_transitions();
    test_lru_count();
    test_lru_bytes_and_pinned();
    test_disk_tier();
    test_too_large();
    test_cycles();
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
    CHECK(system(cmd) == 0);
    return test_finish();
}
