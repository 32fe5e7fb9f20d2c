/* The row kernels of the CPU backend's segmented low-rank update (cpu_lora
 * in lora.c), one set per instruction set: internal to backend/cpu/.
 *
 * Each computes one input row's part alone, in an order fixed by the
 * shapes of its pair only (never by other rows or segments), so what a row
 * gets does not depend on what shares the call. */
#ifndef SHARDSWAP_BACKEND_CPU_LORA_H
#define SHARDSWAP_BACKEND_CPU_LORA_H

#include "backend/weight.h"

/* Outputs per block of the expansion: a call's [o0, o1) starts on a
 * multiple of this, so an output sits at the same place in its block
 * whatever range a task covers. */
#define LORA_OUT_BLOCK 16

/* t[j] = x . a[j] for j < a->rows: x (a->cols floats) against the rows of
 * a, summed in f32 (16 lanes over the columns, then the lanes, then the
 * columns past the last whole 16). */
void lora_shrink_scalar(float *t, const float *x, const struct weight_view *a);
/* y[o] = y[o] + scale * (t . b[o]) for o in [o0, o1): t (b->cols floats),
 * the product and the sum each rounded to f32 (what PEFT's
 * `result + lora_B(lora_A(x)) * scaling` does). o0 % LORA_OUT_BLOCK == 0. */
void lora_expand_scalar(float *y, const float *t, const struct weight_view *b, int o0, int o1,
                        float scale);

/* The same with AVX-512 F/BW/VL (lora_avx512.c), only where the CPU has
 * them: sixteen outputs of the expansion summed at once by a transposing
 * tree. Not bit-equal to the scalar ones (another order of the sums). */
void lora_shrink_avx512(float *t, const float *x, const struct weight_view *a);
void lora_expand_avx512(float *y, const float *t, const struct weight_view *b, int o0, int o1,
                        float scale);

#endif
