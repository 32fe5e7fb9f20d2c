/* A fixed pool of worker threads for the CPU kernels that BLAS does not
 * cover (narrow-dtype GEMV, weight widening). One job at a time: the caller
 * runs tasks too and returns when every task is done. Workers spin briefly
 * between jobs (a decode step issues ~100 jobs back to back), then sleep. */
#ifndef SHARDSWAP_BACKEND_CPU_POOL_H
#define SHARDSWAP_BACKEND_CPU_POOL_H

#include <stdbool.h>

typedef void (*pool_task_fn)(void *ctx, int task);

/* Sets the number of threads (caller included); n < 1 means all cores.
 * Must not be called while a job runs. */
void pool_set_threads(int n);

/* Runs fn(ctx, i) for i in [0, n_tasks) on the pool and waits. Jobs from
 * different threads are serialised. */
void pool_run(pool_task_fn fn, void *ctx, int n_tasks);

/* What the pool's jobs cost beyond their tasks, counted while
 * pool_timing(true) holds (off by default: nothing is timed): jobs run over
 * the workers, the caller's seconds waiting for the last task after its own
 * (a worker late to wake, or a task longer than the others), and the
 * seconds from a job's submission to a worker's first claim on it. */
struct pool_stats {
    double jobs;
    double wait_s;
    double wake_s;
};
void pool_timing(bool on);
/* The counts since the last pool_timing(true). */
void pool_stats_get(struct pool_stats *out);

#endif
