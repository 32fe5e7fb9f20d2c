/* vnni-x16: the quantized products with weights packed once in groups of
 * 16 rows (weight.h's WEIGHT_PACK_X16, core/qpack.h; qdot.h's
 * qdot_x16_vnni): Q4_K, Q5_K (its fifth bits beside) and Q6_K. This file
 * is compiled with AVX-512 (F, BW, VL, DQ) and VNNI (CMakeLists.txt), and
 * again with GFNI as qdot_x16_gfni.c (XV_GFNI_BUILD: Q5_K's fifth bits
 * and Q6_K's top bits moved by GF2P8AFFINEQB); qlinear.c runs a build
 * only where the CPU has what it was compiled for.
 *
 * A vector of a group's quants holds the same 4 packed bytes of its 16
 * rows (a row a lane), so its low nibbles are a quad of elements of one
 * sub-block of every row and its high nibbles a quad of the next; each
 * input row's quads, read in place from its Q8_K row, are broadcast
 * against them: one VPDPBUSD adds a quad of 16 weight rows, and a
 * sub-block's sums come out one lane per row, times the lanes' scales
 * (VPMULLD) without a horizontal sum. The high nibbles are taken as they
 * sit (times 16, an exact multiple, shifted back once a sub-block), so
 * unpacking a vector costs two ANDs. The mins multiply x's sums of 32 in
 * word pairs (VPDPWSSD). What vnni-few computed after laying out 16 rows
 * per call (54 cycles a Q4_K block on Zen 4) is here laid out once, when
 * the blob was filled.
 *
 * The integer sums are each block's exact ones and the f32 steps qdot.h's
 * (block b into partial b % 8, reduced as qdot_sum8): the same bits as
 * every other kernel (test_quant's packed tests). Rows past the groups
 * (rows % 16 of them) go to vnni-near. */
#include "backend/cpu/qdot.h"

#include "backend/cpu/qdot_gf.h"
#include "backend/cpu/scratch.h"
#include "core/error.h"
#include "core/qpack.h"

#include <assert.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define XV_INLINE static inline __attribute__((always_inline))
/* Q4_K's groups a pass: each broadcast of an input row's quad goes to all */
#define XV_TILES 2
/* Q4_K's input rows a pass over a block's quads (their sums in registers) */
#define XV_XR 2
/* blocks ahead a pass of several input rows prefetches (xv_pass) */
#define XV_PF_BLOCKS 2

XV_INLINE __m512i xv_bcast4(const char *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* A packed block's lanes: d, -dmin, the sub-blocks' scales as int32 and
 * the mins of sub-blocks 2p, 2p + 1 as int16 pairs */
struct xv_scales {
    __m512 d, ndmin;
    __m512i sc[8], mn[4];
};

XV_INLINE void xv_scales_of(const char *blk, struct xv_scales *s)
{
    s->d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
    s->ndmin = _mm512_xor_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + 32))),
                             _mm512_set1_ps(-0.0f));
    const __m512i d0 = _mm512_loadu_si512(blk + 64), d1 = _mm512_loadu_si512(blk + 128);
    const __m512i d2 = _mm512_loadu_si512(blk + 192);
    const __m512i m3f = _mm512_set1_epi8(0x3f), m0f = _mm512_set1_epi8(0x0f);
    const __m512i m30 = _mm512_set1_epi8(0x30);
    /* each lane's bytes: scales 0-3, mins 0-3, scales 4-7, mins 4-7
     * (quant_scale_min) */
    const __m512i slo = _mm512_and_si512(d0, m3f), mlo = _mm512_and_si512(d1, m3f);
    const __m512i shi =
        _mm512_or_si512(_mm512_and_si512(d2, m0f), _mm512_and_si512(_mm512_srli_epi32(d0, 2), m30));
    const __m512i mhi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(d2, 4), m0f),
                                        _mm512_and_si512(_mm512_srli_epi32(d1, 2), m30));
    /* VPSHUFB within each 128-bit lane: byte k of a row's lane (4i + k) to
     * an int32 (the scales), bytes 2p and 2p + 1 to a pair of int16 (the
     * mins); 0x80 makes a zero */
    const __m512i at = _mm512_setr_epi32(0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const __m512i c = _mm512_or_si512(_mm512_add_epi32(at, _mm512_set1_epi32(k)),
                                          _mm512_set1_epi32((int)0x80808000u));
        s->sc[k] = _mm512_shuffle_epi8(slo, c);
        s->sc[4 + k] = _mm512_shuffle_epi8(shi, c);
    }
#pragma GCC unroll 2
    for (int p = 0; p < 2; p++) {
        const __m512i c =
            _mm512_or_si512(_mm512_add_epi32(_mm512_mullo_epi32(at, _mm512_set1_epi32(0x10001)),
                                             _mm512_set1_epi32(2 * p | (2 * p + 1) << 16)),
                            _mm512_set1_epi32((int)0x80008000u));
        s->mn[p] = _mm512_shuffle_epi8(mlo, c);
        s->mn[2 + p] = _mm512_shuffle_epi8(mhi, c);
    }
}

/* Sums a vector: al[i][T][e] (ah) for input row i, group T and a split e
 * of the quads (xv_blk's) */
typedef __m512i xv_sums[XV_XR][XV_TILES][4];

XV_INLINE void xv_zero(xv_sums al, xv_sums ah, const int nx, const int nt, const int split)
{
#pragma GCC unroll 4
    for (int i = 0; i < nx; i++)
#pragma GCC unroll 4
        for (int T = 0; T < nt; T++)
#pragma GCC unroll 4
            for (int e = 0; e < split; e++)
                al[i][T][e] = ah[i][T][e] = _mm512_setzero_si512();
}

/* One step of quads: group T's vectors wl[T] and wh[T] times input row
 * i's quads at xl + i xq_ld and xh + i xq_ld (broadcast), into split e */
XV_INLINE void xv_quads(xv_sums al, xv_sums ah, const __m512i *wl, const __m512i *wh,
                        const char *xl, const char *xh, size_t xq_ld, const int nx, const int nt,
                        const int e)
{
#pragma GCC unroll 4
    for (int i = 0; i < nx; i++) {
        const __m512i l = xv_bcast4(xl + (size_t)i * xq_ld), h = xv_bcast4(xh + (size_t)i * xq_ld);
#pragma GCC unroll 4
        for (int T = 0; T < nt; T++) {
            al[i][T][e] = _mm512_dpbusd_epi32(al[i][T][e], wl[T], l);
            ah[i][T][e] = _mm512_dpbusd_epi32(ah[i][T][e], wh[T], h);
        }
    }
}

/* a vector's splits summed */
XV_INLINE __m512i xv_fold(const __m512i *a, const int split)
{
    __m512i v = a[0];
#pragma GCC unroll 4
    for (int e = 1; e < split; e++)
        v = _mm512_add_epi32(v, a[e]);
    return v;
}

/* A block's integer sums is[i ld + T] of input rows [i0, i0 + nx) and
 * groups T < nt through qdot.h's f32 steps (the mins against x's sums of
 * 32) into the partials p[(i nt + T) 8 + b % 8] */
XV_INLINE void xv_blk_end(const struct xv_scales *s, const char *xb, size_t xq_ld, int b, int i0,
                          const int nx, const int nt, const __m512i *is, const int ld, __m512 *p)
{
#pragma GCC unroll 4
    for (int i = 0; i < nx; i++) {
        const char *xi = xb - 4 + (size_t)i * xq_ld;
        float dxs;
        memcpy(&dxs, xi, 4);
        const __m512 dx = _mm512_set1_ps(dxs);
        int16_t bs[QUANT_QKK / 16];
        memcpy(bs, xi + 4 + QUANT_QKK, sizeof(bs));
        __m512i xp[4];
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            const int l = bs[4 * q] + bs[4 * q + 1], h = bs[4 * q + 2] + bs[4 * q + 3];
            xp[q] = _mm512_set1_epi32((int)((uint32_t)(uint16_t)l | (uint32_t)(uint16_t)h << 16));
        }
#pragma GCC unroll 4
        for (int T = 0; T < nt; T++) {
            __m512 *pk = p + ((size_t)(i0 + i) * nt + T) * 8 + b % 8;
            const __m512 acc = _mm512_fmadd_ps(_mm512_mul_ps(s[T].d, dx),
                                               _mm512_cvtepi32_ps(is[(size_t)i * ld + T]), *pk);
            __m512i ms = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++)
                ms = _mm512_dpwssd_epi32(ms, s[T].mn[q], xp[q]);
            *pk = _mm512_fmadd_ps(_mm512_mul_ps(s[T].ndmin, dx), _mm512_cvtepi32_ps(ms), acc);
        }
    }
}

/* Block b of nt groups (g[T]: the group's block) times input rows [i0, i0
 * + nx): each row's scaled sums, then the f32 steps into partials p[(i nt
 * + T) 8 + b % 8] */
XV_INLINE void xv_blk(const char *const *g, const struct xv_scales *s, const char *xq, size_t xq_ld,
                      int b, int i0, const int nx, const int nt, __m512 *p)
{
    const __m512i lo4 = _mm512_set1_epi8(0x0f), hi4 = _mm512_set1_epi8((char)0xf0);
    __m512i is[XV_XR][XV_TILES];
#pragma GCC unroll 4
    for (int i = 0; i < nx; i++)
#pragma GCC unroll 4
        for (int T = 0; T < nt; T++)
            is[i][T] = _mm512_setzero_si512();
    const char *xb = xq + (size_t)i0 * xq_ld + (size_t)b * sizeof(struct quant_q8_k) + 4;
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        /* eight chains of VPDPBUSD at least (four did not hide their
         * latency): fewer rows and groups, a vector's sums split by quads
         * k mod 2 or 4 */
        const int split = 4 / (nx * nt);
        xv_sums al, ah;
        xv_zero(al, ah, nx, nt, split);
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            __m512i wl[XV_TILES], wh[XV_TILES];
#pragma GCC unroll 4
            for (int T = 0; T < nt; T++) {
                const __m512i v = _mm512_loadu_si512(g[T] + 256 + 64 * (size_t)(8 * j + k));
                wl[T] = _mm512_and_si512(v, lo4);
                wh[T] = _mm512_and_si512(v, hi4);
            }
            const char *xi = xb + 64 * j + 4 * k;
            xv_quads(al, ah, wl, wh, xi, xi + 32, xq_ld, nx, nt, k % split);
        }
#pragma GCC unroll 4
        for (int i = 0; i < nx; i++)
#pragma GCC unroll 4
            for (int T = 0; T < nt; T++) {
                const __m512i sl = xv_fold(al[i][T], split), sh = xv_fold(ah[i][T], split);
                const __m512i a = _mm512_mullo_epi32(s[T].sc[2 * j], sl);
                /* Q4_K's high nibbles were 16 times their value */
                const __m512i h = _mm512_mullo_epi32(s[T].sc[2 * j + 1], _mm512_srai_epi32(sh, 4));
                is[i][T] = _mm512_add_epi32(is[i][T], _mm512_add_epi32(a, h));
            }
    }
    xv_blk_end(s, xb, xq_ld, b, i0, nx, nt, &is[0][0], XV_TILES, p);
}

/* Input rows a Q5_K pass over a block's vectors (their sums in registers;
 * a group a pass: two groups' sums of two rows went to the stack) */
#define XV5_XR 4

/* Block b of a Q5_K group (g) times input rows [i0, i0 + nx), as xv_blk
 * (s: its scales): per quarter j, each quant vector's nibbles (sub-blocks
 * 2 j and 2 j + 1) with their fifth bits from qh moved to bit 4 (one
 * GF2P8AFFINEQB each with GFNI, a shift and a mask without) by one
 * VPTERNLOGD each */
XV_INLINE void xv5_blk(const char *g, const struct xv_scales *s, const char *xq, size_t xq_ld,
                       int b, int i0, const int nx, __m512 *p)
{
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
#ifndef XV_GFNI_BUILD
    const __m512i bit4 = _mm512_set1_epi8(0x10);
#endif
    __m512i is[XV5_XR];
#pragma GCC unroll 4
    for (int i = 0; i < nx; i++)
        is[i] = _mm512_setzero_si512();
    const char *xb = xq + (size_t)i0 * xq_ld + (size_t)b * sizeof(struct quant_q8_k) + 4;
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
#ifdef XV_GFNI_BUILD
        /* qh's bits 2j and 2j + 1 to bit 4, the rest cleared */
        const __m512i gl = _mm512_set1_epi64(qdot_gf_bits(2 * j, 4, 1));
        const __m512i gh = _mm512_set1_epi64(qdot_gf_bits(2 * j + 1, 4, 1));
#endif
        /* eight chains of VPDPBUSD at least: fewer rows, a vector's sums
         * split by quads k mod 2 or 4 */
        const int split = nx >= 4 ? 1 : nx == 1 ? 4 : 2;
        __m512i al[XV5_XR][4], ah[XV5_XR][4];
#pragma GCC unroll 4
        for (int i = 0; i < nx; i++)
#pragma GCC unroll 4
            for (int e = 0; e < split; e++)
                al[i][e] = ah[i][e] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m512i v = _mm512_loadu_si512(g + qpack_q5k_qs(8 * j + k));
            const __m512i qh = _mm512_loadu_si512(g + qpack_q5k_qh(k));
#ifdef XV_GFNI_BUILD
            const __m512i l5 = _mm512_gf2p8affine_epi64_epi8(qh, gl, 0);
            const __m512i h5 = _mm512_gf2p8affine_epi64_epi8(qh, gh, 0);
#else
            /* bits 2j and 2j + 1 of qh to bit 4 */
            const __m512i l5 = _mm512_and_si512(2 * j <= 4 ? _mm512_slli_epi32(qh, 4 - 2 * j)
                                                           : _mm512_srli_epi32(qh, 2 * j - 4),
                                                bit4);
            const __m512i h5 = _mm512_and_si512(2 * j + 1 <= 4 ? _mm512_slli_epi32(qh, 3 - 2 * j)
                                                               : _mm512_srli_epi32(qh, 2 * j - 3),
                                                bit4);
#endif
            /* (nibble & lo4) | fifth bit: 0xec */
            const __m512i wl = _mm512_ternarylogic_epi32(v, l5, lo4, 0xec);
            const __m512i wh = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), h5, lo4, 0xec);
            const char *xi = xb + 64 * j + 4 * k;
#pragma GCC unroll 4
            for (int i = 0; i < nx; i++) {
                al[i][k % split] =
                    _mm512_dpbusd_epi32(al[i][k % split], wl, xv_bcast4(xi + (size_t)i * xq_ld));
                ah[i][k % split] = _mm512_dpbusd_epi32(ah[i][k % split], wh,
                                                       xv_bcast4(xi + 32 + (size_t)i * xq_ld));
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < nx; i++) {
            const __m512i a = _mm512_mullo_epi32(s->sc[2 * j], xv_fold(al[i], split));
            const __m512i h = _mm512_mullo_epi32(s->sc[2 * j + 1], xv_fold(ah[i], split));
            is[i] = _mm512_add_epi32(is[i], _mm512_add_epi32(a, h));
            /* the quarter's sums done here (as xv6_blk) */
            __asm__("" : "+v"(is[i]));
        }
    }
    xv_blk_end(s, xb, xq_ld, b, i0, nx, 1, is, 1, p);
}

/* xv_blk for each count of input rows and groups, each its own function:
 * inlined into the pass, its loads of the weights (the same for each
 * input row) were hoisted out of the loop over the input rows, all 64
 * vectors of a block unpacked to the stack and read back, 1.8x slower at
 * one row */
typedef void (*xv_blk_fn)(const char *const *g, const struct xv_scales *s, const char *xq,
                          size_t xq_ld, int b, int i0, __m512 *p);
#define XV_BLK(nx, nt)                                                                             \
    static __attribute__((noinline)) void xv_blk_##nx##_##nt(                                      \
        const char *const *g, const struct xv_scales *s, const char *xq, size_t xq_ld, int b,      \
        int i0, __m512 *p)                                                                         \
    {                                                                                              \
        xv_blk(g, s, xq, xq_ld, b, i0, nx, nt, p);                                                 \
    }
XV_BLK(1, 1)
XV_BLK(2, 1)
XV_BLK(1, 2)
XV_BLK(2, 2)

typedef void (*xv5_blk_fn)(const char *g, const struct xv_scales *s, const char *xq, size_t xq_ld,
                           int b, int i0, __m512 *p);
#define XV5_BLK(nx)                                                                                \
    static __attribute__((noinline)) void xv5_blk_##nx(const char *g, const struct xv_scales *s,   \
                                                       const char *xq, size_t xq_ld, int b,        \
                                                       int i0, __m512 *p)                          \
    {                                                                                              \
        xv5_blk(g, s, xq, xq_ld, b, i0, nx, p);                                                    \
    }
XV5_BLK(1)
XV5_BLK(2)
XV5_BLK(3)
XV5_BLK(4)

/* ---- Q6_K ---- */

/* A packed Q6_K block's lanes: d, the 16 sub-blocks' scales as int32, and
 * 32 times the scales of sub-blocks 2p and 2p + 1 as int16 pairs (against
 * x's sums of 16 for the quants' bias) */
struct xv6_scales {
    __m512i sc[16], sp[8];
};

XV_INLINE void xv6_scales_of(const char *blk, struct xv6_scales *s)
{
    /* byte k of each lane's word to its top byte (VPSHUFB), then shifted
     * down with its sign */
    const __m512i at = _mm512_setr_epi32(0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const __m512i v = _mm512_loadu_si512(blk + 64 * j);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m512i c =
                _mm512_or_si512(_mm512_slli_epi32(_mm512_add_epi32(at, _mm512_set1_epi32(k)), 24),
                                _mm512_set1_epi32(0x808080));
            s->sc[4 * j + k] = _mm512_srai_epi32(_mm512_shuffle_epi8(v, c), 24);
        }
        /* bytes 2p' and 2p' + 1 of each lane's word to the top bytes of
         * its words, shifted down with the sign: 256 s / 8 = 32 s */
#pragma GCC unroll 2
        for (int q = 0; q < 2; q++) {
            const __m512i c = _mm512_or_si512(
                _mm512_add_epi32(_mm512_mullo_epi32(at, _mm512_set1_epi32(0x01000100)),
                                 _mm512_set1_epi32((2 * q) << 8 | (2 * q + 1) << 24)),
                _mm512_set1_epi32(0x00800080));
            s->sp[2 * j + q] = _mm512_srai_epi16(_mm512_shuffle_epi8(v, c), 3);
        }
    }
}


/* Input rows a Q6_K pass over a block's vectors (their sums in
 * registers; a group a pass: two groups' sums of two input rows did not
 * fit the 32 registers) */
#define XV6_XR 4

/* Block b of a Q6_K group (g: its 3328 bytes, gd: its d) times input rows
 * [i0, i0 + nx), as xv_blk: per half h and part q, for each qh vector its
 * two ql vectors' low nibbles (sub-blocks 8 h + q, 8 h + 2 + q) and high
 * ones (8 h + 4 + q, 8 h + 6 + q), each with its top bits; each
 * sub-block's sum times its scale; then less the quants' bias, 32 times
 * x's sums of 16 times the scales (VPDPWSSD) */
XV_INLINE void xv6_blk(const char *g, const char *gd, const struct xv6_scales *s, const char *xq,
                       size_t xq_ld, int b, int i0, const int nx, __m512 *p)
{
    /* d first, where its pair of blocks begins */
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)gd));
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
#ifdef XV_GFNI_BUILD
    /* qh's bits 0-1, 2-3, 4-5, 6-7 to bits 4-5, the rest cleared */
    __m512i top[4];
#pragma GCC unroll 4
    for (int e = 0; e < 4; e++)
        top[e] = _mm512_set1_epi64(qdot_gf_bits(2 * e, 4, 2));
#else
    const __m512i top2 = _mm512_set1_epi8(0x30);
#endif
    __m512i is[XV6_XR];
#pragma GCC unroll 4
    for (int i = 0; i < nx; i++)
        is[i] = _mm512_setzero_si512();
    const char *xb = xq + (size_t)i0 * xq_ld + (size_t)b * sizeof(struct quant_q8_k);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
#pragma GCC unroll 2
        for (int q = 0; q < 2; q++) {
            /* acc[i][e]: input row i, sub-block 8 h + q + (0, 2, 4, 6)[e] */
            __m512i acc[XV6_XR][4];
#pragma GCC unroll 4
            for (int i = 0; i < nx; i++)
#pragma GCC unroll 4
                for (int e = 0; e < 4; e++)
                    acc[i][e] = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const __m512i qa = _mm512_loadu_si512(g + qpack_q6k_ql(16 * h + 4 * q + k));
                const __m512i qh = _mm512_loadu_si512(g + qpack_q6k_qh(8 * h + 4 * q + k));
                const __m512i qb = _mm512_loadu_si512(g + qpack_q6k_ql(16 * h + 8 + 4 * q + k));
                __m512i t[4]; /* qh's bits 2e, 2e + 1 at bits 4-5 */
#ifdef XV_GFNI_BUILD
#pragma GCC unroll 4
                for (int e = 0; e < 4; e++)
                    t[e] = _mm512_gf2p8affine_epi64_epi8(qh, top[e], 0);
#else
                t[0] = _mm512_and_si512(_mm512_slli_epi32(qh, 4), top2);
                t[1] = _mm512_and_si512(_mm512_slli_epi32(qh, 2), top2);
                t[2] = _mm512_and_si512(qh, top2);
                t[3] = _mm512_and_si512(_mm512_srli_epi32(qh, 2), top2);
#endif
                /* (nibble & lo4) | top: 0xec */
                const __m512i w[4] = {
                    _mm512_ternarylogic_epi32(qa, t[0], lo4, 0xec),
                    _mm512_ternarylogic_epi32(qb, t[1], lo4, 0xec),
                    _mm512_ternarylogic_epi32(_mm512_srli_epi16(qa, 4), t[2], lo4, 0xec),
                    _mm512_ternarylogic_epi32(_mm512_srli_epi16(qb, 4), t[3], lo4, 0xec)};
                /* x's quads of the four sub-blocks: 16 (q + (0, 2, 4, 6)) + 4 k */
#pragma GCC unroll 4
                for (int i = 0; i < nx; i++)
#pragma GCC unroll 4
                    for (int e = 0; e < 4; e++)
                        acc[i][e] =
                            _mm512_dpbusd_epi32(acc[i][e], w[e],
                                                xv_bcast4(xb + (size_t)i * xq_ld + 4 + 128 * h +
                                                          16 * (q + 2 * e) + 4 * k));
            }
#pragma GCC unroll 4
            for (int i = 0; i < nx; i++) {
#pragma GCC unroll 4
                for (int e = 0; e < 4; e++)
                    is[i] = _mm512_add_epi32(
                        is[i], _mm512_mullo_epi32(s->sc[8 * h + q + 2 * e], acc[i][e]));
                /* the part's sums done here: GCC otherwise kept all 16
                 * sub-blocks' sums of every input row for the end, on the
                 * stack */
                __asm__("" : "+v"(is[i]));
            }
        }
    }
    /* less the bias; then qdot.h's step with dmin = msum = 0: the second
     * adds -0, p as it was */
#pragma GCC unroll 4
    for (int i = 0; i < nx; i++) {
        const char *xi = xb + (size_t)i * xq_ld;
        __m512i bias = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++)
            bias = _mm512_dpwssd_epi32(bias, s->sp[q], xv_bcast4(xi + 260 + 4 * q));
        float dxs;
        memcpy(&dxs, xi, 4);
        __m512 *pk = p + (size_t)(i0 + i) * 8 + b % 8;
        *pk = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(dxs)),
                              _mm512_cvtepi32_ps(_mm512_sub_epi32(is[i], bias)), *pk);
    }
}

typedef void (*xv6_blk_fn)(const char *g, const char *gd, const struct xv6_scales *s,
                           const char *xq, size_t xq_ld, int b, int i0, __m512 *p);
#define XV6_BLK(nx)                                                                                \
    static __attribute__((noinline)) void xv6_blk_##nx(const char *g, const char *gd,              \
                                                       const struct xv6_scales *s, const char *xq, \
                                                       size_t xq_ld, int b, int i0, __m512 *p)     \
    {                                                                                              \
        xv6_blk(g, gd, s, xq, xq_ld, b, i0, nx, p);                                                \
    }
XV6_BLK(1)
XV6_BLK(2)
XV6_BLK(3)
XV6_BLK(4)

/* ---- the passes ---- */

/* The nt groups of type t from weight row rt times every input row, into y */
XV_INLINE void xv_pass(const struct qdot_args *a, int rt, __m512 *p, const int nt,
                       const enum dtype t)
{
    const struct weight_view *w = a->w;
    const int nb = w->cols / QUANT_QKK;
    const size_t bb = QPACK_ROWS * quant_block_bytes(t), gb = (size_t)nb * bb;
    const char *g0 = (const char *)w->data + (size_t)(rt / QPACK_ROWS) * gb;
    for (int k = 0; k < a->m * nt * 8; k++)
        p[k] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const char *g[XV_TILES];
#pragma GCC unroll 2
        for (int T = 0; T < nt; T++)
            g[T] = g0 + (size_t)T * gb + (t == DTYPE_Q6_K ? qpack_q6k_blk(b, nb) : (size_t)b * bb);
        /* with several input rows, a block's compute outlasts what the
         * hardware's prefetch brings: the block two ahead asked for into
         * L2 (Zen 4, 8192 x 2048, 8 input rows: Q6_K 1.3 ms a call on one
         * thread instead of 2.0-2.4, Q4_K 1.18 instead of 1.33-1.38; for
         * one row it cost) */
        if (a->m >= (t == DTYPE_Q6_K ? 2 : 4))
            for (int T = 0; T < nt; T++)
                for (size_t o = 0; o < bb + 64; o += 64)
                    _mm_prefetch(g[T] + XV_PF_BLOCKS * bb + o, _MM_HINT_T1);
        if (t == DTYPE_Q6_K) { /* a group a pass: up to 4 input rows a call */
            assert(nt == 1);
            static const xv6_blk_fn k6[XV6_XR] = {xv6_blk_1, xv6_blk_2, xv6_blk_3, xv6_blk_4};
            struct xv6_scales s6;
            xv6_scales_of(g[0], &s6);
            const char *gd = g0 + qpack_q6k_d(b, nb);
            for (int i0 = 0; i0 < a->m; i0 += XV6_XR) {
                const int nx = a->m - i0 < XV6_XR ? a->m - i0 : XV6_XR;
                k6[nx - 1](g[0], gd, &s6, a->xq, a->xq_ld, b, i0, p);
            }
            continue;
        }
        if (t == DTYPE_Q5_K) { /* a group a pass, as Q6_K's */
            assert(nt == 1);
            static const xv5_blk_fn k5[XV5_XR] = {xv5_blk_1, xv5_blk_2, xv5_blk_3, xv5_blk_4};
            struct xv_scales s5;
            xv_scales_of(g[0], &s5);
            for (int i0 = 0; i0 < a->m; i0 += XV5_XR) {
                const int nx = a->m - i0 < XV5_XR ? a->m - i0 : XV5_XR;
                k5[nx - 1](g[0], &s5, a->xq, a->xq_ld, b, i0, p);
            }
            continue;
        }
        /* Q4_K: each case's block function, [groups - 1][two input rows] */
        static const xv_blk_fn k4[2][2] = {{xv_blk_1_1, xv_blk_2_1}, {xv_blk_1_2, xv_blk_2_2}};
        struct xv_scales s[XV_TILES];
#pragma GCC unroll 2
        for (int T = 0; T < nt; T++)
            xv_scales_of(g[T], &s[T]);
        for (int i0 = 0; i0 < a->m; i0 += XV_XR)
            k4[nt - 1][a->m - i0 >= 2](g, s, a->xq, a->xq_ld, b, i0, p);
    }
    /* qdot_sum8 per input row and group: 16 weight rows of y a store */
    for (int T = 0; T < nt; T++)
        for (int i = 0; i < a->m; i++) {
            const __m512 *q = p + ((size_t)i * nt + T) * 8;
            const __m512 sum =
                _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(q[0], q[4]), _mm512_add_ps(q[2], q[6])),
                              _mm512_add_ps(_mm512_add_ps(q[1], q[5]), _mm512_add_ps(q[3], q[7])));
            _mm512_storeu_ps(a->y + (size_t)i * a->ldy + rt + QPACK_ROWS * T, sum);
        }
}

/* weight rows [r0, r1) of type t, a constant of each caller below */
XV_INLINE int xv_rows(const struct qdot_args *a, int r0, int r1, const enum dtype t)
{
    const int gend = a->w->rows / QPACK_ROWS * QPACK_ROWS;
    const int g1 = r1 < gend ? r1 : gend;
    assert(r0 % QPACK_ROWS == 0 || r0 >= gend);
    if (r0 < g1) {
        __m512 *p = cpu_scratch(CPU_SCRATCH_Q_DEQ, (size_t)a->m * XV_TILES * 8 * sizeof(__m512));
        if (!p)
            return ERR_NOMEM;
        /* one or two input rows: a group a pass, the task's groups one
         * stream (two groups a pass were two streams of 18 KiB each, for
         * llama-3.2-1b's 2048 columns, that the hardware's prefetch
         * restarted on every pass: one thread read 18 GB/s of weights
         * instead of 29); more rows: Q4_K's two, each broadcast of x to
         * both; Q5_K's and Q6_K's one, up to four input rows a call */
        int rt = r0;
        for (; a->m > 2 && t == DTYPE_Q4_K && g1 - rt >= XV_TILES * QPACK_ROWS;
             rt += XV_TILES * QPACK_ROWS)
            xv_pass(a, rt, p, XV_TILES, t);
        for (; rt < g1; rt += QPACK_ROWS)
            xv_pass(a, rt, p, 1, t);
    }
    if (r1 > gend) { /* the rows past the groups, as rows */
        struct weight_view tw = *a->w;
        tw.pack = WEIGHT_PACK_ROWS;
        struct qdot_args ta = *a;
        ta.w = &tw;
        ta.xp = NULL;
        qdot_rows_vnni_near(&ta, r0 > gend ? r0 : gend, r1);
    }
    return 0;
}

static __attribute__((noinline)) int xv_q4_k(const struct qdot_args *a, int r0, int r1)
{
    return xv_rows(a, r0, r1, DTYPE_Q4_K);
}

static __attribute__((noinline)) int xv_q5_k(const struct qdot_args *a, int r0, int r1)
{
    return xv_rows(a, r0, r1, DTYPE_Q5_K);
}

static __attribute__((noinline)) int xv_q6_k(const struct qdot_args *a, int r0, int r1)
{
    return xv_rows(a, r0, r1, DTYPE_Q6_K);
}

#ifndef QDOT_X16_FN /* qdot_x16_gfni.c names its own */
#define QDOT_X16_FN qdot_x16_vnni
#endif

int QDOT_X16_FN(const struct qdot_args *a, int r0, int r1)
{
    assert(a->w->pack == WEIGHT_PACK_X16 && a->w->ld == (size_t)a->w->cols);
    if (a->w->dtype == DTYPE_Q4_K)
        return xv_q4_k(a, r0, r1);
    if (a->w->dtype == DTYPE_Q5_K)
        return xv_q5_k(a, r0, r1);
    if (a->w->dtype == DTYPE_Q6_K)
        return xv_q6_k(a, r0, r1);
    return qdot_x16_rows(a, r0, r1);
}

#else
int QDOT_X16_FN(const struct qdot_args *a, int r0, int r1)
{
    return qdot_x16_rows(a, r0, r1);
}
#endif
