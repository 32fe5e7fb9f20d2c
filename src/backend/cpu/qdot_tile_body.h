/* The multi-row quantized kernels (qdot.h's qdot_tile_fn) written once:
 * included by qdot_avx2.c and qdot_vnni.c after qdot_body.h, which define
 *
 *   QDT_DOT4(acc, xv, wp)     acc (8 int32) plus, in lane i, the products of
 *                             xv's bytes 4i .. 4i + 3 (unsigned) with the 4
 *                             signed bytes at wp, exactly for |w| <= 64
 *   QDT_DOT4_Q8(acc, xv, wp)  the same for any signed bytes (Q8_0's)
 *   QDT_Q8_BIAS               1 where QDT_DOT4_Q8 multiplies xv as it is
 *                             (x + 128), 0 where it takes back the 128
 *   QDT_NW                    weight rows a pass (at most 4)
 *   QDT_MUL16(xv, wp)         (optional) xv's bytes (unsigned) times the 4
 *                             signed bytes at wp, adjacent products summed
 *                             to 16 bits (VPMADDUBSW): the K-quants then
 *                             add a few of them in 16 bits and widen them
 *                             once, times the sub-block's scale (VPMADDWD)
 *   QDT_MUL16U(wp, xs)        (with QDT_MUL16) the 4 unsigned bytes at wp
 *                             times xs's bytes (signed), as QDT_MUL16: the
 *                             types of 32 but Q8_0 (qdt_blk32)
 *   QDOT_TILE_FN              the name of the qdot_tile_fn to define
 *
 * A lane is an input row (qdot.h's packed groups), so a block's integer sum
 * for 8 rows is one vector, never summed across lanes. x's bytes are x +
 * 128 (VPDPBUSD's unsigned operand), which adds 128 x (the weights' sum) to
 * every lane: the unpacking of a weight row computes that once per block
 * (qdt_blk.corr) and the block's sums take it back, so they are the exact
 * sums the single-row kernels take, and the float steps are theirs in the
 * same order (qdot.h): the same bits per row. */
#include "backend/cpu/scratch.h"
#include "core/error.h"

/* One weight block unpacked (its quants beside it, in element order) */
struct qdt_blk {
    float d, dmin; /* the f32 scales; dmin is Q5_1's -m */
    int32_t corr;  /* 128 x the sum of (sub-block scale x quant) */
    int32_t mn[4]; /* Q4_K/Q5_K: the mins of sub-blocks 2p, 2p + 1 as int16 pairs */
    int32_t sc[16];
};

/* packed x: bytes of one block of a group (qdot.h) */
#define QDT_XB0 (8 * 32 + 32 + 32)
#define QDT_XBK (64 * 32 + 32 + 4 * 32)
/* weight rows unpacked at a time: their quants stay in L1 while a packed
 * group of x goes by them */
#define QDT_WROWS 4

/* the sum of v's 32 unsigned bytes */
QD_INLINE int32_t qdt_usum(__m256i v)
{
    const __m256i s = _mm256_sad_epu8(v, _mm256_setzero_si256());
    __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    return (int32_t)(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1));
}

/* ---- a weight row unpacked: q (int8, element order, or the row's own
 * bytes for Q8_0) and its blocks' scales ---- */

QD_INLINE void qdt_unpack_32(enum dtype t, const char *w, int8_t *q, struct qdt_blk *bl, int nb)
{
    const size_t wb = quant_block_bytes(t);
    for (int b = 0; b < nb; b++, w += wb, q += 32) {
        struct qdt_blk *k = &bl[b];
        qd_prefetch(w, wb);
        __m256i u;
        int off;
        k->d = qd_f16(w);
        k->dmin = 0.0f;
        switch (t) {
        case DTYPE_Q8_0: /* in place: only the sum */
            k->corr =
                QDT_Q8_BIAS
                    ? 128 * (qdt_usum(_mm256_xor_si256(qd_load(w + 2), _mm256_set1_epi8(-128))) -
                             128 * 32)
                    : 0;
            continue;
        case DTYPE_Q4_0:
            u = _mm256_add_epi8(qd_w_q4_0(w), _mm256_set1_epi8(8));
            off = 8;
            break;
        case DTYPE_Q5_0:
            u = qd_w_q5(w + 2, w + 6);
            off = 16;
            break;
        default: /* Q5_1: unsigned, x's sum for the offset */
            u = qd_w_q5(w + 4, w + 8);
            k->dmin = -qd_f16(w + 2);
            off = 0;
            break;
        }
#ifdef QDT_MUL16
        /* unsigned, against signed x (qdt_blk32): no sum of the quants */
        (void)off;
        _mm256_storeu_si256((__m256i *)q, u);
        k->corr = 0;
#else
        _mm256_storeu_si256((__m256i *)q, _mm256_sub_epi8(u, _mm256_set1_epi8((char)off)));
        k->corr = 128 * (qdt_usum(u) - 32 * off);
#endif
    }
}

QD_INLINE void qdt_unpack_45k(const char *w, int8_t *q, struct qdt_blk *bl, int nb, bool five)
{
    const size_t wb = five ? sizeof(struct quant_q5_k) : sizeof(struct quant_q4_k);
    for (int b = 0; b < nb; b++, w += wb, q += 256) {
        struct qdt_blk *k = &bl[b];
        qd_prefetch(w, wb);
        const char *qs = w + (five ? 48 : 16);
        const __m256i qh = five ? qd_load(w + 16) : _mm256_setzero_si256();
        const __m128i sm = qd_scales_mins((const uint8_t *)w + 4);
        const __m256i smb = _mm256_broadcastsi128_si256(sm);
        /* corr's sum: each quant times its sub-block's scale, in pairs of
         * 16 bits (8 pairs a word: at most 8 x 2 x 31 x 63, inside 16 bits);
         * in vectors, where a scalar loop over the scales and a horizontal
         * sum per sub-block took about half of an 8-row call's time (Zen 2) */
        __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const __m256i v = qd_load(qs + 32 * j);
            __m256i q0, q1;
            qd_unpack_45k(v, qh, j, five, &q0, &q1);
            _mm256_storeu_si256((__m256i *)(q + 64 * j), q0);
            _mm256_storeu_si256((__m256i *)(q + 64 * j + 32), q1);
            acc = _mm256_add_epi16(
                acc, _mm256_maddubs_epi16(
                         q0, _mm256_shuffle_epi8(smb, _mm256_set1_epi8((char)(2 * j)))));
            acc = _mm256_add_epi16(
                acc, _mm256_maddubs_epi16(
                         q1, _mm256_shuffle_epi8(smb, _mm256_set1_epi8((char)(2 * j + 1)))));
        }
        k->corr = 128 * qd_hsum(_mm256_madd_epi16(acc, _mm256_set1_epi16(1)));
        _mm256_storeu_si256((__m256i *)k->sc, _mm256_cvtepu8_epi32(sm));
        /* the mins as int16 pairs: word 2p min 2p, word 2p + 1 min 2p + 1 */
        _mm_storeu_si128((__m128i *)k->mn, _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)));
        k->d = qd_f16(w);
        k->dmin = qd_f16(w + 2);
    }
}

/* Q6_K: the quants less their bias of 32 (so no sums of x are needed) */
QD_INLINE void qdt_unpack_6k(const char *w, int8_t *q, struct qdt_blk *bl, int nb)
{
    for (int b = 0; b < nb; b++, w += sizeof(struct quant_q6_k), q += 256) {
        struct qdt_blk *k = &bl[b];
        qd_prefetch(w, sizeof(struct quant_q6_k));
        const __m128i sc = _mm_loadu_si128((const __m128i *)(w + 192));
        const __m256i scb = _mm256_broadcastsi128_si256(sc);
        /* corr's sum of each quant times its scale, as qdt_unpack_45k's */
        __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const __m256i v = qd_q6_quants(w, h, j);
                _mm256_storeu_si256((__m256i *)(q + 128 * h + 32 * j),
                                    _mm256_sub_epi8(v, _mm256_set1_epi8(32)));
                /* sub-blocks 8h + 2j and 8h + 2j + 1: the two halves, each
                 * pair at most 2 x 63 x 128 */
                const int s0 = 8 * h + 2 * j;
                const __m256i pick =
                    _mm256_setr_m128i(_mm_set1_epi8((char)s0), _mm_set1_epi8((char)(s0 + 1)));
                acc = _mm256_add_epi32(
                    acc, _mm256_madd_epi16(_mm256_maddubs_epi16(v, _mm256_shuffle_epi8(scb, pick)),
                                           _mm256_set1_epi16(1)));
            }
        }
        const __m256i sc_lo = _mm256_cvtepi8_epi32(sc),
                      sc_hi = _mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8));
        _mm256_storeu_si256((__m256i *)k->sc, sc_lo);
        _mm256_storeu_si256((__m256i *)(k->sc + 8), sc_hi);
        /* less the bias: 32 x each scale times its 16 quants */
        k->corr = 128 * (qd_hsum(acc) - 16 * 32 * qd_hsum(_mm256_add_epi32(sc_lo, sc_hi)));
        k->d = qd_f16(w + 208);
        k->dmin = 0.0f;
    }
}

/* ---- one unpacked weight row times one packed group ---- */

/* QDT_NW weight rows are multiplied in one pass (4 where 32 vector
 * registers hold their partials, 2 with 16): each load of x's quads goes to
 * all of them. p[r] is row r's partial sum of this block's lane (qdot.h). */

/* a block's f32 steps for one weight row, as qd_lanes_add / the types of
 * 32 take them */
QD_INLINE __m256 qdt_scale(__m256 p, __m256i is, const struct qdt_blk *k, __m256 dx, const bool two,
                           __m256i ms)
{
    const __m256 d = _mm256_mul_ps(_mm256_set1_ps(k->d), dx);
    if (!two)
        return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(is), p);
    const __m256 dm =
        _mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(_mm256_set1_ps(k->dmin), dx));
    p = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(is), p);
    return _mm256_fmadd_ps(dm, _mm256_cvtepi32_ps(ms), p);
}

/* With QDT_MUL16 (AVX2) the types of 32 other than Q8_0 are unpacked as
 * unsigned quants (Q4_0 0-15, Q5_0/Q5_1 0-31) and multiplied against x as
 * signed bytes (the packed x + 128 flipped back, one XOR a quad shared by
 * the pass's weight rows), grp quads' 16-bit pair sums added before they
 * widen, as qdt_blkk's: 8 for Q4_0, 4 for Q5_0/Q5_1 (a pair at most 2 x 31
 * x 128, four 31744); the sums exceed the exact ones by off (8 or 16) times
 * x's sum over the block, taken back with x's sums of the packed group
 * (Q5_1's off is 0: x's sum is its min's operand). Where the unpacking
 * summed each block's quants for the correction of x + 128 (signed weights
 * against it, as vnni's), it took about half of an 8-row call (Zen 2). */
QD_INLINE void qdt_blk32(__m256 *p, const char *xb, const int8_t *const *q,
                         const struct qdt_blk *const *k, const enum dtype t, const int nw)
{
    const int grp = t == DTYPE_Q4_0 ? 8 : 4;
    const int off = t == DTYPE_Q4_0 ? 8 : t == DTYPE_Q5_0 ? 16 : 0;
    /* two chains of sums a row (exact: their order is free) */
    __m256i acc[QDT_NW][2];
    for (int r = 0; r < nw; r++)
        acc[r][0] = acc[r][1] = _mm256_setzero_si256();
#ifdef QDT_MUL16
    if (t != DTYPE_Q8_0) {
#pragma GCC unroll 8
        for (int d0 = 0; d0 < 8; d0 += grp) {
            __m256i p16[QDT_NW];
            for (int r = 0; r < nw; r++)
                p16[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int d = d0; d < d0 + grp; d++) {
                const __m256i xs = _mm256_xor_si256(qd_load(xb + 32 * d), _mm256_set1_epi8(-128));
#pragma GCC unroll 4
                for (int r = 0; r < nw; r++)
                    p16[r] = _mm256_add_epi16(p16[r], QDT_MUL16U(q[r] + 4 * d, xs));
            }
#pragma GCC unroll 4
            for (int r = 0; r < nw; r++)
                acc[r][(d0 / grp) & 1] = _mm256_add_epi32(
                    acc[r][(d0 / grp) & 1], _mm256_madd_epi16(p16[r], _mm256_set1_epi16(1)));
        }
        if (off) {
            const __m256i bias = _mm256_slli_epi32(qd_load(xb + 288), off == 8 ? 3 : 4);
            for (int r = 0; r < nw; r++)
                acc[r][0] = _mm256_sub_epi32(acc[r][0], bias);
        }
    } else
#endif
    {
        (void)grp, (void)off;
#pragma GCC unroll 8
        for (int d = 0; d < 8; d++) {
            const __m256i xv = qd_load(xb + 32 * d);
#pragma GCC unroll 4
            for (int r = 0; r < nw; r++)
                acc[r][d & 1] = t == DTYPE_Q8_0 ? QDT_DOT4_Q8(acc[r][d & 1], xv, q[r] + 4 * d)
                                                : QDT_DOT4(acc[r][d & 1], xv, q[r] + 4 * d);
        }
    }
    const __m256 dx = _mm256_loadu_ps((const float *)(xb + 256));
    const __m256i xs = t == DTYPE_Q5_1 ? qd_load(xb + 288) : _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int r = 0; r < nw; r++) {
        const __m256i is =
            _mm256_sub_epi32(_mm256_add_epi32(acc[r][0], acc[r][1]), _mm256_set1_epi32(k[r]->corr));
        p[r] = qdt_scale(p[r], is, k[r], dx, t == DTYPE_Q5_1, xs);
    }
}

/* K-quants: nsub sub-blocks (8 of 32 or Q6_K's 16 of 16); with QDT_MUL16,
 * grp quads' 16-bit pair sums added before they widen: no sum leaves 16
 * bits where x + 128 <= 255 and |w| <= 15 for 4 (Q4_K), 31 or 32 for 2
 * (Q5_K, Q6_K) */
QD_INLINE void qdt_blkk(__m256 *p, const char *xb, const int8_t *const *q,
                        const struct qdt_blk *const *k, const int nsub, const bool mins,
                        const int grp, const int nw)
{
    const int per = 64 / nsub; /* quads of a sub-block */
    __m256i is[QDT_NW];
    /* with QDT_MUL16: one multiply per quad and one per grp quads, where
     * QDT_DOT4 and the scale took two per quad and a VPMULLD per sub-block
     * (AMD EPYC Zen 2, where both multiplies issue on one pipe) */
    for (int r = 0; r < nw; r++)
        is[r] = _mm256_setzero_si256();
#ifdef QDT_MUL16
#pragma GCC unroll 16
    for (int s = 0; s < nsub; s++) {
        __m256i sc16[QDT_NW];
        for (int r = 0; r < nw; r++)
            sc16[r] = _mm256_set1_epi16((short)k[r]->sc[s]);
#pragma GCC unroll 8
        for (int d0 = s * per; d0 < (s + 1) * per; d0 += grp) {
            __m256i p16[QDT_NW];
            for (int r = 0; r < nw; r++)
                p16[r] = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int d = d0; d < d0 + grp; d++) {
                const __m256i xv = qd_load(xb + 32 * d);
#pragma GCC unroll 4
                for (int r = 0; r < nw; r++)
                    p16[r] = _mm256_add_epi16(p16[r], QDT_MUL16(xv, q[r] + 4 * d));
            }
#pragma GCC unroll 4
            for (int r = 0; r < nw; r++)
                is[r] = _mm256_add_epi32(is[r], _mm256_madd_epi16(p16[r], sc16[r]));
        }
    }
#else
    (void)grp;
    /* unrolled whole: the sub-blocks' chains of sums are independent */
#pragma GCC unroll 16
    for (int s = 0; s < nsub; s++) {
        __m256i acc[QDT_NW];
        for (int r = 0; r < nw; r++)
            acc[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int d = s * per; d < (s + 1) * per; d++) {
            const __m256i xv = qd_load(xb + 32 * d);
#pragma GCC unroll 4
            for (int r = 0; r < nw; r++)
                acc[r] = QDT_DOT4(acc[r], xv, q[r] + 4 * d);
        }
#pragma GCC unroll 4
        for (int r = 0; r < nw; r++)
            is[r] =
                _mm256_add_epi32(is[r], _mm256_mullo_epi32(acc[r], _mm256_set1_epi32(k[r]->sc[s])));
    }
#endif
    const __m256 dx = _mm256_loadu_ps((const float *)(xb + 2048));
#pragma GCC unroll 4
    for (int r = 0; r < nw; r++) {
        __m256i ms = _mm256_setzero_si256();
        if (mins)
            for (int pr = 0; pr < 4; pr++)
                ms = _mm256_add_epi32(ms, _mm256_madd_epi16(qd_load(xb + 2048 + 32 + 32 * pr),
                                                            _mm256_set1_epi32(k[r]->mn[pr])));
        p[r] = qdt_scale(p[r], _mm256_sub_epi32(is[r], _mm256_set1_epi32(k[r]->corr)), k[r], dx,
                         true, ms);
    }
}

/* qdot_sum8 of each lane's partials, lane i to y[i * ldy] for the group's rows */
QD_INLINE void qdt_store(const __m256 p[8], float *y, size_t ldy, int rows)
{
    const __m256 s =
        _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(p[0], p[4]), _mm256_add_ps(p[2], p[6])),
                      _mm256_add_ps(_mm256_add_ps(p[1], p[5]), _mm256_add_ps(p[3], p[7])));
    float v[8];
    _mm256_storeu_ps(v, s);
    for (int i = 0; i < rows; i++)
        y[(size_t)i * ldy] = v[i];
}

/* nw weight rows (q[r], their blocks k[r], results to y + r) times one
 * packed group; the types of 32 in steps of 8 blocks, so each block's
 * partial stays in a register */
QD_INLINE void qdt_rows32(const char *xg, const int8_t *const *q, size_t qstride,
                          const struct qdt_blk *const *k, int nb, const enum dtype t, float *y,
                          size_t ldy, int rows, const int nw)
{
    __m256 p[8][QDT_NW];
    for (int i = 0; i < 8; i++)
        for (int r = 0; r < nw; r++)
            p[i][r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b += 8)
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            if (b + i >= nb)
                break;
            const int8_t *qb[QDT_NW];
            const struct qdt_blk *kb[QDT_NW];
            for (int r = 0; r < nw; r++) {
                qb[r] = q[r] + (size_t)(b + i) * qstride;
                kb[r] = k[r] + b + i;
            }
            qdt_blk32(p[i], xg + (size_t)(b + i) * QDT_XB0, qb, kb, t, nw);
        }
    for (int r = 0; r < nw; r++) {
        const __m256 pr[8] = {p[0][r], p[1][r], p[2][r], p[3][r],
                              p[4][r], p[5][r], p[6][r], p[7][r]};
        qdt_store(pr, y + r, ldy, rows);
    }
}

QD_INLINE void qdt_rowsk(const char *xg, const int8_t *const *q, const struct qdt_blk *const *k,
                         int nb, const int nsub, const bool mins, const int grp, float *y,
                         size_t ldy, int rows, const int nw)
{
    __m256 p[8][QDT_NW];
    for (int i = 0; i < 8; i++)
        for (int r = 0; r < nw; r++)
            p[i][r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const int8_t *qb[QDT_NW];
        const struct qdt_blk *kb[QDT_NW];
        for (int r = 0; r < nw; r++) {
            qb[r] = q[r] + (size_t)b * 256;
            kb[r] = k[r] + b;
        }
        qdt_blkk(p[b % 8], xg + (size_t)b * QDT_XBK, qb, kb, nsub, mins, grp, nw);
    }
    for (int r = 0; r < nw; r++) {
        const __m256 pr[8] = {p[0][r], p[1][r], p[2][r], p[3][r],
                              p[4][r], p[5][r], p[6][r], p[7][r]};
        qdt_store(pr, y + r, ldy, rows);
    }
}

/* one type's pass, NW rows at a time and a last one alone */
#define QDT_PASS(call)                                                                             \
    do {                                                                                           \
        int i = 0;                                                                                 \
        for (; i + QDT_NW <= nr; i += QDT_NW) {                                                    \
            const int nw = QDT_NW;                                                                 \
            call;                                                                                  \
        }                                                                                          \
        for (; i < nr; i++) {                                                                      \
            const int nw = 1;                                                                      \
            call;                                                                                  \
        }                                                                                          \
    } while (0)

int QDOT_TILE_FN(const struct qdot_args *a, int r0, int r1)
{
    const struct weight_view *w = a->w;
    const enum dtype t = w->dtype;
    const int qk = dtype_block(t), nb = w->cols / qk;
    /* per unpacked row: its quants, then its blocks */
    const size_t qbytes = ((size_t)nb * qk + 63) / 64 * 64;
    const size_t row_bytes = qbytes + (size_t)nb * sizeof(struct qdt_blk);
    char *buf = cpu_scratch(CPU_SCRATCH_Q_DEQ, QDT_WROWS * row_bytes);
    if (!buf)
        return ERR_NOMEM;
    const int ng = (a->m + QDOT_GROUP - 1) / QDOT_GROUP;
    for (int rb = r0; rb < r1; rb += QDT_WROWS) {
        const int nr = r1 - rb < QDT_WROWS ? r1 - rb : QDT_WROWS;
        const int8_t *q[QDT_WROWS];
        const struct qdt_blk *bl[QDT_WROWS];
        size_t qstride = (size_t)qk;
        for (int i = 0; i < nr; i++) {
            const char *row = weight_row(w, rb + i);
            int8_t *qi = (int8_t *)(buf + (size_t)i * row_bytes);
            struct qdt_blk *bi = (struct qdt_blk *)(buf + (size_t)i * row_bytes + qbytes);
            q[i] = qi;
            bl[i] = bi;
            switch (t) {
            case DTYPE_Q8_0:
                q[i] = (const int8_t *)row + 2;
                qstride = sizeof(struct quant_q8_0);
                qdt_unpack_32(t, row, qi, bi, nb);
                break;
            case DTYPE_Q4_0:
            case DTYPE_Q5_0:
            case DTYPE_Q5_1:
                qdt_unpack_32(t, row, qi, bi, nb);
                break;
            case DTYPE_Q4_K:
            case DTYPE_Q5_K:
                qdt_unpack_45k(row, qi, bi, nb, t == DTYPE_Q5_K);
                break;
            case DTYPE_Q6_K:
                qdt_unpack_6k(row, qi, bi, nb);
                break;
            case DTYPE_F32:
            case DTYPE_F16:
            case DTYPE_BF16:
            case DTYPE_CT_I8: /* ctlinear.c's */
            case DTYPE_CT_I4:
            case DTYPE_CT_F8:
                return 0;
            }
        }
        for (int g = 0; g < ng; g++) {
            const char *xg = a->xp + (size_t)g * a->xp_ld;
            const int rows =
                a->m - g * QDOT_GROUP < QDOT_GROUP ? a->m - g * QDOT_GROUP : QDOT_GROUP;
            float *y = a->y + (size_t)g * QDOT_GROUP * a->ldy + rb;
            switch (t) {
            /* each type a constant of its own call, so its steps fold */
            case DTYPE_Q8_0:
                QDT_PASS(qdt_rows32(xg, q + i, qstride, bl + i, nb, DTYPE_Q8_0, y + i, a->ldy, rows,
                                    nw));
                break;
            case DTYPE_Q4_0:
                QDT_PASS(qdt_rows32(xg, q + i, qstride, bl + i, nb, DTYPE_Q4_0, y + i, a->ldy, rows,
                                    nw));
                break;
            case DTYPE_Q5_0:
                QDT_PASS(qdt_rows32(xg, q + i, qstride, bl + i, nb, DTYPE_Q5_0, y + i, a->ldy, rows,
                                    nw));
                break;
            case DTYPE_Q5_1:
                QDT_PASS(qdt_rows32(xg, q + i, qstride, bl + i, nb, DTYPE_Q5_1, y + i, a->ldy, rows,
                                    nw));
                break;
            case DTYPE_Q4_K:
                QDT_PASS(qdt_rowsk(xg, q + i, bl + i, nb, 8, true, 4, y + i, a->ldy, rows, nw));
                break;
            case DTYPE_Q5_K:
                QDT_PASS(qdt_rowsk(xg, q + i, bl + i, nb, 8, true, 2, y + i, a->ldy, rows, nw));
                break;
            case DTYPE_Q6_K:
                QDT_PASS(qdt_rowsk(xg, q + i, bl + i, nb, 16, false, 2, y + i, a->ldy, rows, nw));
                break;
            case DTYPE_F32:
            case DTYPE_F16:
            case DTYPE_BF16:
            case DTYPE_CT_I8:
            case DTYPE_CT_I4:
            case DTYPE_CT_F8:
                break;
            }
        }
    }
    return 0;
}
