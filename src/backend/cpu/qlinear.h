/* The CPU linear layer with weights in GGUF's block types (qlinear.c):
 * internal to backend/cpu/, called by cpu_linear for any m. */
#ifndef SHARDSWAP_BACKEND_CPU_QLINEAR_H
#define SHARDSWAP_BACKEND_CPU_QLINEAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/kernels.h"
#include "backend/weight.h"

/* y[m, w.rows] = x[m, w.cols] @ w^T for a block-type w, in precision cm
 * (backend/kernels.h says what each mode computes). 0, or ERR_NOMEM with a
 * message when a scratch buffer cannot grow. */
int cpu_qlinear(float *y, const float *x, int m, const struct weight_view *w, enum kern_compute cm);

/* cpu_qlinear of each of the n jobs (n <= CPU_GEMV_GROUP_MAX, each m <=
 * CPU_GEMV_MAX_M, GGUF block types, which may differ from job to job),
 * bitwise the same, as one run of the pool over all of their rows: each
 * job by the kernel chosen for its type and rows, x quantized (and laid
 * out) once for the jobs that read the same rows. 0, or ERR_NOMEM. */
int cpu_qlinear_group(const struct kern_linear_job *jobs, int n, enum kern_compute cm);

/* Whether this CPU's kernels want weights of type t packed in groups of
 * 16 rows (weight.h's WEIGHT_PACK_X16, core/qpack.h: Q4_K, Q5_K, Q6_K): where
 * vnni-x16 measured faster than the chosen kernels in a bucket of input
 * rows and slower in none (the calibration's, by 3%), or as
 * SHARDSWAP_QPACK=on|off says (on only where the CPU has AVX-512 VNNI). */
bool cpu_qlinear_packs(enum dtype t);

/* Row r of block-type w in its own layout: in place, or for a packed
 * view's row written back into the calling thread's scratch (valid until
 * its next call); NULL when the scratch cannot grow. */
const void *cpu_qlinear_row(const struct weight_view *w, int r);

/* n_blocks random blocks of type t at dst with finite f16 scales (between
 * 2^-12 and 2^-6) and every other bit random (seeded): for the
 * calibration, tests and benchmarks. For compressed-tensors' types (core/
 * quant_ct.h): cpu_ctlinear_random_blocks. */
void cpu_qlinear_random_blocks(enum dtype t, void *dst, size_t n_blocks, uint64_t seed);

#endif
