/* The fused GEMV written once for every vector width: included by each
 * gemv_<isa>.c after it defines
 *
 *   gv_t                 a vector of GV_LANES floats
 *   gv_zero()            all zeros
 *   gv_load_f32(p)       GV_LANES floats from p (unaligned)
 *   gv_load_f16(p)       GV_LANES f16 at p widened
 *   gv_load_bf16(p)      GV_LANES bf16 at p widened
 *   gv_fma(a, b, c)      a * b + c
 *   gv_hsum(v)           the sum of v's lanes
 *   GEMV_ROWS_FN         the name of the gemv_rows_fn to define
 *
 * A kernel whose operands are not widened floats (VDPBF16PS: pairs of bf16)
 * defines instead GV_COLS columns per step, GV_WT / GV_XT the weight and
 * input operand types, gv_load_w(t, row, c), gv_load_x(p), GV_XELEM and
 * GV_XROWS(a) (the input rows' element type and start), gv_fma(w, x, acc),
 * and GEMV_BF16_ONLY when it takes bf16 weights alone.
 *
 * A kernel file that defines GEMV_HSUM8 has its vector file define
 * gv_hsum8(v, out): out[j] = gv_hsum(v[j]) for 8 vectors, bitwise the same
 * sums, in fewer instructions than 8 reductions one by one.
 *
 * The product is bound by reading the weights, so each widened weight vector
 * feeds GEMV_MB input rows and each input vector GEMV_R weight rows: a
 * GEMV_R x GEMV_MB block of accumulators, with the weight rows of a block
 * kept hot in L1/L2 while the input rows go by in groups of GEMV_MB. */
#include "backend/cpu/gemv_isa.h"

#include <stdbool.h>

#include "core/dtype.h"

#ifndef GEMV_R
#define GEMV_R 4 /* weight rows per block (a kernel file may set more) */
#endif
#ifndef GEMV_MB
#define GEMV_MB 4 /* input rows per block (a kernel file may set up to 8) */
#endif
#define GEMV_MT 16 /* input rows sharing one pass over the weights */
/* Weight bytes prefetched ahead of the loads: the hardware prefetcher alone
 * left a single input row at 0.87 of read bandwidth with f16/bf16 weights,
 * 1.0 with this (bench gemv, 1 and 2 threads). In blocks of 3-4 input rows
 * only for up to 4 rows, or for short weight rows (opt-125m's 768 columns:
 * 8 rows from 2.1x to 1.6x one row); with more rows of 4096 f16/bf16
 * columns it cost 15-20% (the FMAs bind there, and it takes load slots). */
#ifndef GEMV_PF_BYTES
#define GEMV_PF_BYTES 2048 /* a kernel file may set 0: no software prefetch */
#endif
#define GEMV_PF_ROW_BYTES 4096
/* A kernel file may also set GEMV_PF_LOCALITY (__builtin_prefetch's, 3 by
 * default: to L1) and GEMV_PF_FAR_BYTES, a second prefetch that far ahead
 * into L2 only (locality 2), so that one stream keeps more lines on their
 * way from memory than the L1 prefetch alone (gemv_avx512bf16_r1f.c). In a
 * block of several weight rows that second prefetch is at the first one's
 * address plus the difference of their distances, in memory: with rows of
 * a few KiB it lands in the next blocks' rows, ahead of the whole block's
 * reading, but with rows much longer than the distance mostly in this
 * block's next row, which is read already. A kernel file that defines
 * GEMV_PF_FAR_IN_ROWS has it GEMV_PF_FAR_BYTES ahead in each row's own
 * stream instead, wrapped into the next blocks' rows (gemv_block;
 * gemv_avx512bf16_m8f3.c). */
#ifndef GEMV_PF_LOCALITY
#define GEMV_PF_LOCALITY 3
#endif
/* A kernel file that defines GEMV_PF_NEXT has the prefetch that runs past
 * the end of a weight row go on in the same row of the next block (row r +
 * GEMV_R) instead of into row r + 1, which this block reads already: then
 * each block's first GEMV_PF_BYTES per row were fetched while the block
 * before it ran, where without it the hardware prefetcher alone fetched
 * them and a block of 3 rows x 8 inputs waited on memory at every start
 * (AMD EPYC Zen 5, 8 input rows, 2 threads, 8192 x 2048 bf16: the CPU time
 * per call from 1.39-1.72x of one row to 1.16-1.39x in interleaved runs). */
#ifndef GEMV_KC
#define GEMV_KC 256 /* columns per span when more than GEMV_MB rows share it */
#endif

#define GEMV_INLINE static inline __attribute__((always_inline))

#ifndef GV_COLS
#define GV_COLS GV_LANES
#define GV_WT gv_t
#define GV_XT gv_t
#define GV_XELEM float
#define GV_XROWS(a) ((a)->x)
#define gv_load_x(p) gv_load_f32(p)

GEMV_INLINE gv_t gv_load_w(enum dtype t, const char *row, int c)
{
    switch (t) {
    case DTYPE_F16:
        return gv_load_f16(row + (size_t)c * 2);
    case DTYPE_BF16:
        return gv_load_bf16(row + (size_t)c * 2);
    default:
        return gv_load_f32(row + (size_t)c * 4);
    }
}

#endif

GEMV_INLINE float gv_elem_w(enum dtype t, const char *row, int c)
{
    uint16_t h;
    switch (t) {
    case DTYPE_F16:
        __builtin_memcpy(&h, row + (size_t)c * 2, 2);
        return f16_to_f32(h);
    case DTYPE_BF16: {
        __builtin_memcpy(&h, row + (size_t)c * 2, 2);
        uint32_t u = (uint32_t)h << 16;
        float f;
        __builtin_memcpy(&f, &u, 4);
        return f;
    }
    default: {
        float f;
        __builtin_memcpy(&f, row + (size_t)c * 4, 4);
        return f;
    }
    }
}

#if GEMV_PF_BYTES == 0
#define GEMV_UNUSED_PF __attribute__((unused))
#else
#define GEMV_UNUSED_PF
#endif

/* A block's operands: R weight rows wherever they lie (adjacent rows of one
 * product, or a row of each of several far-apart streams: gemv_streams.h)
 * against the same input rows, and where each row's results go. */
struct gemv_at {
    const char *w[GEMV_R]; /* weight row p */
    float *y[GEMV_R];      /* row p's result for input row 0, the next ldy apart */
    const GV_XELEM *xv;    /* the input rows as the vector loop reads them */
    const float *x;        /* and in f32, for the columns past the last whole vector */
    size_t ldx, ldy;
    /* the software prefetch, pf_bytes ahead of the loads (0: none); past
     * pf_row bytes of a row it skips pf_skip more (GEMV_PF_NEXT) */
    size_t pf_bytes, pf_row, pf_skip;
};

/* rows r .. r + R - 1 of a's product */
GEMV_INLINE struct gemv_at gemv_at_rows(const struct gemv_args *a, enum dtype t, int r, const int R)
{
    struct gemv_at at = {.xv = GV_XROWS(a),
                         .x = a->x,
                         .ldx = a->ldx,
                         .ldy = a->ldy,
                         .pf_bytes = GEMV_PF_BYTES,
                         .pf_row = (size_t)a->w->cols * (t == DTYPE_F32 ? 4 : 2)};
    at.pf_skip = (size_t)R * dtype_row_bytes(t, a->w->ld) - at.pf_row;
#pragma GCC unroll 8
    for (int p = 0; p < R; p++) {
        at.w[p] = weight_row(a->w, r + p);
        at.y[p] = a->y + r + p;
    }
    return at;
}

/* Columns [c0, c1) (whole vectors) of the R weight rows of `at` times
 * input rows i0 .. i0 + M - 1, added to part[p][i0 + i]. R and M are
 * constants after inlining, so the accumulators live in registers. */
GEMV_INLINE void gemv_block(const struct gemv_at *at, enum dtype t, const int R, int i0,
                            const int M, int c0, int c1, GEMV_UNUSED_PF bool pf,
                            gv_t part[GEMV_R][GEMV_MT])
{
    const GV_XELEM *xr[GEMV_MB];
    gv_t acc[GEMV_R][GEMV_MB];
#pragma GCC unroll 8
    for (int i = 0; i < M; i++)
        xr[i] = at->xv + (size_t)(i0 + i) * at->ldx;
#pragma GCC unroll 8
    for (int p = 0; p < R; p++)
#pragma GCC unroll 8
        for (int i = 0; i < M; i++)
            acc[p][i] = part[p][i0 + i];
#if GV_COLS >= 8 && GEMV_PF_BYTES > 0 && defined(GEMV_PF_FAR_IN_ROWS)
    const size_t esz = t == DTYPE_F32 ? 4 : 2;
    /* GEMV_PF_FAR_IN_ROWS: the far prefetch at column byte c * esz +
     * far_add, GEMV_PF_FAR_BYTES ahead in each weight row's own stream,
     * which goes on in the same row of the next block, then of the one
     * after, as often as the distance passes a row's end; far_add counts
     * the wraps so far, the next one when c * esz reaches far_next. */
    const size_t far_wraps = ((size_t)c0 * esz + GEMV_PF_FAR_BYTES) / at->pf_row;
    size_t far_add = GEMV_PF_FAR_BYTES + far_wraps * at->pf_skip;
    size_t far_next = (far_wraps + 1) * at->pf_row - GEMV_PF_FAR_BYTES;
#endif
    for (int c = c0; c < c1; c += GV_COLS) {
        GV_WT wv[GEMV_R];
#pragma GCC unroll 8
        for (int p = 0; p < R; p++)
            wv[p] = gv_load_w(t, at->w[p], c);
#if GV_COLS >= 8 && GEMV_PF_BYTES > 0
        if (at->pf_bytes && (M <= 2 || pf)) {
            size_t off = (size_t)c * (t == DTYPE_F32 ? 4 : 2) + at->pf_bytes;
#ifdef GEMV_PF_NEXT
            if (off >= at->pf_row)
                off += at->pf_skip;
#endif
#pragma GCC unroll 8
            for (int p = 0; p < R; p++)
                __builtin_prefetch(at->w[p] + off, 0, GEMV_PF_LOCALITY);
#if defined(GEMV_PF_FAR_IN_ROWS)
            if ((size_t)c * esz >= far_next) {
                far_add += at->pf_skip;
                far_next += at->pf_row;
            }
#pragma GCC unroll 8
            for (int p = 0; p < R; p++)
                __builtin_prefetch(at->w[p] + (size_t)c * esz + far_add, 0, 2);
#elif defined(GEMV_PF_FAR_BYTES)
#pragma GCC unroll 8
            for (int p = 0; p < R; p++)
                __builtin_prefetch(at->w[p] + off + (GEMV_PF_FAR_BYTES - at->pf_bytes), 0, 2);
#endif
        }
#endif

#pragma GCC unroll 8
        for (int i = 0; i < M; i++) {
            GV_XT xv = gv_load_x(xr[i] + c);
#pragma GCC unroll 8
            for (int p = 0; p < R; p++)
                acc[p][i] = gv_fma(wv[p], xv, acc[p][i]);
        }
    }
#pragma GCC unroll 8
    for (int p = 0; p < R; p++)
#pragma GCC unroll 8
        for (int i = 0; i < M; i++)
            part[p][i0 + i] = acc[p][i];
}

/* Columns [c0, c1) of the R rows of `at` against input rows i0 .. i0 + mt
 * - 1 (mt <= GEMV_MT): groups of GEMV_MB rows, then the rest as one block
 * of constant size. */
GEMV_INLINE void gemv_span(const struct gemv_at *at, enum dtype t, const int R, int i0, int mt,
                           int c0, int c1, bool pf, gv_t part[GEMV_R][GEMV_MT])
{
    int ib = 0;
    for (; ib + GEMV_MB <= mt; ib += GEMV_MB)
        gemv_block(at, t, R, i0 + ib, GEMV_MB, c0, c1, pf, part);
    switch (mt - ib) {
#define GEMV_REST(n)                                                                               \
    case n:                                                                                        \
        if (n < GEMV_MB)                                                                           \
            gemv_block(at, t, R, i0 + ib, n < GEMV_MB ? n : 1, c0, c1, pf, part);                  \
        break;
        GEMV_REST(1)
        GEMV_REST(2)
        GEMV_REST(3)
        GEMV_REST(4)
        GEMV_REST(5)
        GEMV_REST(6)
        GEMV_REST(7)
#undef GEMV_REST
    }
}

/* The sums of part, the columns [kv, k) after the last whole vector, the
 * results. */
GEMV_INLINE void gemv_finish(const struct gemv_at *at, enum dtype t, const int R, int i0, int mt,
                             int kv, int k, gv_t part[GEMV_R][GEMV_MT])
{
    for (int p = 0; p < R; p++) {
        float sum[GEMV_MT];
        int i = 0;
#ifdef GEMV_HSUM8
        for (; i + 8 <= mt; i += 8)
            gv_hsum8(&part[p][i], &sum[i]);
#endif
        for (; i < mt; i++)
            sum[i] = gv_hsum(part[p][i]);
        for (i = 0; i < mt; i++) {
            const float *xr = at->x + (size_t)(i0 + i) * at->ldx;
            float s = sum[i];
            for (int c = kv; c < k; c++)
                s += gv_elem_w(t, at->w[p], c) * xr[c];
            at->y[p][(size_t)(i0 + i) * at->ldy] = s;
        }
    }
}

/* prefetching in blocks of 3-4 input rows: see GEMV_PF_BYTES */
GEMV_INLINE bool gemv_pf(enum dtype t, int k, int mt)
{
    return mt <= GEMV_MB || (size_t)k * (t == DTYPE_F32 ? 4 : 2) <= GEMV_PF_ROW_BYTES;
}

/* Input rows i0 .. i0 + mt - 1 (mt <= GEMV_MT) of k columns against the R
 * rows of `at`. Up to GEMV_MB rows run over all columns at once; more go by
 * in groups of GEMV_MB over GEMV_KC columns at a time, so that the
 * weights' and the inputs' columns of that span stay in L1 while every
 * group uses them. */
GEMV_INLINE void gemv_rowgroup_at(const struct gemv_at *at, enum dtype t, const int R, int i0,
                                  int mt, int k, bool pf)
{
    const int kv = k / GV_COLS * GV_COLS;
    const int kc = mt <= GEMV_MB ? kv : GEMV_KC;
    gv_t part[GEMV_R][GEMV_MT];
#pragma GCC unroll 8
    for (int p = 0; p < R; p++)
        for (int i = 0; i < mt; i++)
            part[p][i] = gv_zero();
    for (int c0 = 0; c0 < kv; c0 += kc)
        gemv_span(at, t, R, i0, mt, c0, c0 + kc < kv ? c0 + kc : kv, pf, part);
    gemv_finish(at, t, R, i0, mt, kv, k, part);
}

#ifndef GEMV_XSPAN_COLS
/* rows r .. r + R - 1 of a's product against input rows i0 .. i0 + mt - 1 */
GEMV_INLINE void gemv_rowgroup(const struct gemv_args *a, enum dtype t, int r, const int R, int i0,
                               int mt)
{
    const struct gemv_at at = gemv_at_rows(a, t, r, R);
    gemv_rowgroup_at(&at, t, R, i0, mt, a->w->cols, gemv_pf(t, a->w->cols, mt));
}

GEMV_INLINE void gemv_rows_typed(const struct gemv_args *a, enum dtype t, int r0, int r1)
{
    for (int i0 = 0; i0 < a->m; i0 += GEMV_MT) {
        int mt = a->m - i0 < GEMV_MT ? a->m - i0 : GEMV_MT, r = r0;
        for (; r + GEMV_R <= r1; r += GEMV_R)
            gemv_rowgroup(a, t, r, GEMV_R, i0, mt);
        /* a rest of 2 or more rows (a task of 16n rows in blocks of 3
         * leaves 1 or 2) starts with a block of 2, whose weight vectors
         * feed 2 rows each, not with blocks of 1 */
        if (GEMV_R > 2 && r1 - r >= 2) {
            gemv_rowgroup(a, t, r, 2, i0, mt);
            r += 2;
        }
        for (; r < r1; r++)
            gemv_rowgroup(a, t, r, 1, i0, mt);
    }
}
#else
/* A kernel file that sets GEMV_XSPAN_COLS goes over the columns in spans of
 * that many, each span against GEMV_XSPAN_ROWS weight rows before the next
 * one: the input rows' span (8 rows of 512 bf16 columns: 8 KiB) stays in L1
 * while every weight row of the chunk uses it, where a whole pass per block
 * of weight rows streams all of x again from L2 (8 rows of 8192 columns:
 * 128 KiB) per block. The partial sums of the chunk wait in a local array
 * between spans; each accumulator still adds its columns in order, so the
 * results are bitwise those of the whole passes. */
#define GEMV_XSPAN_ROWS (4 * GEMV_R)
#define GEMV_XSPAN_TILES (GEMV_XSPAN_ROWS / GEMV_R + GEMV_R - 1)

GEMV_INLINE void gemv_rows_typed(const struct gemv_args *a, enum dtype t, int r0, int r1)
{
    const int k = a->w->cols, kv = k / GV_COLS * GV_COLS;
    gv_t part[GEMV_XSPAN_TILES][GEMV_R][GEMV_MT];
    for (int i0 = 0; i0 < a->m; i0 += GEMV_MT) {
        const int mt = a->m - i0 < GEMV_MT ? a->m - i0 : GEMV_MT;
        const bool pf = gemv_pf(t, k, mt);
        for (int rc = r0; rc < r1; rc += GEMV_XSPAN_ROWS) {
            const int re = r1 - rc < GEMV_XSPAN_ROWS ? r1 : rc + GEMV_XSPAN_ROWS;
            for (int j = 0; j < GEMV_XSPAN_TILES; j++)
                for (int p = 0; p < GEMV_R; p++)
                    for (int i = 0; i < mt; i++)
                        part[j][p][i] = gv_zero();
            for (int c0 = 0; c0 < kv; c0 += GEMV_XSPAN_COLS) {
                const int c1 = c0 + GEMV_XSPAN_COLS < kv ? c0 + GEMV_XSPAN_COLS : kv;
                int r = rc, j = 0;
                for (; r + GEMV_R <= re; r += GEMV_R, j++) {
                    const struct gemv_at at = gemv_at_rows(a, t, r, GEMV_R);
                    gemv_span(&at, t, GEMV_R, i0, mt, c0, c1, pf, part[j]);
                }
                for (; r < re; r++, j++) {
                    const struct gemv_at at = gemv_at_rows(a, t, r, 1);
                    gemv_span(&at, t, 1, i0, mt, c0, c1, pf, part[j]);
                }
            }
            int r = rc, j = 0;
            for (; r + GEMV_R <= re; r += GEMV_R, j++) {
                const struct gemv_at at = gemv_at_rows(a, t, r, GEMV_R);
                gemv_finish(&at, t, GEMV_R, i0, mt, kv, k, part[j]);
            }
            for (; r < re; r++, j++) {
                const struct gemv_at at = gemv_at_rows(a, t, r, 1);
                gemv_finish(&at, t, 1, i0, mt, kv, k, part[j]);
            }
        }
    }
}
#endif

void GEMV_ROWS_FN(const struct gemv_args *a, int r0, int r1)
{
    /* one loop per dtype: the conversion is chosen outside the inner loop */
#ifdef GEMV_BF16_ONLY
    gemv_rows_typed(a, DTYPE_BF16, r0, r1);
#else
    switch (a->w->dtype) {
    case DTYPE_F16:
        gemv_rows_typed(a, DTYPE_F16, r0, r1);
        break;
    case DTYPE_BF16:
        gemv_rows_typed(a, DTYPE_BF16, r0, r1);
        break;
    default:
        gemv_rows_typed(a, DTYPE_F32, r0, r1);
        break;
    }
#endif
}

#ifdef GEMV_PIECES_FN
#include "backend/cpu/gemv_streams.h"
#endif
