/* cluster/follower.h: the command loop, the models and batches it holds,
 * and a step over this process's shards. */
#include "cluster/follower.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/device.h"
#include "cluster/proto.h"
#include "comm/comm.h"
#include "comm/mpi.h"
#include "core/error.h"
#include "core/membw.h"
#include "core/workq.h"
#include "engine/stack.h"
#include "format/safetensors.h"
#include "model/model.h"

enum { MAX_MODELS = 256, MAX_BATCHES = 256, MAX_DEVICES = 64 };

/* One of this process's shards of a registered model. */
struct fshard {
    int index, stage, rank, device;
    struct model *m;
    struct model_layout layout;
    struct dbuf **blobs; /* (layout.n_blobs) while loaded */
    bool loaded;
    /* the host tier: blob b's copy in host memory, NULL where absent; kept
     * after an offload, so the next load is a copy, not a read of the
     * checkpoint; dropped least recently loaded first for room */
    void **host;
    uint64_t last_load; /* the follower's clock at its last load */
};

struct fmodel {
    bool used;
    uint32_t id;
    struct model_config *cfg;
    struct st_checkpoint *ck;
    int tp, pp;
    int devices[PROTO_MAX_SHARDS]; /* shard i on job device devices[i] */
    struct fshard sh[PROTO_MAX_SHARDS];
    int n_local;
};

/* A step's task on one local shard, run on its device's queue. */
struct ftask {
    struct workq_item item;
    struct fbatch *b;
    int local; /* index into the batch's shards */
};

struct fbatch {
    bool used;
    uint64_t id;
    struct fmodel *m;
    struct model_exec_shape shape;           /* as BATCH_OPEN gave it */
    struct model_exec *ex[PROTO_MAX_SHARDS]; /* per local shard */
    struct model_stage_io io[PROTO_MAX_SHARDS];
    struct comm_group *group[PROTO_MAX_SHARDS]; /* per stage, when we hold a rank */
    /* per sender shard i: the channel to shard i + tp, when an end is here
     * (one mailbox when both are) */
    struct comm_channel *chan[PROTO_MAX_SHARDS];
    /* the step in progress */
    const struct proto_msg *cmd;
    float *logits;
    int rc[PROTO_MAX_SHARDS];
    char msg[PROTO_MAX_SHARDS][256];
    struct ftask task[PROTO_MAX_SHARDS];
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int pending;
};

struct follower {
    struct mpi_world *w;
    int me, ctl_tag, n_devices;
    struct device *dev[MAX_DEVICES];
    int proc_of[MAX_DEVICES];
    struct workq q[MAX_DEVICES]; /* the local devices' compute threads */
    bool q_open[MAX_DEVICES];
    bool owns_devices; /* opened by DEVICES (closed by END), not the caller's */
    struct fmodel models[MAX_MODELS];
    struct fbatch batches[MAX_BATCHES];
    atomic_bool stop; /* follower_stop: process 0 is gone */
    /* a load's staging buffer, kept and grown to the largest blob: a fresh
     * one per blob cost a page fault per 4 KiB (loads ran at 2 GB/s) */
    void *stage;
    size_t stage_cap;
    /* the host tier's bytes in use and its budget (DEVICES: process 0's
     * host budget, the same on every process), and a clock of loads */
    uint64_t host_used, host_budget, clock;
    uint64_t loads, load_bytes, disk_bytes; /* blobs loaded, their bytes, bytes read */
};

/* ---- answers ---- */

static int send_msg(struct follower *f, const struct proto_msg *m)
{
    struct strbuf b = {0};
    int rc = proto_encode(m, &b);
    if (rc == 0)
        rc = mpi_world_send(f->w, 0, f->ctl_tag, b.p, b.len);
    strbuf_free(&b);
    return rc;
}

static int reply(struct follower *f, const struct proto_msg *cmd, int status)
{
    struct proto_msg r = {.kind = PROTO_REPLY,
                          .seq = cmd->seq,
                          .status = status,
                          .message = status < 0 ? (char *)err_msg() : ""};
    return send_msg(f, &r);
}

/* ---- models ---- */

static struct fmodel *model_find(struct follower *f, uint32_t id)
{
    for (int i = 0; i < MAX_MODELS; i++)
        if (f->models[i].used && f->models[i].id == id)
            return &f->models[i];
    err_set(ERR_INVALID, "process %d: no model %u is registered here", f->me, id);
    return NULL;
}

static void shard_unload(struct fshard *s)
{
    for (int b = 0; s->blobs && b < s->layout.n_blobs; b++) {
        device_free(s->blobs[b]);
        s->blobs[b] = NULL;
    }
    s->loaded = false;
}

/* Frees s's host copies, giving their bytes back to the host tier. */
static void shard_drop_host(struct follower *f, struct fshard *s)
{
    for (int b = 0; s->host && b < s->layout.n_blobs; b++) {
        if (!s->host[b])
            continue;
        free(s->host[b]);
        s->host[b] = NULL;
        f->host_used -= s->layout.blob_bytes[b];
    }
}

static void model_drop(struct follower *f, struct fmodel *fm)
{
    for (int i = 0; i < fm->n_local; i++) {
        shard_unload(&fm->sh[i]);
        shard_drop_host(f, &fm->sh[i]);
        free(fm->sh[i].host);
        free(fm->sh[i].blobs);
        model_close(fm->sh[i].m);
        model_layout_free(&fm->sh[i].layout);
    }
    st_close(fm->ck);
    model_config_free(fm->cfg);
    memset(fm, 0, sizeof *fm);
}

/* True when a batch of fm is open (its shards' weights are in use). */
static bool model_busy(struct follower *f, const struct fmodel *fm)
{
    for (int i = 0; i < MAX_BATCHES; i++)
        if (f->batches[i].used && f->batches[i].m == fm)
            return true;
    return false;
}

static int do_register(struct follower *f, const struct proto_msg *c)
{
    for (int i = 0; i < MAX_MODELS; i++)
        if (f->models[i].used && f->models[i].id == c->model)
            return err_set(ERR_INVALID, "process %d: model %u is registered already", f->me,
                           c->model);
    struct fmodel *fm = NULL;
    for (int i = 0; i < MAX_MODELS && !fm; i++)
        if (!f->models[i].used)
            fm = &f->models[i];
    if (!fm)
        return err_set(ERR_BUSY, "process %d: %d models registered already", f->me, MAX_MODELS);
    for (uint32_t i = 0; i < c->n_devices; i++)
        if (c->devices[i] < 0 || c->devices[i] >= f->n_devices)
            return err_set(ERR_INVALID, "model %s: device %d is not a device of the job", c->name,
                           c->devices[i]);
    *fm = (struct fmodel){.used = true, .id = c->model, .tp = (int)c->tp, .pp = (int)c->pp};
    int rc = model_config_load(c->path, &fm->cfg);
    if (rc == 0)
        rc = st_open(c->path, &fm->ck);
    const int L = fm->cfg ? fm->cfg->info.n_layers : 0;
    for (int i = 0; rc == 0 && i < fm->tp * fm->pp; i++) {
        fm->devices[i] = c->devices[i];
        if (!f->dev[c->devices[i]])
            continue;
        struct fshard *s = &fm->sh[fm->n_local++];
        *s = (struct fshard){
            .index = i, .stage = i / fm->tp, .rank = i % fm->tp, .device = c->devices[i]};
        struct model_shard spec = {.tp_rank = s->rank,
                                   .tp_size = fm->tp,
                                   .layer_begin = L * s->stage / fm->pp,
                                   .layer_end = L * (s->stage + 1) / fm->pp};
        rc = model_shard_open(fm->cfg, fm->ck, &spec, &s->m, &s->layout);
        if (rc == 0 && (!(s->blobs = calloc((size_t)s->layout.n_blobs, sizeof *s->blobs)) ||
                        !(s->host = calloc((size_t)s->layout.n_blobs, sizeof *s->host))))
            rc = err_set(ERR_NOMEM, "out of memory");
        bool kc_set = false;
        enum kern_compute kc;
        if (rc == 0 && (rc = kern_compute_choice(c->compute, &kc_set, &kc)) == 0 && kc_set)
            model_layout_set_compute(s->m, &s->layout, kc);
    }
    if (rc < 0) {
        err_wrap(rc, "process %d: model %s", f->me, c->name);
        model_drop(f, fm);
    }
    return rc;
}

static struct fshard *local_shard(struct fmodel *fm, uint32_t index)
{
    for (int i = 0; i < fm->n_local; i++)
        if (fm->sh[i].index == (int)index)
            return &fm->sh[i];
    return NULL;
}

/* Room for need more bytes in the host tier: the host copies of other
 * shards dropped, least recently loaded first (keep's are kept). */
static bool host_make_room(struct follower *f, const struct fshard *keep, uint64_t need)
{
    while (f->host_used + need > f->host_budget) {
        struct fshard *victim = NULL;
        for (int i = 0; i < MAX_MODELS; i++)
            for (int k = 0; f->models[i].used && k < f->models[i].n_local; k++) {
                struct fshard *c = &f->models[i].sh[k];
                bool has = false;
                for (int b = 0; c->host && b < c->layout.n_blobs && !has; b++)
                    has = c->host[b] != NULL;
                if (has && c != keep && (!victim || c->last_load < victim->last_load))
                    victim = c;
            }
        if (!victim)
            return false;
        shard_drop_host(f, victim);
    }
    return true;
}

/* Where blob b of s comes from: its host copy, made now from the checkpoint
 * when the host tier has room for it, else the staging buffer filled. */
static int blob_source(struct follower *f, struct fmodel *fm, struct fshard *s, int b,
                       const void **src)
{
    size_t n = s->layout.blob_bytes[b];
    if (s->host[b]) {
        *src = s->host[b];
        return 0;
    }
    void *dst = NULL;
    if (host_make_room(f, s, n) && (dst = malloc(n)) != NULL) {
        int rc = model_shard_fill(s->m, &s->layout, fm->ck, b, dst);
        if (rc < 0) {
            free(dst);
            return rc;
        }
        s->host[b] = dst;
        f->host_used += n;
        f->disk_bytes += n;
        *src = dst;
        return 0;
    }
    if (n > f->stage_cap) {
        void *p = realloc(f->stage, n);
        if (!p)
            return err_set(ERR_NOMEM, "out of memory for a blob of %zu bytes", n);
        f->stage = p, f->stage_cap = n;
    }
    *src = f->stage;
    f->disk_bytes += n;
    return model_shard_fill(s->m, &s->layout, fm->ck, b, f->stage);
}

/* Blob b of s at offset off of its device: from its host copy (read from
 * the checkpoint first when there is none), copied in, bound. */
static int load_blob(struct follower *f, struct fmodel *fm, struct fshard *s, int b, uint64_t off)
{
    size_t n = s->layout.blob_bytes[b];
    if (n == 0)
        return 0;
    struct device *dev = f->dev[s->device];
    s->last_load = ++f->clock;
    const void *host = NULL;
    int rc = device_alloc_at(dev, off, n, &s->blobs[b]);
    if (rc == 0)
        rc = blob_source(f, fm, s, b, &host);
    struct device_event *ev = NULL;
    if (rc == 0 && (rc = device_event_create(dev, &ev)) == 0 &&
        (rc = device_copy_h2d(dev, s->blobs[b], 0, host, n, ev)) == 0)
        rc = device_event_wait(ev);
    device_event_destroy(ev);
    if (rc == 0) {
        model_shard_bind(s->m, &s->layout, b, dbuf_ptr(s->blobs[b]));
        f->loads++;
        f->load_bytes += n;
    }
    return rc;
}

/* True when every blob of s with bytes is on its device. */
static bool shard_complete(const struct fshard *s)
{
    for (int b = 0; b < s->layout.n_blobs; b++)
        if (s->layout.blob_bytes[b] > 0 && !s->blobs[b])
            return false;
    return true;
}

/* A LOAD may name some shards only (rank 0 loads a model's shards here by
 * one command each, or all in one): a shard is loaded once all its blobs
 * are, and a failure unloads the shards this command named, not those
 * loaded before. */
static int do_load(struct follower *f, const struct proto_msg *c)
{
    struct fmodel *fm = model_find(f, c->model);
    if (!fm)
        return ERR_INVALID;
    bool named[PROTO_MAX_SHARDS] = {0}; /* by local index */
    int rc = 0;
    for (uint32_t i = 0; i < c->n_places && rc == 0; i++) {
        struct fshard *s = local_shard(fm, c->places[i].shard);
        if (!s || c->places[i].blob >= (uint32_t)s->layout.n_blobs || s->blobs[c->places[i].blob]) {
            rc = err_set(ERR_INVALID,
                         "process %d: load of model %u names shard %u blob %u, "
                         "which is not one of its unloaded blobs here",
                         f->me, c->model, c->places[i].shard, c->places[i].blob);
            break;
        }
        named[s - fm->sh] = true;
        rc = load_blob(f, fm, s, (int)c->places[i].blob, c->places[i].offset);
    }
    for (int i = 0; i < fm->n_local; i++) {
        if (!named[i])
            continue;
        if (rc < 0)
            shard_unload(&fm->sh[i]);
        else
            fm->sh[i].loaded = shard_complete(&fm->sh[i]);
    }
    return rc;
}

/* ---- batches ---- */

static struct fbatch *batch_find(struct follower *f, uint64_t id)
{
    for (int i = 0; i < MAX_BATCHES; i++)
        if (f->batches[i].used && f->batches[i].id == id)
            return &f->batches[i];
    err_set(ERR_INVALID, "process %d: no batch %llu is open here", f->me, (unsigned long long)id);
    return NULL;
}

static void batch_close(struct fbatch *b)
{
    for (int i = 0; b->m && i < b->m->n_local; i++)
        model_exec_free(b->ex[i]);
    for (int i = 0; i < PROTO_MAX_SHARDS; i++) {
        comm_group_destroy(b->group[i]);
        comm_channel_destroy(b->chan[i]);
    }
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->cond);
    memset(b, 0, sizeof *b);
}

/* The TP group of each stage we hold a rank of, and the PP channels with
 * an end here: tags as rank 0 gave them. */
static int batch_wire(struct follower *f, struct fbatch *b, const struct proto_msg *c)
{
    struct fmodel *fm = b->m;
    const int tp = fm->tp, pp = fm->pp;
    if ((int)c->n_group_tags != pp || (int)c->n_channel_tags != (pp - 1) * tp)
        return err_set(ERR_INVALID, "batch %llu: %u group and %u channel tags for %d x %d shards",
                       (unsigned long long)c->batch, c->n_group_tags, c->n_channel_tags, tp, pp);
    int rc = 0;
    for (int s = 0; s < pp && rc == 0; s++) {
        int proc_of[PROTO_MAX_SHARDS];
        bool mine = false;
        for (int r = 0; r < tp; r++) {
            proc_of[r] = f->proc_of[fm->devices[s * tp + r]];
            mine |= proc_of[r] == f->me;
        }
        if (tp > 1 && mine)
            rc = comm_group_create_mpi(f->w, tp, proc_of, c->group_tags[s], &b->group[s]);
    }
    for (int i = 0; i < (pp - 1) * tp && rc == 0; i++) {
        int from = f->proc_of[fm->devices[i]], to = f->proc_of[fm->devices[i + tp]];
        if (from == f->me && to == f->me)
            rc = comm_channel_create(&b->chan[i]);
        else if (from == f->me || to == f->me)
            rc = comm_channel_create_mpi(f->w, from == f->me ? to : from, c->channel_tags[i],
                                         &b->chan[i]);
    }
    return rc;
}

static int do_batch_open(struct follower *f, const struct proto_msg *c)
{
    struct fmodel *fm = model_find(f, c->model);
    if (!fm)
        return ERR_INVALID;
    struct fbatch *b = NULL;
    for (int i = 0; i < MAX_BATCHES && !b; i++)
        if (!f->batches[i].used)
            b = &f->batches[i];
    if (!b)
        return err_set(ERR_BUSY, "process %d: %d batches open already", f->me, MAX_BATCHES);
    *b = (struct fbatch){.used = true, .id = c->batch, .m = fm};
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->cond, NULL);
    struct model_exec_shape shape = {.batch = (int)c->batch_size,
                                     .max_len = (int)c->max_len,
                                     .max_tokens = (int)c->max_tokens,
                                     .max_rows = (int)c->max_rows};
    b->shape = shape;
    int rc = batch_wire(f, b, c);
    for (int i = 0; i < fm->n_local && rc == 0; i++) {
        const struct fshard *s = &fm->sh[i];
        const struct proto_place *p = NULL;
        for (uint32_t k = 0; k < c->n_places; k++)
            if (c->places[k].shard == (uint32_t)s->index)
                p = &c->places[k];
        if (!p) {
            rc = err_set(ERR_INVALID, "batch %llu: no context offset for shard %d",
                         (unsigned long long)c->batch, s->index);
            break;
        }
        struct comm *tpc = b->group[s->stage] ? comm_group_rank(b->group[s->stage], s->rank) : NULL;
        rc = model_exec_init_at(s->m, f->dev[s->device], tpc, &shape, p->offset, &b->ex[i]);
        int tp = fm->tp;
        b->io[i] = (struct model_stage_io){
            .in = s->stage > 0 ? b->chan[s->index - tp] : NULL,
            .out = s->stage < fm->pp - 1 ? b->chan[s->index] : NULL,
        };
    }
    if (rc < 0)
        batch_close(b);
    return rc;
}

static void step_run(struct workq_item *item, void *arg)
{
    (void)arg;
    struct ftask *t = queue_data(&item->node, struct ftask, item.node);
    struct fbatch *b = t->b;
    const struct proto_msg *c = b->cmd;
    const struct fshard *s = &b->m->sh[t->local];
    int wait_rc = 0;
    int rc = model_forward_stage(s->m, b->ex[t->local], &b->io[t->local], c->ids,
                                 c->n_mask ? c->mask : NULL, (int)c->t_new,
                                 c->flags & PROTO_STEP_ALL_POSITIONS, b->logits, &wait_rc);
    if (rc < 0) {
        snprintf(b->msg[t->local], sizeof b->msg[0], "%s", err_msg());
        for (int g = 0; g < b->m->pp; g++) /* the other local shards return */
            if (b->group[g])
                comm_group_abort(b->group[g], rc);
        for (int i = 0; i < PROTO_MAX_SHARDS; i++)
            if (b->chan[i])
                comm_channel_abort(b->chan[i], rc);
    }
    pthread_mutex_lock(&b->lock);
    b->rc[t->local] = rc;
    if (--b->pending == 0)
        pthread_cond_signal(&b->cond);
    pthread_mutex_unlock(&b->lock);
}

/* What must hold before b's step runs; its error otherwise. n_logits: the
 * floats this process answers with. */
static int step_check(struct follower *f, struct fbatch *b, const struct proto_msg *c,
                      uint32_t *n_logits)
{
    struct fmodel *fm = b->m;
    for (int i = 0; i < fm->n_local; i++)
        if (!fm->sh[i].loaded)
            return err_set(ERR_INVALID,
                           "process %d: batch %llu: shard %d of model %u is not loaded", f->me,
                           (unsigned long long)c->batch, fm->sh[i].index, fm->id);
    bool holder = false;
    for (int i = 0; i < fm->n_local; i++)
        holder |= fm->sh[i].stage == fm->pp - 1 && fm->sh[i].rank == 0;
    int batch = b->shape.batch; /* a process without shards of the model answers too */
    if (c->n_ids != (uint32_t)batch * c->t_new)
        return err_set(ERR_INVALID, "batch %llu: %u ids for %d sequences of %u tokens",
                       (unsigned long long)c->batch, c->n_ids, batch, c->t_new);
    uint32_t rows = (uint32_t)batch * (c->flags & PROTO_STEP_ALL_POSITIONS ? c->t_new : 1);
    *n_logits = holder ? rows * (uint32_t)fm->cfg->info.vocab : 0;
    return 0;
}

/* Runs the step on every local shard at once and waits; the first error. */
static int step_run_all(struct follower *f, struct fbatch *b, const struct proto_msg *c)
{
    struct fmodel *fm = b->m;
    b->cmd = c;
    b->pending = fm->n_local;
    for (int i = 0; i < fm->n_local; i++) {
        b->task[i] = (struct ftask){.b = b, .local = i};
        workq_post(&f->q[fm->sh[i].device], &b->task[i].item);
    }
    pthread_mutex_lock(&b->lock);
    while (b->pending > 0)
        pthread_cond_wait(&b->cond, &b->lock);
    pthread_mutex_unlock(&b->lock);
    for (int i = 0; i < fm->n_local; i++)
        if (b->rc[i] < 0)
            return err_set(b->rc[i], "process %d, shard %d: %s", f->me, fm->sh[i].index, b->msg[i]);
    return 0;
}

/* A STEP is always answered with a STEP_DONE (an error in it when the step
 * could not run); 1: answered. */
static int do_step(struct follower *f, const struct proto_msg *c)
{
    struct fbatch *b = batch_find(f, c->batch);
    uint32_t n_logits = 0;
    int rc = b ? step_check(f, b, c, &n_logits) : ERR_INVALID;
    if (rc == 0 && n_logits && !(b->logits = malloc(sizeof(float) * n_logits)))
        rc = err_set(ERR_NOMEM, "out of memory for %u logits", n_logits);
    if (rc == 0)
        rc = step_run_all(f, b, c);
    struct proto_msg done = {.kind = PROTO_STEP_DONE,
                             .seq = c->seq,
                             .batch = c->batch,
                             .status = rc,
                             .message = rc < 0 ? (char *)err_msg() : "",
                             .logits = rc == 0 && b ? b->logits : NULL,
                             .n_logits = rc == 0 ? n_logits : 0};
    int sent = send_msg(f, &done);
    if (b) {
        free(b->logits);
        b->logits = NULL;
    }
    return sent < 0 ? sent : 1;
}

/* ---- the devices of a stack ---- */

static void compute_init(void *arg)
{
    device_compute_thread_init(arg);
}

static const struct workq_ops compute_ops = {.thread_init = compute_init, .run = step_run};

/* The local devices' compute threads. */
static int queues_start(struct follower *f)
{
    for (int d = 0; d < f->n_devices; d++) {
        if (!f->dev[d])
            continue;
        char name[24];
        snprintf(name, sizeof name, "compute-%d", d);
        /* the queue's arg is its device; a task finds its batch itself */
        if (workq_init(&f->q[d], name, &compute_ops, f->dev[d]) < 0)
            return err_set(ERR_NOMEM, "process %d: cannot start the compute thread of device %d",
                           f->me, d);
        f->q_open[d] = true;
    }
    return 0;
}

/* Every batch, model and compute thread; the devices too when DEVICES
 * opened them. */
static void stack_end(struct follower *f)
{
    for (int i = 0; i < MAX_BATCHES; i++)
        if (f->batches[i].used)
            batch_close(&f->batches[i]);
    for (int i = 0; i < MAX_MODELS; i++)
        if (f->models[i].used)
            model_drop(f, &f->models[i]);
    for (int d = 0; d < MAX_DEVICES; d++) {
        if (f->q_open[d])
            workq_free(&f->q[d]);
        f->q_open[d] = false;
        if (f->owns_devices)
            device_close(f->dev[d]);
        f->dev[d] = NULL;
    }
    f->owns_devices = false;
    f->n_devices = 0;
}

/* DEVICES: this process's devices of the next stack, opened as process 0's
 * config says (a GPU's partitions counted on this node). */
static int do_devices(struct follower *f, const struct proto_msg *c)
{
    if (f->n_devices > 0)
        return err_set(ERR_BUSY, "process %d: a stack's devices are open already (END first)",
                       f->me);
    /* process 0's config as far as opening devices goes: the stack opens
     * its own the same way (stack_device_open) */
    struct stack_config sc = {.device_kind = c->dev_kind == PROTO_DEVICE_CUDA ? "cuda" : "cpu",
                              .n_devices = (int)c->n_devs,
                              .gpus_set = true,
                              .procs_set = true,
                              .link_gbps = c->link_gbps};
    int rc = 0;
    f->n_devices = (int)c->n_devs;
    f->owns_devices = true;
    f->host_budget = c->host_budget;
    for (int d = 0; d < f->n_devices; d++) {
        sc.gpus[d] = c->devs[d].gpu;
        sc.procs[d] = f->proc_of[d] = c->devs[d].proc;
    }
    for (int d = 0; d < f->n_devices && rc == 0; d++)
        if (c->devs[d].proc == f->me)
            rc = stack_device_open(&sc, d, c->devs[d].budget, &f->dev[d]);
    if (rc == 0)
        rc = queues_start(f);
    if (rc < 0) {
        err_wrap(rc, "process %d", f->me);
        stack_end(f);
    }
    return rc;
}

/* STATS: this process's numbers (proto.h's PROTO_STAT_* order), the
 * host's copy speed measured when asked. Always answered with STATS_DONE;
 * 1: answered. */
static int do_stats(struct follower *f, const struct proto_msg *c)
{
    double v[PROTO_STAT_END] = {0};
    if (c->flags & PROTO_STATS_MEASURE) {
        int t = c->threads > 0 ? (int)c->threads : 1;
        size_t bytes = c->bytes ? (size_t)c->bytes : (size_t)64 << 20;
        v[PROTO_STAT_MEMCPY_BPS] = membw_memcpy(t, bytes, 5);
        v[PROTO_STAT_STREAM_BPS] = membw_stream(t, bytes, 5);
    }
    v[PROTO_STAT_HOST_USED] = (double)f->host_used;
    v[PROTO_STAT_HOST_BUDGET] = (double)f->host_budget;
    v[PROTO_STAT_LOADS] = (double)f->loads;
    v[PROTO_STAT_LOAD_BYTES] = (double)f->load_bytes;
    v[PROTO_STAT_DISK_BYTES] = (double)f->disk_bytes;
    struct proto_msg done = {.kind = PROTO_STATS_DONE,
                             .seq = c->seq,
                             .message = "",
                             .stats = v,
                             .n_stats = PROTO_STAT_END};
    int sent = send_msg(f, &done);
    return sent < 0 ? sent : 1;
}

/* ---- the loop ---- */

/* Carries out c: 0 or 1 (answered already), or its error. */
static int handle(struct follower *f, const struct proto_msg *c)
{
    struct fmodel *fm;
    struct fbatch *b;
    switch (c->kind) {
    case PROTO_REGISTER:
        return do_register(f, c);
    case PROTO_UNREGISTER:
        if (!(fm = model_find(f, c->model)))
            return ERR_INVALID;
        if (model_busy(f, fm))
            return err_set(ERR_BUSY, "process %d: model %u has a batch open", f->me, c->model);
        model_drop(f, fm);
        return 0;
    case PROTO_LOAD:
        return do_load(f, c);
    case PROTO_OFFLOAD:
        if (!(fm = model_find(f, c->model)))
            return ERR_INVALID;
        if (model_busy(f, fm))
            return err_set(ERR_BUSY, "process %d: model %u has a batch open", f->me, c->model);
        for (int i = 0; i < fm->n_local; i++)
            shard_unload(&fm->sh[i]);
        return 0;
    case PROTO_BATCH_OPEN:
        return do_batch_open(f, c);
    case PROTO_BATCH_CLEAR:
        if (!(b = batch_find(f, c->batch)))
            return ERR_INVALID;
        for (int i = 0; i < b->m->n_local; i++)
            if (c->slot < (uint32_t)b->ex[i]->shape.batch)
                model_exec_clear_slot(b->ex[i], (int)c->slot);
        return 0;
    case PROTO_BATCH_CLOSE:
        if (!(b = batch_find(f, c->batch)))
            return ERR_INVALID;
        batch_close(b);
        return 0;
    case PROTO_STEP:
        return do_step(f, c);
    case PROTO_DEVICES:
        return do_devices(f, c);
    case PROTO_END:
        stack_end(f);
        return 0;
    case PROTO_STATS:
        return do_stats(f, c);
    default:
        return err_set(ERR_INVALID, "process %d: %s is not a command", f->me,
                       proto_kind_name(c->kind));
    }
}

int follower_serve(struct follower *f)
{
    for (;;) {
        void *p = NULL;
        size_t n = 0;
        int rc = mpi_world_recv_unless(f->w, 0, f->ctl_tag, &f->stop, &p, &n);
        if (rc == ERR_CANCELLED)
            return err_set(ERR_UNREACHABLE, "process %d: process 0 stopped answering; leaving", f->me);
        if (rc < 0)
            return rc;
        struct proto_msg c;
        rc = proto_decode(p, n, &c);
        free(p);
        if (rc < 0) { /* nothing to answer: the sequence number is unknown */
            fprintf(stderr, "shardswap: process %d: %s\n", f->me, err_msg());
            continue;
        }
        if (c.kind == PROTO_SHUTDOWN) {
            rc = reply(f, &c, 0);
            proto_msg_free(&c);
            return rc;
        }
        rc = handle(f, &c);
        if (rc <= 0 && (rc = reply(f, &c, rc)) < 0) {
            proto_msg_free(&c);
            return rc;
        }
        proto_msg_free(&c);
    }
}

int follower_create(struct mpi_world *w, struct device *const *devices, const int *proc_of,
                    int n_devices, int ctl_tag, struct follower **out)
{
    *out = NULL;
    if (n_devices < 0 || n_devices > MAX_DEVICES)
        return err_set(ERR_INVALID, "follower: %d devices (0..%d)", n_devices, MAX_DEVICES);
    struct follower *f = calloc(1, sizeof *f);
    if (!f)
        return err_set(ERR_NOMEM, "out of memory");
    f->w = w;
    atomic_init(&f->stop, false);
    f->me = mpi_world_proc(w);
    f->ctl_tag = ctl_tag;
    f->n_devices = n_devices;
    for (int d = 0; d < n_devices; d++) {
        f->dev[d] = devices[d];
        f->proc_of[d] = proc_of[d];
    }
    int rc = queues_start(f);
    if (rc < 0) {
        follower_destroy(f);
        return rc;
    }
    *out = f;
    return 0;
}

void follower_stop(struct follower *f)
{
    atomic_store(&f->stop, true);
}

void follower_destroy(struct follower *f)
{
    if (!f)
        return;
    stack_end(f);
    free(f->stage);
    free(f);
}
