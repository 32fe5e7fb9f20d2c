/* `vnni-far`: vnni-near's single-row kernels with a task's weight rows read
 * as QD_FAR_STREAMS far-apart streams in lockstep: included by qdot_body.h
 * where its includer defines QDOT_ROWS_FAR_FN (qdot_vnni_far.c), after
 * qdot_k512.h and qdot_xr.h, whose per-row steps it calls.
 *
 * Why: a task's rows (about 128 KiB) read as one stream keep the core's
 * misses on one run of lines. Cut into S contiguous sub-ranges (about 32
 * KiB apart at S = 4) and read in lockstep, one step of each sub-range's
 * row in turn (a run of 8 blocks for the types of 32, a group of 8 blocks
 * for the K-quants), the same bytes go by as S streams, each prefetched
 * ahead on its own; a plain read on the 2-core Xeon with AMX (2 threads,
 * 128 MB each from huge pages, a loop outside the tree) went from
 * 34.4-35.5 to 36.4-37.2 GB/s so. This is not the four adjacent rows in
 * lockstep that cpu-kernels.md found 20% slower for Q8_0 on one thread
 * (streams a row's length apart, inside one prefetch distance of each
 * other).
 *
 * Each row's steps are its single-row kernel's, in the same order, with
 * accumulators of its own: the same bits (test_quant's isa_bitwise and
 * multirow_bitwise run it). */

#ifndef QD_FAR_STREAMS
#define QD_FAR_STREAMS 4
#endif
#define QDF_S QD_FAR_STREAMS

/* S rows of a type of 32, row s at w + s st, against x laid out: y[s yst] */
QD_INLINE void qdf_rows32(const char *w, size_t st, const struct qd5_xr *r, int nb,
                          const enum dtype T, float *y, size_t yst)
{
    const size_t wb = qd5_wb(T);
    __m256 acc[QDF_S];
#pragma GCC unroll 4
    for (int s = 0; s < QDF_S; s++)
        acc[s] = _mm256_setzero_ps();
    int b = 0;
    for (; b + 8 <= nb; b += 8)
#pragma GCC unroll 4
        for (int s = 0; s < QDF_S; s++)
            acc[s] = qd5_run(acc[s], w + s * st + (size_t)b * wb, r, b, T, 8);
#define QDF_TAIL(n)                                                                                \
    case n:                                                                                        \
        for (int s = 0; s < QDF_S; s++)                                                            \
            acc[s] = qd5_run(acc[s], w + s * st + (size_t)b * wb, r, b, T, n);                     \
        break;
    switch (nb - b) { /* n a constant in each, as qd5_row's */
        QDF_TAIL(1)
        QDF_TAIL(2)
        QDF_TAIL(3)
        QDF_TAIL(4)
        QDF_TAIL(5)
        QDF_TAIL(6)
        QDF_TAIL(7)
    default:
        break;
    }
#undef QDF_TAIL
#pragma GCC unroll 4
    for (int s = 0; s < QDF_S; s++)
        y[s * yst] = qd_sum8(acc[s]);
}

/* one function per type, as qdot_xr.h's */
static __attribute__((noinline)) void qdf_q8_0(const char *w, size_t st, const struct qd5_xr *r,
                                               int nb, float *y, size_t yst)
{
    qdf_rows32(w, st, r, nb, DTYPE_Q8_0, y, yst);
}

static __attribute__((noinline)) void qdf_q4_0(const char *w, size_t st, const struct qd5_xr *r,
                                               int nb, float *y, size_t yst)
{
    qdf_rows32(w, st, r, nb, DTYPE_Q4_0, y, yst);
}

static __attribute__((noinline)) void qdf_q5_0(const char *w, size_t st, const struct qd5_xr *r,
                                               int nb, float *y, size_t yst)
{
    qdf_rows32(w, st, r, nb, DTYPE_Q5_0, y, yst);
}

static __attribute__((noinline)) void qdf_q5_1(const char *w, size_t st, const struct qd5_xr *r,
                                               int nb, float *y, size_t yst)
{
    qdf_rows32(w, st, r, nb, DTYPE_Q5_1, y, yst);
}

/* S Q4_K/Q5_K rows in lockstep, a group of 8 blocks a step (qd5_q45_k_body's) */
QD_INLINE void qdf_rows45k(const char *w, size_t st, const char *x, int nb, const bool five,
                           float *y, size_t yst)
{
    const size_t wb = five ? sizeof(struct quant_q5_k) : sizeof(struct quant_q4_k);
    const size_t xb = sizeof(struct quant_q8_k);
    const struct qd5_k45 c = qd5_k45_init();
    __m256 acc[QDF_S];
    for (int s = 0; s < QDF_S; s++)
        acc[s] = _mm256_setzero_ps();
    int b0 = 0;
    for (; b0 + 8 <= nb; b0 += 8)
        for (int s = 0; s < QDF_S; s++)
            acc[s] = qd5_group_45k(acc[s], w + s * st + (size_t)b0 * wb, x + (size_t)b0 * xb, 8,
                                   five, &c);
    if (b0 < nb)
        for (int s = 0; s < QDF_S; s++)
            acc[s] = qd5_group_45k(acc[s], w + s * st + (size_t)b0 * wb, x + (size_t)b0 * xb,
                                   nb - b0, five, &c);
    for (int s = 0; s < QDF_S; s++)
        y[s * yst] = qd_sum8(acc[s]);
}

static __attribute__((noinline)) void qdf_q4_k(const char *w, size_t st, const char *x, int nb,
                                               float *y, size_t yst)
{
    qdf_rows45k(w, st, x, nb, false, y, yst);
}

static __attribute__((noinline)) void qdf_q5_k(const char *w, size_t st, const char *x, int nb,
                                               float *y, size_t yst)
{
    qdf_rows45k(w, st, x, nb, true, y, yst);
}

/* S Q6_K rows in lockstep (qd5_q6_k_body's groups) */
static __attribute__((noinline)) void qdf_q6_k(const char *w, size_t st, const char *x, int nb,
                                               float *y, size_t yst)
{
    const size_t wb = sizeof(struct quant_q6_k), xb = sizeof(struct quant_q8_k);
    const struct qd5_k6 c = qd5_k6_init();
    __m256 acc[QDF_S];
    for (int s = 0; s < QDF_S; s++)
        acc[s] = _mm256_setzero_ps();
    int b0 = 0;
    for (; b0 + 8 <= nb; b0 += 8)
        for (int s = 0; s < QDF_S; s++)
            acc[s] = qd5_group_6k(acc[s], w + s * st + (size_t)b0 * wb, x + (size_t)b0 * xb, 8, &c);
    if (b0 < nb)
        for (int s = 0; s < QDF_S; s++)
            acc[s] = qd5_group_6k(acc[s], w + s * st + (size_t)b0 * wb, x + (size_t)b0 * xb,
                                  nb - b0, &c);
    for (int s = 0; s < QDF_S; s++)
        y[s * yst] = qd_sum8(acc[s]);
}

/* Rows [r0, r1): for each input row, S sub-ranges of L = (r1 - r0) / S
 * rows each read in lockstep, then the rows past S L (fewer than S) one at
 * a time by the single-row kernel; a task of fewer than S rows goes to it
 * whole. */
void QDOT_ROWS_FAR_FN(const struct qdot_args *a, int r0, int r1)
{
    const struct weight_view *w = a->w;
    const enum dtype t = w->dtype;
    const int nb = w->cols / dtype_block(t), n = r1 - r0, L = n / QDF_S;
    const size_t w_ld = dtype_row_bytes(t, w->ld), st = (size_t)L * w_ld;
    const bool x32 = qdot_xtype_of(t) == QDOT_X_Q8_0;
    char *buf = NULL;
    if (L == 0 || (x32 && !a->xp && !(buf = cpu_scratch(CPU_SCRATCH_Q_XR, qd5_xr_bytes(nb))))) {
        QDOT_ROWS_FN(a, r0, r1);
        return;
    }
    for (int i = 0; i < a->m; i++) {
        float *y = a->y + (size_t)i * a->ldy + r0;
        const char *x = a->xq + (size_t)i * a->xq_ld;
        const struct qd5_xr xr = qd5_xr_at(a->xp ? (char *)a->xp + (size_t)i * a->xp_ld : buf, nb);
        if (x32 && !a->xp)
            qd5_xr_fill(&xr, x, nb);
        const char *row = (const char *)w->data + (size_t)r0 * w_ld;
        for (int j = 0; j < L; j++, row += w_ld) {
            switch (t) {
            case DTYPE_Q8_0:
                qdf_q8_0(row, st, &xr, nb, y + j, (size_t)L);
                break;
            case DTYPE_Q4_0:
                qdf_q4_0(row, st, &xr, nb, y + j, (size_t)L);
                break;
            case DTYPE_Q5_0:
                qdf_q5_0(row, st, &xr, nb, y + j, (size_t)L);
                break;
            case DTYPE_Q5_1:
                qdf_q5_1(row, st, &xr, nb, y + j, (size_t)L);
                break;
            case DTYPE_Q4_K:
                qdf_q4_k(row, st, x, nb, y + j, (size_t)L);
                break;
            case DTYPE_Q5_K:
                qdf_q5_k(row, st, x, nb, y + j, (size_t)L);
                break;
            case DTYPE_Q6_K:
                qdf_q6_k(row, st, x, nb, y + j, (size_t)L);
                break;
            default:
                assert(!"qdot_rows_vnni_far: not a GGUF block type");
                break;
            }
        }
    }
    if (r0 + QDF_S * L < r1)
        QDOT_ROWS_FN(a, r0 + QDF_S * L, r1);
}
