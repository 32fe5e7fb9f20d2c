/* The quantized products of a decode batch on AMX-INT8 tiles (qdot.h's
 * qdot_tile_amx_few): qdot_amx.c's roles swapped. This file alone is
 * compiled with AMX-TILE, AMX-INT8 and AVX-512 (BW, VL, VNNI;
 * CMakeLists.txt), and runs only where qlinear.c found them and Linux
 * granted the tile data.
 *
 * x is the A operand: m input rows (up to 16 a group), each x block's
 * quants read in place from the quantized rows (q_prepare's, no layout),
 * K = 32 a product. The weights are the B operand, 16 weight rows a tile
 * in TDPBSSD's VNNI layout: tile row q holds quad q (elements 4q .. 4q +
 * 3) of each of the 16 rows. C is m input rows x 16 weight rows, so a row
 * of C (one input row, 16 weight rows) is one 512-bit vector, the f32
 * steps run on m of them per block (qdot_amx.c's always on 16), and y's
 * 16 weight rows of an input row are one store.
 *
 * Why: a tile product of m <= 8 rows of A costs about 0.6 of a full one
 * on this Xeon (TDPBSSD 16 x 16 x 64: 11.3 TSC ticks, m = 1..8: 6.5-7.7,
 * with its B load 11.9 whatever m), so the products stay cheap; what
 * qdot_amx.c paid at a few rows was its unpacking (6-bit scales decoded
 * per row, each 32 quants widened to words, multiplied, split) and f32
 * steps for 16 input rows. Here the weights are laid out from their packed
 * bytes: 16 rows' runs of 32 bytes transposed in 4-byte units (8 loads, 24
 * shuffles), then split into nibbles (a quad of packed bytes is a quad of
 * elements in both nibbles: Q4_0's elements j and j + 16, Q4_K's 64g + j
 * and 64g + 32 + j), the scales decoded in the lanes, one weight row a
 * lane (4 gathers a Q4_K block for 16 rows).
 *
 * The sums are the single-row kernels' exact integers: a block's for the
 * types of 32, a sub-block's of 32 for Q4_K, whose 6-bit scales multiply
 * C's rows (VPMULLD; C per sub-block needs no folding into 16-bit
 * weights); the mins multiply x's sums of 32 in word pairs (VPDPWSSD).
 * The f32 steps are qdot.h's, block b into partial b % 8, reduced as
 * qdot_sum8: the same bits (test_quant's multirow_bitwise, isa_bitwise).
 * Q5_K, Q6_K and Q5_1 go to vnni-near's single-row kernel when forced (the
 * calibration offers this kernel only the types it lays out). */
#include "backend/cpu/qdot.h"

#include "backend/cpu/scratch.h"
#include "core/error.h"

#include <string.h>

#define QF_ROWS 16 /* weight rows a tile (B's columns) and input rows a group (A) */

bool qdot_amx_few_takes(enum dtype t)
{
    return t == DTYPE_Q8_0 || t == DTYPE_Q4_0 || t == DTYPE_Q5_0 || t == DTYPE_Q4_K;
}

#if defined(__x86_64__)
#include <immintrin.h>

#include "backend/cpu/amx_tiles.h"

#define QF_INLINE static inline __attribute__((always_inline))

/* 16 rows' 8 dwords (row r at p + r ld) transposed: out[j] lane r = dword
 * j of row r. Rows r and r + 8 share a vector, its halves transposed 8 x 8
 * alike (unpacks of 32 and 64 bits), the quarters put in order last. */
QF_INLINE void qf_t16x8(const char *p, size_t ld, __m512i out[8])
{
    __m512i v[8], t[8], u[8];
    for (int r = 0; r < 8; r++)
        v[r] = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p + (size_t)r * ld))),
            _mm256_loadu_si256((const __m256i *)(p + (size_t)(r + 8) * ld)), 1);
    for (int r = 0; r < 8; r += 2) {
        t[r] = _mm512_unpacklo_epi32(v[r], v[r + 1]);
        t[r + 1] = _mm512_unpackhi_epi32(v[r], v[r + 1]);
    }
    for (int r = 0; r < 8; r += 4) {
        u[r] = _mm512_unpacklo_epi64(t[r], t[r + 2]);
        u[r + 1] = _mm512_unpackhi_epi64(t[r], t[r + 2]);
        u[r + 2] = _mm512_unpacklo_epi64(t[r + 1], t[r + 3]);
        u[r + 3] = _mm512_unpackhi_epi64(t[r + 1], t[r + 3]);
    }
    /* u[q] (q < 4), quarters: rows 0-3 dword q, rows 0-3 dword q + 4, rows
     * 8-11 dword q, rows 8-11 dword q + 4; u[q + 4] the same of rows 4-7,
     * 12-15 */
    const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
    const __m512i hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    for (int q = 0; q < 4; q++) {
        out[q] = _mm512_permutex2var_epi64(u[q], lo, u[q + 4]);
        out[q + 4] = _mm512_permutex2var_epi64(u[q], hi, u[q + 4]);
    }
}

/* 16 rows' 4 dwords transposed: rows r, r + 4, r + 8, r + 12 in the
 * quarters of one vector, each quarter a 4 x 4 transpose */
QF_INLINE void qf_t16x4(const char *p, size_t ld, __m512i out[4])
{
    __m512i v[4];
    for (int r = 0; r < 4; r++) {
        __m512i a = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p + (size_t)r * ld)));
        a = _mm512_inserti32x4(a, _mm_loadu_si128((const __m128i *)(p + (size_t)(r + 4) * ld)), 1);
        a = _mm512_inserti32x4(a, _mm_loadu_si128((const __m128i *)(p + (size_t)(r + 8) * ld)), 2);
        v[r] =
            _mm512_inserti32x4(a, _mm_loadu_si128((const __m128i *)(p + (size_t)(r + 12) * ld)), 3);
    }
    const __m512i t0 = _mm512_unpacklo_epi32(v[0], v[1]), t1 = _mm512_unpackhi_epi32(v[0], v[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(v[2], v[3]), t3 = _mm512_unpackhi_epi32(v[2], v[3]);
    out[0] = _mm512_unpacklo_epi64(t0, t2);
    out[1] = _mm512_unpackhi_epi64(t0, t2);
    out[2] = _mm512_unpacklo_epi64(t1, t3);
    out[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* 16 rows' f16 at p + r ld, as f32 lanes */
QF_INLINE __m512 qf_f16s(const char *p, __m512i offs)
{
    const __m512i v = _mm512_i32gather_epi32(offs, p, 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

/* A block of 16 weight rows laid out: B's tiles (bt: 8 rows of 64 bytes a
 * block of 32 or sub-block) and the lanes' scales */
struct qf_wblock {
    __m512 d, dmin;
    __m512i sc[8]; /* Q4_K: sub-block scales */
    __m512i mn[4]; /* Q4_K: mins of sub-blocks 2p, 2p + 1 as int16 pairs */
};

/* Block b of the types of 32 (w: the tile's row 0's block, rows ld apart) */
QF_INLINE void qf_lay_32(enum dtype t, const char *w, size_t ld, __m512i offs, int8_t *bt,
                         struct qf_wblock *s)
{
    __m512i o[8];
    s->d = qf_f16s(w, offs);
    if (t == DTYPE_Q8_0) {
        qf_t16x8(w + 2, ld, o);
        for (int q = 0; q < 8; q++)
            _mm512_store_si512(bt + 64 * q, o[q]);
        return;
    }
    const __m512i lo4 = _mm512_set1_epi8(15);
    qf_t16x4(w + (t == DTYPE_Q4_0 ? 2 : 6), ld, o);
    if (t == DTYPE_Q4_0) {
        const __m512i eight = _mm512_set1_epi8(8);
        for (int q = 0; q < 4; q++) {
            _mm512_store_si512(bt + 64 * q, _mm512_sub_epi8(_mm512_and_si512(o[q], lo4), eight));
            _mm512_store_si512(
                bt + 64 * (q + 4),
                _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(o[q], 4), lo4), eight));
        }
        return;
    }
    /* Q5_0: element j's fifth bit is bit j of qh; quad q's four bits
     * spread to its bytes' bit 4 (a multiply puts bit k at byte k's bit
     * 0..3 positions apart, the mask keeps one per byte) */
    const __m512i qh = _mm512_i32gather_epi32(offs, w + 2, 1);
    const __m512i spread = _mm512_set1_epi32(0x00204081), one = _mm512_set1_epi32(0x01010101);
    const __m512i sixteen = _mm512_set1_epi8(16);
    for (int q = 0; q < 8; q++) {
        const __m512i bits = _mm512_and_si512(_mm512_srli_epi32(qh, 4 * q), _mm512_set1_epi32(15));
        const __m512i five =
            _mm512_slli_epi32(_mm512_and_si512(_mm512_mullo_epi32(bits, spread), one), 4);
        const __m512i nib = q < 4 ? _mm512_and_si512(o[q], lo4)
                                  : _mm512_and_si512(_mm512_srli_epi16(o[q - 4], 4), lo4);
        _mm512_store_si512(bt + 64 * q, _mm512_sub_epi8(_mm512_or_si512(nib, five), sixteen));
    }
}

/* Block b of Q4_K: sub-block s's 8 tile rows at bt + 512 s */
QF_INLINE void qf_lay_4k(const char *w, size_t ld, __m512i offs, int8_t *bt, struct qf_wblock *s)
{
    const __m512i lo4 = _mm512_set1_epi8(15);
    for (int g = 0; g < 4; g++) {
        __m512i o[8];
        qf_t16x8(w + 16 + 32 * g, ld, o);
        for (int q = 0; q < 8; q++) {
            _mm512_store_si512(bt + 512 * (2 * g) + 64 * q, _mm512_and_si512(o[q], lo4));
            _mm512_store_si512(bt + 512 * (2 * g + 1) + 64 * q,
                               _mm512_and_si512(_mm512_srli_epi16(o[q], 4), lo4));
        }
    }
    const __m512i dd = _mm512_i32gather_epi32(offs, w, 1);
    s->d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
    s->dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
    /* quant_scale_min in the lanes: d0, d1, d2 the 12 bytes as dwords */
    const __m512i d0 = _mm512_i32gather_epi32(offs, w + 4, 1);
    const __m512i d1 = _mm512_i32gather_epi32(offs, w + 8, 1);
    const __m512i d2 = _mm512_i32gather_epi32(offs, w + 12, 1);
    const __m512i m63 = _mm512_set1_epi32(63), m15 = _mm512_set1_epi32(15),
                  m3 = _mm512_set1_epi32(3);
    __m512i mn[8];
    for (int j = 0; j < 4; j++) {
        s->sc[j] = _mm512_and_si512(_mm512_srli_epi32(d0, 8 * j), m63);
        mn[j] = _mm512_and_si512(_mm512_srli_epi32(d1, 8 * j), m63);
        s->sc[j + 4] = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi32(d2, 8 * j), m15),
            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(d0, 8 * j + 6), m3), 4));
        mn[j + 4] = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi32(d2, 8 * j + 4), m15),
            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(d1, 8 * j + 6), m3), 4));
    }
    for (int p = 0; p < 4; p++)
        s->mn[p] = _mm512_or_si512(mn[2 * p], _mm512_slli_epi32(mn[2 * p + 1], 16));
}

/* tiles: 0-3 C (m rows x 16 int32), 4 and 5 A (m rows x 32 bytes of x),
 * 6 and 7 B (8 rows x 64 bytes: 32 elements of 16 weight rows) */
static void qf_configure(int m)
{
    amx_tiles_configure((const uint16_t[]){64, 64, 64, 64, 32, 32, 64, 64},
                        (const uint8_t[]){(uint8_t)m, (uint8_t)m, (uint8_t)m, (uint8_t)m,
                                          (uint8_t)m, (uint8_t)m, 8, 8},
                        8);
}

/* The products as a stream: product j into C tile j % 4, its store
 * issued only when product j + 4 is (a tile store right after its
 * TDPBSSD waits for the product, about the time of four). pend[c]: where
 * C tile c's rows go, NULL when stored. */
struct qf_stream {
    long j;
    int32_t *pend[4];
};

/* one product of K = 32: x's rows at xa (xa_ld apart), B's 8 rows at bt,
 * C's m rows to cb (64 bytes apart) */
QF_INLINE void qf_product(struct qf_stream *st, const char *xa, size_t xa_ld, const int8_t *bt,
                          int32_t *cb)
{
    const int c = (int)(st->j & 3);
#define QF_P(C, A, B)                                                                              \
    do {                                                                                           \
        if (st->pend[C])                                                                           \
            _tile_stored(C, st->pend[C], 64);                                                      \
        _tile_zero(C);                                                                             \
        _tile_loadd(A, xa, xa_ld);                                                                 \
        _tile_loadd(B, bt, 64);                                                                    \
        _tile_dpbssd(C, A, B);                                                                     \
    } while (0)
    switch (c) {
    case 0:
        QF_P(0, 4, 6);
        break;
    case 1:
        QF_P(1, 5, 7);
        break;
    case 2:
        QF_P(2, 4, 6);
        break;
    default:
        QF_P(3, 5, 7);
        break;
    }
#undef QF_P
    st->pend[c] = cb;
    st->j++;
}

/* the stream's last products stored */
static void qf_stream_flush(struct qf_stream *st)
{
    if (st->pend[0])
        _tile_stored(0, st->pend[0], 64);
    if (st->pend[1])
        _tile_stored(1, st->pend[1], 64);
    if (st->pend[2])
        _tile_stored(2, st->pend[2], 64);
    if (st->pend[3])
        _tile_stored(3, st->pend[3], 64);
    memset(st->pend, 0, sizeof(st->pend));
}

/* input row i's x of block b: its scale, and (Q8_K) its sums of 32 */
QF_INLINE float qf_dx(bool kq, const char *xb)
{
    if (kq) {
        float d;
        memcpy(&d, xb, 4);
        return d;
    }
    uint16_t h;
    memcpy(&h, xb, 2);
    return _cvtsh_ss(h);
}

/* The f32 steps of block b for the group's m input rows: C's rows at cb
 * (m rows a block of 32 or sub-block), partial b % 8 of row i at p[8 i] */
QF_INLINE void qf_steps(bool kq, const int32_t *cb, const struct qf_wblock *s, const char *xq,
                        size_t xq_ld, size_t xbb, int b, int m, __m512 *p)
{
    for (int i = 0; i < m; i++) {
        const char *xb = xq + (size_t)i * xq_ld + (size_t)b * xbb;
        const __m512 dx = _mm512_set1_ps(qf_dx(kq, xb));
        __m512i is;
        if (!kq) {
            is = _mm512_load_si512(cb + 16 * i);
        } else {
            is = _mm512_mullo_epi32(s->sc[0], _mm512_load_si512(cb + 16 * i));
            for (int k = 1; k < 8; k++)
                is = _mm512_add_epi32(
                    is, _mm512_mullo_epi32(s->sc[k], _mm512_load_si512(cb + 16 * (m * k + i))));
        }
        __m512 *pk = p + 8 * i + b % 8;
        __m512 acc = _mm512_fmadd_ps(_mm512_mul_ps(s->d, dx), _mm512_cvtepi32_ps(is), *pk);
        if (kq) {
            int16_t bs[QUANT_QKK / 16];
            memcpy(bs, xb + 4 + QUANT_QKK, sizeof(bs));
            __m512i ms = _mm512_setzero_si512();
            for (int q = 0; q < 4; q++) {
                const int lo = bs[4 * q] + bs[4 * q + 1], hi = bs[4 * q + 2] + bs[4 * q + 3];
                const uint32_t v = (uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16;
                ms = _mm512_dpwssd_epi32(ms, s->mn[q], _mm512_set1_epi32((int)v));
            }
            const __m512 dm = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(s->dmin, dx));
            acc = _mm512_fmadd_ps(dm, _mm512_cvtepi32_ps(ms), acc);
        }
        *pk = acc;
    }
}

/* a tile of 16 weight rows: its first row and row stride (a last tile of
 * fewer rows copied beside zero rows, so every lane reads whole blocks) */
struct qf_tile {
    const char *w;
    size_t ld;
    __m512i offs; /* row r at r ld */
};

static struct qf_tile qf_tile_at(const struct weight_view *w, size_t w_ld, size_t row_bytes, int rt,
                                 int r1, char *tail)
{
    const int nr = r1 - rt < QF_ROWS ? r1 - rt : QF_ROWS;
    struct qf_tile tl = {(const char *)w->data + (size_t)rt * w_ld, w_ld, _mm512_setzero_si512()};
    if (nr < QF_ROWS) {
        memset(tail, 0, row_bytes * QF_ROWS);
        for (int r = 0; r < nr; r++)
            memcpy(tail + (size_t)r * row_bytes, tl.w + (size_t)r * w_ld, row_bytes);
        tl.w = tail;
        tl.ld = row_bytes;
    }
    tl.offs =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32((int)tl.ld));
    return tl;
}

/* units (blocks of a tile) in flight: one laid out, the one before
 * multiplied, and lag units back the f32 steps, once the stream has
 * stored its C tiles (a tile load waits for the stores of its B to leave
 * the store buffer, and C's rows for the tile store); lag + 1 in the ring */
#define QF_RING 8

int qdot_tile_amx_few(const struct qdot_args *a, int r0, int r1)
{
    const struct weight_view *w = a->w;
    const enum dtype t = w->dtype;
    if (!qdot_amx_few_takes(t)) {
        qdot_rows_vnni_near(a, r0, r1);
        return 0;
    }
    const bool kq = t == DTYPE_Q4_K;
    const int nb = w->cols / dtype_block(t), nsub = kq ? 8 : 1;
    const size_t w_ld = dtype_row_bytes(t, w->ld), bb = quant_block_bytes(t);
    const size_t xbb = kq ? sizeof(struct quant_q8_k) : sizeof(struct quant_q8_0);
    const size_t row_bytes = (size_t)nb * bb;
    /* the thread's scratch: the ring's B tiles and C rows, the partials (8
     * per input row), a last tile's rows */
    const size_t btb = (size_t)nsub * 512, cbb = (size_t)nsub * 1024;
    const int ring = kq ? 4 : 8, lag = kq ? 3 : 6;
    const size_t pb = (size_t)QF_ROWS * 8 * 64, tailb = (row_bytes * QF_ROWS + 63) / 64 * 64;
    char *buf = cpu_scratch(CPU_SCRATCH_Q_DEQ, (size_t)ring * (btb + cbb) + pb + tailb);
    if (!buf)
        return ERR_NOMEM;
    int8_t *bt = (int8_t *)buf;
    int32_t *cbuf = (int32_t *)(buf + (size_t)ring * btb);
    __m512 *pbuf = (__m512 *)(buf + (size_t)ring * (btb + cbb));
    char *tail = buf + (size_t)ring * (btb + cbb) + pb;
    const int ntiles = (r1 - r0 + QF_ROWS - 1) / QF_ROWS, nu = ntiles * nb;
    const int lpr = (int)((row_bytes + 63) / 64);
    int configured = 0;
    for (int i0 = 0; i0 < a->m; i0 += QF_ROWS) {
        const int mg = a->m - i0 < QF_ROWS ? a->m - i0 : QF_ROWS;
        if (mg != configured) {
            if (configured)
                _tile_release();
            qf_configure(mg);
            configured = mg;
        }
        const char *xq = a->xq + (size_t)i0 * a->xq_ld;
        struct qf_tile tl = qf_tile_at(w, w_ld, row_bytes, r0, r1, tail);
        struct qf_wblock ws[QF_RING];
        struct qf_stream st = {0, {NULL, NULL, NULL, NULL}};
        const char *pf_row = NULL; /* the next line of the next tile to prefetch */
        int pf_off = 0, pf_left = 0, pf_per = 0;
        for (int u = 0; u < nu + lag; u++) {
            /* unit u laid out (block b of tile T) */
            if (u < nu) {
                const int T = u / nb, b = u % nb, rt = r0 + T * QF_ROWS;
                if (b == 0 && T > 0)
                    tl = qf_tile_at(w, w_ld, row_bytes, rt, r1, tail);
                /* the next tile's lines to L1, a share per block (the
                 * 16 rows' streams are more than the hardware follows) */
                if (b == 0) {
                    const int nx_rows = r1 - rt - QF_ROWS < QF_ROWS ? r1 - rt - QF_ROWS : QF_ROWS;
                    pf_left = nx_rows > 0 ? nx_rows * lpr : 0;
                    pf_per = (pf_left + nb - 1) / nb;
                    pf_row = (const char *)w->data + (size_t)(rt + QF_ROWS) * w_ld;
                    pf_off = 0;
                }
                for (int k = 0; k < pf_per && pf_left > 0; k++, pf_left--) {
                    _mm_prefetch(pf_row + pf_off, _MM_HINT_T0);
                    pf_off += 64;
                    if (pf_off >= lpr * 64) {
                        pf_off = 0;
                        pf_row += w_ld;
                    }
                }
                const char *wb = tl.w + (size_t)b * bb;
                if (kq)
                    qf_lay_4k(wb, tl.ld, tl.offs, bt + (size_t)(u % ring) * btb, &ws[u % ring]);
                else
                    qf_lay_32(t, wb, tl.ld, tl.offs, bt + (size_t)(u % ring) * btb, &ws[u % ring]);
            }
            /* unit u - 1's products */
            if (u >= 1 && u - 1 < nu) {
                const int v = u - 1, b = v % nb;
                const int8_t *bv = bt + (size_t)(v % ring) * btb;
                int32_t *cb = cbuf + (size_t)(v % ring) * (cbb / 4);
                const char *xa = xq + (size_t)b * xbb + (kq ? 4 : 2);
                for (int k = 0; k < nsub; k++)
                    qf_product(&st, xa + 32 * k, a->xq_ld, bv + 512 * k, cb + 16 * mg * k);
            }
            if (u == nu)
                qf_stream_flush(&st);
            /* unit u - lag's f32 steps; a tile's last block sums into y */
            if (u >= lag) {
                const int v = u - lag, T = v / nb, b = v % nb, rt = r0 + T * QF_ROWS;
                if (b == 0)
                    for (int k = 0; k < 8 * mg; k++)
                        pbuf[k] = _mm512_setzero_ps();
                qf_steps(kq, cbuf + (size_t)(v % ring) * (cbb / 4), &ws[v % ring], xq, a->xq_ld,
                         xbb, b, mg, pbuf);
                if (b == nb - 1) {
                    /* qdot_sum8 per input row: 16 weight rows of y in one store */
                    const int nr = r1 - rt < QF_ROWS ? r1 - rt : QF_ROWS;
                    const __mmask16 keep = (__mmask16)((1u << nr) - 1u);
                    for (int i = 0; i < mg; i++) {
                        const __m512 *p = pbuf + 8 * i;
                        const __m512 sum = _mm512_add_ps(
                            _mm512_add_ps(_mm512_add_ps(p[0], p[4]), _mm512_add_ps(p[2], p[6])),
                            _mm512_add_ps(_mm512_add_ps(p[1], p[5]), _mm512_add_ps(p[3], p[7])));
                        _mm512_mask_storeu_ps(a->y + (size_t)(i0 + i) * a->ldy + rt, keep, sum);
                    }
                }
            }
        }
    }
    if (configured)
        _tile_release();
    return 0;
}

#else
int qdot_tile_amx_few(const struct qdot_args *a, int r0, int r1)
{
    qdot_rows_scalar(a, r0, r1);
    return 0;
}
#endif
