/* qgemv.cu's and qconvert.cu's block decoding, run on the CPU (run.sh says
 * how and why): random blocks of every type (finite f16 scales, every
 * other byte random), 37 rows of 1, 3, 9 and 16 blocks, one x row with a
 * tie of magnitudes in it. The warps are emulated lane by lane in the
 * kernels' order: the 4-lane groups and 8-block steps of the 32-element
 * types, the whole warp per 256-element block, the butterfly sums, the
 * partials' owners and their final sum. Exit 0 when everything is
 * bit-equal to the CPU backend. */
#include <climits>
#include <initializer_list>
#include <stdio.h>
#include <stdlib.h>

#include "quant.cuh"
extern "C" {
#include "backend/cpu/qdot.h"
#include "core/quant.h"
}
static const int dts[7] = {DTYPE_Q8_0, DTYPE_Q4_0, DTYPE_Q5_0, DTYPE_Q5_1,
                           DTYPE_Q4_K, DTYPE_Q5_K, DTYPE_Q6_K};
static const int qts[7] = {CUDA_Q8_0, CUDA_Q4_0, CUDA_Q5_0, CUDA_Q5_1,
                           CUDA_Q4_K, CUDA_Q5_K, CUDA_Q6_K};
/* qlinear.c's (not linked: it needs the whole CPU backend) */
extern "C" size_t qdot_x_row_bytes(enum dtype t, int n)
{
    return dtype_block(t) == QUANT_QK0 ? (size_t)n / QUANT_QK0 * sizeof(struct quant_q8_0)
                                       : (size_t)n / QUANT_QKK * sizeof(struct quant_q8_k);
}

static uint64_t rs = 88172645463325252ull;
static uint64_t rnd()
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}
static float frnd()
{
    return (float)((rnd() >> 11) * (1.0 / 9007199254740992.0)) * 2 - 1;
}

/* qgemv.cu's quantize_q8_0_kernel and quantize_q8_k_kernel, a warp
 * emulated lane by lane */
static void gpu_q8_0(const float *x, int8_t *qs, float *d, size_t nblocks)
{
    for (size_t blk = 0; blk < nblocks; blk++) {
        float amax = 0; /* butterfly of fmaxf: order-free */
        for (int lane = 0; lane < 32; lane++)
            amax = fmaxf(amax, fmaxf(0.0f, fabsf(x[blk * 32 + lane])));
        const float dd = amax / 127.0f, id = dd != 0.0f ? 1.0f / dd : 0.0f;
        for (int lane = 0; lane < 32; lane++)
            qs[blk * 32 + lane] = (int8_t)roundf(__fmul_rn(x[blk * 32 + lane], id));
        d[blk] = f16_to_f32(f32_to_f16(dd));
    }
}
static void gpu_q8_k(const float *x, int8_t *qs, float *d, size_t nblocks)
{
    for (size_t blk = 0; blk < nblocks; blk++) {
        float A[32], MX[32];
        int I[32];
        for (int lane = 0; lane < 32; lane++) {
            float amax = 0, mx = 0;
            int idx = INT_MAX;
            for (int e = 0; e < 8; e++) {
                float v = x[blk * 256 + lane * 8 + e];
                if (fabsf(v) > amax) {
                    amax = fabsf(v);
                    mx = v;
                    idx = lane * 8 + e;
                }
            }
            A[lane] = amax;
            MX[lane] = mx;
            I[lane] = idx;
        }
        for (int o = 16; o > 0; o >>= 1) {
            float A2[32], M2[32];
            int I2[32];
            for (int lane = 0; lane < 32; lane++) {
                float amax = A[lane], mx = MX[lane];
                int idx = I[lane];
                float oa = A[lane ^ o], om = MX[lane ^ o];
                int oi = I[lane ^ o];
                if (oa > amax || (oa == amax && oi < idx)) {
                    amax = oa;
                    mx = om;
                    idx = oi;
                }
                A2[lane] = amax;
                M2[lane] = mx;
                I2[lane] = idx;
            }
            memcpy(A, A2, sizeof A);
            memcpy(MX, M2, sizeof MX);
            memcpy(I, I2, sizeof I);
        }
        for (int lane = 1; lane < 32; lane++)
            if (A[lane] != A[0] || I[lane] != I[0]) {
                printf("lanes disagree\n");
                exit(1);
            }
        if (A[0] == 0) {
            memset(qs + blk * 256, 0, 256);
            d[blk] = 0;
            continue;
        }
        const float iscale = -127.0f / MX[0];
        for (int j = 0; j < 256; j++) {
            int t = (int)rintf(__fmul_rn(iscale, x[blk * 256 + j]));
            qs[blk * 256 + j] = (int8_t)(t < 127 ? t : 127);
        }
        d[blk] = 1.0f / iscale;
    }
}

/* qgemv_dot_kernel for one weight row and one x row */
template <int QT> static float gpu_dot(const uint8_t *wr, const int8_t *xqs, const float *xd, int k)
{
    using T = qtraits<QT>;
    const int nb = k / T::QK;
    float p[32] = {0};
    if (T::QK == 32) {
        for (int b0 = 0; b0 < nb; b0 += 8) {
            int is[32], ms[32];
            bool okl[32];
            for (int lane = 0; lane < 32; lane++) {
                int g = lane >> 2, t = lane & 3, b = b0 + g;
                bool ok = b < nb;
                okl[lane] = ok;
                qlane L = {0, 0, 0, 0, 0, 0, 0};
                if (ok)
                    L = q_lane<QT>(wr + (size_t)b * T::BYTES, t);
                is[lane] = ms[lane] = 0;
                if (ok)
                    q_lane_dot(L, xqs + (size_t)b * 32, &is[lane], &ms[lane]);
            }
            for (int o = 1; o < 4; o <<= 1) {
                int i2[32], m2[32];
                for (int l = 0; l < 32; l++) {
                    i2[l] = is[l] + is[l ^ o];
                    m2[l] = ms[l] + ms[l ^ o];
                }
                memcpy(is, i2, sizeof is);
                memcpy(ms, m2, sizeof ms);
            }
            for (int lane = 0; lane < 32; lane++) {
                int b = b0 + (lane >> 2);
                if (okl[lane])
                    q_apply<QT>(p[lane], wr + (size_t)b * T::BYTES, xd[b], is[lane], ms[lane]);
            }
        }
    } else {
        for (int b = 0; b < nb; b++) {
            int is = 0, ms = 0;
            for (int lane = 0; lane < 32; lane++) {
                qlane L = q_lane<QT>(wr + (size_t)b * T::BYTES, lane);
                int a, c;
                q_lane_dot(L, xqs + (size_t)b * 256, &a, &c);
                is += a;
                ms += c;
            }
            q_apply<QT>(p[b & 7], wr + (size_t)b * T::BYTES, xd[b], is, ms);
        }
    }
    float q[8];
    for (int j = 0; j < 8; j++)
        q[j] = p[T::QK == 32 ? 4 * j : j];
    return __fadd_rn(__fadd_rn(__fadd_rn(q[0], q[4]), __fadd_rn(q[2], q[6])),
                     __fadd_rn(__fadd_rn(q[1], q[5]), __fadd_rn(q[3], q[7])));
}
template <int QT> static float gpu_deq(const uint8_t *row, int c)
{
    return qdeq_row<QT>(row, c);
}

#define DISP(qt, F, ...)                                                                           \
    switch (qt) {                                                                                  \
    case 0:                                                                                        \
        return F<0>(__VA_ARGS__);                                                                  \
    case 1:                                                                                        \
        return F<1>(__VA_ARGS__);                                                                  \
    case 2:                                                                                        \
        return F<2>(__VA_ARGS__);                                                                  \
    case 3:                                                                                        \
        return F<3>(__VA_ARGS__);                                                                  \
    case 4:                                                                                        \
        return F<4>(__VA_ARGS__);                                                                  \
    case 5:                                                                                        \
        return F<5>(__VA_ARGS__);                                                                  \
    default:                                                                                       \
        return F<6>(__VA_ARGS__);                                                                  \
    }
static float dot_any(int qt, const uint8_t *wr, const int8_t *xqs, const float *xd, int k)
{
    DISP(qt, gpu_dot, wr, xqs, xd, k);
}
static float deq_any(int qt, const uint8_t *row, int c)
{
    DISP(qt, gpu_deq, row, c);
}

int main()
{
    int fails = 0;
    for (int ti = 0; ti < 7; ti++) {
        enum dtype t = (enum dtype)dts[ti];
        int qt = qts[ti];
        const int qk = dtype_block(t);
        const size_t bb = quant_block_bytes(t);
        for (int nbk : {1, 3, 9, 16}) {
            const int k = nbk * qk, rows = 37;
            const size_t rb = (size_t)nbk * bb;
            uint8_t *w = (uint8_t *)malloc(rows * rb);
            for (size_t i = 0; i < rows * rb; i++)
                w[i] = (uint8_t)(rnd() >> 56);
            for (int r = 0; r < rows * nbk; r++) {
                uint8_t *p = w + r * bb;
                size_t at[2] = {(size_t)(t == DTYPE_Q6_K ? 208 : 0), 2};
                int ns = (t == DTYPE_Q4_K || t == DTYPE_Q5_K || t == DTYPE_Q5_1) ? 2 : 1;
                for (int s = 0; s < ns; s++) {
                    uint16_t h = (uint16_t)(((3 + rnd() % 6) << 10) | (rnd() & 0x3ff));
                    memcpy(p + at[s], &h, 2);
                }
            }
            /* dequantization */
            float *ref = (float *)malloc(sizeof(float) * k);
            size_t bad = 0;
            for (int r = 0; r < rows; r++) {
                quant_dequantize(t, w + r * rb, ref, k);
                for (int c = 0; c < k; c++) {
                    float g = deq_any(qt, w + r * rb, c);
                    if (memcmp(&g, &ref[c], 4))
                        bad++;
                }
            }
            /* x and the dot products */
            float *x = (float *)malloc(sizeof(float) * k);
            for (int j = 0; j < k; j++)
                x[j] = frnd() * ((j % 7) == 0 ? 4.0f : 1.0f);
            if (nbk == 3)
                x[5] = -x[200 % k]; /* a tie of magnitudes */
            if (nbk == 3 && qk == 256) {
                x[10] = 3.5f;
                x[100] = -3.5f;
            }
            char *xqc = (char *)malloc(qdot_x_row_bytes(t, k));
            if (qk == 32)
                quant_q8_0_from_f32(x, xqc, k);
            else
                quant_q8_k_from_f32(x, xqc, k);
            int8_t *xqs = (int8_t *)malloc(k);
            float *xd = (float *)malloc(sizeof(float) * (k / qk));
            if (qk == 32)
                gpu_q8_0(x, xqs, xd, k / 32);
            else
                gpu_q8_k(x, xqs, xd, k / 256);
            /* the GPU's layout against the CPU's blocks */
            size_t xbad = 0;
            for (int b = 0; b < k / qk; b++) {
                if (qk == 32) {
                    struct quant_q8_0 q;
                    memcpy(&q, xqc + b * sizeof q, sizeof q);
                    if (f16_to_f32(q.d) != xd[b] || memcmp(q.qs, xqs + b * 32, 32))
                        xbad++;
                } else {
                    struct quant_q8_k q;
                    memcpy(&q, xqc + b * sizeof q, sizeof q);
                    if (q.d != xd[b] || memcmp(q.qs, xqs + b * 256, 256))
                        xbad++;
                }
            }
            float *yc = (float *)malloc(sizeof(float) * rows);
            struct weight_view wv = {t, w, rows, k, (size_t)k};
            struct qdot_args a = {yc, (size_t)rows, xqc, qdot_x_row_bytes(t, k), NULL, 0, 1, &wv};
            qdot_rows_scalar(&a, 0, rows);
            size_t ybad = 0;
            for (int r = 0; r < rows; r++) {
                float g = dot_any(qt, w + r * rb, xqs, xd, k);
                if (memcmp(&g, &yc[r], 4)) {
                    if (ybad++ < 2)
                        printf("  row %d: gpu %.9g cpu %.9g\n", r, g, yc[r]);
                }
            }
            printf("%s k=%d: dequant %zu differ, x blocks %zu differ, dot %zu of %d rows differ\n",
                   dtype_name(t), k, bad, xbad, ybad, rows);
            fails += bad + xbad + ybad;
            free(w);
            free(ref);
            free(x);
            free(xqc);
            free(xqs);
            free(xd);
            free(yc);
        }
    }
    printf("%s\n", fails ? "FAIL" : "all bit-equal");
    return fails != 0;
}
