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
 * `bytes_per_thread` (rounded up to 64) touched beforehand; best of `reps`.
 * 0 when it cannot allocate. The ceiling of anything that streams weights
 * (decode): nothing is written, so it is what one pass over memory costs. */
double membw_read(int threads, size_t bytes_per_thread, int reps);

#endif
