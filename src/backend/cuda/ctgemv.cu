/* The GEMV of a linear layer with compressed-tensors' weights (core/
 * quant_ct.h) and few input rows (decode): y[m, n] = x[m, k] @ w^T (+ bias),
 * m <= CUDA_GEMV_MAX_M, the CPU backend's arithmetic (ctlinear.c) on the
 * GPU: every weight dequantized exactly, rounded to bf16 in bf16 mode (x
 * rounded by the caller), f32 products and sums.
 *
 * One warp per weight row, read once for all m rows of x (x stays in
 * L1/L2). A block is 32 elements, so as qgemv.cu's dot product does for
 * 32-element blocks, the warp takes 8 blocks a step and 4 lanes a block,
 * 8 elements a lane: lane 4g + t reads block 8i + g's bytes 8t.. (4t.. for
 * CT_I4) and its scale, so a step's loads cover 8 consecutive blocks front
 * to back (288 to 296 bytes, or 168) by bytes: a block is 37, 21 or 36
 * bytes, so nothing in it is aligned. Each lane keeps its own f32 sums,
 * added over the warp at the end: the CPU's values in another order, so
 * within f32 rounding of the CPU's result, not bit-equal.
 */
#include <limits.h>

#include "quant.cuh"

#define CG_WARPS 8 /* rows (warps) per block of 256 threads */

template <int QT, int M, bool BF16>
__global__ void __launch_bounds__(CG_WARPS * 32)
    ctgemv_kernel(float *__restrict__ y, const float *__restrict__ x, const uint8_t *__restrict__ w,
                  int n, int k, size_t row_bytes, const float *__restrict__ bias)
{
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * CG_WARPS + (threadIdx.x >> 5);
    if (row >= n)
        return;
    const int g = lane >> 2, t = lane & 3, nb = k / 32;
    const uint8_t *wr = w + (size_t)row * row_bytes;
    float acc[M];
#pragma unroll
    for (int i = 0; i < M; i++)
        acc[i] = 0.0f;
    for (int b = g; b < nb; b += 8) {
        float wv[8];
        ct_lane8<QT, BF16>(wr + (size_t)b * qtraits<QT>::BYTES, t, wv);
        const float *xb = x + (size_t)b * 32 + 8 * t;
#pragma unroll
        for (int i = 0; i < M; i++)
#pragma unroll
            for (int e = 0; e < 8; e++)
                acc[i] = fmaf(wv[e], __ldg(xb + (size_t)i * k + e), acc[i]);
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

struct cg_args {
    float *y;
    const float *x;
    const uint8_t *w;
    int n, k;
    size_t row_bytes;
    const float *bias;
    bool bf16;
};

template <int QT, int M> static cudaError_t cg_launch(cudaStream_t st, const cg_args &a)
{
    const unsigned blocks = (unsigned)((a.n + CG_WARPS - 1) / CG_WARPS);
    if (a.bf16)
        ctgemv_kernel<QT, M, true>
            <<<blocks, CG_WARPS * 32, 0, st>>>(a.y, a.x, a.w, a.n, a.k, a.row_bytes, a.bias);
    else
        ctgemv_kernel<QT, M, false>
            <<<blocks, CG_WARPS * 32, 0, st>>>(a.y, a.x, a.w, a.n, a.k, a.row_bytes, a.bias);
    return cudaGetLastError();
}

template <int QT> static cudaError_t cg_dispatch_m(cudaStream_t st, int m, const cg_args &a)
{
    static_assert(CUDA_GEMV_MAX_M == 8, "cg_dispatch_m instantiates m = 1..8");
    switch (m) {
    case 1:
        return cg_launch<QT, 1>(st, a);
    case 2:
        return cg_launch<QT, 2>(st, a);
    case 3:
        return cg_launch<QT, 3>(st, a);
    case 4:
        return cg_launch<QT, 4>(st, a);
    case 5:
        return cg_launch<QT, 5>(st, a);
    case 6:
        return cg_launch<QT, 6>(st, a);
    case 7:
        return cg_launch<QT, 7>(st, a);
    case 8:
        return cg_launch<QT, 8>(st, a);
    default:
        return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t cuda_launch_ctgemv(cudaStream_t st, float *y, const float *x, int m,
                                          const void *w, int qtype, int n, int k, size_t row_bytes,
                                          const float *bias, int round_bf16)
{
    if (m <= 0 || n <= 0 || k <= 0)
        return cudaSuccess;
    if (m > CUDA_GEMV_MAX_M || k % 32 != 0 || n > INT_MAX - CG_WARPS)
        return cudaErrorInvalidValue;
    const cg_args a = {y, x, (const uint8_t *)w, n, k, row_bytes, bias, round_bf16 != 0};
    switch (qtype) {
    case CUDA_CT_I8:
        return cg_dispatch_m<CUDA_CT_I8>(st, m, a);
    case CUDA_CT_I4:
        return cg_dispatch_m<CUDA_CT_I4>(st, m, a);
    case CUDA_CT_F8:
        return cg_dispatch_m<CUDA_CT_F8>(st, m, a);
    default:
        return cudaErrorInvalidValue;
    }
}
