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
 * package's bf16 decompression. Never a whole dequantized copy: blocks of
 * 16 rows per pool task for a few input rows, cpu_matmul's converted
 * blocks for many. 0, or ERR_NOMEM with a message. */
int cpu_ctlinear(float *y, const float *x, int m, const struct weight_view *w,
                 enum kern_compute cm);

#endif
