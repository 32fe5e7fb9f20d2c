/* cluster/follower.h: the command loop, the models and batches it holds;
 * a command adapter over the shard store (swap/store.h) and the shard step
 * (engine/step.h), with no host tier, loader or step of its own. */
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
#include "engine/step.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "swap/store.h"

enum { MAX_MODELS = 256, MAX_BATCHES = 256, MAX_DEVICES = 64 };

/* One of this process's shards of a registered model: its blobs in the
 * shard store (swap/store.h) and what the commands know of it.
 *
 * Who touches what: st.dev[] and the events' arming are the command
 * thread's (a LOAD places a shard's blobs and arms them before its loader
 * copies into them, an OFFLOAD frees them once the loader is done); the
 * loader signals the events; st.host[], st.stamp, loading and queued are
 * under the follower's lock (the host tier is shared by every device's
 * loader). */
struct follower_shard {
    int index, stage, rank, device;
    struct store_shard st;
    bool loaded;  /* every blob with bytes placed (its copies may be under way) */
    bool queued;  /* a LOAD's job for it is posted and has not ended */
    bool loading; /* its job runs: its host copies stay */
};

struct follower_model {
    bool used;
    uint32_t id;
    struct model_config *cfg;
    struct st_checkpoint *ck;
    int tp, pp;
    int devices[PROTO_MAX_SHARDS]; /* shard i on job device devices[i] */
    struct follower_shard sh[PROTO_MAX_SHARDS];
    int n_local;
};

/* A step's task on one local shard, run on its device's queue. */
struct follower_task {
    struct workq_item item;
    struct follower_batch *b;
    int local; /* index into the batch's shards */
};

struct follower_batch {
    bool used;
    uint64_t id;
    struct follower_model *m;
    struct model_exec_shape shape;           /* as BATCH_OPEN gave it */
    struct model_exec *ex[PROTO_MAX_SHARDS]; /* per local shard */
    struct model_stage_io io[PROTO_MAX_SHARDS];
    struct comm_group *group[PROTO_MAX_SHARDS]; /* per stage, when we hold a rank */
    /* per sender shard i: the channel to shard i + tp, when an end is here
     * (one mailbox when both are) */
    struct comm_channel *chan[PROTO_MAX_SHARDS];
    /* the step in flight: its command (taken over from the command
     * thread), answered by the last of its tasks to end */
    struct proto_msg step;
    float *logits;
    int rc[PROTO_MAX_SHARDS];
    char msg[PROTO_MAX_SHARDS][256];
    struct follower_task task[PROTO_MAX_SHARDS];
    pthread_mutex_t lock;
    pthread_cond_t cond; /* busy went false */
    int pending;         /* tasks not yet ended */
    bool busy;           /* a step in flight (until its answer has left) */
};

/* Compute lanes per device: one per class of models, a class being the
 * set of processes a model's shards span; past this many classes the last
 * lane is shared. */
#define FOLLOWER_LANES 8

/* One of this process's devices: its compute lanes (threads running the
 * steps of its shards: one per class, each in the order its steps came)
 * and its loader (LOADs of its shards, in order), beside each other and
 * the command thread. A step waiting on a silent process (in a collective
 * or a channel) holds up only the steps of its class here, never those of
 * a model that spans no such process, as on process 0 (engine/workers.c).
 * Within a class every process runs the steps in the order process 0 sent
 * them, and two classes share no lane, so no cycle of waits forms. */
struct follower_device {
    struct follower *f;
    int index;
    struct {
        uint64_t key; /* bit p: a shard on process p (mod 64) */
        struct workq q;
    } lane[FOLLOWER_LANES]; /* [0] started with the device; the others at a class's first step */
    int n_lanes, n_started; /* lanes with a class, lanes with a thread (the command thread's) */
    struct store_loader loader;
    bool open;
};

/* One LOAD: a job per shard it names, on that shard's device's loader;
 * the last job to end answers it. */
struct follower_load_job {
    struct workq_item item;
    struct follower_load *load;
    struct follower_shard *s;
};

struct follower_load {
    struct follower_model *fm;
    uint64_t seq;
    struct proto_place *places; /* the command's, taken over */
    uint32_t n_places;
    int remaining, rc; /* under the follower's lock */
    char msg[560];     /* the first failure's */
    int n_jobs;
    struct follower_load_job jobs[PROTO_MAX_SHARDS];
};

struct follower {
    struct mpi_world *w;
    int me, ctl_tag, n_devices;
    struct device *dev[MAX_DEVICES];
    int proc_of[MAX_DEVICES];
    struct follower_device threads[MAX_DEVICES]; /* the local devices' threads */
    bool owns_devices; /* opened by DEVICES (closed by END), not the caller's */
    struct follower_model models[MAX_MODELS];
    struct follower_batch batches[MAX_BATCHES];
    atomic_bool stop; /* follower_stop: process 0 is gone */
    /* guards the host tier (every shard's host copies, stamp, loading and
     * queued), the counters below and the LOADs' remaining */
    pthread_mutex_t lock;
    /* the host tier; its budget is process 0's host budget (DEVICES), the
     * same on every process. clock: of loads, the tier's LRU order */
    struct store_tier tier;
    struct store_drop drop; /* a shard's copies may go unless it is loading */
    uint64_t clock;
    uint64_t loads, load_bytes, disk_bytes; /* blobs loaded, their bytes, bytes read */
    uint64_t overlapped;                    /* shard steps begun while that shard was loading */
};

/* ---- answers ---- */

/* Any thread: the world's progress thread sends it; given up once process 0
 * is known to be gone. */
static int send_encoded(struct follower *f, struct strbuf *b)
{
    int rc = mpi_world_send_unless(f->w, 0, f->ctl_tag, b->p, b->len, &f->stop);
    if (rc != ERR_CANCELLED) /* given up, MPI may still read the bytes: leaked */
        strbuf_free(b);
    return rc;
}

static int send_msg(struct follower *f, const struct proto_msg *m)
{
    struct strbuf b = {0};
    int rc = proto_encode(m, &b);
    if (rc < 0) {
        strbuf_free(&b);
        return rc;
    }
    return send_encoded(f, &b);
}

static int reply_status(struct follower *f, uint64_t seq, int status, const char *msg)
{
    struct proto_msg r = {.kind = PROTO_REPLY,
                          .seq = seq,
                          .status = status,
                          .message = status < 0 ? (char *)msg : ""};
    return send_msg(f, &r);
}

static int reply(struct follower *f, const struct proto_msg *cmd, int status)
{
    return reply_status(f, cmd->seq, status, err_msg());
}

/* ---- models ---- */

static struct follower_model *model_find(struct follower *f, uint32_t id)
{
    for (int i = 0; i < MAX_MODELS; i++)
        if (f->models[i].used && f->models[i].id == id)
            return &f->models[i];
    err_set(ERR_INVALID, "process %d: no model %u is registered here", f->me, id);
    return NULL;
}

/* Waits until the loaders of fm's devices have run every job posted so far
 * (command thread). */
static void model_loads_wait(struct follower *f, const struct follower_model *fm)
{
    for (int i = 0; i < fm->n_local; i++)
        if (f->threads[fm->sh[i].device].open)
            workq_sync(&f->threads[fm->sh[i].device].loader.q);
}

/* Frees s's device blobs (no loader copies into them: model_loads_wait first). */
static void shard_unload(struct follower_shard *s)
{
    store_blobs_release(&s->st, 0);
    s->loaded = false;
}

/* Forgets fm (nothing of it in flight: no batch, model_loads_wait). */
static void model_drop(struct follower_model *fm)
{
    for (int i = 0; i < fm->n_local; i++) {
        shard_unload(&fm->sh[i]);
        store_shard_free(&fm->sh[i].st); /* its host copies too */
    }
    st_close(fm->ck);
    model_config_free(fm->cfg);
    memset(fm, 0, sizeof *fm);
}

/* True when a batch of fm is open (its shards' weights are in use). */
static bool model_busy(struct follower *f, const struct follower_model *fm)
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
    struct follower_model *fm = NULL;
    for (int i = 0; i < MAX_MODELS && !fm; i++)
        if (!f->models[i].used)
            fm = &f->models[i];
    if (!fm)
        return err_set(ERR_BUSY, "process %d: %d models registered already", f->me, MAX_MODELS);
    for (uint32_t i = 0; i < c->n_devices; i++)
        if (c->devices[i] < 0 || c->devices[i] >= f->n_devices)
            return err_set(ERR_INVALID, "model %s: device %d is not a device of the job", c->name,
                           c->devices[i]);
    *fm = (struct follower_model){.used = true, .id = c->model, .tp = (int)c->tp, .pp = (int)c->pp};
    int rc = model_config_load(c->path, &fm->cfg);
    if (rc == 0)
        rc = st_open(c->path, &fm->ck);
    const int L = fm->cfg ? fm->cfg->info.n_layers : 0;
    for (int i = 0; rc == 0 && i < fm->tp * fm->pp; i++) {
        fm->devices[i] = c->devices[i];
        if (!f->dev[c->devices[i]])
            continue;
        struct follower_shard *s = &fm->sh[fm->n_local++];
        *s = (struct follower_shard){
            .index = i, .stage = i / fm->tp, .rank = i % fm->tp, .device = c->devices[i]};
        struct model_shard spec = {.tp_rank = s->rank,
                                   .tp_size = fm->tp,
                                   .layer_begin = L * s->stage / fm->pp,
                                   .layer_end = L * (s->stage + 1) / fm->pp,
                                   .expert_parallel = c->expert_parallel != 0};
        rc = store_shard_init(&s->st, &f->tier, f->dev[s->device], fm, c->name, fm->cfg, fm->ck,
                              &spec);
        bool kc_set = false;
        enum kern_compute kc;
        if (rc == 0 && (rc = kern_compute_choice(c->compute, &kc_set, &kc)) == 0 && kc_set)
            model_layout_set_compute(s->st.m, &s->st.layout, kc);
    }
    if (rc < 0) {
        err_wrap(rc, "process %d: model %s", f->me, c->name);
        model_drop(fm);
        return rc;
    }
    return 0;
}

static struct follower_shard *local_shard(struct follower_model *fm, uint32_t index)
{
    for (int i = 0; i < fm->n_local; i++)
        if (fm->sh[i].index == (int)index)
            return &fm->sh[i];
    return NULL;
}

/* ---- loads ---- */

/* The host tier may drop a shard's copies unless its load runs (under the
 * follower's lock). */
static bool shard_droppable(void *arg, const struct store_shard *st)
{
    (void)arg;
    return !queue_data(st, struct follower_shard, st)->loading;
}

/* A LOAD's job on one shard, on its device's loader: the shard store's
 * copy-in of the blobs the LOAD placed (armed), each from its host copy or
 * read from the checkpoint (a copy kept when the host tier has room, else
 * staged), its event set as it lands (with the error from the first that
 * fails on: the blobs stay placed, garbage, until the OFFLOAD that follows
 * a failed load, as on process 0). The last job of the LOAD answers it. */
static void load_run(struct workq_item *item, void *arg)
{
    struct follower_device *ld = arg;
    struct follower *f = ld->f;
    struct follower_load_job *j = queue_data(&item->node, struct follower_load_job, item.node);
    struct follower_load *load = j->load;
    struct follower_shard *s = j->s;
    pthread_mutex_lock(&f->lock);
    s->loading = true;
    s->st.stamp = ++f->clock;
    pthread_mutex_unlock(&f->lock);
    struct store_load how = {.mode = STORE_HOST_IF_ROOM, .how = &f->drop, .to_device = true};
    int rc = store_shard_load(&ld->loader, &s->st, 0, &how);
    pthread_mutex_lock(&f->lock);
    s->loading = s->queued = false;
    f->loads += (uint64_t)how.blobs;
    f->load_bytes += how.h2d;
    f->disk_bytes += how.disk;
    if (rc < 0 && load->rc == 0) {
        load->rc = rc;
        snprintf(load->msg, sizeof load->msg, "process %d: %s", f->me, s->st.load_error);
    }
    bool last = --load->remaining == 0;
    pthread_mutex_unlock(&f->lock);
    if (!last)
        return;
    if (reply_status(f, load->seq, load->rc, load->msg) < 0)
        fprintf(stderr, "shardswap: process %d: %s\n", f->me, err_msg());
    free(load->places);
    free(load);
}

/* True when every blob of s with bytes is placed. */
static bool shard_complete(const struct follower_shard *s)
{
    for (int b = 0; b < s->st.layout.n_blobs; b++)
        if (s->st.layout.blob_bytes[b] > 0 && !s->st.dev[b])
            return false;
    return true;
}

/* Checks every place of a LOAD before anything is placed. */
static int load_check(struct follower *f, struct follower_model *fm, const struct proto_msg *c)
{
    for (uint32_t i = 0; i < c->n_places; i++) {
        const struct proto_place *p = &c->places[i];
        struct follower_shard *s = local_shard(fm, p->shard);
        bool dup = false;
        for (uint32_t k = 0; k < i && !dup; k++)
            dup = c->places[k].shard == p->shard && c->places[k].blob == p->blob;
        if (!s || p->blob >= (uint32_t)s->st.layout.n_blobs || s->st.dev[p->blob] || dup)
            return err_set(ERR_INVALID,
                           "process %d: load of model %u names shard %u blob %u, "
                           "which is not one of its unloaded blobs here",
                           f->me, c->model, p->shard, p->blob);
        /* one load of a shard at a time: its job copies every blob armed */
        pthread_mutex_lock(&f->lock);
        bool queued = s->queued;
        pthread_mutex_unlock(&f->lock);
        if (queued)
            return err_set(ERR_BUSY, "process %d: shard %u of model %u has a load in flight", f->me,
                           p->shard, c->model);
    }
    return 0;
}

/* A LOAD may name some shards only (process 0 loads a model's shards here
 * by one command each, or all in one): its blobs are placed and bound at
 * once, in the command's order with everything else (so a placement never
 * meets one that a later command frees), and copied by each shard's
 * loader, the LOAD answered when every one has; a STEP may come before
 * that and waits blob by blob. A shard is loaded once all its blobs are
 * placed. 1: it will be answered; else its error (nothing placed). */
static int do_load(struct follower *f, struct proto_msg *c)
{
    struct follower_model *fm = model_find(f, c->model);
    if (!fm)
        return ERR_INVALID;
    int rc = load_check(f, fm, c);
    struct follower_load *load = rc == 0 ? calloc(1, sizeof *load) : NULL;
    if (rc == 0 && !load)
        rc = err_set(ERR_NOMEM, "out of memory");
    uint32_t placed = 0;
    for (; rc == 0 && placed < c->n_places; placed++) {
        const struct proto_place *p = &c->places[placed];
        struct follower_shard *s = local_shard(fm, p->shard);
        size_t n = s->st.layout.blob_bytes[p->blob];
        if (n == 0) /* nothing to place: its event stays set */
            continue;
        if ((rc = device_alloc_at(f->dev[s->device], p->offset, n, &s->st.dev[p->blob])) < 0)
            break;
        store_blob_arm(&s->st, (int)p->blob);
        bool known = false;
        for (int k = 0; k < load->n_jobs && !known; k++)
            known = load->jobs[k].s == s;
        if (!known)
            load->jobs[load->n_jobs++] = (struct follower_load_job){.load = load, .s = s};
    }
    if (rc < 0) { /* this command's placements undone */
        for (uint32_t i = 0; i < placed; i++) {
            struct follower_shard *s = local_shard(fm, c->places[i].shard);
            device_free(s->st.dev[c->places[i].blob]);
            s->st.dev[c->places[i].blob] = NULL;
            device_event_signal(s->st.ready[c->places[i].blob], 0);
        }
        free(load);
        return err_wrap(rc, "process %d: model %u", f->me, c->model);
    }
    for (int k = 0; k < load->n_jobs; k++)
        load->jobs[k].s->loaded = shard_complete(load->jobs[k].s);
    if (load->n_jobs == 0) {
        free(load);
        return 0;
    }
    load->fm = fm;
    load->seq = c->seq;
    load->places = c->places, load->n_places = c->n_places;
    c->places = NULL, c->n_places = 0; /* the load's now */
    const int n_jobs = load->n_jobs;   /* the last job frees load */
    load->remaining = n_jobs;
    pthread_mutex_lock(&f->lock);
    for (int k = 0; k < n_jobs; k++)
        load->jobs[k].s->queued = true;
    pthread_mutex_unlock(&f->lock);
    for (int k = 0; k < n_jobs; k++)
        workq_post(&f->threads[load->jobs[k].s->device].loader.q, &load->jobs[k].item);
    return 1;
}

/* ---- batches ---- */

static struct follower_batch *batch_find(struct follower *f, uint64_t id)
{
    for (int i = 0; i < MAX_BATCHES; i++)
        if (f->batches[i].used && f->batches[i].id == id)
            return &f->batches[i];
    err_set(ERR_INVALID, "process %d: no batch %llu is open here", f->me, (unsigned long long)id);
    return NULL;
}

/* Returns once b has no step in flight (its answer has left). Command thread. */
static void batch_idle(struct follower_batch *b)
{
    pthread_mutex_lock(&b->lock);
    while (b->busy)
        pthread_cond_wait(&b->cond, &b->lock);
    pthread_mutex_unlock(&b->lock);
}

/* b's ends of its collectives and channels aborted with rc: a step of it
 * waiting on a peer returns. Any thread. */
static void batch_abort(struct follower_batch *b, int rc)
{
    for (int g = 0; g < PROTO_MAX_SHARDS; g++)
        if (b->group[g])
            comm_group_abort(b->group[g], rc);
    for (int i = 0; i < PROTO_MAX_SHARDS; i++)
        if (b->chan[i])
            comm_channel_abort(b->chan[i], rc);
}

static void batch_close(struct follower_batch *b)
{
    batch_idle(b);
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
static int batch_wire(struct follower *f, struct follower_batch *b, const struct proto_msg *c)
{
    struct follower_model *fm = b->m;
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
    struct follower_model *fm = model_find(f, c->model);
    if (!fm)
        return ERR_INVALID;
    struct follower_batch *b = NULL;
    for (int i = 0; i < MAX_BATCHES && !b; i++)
        if (!f->batches[i].used)
            b = &f->batches[i];
    if (!b)
        return err_set(ERR_BUSY, "process %d: %d batches open already", f->me, MAX_BATCHES);
    *b = (struct follower_batch){.used = true, .id = c->batch, .m = fm};
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->cond, NULL);
    struct model_exec_shape shape = {.batch = (int)c->batch_size,
                                     .max_len = (int)c->max_len,
                                     .max_tokens = (int)c->max_tokens,
                                     .max_rows = (int)c->max_rows};
    b->shape = shape;
    int rc = batch_wire(f, b, c);
    for (int i = 0; i < fm->n_local && rc == 0; i++) {
        const struct follower_shard *s = &fm->sh[i];
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
        rc = model_exec_init_at(s->st.m, f->dev[s->device], tpc, &shape, p->offset, &b->ex[i]);
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

/* The step's answer, once its last task has ended: STEP_DONE with the first
 * error or the logits. On that task's thread; b is free for the next
 * command before the answer leaves. */
static void step_answer(struct follower *f, struct follower_batch *b)
{
    const struct follower_model *fm = b->m;
    int rc = 0;
    char msg[400] = "";
    for (int i = 0; i < fm->n_local && rc == 0; i++)
        if (b->rc[i] < 0) {
            rc = b->rc[i];
            snprintf(msg, sizeof msg, "process %d, shard %d: %s", f->me, fm->sh[i].index,
                     b->msg[i]);
        }
    struct proto_msg done = {.kind = PROTO_STEP_DONE,
                             .seq = b->step.seq,
                             .batch = b->id,
                             .status = rc,
                             .message = msg,
                             .logits = rc == 0 ? b->logits : NULL,
                             .n_logits = rc == 0 && b->logits ? b->step.n_logits : 0};
    struct strbuf enc = {0};
    int erc = proto_encode(&done, &enc);
    const unsigned long long id = b->id; /* b is the command thread's once not busy */
    free(b->logits);
    b->logits = NULL;
    proto_msg_free(&b->step);
    pthread_mutex_lock(&b->lock);
    b->busy = false;
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
    if (erc == 0)
        erc = send_encoded(f, &enc);
    else
        strbuf_free(&enc);
    if (erc < 0)
        fprintf(stderr, "shardswap: process %d: batch %llu: %s\n", f->me, id, err_msg());
}

/* One shard's part of a step, on its device's compute thread: with
 * overlap, layer by layer as its blobs land; else once all have. */
static void step_run(struct workq_item *item, void *arg)
{
    struct follower *f = ((struct follower_device *)arg)->f;
    struct follower_task *t = queue_data(&item->node, struct follower_task, item.node);
    struct follower_batch *b = t->b;
    const struct proto_msg *c = &b->step;
    struct follower_shard *s = &b->m->sh[t->local];
    const int nb = s->st.layout.n_blobs;
    if (nb > 0 && !device_event_done(s->st.ready[nb - 1])) {
        pthread_mutex_lock(&f->lock);
        f->overlapped++;
        pthread_mutex_unlock(&f->lock);
    }
    const struct shard_step st = {
        .sh = &s->st,
        .ex = b->ex[t->local],
        .in = b->io[t->local].in,
        .out = b->io[t->local].out,
        .ids = c->ids,
        .mask = c->n_mask ? c->mask : NULL,
        .t_new = (int)c->t_new,
        .all_positions = c->flags & PROTO_STEP_ALL_POSITIONS,
        .overlap = c->flags & PROTO_STEP_OVERLAP,
        .logits = b->logits,
    };
    int rc = shard_step_run(&st);
    if (rc < 0) {
        snprintf(b->msg[t->local], sizeof b->msg[0], "%s", err_msg());
        batch_abort(b, rc); /* the other local shards return */
    }
    pthread_mutex_lock(&b->lock);
    b->rc[t->local] = rc;
    bool last = --b->pending == 0;
    pthread_mutex_unlock(&b->lock);
    if (last)
        step_answer(f, b);
}

/* What must hold before b's step runs; its error otherwise. n_logits: the
 * floats this process answers with. */
static int step_check(struct follower *f, struct follower_batch *b, const struct proto_msg *c,
                      uint32_t *n_logits)
{
    struct follower_model *fm = b->m;
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

static const struct workq_ops compute_ops;

/* The set of processes fm's shards are on: bit p for process p (mod 64). */
static uint64_t model_procs(const struct follower *f, const struct follower_model *fm)
{
    uint64_t key = 0;
    for (int i = 0; i < fm->tp * fm->pp; i++)
        key |= 1ull << (f->proc_of[fm->devices[i]] % 64);
    return key;
}

/* Device d's lane for the class key, started at its first step (the
 * command thread); NULL when its thread cannot start. */
static struct workq *lane_of(struct follower *f, int d, uint64_t key)
{
    struct follower_device *t = &f->threads[d];
    int i = 0;
    while (i < t->n_lanes && t->lane[i].key != key)
        i++;
    if (i < t->n_lanes)
        return &t->lane[i].q;
    if (i == FOLLOWER_LANES) /* more classes than lanes: they share the last */
        return &t->lane[i - 1].q;
    if (i < t->n_started) { /* started with the device, no class's yet */
        t->lane[i].key = key;
        t->n_lanes++;
        return &t->lane[i].q;
    }
    char name[24];
    snprintf(name, sizeof name, "compute-%d.%d", d, i);
    if (workq_init(&t->lane[i].q, name, &compute_ops, t) < 0)
        return NULL;
    t->lane[i].key = key;
    t->n_lanes++;
    t->n_started++;
    return &t->lane[i].q;
}

/* A STEP: queued on every local shard's compute lane of its class (after
 * whatever of that class ran there before, in the one global order), the command taken over and
 * answered by the last task to end (step_answer), so the command thread
 * goes on meanwhile: another model's LOAD, its own steps. A step that
 * cannot run is answered with its error at once. 1: answered or will be. */
static int do_step(struct follower *f, struct proto_msg *c)
{
    struct follower_batch *b = batch_find(f, c->batch);
    uint32_t n_logits = 0;
    int rc = b ? step_check(f, b, c, &n_logits) : ERR_INVALID;
    if (rc == 0 && b->busy)
        rc = err_set(ERR_BUSY, "process %d: batch %llu has a step in flight", f->me,
                     (unsigned long long)c->batch);
    if (rc == 0 && n_logits && !(b->logits = malloc(sizeof(float) * n_logits)))
        rc = err_set(ERR_NOMEM, "out of memory for %u logits", n_logits);
    struct workq *lanes[PROTO_MAX_SHARDS];
    for (int i = 0; rc == 0 && b->m && i < b->m->n_local; i++)
        if (!(lanes[i] = lane_of(f, b->m->sh[i].device, model_procs(f, b->m))))
            rc = err_set(ERR_NOMEM, "process %d: cannot start a compute thread of device %d", f->me,
                         b->m->sh[i].device);
    if (rc == 0 && b->m->n_local > 0) {
        b->step = *c;
        b->step.n_logits = n_logits; /* what the answer carries */
        memset(c, 0, sizeof *c);     /* the batch's now */
        b->busy = true;
        b->pending = b->m->n_local;
        for (int i = 0; i < b->m->n_local; i++) {
            b->rc[i] = 0;
            b->task[i] = (struct follower_task){.b = b, .local = i};
        }
        /* every task queued before any can end: the last one's answer
         * finds them all counted */
        for (int i = 0; i < b->m->n_local; i++)
            workq_post(lanes[i], &b->task[i].item);
        return 1;
    }
    struct proto_msg done = {.kind = PROTO_STEP_DONE,
                             .seq = c->seq,
                             .batch = c->batch,
                             .status = rc,
                             .message = rc < 0 ? (char *)err_msg() : ""};
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
    const struct follower_device *d = arg;
    device_compute_thread_init(d->f->dev[d->index]);
}

static const struct workq_ops compute_ops = {.thread_init = compute_init, .run = step_run};
static const struct workq_ops loader_ops = {.run = load_run};

/* The local devices' compute threads and loaders. */
static int queues_start(struct follower *f)
{
    for (int d = 0; d < f->n_devices; d++) {
        if (!f->dev[d])
            continue;
        struct follower_device *t = &f->threads[d];
        *t = (struct follower_device){.f = f, .index = d};
        char name[24];
        snprintf(name, sizeof name, "compute-%d", d);
        if (workq_init(&t->lane[0].q, name, &compute_ops, t) < 0)
            return err_set(ERR_NOMEM, "process %d: cannot start the compute thread of device %d",
                           f->me, d);
        t->n_started = 1; /* the first class to step here takes it */
        int rc = store_loader_start(&t->loader, f->dev[d], d, &loader_ops, t);
        if (rc < 0) {
            workq_free(&t->lane[0].q);
            return err_wrap(rc, "process %d", f->me);
        }
        t->open = true;
    }
    return 0;
}

/* Nothing in flight: every batch still open aborted (process 0 has left
 * it: at END and SHUTDOWN it closed what it uses), so a step of it
 * waiting on a peer returns; then every step's answer and every load's
 * has left, before the answer to the command that asked (END, SHUTDOWN),
 * which process 0 awaits last. */
static void quiesce(struct follower *f)
{
    /* every batch aborted before any is waited for: a step queued on a
     * device behind another batch's step that waits on a peer (process 0
     * gave this process up while it was stopped, and never aborted that
     * step here) ends only once that one is aborted */
    for (int i = 0; i < MAX_BATCHES; i++)
        if (f->batches[i].used)
            batch_abort(&f->batches[i], ERR_CANCELLED);
    for (int i = 0; i < MAX_BATCHES; i++)
        if (f->batches[i].used)
            batch_idle(&f->batches[i]);
    for (int d = 0; d < MAX_DEVICES; d++)
        if (f->threads[d].open)
            workq_sync(&f->threads[d].loader.q);
}

/* Every batch, model, compute thread and loader (quiesced first); the
 * devices too when DEVICES opened them. */
static void stack_end(struct follower *f)
{
    quiesce(f);
    for (int d = 0; d < MAX_DEVICES; d++) {
        struct follower_device *t = &f->threads[d];
        if (t->open) {
            store_loader_stop(&t->loader);
            for (int i = 0; i < t->n_started; i++)
                workq_free(&t->lane[i].q);
        }
        memset(t, 0, sizeof *t);
    }
    for (int i = 0; i < MAX_BATCHES; i++)
        if (f->batches[i].used)
            batch_close(&f->batches[i]);
    for (int i = 0; i < MAX_MODELS; i++)
        if (f->models[i].used)
            model_drop(&f->models[i]);
    for (int d = 0; d < MAX_DEVICES; d++) {
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
    pthread_mutex_lock(&f->lock);
    f->tier.budget = c->host_budget;
    pthread_mutex_unlock(&f->lock);
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
    pthread_mutex_lock(&f->lock);
    v[PROTO_STAT_HOST_USED] = (double)f->tier.used;
    v[PROTO_STAT_HOST_BUDGET] = (double)f->tier.budget;
    v[PROTO_STAT_LOADS] = (double)f->loads;
    v[PROTO_STAT_LOAD_BYTES] = (double)f->load_bytes;
    v[PROTO_STAT_DISK_BYTES] = (double)f->disk_bytes;
    v[PROTO_STAT_OVERLAPPED] = (double)f->overlapped;
    pthread_mutex_unlock(&f->lock);
    struct proto_msg done = {.kind = PROTO_STATS_DONE,
                             .seq = c->seq,
                             .message = "",
                             .stats = v,
                             .n_stats = PROTO_STAT_END};
    int sent = send_msg(f, &done);
    return sent < 0 ? sent : 1;
}

/* ---- the loop ---- */

/* Carries out c: 0, or 1 (answered, or its answer will come from another
 * thread: c's arrays may then be taken over), or its error. */
static int handle(struct follower *f, struct proto_msg *c)
{
    struct follower_model *fm;
    struct follower_batch *b;
    switch (c->kind) {
    case PROTO_REGISTER:
        return do_register(f, c);
    case PROTO_UNREGISTER:
    case PROTO_OFFLOAD:
        if (!(fm = model_find(f, c->model)))
            return ERR_INVALID;
        if (model_busy(f, fm))
            return err_set(ERR_BUSY, "process %d: model %u has a batch open", f->me, c->model);
        model_loads_wait(f, fm);
        if (c->kind == PROTO_UNREGISTER)
            model_drop(fm);
        for (int i = 0; c->kind == PROTO_OFFLOAD && i < fm->n_local; i++)
            shard_unload(&fm->sh[i]);
        return 0;
    case PROTO_LOAD:
        return do_load(f, c);
    case PROTO_BATCH_OPEN:
        return do_batch_open(f, c);
    case PROTO_BATCH_CLEAR:
        if (!(b = batch_find(f, c->batch)))
            return ERR_INVALID;
        batch_idle(b);
        for (int i = 0; i < b->m->n_local; i++)
            if (c->slot < (uint32_t)model_exec_batch(b->ex[i]))
                model_exec_clear_slot(b->ex[i], (int)c->slot);
        return 0;
    case PROTO_BATCH_CLOSE:
        if (!(b = batch_find(f, c->batch)))
            return ERR_INVALID;
        batch_close(b);
        return 0;
    case PROTO_BATCH_ABORT:
        /* a batch closed meanwhile has nothing left to abort */
        for (int i = 0; i < MAX_BATCHES; i++)
            if (f->batches[i].used && f->batches[i].id == c->batch)
                batch_abort(&f->batches[i], c->status < 0 ? c->status : ERR_CANCELLED);
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
            quiesce(f);
            rc = reply(f, &c, 0);
            proto_msg_free(&c);
            /* process 0 is leaving: a step's answer it will not read (it
             * gave this process up for lost) is given up, not waited for */
            follower_stop(f);
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
    pthread_mutex_init(&f->lock, NULL);
    store_tier_init(&f->tier, &f->lock, 0);
    f->drop = (struct store_drop){.droppable = shard_droppable};
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
    pthread_mutex_destroy(&f->lock);
    free(f);
}
