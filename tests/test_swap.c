/* The swap engine: residency transitions, refusals that say why (bytes,
 * fragmentation, a model still moving) while the manager never makes a model
 * leave on its own, the explicit fragmentation step, the LRU helper for
 * callers without an engine, budgets, the disk tier, memory that returns
 * to where it started, and unregistration (refused while busy; host memory
 * and the checkpoint's mappings returned, cycle after cycle). Models are
 * small generated checkpoints (different seeds) on CPU devices; slowed links
 * (device_cpu_set_link) make transient states last long enough to be
 * checked exactly. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "engine/workers.h"
#include "model/random.h"
#include "swap/swap.h"
#include "test.h"
#include "tiny_opt.h"

#define N_MODELS 5
#define WIDE N_MODELS /* a model with a large first blob, registered where a test needs it */
#define SLOW_LINK 10e6 /* bytes/s: a load or copy back of one model lasts ~70 ms */
static char tmp[64];
static char dirs[N_MODELS + 1][128];

static void make_models(void)
{
    test_scratch_dir(tmp, sizeof(tmp), "swap");
    struct model_config *c = tiny_opt_config(4, 1000);
    for (int i = 0; i < N_MODELS; i++) {
        snprintf(dirs[i], sizeof(dirs[i]), "%s/m%d", tmp, i);
        mkdir(dirs[i], 0755);
        struct model_random_opts o = {.dtype = DTYPE_F16, .seed = 100 + (uint64_t)i};
        CHECK(model_random_write(c, dirs[i], &o) == 0);
    }
    model_config_free(c);
    /* one layer and a 10x vocabulary: its embeddings blob outweighs a small model */
    c = tiny_opt_config(1, 10000);
    snprintf(dirs[WIDE], sizeof(dirs[WIDE]), "%s/wide", tmp);
    mkdir(dirs[WIDE], 0755);
    struct model_random_opts o = {.dtype = DTYPE_F16, .seed = 99};
    CHECK(model_random_write(c, dirs[WIDE], &o) == 0);
    model_config_free(c);
}

struct rig {
    struct device *devs[2];
    struct swap_manager *mgr;
    struct workers *w;
    struct swap_model *m[N_MODELS + 1];
};

/* Two devices of dev_budget bytes; every model TP=2 over both; m[pinned]
 * pinned (-1: none); with wide, the wide model too, as m[WIDE]. */
static void rig_open_with(struct rig *r, uint64_t dev_budget, uint64_t host_budget, int pinned,
                          bool wide)
{
    memset(r, 0, sizeof(*r));
    for (int d = 0; d < 2; d++)
        CHECK(device_open_cpu(d, dev_budget, &r->devs[d]) == 0);
    struct swap_config cfg = {.host_budget = host_budget};
    CHECK(swap_manager_create(r->devs, 2, &cfg, &r->mgr) == 0);
    CHECK(workers_create(r->mgr, &r->w) == 0);
    static const int both[2] = {0, 1};
    struct placement pl = {.tp = 2, .pp = 1, .devices = both};
    for (int i = 0; i < N_MODELS + wide; i++) {
        char name[16];
        snprintf(name, sizeof(name), i == WIDE ? "wide" : "m%d", i);
        int rc = swap_register(r->mgr, name, dirs[i], &pl, i == pinned, &r->m[i]);
        CHECK_MSG(rc == 0, "register %s: %s", name, err_msg());
    }
}

static void rig_open(struct rig *r, uint64_t dev_budget, uint64_t host_budget)
{
    rig_open_with(r, dev_budget, host_budget, -1, false);
}

static void set_links(struct rig *r, double bytes_per_s)
{
    for (int d = 0; d < 2; d++)
        CHECK(device_cpu_set_link(r->devs[d], bytes_per_s) == 0);
}

static void stats(struct rig *r, struct swap_stats *st)
{
    swap_get_stats(r->mgr, st);
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

/* The model's logits for one prompt through the workers vs model_forward. */
static double check_output(struct rig *r, int i)
{
    const int32_t ids[5] = {2, 17, 400, 9, 123};
    struct model *ref;
    CHECK(model_open(dirs[i], &ref) == 0);
    const int V = ref->info->vocab;
    float *a = malloc((size_t)V * sizeof(float)), *b = malloc((size_t)V * sizeof(float));
    struct model_exec *kv;
    CHECK(model_exec_open_cpu(ref, &(struct model_exec_shape){.batch = 1, .max_len = 5, .max_rows = 5}, &kv) == 0);
    CHECK(model_forward(ref, kv, ids, NULL, 5, false, b) == 0);
    struct group_exec *gb;
    CHECK(swap_use_begin(r->mgr, r->m[i]) == 0);
    CHECK(group_exec_create(r->mgr, r->m[i],
                            &(struct model_exec_shape){.batch = 1, .max_len = 5, .max_rows = 5},
                            &gb) == 0);
    CHECK(group_forward(r->w, gb, ids, NULL, 5, false, true, a) == 0);
    swap_use_end(r->mgr, r->m[i]);
    double e = test_rel_err(a, b, (size_t)V);
    group_exec_free(gb);
    model_exec_free(kv);
    model_close(ref);
    free(a);
    free(b);
    return e;
}

/* The shared victim choice (sched/evict.h) on hand-made snapshots. */
TEST(evict_helpers)
{
    uint64_t b[4][2] = {{100, 0}, {100, 100}, {0, 100}, {100, 100}};
    struct evict_model m[4];
    for (int i = 0; i < 4; i++)
        m[i] = (struct evict_model){.evictable = true, .last_used = 10, .bytes = b[i]};
    m[1].last_used = 5;
    m[3].last_used = 5;
    CHECK(evict_lru(m, 4) == 1); /* oldest; of two equals the lower index */
    m[1].evictable = false;
    CHECK(evict_lru(m, 4) == 3);
    m[3].evictable = false;
    CHECK(evict_lru(m, 4) == 0);
    m[0].evictable = m[2].evictable = false;
    CHECK(evict_lru(m, 4) == -1);

    /* until it fits: 150 on device 1 where 60 are free; useful_only skips
     * model 0, which frees nothing there */
    for (int i = 0; i < 4; i++)
        m[i] = (struct evict_model){.evictable = true, .last_used = i, .bytes = b[i]};
    uint64_t need[2] = {0, 150};
    struct evict_room room = {.n_devices = 2, .free_bytes = {500, 60}, .resident = 4};
    int out[4];
    CHECK(evict_lru_until_fit(m, 4, need, &room, true, out, 4) == 1 && out[0] == 1);
    CHECK(!m[1].evictable && room.free_bytes[1] == 160 && room.resident == 3);
    /* without useful_only, plain recency takes model 0, then 1; 0 frees
     * nothing where the room lacked, so 1 alone makes it and 0 stays */
    for (int i = 0; i < 4; i++)
        m[i].evictable = true;
    room = (struct evict_room){.n_devices = 2, .free_bytes = {500, 60}, .resident = 4};
    CHECK(evict_lru_until_fit(m, 4, need, &room, false, out, 4) == 1 && out[0] == 1 && out[1] == 0);
    CHECK(m[0].evictable && !m[1].evictable && room.free_bytes[0] == 600 &&
          room.free_bytes[1] == 160 && room.resident == 3);
    /* victims in recency order 0 (50), 1 (100), 2 (120) for 160 where none
     * is free: 0 and 1 fall short, 2 makes it; 0 and 2 make room without 1,
     * which stays (the earlier choice is kept where either would do) */
    uint64_t c3[3][1] = {{50}, {100}, {120}};
    struct evict_model m3[3];
    for (int i = 0; i < 3; i++)
        m3[i] = (struct evict_model){.evictable = true, .last_used = i, .bytes = c3[i]};
    uint64_t need3[1] = {160};
    room = (struct evict_room){.n_devices = 1, .free_bytes = {0}, .resident = 3};
    CHECK(evict_lru_until_fit(m3, 3, need3, &room, false, out, 3) == 2 && out[0] == 0 &&
          out[1] == 2 && out[2] == 1);
    CHECK(m3[1].evictable && !m3[0].evictable && room.free_bytes[0] == 170 && room.resident == 1);
    /* a count limit: 3 resident of at most 3, bytes fit: one goes */
    for (int i = 0; i < 4; i++)
        m[i].evictable = true;
    room = (struct evict_room){.n_devices = 2, .free_bytes = {500, 500}, .resident = 3,
                               .max_resident = 3};
    CHECK(evict_lru_until_fit(m, 4, need, &room, true, out, 4) == 1 && out[0] == 0);
    /* nothing may go, or too few victims allowed: ERR_BUSY */
    for (int i = 0; i < 4; i++)
        m[i].evictable = false;
    room = (struct evict_room){.n_devices = 2, .free_bytes = {500, 60}, .resident = 4};
    CHECK(evict_lru_until_fit(m, 4, need, &room, true, out, 4) == ERR_BUSY);
    for (int i = 0; i < 4; i++)
        m[i].evictable = true;
    need[1] = 300;
    CHECK(evict_lru_until_fit(m, 4, need, &room, true, out, 1) == ERR_BUSY);
}

TEST(transitions)
{
    struct rig r;
    rig_open(&r, 8u << 20, 64u << 20);
    struct swap_model *m = r.m[0];
    CHECK(swap_residency(r.mgr, m) == RES_ON_DISK);
    CHECK(swap_prefetch_host(r.mgr, m) == 0);
    CHECK(swap_residency(r.mgr, m) == RES_IN_HOST);
    set_links(&r, SLOW_LINK); /* the load surely lasts past the next check */
    CHECK(swap_load(r.mgr, m, NULL) == 0);
    CHECK(swap_residency(r.mgr, m) == RES_LOADING);
    CHECK(swap_wait_loaded(r.mgr, m) == 0);
    CHECK(swap_residency(r.mgr, m) == RES_ON_DEVICE);
    set_links(&r, 0);
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
     * deferred to its end */
    set_links(&r, SLOW_LINK);
    CHECK(swap_load(r.mgr, m, NULL) == 0);
    CHECK(swap_residency(r.mgr, m) == RES_LOADING);
    CHECK(swap_offload(r.mgr, m, false) == ERR_BUSY);
    CHECK(strstr(err_msg(), "still loading") != NULL);
    CHECK(swap_wait_loaded(r.mgr, m) == 0);
    CHECK(swap_offload(r.mgr, m, false) == 0);
    CHECK(swap_residency(r.mgr, m) == RES_IN_HOST);
    CHECK(swap_load(r.mgr, m, NULL) == 0);
    CHECK(swap_residency(r.mgr, m) == RES_LOADING);
    CHECK(swap_offload(r.mgr, m, true) == 0); /* deferred: the load ends first */
    CHECK(swap_residency(r.mgr, m) == RES_LOADING);
    CHECK(swap_wait_loaded(r.mgr, m) == 0);
    swap_wait_idle(r.mgr, m);
    CHECK(swap_residency(r.mgr, m) == RES_IN_HOST);
    set_links(&r, 0);
    CHECK(swap_use_begin(r.mgr, m) == ERR_INVALID); /* not loaded */
    CHECK(budgets_kept(&r));
    rig_close(&r);
}

/* Room for two models: swap_load refuses a third, naming the device and the
 * bytes, and moves nothing; swap_load_lru makes room by least recent use. */
TEST(refusal_and_lru)
{
    struct rig probe;
    rig_open(&probe, 64u << 20, 64u << 20);
    uint64_t per = swap_model_device_bytes(probe.m[0], 0);
    rig_close(&probe);

    struct rig r;
    uint64_t budget = per * 2 + per / 2;
    rig_open(&r, budget, 64u << 20);
    for (int i = 0; i < 2; i++) {
        CHECK(swap_load(r.mgr, r.m[i], NULL) == 0);
        CHECK(swap_wait_loaded(r.mgr, r.m[i]) == 0);
    }
    struct swap_stats before, after;
    stats(&r, &before);
    struct swap_room why;
    CHECK(swap_load(r.mgr, r.m[2], &why) == ERR_BUSY);
    CHECK_MSG(strstr(err_msg(), "model m2 does not fit device cpu:0 now") &&
                  strstr(err_msg(), "offload a model from cpu:0"), "%s", err_msg());
    CHECK(why.kind == SWAP_ROOM_BYTES && why.device == 0 && why.need == per &&
          why.free == budget - 2 * per && why.largest == why.free && why.leaving == 0);
    /* the manager never evicts on its own: both residents stay, nothing moved */
    stats(&r, &after);
    CHECK(after.loads == before.loads && after.offloads == before.offloads &&
          after.evictions == 0 && after.compactions == 0);
    CHECK(swap_residency(r.mgr, r.m[0]) == RES_ON_DEVICE &&
          swap_residency(r.mgr, r.m[1]) == RES_ON_DEVICE);
    CHECK(swap_residency(r.mgr, r.m[2]) == RES_ON_DISK);

    /* swap_load_lru: the least recently used one goes (m1: m0 was used since) */
    CHECK(swap_use_begin(r.mgr, r.m[0]) == 0);
    swap_use_end(r.mgr, r.m[0]);
    CHECK(swap_load_lru(r.mgr, r.m[2]) == 0);
    CHECK(swap_wait_loaded(r.mgr, r.m[2]) == 0);
    CHECK(swap_residency(r.mgr, r.m[1]) == RES_IN_HOST);
    CHECK(swap_residency(r.mgr, r.m[0]) == RES_ON_DEVICE);
    stats(&r, &after);
    CHECK(after.evictions == 1);
    /* never a model with work in flight: both residents busy -> ERR_BUSY, nothing moves */
    CHECK(swap_use_begin(r.mgr, r.m[0]) == 0);
    CHECK(swap_use_begin(r.mgr, r.m[2]) == 0);
    CHECK(swap_load_lru(r.mgr, r.m[3]) == ERR_BUSY);
    CHECK_MSG(strstr(err_msg(), "no model may leave") && strstr(err_msg(), "cpu:0"), "%s",
              err_msg());
    CHECK(swap_residency(r.mgr, r.m[0]) == RES_ON_DEVICE &&
          swap_residency(r.mgr, r.m[2]) == RES_ON_DEVICE);
    swap_use_end(r.mgr, r.m[2]);
    CHECK(swap_load_lru(r.mgr, r.m[3]) == 0); /* m2 is idle now, m0 still busy */
    CHECK(swap_wait_loaded(r.mgr, r.m[3]) == 0);
    CHECK(swap_residency(r.mgr, r.m[2]) == RES_IN_HOST);
    CHECK(swap_residency(r.mgr, r.m[0]) == RES_ON_DEVICE);
    swap_use_end(r.mgr, r.m[0]);
    CHECK(check_output(&r, 3) <= 1e-5);
    stats(&r, &after);
    CHECK(after.evictions == 2 && after.compactions == 0);
    CHECK(budgets_kept(&r));
    rig_close(&r);
}

/* swap_load_lru with room for about two models per device; the pinned one
 * never goes, every other load evicts exactly one. */
TEST(lru_pinned)
{
    struct rig probe;
    rig_open(&probe, 64u << 20, 64u << 20);
    uint64_t per = swap_model_device_bytes(probe.m[0], 0);
    rig_close(&probe);

    struct rig r;
    rig_open_with(&r, per * 2 + per / 2, 64u << 20, 0, false);
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < N_MODELS; i++) {
            CHECK(swap_load_lru(r.mgr, r.m[i]) == 0);
            CHECK(swap_wait_loaded(r.mgr, r.m[i]) == 0);
            CHECK(swap_residency(r.mgr, r.m[0]) == RES_ON_DEVICE); /* pinned stays */
            CHECK(swap_residency(r.mgr, r.m[i]) == RES_ON_DEVICE);
            CHECK(budgets_kept(&r));
        }
    CHECK(check_output(&r, 0) <= 1e-5 && check_output(&r, 4) <= 1e-5);
    /* round 0: m2, m3, m4 each evict one; rounds 1, 2: m1..m4 each evict one
     * (m0 stays loaded) */
    struct swap_stats st;
    stats(&r, &st);
    CHECK_MSG(st.evictions == 11 && st.loads == 13 && st.offloads == 11,
              "evictions %llu loads %llu offloads %llu", (unsigned long long)st.evictions,
              (unsigned long long)st.loads, (unsigned long long)st.offloads);
    /* m0 (pinned) and m4 are resident: m4 is the only one that may go */
    CHECK(swap_use_begin(r.mgr, r.m[4]) == 0);
    CHECK(swap_load_lru(r.mgr, r.m[1]) == ERR_BUSY);
    swap_use_end(r.mgr, r.m[4]);
    CHECK(swap_load_lru(r.mgr, r.m[1]) == 0 && swap_wait_loaded(r.mgr, r.m[1]) == 0);
    CHECK(swap_residency(r.mgr, r.m[4]) == RES_IN_HOST);
    CHECK(check_output(&r, 1) <= 1e-5 && budgets_kept(&r));
    rig_close(&r);
}

/* Devices of five small models' bytes (by device 0's shard) hold four,
 * m0..m3, in address order; m0 and m2 leave: three free holes, none large
 * enough for the wide model's first blob (on device 0 each is one small
 * model's shard exactly). */
static void fragment(struct rig *r, uint64_t *per, uint64_t *wide, uint64_t *wide_blob)
{
    struct rig probe;
    rig_open_with(&probe, 64u << 20, 64u << 20, -1, true);
    *per = swap_model_device_bytes(probe.m[0], 0);
    *wide = swap_model_device_bytes(probe.m[WIDE], 0);
    *wide_blob = 0;
    const struct swap_shard *sh = swap_model_shard(probe.m[WIDE], 0);
    for (int b = 0; b < swap_shard_n_blobs(sh); b++)
        if (swap_shard_blob_bytes(sh, b) > *wide_blob)
            *wide_blob = swap_shard_blob_bytes(sh, b);
    rig_close(&probe);
    /* the wide model's bytes fit three holes, its first blob no single one */
    CHECK_MSG(*wide <= 3 * *per && *wide_blob > *per, "wide %llu (blob %llu), small %llu",
              (unsigned long long)*wide, (unsigned long long)*wide_blob,
              (unsigned long long)*per);
    rig_open_with(r, 5 * *per, 64u << 20, -1, true);
    for (int i = 0; i < 4; i++) {
        CHECK(swap_load(r->mgr, r->m[i], NULL) == 0);
        CHECK(swap_wait_loaded(r->mgr, r->m[i]) == 0);
    }
    CHECK(swap_offload(r->mgr, r->m[0], false) == 0 && swap_offload(r->mgr, r->m[2], false) == 0);
    CHECK(device_free_blocks(r->devs[0]) == 3 && device_largest_free(r->devs[0]) == *per);
    CHECK(device_free_blocks(r->devs[1]) == 3 && device_largest_free(r->devs[1]) < *wide_blob);
}

/* Free bytes in pieces: the refusal says so, nothing leaves until the caller
 * takes the explicit step (swap_compact), which then lets the load through. */
TEST(fragmentation)
{
    struct rig r;
    uint64_t per, wide, blob;
    fragment(&r, &per, &wide, &blob);
    struct swap_stats before, after;
    stats(&r, &before);
    struct swap_room why;
    CHECK(swap_load(r.mgr, r.m[WIDE], &why) == ERR_BUSY);
    CHECK_MSG(strstr(err_msg(), "model wide does not fit device cpu:0 now") &&
                  strstr(err_msg(), "fragmented") && strstr(err_msg(), "swap_compact"), "%s",
              err_msg());
    CHECK(why.kind == SWAP_ROOM_FRAGMENTED && why.device == 0 && why.need == wide &&
          why.free == 3 * per && why.largest == per && why.blob == blob && why.leaving == 0);
    stats(&r, &after);
    CHECK(after.offloads == before.offloads && after.loads == before.loads &&
          after.compactions == 0);
    CHECK(swap_residency(r.mgr, r.m[1]) == RES_ON_DEVICE &&
          swap_residency(r.mgr, r.m[3]) == RES_ON_DEVICE);
    CHECK(swap_residency(r.mgr, r.m[WIDE]) == RES_ON_DISK);
    /* the step refuses what cannot help: no shard there, not resident, busy */
    CHECK(swap_compact(r.mgr, 0, r.m[0]) == ERR_INVALID);
    CHECK(swap_use_begin(r.mgr, r.m[1]) == 0);
    CHECK(swap_compact(r.mgr, 0, r.m[1]) == ERR_BUSY);
    swap_use_end(r.mgr, r.m[1]);
    /* m1 leaves: its block and the holes of m0 and m2 around it become one */
    CHECK(swap_compact(r.mgr, 0, r.m[1]) == 0);
    stats(&r, &after);
    CHECK(after.compactions == 1 && after.evictions == 0);
    CHECK(swap_residency(r.mgr, r.m[1]) == RES_IN_HOST);
    CHECK(device_largest_free(r.devs[0]) == 3 * per);
    CHECK(swap_load(r.mgr, r.m[WIDE], &why) == 0 && why.kind == SWAP_ROOM_OK);
    CHECK(swap_wait_loaded(r.mgr, r.m[WIDE]) == 0);
    CHECK(check_output(&r, WIDE) <= 1e-5);
    CHECK(swap_residency(r.mgr, r.m[3]) == RES_ON_DEVICE);
    CHECK(budgets_kept(&r));
    rig_close(&r);

    /* swap_load_lru takes the same step by itself: the least recently used
     * small model goes (m1), m3 stays */
    fragment(&r, &per, &wide, &blob);
    CHECK(swap_load_lru(r.mgr, r.m[WIDE]) == 0);
    CHECK(swap_wait_loaded(r.mgr, r.m[WIDE]) == 0);
    stats(&r, &after);
    CHECK(after.compactions == 1 && after.evictions == 0);
    CHECK(swap_residency(r.mgr, r.m[1]) == RES_IN_HOST &&
          swap_residency(r.mgr, r.m[3]) == RES_ON_DEVICE);
    CHECK(check_output(&r, WIDE) <= 1e-5);
    rig_close(&r);
}

/* A host budget for 2.5 models: the disk tier takes the rest, host copies of
 * idle models go least recently used first, and an offload copies back when
 * the host has room (a load of the model meanwhile is refused, not waited
 * for), else drops to disk. */
TEST(disk_tier)
{
    struct rig probe;
    rig_open(&probe, 64u << 20, 64u << 20);
    uint64_t host = swap_model_total_bytes(probe.m[0]);
    rig_close(&probe);

    struct rig r;
    rig_open(&r, 64u << 20, host * 2 + host / 2);
    for (int i = 0; i < 3; i++) {
        CHECK(swap_load(r.mgr, r.m[i], NULL) == 0);
        CHECK(swap_wait_loaded(r.mgr, r.m[i]) == 0);
        CHECK(budgets_kept(&r));
    }
    /* m0's host copy went for m2's: all three are on their devices */
    for (int i = 0; i < 3; i++)
        CHECK(swap_residency(r.mgr, r.m[i]) == RES_ON_DEVICE);
    struct swap_stats st;
    stats(&r, &st);
    CHECK(st.host_used == 2 * host);
    /* offloading m0 copies it back (m1's host copy, the least recently used,
     * makes room); meanwhile a load of m0 is refused, saying why */
    set_links(&r, SLOW_LINK);
    CHECK(swap_offload(r.mgr, r.m[0], false) == 0);
    CHECK(swap_residency(r.mgr, r.m[0]) == RES_OFFLOADING);
    struct swap_room why;
    CHECK(swap_load(r.mgr, r.m[0], &why) == ERR_BUSY && why.kind == SWAP_ROOM_MOVING);
    CHECK_MSG(strstr(err_msg(), "model m0 is still offloading"), "%s", err_msg());
    swap_wait_idle(r.mgr, r.m[0]);
    set_links(&r, 0);
    CHECK(swap_residency(r.mgr, r.m[0]) == RES_IN_HOST);
    CHECK(swap_load(r.mgr, r.m[0], NULL) == 0);
    CHECK(swap_wait_loaded(r.mgr, r.m[0]) == 0);
    CHECK(check_output(&r, 0) <= 1e-5); /* the bytes that came back are the right ones */
    CHECK(budgets_kept(&r));
    rig_close(&r);

    /* 1.5 models of host: m1 loading holds the only host copy, so an offload
     * of m0 (whose host copy went for m1's) drops it to disk */
    rig_open(&r, 64u << 20, host + host / 2);
    CHECK(swap_load(r.mgr, r.m[0], NULL) == 0 && swap_wait_loaded(r.mgr, r.m[0]) == 0);
    set_links(&r, SLOW_LINK);
    CHECK(swap_load(r.mgr, r.m[1], NULL) == 0);
    CHECK(swap_residency(r.mgr, r.m[1]) == RES_LOADING);
    CHECK(swap_offload(r.mgr, r.m[0], false) == 0);
    CHECK(swap_residency(r.mgr, r.m[0]) == RES_ON_DISK);
    CHECK(swap_wait_loaded(r.mgr, r.m[1]) == 0);
    set_links(&r, 0);
    CHECK(swap_load(r.mgr, r.m[0], NULL) == 0 && swap_wait_loaded(r.mgr, r.m[0]) == 0);
    CHECK(check_output(&r, 0) <= 1e-5); /* read from disk again */
    CHECK(budgets_kept(&r));
    rig_close(&r);
}
/* Too large: refused at registration with the numbers. */
TEST(too_large)
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
TEST(cycles)
{
    struct rig r;
    rig_open(&r, 8u << 20, 64u << 20);
    for (int i = 0; i < 100; i++) {
        struct swap_model *m = r.m[i % N_MODELS];
        CHECK(swap_load(r.mgr, m, NULL) == 0);
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

/* Lines of /proc/self/maps naming a file in dir: its checkpoint's mappings. */
static int maps_of(const char *dir)
{
    char want[160], line[4096];
    snprintf(want, sizeof(want), "%s/", dir);
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL);
    int n = 0;
    while (f && fgets(line, sizeof(line), f))
        n += strstr(line, want) != NULL;
    if (f)
        fclose(f);
    return n;
}

/* swap_unregister: refused while the model is in use or loading; otherwise
 * it leaves its devices (resident: without a copy back), its host copy
 * returns to the budget and its checkpoint is unmapped, 50 register / load /
 * offload / unregister cycles over without growth; a model registered after
 * one that leaves keeps its own bytes (the ids behind it move down). */
TEST(unregister)
{
    struct rig r;
    rig_open(&r, 8u << 20, 64u << 20);
    static const int both[2] = {0, 1};
    struct placement pl = {.tp = 2, .pp = 1, .devices = both};
    const int mapped = maps_of(dirs[0]);
    CHECK_MSG(mapped >= 1, "%s: no mapping seen in /proc/self/maps", dirs[0]);
    /* busy: in use, then loading; the model stays usable */
    struct swap_model *m = r.m[0];
    CHECK(swap_load(r.mgr, m, NULL) == 0 && swap_wait_loaded(r.mgr, m) == 0);
    CHECK(swap_use_begin(r.mgr, m) == 0);
    CHECK(swap_unregister(r.mgr, m) == ERR_BUSY);
    CHECK_MSG(strstr(err_msg(), "model m0 cannot be unregistered now: it has work in flight"),
              "%s", err_msg());
    swap_use_end(r.mgr, m);
    CHECK(swap_offload(r.mgr, m, false) == 0);
    set_links(&r, SLOW_LINK);
    CHECK(swap_load(r.mgr, m, NULL) == 0 && swap_residency(r.mgr, m) == RES_LOADING);
    CHECK(swap_unregister(r.mgr, m) == ERR_BUSY);
    CHECK_MSG(strstr(err_msg(), "model m0 cannot be unregistered now: it is still loading"),
              "%s", err_msg());
    CHECK(swap_wait_loaded(r.mgr, m) == 0);
    set_links(&r, 0);
    CHECK(check_output(&r, 0) <= 1e-5);
    CHECK(maps_of(dirs[0]) == mapped);
    for (int i = 0; i < 50; i++) {
        if (i > 0) {
            CHECK(swap_register(r.mgr, "m0", dirs[0], &pl, false, &r.m[0]) == 0);
            CHECK(maps_of(dirs[0]) == mapped);
            CHECK(swap_load(r.mgr, r.m[0], NULL) == 0 && swap_wait_loaded(r.mgr, r.m[0]) == 0);
        }
        if (i % 10 == 9)
            CHECK(check_output(&r, 0) <= 1e-5);
        struct swap_stats before, st;
        swap_get_stats(r.mgr, &before);
        CHECK(before.host_used == swap_model_total_bytes(r.m[0]));
        if (i % 2 == 0) { /* offloaded first: it leaves from the host tier */
            CHECK(swap_offload(r.mgr, r.m[0], false) == 0);
            CHECK(swap_residency(r.mgr, r.m[0]) == RES_IN_HOST);
        } /* else it leaves from its devices */
        CHECK_MSG(swap_unregister(r.mgr, r.m[0]) == 0, "cycle %d: %s", i, err_msg());
        r.m[0] = NULL;
        swap_get_stats(r.mgr, &st);
        CHECK_MSG(st.host_used == 0 && st.offloads == before.offloads + 1,
                  "cycle %d: host %llu in use, %llu offloads (%llu before)", i,
                  (unsigned long long)st.host_used, (unsigned long long)st.offloads,
                  (unsigned long long)before.offloads);
        CHECK(device_used(r.devs[0]) == 0 && device_used(r.devs[1]) == 0);
        CHECK_MSG(maps_of(dirs[0]) == 0, "cycle %d: %d mappings of %s left", i, maps_of(dirs[0]),
                  dirs[0]);
    }
    /* "solo" (dirs[2], TP=1 on device 1) registered after m4, then m2 leaves
     * from before it: refusals still quote solo's own bytes */
    static const int dev1[1] = {1};
    struct placement one = {.tp = 1, .pp = 1, .devices = dev1};
    struct swap_model *solo = NULL;
    CHECK(swap_register(r.mgr, "solo", dirs[2], &one, false, &solo) == 0);
    CHECK(swap_unregister(r.mgr, r.m[2]) == 0);
    r.m[2] = solo;
    const uint64_t need = swap_model_device_bytes(solo, 1);
    CHECK(swap_model_device_bytes(solo, 0) == 0 && need != swap_model_device_bytes(r.m[4], 1));
    struct dbuf *ballast = NULL;
    uint64_t free1 = device_budget(r.devs[1]) - device_used(r.devs[1]);
    CHECK(device_alloc(r.devs[1], free1 - need + 4096, &ballast) == 0);
    struct swap_room why;
    CHECK(swap_load(r.mgr, solo, &why) == ERR_BUSY);
    CHECK_MSG(why.kind == SWAP_ROOM_BYTES && why.device == 1 && why.need == need,
              "kind %d on device %d, need %llu (solo has %llu)", why.kind, why.device,
              (unsigned long long)why.need, (unsigned long long)need);
    device_free(ballast);
    CHECK(swap_load(r.mgr, solo, NULL) == 0 && swap_wait_loaded(r.mgr, solo) == 0);
    CHECK(check_output(&r, 2) <= 1e-5);
    CHECK(budgets_kept(&r));
    rig_close(&r);
}

static void setup(void)
{
    make_models();
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
