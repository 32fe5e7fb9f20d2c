/* cluster/peers.h: the models registered with the followers, the batches
 * open there with their tags, and swap/peers.h's calls as commands. */
#include "cluster/peers.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/kernels.h"
#include "cluster/leader.h"
#include "cluster/proto.h"
#include "comm/comm.h"
#include "comm/mpi.h"
#include "core/error.h"
#include "model/model.h"
#include "swap/peers.h"
#include "swap/swap.h"

enum { MAX_TAGS = 8192, MAX_DEVICES = 64 };

/* A model the followers know: REGISTER is sent once, by whichever comes
 * first (its first load, or a batch opened while it loads), without
 * waiting; its answer is read by the first load, and kept. */
struct peer_model {
    struct peer_model *next;
    const struct swap_model *model;
    uint32_t id;
    bool sent;               /* REGISTER is in the order */
    struct leader_call *reg; /* its answer, until a load reads it */
    bool answered;
    int reg_rc; /* the answer: 0 or the error, with its message */
    char reg_msg[512];
    int procs[PROTO_MAX_SHARDS]; /* the followers holding its shards, ascending */
    int n_procs;
};

/* A batch open on the followers; its tags, and the open's answer until the
 * first step reads it. */
struct peer_batch {
    struct peer_batch *next;
    uint64_t id;
    struct leader_call *open;
    int tags[2 * PROTO_MAX_SHARDS];
    int n_tags;
    int procs[PROTO_MAX_SHARDS]; /* its model's followers */
    int n_procs;
    /* a step failed (BATCH_ABORT sent once): its tags are never given
     * back, since messages on them may still be in flight */
    bool aborted;
};

struct swap_peer_step {
    struct peer_batch *b;
    struct leader_call *call;
};

struct cluster_peers {
    struct swap_peers ops;
    struct mpi_world *w;
    struct leader *l;
    int n_devices, proc_of[MAX_DEVICES];
    int tag_base, n_tags;
    /* the tables below; never held across a command */
    pthread_mutex_t lock;
    struct peer_model *models;
    struct peer_batch *batches;
    uint32_t next_model;
    uint64_t next_batch;
    bool tag_used[MAX_TAGS];
    /* one registration at a time, so the loaders of one model's shards
     * register it once */
    pthread_mutex_t reg_lock;
};

/* ---- tables ---- */

/* The model's entry, made when missing (lock held). */
static struct peer_model *model_entry(struct cluster_peers *r, const struct swap_model *m)
{
    for (struct peer_model *e = r->models; e; e = e->next)
        if (e->model == m)
            return e;
    struct peer_model *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    *e = (struct peer_model){.next = r->models, .model = m, .id = ++r->next_model};
    for (int p = 1; p < mpi_world_procs(r->w); p++)
        for (int i = 0; i < swap_model_shard_count(m); i++)
            if (r->proc_of[swap_shard_device(swap_model_shard(m, i))] == p) {
                e->procs[e->n_procs++] = p;
                break;
            }
    r->models = e;
    return e;
}

static struct peer_batch *batch_find(struct cluster_peers *r, uint64_t id)
{
    for (struct peer_batch *b = r->batches; b; b = b->next)
        if (b->id == id)
            return b;
    return NULL;
}

static int tag_take(struct cluster_peers *r, int *tag)
{
    for (int i = 0; i < r->n_tags; i++)
        if (!r->tag_used[i]) {
            r->tag_used[i] = true;
            *tag = r->tag_base + i;
            return 0;
        }
    return err_set(ERR_BUSY, "cluster: all %d tags of batches are in use", r->n_tags);
}

static void tags_give(struct cluster_peers *r, const int *tags, int n)
{
    for (int i = 0; i < n; i++)
        r->tag_used[tags[i] - r->tag_base] = false;
}

/* ---- models ---- */

static int proc_of_shard(struct cluster_peers *r, const struct swap_shard *sh)
{
    return r->proc_of[swap_shard_device(sh)];
}

static int shard_index(const struct swap_model *m, const struct swap_shard *sh)
{
    return swap_shard_stage(sh) * swap_model_tp(m) + swap_shard_rank(sh);
}

/* REGISTER sent to the model's processes unless it was (r->lock held;
 * never waits for the answer). */
static void model_send_register(struct cluster_peers *r, const struct swap_model *m,
                                struct peer_model *e)
{
    if (e->sent)
        return;
    int n = swap_model_shard_count(m);
    int32_t devices[PROTO_MAX_SHARDS];
    for (int i = 0; i < n && i < PROTO_MAX_SHARDS; i++)
        devices[i] = swap_shard_device(swap_model_shard(m, i));
    struct proto_msg reg = {.kind = PROTO_REGISTER,
                            .model = e->id,
                            .name = (char *)swap_model_name(m),
                            .path = (char *)swap_model_path(m),
                            .tp = (uint32_t)swap_model_tp(m),
                            .pp = (uint32_t)swap_model_pp(m),
                            .devices = devices,
                            .n_devices = (uint32_t)n,
                            .compute = (char *)kern_compute_name(swap_model_compute(m)),
                            .expert_parallel = swap_model_expert_parallel(m)};
    e->sent = true; /* once, even when it fails: the loads report why */
    if ((e->reg_rc = leader_begin(r->l, e->procs, e->n_procs, &reg, &e->reg)) < 0) {
        e->answered = true;
        snprintf(e->reg_msg, sizeof e->reg_msg, "%s", err_msg());
    }
}

/* The model registered with its processes (sent now if it was not): its id
 * in *id, 0 or the registration's error with its message. Waits for the
 * answer the first time; not under r->lock. */
static int model_register(struct cluster_peers *r, const struct swap_model *m, uint32_t *id)
{
    pthread_mutex_lock(&r->reg_lock); /* one reader of the answer */
    pthread_mutex_lock(&r->lock);
    struct peer_model *e = model_entry(r, m);
    if (e) {
        *id = e->id;
        model_send_register(r, m, e);
    }
    struct leader_call *c = e && !e->answered ? e->reg : NULL;
    pthread_mutex_unlock(&r->lock);
    if (c) {
        size_t none;
        int rc = leader_end(r->l, c, NULL, 0, &none);
        pthread_mutex_lock(&r->lock);
        e->reg = NULL;
        e->answered = true;
        e->reg_rc = rc;
        snprintf(e->reg_msg, sizeof e->reg_msg, "%s", rc < 0 ? err_msg() : "");
        pthread_mutex_unlock(&r->lock);
    }
    int rc = e ? e->reg_rc : err_set(ERR_NOMEM, "out of memory");
    if (rc < 0 && e)
        err_set(rc, "%s", e->reg_msg);
    pthread_mutex_unlock(&r->reg_lock);
    return rc;
}

/* The id of a model REGISTER was sent for; false when none was. */
static bool model_id(struct cluster_peers *r, const struct swap_model *m, uint32_t *id)
{
    pthread_mutex_lock(&r->lock);
    bool found = false;
    for (struct peer_model *e = r->models; e && !found; e = e->next)
        if (e->model == m && e->sent) {
            *id = e->id;
            found = true;
        }
    pthread_mutex_unlock(&r->lock);
    return found;
}

struct swap_peer_load {
    const struct swap_model *model;
    struct leader_call *call;
};

static int remote_load_send(void *ctx, const struct swap_model *m, const struct swap_shard *sh,
                            const uint64_t *offsets, struct swap_peer_load **out)
{
    struct cluster_peers *r = ctx;
    *out = NULL;
    uint32_t id = 0;
    int rc = model_register(r, m, &id);
    if (rc < 0)
        return err_wrap(rc, "model %s", swap_model_name(m));
    const int nb = swap_shard_n_blobs(sh), index = shard_index(m, sh);
    struct proto_place *places = calloc((size_t)nb + 1, sizeof *places);
    struct swap_peer_load *load = calloc(1, sizeof *load);
    if (!places || !load) {
        free(places);
        free(load);
        return err_set(ERR_NOMEM, "out of memory");
    }
    uint32_t k = 0;
    for (int b = 0; b < nb; b++)
        if (offsets[b] != UINT64_MAX)
            places[k++] = (struct proto_place){(uint32_t)index, (uint32_t)b, offsets[b]};
    struct proto_msg cmd = {.kind = PROTO_LOAD, .model = id, .places = places, .n_places = k};
    int owner = proc_of_shard(r, sh);
    rc = leader_begin(r->l, &owner, 1, &cmd, &load->call);
    free(places);
    if (rc < 0) {
        free(load);
        return err_wrap(rc, "model %s", swap_model_name(m));
    }
    load->model = m;
    *out = load;
    return 0;
}

static int remote_load_wait(void *ctx, struct swap_peer_load *load)
{
    struct cluster_peers *r = ctx;
    size_t none;
    int rc = leader_end(r->l, load->call, NULL, 0, &none);
    if (rc < 0)
        err_wrap(rc, "model %s", swap_model_name(load->model));
    free(load);
    return rc;
}

static int remote_offload(void *ctx, const struct swap_model *m, const struct swap_shard *sh)
{
    struct cluster_peers *r = ctx;
    uint32_t id;
    if (!model_id(r, m, &id)) /* never loaded there */
        return 0;
    struct proto_msg off = {.kind = PROTO_OFFLOAD, .model = id};
    int rc = leader_call(r->l, proc_of_shard(r, sh), &off);
    return rc < 0 ? err_wrap(rc, "model %s", swap_model_name(m)) : 0;
}

static void remote_forget(void *ctx, const struct swap_model *m)
{
    struct cluster_peers *r = ctx;
    pthread_mutex_lock(&r->lock);
    struct peer_model **pp = &r->models, *e = NULL;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->model == m) {
            e = *pp;
            *pp = e->next;
            break;
        }
    pthread_mutex_unlock(&r->lock);
    if (e)
        leader_abandon(r->l, e->reg); /* never loaded: nobody read the answer */
    if (e && e->sent) {
        struct proto_msg unreg = {.kind = PROTO_UNREGISTER, .model = e->id};
        if (leader_call_some(r->l, e->procs, e->n_procs, &unreg) < 0) /* theirs to log */
            fprintf(stderr, "shardswap: model %s: %s\n", swap_model_name(m), err_msg());
    }
    free(e);
}

/* ---- batches ---- */

/* This process's ends of the batch's groups and channels (with the tags
 * in b, stage groups first), as the followers make theirs (follower.c's
 * batch_wire). */
static int batch_wire(struct cluster_peers *r, const struct swap_model *m, struct peer_batch *b,
                      int32_t *gtags, int32_t *ctags, struct comm_group **groups,
                      struct comm_channel **chans)
{
    const int tp = swap_model_tp(m), pp = swap_model_pp(m);
    int rc = 0;
    for (int s = 0; s < pp && rc == 0; s++) {
        gtags[s] = -1;
        if (tp == 1)
            continue;
        int procs[PROTO_MAX_SHARDS];
        bool mine = false;
        for (int k = 0; k < tp; k++) {
            procs[k] = proc_of_shard(r, swap_model_shard(m, s * tp + k));
            mine |= procs[k] == 0;
        }
        pthread_mutex_lock(&r->lock);
        rc = tag_take(r, &b->tags[b->n_tags]);
        pthread_mutex_unlock(&r->lock);
        if (rc < 0)
            break;
        gtags[s] = b->tags[b->n_tags++];
        if (mine)
            rc = comm_group_create_mpi(r->w, tp, procs, gtags[s], &groups[s]);
    }
    for (int i = 0; i < (pp - 1) * tp && rc == 0; i++) {
        pthread_mutex_lock(&r->lock);
        rc = tag_take(r, &b->tags[b->n_tags]);
        pthread_mutex_unlock(&r->lock);
        if (rc < 0)
            break;
        ctags[i] = b->tags[b->n_tags++];
        int from = proc_of_shard(r, swap_model_shard(m, i));
        int to = proc_of_shard(r, swap_model_shard(m, i + tp));
        if (from == 0 && to == 0)
            rc = comm_channel_create(&chans[i]);
        else if (from == 0 || to == 0)
            rc = comm_channel_create_mpi(r->w, from == 0 ? to : from, ctags[i], &chans[i]);
    }
    return rc;
}

static int remote_batch_open(void *ctx, const struct swap_model *m,
                             const struct model_exec_shape *shape, const uint64_t *offsets,
                             struct comm_group **groups, struct comm_channel **chans, uint64_t *id)
{
    struct cluster_peers *r = ctx;
    struct peer_batch *b = calloc(1, sizeof *b);
    if (!b)
        return err_set(ERR_NOMEM, "out of memory");
    /* a batch may open while the model's first load is queued: REGISTER
     * goes out first then (the load reads its answer) */
    pthread_mutex_lock(&r->lock);
    struct peer_model *e = model_entry(r, m);
    uint32_t mid = 0;
    b->id = ++r->next_batch;
    if (e) {
        model_send_register(r, m, e);
        mid = e->id;
        memcpy(b->procs, e->procs, sizeof(int) * (size_t)e->n_procs);
        b->n_procs = e->n_procs;
    }
    pthread_mutex_unlock(&r->lock);
    if (!e) {
        free(b);
        return err_set(ERR_NOMEM, "out of memory");
    }
    const int tp = swap_model_tp(m), pp = swap_model_pp(m), n = tp * pp;
    int32_t gtags[PROTO_MAX_SHARDS], ctags[PROTO_MAX_SHARDS];
    struct proto_place places[PROTO_MAX_SHARDS];
    uint32_t k = 0;
    for (int i = 0; i < n; i++)
        if (proc_of_shard(r, swap_model_shard(m, i)) != 0)
            places[k++] = (struct proto_place){.shard = (uint32_t)i, .offset = offsets[i]};
    int rc = batch_wire(r, m, b, gtags, ctags, groups, chans);
    struct proto_msg open = {.kind = PROTO_BATCH_OPEN,
                             .batch = b->id,
                             .model = mid,
                             .batch_size = (uint32_t)shape->batch,
                             .max_len = (uint32_t)shape->max_len,
                             .max_tokens = (uint32_t)shape->max_tokens,
                             .max_rows = (uint32_t)shape->max_rows,
                             .places = places,
                             .n_places = k,
                             .group_tags = gtags,
                             .n_group_tags = (uint32_t)pp,
                             .channel_tags = ctags,
                             .n_channel_tags = (uint32_t)((pp - 1) * tp)};
    if (rc == 0)
        rc = leader_begin(r->l, b->procs, b->n_procs, &open, &b->open);
    pthread_mutex_lock(&r->lock);
    if (rc == 0) {
        b->next = r->batches;
        r->batches = b;
        *id = b->id;
    } else {
        tags_give(r, b->tags, b->n_tags);
    }
    pthread_mutex_unlock(&r->lock);
    if (rc < 0) { /* the caller destroys what batch_wire made */
        free(b);
        return err_wrap(rc, "model %s", swap_model_name(m));
    }
    return 0;
}

static int remote_batch_clear(void *ctx, uint64_t id, int slot)
{
    struct cluster_peers *r = ctx;
    pthread_mutex_lock(&r->lock);
    struct peer_batch *b = batch_find(r, id);
    int procs[PROTO_MAX_SHARDS], n = b ? b->n_procs : 0;
    if (b)
        memcpy(procs, b->procs, sizeof(int) * (size_t)n);
    pthread_mutex_unlock(&r->lock);
    if (!b)
        return err_set(ERR_INVALID, "cluster: no batch %llu is open", (unsigned long long)id);
    struct proto_msg clear = {.kind = PROTO_BATCH_CLEAR, .batch = id, .slot = (uint32_t)slot};
    return leader_post(r->l, procs, n, &clear);
}

static void remote_batch_close(void *ctx, uint64_t id)
{
    struct cluster_peers *r = ctx;
    pthread_mutex_lock(&r->lock);
    struct peer_batch **pp = &r->batches, *b = NULL;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->id == id) {
            b = *pp;
            *pp = b->next;
            break;
        }
    pthread_mutex_unlock(&r->lock);
    if (!b)
        return;
    leader_abandon(r->l, b->open); /* never stepped: its answer is not awaited */
    struct proto_msg close = {.kind = PROTO_BATCH_CLOSE, .batch = id};
    if (leader_post(r->l, b->procs, b->n_procs, &close) < 0)
        fprintf(stderr, "shardswap: batch %llu: %s\n", (unsigned long long)id, err_msg());
    /* the close is in the order before any later open that takes them */
    pthread_mutex_lock(&r->lock);
    if (!b->aborted)
        tags_give(r, b->tags, b->n_tags);
    pthread_mutex_unlock(&r->lock);
    free(b);
}

static int remote_step_send(void *ctx, uint64_t id, const int32_t *ids, const uint8_t *mask,
                            int batch, int t_new, bool all_positions, bool overlap,
                            struct swap_peer_step **out)
{
    struct cluster_peers *r = ctx;
    *out = NULL;
    pthread_mutex_lock(&r->lock);
    struct peer_batch *b = batch_find(r, id);
    pthread_mutex_unlock(&r->lock);
    if (!b)
        return err_set(ERR_INVALID, "cluster: no batch %llu is open", (unsigned long long)id);
    struct swap_peer_step *s = calloc(1, sizeof *s);
    if (!s)
        return err_set(ERR_NOMEM, "out of memory");
    uint32_t n = (uint32_t)batch * (uint32_t)t_new;
    struct proto_msg step = {.kind = PROTO_STEP,
                             .batch = id,
                             .t_new = (uint32_t)t_new,
                             .flags = (uint8_t)((all_positions ? PROTO_STEP_ALL_POSITIONS : 0) |
                                                (overlap ? PROTO_STEP_OVERLAP : 0)),
                             .ids = (int32_t *)ids,
                             .n_ids = n,
                             .mask = (uint8_t *)mask,
                             .n_mask = mask ? n : 0};
    int rc = leader_begin(r->l, b->procs, b->n_procs, &step, &s->call);
    if (rc < 0) {
        free(s);
        return rc;
    }
    s->b = b;
    *out = s;
    return 0;
}

static void remote_batch_abort(void *ctx, uint64_t id, int rc)
{
    struct cluster_peers *r = ctx;
    pthread_mutex_lock(&r->lock);
    struct peer_batch *b = batch_find(r, id);
    bool send = b && !b->aborted;
    int procs[PROTO_MAX_SHARDS], n = b ? b->n_procs : 0;
    if (send) {
        b->aborted = true;
        memcpy(procs, b->procs, sizeof(int) * (size_t)n);
    }
    pthread_mutex_unlock(&r->lock);
    struct proto_msg abort = {.kind = PROTO_BATCH_ABORT, .batch = id, .status = rc};
    if (send && leader_post(r->l, procs, n, &abort) < 0) /* a lost process needs no telling */
        fprintf(stderr, "shardswap: batch %llu: %s\n", (unsigned long long)id, err_msg());
}

static int remote_step_wait(void *ctx, struct swap_peer_step *s, float *logits, size_t n,
                            size_t *got)
{
    struct cluster_peers *r = ctx;
    int open_rc = 0;
    char open_msg[512] = "";
    if (s->b->open) { /* the batch's first step: the open's answer first */
        size_t none;
        if ((open_rc = leader_end(r->l, s->b->open, NULL, 0, &none)) < 0)
            snprintf(open_msg, sizeof open_msg, "%s", err_msg());
        s->b->open = NULL;
    }
    /* a process that failed mid-step may leave the others waiting for it
     * in a collective: they are told first, then every answer is awaited */
    if (leader_wait_failed(r->l, s->call))
        remote_batch_abort(r, s->b->id, ERR_CANCELLED);
    int rc = leader_end(r->l, s->call, logits, n, got);
    free(s);
    if (open_rc < 0)
        return err_set(open_rc, "opening the batch: %s", open_msg);
    return rc;
}

/* ---- life ---- */

int cluster_peers_create(struct mpi_world *w, struct leader *l, const int *proc_of, int n_devices,
                         int tag_base, struct cluster_peers **out)
{
    *out = NULL;
    int top = mpi_world_max_tag(w);
    if (n_devices < 1 || n_devices > MAX_DEVICES || tag_base < 0 || tag_base >= top)
        return err_set(ERR_INVALID, "cluster: %d devices (1..%d), tags from %d (below %d)",
                       n_devices, MAX_DEVICES, tag_base, top);
    struct cluster_peers *r = calloc(1, sizeof *r);
    if (!r)
        return err_set(ERR_NOMEM, "out of memory");
    r->w = w;
    r->l = l;
    r->n_devices = n_devices;
    memcpy(r->proc_of, proc_of, sizeof(int) * (size_t)n_devices);
    r->tag_base = tag_base;
    r->n_tags = top - tag_base < MAX_TAGS ? top - tag_base : MAX_TAGS;
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->reg_lock, NULL);
    r->ops = (struct swap_peers){.ctx = r,
                                 .load_send = remote_load_send,
                                 .load_wait = remote_load_wait,
                                 .offload = remote_offload,
                                 .forget = remote_forget,
                                 .batch_open = remote_batch_open,
                                 .batch_clear = remote_batch_clear,
                                 .batch_close = remote_batch_close,
                                 .step_send = remote_step_send,
                                 .step_wait = remote_step_wait,
                                 .batch_abort = remote_batch_abort};
    *out = r;
    return 0;
}

const struct swap_peers *cluster_peers_ops(const struct cluster_peers *r)
{
    return &r->ops;
}

void cluster_peers_destroy(struct cluster_peers *r)
{
    if (!r)
        return;
    while (r->models) {
        struct peer_model *e = r->models;
        r->models = e->next;
        leader_abandon(r->l, e->reg);
        free(e);
    }
    while (r->batches) {
        struct peer_batch *b = r->batches;
        r->batches = b->next;
        leader_abandon(r->l, b->open);
        free(b);
    }
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->reg_lock);
    free(r);
}
