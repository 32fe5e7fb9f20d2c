/* How a call's tasks (chunks of weight rows) are spread over the pool's
 * threads. The pool hands tasks out in order, so with the chunks in that
 * order two threads took alternate chunks and each thread's stream of
 * weights broke every chunk: its software prefetch ran into the other
 * thread's chunk and its next chunk began with the prefetchers cold (2-core
 * Xeon with AMX, 8192 x 2048 bf16, one input row, 2 threads: 0.73-0.81 of
 * the read limit, against 0.97 in lanes). In lanes instead, the rows are cut
 * into one contiguous lane per thread, as the read limit reads them: the
 * first task a thread runs in a call gives it a lane of its own, each of its
 * tasks takes its lane's next chunk (so its stream runs on across chunks,
 * the prefetch already fetching the next one), and a thread whose lane is
 * done takes the last chunk of the lane with the most left, so a thread
 * that the scheduler holds up is still relieved one chunk at a time. Each
 * row is computed by the same code either way: the results do not change.
 * The GEMV (gemv.c), the quantized products (qlinear.c) and the
 * compressed-tensors ones (ctlinear.c) split their calls so, and their
 * groups of products too (all jobs' chunks in one set of lanes). SHARDSWAP_GEMV_SPLIT=tasks (or
 * cpu_gemv_split_lanes(false)) gives back the alternate chunks, for comparison.
 *
 * A call may also cut each lane into `streams` sub-lanes (contiguous runs
 * of its chunks, here called units) and have each task take the next unit
 * of every sub-lane: a thread then reads its lane as that many far-apart
 * streams at once, each running on across the thread's tasks, as the read
 * limit's multi-stream ways read a thread's region (one core keeps more
 * lines in flight for a few streams than for one: gemv_avx512bf16_s.c).
 * A task is then a step of the lane; stealing takes a lane's last step.
 *
 * In claims (cpu_lanes_init_claims: the GEMV's, the quantized products'
 * and the compressed-tensors ones' calls) the pool runs one
 * task per lane and each task takes its steps itself, a claim at a time,
 * until none is left anywhere: `per` steps of its lane at once while more
 * than `tail` are left there, then one at a time, and a thread whose lane
 * is done takes the fullest lane's last steps by the same rule. With small
 * steps the end of a call is then balanced to one small step (both threads
 * finish within one of them), while most claims stay as long as a chunk of
 * one step each was: a stolen 128 KiB chunk had left one thread reading
 * alone for up to 5-10 us at the end of every call (a 896 x 896 call is
 * 50 us), and the pool's claim and done words no longer move between the
 * cores for every chunk. SHARDSWAP_GEMV_SPLIT=steps (or
 * cpu_gemv_split_claims(false)) gives back one 128 KiB step per task.
 * Internal to backend/cpu/. */
#ifndef SHARDSWAP_BACKEND_CPU_LANES_H
#define SHARDSWAP_BACKEND_CPU_LANES_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define CPU_LANES_MAX 16

#define CPU_LANES_STREAMS_MAX 8

struct cpu_lanes {
    int lanes;          /* 0: task i is chunk i (the pool's order) */
    int streams;        /* sub-lanes per lane: units a task takes */
    int per, tail;      /* claims: steps a claim takes while more than tail are left */
    uint64_t seq;       /* this call's number: a thread's lane is kept per call */
    atomic_int arrived; /* threads given a lane so far */
    /* lane i's units [unit0[i], unit0[i + 1]) and steps [step0[i],
     * step0[i + 1]) (the same with one stream) */
    int unit0[CPU_LANES_MAX + 1], step0[CPU_LANES_MAX + 1];
    /* per lane: (its last step + 1) << 32 | its next step; a line each,
     * so one thread's steps in its lane do not move the others' line */
    struct {
        alignas(64) _Atomic uint64_t v;
    } lane[CPU_LANES_MAX];
};

/* l for a call of `units` chunks, run by the threads a call from this
 * thread uses (one when it runs alone), in lanes unless
 * SHARDSWAP_GEMV_SPLIT=tasks, each of `streams` (1 to CPU_LANES_STREAMS_MAX)
 * sub-lanes: the number of tasks the pool must run, each taking
 * cpu_lanes_chunk's step and its units from cpu_lanes_units. Without lanes a task is one unit. */
int cpu_lanes_init_streams(struct cpu_lanes *l, int units, int streams);
/* Claims (above): l over `units` units in lanes of `streams` sub-lanes,
 * claims of `per` steps until `tail` steps of a lane are left, then of one
 * (per, tail >= 1). The number of tasks the pool must run, each calling
 * cpu_lanes_task; without lanes a task is one step. */
int cpu_lanes_init_claims(struct cpu_lanes *l, int units, int streams, int per, int tail);
/* Steps of step_bytes in a claim of about claim_bytes (at least 1), and the
 * steps at a lane's end claimed one by one: as many as a claim holds, at
 * least 2, so a thread whose lane is done while the other's last claim runs
 * still finds steps to take (the GEMV's, the quantized and compressed-tensors
 * products' rule). */
int cpu_lanes_claim_steps(size_t claim_bytes, size_t step_bytes);
int cpu_lanes_claim_tail(int per);
/* Steps [step, step + count) of l's call, one claim (cpu_lanes_task): runs on a
 * pool thread, once per claim. */
typedef void (*cpu_lanes_steps_fn)(void *ctx, int step, int count);
/* The pool's task `task` of l's call: in claims, fn on every claim this
 * thread takes, its own lane's first, until no step is left; otherwise
 * (cpu_lanes_init_streams) fn on its one step. */
void cpu_lanes_task(struct cpu_lanes *l, int task, cpu_lanes_steps_fn fn, void *ctx);
/* The units of steps [step, step + count) as runs, one per sub-lane that
 * has any of them, in sub-lane order: run k is first[k], first[k] + 1, ...,
 * first[k] + n[k] - 1 (step after step). How many runs (at least 1); the
 * steps lie in one lane, as a claim's do. */
int cpu_lanes_runs(const struct cpu_lanes *l, int step, int count, int first[CPU_LANES_STREAMS_MAX],
                   int n[CPU_LANES_STREAMS_MAX]);
/* The chunk the pool's task `task` of l's call runs: this thread's lane's
 * next, or the last of the fullest lane (task itself without lanes). The
 * pool runs exactly `tasks` tasks and each takes one chunk (with streams,
 * one step: a number for cpu_lanes_units). */
int cpu_lanes_chunk(struct cpu_lanes *l, int task);
/* The units of step `step` (one per sub-lane that has its step-th unit, in
 * sub-lane order) into units: how many (at least 1). */
int cpu_lanes_units(const struct cpu_lanes *l, int step, int units[CPU_LANES_STREAMS_MAX]);
/* Units of a group's jobs that one task runs together: job[k]'s unit c[k]
 * (counted from the job's first) for k < count; 0 or a negative error. */
typedef int (*cpu_lanes_units_fn)(void *ctx, const int *job, const int *c, int count);
/* A group of n products as one run of the pool: their chunks (units) one
 * job after the other, job i's first[i + 1] - first[i] of them (first
 * ascending, first[0] == 0), in one set of lanes, so that a thread's lane
 * runs on from one job's rows into the next's (q into k into v) as one
 * stream instead of each small job being split over the threads; each lane
 * in `streams` sub-lanes, so a task's units may lie in different jobs. 0, or
 * the error code of a unit that failed (the others still run). */
int cpu_lanes_run_group_streams(const int *first, int n, int streams, cpu_lanes_units_fn fn,
                                void *ctx);
/* The same in claims of `per` steps (then of one for the last `tail` of a
 * lane), fn called once per step of a claim. */
int cpu_lanes_run_group_claims(const int *first, int n, int streams, int per, int tail,
                               cpu_lanes_units_fn fn, void *ctx);

#endif
