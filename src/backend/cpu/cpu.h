/* What only the CPU backend has: how many cores its kernels use.
 * (device_open_cpu and device_cpu_set_link are in backend/device.h.) */
#ifndef SHARDSWAP_BACKEND_CPU_CPU_H
#define SHARDSWAP_BACKEND_CPU_CPU_H

#include <stdbool.h>

/* Threads the CPU kernels may use (BLAS included); n < 1 means all cores. */
void cpu_set_threads(int n);
int cpu_threads(void);

/* Makes the calling thread run every kernel on itself alone (no worker pool):
 * the compute thread of a CPU device is one core. BLAS's own thread count is
 * process-wide; set it with cpu_set_threads(1) when devices compute in
 * parallel. */
void cpu_kernels_single_thread(bool alone);

#endif
