/* comm/mpi under mpirun (2 or 3 processes; tests/CMakeLists.txt launches
 * it): groups whose ranks are threads of several processes give the
 * all-reduce bits of one process's rank-order sum, gather every block into
 * root wherever root is, meet at barriers, and carry channel messages; an
 * abort returns at once and leaves the group clean once the peer catches
 * up. Every process runs every case; each case uses its own tags. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/mpi.h"
#include "core/error.h"
#include "mpi/mpi_test.h"
#include "test.h"

/* Rank r's input value i: distinct, exactly representable, mixed signs and
 * magnitudes so that the order of summation shows in the bits. */
static float input(int r, size_t i)
{
    uint32_t h = (uint32_t)(r * 2654435761u) ^ (uint32_t)(i * 40503u + 17u);
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    float v = (float)(h & 0xffffff) / (float)(1 << 24) - 0.5f;
    return v * (float)(1 << (h >> 28)); /* scales 1 .. 2^15 */
}

struct rank_job {
    struct comm_group *g;
    int rank;
    int (*fn)(struct rank_job *);
    size_t n;
    float *buf;
    int root, rows, cols, col0, total;
    float *out;
    int rc;
    char msg[512]; /* the rank thread's err_msg() when rc < 0 */
};

static void *rank_main(void *arg)
{
    struct rank_job *j = arg;
    j->rc = j->fn(j);
    snprintf(j->msg, sizeof j->msg, "%s", j->rc < 0 ? err_msg() : "");
    return NULL;
}

/* Runs fn on a thread per rank of this process; returns how many ran. */
static int run_local(struct comm_group *g, const int *proc_of, int n_ranks, struct rank_job *jobs,
                     int (*fn)(struct rank_job *))
{
    pthread_t t[16];
    int k = 0;
    for (int r = 0; r < n_ranks; r++) {
        if (proc_of[r] != me)
            continue;
        jobs[r].g = g;
        jobs[r].rank = r;
        jobs[r].fn = fn;
        pthread_create(&t[k++], NULL, rank_main, &jobs[r]);
    }
    for (int i = 0; i < k; i++)
        pthread_join(t[i], NULL);
    return k;
}

static int do_allreduce(struct rank_job *j)
{
    return comm_allreduce_sum(comm_group_rank(j->g, j->rank), NULL, j->buf, j->n);
}

/* A placement of n_ranks over the job's processes: r -> pattern[r] % procs. */
static void place(int n_ranks, const int *pattern, int *proc_of)
{
    for (int r = 0; r < n_ranks; r++)
        proc_of[r] = pattern[r] % procs;
}

TEST(allreduce_bits)
{
    static const int pattern[] = {0, 1, 0, 2, 1, 2};
    static const size_t sizes[] = {0, 1, 7, 513, 4096 + 3, 100000};
    for (int n_ranks = 2; n_ranks <= 6; n_ranks += 2) {
        int proc_of[6];
        place(n_ranks, pattern, proc_of);
        bool held = false;
        for (int r = 0; r < n_ranks; r++)
            held |= proc_of[r] == me;
        if (!held) /* 2 ranks over 3 processes: the third holds none */
            continue;
        struct comm_group *g = NULL;
        int rc = comm_group_create_mpi(world, n_ranks, proc_of, 100 + n_ranks, &g);
        CHECK_MSG(rc == 0, "%s", err_msg());
        if (rc < 0)
            continue;
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            size_t n = sizes[si];
            struct rank_job jobs[6] = {0};
            float *want = malloc((n + 1) * sizeof(float));
            for (size_t i = 0; i < n; i++) { /* the threads backend's sum, rank order */
                float acc = input(0, i);
                for (int r = 1; r < n_ranks; r++)
                    acc += input(r, i);
                want[i] = acc;
            }
            for (int r = 0; r < n_ranks; r++) {
                jobs[r].n = n;
                jobs[r].buf = malloc((n + 1) * sizeof(float));
                for (size_t i = 0; i < n; i++)
                    jobs[r].buf[i] = input(r, i);
            }
            run_local(g, proc_of, n_ranks, jobs, do_allreduce);
            for (int r = 0; r < n_ranks; r++) {
                if (proc_of[r] != me)
                    continue;
                CHECK_MSG(jobs[r].rc == 0, "rank %d: %s", r, jobs[r].msg);
                CHECK_MSG(n == 0 || memcmp(jobs[r].buf, want, n * sizeof(float)) == 0,
                          "%d ranks, n %zu: rank %d's sum differs from the rank-order sum", n_ranks,
                          n, r);
            }
            for (int r = 0; r < n_ranks; r++)
                free(jobs[r].buf);
            free(want);
        }
        comm_group_destroy(g);
    }
}

/* The same inputs through the threads backend in one process: the bits
 * the cross-process sum must equal. */
TEST(allreduce_equals_threads)
{
    enum { N_RANKS = 4, N = 3001 };
    static const int pattern[] = {1, 0, 0, 1};
    int proc_of[N_RANKS];
    place(N_RANKS, pattern, proc_of);
    if (me > 1) /* a third process holds no rank */
        return;
    struct comm_group *g = NULL, *t = NULL;
    CHECK(comm_group_create_mpi(world, N_RANKS, proc_of, 200, &g) == 0);
    CHECK(comm_group_create_threads(N_RANKS, &t) == 0);
    if (!g || !t)
        return;
    int all[N_RANKS] = {me, me, me, me};
    struct rank_job jobs[N_RANKS] = {0}, ref[N_RANKS] = {0};
    for (int r = 0; r < N_RANKS; r++) {
        jobs[r].n = ref[r].n = N;
        jobs[r].buf = malloc(N * sizeof(float));
        ref[r].buf = malloc(N * sizeof(float));
        for (size_t i = 0; i < N; i++)
            jobs[r].buf[i] = ref[r].buf[i] = input(r + 7, i);
    }
    run_local(t, all, N_RANKS, ref, do_allreduce); /* every rank "here" */
    run_local(g, proc_of, N_RANKS, jobs, do_allreduce);
    for (int r = 0; r < N_RANKS; r++) {
        if (proc_of[r] == me) {
            size_t d = 0;
            while (d < N && jobs[r].buf[d] == ref[0].buf[d])
                d++;
            CHECK_MSG(d == N, "rank %d: first difference at %zu: %a vs %a (threads)", r, d,
                      d < N ? jobs[r].buf[d] : 0.0f, d < N ? ref[0].buf[d] : 0.0f);
        }
    }
    for (int r = 0; r < N_RANKS; r++) {
        free(jobs[r].buf);
        free(ref[r].buf);
    }
    comm_group_destroy(g);
    comm_group_destroy(t);
}

static int do_gather(struct rank_job *j)
{
    return comm_gather_cols(comm_group_rank(j->g, j->rank), NULL, j->root, j->buf, j->rows, j->cols,
                            j->col0, j->out, j->total);
}

TEST(gather_any_root)
{
    enum { N_RANKS = 5, ROWS = 3 };
    static const int pattern[] = {2, 0, 1, 0, 1};
    static const int widths[N_RANKS] = {4, 0, 7, 1, 130}; /* one rank without columns */
    int proc_of[N_RANKS], col0[N_RANKS], total = 0;
    place(N_RANKS, pattern, proc_of);
    for (int r = 0; r < N_RANKS; r++) {
        col0[r] = total;
        total += widths[r];
    }
    struct comm_group *g = NULL;
    CHECK(comm_group_create_mpi(world, N_RANKS, proc_of, 300, &g) == 0);
    if (!g)
        return;
    for (int root = 0; root < N_RANKS; root++) {
        struct rank_job jobs[N_RANKS] = {0};
        for (int r = 0; r < N_RANKS; r++) {
            jobs[r].root = root;
            jobs[r].rows = ROWS;
            jobs[r].cols = widths[r];
            jobs[r].col0 = col0[r];
            jobs[r].total = total;
            jobs[r].buf = malloc((size_t)(ROWS * widths[r] + 1) * sizeof(float));
            for (int i = 0; i < ROWS * widths[r]; i++)
                jobs[r].buf[i] = input(r, (size_t)i);
            jobs[r].out = r == root ? calloc((size_t)(ROWS * total), sizeof(float)) : NULL;
        }
        run_local(g, proc_of, N_RANKS, jobs, do_gather);
        for (int r = 0; r < N_RANKS; r++)
            if (proc_of[r] == me)
                CHECK_MSG(jobs[r].rc == 0, "root %d, rank %d: %s", root, r, jobs[r].msg);
        if (proc_of[root] == me) {
            int bad = 0;
            for (int r = 0; r < N_RANKS; r++)
                for (int i = 0; i < ROWS; i++)
                    for (int c = 0; c < widths[r]; c++)
                        bad += jobs[root].out[i * total + col0[r] + c] !=
                               input(r, (size_t)(i * widths[r] + c));
            CHECK_MSG(bad == 0, "root %d: %d values misplaced", root, bad);
        }
        for (int r = 0; r < N_RANKS; r++) {
            free(jobs[r].buf);
            free(jobs[r].out);
        }
    }
    comm_group_destroy(g);
}

static int do_barrier(struct rank_job *j)
{
    return comm_barrier(comm_group_rank(j->g, j->rank));
}

TEST(barrier_and_single_process_group)
{
    int every[6];
    for (int r = 0; r < 6; r++)
        every[r] = r % procs;
    struct comm_group *g = NULL;
    CHECK(comm_group_create_mpi(world, 6, every, 400, &g) == 0);
    struct rank_job jobs[6] = {0};
    for (int round = 0; g && round < 20; round++) {
        run_local(g, every, 6, jobs, do_barrier);
        for (int r = 0; r < 6; r++)
            if (every[r] == me)
                CHECK(jobs[r].rc == 0);
    }
    comm_group_destroy(g);

    /* A group entirely within this process still works (no messages). */
    int here[3] = {me, me, me};
    CHECK(comm_group_create_mpi(world, 3, here, 401 + me, &g) == 0);
    struct rank_job one[3] = {0};
    for (int r = 0; r < 3; r++) {
        one[r].n = 5;
        one[r].buf = malloc(5 * sizeof(float));
        for (int i = 0; i < 5; i++)
            one[r].buf[i] = (float)(r + i);
    }
    run_local(g, here, 3, one, do_allreduce);
    for (int r = 0; r < 3; r++) {
        CHECK(one[r].rc == 0 && one[r].buf[0] == 3.0f && one[r].buf[4] == 15.0f);
        free(one[r].buf);
    }
    comm_group_destroy(g);
}

TEST(bad_arguments)
{
    struct comm_group *g = (struct comm_group *)1;
    int far[2] = {0, procs};
    CHECK(comm_group_create_mpi(world, 2, far, 500, &g) == ERR_INVALID && g == NULL);
    CHECK(strstr(err_msg(), "process") != NULL);
    int other[1] = {(me + 1) % procs};
    CHECK(comm_group_create_mpi(world, 1, other, 500, &g) == ERR_INVALID);
    int mine[1] = {me};
    CHECK(comm_group_create_mpi(world, 1, mine, -1, &g) == ERR_INVALID);
    CHECK(comm_group_create_mpi(world, 1, mine, mpi_world_max_tag(world), &g) == ERR_INVALID);
    struct comm_channel *c = NULL;
    CHECK(comm_channel_create_mpi(world, me, 500, &c) == ERR_INVALID && c == NULL);
    CHECK(comm_channel_create_mpi(world, procs, 500, &c) == ERR_INVALID);
}

/* Process 0 sends messages of several sizes to every other process through
 * one channel each; the last process answers each one back (a ping-pong),
 * and a message of the wrong size is an error that drops it. */
TEST(channels)
{
    static const size_t sizes[] = {1, 0, 1000, 70000, 3};
    if (me == 0) {
        for (int p = 1; p < procs; p++) {
            struct comm_channel *c = NULL;
            CHECK(comm_channel_create_mpi(world, p, 600, &c) == 0);
            for (size_t k = 0; c && k < sizeof sizes / sizeof sizes[0]; k++) {
                float *m = malloc((sizes[k] + 1) * sizeof(float));
                for (size_t i = 0; i < sizes[k]; i++)
                    m[i] = input(p, i + k);
                CHECK_MSG(comm_send(c, NULL, m, sizes[k]) == 0, "%s", err_msg());
                free(m);
            }
            float four[4] = {1, 2, 3, 4};
            CHECK(c && comm_send(c, NULL, four, 4) == 0);
            comm_channel_destroy(c);
        }
        struct comm_channel *back = NULL;
        CHECK(comm_channel_create_mpi(world, procs - 1, 601, &back) == 0);
        float got[1000];
        CHECK(back && comm_recv(back, NULL, got, 1000) == 0 && got[999] == input(procs - 1, 1000));
        comm_channel_destroy(back);
    } else {
        struct comm_channel *c = NULL;
        CHECK(comm_channel_create_mpi(world, 0, 600, &c) == 0);
        for (size_t k = 0; c && k < sizeof sizes / sizeof sizes[0]; k++) {
            float *m = malloc((sizes[k] + 1) * sizeof(float));
            int rc = comm_recv(c, NULL, m, sizes[k]);
            CHECK_MSG(rc == 0, "%s", err_msg());
            int bad = 0;
            for (size_t i = 0; i < sizes[k]; i++)
                bad += m[i] != input(me, i + k);
            CHECK_MSG(bad == 0, "message %zu: %d values differ", k, bad);
            free(m);
        }
        float three[3];
        CHECK(c && comm_recv(c, NULL, three, 3) == ERR_INVALID);
        CHECK(strstr(err_msg(), "has 4 floats") != NULL);
        comm_channel_destroy(c);
        if (me == procs - 1) {
            struct comm_channel *back = NULL;
            CHECK(comm_channel_create_mpi(world, 0, 601, &back) == 0);
            float m[1000];
            for (size_t i = 0; i < 1000; i++)
                m[i] = input(me, i + 1);
            CHECK(back && comm_send(back, NULL, m, 1000) == 0);
            comm_channel_destroy(back);
        }
    }
}

struct aborter {
    struct comm_group *g;
    int delay_ms;
};

static void *abort_later(void *arg)
{
    struct aborter *a = arg;
    struct timespec ts = {0, a->delay_ms * 1000000L};
    nanosleep(&ts, NULL);
    comm_group_abort(a->g, ERR_IO);
    return NULL;
}

/* Process 0's ranks wait in an all-reduce the others join only later;
 * an abort on process 0 returns them at once with the error. Then the
 * others take their part, which completes the messages in flight, and
 * the group is destroyed clean on every process. */
TEST(abort_returns)
{
    int proc_of[2] = {0, 1};
    struct comm_group *g = NULL, *sync = NULL;
    int every[2] = {0, 1 % procs};
    if (me > 1) /* a third process holds no rank of these groups */
        return;
    CHECK(comm_group_create_mpi(world, 2, proc_of, 700, &g) == 0);
    CHECK(comm_group_create_mpi(world, 2, every, 701, &sync) == 0);
    if (!g || !sync)
        return;
    struct rank_job jobs[2] = {0};
    float buf[8] = {0};
    jobs[0].n = jobs[1].n = 8;
    jobs[0].buf = jobs[1].buf = buf;
    struct rank_job s[2] = {0};
    if (me == 0) {
        pthread_t t;
        struct aborter a = {g, 100};
        pthread_create(&t, NULL, abort_later, &a);
        run_local(g, proc_of, 2, jobs, do_allreduce);
        pthread_join(t, NULL);
        CHECK(jobs[0].rc == ERR_IO);
        CHECK_MSG(strstr(jobs[0].msg, "aborted") != NULL, "%s", jobs[0].msg);
        CHECK(comm_group_aborted(g) == ERR_IO);
        run_local(sync, every, 2, s, do_barrier);
    } else {
        run_local(sync, every, 2, s, do_barrier); /* process 0 has aborted */
        run_local(g, proc_of, 2, jobs, do_allreduce);
        CHECK(jobs[1].rc == 0);
    }
    run_local(sync, every, 2, s, do_barrier);
    comm_group_destroy(g);
    comm_group_destroy(sync);
}

static atomic_int lost_count[8], found_count[8];

static void on_lost(void *arg, int proc, double silent_s)
{
    (void)arg, (void)silent_s;
    atomic_fetch_add(&lost_count[proc], 1);
}

static void on_found(void *arg, int proc)
{
    (void)arg;
    atomic_fetch_add(&found_count[proc], 1);
}

/* Polls until cond(proc) holds or `limit_s` passes; true when it held.
 * (Liveness, not timing: the limit is 10 timeouts.) */
static bool wait_until(bool (*cond)(int), int proc, double limit_s)
{
    for (int i = 0; i < (int)(limit_s * 100); i++) {
        if (cond(proc))
            return true;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return cond(proc);
}

static bool is_lost(int proc)
{
    return atomic_load(&lost_count[proc]) > 0 && mpi_world_proc_lost(world, proc);
}

/* Not lost (this process may have found 0 silent on waking, or not). */
static bool is_up(int proc)
{
    return !mpi_world_proc_lost(world, proc);
}

static bool is_found(int proc)
{
    return atomic_load(&found_count[proc]) > 0 && !mpi_world_proc_lost(world, proc);
}

/* A group of every process, process p its rank p, on `tag` (NULL, a
 * failed check, when it cannot be made). */
static struct comm_group *group_of_all(int tag)
{
    int every[8];
    for (int p = 0; p < procs; p++)
        every[p] = p;
    struct comm_group *all = NULL;
    CHECK(comm_group_create_mpi(world, procs, every, tag, &all) == 0);
    return all;
}

/* Heartbeats: quiet processes are never lost; a process that stops
 * (SIGSTOP) is lost on process 0 and found again once it continues; and
 * the job then closes normally (no peer lost at MPI_Finalize). */
TEST(heartbeats)
{
    struct mpi_watch_config bad = {.interval_s = 0.5, .timeout_s = 0.5};
    CHECK(mpi_world_watch(world, &bad) == ERR_INVALID);
    /* a timeout far above any scheduling stall of a loaded CI machine (the
     * quiet period checks that nobody is lost while all are up) */
    struct mpi_watch_config cfg = {
        .interval_s = 0.05, .timeout_s = 2.0, .lost = on_lost, .found = on_found};
    CHECK(mpi_world_watch(world, &cfg) == 0);
    CHECK(mpi_world_watch(world, &cfg) == ERR_INVALID);
    struct timespec quiet = {3, 0};
    nanosleep(&quiet, NULL);
    for (int p = 0; p < procs; p++)
        CHECK_MSG(atomic_load(&lost_count[p]) == 0, "process %d lost while everyone was up", p);

    struct comm_group *all = group_of_all(801);
    if (!all)
        return;
    if (me == 0) {
        struct comm_channel *c = NULL;
        float pid = 0;
        CHECK(comm_channel_create_mpi(world, 1, 800, &c) == 0);
        CHECK(c && comm_recv(c, NULL, &pid, 1) == 0);
        comm_channel_destroy(c);
        CHECK_MSG(wait_until(is_lost, 1, 20), "process 1 stopped but was not lost");
        for (int p = 2; p < procs; p++)
            CHECK_MSG(!mpi_world_proc_lost(world, p), "process %d lost, only 1 stopped", p);
        kill((pid_t)pid, SIGCONT);
        CHECK_MSG(wait_until(is_found, 1, 20), "process 1 continued but was not found");
    } else if (me == 1) {
        struct comm_channel *c = NULL;
        float pid = (float)getpid(); /* exact: pids are below 2^24 here */
        CHECK(comm_channel_create_mpi(world, 0, 800, &c) == 0);
        CHECK(c && comm_send(c, NULL, &pid, 1) == 0);
        struct timespec settle = {0, 100 * 1000 * 1000}; /* let the message leave */
        nanosleep(&settle, NULL);
        comm_channel_destroy(c);
        raise(SIGSTOP); /* process 0 sends SIGCONT */
        CHECK_MSG(wait_until(is_up, 0, 20), "process 0 still lost after this process continued");
    }
    CHECK(comm_barrier(comm_group_rank(all, me)) == 0);
    comm_group_destroy(all);
}

/* Closing one after another: the processes that close first (the
 * followers in `followers_close_first`, process 0 in `leader_closes_first`)
 * return at once, and the other closes once it finds them lost: the early
 * ones wait in MPI_Finalize, silent, and are lost (a follower leaves a
 * process 0 that has gone), but their last heartbeat said they were
 * closing, so the late one's close does not end the job (before, it did:
 * MPI_Abort, the whole job failing after its work was done; mpirun's exit
 * status is the check). */
static void close_apart(bool leader_first)
{
    /* the timeout far above a loaded machine's stalls, as in heartbeats:
     * the late side must not be lost to the early ones before they close */
    struct mpi_watch_config cfg = {
        .interval_s = 0.05, .timeout_s = 2.0, .lost = on_lost, .found = on_found};
    CHECK(mpi_world_watch(world, &cfg) == 0);
    struct comm_group *all = group_of_all(802);
    if (!all)
        return;
    CHECK(comm_barrier(comm_group_rank(all, me)) == 0); /* everyone watching and up */
    comm_group_destroy(all);
    if ((me == 0) == leader_first)
        return;                     /* closes now */
    for (int p = 0; p < procs; p++) /* (liveness, not timing: 10 timeouts) */
        if (p != me && (p == 0) == leader_first)
            CHECK_MSG(wait_until(is_lost, p, 20), "process %d closed first, yet not lost", p);
}

TEST(followers_close_first)
{
    close_apart(false);
}

TEST(leader_closes_first)
{
    close_apart(true);
}
