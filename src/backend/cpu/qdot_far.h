/* `vnni-far` and `avx2-far`: the single-row kernels (vnni-near's, avx2's)
 * over several far-apart streams of weight rows in lockstep: included by
 * qdot_body.h where its includer defines QDOT_PIECES_FN (qdot_vnni_far.c,
 * qdot_avx2_far.c) and QDOT_PIECES_ROWS (the rows function its pieces of
 * another shape go to), after the per-row steps it calls: on 512-bit
 * vectors (QD_K512) qdot_k512.h's groups and qdot_xr.h's runs, else
 * qd_k_group and qd2_run.
 *
 * Why: a thread's rows read as one stream keep the core's misses on one
 * run of lines; read as S far-apart streams in lockstep, one step of each
 * stream's row in turn (a run of 8 blocks for the types of 32, a group of
 * 8 blocks for the K-quants), the same bytes go by as S streams, each
 * prefetched ahead on its own (a plain read on the 2-core Xeon with AMX, 2
 * threads, 128 MB each from huge pages, a loop outside the tree: 34.4-35.5
 * GB/s as one stream, 36.4-37.2 as four). The streams are the pieces a
 * task brings: the next unit of each sub-lane of the thread's lane
 * (lanes.h), so each stream runs on across the thread's tasks, as the
 * bf16 GEMV's (gemv_avx512bf16_s.c). This is not the four adjacent rows in
 * lockstep that cpu-kernels.md found 20% slower for Q8_0 on one thread
 * (streams a row's length apart, inside one prefetch distance of each
 * other).
 *
 * Each row's steps are its single-row kernel's, in the same order, with
 * accumulators of its own: the same bits (test_quant's isa_bitwise and
 * multirow_bitwise, test_kernels' test_qlinear_lanes).
 *
 * On AMD EPYC Zen 2 (AVX2 alone) the same held for the float GEMV more
 * strongly (gemv_streams.h: 4864 x 896 bf16 on one thread from 12.6 to
 * 24.8 GB/s as four streams). */

/* the K-quants' group of up to 8 blocks, and the constants it keeps in
 * registers from one group to the next */
#ifdef QD_K512
struct qdf_k {
    struct qd5_k45 c45;
    struct qd5_k6 c6;
};

QD_INLINE struct qdf_k qdf_k_init(void)
{
    return (struct qdf_k){qd5_k45_init(), qd5_k6_init()};
}

QD_INLINE __m256 qdf_group_k(__m256 acc, const char *w8, const char *x8, int n, const enum dtype T,
                             const struct qdf_k *k)
{
    return T == DTYPE_Q6_K ? qd5_group_6k(acc, w8, x8, n, &k->c6)
                           : qd5_group_45k(acc, w8, x8, n, T == DTYPE_Q5_K, &k->c45);
}
#else
struct qdf_k {
    char none;
};

QD_INLINE struct qdf_k qdf_k_init(void)
{
    return (struct qdf_k){0};
}

QD_INLINE __m256 qdf_group_k(__m256 acc, const char *w8, const char *x8, int n, const enum dtype T,
                             const struct qdf_k *k)
{
    (void)k;
    return qd_k_group(acc, w8, x8, n, T);
}
#endif

/* where one stream stands: its next row, its end, and its input row */
struct qdf_stream {
    float *y;        /* the input row's outputs, indexed by weight row */
    const char *w;   /* the next row's weights */
    const char *x;   /* the K-quants: the input row's Q8_K blocks */
    struct qd_xr xr; /* the types of 32: the input row laid out */
    size_t w_ld;
    int r, r1;
};

/* One row of each of the n streams (n and T constant after inlining), nb
 * blocks each, then each stream moved to its next row */
QD_INLINE void qdf_step(struct qdf_stream *st, const int n, int nb, const enum dtype T,
                        const struct qdf_k *ck)
{
    __m256 acc[QDOT_PIECES_MAX];
#pragma GCC unroll 4
    for (int s = 0; s < n; s++)
        acc[s] = _mm256_setzero_ps();
    if (T == DTYPE_Q4_K || T == DTYPE_Q5_K || T == DTYPE_Q6_K) {
        /* the single-row kernel's groups */
        const size_t wb = T == DTYPE_Q4_K   ? sizeof(struct quant_q4_k)
                          : T == DTYPE_Q5_K ? sizeof(struct quant_q5_k)
                                            : sizeof(struct quant_q6_k);
        const size_t xb = sizeof(struct quant_q8_k);
        int b0 = 0;
        for (; b0 + 8 <= nb; b0 += 8)
#pragma GCC unroll 4
            for (int s = 0; s < n; s++)
                acc[s] = qdf_group_k(acc[s], st[s].w + (size_t)b0 * wb, st[s].x + (size_t)b0 * xb,
                                     8, T, ck);
        if (b0 < nb)
#pragma GCC unroll 4
            for (int s = 0; s < n; s++)
                acc[s] = qdf_group_k(acc[s], st[s].w + (size_t)b0 * wb, st[s].x + (size_t)b0 * xb,
                                     nb - b0, T, ck);
    } else {
        /* qd_xr_row's runs */
        const size_t wb = qd_xr_wb(T);
        int b = 0;
        for (; b + 8 <= nb; b += 8)
#pragma GCC unroll 4
            for (int s = 0; s < n; s++)
                acc[s] = QD_XR_RUN(acc[s], st[s].w + (size_t)b * wb, &st[s].xr, b, T, 8);
#define QDF_TAIL(k)                                                                                \
    case k:                                                                                        \
        for (int s = 0; s < n; s++)                                                                \
            acc[s] = QD_XR_RUN(acc[s], st[s].w + (size_t)b * wb, &st[s].xr, b, T, k);              \
        break;
        switch (nb - b) { /* k a constant in each, as qd_xr_row's */
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
    }
#pragma GCC unroll 4
    for (int s = 0; s < n; s++) {
        st[s].y[st[s].r] = qd_sum8(acc[s]);
        st[s].r++;
        st[s].w += st[s].w_ld;
    }
}

/* the n streams in lockstep until one ends */
QD_INLINE void qdf_run(struct qdf_stream *st, const int n, int nb, const enum dtype T)
{
    const struct qdf_k ck = qdf_k_init();
    int left = st[0].r1 - st[0].r;
    for (int s = 1; s < n; s++)
        left = st[s].r1 - st[s].r < left ? st[s].r1 - st[s].r : left;
    for (int i = 0; i < left; i++)
        qdf_step(st, n, nb, T, &ck);
}

/* one function per type, n a constant in each case (GCC unrolls a step's
 * blocks only in a function of its own) */
#define QDF_TYPE(name, T)                                                                          \
    static __attribute__((noinline)) void name(struct qdf_stream *st, int n, int nb)               \
    {                                                                                              \
        switch (n) {                                                                               \
        case 1:                                                                                    \
            qdf_run(st, 1, nb, T);                                                                 \
            break;                                                                                 \
        case 2:                                                                                    \
            qdf_run(st, 2, nb, T);                                                                 \
            break;                                                                                 \
        case 3:                                                                                    \
            qdf_run(st, 3, nb, T);                                                                 \
            break;                                                                                 \
        default:                                                                                   \
            qdf_run(st, 4, nb, T);                                                                 \
            break;                                                                                 \
        }                                                                                          \
    }
_Static_assert(QDOT_PIECES_MAX == 4, "QDF_TYPE's cases run 1 to 4 streams");
QDF_TYPE(qdf_q8_0, DTYPE_Q8_0)
QDF_TYPE(qdf_q4_0, DTYPE_Q4_0)
QDF_TYPE(qdf_q5_0, DTYPE_Q5_0)
QDF_TYPE(qdf_q5_1, DTYPE_Q5_1)
QDF_TYPE(qdf_q4_k, DTYPE_Q4_K)
QDF_TYPE(qdf_q5_k, DTYPE_Q5_K)
QDF_TYPE(qdf_q6_k, DTYPE_Q6_K)
#undef QDF_TYPE

/* n streams of type t in lockstep while every one has rows; the ones left
 * go on */
static void qdf_streams(struct qdf_stream *st, int n, enum dtype t, int nb)
{
    while (n > 0) {
        switch (t) {
        case DTYPE_Q8_0:
            qdf_q8_0(st, n, nb);
            break;
        case DTYPE_Q4_0:
            qdf_q4_0(st, n, nb);
            break;
        case DTYPE_Q5_0:
            qdf_q5_0(st, n, nb);
            break;
        case DTYPE_Q5_1:
            qdf_q5_1(st, n, nb);
            break;
        case DTYPE_Q4_K:
            qdf_q4_k(st, n, nb);
            break;
        case DTYPE_Q5_K:
            qdf_q5_k(st, n, nb);
            break;
        case DTYPE_Q6_K:
            qdf_q6_k(st, n, nb);
            break;
        default:
            assert(!"qdot_far.h: not a GGUF block type");
            return;
        }
        int k = 0;
        for (int s = 0; s < n; s++)
            if (st[s].r < st[s].r1)
                st[k++] = st[s];
        n = k;
    }
}

/* whether pieces a and b can go in lockstep: one type, width and count of
 * input rows, and x laid out for a type of 32 */
static bool qdf_same(const struct qdot_args *a, const struct qdot_args *b)
{
    return a->w->dtype == b->w->dtype && a->w->cols == b->w->cols && a->m == b->m &&
           (qdot_xtype_of(a->w->dtype) != QDOT_X_Q8_0 || (a->xp && b->xp));
}

/* The pieces in classes of qdf_same, each class's in lockstep for one
 * input row after the other (a task's rows, about 128 KiB, stay in L2
 * between them); a type of 32 without its x laid out (a->xp NULL) goes
 * to QDOT_PIECES_ROWS, which lays it out per task. */
void QDOT_PIECES_FN(const struct qdot_piece *p, int n)
{
    assert(n >= 1 && n <= QDOT_PIECES_MAX);
    bool done[QDOT_PIECES_MAX] = {false};
    for (int k0 = 0; k0 < n; k0++) {
        if (done[k0])
            continue;
        const struct qdot_args *a0 = p[k0].a;
        const enum dtype t = a0->w->dtype;
        if (qdot_xtype_of(t) == QDOT_X_Q8_0 && !a0->xp) {
            QDOT_PIECES_ROWS(a0, p[k0].r0, p[k0].r1);
            continue;
        }
        int cls[QDOT_PIECES_MAX], nc = 0;
        for (int k = k0; k < n; k++)
            if (!done[k] && qdf_same(a0, p[k].a)) {
                cls[nc++] = k;
                done[k] = true;
            }
        const int nb = a0->w->cols / dtype_block(t);
        for (int i = 0; i < a0->m; i++) {
            struct qdf_stream st[QDOT_PIECES_MAX];
            int live = 0;
            for (int c = 0; c < nc; c++) {
                const struct qdot_piece *q = &p[cls[c]];
                const struct qdot_args *a = q->a;
                if (q->r1 <= q->r0)
                    continue;
                const size_t w_ld = dtype_row_bytes(t, a->w->ld);
                st[live++] = (struct qdf_stream){
                    .y = a->y + (size_t)i * a->ldy,
                    .w = (const char *)a->w->data + (size_t)q->r0 * w_ld,
                    .x = a->xq + (size_t)i * a->xq_ld,
                    .xr = a->xp ? qd_xr_at((char *)a->xp + (size_t)i * a->xp_ld, nb)
                                : (struct qd_xr){0},
                    .w_ld = w_ld,
                    .r = q->r0,
                    .r1 = q->r1,
                };
            }
            qdf_streams(st, live, t, nb);
        }
    }
}
