/* The in-process collectives backend: the n ranks are threads of this
 * process and exchange data through each other's buffers.
 *
 * Every collective is "publish, sync, work on shared memory, sync":
 *   1. rank r writes its arguments (buffer pointers, sizes) into slot[r];
 *   2. a barrier makes every slot visible to every rank;
 *   3. each rank does its share of the work directly in the published
 *      buffers (all-reduce: rank r sums slice r of all buffers in rank order
 *      and writes the sum into slice r of every buffer, a reduce-scatter and
 *      all-gather in one pass; gather: rank r copies its block into root's out);
 *   4. a second barrier, after which no rank touches another's buffers, so
 *      every rank may return, reuse its buffer and overwrite its slot.
 * Each element of an all-reduce is summed by exactly one rank and copied to
 * all, so every rank gets the same bits, and they equal the serial rank-order
 * sum (buf_0 + buf_1) + buf_2 + ...
 *
 * The barrier is a generation counter on C11 atomics (no lock): arrivals
 * count up `arrived`; the last arrival resets it and bumps `gen`; the others
 * wait for `gen` to move. The acq_rel read-modify-writes on `arrived` and the
 * release/acquire on `gen` order every rank's pre-barrier writes before every
 * rank's post-barrier reads.
 *
 * Waiting policy (threads_wait): ranks usually arrive within microseconds of
 * each other, so a waiter first spins on `gen` with the CPU's pause hint
 * (SPIN_ITERS: 10 to 100 us, depending on the CPU's pause latency; 50 us on
 * the 2-core EPYC dev box); then it calls sched_yield() YIELD_ITERS times,
 * which lets a rank that shares our core run (about 100 us when nothing else
 * is runnable); then it sleeps on a futex until the last arrival wakes it.
 * When the group has more ranks than this process may use CPUs, spinning only
 * steals time from the ranks we wait for (measured: 4 ranks on 2 cores take
 * 120 us per all-reduce with the spin, 9 us without), so waiters go straight
 * to yielding. The waker calls FUTEX_WAKE only when a sleeper has announced
 * itself, so the fast path makes no system call.
 *
 * Abort (threads_abort, from any thread): sets `aborted`, then bumps `gen`
 * and wakes every sleeper, exactly as a last arrival would, so every waiter
 * leaves its wait loop; a rank leaving a barrier (or arriving at one) checks
 * `aborted` and returns the error instead of going on. `arrived` is garbage
 * afterwards, which does not matter: an aborted group carries no more
 * collectives.
 */
#include <assert.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/comm_impl.h"
#include "core/cpus.h"
#include "core/error.h"

enum {
    CACHE_LINE = 64,
    SPIN_ITERS = 2000,
    SPIN_ITERS_OVERSUBSCRIBED = 0,
    YIELD_ITERS = 200,
    SLICE_ALIGN = CACHE_LINE / sizeof(float), /* slices start on (relative) cache lines */
    SUM_CHUNK = 512,                          /* floats summed per pass, kept in L1 */
};

/* What rank r publishes for the collective in progress; one cache line each,
 * so publishing does not bounce other ranks' lines. */
struct threads_slot {
    alignas(CACHE_LINE) float *buf; /* all-reduce: (n) */
    size_t n;
    const float *local; /* gather: (rows, local_cols) */
    float *out;         /* gather, root only: (rows, total_cols) */
    int rows, local_cols, col0, total_cols;
};

struct threads_ctx {
    alignas(CACHE_LINE) atomic_uint arrived;
    alignas(CACHE_LINE) atomic_uint gen; /* also the futex word */
    atomic_uint sleepers;                /* waiters in (or entering) FUTEX_WAIT */
    atomic_int aborted;                  /* 0, or the rc threads_abort was given */
    int n_ranks;
    int spin_iters;
    struct threads_slot slot[]; /* (n_ranks) */
};

static void futex_wait(atomic_uint *word, unsigned expected)
{
    /* Returns at once (EAGAIN) when *word != expected; EINTR and spurious
     * wake-ups are handled by the caller's loop. */
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_all(atomic_uint *word)
{
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Waits until gen != g (see the policy at the top of the file). */
static void threads_wait(struct threads_ctx *t, unsigned g)
{
    for (int i = 0; i < t->spin_iters; i++) {
        if (atomic_load_explicit(&t->gen, memory_order_acquire) != g)
            return;
        comm_cpu_relax();
    }
    for (int i = 0; i < YIELD_ITERS; i++) {
        if (atomic_load_explicit(&t->gen, memory_order_acquire) != g)
            return;
        sched_yield();
    }
    /* Announce, then re-check (both seq_cst, paired with the waker's store
     * of gen and load of sleepers): either the waker sees us, or we see its
     * new gen, or the kernel does, so no wake-up is lost. */
    while (atomic_load_explicit(&t->gen, memory_order_acquire) == g) {
        atomic_fetch_add_explicit(&t->sleepers, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&t->gen, memory_order_seq_cst) == g)
            futex_wait(&t->gen, g);
        atomic_fetch_sub_explicit(&t->sleepers, 1, memory_order_relaxed);
    }
}

/* Returns 0 when all n_ranks have called it; everything any rank wrote
 * before it is visible to every rank after it. Returns the abort's rc
 * (< 0) when the group is or gets aborted: the ranks are then not in step. */
static int threads_sync(struct threads_ctx *t)
{
    /* Read before arriving: gen cannot move until we have arrived (or an
     * abort moves it, which the check below catches). */
    unsigned g = atomic_load_explicit(&t->gen, memory_order_acquire);
    int rc = atomic_load_explicit(&t->aborted, memory_order_acquire);
    if (rc < 0)
        return rc;
    unsigned before = atomic_fetch_add_explicit(&t->arrived, 1, memory_order_acq_rel);
    if (before + 1 < (unsigned)t->n_ranks) {
        threads_wait(t, g);
        return atomic_load_explicit(&t->aborted, memory_order_acquire);
    }
    /* Last arrival. Nobody touches `arrived` again before seeing the new gen. */
    atomic_store_explicit(&t->arrived, 0, memory_order_relaxed);
    atomic_store_explicit(&t->gen, g + 1, memory_order_seq_cst);
    if (atomic_load_explicit(&t->sleepers, memory_order_seq_cst) > 0)
        futex_wake_all(&t->gen);
    return atomic_load_explicit(&t->aborted, memory_order_acquire);
}

/* Rank r's slice [*lo, *hi) of n elements: equal shares rounded up to
 * SLICE_ALIGN, so neighbouring ranks rarely write the same cache line. */
static void slice_of(size_t n, int n_ranks, int rank, size_t *lo, size_t *hi)
{
    size_t share = (n + (size_t)n_ranks - 1) / (size_t)n_ranks;
    share = (share + SLICE_ALIGN - 1) / SLICE_ALIGN * SLICE_ALIGN;
    size_t start = share * (size_t)rank;
    *lo = start < n ? start : n;
    *hi = n - *lo < share ? n : *lo + share;
}

static int threads_allreduce_sum(void *ctx, int rank, struct stream *s, float *buf, size_t n)
{
    (void)s; /* CPU streams are done when a kernel returns */
    struct threads_ctx *t = ctx;
    int n_ranks = t->n_ranks;
    if (n_ranks == 1)
        return 0;
    t->slot[rank].buf = buf;
    t->slot[rank].n = n;
    int rc = threads_sync(t);
    if (rc < 0)
        return rc;
    assert(t->slot[0].n == n && "every rank passes the same n");

    /* Sum slice `rank` of every buffer in rank order, then write it back to all. */
    size_t lo, hi;
    slice_of(n, n_ranks, rank, &lo, &hi);
    float acc[SUM_CHUNK];
    for (size_t c = lo; c < hi; c += SUM_CHUNK) {
        size_t m = hi - c; /* >= 1 */
        if (m > SUM_CHUNK)
            m = SUM_CHUNK;
        const float *p0 = t->slot[0].buf + c;
        for (size_t j = 0; j < m; j++)
            acc[j] = p0[j];
        for (int q = 1; q < n_ranks; q++) {
            const float *p = t->slot[q].buf + c;
            for (size_t j = 0; j < m; j++)
                acc[j] += p[j];
        }
        for (int q = 0; q < n_ranks; q++)
            memcpy(t->slot[q].buf + c, acc, m * sizeof(float));
    }
    return threads_sync(t);
}

#ifndef NDEBUG
/* True when the published blocks cover [0, total_cols) exactly once. */
static int blocks_tile(const struct threads_ctx *t, int total_cols)
{
    long width = 0;
    for (int q = 0; q < t->n_ranks; q++) {
        const struct threads_slot *a = &t->slot[q];
        if (a->col0 < 0 || a->local_cols < 0 || a->col0 + a->local_cols > total_cols)
            return 0;
        width += a->local_cols;
        for (int p = 0; p < q; p++) {
            const struct threads_slot *b = &t->slot[p];
            if (a->col0 < b->col0 + b->local_cols && b->col0 < a->col0 + a->local_cols &&
                a->local_cols > 0 && b->local_cols > 0)
                return 0;
        }
    }
    return width == total_cols;
}
#endif

static int threads_gather_cols(void *ctx, int rank, struct stream *s, int root,
                               const float *local, int rows, int local_cols, int col0, float *out,
                               int total_cols)
{
    (void)s;
    struct threads_ctx *t = ctx;
    struct threads_slot *mine = &t->slot[rank];
    mine->local = local;
    mine->out = out;
    mine->rows = rows;
    mine->local_cols = local_cols;
    mine->col0 = col0;
    mine->total_cols = total_cols;
    int rc = threads_sync(t);
    if (rc < 0)
        return rc;

    /* Every rank writes its own block into root's out: disjoint columns. */
    const struct threads_slot *r = &t->slot[root];
    assert(r->rows == rows && "every rank passes the same rows");
    assert((rank != root || blocks_tile(t, r->total_cols)) && "blocks tile the columns");
    if (local_cols > 0) {
        for (int i = 0; i < rows; i++)
            memcpy(r->out + (size_t)i * (size_t)r->total_cols + col0,
                   local + (size_t)i * (size_t)local_cols, (size_t)local_cols * sizeof(float));
    }
    return threads_sync(t);
}

static int threads_barrier(void *ctx, int rank)
{
    (void)rank;
    return threads_sync(ctx);
}

static void threads_abort(void *ctx, int rc)
{
    struct threads_ctx *t = ctx;
    int none = 0;
    if (!atomic_compare_exchange_strong(&t->aborted, &none, rc))
        return;
    /* As a last arrival does: move gen (seq_cst, after `aborted`), then wake
     * the sleepers; a waiter that sees the new gen sees `aborted` too. */
    atomic_fetch_add_explicit(&t->gen, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&t->sleepers, memory_order_seq_cst) > 0)
        futex_wake_all(&t->gen);
}

static void threads_destroy(void *ctx)
{
    free(ctx);
}

static const struct comm_ops threads_ops = {
    .name = "threads",
    .destroy = threads_destroy,
    .allreduce_sum = threads_allreduce_sum,
    .gather_cols = threads_gather_cols,
    .barrier = threads_barrier,
    .abort = threads_abort,
};

int comm_group_create_threads(int n_ranks, struct comm_group **out)
{
    *out = NULL;
    if (n_ranks < 1)
        return err_set(ERR_INVALID, "comm: a group needs at least 1 rank, got %d", n_ranks);
    size_t size = sizeof(struct threads_ctx) + (size_t)n_ranks * sizeof(struct threads_slot);
    size = (size + CACHE_LINE - 1) / CACHE_LINE * CACHE_LINE;
    struct threads_ctx *t = aligned_alloc(CACHE_LINE, size);
    if (!t)
        return err_set(ERR_NOMEM, "comm: out of memory for a group of %d threads", n_ranks);
    memset(t, 0, size);
    atomic_init(&t->arrived, 0);
    atomic_init(&t->gen, 0);
    atomic_init(&t->sleepers, 0);
    atomic_init(&t->aborted, 0);
    t->n_ranks = n_ranks;
    t->spin_iters = n_ranks > cpus_usable() ? SPIN_ITERS_OVERSUBSCRIBED : SPIN_ITERS;
    return comm_group_wrap(&threads_ops, t, n_ranks, out);
}
