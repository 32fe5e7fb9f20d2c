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
#include "model/adapter.h"
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

/* A compute lane of a device: a thread (a core/workq.h work queue) running
 * the shard tasks of one class of groups, in the order they were queued. */
struct lane {
    struct workers *w;
    int device;
    bool started;
    struct workq q;
};

/* The groups spanning one set of processes (key: bit p % 64 for each other
 * process p holding a shard; 0: this process alone). Each class has its own
 * order and its own lane on every device, so a step waiting for a silent
 * process (in a collective, or in its sending) holds up only the groups
 * that span that process: the others' lanes and order are their own. */
struct lane_class {
    uint64_t key;
    /* makes a class's multi-device submissions atomic: the tasks of two of
     * its forwards are in the same order on every lane, and their steps
     * leave for the other processes in that order, so their collectives
     * pair up. The lanes of two classes never wait for each other: two
     * classes share no lane, and every process runs every step in the one
     * order its commands left in (leader.h), which agrees with each
     * class's order, so no cycle of waits forms across classes. */
    pthread_mutex_t order;
    struct lane lane[EVICT_MAX_DEVICES]; /* started when first used */
};

enum { MAX_CLASSES = 16 }; /* further sets of processes share the last class */

struct workers {
    struct swap_manager *mgr;
    int n;
    /* guards n_classes (classes are only added); never held across a post */
    pthread_mutex_t classes_lock;
    int n_classes;
    struct lane_class cls[MAX_CLASSES]; /* [0]: key 0, every lane started */
};

struct group_exec {
    const struct swap_model *model;
    struct swap_manager *mgr;         /* its manager: a step's experts come on demand there */
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
    uint64_t procs_key;               /* struct lane_class's key of the processes it spans */
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
    gb->mgr = mgr;
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
    for (int i = 0; i < gb->n_shards; i++) {
        const struct swap_shard *sh = swap_model_shard(model, i);
        if (!shard_is_remote(mgr, sh))
            continue;
        gb->remote = swap_peers_of(mgr);
        int proc = device_proc(swap_device(mgr, swap_shard_device(sh)));
        gb->procs_key |= 1ull << (proc % 64);
    }
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

int group_exec_lora_rank(const struct group_exec *gb)
{
    return gb_shape(gb)->max_lora_rank;
}

int group_exec_set_adapters(struct group_exec *gb, struct swap_model *const *per)
{
    const int B = gb_shape(gb)->batch;
    const struct model *shard_of[B];
    for (int i = 0; i < gb->n_shards; i++) {
        if (!gb->ex[i])
            continue;
        bool any = false;
        for (int b = 0; b < B; b++) {
            shard_of[b] = per && per[b] ? swap_shard_model(swap_model_shard(per[b], i)) : NULL;
            any |= shard_of[b] != NULL;
        }
        int rc = model_exec_set_adapters(gb->ex[i], any ? shard_of : NULL);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int group_exec_routed(const struct group_exec *gb, uint64_t *out)
{
    int experts = 0;
    for (int i = 0; i < gb->n_shards && !experts; i++)
        if (gb->ex[i])
            model_exec_routed(gb->ex[i], &experts);
    if (!experts || !out)
        return experts;
    const int n_layers = swap_model_info(gb->model)->n_layers;
    memset(out, 0, (size_t)n_layers * experts * sizeof(*out));
    for (int st = 0, begin = 0; st < gb->pp; st++) {
        /* a shard's blobs: the embeddings and head, then its layers */
        const int layers = swap_shard_n_dense_blobs(swap_model_shard(gb->model, st * gb->tp)) - 1;
        for (int r = 0; r < gb->tp; r++) {
            const struct model_exec *ex = gb->ex[st * gb->tp + r];
            int e = 0;
            const uint64_t *c = ex ? model_exec_routed(ex, &e) : NULL;
            if (!c || e != experts || begin + layers > n_layers)
                continue;
            memcpy(out + (size_t)begin * experts, c, (size_t)layers * experts * sizeof(*c));
            break;
        }
        begin += layers;
    }
    return experts;
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
        .mgr = swap_model_expert_residency(gb->model) ? gb->mgr : NULL,
        .shard = sh,
    };
    return shard_step_run(&st);
}

/* The compute thread's setup, before its first task (core/workq.h). */
static void worker_thread_init(void *arg)
{
    struct lane *ln = arg;
    device_compute_thread_init(swap_device(ln->w->mgr, ln->device));
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

/* Starts lane ln of class c on device d; ERR_NOMEM naming it when it
 * cannot be started. */
static int lane_start(struct workers *w, int c, int d)
{
    struct lane *ln = &w->cls[c].lane[d];
    ln->w = w;
    ln->device = d;
    char name[24]; /* workq_init keeps 15 characters */
    if (c == 0)
        snprintf(name, sizeof(name), "compute-%d", d);
    else
        snprintf(name, sizeof(name), "compute-%d.%d", d, c);
    if (workq_init(&ln->q, name, &worker_ops, ln) < 0)
        return err_set(ERR_NOMEM, "cannot start the compute thread %s of device %d", name, d);
    ln->started = true;
    return 0;
}

int workers_create(struct swap_manager *mgr, struct workers **out)
{
    *out = NULL;
    struct workers *w = calloc(1, sizeof(*w));
    if (!w)
        return err_set(ERR_NOMEM, "out of memory");
    w->mgr = mgr;
    pthread_mutex_init(&w->classes_lock, NULL);
    for (int c = 0; c < MAX_CLASSES; c++)
        pthread_mutex_init(&w->cls[c].order, NULL);
    w->n_classes = 1;
    w->n = swap_device_count(mgr);
    for (int d = 0; d < w->n; d++) {
        int rc = lane_start(w, 0, d);
        if (rc < 0) {
            workers_destroy(w);
            return rc;
        }
    }
    *out = w;
    return 0;
}

/* Each lane's queue drains (tasks of a forward in flight still run), then
 * its thread is joined. */
void workers_destroy(struct workers *w)
{
    if (!w)
        return;
    for (int c = 0; c < MAX_CLASSES; c++) {
        for (int d = 0; d < w->n; d++)
            if (w->cls[c].lane[d].started)
                workq_free(&w->cls[c].lane[d].q);
        pthread_mutex_destroy(&w->cls[c].order);
    }
    pthread_mutex_destroy(&w->classes_lock);
    free(w);
}

/* The class of groups spanning the processes of key (made when new; the
 * last one when every class is taken). */
static struct lane_class *class_of(struct workers *w, uint64_t key, int *index)
{
    pthread_mutex_lock(&w->classes_lock);
    int c = 0;
    while (c < w->n_classes && w->cls[c].key != key)
        c++;
    if (c == w->n_classes && c < MAX_CLASSES) {
        w->cls[c].key = key;
        w->n_classes++;
    } else if (c == w->n_classes) {
        c = MAX_CLASSES - 1;
    }
    pthread_mutex_unlock(&w->classes_lock);
    *index = c;
    return &w->cls[c];
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
     * queued on the class's lanes: every process sees the steps of a class
     * in one order (struct lane_class) */
    struct swap_peer_step *far = NULL;
    int far_rc = 0, ci;
    struct lane_class *cls = class_of(w, gb->procs_key, &ci);
    pthread_mutex_lock(&cls->order);
    for (int i = 0; i < gb->n_shards && far_rc == 0; i++) {
        int d = swap_shard_device(swap_model_shard(gb->model, i));
        if (gb->ex[i] && !cls->lane[d].started)
            far_rc = lane_start(w, ci, d); /* its message is far_msg's below */
    }
    if (gb->remote_open && far_rc == 0)
        far_rc = gb->remote->step_send(gb->remote->ctx, gb->remote_id, ids, mask, sh->batch,
                                       t_new, all_positions, overlap, &far);
    for (int i = 0; i < gb->n_shards && far_rc == 0; i++) {
        if (!gb->ex[i])
            continue;
        tasks[i] = (struct shard_task){.gb = gb, .shard = i, .ids = ids, .mask = mask,
                                       .t_new = t_new, .all_positions = all_positions,
                                       .overlap = overlap, .logits = logits, .call = &call};
        workq_post(&cls->lane[swap_shard_device(swap_model_shard(gb->model, i))].q, &tasks[i].item);
    }
    pthread_mutex_unlock(&cls->order);
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
