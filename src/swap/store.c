/* swap/store.h: a shard's blobs, the host tier, the guarded fill and the
 * copy-in, for process 0's swap manager and every follower alike. */
#include "swap/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/error.h"
#include "core/fault.h"
#include "format/safetensors.h"

/* ---- the host tier ---- */

void store_tier_init(struct store_tier *t, pthread_mutex_t *lock, uint64_t budget)
{
    *t = (struct store_tier){.lock = lock, .budget = budget};
    queue_init(&t->shards);
}

void store_tier_reserve(struct store_tier *t, uint64_t bytes)
{
    t->used += bytes;
    if (t->used > t->high_water)
        t->high_water = t->used;
}

void store_tier_unreserve(struct store_tier *t, uint64_t bytes)
{
    t->used -= bytes;
}

bool store_host_complete(const struct store_shard *sh)
{
    for (int b = 0; b < sh->layout.n_blobs; b++)
        if (!sh->host[b] && sh->layout.blob_bytes[b])
            return false;
    return true;
}

bool store_host_any(const struct store_shard *sh)
{
    for (int b = 0; sh->host && b < sh->layout.n_blobs; b++)
        if (sh->host[b])
            return true;
    return false;
}

void store_host_drop(struct store_shard *sh)
{
    for (int b = 0; sh->host && b < sh->layout.n_blobs; b++) {
        if (!sh->host[b])
            continue;
        device_host_free(sh->device, sh->host[b], sh->layout.blob_bytes[b]);
        sh->host[b] = NULL;
        sh->tier->used -= sh->layout.blob_bytes[b];
    }
}

uint64_t store_host_missing(const struct store_shard *sh, int from)
{
    uint64_t n = 0;
    for (int b = from; b < sh->layout.n_blobs; b++)
        n += sh->host[b] ? 0 : sh->layout.blob_bytes[b];
    return n;
}

void store_host_set(struct store_shard *sh, int b, void *p)
{
    pthread_mutex_lock(sh->tier->lock);
    sh->host[b] = p;
    pthread_mutex_unlock(sh->tier->lock);
}

static bool shard_droppable(const struct store_drop *how, const struct store_shard *sh)
{
    return store_host_any(sh) && (!how || !how->droppable || how->droppable(how->arg, sh));
}

int store_tier_make_room(struct store_tier *t, uint64_t need, const struct store_drop *how)
{
    while (t->used + need > t->budget) {
        const struct store_shard *victim = NULL;
        struct queue *q;
        queue_foreach(q, &t->shards)
        {
            const struct store_shard *c = queue_data(q, struct store_shard, node);
            if ((!victim || c->stamp < victim->stamp) && shard_droppable(how, c))
                victim = c;
        }
        if (!victim) {
            char budget[32], used[32], more[32];
            return err_set(ERR_BUSY,
                           "host budget of %s is full: %s in use, %s more needed, and no idle "
                           "model's host copy can be dropped",
                           bytes_format(budget, sizeof budget, t->budget, BYTES_BINARY),
                           bytes_format(used, sizeof used, t->used, BYTES_BINARY),
                           bytes_format(more, sizeof more, need, BYTES_BINARY));
        }
        /* the owner's shards leave the tier together */
        const void *owner = victim->owner;
        queue_foreach(q, &t->shards)
        {
            struct store_shard *c = queue_data(q, struct store_shard, node);
            if (c->owner != owner || !shard_droppable(how, c))
                continue;
            store_host_drop(c);
            if (how && how->dropped)
                how->dropped(how->arg, c);
        }
    }
    return 0;
}

/* ---- a shard ---- */

int store_shard_init(struct store_shard *sh, struct store_tier *tier, struct device *dev,
                     const void *owner, const char *name, const struct model_config *cfg,
                     const struct st_checkpoint *ck, const struct model_shard *spec)
{
    *sh = (struct store_shard){.tier = tier, .device = dev, .ck = ck, .owner = owner};
    snprintf(sh->name, sizeof sh->name, "%s", name);
    queue_init(&sh->node);
    int rc = model_shard_open(cfg, ck, spec, &sh->m, &sh->layout);
    if (rc < 0)
        return rc;
    model_layout_set_pack(&sh->layout, dev); /* before any blob is filled */
    const size_t nb = (size_t)sh->layout.n_blobs;
    if (!(sh->host = calloc(nb, sizeof *sh->host)) || !(sh->dev = calloc(nb, sizeof *sh->dev)) ||
        !(sh->ready = calloc(nb, sizeof *sh->ready)))
        return err_set(ERR_NOMEM, "out of memory");
    for (size_t b = 0; b < nb; b++) {
        if ((rc = device_event_create(dev, &sh->ready[b])) < 0)
            return rc;
        device_event_signal(sh->ready[b], 0); /* nothing placed: nothing to wait for */
    }
    pthread_mutex_lock(tier->lock);
    queue_insert_tail(&tier->shards, &sh->node);
    pthread_mutex_unlock(tier->lock);
    return 0;
}

void store_shard_free(struct store_shard *sh)
{
    if (!sh->tier)
        return;
    pthread_mutex_lock(sh->tier->lock);
    store_host_drop(sh);
    if (!queue_empty(&sh->node))
        queue_remove(&sh->node);
    pthread_mutex_unlock(sh->tier->lock);
    for (int b = 0; sh->ready && b < sh->layout.n_blobs; b++)
        device_event_destroy(sh->ready[b]);
    free(sh->ready);
    free(sh->host);
    free(sh->dev);
    model_layout_free(&sh->layout);
    model_close(sh->m);
    memset(sh, 0, sizeof *sh);
}

void store_blob_arm(struct store_shard *sh, int b)
{
    device_event_reset(sh->ready[b]);
    if (sh->dev[b])
        model_shard_bind(sh->m, &sh->layout, b, dbuf_ptr(sh->dev[b]));
}

void store_blobs_release(struct store_shard *sh, int from)
{
    for (int b = from; sh->dev && b < sh->layout.n_blobs; b++) {
        if (!sh->dev[b])
            continue;
        device_free(sh->dev[b]);
        sh->dev[b] = NULL;
        device_event_reset(sh->ready[b]);
    }
}

/* ---- the guarded read ---- */

struct fill_job {
    const struct store_shard *sh;
    int blob;
    void *dst;
};

static int fill_run(void *arg)
{
    const struct fill_job *j = arg;
    return model_shard_fill(j->sh->m, &j->sh->layout, j->sh->ck, j->blob, j->dst);
}

int store_fill(const struct store_shard *sh, int b, void *dst)
{
    int rc = st_check(sh->ck);
    if (rc < 0)
        return err_wrap(rc, "model %s", sh->name);
    char what[128];
    snprintf(what, sizeof what, "model %s: its checkpoint", sh->name);
    struct fill_job job = {.sh = sh, .blob = b, .dst = dst};
    return fault_guard(fill_run, &job, what);
}

/* ---- the loader ---- */

int store_loader_start(struct store_loader *ld, struct device *dev, int index,
                       const struct workq_ops *ops, void *arg)
{
    *ld = (struct store_loader){.dev = dev};
    char name[16];
    snprintf(name, sizeof name, "load-%d", index);
    if (workq_init(&ld->q, name, ops, arg) < 0) {
        ld->dev = NULL;
        return err_set(ERR_NOMEM, "cannot start the loader thread of device %d", index);
    }
    return 0;
}

void store_loader_stop(struct store_loader *ld)
{
    if (!ld->dev)
        return;
    workq_free(&ld->q);
    free(ld->stage);
    memset(ld, 0, sizeof *ld);
}

/* Room in ld's staging buffer for n bytes. */
static int stage_grow(struct store_loader *ld, size_t n)
{
    if (n <= ld->stage_cap)
        return 0;
    void *p = realloc(ld->stage, n);
    if (!p)
        return err_set(ERR_NOMEM, "out of memory for a blob of %zu bytes", n);
    ld->stage = p, ld->stage_cap = n;
    return 0;
}

/* Where blob b comes from: its host copy, made now (read from the
 * checkpoint) when the tier grants it, else the staging buffer filled
 * (*staged). */
static int blob_source(struct store_loader *ld, struct store_shard *sh, int b,
                       struct store_load *how, const void **src, bool *staged)
{
    const size_t n = sh->layout.blob_bytes[b];
    struct store_tier *t = sh->tier;
    *staged = false;
    pthread_mutex_lock(t->lock);
    *src = sh->host[b];
    bool room = how->mode == STORE_HOST_RESERVED;
    if (!*src && how->mode == STORE_HOST_IF_ROOM &&
        (room = store_tier_make_room(t, n, how->how) == 0))
        store_tier_reserve(t, n); /* while it is read */
    pthread_mutex_unlock(t->lock);
    if (*src)
        return 0;
    void *p = NULL;
    int rc = room ? device_host_alloc(sh->device, n, &p) : ERR_NOMEM;
    if (rc == 0 && (rc = store_fill(sh, b, p)) == 0) {
        how->disk += n;
        store_host_set(sh, b, p);
        *src = p;
        return 0;
    }
    device_host_free(sh->device, p, n);
    if (room) { /* reserved, never filled */
        pthread_mutex_lock(t->lock);
        store_tier_unreserve(t, n);
        pthread_mutex_unlock(t->lock);
    }
    /* a reserved copy that failed fails the load, as does a failed read */
    if (how->mode == STORE_HOST_RESERVED || !how->to_device || (p && rc < 0))
        return rc;
    if ((rc = stage_grow(ld, n)) < 0 || (rc = store_fill(sh, b, ld->stage)) < 0)
        return rc;
    how->disk += n;
    *src = ld->stage;
    *staged = true;
    return 0;
}

int store_shard_load(struct store_loader *ld, struct store_shard *sh, int from,
                     struct store_load *how)
{
    const int nb = sh->layout.n_blobs;
    int rc = 0;
    how->failed_at = nb;
    for (int b = from; b < nb && rc == 0; b++) {
        if (how->to_device && device_event_done(sh->ready[b]))
            continue;                        /* there already (not armed by this load) */
        if (how->to_device && !sh->dev[b]) {
            /* an empty blob (a middle stage's ends) is there at once; one
             * not placed is left to the load that places it */
            if (!sh->layout.blob_bytes[b])
                device_event_signal(sh->ready[b], 0);
            continue;
        }
        const void *src = NULL;
        bool staged = false;
        how->failed_at = b;
        if (sh->layout.blob_bytes[b] && (rc = blob_source(ld, sh, b, how, &src, &staged)) < 0)
            break;
        if (!how->to_device)
            continue;
        const size_t n = sh->layout.blob_bytes[b];
        if ((rc = device_copy_h2d(sh->device, sh->dev[b], 0, src, n, sh->ready[b])) < 0)
            break;
        if (staged && (rc = device_event_wait(sh->ready[b])) < 0) /* the buffer is free again */
            break;
        how->h2d += n;
        how->blobs++;
    }
    if (rc == 0)
        how->failed_at = nb;
    if (rc < 0) {
        /* before the events: a step that sees one failed reads it */
        snprintf(sh->load_error, sizeof sh->load_error, "%s", err_msg());
        if (how->mode == STORE_HOST_RESERVED) {
            /* the host bytes reserved for the blobs never reached */
            pthread_mutex_lock(sh->tier->lock);
            uint64_t left = 0;
            for (int b = how->failed_at + 1; b < nb; b++)
                if (!sh->host[b] && (!how->to_device || !device_event_done(sh->ready[b])))
                    left += sh->layout.blob_bytes[b];
            store_tier_unreserve(sh->tier, left);
            pthread_mutex_unlock(sh->tier->lock);
        }
    }
    if (how->to_device) {
        device_sync(sh->device);
        for (int b = from; rc < 0 && b < nb; b++)
            if (!device_event_done(sh->ready[b]) && (sh->dev[b] || !sh->layout.blob_bytes[b]))
                device_event_signal(sh->ready[b], rc);
    }
    return rc;
}
