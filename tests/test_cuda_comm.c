/* Collectives of CUDA groups: TP=2 on two partitions of GPU 0 (always
 * possible with one GPU: the in-process implementation, whose sum must
 * equal the rank-order host sum bit for bit) and, with two GPUs or more,
 * on cuda:0 and cuda:1 through NCCL (identical on both ranks, within 1e-6
 * of the host sum). Each: all-reduce of random vectors of odd sizes,
 * gather_cols with unequal blocks, barriers, and an abort while a rank
 * waits.
 *
 * Public headers only: it builds without CUDA and exits 77 (skipped) with
 * the reason when no CUDA device opens. Worker threads never call CHECK
 * (its counters are not thread-safe): each rank counts its own failures in
 * bad[rank], and main checks after joining. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backend/device.h"
#include "backend/kernels.h"
#include "comm/comm.h"
#include "core/error.h"
#include "test.h"

#define MiB ((uint64_t)1 << 20)

enum { RANKS = 2, AR_MAX = 100003, ROWS = 5 };
static const size_t ar_sizes[] = {1, 7, 1001, AR_MAX};

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Deterministic xorshift64*, floats in [-1, 1). */
static float rng_float(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    uint64_t v = *s * 2685821657736338717ull;
    return (float)((double)(v >> 40) / (double)(1u << 23) - 1.0);
}

struct setup {
    const char *what;
    bool exact; /* rank-order sum bit for bit (local) or within 1e-6 (NCCL) */
    struct device *dev[RANKS];
    struct comm_group *g;
    float *in[RANKS];  /* (AR_MAX) each rank's input, on the host */
    float *want;       /* (AR_MAX) rank-order sum */
    float *got[RANKS]; /* (AR_MAX) each rank's result */
    float gather[ROWS * 64];
    int bad[RANKS];
    int rc[RANKS];
    atomic_int phase;
};

/* ---- one function on every rank's thread ---- */

typedef void (*rank_fn)(struct setup *st, int rank, struct stream *s);

struct rank_thread {
    pthread_t tid;
    rank_fn fn;
    struct setup *st;
    int rank;
};

static void *rank_main(void *p)
{
    struct rank_thread *t = p;
    struct device *d = t->st->dev[t->rank];
    device_compute_thread_init(d);
    struct stream *s = NULL;
    if (device_stream_create(d, &s) < 0) {
        fprintf(stderr, "rank %d: %s\n", t->rank, err_msg());
        t->st->bad[t->rank]++;
        return NULL;
    }
    t->fn(t->st, t->rank, s);
    device_stream_destroy(s);
    return NULL;
}

static void run_ranks(struct setup *st, int n, rank_fn fn)
{
    struct rank_thread th[RANKS];
    for (int r = 0; r < n; r++) {
        th[r] = (struct rank_thread){.fn = fn, .st = st, .rank = r};
        if (pthread_create(&th[r].tid, NULL, rank_main, &th[r]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(1);
        }
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r].tid, NULL);
}

static int bad_total(const struct setup *st)
{
    int n = 0;
    for (int r = 0; r < RANKS; r++)
        n += st->bad[r];
    return n;
}

/* ---- all-reduce ---- */

static void ar_rank(struct setup *st, int rank, struct stream *s)
{
    struct device *d = st->dev[rank];
    struct dbuf *b = NULL;
    if (device_alloc(d, AR_MAX * sizeof(float), &b) < 0) {
        fprintf(stderr, "rank %d: %s\n", rank, err_msg());
        st->bad[rank]++;
        return;
    }
    struct comm *c = comm_group_rank(st->g, rank);
    float *p = dbuf_ptr(b);
    for (size_t k = 0; k < sizeof(ar_sizes) / sizeof(ar_sizes[0]); k++) {
        size_t n = ar_sizes[k];
        int rc = kern_to_device(s, p, st->in[rank], n * sizeof(float));
        if (rc == 0)
            rc = comm_allreduce_sum(c, s, p, n);
        if (rc == 0)
            rc = kern_to_host(s, st->got[rank], p, n * sizeof(float));
        if (rc < 0) {
            fprintf(stderr, "%s: rank %d: n %zu: %s\n", st->what, rank, n, err_msg());
            st->bad[rank]++;
            continue;
        }
        if (st->exact) {
            if (memcmp(st->got[rank], st->want, n * sizeof(float)) != 0) {
                fprintf(stderr, "%s: rank %d: n %zu: not the rank-order sum\n", st->what, rank, n);
                st->bad[rank]++;
            }
        } else if (test_rel_err(st->got[rank], st->want, n) > 1e-6) {
            fprintf(stderr, "%s: rank %d: n %zu: relative error %g\n", st->what, rank, n,
                    test_rel_err(st->got[rank], st->want, n));
            st->bad[rank]++;
        }
        /* every rank the same bits: compare after both are done */
        if (comm_barrier(c) < 0)
            st->bad[rank]++;
        if (rank == 0 && memcmp(st->got[0], st->got[1], n * sizeof(float)) != 0) {
            fprintf(stderr, "%s: n %zu: ranks disagree\n", st->what, n);
            st->bad[rank]++;
        }
        if (comm_barrier(c) < 0)
            st->bad[rank]++;
    }
    device_free(b);
}

static void test_allreduce(struct setup *st)
{
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (int r = 0; r < RANKS; r++)
        for (size_t i = 0; i < AR_MAX; i++)
            st->in[r][i] = rng_float(&seed);
    for (size_t i = 0; i < AR_MAX; i++) {
        float acc = st->in[0][i];
        for (int r = 1; r < RANKS; r++)
            acc += st->in[r][i];
        st->want[i] = acc;
    }
    memset(st->bad, 0, sizeof(st->bad));
    run_ranks(st, RANKS, ar_rank);
    CHECK_MSG(bad_total(st) == 0, "%s: all-reduce", st->what);
}

/* ---- gather_cols with unequal blocks, out of rank order ----
 * total 7 columns: rank 0 has columns [4, 7), rank 1 has [0, 4). */

static const int g_cols[RANKS] = {3, 4}, g_col0[RANKS] = {4, 0};
enum { G_TOTAL = 7 };

static float g_value(int row, int col)
{
    return (float)(row * 100 + col) + 0.25f;
}

static void gather_rank(struct setup *st, int rank, struct stream *s)
{
    struct device *d = st->dev[rank];
    struct comm *c = comm_group_rank(st->g, rank);
    struct dbuf *loc = NULL, *out = NULL;
    int rc = device_alloc(d, ROWS * 64 * sizeof(float), &loc);
    if (rc == 0)
        rc = device_alloc(d, ROWS * 64 * sizeof(float), &out);
    float host[ROWS * 64];
    for (int root = 0; root < RANKS && rc == 0; root++) {
        for (int i = 0; i < ROWS; i++)
            for (int j = 0; j < g_cols[rank]; j++)
                host[i * g_cols[rank] + j] = g_value(i, g_col0[rank] + j);
        rc = kern_to_device(s, dbuf_ptr(loc), host, sizeof(float) * ROWS * (size_t)g_cols[rank]);
        if (rc == 0)
            rc = comm_gather_cols(c, s, root, dbuf_ptr(loc), ROWS, g_cols[rank], g_col0[rank],
                                  rank == root ? dbuf_ptr(out) : NULL, G_TOTAL);
        if (rc == 0 && rank == root)
            rc = kern_to_host(s, host, dbuf_ptr(out), sizeof(float) * ROWS * G_TOTAL);
        if (rc == 0 && rank == root) {
            for (int i = 0; i < ROWS; i++)
                for (int j = 0; j < G_TOTAL; j++)
                    if (host[i * G_TOTAL + j] != g_value(i, j)) {
                        fprintf(stderr, "%s: gather to %d: out[%d][%d] = %g, want %g\n", st->what,
                                root, i, j, host[i * G_TOTAL + j], g_value(i, j));
                        st->bad[rank]++;
                        i = ROWS;
                        break;
                    }
        }
        /* a gather of zero rows is a no-op on every rank */
        if (rc == 0)
            rc = comm_gather_cols(c, s, root, dbuf_ptr(loc), 0, g_cols[rank], g_col0[rank],
                                  rank == root ? dbuf_ptr(out) : NULL, G_TOTAL);
        if (rc == 0)
            rc = comm_barrier(c);
    }
    if (rc < 0) {
        fprintf(stderr, "%s: gather: rank %d: %s\n", st->what, rank, err_msg());
        st->bad[rank]++;
    }
    device_free(loc);
    device_free(out);
}

static void test_gather(struct setup *st)
{
    memset(st->bad, 0, sizeof(st->bad));
    run_ranks(st, RANKS, gather_rank);
    CHECK_MSG(bad_total(st) == 0, "%s: gather", st->what);
}

/* ---- barriers ---- */

static void barrier_rank(struct setup *st, int rank, struct stream *s)
{
    (void)s;
    struct comm *c = comm_group_rank(st->g, rank);
    for (int i = 0; i < 200; i++)
        if (comm_barrier(c) < 0) {
            fprintf(stderr, "%s: barrier %d: %s\n", st->what, i, err_msg());
            st->bad[rank]++;
            return;
        }
}

static void test_barrier(struct setup *st)
{
    memset(st->bad, 0, sizeof(st->bad));
    run_ranks(st, RANKS, barrier_rank);
    CHECK_MSG(bad_total(st) == 0, "%s: barrier", st->what);
}

/* ---- abort while rank 0 waits for rank 1, which never comes ---- */

static void abort_rank(struct setup *st, int rank, struct stream *s)
{
    struct comm *c = comm_group_rank(st->g, rank);
    atomic_store(&st->phase, 1);
    st->rc[rank] = comm_barrier(c);
    /* and every later collective fails at once */
    float *p = NULL;
    struct dbuf *b = NULL;
    if (device_alloc(st->dev[rank], 64, &b) == 0)
        p = dbuf_ptr(b);
    if (p && comm_allreduce_sum(c, s, p, 3) != ERR_IO)
        st->bad[rank]++;
    if (comm_barrier(c) != ERR_IO)
        st->bad[rank]++;
    device_free(b);
}

static void test_abort(struct setup *st)
{
    memset(st->bad, 0, sizeof(st->bad));
    st->rc[0] = 1;
    atomic_store(&st->phase, 0);
    struct rank_thread th = {.fn = abort_rank, .st = st, .rank = 0};
    CHECK(pthread_create(&th.tid, NULL, rank_main, &th) == 0);
    while (atomic_load(&st->phase) == 0)
        sleep_ms(1);
    sleep_ms(50);
    comm_group_abort(st->g, ERR_IO);
    pthread_join(th.tid, NULL);
    CHECK_MSG(st->rc[0] == ERR_IO, "%s: a barrier waiting at the abort returned %d", st->what,
              st->rc[0]);
    CHECK(comm_group_aborted(st->g) == ERR_IO);
    CHECK_MSG(bad_total(st) == 0, "%s: collectives after the abort", st->what);
}

static void run_suite(struct setup *st)
{
    int rc = comm_group_create(st->dev, RANKS, &st->g);
    CHECK_MSG(rc == 0, "%s: %s", st->what, err_msg());
    if (rc < 0)
        return;
    CHECK(comm_group_size(st->g) == RANKS);
    test_allreduce(st);
    test_gather(st);
    test_barrier(st);
    test_abort(st);
    comm_group_destroy(st->g);
    st->g = NULL;
}

static struct setup st;

static void release(void)
{
    device_close(st.dev[0]);
    for (int r = 0; r < RANKS; r++) {
        free(st.in[r]);
        free(st.got[r]);
    }
    free(st.want);
}

/* The buffers and the first device (no GPU: the program skips). */
static void open_first(void)
{
    for (int r = 0; r < RANKS; r++) {
        st.in[r] = malloc(AR_MAX * sizeof(float));
        st.got[r] = malloc(AR_MAX * sizeof(float));
    }
    st.want = malloc(AR_MAX * sizeof(float));

    int rc = device_open_cuda(0, 0, 16 * MiB, &st.dev[0]);
    if (rc < 0) {
        static char why[600];
        snprintf(why, sizeof(why), "no CUDA device to test (%s): %s", err_name(rc), err_msg());
        test_skip(why);
    }
    atexit(release);
}

/* two partitions of GPU 0: the in-process implementation */
TEST(partitions)
{
    int rc = device_open_cuda(0, 1, 16 * MiB, &st.dev[1]);
    CHECK_MSG(rc == 0, "%s", err_msg());
    if (rc == 0) {
        st.what = "cuda:0 + cuda:0.1";
        st.exact = true;
        run_suite(&st);
        device_close(st.dev[1]);
    }
}

/* two GPUs: NCCL */
TEST(nccl)
{
    int rc = device_open_cuda(1, 0, 16 * MiB, &st.dev[1]);
    if (rc == 0) {
        st.what = "cuda:0 + cuda:1 (NCCL)";
        st.exact = false;
        run_suite(&st);
        device_close(st.dev[1]);
    } else {
        printf("note: no second GPU (%s); NCCL is not tested\n", err_msg());
    }
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, open_first);
}
