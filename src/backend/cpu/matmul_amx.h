/* The matrix product of bf16 mode on AMX tiles (AMX-TILE + AMX-BF16), for
 * many input rows (a prefill): internal to backend/cpu/, used by matmul.c
 * as one of its measured paths.
 *
 * The weights are the A operand as they lie, as the AMX GEMV reads them: a
 * tile is 16 weight rows x 32 bf16 columns loaded with the row stride, so
 * each weight is read once from memory and never repacked (oneDNN's brgemm
 * copies every block of plain weights into its own layout on every call,
 * which at a prefill's 128 rows costs about what the products do). x is the
 * B operand, rounded to bf16 and packed once per call in the pair layout
 * TDPBF16PS reads, 16 input rows a block. The products are exact and summed
 * in f32: bf16 mode's result, in another order than oneDNN's. */
#ifndef SHARDSWAP_BACKEND_CPU_MATMUL_AMX_H
#define SHARDSWAP_BACKEND_CPU_MATMUL_AMX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/weight.h"

/* Whether w can be multiplied here: bf16, rows a multiple of 16, columns a
 * multiple of 32. */
bool matmul_amx_fits(const struct weight_view *w);
/* Bytes of x packed for m rows of k columns (k a multiple of 32). */
size_t matmul_amx_packed_bytes(int m, int k);
/* Rounds x's rows [16 b0, 16 b1) (m rows of k floats in all; rows past m
 * are zeros) to bf16 into xv's blocks b0..b1-1. */
void matmul_amx_pack(uint16_t *xv, const float *x, int m, int k, int b0, int b1);
/* y[i, r] (row stride ldy) = x_i . w_r for every input row i < m and weight
 * rows [r0, r1) (multiples of 16), from x packed by matmul_amx_pack. On the
 * calling thread; only where AMX's tile data was granted. */
void matmul_amx_rows(float *y, size_t ldy, const uint16_t *xv, int m, const struct weight_view *w,
                     int r0, int r1);

#endif
