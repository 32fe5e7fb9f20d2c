#include "backend/cpu/pool.h"

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/timing.h"

#define POOL_MAX 256
#define POOL_SPIN_S 100e-6 /* spin this long for the next job before sleeping */

static struct {
    pthread_mutex_t lock; /* guards the sleeping path and job submission */
    pthread_cond_t wake;
    pthread_mutex_t submit; /* one job at a time */
    pthread_once_t once;
    int n_workers; /* threads besides the caller */
    pthread_t tid[POOL_MAX];
    /* generation, claim and done each on a cache line of their own: on one
     * line, every task's claim and done count took the line from the
     * thread spinning on it (2-core Xeon, two pairs of runs: 896 x 896
     * bf16 GEMVs 6% faster, 128 x 896 10%; cpu-kernels.md) */
    alignas(64) atomic_uint generation; /* bumped per job; workers sleep on it */
    /* (generation << 32) | next task to claim: a worker claims a task with
     * one compare-and-swap, which fails if the job it saw has been replaced */
    alignas(64) atomic_uint_fast64_t claim;
    atomic_int n_tasks;
    pool_task_fn fn; /* read only after a successful claim */
    void *ctx;
    alignas(64) atomic_int done; /* tasks finished */
    atomic_int want_threads; /* set by any compute thread's start-up, read once at start */
    /* pool_timing: on, this job's submission and first claim (seconds), and
     * the totals (kept by the submitting thread, under `submit`) */
    atomic_bool timing;
    double submitted;
    _Atomic double first_claim;
    struct pool_stats stats;
} pool = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .submit = PTHREAD_MUTEX_INITIALIZER,
    .once = PTHREAD_ONCE_INIT,
};

/* Claims and runs tasks of job `gen` until none are left. */
static void pool_work(unsigned gen)
{
    for (;;) {
        uint_fast64_t w = atomic_load(&pool.claim);
        if ((unsigned)(w >> 32) != gen || (int)(w & 0xffffffffu) >= atomic_load(&pool.n_tasks))
            return;
        if (atomic_compare_exchange_weak(&pool.claim, &w, w + 1)) {
            pool.fn(pool.ctx, (int)(w & 0xffffffffu));
            atomic_fetch_add(&pool.done, 1);
        }
    }
}

static void *pool_worker(void *arg)
{
    (void)arg;
    unsigned seen = 0;
    for (;;) {
        double t0 = time_now();
        while (atomic_load(&pool.generation) == seen && time_now() - t0 < POOL_SPIN_S)
            ;
        if (atomic_load(&pool.generation) == seen) {
            pthread_mutex_lock(&pool.lock);
            while (atomic_load(&pool.generation) == seen)
                pthread_cond_wait(&pool.wake, &pool.lock);
            pthread_mutex_unlock(&pool.lock);
        }
        seen = atomic_load(&pool.generation);
        if (atomic_load_explicit(&pool.timing, memory_order_relaxed)) {
            double none = 0;
            atomic_compare_exchange_strong(&pool.first_claim, &none, time_now());
        }
        pool_work(seen);
    }
    return NULL;
}

static void pool_start(void)
{
    int n = atomic_load_explicit(&pool.want_threads, memory_order_relaxed);
    if (n < 1)
        n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n > POOL_MAX)
        n = POOL_MAX;
    pool.n_workers = 0;
    for (int i = 0; i < n - 1; i++) {
        if (pthread_create(&pool.tid[i], NULL, pool_worker, NULL) != 0)
            break; /* fewer workers is still correct: the caller does the rest */
        pthread_detach(pool.tid[i]);
        pool.n_workers++;
    }
}

void pool_set_threads(int n)
{
    /* The pool is started once; later calls only matter before the first job. */
    atomic_store_explicit(&pool.want_threads, n, memory_order_relaxed);
}

void pool_run(pool_task_fn fn, void *ctx, int n_tasks)
{
    if (n_tasks <= 0)
        return;
    pthread_once(&pool.once, pool_start);
    if (n_tasks == 1 || pool.n_workers == 0) {
        for (int i = 0; i < n_tasks; i++)
            fn(ctx, i);
        return;
    }
    pthread_mutex_lock(&pool.submit);
    unsigned gen = atomic_load(&pool.generation) + 1;
    /* the new claim word first: a worker still in the previous job's
     * pool_work may hold that job's exhausted claim (index == its task
     * count); had n_tasks grown before the claim changed, its compare-and-
     * swap would succeed and run a task of this job under the old
     * generation, counting it in `done` twice (the caller then returned
     * while a task was still running: wrong results about once in 10^4
     * linear layers). Once the claim has changed, that swap fails. Workers
     * start on this job only after they see its generation, stored last. */
    atomic_store(&pool.claim, (uint_fast64_t)gen << 32);
    pool.fn = fn;
    pool.ctx = ctx;
    atomic_store(&pool.n_tasks, n_tasks);
    atomic_store(&pool.done, 0);
    const bool timing = atomic_load_explicit(&pool.timing, memory_order_relaxed);
    if (timing) {
        atomic_store(&pool.first_claim, 0.0);
        pool.submitted = time_now();
    }
    pthread_mutex_lock(&pool.lock);
    atomic_store(&pool.generation, gen);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    pool_work(gen);
    const double own_done = timing ? time_now() : 0;
    while (atomic_load(&pool.done) < n_tasks)
        ;
    if (timing) {
        const double end = time_now(), claim = atomic_load(&pool.first_claim);
        pool.stats.jobs++;
        pool.stats.wait_s += end - own_done;
        /* no worker claimed before the end: the whole job waited for one */
        pool.stats.wake_s += (claim > 0 ? claim : end) - pool.submitted;
    }
    pthread_mutex_unlock(&pool.submit);
}

void pool_timing(bool on)
{
    pthread_mutex_lock(&pool.submit);
    if (on)
        pool.stats = (struct pool_stats){0};
    atomic_store(&pool.timing, on);
    pthread_mutex_unlock(&pool.submit);
}

void pool_stats_get(struct pool_stats *out)
{
    pthread_mutex_lock(&pool.submit);
    *out = pool.stats;
    pthread_mutex_unlock(&pool.submit);
}
