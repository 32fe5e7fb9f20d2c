/* The dot-product kernels of the CPU's compressed-tensors linear layer
 * (ctlinear.c), one translation unit per instruction set, each compiled
 * for its set alone (CMakeLists.txt); ctlinear.c picks one at run time.
 * Internal to backend/cpu/.
 *
 * Every kernel widens each 32-element block of a weight row once (the
 * scale and zero point applied: core/quant_ct.h's exact f32 weights, then
 * rounded to bf16 in bf16 mode) and multiplies it with up to 8 input rows
 * (avx512bf16-lut: 4, its later passes over a task's rows reading them
 * from L2) while it is in registers, so a decode batch reads its weights
 * from memory once.
 *
 * The order of the sums, which scalar, avx2 and avx512 share bit for bit:
 * 16 partial sums per (weight row, input row), element j of every block
 * added into sum j % 16 by a fused multiply-add (j before j + 16), blocks
 * in order; then sum l += sum l + 8 (l < 8), l += l + 4, l += l + 2, and
 * y = sum 0 + sum 1. avx512bf16 multiplies bf16 pairs (VDPBF16PS) in
 * another order: within f32 rounding of the others. */
#ifndef SHARDSWAP_BACKEND_CPU_CTDOT_H
#define SHARDSWAP_BACKEND_CPU_CTDOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/weight.h"

/* One call's operands: y[i * ldy + r] = x[i * ldx ...] . w[r] for the m
 * input rows. bf16: round the widened weights to bf16 (nearest even), x
 * then being already rounded (bf16 mode). xb, for avx512bf16 only: x in
 * bf16, m rows of w.cols. */
struct ctdot_args {
    float *y;
    size_t ldy;
    const float *x;
    size_t ldx;
    const uint16_t *xb;
    int m;
    const struct weight_view *w;
    bool bf16;
};

/* Weight rows [r0, r1) for every input row. Runs on a pool thread; reads
 * and writes nothing but its operands. */
typedef void (*ctdot_rows_fn)(const struct ctdot_args *a, int r0, int r1);

void ctdot_rows_scalar(const struct ctdot_args *a, int r0, int r1);
void ctdot_rows_avx2(const struct ctdot_args *a, int r0, int r1);
void ctdot_rows_avx512(const struct ctdot_args *a, int r0, int r1);
/* bf16 mode only (a.bf16 and a.xb set). */
void ctdot_rows_avx512bf16(const struct ctdot_args *a, int r0, int r1);
/* bf16 mode only: CT_I4 and CT_F8 widened through a table of the bf16
 * weights a block's scale (and zero point) gives, rebuilt when they change
 * (CT_F8: when a changed scale repeats in the next block); CT_I8 as
 * ctdot_rows_avx512bf16. */
void ctdot_rows_avx512bf16_lut(const struct ctdot_args *a, int r0, int r1);

/* n elements (whole blocks) of CT type t at src as exact f32 (quant_ct.h),
 * or rounded to bf16 when to_bf16 (dst then n uint16_t): the same values
 * as quant_ct_dequantize, for a prefill's converted weight blocks. */
void ctdot_dequant_scalar(enum dtype t, const void *src, void *dst, size_t n, bool to_bf16);
void ctdot_dequant_avx2(enum dtype t, const void *src, void *dst, size_t n, bool to_bf16);
void ctdot_dequant_avx512(enum dtype t, const void *src, void *dst, size_t n, bool to_bf16);

#endif
