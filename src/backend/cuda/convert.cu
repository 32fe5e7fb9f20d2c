/* Element type conversions around the linear layer and the embedding:
 * activations rounded to bf16 or narrowed to the weights' 16-bit type (the
 * cuBLAS bf16-mode inputs), blocks of weight rows widened to f32 (the exact
 * f32 mode on 16-bit weights), the bias broadcast, and the embedding lookup
 * (a widening copy of chosen rows). Simple grid-stride loops: all of these
 * are bound by memory and small next to the GEMMs they feed. */
#include "cuda_common.cuh"

__global__ void round_bf16_kernel(float *dst, const float *x, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = cuda_bf16_round(x[i]);
}

extern "C" cudaError_t cuda_launch_round_bf16(cudaStream_t st, float *dst, const float *x, size_t n)
{
    if (n == 0)
        return cudaSuccess;
    round_bf16_kernel<<<cuda_ew_blocks(n), CUDA_EW_THREADS, 0, st>>>(dst, x, n);
    return cudaGetLastError();
}

template <int WT>
__global__ void to_16bit_kernel(uint16_t *__restrict__ dst, const float *__restrict__ x, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if constexpr (WT == CUDA_W_F16)
            dst[i] = __half_as_ushort(__float2half_rn(x[i]));
        else
            dst[i] = (uint16_t)(__float_as_uint(cuda_bf16_round(x[i])) >> 16);
    }
}

extern "C" cudaError_t cuda_launch_to_16bit(cudaStream_t st, void *dst, const float *x, size_t n,
                                            int wtype)
{
    if (n == 0)
        return cudaSuccess;
    if (wtype == CUDA_W_F16)
        to_16bit_kernel<CUDA_W_F16>
            <<<cuda_ew_blocks(n), CUDA_EW_THREADS, 0, st>>>((uint16_t *)dst, x, n);
    else if (wtype == CUDA_W_BF16)
        to_16bit_kernel<CUDA_W_BF16>
            <<<cuda_ew_blocks(n), CUDA_EW_THREADS, 0, st>>>((uint16_t *)dst, x, n);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}

/* One block per row: dst[r, c] = w[r * ld + c]. */
template <int WT>
__global__ void widen_rows_kernel(float *__restrict__ dst, const void *__restrict__ w, int cols,
                                  size_t ld)
{
    const size_t r = blockIdx.x;
    float *d = dst + r * (size_t)cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        d[c] = cuda_load_w<WT>(w, r * ld + (size_t)c);
}

extern "C" cudaError_t cuda_launch_widen_rows(cudaStream_t st, float *dst, const void *w, int wtype,
                                              int rows, int cols, size_t ld)
{
    if (rows <= 0 || cols <= 0)
        return cudaSuccess;
    switch (wtype) {
    case CUDA_W_F32:
        widen_rows_kernel<CUDA_W_F32><<<(unsigned)rows, CUDA_EW_THREADS, 0, st>>>(dst, w, cols, ld);
        break;
    case CUDA_W_F16:
        widen_rows_kernel<CUDA_W_F16><<<(unsigned)rows, CUDA_EW_THREADS, 0, st>>>(dst, w, cols, ld);
        break;
    case CUDA_W_BF16:
        widen_rows_kernel<CUDA_W_BF16>
            <<<(unsigned)rows, CUDA_EW_THREADS, 0, st>>>(dst, w, cols, ld);
        break;
    default:
        return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

__global__ void add_bias_kernel(float *__restrict__ y, const float *__restrict__ bias, size_t total,
                                int n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += bias[i % (size_t)n];
}

extern "C" cudaError_t cuda_launch_add_bias(cudaStream_t st, float *y, const float *bias, int m,
                                            int n)
{
    if (m <= 0 || n <= 0)
        return cudaSuccess;
    const size_t total = (size_t)m * (size_t)n;
    add_bias_kernel<<<cuda_ew_blocks(total), CUDA_EW_THREADS, 0, st>>>(y, bias, total, n);
    return cudaGetLastError();
}

/* One block per id. */
template <int WT>
__global__ void embed_kernel(float *__restrict__ y, const void *__restrict__ w, int rows, int cols,
                             size_t ld, const int32_t *__restrict__ ids, int row0)
{
    const size_t i = blockIdx.x;
    float *yi = y + i * (size_t)cols;
    /* in 64 bits: ids[i] - row0 must not wrap for ids near INT32_MIN */
    const int64_t r = (int64_t)ids[i] - (int64_t)row0;
    if (r >= 0 && r < rows) {
        const size_t base = (size_t)r * ld;
        for (int c = threadIdx.x; c < cols; c += blockDim.x)
            yi[c] = cuda_load_w<WT>(w, base + (size_t)c);
    } else {
        for (int c = threadIdx.x; c < cols; c += blockDim.x)
            yi[c] = 0.0f;
    }
}

extern "C" cudaError_t cuda_launch_embed(cudaStream_t st, float *y, const void *w, int wtype,
                                         int rows, int cols, size_t ld, const int32_t *ids, int n,
                                         int row0)
{
    if (n <= 0 || cols <= 0)
        return cudaSuccess;
    switch (wtype) {
    case CUDA_W_F32:
        embed_kernel<CUDA_W_F32>
            <<<(unsigned)n, CUDA_EW_THREADS, 0, st>>>(y, w, rows, cols, ld, ids, row0);
        break;
    case CUDA_W_F16:
        embed_kernel<CUDA_W_F16>
            <<<(unsigned)n, CUDA_EW_THREADS, 0, st>>>(y, w, rows, cols, ld, ids, row0);
        break;
    case CUDA_W_BF16:
        embed_kernel<CUDA_W_BF16>
            <<<(unsigned)n, CUDA_EW_THREADS, 0, st>>>(y, w, rows, cols, ld, ids, row0);
        break;
    default:
        return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
