/* bench gemv's GPU half (cmd_bench_gemv_device.c), called by bench_gemv
 * (cmd_bench_gemv.c) for --devices cuda:G; and the weight buffers bench gemv
 * and bench lora cycle through. */
#ifndef SHARDSWAP_CLI_BENCH_GEMV_H
#define SHARDSWAP_CLI_BENCH_GEMV_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/kernels.h"
#include "core/dtype.h"

/* The GPU's GEMV takes up to this many input rows (CUDA_GEMV_MAX_M). */
#define BENCH_GEMV_GPU_MAX_M 8

struct bench_gemv_opts {
    int gpu;
    int rows, cols, footprint_mb, max_m;
    const enum dtype *dtypes;
    int n_types;
    enum kern_compute cm;
    double min_s; /* each pass at least this long */
    bool json;
};

/* Measures kern_linear with m = 1, 2, 4, 8 (up to max_m) on GPU o->gpu
 * for every type, against a device copy, and prints the table (or JSON).
 * 0, or a negative code with a message. */
int bench_gemv_gpu(const struct bench_gemv_opts *o);

/* Weights in huge pages where the kernel allows, as a CPU device's arena
 * and membw_read's buffers have them; NULL when out of memory. */
char *bench_gemv_map(size_t bytes);
/* Unmaps what bench_gemv_map gave; NULL-safe. */
void bench_gemv_unmap(char *p, size_t bytes);

#endif
