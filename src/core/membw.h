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
 * `reps` rounds of every way of reading this machine runs (the baseline
 * vector width over 4 streams; with AVX-512, 64-byte loads over 4 and 8
 * streams, with and without software prefetch, and streaming loads), the ways
 * taken in turn within each round so that the machine's drift meets them
 * all. 0 when it cannot allocate. The ceiling of anything that streams
 * weights (decode): nothing is written, so it is what one pass over memory
 * costs. Take it in the same run as what it judges, with a footprint well
 * above the last-level cache (256 MiB a thread is what the benchmarks use). */
double membw_read(int threads, size_t bytes_per_thread, int reps);

/* Each way's best, as membw_read_detail fills it in. */
#define MEMBW_READ_METHODS_MAX 8
struct membw_read_methods {
    int n;
    const char *name[MEMBW_READ_METHODS_MAX]; /* "sse2x4", "avx512x8+pf512", ... */
    double bps[MEMBW_READ_METHODS_MAX];
    const char *best; /* the name of the fastest */
};
/* membw_read, and each way's figure in *out (out may be NULL). */
double membw_read_detail(int threads, size_t bytes_per_thread, int reps,
                         struct membw_read_methods *out);

#endif
