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
 * The product is bound by reading the weights, so each widened weight vector
 * feeds GEMV_MB input rows and each input vector GEMV_R weight rows: a
 * GEMV_R x GEMV_MB block of accumulators, with the weight rows of a block
 * kept hot in L1/L2 while the input rows go by in groups of GEMV_MB. */
#include "backend/cpu/gemv_isa.h"

#include "core/dtype.h"

#define GEMV_R 4  /* weight rows per block */
#define GEMV_MB 4 /* input rows per block */

#define GEMV_INLINE static inline __attribute__((always_inline))

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

/* Weight rows r .. r + R - 1 times input rows i0 .. i0 + M - 1 (R, M
 * constants after inlining, so the accumulators live in registers). */
GEMV_INLINE void gemv_block(const struct gemv_args *a, enum dtype t, int r, const int R, int i0,
                            const int M)
{
    const int k = a->w->cols;
    const char *wr[GEMV_R];
    const float *xr[GEMV_MB];
    gv_t acc[GEMV_R][GEMV_MB];
#pragma GCC unroll 4
    for (int p = 0; p < R; p++)
        wr[p] = weight_row(a->w, r + p);
#pragma GCC unroll 4
    for (int i = 0; i < M; i++)
        xr[i] = a->x + (size_t)(i0 + i) * k;
#pragma GCC unroll 4
    for (int p = 0; p < R; p++)
#pragma GCC unroll 4
        for (int i = 0; i < M; i++)
            acc[p][i] = gv_zero();
    int c = 0;
    for (; c + GV_LANES <= k; c += GV_LANES) {
        gv_t wv[GEMV_R];
#pragma GCC unroll 4
        for (int p = 0; p < R; p++)
            wv[p] = gv_load_w(t, wr[p], c);
#pragma GCC unroll 4
        for (int i = 0; i < M; i++) {
            gv_t xv = gv_load_f32(xr[i] + c);
#pragma GCC unroll 4
            for (int p = 0; p < R; p++)
                acc[p][i] = gv_fma(wv[p], xv, acc[p][i]);
        }
    }
    float s[GEMV_R][GEMV_MB];
#pragma GCC unroll 4
    for (int p = 0; p < R; p++)
#pragma GCC unroll 4
        for (int i = 0; i < M; i++)
            s[p][i] = gv_hsum(acc[p][i]);
    for (; c < k; c++)
#pragma GCC unroll 4
        for (int p = 0; p < R; p++) {
            float wv = gv_elem_w(t, wr[p], c);
#pragma GCC unroll 4
            for (int i = 0; i < M; i++)
                s[p][i] += wv * xr[i][c];
        }
#pragma GCC unroll 4
    for (int i = 0; i < M; i++)
#pragma GCC unroll 4
        for (int p = 0; p < R; p++)
            a->y[(size_t)(i0 + i) * a->ldy + r + p] = s[p][i];
}

/* Every input row against R weight rows from r, in groups of GEMV_MB. */
GEMV_INLINE void gemv_rowgroup(const struct gemv_args *a, enum dtype t, int r, const int R)
{
    int i0 = 0;
    for (; i0 + GEMV_MB <= a->m; i0 += GEMV_MB)
        gemv_block(a, t, r, R, i0, GEMV_MB);
    switch (a->m - i0) {
    case 1:
        gemv_block(a, t, r, R, i0, 1);
        break;
    case 2:
        gemv_block(a, t, r, R, i0, 2);
        break;
    case 3:
        gemv_block(a, t, r, R, i0, 3);
        break;
    }
}

GEMV_INLINE void gemv_rows_typed(const struct gemv_args *a, enum dtype t, int r0, int r1)
{
    int r = r0;
    for (; r + GEMV_R <= r1; r += GEMV_R)
        gemv_rowgroup(a, t, r, GEMV_R);
    for (; r < r1; r++)
        gemv_rowgroup(a, t, r, 1);
}

void GEMV_ROWS_FN(const struct gemv_args *a, int r0, int r1)
{
    /* one loop per dtype: the conversion is chosen outside the inner loop */
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
}
