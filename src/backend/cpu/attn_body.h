/* attn_vec.h's two products written once for both widths: included by
 * attn_avx512.c (16 lanes) and attn_avx2.c (8) after they define
 *
 *   at_t, AT_LANES         a vector of AT_LANES floats
 *   at_m                   the mask of a row's last vector (its lanes past
 *                          head_dim off), at_lanes(n) the first n lanes'
 *   at_chunk(p, c, C, m)   vector c of the C at p (the last one masked)
 *   at_store_chunk(p, c, C, m, v)  and stored so
 *   at_zero(), at_fmadd(a, b, c), at_add, at_set1(f)
 *   at_sum(v)              the lane sums of v[0 .. AT_LANES - 1], v[i]'s in
 *                          lane i
 *   at_store_first(p, n, v) the first n lanes of v stored at p
 *   AT_NC_MAX              the most vectors of a row the values' blocks take
 *                          at once (8 or 4: their accumulators fill the
 *                          registers at 2 rows)
 *   AT_FN(name)            the name of a function to define: name_<isa>
 *
 * A row of head_dim floats is C = head_dim / AT_LANES vectors rounded up,
 * the last one masked. Each row's sums are the same whatever the number of
 * rows beside it. */

#define FORCE_INLINE static inline __attribute__((always_inline))

/* The chunk count at_chunk is told: C where a row's last vector is partial
 * (masked), 0 where rows fill their vectors (every vector a plain load:
 * VMASKMOVPS is slow on AMD Zen 2, and a plain load folds into the
 * multiply-add) */
#define AT_CL(C, full) ((full) ? 0 : (C))

/* How far ahead of the products the keys are prefetched: 32 keys (2 blocks
 * of 16 on 16 lanes). With the values prefetched beside them, 1.1-2x faster
 * than the hardware's prefetcher alone at batch 8 over 144 and 1040 keys
 * (the 2-core Zen 5, interleaved, loaded); 1, 4 or 8 blocks of 16 within
 * the noise. */
#define ATTN_PF_KEYS 32

/* Scores of blocks of AT_LANES keys (read from memory once, then from L1
 * for every row): per row and key one vector of partial products over the
 * C vectors, the block's keys summed together by at_sum. C a constant
 * where it is inlined, so the row's vectors stay in registers. */
FORCE_INLINE void scores_c(float *s, size_t lds, const float *q, size_t ldq, int rows, int C,
                           const bool full, at_m last, const float *k, const float *v, int hd,
                           int n)
{
    const int CL = AT_CL(C, full);
    const size_t block = (size_t)AT_LANES * hd * sizeof(float),
                 ahead_bytes = (size_t)ATTN_PF_KEYS * hd * sizeof(float),
                 end = (size_t)n * hd * sizeof(float);
    for (size_t b = 0; b < ahead_bytes && b < end; b += 64)
        _mm_prefetch((const char *)k + b, _MM_HINT_T0);
    for (int j0 = 0; j0 < n; j0 += AT_LANES) {
        const int nk = n - j0 < AT_LANES ? n - j0 : AT_LANES;
        const float *kb = k + (size_t)j0 * hd;
        /* the keys ATTN_PF_KEYS ahead into L1, this block's values into L2 */
        const size_t at = (size_t)j0 * hd * sizeof(float), ahead = at + ahead_bytes;
        for (size_t b = 0; b < block && ahead + b < end; b += 64)
            _mm_prefetch((const char *)k + ahead + b, _MM_HINT_T0);
        for (size_t b = 0; v && b < block && at + b < end; b += 64)
            _mm_prefetch((const char *)v + at + b, _MM_HINT_T1);
        for (int r = 0; r < rows; r++) {
            const float *qr = q + (size_t)r * ldq;
            at_t qv[32], acc[AT_LANES];
#pragma GCC unroll 32
            for (int c = 0; c < C; c++)
                qv[c] = at_chunk(qr, c, CL, last);
#pragma GCC unroll 16
            for (int i = 0; i < AT_LANES; i++) {
                at_t a = at_zero();
                if (i < nk)
#pragma GCC unroll 32
                    for (int c = 0; c < C; c++)
                        a = at_fmadd(qv[c], at_chunk(kb + (size_t)i * hd, c, CL, last), a);
                acc[i] = a;
            }
            at_store_first(s + (size_t)r * lds + j0, nk, at_sum(acc));
        }
    }
}

void AT_FN(attn_scores)(float *s, size_t lds, const float *q, size_t ldq, int rows, int head_dim,
                        const float *k, const float *v, int n)
{
    const int C = (head_dim + AT_LANES - 1) / AT_LANES;
    const at_m last = at_lanes(head_dim - AT_LANES * (C - 1));
    const bool full = head_dim % AT_LANES == 0;
    /* C and whether rows fill their vectors constants in each call */
#define SCORES_C(CC)                                                                               \
    (full ? scores_c(s, lds, q, ldq, rows, CC, true, last, k, v, head_dim, n)                      \
          : scores_c(s, lds, q, ldq, rows, CC, false, last, k, v, head_dim, n))
    switch (C) { /* the usual head widths (64, 128) with their vectors in registers */
    case 64 / AT_LANES:
        SCORES_C(64 / AT_LANES);
        return;
    case 128 / AT_LANES:
        SCORES_C(128 / AT_LANES);
        return;
    default: /* masked loads whatever the width (GCC 12 warned of unset vectors otherwise) */
        scores_c(s, lds, q, ldq, rows, C, false, last, k, v, head_dim, n);
        return;
    }
#undef SCORES_C
}

/* out (+)= P v for rows [r0, r0 + NR) (a row past `rows` recomputes the
 * last one and is not stored) and vectors [c0, c0 + NC), the NR x NC
 * accumulators in registers over every key: each value row's vectors are
 * loaded once, each weight broadcast once. */
FORCE_INLINE void values_block(float *out, size_t ldo, const float *p, size_t ldp, int rows, int r0,
                               int NR, int c0, int NC, int C, const bool full, at_m last,
                               const float *v, int hd, int n, bool add)
{
    const int CL = AT_CL(C, full);
    const float *pr[4];
#pragma GCC unroll 16
    for (int r = 0; r < NR; r++)
        pr[r] = p + (size_t)(r0 + r < rows ? r0 + r : rows - 1) * ldp;
    at_t acc[4][AT_NC_MAX];
#pragma GCC unroll 16
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 16
        for (int c = 0; c < NC; c++)
            acc[r][c] = at_zero();
    const float *vj = v;
    for (int j = 0; j < n; j++, vj += hd) {
        at_t vv[AT_NC_MAX];
#pragma GCC unroll 16
        for (int c = 0; c < NC; c++)
            vv[c] = at_chunk(vj, c0 + c, CL, last);
#pragma GCC unroll 16
        for (int r = 0; r < NR; r++) {
            const at_t w = at_set1(pr[r][j]);
#pragma GCC unroll 16
            for (int c = 0; c < NC; c++)
                acc[r][c] = at_fmadd(w, vv[c], acc[r][c]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 16
        for (int c = 0; c < NC; c++) {
            if (r0 + r >= rows)
                break;
            float *o = out + (size_t)(r0 + r) * ldo;
            at_t a = acc[r][c];
            if (add)
                a = at_add(a, at_chunk(o, c0 + c, CL, last));
            at_store_chunk(o, c0 + c, CL, last, a);
        }
}

/* One block of rows and vectors with its shape a constant: 4 rows by up
 * to AT_NC_MAX / 2 vectors, or 2 rows by more. */
static void values_span(float *out, size_t ldo, const float *p, size_t ldp, int rows, int r0,
                        int c0, int nc, int C, bool full, at_m last, const float *v, int hd, int n,
                        bool add)
{
    switch (nc) {
#define VALUES_CASE(NC)                                                                            \
    case NC:                                                                                       \
        if (full)                                                                                  \
            values_block(out, ldo, p, ldp, rows, r0, NC <= AT_NC_MAX / 2 ? 4 : 2, c0, NC, C, true, \
                         last, v, hd, n, add);                                                     \
        else                                                                                       \
            values_block(out, ldo, p, ldp, rows, r0, NC <= AT_NC_MAX / 2 ? 4 : 2, c0, NC, C,       \
                         false, last, v, hd, n, add);                                              \
        return;
        VALUES_CASE(1)
        VALUES_CASE(2)
        VALUES_CASE(3)
        VALUES_CASE(4)
#if AT_NC_MAX == 8
        VALUES_CASE(5)
        VALUES_CASE(6)
        VALUES_CASE(7)
        VALUES_CASE(8)
#endif
#undef VALUES_CASE
    }
}

void AT_FN(attn_values)(float *out, size_t ldo, const float *p, size_t ldp, int rows, int head_dim,
                        const float *v, int n, bool add)
{
    const int C = (head_dim + AT_LANES - 1) / AT_LANES;
    const at_m last = at_lanes(head_dim - AT_LANES * (C - 1));
    for (int c0 = 0; c0 < C; c0 += AT_NC_MAX) {
        const int nc = C - c0 < AT_NC_MAX ? C - c0 : AT_NC_MAX, nr = nc <= AT_NC_MAX / 2 ? 4 : 2;
        for (int r0 = 0; r0 < rows; r0 += nr)
            values_span(out, ldo, p, ldp, rows, r0, c0, nc, C, head_dim % AT_LANES == 0, last, v,
                        head_dim, n, add);
    }
}
