/* The fused GEMV for AVX-512 (F + BW + VL), sixteen lanes: this file alone
 * is compiled with those instruction sets (CMakeLists.txt), and runs only
 * where gemv.c found them. */
#include "backend/cpu/gemv_isa.h"

/* the function this file defines: gemv_avx512_r1.c includes it again with
 * one weight row per block (GEMV_R) */
#ifndef GEMV_AVX512_EXPORT
#define GEMV_AVX512_EXPORT gemv_rows_avx512
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

typedef __m512 gv_t;
#define GV_LANES 16

static inline gv_t gv_zero(void)
{
    return _mm512_setzero_ps();
}

static inline gv_t gv_load_f32(const void *p)
{
    return _mm512_loadu_ps(p);
}

static inline gv_t gv_load_f16(const void *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

static inline gv_t gv_load_bf16(const void *p)
{
    __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}

static inline gv_t gv_fma(gv_t a, gv_t b, gv_t c)
{
    return _mm512_fmadd_ps(a, b, c);
}

static inline float gv_hsum(gv_t v)
{
    return _mm512_reduce_add_ps(v);
}

#include "backend/cpu/gemv_hsum512.h"

#define GEMV_ROWS_FN GEMV_AVX512_EXPORT
#include "backend/cpu/gemv_body.h"

#else
/* not x86: gemv.c never picks it */
void GEMV_AVX512_EXPORT(const struct gemv_args *a, int r0, int r1)
{
    gemv_rows_scalar(a, r0, r1);
}
#endif
