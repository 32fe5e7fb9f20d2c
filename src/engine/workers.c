#include "engine/workers.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "comm/comm.h"
#include "core/error.h"

struct fwd_call; /* one group_forward: a countdown over its shard tasks */

struct shard_task {
    struct group_batch *gb;
    int shard;
    const int32_t *ids;
    const uint8_t *mask;
    int t_new;
    bool all_positions, overlap;
    float *logits;
    float *x;  /* (batch * t_new, hidden) activations */
    int *rows; /* (batch * t_new) rows of x for the head */
    struct fwd_call *call;
    struct shard_task *next; /* in the device's queue */
};

struct fwd_call {
    pthread_mutex_t lock;
    pthread_cond_t done;
    int remaining, rc;
};

struct worker {
    struct workers *w;
    int device;
    pthread_t tid;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct shard_task *head, *tail;
    bool stop, started;
};

struct workers {
    struct swap_manager *mgr;
    pthread_mutex_t order; /* makes multi-device submissions atomic */
    int n;
    struct worker dev[EVICT_MAX_DEVICES];
};

/* The TP hooks of one shard's rank in its stage's group. */
struct tp_ctx {
    struct comm_group *g;
    int rank;
};

struct group_batch {
    struct swap_model *model;
    int batch, max_len, n_shards;
    struct opt_kv **kv;               /* (n_shards) */
    struct comm_group **stage_group;  /* (pp) NULL when tp is 1 */
    struct comm_channel **chan;       /* ((pp - 1) * tp): stage s rank r -> stage s + 1 rank r */
    struct tp_ctx *tp;                /* (n_shards) */
};

/* ---- the batch state ---- */

static void hook_allreduce(void *ctx, float *buf, size_t n)
{
    struct tp_ctx *t = ctx;
    comm_allreduce_sum(t->g, t->rank, buf, n);
}

static void hook_gather(void *ctx, int root, const float *local, int rows, int local_cols,
                        int col0, float *out, int total_cols)
{
    struct tp_ctx *t = ctx;
    comm_gather_cols(t->g, t->rank, root, local, rows, local_cols, col0, out, total_cols);
}

int group_batch_create(struct swap_model *model, int batch, int max_len, struct group_batch **out)
{
    *out = NULL;
    struct group_batch *gb = calloc(1, sizeof(*gb));
    if (!gb)
        return err_set(ERR_NOMEM, "out of memory");
    gb->model = model;
    gb->batch = batch;
    gb->max_len = max_len;
    gb->n_shards = model->tp * model->pp;
    gb->kv = calloc((size_t)gb->n_shards, sizeof(*gb->kv));
    gb->stage_group = calloc((size_t)model->pp, sizeof(*gb->stage_group));
    gb->chan = calloc((size_t)(model->pp * model->tp), sizeof(*gb->chan));
    gb->tp = calloc((size_t)gb->n_shards, sizeof(*gb->tp));
    int rc = 0;
    if (!gb->kv || !gb->stage_group || !gb->chan || !gb->tp) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int s = 0; s < model->pp && model->tp > 1; s++)
        if ((rc = comm_group_create_threads(model->tp, &gb->stage_group[s])) < 0)
            goto fail;
    for (int i = 0; i < (model->pp - 1) * model->tp; i++)
        if ((rc = comm_channel_create(&gb->chan[i])) < 0)
            goto fail;
    for (int i = 0; i < gb->n_shards; i++) {
        const struct swap_shard *sh = &model->shards[i];
        if ((rc = opt_kv_init(sh->m, batch, max_len, &gb->kv[i])) < 0)
            goto fail;
        if (model->tp > 1) {
            gb->tp[i] = (struct tp_ctx){.g = gb->stage_group[sh->stage], .rank = sh->rank};
            gb->kv[i]->tp = (struct opt_tp_hooks){
                .allreduce = hook_allreduce, .gather_cols = hook_gather, .ctx = &gb->tp[i]};
        }
    }
    *out = gb;
    return 0;
fail:
    group_batch_free(gb);
    return rc;
}

void group_batch_clear_slot(struct group_batch *gb, int b)
{
    for (int i = 0; i < gb->n_shards; i++)
        opt_kv_clear_slot(gb->kv[i], b);
}

int group_batch_room(const struct group_batch *gb)
{
    return gb->max_len - gb->kv[0]->len;
}

void group_batch_free(struct group_batch *gb)
{
    if (!gb)
        return;
    for (int i = 0; gb->kv && i < gb->n_shards; i++)
        opt_kv_free(gb->kv[i]);
    for (int s = 0; gb->stage_group && s < gb->model->pp; s++)
        comm_group_destroy(gb->stage_group[s]);
    for (int i = 0; gb->chan && i < gb->model->pp * gb->model->tp; i++)
        comm_channel_destroy(gb->chan[i]);
    free(gb->kv);
    free(gb->stage_group);
    free(gb->chan);
    free(gb->tp);
    free(gb);
}

/* ---- one shard's part of a forward, on its device's thread ---- */

/* Waits for blob b; remembers a failed load (the memory stays mapped, so
 * computing on goes through the collectives in step with the other shards). */
static void task_wait_blob(struct swap_shard *sh, int b, int *rc)
{
    int st = event_wait(&sh->ready[b]);
    if (st < 0 && *rc == 0)
        *rc = st;
}

static int task_run(struct shard_task *t)
{
    struct group_batch *gb = t->gb;
    struct swap_model *model = gb->model;
    struct swap_shard *sh = &model->shards[t->shard];
    struct opt_model *m = sh->m;
    struct opt_kv *kv = gb->kv[t->shard];
    const int n = gb->batch * t->t_new, H = model->cfg.hidden;
    const int n_local = m->shard.layer_end - m->shard.layer_begin;
    const bool first = sh->stage == 0, last = sh->stage == model->pp - 1;
    int rc = 0, wait_rc = 0;
    if (!t->overlap)
        for (int b = 0; b < sh->layout.n_blobs; b++)
            task_wait_blob(sh, b, &wait_rc);
    float *x = t->x;
    int *rows = t->rows;
    /* the inputs: embeddings on the first stage, the previous stage's output elsewhere */
    if ((rc = opt_kv_begin(kv, t->mask, t->t_new)) < 0)
        goto out;
    if (first) {
        task_wait_blob(sh, 0, &wait_rc);
        rc = opt_forward_embed(m, kv, t->ids, t->mask, t->t_new, x);
    } else {
        rc = comm_recv(gb->chan[(sh->stage - 1) * model->tp + sh->rank], x, (size_t)n * H);
    }
    if (rc < 0)
        goto out;
    for (int l = 0; l < n_local; l++) {
        task_wait_blob(sh, 1 + l, &wait_rc);
        opt_forward_layer(m, l, kv, t->t_new, x);
    }
    opt_kv_commit(kv, t->mask, t->t_new);
    /* the outputs: logits on the last stage, activations to the next one */
    if (last) {
        task_wait_blob(sh, 0, &wait_rc);
        int n_rows = 0;
        for (int b = 0; b < gb->batch; b++)
            for (int i = t->all_positions ? 0 : t->t_new - 1; i < t->t_new; i++)
                rows[n_rows++] = b * t->t_new + i;
        rc = opt_forward_head(m, kv, x, rows, n_rows, sh->rank == 0 ? t->logits : NULL);
    } else {
        rc = comm_send(gb->chan[sh->stage * model->tp + sh->rank], x, (size_t)n * H);
    }
out:
    return rc < 0 ? rc : wait_rc;
}

static void *worker_main(void *arg)
{
    struct worker *wk = arg;
    cpu_kernels_single_thread(true);
    for (;;) {
        pthread_mutex_lock(&wk->lock);
        while (!wk->head && !wk->stop)
            pthread_cond_wait(&wk->cond, &wk->lock);
        struct shard_task *t = wk->head;
        if (!t) {
            pthread_mutex_unlock(&wk->lock);
            return NULL;
        }
        wk->head = t->next;
        if (!wk->head)
            wk->tail = NULL;
        pthread_mutex_unlock(&wk->lock);
        int rc = task_run(t);
        struct fwd_call *c = t->call;
        pthread_mutex_lock(&c->lock);
        if (rc < 0 && c->rc == 0)
            c->rc = rc;
        if (--c->remaining == 0)
            pthread_cond_signal(&c->done);
        pthread_mutex_unlock(&c->lock);
    }
}

int workers_create(struct swap_manager *mgr, struct workers **out)
{
    *out = NULL;
    struct workers *w = calloc(1, sizeof(*w));
    if (!w)
        return err_set(ERR_NOMEM, "out of memory");
    w->mgr = mgr;
    pthread_mutex_init(&w->order, NULL);
    cpu_set_threads(1); /* devices compute in parallel, one core each */
    for (int d = 0; d < swap_device_count(mgr); d++) {
        struct worker *wk = &w->dev[d];
        wk->w = w;
        wk->device = d;
        pthread_mutex_init(&wk->lock, NULL);
        pthread_cond_init(&wk->cond, NULL);
        if (pthread_create(&wk->tid, NULL, worker_main, wk) != 0) {
            workers_destroy(w);
            return err_set(ERR_NOMEM, "cannot start the compute thread of device %d", d);
        }
        wk->started = true;
        w->n = d + 1;
    }
    *out = w;
    return 0;
}

void workers_destroy(struct workers *w)
{
    if (!w)
        return;
    for (int d = 0; d < w->n; d++) {
        struct worker *wk = &w->dev[d];
        if (wk->started) {
            pthread_mutex_lock(&wk->lock);
            wk->stop = true;
            pthread_cond_signal(&wk->cond);
            pthread_mutex_unlock(&wk->lock);
            pthread_join(wk->tid, NULL);
        }
        pthread_mutex_destroy(&wk->lock);
        pthread_cond_destroy(&wk->cond);
    }
    pthread_mutex_destroy(&w->order);
    free(w);
}

int group_forward(struct workers *w, struct group_batch *gb, const int32_t *ids,
                  const uint8_t *mask, int t_new, bool all_positions, bool overlap,
                  float *logits)
{
    struct swap_model *model = gb->model;
    struct fwd_call call = {.remaining = gb->n_shards};
    const size_t n = (size_t)gb->batch * t_new;
    /* every buffer before any task is queued: a shard that failed to
     * allocate mid-way would leave the others waiting in a collective */
    struct shard_task *tasks = calloc((size_t)gb->n_shards, sizeof(*tasks));
    float *x = malloc((size_t)gb->n_shards * n * model->cfg.hidden * sizeof(float));
    int *rows = malloc((size_t)gb->n_shards * n * sizeof(int));
    if (!tasks || !x || !rows) {
        free(tasks);
        free(x);
        free(rows);
        return err_set(ERR_NOMEM, "out of memory for the activations of %zu tokens", n);
    }
    pthread_mutex_init(&call.lock, NULL);
    pthread_cond_init(&call.done, NULL);
    pthread_mutex_lock(&w->order);
    for (int i = 0; i < gb->n_shards; i++) {
        tasks[i] = (struct shard_task){.gb = gb, .shard = i, .ids = ids, .mask = mask,
                                       .t_new = t_new, .all_positions = all_positions,
                                       .overlap = overlap, .logits = logits, .call = &call,
                                       .x = x + (size_t)i * n * model->cfg.hidden,
                                       .rows = rows + (size_t)i * n};
        struct worker *wk = &w->dev[model->shards[i].device];
        pthread_mutex_lock(&wk->lock);
        if (wk->tail)
            wk->tail->next = &tasks[i];
        else
            wk->head = &tasks[i];
        wk->tail = &tasks[i];
        pthread_cond_signal(&wk->cond);
        pthread_mutex_unlock(&wk->lock);
    }
    pthread_mutex_unlock(&w->order);
    pthread_mutex_lock(&call.lock);
    while (call.remaining > 0)
        pthread_cond_wait(&call.done, &call.lock);
    pthread_mutex_unlock(&call.lock);
    pthread_mutex_destroy(&call.lock);
    pthread_cond_destroy(&call.done);
    free(tasks);
    free(x);
    free(rows);
    return call.rc;
}
