/* Collectives of the threads backend and channels: exact results against
 * serial references, reuse races (hundreds of back-to-back collectives with
 * changing sizes), and informational timings that never decide the result.
 *
 * Worker threads never call CHECK (its counters are not thread-safe): each
 * rank counts its own mismatches in bad[rank], and main checks after joining. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/device.h"
#include "comm/comm.h"
#include "core/error.h"
#include "core/timing.h"
#include "test.h"

enum { MAX_RANKS = 8 };

/* ---- running one function on n rank threads ---- */

typedef void (*rank_fn)(void *arg, int rank);

struct rank_thread {
    pthread_t tid;
    rank_fn fn;
    void *arg;
    int rank;
};

static void *rank_main(void *p)
{
    struct rank_thread *t = p;
    t->fn(t->arg, t->rank);
    return NULL;
}

static void run_ranks(int n_ranks, rank_fn fn, void *arg)
{
    struct rank_thread th[MAX_RANKS];
    for (int r = 0; r < n_ranks; r++) {
        th[r] = (struct rank_thread){.fn = fn, .arg = arg, .rank = r};
        if (pthread_create(&th[r].tid, NULL, rank_main, &th[r]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(1);
        }
    }
    for (int r = 0; r < n_ranks; r++)
        pthread_join(th[r].tid, NULL);
}

static int sum_bad(const int *bad, int n)
{
    int s = 0;
    for (int i = 0; i < n; i++)
        s += bad[i];
    return s;
}

/* Deterministic xorshift64*, one stream per seed. */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* ---- all-reduce with exactly representable sums ---- */

static const size_t ar_sizes[] = {1, 7, 2048, 100003};
enum { AR_ITERS = 200, AR_MAX = 100003 };

struct ar_exact {
    struct comm_group *g;
    int n_ranks;
    int bad[MAX_RANKS];
};

/* Small integers: every partial sum is exact, so any order gives these bits. */
static float ar_base(size_t i, int iter)
{
    return (float)((long)((i * 7 + (size_t)iter * 13) % 201) - 100);
}

static void ar_exact_rank(void *p, int rank)
{
    struct ar_exact *a = p;
    int R = a->n_ranks;
    float *buf = malloc(AR_MAX * sizeof(float));
    int bad = 0;
    for (int iter = 0; iter < AR_ITERS; iter++) {
        size_t n = ar_sizes[(iter + iter / 4) % 4];
        for (size_t i = 0; i < n; i++)
            buf[i] = ar_base(i, iter) * (float)(rank + 1) + (float)rank;
        comm_allreduce_sum(comm_group_rank(a->g, rank), NULL, buf, n);
        /* sum_r base*(r+1) + r = base*R(R+1)/2 + R(R-1)/2 */
        float k = (float)(R * (R + 1) / 2), c = (float)(R * (R - 1) / 2);
        for (size_t i = 0; i < n; i++)
            bad += buf[i] != ar_base(i, iter) * k + c;
    }
    free(buf);
    a->bad[rank] = bad;
}

TEST(allreduce_exact)
{
    static const int ranks[] = {1, 2, 3, 4, 8};
    for (size_t k = 0; k < sizeof ranks / sizeof ranks[0]; k++) {
        struct ar_exact a = {.n_ranks = ranks[k]};
        CHECK(comm_group_create_threads(a.n_ranks, &a.g) == ERR_OK);
        CHECK(comm_group_size(a.g) == a.n_ranks);
        run_ranks(a.n_ranks, ar_exact_rank, &a);
        CHECK_MSG(sum_bad(a.bad, a.n_ranks) == 0, "%d ranks: %d wrong elements", a.n_ranks,
                  sum_bad(a.bad, a.n_ranks));
        comm_group_destroy(a.g);
    }
}

/* ---- all-reduce of random floats: bit-identical, equal to the serial rank-order sum ---- */

enum { RAND_ITERS = 24 };

struct ar_random {
    struct comm_group *g;
    size_t n[RAND_ITERS];
    float *in[RAND_ITERS];         /* (n_ranks, n[it]) */
    const float *want[RAND_ITERS]; /* (n[it]) */
    int bad[MAX_RANKS];
};

static void ar_random_rank(void *p, int rank)
{
    struct ar_random *a = p;
    float *buf = malloc(AR_MAX * sizeof(float));
    int bad = 0;
    for (int it = 0; it < RAND_ITERS; it++) {
        size_t n = a->n[it];
        memcpy(buf, a->in[it] + (size_t)rank * n, n * sizeof(float));
        comm_allreduce_sum(comm_group_rank(a->g, rank), NULL, buf, n);
        for (size_t i = 0; i < n; i++)
            bad += memcmp(&buf[i], &a->want[it][i], sizeof(float)) != 0;
    }
    free(buf);
    a->bad[rank] = bad;
}

static void test_allreduce_random(int n_ranks)
{
    struct ar_random a = {0};
    float *want[RAND_ITERS];
    uint64_t seed = 0x9e3779b97f4a7c15ull + (uint64_t)n_ranks;
    int order_matters = 0;
    for (int it = 0; it < RAND_ITERS; it++) {
        size_t n = ar_sizes[it % 4];
        a.n[it] = n;
        a.in[it] = malloc((size_t)n_ranks * n * sizeof(float));
        want[it] = malloc(n * sizeof(float));
        /* Magnitudes spread over 2^-8..2^8 so rounding depends on the order. */
        for (size_t i = 0; i < (size_t)n_ranks * n; i++) {
            uint64_t x = rng_next(&seed);
            float m = (float)(x >> 40) / (float)(1u << 24) - 0.5f;
            a.in[it][i] = m * (float)(1u << ((x >> 8) % 17)) / 256.0f;
        }
        for (size_t i = 0; i < n; i++) {
            float s = a.in[it][i], rev = a.in[it][(size_t)(n_ranks - 1) * n + i];
            for (int r = 1; r < n_ranks; r++)
                s += a.in[it][(size_t)r * n + i];
            for (int r = n_ranks - 2; r >= 0; r--)
                rev += a.in[it][(size_t)r * n + i];
            want[it][i] = s;
            order_matters |= memcmp(&s, &rev, sizeof s) != 0;
        }
        a.want[it] = want[it];
    }
    if (n_ranks > 2)
        CHECK_MSG(order_matters, "the inputs should make the summation order visible");
    CHECK(comm_group_create_threads(n_ranks, &a.g) == ERR_OK);
    run_ranks(n_ranks, ar_random_rank, &a);
    CHECK_MSG(sum_bad(a.bad, n_ranks) == 0, "%d ranks: %d elements differ from the rank-order sum",
              n_ranks, sum_bad(a.bad, n_ranks));
    comm_group_destroy(a.g);
    for (int it = 0; it < RAND_ITERS; it++) {
        free(a.in[it]);
        free(want[it]);
    }
}

/* ---- gather_cols with uneven blocks and every root ---- */

enum { GATHER_ROUNDS = 60, GATHER_ROWS = 5 };

struct gather {
    struct comm_group *g;
    int n_ranks;
    int total_cols;
    const int *widths; /* (n_ranks) */
    int bad[MAX_RANKS];
};

static float gather_value(int round, int row, int col)
{
    return (float)(round * 10000 + row * 100 + col);
}

static void gather_rank(void *p, int rank)
{
    struct gather *a = p;
    int col0 = 0;
    for (int q = 0; q < rank; q++)
        col0 += a->widths[q];
    int w = a->widths[rank], T = a->total_cols;
    float local[GATHER_ROWS * 16], out[GATHER_ROWS * 16];
    int bad = 0;
    for (int round = 0; round < GATHER_ROUNDS; round++) {
        int root = (round * 7 + 1) % a->n_ranks;
        for (int i = 0; i < GATHER_ROWS; i++)
            for (int j = 0; j < w; j++)
                local[i * w + j] = gather_value(round, i, col0 + j);
        for (int i = 0; i < GATHER_ROWS * T; i++)
            out[i] = -1.0f;
        comm_gather_cols(comm_group_rank(a->g, rank), NULL, root, local, GATHER_ROWS, w, col0, rank == root ? out : NULL,
                         T);
        if (rank != root)
            continue;
        for (int i = 0; i < GATHER_ROWS; i++)
            for (int c = 0; c < T; c++)
                bad += out[i * T + c] != gather_value(round, i, c);
    }
    a->bad[rank] = bad;
}

static void test_gather(int n_ranks, const int *widths, int total_cols)
{
    struct gather a = {.n_ranks = n_ranks, .total_cols = total_cols, .widths = widths};
    CHECK(comm_group_create_threads(n_ranks, &a.g) == ERR_OK);
    run_ranks(n_ranks, gather_rank, &a);
    CHECK_MSG(sum_bad(a.bad, n_ranks) == 0, "gather over %d ranks of %d columns: %d wrong", n_ranks,
              total_cols, sum_bad(a.bad, n_ranks));
    comm_group_destroy(a.g);
}

/* ---- barrier ---- */

enum { BARRIER_ROUNDS = 1000 };

struct barrier_test {
    struct comm_group *g;
    int n_ranks;
    atomic_int counter;
    int cells[2][MAX_RANKS]; /* plain memory: the barrier alone orders it */
    int bad[MAX_RANKS];
};

static void barrier_rank(void *p, int rank)
{
    struct barrier_test *a = p;
    int R = a->n_ranks, bad = 0;
    for (int k = 0; k < BARRIER_ROUNDS; k++) {
        /* Double-buffered cells: rank r can write round k+2 only after every
         * rank passed barrier k+1, i.e. finished reading round k. */
        a->cells[k % 2][rank] = k;
        atomic_fetch_add_explicit(&a->counter, 1, memory_order_relaxed);
        comm_barrier(comm_group_rank(a->g, rank));
        int seen = atomic_load_explicit(&a->counter, memory_order_relaxed);
        bad += seen < (k + 1) * R || seen > (k + 2) * R;
        for (int q = 0; q < R; q++)
            bad += a->cells[k % 2][q] != k;
    }
    a->bad[rank] = bad;
}

static void test_barrier(int n_ranks)
{
    struct barrier_test a = {.n_ranks = n_ranks};
    atomic_init(&a.counter, 0);
    CHECK(comm_group_create_threads(n_ranks, &a.g) == ERR_OK);
    run_ranks(n_ranks, barrier_rank, &a);
    CHECK_MSG(sum_bad(a.bad, n_ranks) == 0, "barrier over %d ranks: %d bad rounds", n_ranks,
              sum_bad(a.bad, n_ranks));
    CHECK(atomic_load(&a.counter) == BARRIER_ROUNDS * n_ranks);
    comm_group_destroy(a.g);
}

/* A late rank (asleep for 3 ms, past every spin and yield budget) makes the
 * others sleep in the futex; the late rank's arrival must wake them all. */
enum { LATE_ROUNDS = 6 };

static void barrier_late_rank(void *p, int rank)
{
    struct barrier_test *a = p;
    int R = a->n_ranks, bad = 0;
    for (int k = 0; k < LATE_ROUNDS; k++) {
        if (rank == k % R)
            nanosleep(&(struct timespec){.tv_nsec = 3000000}, NULL);
        a->cells[k % 2][rank] = k;
        comm_barrier(comm_group_rank(a->g, rank));
        for (int q = 0; q < R; q++)
            bad += a->cells[k % 2][q] != k;
    }
    a->bad[rank] = bad;
}

static void test_barrier_late(int n_ranks)
{
    struct barrier_test a = {.n_ranks = n_ranks};
    atomic_init(&a.counter, 0);
    CHECK(comm_group_create_threads(n_ranks, &a.g) == ERR_OK);
    run_ranks(n_ranks, barrier_late_rank, &a);
    CHECK_MSG(sum_bad(a.bad, n_ranks) == 0, "late-rank barrier over %d ranks: %d bad", n_ranks,
              sum_bad(a.bad, n_ranks));
    comm_group_destroy(a.g);
}

/* ---- channels ---- */

enum { CHAN_MSGS = 1000, CHAN_MAX = 3000 };

static size_t chan_len(int i)
{
    return i % 10 == 3 ? 0 : (size_t)(i * 37) % CHAN_MAX + 1;
}

struct chan_test {
    struct comm_channel *c;
    int status[2];
    int bad;
};

static void chan_rank(void *p, int rank)
{
    struct chan_test *a = p;
    float *buf = malloc(CHAN_MAX * sizeof(float));
    for (int i = 0; i < CHAN_MSGS; i++) {
        size_t n = chan_len(i);
        if (rank == 0) {
            for (size_t j = 0; j < n; j++)
                buf[j] = (float)(i * 4096 + (int)j);
            a->status[0] |= comm_send(a->c, NULL, buf, n);
        } else {
            for (size_t j = 0; j < n; j++)
                buf[j] = -1.0f;
            a->status[1] |= comm_recv(a->c, NULL, buf, n);
            for (size_t j = 0; j < n; j++)
                a->bad += buf[j] != (float)(i * 4096 + (int)j);
        }
    }
    free(buf);
}

TEST(channel)
{
    struct chan_test a = {0};
    CHECK(comm_channel_create(&a.c) == ERR_OK);
    run_ranks(2, chan_rank, &a);
    CHECK(a.status[0] == ERR_OK && a.status[1] == ERR_OK);
    CHECK_MSG(a.bad == 0, "%d floats arrived wrong", a.bad);

    /* A size mismatch is an error naming both sizes; the message is dropped,
     * so the next send does not block and the next receive gets the next one. */
    float ten[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, got[12] = {0};
    CHECK(comm_send(a.c, NULL, ten, 10) == ERR_OK);
    CHECK(comm_recv(a.c, NULL, got, 12) == ERR_INVALID);
    CHECK_MSG(strstr(err_msg(), "10") && strstr(err_msg(), "12"), "message: %s", err_msg());
    CHECK(got[0] == 0.0f);
    CHECK(comm_send(a.c, NULL, ten + 5, 5) == ERR_OK);
    CHECK(comm_recv(a.c, NULL, got, 5) == ERR_OK);
    CHECK(got[0] == 6.0f && got[4] == 10.0f);
    comm_channel_destroy(a.c);
    comm_channel_destroy(NULL);
}

/* ---- abort ----
 *
 * The last rank fails between collectives and aborts the group 5 ms later,
 * past every spin and yield budget, so the others sleep in the futex of a
 * collective that will never complete; every pending and later collective
 * must return the abort's error on every rank. main's alarm turns a hang
 * into a failure. */
enum { ABORT_ROUNDS = 20, ABORT_N = 64 };

struct abort_test {
    struct comm_group *g;
    int n_ranks, op; /* op: 0 all-reduce, 1 gather, 2 barrier */
    int rounds_bad[MAX_RANKS], pending[MAX_RANKS], later[MAX_RANKS], msg_bad[MAX_RANKS];
    atomic_int rounds_done; /* ranks past their last round */
};

static int abort_op(struct abort_test *a, int rank, float *buf, float *out)
{
    struct comm *c = comm_group_rank(a->g, rank);
    switch (a->op) {
    case 0:
        return comm_allreduce_sum(c, NULL, buf, ABORT_N);
    case 1:
        return comm_gather_cols(c, NULL, 0, buf, 1, 1, rank, rank == 0 ? out : NULL, a->n_ranks);
    default:
        return comm_barrier(c);
    }
}

static void abort_rank(void *p, int rank)
{
    struct abort_test *a = p;
    float buf[ABORT_N] = {0}, out[MAX_RANKS];
    for (int k = 0; k < ABORT_ROUNDS; k++)
        a->rounds_bad[rank] += abort_op(a, rank, buf, out) != ERR_OK;
    atomic_fetch_add(&a->rounds_done, 1);
    if (rank == a->n_ranks - 1) {
        /* Only once every rank has left its last round: a rank still on its
         * way out of one (a slow wake-up on a loaded machine) would see the
         * abort there instead of in the pending call. */
        while (atomic_load(&a->rounds_done) < a->n_ranks)
            sched_yield();
        nanosleep(&(struct timespec){.tv_nsec = 5000000}, NULL);
        comm_group_abort(a->g, ERR_IO);
        comm_group_abort(a->g, ERR_NOMEM); /* the first error stays */
        a->pending[rank] = ERR_IO;
    } else {
        a->pending[rank] = abort_op(a, rank, buf, out);
    }
    a->msg_bad[rank] = rank != a->n_ranks - 1 && !strstr(err_msg(), "aborted");
    a->later[rank] = abort_op(a, rank, buf, out);
    a->msg_bad[rank] += !strstr(err_msg(), "aborted");
}

static void test_group_abort(int n_ranks, int op)
{
    struct abort_test a = {.n_ranks = n_ranks, .op = op};
    CHECK(comm_group_create_threads(n_ranks, &a.g) == ERR_OK);
    CHECK(comm_group_aborted(a.g) == 0);
    run_ranks(n_ranks, abort_rank, &a);
    CHECK(comm_group_aborted(a.g) == ERR_IO);
    for (int r = 0; r < n_ranks; r++)
        CHECK_MSG(a.rounds_bad[r] == 0 && a.pending[r] == ERR_IO && a.later[r] == ERR_IO &&
                      a.msg_bad[r] == 0,
                  "op %d, %d ranks, rank %d: %d bad rounds, pending %d, later %d, %d bad messages",
                  op, n_ranks, r, a.rounds_bad[r], a.pending[r], a.later[r], a.msg_bad[r]);
    comm_group_destroy(a.g);
}

/* A receiver waiting for a stage that failed, and a sender waiting for a
 * stage that failed to receive, both return the abort's error, as does every
 * later call; the message in flight is dropped. */
struct chan_abort_test {
    struct comm_channel *c;
    bool sender; /* rank 0 waits in comm_send (the slot is full) rather than in comm_recv */
    int pending, later, msg_bad;
};

static void chan_abort_rank(void *p, int rank)
{
    struct chan_abort_test *a = p;
    float x[4] = {1, 2, 3, 4};
    if (rank == 1) {
        nanosleep(&(struct timespec){.tv_nsec = 5000000}, NULL);
        comm_channel_abort(a->c, ERR_NOMEM);
        comm_channel_abort(a->c, ERR_IO); /* the first error stays */
        return;
    }
    a->pending = a->sender ? comm_send(a->c, NULL, x, 4) : comm_recv(a->c, NULL, x, 4);
    a->msg_bad = !strstr(err_msg(), "aborted");
    a->later = a->sender ? comm_recv(a->c, NULL, x, 4) : comm_send(a->c, NULL, x, 4);
    a->msg_bad += !strstr(err_msg(), "aborted");
}

static void test_channel_abort(bool sender)
{
    struct chan_abort_test a = {.sender = sender};
    float x[4] = {0};
    CHECK(comm_channel_create(&a.c) == ERR_OK);
    if (sender)
        CHECK(comm_send(a.c, NULL, x, 4) == ERR_OK); /* fills the slot */
    CHECK(comm_channel_aborted(a.c) == 0);
    run_ranks(2, chan_abort_rank, &a);
    CHECK(comm_channel_aborted(a.c) == ERR_NOMEM);
    CHECK_MSG(a.pending == ERR_NOMEM && a.later == ERR_NOMEM && a.msg_bad == 0,
              "%s: pending %d, later %d, %d bad messages", sender ? "sender" : "receiver",
              a.pending, a.later, a.msg_bad);
    comm_channel_destroy(a.c);
}

/* Groups by device kind, and the per-rank handles. */
TEST(group_by_devices)
{
    struct device *d[2];
    CHECK(device_open_cpu(0, 1 << 20, &d[0]) == ERR_OK && device_open_cpu(1, 1 << 20, &d[1]) == 0);
    struct comm_group *g = NULL;
    CHECK(comm_group_create(d, 2, &g) == ERR_OK);
    CHECK(g && comm_group_size(g) == 2);
    for (int r = 0; g && r < 2; r++) {
        struct comm *c = comm_group_rank(g, r);
        CHECK(comm_rank(c) == r && comm_size(c) == 2);
    }
    comm_group_destroy(g);
    g = (struct comm_group *)&g;
    CHECK(comm_group_create(d, 0, &g) == ERR_INVALID && g == NULL);
    device_close(d[0]);
    device_close(d[1]);
}

TEST(create_invalid)
{
    struct comm_group *g = (struct comm_group *)&g; /* must be overwritten */
    CHECK(comm_group_create_threads(0, &g) == ERR_INVALID && g == NULL);
    comm_group_destroy(NULL);
}

TEST(allreduce_random)
{
    test_allreduce_random(2);
    test_allreduce_random(3);
    test_allreduce_random(4);
}

TEST(gather)
{
    static const int w343[] = {4, 3, 3}, w3322[] = {3, 3, 2, 2}, w110[] = {1, 1, 0}, w7[] = {7};
    test_gather(3, w343, 10);
    test_gather(4, w3322, 10);
    test_gather(3, w110, 2);
    test_gather(1, w7, 7);
}

TEST(barrier)
{
    test_barrier(1);
    test_barrier(2);
    test_barrier(4);
    test_barrier(8);
}

TEST(barrier_late)
{
    test_barrier_late(2);
    test_barrier_late(4);
}

TEST(group_abort)
{
    alarm(60); /* a rank that never wakes fails the test instead of hanging it */
    for (int op = 0; op < 3; op++) {
        test_group_abort(2, op);
        test_group_abort(4, op);
    }
    alarm(0);
}

TEST(channel_abort)
{
    alarm(60); /* a rank that never wakes fails the test instead of hanging it */
    test_channel_abort(false);
    test_channel_abort(true);
    alarm(0);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
