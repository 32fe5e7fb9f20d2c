/* Collectives for CUDA ranks that share GPUs (partitions of one GPU, which
 * NCCL refuses), in this process: the pattern of comm_threads.c over device
 * memory.
 *
 * Every collective is "publish, sync, work on the published buffers, sync":
 *   1. rank r writes its arguments (device pointers, sizes) into slot[r]
 *      and waits for its own stream's work (cudaStreamSynchronize), so its
 *      buffers are final and nothing of its still reads or writes them;
 *   2. a host barrier makes every slot visible to every rank;
 *   3. each rank does its share on its own stream and waits for it:
 *      all-reduce: rank r sums slice r of every rank's buffer in rank order
 *      (comm_cuda_sum.cu) and writes the sum into slice r of every buffer;
 *      gather: rank r copies its block into root's out (cudaMemcpy2DAsync);
 *   4. a second barrier, after which no rank touches another's buffers.
 * Each element is summed by exactly one rank and copied to all, so every
 * rank gets the same bits, equal to the serial rank-order sum, as with the
 * threads backend. The host round trips (two stream syncs and two barriers
 * per collective) make this slower than NCCL; it exists so that tensor
 * parallelism runs, and is tested, on a one-GPU machine.
 *
 * Ranks on different GPUs (a mix such as cuda:0, cuda:0.1, cuda:1) need
 * peer access between those GPUs, enabled at group creation; without it
 * the group is refused.
 *
 * Threads: each slot is called on its rank's thread; abort from any thread
 * wakes the barrier. A rank whose CUDA call fails inside a collective
 * aborts the barrier too, so its peers return instead of waiting for it.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_impl.h"
#include "comm/comm.h"
#include "comm/comm_impl.h"
#include "comm/nccl/comm_cuda_impl.h"
#include "comm/nccl/comm_cuda_sum.h"
#include "core/error.h"

/* What rank r publishes for the collective in progress. */
struct local_slot {
    float *buf; /* all-reduce: (n) */
    size_t n;
    const float *local; /* gather: (rows, local_cols) */
    float *out;         /* gather, root only: (rows, total_cols) */
    int rows, local_cols, col0, total_cols;
};

struct local_rank {
    int gpu;
    char dev[48]; /* "device cuda:0.1", for messages */
};

struct local_ctx {
    int n_ranks;
    struct comm_cuda_barrier bar;
    struct local_rank *ranks; /* (n_ranks) */
    struct local_slot *slot;  /* (n_ranks) */
};

/* A failed CUDA call of rank inside a collective: the peers must not wait
 * for it. */
static int local_fail(struct local_ctx *x, int rc)
{
    comm_cuda_barrier_abort(&x->bar, rc);
    return rc;
}

static int local_sync(struct local_ctx *x, int rank, const char *what)
{
    int rc = comm_cuda_barrier_wait(&x->bar);
    return rc < 0 ? comm_cuda_aborted(rc, what, rank) : 0;
}

/* Makes rank's GPU current and waits for s's queued work. */
static int local_drain(struct local_ctx *x, int rank, cudaStream_t st)
{
    const char *dev = x->ranks[rank].dev;
    CUDA_CHECK(dev, cudaSetDevice(x->ranks[rank].gpu));
    CUDA_CHECK(dev, cudaStreamSynchronize(st));
    return 0;
}

/* Rank r's slice [*lo, *hi) of n elements: equal shares, rounded up to 32
 * floats (128 bytes) so that ranks write whole cache lines of their own. */
static void local_slice(size_t n, int n_ranks, int rank, size_t *lo, size_t *hi)
{
    size_t share = (n + (size_t)n_ranks - 1) / (size_t)n_ranks;
    share = (share + 31) / 32 * 32;
    size_t start = share * (size_t)rank;
    *lo = start < n ? start : n;
    *hi = n - *lo < share ? n : *lo + share;
}

static int local_allreduce_sum(void *ctx, int rank, struct stream *s, float *buf, size_t n)
{
    struct local_ctx *x = ctx;
    if (x->n_ranks == 1 || n == 0) /* every rank passes the same n */
        return 0;
    if (!s)
        return err_set(ERR_INVALID, "comm: rank %d: a CUDA all-reduce needs the rank's stream",
                       rank);
    cudaStream_t st = cuda_stream_handle(s);
    x->slot[rank].buf = buf;
    x->slot[rank].n = n;
    int rc = local_drain(x, rank, st);
    if (rc < 0)
        return local_fail(x, rc);
    if ((rc = local_sync(x, rank, "all-reduce")) < 0)
        return rc;
    assert(x->slot[0].n == n && "every rank passes the same n");

    size_t lo, hi;
    local_slice(n, x->n_ranks, rank, &lo, &hi);
    if (hi > lo) {
        float *bufs[COMM_CUDA_SUM_MAX_RANKS];
        for (int q = 0; q < x->n_ranks; q++)
            bufs[q] = x->slot[q].buf;
        cudaError_t e = comm_cuda_sum_slice(bufs, x->n_ranks, lo, hi, st);
        if (e != cudaSuccess)
            return local_fail(x, cuda_error(x->ranks[rank].dev, "comm_cuda_sum_slice", e));
        if ((rc = local_drain(x, rank, st)) < 0)
            return local_fail(x, rc);
    }
    return local_sync(x, rank, "all-reduce");
}

#ifndef NDEBUG
/* True when the published blocks cover [0, total_cols) exactly once. */
static int local_blocks_tile(const struct local_ctx *x, int total_cols)
{
    long width = 0;
    for (int q = 0; q < x->n_ranks; q++) {
        const struct local_slot *a = &x->slot[q];
        if (a->col0 < 0 || a->local_cols < 0 || a->col0 + a->local_cols > total_cols)
            return 0;
        width += a->local_cols;
        for (int p = 0; p < q; p++) {
            const struct local_slot *b = &x->slot[p];
            if (a->col0 < b->col0 + b->local_cols && b->col0 < a->col0 + a->local_cols &&
                a->local_cols > 0 && b->local_cols > 0)
                return 0;
        }
    }
    return width == total_cols;
}
#endif

static int local_gather_cols(void *ctx, int rank, struct stream *s, int root, const float *local,
                             int rows, int local_cols, int col0, float *out, int total_cols)
{
    struct local_ctx *x = ctx;
    if (!s)
        return err_set(ERR_INVALID, "comm: rank %d: a CUDA gather needs the rank's stream", rank);
    cudaStream_t st = cuda_stream_handle(s);
    x->slot[rank] = (struct local_slot){.local = local,
                                        .out = out,
                                        .rows = rows,
                                        .local_cols = local_cols,
                                        .col0 = col0,
                                        .total_cols = total_cols};
    int rc = local_drain(x, rank, st);
    if (rc < 0)
        return local_fail(x, rc);
    if ((rc = local_sync(x, rank, "gather")) < 0)
        return rc;

    /* Every rank writes its own block into root's out: disjoint columns. */
    const struct local_slot *r = &x->slot[root];
    assert(r->rows == rows && "every rank passes the same rows");
    assert((rank != root || local_blocks_tile(x, r->total_cols)) && "blocks tile the columns");
    if (rows > 0 && local_cols > 0) {
        const size_t w = (size_t)local_cols * sizeof(float);
        cudaError_t e = cudaMemcpy2DAsync(r->out + col0, (size_t)r->total_cols * sizeof(float),
                                          local, w, w, (size_t)rows, cudaMemcpyDefault, st);
        if (e != cudaSuccess)
            return local_fail(x, cuda_error(x->ranks[rank].dev, "cudaMemcpy2DAsync", e));
        if ((rc = local_drain(x, rank, st)) < 0)
            return local_fail(x, rc);
    }
    return local_sync(x, rank, "gather");
}

static int local_barrier(void *ctx, int rank)
{
    return local_sync(ctx, rank, "barrier");
}

static void local_abort(void *ctx, int rc)
{
    struct local_ctx *x = ctx;
    comm_cuda_barrier_abort(&x->bar, rc);
}

static void local_destroy(void *ctx)
{
    struct local_ctx *x = ctx;
    if (!x)
        return;
    comm_cuda_barrier_destroy(&x->bar);
    free(x->ranks);
    free(x->slot);
    free(x);
}

static const struct comm_ops local_ops = {
    .name = "cuda-local",
    .destroy = local_destroy,
    .allreduce_sum = local_allreduce_sum,
    .gather_cols = local_gather_cols,
    .barrier = local_barrier,
    .abort = local_abort,
};

/* Lets every GPU of the group read and write every other's memory (the sum
 * kernel touches every rank's buffer from one GPU). */
static int local_enable_peers(struct device *const *devices, int n_ranks)
{
    for (int a = 0; a < n_ranks; a++) {
        int ga = cuda_device_gpu(devices[a]);
        const char *dev = device_name(devices[a]);
        for (int b = 0; b < n_ranks; b++) {
            int gb = cuda_device_gpu(devices[b]);
            if (ga == gb)
                continue;
            int can = 0;
            CUDA_CHECK(dev, cudaDeviceCanAccessPeer(&can, ga, gb));
            if (!can)
                return err_set(ERR_UNSUPPORTED,
                               "comm: ranks on %s and %s: GPU %d cannot access GPU %d's memory; "
                               "give every rank its own GPU (NCCL) or put them all on one",
                               device_name(devices[a]), device_name(devices[b]), ga, gb);
            CUDA_CHECK(dev, cudaSetDevice(ga));
            cudaError_t e = cudaDeviceEnablePeerAccess(gb, 0);
            if (e == cudaErrorPeerAccessAlreadyEnabled)
                (void)cudaGetLastError();
            else if (e != cudaSuccess)
                return cuda_error(dev, "cudaDeviceEnablePeerAccess", e);
        }
    }
    return 0;
}

int comm_group_create_cuda_local(struct device *const *devices, int n_ranks,
                                 struct comm_group **out)
{
    *out = NULL;
    if (n_ranks > COMM_CUDA_SUM_MAX_RANKS)
        return err_set(ERR_UNSUPPORTED, "comm: %d ranks sharing GPUs: at most %d", n_ranks,
                       COMM_CUDA_SUM_MAX_RANKS);
    int rc = local_enable_peers(devices, n_ranks);
    if (rc < 0)
        return rc;
    struct local_ctx *x = calloc(1, sizeof(*x));
    if (x) {
        x->ranks = calloc((size_t)n_ranks, sizeof(*x->ranks));
        x->slot = calloc((size_t)n_ranks, sizeof(*x->slot));
    }
    if (!x || !x->ranks || !x->slot) {
        if (x) {
            free(x->ranks);
            free(x->slot);
        }
        free(x);
        return err_set(ERR_NOMEM, "comm: out of memory for a group of %d CUDA ranks", n_ranks);
    }
    x->n_ranks = n_ranks;
    for (int r = 0; r < n_ranks; r++) {
        x->ranks[r].gpu = cuda_device_gpu(devices[r]);
        snprintf(x->ranks[r].dev, sizeof(x->ranks[r].dev), "device %s", device_name(devices[r]));
    }
    comm_cuda_barrier_init(&x->bar, n_ranks);
    return comm_group_wrap(&local_ops, x, n_ranks, out);
}
