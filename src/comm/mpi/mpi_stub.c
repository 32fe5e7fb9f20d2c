/* comm/mpi.h without MPI at build time: every entry point says so. */
#include <stdlib.h>

#include "comm/mpi.h"
#include "core/error.h"

#define NO_MPI "built without MPI support (install libopenmpi-dev and rebuild)"

bool mpi_built(void)
{
    return false;
}

int mpi_world_open(struct mpi_world **out)
{
    *out = NULL;
    return err_set(ERR_UNSUPPORTED, "mpi: " NO_MPI);
}

void mpi_world_close(struct mpi_world *w)
{
    (void)w;
}

void mpi_world_abort(struct mpi_world *w, int code)
{
    (void)w;
    exit(code);
}

int mpi_world_proc(const struct mpi_world *w)
{
    (void)w;
    return 0;
}

int mpi_world_procs(const struct mpi_world *w)
{
    (void)w;
    return 1;
}

const char *mpi_world_library(const struct mpi_world *w)
{
    (void)w;
    return "none";
}

int mpi_world_max_tag(const struct mpi_world *w)
{
    (void)w;
    return 0;
}

int comm_group_create_mpi(struct mpi_world *w, int n_ranks, const int *proc_of, int tag,
                          struct comm_group **out)
{
    (void)w, (void)n_ranks, (void)proc_of, (void)tag;
    *out = NULL;
    return err_set(ERR_UNSUPPORTED, "comm: a group across processes needs MPI: " NO_MPI);
}

int comm_channel_create_mpi(struct mpi_world *w, int peer, int tag, struct comm_channel **out)
{
    (void)w, (void)peer, (void)tag;
    *out = NULL;
    return err_set(ERR_UNSUPPORTED, "comm: a channel across processes needs MPI: " NO_MPI);
}

int mpi_world_bench_allreduce(struct mpi_world *w, float *buf, size_t n, int iters, double *seconds)
{
    (void)w, (void)buf, (void)n, (void)iters, (void)seconds;
    return err_set(ERR_UNSUPPORTED, "mpi: " NO_MPI);
}

int mpi_world_watch(struct mpi_world *w, const struct mpi_watch_config *cfg)
{
    (void)w, (void)cfg;
    return err_set(ERR_UNSUPPORTED, "mpi: " NO_MPI);
}

bool mpi_world_proc_lost(struct mpi_world *w, int proc)
{
    (void)w, (void)proc;
    return false;
}

int mpi_world_send(struct mpi_world *w, int peer, int tag, const void *p, size_t n)
{
    (void)w, (void)peer, (void)tag, (void)p, (void)n;
    return err_set(ERR_UNSUPPORTED, "mpi: " NO_MPI);
}

int mpi_world_recv(struct mpi_world *w, int peer, int tag, void **p, size_t *n)
{
    (void)w, (void)peer, (void)tag;
    *p = NULL;
    *n = 0;
    return err_set(ERR_UNSUPPORTED, "mpi: " NO_MPI);
}

int mpi_world_recv_unless(struct mpi_world *w, int peer, int tag, const atomic_bool *stop,
                          void **p, size_t *n)
{
    (void)stop;
    return mpi_world_recv(w, peer, tag, p, n);
}

void mpi_world_unwatch(struct mpi_world *w)
{
    (void)w;
}

int mpi_world_send_unless(struct mpi_world *w, int peer, int tag, const void *p, size_t n,
                          const atomic_bool *stop)
{
    (void)stop;
    return mpi_world_send(w, peer, tag, p, n);
}

int mpi_world_send_post(struct mpi_world *w, int peer, int tag, const void *p, size_t n,
                        const atomic_bool *stop, void (*done)(void *arg, int status), void *arg)
{
    (void)stop, (void)done, (void)arg;
    return mpi_world_send(w, peer, tag, p, n);
}
