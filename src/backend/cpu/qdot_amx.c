/* The quantized products on AMX-INT8 tiles (qdot.h's qdot_tile_amx): this
 * file alone is compiled with AMX-TILE, AMX-INT8 and AVX-512 (BW, VL, VNNI;
 * CMakeLists.txt), and runs only where qlinear.c found them and Linux
 * granted the tile data.
 *
 * The weights are the A operand: 16 weight rows x 64 (or 32) K bytes, one
 * weight row a tile row, so a row's quants lie as they are (Q8_0's are read
 * in place; the others are unpacked once per call into the thread's scratch,
 * row after row). x is the B operand, laid out once per call in the VNNI
 * layout TDPBSSD reads (qdot.h's tile groups: row q of a block's tile holds
 * quad q of each of 16 input rows). C is then 16 weight rows x 16 input rows
 * of exact int32 sums; a row of C (one weight row, 16 input rows) is one
 * 512-bit vector, and the float steps run on it as qdot.h orders them.
 *
 * Every sum is a whole block's (or a whole K-quant block's: see below), so
 * each lane holds the integer the single-row kernels compute, and the f32
 * steps are theirs, block b into partial b % 8, the partials reduced as
 * qdot_sum8: the same bits per row, whichever m.
 *
 * The K-quants' sub-block scales are folded into the weights before the
 * products, so a block is one sum rather than 8 or 16 sums each times its
 * scale after a tile store: w' = sc x q (Q4_K/Q5_K: 0 .. 1953; Q6_K: sc x
 * (q - 32), |w'| <= 4096) is split as w' = lo + 128 hi, lo = w' & 127 and
 * hi = w' >> 7 (both signed bytes), and the block's sum is C(lo) + 128
 * C(hi): two products of K = 256 instead of eight of K = 32 and a
 * multiply per sub-block. That is the exact integer sum of sc x part over
 * the sub-blocks (int32 wraps alike on both sides, and the true sum fits).
 * The mins (Q4_K/Q5_K) multiply x's sums of 32 in word pairs (VPDPWSSD),
 * one lane an input row. */
#include "backend/cpu/qdot.h"

#include "backend/cpu/scratch.h"
#include "core/error.h"

#include <string.h>

#define QA_ROWS 16 /* weight rows a tile (A) and input rows a group (B, C) */
#define QA_CHUNK 8 /* blocks whose C tiles are stored before their f32 steps */

bool qdot_amx_takes(enum dtype t)
{
    return t == DTYPE_Q8_0 || t == DTYPE_Q4_0 || t == DTYPE_Q5_0 || t == DTYPE_Q4_K ||
           t == DTYPE_Q5_K || t == DTYPE_Q6_K;
}

static bool qa_kquant(enum dtype t)
{
    return dtype_block(t) == QUANT_QKK;
}

/* x's quads in a block: 8 (Q8_0 x) or 64 (Q8_K x) */
static int qa_quads(enum dtype t)
{
    return dtype_block(t) / 4;
}

/* a group's block: the quads' tile rows (64 bytes each), dx[16] f32, and
 * for Q8_K x the sums' pairs xs[4][16] int32 */
static size_t qa_xblock_bytes(enum dtype t)
{
    return (size_t)64 * qa_quads(t) + 64 + (qa_kquant(t) ? 256 : 0);
}

size_t qdot_xt_group_bytes(enum dtype t, int n)
{
    return (size_t)(n / dtype_block(t)) * qa_xblock_bytes(t);
}

void qdot_pack_x_tiles(enum dtype t, const char *xq, size_t xq_ld, int m, int n, int g, char *xt)
{
    const bool kq = qa_kquant(t);
    const int qk = dtype_block(t), nb = n / qk, nq = qa_quads(t), i0 = g * QA_ROWS;
    const int rows = m - i0 < QA_ROWS ? m - i0 : QA_ROWS;
    const size_t xb = kq ? sizeof(struct quant_q8_k) : sizeof(struct quant_q8_0);
    memset(xt, 0, (size_t)nb * qa_xblock_bytes(t));
    for (int b = 0; b < nb; b++, xt += qa_xblock_bytes(t))
        for (int i = 0; i < rows; i++) {
            const char *blk = xq + (size_t)(i0 + i) * xq_ld + (size_t)b * xb;
            const char *qs = blk + (kq ? 4 : 2);
            for (int q = 0; q < nq; q++)
                memcpy(xt + 64 * q + 4 * i, qs + 4 * q, 4);
            float d;
            if (kq) {
                memcpy(&d, blk, 4);
                int16_t bs[QUANT_QKK / 16];
                memcpy(bs, blk + 4 + QUANT_QKK, sizeof(bs));
                for (int p = 0; p < 4; p++) {
                    const int lo = bs[4 * p] + bs[4 * p + 1], hi = bs[4 * p + 2] + bs[4 * p + 3];
                    const uint32_t v = (uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16;
                    memcpy(xt + 64 * nq + 64 + 64 * p + 4 * i, &v, 4);
                }
            } else {
                uint16_t h;
                memcpy(&h, blk, 2);
                d = f16_to_f32(h);
            }
            memcpy(xt + 64 * nq + 4 * i, &d, 4);
        }
}

#if defined(__x86_64__)
#include <immintrin.h>

#include "backend/cpu/amx_tiles.h"

#define QA_INLINE static inline __attribute__((always_inline))

/* A tile's blocks' scales, one lane a weight row */
struct qa_scales {
    float d[QA_ROWS], dmin[QA_ROWS];
    int32_t mn[QA_ROWS][4]; /* Q4_K/Q5_K: mins of sub-blocks 2p, 2p + 1 as int16 pairs */
};

QA_INLINE float qa_f16(const char *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h); /* exact, as f16_to_f32 */
}

/* ---- a weight row's blocks unpacked into A's rows ----
 * q: the row's first block's quants; block b, component c at
 * q + (b ncomp + c) QA_ROWS qk (the tile's rows qk bytes apart) */

/* the 32-element types: signed quants (Q8_0 copied, Q4_0 less 8, Q5_0 less 16) */
QA_INLINE void qa_unpack_32(enum dtype t, const char *w, int8_t *q, struct qa_scales *sc, int r,
                            int nb)
{
    const size_t wb = quant_block_bytes(t);
    const __m128i lo4 = _mm_set1_epi8(15);
    for (int b = 0; b < nb; b++, w += wb, q += QA_ROWS * 32) {
        sc[b].d[r] = qa_f16(w);
        __m256i v;
        if (t == DTYPE_Q8_0) {
            v = _mm256_loadu_si256((const __m256i *)(w + 2));
        } else {
            const char *qs = w + (t == DTYPE_Q4_0 ? 2 : 6);
            const __m128i p = _mm_loadu_si128((const __m128i *)qs);
            v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(p, 4), lo4), _mm_and_si128(p, lo4));
            if (t == DTYPE_Q4_0) {
                v = _mm256_sub_epi8(v, _mm256_set1_epi8(8));
            } else { /* element j's fifth bit: bit j of qh */
                uint32_t qh;
                memcpy(&qh, w + 2, 4);
                const __m256i five = _mm256_maskz_set1_epi8(qh, 16);
                v = _mm256_sub_epi8(_mm256_or_si256(v, five), _mm256_set1_epi8(16));
            }
        }
        _mm256_storeu_si256((__m256i *)q, v);
    }
}

/* 32 quants (unsigned bytes, or less a bias) times a scale per 16 as words,
 * split into lo and hi bytes */
QA_INLINE void qa_fold(__m256i q8, __m512i scale, int bias, int8_t *lo, int8_t *hi)
{
    const __m512i w = _mm512_mullo_epi16(
        _mm512_sub_epi16(_mm512_cvtepu8_epi16(q8), _mm512_set1_epi16((short)bias)), scale);
    _mm256_storeu_si256((__m256i *)lo,
                        _mm512_cvtepi16_epi8(_mm512_and_si512(w, _mm512_set1_epi16(127))));
    _mm256_storeu_si256((__m256i *)hi, _mm512_cvtepi16_epi8(_mm512_srai_epi16(w, 7)));
}

QA_INLINE void qa_unpack_45k(const char *w, int8_t *q, struct qa_scales *sc, int r, int nb,
                             bool five)
{
    const size_t wb = five ? sizeof(struct quant_q5_k) : sizeof(struct quant_q4_k);
    const __m256i lo4 = _mm256_set1_epi8(15);
    for (int b = 0; b < nb; b++, w += wb, q += 2 * QA_ROWS * 256) {
        const char *qs = w + (five ? 48 : 16);
        const __m256i h = five ? _mm256_loadu_si256((const __m256i *)(w + 16)) : lo4;
        uint8_t s[8], mn[8];
        for (int j = 0; j < 8; j++)
            quant_scale_min(j, (const uint8_t *)w + 4, &s[j], &mn[j]);
        for (int j = 0; j < 4; j++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
            __m256i q0 = _mm256_and_si256(v, lo4);
            __m256i q1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
            if (five) { /* bit s of qh[l]: sub-block s's fifth bit of element l */
                const __m256i b0 = _mm256_set1_epi8((char)(1u << (2 * j)));
                const __m256i b1 = _mm256_set1_epi8((char)(1u << (2 * j + 1)));
                q0 = _mm256_or_si256(q0, _mm256_maskz_set1_epi8(_mm256_test_epi8_mask(h, b0), 16));
                q1 = _mm256_or_si256(q1, _mm256_maskz_set1_epi8(_mm256_test_epi8_mask(h, b1), 16));
            }
            int8_t *e = q + 64 * j; /* elements 64 j .. 64 j + 63 */
            qa_fold(q0, _mm512_set1_epi16(s[2 * j]), 0, e, e + QA_ROWS * 256);
            qa_fold(q1, _mm512_set1_epi16(s[2 * j + 1]), 0, e + 32, e + QA_ROWS * 256 + 32);
        }
        for (int p = 0; p < 4; p++)
            sc[b].mn[r][p] = (int32_t)((uint32_t)mn[2 * p] | (uint32_t)mn[2 * p + 1] << 16);
        sc[b].d[r] = qa_f16(w);
        sc[b].dmin[r] = qa_f16(w + 2);
    }
}

QA_INLINE void qa_unpack_6k(const char *w, int8_t *q, struct qa_scales *sc, int r, int nb)
{
    const __m256i lo4 = _mm256_set1_epi8(15), three = _mm256_set1_epi8(3);
    for (int b = 0; b < nb; b++, w += sizeof(struct quant_q6_k), q += 2 * QA_ROWS * 256) {
        const int8_t *s = (const int8_t *)w + 192;
        for (int h = 0; h < 2; h++) {
            const __m256i la = _mm256_loadu_si256((const __m256i *)(w + 64 * h));
            const __m256i lb = _mm256_loadu_si256((const __m256i *)(w + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(w + 128 + 32 * h));
            const __m256i lows[4] = {_mm256_and_si256(la, lo4), _mm256_and_si256(lb, lo4),
                                     _mm256_and_si256(_mm256_srli_epi16(la, 4), lo4),
                                     _mm256_and_si256(_mm256_srli_epi16(lb, 4), lo4)};
            for (int k = 0; k < 4; k++) {
                /* elements 128 h + 32 k + l: sub-blocks 8 h + 2 k (l < 16), + 1 */
                const __m256i hi =
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), three), 4);
                const int s0 = 8 * h + 2 * k;
                const __m512i scale =
                    _mm512_inserti64x4(_mm512_set1_epi16(s[s0]), _mm256_set1_epi16(s[s0 + 1]), 1);
                int8_t *e = q + 128 * h + 32 * k;
                qa_fold(_mm256_or_si256(lows[k], hi), scale, 32, e, e + QA_ROWS * 256);
            }
        }
        sc[b].d[r] = qa_f16(w + 208);
        sc[b].dmin[r] = 0.0f;
    }
}

/* ---- the products ---- */

/* tiles: 0-3 C (two blocks of K-quants' lo and hi, or four blocks of the
 * 32-element types), 4 and 5 A, 6 and 7 B; for K = 32 (the 32-element
 * types) A is 32 bytes a row and B 8 rows of quads */
static void qa_configure(bool kq)
{
    const uint16_t k = kq ? 64 : 32;
    const uint8_t kr = kq ? 16 : 8;
    amx_tiles_configure((const uint16_t[]){64, 64, 64, 64, k, k, 64, 64},
                        (const uint8_t[]){16, 16, 16, 16, 16, 16, kr, kr}, 8);
}

/* Block b of the tile of weight rows against a group of x: its C tiles to
 * cb (ncomp tiles of 16 x 16 int32). a: the block's first A tile, rows
 * a_ld bytes apart (the K-quants' hi tile at a + hi_off); xb: the block's
 * tiles of x. */
QA_INLINE void qa_block_k(const int8_t *a, size_t a_ld, size_t hi_off, const char *xb, int32_t *cb,
                          int set)
{
#define QA_K(C0, C1)                                                                               \
    do {                                                                                           \
        _tile_zero(C0);                                                                            \
        _tile_zero(C1);                                                                            \
        for (int j = 0; j < 4; j += 2) {                                                           \
            _tile_loadd(6, xb + 1024 * j, 64);                                                     \
            _tile_loadd(4, a + 64 * j, a_ld);                                                      \
            _tile_loadd(5, a + hi_off + 64 * j, a_ld);                                             \
            _tile_dpbssd(C0, 4, 6);                                                                \
            _tile_dpbssd(C1, 5, 6);                                                                \
            _tile_loadd(7, xb + 1024 * (j + 1), 64);                                               \
            _tile_loadd(4, a + 64 * (j + 1), a_ld);                                                \
            _tile_loadd(5, a + hi_off + 64 * (j + 1), a_ld);                                       \
            _tile_dpbssd(C0, 4, 7);                                                                \
            _tile_dpbssd(C1, 5, 7);                                                                \
        }                                                                                          \
        _tile_stored(C0, cb, 64);                                                                  \
        _tile_stored(C1, cb + 256, 64);                                                            \
    } while (0)
    if (set)
        QA_K(2, 3);
    else
        QA_K(0, 1);
#undef QA_K
}

/* the 32-element types: four blocks a step (n <= 4 of them) */
QA_INLINE void qa_blocks_32(const int8_t *a, size_t a_bstep, size_t a_ld, const char *xb,
                            size_t x_bstep, int32_t *cb, int n)
{
#define QA_32(C, k, A, B)                                                                          \
    if (k < n) {                                                                                   \
        _tile_zero(C);                                                                             \
        _tile_loadd(A, a + (k)*a_bstep, a_ld);                                                     \
        _tile_loadd(B, xb + (k)*x_bstep, 64);                                                      \
        _tile_dpbssd(C, A, B);                                                                     \
    }
    QA_32(0, 0, 4, 6)
    QA_32(1, 1, 5, 7)
    QA_32(2, 2, 4, 6)
    QA_32(3, 3, 5, 7)
#undef QA_32
    if (0 < n)
        _tile_stored(0, cb, 64);
    if (1 < n)
        _tile_stored(1, cb + 256, 64);
    if (2 < n)
        _tile_stored(2, cb + 512, 64);
    if (3 < n)
        _tile_stored(3, cb + 768, 64);
}

/* qdot_sum8 lane-wise, lanes i < rows to y[i ldy] */
QA_INLINE void qa_store(const __m512 p[8], float *y, size_t ldy, int rows)
{
    const __m512 s =
        _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(p[0], p[4]), _mm512_add_ps(p[2], p[6])),
                      _mm512_add_ps(_mm512_add_ps(p[1], p[5]), _mm512_add_ps(p[3], p[7])));
    const __m512i idx =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32((int)ldy));
    _mm512_mask_i32scatter_ps(y, (__mmask16)((1u << rows) - 1u), idx, s, 4);
}

/* The f32 steps of blocks b0 .. b0 + n - 1 (n <= 8, b0 a multiple of 8, so
 * block b0 + k adds to partial k) for weight row r of the tile: p its 8
 * partials (16 input rows a vector). */
QA_INLINE void qa_steps(__m512 p[8], const int32_t *cbuf, const struct qa_scales *sc,
                        const char *xg, size_t xbb, int nq, int b0, int n, int r, int ncomp,
                        bool mins)
{
#pragma GCC unroll 8
    for (int k = 0; k < QA_CHUNK; k++) {
        if (k >= n)
            break;
        const int b = b0 + k;
        const int32_t *c = cbuf + (size_t)k * ncomp * 256 + 16 * r;
        const char *xb = xg + (size_t)b * xbb + 64 * nq;
        const __m512 dx = _mm512_loadu_ps((const float *)xb);
        __m512i is = _mm512_loadu_si512(c);
        if (ncomp == 2)
            is = _mm512_add_epi32(is, _mm512_slli_epi32(_mm512_loadu_si512(c + 256), 7));
        const __m512 d = _mm512_mul_ps(_mm512_set1_ps(sc[b].d[r]), dx);
        p[k] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(is), p[k]);
        if (mins) {
            __m512i ms = _mm512_setzero_si512();
            for (int q = 0; q < 4; q++)
                ms = _mm512_dpwssd_epi32(ms, _mm512_loadu_si512(xb + 64 + 64 * q),
                                         _mm512_set1_epi32(sc[b].mn[r][q]));
            const __m512 dm = _mm512_sub_ps(_mm512_setzero_ps(),
                                            _mm512_mul_ps(_mm512_set1_ps(sc[b].dmin[r]), dx));
            p[k] = _mm512_fmadd_ps(dm, _mm512_cvtepi32_ps(ms), p[k]);
        }
    }
}

/* a unit's f32 steps: blocks b0 .. b0 + n - 1 of group xg (C tiles cb)
 * for the tile's nr weight rows, their partials from pbuf (unless first)
 * and back to it, or (last) summed into y */
struct qa_unit {
    const int32_t *cb;
    const struct qa_scales *sc;
    const char *xg;
    size_t xbb;
    int nq, b0, n, nr;
    bool first, last;
    __m512 *pbuf;
    float *y;
    size_t ldy;
    int rows;
};

QA_INLINE void qa_unit_steps(const struct qa_unit *u, const int n, const int ncomp, const bool mins)
{
    for (int r = 0; r < u->nr; r++) {
        __m512 p[8];
        for (int k = 0; k < 8; k++)
            p[k] = u->first ? _mm512_setzero_ps() : u->pbuf[8 * r + k];
        qa_steps(p, u->cb, u->sc, u->xg, u->xbb, u->nq, u->b0, n, r, ncomp, mins);
        if (u->last)
            qa_store(p, u->y + r, u->ldy, u->rows);
        else
            for (int k = 0; k < 8; k++)
                u->pbuf[8 * r + k] = p[k];
    }
}

QA_INLINE void qa_unit_steps_n(const struct qa_unit *u, const int ncomp, const bool mins)
{
    if (u->n == QA_CHUNK)
        qa_unit_steps(u, QA_CHUNK, ncomp, mins);
    else
        qa_unit_steps(u, u->n, ncomp, mins);
}

int qdot_tile_amx(const struct qdot_args *a, int r0, int r1)
{
    const struct weight_view *w = a->w;
    const enum dtype t = w->dtype;
    if (!qdot_amx_takes(t)) {
        qdot_rows_vnni(a, r0, r1);
        return 0;
    }
    const bool kq = qa_kquant(t), mins = t == DTYPE_Q4_K || t == DTYPE_Q5_K;
    const int qk = dtype_block(t), nb = w->cols / qk, nq = qa_quads(t), ncomp = kq ? 2 : 1;
    const size_t w_ld = dtype_row_bytes(t, w->ld), bb = quant_block_bytes(t);
    const size_t xbb = qa_xblock_bytes(t);
    /* the thread's scratch: A's rows ([b][c][row][qk]), the scales, C's
     * tiles of a chunk, the partials between chunks */
    const size_t abytes = (size_t)nb * ncomp * QA_ROWS * qk;
    const size_t sbytes = (size_t)nb * sizeof(struct qa_scales);
    const size_t cbytes = (size_t)2 * QA_CHUNK * ncomp * 1024, pbytes = (size_t)QA_ROWS * 8 * 64;
    char *buf = cpu_scratch(CPU_SCRATCH_Q_DEQ, abytes + sbytes + cbytes + pbytes);
    if (!buf)
        return ERR_NOMEM;
    int8_t *qa = (int8_t *)buf;
    struct qa_scales *sc = (struct qa_scales *)(buf + abytes);
    int32_t *cbuf = (int32_t *)(buf + abytes + sbytes);
    __m512 *pbuf = (__m512 *)(buf + abytes + sbytes + cbytes);
    const int ng = (a->m + QA_ROWS - 1) / QA_ROWS;
    qa_configure(kq);
    for (int rt = r0; rt < r1; rt += QA_ROWS) {
        const int nr = r1 - rt < QA_ROWS ? r1 - rt : QA_ROWS;
        /* A: Q8_0's whole tiles in place, every other unpacked */
        const bool in_place = t == DTYPE_Q8_0 && nr == QA_ROWS;
        const int8_t *a0 = qa;
        size_t a_ld = (size_t)qk, a_bstep = (size_t)ncomp * QA_ROWS * qk;
        if (nr < QA_ROWS) {
            memset(qa, 0, abytes);
            memset(sc, 0, sbytes);
        }
        for (int r = 0; r < nr; r++) {
            const char *row = (const char *)w->data + (size_t)(rt + r) * w_ld;
            int8_t *q = qa + (size_t)r * qk;
            switch (t) {
            case DTYPE_Q8_0:
                if (in_place) {
                    for (int b = 0; b < nb; b++)
                        sc[b].d[r] = qa_f16(row + (size_t)b * bb);
                    break;
                }
                /* fall through */
            case DTYPE_Q4_0:
            case DTYPE_Q5_0:
                qa_unpack_32(t, row, q, sc, r, nb);
                break;
            case DTYPE_Q4_K:
            case DTYPE_Q5_K:
                qa_unpack_45k(row, q, sc, r, nb, t == DTYPE_Q5_K);
                break;
            case DTYPE_Q6_K:
                qa_unpack_6k(row, q, sc, r, nb);
                break;
            default:
                break;
            }
        }
        if (in_place) {
            a0 = (const int8_t *)w->data + (size_t)rt * w_ld + 2;
            a_ld = w_ld;
            a_bstep = bb;
        }
        /* units of (group, chunk of blocks) in order: each unit's products
         * are issued before the previous unit's f32 steps, so the tile unit
         * works while the vector units read the last C tiles */
        const int nch = (nb + QA_CHUNK - 1) / QA_CHUNK, nu = ng * nch;
        for (int u = 0; u <= nu; u++) {
            if (u < nu) {
                const int g = u / nch, b0 = (u % nch) * QA_CHUNK;
                const int n = nb - b0 < QA_CHUNK ? nb - b0 : QA_CHUNK;
                const char *xg = a->xp + (size_t)g * a->xp_ld;
                int32_t *cb = cbuf + (size_t)(u & 1) * QA_CHUNK * ncomp * 256;
                if (kq) {
                    for (int k = 0; k < n; k++)
                        qa_block_k(a0 + (size_t)(b0 + k) * a_bstep, a_ld, (size_t)QA_ROWS * qk,
                                   xg + (size_t)(b0 + k) * xbb, cb + (size_t)k * 512, k & 1);
                } else {
                    for (int k = 0; k < n; k += 4)
                        qa_blocks_32(a0 + (size_t)(b0 + k) * a_bstep, a_bstep, a_ld,
                                     xg + (size_t)(b0 + k) * xbb, xbb, cb + (size_t)k * 256,
                                     n - k < 4 ? n - k : 4);
                }
            }
            if (u == 0)
                continue;
            /* the previous unit's f32 steps, a weight row at a time */
            const int v = u - 1, g = v / nch, b0 = (v % nch) * QA_CHUNK;
            const int n = nb - b0 < QA_CHUNK ? nb - b0 : QA_CHUNK;
            const char *xg = a->xp + (size_t)g * a->xp_ld;
            const int32_t *cb = cbuf + (size_t)(v & 1) * QA_CHUNK * ncomp * 256;
            const int rows = a->m - g * QA_ROWS < QA_ROWS ? a->m - g * QA_ROWS : QA_ROWS;
            float *y = a->y + (size_t)g * QA_ROWS * a->ldy + rt;
            const struct qa_unit un = {.cb = cb,
                                       .sc = sc,
                                       .xg = xg,
                                       .xbb = xbb,
                                       .nq = nq,
                                       .b0 = b0,
                                       .n = n,
                                       .nr = nr,
                                       .first = b0 == 0,
                                       .last = b0 + QA_CHUNK >= nb,
                                       .pbuf = pbuf,
                                       .y = y,
                                       .ldy = a->ldy,
                                       .rows = rows};
            /* the steps with their shape known to the compiler, so that a
             * row's 8 partials stay in registers */
            if (!kq)
                qa_unit_steps_n(&un, 1, false);
            else if (mins)
                qa_unit_steps_n(&un, 2, true);
            else
                qa_unit_steps_n(&un, 2, false);
        }
    }
    _tile_release();
    return 0;
}

#else
int qdot_tile_amx(const struct qdot_args *a, int r0, int r1)
{
    qdot_rows_scalar(a, r0, r1);
    return 0;
}
#endif
