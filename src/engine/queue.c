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

/* Takes up to n requests from m's queue for its runner (lock held), by the
 * batch rule (sched_batch_joins): with same_params, stops at the first whose
 * sampling differs from the first one's (Computron). Requests already past
 * their deadline time out instead. */
int queue_take(struct engine_model *m, struct engine_req **out, int n, bool same_params)
{
    double now = time_now();
    int k = 0;
    while (m->head && k < n) {
        struct engine_req *r = m->head;
        if (r->deadline <= now) {
            queue_fail(m, r, ERR_TIMEOUT, "its deadline passed while it waited in the queue");
            continue;
        }
        if (!sched_batch_joins(same_params, k, n,
                               k == 0 || same_sampling(&r->sampling, &out[0]->sampling)))
            break;
        queue_unlink(m, r);
        atomic_store(&r->phase, PH_RUNNING);
        m->n_running++;
        out[k++] = r;
    }
    return k;
}

/* Hands requests a runner took back to the head of m's queue, in their
 * order (lock held): they keep their place. One cancelled meanwhile is not
 * queued again: it goes to *cancelled, for the caller to finish. */
void queue_give_back(struct engine_model *m, struct engine_req **r, int n,
                     struct engine_req **cancelled, int *n_cancelled)
{
    for (int i = n - 1; i >= 0; i--) {
        int expect = PH_RUNNING;
        if (!atomic_compare_exchange_strong(&r[i]->phase, &expect, PH_QUEUED)) {
            cancelled[(*n_cancelled)++] = r[i];
            continue;
        }
        m->n_running--;
        r[i]->prev = NULL;
        r[i]->next = m->head;
        if (m->head)
            m->head->prev = r[i];
        else
            m->tail = r[i];
        m->head = r[i];
        m->queue_len++;
        m->e->n_queued_deadlines += !isinf(r[i]->deadline);
    }
}
