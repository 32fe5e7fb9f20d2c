/* attn_vec.h's two products in AVX-512 F, sixteen lanes: this file alone
 * is compiled with that instruction set (CMakeLists.txt), and runs only
 * where attn_vec.c found it. A row of head_dim floats is C = head_dim
 * / 16 vectors rounded up, the last one masked. */
#include "backend/cpu/attn_vec.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define FORCE_INLINE static inline __attribute__((always_inline))

/* How far ahead of the products the keys are prefetched, in blocks of 16
 * keys. With the values prefetched beside them, 1.1-2x faster than the
 * hardware's prefetcher alone at batch 8 over 144 and 1040 keys (the
 * 2-core Zen 5, interleaved, loaded); 1, 4 or 8 blocks within the noise. */
#define ATTN_PF_BLOCKS 2

/* lanes [0, n) of 16 */
static inline __mmask16 lanes(int n)
{
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

/* The lane sums of v[0..15], v[i]'s in lane i: pairs interleaved and added
 * (8 vectors), then quadruples within each 128-bit lane (4), then the four
 * 128-bit lanes (2, 1). */
FORCE_INLINE __m512 sum16(const __m512 *v)
{
    __m512 t[8], u[4];
#pragma GCC unroll 16
    for (int i = 0; i < 8; i++)
        t[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
#pragma GCC unroll 16
    for (int i = 0; i < 4; i++)
        u[i] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0xee));
    const __m512 w0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88),
                                    _mm512_shuffle_f32x4(u[0], u[1], 0xdd));
    const __m512 w1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88),
                                    _mm512_shuffle_f32x4(u[2], u[3], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w0, w1, 0x88), _mm512_shuffle_f32x4(w0, w1, 0xdd));
}

/* Scores of blocks of 16 keys (read from memory once, then from L1 for
 * every row): per row and key one vector of partial products over the C
 * chunks, the block's 16 summed together by sum16. C a constant where it
 * is inlined, so the row's chunks stay in registers. */
FORCE_INLINE void scores_c(float *s, size_t lds, const float *q, size_t ldq, int rows, int C,
                           __mmask16 last, const float *k, const float *v, int hd, int n)
{
    const size_t block = (size_t)16 * hd * sizeof(float), end = (size_t)n * hd * sizeof(float);
    for (size_t b = 0; b < ATTN_PF_BLOCKS * block && b < end; b += 64)
        _mm_prefetch((const char *)k + b, _MM_HINT_T0);
    for (int j0 = 0; j0 < n; j0 += 16) {
        const int nk = n - j0 < 16 ? n - j0 : 16;
        const float *kb = k + (size_t)j0 * hd;
        /* the keys ATTN_PF_BLOCKS blocks ahead into L1, this block's values into L2 */
        const size_t at = (size_t)j0 * hd * sizeof(float), ahead = at + ATTN_PF_BLOCKS * block;
        for (size_t b = 0; b < block && ahead + b < end; b += 64)
            _mm_prefetch((const char *)k + ahead + b, _MM_HINT_T0);
        for (size_t b = 0; v && b < block && at + b < end; b += 64)
            _mm_prefetch((const char *)v + at + b, _MM_HINT_T1);
        for (int r = 0; r < rows; r++) {
            const float *qr = q + (size_t)r * ldq;
            __m512 qv[16], acc[16];
#pragma GCC unroll 16
            for (int c = 0; c < C; c++)
                qv[c] = _mm512_maskz_loadu_ps(c == C - 1 ? last : (__mmask16)0xffff, qr + 16 * c);
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) {
                __m512 a = _mm512_setzero_ps();
                if (i < nk)
#pragma GCC unroll 16
                    for (int c = 0; c < C; c++)
                        a = _mm512_fmadd_ps(
                            qv[c],
                            _mm512_maskz_loadu_ps(c == C - 1 ? last : (__mmask16)0xffff,
                                                  kb + (size_t)i * hd + 16 * c),
                            a);
                acc[i] = a;
            }
            _mm512_mask_storeu_ps(s + (size_t)r * lds + j0, lanes(nk), sum16(acc));
        }
    }
}

void attn_scores_avx512(float *s, size_t lds, const float *q, size_t ldq, int rows, int head_dim,
                        const float *k, const float *v, int n)
{
    const int C = (head_dim + 15) / 16;
    const __mmask16 last = lanes(head_dim - 16 * (C - 1));
    switch (C) { /* the usual head widths with their chunks in registers */
    case 4:
        scores_c(s, lds, q, ldq, rows, 4, last, k, v, head_dim, n);
        return;
    case 8:
        scores_c(s, lds, q, ldq, rows, 8, last, k, v, head_dim, n);
        return;
    default:
        scores_c(s, lds, q, ldq, rows, C, last, k, v, head_dim, n);
        return;
    }
}

/* out (+)= P v for rows [r0, r0 + NR) (a row past `rows` recomputes the
 * last one and is not stored) and chunks [c0, c0 + NC), the NR x NC
 * accumulators in registers over every key: each value row's chunks are
 * loaded once, each weight broadcast once. */
FORCE_INLINE void values_block(float *out, size_t ldo, const float *p, size_t ldp, int rows, int r0,
                               int NR, int c0, int NC, int C, __mmask16 last, const float *v,
                               int hd, int n, bool add)
{
    const float *pr[4];
#pragma GCC unroll 16
    for (int r = 0; r < NR; r++)
        pr[r] = p + (size_t)(r0 + r < rows ? r0 + r : rows - 1) * ldp;
    __mmask16 m[8];
#pragma GCC unroll 16
    for (int c = 0; c < NC; c++)
        m[c] = c0 + c == C - 1 ? last : (__mmask16)0xffff;
    __m512 acc[4][8];
#pragma GCC unroll 16
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 16
        for (int c = 0; c < NC; c++)
            acc[r][c] = _mm512_setzero_ps();
    const float *vj = v + 16 * c0;
    for (int j = 0; j < n; j++, vj += hd) {
        __m512 vv[8];
#pragma GCC unroll 16
        for (int c = 0; c < NC; c++)
            vv[c] = _mm512_maskz_loadu_ps(m[c], vj + 16 * c);
#pragma GCC unroll 16
        for (int r = 0; r < NR; r++) {
            const __m512 w = _mm512_set1_ps(pr[r][j]);
#pragma GCC unroll 16
            for (int c = 0; c < NC; c++)
                acc[r][c] = _mm512_fmadd_ps(w, vv[c], acc[r][c]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 16
        for (int c = 0; c < NC; c++) {
            if (r0 + r >= rows)
                break;
            float *o = out + (size_t)(r0 + r) * ldo + 16 * (c0 + c);
            __m512 a = acc[r][c];
            if (add)
                a = _mm512_add_ps(a, _mm512_maskz_loadu_ps(m[c], o));
            _mm512_mask_storeu_ps(o, m[c], a);
        }
}

/* One block of rows and chunks with its shape a constant: 4 rows by up to
 * 4 chunks, or 2 rows by 5 to 8 (at most 16 accumulators). */
static void values_span(float *out, size_t ldo, const float *p, size_t ldp, int rows, int r0,
                        int c0, int nc, int C, __mmask16 last, const float *v, int hd, int n,
                        bool add)
{
    switch (nc) {
#define VALUES_CASE(NR, NC)                                                                        \
    case NC:                                                                                       \
        values_block(out, ldo, p, ldp, rows, r0, NR, c0, NC, C, last, v, hd, n, add);              \
        return;
        VALUES_CASE(4, 1)
        VALUES_CASE(4, 2)
        VALUES_CASE(4, 3)
        VALUES_CASE(4, 4)
        VALUES_CASE(2, 5)
        VALUES_CASE(2, 6)
        VALUES_CASE(2, 7)
        VALUES_CASE(2, 8)
#undef VALUES_CASE
    }
}

void attn_values_avx512(float *out, size_t ldo, const float *p, size_t ldp, int rows, int head_dim,
                        const float *v, int n, bool add)
{
    const int C = (head_dim + 15) / 16;
    const __mmask16 last = lanes(head_dim - 16 * (C - 1));
    for (int c0 = 0; c0 < C; c0 += 8) {
        const int nc = C - c0 < 8 ? C - c0 : 8, nr = nc <= 4 ? 4 : 2;
        for (int r0 = 0; r0 < rows; r0 += nr)
            values_span(out, ldo, p, ldp, rows, r0, c0, nc, C, last, v, head_dim, n, add);
    }
}
#else
void attn_scores_avx512(float *s, size_t lds, const float *q, size_t ldq, int rows, int head_dim,
                        const float *k, const float *v, int n)
{
    (void)s, (void)lds, (void)q, (void)ldq, (void)rows, (void)head_dim, (void)k, (void)n;
}

void attn_values_avx512(float *out, size_t ldo, const float *p, size_t ldp, int rows, int head_dim,
                        const float *v, int n, bool add)
{
    (void)out, (void)ldo, (void)p, (void)ldp, (void)rows, (void)head_dim, (void)v, (void)n,
        (void)add;
}
#endif
