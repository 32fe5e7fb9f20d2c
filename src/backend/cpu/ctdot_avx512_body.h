/* The AVX-512 widening of compressed-tensors blocks (core/quant_ct.h) and
 * the multi-row tiles around it, included by ctdot_avx512.c (f32 fused
 * multiply-adds, ctdot.h's order) and ctdot_avx512bf16.c (VDPBF16PS),
 * which define CT_PREPARE(rnd, w0, w1) (once per widened block; rnd: bf16
 * mode) and CT_FMA_BLOCK(a, acc, w0, w1, i, b) (the block times input row
 * i into acc) before including it. Each
 * function is inlined with the block type and the tile's shape constant,
 * so every (type, tile) is its own loop with its sums in registers. */
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/ctdot.h"
#include "core/quant_ct.h"

#define QK QUANT_CT_QK
#define CT_INLINE static inline __attribute__((always_inline))
/* input rows per pass, and the most (weight row, input row) sums a tile keeps */
#define CT_GROUP 8
#define CT_TILE_SUMS 8

CT_INLINE size_t ct_bb(enum dtype t)
{
    return t == DTYPE_CT_I8   ? QUANT_CT_I8_BYTES
           : t == DTYPE_CT_I4 ? QUANT_CT_I4_BYTES
                              : QUANT_CT_F8_BYTES;
}

/* 16 e4m3 values as exact f32: a normal one's exponent rebiased (7 to
 * 127) in place, a subnormal one (exponent 0) as its mantissa times 2^-9 */
CT_INLINE __m512 ct_f8_16(const unsigned char *q)
{
    const __m512i s = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q));
    const __m512i v = _mm512_and_si512(s, _mm512_set1_epi32(0x7f));
    const __m512 normal = _mm512_castsi512_ps(
        _mm512_add_epi32(_mm512_slli_epi32(v, 20), _mm512_set1_epi32(120 << 23)));
    const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(v), _mm512_set1_ps(0x1p-9f));
    const __mmask16 small = _mm512_cmplt_epi32_mask(v, _mm512_set1_epi32(8));
    const __m512 f = _mm512_mask_blend_ps(small, normal, sub);
    return _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_castps_si512(f), _mm512_and_si512(s, _mm512_set1_epi32((int)0x80000000u))));
}

/* f rounded to bf16 (nearest even; finite f), as f32 */
CT_INLINE __m512 ct_round_bf16(__m512 f)
{
    const __m512i u = _mm512_castps_si512(f);
    const __m512i r = _mm512_add_epi32(
        u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                            _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
    return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u)));
}

/* the block at p as its exact f32 weights: elements 0-15 in w0, 16-31 in w1 */
CT_INLINE void ct_block(enum dtype t, const unsigned char *p, __m512 *w0, __m512 *w1)
{
    float df;
    memcpy(&df, p, 4);
    const __m512 d = _mm512_set1_ps(df);
    if (t == DTYPE_CT_F8) {
        *w0 = _mm512_mul_ps(d, ct_f8_16(p + 4));
        *w1 = _mm512_mul_ps(d, ct_f8_16(p + 20));
        return;
    }
    __m128i e0, e1;
    int z = (int8_t)p[4];
    if (t == DTYPE_CT_I8) {
        e0 = _mm_loadu_si128((const __m128i *)(p + 5));
        e1 = _mm_loadu_si128((const __m128i *)(p + 21));
        *w0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepi8_epi32(e0), _mm512_set1_epi32(z)));
        *w1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepi8_epi32(e1), _mm512_set1_epi32(z)));
    } else {
        const __m128i b = _mm_loadu_si128((const __m128i *)(p + 5)), m4 = _mm_set1_epi8(15);
        const __m128i lo = _mm_and_si128(b, m4), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m4);
        e0 = _mm_unpacklo_epi8(lo, hi); /* elements 0-15: low nibble first */
        e1 = _mm_unpackhi_epi8(lo, hi);
        z += 8;
        *w0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(e0), _mm512_set1_epi32(z)));
        *w1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(e1), _mm512_set1_epi32(z)));
    }
    *w0 = _mm512_mul_ps(d, *w0);
    *w1 = _mm512_mul_ps(d, *w1);
}

/* ctdot.h's tree over the 16 lanes */
CT_INLINE float ct_tree(__m512 v)
{
    const __m256 lo = _mm512_castps512_ps256(v);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    const __m256 s8 = _mm256_add_ps(lo, hi);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

/* nr weight rows from r times nm input rows from i0 (nr * nm <=
 * CT_TILE_SUMS): each block widened once, then multiplied with every
 * input row */
CT_INLINE void ct_tile(const struct ctdot_args *a, enum dtype t, bool rnd, int r, int nr, int i0,
                       int nm)
{
    const struct weight_view *w = a->w;
    const int nb = w->cols / QK;
    const size_t bb = ct_bb(t);
    const unsigned char *row[CT_TILE_SUMS];
    __m512 acc[CT_TILE_SUMS];
#pragma GCC unroll 8
    for (int rr = 0; rr < nr; rr++)
        row[rr] = weight_row(w, r + rr);
#pragma GCC unroll 8
    for (int s = 0; s < nr * nm; s++)
        acc[s] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
#pragma GCC unroll 8
        for (int rr = 0; rr < nr; rr++) {
            __m512 w0, w1;
            ct_block(t, row[rr] + (size_t)b * bb, &w0, &w1);
            CT_PREPARE(rnd, w0, w1);
#pragma GCC unroll 8
            for (int i = 0; i < nm; i++)
                CT_FMA_BLOCK(a, acc[rr * nm + i], w0, w1, i0 + i, b);
        }
    }
#pragma GCC unroll 8
    for (int rr = 0; rr < nr; rr++)
#pragma GCC unroll 8
        for (int i = 0; i < nm; i++)
            a->y[(size_t)(i0 + i) * a->ldy + r + rr] = ct_tree(acc[rr * nm + i]);
}

/* one weight row times nm (1..8, a run-time count) input rows */
CT_INLINE void ct_tile1(const struct ctdot_args *a, enum dtype t, bool rnd, int r, int i0, int nm)
{
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
    case 4:
        ct_tile(a, t, rnd, r, 1, i0, 4);
        break;
    case 5:
        ct_tile(a, t, rnd, r, 1, i0, 5);
        break;
    case 6:
        ct_tile(a, t, rnd, r, 1, i0, 6);
        break;
    case 7:
        ct_tile(a, t, rnd, r, 1, i0, 7);
        break;
    default:
        ct_tile(a, t, rnd, r, 1, i0, 8);
        break;
    }
}

/* Rows [r0, r1) of type t: input rows 8 at a time, one weight row a tile
 * (several rows a tile, 2 or 4 streams of weights, measured 2-3x slower
 * from memory for one input row) */
CT_INLINE void ct_rows_t(const struct ctdot_args *a, int r0, int r1, enum dtype t, bool rnd)
{
    for (int i0 = 0; i0 < a->m; i0 += CT_GROUP) {
        const int nm = a->m - i0 < CT_GROUP ? a->m - i0 : CT_GROUP;
        for (int r = r0; r < r1; r++)
            ct_tile1(a, t, rnd, r, i0, nm);
    }
}

CT_INLINE void ct_rows(const struct ctdot_args *a, int r0, int r1)
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
