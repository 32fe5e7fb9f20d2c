/* Collectives over NCCL for CUDA ranks on distinct GPUs of this process.
 *
 * The communicators are made once, with the group (ncclCommInitAll: one
 * per GPU, in this process), and kept until it is destroyed; a group lives
 * as long as a model's registration, across its swaps. Afterwards each
 * rank's thread drives its own communicator.
 *
 * - all-reduce: ncclAllReduce in place on the rank's compute stream; it
 *   returns once queued, and later work on the stream sees the sum. NCCL
 *   sums in its own order (rings, trees): every rank gets the same bits,
 *   which may differ in the last bits from the rank-order sum.
 * - gather_cols: the ranks publish their blocks' shapes in host slots (one
 *   process), then in one NCCL group the root receives every other rank's
 *   block into a staging buffer on its GPU (kept in the group, grown on
 *   demand) while the others send theirs; the root then copies each block
 *   into out's columns with cudaMemcpy2DAsync on its stream (its own block
 *   straight from local). Queued, like the all-reduce.
 * - barrier: the host barrier.
 * - abort (any thread): wakes the host barrier, then ncclCommAbort on every
 *   communicator, which also ends NCCL kernels that wait for a peer that
 *   will never come. A rank calls NCCL holding its call_lock, and abort
 *   takes it before aborting that rank's communicator, so a communicator is
 *   never freed under a call that is merely queuing work. A rank stuck
 *   inside NCCL (connection setup with a dead peer) does not release it:
 *   after ABORT_LOCK_WAIT_S abort goes ahead without the lock, since ending
 *   that wait is what ncclCommAbort is for.
 *
 * A rank whose NCCL or CUDA call fails inside a collective aborts the
 * group's communicators and barrier itself, so its peers do not wait for it.
 */
#include <assert.h>
#include <nccl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend/cuda/cuda_impl.h"
#include "comm/comm.h"
#include "comm/comm_impl.h"
#include "comm/nccl/comm_cuda_impl.h"
#include "core/error.h"

enum { ABORT_LOCK_WAIT_S = 2 };

/* A failed NCCL call as a project error naming the call and the rank's device. */
static int nccl_error(const char *dev, const char *call, ncclResult_t r)
{
    const char *last = ncclGetLastError(NULL);
    return err_set(ERR_DEVICE, "comm: %s: %s: %s%s%s", dev, call, ncclGetErrorString(r),
                   last && *last ? ": " : "", last ? last : "");
}

/* Every NCCL call made without a lock held: on failure, return its error
 * from the enclosing function (which must return int). */
#define NCCL_CHECK(dev, call)                                                                      \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess)                                                                     \
            return nccl_error((dev), #call, r_);                                                   \
    } while (0)

/* The shape of a rank's block in a gather, published on the host. */
struct nccl_slot {
    int rows, local_cols, col0, total_cols;
};

struct nccl_rank {
    int gpu;
    char dev[48]; /* "device cuda:1", for messages */
    /* Held by the rank around its NCCL calls and by abort around
     * ncclCommAbort; guards comm (NULL once aborted). */
    pthread_mutex_t call_lock;
    ncclComm_t comm;
    float *stage; /* gather staging on gpu, used when this rank is root */
    size_t stage_bytes;
    struct nccl_slot slot;
};

struct nccl_ctx {
    int n_ranks;
    struct comm_cuda_barrier bar;
    atomic_int aborted; /* 0, or abort's rc */
    struct nccl_rank rank[];
};

static void nccl_abort(void *ctx, int rc)
{
    struct nccl_ctx *x = ctx;
    int none = 0;
    atomic_compare_exchange_strong(&x->aborted, &none, rc);
    comm_cuda_barrier_abort(&x->bar, rc);
    for (int r = 0; r < x->n_ranks; r++) {
        struct nccl_rank *R = &x->rank[r];
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += ABORT_LOCK_WAIT_S;
        bool locked = pthread_mutex_timedlock(&R->call_lock, &until) == 0;
        ncclComm_t comm = R->comm;
        R->comm = NULL;
        if (comm) {
            ncclResult_t nr = ncclCommAbort(comm);
            if (nr != ncclSuccess)
                fprintf(stderr, "comm: %s: ncclCommAbort: %s\n", R->dev, ncclGetErrorString(nr));
        }
        if (locked)
            pthread_mutex_unlock(&R->call_lock);
    }
}

/* rc of a failed call of rank inside a collective: peers must not wait. */
static int nccl_fail(struct nccl_ctx *x, int rc)
{
    nccl_abort(x, rc);
    return rc;
}

/* Takes R's call_lock; ERR_* of the abort (with a message) when the group's
 * communicators are gone, without the lock. */
static int nccl_call_begin(struct nccl_ctx *x, int rank, const char *what)
{
    struct nccl_rank *R = &x->rank[rank];
    pthread_mutex_lock(&R->call_lock);
    if (R->comm)
        return 0;
    pthread_mutex_unlock(&R->call_lock);
    int rc = atomic_load(&x->aborted);
    return comm_cuda_aborted(rc < 0 ? rc : ERR_DEVICE, what, rank);
}

static int nccl_allreduce_sum(void *ctx, int rank, struct stream *s, float *buf, size_t n)
{
    struct nccl_ctx *x = ctx;
    struct nccl_rank *R = &x->rank[rank];
    if (n == 0) /* every rank passes the same n */
        return 0;
    if (!s)
        return err_set(ERR_INVALID, "comm: rank %d: a CUDA all-reduce needs the rank's stream",
                       rank);
    CUDA_CHECK(R->dev, cudaSetDevice(R->gpu));
    int rc = nccl_call_begin(x, rank, "all-reduce");
    if (rc < 0)
        return rc;
    ncclResult_t nr =
        ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, R->comm, cuda_stream_handle(s));
    pthread_mutex_unlock(&R->call_lock);
    if (nr != ncclSuccess)
        return nccl_fail(x, nccl_error(R->dev, "ncclAllReduce", nr));
    return 0;
}

/* Makes root's staging hold at least bytes; the old buffer may still be
 * read by copies queued on st, so those finish first. */
static int nccl_stage_reserve(struct nccl_rank *R, cudaStream_t st, size_t bytes)
{
    if (R->stage_bytes >= bytes)
        return 0;
    if (R->stage) {
        CUDA_CHECK(R->dev, cudaStreamSynchronize(st));
        CUDA_CHECK(R->dev, cudaFree(R->stage));
        R->stage = NULL;
        R->stage_bytes = 0;
    }
    CUDA_CHECK(R->dev, cudaMalloc((void **)&R->stage, bytes));
    R->stage_bytes = bytes;
    return 0;
}

/* Root's part of a gather once the blocks are in staging: every block into
 * out's columns, in stream order after the receives. */
static int nccl_gather_place(struct nccl_ctx *x, int root, const struct nccl_slot *slots,
                             const float *local, float *out, cudaStream_t st)
{
    struct nccl_rank *R = &x->rank[root];
    const struct nccl_slot *me = &slots[root];
    const size_t pitch = (size_t)me->total_cols * sizeof(float);
    size_t off = 0; /* floats into staging */
    for (int q = 0; q < x->n_ranks; q++) {
        const struct nccl_slot *b = &slots[q];
        if (me->rows == 0 || b->local_cols == 0)
            continue;
        const size_t w = (size_t)b->local_cols * sizeof(float);
        const float *src = q == root ? local : R->stage + off;
        CUDA_CHECK(R->dev, cudaMemcpy2DAsync(out + b->col0, pitch, src, w, w, (size_t)me->rows,
                                             cudaMemcpyDeviceToDevice, st));
        if (q != root)
            off += (size_t)me->rows * (size_t)b->local_cols;
    }
    return 0;
}

static int nccl_gather_cols(void *ctx, int rank, struct stream *s, int root, const float *local,
                            int rows, int local_cols, int col0, float *out, int total_cols)
{
    struct nccl_ctx *x = ctx;
    struct nccl_rank *R = &x->rank[rank];
    if (!s)
        return err_set(ERR_INVALID, "comm: rank %d: a CUDA gather needs the rank's stream", rank);
    cudaStream_t st = cuda_stream_handle(s);
    CUDA_CHECK(R->dev, cudaSetDevice(R->gpu));

    /* 1. publish this block's shape; the root plans its receives */
    R->slot = (struct nccl_slot){
        .rows = rows, .local_cols = local_cols, .col0 = col0, .total_cols = total_cols};
    int rc = comm_cuda_barrier_wait(&x->bar);
    if (rc < 0)
        return comm_cuda_aborted(rc, "gather", rank);
    struct nccl_slot *slots = NULL;
    size_t stage_floats = 0;
    if (rank == root) {
        slots = malloc((size_t)x->n_ranks * sizeof(*slots));
        if (!slots)
            return nccl_fail(x,
                             err_set(ERR_NOMEM, "comm: rank %d: out of memory for a gather", rank));
        long width = 0;
        for (int q = 0; q < x->n_ranks; q++) {
            slots[q] = x->rank[q].slot;
            assert(slots[q].rows == rows && "every rank passes the same rows");
            width += slots[q].local_cols;
            if (q != root)
                stage_floats += (size_t)rows * (size_t)slots[q].local_cols;
        }
        assert(width == total_cols && "blocks tile the columns");
        (void)width;
    }
    /* 2. nobody republishes before the root has read the slots */
    rc = comm_cuda_barrier_wait(&x->bar);
    if (rc < 0) {
        free(slots);
        return comm_cuda_aborted(rc, "gather", rank);
    }
    if (rank == root && (rc = nccl_stage_reserve(R, st, stage_floats * sizeof(float))) < 0) {
        free(slots);
        return nccl_fail(x, rc);
    }

    /* 3. one NCCL group: the root receives every other block, the others send */
    if ((rc = nccl_call_begin(x, rank, "gather")) < 0) {
        free(slots);
        return rc;
    }
    ncclResult_t nr = ncclGroupStart();
    const char *call = "ncclGroupStart";
    if (nr == ncclSuccess) {
        if (rank == root) {
            size_t off = 0;
            for (int q = 0; q < x->n_ranks && nr == ncclSuccess; q++) {
                size_t cnt = (size_t)rows * (size_t)slots[q].local_cols;
                if (q == root || cnt == 0)
                    continue;
                nr = ncclRecv(R->stage + off, cnt, ncclFloat, q, R->comm, st);
                call = "ncclRecv";
                off += cnt;
            }
        } else {
            size_t cnt = (size_t)rows * (size_t)local_cols;
            if (cnt > 0) {
                nr = ncclSend(local, cnt, ncclFloat, root, R->comm, st);
                call = "ncclSend";
            }
        }
        ncclResult_t end = ncclGroupEnd();
        if (nr == ncclSuccess && end != ncclSuccess) {
            nr = end;
            call = "ncclGroupEnd";
        }
    }
    pthread_mutex_unlock(&R->call_lock);
    if (nr != ncclSuccess) {
        free(slots);
        return nccl_fail(x, nccl_error(R->dev, call, nr));
    }

    /* 4. the root places the blocks */
    if (rank == root) {
        rc = nccl_gather_place(x, root, slots, local, out, st);
        free(slots);
        if (rc < 0)
            return nccl_fail(x, rc);
    }
    return 0;
}

static int nccl_barrier(void *ctx, int rank)
{
    struct nccl_ctx *x = ctx;
    int rc = comm_cuda_barrier_wait(&x->bar);
    return rc < 0 ? comm_cuda_aborted(rc, "barrier", rank) : 0;
}

static void nccl_destroy(void *ctx)
{
    struct nccl_ctx *x = ctx;
    if (!x)
        return;
    for (int r = 0; r < x->n_ranks; r++) {
        struct nccl_rank *R = &x->rank[r];
        if (R->comm) {
            ncclResult_t nr = ncclCommDestroy(R->comm);
            if (nr != ncclSuccess)
                fprintf(stderr, "comm: %s: ncclCommDestroy: %s\n", R->dev, ncclGetErrorString(nr));
        }
        if (R->stage) {
            cudaError_t e = cudaSetDevice(R->gpu);
            if (e == cudaSuccess)
                e = cudaFree(R->stage);
            if (e != cudaSuccess) {
                fprintf(stderr, "comm: %s: freeing the gather staging: %s\n", R->dev,
                        cudaGetErrorString(e));
                (void)cudaGetLastError();
            }
        }
        pthread_mutex_destroy(&R->call_lock);
    }
    comm_cuda_barrier_destroy(&x->bar);
    free(x);
}

static const struct comm_ops nccl_ops = {
    .name = "nccl",
    .destroy = nccl_destroy,
    .allreduce_sum = nccl_allreduce_sum,
    .gather_cols = nccl_gather_cols,
    .barrier = nccl_barrier,
    .abort = nccl_abort,
};

int comm_group_create_nccl(struct device *const *devices, int n_ranks, struct comm_group **out)
{
    *out = NULL;
    struct nccl_ctx *x = calloc(1, sizeof(*x) + (size_t)n_ranks * sizeof(x->rank[0]));
    int *gpus = calloc((size_t)n_ranks, sizeof(*gpus));
    ncclComm_t *comms = calloc((size_t)n_ranks, sizeof(*comms));
    if (!x || !gpus || !comms) {
        free(x);
        free(gpus);
        free(comms);
        return err_set(ERR_NOMEM, "comm: out of memory for an NCCL group of %d ranks", n_ranks);
    }
    x->n_ranks = n_ranks;
    atomic_init(&x->aborted, 0);
    for (int r = 0; r < n_ranks; r++) {
        struct nccl_rank *R = &x->rank[r];
        R->gpu = gpus[r] = cuda_device_gpu(devices[r]);
        snprintf(R->dev, sizeof(R->dev), "device %s", device_name(devices[r]));
        pthread_mutex_init(&R->call_lock, NULL);
    }
    comm_cuda_barrier_init(&x->bar, n_ranks);

    ncclResult_t nr = ncclCommInitAll(comms, n_ranks, gpus);
    free(gpus);
    if (nr != ncclSuccess) {
        int rc = nccl_error(x->rank[0].dev, "ncclCommInitAll", nr);
        err_wrap(rc, "comm: NCCL communicators for %d GPUs (%s, ...)", n_ranks,
                 device_name(devices[0]));
        free(comms);
        nccl_destroy(x);
        return rc;
    }
    for (int r = 0; r < n_ranks; r++)
        x->rank[r].comm = comms[r];
    free(comms);
    return comm_group_wrap(&nccl_ops, x, n_ranks, out);
}
