#include "engine/workers.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/error.h"
#include "core/workq.h"
#include "engine/step.h"
#include "swap/peers.h"

struct fwd_call; /* one group_forward: a countdown over its shard tasks */

struct shard_task {
    struct group_exec *gb;
    int shard;
    const int32_t *ids;
    const uint8_t *mask;
    int t_new;
    bool all_positions, overlap;
    float *logits;
    struct fwd_call *call;
    struct workq_item item; /* in its device's queue */
};

/* Guarded by lock; the caller reads rc and msg after remaining reaches 0. */
struct fwd_call {
    pthread_mutex_t lock;
    pthread_cond_t done;
    int remaining, rc;
    char msg[512]; /* the first failed shard's err_msg(), taken on its thread */
};

/* A device's compute thread: a work queue (core/workq.h) of shard tasks. */
struct worker {
    struct workers *w;
    int device;
    struct workq q;
};

struct workers {
    struct swap_manager *mgr;
    /* makes multi-device submissions atomic: the tasks of two forwards are
     * in the same order on every device, so their collectives pair up */
    pthread_mutex_t order;
    int n;
    struct worker dev[EVICT_MAX_DEVICES];
};

struct group_exec {
    const struct swap_model *model;
    int n_shards, tp, pp;             /* the model's, so freeing gb reads nothing of it */
    struct model_exec_shape shape;    /* resolved, as every shard's context has it */
    int len;                          /* positions filled (every context's len) */
    struct model_exec **ex;           /* (n_shards) on each shard's device; NULL for a
                                       * remote shard */
    /* with shards on other processes' devices (swap/peers.h): their
     * contexts' placements on the views, and the batch's name there */
    const struct swap_peers *remote;
    struct dbuf **placed;             /* (n_shards) NULL for this process's shards */
    uint64_t remote_id;
    bool remote_open;
    struct comm_group **stage_group;  /* (pp) NULL when tp is 1 */
    struct comm_channel **chan;       /* ((pp - 1) * tp): stage s rank r -> stage s + 1 rank r */
    atomic_int failed;                /* 0, or the error of the step that failed on it */
};

/* The batch's shape, defaults resolved: every shard's context has it. */
static const struct model_exec_shape *gb_shape(const struct group_exec *gb)
{
    return &gb->shape;
}

static bool shard_is_remote(struct swap_manager *mgr, const struct swap_shard *sh)
{
    return device_proc(swap_device(mgr, swap_shard_device(sh))) > 0;
}

/* The contexts of the remote shards placed on their views, then the batch
 * opened on the other processes, which also makes this process's ends of
 * the stage groups and channels. */
static int group_exec_open_remote(struct swap_manager *mgr, struct group_exec *gb,
                                  const struct model_exec_shape *shape)
{
    gb->placed = calloc((size_t)gb->n_shards, sizeof(*gb->placed));
    uint64_t *offsets = calloc((size_t)gb->n_shards, sizeof(*offsets));
    int rc = gb->placed && offsets ? 0 : err_set(ERR_NOMEM, "out of memory");
    for (int i = 0; rc == 0 && i < gb->n_shards; i++) {
        const struct swap_shard *sh = swap_model_shard(gb->model, i);
        if (!shard_is_remote(mgr, sh))
            continue;
        struct device *dev = swap_device(mgr, swap_shard_device(sh));
        size_t bytes = model_exec_bytes(swap_shard_model(sh), dev, shape);
        if (bytes == 0)
            rc = err_set(ERR_INVALID, "a batch of %d x %d positions fits no device", shape->batch,
                         shape->max_len);
        else if ((rc = device_alloc(dev, bytes, &gb->placed[i])) < 0)
            rc = err_set(rc, "device %s: no room for a batch's %zu bytes", device_name(dev),
                         bytes);
        else
            offsets[i] = dbuf_offset(gb->placed[i]);
    }
    if (rc == 0 && (rc = gb->remote->batch_open(gb->remote->ctx, gb->model, &gb->shape, offsets,
                                                gb->stage_group, gb->chan, &gb->remote_id)) == 0)
        gb->remote_open = true;
    free(offsets);
    return rc;
}

/* ---- the batch state ---- */

uint64_t group_exec_bytes(const struct swap_model *model, struct swap_manager *mgr,
                          const struct model_exec_shape *shape, int device)
{
    uint64_t bytes = 0;
    for (int i = 0; i < swap_model_shard_count(model); i++) {
        const struct swap_shard *sh = swap_model_shard(model, i);
        if (swap_shard_device(sh) != device)
            continue;
        size_t b = model_exec_bytes(swap_shard_model(sh), swap_device(mgr, device), shape);
        if (b == 0)
            return UINT64_MAX;
        bytes += (b + 63) / 64 * 64;
    }
    return bytes;
}

int group_exec_create(struct swap_manager *mgr, const struct swap_model *model,
                      const struct model_exec_shape *shape, struct group_exec **out)
{
    *out = NULL;
    struct group_exec *gb = calloc(1, sizeof(*gb));
    if (!gb)
        return err_set(ERR_NOMEM, "out of memory");
    gb->model = model;
    atomic_init(&gb->failed, 0);
    gb->tp = swap_model_tp(model);
    gb->pp = swap_model_pp(model);
    gb->n_shards = gb->tp * gb->pp;
    gb->ex = calloc((size_t)gb->n_shards, sizeof(*gb->ex));
    gb->stage_group = calloc((size_t)gb->pp, sizeof(*gb->stage_group));
    gb->chan = calloc((size_t)(gb->pp * gb->tp), sizeof(*gb->chan));
    int rc = 0;
    if (!gb->ex || !gb->stage_group || !gb->chan) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (!model_exec_shape_resolve(shape, &gb->shape)) {
        rc = err_set(ERR_INVALID, "a batch of %d x %d positions is not a shape", shape->batch,
                     shape->max_len);
        goto fail;
    }
    for (int i = 0; i < gb->n_shards; i++)
        if (shard_is_remote(mgr, swap_model_shard(model, i)))
            gb->remote = swap_peers_of(mgr);
    if (gb->remote && (rc = group_exec_open_remote(mgr, gb, shape)) < 0)
        goto fail;
    for (int s = 0; s < gb->pp && gb->tp > 1 && !gb->remote; s++) {
        struct device *devs[EVICT_MAX_DEVICES];
        for (int r = 0; r < gb->tp; r++)
            devs[r] = swap_device(mgr, swap_shard_device(swap_model_shard(model, s * gb->tp + r)));
        if ((rc = comm_group_create(devs, gb->tp, &gb->stage_group[s])) < 0)
            goto fail;
    }
    for (int i = 0; i < (gb->pp - 1) * gb->tp && !gb->remote; i++)
        if ((rc = comm_channel_create(&gb->chan[i])) < 0)
            goto fail;
    for (int i = 0; i < gb->n_shards; i++) {
        const struct swap_shard *sh = swap_model_shard(model, i);
        if (gb->placed && gb->placed[i])
            continue;
        struct comm *tp = gb->tp > 1 ? comm_group_rank(gb->stage_group[swap_shard_stage(sh)],
                                                       swap_shard_rank(sh))
                                     : NULL;
        if ((rc = model_exec_init(swap_shard_model(sh), swap_device(mgr, swap_shard_device(sh)), tp,
                                shape, &gb->ex[i])) < 0)
            goto fail;
    }
    *out = gb;
    return 0;
fail:
    group_exec_free(gb);
    return rc;
}

int group_exec_failed(const struct group_exec *gb)
{
    return atomic_load(&gb->failed);
}

/* Marks gb failed and aborts its stage groups and channels, so every shard
 * waiting in a collective or a receive (or about to) returns rc. Called on
 * the failing shard's thread, before its task counts as done (gb is alive). */
static void group_exec_abort(struct group_exec *gb, int rc)
{
    int none = 0;
    if (!atomic_compare_exchange_strong(&gb->failed, &none, rc))
        return;
    if (gb->remote_open) /* the other processes' shards may wait on these */
        gb->remote->batch_abort(gb->remote->ctx, gb->remote_id, rc);
    for (int s = 0; s < gb->pp; s++)
        if (gb->stage_group[s])
            comm_group_abort(gb->stage_group[s], rc);
    for (int i = 0; i < (gb->pp - 1) * gb->tp; i++)
        if (gb->chan[i])
            comm_channel_abort(gb->chan[i], rc);
}

void group_exec_clear_slot(struct group_exec *gb, int b)
{
    for (int i = 0; i < gb->n_shards; i++)
        if (gb->ex[i])
            model_exec_clear_slot(gb->ex[i], b);
    /* a failure is the other process's to tell (its log), and the next
     * step's to report */
    if (gb->remote_open)
        (void)gb->remote->batch_clear(gb->remote->ctx, gb->remote_id, b);
}

int group_exec_room(const struct group_exec *gb)
{
    return gb_shape(gb)->max_len - gb->len;
}

int group_exec_max_step(const struct group_exec *gb)
{
    return gb_shape(gb)->max_tokens / gb_shape(gb)->batch;
}

void group_exec_free(struct group_exec *gb)
{
    if (!gb)
        return;
    for (int i = 0; gb->ex && i < gb->n_shards; i++)
        model_exec_free(gb->ex[i]);
    for (int s = 0; gb->stage_group && s < gb->pp; s++)
        comm_group_destroy(gb->stage_group[s]);
    for (int i = 0; gb->chan && i < gb->pp * gb->tp; i++)
        comm_channel_destroy(gb->chan[i]);
    /* closed there before its placements here are freed (and placed again) */
    if (gb->remote_open)
        gb->remote->batch_close(gb->remote->ctx, gb->remote_id);
    for (int i = 0; gb->placed && i < gb->n_shards; i++)
        device_free(gb->placed[i]);
    free(gb->placed);
    free(gb->ex);
    free(gb->stage_group);
    free(gb->chan);
    free(gb);
}

/* ---- one shard's part of a forward, on its device's thread ---- */

static int task_run(struct shard_task *t)
{
    /* the shard: fixed while its model is registered, read without a lock */
    struct group_exec *gb = t->gb;
    const struct swap_shard *sh = swap_model_shard(gb->model, t->shard);
    const int stage = swap_shard_stage(sh), rank = swap_shard_rank(sh), tp = gb->tp;
    char who[96];
    snprintf(who, sizeof(who), "model %s stage %d rank %d", swap_model_name(gb->model), stage,
             rank);
    const struct shard_step st = {
        .sh = swap_shard_store(sh),
        .ex = gb->ex[t->shard],
        .in = stage > 0 ? gb->chan[(stage - 1) * tp + rank] : NULL,
        .out = stage < gb->pp - 1 ? gb->chan[stage * tp + rank] : NULL,
        .ids = t->ids,
        .mask = t->mask,
        .t_new = t->t_new,
        .all_positions = t->all_positions,
        .overlap = t->overlap,
        .logits = t->logits,
        .who = who,
    };
    return shard_step_run(&st);
}

/* The compute thread's setup, before its first task (core/workq.h). */
static void worker_thread_init(void *arg)
{
    struct worker *wk = arg;
    device_compute_thread_init(swap_device(wk->w->mgr, wk->device));
}

/* One shard task, on its device's thread; the forward's countdown last
 * (the caller may free the task once it reaches 0). */
static void worker_run(struct workq_item *item, void *arg)
{
    (void)arg;
    struct shard_task *t = queue_data(item, struct shard_task, item);
    int rc = task_run(t);
    struct fwd_call *c = t->call;
    if (rc < 0) {
        /* the message first (err_msg() is this thread's), then the abort,
         * whose errors on the other shards come second */
        pthread_mutex_lock(&c->lock);
        if (c->rc == 0) {
            c->rc = rc;
            snprintf(c->msg, sizeof(c->msg), "%s", err_msg());
        }
        pthread_mutex_unlock(&c->lock);
        group_exec_abort(t->gb, rc);
    }
    pthread_mutex_lock(&c->lock);
    if (--c->remaining == 0)
        pthread_cond_signal(&c->done);
    pthread_mutex_unlock(&c->lock);
}

static const struct workq_ops worker_ops = {.thread_init = worker_thread_init,
                                            .run = worker_run};

int workers_create(struct swap_manager *mgr, struct workers **out)
{
    *out = NULL;
    struct workers *w = calloc(1, sizeof(*w));
    if (!w)
        return err_set(ERR_NOMEM, "out of memory");
    w->mgr = mgr;
    pthread_mutex_init(&w->order, NULL);
    for (int d = 0; d < swap_device_count(mgr); d++) {
        struct worker *wk = &w->dev[d];
        wk->w = w;
        wk->device = d;
        char name[24]; /* workq_init keeps 15 characters */
        snprintf(name, sizeof(name), "compute-%d", d);
        if (workq_init(&wk->q, name, &worker_ops, wk) < 0) {
            workers_destroy(w);
            return err_set(ERR_NOMEM, "cannot start the compute thread of device %d", d);
        }
        w->n = d + 1;
    }
    *out = w;
    return 0;
}

/* Each device's queue drains (tasks of a forward in flight still run), then
 * its thread is joined. */
void workers_destroy(struct workers *w)
{
    if (!w)
        return;
    for (int d = 0; d < w->n; d++)
        workq_free(&w->dev[d].q);
    pthread_mutex_destroy(&w->order);
    free(w);
}

int group_forward(struct workers *w, struct group_exec *gb, const int32_t *ids, const uint8_t *mask,
                  int t_new, bool all_positions, bool overlap, float *logits)
{
    int local = 0;
    for (int i = 0; i < gb->n_shards; i++)
        local += gb->ex[i] != NULL;
    struct fwd_call call = {.remaining = local};
    int failed = group_exec_failed(gb);
    if (failed < 0)
        return err_set(failed,
                       "the batch failed in an earlier step (%s) and its state is lost; "
                       "it runs no more steps",
                       err_name(failed));
    /* the step's size before any task is queued: refused here, it leaves
     * the batch usable (a shard refusing it would fail the batch) */
    const struct model_exec_shape *sh = gb_shape(gb);
    if (t_new < 1 || (long)sh->batch * t_new > sh->max_tokens)
        return err_set(ERR_INVALID, "a step of %d x %d tokens exceeds the %d the batch was sized "
                                    "for", sh->batch, t_new, sh->max_tokens);
    if (all_positions && sh->batch * t_new > sh->max_rows)
        return err_set(ERR_INVALID, "%d rows of logits exceed the %d the batch was sized for",
                       sh->batch * t_new, sh->max_rows);
    struct shard_task *tasks = calloc((size_t)gb->n_shards, sizeof(*tasks));
    if (!tasks)
        return err_set(ERR_NOMEM, "out of memory for the tasks of a forward");
    /* a remote shard's step must reach its owner after its LOAD: its
     * loader here sets every blob's event once that has left (the owner
     * then waits blob by blob), in order, so the last blob's says it
     * (waited for here, before the order lock) */
    for (int i = 0; gb->placed && i < gb->n_shards; i++) {
        if (!gb->placed[i])
            continue;
        const struct swap_shard *rs = swap_model_shard(gb->model, i);
        int rc = device_event_wait(swap_shard_blob_ready(rs, swap_shard_n_blobs(rs) - 1));
        if (rc < 0) {
            free(tasks);
            return err_set(rc, "model %s stage %d rank %d: its weights did not load: %s",
                           swap_model_name(gb->model), swap_shard_stage(rs), swap_shard_rank(rs),
                           swap_shard_load_error(rs)[0] ? swap_shard_load_error(rs)
                                                        : err_name(rc));
        }
    }
    pthread_mutex_init(&call.lock, NULL);
    pthread_cond_init(&call.done, NULL);
    /* the other processes' part leaves in the same order as this one's is
     * queued: every process sees the steps of all models in one order */
    struct swap_peer_step *far = NULL;
    int far_rc = 0;
    pthread_mutex_lock(&w->order);
    if (gb->remote_open)
        far_rc = gb->remote->step_send(gb->remote->ctx, gb->remote_id, ids, mask, sh->batch,
                                       t_new, all_positions, overlap, &far);
    for (int i = 0; i < gb->n_shards && far_rc == 0; i++) {
        if (!gb->ex[i])
            continue;
        tasks[i] = (struct shard_task){.gb = gb, .shard = i, .ids = ids, .mask = mask,
                                       .t_new = t_new, .all_positions = all_positions,
                                       .overlap = overlap, .logits = logits, .call = &call};
        struct worker *wk = &w->dev[swap_shard_device(swap_model_shard(gb->model, i))];
        workq_post(&wk->q, &tasks[i].item);
    }
    pthread_mutex_unlock(&w->order);
    /* the other processes' answer first: when it fails (a process lost, its
     * shard's error) this process's shards may be waiting for theirs in a
     * collective, and the abort sets them free */
    char far_msg[512] = "";
    if (far) {
        size_t rows = (size_t)sh->batch * (size_t)(all_positions ? t_new : 1), got = 0;
        size_t n = rows * (size_t)swap_model_info(gb->model)->vocab;
        far_rc = gb->remote->step_wait(gb->remote->ctx, far, logits, n, &got);
        if (far_rc == 0 && got != 0 && got != n)
            far_rc = err_set(ERR_INVALID, "%zu logits came back for %zu", got, n);
        if (far_rc < 0) {
            snprintf(far_msg, sizeof(far_msg), "%s", err_msg());
            /* the other processes' contexts are out of step with these now */
            group_exec_abort(gb, far_rc);
        }
    } else if (far_rc < 0) {
        snprintf(far_msg, sizeof(far_msg), "%s", err_msg());
    }
    pthread_mutex_lock(&call.lock);
    while ((far || far_rc == 0) && call.remaining > 0) /* none queued when the send failed */
        pthread_cond_wait(&call.done, &call.lock);
    pthread_mutex_unlock(&call.lock);
    pthread_mutex_destroy(&call.lock);
    pthread_cond_destroy(&call.done);
    free(tasks);
    if (far_rc < 0)
        return err_set(far_rc, "model %s: %s", swap_model_name(gb->model), far_msg);
    if (call.rc < 0)
        return err_set(call.rc, "%s", call.msg); /* on the caller's thread */
    gb->len += t_new;
    return 0;
}
