#include "core/workq.h"

#include <assert.h>
#include <stdio.h>
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

int workq_init(struct workq *q, const char *name, const struct workq_ops *ops, void *arg)
{
    assert(ops && (ops->run || ops->idle));
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
    int prc = pthread_create(&q->thread, NULL, workq_main, q);
    if (prc != 0) {
        pthread_cond_destroy(&q->done);
        pthread_cond_destroy(&q->work);
        pthread_mutex_destroy(&q->lock);
        memset(q, 0, sizeof(*q));
        return err_set(ERR_NOMEM, "cannot start the %s thread: %s", name, strerror(prc));
    }
    q->started = true;
    char tname[16]; /* the kernel keeps 15 characters */
    snprintf(tname, sizeof(tname), "%s", name);
    (void)pthread_setname_np(q->thread, tname);
    return 0;
}

void workq_post(struct workq *q, struct workq_item *item)
{
    pthread_mutex_lock(&q->lock);
    /* once stopping, only run may add to what the drain runs */
    assert(q->started && q->ops->run && (!q->stop || pthread_equal(pthread_self(), q->thread)));
    queue_insert_tail(&q->items, &item->node);
    q->posted++;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->lock);
}

void workq_sync(struct workq *q)
{
    assert(!pthread_equal(pthread_self(), q->thread));
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
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->lock);
    if (!first)
        return;
    assert(!pthread_equal(pthread_self(), q->thread));
    pthread_join(q->thread, NULL);
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
    memset(q, 0, sizeof(*q));
}
