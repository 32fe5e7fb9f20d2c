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
static atomic_bool claims_on = true;
static pthread_once_t lanes_env_once = PTHREAD_ONCE_INIT;

static void lanes_read_env(void)
{
    const char *split = getenv("SHARDSWAP_GEMV_SPLIT");
    atomic_store(&lanes_on, !(split && strcmp(split, "tasks") == 0));
    atomic_store(&claims_on, !(split && strcmp(split, "steps") == 0));
}

void cpu_gemv_split_lanes(bool lanes)
{
    pthread_once(&lanes_env_once, lanes_read_env);
    atomic_store(&lanes_on, lanes);
}

/* l's lanes over `units` units (steps of `streams` units, claims of `per`
 * steps until `tail` are left): the steps in all */
static int lanes_init(struct cpu_lanes *l, int units, int streams, int per, int tail)
{
    pthread_once(&lanes_env_once, lanes_read_env);
    assert(streams >= 1 && streams <= CPU_LANES_STREAMS_MAX && per >= 1 && tail >= 0);
    int threads = cpu_kernels_alone() ? 1 : cpu_threads();
    if (threads > CPU_LANES_MAX)
        threads = CPU_LANES_MAX;
    l->lanes = atomic_load(&lanes_on) ? (units < threads ? units : threads) : 0;
    l->streams = l->lanes ? streams : 1;
    l->per = per;
    l->tail = tail;
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

void cpu_gemv_split_claims(bool claims)
{
    pthread_once(&lanes_env_once, lanes_read_env);
    atomic_store(&claims_on, claims);
}

bool cpu_gemv_claims(void)
{
    pthread_once(&lanes_env_once, lanes_read_env);
    return atomic_load(&claims_on);
}

int cpu_lanes_init_streams(struct cpu_lanes *l, int units, int streams)
{
    return lanes_init(l, units, streams, 1, 0);
}

int cpu_lanes_claim_steps(size_t claim_bytes, size_t step_bytes)
{
    const size_t per = (claim_bytes + step_bytes / 2) / (step_bytes ? step_bytes : 1);
    return per > 1 ? (int)per : 1;
}

int cpu_lanes_claim_tail(int per)
{
    return per > 2 ? per : 2;
}

int cpu_lanes_init_claims(struct cpu_lanes *l, int units, int streams, int per, int tail)
{
    assert(tail >= 1);
    const int steps = lanes_init(l, units, streams, per, tail);
    return l->lanes ? l->lanes : steps;
}

int cpu_lanes_runs(const struct cpu_lanes *l, int step, int count, int first[CPU_LANES_STREAMS_MAX],
                   int n[CPU_LANES_STREAMS_MAX])
{
    if (l->streams == 1) {
        first[0] = step;
        n[0] = count;
        return 1;
    }
    int i = 0;
    while (step >= l->step0[i + 1])
        i++;
    assert(step + count <= l->step0[i + 1]);
    /* sub-lane s of lane i: its units [b + u s / S, b + u (s + 1) / S) */
    const int b = l->unit0[i], u = l->unit0[i + 1] - b, k = step - l->step0[i];
    int runs = 0;
    for (int s = 0; s < l->streams; s++) {
        const int lo = b + u * s / l->streams, hi = b + u * (s + 1) / l->streams;
        if (lo + k < hi) {
            first[runs] = lo + k;
            n[runs++] = hi - (lo + k) < count ? hi - (lo + k) : count;
        }
    }
    assert(runs > 0);
    return runs;
}

int cpu_lanes_units(const struct cpu_lanes *l, int step, int units[CPU_LANES_STREAMS_MAX])
{
    int n[CPU_LANES_STREAMS_MAX];
    return cpu_lanes_runs(l, step, 1, units, n);
}

/* A claim of lane i, its first step (and *count steps): from the front
 * (its owner) or the back; -1 when the lane has none left. `per` steps
 * while more than `tail` are left, so the last `tail` go one by one
 * whichever end takes them. */
static int lane_take(struct cpu_lanes *l, int i, bool back, int *count)
{
    uint64_t v = atomic_load(&l->lane[i].v);
    for (;;) {
        const uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> 32);
        if (lo >= hi)
            return -1;
        const uint32_t left = hi - lo, more = left - (uint32_t)l->tail;
        const uint32_t c = left <= (uint32_t)l->tail ? 1
                           : more < (uint32_t)l->per ? more
                                                     : (uint32_t)l->per;
        const uint64_t nv = back ? (uint64_t)(hi - c) << 32 | lo : (uint64_t)hi << 32 | (lo + c);
        if (atomic_compare_exchange_weak(&l->lane[i].v, &v, nv)) {
            *count = (int)c;
            return (int)(back ? hi - c : lo);
        }
    }
}

/* This thread's next claim in l's call: its lane's next steps, or the last
 * ones of the fullest lane; -1 when every lane is done. */
static int lanes_claim(struct cpu_lanes *l, int *count)
{
    static _Thread_local uint64_t seen_seq;
    static _Thread_local int my_lane;
    if (seen_seq != l->seq) {
        seen_seq = l->seq;
        my_lane = atomic_fetch_add(&l->arrived, 1);
    }
    if (my_lane < l->lanes) {
        const int c = lane_take(l, my_lane, false, count);
        if (c >= 0)
            return c;
    }
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
        if (best < 0)
            return -1;
        const int c = lane_take(l, best, true, count);
        if (c >= 0)
            return c;
    }
}

int cpu_lanes_chunk(struct cpu_lanes *l, int task)
{
    if (!l->lanes)
        return task;
    int count;
    /* the pool runs one task per step: while a task looks, a step is left */
    const int c = lanes_claim(l, &count);
    assert(c >= 0 && count == 1);
    return c;
}

void cpu_lanes_task(struct cpu_lanes *l, int task, cpu_lanes_steps_fn fn, void *ctx)
{
    if (!l->tail) { /* not in claims: the pool's task is one step */
        fn(ctx, cpu_lanes_chunk(l, task), 1);
        return;
    }
    if (!l->lanes) {
        fn(ctx, task, 1);
        return;
    }
    int count, step;
    while ((step = lanes_claim(l, &count)) >= 0)
        fn(ctx, step, count);
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
    cpu_lanes_units_fn units_fn;
    void *ctx;
    struct cpu_lanes lanes;
    atomic_int rc;
};

/* step `step` of the group's call: its units, job by job */
static void lanes_group_step(void *ctx, int step, int count)
{
    struct lanes_group *g = ctx;
    for (int s = step; s < step + count; s++) {
        int units[CPU_LANES_STREAMS_MAX], job[CPU_LANES_STREAMS_MAX];
        const int n = cpu_lanes_units(&g->lanes, s, units);
        for (int k = 0; k < n; k++) {
            job[k] = lanes_job(g->first, g->n, units[k]);
            units[k] -= g->first[job[k]];
        }
        const int rc = g->units_fn(g->ctx, job, units, n);
        if (rc < 0)
            atomic_store(&g->rc, rc);
    }
}

static void lanes_group_task(void *ctx, int task)
{
    struct lanes_group *g = ctx;
    cpu_lanes_task(&g->lanes, task, lanes_group_step, g);
}

static int lanes_group_run(struct lanes_group *g, int streams, int per, int tail)
{
    atomic_init(&g->rc, 0);
    const int units = g->first[g->n];
    cpu_kernels_run(lanes_group_task, g,
                    tail > 0 ? cpu_lanes_init_claims(&g->lanes, units, streams, per, tail)
                             : cpu_lanes_init_streams(&g->lanes, units, streams));
    return atomic_load(&g->rc);
}

int cpu_lanes_run_group_streams(const int *first, int n, int streams, cpu_lanes_units_fn fn,
                                void *ctx)
{
    struct lanes_group g = {.first = first, .n = n, .units_fn = fn, .ctx = ctx};
    return lanes_group_run(&g, streams, 1, 0);
}

int cpu_lanes_run_group_claims(const int *first, int n, int streams, int per, int tail,
                               cpu_lanes_units_fn fn, void *ctx)
{
    assert(tail >= 1);
    struct lanes_group g = {.first = first, .n = n, .units_fn = fn, .ctx = ctx};
    return lanes_group_run(&g, streams, per, tail);
}
