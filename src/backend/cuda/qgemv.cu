/* The GEMVs of a linear layer with GGUF block-type weights and few input
 * rows (decode), y[m, n] = x[m, k] @ w^T (+ bias), m <= CUDA_GEMV_MAX_M,
 * and the quantization of x for the bf16-mode one.
 *
 * Both read w once: one warp per weight row, all m rows of x per weight
 * read (x stays in L1/L2), f32 accumulation, bias in the same store.
 *
 * - qgemv_f32 (f32 mode): lane l takes the row's columns l, l + 32, ...,
 *   dequantizes each exactly (quant.cuh's qdeq: the CPU's values) and
 *   multiplies it by x in f32. Consecutive lanes read consecutive elements
 *   of one block.
 * - qgemv_dot (bf16 mode): x quantized first (quantize_x below, exactly as
 *   the CPU backend's qlinear.c), then every block's integer dot product
 *   with dp4a, each lane 8 of the block's elements (a 32-element block is
 *   4 lanes, 8 blocks per warp step; a 256-element block the whole warp),
 *   summed over the lanes exactly in 32 bits. The blocks' f32 scaling then
 *   follows the CPU's order to the bit (backend/cpu/qdot.h): block b adds
 *   into partial b % 8 by fmaf, in increasing b, and the 8 partials are
 *   summed as qdot_sum8. With 32-element blocks, block 8i + g is group g's
 *   in step i, so group g owns partial g; with 256-element blocks, lane b %
 *   8 applies block b. Integer sums are exact in any order, so the lanes'
 *   split of a block changes nothing: the result is the CPU's bits, x's
 *   quantization included.
 */
#include <limits.h>

#include "quant.cuh"

#define QG_WARPS 8 /* rows (warps) per block of 256 threads */

/* ---- x quantized per block ---- */

/* One warp per block of 32: Q8_0 as qlinear.c's quantize_q8_0. */
__global__ void quantize_q8_0_kernel(int8_t *__restrict__ qs, float *__restrict__ d,
                                     const float *__restrict__ x, size_t nblocks)
{
    const size_t blk = (size_t)blockIdx.x * QG_WARPS + (threadIdx.x >> 5);
    if (blk >= nblocks)
        return;
    const int lane = threadIdx.x & 31;
    const float v = x[blk * 32 + (size_t)lane];
    float amax = fmaxf(0.0f, fabsf(v)); /* fmaxf drops a NaN, as the CPU's loop from 0 */
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float dd = amax / 127.0f, id = dd != 0.0f ? 1.0f / dd : 0.0f;
    qs[blk * 32 + (size_t)lane] = (int8_t)roundf(__fmul_rn(v, id));
    if (lane == 0)
        d[blk] = __half2float(__float2half_rn(dd));
}

/* One warp per block of 256, 8 elements a lane: Q8_K as qlinear.c's
 * quantize_q8_k (the first element of the largest magnitude maps to -127). */
__global__ void quantize_q8_k_kernel(int8_t *__restrict__ qs, float *__restrict__ d,
                                     const float *__restrict__ x, size_t nblocks)
{
    const size_t blk = (size_t)blockIdx.x * QG_WARPS + (threadIdx.x >> 5);
    if (blk >= nblocks)
        return;
    const int lane = threadIdx.x & 31;
    const float *xb = x + blk * 256 + (size_t)lane * 8;
    float v[8];
    float amax = 0.0f, mx = 0.0f;
    int idx = INT_MAX;
    for (int e = 0; e < 8; e++) {
        v[e] = xb[e];
        if (fabsf(v[e]) > amax) {
            amax = fabsf(v[e]);
            mx = v[e];
            idx = lane * 8 + e;
        }
    }
    /* the largest magnitude, the smallest index among equals: every lane
     * ends with the same (amax, mx, idx) */
    for (int o = 16; o > 0; o >>= 1) {
        const float oa = __shfl_xor_sync(0xffffffffu, amax, o);
        const float om = __shfl_xor_sync(0xffffffffu, mx, o);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (oa > amax || (oa == amax && oi < idx)) {
            amax = oa;
            mx = om;
            idx = oi;
        }
    }
    int8_t *q = qs + blk * 256 + (size_t)lane * 8;
    if (amax == 0.0f) {
        for (int e = 0; e < 8; e++)
            q[e] = 0;
        if (lane == 0)
            d[blk] = 0.0f;
        return;
    }
    const float iscale = -127.0f / mx;
    for (int e = 0; e < 8; e++) {
        const int t = (int)rintf(__fmul_rn(iscale, v[e])); /* nearest even */
        q[e] = (int8_t)(t < 127 ? t : 127);
    }
    if (lane == 0)
        d[blk] = 1.0f / iscale;
}

extern "C" cudaError_t cuda_launch_quantize_x(cudaStream_t st, void *xq, const float *x, int m,
                                              int k, int qtype)
{
    if (m <= 0 || k <= 0)
        return cudaSuccess;
    const int qk = cuda_qtype_qk(qtype);
    if (qtype < CUDA_Q8_0 || qtype > CUDA_Q6_K || k % qk != 0)
        return cudaErrorInvalidValue;
    const size_t nblocks = (size_t)m * (size_t)(k / qk);
    const size_t grid = (nblocks + QG_WARPS - 1) / QG_WARPS;
    if (grid > INT_MAX)
        return cudaErrorInvalidValue;
    int8_t *qs = (int8_t *)xq;
    float *d = (float *)((char *)xq + cuda_qx_scales_at(m, k));
    if (qk == 32)
        quantize_q8_0_kernel<<<(unsigned)grid, QG_WARPS * 32, 0, st>>>(qs, d, x, nblocks);
    else
        quantize_q8_k_kernel<<<(unsigned)grid, QG_WARPS * 32, 0, st>>>(qs, d, x, nblocks);
    return cudaGetLastError();
}

/* ---- the integer dot products ---- */

/* One warp per weight row, M rows of x quantized (qs int8 (M, k), d f32
 * (M, k / QK)). */
template <int QT, int M>
__global__ void __launch_bounds__(QG_WARPS * 32)
    qgemv_dot_kernel(float *__restrict__ y, const int8_t *__restrict__ xqs,
                     const float *__restrict__ xd, const uint8_t *__restrict__ w, int n, int k,
                     size_t row_bytes, const float *__restrict__ bias)
{
    using T = qtraits<QT>;
    constexpr bool SMALL = T::QK == 32; /* 4 lanes a block, else 32 */
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * QG_WARPS + (threadIdx.x >> 5);
    if (row >= n)
        return; /* the whole warp: no block-wide barrier follows */
    const uint8_t *wr = w + (size_t)row * row_bytes;
    const int nb = k / T::QK;

    float p[M]; /* SMALL: partial lane / 4 (the same in the group's 4
                   lanes); else partial `lane` in lanes 0..7 */
#pragma unroll
    for (int i = 0; i < M; i++)
        p[i] = 0.0f;

    if constexpr (SMALL) {
        const int g = lane >> 2, t = lane & 3;
        for (int b0 = 0; b0 < nb; b0 += 8) {
            const int b = b0 + g;
            const bool ok = b < nb;
            const uint8_t *blk = wr + (size_t)b * T::BYTES;
            qlane L = {0, 0, 0, 0, 0, 0, 0};
            if (ok)
                L = q_lane<QT>(blk, t);
            int is[M], ms[M];
#pragma unroll
            for (int i = 0; i < M; i++) {
                is[i] = ms[i] = 0;
                if (ok)
                    q_lane_dot(L, xqs + (size_t)i * k + (size_t)b * 32, &is[i], &ms[i]);
                /* the group's 4 lanes: exact integer sums */
                for (int o = 1; o < 4; o <<= 1) {
                    is[i] += __shfl_xor_sync(0xffffffffu, is[i], o);
                    ms[i] += __shfl_xor_sync(0xffffffffu, ms[i], o);
                }
                if (ok)
                    q_apply<QT>(p[i], blk, xd[(size_t)i * nb + b], is[i], ms[i]);
            }
        }
    } else {
        for (int b = 0; b < nb; b++) {
            const uint8_t *blk = wr + (size_t)b * T::BYTES;
            const qlane L = q_lane<QT>(blk, lane);
#pragma unroll
            for (int i = 0; i < M; i++) {
                int is, ms;
                q_lane_dot(L, xqs + (size_t)i * k + (size_t)b * 256, &is, &ms);
                for (int o = 1; o < 32; o <<= 1) {
                    is += __shfl_xor_sync(0xffffffffu, is, o);
                    ms += __shfl_xor_sync(0xffffffffu, ms, o);
                }
                if (lane == (b & 7))
                    q_apply<QT>(p[i], blk, xd[(size_t)i * nb + b], is, ms);
            }
        }
    }

    /* the 8 partials into lane 0, summed as the CPU's qdot_sum8 */
#pragma unroll
    for (int i = 0; i < M; i++) {
        float q[8];
#pragma unroll
        for (int j = 0; j < 8; j++)
            q[j] = __shfl_sync(0xffffffffu, p[i], SMALL ? 4 * j : j);
        if (lane == 0) {
            const float v = __fadd_rn(__fadd_rn(__fadd_rn(q[0], q[4]), __fadd_rn(q[2], q[6])),
                                      __fadd_rn(__fadd_rn(q[1], q[5]), __fadd_rn(q[3], q[7])));
            y[(size_t)i * n + row] = bias ? __fadd_rn(v, bias[row]) : v;
        }
    }
}

/* One warp per weight row: the row dequantized element by element (lane
 * l: columns l, l + 32, ...), f32 products. */
template <int QT, int M>
__global__ void __launch_bounds__(QG_WARPS * 32)
    qgemv_f32_kernel(float *__restrict__ y, const float *__restrict__ x,
                     const uint8_t *__restrict__ w, int n, int k, size_t row_bytes,
                     const float *__restrict__ bias)
{
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * QG_WARPS + (threadIdx.x >> 5);
    if (row >= n)
        return;
    const uint8_t *wr = w + (size_t)row * row_bytes;
    float acc[M];
#pragma unroll
    for (int i = 0; i < M; i++)
        acc[i] = 0.0f;
    for (int c = lane; c < k; c += 32) {
        const float wv = qdeq_row<QT>(wr, c);
#pragma unroll
        for (int i = 0; i < M; i++)
            acc[i] = fmaf(wv, __ldg(x + (size_t)i * k + c), acc[i]);
    }
#pragma unroll
    for (int i = 0; i < M; i++)
        acc[i] = cuda_warp_sum(acc[i]);
    if (lane == 0) {
#pragma unroll
        for (int i = 0; i < M; i++)
            y[(size_t)i * n + row] = bias ? acc[i] + bias[row] : acc[i];
    }
}

/* ---- launchers ---- */

struct qg_args {
    float *y;
    const float *x; /* f32 mode */
    const int8_t *xqs;
    const float *xd; /* bf16 mode */
    const uint8_t *w;
    int n, k;
    size_t row_bytes;
    const float *bias;
    bool dot;
};

template <int QT, int M> static cudaError_t qg_launch(cudaStream_t st, const qg_args &a)
{
    const unsigned blocks = (unsigned)((a.n + QG_WARPS - 1) / QG_WARPS);
    if (a.dot)
        qgemv_dot_kernel<QT, M><<<blocks, QG_WARPS * 32, 0, st>>>(a.y, a.xqs, a.xd, a.w, a.n, a.k,
                                                                  a.row_bytes, a.bias);
    else
        qgemv_f32_kernel<QT, M>
            <<<blocks, QG_WARPS * 32, 0, st>>>(a.y, a.x, a.w, a.n, a.k, a.row_bytes, a.bias);
    return cudaGetLastError();
}

template <int QT> static cudaError_t qg_dispatch_m(cudaStream_t st, int m, const qg_args &a)
{
    static_assert(CUDA_GEMV_MAX_M == 8, "qg_dispatch_m instantiates m = 1..8");
    switch (m) {
    case 1:
        return qg_launch<QT, 1>(st, a);
    case 2:
        return qg_launch<QT, 2>(st, a);
    case 3:
        return qg_launch<QT, 3>(st, a);
    case 4:
        return qg_launch<QT, 4>(st, a);
    case 5:
        return qg_launch<QT, 5>(st, a);
    case 6:
        return qg_launch<QT, 6>(st, a);
    case 7:
        return qg_launch<QT, 7>(st, a);
    case 8:
        return qg_launch<QT, 8>(st, a);
    default:
        return cudaErrorInvalidValue;
    }
}

static cudaError_t qg_check(int m, int n, int k, int qtype, const void *w, size_t row_bytes)
{
    const int qk = cuda_qtype_qk(qtype);
    if (m > CUDA_GEMV_MAX_M || k % qk != 0 || n > INT_MAX - QG_WARPS)
        return cudaErrorInvalidValue;
    if (!q_aligned(qtype, w, row_bytes))
        return cudaErrorMisalignedAddress;
    return cudaSuccess;
}

extern "C" cudaError_t cuda_launch_qgemv_dot(cudaStream_t st, float *y, const void *xq, int m,
                                             const void *w, int qtype, int n, int k,
                                             size_t row_bytes, const float *bias)
{
    if (m <= 0 || n <= 0 || k <= 0)
        return cudaSuccess;
    cudaError_t e = qg_check(m, n, k, qtype, w, row_bytes);
    if (e != cudaSuccess)
        return e;
    const qg_args a = {y,
                       NULL,
                       (const int8_t *)xq,
                       (const float *)((const char *)xq + cuda_qx_scales_at(m, k)),
                       (const uint8_t *)w,
                       n,
                       k,
                       row_bytes,
                       bias,
                       true};
    Q_DISPATCH(qtype, qg_dispatch_m, st, m, a);
}

extern "C" cudaError_t cuda_launch_qgemv_f32(cudaStream_t st, float *y, const float *x, int m,
                                             const void *w, int qtype, int n, int k,
                                             size_t row_bytes, const float *bias)
{
    if (m <= 0 || n <= 0 || k <= 0)
        return cudaSuccess;
    cudaError_t e = qg_check(m, n, k, qtype, w, row_bytes);
    if (e != cudaSuccess)
        return e;
    const qg_args a = {y, x, NULL, NULL, (const uint8_t *)w, n, k, row_bytes, bias, false};
    Q_DISPATCH(qtype, qg_dispatch_m, st, m, a);
}
