/* What a collectives backend implements (threads now; MPI and NCCL later).
 *
 * A group is { ops, ctx, n_ranks, one handle per rank }: the public functions
 * in comm.c check their arguments once and dispatch through the backend's
 * static const ops table, so a backend sees only valid ranks and never
 * re-checks them. Each backend's constructor (comm_group_create_threads, ...)
 * fills in a group with comm_group_wrap(). A slot returns 0 or a negative
 * error code with a message; it is called on the rank's own thread.
 */
#ifndef SHARDSWAP_COMM_COMM_IMPL_H
#define SHARDSWAP_COMM_COMM_IMPL_H

#include <stddef.h>

struct comm_ops {
    const char *name;
    /* Frees ctx; no collective is running. */
    void (*destroy)(void *ctx);
    /* The collectives of comm.h, with 0 <= rank (and root) < n_ranks, on
     * stream s (NULL: host buffers). */
    int (*allreduce_sum)(void *ctx, int rank, struct stream *s, float *buf, size_t n);
    int (*gather_cols)(void *ctx, int rank, struct stream *s, int root, const float *local,
                       int rows, int local_cols, int col0, float *out, int total_cols);
    int (*barrier)(void *ctx, int rank);
    /* comm_group_abort: from any thread, possibly while ranks wait in a
     * collective; rc < 0. Must make every waiting rank return promptly and
     * every later collective return at once, on every rank. */
    void (*abort)(void *ctx, int rc);
};

struct comm {
    struct comm_group *g;
    int rank;
};

struct comm_group {
    const struct comm_ops *ops;
    void *ctx; /* owned by the group: ops->destroy frees it */
    int n_ranks;
    _Atomic int aborted; /* 0, or the error of the first comm_group_abort */
    struct comm *ranks;  /* (n_ranks) the handles */
};

/* A channel's implementation: a mailbox between two threads of this process
 * (comm_channel.c) or the two ends of a channel between processes
 * (comm/mpi). An implementation embeds struct comm_channel first; comm.h's
 * channel functions dispatch through ops. Slots keep comm.h's contracts. */
struct comm_channel;
struct comm_channel_ops {
    const char *name;
    void (*destroy)(struct comm_channel *c);
    int (*send)(struct comm_channel *c, struct stream *s, const float *buf, size_t n);
    int (*recv)(struct comm_channel *c, struct stream *s, float *buf, size_t n);
    void (*abort)(struct comm_channel *c, int rc);
    int (*aborted)(struct comm_channel *c);
};
struct comm_channel {
    const struct comm_channel_ops *ops;
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
