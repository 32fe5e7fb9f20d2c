#include "backend/cpu/lanes.h"

#include <assert.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/linear.h"

static atomic_uint_fast64_t lanes_seq;
static atomic_bool lanes_on = true;
static pthread_once_t lanes_env_once = PTHREAD_ONCE_INIT;

static void lanes_read_env(void)
{
    const char *split = getenv("SHARDSWAP_GEMV_SPLIT");
    atomic_store(&lanes_on, !(split && strcmp(split, "tasks") == 0));
}

void cpu_gemv_split_lanes(bool lanes)
{
    pthread_once(&lanes_env_once, lanes_read_env);
    atomic_store(&lanes_on, lanes);
}

int cpu_lanes_init_streams(struct cpu_lanes *l, int units, int streams)
{
    pthread_once(&lanes_env_once, lanes_read_env);
    assert(streams >= 1 && streams <= CPU_LANES_STREAMS_MAX);
    int threads = cpu_kernels_alone() ? 1 : cpu_threads();
    if (threads > CPU_LANES_MAX)
        threads = CPU_LANES_MAX;
    l->lanes = atomic_load(&lanes_on) ? (units < threads ? units : threads) : 0;
    l->streams = l->lanes ? streams : 1;
    l->seq = atomic_fetch_add(&lanes_seq, 1) + 1;
    atomic_init(&l->arrived, 0);
    l->unit0[0] = l->step0[0] = 0;
    for (int i = 0; i < l->lanes; i++) {
        l->unit0[i + 1] = (int)((int64_t)units * (i + 1) / l->lanes);
        /* a lane of n units in `streams` sub-lanes: as many steps as its
         * longest sub-lane */
        const int n = l->unit0[i + 1] - l->unit0[i];
        l->step0[i + 1] = l->step0[i] + (n + l->streams - 1) / l->streams;
        atomic_init(&l->lane[i].v, (uint64_t)l->step0[i + 1] << 32 | (uint32_t)l->step0[i]);
    }
    return l->lanes ? l->step0[l->lanes] : units;
}

void cpu_lanes_init(struct cpu_lanes *l, int tasks)
{
    (void)cpu_lanes_init_streams(l, tasks, 1);
}

int cpu_lanes_units(const struct cpu_lanes *l, int step, int units[CPU_LANES_STREAMS_MAX])
{
    if (l->streams == 1) {
        units[0] = step;
        return 1;
    }
    int i = 0;
    while (step >= l->step0[i + 1])
        i++;
    /* sub-lane s of lane i: its units [b + n s / S, b + n (s + 1) / S) */
    const int b = l->unit0[i], n = l->unit0[i + 1] - b, k = step - l->step0[i];
    int count = 0;
    for (int s = 0; s < l->streams; s++) {
        const int lo = b + n * s / l->streams, hi = b + n * (s + 1) / l->streams;
        if (lo + k < hi)
            units[count++] = lo + k;
    }
    assert(count > 0);
    return count;
}

/* The next chunk of lane i (front), or its last one (back): -1 when the
 * lane has none left. */
static int lane_take(struct cpu_lanes *l, int i, bool back)
{
    uint64_t v = atomic_load(&l->lane[i].v);
    for (;;) {
        const uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> 32);
        if (lo >= hi)
            return -1;
        const uint64_t nv = back ? (uint64_t)(hi - 1) << 32 | lo : (uint64_t)hi << 32 | (lo + 1);
        if (atomic_compare_exchange_weak(&l->lane[i].v, &v, nv))
            return (int)(back ? hi - 1 : lo);
    }
}

int cpu_lanes_chunk(struct cpu_lanes *l, int task)
{
    if (!l->lanes)
        return task;
    static _Thread_local uint64_t seen_seq;
    static _Thread_local int my_lane;
    if (seen_seq != l->seq) {
        seen_seq = l->seq;
        my_lane = atomic_fetch_add(&l->arrived, 1);
    }
    if (my_lane < l->lanes) {
        const int c = lane_take(l, my_lane, false);
        if (c >= 0)
            return c;
    }
    /* while a task looks, a chunk is left */
    for (;;) {
        int best = -1;
        uint32_t most = 0;
        for (int i = 0; i < l->lanes; i++) {
            const uint64_t v = atomic_load(&l->lane[i].v);
            const uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> 32);
            if (hi > lo && hi - lo > most) {
                most = hi - lo;
                best = i;
            }
        }
        assert(best >= 0);
        const int c = lane_take(l, best, true);
        if (c >= 0)
            return c;
    }
}

/* the job of a group whose chunks hold chunk c */
static int lanes_job(const int *first, int n, int c)
{
    int lo = 0, hi = n - 1; /* the last job whose first chunk is <= c */
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (first[mid] <= c)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

struct lanes_group {
    const int *first;
    int n;
    cpu_lanes_chunk_fn fn;       /* one stream */
    cpu_lanes_units_fn units_fn; /* streams */
    void *ctx;
    struct cpu_lanes lanes;
    atomic_int rc;
};

static void lanes_group_task(void *ctx, int task)
{
    struct lanes_group *g = ctx;
    const int step = cpu_lanes_chunk(&g->lanes, task);
    int units[CPU_LANES_STREAMS_MAX], job[CPU_LANES_STREAMS_MAX];
    const int count = cpu_lanes_units(&g->lanes, step, units);
    int rc = 0;
    for (int k = 0; k < count; k++) {
        job[k] = lanes_job(g->first, g->n, units[k]);
        units[k] -= g->first[job[k]];
    }
    if (g->units_fn)
        rc = g->units_fn(g->ctx, job, units, count);
    else
        rc = g->fn(g->ctx, job[0], units[0]);
    if (rc < 0)
        atomic_store(&g->rc, rc);
}

static int lanes_group_run(struct lanes_group *g, int streams)
{
    atomic_init(&g->rc, 0);
    cpu_kernels_run(lanes_group_task, g,
                    cpu_lanes_init_streams(&g->lanes, g->first[g->n], streams));
    return atomic_load(&g->rc);
}

int cpu_lanes_run_group(const int *first, int n, cpu_lanes_chunk_fn fn, void *ctx)
{
    struct lanes_group g = {.first = first, .n = n, .fn = fn, .ctx = ctx};
    return lanes_group_run(&g, 1);
}

int cpu_lanes_run_group_streams(const int *first, int n, int streams, cpu_lanes_units_fn fn,
                                void *ctx)
{
    struct lanes_group g = {.first = first, .n = n, .units_fn = fn, .ctx = ctx};
    return lanes_group_run(&g, streams);
}
