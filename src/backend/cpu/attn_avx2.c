/* attn_vec.h's two products in AVX2 + FMA, eight lanes, for CPUs without
 * AVX-512 (AMD EPYC Zen 2): this file alone is compiled with those sets
 * (CMakeLists.txt), and runs only where attn_vec.c found them. The same
 * loops as attn_avx512.c's on half the width: a row of head_dim floats is
 * C = head_dim / 8 vectors rounded up, the last one masked; keys in blocks
 * of 8; each row's sums independent of the rows beside it. On Zen 2 a
 * qwen2.5-0.5b decode step's attention had gone to OpenBLAS's sgemm (7
 * query heads x 145 keys x 64), 0.67 ms a step of 24 layers. */
#include "backend/cpu/attn_vec.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define FORCE_INLINE static inline __attribute__((always_inline))

/* attn_avx512.c's distance in bytes: 2 blocks of 16 keys */
#define ATTN_PF_BLOCKS 4

/* lanes [0, n) of 8 all ones */
static inline __m256i lanes(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The lane sums of v[0..7], v[i]'s in lane i: pairs, then quadruples
 * within each 128-bit lane (VHADDPS), then the two 128-bit lanes. */
FORCE_INLINE __m256 sum8(const __m256 *v)
{
    const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

/* chunk c of a row at p: whole, or the last one masked */
FORCE_INLINE __m256 chunk(const float *p, int c, int C, __m256i last)
{
    return c == C - 1 ? _mm256_maskload_ps(p + 8 * c, last) : _mm256_loadu_ps(p + 8 * c);
}

/* Scores of blocks of 8 keys (read from memory once, then from L1 for
 * every row): per row and key one vector of partial products over the C
 * chunks, the block's 8 summed together by sum8. */
FORCE_INLINE void scores_c(float *s, size_t lds, const float *q, size_t ldq, int rows, int C,
                           __m256i last, const float *k, const float *v, int hd, int n)
{
    const size_t block = (size_t)8 * hd * sizeof(float), end = (size_t)n * hd * sizeof(float);
    for (size_t b = 0; b < ATTN_PF_BLOCKS * block && b < end; b += 64)
        _mm_prefetch((const char *)k + b, _MM_HINT_T0);
    for (int j0 = 0; j0 < n; j0 += 8) {
        const int nk = n - j0 < 8 ? n - j0 : 8;
        const float *kb = k + (size_t)j0 * hd;
        /* the keys ATTN_PF_BLOCKS blocks ahead into L1, this block's values into L2 */
        const size_t at = (size_t)j0 * hd * sizeof(float), ahead = at + ATTN_PF_BLOCKS * block;
        for (size_t b = 0; b < block && ahead + b < end; b += 64)
            _mm_prefetch((const char *)k + ahead + b, _MM_HINT_T0);
        for (size_t b = 0; v && b < block && at + b < end; b += 64)
            _mm_prefetch((const char *)v + at + b, _MM_HINT_T1);
        for (int r = 0; r < rows; r++) {
            const float *qr = q + (size_t)r * ldq;
            __m256 acc[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                __m256 a = _mm256_setzero_ps();
                if (i < nk)
#pragma GCC unroll 32
                    for (int c = 0; c < C; c++)
                        a = _mm256_fmadd_ps(chunk(qr, c, C, last),
                                            chunk(kb + (size_t)i * hd, c, C, last), a);
                acc[i] = a;
            }
            _mm256_maskstore_ps(s + (size_t)r * lds + j0, lanes(nk), sum8(acc));
        }
    }
}

void attn_scores_avx2(float *s, size_t lds, const float *q, size_t ldq, int rows, int head_dim,
                      const float *k, const float *v, int n)
{
    const int C = (head_dim + 7) / 8;
    const __m256i last = lanes(head_dim - 8 * (C - 1));
    switch (C) { /* the usual head widths with their chunks unrolled */
    case 8:
        scores_c(s, lds, q, ldq, rows, 8, last, k, v, head_dim, n);
        return;
    case 16:
        scores_c(s, lds, q, ldq, rows, 16, last, k, v, head_dim, n);
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
                               int NR, int c0, int NC, int C, __m256i last, const float *v, int hd,
                               int n, bool add)
{
    const float *pr[4];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
        pr[r] = p + (size_t)(r0 + r < rows ? r0 + r : rows - 1) * ldp;
    __m256 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++)
            acc[r][c] = _mm256_setzero_ps();
    const float *vj = v;
    for (int j = 0; j < n; j++, vj += hd) {
        __m256 vv[4];
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++)
            vv[c] = chunk(vj, c0 + c, C, last);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const __m256 w = _mm256_broadcast_ss(&pr[r][j]);
#pragma GCC unroll 4
            for (int c = 0; c < NC; c++)
                acc[r][c] = _mm256_fmadd_ps(w, vv[c], acc[r][c]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) {
            if (r0 + r >= rows)
                break;
            float *o = out + (size_t)(r0 + r) * ldo;
            __m256 a = acc[r][c];
            if (add)
                a = _mm256_add_ps(a, chunk(o, c0 + c, C, last));
            if (c0 + c == C - 1)
                _mm256_maskstore_ps(o + 8 * (c0 + c), last, a);
            else
                _mm256_storeu_ps(o + 8 * (c0 + c), a);
        }
}

/* One block of rows and chunks with its shape a constant: 4 rows by 1 or
 * 2 chunks, or 2 rows by 3 or 4 (at most 8 accumulators beside the value
 * row's chunks). */
static void values_span(float *out, size_t ldo, const float *p, size_t ldp, int rows, int r0,
                        int c0, int nc, int C, __m256i last, const float *v, int hd, int n,
                        bool add)
{
    switch (nc) {
#define VALUES_CASE(NR, NC)                                                                        \
    case NC:                                                                                       \
        values_block(out, ldo, p, ldp, rows, r0, NR, c0, NC, C, last, v, hd, n, add);              \
        return;
        VALUES_CASE(4, 1)
        VALUES_CASE(4, 2)
        VALUES_CASE(2, 3)
        VALUES_CASE(2, 4)
#undef VALUES_CASE
    }
}

void attn_values_avx2(float *out, size_t ldo, const float *p, size_t ldp, int rows, int head_dim,
                      const float *v, int n, bool add)
{
    const int C = (head_dim + 7) / 8;
    const __m256i last = lanes(head_dim - 8 * (C - 1));
    for (int c0 = 0; c0 < C; c0 += 4) {
        const int nc = C - c0 < 4 ? C - c0 : 4, nr = nc <= 2 ? 4 : 2;
        for (int r0 = 0; r0 < rows; r0 += nr)
            values_span(out, ldo, p, ldp, rows, r0, c0, nc, C, last, v, head_dim, n, add);
    }
}
#else
void attn_scores_avx2(float *s, size_t lds, const float *q, size_t ldq, int rows, int head_dim,
                      const float *k, const float *v, int n)
{
    (void)s, (void)lds, (void)q, (void)ldq, (void)rows, (void)head_dim, (void)k, (void)v, (void)n;
}

void attn_values_avx2(float *out, size_t ldo, const float *p, size_t ldp, int rows, int head_dim,
                      const float *v, int n, bool add)
{
    (void)out, (void)ldo, (void)p, (void)ldp, (void)rows, (void)head_dim, (void)v, (void)n,
        (void)add;
}
#endif
