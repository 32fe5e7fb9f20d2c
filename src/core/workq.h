/* A work queue: one named thread running the items posted to it, one at a
 * time, in the order they were posted, in the shape of libuv's threadpool.c
 * with a pool of one; or (workq_init_pool) a pool of n threads taking the
 * items in the order they were posted, up to n of them running at once. The
 * caller embeds a struct workq_item in its job and gets the job back with
 * queue_data (core/queue.h); nothing is allocated per item. Used by the swap
 * loaders (one per device), the engine's device workers, the CPU device's
 * copy thread and the server's hang-up watcher; a pool by the engine's
 * batch runners.
 *
 * Threads and callbacks (all of ops' slots get workq_init's arg):
 * - thread_init (optional) runs on each of the queue's threads, once, before
 *   any item there: per-thread setup (a priority, a device's compute state).
 * - run (optional when idle is set: a queue nothing is posted to) runs on
 *   the queue's thread for each item, without the queue's lock.
 *   It may block (a copy, a forward, a wait on another thread) and may
 *   workq_post to this queue or any other; it may not workq_sync, workq_stop
 *   or workq_free this queue (each waits for run to return). When it
 *   returns the item is the caller's again (it may free it, in run too); an
 *   item run posts again may start on another thread of a pool before this
 *   run has returned, so run touches it no more after posting it.
 * - idle (optional; a queue of one thread only) runs on the queue's thread
 *   whenever it has no item and is not stopping, without the queue's lock;
 *   it returns how many seconds the thread may sleep before calling it
 *   again (<= 0: at once), a sleep that a post, workq_wake or workq_stop
 *   ends early. The same rules as run; a stop waits for a running idle to
 *   return. For a thread that polls something (the watcher's sockets)
 *   besides, or instead of, running items.
 *
 * The queue's lock guards its list, counters and flags; no callback runs
 * under it and nothing is waited for under it but its own conditions, so
 * workq_post may be called under any other lock (it nests inside all of
 * them). */
#ifndef SHARDSWAP_CORE_WORKQ_H
#define SHARDSWAP_CORE_WORKQ_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/queue.h"

struct workq_item {
    struct queue node; /* the queue's while posted: the caller must not touch it */
};

struct workq_ops {
    void (*thread_init)(void *arg);
    void (*run)(struct workq_item *item, void *arg);
    double (*idle)(void *arg);
};

/* Fields are the queue's; callers use the calls below. */
struct workq {
    const struct workq_ops *ops;
    void *arg;
    pthread_mutex_t lock;
    pthread_cond_t work;        /* posted, woken or stop changed */
    pthread_cond_t done;        /* completed advanced */
    struct queue items;         /* posted, not yet taken by a thread */
    uint64_t posted, completed; /* items since workq_init; run returned for `completed` */
    bool stop, woken, started;
    int n_threads;
    pthread_t *threads; /* (n_threads) */
};

/* Starts q's thread, named name (at most 15 characters are kept), running
 * ops (static, outliving q; run or idle set) with arg. ERR_NOMEM when the thread cannot be
 * started; q is then left as workq_free expects (zeroed). */
int workq_init(struct workq *q, const char *name, const struct workq_ops *ops, void *arg);

/* workq_init with n_threads >= 1 threads; more than one are named name
 * followed by their index (name's first 12 characters are kept) and need
 * idle unset. ERR_NOMEM when a thread cannot be started (the started ones
 * are joined first). */
int workq_init_pool(struct workq *q, const char *name, int n_threads, const struct workq_ops *ops,
                    void *arg);

/* Queues item to run after every item posted before it (in a pool: to be
 * taken after them). Any thread, any lock held; once workq_stop was called
 * only from run (the drain runs it too), never from another thread (an
 * assert). */
void workq_post(struct workq *q, struct workq_item *item);

/* Returns once run has returned for every item posted before the call
 * (items posted meanwhile are not waited for). Not on q's thread; a queue
 * of one thread only. */
void workq_sync(struct workq *q);

/* Ends q's idle sleep so that idle runs again soon (something it polls
 * changed). Any thread, any lock held. */
void workq_wake(struct workq *q);

/* Drains and joins: the threads run every item still queued, in order, then
 * exit, and workq_stop returns after they have. Not on q's threads; a second
 * call, or one on a queue never started, does nothing. */
void workq_stop(struct workq *q);

/* workq_stop, then releases q and zeroes it, so a second workq_free, or one
 * on a zeroed struct workq (never initialised, or whose init failed), does
 * nothing. */
void workq_free(struct workq *q);

#endif
