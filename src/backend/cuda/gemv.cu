/* The fused GEMV of a linear layer with few input rows (decode): y[m, n] =
 * x[m, k] @ w^T (+ bias), m <= CUDA_GEMV_MAX_M.
 *
 * Bound by reading w, so w is read exactly once: one warp per weight row,
 * each lane streaming 16-byte vectors of the row (4 f32 or 8 f16/bf16
 * elements, GEMV_UNROLL of them in flight) and multiplying each by the same
 * columns of all m rows of x, which stay in L1/L2 (w is loaded with the
 * evict-first hint so it does not push x out). The m partial sums of a lane
 * are f32 registers, summed over the warp by shuffles at the end; bias is
 * added in the same store.
 *
 * Alignment: a column slice of a checkpoint tensor starts anywhere and its
 * row stride need not be a multiple of 8, so vector loads of w are used only
 * when the data pointer is 16-byte aligned and ld * element size is a
 * multiple of 16 (then every row start is); otherwise every element is a
 * scalar load (coalesced across the warp, just more instructions). Vector
 * loads of x likewise need x 16-byte aligned and k % 4 == 0. The columns
 * past the last whole vector are done by scalar loads either way.
 */
#include "cuda_common.cuh"

#define GEMV_WARPS 8  /* rows (warps) per block of 256 threads */
#define GEMV_UNROLL 4 /* 16-byte loads of w in flight per lane */

/* Columns [c, c + EPV) of row xr of x into xv (f32). */
template <int EPV>
__device__ __forceinline__ void gemv_load_x(float (&xv)[EPV], const float *__restrict__ xr, int c,
                                            bool x4)
{
    if (x4) {
#pragma unroll
        for (int e = 0; e < EPV; e += 4) {
            float4 t = __ldg((const float4 *)(xr + c + e));
            xv[e] = t.x;
            xv[e + 1] = t.y;
            xv[e + 2] = t.z;
            xv[e + 3] = t.w;
        }
    } else {
#pragma unroll
        for (int e = 0; e < EPV; e++)
            xv[e] = __ldg(xr + c + e);
    }
}

/* The EPV elements of weight type WT packed in 16 bytes, widened. Little
 * endian: the lower half of each 32-bit word is the earlier element. */
template <int WT, int EPV> __device__ __forceinline__ void gemv_decode(float (&wf)[EPV], uint4 v)
{
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
    if constexpr (WT == CUDA_W_F32) {
#pragma unroll
        for (int e = 0; e < 4; e++)
            wf[e] = __uint_as_float(u[e]);
    } else if constexpr (WT == CUDA_W_F16) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            wf[2 * e] = cuda_f16_bits_to_f32((uint16_t)(u[e] & 0xffffu));
            wf[2 * e + 1] = cuda_f16_bits_to_f32((uint16_t)(u[e] >> 16));
        }
    } else {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            wf[2 * e] = __uint_as_float(u[e] << 16);
            wf[2 * e + 1] = __uint_as_float(u[e] & 0xffff0000u);
        }
    }
}

/* One warp per row of w; M rows of x. vec: w rows 16-byte aligned; x4: x
 * rows 16-byte aligned. */
template <int WT, int M>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_kernel(float *__restrict__ y, const float *__restrict__ x, const void *__restrict__ w,
                int n, int k, size_t ld, const float *__restrict__ bias, bool vec, bool x4)
{
    constexpr int ES = WT == CUDA_W_F32 ? 4 : 2;
    constexpr int EPV = 16 / ES;
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (row >= n)
        return; /* the whole warp: no block-wide barrier follows */
    const char *wr = (const char *)w + (size_t)row * ld * ES;

    float acc[M];
#pragma unroll
    for (int i = 0; i < M; i++)
        acc[i] = 0.0f;

    int kv = 0; /* columns [0, kv) by vectors */
    if (vec) {
        const int nv = k / EPV;
        kv = nv * EPV;
        const uint4 *wv = (const uint4 *)wr;
        for (int v0 = lane; v0 < nv; v0 += 32 * GEMV_UNROLL) {
            uint4 buf[GEMV_UNROLL];
#pragma unroll
            for (int u = 0; u < GEMV_UNROLL; u++) {
                int vi = v0 + u * 32;
                if (vi < nv)
                    buf[u] = __ldcs(wv + vi);
            }
#pragma unroll
            for (int u = 0; u < GEMV_UNROLL; u++) {
                int vi = v0 + u * 32;
                if (vi < nv) {
                    float wf[EPV];
                    gemv_decode<WT, EPV>(wf, buf[u]);
                    const int c = vi * EPV;
#pragma unroll
                    for (int i = 0; i < M; i++) {
                        float xv[EPV];
                        gemv_load_x<EPV>(xv, x + (size_t)i * k, c, x4);
#pragma unroll
                        for (int e = 0; e < EPV; e++)
                            acc[i] = fmaf(wf[e], xv[e], acc[i]);
                    }
                }
            }
        }
    }
    for (int c = kv + lane; c < k; c += 32) {
        float wf = cuda_load_w<WT>(wr, (size_t)c);
#pragma unroll
        for (int i = 0; i < M; i++)
            acc[i] = fmaf(wf, __ldg(x + (size_t)i * k + c), acc[i]);
    }

#pragma unroll
    for (int i = 0; i < M; i++)
        acc[i] = cuda_warp_sum(acc[i]);
    if (lane == 0) {
        const float b = bias ? bias[row] : 0.0f;
#pragma unroll
        for (int i = 0; i < M; i++)
            y[(size_t)i * n + row] = bias ? acc[i] + b : acc[i];
    }
}

template <int WT, int M>
static cudaError_t gemv_launch(cudaStream_t st, float *y, const float *x, const void *w, int n,
                               int k, size_t ld, const float *bias, bool vec, bool x4)
{
    unsigned blocks = (unsigned)((n + GEMV_WARPS - 1) / GEMV_WARPS);
    gemv_kernel<WT, M><<<blocks, GEMV_WARPS * 32, 0, st>>>(y, x, w, n, k, ld, bias, vec, x4);
    return cudaGetLastError();
}

template <int WT>
static cudaError_t gemv_dispatch_m(cudaStream_t st, float *y, const float *x, int m, const void *w,
                                   int n, int k, size_t ld, const float *bias, bool vec, bool x4)
{
    static_assert(CUDA_GEMV_MAX_M == 8, "gemv_dispatch_m instantiates m = 1..8");
    switch (m) {
    case 1:
        return gemv_launch<WT, 1>(st, y, x, w, n, k, ld, bias, vec, x4);
    case 2:
        return gemv_launch<WT, 2>(st, y, x, w, n, k, ld, bias, vec, x4);
    case 3:
        return gemv_launch<WT, 3>(st, y, x, w, n, k, ld, bias, vec, x4);
    case 4:
        return gemv_launch<WT, 4>(st, y, x, w, n, k, ld, bias, vec, x4);
    case 5:
        return gemv_launch<WT, 5>(st, y, x, w, n, k, ld, bias, vec, x4);
    case 6:
        return gemv_launch<WT, 6>(st, y, x, w, n, k, ld, bias, vec, x4);
    case 7:
        return gemv_launch<WT, 7>(st, y, x, w, n, k, ld, bias, vec, x4);
    case 8:
        return gemv_launch<WT, 8>(st, y, x, w, n, k, ld, bias, vec, x4);
    default:
        return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t cuda_launch_gemv(cudaStream_t st, float *y, const float *x, int m,
                                        const void *w, int wtype, int n, int k, size_t ld,
                                        const float *bias)
{
    if (m <= 0 || n <= 0 || k <= 0)
        return cudaSuccess;
    if (m > CUDA_GEMV_MAX_M || ld < (size_t)k)
        return cudaErrorInvalidValue;
    const size_t es = cuda_wtype_size(wtype);
    const bool vec = (uintptr_t)w % 16 == 0 && (ld * es) % 16 == 0;
    const bool x4 = (uintptr_t)x % 16 == 0 && k % 4 == 0;
    switch (wtype) {
    case CUDA_W_F32:
        return gemv_dispatch_m<CUDA_W_F32>(st, y, x, m, w, n, k, ld, bias, vec, x4);
    case CUDA_W_F16:
        return gemv_dispatch_m<CUDA_W_F16>(st, y, x, m, w, n, k, ld, bias, vec, x4);
    case CUDA_W_BF16:
        return gemv_dispatch_m<CUDA_W_BF16>(st, y, x, m, w, n, k, ld, bias, vec, x4);
    default:
        return cudaErrorInvalidValue;
    }
}
