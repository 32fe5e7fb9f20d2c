/* The CPU linear layer with weights in compressed-tensors' repacked block
 * types (ctlinear.c, core/quant_ct.h): internal to backend/cpu/, called by
 * cpu_linear for any m. */
#ifndef SHARDSWAP_BACKEND_CPU_CTLINEAR_H
#define SHARDSWAP_BACKEND_CPU_CTLINEAR_H

#include "backend/kernels.h"
#include "backend/weight.h"
#include "core/quant_ct.h"

/* y[m, w.rows] = x[m, w.cols] @ w^T for a CT-type w, in precision cm:
 * f32 mode, the weights dequantized exactly (quant_ct.h) and x as it is;
 * bf16 mode, the dequantized weights and x each rounded to bf16 (nearest
 * even), products summed in f32: what transformers computes on the
 * package's bf16 decompression. Never a whole dequantized copy: up to
 * CPU_GEMV_MAX_M rows, each block widened in registers by the kernel
 * measured fastest (ctdot.h); above, cpu_matmul's converted blocks. 0, or
 * ERR_NOMEM with a message. */
int cpu_ctlinear(float *y, const float *x, int m, const struct weight_view *w,
                 enum kern_compute cm);

/* cpu_ctlinear of each of the n jobs (n <= CPU_GEMV_GROUP_MAX, each m <=
 * CPU_GEMV_MAX_M, CT types, which may differ from job to job), bitwise the
 * same, as one run of the pool over all of their rows, x converted once
 * for the jobs that read the same rows. 0, or ERR_NOMEM. */
int cpu_ctlinear_group(const struct kern_linear_job *jobs, int n, enum kern_compute cm);

/* n elements (whole blocks) of CT type t at src into dst as f32, or as bf16
 * (nearest even) when to_bf16: quant_ct_dequantize's values on the widest
 * vectors the CPU has. For cpu_matmul's converted blocks. */
void cpu_ct_dequantize(enum dtype t, const void *src, void *dst, size_t n, bool to_bf16);

/* n_blocks random blocks of CT type t at dst, seeded: finite f32 scales
 * between 2^-12 and 2^-6, CT_I4's zero point in [-8, 7], no FP8 NaN, every
 * other bit random. For the calibration, tests and benchmarks. */
void cpu_ctlinear_random_blocks(enum dtype t, void *dst, size_t n_blocks, uint64_t seed);

/* Every run of `group` blocks from the first at `blocks` given its first
 * block's scale (and zero point), as a checkpoint's group of group * 32
 * elements shares them: for the calibration, tests and benchmarks. */
void cpu_ctlinear_share_scales(enum dtype t, void *blocks, size_t n_blocks, size_t group);

#endif
