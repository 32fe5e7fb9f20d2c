/* The machine's memory bandwidth as memcpy (and a plain read) sees it: the reference every
 * benchmark sets its data movement against, measured in the same run. */
#ifndef SHARDSWAP_CORE_MEMBW_H
#define SHARDSWAP_CORE_MEMBW_H

#include <stddef.h>

/* Bytes copied per second by memcpy on `threads` threads at once, each
 * copying its own `bytes_per_thread` between buffers touched beforehand (no
 * page faults in the timing, and long enough that starting the threads does
 * not count); best of `reps`. 0 when it cannot allocate. A copy moves each
 * byte twice (read + write): STREAM's Copy figure is twice this. */
double membw_memcpy(int threads, size_t bytes_per_thread, int reps);

/* The same with copy_stream (core/copy.h), the copy the CPU devices use: the
 * fastest copy this machine does, so the hardware limit of a swap. */
double membw_stream(int threads, size_t bytes_per_thread, int reps);

/* Bytes read per second on `threads` threads at once, each summing its own
 * `bytes_per_thread` (rounded up to 128) touched beforehand: the best over
 * `reps` rounds of every way of reading this machine runs (membw_read_report
 * says which). 0 when it cannot allocate. The ceiling of anything that
 * streams weights (decode): nothing is written, so it is what one pass over
 * memory costs. Take it in the same run as what it judges, before and after
 * it, with a footprint well above the last-level cache (256 MiB a thread is
 * what the benchmarks use). */
double membw_read(int threads, size_t bytes_per_thread, int reps);

/* What one read measurement saw: the limit, each way's best, how far its
 * rounds spread, and the state of the machine around it, which is what
 * moves a limit between runs (another tenant's CPU time or the
 * hypervisor's steal, the core's clock, buffers without huge pages). */
#define MEMBW_READ_WAYS_MAX 32
struct membw_read_report {
    double bps;                          /* the limit: the best pass of any way in any round */
    int n;                               /* ways measured, in the order taken within a round */
    char name[MEMBW_READ_WAYS_MAX][40];  /* "avx512x8+pf512 pin 64M": how, placement, footprint */
    double way_bps[MEMBW_READ_WAYS_MAX]; /* each way's best */
    int best;                            /* index of the fastest way */
    int rounds;
    double round_min, round_median; /* each round's best pass: the spread inside one measurement */
    double best_on_cpu;   /* the share of the best pass its threads held a CPU (1: undisturbed) */
    double on_cpu_median; /* the same, the median over every pass */
    double huge_share;    /* of the buffer in transparent huge pages, 0..1; NaN unknown */
    double others;        /* share of the machine's CPU time other processes used meanwhile; NaN */
    double steal;         /* share the hypervisor gave other guests meanwhile; NaN unknown */
    double ghz;           /* a dependent-add chain's rate on this thread just before: the clock
                             this thread gets (a busy or throttled core reads low); NaN off x86 */
    double seconds;       /* the measurement's wall time */
};

/* membw_read, and what it saw in *out. Every way is taken in turn within each
 * round, so that a drift of the machine's rate meets them all: the baseline
 * vector width over 4 streams; with AVX-512, 64-byte loads over 4 and 8
 * streams, with and without software prefetch, and streaming loads; each
 * with the threads left to the scheduler and pinned one to a CPU, over the
 * whole footprint and over a quarter of it (the quarter only where it is
 * still 4x the last-level cache). The buffer is written once before
 * the rounds (every page faulted in) and read once untimed. */
double membw_read_report(int threads, size_t bytes_per_thread, int reps,
                         struct membw_read_report *out);

#endif
