/* Backend-independent entry points of comm.h: argument checks once, the
 * per-rank handles, the choice of backend by device kind, then dispatch. */
#include "comm/comm.h"

#include <assert.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "backend/device.h"
#include "comm/comm_cuda.h"
#include "comm/comm_impl.h"
#include "core/error.h"

int comm_group_create(struct device *const *devices, int n_ranks, struct comm_group **out)
{
    *out = NULL;
    if (n_ranks < 1)
        return err_set(ERR_INVALID, "comm: a group needs at least 1 rank, got %d", n_ranks);
    enum device_kind kind = device_kind(devices[0]);
    for (int r = 1; r < n_ranks; r++)
        if (device_kind(devices[r]) != kind)
            return err_set(ERR_INVALID,
                           "comm: devices %s and %s of one group are of different "
                           "kinds",
                           device_name(devices[0]), device_name(devices[r]));
    switch (kind) {
    case DEVICE_CPU:
        return comm_group_create_threads(n_ranks, out);
    case DEVICE_CUDA:
        return comm_group_create_cuda(devices, n_ranks, out);
    }
    return err_set(ERR_UNSUPPORTED, "comm: no collectives for device %s", device_name(devices[0]));
}

int comm_group_wrap(const struct comm_ops *ops, void *ctx, int n_ranks, struct comm_group **out)
{
    struct comm_group *g = malloc(sizeof *g);
    struct comm *ranks = calloc((size_t)n_ranks, sizeof(*ranks));
    if (!g || !ranks) {
        free(g);
        free(ranks);
        ops->destroy(ctx);
        *out = NULL;
        return err_set(ERR_NOMEM, "comm: out of memory for a %s group of %d ranks", ops->name,
                       n_ranks);
    }
    g->ops = ops;
    g->ctx = ctx;
    g->n_ranks = n_ranks;
    atomic_init(&g->aborted, 0);
    g->ranks = ranks;
    for (int r = 0; r < n_ranks; r++)
        ranks[r] = (struct comm){.g = g, .rank = r};
    *out = g;
    return ERR_OK;
}

void comm_group_destroy(struct comm_group *g)
{
    if (!g)
        return;
    g->ops->destroy(g->ctx);
    free(g->ranks);
    free(g);
}

int comm_group_size(const struct comm_group *g)
{
    return g->n_ranks;
}

struct comm *comm_group_rank(struct comm_group *g, int rank)
{
    assert(g && rank >= 0 && rank < g->n_ranks);
    return &g->ranks[rank];
}

int comm_rank(const struct comm *c)
{
    return c->rank;
}

int comm_size(const struct comm *c)
{
    return c->g->n_ranks;
}

/* The error of a call on an aborted group, on the caller's thread. */
static int comm_aborted_error(const struct comm_group *g, const char *what)
{
    int rc = atomic_load(&g->aborted);
    return err_set(rc, "comm: %s on a group of %d ranks that was aborted (%s: a peer failed)", what,
                   g->n_ranks, err_name(rc));
}

/* A backend's result: the group's abort error when the group was aborted
 * meanwhile (the backend may have returned early then, with or without an
 * error of its own), else the backend's own. */
static int comm_result(const struct comm_group *g, int rc, const char *what)
{
    if (atomic_load(&g->aborted) != 0)
        return comm_aborted_error(g, what);
    return rc;
}

void comm_group_abort(struct comm_group *g, int rc)
{
    assert(g && rc < 0);
    int none = 0;
    if (atomic_compare_exchange_strong(&g->aborted, &none, rc))
        g->ops->abort(g->ctx, rc);
}

int comm_group_aborted(const struct comm_group *g)
{
    return atomic_load(&g->aborted);
}

int comm_allreduce_sum(struct comm *c, struct stream *s, float *buf, size_t n)
{
    assert(c && (buf || n == 0));
    if (atomic_load(&c->g->aborted))
        return comm_aborted_error(c->g, "all-reduce");
    int rc = c->g->ops->allreduce_sum(c->g->ctx, c->rank, s, buf, n);
    return comm_result(c->g, rc, "all-reduce");
}

int comm_gather_cols(struct comm *c, struct stream *s, int root, const float *local, int rows,
                     int local_cols, int col0, float *out, int total_cols)
{
    assert(c && root >= 0 && root < c->g->n_ranks);
    assert(rows >= 0 && local_cols >= 0 && col0 >= 0 && col0 + local_cols <= total_cols);
    assert(local || rows == 0 || local_cols == 0);
    assert(c->rank != root || out || rows == 0 || total_cols == 0);
    if (atomic_load(&c->g->aborted))
        return comm_aborted_error(c->g, "gather");
    int rc = c->g->ops->gather_cols(c->g->ctx, c->rank, s, root, local, rows, local_cols, col0, out,
                                    total_cols);
    return comm_result(c->g, rc, "gather");
}

int comm_barrier(struct comm *c)
{
    assert(c);
    if (atomic_load(&c->g->aborted))
        return comm_aborted_error(c->g, "barrier");
    return comm_result(c->g, c->g->ops->barrier(c->g->ctx, c->rank), "barrier");
}
