/* Collectives of a worker group whose ranks live in several processes, and
 * channels between processes (comm/mpi.h).
 *
 * Each process holds some ranks of the group (its "local" ranks, in rank
 * order). A collective runs in three steps:
 *   1. every local rank publishes its arguments in its slot and meets the
 *      others at a barrier of a threads group over the local ranks
 *      (comm_threads.c), so the lowest local rank, the leader, sees them all;
 *   2. the leader exchanges the process's part with the other processes of
 *      the group through the world's progress thread (one message per peer
 *      process and direction, all in flight at once) and finishes the
 *      collective in the local ranks' buffers;
 *   3. a second local barrier, after which every local rank returns the
 *      leader's status.
 * All-reduce: every process sends its local ranks' buffers to every other
 * one (an all-gather), and each leader sums all n_ranks buffers in rank
 * order, element by element: exactly the sum the threads backend takes, so
 * every rank of every process gets the same bits as one process would.
 * Gather: every process sends its local ranks' blocks to root's process,
 * with a header naming each block's rank, rows and columns (checked
 * against what root expects). Barrier: an empty message to and from every
 * peer process.
 *
 * Message (all-reduce): the local ranks' buffers, (n_local, n) floats.
 * Message (gather):     int32 n_blocks, then per block int32 rank, rows,
 *                       col0, cols; then the blocks' floats, (rows, cols)
 *                       each, in header order.
 *
 * Abort (any thread): sets `aborted`, wakes a leader waiting for its
 * messages and aborts the local threads group, so every local rank returns.
 * Messages already handed to the progress thread stay in flight and may
 * still complete into the group's memory, so destroying a group (or a
 * channel) with messages in flight keeps that memory: it only happens after
 * an abort for a peer that stopped answering, when the job is going down.
 *
 * Buffers are host memory: CPU devices (s is ignored, as in comm_threads.c:
 * a CPU stream is done when its kernel returns). Groups of CUDA devices
 * across processes go through NCCL (comm/nccl), not this backend.
 */
#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/kernels.h"
#include "comm/comm.h"
#include "comm/comm_impl.h"
#include "comm/mpi/mpi_impl.h"
#include "core/error.h"

enum { SUM_CHUNK = 512, HEADER_INTS = 4 };

/* ---- groups ---- */

struct mpi_slot {
    float *buf; /* all-reduce: (n) */
    size_t n;
    const float *local; /* gather: (rows, local_cols) */
    float *out;         /* gather, root only: (rows, total_cols) */
    int rows, local_cols, col0, total_cols;
};

struct mpi_group {
    struct mpi_world *w;
    int n_ranks, tag, me;
    int *proc_of;  /* (n_ranks) */
    int *local_of; /* (n_ranks) index among this process's ranks, or -1 */
    int *pos_of;   /* (n_ranks) index among its own process's ranks */
    int n_local;
    int *peers;      /* (n_peers) the other processes holding ranks, ascending */
    int *peer_ranks; /* (n_peers) how many ranks each holds */
    int n_peers;
    struct comm_group *inner; /* threads over the local ranks */
    struct mpi_slot *slot;    /* (n_local) */
    struct flight flight;
    struct mpi_op *ops; /* (2 * n_peers) */
    void *stage;        /* the outgoing message, grown as needed */
    size_t stage_cap;
    int status; /* the leader's result, read after the last barrier */
};

static int peer_index(const struct mpi_group *g, int proc)
{
    for (int i = 0; i < g->n_peers; i++)
        if (g->peers[i] == proc)
            return i;
    return -1;
}

static void *stage_reserve(struct mpi_group *g, size_t bytes)
{
    if (bytes <= g->stage_cap)
        return g->stage;
    void *p = realloc(g->stage, bytes);
    if (!p)
        return NULL;
    g->stage = p;
    g->stage_cap = bytes;
    return p;
}

/* Frees the messages the leader received, unless some are still in flight
 * (after an abort), which may yet write into them. */
static void free_received(struct mpi_group *g)
{
    if (!flight_idle(&g->flight))
        return;
    for (int i = 0; i < 2 * g->n_peers; i++)
        if (g->ops[i].kind == MPI_OP_RECV) {
            free(g->ops[i].buf);
            g->ops[i].buf = NULL;
        }
}

/* Local barrier; a group of one local rank has none to meet. */
static int local_sync(struct mpi_group *g, int li)
{
    return g->n_local > 1 ? comm_barrier(comm_group_rank(g->inner, li)) : 0;
}

/* The leader's part of an all-reduce: send ours, receive theirs, sum. */
static int allreduce_exchange(struct mpi_group *g, size_t n)
{
    size_t part = n * sizeof(float);
    char *stage = stage_reserve(g, (size_t)g->n_local * part + 1);
    if (!stage)
        return err_set(ERR_NOMEM, "comm mpi: out of memory for an all-reduce of %zu floats", n);
    for (int li = 0; li < g->n_local; li++) {
        if (g->slot[li].n != n)
            return err_set(ERR_INVALID, "comm mpi: all-reduce ranks passed %zu and %zu floats",
                           g->slot[li].n, n);
        memcpy(stage + (size_t)li * part, g->slot[li].buf, part);
    }
    for (int i = 0; i < g->n_peers; i++) {
        flight_post(&g->flight, g->w, &g->ops[2 * i], MPI_OP_SEND, g->peers[i], g->tag, stage,
                    (size_t)g->n_local * part);
        flight_post(&g->flight, g->w, &g->ops[2 * i + 1], MPI_OP_RECV, g->peers[i], g->tag, NULL,
                    0);
    }
    int rc = flight_wait(&g->flight);
    for (int i = 0; rc == 0 && i < g->n_peers; i++)
        if (g->ops[2 * i + 1].len != (size_t)g->peer_ranks[i] * part)
            rc = err_set(ERR_INVALID,
                         "comm mpi: process %d sent %zu bytes for an all-reduce of %zu floats "
                         "over its %d ranks",
                         g->peers[i], g->ops[2 * i + 1].len, n, g->peer_ranks[i]);
    if (rc == 0) {
        /* Rank r's buffer: a local slot, or its place in its process's message. */
        const float *src[g->n_ranks];
        for (int r = 0; r < g->n_ranks; r++) {
            if (g->local_of[r] >= 0)
                src[r] = (const float *)(stage + (size_t)g->local_of[r] * part);
            else
                src[r] = (const float *)g->ops[2 * peer_index(g, g->proc_of[r]) + 1].buf +
                         (size_t)g->pos_of[r] * n;
        }
        float acc[SUM_CHUNK];
        for (size_t c = 0; c < n; c += SUM_CHUNK) {
            size_t m = n - c < SUM_CHUNK ? n - c : SUM_CHUNK;
            memcpy(acc, src[0] + c, m * sizeof(float));
            for (int r = 1; r < g->n_ranks; r++)
                for (size_t j = 0; j < m; j++)
                    acc[j] += src[r][c + j];
            for (int li = 0; li < g->n_local; li++)
                memcpy(g->slot[li].buf + c, acc, m * sizeof(float));
        }
    } else if (rc != ERR_INVALID) {
        rc = err_set(rc, "comm mpi: all-reduce of %zu floats with processes of tag %d failed (%s)",
                     n, g->tag, err_name(rc));
    }
    free_received(g);
    return rc;
}

/* Runs one collective: publish (done by the caller), local barrier, the
 * leader's exchange, local barrier, the leader's status. */
static int collective(struct mpi_group *g, int li, int (*exchange)(struct mpi_group *, void *),
                      void *arg)
{
    int rc = local_sync(g, li);
    if (rc < 0)
        return rc;
    if (li == 0)
        g->status = exchange(g, arg);
    rc = local_sync(g, li);
    if (rc < 0)
        return rc;
    return g->status;
}

static int allreduce_step(struct mpi_group *g, void *arg)
{
    return allreduce_exchange(g, *(size_t *)arg);
}

static int mpi_allreduce_sum(void *ctx, int rank, struct stream *s, float *buf, size_t n)
{
    (void)s;
    struct mpi_group *g = ctx;
    int li = g->local_of[rank];
    assert(li >= 0 && "a rank of this process");
    g->slot[li].buf = buf;
    g->slot[li].n = n;
    return collective(g, li, allreduce_step, &n);
}

/* The leader's part of a gather on a process without root: our blocks to
 * root's process. */
static int gather_send(struct mpi_group *g, int root_proc)
{
    size_t floats = 0;
    for (int li = 0; li < g->n_local; li++)
        floats += (size_t)g->slot[li].rows * (size_t)g->slot[li].local_cols;
    size_t head = (1 + HEADER_INTS * (size_t)g->n_local) * sizeof(int32_t);
    char *stage = stage_reserve(g, head + floats * sizeof(float));
    if (!stage)
        return err_set(ERR_NOMEM, "comm mpi: out of memory for a gather of %zu floats", floats);
    int32_t *h = (int32_t *)stage;
    float *body = (float *)(stage + head);
    *h++ = g->n_local;
    for (int r = 0, li = 0; r < g->n_ranks; r++) {
        if (g->local_of[r] < 0)
            continue;
        const struct mpi_slot *a = &g->slot[li++];
        *h++ = r, *h++ = a->rows, *h++ = a->col0, *h++ = a->local_cols;
        size_t m = (size_t)a->rows * (size_t)a->local_cols;
        if (m > 0)
            memcpy(body, a->local, m * sizeof(float));
        body += m;
    }
    flight_post(&g->flight, g->w, &g->ops[0], MPI_OP_SEND, root_proc, g->tag, stage,
                head + floats * sizeof(float));
    int rc = flight_wait(&g->flight);
    if (rc < 0)
        return err_set(rc, "comm mpi: sending a gather to process %d failed (%s)", root_proc,
                       err_name(rc));
    return 0;
}

/* Copies a (rows, cols) block into out's columns [col0, col0 + cols). */
static void place_block(float *out, int total_cols, const float *block, int rows, int col0,
                        int cols)
{
    for (int i = 0; i < rows && cols > 0; i++)
        memcpy(out + (size_t)i * (size_t)total_cols + col0, block + (size_t)i * (size_t)cols,
               (size_t)cols * sizeof(float));
}

/* Checks and places one peer's gather message into out. */
static int gather_place(struct mpi_group *g, int peer, const char *msg, size_t len, int rows,
                        float *out, int total_cols)
{
    const int32_t *h = (const int32_t *)msg;
    size_t head = 0;
    if (len < sizeof(int32_t) || h[0] < 0 || h[0] > g->n_ranks ||
        len < (head = (1 + HEADER_INTS * (size_t)h[0]) * sizeof(int32_t)))
        return err_set(ERR_INVALID,
                       "comm mpi: a gather message of %zu bytes from process %d "
                       "has no valid header",
                       len, peer);
    const float *body = (const float *)(msg + head);
    size_t left = (len - head) / sizeof(float);
    for (int b = 0; b < h[0]; b++) {
        int r = h[1 + HEADER_INTS * b], brows = h[2 + HEADER_INTS * b];
        int col0 = h[3 + HEADER_INTS * b], cols = h[4 + HEADER_INTS * b];
        if (r < 0 || r >= g->n_ranks || g->proc_of[r] != peer || brows != rows || col0 < 0 ||
            cols < 0 || col0 > total_cols - cols || (size_t)rows * (size_t)cols > left)
            return err_set(ERR_INVALID,
                           "comm mpi: process %d's gather block for rank %d (%d rows, columns "
                           "%d+%d) does not fit root's (%d rows, %d columns)",
                           peer, r, brows, col0, cols, rows, total_cols);
        place_block(out, total_cols, body, rows, col0, cols);
        body += (size_t)rows * (size_t)cols;
        left -= (size_t)rows * (size_t)cols;
    }
    return 0;
}

/* The leader's part of a gather on root's process: every peer's blocks in. */
static int gather_receive(struct mpi_group *g, int root)
{
    const struct mpi_slot *r = &g->slot[g->local_of[root]];
    for (int li = 0; li < g->n_local; li++) {
        const struct mpi_slot *a = &g->slot[li];
        place_block(r->out, r->total_cols, a->local, r->rows, a->col0, a->local_cols);
    }
    for (int i = 0; i < g->n_peers; i++)
        flight_post(&g->flight, g->w, &g->ops[2 * i + 1], MPI_OP_RECV, g->peers[i], g->tag, NULL,
                    0);
    int rc = flight_wait(&g->flight);
    if (rc < 0)
        rc = err_set(rc, "comm mpi: receiving a gather failed (%s)", err_name(rc));
    for (int i = 0; rc == 0 && i < g->n_peers; i++)
        rc = gather_place(g, g->peers[i], g->ops[2 * i + 1].buf, g->ops[2 * i + 1].len, r->rows,
                          r->out, r->total_cols);
    free_received(g);
    return rc;
}

static int gather_step(struct mpi_group *g, void *arg)
{
    int root = *(int *)arg;
    if (g->local_of[root] >= 0)
        return gather_receive(g, root);
    return gather_send(g, g->proc_of[root]);
}

static int mpi_gather_cols(void *ctx, int rank, struct stream *s, int root, const float *local,
                           int rows, int local_cols, int col0, float *out, int total_cols)
{
    (void)s;
    struct mpi_group *g = ctx;
    int li = g->local_of[rank];
    assert(li >= 0 && "a rank of this process");
    g->slot[li] = (struct mpi_slot){.local = local,
                                    .out = out,
                                    .rows = rows,
                                    .local_cols = local_cols,
                                    .col0 = col0,
                                    .total_cols = total_cols};
    return collective(g, li, gather_step, &root);
}

static int barrier_step(struct mpi_group *g, void *arg)
{
    (void)arg;
    static char none;
    for (int i = 0; i < g->n_peers; i++) {
        flight_post(&g->flight, g->w, &g->ops[2 * i], MPI_OP_SEND, g->peers[i], g->tag, &none, 0);
        flight_post(&g->flight, g->w, &g->ops[2 * i + 1], MPI_OP_RECV, g->peers[i], g->tag, NULL,
                    0);
    }
    int rc = flight_wait(&g->flight);
    free_received(g);
    if (rc < 0)
        return err_set(rc, "comm mpi: barrier failed (%s)", err_name(rc));
    return 0;
}

static int mpi_barrier(void *ctx, int rank)
{
    struct mpi_group *g = ctx;
    assert(g->local_of[rank] >= 0 && "a rank of this process");
    return collective(g, g->local_of[rank], barrier_step, NULL);
}

static void mpi_group_abort(void *ctx, int rc)
{
    struct mpi_group *g = ctx;
    flight_abort(&g->flight, rc);
    if (g->inner)
        comm_group_abort(g->inner, rc);
}

static void mpi_group_destroy(void *ctx)
{
    struct mpi_group *g = ctx;
    if (!g)
        return;
    if (!flight_quiesce(&g->flight))
        return; /* messages still in flight into this memory: keep it (top of file) */
    comm_group_destroy(g->inner);
    for (int i = 0; g->ops && i < 2 * g->n_peers; i++)
        if (g->ops[i].kind == MPI_OP_RECV)
            free(g->ops[i].buf);
    flight_destroy(&g->flight);
    free(g->proc_of);
    free(g->local_of);
    free(g->pos_of);
    free(g->peers);
    free(g->peer_ranks);
    free(g->slot);
    free(g->ops);
    free(g->stage);
    free(g);
}

static const struct comm_ops mpi_ops = {
    .name = "mpi",
    .destroy = mpi_group_destroy,
    .allreduce_sum = mpi_allreduce_sum,
    .gather_cols = mpi_gather_cols,
    .barrier = mpi_barrier,
    .abort = mpi_group_abort,
};

/* Fills in g's maps from proc_of: local ranks, positions, peer processes. */
static int group_map(struct mpi_group *g, int procs)
{
    int n = g->n_ranks;
    int count[procs];
    memset(count, 0, sizeof count);
    for (int r = 0; r < n; r++) {
        g->pos_of[r] = count[g->proc_of[r]]++;
        g->local_of[r] = g->proc_of[r] == g->me ? g->pos_of[r] : -1;
    }
    g->n_local = count[g->me];
    for (int p = 0; p < procs; p++)
        if (p != g->me && count[p] > 0) {
            g->peers[g->n_peers] = p;
            g->peer_ranks[g->n_peers++] = count[p];
        }
    g->slot = calloc((size_t)g->n_local, sizeof *g->slot);
    g->ops = calloc((size_t)(2 * g->n_peers) + 1, sizeof *g->ops);
    if (!g->slot || !g->ops)
        return err_set(ERR_NOMEM, "comm mpi: out of memory for a group of %d ranks", n);
    return comm_group_create_threads(g->n_local, &g->inner);
}

int comm_group_create_mpi(struct mpi_world *w, int n_ranks, const int *proc_of, int tag,
                          struct comm_group **out)
{
    *out = NULL;
    int procs = mpi_world_procs(w), me = mpi_world_proc(w);
    if (n_ranks < 1)
        return err_set(ERR_INVALID, "comm mpi: a group needs at least 1 rank, got %d", n_ranks);
    if (tag < 0 || tag >= mpi_world_max_tag(w))
        return err_set(ERR_INVALID, "comm mpi: tag %d is out of range 0..%d", tag,
                       mpi_world_max_tag(w) - 1);
    bool mine = false;
    for (int r = 0; r < n_ranks; r++) {
        if (proc_of[r] < 0 || proc_of[r] >= procs)
            return err_set(ERR_INVALID,
                           "comm mpi: rank %d is placed on process %d; the job has "
                           "processes 0..%d",
                           r, proc_of[r], procs - 1);
        mine |= proc_of[r] == me;
    }
    if (!mine)
        return err_set(ERR_INVALID, "comm mpi: process %d holds no rank of the group", me);
    struct mpi_group *g = calloc(1, sizeof *g);
    if (!g)
        return err_set(ERR_NOMEM, "comm mpi: out of memory for a group of %d ranks", n_ranks);
    g->w = w;
    g->n_ranks = n_ranks;
    g->tag = tag;
    g->me = me;
    flight_init(&g->flight);
    g->proc_of = malloc((size_t)n_ranks * sizeof(int));
    g->local_of = malloc((size_t)n_ranks * sizeof(int));
    g->pos_of = malloc((size_t)n_ranks * sizeof(int));
    g->peers = malloc((size_t)procs * sizeof(int));
    g->peer_ranks = malloc((size_t)procs * sizeof(int));
    int rc = ERR_NOMEM;
    if (g->proc_of && g->local_of && g->pos_of && g->peers && g->peer_ranks) {
        memcpy(g->proc_of, proc_of, (size_t)n_ranks * sizeof(int));
        rc = group_map(g, procs);
    } else {
        err_set(rc, "comm mpi: out of memory for a group of %d ranks", n_ranks);
    }
    if (rc < 0) {
        mpi_group_destroy(g);
        return rc;
    }
    rc = comm_group_wrap(&mpi_ops, g, n_ranks, out);
    if (rc < 0)
        return rc;
    /* Only this process's ranks have a handle. */
    return 0;
}
