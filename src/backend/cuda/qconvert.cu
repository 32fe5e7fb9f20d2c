/* Dequantizing copies of block-type weights (GGUF's and compressed-
 * tensors'): blocks of weight rows into the linear layer's scratch for
 * cuBLAS (f32 for f32 mode, bf16 for bf16 mode; a bounded block of rows at
 * a time, never the whole matrix), and the embedding lookup of a quantized
 * table. One thread block per row, its threads over the columns:
 * consecutive threads read consecutive elements of the same block, so a
 * warp's loads fall in one or two blocks. */
#include "quant.cuh"

template <int QT, bool BF16>
__global__ void dequant_rows_kernel(void *__restrict__ dst, const uint8_t *__restrict__ w, int cols,
                                    size_t row_bytes)
{
    const size_t r = blockIdx.x;
    const uint8_t *wr = w + r * row_bytes;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = qdeq_row<QT>(wr, c);
        if constexpr (BF16)
            ((uint16_t *)dst)[r * (size_t)cols + (size_t)c] =
                (uint16_t)(__float_as_uint(cuda_bf16_round(v)) >> 16);
        else
            ((float *)dst)[r * (size_t)cols + (size_t)c] = v;
    }
}

template <int QT>
static cudaError_t dequant_rows_launch(cudaStream_t st, void *dst, int to_bf16, const uint8_t *w,
                                       int rows, int cols, size_t row_bytes)
{
    if (to_bf16)
        dequant_rows_kernel<QT, true>
            <<<(unsigned)rows, CUDA_EW_THREADS, 0, st>>>(dst, w, cols, row_bytes);
    else
        dequant_rows_kernel<QT, false>
            <<<(unsigned)rows, CUDA_EW_THREADS, 0, st>>>(dst, w, cols, row_bytes);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_launch_dequant_rows(cudaStream_t st, void *dst, int to_bf16,
                                                const void *w, int qtype, int rows, int cols,
                                                size_t row_bytes)
{
    if (rows <= 0 || cols <= 0)
        return cudaSuccess;
    if (!q_aligned(qtype, w, row_bytes))
        return cudaErrorMisalignedAddress;
    Q_DISPATCH_ALL(qtype, dequant_rows_launch, st, dst, to_bf16, (const uint8_t *)w, rows, cols,
                   row_bytes);
}

/* One block per id, as convert.cu's embed_kernel. */
template <int QT>
__global__ void qembed_kernel(float *__restrict__ y, const uint8_t *__restrict__ w, int rows,
                              int cols, size_t row_bytes, const int32_t *__restrict__ ids, int row0)
{
    const size_t i = blockIdx.x;
    float *yi = y + i * (size_t)cols;
    /* in 64 bits: ids[i] - row0 must not wrap for ids near INT32_MIN */
    const int64_t r = (int64_t)ids[i] - (int64_t)row0;
    if (r >= 0 && r < rows) {
        const uint8_t *wr = w + (size_t)r * row_bytes;
        for (int c = threadIdx.x; c < cols; c += blockDim.x)
            yi[c] = qdeq_row<QT>(wr, c);
    } else {
        for (int c = threadIdx.x; c < cols; c += blockDim.x)
            yi[c] = 0.0f;
    }
}

template <int QT>
static cudaError_t qembed_launch(cudaStream_t st, float *y, const uint8_t *w, int rows, int cols,
                                 size_t row_bytes, const int32_t *ids, int n, int row0)
{
    qembed_kernel<QT>
        <<<(unsigned)n, CUDA_EW_THREADS, 0, st>>>(y, w, rows, cols, row_bytes, ids, row0);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_launch_qembed(cudaStream_t st, float *y, const void *w, int qtype,
                                          int rows, int cols, size_t row_bytes, const int32_t *ids,
                                          int n, int row0)
{
    if (n <= 0 || cols <= 0)
        return cudaSuccess;
    if (!q_aligned(qtype, w, row_bytes))
        return cudaErrorMisalignedAddress;
    Q_DISPATCH_ALL(qtype, qembed_launch, st, y, (const uint8_t *)w, rows, cols, row_bytes, ids, n,
                   row0);
}
