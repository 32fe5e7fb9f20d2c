/* Loader threads: one per device, each moving only its own device's shards,
 * so the shards of one model travel in parallel, each over its own link.
 *
 * A load walks the shard's blobs in order (embeddings and head, then layer 0,
 * 1, ...) with the shard store's copy-in (store_shard_load): a blob missing
 * from the host tier is first read from the checkpoint (only this shard's
 * slices, guarded), then queued on the device's copy stream with the
 * blob's readiness event. Reading blob b + 1 from disk thus
 * overlaps copying blob b, and the forward overlaps both. A partly resident
 * shard's load starts after the blobs it kept ([0, kept): their events are
 * complete already), and an offload (or a trim) moves blobs [kept, n) only. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "swap/swap_impl.h"

/* A remote shard's load: its owner reads and copies every blob at the
 * view's offsets. Every blob's event is set once the command has left
 * (swap/peers.h: a step sent from then on reaches the owner after it and
 * waits there blob by blob), with the error when it could not be sent; a
 * failure after that reaches the step from the owner. Nothing is staged
 * here. */
static int loader_load_remote(struct loader *l, struct swap_shard *sh)
{
    const struct swap_peers *r = l->mgr->remote;
    const int nb = sh->st.layout.n_blobs;
    uint64_t *offsets = calloc((size_t)nb + 1, sizeof(uint64_t)), bytes = 0;
    int rc = offsets ? 0 : err_set(ERR_NOMEM, "out of memory");
    for (int b = 0; rc == 0 && b < nb; b++) {
        offsets[b] = sh->st.dev[b] ? dbuf_offset(sh->st.dev[b]) : UINT64_MAX;
        bytes += sh->st.dev[b] ? sh->st.layout.blob_bytes[b] : 0;
    }
    struct swap_peer_load *sent = NULL;
    if (rc == 0)
        rc = r->load_send(r->ctx, sh->model, sh, offsets, &sent);
    free(offsets);
    if (rc < 0) /* before the events: a forward that sees one failed reads it */
        snprintf(sh->st.load_error, sizeof(sh->st.load_error), "%s", err_msg());
    for (int b = 0; b < nb; b++)
        device_event_signal(sh->st.ready[b], rc < 0 ? rc : 0);
    if (rc == 0 && (rc = r->load_wait(r->ctx, sent)) < 0)
        snprintf(sh->st.load_error, sizeof(sh->st.load_error), "%s", err_msg());
    /* the owner read its checkpoint and copied to its device */
    if (rc == 0)
        swap_count_bytes(l->mgr, bytes, bytes, 0);
    return rc;
}

static int loader_load(struct loader *l, struct swap_shard *sh, bool to_device)
{
    /* with expert blobs, the holes among the kept ones too (the blobs
     * there already have complete events: store_shard_load passes them) */
    const int n_dense = sh->st.layout.n_dense;
    const int first = !to_device                                          ? 0
                      : sh->st.layout.n_experts > 0 && n_dense < sh->kept ? n_dense
                                                                          : sh->kept;
    if (first == sh->st.layout.n_blobs) /* a partly resident model's shard that kept every blob */
        return 0;
    if (sh->remote) /* a prefetch has nothing to stage here */
        return to_device ? loader_load_remote(l, sh) : 0;
    /* swap_load (swap_prefetch_host) reserved the host bytes of every copy
     * the shard lacks */
    struct store_load how = {.mode = STORE_HOST_RESERVED, .to_device = to_device};
    int rc = store_shard_load(&l->ld, &sh->st, first, &how);
    swap_count_bytes(l->mgr, how.disk, how.h2d, 0);
    return rc;
}

/* The expert blobs placed on demand (swap_experts_request): every one
 * armed, in order, each from its host copy (made when the tier has room,
 * else staged) or the checkpoint, with its event. A step may place and
 * arm more of the shard's expert blobs meanwhile (under the manager's
 * lock, which it holds from placing to arming): one this run sees placed
 * is copied only after blob_source took that lock, so never before its
 * event was reset; one it passed is taken by the run posted again
 * (xjob_again). */
static int loader_experts(struct loader *l, struct swap_shard *sh)
{
    struct swap_manager *mgr = l->mgr;
    pthread_mutex_lock(&mgr->lock);
    sh->xjob_state = XJOB_RUNNING;
    pthread_mutex_unlock(&mgr->lock);
    struct tier_room r = {.mgr = mgr, .keep = sh->model};
    struct store_drop drop = {
        .droppable = swap_tier_droppable, .dropped = swap_tier_dropped, .arg = &r};
    struct store_load how = {.mode = STORE_HOST_IF_ROOM, .how = &drop, .to_device = true};
    int rc = store_shard_load(&l->ld, &sh->st, sh->st.layout.n_dense, &how);
    swap_count_bytes(mgr, how.disk, how.h2d, 0);
    return rc;
}

/* Copies the leaving blobs ([kept, n) on the device) the host lacks back
 * to it; the manager frees their device memory when this ends. */
static int loader_offload(struct loader *l, struct swap_shard *sh)
{
    if (sh->remote) {
        const struct swap_peers *r = l->mgr->remote;
        return r->offload(r->ctx, sh->model, sh);
    }
    struct device *dev = l->mgr->devices[l->device];
    uint64_t d2h = 0, left = 0;
    int rc = 0;
    for (int b = sh->kept; b < sh->st.layout.n_blobs; b++) {
        size_t n = sh->st.layout.blob_bytes[b];
        if (sh->st.host[b] || !sh->st.dev[b])
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
        if ((rc = device_copy_d2h(dev, p, sh->st.dev[b], 0, n, NULL)) < 0) {
            device_host_free(dev, p, n);
            left += n;
            continue;
        }
        device_sync(dev);
        d2h += n;
        store_host_set(&sh->st, b, p);
    }
    if (left) {
        pthread_mutex_lock(&l->mgr->lock);
        store_tier_unreserve(&l->mgr->tier, left);
        pthread_mutex_unlock(&l->mgr->lock);
    }
    swap_count_bytes(l->mgr, 0, 0, d2h);
    return rc;
}

/* The loader thread's run (core/workq.h): one shard's job, then its end
 * for the manager (which takes the manager's lock). */
static void loader_run(struct workq_item *item, void *arg)
{
    struct loader *l = arg;
    struct shard_job *job = queue_data(item, struct shard_job, item);
    struct swap_shard *sh = job->sh;
    enum loader_kind kind = (enum loader_kind)job->kind;
    int rc = kind == LOADER_OFFLOAD   ? loader_offload(l, sh)
             : kind == LOADER_EXPERTS ? loader_experts(l, sh)
                                      : loader_load(l, sh, kind == LOADER_LOAD);
    swap_shard_done(l->mgr, sh, kind, rc);
}

static const struct workq_ops loader_ops = {.run = loader_run};

int loader_start(struct loader *l, struct swap_manager *mgr, int device)
{
    l->mgr = mgr;
    l->device = device;
    return store_loader_start(&l->ld, mgr->devices[device], device, &loader_ops, l);
}

/* Runs what is still queued, then joins (a stop drains). */
void loader_stop(struct loader *l)
{
    store_loader_stop(&l->ld);
}

void loader_submit(struct loader *l, struct swap_shard *sh, enum loader_kind kind)
{
    struct shard_job *job = kind == LOADER_EXPERTS ? &sh->xjob : &sh->job;
    job->sh = sh;
    job->kind = kind;
    workq_post(&l->ld.q, &job->item);
}
