/* A fixed pool of worker threads for the CPU kernels that BLAS does not
 * cover (narrow-dtype GEMV, weight widening). One job at a time: the caller
 * runs tasks too and returns when every task is done. Workers spin briefly
 * between jobs (a decode step issues ~100 jobs back to back), then sleep. */
#ifndef SHARDSWAP_BACKEND_CPU_POOL_H
#define SHARDSWAP_BACKEND_CPU_POOL_H

typedef void (*pool_task_fn)(void *ctx, int task);

/* Sets the number of threads (caller included); n < 1 means all cores.
 * Must not be called while a job runs. */
void pool_set_threads(int n);

/* Runs fn(ctx, i) for i in [0, n_tasks) on the pool and waits. Jobs from
 * different threads are serialised. */
void pool_run(pool_task_fn fn, void *ctx, int n_tasks);

#endif
