/* The types of 32 (Q8_0, Q4_0, Q5_0, Q5_1) against x laid out once per
 * input row, for `vnni-near` (qdot_vnni_near.c): included by qdot_k512.h
 * where its includer defines QD_XR.
 *
 * `vnni`'s qd_q8_0 spent about 10 cycles a 34-byte block on an Intel Xeon
 * (KVM; AVX-512 on ports 0 and 5), most of it in VPSIGNB, the horizontal
 * sums and the scales' inserts; its Q5_0 the same plus the fifth bits by
 * VPSHUFB and VPCMPEQB, its Q5_1 a horizontal sum per block and no
 * prefetch (0.14 of the read limit). Here a run of 8 blocks is four 512-bit
 * products, blocks k and k + 4 in the halves of one vector: the weights as
 * unsigned bytes (Q8_0: plus 128, one XOR; Q4_0: its nibbles; Q5_0/Q5_1:
 * the nibbles plus 16 where the block's 32 bits of qh, moved into a mask
 * register, have a bit: one masked VPADDB) against x by VPDPBUSD, whose sum
 * exceeds the exact one by 128 (Q8_0), 8 (Q4_0) or 16 (Q5_0) times x's sum
 * over the block, subtracted once the four vectors are reduced to one lane
 * a block (Q5_1's quants are unsigned as they are: x's sum is its min's
 * operand instead). x's sums, its scales in f32 and its quants in the
 * vectors' order are laid out once per input row (qd5_xr): by qlinear.c
 * once per call, else here once per task. A row's last run of fewer than 8 blocks (a row of
 * 896 columns is 3 runs and 4 blocks) is the same code with its loads
 * masked to the blocks there, x zero past them. With the weights in L2
 * (2026-12-05, that Xeon, one thread): Q8_0 29 -> 41 GB/s, Q4_0 15 -> 21
 * GB/s. Each block's integer sum is exact and the float steps are qdot.h's
 * in its order, so the bits are the scalar reference's. */

#include "backend/cpu/scratch.h"

/* x's Q8_0 blocks laid out for qd5_run, in the thread's scratch
 * (CPU_SCRATCH_Q_XR: 40 bytes a block, the row rounded up to whole runs) */
struct qd5_xr {
    int8_t *q;  /* run g's quants: its pair k (k < 4) = blocks 8 g + k, 8 g + k + 4 */
    float *d;   /* each block's scale */
    int32_t *s; /* each block's sum of quants */
};

/* The bytes of a row of nb blocks laid out (qdot_xr_row_bytes): whole runs
 * of 8 blocks, the quants (32 bytes a block), then d and s (4 each) */
QD_INLINE size_t qd5_xr_bytes(int nb)
{
    return (size_t)(nb + 7) / 8 * 8 * 40;
}

/* the layout of nb blocks at buf (64-byte aligned) */
QD_INLINE struct qd5_xr qd5_xr_at(char *buf, int nb)
{
    const size_t nr = (size_t)(nb + 7) / 8 * 8, qbytes = nr * 32;
    return (struct qd5_xr){
        .q = (int8_t *)buf, .d = (float *)(buf + qbytes), .s = (int32_t *)(buf + qbytes + nr * 4)};
}

/* x's nb Q8_0 blocks into r; the last run's blocks past nb zero */
QD_INLINE void qd5_xr_fill(const struct qd5_xr *r, const char *x, int nb)
{
    const size_t xb = sizeof(struct quant_q8_0);
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    const int nr = (nb + 7) & ~7;
    if (nr > nb) {
        memset(r->q + (size_t)(nb & ~7) * 32, 0, 8 * 32);
        memset(r->d + nb, 0, (size_t)(nr - nb) * sizeof(float));
        memset(r->s + nb, 0, (size_t)(nr - nb) * sizeof(int32_t));
    }
    for (int b = 0; b < nb; b++) {
        const __m256i q = qd_load(x + (size_t)b * xb + 2);
        /* sums of 8 of the quants plus 128, then the four added */
        const __m256i s8 = _mm256_sad_epu8(_mm256_xor_si256(q, flip), _mm256_setzero_si256());
        const __m128i s4 =
            _mm_add_epi64(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
        r->s[b] = _mm_cvtsi128_si32(s4) + _mm_extract_epi32(s4, 2) - 32 * 128;
        r->d[b] = qd_f16(x + (size_t)b * xb);
        const int g = b & ~7, k = b & 7;
        _mm256_store_si256((__m256i *)(r->q + (size_t)g * 32 + 64 * (k & 3) + 32 * (k >> 2)), q);
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

/* A weight block's bytes for T, and where its quants and fifth bits start */
QD_INLINE size_t qd5_wb(const enum dtype T)
{
    return T == DTYPE_Q8_0   ? sizeof(struct quant_q8_0)
           : T == DTYPE_Q4_0 ? sizeof(struct quant_q4_0)
           : T == DTYPE_Q5_0 ? sizeof(struct quant_q5_0)
                             : sizeof(struct quant_q5_1);
}

QD_INLINE size_t qd5_qs_at(const enum dtype T)
{
    return T == DTYPE_Q5_0 ? 6 : T == DTYPE_Q5_1 ? 8 : 2;
}

/* The 16 bytes at p, zeros where !have (nothing read then); FULL: have is
 * true, a plain load */
QD_INLINE __m128i qd5_load16(const char *p, bool have, const bool full)
{
    return full ? _mm_loadu_si128((const __m128i *)p) : _mm_maskz_loadu_epi8(have ? 0xffff : 0, p);
}

QD_INLINE __m256i qd5_load32(const char *p, bool have, const bool full)
{
    return full ? _mm256_loadu_si256((const __m256i *)p)
                : _mm256_maskz_loadu_epi8(have ? 0xffffffffu : 0, p);
}

QD_INLINE uint32_t qd5_u32(const char *p, bool have)
{
    uint32_t v = 0;
    if (have)
        memcpy(&v, p, 4);
    return v;
}

/* Blocks k and k + 4 of a run of T weights (n of its blocks there) as
 * unsigned bytes: Q8_0 plus 128, the others' quants as stored (Q4_0 0-15,
 * Q5_0/Q5_1 0-31), quants 0-31 of each in order */
QD_INLINE __m512i qd5_wpair(const char *w8, int k, const enum dtype T, const int n)
{
    const size_t wb = qd5_wb(T), qs = qd5_qs_at(T);
    const bool full = n == 8, h0 = k < n, h1 = k + 4 < n;
    const char *b0 = w8 + (size_t)k * wb, *b1 = w8 + (size_t)(k + 4) * wb;
    if (T == DTYPE_Q8_0) {
        const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(qd5_load32(b0 + qs, h0, full)),
                                             qd5_load32(b1 + qs, h1, full), 1);
        return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
    }
    /* each block's 16 packed bytes in two 128-bit lanes, shifted by 0 and 4 */
    const long long f = 0x0004000400040004LL; /* words shifted by 4 */
    __m512i v = _mm512_broadcast_i32x4(qd5_load16(b0 + qs, h0, full));
    v = _mm512_mask_broadcast_i32x4(v, 0xff00, qd5_load16(b1 + qs, h1, full));
    __m512i q = _mm512_and_si512(_mm512_srlv_epi16(v, _mm512_set_epi64(f, f, 0, 0, f, f, 0, 0)),
                                 _mm512_set1_epi8(15));
    if (T == DTYPE_Q5_0 || T == DTYPE_Q5_1) {
        /* byte j of the vector is quant j % 32 of its block, whose fifth
         * bit is bit j % 32 of the block's qh */
        const uint64_t h = (uint64_t)qd5_u32(b1 + qs - 4, h1) << 32 | qd5_u32(b0 + qs - 4, h0);
        q = _mm512_mask_add_epi8(q, _cvtu64_mask64(h), q, _mm512_set1_epi8(16));
    }
    return q;
}

/* The f16 at p + k stride in lanes k < 8 and, TWO, at p + k stride + 2 in
 * lanes 8 + k; lanes of blocks k >= n zero. Masked loads of the words up
 * to the last one used (nothing past it is read), gathered by VPERMT2W:
 * a few instructions where inserts took 16. */
QD_INLINE __m512 qd5_f16x16(const char *p, const size_t stride, const int n, const bool two)
{
    const int st = (int)stride / 2, words = (n - 1) * st + (two ? 2 : 1);
    __m512i z[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const int c = words - 32 * j < 0 ? 0 : words - 32 * j > 32 ? 32 : words - 32 * j;
        z[j] = c == 0    ? _mm512_setzero_si512()
               : c == 32 ? _mm512_loadu_si512(p + 64 * j)
                         : _mm512_maskz_loadu_epi16((1u << c) - 1u, p + 64 * j);
    }
    /* word k st (lanes 8 + k: k st + 1), lanes of missing blocks zero */
    const __m256i k8 = _mm256_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i one = _mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i idx = _mm512_zextsi256_si512(
        _mm256_add_epi16(_mm256_mullo_epi16(k8, _mm256_set1_epi16((short)st)), one));
    const __mmask32 have = (__mmask32)(((1u << n) - 1u) * 0x101u);
    /* words 0-63 from z0:z1, 64-127 from z2:z3 (the index's bit 6 dropped) */
    __m512i d = _mm512_maskz_permutex2var_epi16(have, z[0], idx, z[1]);
    if (words > 64) {
        const __m512i hi = _mm512_maskz_permutex2var_epi16(have, z[2], idx, z[3]);
        d = _mm512_mask_blend_epi16(_mm512_cmpge_epi16_mask(idx, _mm512_set1_epi16(64)), d, hi);
    }
    return two ? _mm512_cvtph_ps(_mm512_castsi512_si256(d))
               : _mm512_castps256_ps512(_mm256_cvtph_ps(_mm512_castsi512_si128(d)));
}

/* qdot.h's steps for the run of 8 blocks from block b of a T row (n of
 * them there, the rest of the lanes adding 0 x 0), w8 its first */
QD_INLINE __m256 qd5_run(__m256 acc, const char *w8, const struct qd5_xr *r, int b,
                         const enum dtype T, const int n)
{
    const size_t wb = qd5_wb(T);
    const int8_t *xq = r->q + (size_t)b * 32;
#ifdef QD_PREFETCH_Q5
    /* the includer's distances for Q5_0/Q5_1, whose runs take the most
     * instructions of the four (qdot_vnni_near.c) */
    if (T == DTYPE_Q5_0 || T == DTYPE_Q5_1)
        qd_prefetch_at(w8, (size_t)n * wb, QD_PREFETCH_Q5, 0);
    else
#endif
        qd_prefetch(w8, (size_t)n * wb);
    __m512i t[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        t[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qd5_wpair(w8, k, T, n),
                                   _mm512_load_si512(xq + 64 * k));
    const __m256i s = _mm256_loadu_si256((const __m256i *)(r->s + b));
    __m256i is = qd5_hsum_pairs(t);
    if (T != DTYPE_Q5_1) /* the bias of the unsigned weights */
        is = _mm256_sub_epi32(is, _mm256_slli_epi32(s, T == DTYPE_Q8_0   ? 7
                                                       : T == DTYPE_Q4_0 ? 3
                                                                         : 4));
    const __m256 dx = _mm256_loadu_ps(r->d + b);
    const __m512 dm = qd5_f16x16(w8, wb, n, T == DTYPE_Q5_1);
    acc =
        _mm256_fmadd_ps(_mm256_mul_ps(_mm512_castps512_ps256(dm), dx), _mm256_cvtepi32_ps(is), acc);
    if (T == DTYPE_Q5_1) {
        /* qdot.h's -(dmin dx) with dmin = -m: m dx exactly (negation is
         * exact and rounding symmetric) */
        const __m256 m = _mm512_extractf32x8_ps(dm, 1);
        acc = _mm256_fmadd_ps(_mm256_mul_ps(m, dx), _mm256_cvtepi32_ps(s), acc);
    }
    return acc;
}

/* a row w of nb T blocks times x (laid out in r) */
QD_INLINE float qd5_row(const char *w, const struct qd5_xr *r, int nb, const enum dtype T)
{
    const size_t wb = qd5_wb(T);
    __m256 acc = _mm256_setzero_ps();
    int b = 0;
    for (; b + 8 <= nb; b += 8)
        acc = qd5_run(acc, w + (size_t)b * wb, r, b, T, 8);
    switch (nb - b) { /* n a constant in each, so each folds its masks */
    case 1:
        acc = qd5_run(acc, w + (size_t)b * wb, r, b, T, 1);
        break;
    case 2:
        acc = qd5_run(acc, w + (size_t)b * wb, r, b, T, 2);
        break;
    case 3:
        acc = qd5_run(acc, w + (size_t)b * wb, r, b, T, 3);
        break;
    case 4:
        acc = qd5_run(acc, w + (size_t)b * wb, r, b, T, 4);
        break;
    case 5:
        acc = qd5_run(acc, w + (size_t)b * wb, r, b, T, 5);
        break;
    case 6:
        acc = qd5_run(acc, w + (size_t)b * wb, r, b, T, 6);
        break;
    case 7:
        acc = qd5_run(acc, w + (size_t)b * wb, r, b, T, 7);
        break;
    default:
        break;
    }
    return qd_sum8(acc);
}

/* one function per type (GCC unrolls a run's products only in a function
 * of its own; unused where the includer defines no rows function) */
static __attribute__((noinline, unused)) float qd5_q8_0_xr(const char *w, const struct qd5_xr *r,
                                                           int nb)
{
    return qd5_row(w, r, nb, DTYPE_Q8_0);
}

static __attribute__((noinline, unused)) float qd5_q4_0_xr(const char *w, const struct qd5_xr *r,
                                                           int nb)
{
    return qd5_row(w, r, nb, DTYPE_Q4_0);
}

static __attribute__((noinline, unused)) float qd5_q5_0_xr(const char *w, const struct qd5_xr *r,
                                                           int nb)
{
    return qd5_row(w, r, nb, DTYPE_Q5_0);
}

static __attribute__((noinline, unused)) float qd5_q5_1_xr(const char *w, const struct qd5_xr *r,
                                                           int nb)
{
    return qd5_row(w, r, nb, DTYPE_Q5_1);
}

/* Rows [r0, r1) of a's weights of a type of 32 (nb blocks, w_ld bytes
 * apart) for every input row, against each row's x laid out: once per
 * call by qlinear.c (a->xp, qdot_pack_x_xr: a task of 16 rows of 8192
 * columns had spent 14-20% of its CPU time laying out x again, weights in
 * L2), or, where a->xp is NULL (a kernel calling this one for the
 * types it does not take), once per task here (the task's weight rows,
 * about 128 KiB, stay in L2 from one input row to the next); false, with
 * nothing done, for the K-quants and where the scratch cannot grow (the
 * caller's code computes the same bits) */
QD_INLINE bool qd5_rows_xr(const struct qdot_args *a, int r0, int r1, int nb, size_t w_ld)
{
    const enum dtype t = a->w->dtype;
    float (*dot)(const char *, const struct qd5_xr *, int);
    switch (t) {
    case DTYPE_Q8_0:
        dot = qd5_q8_0_xr;
        break;
    case DTYPE_Q4_0:
        dot = qd5_q4_0_xr;
        break;
    case DTYPE_Q5_0:
        dot = qd5_q5_0_xr;
        break;
    case DTYPE_Q5_1:
        dot = qd5_q5_1_xr;
        break;
    default:
        return false;
    }
    /* x laid out once per call by the caller (qdot_pack_x_xr, a->xp), or
     * here per task into the thread's scratch */
    char *buf = a->xp ? NULL : cpu_scratch(CPU_SCRATCH_Q_XR, qd5_xr_bytes(nb));
    if (!a->xp && !buf)
        return false;
    for (int i = 0; i < a->m; i++) {
        float *y = a->y + (size_t)i * a->ldy;
        const struct qd5_xr xr = qd5_xr_at(a->xp ? (char *)a->xp + (size_t)i * a->xp_ld : buf, nb);
        if (!a->xp)
            qd5_xr_fill(&xr, a->xq + (size_t)i * a->xq_ld, nb);
        const char *row = (const char *)a->w->data + (size_t)r0 * w_ld;
        for (int r = r0; r < r1; r++, row += w_ld)
            y[r] = dot(row, &xr, nb);
    }
    return true;
}
