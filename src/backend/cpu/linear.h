/* The two halves of the CPU backend's linear layer (cpu_linear in
 * kernels.c picks one by the number of input rows): internal to
 * backend/cpu/. Both compute y[m, w.rows] = x[m, w.cols] @ w^T in precision
 * cm (backend/kernels.h), no bias. 0, or a negative error code with a
 * message. */
#ifndef SHARDSWAP_BACKEND_CPU_LINEAR_H
#define SHARDSWAP_BACKEND_CPU_LINEAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/pool.h"
#include "backend/kernels.h"
#include "backend/weight.h"

/* Up to this many input rows a linear layer is bound by reading its weights:
 * cpu_gemv; above, cpu_matmul. */
#define CPU_GEMV_MAX_M 16

/* Fused matrix-vector product: one pass over the weights for all m rows
 * (or cpu_matmul, where the measurement found it faster for m rows of the
 * class: bf16 weights in bf16 mode). */
int cpu_gemv(float *y, const float *x, int m, const struct weight_view *w,
             enum kern_compute cm);
/* Up to this many products in one cpu_gemv_group call. */
#define CPU_GEMV_GROUP_MAX 64
/* cpu_gemv of each of the n jobs (n <= CPU_GEMV_GROUP_MAX, each m <=
 * CPU_GEMV_MAX_M, plain weights), bitwise the same, as one run of the pool
 * over all of their tasks. */
int cpu_gemv_group(const struct kern_linear_job *jobs, int n, enum kern_compute cm);
/* The f32 GEMV kernel cpu_gemv runs for m rows of f32 weights (measured,
 * or as requested): qlinear.c's dequantized blocks go through it. */
#include "backend/cpu/gemv_isa.h"
gemv_rows_fn cpu_gemv_rows_f32(int m);
/* Matrix product for many rows: oneDNN or OpenBLAS, by measurement (see
 * matmul.c for the paths and cpu.h's cpu_matmul_paths). */
int cpu_matmul(float *y, const float *x, int m, const struct weight_view *w,
               enum kern_compute cm);
/* Primitives cpu_matmul has created so far (cache misses), for tests. */
uint64_t cpu_matmul_cache_misses(void);

/* x (n floats) rounded to bf16 (nearest even) and widened back, in a buffer
 * of the calling thread, kept and grown (valid until its next call); NULL
 * when it cannot grow. The reference bf16 mode: the products of these and
 * the stored weights summed in f32 are the mode's result for bf16 weights. */
const float *cpu_round_bf16(const float *x, size_t n);

/* Evicts [p, p + n) from every cache level (CLFLUSHOPT where the CPU has
 * it, else CLFLUSH), split over the threads a call would use: for the
 * calibrations, which time kernels on weights that come from memory, as a
 * model's do. */
void cpu_cache_flush(const void *p, size_t n);

/* Whether the CPU has AMX-TILE and AMX-BF16 and Linux granted this process
 * the tile data (asked once, at the first call). */
bool cpu_amx_granted(void);

/* Whether the calling thread computes alone (cpu_kernels_single_thread). */
bool cpu_kernels_alone(void);

/* pool_run, or the tasks in order on this thread when it computes alone
 * (cpu_kernels_single_thread). */
void cpu_kernels_run(pool_task_fn fn, void *ctx, int n_tasks);

#endif
