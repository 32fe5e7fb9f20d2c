/* The compressed-tensors dot products on AVX2 + FMA (ctdot.h): each block
 * widened to f32 in four vectors of 8 (rounded to bf16 in bf16 mode), the
 * 16 partial sums of the order in ctdot.h held as two vectors (elements
 * 0-7 and 16-23 in the first, 8-15 and 24-31 in the second), so the result
 * is the scalar reference's bits. Tiles keep at most 4 (weight row, input
 * row) pairs: 8 sums and the block's 4 vectors in 16 registers; one
 * weight row a tile (as ctdot_avx512_body.h says why). This file
 * alone is compiled with AVX2 (CMakeLists.txt); ctlinear.c runs it only
 * where the CPU has it. */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/ctdot.h"
#include "core/quant_ct.h"

#define QK QUANT_CT_QK
#define CT_INLINE static inline __attribute__((always_inline))
#define CT_GROUP 4

CT_INLINE size_t ct_bb(enum dtype t)
{
    return t == DTYPE_CT_I8   ? QUANT_CT_I8_BYTES
           : t == DTYPE_CT_I4 ? QUANT_CT_I4_BYTES
                              : QUANT_CT_F8_BYTES;
}

/* 8 e4m3 values as exact f32 (ctdot_avx512_body.h's ct_f8_16) */
CT_INLINE __m256 ct_f8_8(const unsigned char *q)
{
    const __m256i s = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)q));
    const __m256i v = _mm256_and_si256(s, _mm256_set1_epi32(0x7f));
    const __m256 normal = _mm256_castsi256_ps(
        _mm256_add_epi32(_mm256_slli_epi32(v, 20), _mm256_set1_epi32(120 << 23)));
    const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(0x1p-9f));
    const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(8), v);
    const __m256 f = _mm256_blendv_ps(normal, sub, _mm256_castsi256_ps(small));
    return _mm256_castsi256_ps(_mm256_or_si256(
        _mm256_castps_si256(f), _mm256_and_si256(s, _mm256_set1_epi32((int)0x80000000u))));
}

CT_INLINE __m256 ct_round_bf16(__m256 f)
{
    const __m256i u = _mm256_castps_si256(f);
    const __m256i r = _mm256_add_epi32(
        u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                            _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))));
    return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u)));
}

/* the block at p as its exact f32 weights, elements 8k .. 8k + 7 in w[k] */
CT_INLINE void ct_block(enum dtype t, const unsigned char *p, bool bf16, __m256 w[4])
{
    float df;
    memcpy(&df, p, 4);
    const __m256 d = _mm256_set1_ps(df);
    if (t == DTYPE_CT_F8) {
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            w[k] = ct_f8_8(p + 4 + 8 * k);
    } else if (t == DTYPE_CT_I8) {
        const __m256i z = _mm256_set1_epi32((int8_t)p[4]);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            w[k] = _mm256_cvtepi32_ps(_mm256_sub_epi32(
                _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + 5 + 8 * k))), z));
    } else {
        const __m256i z = _mm256_set1_epi32((int8_t)p[4] + 8);
        const __m128i b = _mm_loadu_si128((const __m128i *)(p + 5)), m4 = _mm_set1_epi8(15);
        const __m128i lo = _mm_and_si128(b, m4), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m4);
        const __m128i e[2] = {_mm_unpacklo_epi8(lo, hi), _mm_unpackhi_epi8(lo, hi)};
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            w[k] = _mm256_cvtepi32_ps(_mm256_sub_epi32(
                _mm256_cvtepu8_epi32(k % 2 ? _mm_srli_si128(e[k / 2], 8) : e[k / 2]), z));
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        w[k] = _mm256_mul_ps(d, w[k]);
        if (bf16)
            w[k] = ct_round_bf16(w[k]);
    }
}

/* ctdot.h's tree over the 16 lanes: lo holds lanes 0-7, hi 8-15 */
CT_INLINE float ct_tree(__m256 lo, __m256 hi)
{
    const __m256 s8 = _mm256_add_ps(lo, hi);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

/* nr weight rows from r times nm input rows from i0, nr * nm <= 4 */
CT_INLINE void ct_tile(const struct ctdot_args *a, enum dtype t, bool rnd, int r, int nr, int i0,
                       int nm)
{
    const struct weight_view *w = a->w;
    const int nb = w->cols / QK;
    const size_t bb = ct_bb(t);
    const unsigned char *row[4];
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int rr = 0; rr < nr; rr++)
        row[rr] = weight_row(w, r + rr);
#pragma GCC unroll 4
    for (int s = 0; s < nr * nm; s++)
        acc[s][0] = acc[s][1] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
#pragma GCC unroll 4
        for (int rr = 0; rr < nr; rr++) {
            __m256 wv[4];
            ct_block(t, row[rr] + (size_t)b * bb, rnd, wv);
#pragma GCC unroll 4
            for (int i = 0; i < nm; i++) {
                const float *x = a->x + (size_t)(i0 + i) * a->ldx + (size_t)b * QK;
                __m256 *s = acc[rr * nm + i];
                s[0] = _mm256_fmadd_ps(wv[0], _mm256_loadu_ps(x), s[0]);
                s[1] = _mm256_fmadd_ps(wv[1], _mm256_loadu_ps(x + 8), s[1]);
                s[0] = _mm256_fmadd_ps(wv[2], _mm256_loadu_ps(x + 16), s[0]);
                s[1] = _mm256_fmadd_ps(wv[3], _mm256_loadu_ps(x + 24), s[1]);
            }
        }
    }
#pragma GCC unroll 4
    for (int rr = 0; rr < nr; rr++)
#pragma GCC unroll 4
        for (int i = 0; i < nm; i++)
            a->y[(size_t)(i0 + i) * a->ldy + r + rr] =
                ct_tree(acc[rr * nm + i][0], acc[rr * nm + i][1]);
}

CT_INLINE void ct_rows_t(const struct ctdot_args *a, int r0, int r1, enum dtype t, bool rnd)
{
    for (int i0 = 0; i0 < a->m; i0 += CT_GROUP) {
        const int nm = a->m - i0 < CT_GROUP ? a->m - i0 : CT_GROUP;
        for (int r = r0; r < r1; r++)
            switch (nm) {
            case 1:
                ct_tile(a, t, rnd, r, 1, i0, 1);
                break;
            case 2:
                ct_tile(a, t, rnd, r, 1, i0, 2);
                break;
            case 3:
                ct_tile(a, t, rnd, r, 1, i0, 3);
                break;
            default:
                ct_tile(a, t, rnd, r, 1, i0, 4);
                break;
            }
    }
}

void ctdot_rows_avx2(const struct ctdot_args *a, int r0, int r1)
{
    /* every (type, mode) its own loop */
    const bool rnd = a->bf16;
    switch (a->w->dtype) {
    case DTYPE_CT_I8:
        rnd ? ct_rows_t(a, r0, r1, DTYPE_CT_I8, true) : ct_rows_t(a, r0, r1, DTYPE_CT_I8, false);
        break;
    case DTYPE_CT_I4:
        rnd ? ct_rows_t(a, r0, r1, DTYPE_CT_I4, true) : ct_rows_t(a, r0, r1, DTYPE_CT_I4, false);
        break;
    default:
        rnd ? ct_rows_t(a, r0, r1, DTYPE_CT_F8, true) : ct_rows_t(a, r0, r1, DTYPE_CT_F8, false);
        break;
    }
}

CT_INLINE void ct_dequant_t(enum dtype t, const unsigned char *p, void *dst, size_t n, bool to_bf16)
{
    for (size_t b = 0; b < n / QK; b++, p += ct_bb(t)) {
        __m256 wv[4];
        ct_block(t, p, to_bf16, wv);
        for (int k = 0; k < 4; k++) {
            if (!to_bf16) {
                _mm256_storeu_ps((float *)dst + b * QK + 8 * k, wv[k]);
                continue;
            }
            const __m256i h = _mm256_srli_epi32(_mm256_castps_si256(wv[k]), 16);
            const __m128i p16 =
                _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            _mm_storeu_si128((__m128i *)((uint16_t *)dst + b * QK + 8 * k), p16);
        }
    }
}

void ctdot_dequant_avx2(enum dtype t, const void *src, void *dst, size_t n, bool to_bf16)
{
    switch (t) {
    case DTYPE_CT_I8:
        ct_dequant_t(DTYPE_CT_I8, src, dst, n, to_bf16);
        break;
    case DTYPE_CT_I4:
        ct_dequant_t(DTYPE_CT_I4, src, dst, n, to_bf16);
        break;
    default:
        ct_dequant_t(DTYPE_CT_F8, src, dst, n, to_bf16);
        break;
    }
}

#else
#include <assert.h>

#include "backend/cpu/ctdot.h"

void ctdot_rows_avx2(const struct ctdot_args *a, int r0, int r1)
{
    (void)a, (void)r0, (void)r1;
    assert(!"ctdot_rows_avx2 on a CPU without AVX2");
}

void ctdot_dequant_avx2(enum dtype t, const void *src, void *dst, size_t n, bool to_bf16)
{
    (void)t, (void)src, (void)dst, (void)n, (void)to_bf16;
    assert(!"ctdot_dequant_avx2 on a CPU without AVX2");
}
#endif
