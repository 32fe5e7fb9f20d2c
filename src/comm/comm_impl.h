/* What a collectives backend implements (threads now; MPI and NCCL later).
 *
 * A group is { ops, ctx, n_ranks }: the public functions in comm.h check
 * their arguments once and dispatch through the backend's static const ops
 * table, so a backend sees only valid ranks and never re-checks them. Each
 * backend's constructor (comm_group_create_threads, ...) fills in a group
 * with comm_group_wrap().
 */
#ifndef SHARDSWAP_COMM_COMM_IMPL_H
#define SHARDSWAP_COMM_COMM_IMPL_H

#include <stddef.h>

struct comm_ops {
    const char *name;
    /* Frees ctx; no collective is running. */
    void (*destroy)(void *ctx);
    /* The collectives of comm.h, with 0 <= rank (and root) < n_ranks. */
    void (*allreduce_sum)(void *ctx, int rank, float *buf, size_t n);
    void (*gather_cols)(void *ctx, int rank, int root, const float *local, int rows, int local_cols,
                        int col0, float *out, int total_cols);
    void (*barrier)(void *ctx, int rank);
};

struct comm_group {
    const struct comm_ops *ops;
    void *ctx; /* owned by the group: ops->destroy frees it */
    int n_ranks;
};

/* Allocates a group around a backend's ctx. On failure (ERR_NOMEM) ctx is
 * destroyed through ops, so a constructor can simply return the code. */
int comm_group_wrap(const struct comm_ops *ops, void *ctx, int n_ranks, struct comm_group **out);

/* One iteration of a spin-wait: tells the CPU we are polling (saves power,
 * frees the sibling hyper-thread, avoids a memory-order flush on exit). */
static inline void comm_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif
