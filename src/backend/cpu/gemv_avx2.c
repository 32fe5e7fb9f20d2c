/* The fused GEMV for AVX2 + FMA + F16C, eight lanes: this file (and the
 * two that include it with other blocks and prefetch, gemv_avx2_next.c and
 * gemv_avx2_m8.c) alone is compiled with -mavx2 -mfma -mf16c
 * (CMakeLists.txt), and runs only where gemv.c found them. */
#include "backend/cpu/gemv_isa.h"

#ifndef GEMV_AVX2_EXPORT
#define GEMV_AVX2_EXPORT gemv_rows_avx2
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

typedef __m256 gv_t;
#define GV_LANES 8

static inline gv_t gv_zero(void)
{
    return _mm256_setzero_ps();
}

static inline gv_t gv_load_f32(const void *p)
{
    return _mm256_loadu_ps((const float *)p);
}

static inline gv_t gv_load_f16(const void *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static inline gv_t gv_load_bf16(const void *p)
{
    __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

static inline gv_t gv_fma(gv_t a, gv_t b, gv_t c)
{
    return _mm256_fmadd_ps(a, b, c);
}

static inline float gv_hsum(gv_t v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

#define GEMV_ROWS_FN GEMV_AVX2_EXPORT
#include "backend/cpu/gemv_body.h"

#else
/* not x86: gemv.c never picks it */
void GEMV_AVX2_EXPORT(const struct gemv_args *a, int r0, int r1)
{
    gemv_rows_scalar(a, r0, r1);
}
#ifdef GEMV_PIECES_FN
void GEMV_PIECES_FN(const struct gemv_piece *p, int n)
{
    for (int i = 0; i < n; i++)
        gemv_rows_scalar(p[i].a, p[i].r0, p[i].r1);
}
#endif
#endif
