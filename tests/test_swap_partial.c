/* Partial residency in the swap manager (swap_trim): a trim frees exactly
 * the trailing layer blobs' device bytes (never blob 0), from the host tier
 * or after a copy back (or dropping to disk when the host has no room); the
 * model is PARTIAL and not servable; its reload copies only the missing
 * blobs (stats.bytes_h2d exact), needs room only for them, and leaves the
 * kept blobs' events complete; the logits after trim + reload are bitwise
 * those before the trim (the same devices, the same kernels) and within
 * 1e-5 of model_forward's; refusals (in use, in transition, not resident,
 * no shard there); offload and unregistration of a partial model; TP and PP
 * placements; swap_load_lru with a partial model as the victim. Models are
 * small generated checkpoints on CPU devices; a slowed link
 * (device_cpu_set_link) makes transient states last long enough to be
 * checked exactly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "engine/workers.h"
#include "model/random.h"
#include "swap/swap.h"
#include "test.h"
#include "tiny_opt.h"

#define N_MODELS 3
#define N_LAYERS 4
#define SLOW_LINK 10e6 /* bytes/s: a load or copy back of one model lasts ~70 ms */
static char tmp[] = "/tmp/shardswap_swap_partial_XXXXXX";
static char dirs[N_MODELS][128];

static void make_models(void)
{
    CHECK(mkdtemp(tmp) != NULL);
    struct model_config *c = tiny_opt_config(N_LAYERS, 1000);
    for (int i = 0; i < N_MODELS; i++) {
        snprintf(dirs[i], sizeof(dirs[i]), "%s/m%d", tmp, i);
        mkdir(dirs[i], 0755);
        struct model_random_opts o = {.dtype = DTYPE_F16, .seed = 300 + (uint64_t)i};
        CHECK(model_random_write(c, dirs[i], &o) == 0);
    }
    model_config_free(c);
}

enum layout { ONE, TP2, PP2 }; /* on device 0; TP=2 over both; PP=2, stage s on device s */

struct rig {
    struct device *devs[2];
    struct swap_manager *mgr;
    struct workers *w;
    struct swap_model *m[N_MODELS];
};

static void rig_open(struct rig *r, uint64_t dev_budget, uint64_t host_budget, enum layout lay)
{
    memset(r, 0, sizeof(*r));
    for (int d = 0; d < 2; d++)
        CHECK(device_open_cpu(d, dev_budget, &r->devs[d]) == 0);
    struct swap_config cfg = {.host_budget = host_budget};
    CHECK(swap_manager_create(r->devs, 2, &cfg, &r->mgr) == 0);
    CHECK(workers_create(r->mgr, &r->w) == 0);
    static const int both[2] = {0, 1};
    struct placement pl = {.tp = lay == TP2 ? 2 : 1, .pp = lay == PP2 ? 2 : 1, .devices = both};
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

/* The bytes of the rig's model 0, measured on a rig of its own (the tests
 * that copy back size their host tier around it). */
static uint64_t model0_bytes(void)
{
    struct rig probe;
    rig_open(&probe, 8u << 20, 64u << 20, ONE);
    const uint64_t bytes = swap_model_total_bytes(probe.m[0]);
    rig_close(&probe);
    return bytes;
}

static void set_link(struct rig *r, int d, double bytes_per_s)
{
    CHECK(device_cpu_set_link(r->devs[d], bytes_per_s) == 0);
}

static void load_wait(struct rig *r, int i)
{
    CHECK_MSG(swap_load(r->mgr, r->m[i], NULL) == 0, "load m%d: %s", i, err_msg());
    CHECK(swap_wait_loaded(r->mgr, r->m[i]) == 0);
}

static struct swap_stats stats_of(struct rig *r)
{
    struct swap_stats st;
    swap_get_stats(r->mgr, &st);
    return st;
}

/* The model's shard on device d (every layout here has at most one). */
static const struct swap_shard *shard_on(struct swap_model *m, int d)
{
    for (int s = 0; s < swap_model_shard_count(m); s++)
        if (swap_shard_device(swap_model_shard(m, s)) == d)
            return swap_model_shard(m, s);
    return NULL;
}

/* What device_used counts for blobs [from, to) of sh: each rounded to 64. */
static uint64_t blobs_device(const struct swap_shard *sh, int from, int to)
{
    uint64_t n = 0;
    for (int b = from; b < to; b++)
        n += (swap_shard_blob_bytes(sh, b) + 63) / 64 * 64;
    return n;
}

static uint64_t blobs_host(const struct swap_shard *sh, int from, int to)
{
    uint64_t n = 0;
    for (int b = from; b < to; b++)
        n += swap_shard_blob_bytes(sh, b);
    return n;
}

/* Blobs of sh whose events are complete: b < k are, b >= k are not. */
static bool events_kept(const struct swap_shard *sh, int k)
{
    for (int b = 0; b < swap_shard_n_blobs(sh); b++)
        if (device_event_done(swap_shard_blob_ready(sh, b)) != (b < k))
            return false;
    return true;
}

static const int32_t ids[5] = {2, 17, 400, 9, 123};

/* The model's last-position logits for ids through the workers (out: vocab
 * floats), with layer-by-layer overlap: the model may still be loading. */
static void forward(struct rig *r, int i, float *out)
{
    struct model_exec_shape shape = {.batch = 1, .max_len = 5, .max_rows = 5};
    struct group_exec *gb = NULL;
    const int V = swap_model_info(r->m[i])->vocab;
    for (int k = 0; k < V; k++)
        out[k] = 0.0f / 0.0f; /* what a forward that cannot run leaves: no reference is met */
    int rc = swap_use_begin(r->mgr, r->m[i]);
    CHECK_MSG(rc == 0, "m%d: %s", i, err_msg());
    if (rc < 0)
        return;
    CHECK(group_exec_create(r->mgr, r->m[i], &shape, &gb) == 0);
    CHECK(gb && group_forward(r->w, gb, ids, NULL, 5, false, true, out) == 0);
    swap_use_end(r->mgr, r->m[i]);
    group_exec_free(gb);
}

/* model_forward's logits of dirs[i], the reference every forward meets. */
static double ref_err(int i, const float *got)
{
    struct model *ref;
    CHECK(model_open(dirs[i], &ref) == 0);
    const int V = ref->info->vocab;
    float *want = malloc((size_t)V * sizeof(float));
    struct model_exec *kv;
    struct model_exec_shape shape = {.batch = 1, .max_len = 5, .max_rows = 5};
    CHECK(model_exec_open_cpu(ref, &shape, &kv) == 0);
    CHECK(model_forward(ref, kv, ids, NULL, 5, false, want) == 0);
    double e = test_rel_err(got, want, (size_t)V);
    model_exec_free(kv);
    model_close(ref);
    free(want);
    return e;
}

static int vocab(struct rig *r, int i)
{
    return swap_model_info(r->m[i])->vocab;
}

/* Trim from the host tier: one byte asks for exactly the last layer; a
 * large ask leaves blob 0 only; the bytes are the blobs' own, the model is
 * PARTIAL and unservable; its reload copies the missing blobs only, their
 * events reset and the kept ones' complete while it loads, and the logits
 * come back bitwise. */
TEST(trim_and_reload)
{
    struct rig r;
    rig_open(&r, 8u << 20, 64u << 20, ONE);
    const int V = vocab(&r, 0);
    float *before = malloc((size_t)V * sizeof(float)), *after = malloc((size_t)V * sizeof(float));
    load_wait(&r, 0);
    forward(&r, 0, before);
    CHECK(ref_err(0, before) <= 1e-5);
    const struct swap_shard *sh = shard_on(r.m[0], 0);
    const int nb = swap_shard_n_blobs(sh);
    CHECK(nb == N_LAYERS + 1);
    CHECK(device_used(r.devs[0]) == blobs_device(sh, 0, nb));
    struct swap_stats st0 = stats_of(&r);

    uint64_t got = 0;
    CHECK(swap_trim(r.mgr, r.m[0], 0, 1, &got) == 0);
    CHECK_MSG(got == blobs_device(sh, nb - 1, nb), "released %llu, the last layer holds %llu",
              (unsigned long long)got, (unsigned long long)blobs_device(sh, nb - 1, nb));
    CHECK(device_used(r.devs[0]) == blobs_device(sh, 0, nb - 1));
    CHECK(swap_residency(r.mgr, r.m[0]) == RES_PARTIAL);
    CHECK(strcmp(residency_name(RES_PARTIAL), "partial") == 0);
    CHECK(swap_model_resident_bytes(r.mgr, r.m[0], 0) == blobs_device(sh, 0, nb - 1));
    CHECK(swap_model_resident_bytes(r.mgr, r.m[0], 1) == 0);
    CHECK(swap_model_missing_bytes(r.mgr, r.m[0]) == blobs_host(sh, nb - 1, nb));
    CHECK(events_kept(sh, nb - 1));
    CHECK(swap_use_begin(r.mgr, r.m[0]) == ERR_INVALID); /* not servable */
    /* then every layer, but never blob 0 */
    CHECK(swap_trim(r.mgr, r.m[0], 0, UINT64_MAX, &got) == 0);
    CHECK(got == blobs_device(sh, 1, nb - 1));
    CHECK(device_used(r.devs[0]) == blobs_device(sh, 0, 1));
    CHECK(events_kept(sh, 1));
    CHECK(swap_trim(r.mgr, r.m[0], 0, UINT64_MAX, &got) == 0 && got == 0); /* nothing left */
    CHECK(device_used(r.devs[0]) == blobs_device(sh, 0, 1));
    struct swap_stats st1 = stats_of(&r);
    CHECK(st1.bytes_d2h == st0.bytes_d2h); /* the host held every blob */
    CHECK(st1.trims == st0.trims + 2 && st1.bytes_trimmed == blobs_device(sh, 1, nb));
    CHECK(st1.offloads == st0.offloads); /* a trim is not an offload */

    /* reload: the layers only, blob 0's event complete throughout */
    set_link(&r, 0, SLOW_LINK);
    CHECK(swap_load(r.mgr, r.m[0], NULL) == 0);
    CHECK(swap_residency(r.mgr, r.m[0]) == RES_LOADING);
    bool kept_ready = device_event_done(swap_shard_blob_ready(sh, 0));
    CHECK_MSG(kept_ready, "a kept blob's event was reset by the load");
    CHECK(!device_event_done(swap_shard_blob_ready(sh, nb - 1)));
    /* with overlap it computes on blob 0 at once and waits layer by layer
     * (only when blob 0's event is complete: a reset one would never be
     * set again, and the forward would wait for ever) */
    if (kept_ready)
        forward(&r, 0, after);
    CHECK(swap_wait_loaded(r.mgr, r.m[0]) == 0);
    set_link(&r, 0, 0);
    struct swap_stats st2 = stats_of(&r);
    CHECK_MSG(st2.bytes_h2d - st1.bytes_h2d == blobs_host(sh, 1, nb),
              "reload copied %llu bytes, the missing blobs hold %llu",
              (unsigned long long)(st2.bytes_h2d - st1.bytes_h2d),
              (unsigned long long)blobs_host(sh, 1, nb));
    CHECK(st2.bytes_disk == st1.bytes_disk && st2.loads == st1.loads + 1);
    CHECK(swap_residency(r.mgr, r.m[0]) == RES_ON_DEVICE);
    CHECK(device_used(r.devs[0]) == blobs_device(sh, 0, nb));
    CHECK(swap_model_missing_bytes(r.mgr, r.m[0]) == 0);
    const bool all_ready = events_kept(sh, nb);
    CHECK(all_ready);
    CHECK(kept_ready && memcmp(before, after, (size_t)V * sizeof(float)) == 0);
    if (all_ready) { /* and once it is all there */
        forward(&r, 0, after);
        CHECK(memcmp(before, after, (size_t)V * sizeof(float)) == 0);
    }
    free(before);
    free(after);
    rig_close(&r);
}

/* A model with no host copy (it went for another model's): the trimmed
 * blobs are copied back first (OFFLOADING meanwhile, their device bytes
 * still counted and reported leaving), or dropped to disk when the host
 * has no room; either way the reload gives the same logits. */
TEST(trim_copy_back)
{
    const uint64_t host = model0_bytes();

    struct rig r;
    rig_open(&r, 8u << 20, host + host / 2, ONE);
    const int V = vocab(&r, 0);
    float *before = malloc((size_t)V * sizeof(float)), *after = malloc((size_t)V * sizeof(float));
    load_wait(&r, 0);
    forward(&r, 0, before);
    load_wait(&r, 1); /* m0's host copy goes for m1's */
    CHECK(stats_of(&r).host_used == host);
    const struct swap_shard *sh = shard_on(r.m[0], 0);
    const int nb = swap_shard_n_blobs(sh);
    const uint64_t used = device_used(r.devs[0]);
    struct swap_stats st0 = stats_of(&r);

    set_link(&r, 0, SLOW_LINK);
    uint64_t got = 0;
    CHECK(swap_trim(r.mgr, r.m[0], 0, 1, &got) == 0 && got == blobs_device(sh, nb - 1, nb));
    const uint64_t trimmed = got;
    CHECK(swap_residency(r.mgr, r.m[0]) == RES_OFFLOADING);
    CHECK(device_used(r.devs[0]) == used); /* until the copy ends */
    CHECK(swap_model_resident_bytes(r.mgr, r.m[0], 0) == blobs_device(sh, 0, nb - 1));
    /* in transition: no load, trim or plain offload now */
    struct swap_room why;
    CHECK(swap_load(r.mgr, r.m[0], &why) == ERR_BUSY && why.kind == SWAP_ROOM_MOVING);
    CHECK(swap_trim(r.mgr, r.m[0], 0, 1, &got) == ERR_BUSY && got == 0);
    CHECK_MSG(strstr(err_msg(), "model m0 cannot be trimmed now: it is still offloading"), "%s",
              err_msg());
    CHECK(swap_offload(r.mgr, r.m[0], false) == ERR_BUSY);
    swap_wait_idle(r.mgr, r.m[0]);
    set_link(&r, 0, 0);
    CHECK(swap_residency(r.mgr, r.m[0]) == RES_PARTIAL);
    struct swap_stats st1 = stats_of(&r);
    CHECK_MSG(st1.bytes_d2h - st0.bytes_d2h == blobs_host(sh, nb - 1, nb),
              "copied back %llu, the trimmed layer holds %llu",
              (unsigned long long)(st1.bytes_d2h - st0.bytes_d2h),
              (unsigned long long)blobs_host(sh, nb - 1, nb));
    CHECK(device_used(r.devs[0]) == used - trimmed);
    CHECK(st1.host_used <= st1.host_budget && st1.host_high_water <= st1.host_budget);
    /* reload: the trimmed layer comes from the host copy the trim made */
    CHECK(swap_load(r.mgr, r.m[0], NULL) == 0 && swap_wait_loaded(r.mgr, r.m[0]) == 0);
    struct swap_stats st2 = stats_of(&r);
    CHECK(st2.bytes_h2d - st1.bytes_h2d == blobs_host(sh, nb - 1, nb));
    CHECK(st2.bytes_disk == st1.bytes_disk);
    forward(&r, 0, after);
    CHECK(memcmp(before, after, (size_t)V * sizeof(float)) == 0);

    /* no host room (m1 loading holds its copy; m0's own does not count):
     * the trimmed layers drop to disk at once */
    CHECK(swap_offload(r.mgr, r.m[1], false) == 0);
    swap_wait_idle(r.mgr, r.m[1]);
    CHECK(swap_prefetch_host(r.mgr, r.m[1]) == 0); /* host: m1 whole, and m0's last layer */
    set_link(&r, 0, SLOW_LINK);
    CHECK(swap_load(r.mgr, r.m[1], NULL) == 0 && swap_residency(r.mgr, r.m[1]) == RES_LOADING);
    const uint64_t used2 = device_used(r.devs[0]);
    st1 = stats_of(&r);
    CHECK(swap_trim(r.mgr, r.m[0], 0, UINT64_MAX, &got) == 0 && got == blobs_device(sh, 1, nb));
    CHECK(swap_residency(r.mgr, r.m[0]) == RES_PARTIAL); /* nothing to copy: at once */
    CHECK(device_used(r.devs[0]) == used2 - got);
    CHECK(stats_of(&r).bytes_d2h == st1.bytes_d2h);
    CHECK(swap_wait_loaded(r.mgr, r.m[1]) == 0);
    set_link(&r, 0, 0);
    st1 = stats_of(&r);
    CHECK(swap_load(r.mgr, r.m[0], NULL) == 0 && swap_wait_loaded(r.mgr, r.m[0]) == 0);
    st2 = stats_of(&r);
    CHECK(st2.bytes_h2d - st1.bytes_h2d == blobs_host(sh, 1, nb));
    CHECK_MSG(st2.bytes_disk - st1.bytes_disk == blobs_host(sh, 1, nb - 1),
              "read %llu from disk, the layers without a host copy hold %llu",
              (unsigned long long)(st2.bytes_disk - st1.bytes_disk),
              (unsigned long long)blobs_host(sh, 1, nb - 1));
    forward(&r, 0, after);
    CHECK(memcmp(before, after, (size_t)V * sizeof(float)) == 0);
    st2 = stats_of(&r);
    CHECK(st2.host_high_water <= st2.host_budget);
    CHECK(device_high_water(r.devs[0]) <= device_budget(r.devs[0]));
    free(before);
    free(after);
    rig_close(&r);
}

/* Refused: in use, loading, not on its devices, no shard there, a bad
 * device; a deferred offload of a model whose trim is copying back happens
 * at its end. */
TEST(trim_refused)
{
    struct rig r;
    rig_open(&r, 8u << 20, 64u << 20, ONE);
    uint64_t got = 7;
    CHECK(swap_trim(r.mgr, r.m[0], 0, 1, &got) == ERR_INVALID && got == 0); /* on disk */
    CHECK_MSG(strstr(err_msg(), "model m0 is not on its devices (it is on-disk)"), "%s", err_msg());
    load_wait(&r, 0);
    const uint64_t used = device_used(r.devs[0]);
    CHECK(swap_trim(r.mgr, r.m[0], 1, 1, &got) == ERR_INVALID && got == 0);
    CHECK_MSG(strstr(err_msg(), "model m0 has no shard on device 1"), "%s", err_msg());
    CHECK(swap_trim(r.mgr, r.m[0], 5, 1, &got) == ERR_INVALID);
    CHECK(swap_use_begin(r.mgr, r.m[0]) == 0);
    CHECK(swap_trim(r.mgr, r.m[0], 0, 1, &got) == ERR_BUSY && got == 0);
    CHECK_MSG(strstr(err_msg(), "model m0 cannot be trimmed now: it has work in flight"), "%s",
              err_msg());
    swap_use_end(r.mgr, r.m[0]);
    CHECK(device_used(r.devs[0]) == used && swap_residency(r.mgr, r.m[0]) == RES_ON_DEVICE);
    CHECK(swap_offload(r.mgr, r.m[0], false) == 0);
    set_link(&r, 0, SLOW_LINK);
    CHECK(swap_load(r.mgr, r.m[0], NULL) == 0 && swap_residency(r.mgr, r.m[0]) == RES_LOADING);
    CHECK(swap_trim(r.mgr, r.m[0], 0, 1, &got) == ERR_BUSY && got == 0);
    CHECK_MSG(strstr(err_msg(), "it is still loading"), "%s", err_msg());
    CHECK(swap_wait_loaded(r.mgr, r.m[0]) == 0);
    CHECK(swap_trim(r.mgr, r.m[0], 0, 0, &got) == 0 && got == 0); /* nothing asked */
    CHECK(swap_residency(r.mgr, r.m[0]) == RES_ON_DEVICE && device_used(r.devs[0]) == used);
    set_link(&r, 0, 0);
    rig_close(&r);
}

/* swap_offload of a partial model frees what it kept, copying back what
 * the host lacks; swap_unregister of one gives everything back. */
TEST(offload_and_unregister_partial)
{
    const uint64_t host = model0_bytes();

    struct rig r;
    rig_open(&r, 8u << 20, host + host / 2, ONE);
    const struct swap_shard *sh = shard_on(r.m[0], 0);
    const int nb = swap_shard_n_blobs(sh);
    uint64_t got;
    /* host holds all of it: the rest goes at once, no copy */
    load_wait(&r, 0);
    CHECK(swap_trim(r.mgr, r.m[0], 0, 1, &got) == 0 && got > 0);
    struct swap_stats st0 = stats_of(&r);
    CHECK(swap_offload(r.mgr, r.m[0], false) == 0);
    CHECK(swap_residency(r.mgr, r.m[0]) == RES_IN_HOST && device_used(r.devs[0]) == 0);
    CHECK(stats_of(&r).bytes_d2h == st0.bytes_d2h);
    CHECK(stats_of(&r).offloads == st0.offloads + 1);
    CHECK(swap_model_resident_bytes(r.mgr, r.m[0], 0) == 0);
    /* its host copy went for m1's: the kept blobs are copied back, the
     * trimmed one was already */
    load_wait(&r, 0);
    load_wait(&r, 1);
    CHECK(swap_trim(r.mgr, r.m[0], 0, 1, &got) == 0);
    swap_wait_idle(r.mgr, r.m[0]);
    st0 = stats_of(&r);
    CHECK(swap_offload(r.mgr, r.m[0], false) == 0);
    swap_wait_idle(r.mgr, r.m[0]);
    struct swap_stats st1 = stats_of(&r);
    CHECK_MSG(st1.bytes_d2h - st0.bytes_d2h == blobs_host(sh, 0, nb - 1),
              "copied back %llu, its kept blobs hold %llu",
              (unsigned long long)(st1.bytes_d2h - st0.bytes_d2h),
              (unsigned long long)blobs_host(sh, 0, nb - 1));
    CHECK(swap_residency(r.mgr, r.m[0]) == RES_IN_HOST);
    CHECK(device_used(r.devs[0]) == swap_model_device_bytes(r.m[1], 0));
    CHECK(st1.host_high_water <= st1.host_budget);
    /* unregister: off the devices without a copy back, host copy freed */
    load_wait(&r, 0);
    CHECK(swap_trim(r.mgr, r.m[0], 0, 1, &got) == 0);
    swap_wait_idle(r.mgr, r.m[0]);
    CHECK(swap_residency(r.mgr, r.m[0]) == RES_PARTIAL);
    st0 = stats_of(&r);
    CHECK(swap_unregister(r.mgr, r.m[0]) == 0);
    r.m[0] = NULL;
    st1 = stats_of(&r);
    CHECK(st1.offloads == st0.offloads + 1 && st1.bytes_d2h == st0.bytes_d2h);
    CHECK(st1.host_used == st0.host_used - host); /* its whole host copy: it loaded from it */
    CHECK(device_used(r.devs[0]) == swap_model_device_bytes(r.m[1], 0));
    rig_close(&r);
}

/* Room for two models and a batch (less than a layer): after m0 gives up a
 * layer for nothing else,
 * with m1 resident, m0 comes back in the room of that layer alone (a whole
 * model's load would not fit: the refusal quotes the missing bytes); m2
 * then finds room through swap_load_lru, which may send the partial model
 * away as a whole. */
TEST(reload_needs_missing_only)
{
    struct rig probe;
    rig_open(&probe, 8u << 20, 64u << 20, ONE);
    const uint64_t one = swap_model_device_bytes(probe.m[0], 0);
    CHECK(one == swap_model_device_bytes(probe.m[1], 0));
    rig_close(&probe);

    const uint64_t slack = 128u << 10; /* the batch's contexts */
    struct rig r;
    rig_open(&r, 2 * one + slack, 64u << 20, ONE);
    const struct swap_shard *sh = shard_on(r.m[0], 0);
    const int nb = swap_shard_n_blobs(sh);
    load_wait(&r, 0);
    load_wait(&r, 1);
    CHECK(device_used(r.devs[0]) == 2 * one);
    uint64_t got;
    CHECK(swap_trim(r.mgr, r.m[0], 0, 1, &got) == 0 && got == blobs_device(sh, nb - 1, nb));
    struct swap_room why;
    CHECK(got > slack && one > got + slack);
    CHECK(swap_load(r.mgr, r.m[2], &why) == ERR_BUSY && why.kind == SWAP_ROOM_BYTES &&
          why.need == one && why.free == got + slack);
    CHECK_MSG(swap_load(r.mgr, r.m[0], &why) == 0, "reload of a partial model: %s", err_msg());
    CHECK(swap_wait_loaded(r.mgr, r.m[0]) == 0);
    CHECK(device_used(r.devs[0]) == 2 * one);
    float *a = malloc((size_t)vocab(&r, 0) * sizeof(float));
    forward(&r, 0, a);
    CHECK(ref_err(0, a) <= 1e-5);
    /* its refusal names what it lacks: m0 trimmed, m1 grows no room */
    CHECK(swap_trim(r.mgr, r.m[0], 0, UINT64_MAX, &got) == 0);
    struct dbuf *ballast = NULL;
    CHECK(device_alloc(r.devs[0], slack + 4096, &ballast) == 0);
    CHECK(swap_load(r.mgr, r.m[0], &why) == ERR_BUSY && why.kind == SWAP_ROOM_BYTES &&
          why.need == got && why.free == got - 4096);
    device_free(ballast);
    /* the LRU helper: m1 (used before m0's last load) is the victim, m0
     * partial stays */
    CHECK_MSG(swap_load_lru(r.mgr, r.m[2]) == 0, "%s", err_msg());
    CHECK(swap_wait_loaded(r.mgr, r.m[2]) == 0);
    for (int i = 0; i < N_MODELS; i++)
        swap_wait_idle(r.mgr, r.m[i]);
    CHECK(swap_residency(r.mgr, r.m[2]) == RES_ON_DEVICE);
    CHECK(swap_residency(r.mgr, r.m[1]) == RES_IN_HOST);
    CHECK(swap_residency(r.mgr, r.m[0]) == RES_PARTIAL);
    /* and a partial model is a victim too: m1 back, m0 (older than m2) goes */
    CHECK(swap_load_lru(r.mgr, r.m[1]) == 0 && swap_wait_loaded(r.mgr, r.m[1]) == 0);
    swap_wait_idle(r.mgr, r.m[0]);
    CHECK(swap_residency(r.mgr, r.m[0]) == RES_IN_HOST);
    CHECK(device_used(r.devs[0]) == 2 * one);
    forward(&r, 1, a);
    CHECK(ref_err(1, a) <= 1e-5);
    free(a);
    CHECK(device_high_water(r.devs[0]) <= device_budget(r.devs[0]));
    rig_close(&r);
}

/* Across devices: a TP=2 model trimmed on device 1 keeps its shard on
 * device 0 whole and is PARTIAL as a whole; a PP=2 model gives up its last
 * stage's layers (that stage's blob 0, the head, stays); each reload copies
 * only what went, and the logits come back bitwise. */
TEST(trim_tp_pp)
{
    for (int lay = TP2; lay <= PP2; lay++) {
        struct rig r;
        rig_open(&r, 8u << 20, 64u << 20, (enum layout)lay);
        const int V = vocab(&r, 0);
        float *before = malloc((size_t)V * sizeof(float)),
              *after = malloc((size_t)V * sizeof(float));
        load_wait(&r, 0);
        forward(&r, 0, before);
        CHECK_MSG(ref_err(0, before) <= 1e-5, "layout %d: %g", lay, ref_err(0, before));
        const struct swap_shard *s0 = shard_on(r.m[0], 0), *s1 = shard_on(r.m[0], 1);
        const int n0 = swap_shard_n_blobs(s0), n1 = swap_shard_n_blobs(s1);
        const uint64_t used0 = device_used(r.devs[0]);
        uint64_t got;
        CHECK(swap_trim(r.mgr, r.m[0], 1, UINT64_MAX, &got) == 0 && got == blobs_device(s1, 1, n1));
        CHECK(swap_residency(r.mgr, r.m[0]) == RES_PARTIAL);
        CHECK(device_used(r.devs[0]) == used0 && device_used(r.devs[1]) == blobs_device(s1, 0, 1));
        CHECK(events_kept(s0, n0) && events_kept(s1, 1));
        CHECK(swap_model_resident_bytes(r.mgr, r.m[0], 0) == blobs_device(s0, 0, n0));
        CHECK(swap_use_begin(r.mgr, r.m[0]) == ERR_INVALID);
        struct swap_stats st0 = stats_of(&r);
        CHECK(swap_load(r.mgr, r.m[0], NULL) == 0 && swap_wait_loaded(r.mgr, r.m[0]) == 0);
        struct swap_stats st1 = stats_of(&r);
        CHECK_MSG(st1.bytes_h2d - st0.bytes_h2d == blobs_host(s1, 1, n1),
                  "layout %d: reload copied %llu, the trimmed layers hold %llu", lay,
                  (unsigned long long)(st1.bytes_h2d - st0.bytes_h2d),
                  (unsigned long long)blobs_host(s1, 1, n1));
        CHECK(swap_residency(r.mgr, r.m[0]) == RES_ON_DEVICE);
        forward(&r, 0, after);
        CHECK_MSG(memcmp(before, after, (size_t)V * sizeof(float)) == 0,
                  "layout %d: logits after trim and reload differ (%g)", lay,
                  test_rel_err(after, before, (size_t)V));
        /* both devices trimmed, then offloaded: nothing left anywhere */
        CHECK(swap_trim(r.mgr, r.m[0], 0, 1, &got) == 0 && got == blobs_device(s0, n0 - 1, n0));
        CHECK(swap_trim(r.mgr, r.m[0], 1, 1, &got) == 0 && got == blobs_device(s1, n1 - 1, n1));
        CHECK(swap_offload(r.mgr, r.m[0], false) == 0);
        swap_wait_idle(r.mgr, r.m[0]);
        CHECK(device_used(r.devs[0]) == 0 && device_used(r.devs[1]) == 0);
        CHECK(swap_residency(r.mgr, r.m[0]) == RES_IN_HOST);
        free(before);
        free(after);
        rig_close(&r);
    }
}

static void cleanup(void)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
    CHECK(system(cmd) == 0);
}

int main(int argc, char **argv)
{
    int rc = test_main(argc, argv, make_models);
    cleanup();
    return rc;
}
