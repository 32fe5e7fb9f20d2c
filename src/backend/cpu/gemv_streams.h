/* Input rows over several far-apart streams of weight rows in lockstep:
 * included by gemv_body.h where its kernel file defines GEMV_PIECES_FN
 * (gemv_avx2_next.c), after the body's loaders, with GEMV_ROWS_FN the
 * kernel whose rows it falls back to.
 *
 * A task brings up to GEMV_STREAMS_MAX pieces (runs of rows, each the next
 * part of one sub-lane of the thread's lane: lanes.h), and each step reads
 * one vector of the current row of every piece, so a thread reads its lane
 * as that many streams, each running on across its rows (the next row is
 * next in memory) and across the thread's tasks. The blocks of GEMV_R
 * adjacent rows read the same bytes as GEMV_R streams a row's length apart,
 * which short rows start and end every few lines: on AMD EPYC Zen 2, one
 * thread, a loop outside the tree over 4864 x 896 bf16 (1792-byte rows) read
 * 12.6 GB/s in blocks of 4 adjacent rows and 24.8 over four quarters of the
 * rows (2026-12-07; a plain read of one stream 18.5, of four 27).
 *
 * Each row is summed as the body sums one input row (its whole vectors in
 * order into one accumulator from zero, gv_hsum, then the columns past the
 * last whole vector one by one), so the results are bitwise those of the
 * body's blocks; only the order in which rows are visited differs. Several
 * input rows go through the body's own blocks (gemv_rowgroup_at), a row of
 * each of up to 3 streams in a block. Pieces of another shape (a piece whose
 * dtype, columns or input rows differ from the first's) run one after the
 * other through GEMV_ROWS_FN.
 *
 * With the streams and their prefetch, AMD EPYC Zen 2, 2 threads, bf16
 * 4864 x 896 (2026-12-07, bench gemv --kernel): 8 input rows 0.645 ms a
 * call against 0.88 by avx2-next's blocks of 4 adjacent rows and 0.94 by
 * avx2-m8's of 3, 2 rows 0.24 against 0.35 (short rows: streams start and
 * end every row); over 8192 x 2048, 8 rows 2.22-2.35 against avx2-m8's
 * 2.31, where the multiply-adds bind. */

/* Each stream's weights are prefetched (to L1) this many bytes ahead of its
 * loads, one line a step of a line's columns: the hardware prefetcher alone
 * left the streams at 0.84-0.91 of one thread's read limit (likely: a step
 * takes several instructions a 16-byte load and the reorder window covers
 * few lines ahead). AMD EPYC Zen 2, bf16, one input row, 1 thread, bench gemv
 * --kernel avx2-s4 (2026-12-07): 4864 x 896 at 0.36 ms a call with none,
 * 0.34 at 192-256 bytes, 0.33 at 384-512, 0.36 at 1 KiB, 0.37-0.38 at 2 KiB;
 * 896 x 896, 896 x 4864, 2048 x 2048 and 8192 x 2048 3-7% faster at 512.
 * Against the loop before it (a vector a step, no prefetch), one thread over
 * 4864 x 896 took 0.34-0.36 ms a call against 0.36-0.375, and decode moved
 * within the machine's noise (1.02-1.07x). 0: none. */
#ifndef GS_PF_BYTES
#define GS_PF_BYTES 512
#endif

/* where one stream stands: its operands, its next row, its end */
struct gs_stream {
    const struct gemv_args *a;
    const char *w; /* its next row's weights */
    size_t ld_bytes;
    int r, r1;
};

/* One row of each of the n streams (n and t constant after inlining), and
 * each stream moved to its next row. */
GEMV_INLINE void gs_step(struct gs_stream *st, const int n, enum dtype t, int kv, int cols)
{
    gv_t acc[GEMV_STREAMS_MAX];
    const char *wr[GEMV_STREAMS_MAX];
    const float *xr[GEMV_STREAMS_MAX];
#pragma GCC unroll 8
    for (int s = 0; s < n; s++) {
        acc[s] = gv_zero();
        wr[s] = st[s].w;
        xr[s] = st[s].a->x;
    }
    const int esz = t == DTYPE_F32 ? 4 : 2, line = 64 / esz; /* elements a line */
    int c = 0;
#if GS_PF_BYTES > 0
    for (; c + line <= kv; c += line) {
#pragma GCC unroll 8
        for (int s = 0; s < n; s++)
            __builtin_prefetch(wr[s] + (size_t)c * esz + GS_PF_BYTES, 0, 3);
#pragma GCC unroll 4
        for (int v = 0; v < line; v += GV_LANES)
#pragma GCC unroll 8
            for (int s = 0; s < n; s++)
                acc[s] = gv_fma(gv_load_w(t, wr[s], c + v), gv_load_f32(xr[s] + c + v), acc[s]);
    }
#endif
    for (; c < kv; c += GV_LANES)
#pragma GCC unroll 8
        for (int s = 0; s < n; s++)
            acc[s] = gv_fma(gv_load_w(t, wr[s], c), gv_load_f32(xr[s] + c), acc[s]);
#pragma GCC unroll 8
    for (int s = 0; s < n; s++) {
        float sum = gv_hsum(acc[s]);
        for (int j = kv; j < cols; j++)
            sum += gv_elem_w(t, wr[s], j) * xr[s][j];
        st[s].a->y[st[s].r] = sum;
        st[s].r++;
        st[s].w += st[s].ld_bytes;
    }
}

/* the rows the n streams take in lockstep: until the first one ends */
static inline int gs_left(const struct gs_stream *st, int n)
{
    int left = st[0].r1 - st[0].r;
    for (int s = 1; s < n; s++)
        if (st[s].r1 - st[s].r < left)
            left = st[s].r1 - st[s].r;
    return left;
}

/* n streams in lockstep until one ends */
GEMV_INLINE void gs_run_typed(struct gs_stream *st, int n, enum dtype t, int kv, int cols)
{
    const int left = gs_left(st, n);
    for (int i = 0; i < left; i++)
        switch (n) {
#define GS_CASE(k)                                                                                 \
    case k:                                                                                        \
        gs_step(st, k, t, kv, cols);                                                               \
        break;
            GS_CASE(1)
            GS_CASE(2)
            GS_CASE(3)
            GS_CASE(4)
            GS_CASE(5)
            GS_CASE(6)
            GS_CASE(7)
            GS_CASE(8)
#undef GS_CASE
        }
}

/* one loop per dtype, as GEMV_ROWS_FN's */
static void gs_run(struct gs_stream *st, int n, enum dtype t, int kv, int cols)
{
    switch (t) {
    case DTYPE_F16:
        gs_run_typed(st, n, DTYPE_F16, kv, cols);
        break;
    case DTYPE_BF16:
        gs_run_typed(st, n, DTYPE_BF16, kv, cols);
        break;
    default:
        gs_run_typed(st, n, DTYPE_F32, kv, cols);
        break;
    }
}

/* Several input rows: the streams' current rows in blocks of up to GS_RB,
 * each block summed as gemv_body.h sums a block of adjacent rows (the same
 * bits), prefetched GS_PF_BYTES ahead in every stream. A block's 3 x
 * GEMV_MB sums, 3 weight vectors and an input vector fill AVX2's 16
 * registers (gemv_avx2_m8.c); 4 streams go as 2 + 2, not 3 + 1, whose
 * block of one row loads an input vector for each multiply-add. */
#define GS_RB 3

GEMV_INLINE void gs_rows_block(struct gs_stream *st, const int R, enum dtype t, int cols)
{
    const struct gemv_args *a = st[0].a;
    struct gemv_at at = {.xv = GV_XROWS(a),
                         .x = a->x,
                         .ldx = a->ldx,
                         .ldy = a->ldy,
                         .pf_bytes = GS_PF_BYTES,
                         .pf_row = SIZE_MAX, /* a stream's next row follows its last */
                         .pf_skip = 0};
#pragma GCC unroll 8
    for (int p = 0; p < R; p++) {
        at.w[p] = st[p].w;
        at.y[p] = st[p].a->y + st[p].r;
    }
    for (int i0 = 0; i0 < a->m; i0 += GEMV_MT)
        gemv_rowgroup_at(&at, t, R, i0, a->m - i0 < GEMV_MT ? a->m - i0 : GEMV_MT, cols, true);
#pragma GCC unroll 8
    for (int p = 0; p < R; p++) {
        st[p].r++;
        st[p].w += st[p].ld_bytes;
    }
}

/* n streams in lockstep until one ends, several input rows */
GEMV_INLINE void gs_rows_typed(struct gs_stream *st, int n, enum dtype t, int cols)
{
    const int left = gs_left(st, n);
    for (int i = 0; i < left; i++)
        for (int s = 0; s < n;) {
            const int rest = n - s, r = rest == 4 ? 2 : rest < GS_RB ? rest : GS_RB;
            if (r == 3)
                gs_rows_block(st + s, 3, t, cols);
            else if (r == 2)
                gs_rows_block(st + s, 2, t, cols);
            else
                gs_rows_block(st + s, 1, t, cols);
            s += r;
        }
}

/* apart from gs_run: with both loops in one function per dtype, the
 * one-row loop ran 10-15% slower on one thread (AMD EPYC Zen 2, 4864 x 896
 * bf16, 0.388 against 0.339-0.364 ms a call, interleaved) */
static void gs_rows(struct gs_stream *st, int n, enum dtype t, int cols)
{
    switch (t) {
    case DTYPE_F16:
        gs_rows_typed(st, n, DTYPE_F16, cols);
        break;
    case DTYPE_BF16:
        gs_rows_typed(st, n, DTYPE_BF16, cols);
        break;
    default:
        gs_rows_typed(st, n, DTYPE_F32, cols);
        break;
    }
}

/* whether piece i can go in lockstep with piece 0: the same weight shape,
 * and for several input rows the same input rows and output stride (a
 * block's input vectors feed every stream's row) */
static bool gs_fits(const struct gemv_piece *p, int i)
{
    const struct gemv_args *a = p[i].a, *a0 = p[0].a;
    if (a->m != a0->m || a->w->dtype != a0->w->dtype || a->w->cols != a0->w->cols)
        return false;
    return a->m == 1 ||
           (GV_XROWS(a) == GV_XROWS(a0) && a->x == a0->x && a->ldx == a0->ldx && a->ldy == a0->ldy);
}

void GEMV_PIECES_FN(const struct gemv_piece *p, int n)
{
    bool lockstep = n <= GEMV_STREAMS_MAX;
    for (int i = 0; i < n && lockstep; i++)
        lockstep = gs_fits(p, i);
    if (!lockstep) {
        for (int i = 0; i < n; i++)
            GEMV_ROWS_FN(p[i].a, p[i].r0, p[i].r1);
        return;
    }
    const enum dtype t = p[0].a->w->dtype;
    const int cols = p[0].a->w->cols, kv = cols / GV_LANES * GV_LANES;
    struct gs_stream st[GEMV_STREAMS_MAX];
    int live = 0;
    for (int i = 0; i < n; i++)
        if (p[i].r1 > p[i].r0)
            st[live++] = (struct gs_stream){
                .a = p[i].a,
                .w = weight_row(p[i].a->w, p[i].r0),
                .ld_bytes = dtype_row_bytes(t, p[i].a->w->ld),
                .r = p[i].r0,
                .r1 = p[i].r1,
            };
    /* in lockstep while every stream has rows; the ones left go on */
    while (live > 0) {
        if (p[0].a->m == 1)
            gs_run(st, live, t, kv, cols);
        else
            gs_rows(st, live, t, cols);
        int k = 0;
        for (int s = 0; s < live; s++)
            if (st[s].r < st[s].r1)
                st[k++] = st[s];
        live = k;
    }
}
