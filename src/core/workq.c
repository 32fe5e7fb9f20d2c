#include "core/workq.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"

/* The idle sleep: until deadline (CLOCK_MONOTONIC, work's clock), a post, a
 * wake or a stop. Lock held. */
static void workq_sleep(struct workq *q, double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    time_t whole = (time_t)seconds;
    ts.tv_sec += whole;
    ts.tv_nsec += (long)((seconds - (double)whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    while (queue_empty(&q->items) && !q->stop && !q->woken)
        if (pthread_cond_timedwait(&q->work, &q->lock, &ts) != 0)
            break;
}

/* The calling thread is one of q's. */
static bool workq_own_thread(const struct workq *q)
{
    for (int i = 0; i < q->n_threads; i++)
        if (pthread_equal(pthread_self(), q->threads[i]))
            return true;
    return false;
}

static void *workq_main(void *p)
{
    struct workq *q = p;
    if (q->ops->thread_init)
        q->ops->thread_init(q->arg);
    pthread_mutex_lock(&q->lock);
    for (;;) {
        if (queue_empty(&q->items)) {
            if (q->stop)
                break; /* stopping, and drained */
            if (!q->ops->idle) {
                pthread_cond_wait(&q->work, &q->lock);
                continue;
            }
            q->woken = false;
            pthread_mutex_unlock(&q->lock);
            double wait_s = q->ops->idle(q->arg);
            pthread_mutex_lock(&q->lock);
            if (wait_s > 0)
                workq_sleep(q, wait_s);
            continue;
        }
        struct queue *n = queue_head(&q->items);
        queue_remove(n);
        pthread_mutex_unlock(&q->lock);
        q->ops->run(queue_data(n, struct workq_item, node), q->arg);
        pthread_mutex_lock(&q->lock);
        q->completed++;
        pthread_cond_broadcast(&q->done);
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

/* Joins the threads started so far after a stop, then releases q and zeroes it. */
static void workq_release(struct workq *q)
{
    pthread_mutex_lock(&q->lock);
    q->stop = true;
    pthread_cond_broadcast(&q->work);
    pthread_mutex_unlock(&q->lock);
    for (int i = 0; i < q->n_threads; i++)
        pthread_join(q->threads[i], NULL);
    assert(queue_empty(&q->items));
    pthread_cond_destroy(&q->done);
    pthread_cond_destroy(&q->work);
    pthread_mutex_destroy(&q->lock);
    free(q->threads);
    memset(q, 0, sizeof(*q));
}

int workq_init_pool(struct workq *q, const char *name, int n_threads, const struct workq_ops *ops,
                    void *arg)
{
    assert(ops && (ops->run || ops->idle) && n_threads >= 1 && (n_threads == 1 || !ops->idle));
    memset(q, 0, sizeof(*q));
    q->ops = ops;
    q->arg = arg;
    queue_init(&q->items);
    pthread_mutex_init(&q->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->work, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&q->done, NULL);
    q->threads = calloc((size_t)n_threads, sizeof(*q->threads));
    if (!q->threads) {
        workq_release(q);
        return err_set(ERR_NOMEM, "cannot start the %s threads: out of memory", name);
    }
    /* the lock keeps every thread off q until all are started (or not) */
    pthread_mutex_lock(&q->lock);
    int prc = 0;
    while (q->n_threads < n_threads &&
           (prc = pthread_create(&q->threads[q->n_threads], NULL, workq_main, q)) == 0)
        q->n_threads++;
    pthread_mutex_unlock(&q->lock);
    if (prc != 0) {
        workq_release(q);
        return err_set(ERR_NOMEM, "cannot start the %s thread: %s", name, strerror(prc));
    }
    q->started = true;
    for (int i = 0; i < n_threads; i++) {
        char tname[16]; /* the kernel keeps 15 characters */
        if (n_threads == 1)
            snprintf(tname, sizeof(tname), "%s", name);
        else
            snprintf(tname, sizeof(tname), "%.12s%u", name, (unsigned)i % 1000u);
        (void)pthread_setname_np(q->threads[i], tname);
    }
    return 0;
}

int workq_init(struct workq *q, const char *name, const struct workq_ops *ops, void *arg)
{
    return workq_init_pool(q, name, 1, ops, arg);
}

void workq_post(struct workq *q, struct workq_item *item)
{
    pthread_mutex_lock(&q->lock);
    /* once stopping, only run may add to what the drain runs */
    assert(q->started && q->ops->run && (!q->stop || workq_own_thread(q)));
    queue_insert_tail(&q->items, &item->node);
    q->posted++;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->lock);
}

void workq_sync(struct workq *q)
{
    assert(q->n_threads == 1 && !workq_own_thread(q));
    pthread_mutex_lock(&q->lock);
    uint64_t target = q->posted;
    while (q->completed < target)
        pthread_cond_wait(&q->done, &q->lock);
    pthread_mutex_unlock(&q->lock);
}

void workq_wake(struct workq *q)
{
    pthread_mutex_lock(&q->lock);
    q->woken = true;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->lock);
}

void workq_stop(struct workq *q)
{
    if (!q->started)
        return;
    pthread_mutex_lock(&q->lock);
    bool first = !q->stop;
    q->stop = true;
    pthread_cond_broadcast(&q->work);
    pthread_mutex_unlock(&q->lock);
    if (!first)
        return;
    assert(!workq_own_thread(q));
    for (int i = 0; i < q->n_threads; i++)
        pthread_join(q->threads[i], NULL);
}

void workq_free(struct workq *q)
{
    if (!q->started)
        return;
    workq_stop(q);
    assert(queue_empty(&q->items));
    pthread_cond_destroy(&q->done);
    pthread_cond_destroy(&q->work);
    pthread_mutex_destroy(&q->lock);
    free(q->threads);
    memset(q, 0, sizeof(*q));
}
