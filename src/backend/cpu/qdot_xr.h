/* Q8_0 and Q4_0 against x laid out once per input row, for `vnni-near`
 * (qdot_vnni_near.c): included by qdot_k512.h where its includer defines
 * QD_XR.
 *
 * `vnni`'s qd_q8_0 spent about 10 cycles a 34-byte block on an Intel Xeon
 * (KVM; AVX-512 on ports 0 and 5), most of it in VPSIGNB, the horizontal
 * sums and the scales' inserts. Here a run of 8 blocks is four 512-bit
 * products, blocks k and k + 4 in the halves of one vector: the weights as
 * unsigned bytes (Q8_0: plus 128, one XOR; Q4_0: its nibbles) against x by
 * VPDPBUSD, whose sum exceeds the exact one by 128 (Q8_0) or 8 (Q4_0) times
 * x's sum over the block, subtracted once the four vectors are reduced to
 * one lane a block. x's sums, its scales in f32 and its quants in the
 * vectors' order are laid out once per input row for all of a task's
 * weight rows (qd5_xr). With the weights in L2 (2026-12-05, that Xeon, one
 * thread): Q8_0 29 -> 41 GB/s, Q4_0 15 -> 21 GB/s. Each block's integer
 * sum is exact and the float steps are qdot.h's in its order, so the bits
 * are the scalar reference's. */

#include "backend/cpu/scratch.h"

/* x's Q8_0 blocks laid out for qd5_run_32, in the thread's scratch
 * (CPU_SCRATCH_Q_XR: 40 bytes a block) */
struct qd5_xr {
    int8_t *q; /* run g's quants: its pair k (k < 4) = blocks 8 g + k, 8 g + k + 4 */
    float *d;  /* each block's scale */
    int32_t *s; /* each block's sum of quants */
};

/* x's nb Q8_0 blocks into r (the quants of whole runs only) */
QD_INLINE void qd5_xr_fill(const struct qd5_xr *r, const char *x, int nb)
{
    const size_t xb = sizeof(struct quant_q8_0);
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int b = 0; b < nb; b++) {
        const __m256i q = qd_load(x + (size_t)b * xb + 2);
        /* sums of 8 of the quants plus 128, then the four added */
        const __m256i s8 = _mm256_sad_epu8(_mm256_xor_si256(q, flip), _mm256_setzero_si256());
        const __m128i s4 =
            _mm_add_epi64(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
        r->s[b] = _mm_cvtsi128_si32(s4) + _mm_extract_epi32(s4, 2) - 32 * 128;
        r->d[b] = qd_f16(x + (size_t)b * xb);
        const int g = b & ~7, k = b & 7;
        if (g + 8 <= nb)
            _mm256_store_si256((__m256i *)(r->q + (size_t)g * 32 + 64 * (k & 3) + 32 * (k >> 2)),
                               q);
    }
}

/* lane k = the sum of block k's 16 lanes, t[i] holding blocks i and i + 4 */
QD_INLINE __m256i qd5_hsum_pairs(const __m512i t[4])
{
    const __m512i v = qd5_sum4_lanes(t);
    const __m512i r = _mm512_add_epi32(_mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_castsi512_si256(r);
}

/* Blocks k and k + 4 of a run of Q8_0 weights as unsigned bytes, each plus 128 */
QD_INLINE __m512i qd5_wpair_q8_0(const char *w8, int k)
{
    const size_t wb = sizeof(struct quant_q8_0);
    const __m512i v = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(w8 + k * wb + 2))),
        _mm256_loadu_si256((const __m256i *)(w8 + (k + 4) * wb + 2)), 1);
    return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
}

/* Blocks k and k + 4 of a run of Q4_0 weights as their nibbles (0-15) in order */
QD_INLINE __m512i qd5_wpair_q4_0(const char *w8, int k)
{
    const size_t wb = sizeof(struct quant_q4_0);
    const long long f = 0x0004000400040004LL; /* words shifted by 4 */
    __m512i n = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(w8 + k * wb + 2)));
    n = _mm512_mask_broadcast_i32x4(n, 0xff00,
                                    _mm_loadu_si128((const __m128i *)(w8 + (k + 4) * wb + 2)));
    return _mm512_and_si512(_mm512_srlv_epi16(n, _mm512_set_epi64(f, f, 0, 0, f, f, 0, 0)),
                            _mm512_set1_epi8(15));
}

/* qdot.h's steps for the run of 8 blocks from block b of a Q8_0 (WB 34) or
 * Q4_0 (WB 18) row, w8 its first */
QD_INLINE __m256 qd5_run_32(__m256 acc, const char *w8, const struct qd5_xr *r, int b,
                            const size_t WB)
{
    const int8_t *xq = r->q + (size_t)b * 32;
    qd_prefetch(w8, 8 * WB);
    __m512i t[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        t[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                   WB == 34 ? qd5_wpair_q8_0(w8, k) : qd5_wpair_q4_0(w8, k),
                                   _mm512_load_si512(xq + 64 * k));
    const __m256i s = _mm256_loadu_si256((const __m256i *)(r->s + b));
    const __m256i bias = WB == 34 ? _mm256_slli_epi32(s, 7) : _mm256_slli_epi32(s, 3);
    const __m256i is = _mm256_sub_epi32(qd5_hsum_pairs(t), bias);
    const __m256 d = _mm256_mul_ps(qd_f16x8_span(w8, WB), _mm256_loadu_ps(r->d + b));
    return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(is), acc);
}

/* the last n < 8 blocks as qd_q8_0 / qd_q4_0 take them (x8 Q8_0 blocks) */
QD_INLINE __m256 qd5_tail_32(__m256 acc, const char *w8, const char *x8, int n, const size_t WB)
{
    __m256i v[8];
    float dw[8] = {0}, dx[8] = {0};
    for (int k = 0; k < 8; k++) {
        v[k] = k >= n       ? _mm256_setzero_si256()
               : WB == 34 ? qd_q8_0_blk(w8, x8, k)
                          : qd_q4_0_blk(w8, x8, k);
        if (k < n) {
            dw[k] = qd_f16(w8 + (size_t)k * WB);
            dx[k] = qd_f16(x8 + (size_t)k * sizeof(struct quant_q8_0));
        }
    }
    const __m256 d = _mm256_mul_ps(_mm256_loadu_ps(dw), _mm256_loadu_ps(dx));
    return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(qd_hsum8(v)), acc);
}

/* a row w of nb blocks (WB bytes each) times x (laid out in r) */
QD_INLINE float qd5_row_32(const char *w, const char *x, const struct qd5_xr *r, int nb,
                           const size_t WB)
{
    __m256 acc = _mm256_setzero_ps();
    int b = 0;
    for (; b + 8 <= nb; b += 8)
        acc = qd5_run_32(acc, w + (size_t)b * WB, r, b, WB);
    if (b < nb)
        acc = qd5_tail_32(acc, w + (size_t)b * WB, x + (size_t)b * sizeof(struct quant_q8_0),
                          nb - b, WB);
    return qd_sum8(acc);
}

/* one function per type (GCC unrolls a run's products only in a function
 * of its own) */
static __attribute__((noinline)) float qd5_q8_0_xr(const char *w, const char *x,
                                                   const struct qd5_xr *r, int nb)
{
    return qd5_row_32(w, x, r, nb, sizeof(struct quant_q8_0));
}

static __attribute__((noinline)) float qd5_q4_0_xr(const char *w, const char *x,
                                                   const struct qd5_xr *r, int nb)
{
    return qd5_row_32(w, x, r, nb, sizeof(struct quant_q4_0));
}

/* Rows [r0, r1) of a's Q8_0 or Q4_0 weights (nb blocks, w_ld bytes apart)
 * for every input row, each row's x laid out once (the task's weight rows,
 * about 128 KiB, stay in L2 from one input row to the next); false, with
 * nothing done, for the other types and where the scratch cannot grow (the
 * caller's code computes the same bits) */
QD_INLINE bool qd5_rows_xr(const struct qdot_args *a, int r0, int r1, int nb, size_t w_ld)
{
    const enum dtype t = a->w->dtype;
    if (t != DTYPE_Q8_0 && t != DTYPE_Q4_0)
        return false;
    /* whole runs of 8 blocks of quants (qd5_xr_fill rounds up), then d and s */
    const size_t qbytes = (size_t)(nb + 7) / 8 * 8 * 32;
    char *buf = cpu_scratch(CPU_SCRATCH_Q_XR, qbytes + (size_t)nb * 8);
    if (!buf)
        return false;
    const struct qd5_xr xr = {.q = (int8_t *)buf,
                              .d = (float *)(buf + qbytes),
                              .s = (int32_t *)(buf + qbytes + (size_t)nb * 4)};
    for (int i = 0; i < a->m; i++) {
        const char *x = a->xq + (size_t)i * a->xq_ld;
        float *y = a->y + (size_t)i * a->ldy;
        qd5_xr_fill(&xr, x, nb);
        const char *row = (const char *)a->w->data + (size_t)r0 * w_ld;
        for (int r = r0; r < r1; r++, row += w_ld)
            y[r] = t == DTYPE_Q8_0 ? qd5_q8_0_xr(row, x, &xr, nb) : qd5_q4_0_xr(row, x, &xr, nb);
    }
    return true;
}
