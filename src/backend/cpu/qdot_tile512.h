/* vnni-m8z, the multi-row kernel of the types of 32 on 512-bit vectors
 * (qdot.h's qdot_tile_vnni_z), included by qdot_vnni.c (qdot_body.h's
 * unpacking helpers).
 *
 * Weight rows unpacked 4 at a time (the quants as unsigned bytes), then
 * multiplied two pairs at a time with each group of 8 input rows packed in
 * pairs (qdot_pack_x_pairs: per pair of quads, each row's 8 bytes side by
 * side): a pair of a weight row's quads is broadcast as one 64-bit word,
 * so one VPDPBUSD on 512 bits does two quads of the 8 rows, lane 2i row
 * i's even quads and 2i + 1 its odd ones. After a block a pair's two
 * vectors are folded into one, lane 2i row i of the first weight row and
 * 2i + 1 row i of the second, which takes the f32 steps of both at once.
 * The weights' bias (Q8_0's 128 from the unsigned bytes, Q4_0's 8, Q5_0's
 * 16) is taken back with x's sums, computed once per call by the packing,
 * where vnni-m8 summed every Q8_0 block of weights (x + 128 against the
 * signed weights). While a group's pass computes, the next 4 rows are
 * prefetched toward L2, so their unpacking does not wait on memory.
 * vnni-m8 broadcasts a quad on 256 bits per 4 weights and 8 input rows;
 * on Zen 4 such a broadcast and VPDPBUSD pair issue about once a cycle,
 * and a Q8_0 weight block cost it 14.5 cycles against 8 rows, 12 here.
 * Same integer sums per block, the same f32 operations per row in the same
 * order: the same bits. */
#include "backend/cpu/scratch.h"
#include "core/error.h"

/* the unpacked rows' blocks' scales (Q5_1: and -m) */
struct qdz_pair {
    float *d, *dmin;
};

/* rows [r0, r0 + nr) of w (a type of 32; the last again where nr is odd,
 * up to 2 np) unpacked: the quants as unsigned bytes into q[r] (32 bytes a
 * block), their bias (Q8_0's 128, Q4_0's 8, Q5_0's 16) taken back per
 * block with x's sum (qdz_blk32), and the scales, row r of block b at
 * 2 np b + r. No prefetch of its own: the pass before brought these rows
 * toward L2 (qdz_rows32), and a second one here 8 KiB ahead cost 1.3x on
 * Q8_0 from memory */
QD_INLINE void qdz_unpack32(const enum dtype t, const struct weight_view *w, int r0, int nr,
                            const int np, int8_t *const *q, const struct qdz_pair *pr, int nb)
{
    const size_t wb = quant_block_bytes(t);
    for (int r = 0; r < 2 * np; r++) {
        const char *row = weight_row(w, r0 + (r < nr ? r : nr - 1));
        float *d = pr->d + r, *dmin = pr->dmin + r;
        int8_t *qr = q[r];
        for (int b = 0; b < nb; b++, row += wb, qr += 32, d += 2 * np, dmin += 2 * np) {
            __m256i u;
            switch (t) {
            case DTYPE_Q8_0:
                u = _mm256_xor_si256(qd_load(row + 2), _mm256_set1_epi8(-128));
                break;
            case DTYPE_Q4_0:
                u = _mm256_add_epi8(qd_w_q4_0(row), _mm256_set1_epi8(8));
                break;
            case DTYPE_Q5_0:
                u = qd_w_q5(row + 2, row + 6);
                break;
            default: /* Q5_1 */
                u = qd_w_q5(row + 4, row + 8);
                *dmin = -qd_f16(row + 2);
                break;
            }
            _mm256_storeu_si256((__m256i *)qr, u);
            *d = qd_f16(row);
        }
    }
}

QD_INLINE __m512i qdz_bcast8(const void *p)
{
    int64_t v;
    memcpy(&v, p, 8);
    return _mm512_set1_epi64(v);
}

/* QDZ_NP pairs of weight rows a pass over a group's x: each load of x goes
 * to all of them (their 8 partials each stay in registers) */
#define QDZ_NP 2

/* log2 of type t's bias in its unsigned quants (Q8_0 128, Q4_0 8, Q5_0
 * 16), 0 for Q5_1's (none: its min takes x's sums) */
QD_INLINE int qdz_bias_log2(const enum dtype t)
{
    return t == DTYPE_Q8_0 ? 7 : t == DTYPE_Q4_0 ? 3 : t == DTYPE_Q5_0 ? 4 : 0;
}

/* one block of the pairs' rows (unsigned quants at q[2h], q[2h + 1]) of
 * type t against a group's block xb into partials p[h], as qdt_scale's
 * steps; Q5_1 adds its min's */
QD_INLINE void qdz_blk32(__m512 *p, const char *xb, const int8_t *const *q, const float *d,
                         const float *dmin, const enum dtype t, const int np)
{
    __m512i a[2 * QDZ_NP];
    for (int r = 0; r < 2 * np; r++)
        a[r] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const __m512i xv = _mm512_loadu_si512(xb + 64 * k);
#pragma GCC unroll 4
        for (int r = 0; r < 2 * np; r++)
            a[r] = _mm512_dpbusd_epi32(a[r], qdz_bcast8(q[r] + 8 * k), xv);
    }
    const __m512i xs = _mm512_loadu_si512(xb + 320);
    const __m512 dx = _mm512_loadu_ps(xb + 256);
    const __m512i bias =
        qdz_bias_log2(t) ? _mm512_slli_epi32(xs, qdz_bias_log2(t)) : _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < np; h++) {
        /* lane 2i: row 0's even quads plus its odd ones (from lane 2i + 1),
         * lane 2i + 1: row 1's odd plus its even; less the bias times x's sum */
        const __m512i t0 = _mm512_mask_blend_epi32(0xAAAA, a[2 * h], a[2 * h + 1]),
                      t1 = _mm512_mask_blend_epi32(0xAAAA, a[2 * h + 1], a[2 * h]);
        const __m512i is =
            _mm512_sub_epi32(_mm512_add_epi32(t0, _mm512_shuffle_epi32(t1, 0xB1)), bias);
        const __m512 dd = _mm512_mul_ps(_mm512_castsi512_ps(qdz_bcast8(d + 2 * h)), dx);
        if (t != DTYPE_Q5_1) {
            p[h] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(is), p[h]);
        } else {
            const __m512 dm =
                _mm512_sub_ps(_mm512_setzero_ps(),
                              _mm512_mul_ps(_mm512_castsi512_ps(qdz_bcast8(dmin + 2 * h)), dx));
            p[h] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(is), p[h]);
            p[h] = _mm512_fmadd_ps(dm, _mm512_cvtepi32_ps(xs), p[h]);
        }
    }
}

/* np pairs of unpacked rows (q[2h], q[2h + 1], 32 bytes a block; their
 * scales pr) times one packed group: y[i ldy + r] for its rows, the pass's
 * nr rows r */
QD_INLINE void qdz_rows32(const char *xg, int8_t *const *q, const struct qdz_pair *pr, int nb,
                          const enum dtype t, float *y, size_t ldy, int rows, int nr,
                          const char *pf, size_t pf_step, const int np)
{
    __m512 p[8][QDZ_NP];
    for (int i = 0; i < 8; i++)
        for (int h = 0; h < np; h++)
            p[i][h] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b += 8)
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            if (b + i >= nb)
                break;
            /* the next rows toward L2, a slice a block, while this pass
             * computes (their unpacking then reads them from there) */
            for (size_t o = 0; o < pf_step; o += 64)
                _mm_prefetch(pf + (size_t)(b + i) * pf_step + o, _MM_HINT_T1);
            const int8_t *qb[2 * QDZ_NP];
            for (int r = 0; r < 2 * np; r++)
                qb[r] = q[r] + 32 * (size_t)(b + i);
            qdz_blk32(p[i], xg + (size_t)(b + i) * QDOT_XZ_BLOCK, qb,
                      pr->d + 2 * (size_t)np * (b + i), pr->dmin + 2 * (size_t)np * (b + i), t, np);
        }
    for (int h = 0; h < np; h++) {
        /* qdot_sum8, lane by lane */
        const __m512 s = _mm512_add_ps(
            _mm512_add_ps(_mm512_add_ps(p[0][h], p[4][h]), _mm512_add_ps(p[2][h], p[6][h])),
            _mm512_add_ps(_mm512_add_ps(p[1][h], p[5][h]), _mm512_add_ps(p[3][h], p[7][h])));
        float v[16];
        _mm512_storeu_ps(v, s);
        for (int i = 0; i < rows; i++) {
            y[(size_t)i * ldy + 2 * h] = v[2 * i];
            if (2 * h + 1 < nr)
                y[(size_t)i * ldy + 2 * h + 1] = v[2 * i + 1];
        }
    }
}

/* the kernel for type t (of 32), a constant of each of its callers below
 * so that each type's steps fold and take registers of their own */
QD_INLINE int qdz_tile(const struct qdot_args *a, int r0, int r1, const enum dtype t)
{
    const struct weight_view *w = a->w;
    const int nb = w->cols / QUANT_QK0;
    const size_t wbytes = quant_block_bytes(t);
    const size_t qbytes = ((size_t)nb * QUANT_QK0 + 63) / 64 * 64;
    const size_t pbytes = ((size_t)nb * 4 * 2 * QDZ_NP + 63) / 64 * 64;
    char *buf = cpu_scratch(CPU_SCRATCH_Q_DEQ, 2 * QDZ_NP * qbytes + 2 * pbytes);
    if (!buf)
        return ERR_NOMEM;
    int8_t *q[2 * QDZ_NP];
    for (int i = 0; i < 2 * QDZ_NP; i++)
        q[i] = (int8_t *)(buf + (size_t)i * qbytes);
    const struct qdz_pair pr = {(float *)(buf + 2 * QDZ_NP * qbytes),
                                (float *)(buf + 2 * QDZ_NP * qbytes + pbytes)};
    const int ng = (a->m + QDOT_GROUP - 1) / QDOT_GROUP;
    for (int rb = r0; rb < r1; rb += 2 * QDZ_NP) {
        const int nr = r1 - rb < 2 * QDZ_NP ? r1 - rb : 2 * QDZ_NP, np = (nr + 1) / 2;
        qdz_unpack32(t, w, rb, nr, np, q, &pr, nb);
        /* the next pass's rows (those of the matrix past the task's too:
         * the next task is likely theirs), prefetched during the first group */
        const int rn = rb + 2 * QDZ_NP, nn = w->rows - rn < 2 * QDZ_NP ? w->rows - rn : 2 * QDZ_NP;
        const char *pf = weight_row(w, rn < w->rows ? rn : rb);
        const size_t pf_all = rn < w->rows ? (size_t)nn * w->ld / QUANT_QK0 * wbytes : 0;
        for (int g = 0; g < ng; g++) {
            const char *xg = a->xp + (size_t)g * a->xp_ld;
            const int rows =
                a->m - g * QDOT_GROUP < QDOT_GROUP ? a->m - g * QDOT_GROUP : QDOT_GROUP;
            float *y = a->y + (size_t)g * QDOT_GROUP * a->ldy + rb;
            const size_t pf_step =
                g == 0 ? (pf_all + 64 * (size_t)nb - 1) / (64 * (size_t)nb) * 64 : 0;
            /* QDZ_NP pairs, or a last pair alone */
            if (np == QDZ_NP)
                qdz_rows32(xg, q, &pr, nb, t, y, a->ldy, rows, nr, pf, pf_step, QDZ_NP);
            else
                qdz_rows32(xg, q, &pr, nb, t, y, a->ldy, rows, nr, pf, pf_step, 1);
        }
    }
    return 0;
}

#define QDZ_TYPE(name, t)                                                                          \
    static __attribute__((noinline)) int name(const struct qdot_args *a, int r0, int r1)           \
    {                                                                                              \
        return qdz_tile(a, r0, r1, t);                                                             \
    }
QDZ_TYPE(qdz_q8_0, DTYPE_Q8_0)
QDZ_TYPE(qdz_q4_0, DTYPE_Q4_0)
QDZ_TYPE(qdz_q5_0, DTYPE_Q5_0)
QDZ_TYPE(qdz_q5_1, DTYPE_Q5_1)

/* the types of 32; the K-quants go to vnni-m8 (the same scheme for them,
 * 16 or 32 quad pairs a block and their sub-block scales by VPDPWSSD, was
 * 1.1-1.2x slower than vnni-m8 on Zen 4) */
int qdot_tile_vnni_z(const struct qdot_args *a, int r0, int r1)
{
    switch (a->w->dtype) {
    case DTYPE_Q8_0:
        return qdz_q8_0(a, r0, r1);
    case DTYPE_Q4_0:
        return qdz_q4_0(a, r0, r1);
    case DTYPE_Q5_0:
        return qdz_q5_0(a, r0, r1);
    case DTYPE_Q5_1:
        return qdz_q5_1(a, r0, r1);
    default:
        return qdot_tile_vnni(a, r0, r1);
    }
}
