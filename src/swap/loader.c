/* Loader threads: one per device, each moving only its own device's shards,
 * so the shards of one model travel in parallel, each over its own link.
 *
 * A load walks the shard's blobs in order (embeddings and head, then layer 0,
 * 1, ...): a blob missing from the host tier is first read from the
 * checkpoint (only this shard's slices), then queued on the device's copy
 * stream with the blob's readiness event. Reading blob b + 1 from disk thus
 * overlaps copying blob b, and the forward overlaps both. A partly resident
 * shard's load starts after the blobs it kept ([0, kept): their events are
 * complete already), and an offload (or a trim) moves blobs [kept, n) only. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/fault.h"
#include "swap/swap_impl.h"

/* One blob's copy out of the mapped checkpoint, run under fault_guard: a
 * file truncated under us fails this load, not the process. */
struct fill_job {
    const struct swap_shard *sh;
    int blob;
    void *dst;
};

static int fill_run(void *arg)
{
    const struct fill_job *j = arg;
    return model_shard_fill(j->sh->m, &j->sh->layout, j->sh->model->ck, j->blob, j->dst);
}

/* The checkpoint as it is now (not shrunk since it was mapped), then the
 * guarded copy; errors name the model. */
static int loader_fill(struct swap_shard *sh, int b, void *dst)
{
    char what[128];
    snprintf(what, sizeof(what), "model %s: its checkpoint", sh->model->name);
    int rc = st_check(sh->model->ck);
    if (rc < 0)
        return err_wrap(rc, "model %s", sh->model->name);
    struct fill_job job = {.sh = sh, .blob = b, .dst = dst};
    return fault_guard(fill_run, &job, what);
}

static int loader_host_copy(struct loader *l, struct swap_shard *sh, int b, uint64_t *disk)
{
    size_t n = sh->layout.blob_bytes[b];
    if (sh->host[b] || n == 0)
        return 0;
    void *p;
    int rc = device_host_alloc(l->mgr->devices[l->device], n, &p);
    if (rc < 0) {
        swap_shard_host_unreserve(l->mgr, n);
        return rc;
    }
    if ((rc = loader_fill(sh, b, p)) < 0) {
        device_host_free(l->mgr->devices[l->device], p, n);
        swap_shard_host_unreserve(l->mgr, n);
        return rc;
    }
    *disk += n;
    swap_shard_host_filled(l->mgr, sh, b, p);
    return 0;
}

/* A remote shard's load: its owner reads and copies every blob at the
 * view's offsets. Every blob's event is set once the command has left
 * (swap/remote.h: a step sent from then on reaches the owner after it and
 * waits there blob by blob), with the error when it could not be sent; a
 * failure after that reaches the step from the owner. Nothing is staged
 * here. */
static int loader_load_remote(struct loader *l, struct swap_shard *sh)
{
    const struct swap_remote *r = l->mgr->remote;
    const int nb = sh->layout.n_blobs;
    uint64_t *offsets = calloc((size_t)nb + 1, sizeof(uint64_t)), bytes = 0;
    int rc = offsets ? 0 : err_set(ERR_NOMEM, "out of memory");
    for (int b = 0; rc == 0 && b < nb; b++) {
        offsets[b] = sh->dev[b] ? dbuf_offset(sh->dev[b]) : UINT64_MAX;
        bytes += sh->dev[b] ? sh->layout.blob_bytes[b] : 0;
    }
    struct swap_remote_load *sent = NULL;
    if (rc == 0)
        rc = r->load_send(r->ctx, sh->model, sh, offsets, &sent);
    free(offsets);
    if (rc < 0) /* before the events: a forward that sees one failed reads it */
        snprintf(sh->load_error, sizeof(sh->load_error), "%s", err_msg());
    for (int b = 0; b < nb; b++)
        device_event_signal(sh->ready[b], rc < 0 ? rc : 0);
    if (rc == 0 && (rc = r->load_wait(r->ctx, sent)) < 0)
        snprintf(sh->load_error, sizeof(sh->load_error), "%s", err_msg());
    /* the owner read its checkpoint and copied to its device */
    if (rc == 0)
        swap_count_bytes(l->mgr, bytes, bytes, 0);
    return rc;
}

static int loader_load(struct loader *l, struct swap_shard *sh, bool to_device)
{
    const int nb = sh->layout.n_blobs, first = to_device ? sh->kept : 0;
    if (first == nb) /* a partly resident model's shard that kept every blob */
        return 0;
    if (sh->remote) /* a prefetch has nothing to stage here */
        return to_device ? loader_load_remote(l, sh) : 0;
    struct device *dev = l->mgr->devices[l->device];
    uint64_t disk = 0, h2d = 0;
    int rc = 0, failed_at = nb;
    for (int b = first; b < nb; b++) {
        failed_at = b;
        if ((rc = loader_host_copy(l, sh, b, &disk)) < 0)
            break;
        if (!to_device)
            continue;
        if (!sh->dev[b]) { /* an empty blob (a middle stage's ends) */
            device_event_signal(sh->ready[b], 0);
            continue;
        }
        if ((rc = device_copy_h2d(dev, sh->dev[b], 0, sh->host[b], sh->layout.blob_bytes[b],
                                  sh->ready[b])) < 0)
            break;
        h2d += sh->layout.blob_bytes[b];
    }
    if (rc < 0) {
        /* before the events: a forward that sees one failed reads it */
        snprintf(sh->load_error, sizeof(sh->load_error), "%s", err_msg());
        /* the host bytes swap_load reserved for the blobs never reached (the
         * failed one's are given back already) */
        uint64_t left = 0;
        for (int b = failed_at + 1; b < nb; b++)
            if (!sh->host[b])
                left += sh->layout.blob_bytes[b];
        if (left)
            swap_shard_host_unreserve(l->mgr, left);
    }
    if (to_device) {
        device_sync(dev);
        /* on failure every blob's event still ends set, so no forward waits forever */
        for (int b = 0; b < nb; b++)
            if (rc < 0 && !device_event_done(sh->ready[b]))
                device_event_signal(sh->ready[b], rc);
    }
    swap_count_bytes(l->mgr, disk, h2d, 0);
    return rc;
}

/* Copies the leaving blobs ([kept, n) on the device) the host lacks back
 * to it; the manager frees their device memory when this ends. */
static int loader_offload(struct loader *l, struct swap_shard *sh)
{
    if (sh->remote) {
        const struct swap_remote *r = l->mgr->remote;
        return r->offload(r->ctx, sh->model, sh);
    }
    struct device *dev = l->mgr->devices[l->device];
    uint64_t d2h = 0, left = 0;
    int rc = 0;
    for (int b = sh->kept; b < sh->layout.n_blobs; b++) {
        size_t n = sh->layout.blob_bytes[b];
        if (sh->host[b] || !sh->dev[b])
            continue;
        if (rc < 0) { /* reserved by the manager, never to be filled */
            left += n;
            continue;
        }
        void *p;
        if ((rc = device_host_alloc(dev, n, &p)) < 0) {
            left += n;
            continue;
        }
        if ((rc = device_copy_d2h(dev, p, sh->dev[b], 0, n, NULL)) < 0) {
            device_host_free(dev, p, n);
            left += n;
            continue;
        }
        device_sync(dev);
        d2h += n;
        swap_shard_host_filled(l->mgr, sh, b, p);
    }
    if (left)
        swap_shard_host_unreserve(l->mgr, left);
    swap_count_bytes(l->mgr, 0, 0, d2h);
    return rc;
}

/* The loader thread's run (core/workq.h): one shard's job, then its end
 * for the manager (which takes the manager's lock). */
static void loader_run(struct workq_item *item, void *arg)
{
    struct loader *l = arg;
    struct swap_shard *sh = queue_data(item, struct swap_shard, job);
    enum loader_kind kind = (enum loader_kind)sh->job_kind;
    int rc = kind == LOADER_OFFLOAD ? loader_offload(l, sh)
                                    : loader_load(l, sh, kind == LOADER_LOAD);
    swap_shard_done(l->mgr, sh, kind, rc);
}

static const struct workq_ops loader_ops = {.run = loader_run};

int loader_start(struct loader *l, struct swap_manager *mgr, int device)
{
    l->mgr = mgr;
    l->device = device;
    char name[16];
    snprintf(name, sizeof(name), "load-%d", device);
    if (workq_init(&l->q, name, &loader_ops, l) < 0)
        return err_set(ERR_NOMEM, "cannot start the loader thread of device %d", device);
    return 0;
}

/* Runs what is still queued, then joins (a stop drains). */
void loader_stop(struct loader *l)
{
    workq_free(&l->q);
}

void loader_submit(struct loader *l, struct swap_shard *sh, enum loader_kind kind)
{
    sh->job_kind = kind;
    workq_post(&l->q, &sh->job);
}
