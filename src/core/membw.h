/* The machine's memory bandwidth as memcpy sees it: the reference every
 * benchmark sets its data movement against, measured in the same run. */
#ifndef SHARDSWAP_CORE_MEMBW_H
#define SHARDSWAP_CORE_MEMBW_H

#include <stddef.h>

/* Bytes copied per second by memcpy on `threads` threads at once, each
 * copying its share of `bytes` between buffers touched beforehand (no page
 * faults in the timing); best of `reps`. 0 when it cannot allocate. A copy
 * moves each byte twice (read + write): STREAM's Copy figure is twice this. */
double membw_memcpy(int threads, size_t bytes, int reps);

#endif
