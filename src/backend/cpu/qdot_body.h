/* The quantized dot products written once for the 256-bit integer kernels:
 * included by qdot_avx2.c and qdot_vnni.c after they define
 *
 *   QD_DOT(u, s)            __m256i of 8 int32: lane i = the sum of the
 *                           products of bytes 4i .. 4i + 3 of u (unsigned)
 *                           and s (signed), exactly (no lane saturates for
 *                           the operands below: |u| <= 128 with |s| <= 127,
 *                           or u <= 63)
 *   QDOT_ROWS_FN            the name of the qdot_rows_fn to define (or,
 *                           with QDOT_PIECES_FN, none)
 *   QD_K512                 (optional) the K-quants on 512-bit vectors
 *                           instead (qdot_k512.h: AVX-512 BW and VNNI)
 *   QD_XR                   (optional) the types of 32 (Q8_0, Q4_0,
 *                           Q5_0, Q5_1) against x laid out (qd_xr):
 *                           with QD_K512 on 512-bit vectors (qdot_xr.h),
 *                           else on 256-bit ones (qd2_run)
 *   QD_PREFETCH             (optional) the software prefetch's distance
 *   QD_PREFETCH_FAR         (optional) a second prefetch's distance, to L2
 *   QD_PREFETCH_Q5          (optional, with QD_XR) Q5_0/Q5_1's own L1
 *                           distance, with no L2 prefetch
 *   QDOT_PIECES_FN          (optional, with QD_XR) the name of a
 *                           qdot_pieces_fn to define: the same kernels
 *                           over far-apart streams of rows (qdot_far.h)
 *
 * Each block's integer sums are exact and combined as qdot.h says, so the
 * result is the scalar reference's (qdot_scalar.c) bit for bit. */
#include "backend/cpu/qdot.h"

#include <immintrin.h>
#include <string.h>

#define QD_INLINE static inline __attribute__((always_inline))

QD_INLINE __m256i qd_load(const void *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

QD_INLINE int32_t qd_hsum(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

QD_INLINE uint16_t qd_u16(const char *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

QD_INLINE float qd_f16(const char *p)
{
    return _cvtsh_ss(qd_u16(p)); /* exact, as f16_to_f32 */
}

/* Quants 64 j .. 64 j + 63 of a Q4_K/Q5_K block from its 32 packed bytes v
 * (quants 64 j + i in the low nibble of byte i, 64 j + 32 + i in the high)
 * and, for Q5_K, the fifth bits qh (bits 2 j and 2 j + 1 of byte i): q0
 * and q1, one quant a byte. */
QD_INLINE void qd_unpack_45k(__m256i v, __m256i qh, int j, bool five, __m256i *q0, __m256i *q1)
{
    const __m256i lo4 = _mm256_set1_epi8(15), sixteen = _mm256_set1_epi8(16);
    *q0 = _mm256_and_si256(v, lo4);
    *q1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
    if (five) {
        const __m256i b0 = _mm256_set1_epi8((char)(1u << (2 * j)));
        const __m256i b1 = _mm256_set1_epi8((char)(1u << (2 * j + 1)));
        *q0 = _mm256_or_si256(
            *q0, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b0), b0), sixteen));
        *q1 = _mm256_or_si256(
            *q1, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b1), b1), sixteen));
    }
}

/* The first n (a constant, 1-8) of 8 f16 scales `stride` bytes apart,
 * the lanes past them zero (inserted into a register: a store to the
 * stack and a wide load back stalled on store forwarding; each insert's
 * lane a constant, as the instruction needs) */
QD_INLINE __m256 qd_f16xn(const char *p, size_t stride, const int n)
{
    __m128i h = _mm_cvtsi32_si128(qd_u16(p));
    h = n > 1 ? _mm_insert_epi16(h, qd_u16(p + stride), 1) : h;
    h = n > 2 ? _mm_insert_epi16(h, qd_u16(p + 2 * stride), 2) : h;
    h = n > 3 ? _mm_insert_epi16(h, qd_u16(p + 3 * stride), 3) : h;
    h = n > 4 ? _mm_insert_epi16(h, qd_u16(p + 4 * stride), 4) : h;
    h = n > 5 ? _mm_insert_epi16(h, qd_u16(p + 5 * stride), 5) : h;
    h = n > 6 ? _mm_insert_epi16(h, qd_u16(p + 6 * stride), 6) : h;
    h = n > 7 ? _mm_insert_epi16(h, qd_u16(p + 7 * stride), 7) : h;
    return _mm256_cvtph_ps(h);
}

/* 8 f16 scales `stride` bytes apart */
QD_INLINE __m256 qd_f16x8(const char *p, size_t stride)
{
    return qd_f16xn(p, stride, 8);
}

/* The types of 32 (Q8_0, Q4_0, Q5_0, Q5_1) against x laid out once per
 * input row (where the includer defines QD_XR): x's quants 32-byte
 * aligned in runs of 8 blocks, its scales in f32 and the sums of its
 * quants, so that a weight row's run reads them with no conversion or
 * gather. The 512-bit kernels read blocks k and k + 4 of a run as one
 * vector (qdot_xr.h); the 256-bit ones block by block (qd_xr_q). */
#include "backend/cpu/scratch.h"

/* x's Q8_0 blocks laid out for the runs, in the thread's scratch
 * (CPU_SCRATCH_Q_XR: 40 bytes a block, the row rounded up to whole runs) */
struct qd_xr {
    int8_t *q;  /* run g's quants: its pair k (k < 4) = blocks 8 g + k, 8 g + k + 4 */
    float *d;   /* each block's scale */
    int32_t *s; /* each block's sum of quants */
};

/* block k (< 8) of the run from block b's quants */
QD_INLINE int8_t *qd_xr_q(const struct qd_xr *r, int b, int k)
{
    return r->q + (size_t)b * 32 + 64 * (k & 3) + 32 * (k >> 2);
}

/* The bytes of a row of nb blocks laid out (qdot_xr_row_bytes): whole runs
 * of 8 blocks, the quants (32 bytes a block), then d and s (4 each) */
QD_INLINE size_t qd_xr_bytes(int nb)
{
    return (size_t)(nb + 7) / 8 * 8 * 40;
}

/* the layout of nb blocks at buf (64-byte aligned) */
QD_INLINE struct qd_xr qd_xr_at(char *buf, int nb)
{
    const size_t nr = (size_t)(nb + 7) / 8 * 8, qbytes = nr * 32;
    return (struct qd_xr){
        .q = (int8_t *)buf, .d = (float *)(buf + qbytes), .s = (int32_t *)(buf + qbytes + nr * 4)};
}

/* x's nb Q8_0 blocks into r; the last run's blocks past nb zero */
QD_INLINE void qd_xr_fill(const struct qd_xr *r, const char *x, int nb)
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
        _mm256_store_si256((__m256i *)qd_xr_q(r, b & ~7, b & 7), q);
    }
}

/* A weight block's bytes for T, and where its quants and fifth bits start */
QD_INLINE size_t qd_xr_wb(const enum dtype T)
{
    return T == DTYPE_Q8_0   ? sizeof(struct quant_q8_0)
           : T == DTYPE_Q4_0 ? sizeof(struct quant_q4_0)
           : T == DTYPE_Q5_0 ? sizeof(struct quant_q5_0)
                             : sizeof(struct quant_q5_1);
}

QD_INLINE size_t qd_xr_qs_at(const enum dtype T)
{
    return T == DTYPE_Q5_0 ? 6 : T == DTYPE_Q5_1 ? 8 : 2;
}

#ifdef QD_K512
/* qd_f16x8's 8 f16 for an even stride of at most 36 bytes from the 8
 * strides' bytes (masked loads: nothing past them is read) by VPERMT2W, a
 * few instructions where the inserts took 16 */
QD_INLINE __m256 qd_f16x8_span(const char *p, size_t stride)
{
    const int words = 4 * (int)stride; /* in the 8 strides */
    __m512i z[4];
    for (int j = 0; j < 4; j++) {
        const int n = words - 32 * j < 0 ? 0 : words - 32 * j > 32 ? 32 : words - 32 * j;
        z[j] = _mm512_maskz_loadu_epi16(n == 32 ? 0xffffffffu : (1u << n) - 1u, p + 64 * j);
    }
    const int st = (int)stride / 2;
    const __m512i idx = _mm512_zextsi128_si512(
        _mm_setr_epi16(0, (short)st, (short)(2 * st), (short)(3 * st), (short)(4 * st),
                       (short)(5 * st), (short)(6 * st), (short)(7 * st)));
    /* words 0-63 from z0:z1, 64-127 from z2:z3 (the index's bit 6 dropped) */
    const __m512i lo = _mm512_permutex2var_epi16(z[0], idx, z[1]);
    const __m512i hi = _mm512_permutex2var_epi16(z[2], idx, z[3]);
    const __mmask32 high = _mm512_cmpge_epi16_mask(idx, _mm512_set1_epi16(64));
    const __m512i d = _mm512_mask_blend_epi16(high, lo, hi);
    return _mm256_cvtph_ps(_mm512_castsi512_si128(d));
}
#define QD_F16X8_SPAN qd_f16x8_span
#else
#define QD_F16X8_SPAN qd_f16x8
#endif

/* lane k = the sum of v[k]'s lanes: the integer sums of 8 blocks */
QD_INLINE __m256i qd_hsum8(const __m256i v[8])
{
    __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                            _mm256_permute2x128_si256(a, b, 0x31));
}

/* qdot_sum8 of the partials in p's lanes, in its order */
QD_INLINE float qd_sum8(__m256 p)
{
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(p), _mm256_extractf128_ps(p, 1));
    __m128 r = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(r, _mm_shuffle_ps(r, r, 1)));
}

/* signed w times signed x: |w| against x with w's sign */
QD_INLINE __m256i qd_dot_signed(__m256i w, __m256i x)
{
    return QD_DOT(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}

/* Block b's weights of a Q8_0 or Q4_0 row as 32 signed bytes */
QD_INLINE __m256i qd_w_q8_0(const char *w)
{
    return qd_load(w + 2);
}

QD_INLINE __m256i qd_w_q4_0(const char *w)
{
    const __m128i lo4 = _mm_set1_epi8(15);
    __m128i q = _mm_loadu_si128((const __m128i *)(w + 2));
    __m256i wq = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), lo4), _mm_and_si128(q, lo4));
    return _mm256_sub_epi8(wq, _mm256_set1_epi8(8));
}

/* Weight bytes prefetched ahead of the ones being read: a row of 2048
 * columns is 1-2 KiB, so about 4-8 rows ahead. On the Zen 5 here, one
 * thread streaming 8192 x 2048 weights from memory (CPU time, against a
 * plain read): Q8_0 0.75 -> 0.88 of the read against none, Q6_K 0.73 ->
 * 0.90 against 2048 bytes ahead; with the weights in L2, 5% slower. An
 * includer may set another (qdot_vnni_near.c: 2 KiB, for an Intel Xeon). */
#ifndef QD_PREFETCH
#define QD_PREFETCH 8192
#endif
#ifndef QD_PREFETCH_FAR
#define QD_PREFETCH_FAR 0
#endif
/* The n bytes at p + near toward L1 and, where far > 0, those at p + far
 * toward L2 only: a line every 64 bytes, so that calls for consecutive spans
 * miss no line (the gaps between the addresses are at most 64 bytes) */
QD_INLINE void qd_prefetch_at(const char *p, size_t n, size_t near, size_t far)
{
    for (size_t i = 0; near > 0 && i < n; i += 64) {
        _mm_prefetch(p + near + i, _MM_HINT_T0);
        if (far > 0)
            _mm_prefetch(p + far + i, _MM_HINT_T1);
    }
}

/* qd_prefetch_at with the includer's distances */
QD_INLINE void qd_prefetch(const char *p, size_t n)
{
    qd_prefetch_at(p, n, QD_PREFETCH, QD_PREFETCH_FAR);
}

/* Q8_0 / Q4_0 (WB bytes a block) against Q8_0 x: 8 blocks a step, their
 * integer sums reduced together and scaled in the partials' lanes; the
 * last step's missing blocks are zeros (a partial plus 0 * 0 is itself) */
#define QD_DOT_32(name, WB, unpack)                                                                \
    QD_INLINE __m256i name##_blk(const char *w, const char *x, int k)                              \
    {                                                                                              \
        return qd_dot_signed(unpack(w + (size_t)k * (WB)), qd_load(x + (size_t)k * 34 + 2));       \
    }                                                                                              \
    QD_INLINE float name(const char *w, const char *x, int nb)                                     \
    {                                                                                              \
        __m256 acc = _mm256_setzero_ps();                                                          \
        int b = 0;                                                                                 \
        for (; b + 8 <= nb; b += 8) {                                                              \
            const char *wb = w + (size_t)b * (WB), *xb = x + (size_t)b * 34;                       \
            qd_prefetch(wb, 8 * (WB));                                                             \
            const __m256i v[8] = {name##_blk(wb, xb, 0), name##_blk(wb, xb, 1),                    \
                                  name##_blk(wb, xb, 2), name##_blk(wb, xb, 3),                    \
                                  name##_blk(wb, xb, 4), name##_blk(wb, xb, 5),                    \
                                  name##_blk(wb, xb, 6), name##_blk(wb, xb, 7)};                   \
            __m256 d = _mm256_mul_ps(QD_F16X8_SPAN(wb, (WB)), QD_F16X8_SPAN(xb, 34));              \
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(qd_hsum8(v)), acc);                        \
        }                                                                                          \
        if (b < nb) {                                                                              \
            const int n = nb - b;                                                                  \
            const char *wb = w + (size_t)b * (WB), *xb = x + (size_t)b * 34;                       \
            __m256i v[8];                                                                          \
            float dw[8] = {0}, dx[8] = {0};                                                        \
            for (int k = 0; k < 8; k++) {                                                          \
                v[k] = k < n ? name##_blk(wb, xb, k) : _mm256_setzero_si256();                     \
                if (k < n) {                                                                       \
                    dw[k] = qd_f16(wb + (size_t)k * (WB));                                         \
                    dx[k] = qd_f16(xb + (size_t)k * 34);                                           \
                }                                                                                  \
            }                                                                                      \
            __m256 d = _mm256_mul_ps(_mm256_loadu_ps(dw), _mm256_loadu_ps(dx));                    \
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(qd_hsum8(v)), acc);                        \
        }                                                                                          \
        return qd_sum8(acc);                                                                       \
    }

/* byte j all ones where bit j of the 32 bits at p is set */
QD_INLINE __m256i qd_bits32(const char *p)
{
    uint32_t h;
    memcpy(&h, p, 4);
    const __m256i which = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                           2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), which);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* Q5_0 / Q5_1's 5-bit quants, unsigned (0-31) */
QD_INLINE __m256i qd_w_q5(const char *qh, const char *qs)
{
    const __m128i lo4 = _mm_set1_epi8(15);
    __m128i q = _mm_loadu_si128((const __m128i *)qs);
    __m256i wq = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), lo4), _mm_and_si128(q, lo4));
    return _mm256_or_si256(wq, _mm256_and_si256(qd_bits32(qh), _mm256_set1_epi8(16)));
}

QD_INLINE __m256i qd_w_q5_0(const char *w)
{
    return _mm256_sub_epi8(qd_w_q5(w + 2, w + 6), _mm256_set1_epi8(16));
}

QD_DOT_32(qd_q8_0, 34, qd_w_q8_0)
QD_DOT_32(qd_q5_0, 22, qd_w_q5_0)
QD_DOT_32(qd_q4_0, 18, qd_w_q4_0)

/* Q5_1's partials (as a K-quant's): each block's sums and scales kept per
 * lane, 8 blocks added at once */
struct qd_lanes {
    int32_t is[8], ms[8];
    float d[8], dmin[8], dx[8];
};

QD_INLINE __m256 qd_lanes_add(__m256 acc, const struct qd_lanes *l)
{
    const __m256 dx = _mm256_loadu_ps(l->dx);
    const __m256 d = _mm256_mul_ps(_mm256_loadu_ps(l->d), dx);
    const __m256 dm =
        _mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(_mm256_loadu_ps(l->dmin), dx));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)l->is)), acc);
    return _mm256_fmadd_ps(dm, _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)l->ms)), acc);
}

/* The 8 six-bit scales and 8 mins of a Q4_K/Q5_K block (quant_scale_min)
 * unpacked at once: bytes 0-7 of the result the scales, 8-15 the mins. */
QD_INLINE __m128i qd_scales_mins(const uint8_t *q)
{
    uint32_t u[4];
    memcpy(u, q, 12);
    const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
    u[3] = ((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4);
    const uint32_t mins_lo = u[1] & m6;
    u[1] = (u[2] & m4) | (((u[0] >> 6) & m2) << 4);
    u[2] = mins_lo;
    u[0] &= m6;
    return _mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]);
}

/* Q5_1: unsigned quants against x, and x's sum for the offsets m */
QD_INLINE float qd_q5_1(const char *w, const char *x, int nb)
{
    __m256 sum = _mm256_setzero_ps();
    struct qd_lanes l;
    memset(&l, 0, sizeof(l));
    for (int b = 0; b < nb; b++, w += sizeof(struct quant_q5_1), x += sizeof(struct quant_q8_0)) {
        const __m256i xv = qd_load(x + 2);
        const int k = b % 8;
        l.is[k] = qd_hsum(QD_DOT(qd_w_q5(w + 4, w + 8), xv));
        l.ms[k] = qd_hsum(QD_DOT(_mm256_set1_epi8(1), xv));
        l.d[k] = qd_f16(w);
        l.dmin[k] = -qd_f16(w + 2);
        l.dx[k] = qd_f16(x);
        if (k == 7 || b == nb - 1) {
            sum = qd_lanes_add(sum, &l);
            memset(&l, 0, sizeof(l));
        }
    }
    return qd_sum8(sum);
}

/* Q6_K's quants 128 h + 32 j .. + 31 of block w (0-63: before their bias
 * of 32): the low 4 bits from ql, the two high ones from qh as bits 4-5
 * (no carry between bytes: each is at most 3 before the shift) */
QD_INLINE __m256i qd_q6_quants(const char *w, int h, int j)
{
    const __m256i lo4 = _mm256_set1_epi8(15), three = _mm256_set1_epi8(3);
    const __m256i l = qd_load(w + 64 * h + 32 * (j & 1));
    const __m256i low = _mm256_and_si256(j < 2 ? l : _mm256_srli_epi16(l, 4), lo4);
    const __m256i qh = qd_load(w + 128 + 32 * h);
    return _mm256_or_si256(
        low, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), three), 4));
}

/* The K-quants on 256-bit vectors (x is Q8_K): VPMADDUBSW per 32 quants,
 * then VPMADDWD by the sub-block's scale, the block's sums kept in a
 * vector and 8 blocks reduced at once. The form before widened each 32
 * quants' pairs by ones, summed the 8 sub-blocks horizontally, multiplied
 * the scales by VPMULLD and stored each block's sums (53 cycles a Q4_K
 * block on one thread of an AMD EPYC Zen 2, against 31). */

/* 16-bit word s (0-7) of each 128-bit lane in all its words */
QD_INLINE __m256i qd_word(__m256i v, int s)
{
    return _mm256_shuffle_epi8(v, _mm256_set1_epi16((short)((2 * s + 1) << 8 | 2 * s)));
}

/* 8 blocks' integer sums (lane k: the sum of v[k]'s lanes) and their
 * scales, added to the partials as qd_lanes_add does */
QD_INLINE __m256 qd_lanes_add8(__m256 acc, const __m256i is[8], const __m256i ms[8], __m256 d,
                               __m256 dmin, __m256 dx)
{
    const __m256 dd = _mm256_mul_ps(d, dx);
    const __m256 dm = _mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(dmin, dx));
    acc = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(qd_hsum8(is)), acc);
    return _mm256_fmadd_ps(dm, _mm256_cvtepi32_ps(qd_hsum8(ms)), acc);
}

/* 8 floats `stride` bytes apart */
QD_INLINE __m256 qd_f32x8(const char *p, size_t stride)
{
    float f[8];
    for (int k = 0; k < 8; k++)
        memcpy(&f[k], p + (size_t)k * stride, 4);
    return _mm256_setr_ps(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]);
}

/* One Q4_K/Q5_K block against Q8_K x: the scaled sums (is) and the mins
 * times x's sums of 32 (ms), each the sum of a vector's lanes */
QD_INLINE void qd_q45_k_blk(const char *w, const char *x, const bool five, __m256i *is, __m256i *ms)
{
    const char *qs = w + (five ? 48 : 16);
    const int8_t *xq = (const int8_t *)x + 4;
    const __m128i sm = qd_scales_mins((const uint8_t *)w + 4);
    const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
    const __m256i qh = five ? qd_load(w + 16) : _mm256_setzero_si256();
    /* two chains of additions, unrolled (GCC otherwise made each shuffle's
     * control in the loop) */
    __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        __m256i q0, q1;
        qd_unpack_45k(qd_load(qs + 32 * j), qh, j, five, &q0, &q1);
        const __m256i p0 = _mm256_maddubs_epi16(q0, qd_load(xq + 64 * j));
        const __m256i p1 = _mm256_maddubs_epi16(q1, qd_load(xq + 64 * j + 32));
        acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(p0, qd_word(sc, 2 * j)));
        acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(p1, qd_word(sc, 2 * j + 1)));
    }
    *is = _mm256_add_epi32(acc0, acc1);
    /* each min twice, against x's two sums of 16 of its sub-block */
    const __m128i mins2 = _mm_shuffle_epi8(
        sm, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15));
    *ms = _mm256_madd_epi16(qd_load(x + 4 + 256), _mm256_cvtepu8_epi16(mins2));
}

/* One Q6_K block: each 32 quants' pairs (two sub-blocks of 16, one a
 * 128-bit lane) times their sub-blocks' scales, less the quants' bias of
 * 32 times each scale times x's sum of 16 */
QD_INLINE __m256i qd_q6_k_blk(const char *w, const char *x)
{
    const int8_t *xq = (const int8_t *)x + 4;
    const __m128i sc = _mm_loadu_si128((const __m128i *)(w + 192));
    /* the 16 scales as words, twice: both lanes */
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc);
    const __m256i lo = _mm256_permute2x128_si256(sc16, sc16, 0x00);
    const __m256i hi = _mm256_permute2x128_si256(sc16, sc16, 0x11);
    __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i p =
                _mm256_maddubs_epi16(qd_q6_quants(w, h, k), qd_load(xq + 128 * h + 32 * k));
            /* sub-blocks 8 h + 2 k (low lane) and 8 h + 2 k + 1 (high):
             * words 2 k and 2 k + 1 of h's scales */
            const __m256i pick =
                _mm256_add_epi8(_mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2,
                                                 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3),
                                _mm256_set1_epi8((char)(4 * k)));
            const __m256i sw = _mm256_shuffle_epi8(h ? hi : lo, pick);
            acc[k % 2] = _mm256_add_epi32(acc[k % 2], _mm256_madd_epi16(p, sw));
        }
    }
    const __m256i off = _mm256_madd_epi16(qd_load(x + 4 + 256), sc16);
    return _mm256_sub_epi32(_mm256_add_epi32(acc[0], acc[1]), _mm256_slli_epi32(off, 5));
}

/* Block w of a K-quant row (t: Q4_K, Q5_K or Q6_K) against Q8_K x */
QD_INLINE void qd_k_blk(const char *w, const char *x, const enum dtype t, __m256i *is, __m256i *ms)
{
    if (t == DTYPE_Q6_K) {
        *is = qd_q6_k_blk(w, x);
        *ms = _mm256_setzero_si256();
    } else
        qd_q45_k_blk(w, x, t == DTYPE_Q5_K, is, ms);
}

/* Blocks [b, b + n) (n <= 8) of a K-quant row from w8 (block b) against
 * Q8_K x from x8, added to acc: the 8 blocks' sums reduced at once, their
 * scales gathered; a group of fewer than 8 with zeros in the lanes past it
 * (a partial plus 0 x 0 is itself) */
QD_INLINE __m256 qd_k_group(__m256 acc, const char *w8, const char *x8, int n, const enum dtype t)
{
    const size_t wb = t == DTYPE_Q6_K   ? sizeof(struct quant_q6_k)
                      : t == DTYPE_Q5_K ? sizeof(struct quant_q5_k)
                                        : sizeof(struct quant_q4_k);
    const size_t xb = sizeof(struct quant_q8_k);
    const size_t d_at = t == DTYPE_Q6_K ? 208 : 0; /* Q4_K/Q5_K: dmin 2 bytes on */
    __m256i is[8], ms[8];
    if (n == 8) {
        for (int k = 0; k < 8; k++) {
            qd_prefetch(w8 + (size_t)k * wb, wb);
            qd_k_blk(w8 + (size_t)k * wb, x8 + (size_t)k * xb, t, &is[k], &ms[k]);
        }
        const __m256 dmin = t == DTYPE_Q6_K ? _mm256_setzero_ps() : qd_f16x8(w8 + 2, wb);
        return qd_lanes_add8(acc, is, ms, qd_f16x8(w8 + d_at, wb), dmin, qd_f32x8(x8, xb));
    }
    float d[8] = {0}, dmin[8] = {0}, dx[8] = {0};
    for (int k = 0; k < 8; k++) {
        is[k] = ms[k] = _mm256_setzero_si256();
        if (k < n) {
            const char *wk = w8 + (size_t)k * wb, *xk = x8 + (size_t)k * xb;
            qd_k_blk(wk, xk, t, &is[k], &ms[k]);
            d[k] = qd_f16(wk + d_at);
            dmin[k] = t == DTYPE_Q6_K ? 0.0f : qd_f16(wk + 2);
            memcpy(&dx[k], xk, 4);
        }
    }
    return qd_lanes_add8(acc, is, ms, _mm256_loadu_ps(d), _mm256_loadu_ps(dmin),
                         _mm256_loadu_ps(dx));
}

/* A K-quant row against Q8_K x: its groups of 8 blocks, then the rest as
 * one. Runs of 8 and the rest are separate calls: one loop checking each
 * block against the row's end made Q5_K 25% slower (Zen 2). */
QD_INLINE float qd_k_row(const char *w, const char *x, int nb, const enum dtype t)
{
    const size_t wb = t == DTYPE_Q6_K   ? sizeof(struct quant_q6_k)
                      : t == DTYPE_Q5_K ? sizeof(struct quant_q5_k)
                                        : sizeof(struct quant_q4_k);
    const size_t xb = sizeof(struct quant_q8_k);
    __m256 sum = _mm256_setzero_ps();
    int b = 0;
    for (; b + 8 <= nb; b += 8)
        sum = qd_k_group(sum, w + (size_t)b * wb, x + (size_t)b * xb, 8, t);
    if (b < nb)
        sum = qd_k_group(sum, w + (size_t)b * wb, x + (size_t)b * xb, nb - b, t);
    return qd_sum8(sum);
}

QD_INLINE float qd_q45_k(const char *w, const char *x, int nb, const bool five)
{
    return qd_k_row(w, x, nb, five ? DTYPE_Q5_K : DTYPE_Q4_K);
}

QD_INLINE float qd_q6_k(const char *w, const char *x, int nb)
{
    return qd_k_row(w, x, nb, DTYPE_Q6_K);
}

#if defined(QD_XR) && !defined(QD_K512)
/* The types of 32 on 256-bit vectors against x laid out (qd_xr): each
 * block's weights as bytes for VPMADDUBSW, Q8_0's signed (its sign moved
 * onto x, qd_dot_signed: Q8_0's full range against x + 128 could saturate
 * a pair's 16 bits), the others unsigned as stored (Q4_0 0-15, Q5_0/Q5_1
 * 0-31: a pair is at most 2 x 31 x 128), whose sums exceed the exact
 * ones by 8 (Q4_0) or 16 (Q5_0) times x's sum over the block, subtracted
 * once 8 blocks are reduced to a lane each; Q5_1's x sum is its min's
 * operand instead. The form before (qd_q8_0 and the others above, still
 * `vnni`'s) re-gathered and converted x's f16 scales for every weight row
 * and moved every block's sign onto x. */
QD_INLINE __m256i qd2_wq(const char *wk, const enum dtype T)
{
    if (T == DTYPE_Q8_0)
        return qd_load(wk + 2);
    /* the 16 packed bytes in both lanes, the high lane's shifted by 4 */
    const __m128i v = _mm_loadu_si128((const __m128i *)(wk + qd_xr_qs_at(T)));
    __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(15));
    if (T == DTYPE_Q5_0 || T == DTYPE_Q5_1)
        q = _mm256_or_si256(
            q, _mm256_and_si256(qd_bits32(wk + qd_xr_qs_at(T) - 4), _mm256_set1_epi8(16)));
    return q;
}

/* qd_hsum8 of v[0..3], lanes 4-7 zero */
QD_INLINE __m256i qd_hsum4(const __m256i v[4])
{
    const __m256i a =
        _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    return _mm256_zextsi128_si256(
        _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1)));
}

/* qd_hsum8 of the blocks' 16-bit pair sums (VPMADDUBSW's) where four
 * pairs add in 16 bits (unsigned weights of at most 31 against x of at
 * least -128: four pairs at most 31744): the pairs of two, then four,
 * blocks added by VPHADDW and widened by one VPMADDWD per four blocks,
 * where a VPMADDWD by ones per block had widened them first (VPMADDUBSW
 * and VPMADDWD share one pipe on AMD Zen 2) */
QD_INLINE __m256i qd_hsum8_w16(const __m256i p[8])
{
    const __m256i ones = _mm256_set1_epi16(1);
    /* dword k of each 128-bit lane: block k's (a) and 4 + k's (b) half */
    const __m256i a = _mm256_madd_epi16(
        _mm256_hadd_epi16(_mm256_hadd_epi16(p[0], p[1]), _mm256_hadd_epi16(p[2], p[3])), ones);
    const __m256i b = _mm256_madd_epi16(
        _mm256_hadd_epi16(_mm256_hadd_epi16(p[4], p[5]), _mm256_hadd_epi16(p[6], p[7])), ones);
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                            _mm256_permute2x128_si256(a, b, 0x31));
}

/* qdot.h's steps for the run of 8 blocks from block b of a T row (n of
 * them there, the rest of the lanes adding 0 x 0), w8 its first */
QD_INLINE __m256 qd2_run(__m256 acc, const char *w8, const struct qd_xr *r, int b,
                         const enum dtype T, const int n)
{
    const size_t wb = qd_xr_wb(T);
    qd_prefetch(w8, (size_t)n * wb);
    __m256i v[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        if (k >= n) {
            v[k] = _mm256_setzero_si256();
            continue;
        }
        const __m256i wq = qd2_wq(w8 + (size_t)k * wb, T);
        const __m256i xv = _mm256_load_si256((const __m256i *)qd_xr_q(r, b, k));
        v[k] = T == DTYPE_Q8_0 ? qd_dot_signed(wq, xv) : _mm256_maddubs_epi16(wq, xv);
    }
    const __m256i s = _mm256_loadu_si256((const __m256i *)(r->s + b));
    __m256i is = T != DTYPE_Q8_0 ? qd_hsum8_w16(v) : n <= 4 ? qd_hsum4(v) : qd_hsum8(v);
    if (T == DTYPE_Q4_0 || T == DTYPE_Q5_0) /* the bias of the unsigned weights */
        is = _mm256_sub_epi32(is, _mm256_slli_epi32(s, T == DTYPE_Q4_0 ? 3 : 4));
    const __m256 dx = _mm256_loadu_ps(r->d + b);
    const __m256 dw = qd_f16xn(w8, wb, n);
    const __m256 m = T == DTYPE_Q5_1 ? qd_f16xn(w8 + 2, wb, n) : _mm256_setzero_ps();
    acc = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(is), acc);
    if (T == DTYPE_Q5_1) /* qdot.h's -(dmin dx) with dmin = -m: m dx exactly */
        acc = _mm256_fmadd_ps(_mm256_mul_ps(m, dx), _mm256_cvtepi32_ps(s), acc);
    return acc;
}
#define QD_XR_RUN qd2_run
#endif

#ifdef QD_K512
#include "backend/cpu/qdot_k512.h"
#define QD_Q45_K qd5_q45_k
#define QD_Q6_K qd5_q6_k
#define QD_Q4_0 qd5_q4_0
#else
#define QD_Q45_K qd_q45_k
#define QD_Q6_K qd_q6_k
#define QD_Q4_0 qd_q4_0
#endif

#ifdef QD_XR
/* a row w of nb T blocks times x (laid out in r) */
QD_INLINE float qd_xr_row(const char *w, const struct qd_xr *r, int nb, const enum dtype T)
{
    const size_t wb = qd_xr_wb(T);
    __m256 acc = _mm256_setzero_ps();
    int b = 0;
    for (; b + 8 <= nb; b += 8)
        acc = QD_XR_RUN(acc, w + (size_t)b * wb, r, b, T, 8);
#define QD_XR_TAIL(n)                                                                              \
    case n:                                                                                        \
        acc = QD_XR_RUN(acc, w + (size_t)b * wb, r, b, T, n);                                      \
        break;
    switch (nb - b) { /* n a constant in each, so each folds its masks */
        QD_XR_TAIL(1)
        QD_XR_TAIL(2)
        QD_XR_TAIL(3)
        QD_XR_TAIL(4)
        QD_XR_TAIL(5)
        QD_XR_TAIL(6)
        QD_XR_TAIL(7)
    default:
        break;
    }
#undef QD_XR_TAIL
    return qd_sum8(acc);
}

/* n rows of T, w_ld bytes apart from w, times x laid out (r) into y[0 ..
 * n): a row's loop inside the function, so that its constants stay in
 * registers from one row to the next (a call per row had rebuilt them) */
QD_INLINE void qd_xr_rows(const char *w, size_t w_ld, int n, const struct qd_xr *r, int nb,
                          const enum dtype T, float *y)
{
    for (int i = 0; i < n; i++, w += w_ld)
        y[i] = qd_xr_row(w, r, nb, T);
}

/* one function per type (GCC unrolls a run's products only in a function
 * of its own; unused where the includer defines no rows function) */
#define QD_XR_ROWS_FN(name, T)                                                                     \
    static __attribute__((noinline, unused)) void name(const char *w, size_t w_ld, int n,          \
                                                       const struct qd_xr *r, int nb, float *y)    \
    {                                                                                              \
        qd_xr_rows(w, w_ld, n, r, nb, T, y);                                                       \
    }
QD_XR_ROWS_FN(qd_q8_0_xr, DTYPE_Q8_0)
QD_XR_ROWS_FN(qd_q4_0_xr, DTYPE_Q4_0)
QD_XR_ROWS_FN(qd_q5_0_xr, DTYPE_Q5_0)
QD_XR_ROWS_FN(qd_q5_1_xr, DTYPE_Q5_1)

/* Rows [r0, r1) of a's weights of a type of 32 (nb blocks, w_ld bytes
 * apart) for every input row, against each row's x laid out: once per
 * call by qlinear.c (a->xp, qdot_pack_x_xr: a task of 16 rows of 8192
 * columns had spent 14-20% of its CPU time laying out x again, weights in
 * L2), or, where a->xp is NULL (a kernel calling this one for the
 * types it does not take), once per task here (the task's weight rows,
 * about 128 KiB, stay in L2 from one input row to the next); false, with
 * nothing done, for the K-quants and where the scratch cannot grow (the
 * caller's code computes the same bits) */
QD_INLINE bool qd_rows_xr(const struct qdot_args *a, int r0, int r1, int nb, size_t w_ld)
{
    const enum dtype t = a->w->dtype;
    void (*dot)(const char *, size_t, int, const struct qd_xr *, int, float *);
    switch (t) {
    case DTYPE_Q8_0:
        dot = qd_q8_0_xr;
        break;
    case DTYPE_Q4_0:
        dot = qd_q4_0_xr;
        break;
    case DTYPE_Q5_0:
        dot = qd_q5_0_xr;
        break;
    case DTYPE_Q5_1:
        dot = qd_q5_1_xr;
        break;
    default:
        return false;
    }
    /* x laid out once per call by the caller (qdot_pack_x_xr, a->xp), or
     * here per task into the thread's scratch */
    char *buf = a->xp ? NULL : cpu_scratch(CPU_SCRATCH_Q_XR, qd_xr_bytes(nb));
    if (!a->xp && !buf)
        return false;
    for (int i = 0; i < a->m; i++) {
        float *y = a->y + (size_t)i * a->ldy;
        const struct qd_xr xr = qd_xr_at(a->xp ? (char *)a->xp + (size_t)i * a->xp_ld : buf, nb);
        if (!a->xp)
            qd_xr_fill(&xr, a->xq + (size_t)i * a->xq_ld, nb);
        dot((const char *)a->w->data + (size_t)r0 * w_ld, w_ld, r1 - r0, &xr, nb, y + r0);
    }
    return true;
}
#endif

/* Input rows per pass over a task's weight rows: a prefill's rows go by in
 * groups that stay in L1/L2 while the task's weights (about 128 KiB) stay
 * in L2. */
#define QD_MB 8

/* Each row type's loop, so the dot product inlines into it. */
#define QD_LOOP(call)                                                                              \
    for (int i0 = 0; i0 < a->m; i0 += QD_MB) {                                                     \
        const int i1 = i0 + QD_MB < a->m ? i0 + QD_MB : a->m;                                      \
        for (int r = r0; r < r1; r++) {                                                            \
            const char *row = (const char *)w->data + (size_t)r * w_ld;                            \
            for (int i = i0; i < i1; i++) {                                                        \
                const char *x = a->xq + (size_t)i * a->xq_ld;                                      \
                a->y[(size_t)i * a->ldy + r] = call;                                               \
            }                                                                                      \
        }                                                                                          \
    }

#ifdef QDOT_ROWS_FN
void QDOT_ROWS_FN(const struct qdot_args *a, int r0, int r1)
{
    const struct weight_view *w = a->w;
    const int nb = w->cols / dtype_block(w->dtype);
    const size_t w_ld = dtype_row_bytes(w->dtype, w->ld); /* weight_row's, once */
#ifdef QD_XR
    if (qd_rows_xr(a, r0, r1, nb, w_ld))
        return;
#endif
    switch (w->dtype) {
    case DTYPE_Q8_0:
        QD_LOOP(qd_q8_0(row, x, nb));
        break;
    case DTYPE_Q4_0:
        QD_LOOP(QD_Q4_0(row, x, nb));
        break;
    case DTYPE_Q4_K:
        QD_LOOP(QD_Q45_K(row, x, nb, false));
        break;
    case DTYPE_Q5_K:
        QD_LOOP(QD_Q45_K(row, x, nb, true));
        break;
    case DTYPE_Q6_K:
        QD_LOOP(QD_Q6_K(row, x, nb));
        break;
    case DTYPE_Q5_0:
        QD_LOOP(qd_q5_0(row, x, nb));
        break;
    case DTYPE_Q5_1:
        QD_LOOP(qd_q5_1(row, x, nb));
        break;
    case DTYPE_F32:
    case DTYPE_F16:
    case DTYPE_BF16:
    case DTYPE_CT_I8: /* ctlinear.c's */
    case DTYPE_CT_I4:
    case DTYPE_CT_F8:
        break;
    }
}

#endif

#ifdef QDOT_PIECES_FN
#include "backend/cpu/qdot_far.h"
#endif
