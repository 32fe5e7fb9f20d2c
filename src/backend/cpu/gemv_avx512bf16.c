/* The fused GEMV for bf16 weights in bf16 mode on AVX512-BF16: VDPBF16PS
 * multiplies 32 pairs of bf16 (weights and the inputs rounded to bf16) and
 * adds them to 16 f32 sums, half the instructions of widening the weights
 * and FMAs. A product of two bf16 is exact in f32, so the result is the
 * mode's (bf16(x) . w summed in f32) up to summation order, except that the
 * instruction treats subnormal inputs as zero and flushes subnormal sums
 * (bf16 subnormals are below 1.2e-38). This file alone is compiled with
 * AVX-512 F/BW/VL + BF16 (CMakeLists.txt) and runs only where gemv.c found
 * them; other dtypes, or no rounded inputs, go to gemv_rows_avx512. */
#include "backend/cpu/gemv_isa.h"

/* the function this file defines: gemv_avx512bf16_r1.c and _r8.c include
 * it again with other numbers of weight rows per block (GEMV_R) */
#ifndef GEMV_BF16_EXPORT
#define GEMV_BF16_EXPORT gemv_rows_avx512bf16
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

typedef __m512 gv_t;
#define GV_LANES 16
#define GV_COLS 32 /* bf16 pairs: 32 columns per step */
#define GV_WT __m512bh
#define GV_XT __m512bh
#define GV_XELEM uint16_t
#define GV_XROWS(a) ((a)->xb)
#define GEMV_BF16_ONLY

static inline gv_t gv_zero(void)
{
    return _mm512_setzero_ps();
}

static inline __m512bh gv_load_w(enum dtype t, const char *row, int c)
{
    (void)t;
    return (__m512bh)_mm512_loadu_si512(row + (size_t)c * 2);
}

static inline __m512bh gv_load_x(const uint16_t *p)
{
    return (__m512bh)_mm512_loadu_si512(p);
}

static inline gv_t gv_fma(__m512bh w, __m512bh x, gv_t acc)
{
    return _mm512_dpbf16_ps(acc, w, x);
}

static inline float gv_hsum(gv_t v)
{
    return _mm512_reduce_add_ps(v);
}

#include "backend/cpu/gemv_hsum512.h"

static void gemv_rows_dpbf16(const struct gemv_args *a, int r0, int r1);
#define GEMV_ROWS_FN gemv_rows_dpbf16
#include "backend/cpu/gemv_body.h"

void GEMV_BF16_EXPORT(const struct gemv_args *a, int r0, int r1)
{
    if (a->xb && a->w->dtype == DTYPE_BF16)
        gemv_rows_dpbf16(a, r0, r1);
    else
        gemv_rows_avx512(a, r0, r1);
}

#else
/* not x86: gemv.c never picks it */
void GEMV_BF16_EXPORT(const struct gemv_args *a, int r0, int r1)
{
    gemv_rows_scalar(a, r0, r1);
}
#endif
