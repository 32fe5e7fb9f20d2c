/* The two halves of the CPU backend's linear layer (cpu_linear in
 * kernels.c picks one by the number of input rows): internal to
 * backend/cpu/. Both compute y[m, w.rows] = x[m, w.cols] @ w^T in precision
 * cm (backend/kernels.h), no bias. 0, or a negative error code with a
 * message. */
#ifndef SHARDSWAP_BACKEND_CPU_LINEAR_H
#define SHARDSWAP_BACKEND_CPU_LINEAR_H

#include <stddef.h>

#include "backend/cpu/pool.h"
#include "backend/kernels.h"
#include "backend/weight.h"

/* Up to this many input rows a linear layer is bound by reading its weights:
 * cpu_gemv; above, cpu_matmul. */
#define CPU_GEMV_MAX_M 16

/* Fused matrix-vector product: one pass over the weights for all m rows. */
int cpu_gemv(float *y, const float *x, int m, const struct weight_view *w,
             enum kern_compute cm);
/* The instruction set cpu_gemv uses in this process ("avx512bf16",
 * "avx512", "avx2", "scalar"): the best the CPU has, or SHARDSWAP_ISA's
 * when the CPU has it (otherwise the best, after one line on stderr). */
const char *cpu_gemv_isa(void);
/* Makes cpu_gemv use ISA `name` (NULL: the best again), for tests and
 * benchmarks; not while a cpu_gemv runs. 0, ERR_UNSUPPORTED when the CPU
 * lacks it, ERR_INVALID for an unknown name (the choice is then unchanged). */
int cpu_gemv_set_isa(const char *name);
/* Matrix product for many rows. */
int cpu_matmul(float *y, const float *x, int m, const struct weight_view *w,
               enum kern_compute cm);

/* x (n floats) rounded to bf16 (nearest even) and widened back, in a buffer
 * of the calling thread, kept and grown (valid until its next call); NULL
 * when it cannot grow. The reference bf16 mode: the products of these and
 * the stored weights summed in f32 are the mode's result for bf16 weights. */
const float *cpu_round_bf16(const float *x, size_t n);

/* pool_run, or the tasks in order on this thread when it computes alone
 * (cpu_kernels_single_thread). */
void cpu_kernels_run(pool_task_fn fn, void *ctx, int n_tasks);

#endif
