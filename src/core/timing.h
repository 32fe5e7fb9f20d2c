/* Monotonic time for benchmarks and latency accounting. */
#ifndef SHARDSWAP_CORE_TIMING_H
#define SHARDSWAP_CORE_TIMING_H

/* Seconds on CLOCK_MONOTONIC, with nanosecond resolution. */
double time_now(void);

#endif
