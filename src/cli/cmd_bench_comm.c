/* shardswap bench comm: the latency of a worker group's collectives and of a
 * pipeline channel, per message size and rank count, against memcpy of the
 * same bytes on one thread in the same run (what a collective moves at
 * least once). Moved here from the collectives' test, where it printed
 * numbers no check read. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "comm/comm.h"
#include "comm/mpi.h"
#include "core/error.h"
#include "core/jsonout.h"
#include "core/timing.h"

struct bench_rank {
    struct comm_group *g;
    struct comm_channel *c;
    int rank, iters;
    size_t n;
    double seconds;
    int rc;
};

static void *allreduce_rank(void *arg)
{
    struct bench_rank *b = arg;
    float *buf = calloc(b->n, sizeof(float));
    struct comm *c = comm_group_rank(b->g, b->rank);
    if (!buf) {
        b->rc = ERR_NOMEM;
        return NULL;
    }
    for (int i = 0; i < 10 && b->rc == 0; i++) /* warm-up */
        b->rc = comm_allreduce_sum(c, NULL, buf, b->n);
    if (b->rc == 0)
        b->rc = comm_barrier(c);
    double t0 = time_now();
    for (int i = 0; i < b->iters && b->rc == 0; i++)
        b->rc = comm_allreduce_sum(c, NULL, buf, b->n);
    if (b->rc == 0)
        b->rc = comm_barrier(c);
    b->seconds = time_now() - t0;
    free(buf);
    return NULL;
}

static void *channel_rank(void *arg)
{
    struct bench_rank *b = arg;
    float *buf = calloc(b->n, sizeof(float));
    if (!buf) {
        b->rc = ERR_NOMEM;
        return NULL;
    }
    double t0 = time_now();
    for (int i = 0; i < b->iters && b->rc == 0; i++)
        b->rc = b->rank == 0 ? comm_send(b->c, NULL, buf, b->n) : comm_recv(b->c, NULL, buf, b->n);
    b->seconds = time_now() - t0;
    free(buf);
    return NULL;
}

/* Runs fn on n_ranks threads; seconds per iteration of rank 0 (or the
 * receiver). */
static int run_ranks(int n_ranks, void *(*fn)(void *), struct comm_group *g,
                     struct comm_channel *ch, size_t n, int iters, double *per_iter)
{
    struct bench_rank r[16];
    pthread_t tid[16];
    int started = 0, rc = 0;
    for (int i = 0; i < n_ranks; i++) {
        r[i] = (struct bench_rank){.g = g, .c = ch, .rank = i, .iters = iters, .n = n};
        if (pthread_create(&tid[i], NULL, fn, &r[i]) != 0) {
            rc = err_set(ERR_NOMEM, "cannot start rank %d's thread", i);
            break;
        }
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    if (rc == 0 && started < n_ranks)
        rc = ERR_NOMEM;
    for (int i = 0; i < started && rc == 0; i++)
        rc = r[i].rc;
    *per_iter = r[n_ranks - 1].seconds / iters;
    return rc;
}

static double memcpy_seconds(size_t bytes, int iters)
{
    char *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b) {
        free(a);
        free(b);
        return 0;
    }
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    double t0 = time_now();
    for (int i = 0; i < iters; i++) {
        memcpy(b, a, bytes);
        __asm__ __volatile__("" : : "r"(b) : "memory");
    }
    double t = (time_now() - t0) / iters;
    free(a);
    free(b);
    return t;
}

/* One rank per process: this process's rank times `iters` all-reduces of n
 * floats (between barriers), then MPI's own MPI_Allreduce of the same
 * buffer; *ours and *ref are seconds per call. */
static int procs_allreduce(struct mpi_world *w, size_t n, int iters, int tag, double *ours,
                           double *ref)
{
    int procs = mpi_world_procs(w), me = mpi_world_proc(w);
    int proc_of[procs];
    for (int p = 0; p < procs; p++)
        proc_of[p] = p;
    float *buf = calloc(n + 1, sizeof(float));
    struct comm_group *g = NULL;
    int rc = buf ? comm_group_create_mpi(w, procs, proc_of, tag, &g) : ERR_NOMEM;
    struct comm *c = g ? comm_group_rank(g, me) : NULL;
    for (int i = 0; i < 10 && rc == 0; i++) /* warm-up */
        rc = comm_allreduce_sum(c, NULL, buf, n);
    if (rc == 0)
        rc = comm_barrier(c);
    double t0 = time_now();
    for (int i = 0; i < iters && rc == 0; i++)
        rc = comm_allreduce_sum(c, NULL, buf, n);
    if (rc == 0)
        rc = comm_barrier(c);
    *ours = (time_now() - t0) / iters;
    if (rc == 0 && (rc = mpi_world_bench_allreduce(w, buf, n, iters, ref)) == 0)
        *ref /= iters;
    comm_group_destroy(g);
    free(buf);
    if (rc == ERR_NOMEM && !buf)
        err_set(rc, "bench comm: out of memory for %zu floats", n);
    return rc;
}

/* Process 0 sends `iters` messages of n floats to process 1; seconds per
 * message on process 1's side, as 0 sees the last one go. */
static int procs_channel(struct mpi_world *w, size_t n, int iters, int tag, double *t)
{
    int me = mpi_world_proc(w);
    *t = 0;
    if (me > 1)
        return 0;
    float *buf = calloc(n + 1, sizeof(float));
    struct comm_channel *ch = NULL;
    int rc = buf ? comm_channel_create_mpi(w, 1 - me, tag, &ch) : ERR_NOMEM;
    double t0 = time_now();
    for (int i = 0; i < iters && rc == 0; i++)
        rc = me == 0 ? comm_send(ch, NULL, buf, n) : comm_recv(ch, NULL, buf, n);
    if (rc == 0 && me == 0) /* one reply: the last message has arrived */
        rc = comm_recv(ch, NULL, buf, 1);
    else if (rc == 0)
        rc = comm_send(ch, NULL, buf, 1);
    *t = (time_now() - t0) / iters;
    comm_channel_destroy(ch);
    free(buf);
    return rc;
}

/* bench comm under mpirun: the collectives across processes (comm/mpi),
 * one rank per process, against MPI's own MPI_Allreduce on the same
 * buffers; process 0 prints. */
static int bench_comm_procs(int iters, bool json)
{
    struct mpi_world *w = NULL;
    int rc = mpi_world_open(&w);
    if (rc < 0)
        return cli_fail("bench comm");
    int me = mpi_world_proc(w), procs = mpi_world_procs(w);
    static const size_t sizes[] = {512, 16384, 1u << 20}; /* floats */
    json_t *rows = json && me == 0 ? json_array() : NULL;
    if (!json && me == 0)
        printf("%-10s %6s %12s %10s %10s %10s %10s\n", "op", "procs", "floats", "us", "MPI us",
               "/MPI", "GB/s");
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]) && rc == 0; k++) {
        size_t n = sizes[k];
        int it = n >= (1u << 20) ? (iters / 50 > 0 ? iters / 50 : 1) : iters;
        double ours = 0, ref = 0, chan = 0;
        rc = procs_allreduce(w, n, it, 2 * (int)k, &ours, &ref);
        if (rc == 0)
            rc = procs_channel(w, n, it, 2 * (int)k + 1, &chan);
        if (rc < 0 || me != 0)
            continue;
        double gbs = ours > 0 ? (double)n * sizeof(float) / ours / 1e9 : 0;
        double chan_gbs = chan > 0 ? (double)n * sizeof(float) / chan / 1e9 : 0;
        if (json) {
            json_array_append_new(rows, json_pack("{s:s, s:i, s:I, s:o, s:o, s:o}", "op",
                                                  "allreduce", "procs", procs, "floats",
                                                  (json_int_t)n, "us", jsonout_real(ours * 1e6, 3),
                                                  "mpi_us", jsonout_real(ref * 1e6, 3), "gb_s",
                                                  jsonout_real(gbs, 3)));
            json_array_append_new(rows, json_pack("{s:s, s:i, s:I, s:o, s:o}", "op", "send/recv",
                                                  "procs", 2, "floats", (json_int_t)n, "us",
                                                  jsonout_real(chan * 1e6, 3), "gb_s",
                                                  jsonout_real(chan_gbs, 3)));
        } else {
            printf("%-10s %6d %12zu %10.2f %10.2f %10.2f %10.3f\n", "allreduce", procs, n,
                   ours * 1e6, ref * 1e6, ref > 0 ? ours / ref : 0, gbs);
            printf("%-10s %6d %12zu %10.2f %10s %10s %10.3f\n", "send/recv", 2, n, chan * 1e6, "-",
                   "-", chan_gbs);
        }
    }
    if (rc < 0) {
        json_decref(rows);
        cli_fail("bench comm");
        mpi_world_abort(w, 1); /* peers may wait in a collective this process left */
    }
    if (rows && jsonout_print(json_pack("{s:o}", "results", rows)) < 0)
        rc = cli_fail("bench comm");
    mpi_world_close(w);
    return rc < 0 ? 1 : 0;
}

int bench_comm(int argc, char **argv)
{
    int iters = 2000, max_ranks = 4;
    bool json = false;
    struct flag flags[] = {
        FLAG_RANGE("iters", FLAG_INT, &iters, "N", "iterations per measurement (default 2000)",
                   1, 10000000, "1..10000000"),
        FLAG_RANGE("max-ranks", FLAG_INT, &max_ranks, "R", "largest group: 2..R ranks (default 4)",
                   2, 16, "2..16"),
        FLAG("json", FLAG_BOOL, &json, NULL, "print one JSON object instead of a table"),
    };
    int rc = args_parse("bench comm",
                        "Measures the in-process collectives a model's worker group uses: "
                        "all-reduce of 2 KiB..4 MiB per rank on 2..R ranks and a pipeline "
                        "channel's send/recv, against memcpy of the same bytes on one thread "
                        "in the same run. Under mpirun (mpirun -n P shardswap bench comm): the "
                        "collectives across processes, one rank per process, against MPI's own "
                        "MPI_Allreduce on the same buffers, and a channel from process 0 to 1; "
                        "process 0 prints.",
                        argc, argv, flags, sizeof(flags) / sizeof(flags[0]));
    if (rc)
        return rc;
    if (mpi_launched() > 1)
        return bench_comm_procs(iters, json);
    static const size_t sizes[] = {512, 16384, 1u << 20}; /* floats */
    json_t *rows = json ? json_array() : NULL;
    if (!json)
        printf("%-10s %6s %12s %10s %12s %10s\n", "op", "ranks", "floats", "us", "memcpy us",
               "/memcpy");
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]) && rc == 0; k++) {
        size_t n = sizes[k];
        int it = n >= (1u << 20) ? (iters / 50 > 0 ? iters / 50 : 1) : iters;
        double ref = memcpy_seconds(n * sizeof(float), it);
        for (int ranks = 1; ranks <= max_ranks && rc == 0; ranks++) {
            double t = 0;
            const char *op = ranks == 1 ? "send/recv" : "allreduce";
            if (ranks == 1) {
                struct comm_channel *ch = NULL;
                if ((rc = comm_channel_create(&ch)) == 0)
                    rc = run_ranks(2, channel_rank, NULL, ch, n, it, &t);
                comm_channel_destroy(ch);
            } else {
                struct comm_group *g = NULL;
                if ((rc = comm_group_create_threads(ranks, &g)) == 0)
                    rc = run_ranks(ranks, allreduce_rank, g, NULL, n, it, &t);
                comm_group_destroy(g);
            }
            if (rc < 0)
                break;
            int shown = ranks == 1 ? 2 : ranks;
            if (json)
                json_array_append_new(rows, json_pack("{s:s, s:i, s:I, s:o, s:o}", "op", op,
                                                      "ranks", shown, "floats", (json_int_t)n, "us",
                                                      jsonout_real(t * 1e6, 3), "memcpy_us",
                                                      jsonout_real(ref * 1e6, 3)));
            else
                printf("%-10s %6d %12zu %10.2f %12.2f %10.2f\n", op, shown, n, t * 1e6, ref * 1e6,
                       ref > 0 ? t / ref : 0);
        }
    }
    if (rc < 0) {
        json_decref(rows);
        return cli_fail("bench comm");
    }
    if (json && jsonout_print(json_pack("{s:o}", "results", rows)) < 0)
        return cli_fail("bench comm");
    return 0;
}
