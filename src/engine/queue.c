/* Per-model queues (FIFO, engine lock) and the batch rule: which queued
 * requests a runner takes, and how taken ones go back. */
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "core/error.h"
#include "core/timing.h"
#include "engine/engine_impl.h"

void queue_push(struct engine_model *m, struct engine_req *r)
{
    r->prev = m->tail;
    r->next = NULL;
    if (m->tail)
        m->tail->next = r;
    else
        m->head = r;
    m->tail = r;
    m->queue_len++;
    m->e->n_queued_deadlines += !isinf(r->deadline);
}

static void queue_unlink(struct engine_model *m, struct engine_req *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        m->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        m->tail = r->prev;
    r->prev = r->next = NULL;
    m->queue_len--;
    m->e->n_queued_deadlines -= !isinf(r->deadline);
}

/* Takes a queued request out of its queue with a final status and hands it
 * to the scheduler thread, which calls on_done (lock held). */
void queue_fail(struct engine_model *m, struct engine_req *r, int status, const char *why)
{
    struct engine *e = m->e;
    queue_unlink(m, r);
    atomic_store(&r->phase, PH_DONE);
    req_set_status(r, status, why);
    req_account(e, m, r);
    r->m = NULL;
    if (e->finished_tail)
        e->finished_tail->next = r;
    else
        e->finished = r;
    e->finished_tail = r;
    pthread_cond_signal(&e->wake);
}

/* Same temperature, top-k and top-p (the seed is per request, not a batch
 * property). */
static bool same_sampling(const struct sampler_params *a, const struct sampler_params *b)
{
    return a->temperature == b->temperature && a->top_k == b->top_k && a->top_p == b->top_p;
}

/* The next request m's runner may take (lock held): the oldest head among
 * m's queue and its adapters' on their devices within max_rank, or NULL. */
struct engine_model *adapter_starving(struct engine_model *m, double now, int max_rank)
{
    struct engine_model *best = NULL;
    for (struct engine_model *a = m->adapters; a; a = a->next_adapter) {
        if (a->removed || !a->head || swap_model_lora_rank(a->sm) > max_rank ||
            swap_residency(m->e->mgr, a->sm) == RES_ON_DEVICE)
            continue;
        double bound = a->max_queue_wait > 0 ? a->max_queue_wait : SCHED_PREEMPT_WAIT_S;
        if (now - a->head->t.t_arrival >= bound &&
            (!best || a->head->t.t_arrival < best->head->t.t_arrival))
            best = a;
    }
    return best;
}

struct engine_req *queue_peek(struct engine_model *m, int max_rank)
{
    struct engine *e = m->e;
    /* an adapter waiting for room past its bound: no request of another
     * adapter (one that may leave: not pinned) that arrived after its
     * oldest joins, so the others' sequences drain and leave room for it
     * (adapter_victim) */
    const struct engine_model *starving = adapter_starving(m, time_now(), max_rank);
    double cut = starving ? starving->head->t.t_arrival : INFINITY;
    /* the higher priority first (an adapter's engine_set_priority), then
     * the older request */
    struct engine_req *best = m->head;
    int best_prio = m->priority;
    for (struct engine_model *a = m->adapters; a; a = a->next_adapter) {
        struct engine_req *r = a->head;
        if (!r || a->removed || a->offload_pending || (!a->pinned && r->t.t_arrival > cut) ||
            (best && (best_prio > a->priority ||
                      (best_prio == a->priority && best->t.t_arrival <= r->t.t_arrival))) ||
            swap_model_lora_rank(a->sm) > max_rank ||
            swap_residency(e->mgr, a->sm) != RES_ON_DEVICE)
            continue;
        best = r;
        best_prio = a->priority;
    }
    return best;
}

int queue_take_ranked(struct engine_model *m, struct engine_req **out, int n, bool same_params,
                      int max_rank)
{
    struct engine *e = m->e;
    double now = time_now();
    int k = 0;
    struct engine_req *r;
    while (k < n && (r = queue_peek(m, max_rank)) != NULL) {
        struct engine_model *owner = r->m;
        if (r->deadline <= now) {
            queue_fail(owner, r, ERR_TIMEOUT, "its deadline passed while it waited in the queue");
            continue;
        }
        if (!sched_batch_joins(same_params, k, n,
                               k == 0 || same_sampling(&r->sampling, &out[0]->sampling)))
            break;
        if (owner->base) {
            if (swap_use_begin(e->mgr, owner->sm) < 0)
                break;
            owner->seq_uses++;
        }
        queue_unlink(owner, r);
        atomic_store(&r->phase, PH_RUNNING);
        owner->n_running++;
        out[k++] = r;
    }
    return k;
}

int queue_take(struct engine_model *m, struct engine_req **out, int n, bool same_params)
{
    return queue_take_ranked(m, out, n, same_params, atomic_load(&m->lora_rank));
}

/* Hands requests a runner took back to the head of their queues, in their
 * order (lock held): they keep their place. One cancelled meanwhile is not
 * queued again: it goes to *cancelled, for the caller to finish. */
void queue_give_back(struct engine_model *m, struct engine_req **r, int n,
                     struct engine_req **cancelled, int *n_cancelled, struct engine_model **unuse,
                     int *n_unuse)
{
    (void)m;
    for (int i = n - 1; i >= 0; i--) {
        int expect = PH_RUNNING;
        if (!atomic_compare_exchange_strong(&r[i]->phase, &expect, PH_QUEUED)) {
            cancelled[(*n_cancelled)++] = r[i];
            continue;
        }
        struct engine_model *q = r[i]->m;
        if (q->base)
            unuse[(*n_unuse)++] = q;
        q->n_running--;
        r[i]->prev = NULL;
        r[i]->next = q->head;
        if (q->head)
            q->head->prev = r[i];
        else
            q->tail = r[i];
        q->head = r[i];
        q->queue_len++;
        q->e->n_queued_deadlines += !isinf(r[i]->deadline);
    }
}

void adapter_unuse(struct engine_model *a)
{
    if (!a->base)
        return;
    struct engine *e = a->e;
    swap_use_end(e->mgr, a->sm);
    pthread_mutex_lock(&e->lock);
    /* its last sequence left: a deferred offload (engine_unload_model) was
     * carried out by swap_use_end */
    if (--a->seq_uses == 0)
        a->offload_pending = false;
    a->last_used = a->idle_since = time_now(); /* its keep_alive and LRU count from here */
    pthread_cond_broadcast(&e->admin);         /* a removal waits for its last sequence */
    pthread_cond_signal(&e->wake);             /* it may leave now, for another adapter */
    pthread_mutex_unlock(&e->lock);
}
