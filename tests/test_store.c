/* The shard store (swap/store.h) on its own, as a follower uses it: shards
 * of small generated checkpoints on a CPU device, placed by the test.
 *
 * copy_in: a load copies every armed blob from the checkpoint, each blob's
 *   event completes, and the device copy equals model_shard_fill's bytes;
 *   the host tier keeps the copies (within its budget) and a second load
 *   reads nothing from disk.
 * tier_lru: a budget of one model: loading a second drops the first
 *   owner's copies (all its shards), least recently loaded first, never a
 *   shard the drop rule keeps; with no room at all, blobs are staged and
 *   still land exactly.
 * reserved: STORE_HOST_RESERVED makes every copy the caller reserved, and a
 *   failed load gives back what it never filled.
 * truncated: the checkpoint truncated after the shard opened it: the load
 *   fails with the message naming the model and both sizes, every armed
 *   event completes with the error (no waiter hangs), the process lives. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/device.h"
#include "core/error.h"
#include "format/safetensors.h"
#include "model/random.h"
#include "swap/store.h"
#include "test.h"
#include "tiny_opt.h"

static char tmp[64];
static char dirs[2][128];

static void setup(void)
{
    test_scratch_dir(tmp, sizeof(tmp), "store");
    struct model_config *c = tiny_opt_config(3, 1000);
    for (int i = 0; i < 2; i++) {
        snprintf(dirs[i], sizeof dirs[i], "%s/m%d", tmp, i);
        mkdir(dirs[i], 0755);
        struct model_random_opts o = {.dtype = DTYPE_F16, .seed = 7 + (uint64_t)i};
        CHECK(model_random_write(c, dirs[i], &o) == 0);
    }
    model_config_free(c);
}

/* One model's checkpoint and its TP=2 shards in the store. */
struct owner {
    struct model_config *cfg;
    struct st_checkpoint *ck;
    struct store_shard sh[2];
};

struct rig {
    pthread_mutex_t lock;
    struct store_tier tier;
    struct device *dev;
    struct store_loader ld;
    struct owner o[2];
};

/* The loader's job: one shard's load, its status kept. */
struct job {
    struct workq_item item;
    struct store_shard *sh;
    struct store_load how;
    int rc;
};

static void job_run(struct workq_item *item, void *arg)
{
    struct job *j = queue_data(item, struct job, item);
    j->rc = store_shard_load(arg, j->sh, 0, &j->how);
}

static const struct workq_ops job_ops = {.run = job_run};

static void owner_open(struct rig *r, int i, const char *dir)
{
    struct owner *o = &r->o[i];
    CHECK_MSG(model_config_load(dir, &o->cfg) == 0, "%s", err_msg());
    CHECK_MSG(st_open(dir, &o->ck) == 0, "%s", err_msg());
    for (int k = 0; k < 2; k++) {
        struct model_shard spec = {
            .tp_rank = k, .tp_size = 2, .layer_begin = 0, .layer_end = o->cfg->info.n_layers};
        char name[16];
        snprintf(name, sizeof name, "m%d", i);
        CHECK_MSG(store_shard_init(&o->sh[k], &r->tier, r->dev, o, name, o->cfg, o->ck, &spec) == 0,
                  "%s", err_msg());
    }
}

static void rig_open(struct rig *r, uint64_t host_budget)
{
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->lock, NULL);
    store_tier_init(&r->tier, &r->lock, host_budget);
    CHECK(device_open_cpu(0, 64u << 20, &r->dev) == 0);
    CHECK(store_loader_start(&r->ld, r->dev, 0, &job_ops, &r->ld) == 0);
    for (int i = 0; i < 2; i++)
        owner_open(r, i, dirs[i]);
}

static void rig_close(struct rig *r)
{
    store_loader_stop(&r->ld);
    for (int i = 0; i < 2; i++) {
        for (int k = 0; k < 2; k++) {
            store_blobs_release(&r->o[i].sh[k], 0);
            store_shard_free(&r->o[i].sh[k]);
        }
        st_close(r->o[i].ck);
        model_config_free(r->o[i].cfg);
    }
    CHECK_MSG(r->tier.used == 0, "the tier holds %llu bytes after every shard left",
              (unsigned long long)r->tier.used);
    device_close(r->dev);
    pthread_mutex_destroy(&r->lock);
}

/* Places every blob of sh with bytes on the device and arms it. */
static void place(struct store_shard *sh)
{
    for (int b = 0; b < sh->layout.n_blobs; b++) {
        if (sh->layout.blob_bytes[b])
            CHECK(device_alloc(sh->device, sh->layout.blob_bytes[b], &sh->dev[b]) == 0);
        store_blob_arm(sh, b);
    }
}

static int load(struct rig *r, struct store_shard *sh, struct store_load how,
                struct store_load *out)
{
    struct job j = {.sh = sh, .how = how};
    workq_post(&r->ld.q, &j.item);
    workq_sync(&r->ld.q);
    if (out)
        *out = j.how;
    return j.rc;
}

static uint64_t shard_bytes(const struct store_shard *sh)
{
    uint64_t n = 0;
    for (int b = 0; b < sh->layout.n_blobs; b++)
        n += sh->layout.blob_bytes[b];
    return n;
}

/* Every blob's event complete and its device copy equal to the
 * checkpoint's bytes. */
static void check_landed(const struct store_shard *sh)
{
    for (int b = 0; b < sh->layout.n_blobs; b++) {
        CHECK_MSG(device_event_done(sh->ready[b]) && device_event_wait(sh->ready[b]) == 0,
                  "%s blob %d: its event is not complete", sh->name, b);
        size_t n = sh->layout.blob_bytes[b];
        if (!n)
            continue;
        void *want = malloc(n);
        CHECK(want && model_shard_fill(sh->m, &sh->layout, sh->ck, b, want) == 0);
        CHECK_MSG(want && memcmp(dbuf_ptr(sh->dev[b]), want, n) == 0,
                  "%s blob %d: the device copy differs from the checkpoint", sh->name, b);
        free(want);
    }
}

static const struct store_load if_room = {.mode = STORE_HOST_IF_ROOM, .to_device = true};

TEST(copy_in)
{
    struct rig r;
    rig_open(&r, 1ull << 30);
    struct store_shard *sh = &r.o[0].sh[1];
    place(sh);
    struct store_load got;
    CHECK_MSG(load(&r, sh, if_room, &got) == 0, "%s", err_msg());
    check_landed(sh);
    const uint64_t bytes = shard_bytes(sh);
    CHECK_MSG(got.disk == bytes && got.h2d == bytes && r.tier.used == bytes,
              "read %llu, copied %llu, host tier %llu; the shard has %llu",
              (unsigned long long)got.disk, (unsigned long long)got.h2d,
              (unsigned long long)r.tier.used, (unsigned long long)bytes);
    /* again: from the host copies, nothing read */
    store_blobs_release(sh, 0);
    place(sh);
    CHECK(load(&r, sh, if_room, &got) == 0);
    check_landed(sh);
    CHECK_MSG(got.disk == 0 && got.h2d == bytes, "second load read %llu bytes",
              (unsigned long long)got.disk);
    /* a blob not armed is not copied again */
    CHECK(load(&r, sh, if_room, &got) == 0 && got.h2d == 0);
    rig_close(&r);
}

/* The test's drop rule: owner keep's copies stay. */
static bool keep_rule(void *arg, const struct store_shard *sh)
{
    return sh->owner != arg;
}

TEST(tier_lru)
{
    struct rig r;
    rig_open(&r, 0);
    const uint64_t one = shard_bytes(&r.o[0].sh[0]) + shard_bytes(&r.o[0].sh[1]);
    r.tier.budget = one;
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++) {
            place(&r.o[i].sh[k]);
            r.o[i].sh[k].stamp = (uint64_t)(2 * i + k + 1);
            CHECK_MSG(load(&r, &r.o[i].sh[k], if_room, NULL) == 0, "%s", err_msg());
            check_landed(&r.o[i].sh[k]);
        }
    /* m1's copies pushed m0's out, both of its shards, and fill the tier */
    pthread_mutex_lock(&r.lock);
    CHECK(!store_host_any(&r.o[0].sh[0]) && !store_host_any(&r.o[0].sh[1]));
    CHECK(store_host_complete(&r.o[1].sh[0]) && store_host_complete(&r.o[1].sh[1]));
    CHECK(r.tier.used <= r.tier.budget && r.tier.high_water <= r.tier.budget);
    pthread_mutex_unlock(&r.lock);
    /* m1 kept by the rule: m0's blobs are staged, not kept, and still land */
    struct store_drop keep = {.droppable = keep_rule, .arg = &r.o[1]};
    struct store_load rule = if_room;
    rule.how = &keep;
    store_blobs_release(&r.o[0].sh[0], 0);
    place(&r.o[0].sh[0]);
    struct store_load got;
    CHECK(load(&r, &r.o[0].sh[0], rule, &got) == 0);
    check_landed(&r.o[0].sh[0]);
    pthread_mutex_lock(&r.lock);
    CHECK_MSG(!store_host_any(&r.o[0].sh[0]) && store_host_complete(&r.o[1].sh[0]) &&
                  got.disk == shard_bytes(&r.o[0].sh[0]),
              "a kept owner's copies went, or the staged load did not read its blobs");
    /* make_room refuses when nothing may go, naming the budget */
    int rc = store_tier_make_room(&r.tier, one, &keep);
    pthread_mutex_unlock(&r.lock);
    CHECK_MSG(rc == ERR_BUSY && strstr(err_msg(), "host budget"), "make_room: %d %s", rc,
              err_msg());
    /* no room at all: every blob staged */
    r.tier.budget = 0;
    for (int k = 0; k < 2; k++) {
        store_blobs_release(&r.o[1].sh[k], 0);
        pthread_mutex_lock(&r.lock);
        store_host_drop(&r.o[1].sh[k]);
        pthread_mutex_unlock(&r.lock);
        place(&r.o[1].sh[k]);
        CHECK(load(&r, &r.o[1].sh[k], if_room, NULL) == 0);
        check_landed(&r.o[1].sh[k]);
    }
    CHECK(r.tier.used == 0);
    rig_close(&r);
}

TEST(reserved)
{
    struct rig r;
    rig_open(&r, 1ull << 30);
    struct store_shard *sh = &r.o[0].sh[0];
    pthread_mutex_lock(&r.lock);
    uint64_t missing = store_host_missing(sh, 0);
    store_tier_reserve(&r.tier, missing);
    pthread_mutex_unlock(&r.lock);
    place(sh);
    struct store_load how = {.mode = STORE_HOST_RESERVED, .to_device = true}, got;
    CHECK(load(&r, sh, how, &got) == 0);
    check_landed(sh);
    pthread_mutex_lock(&r.lock);
    CHECK(store_host_complete(sh) && r.tier.used == missing && store_host_missing(sh, 0) == 0);
    pthread_mutex_unlock(&r.lock);
    /* host copies only (a prefetch) of the other shard */
    struct store_shard *other = &r.o[0].sh[1];
    pthread_mutex_lock(&r.lock);
    uint64_t more = store_host_missing(other, 0);
    store_tier_reserve(&r.tier, more);
    pthread_mutex_unlock(&r.lock);
    how.to_device = false;
    CHECK(load(&r, other, how, &got) == 0 && got.h2d == 0 && got.disk == more);
    pthread_mutex_lock(&r.lock);
    CHECK(store_host_complete(other) && r.tier.used == missing + more);
    pthread_mutex_unlock(&r.lock);
    rig_close(&r);
}

TEST(truncated)
{
    char dir[160], path[200];
    snprintf(dir, sizeof dir, "%s/victim", tmp);
    mkdir(dir, 0755);
    struct model_config *c = tiny_opt_config(3, 1000);
    struct model_random_opts o = {.dtype = DTYPE_F16, .seed = 9};
    CHECK(model_random_write(c, dir, &o) == 0);
    model_config_free(c);
    struct rig r;
    rig_open(&r, 1ull << 30);
    /* the victim replaces m1 */
    for (int k = 0; k < 2; k++)
        store_shard_free(&r.o[1].sh[k]);
    st_close(r.o[1].ck);
    model_config_free(r.o[1].cfg);
    owner_open(&r, 1, dir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && truncate(path, sb.st_size / 2) == 0);
    for (int mode = 0; mode < 2; mode++) {
        struct store_shard *sh = &r.o[1].sh[mode];
        place(sh);
        struct store_load how = if_room;
        if (mode == 1) { /* reserved: what it never filled goes back */
            how.mode = STORE_HOST_RESERVED;
            pthread_mutex_lock(&r.lock);
            store_tier_reserve(&r.tier, store_host_missing(sh, 0));
            pthread_mutex_unlock(&r.lock);
        }
        int rc = load(&r, sh, how, NULL);
        char sizes[64];
        snprintf(sizes, sizeof sizes, "%lld bytes now", (long long)(sb.st_size / 2));
        CHECK_MSG(rc == ERR_IO && strstr(sh->load_error, "m1") &&
                      strstr(sh->load_error, "truncated while in use") &&
                      strstr(sh->load_error, sizes),
                  "load of a truncated checkpoint: %d %s", rc, sh->load_error);
        for (int b = 0; b < sh->layout.n_blobs; b++)
            CHECK_MSG(device_event_done(sh->ready[b]) && device_event_wait(sh->ready[b]) == rc,
                      "blob %d: its event is not complete with the error", b);
        CHECK_MSG(r.tier.used == 0, "mode %d: the tier holds %llu bytes of a failed load", mode,
                  (unsigned long long)r.tier.used);
    }
    rig_close(&r);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
