/* ctgemv.cu's and qconvert.cu's decoding of compressed-tensors' block
 * types, run on the CPU (run.sh says how and why): random blocks of
 * CT_I8, CT_I4 and CT_F8 (f32 scales of many magnitudes, subnormal ones
 * among them; every zero point; every e4m3 byte, NaN in the first row
 * only), 29 rows
 * of 1, 3, 8 and 13 blocks, each row at an odd address.
 *
 * - qdeq (the dequantizing copies and the embedding): every element
 *   bit-equal to core/quant_ct.c's quant_ct_dequantize (a NaN to a NaN).
 * - ct_lane8 (the GEMV's share of a block per lane): every element of
 *   every lane bit-equal to the same, and to its bf16 rounding in bf16
 *   mode.
 * - the GEMV: the warp emulated lane by lane in ctgemv_kernel's order
 *   (block 8i + g to lanes 4g .. 4g + 3, fmaf per element, the butterfly
 *   sum) for m = 1 and 3 rows of x, against the double-precision product
 *   of the CPU's dequantized (in bf16 mode bf16-rounded) weights and x
 *   (bf16-rounded in bf16 mode): |gpu - exact| <= 1e-5 sum |w x|, f32
 *   sums of at most 13 x 8 terms a lane and 5 butterfly steps being
 *   within 2^-24 (104 + 5) sum |w x| of it. (The CPU's own sum is in
 *   another order and within the same bound: the two agree within twice
 *   it, which test_backend_ops checks on a GPU.)
 * Exit 0 when all hold. */
#include <initializer_list>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "quant.cuh"
extern "C" {
#include "core/quant_ct.h"
}

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint64_t rnd()
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

/* Random blocks: bytes random, then a finite scale (|d| in [2^-20,
 * 2^4), one block in 16 a subnormal or zero scale) and for the integer
 * types a zero point in the type's range (CT_I4: [-8, 7]). */
static void ct_random(enum dtype t, uint8_t *p, size_t n_blocks)
{
    const size_t bb = quant_ct_block_bytes(t);
    for (size_t i = 0; i < n_blocks * bb; i++)
        p[i] = (uint8_t)(rnd() >> 56);
    for (size_t b = 0; b < n_blocks; b++, p += bb) {
        uint32_t u = (uint32_t)(rnd() >> 32);
        const uint32_t e = rnd() % 16 == 0 ? 0 : 107 + (uint32_t)(rnd() % 24);
        u = (u & 0x807fffffu) | e << 23;
        if (rnd() % 64 == 0)
            u &= 0x80000000u; /* a zero scale */
        memcpy(p, &u, 4);
        if (t == DTYPE_CT_I4)
            p[4] = (uint8_t)(int8_t)((int)(rnd() % 16) - 8);
    }
}

template <int QT> static float gpu_deq(const uint8_t *row, int c)
{
    return qdeq_row<QT>(row, c);
}
template <int QT> static void gpu_lane8(const uint8_t *blk, int t, bool bf16, float w[8])
{
    if (bf16)
        ct_lane8<QT, true>(blk, t, w);
    else
        ct_lane8<QT, false>(blk, t, w);
}

/* ctgemv_kernel for one weight row and m rows of x (row stride k) */
template <int QT>
static void gpu_gemv(const uint8_t *wr, const float *x, int m, int k, bool bf16, float *y)
{
    const int nb = k / 32;
    for (int i = 0; i < m; i++) {
        float acc[32];
        for (int lane = 0; lane < 32; lane++) {
            const int g = lane >> 2, t = lane & 3;
            acc[lane] = 0.0f;
            for (int b = g; b < nb; b += 8) {
                float wv[8];
                gpu_lane8<QT>(wr + (size_t)b * qtraits<QT>::BYTES, t, bf16, wv);
                const float *xb = x + (size_t)i * k + (size_t)b * 32 + 8 * t;
                for (int e = 0; e < 8; e++)
                    acc[lane] = fmaf(wv[e], xb[e], acc[lane]);
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            float a2[32];
            for (int l = 0; l < 32; l++)
                a2[l] = __fadd_rn(acc[l], acc[l ^ o]);
            memcpy(acc, a2, sizeof acc);
        }
        y[i] = acc[0];
    }
}

#define CT_DISP(qt, F, ...)                                                                        \
    switch (qt) {                                                                                  \
    case CUDA_CT_I8:                                                                               \
        return F<CUDA_CT_I8>(__VA_ARGS__);                                                         \
    case CUDA_CT_I4:                                                                               \
        return F<CUDA_CT_I4>(__VA_ARGS__);                                                         \
    default:                                                                                       \
        return F<CUDA_CT_F8>(__VA_ARGS__);                                                         \
    }
static float deq_any(int qt, const uint8_t *row, int c)
{
    CT_DISP(qt, gpu_deq, row, c);
}
static void lane8_any(int qt, const uint8_t *blk, int t, bool bf16, float w[8])
{
    CT_DISP(qt, gpu_lane8, blk, t, bf16, w);
}
static void gemv_any(int qt, const uint8_t *wr, const float *x, int m, int k, bool bf16, float *y)
{
    CT_DISP(qt, gpu_gemv, wr, x, m, k, bf16, y);
}

/* bit-equal, or both NaN */
static bool same(float a, float b)
{
    return memcmp(&a, &b, 4) == 0 || (isnan(a) && isnan(b));
}

int main()
{
    static const enum dtype dts[3] = {DTYPE_CT_I8, DTYPE_CT_I4, DTYPE_CT_F8};
    static const int qts[3] = {CUDA_CT_I8, CUDA_CT_I4, CUDA_CT_F8};
    size_t fails = 0;
    for (int ti = 0; ti < 3; ti++) {
        const enum dtype t = dts[ti];
        const int qt = qts[ti];
        const size_t bb = quant_ct_block_bytes(t);
        if (bb != (size_t)(qt == CUDA_CT_I8   ? qtraits<CUDA_CT_I8>::BYTES
                           : qt == CUDA_CT_I4 ? qtraits<CUDA_CT_I4>::BYTES
                                              : qtraits<CUDA_CT_F8>::BYTES)) {
            printf("%s: block bytes differ from quant_ct.h's\n", dtype_name(t));
            return 1;
        }
        for (int nbk : {1, 3, 8, 13}) {
            const int k = nbk * 32, rows = 29, m = 3;
            const size_t rb = (size_t)nbk * bb;
            /* one byte more, so that every row sits at an odd address */
            uint8_t *store = (uint8_t *)malloc(rows * rb + 1), *w = store + 1;
            ct_random(t, w, (size_t)rows * nbk);
            /* e4m3 NaNs in row 0 only, so the other rows reach the GEMV */
            for (size_t i = rb; t == DTYPE_CT_F8 && i < rows * rb; i++)
                if (i % 36 >= 4 && (w[i] & 0x7f) == 0x7f)
                    w[i] ^= 1;
            float *ref = (float *)malloc(sizeof(float) * k);
            float *x = (float *)malloc(sizeof(float) * m * k);
            float *xr = (float *)malloc(sizeof(float) * m * k);
            size_t bad = 0, lbad = 0, ybad = 0, nan_rows = 0;
            double worst = 0;
            for (int r = 0; r < rows; r++) {
                const uint8_t *wr = w + (size_t)r * rb;
                quant_ct_dequantize(t, wr, ref, (size_t)k);
                for (int c = 0; c < k; c++)
                    bad += !same(deq_any(qt, wr, c), ref[c]);
                for (int b = 0; b < nbk; b++)
                    for (int lane = 0; lane < 4; lane++)
                        for (int bf = 0; bf < 2; bf++) {
                            float lv[8];
                            lane8_any(qt, wr + (size_t)b * bb, lane, bf, lv);
                            for (int e = 0; e < 8; e++) {
                                const float c = ref[32 * b + 8 * lane + e];
                                lbad += !same(lv[e], bf ? bf16_round(c) : c);
                            }
                        }
                bool has_nan = false;
                for (int c = 0; c < k; c++)
                    has_nan |= isnan(ref[c]);
                if (has_nan) {
                    nan_rows++; /* the loader refuses these; decoding is checked above */
                    continue;
                }
                for (int bf = 0; bf < 2; bf++) {
                    for (int i = 0; i < m * k; i++) {
                        x[i] = (float)((double)(rnd() >> 11) / 9007199254740992.0 * 2 - 1);
                        xr[i] = bf ? bf16_round(x[i]) : x[i];
                    }
                    float y[3];
                    gemv_any(qt, wr, xr, m, k, bf, y);
                    for (int i = 0; i < m; i++) {
                        double exact = 0, mag = 0;
                        for (int c = 0; c < k; c++) {
                            const double wc = bf ? bf16_round(ref[c]) : ref[c];
                            exact += wc * xr[(size_t)i * k + c];
                            mag += fabs(wc * xr[(size_t)i * k + c]);
                        }
                        const double err = fabs((double)y[i] - exact), tol = 1e-5 * mag + 1e-37;
                        worst = fmax(worst, err / tol);
                        if (!(err <= tol) && ybad++ < 2)
                            printf("  %s row %d x %d %s: gpu %.9g exact %.9g\n", dtype_name(t), r,
                                   i, bf ? "bf16" : "f32", y[i], exact);
                    }
                }
            }
            printf("%s k=%d: dequant %zu differ, lane shares %zu differ, gemv %zu out of "
                   "tolerance (worst %.3g of it; %zu rows with a NaN skipped)\n",
                   dtype_name(t), k, bad, lbad, ybad, worst, nan_rows);
            fails += bad + lbad + ybad;
            free(store);
            free(ref);
            free(x);
            free(xr);
        }
    }
    printf("%s\n", fails ? "FAIL" : "decoding bit-equal, GEMV within tolerance");
    return fails != 0;
}
