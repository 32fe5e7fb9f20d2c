/* LayerNorm and RMSNorm over rows: one block per row.
 *
 * LayerNorm: two passes over the row for the mean and then the variance,
 * each summed in double (as the CPU backend does: the most accurate sum is
 * on average the closest to torch's f32 one; the row is read from L1/L2 the
 * second and third time, and double adds are cheap next to the loads), then
 * y = (x - mean) * rstd (* gamma + beta) in f32 exactly as cpu_layernorm
 * writes it.
 *
 * RMSNorm: one pass for the sum of squares, in double (the square of an f32
 * is exact there), rstd = 1 / sqrt(mean + eps) in double rounded once to
 * f32, then y = (x * rstd) * gamma in f32, exactly as cpu_rmsnorm writes it.
 *
 * y may equal x: every thread writes only the elements it read, after the
 * block's last read of the row. */
#include "cuda_common.cuh"

#define LN_THREADS 256
#define LN_WARPS (LN_THREADS / 32)

/* The sum of v over the block, in every thread. red: LN_WARPS doubles of
 * shared memory; the block must not be using it (the trailing barrier keeps
 * a second call from overwriting it while the first is still being read). */
__device__ double ln_block_sum(double v, double *red)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = cuda_warp_sum_d(v);
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    double s = 0;
#pragma unroll
    for (int i = 0; i < LN_WARPS; i++)
        s += red[i]; /* the same order in every thread: one answer */
    __syncthreads();
    return s;
}

__global__ void __launch_bounds__(LN_THREADS)
    layernorm_kernel(float *y, const float *x, int n, const float *gamma, const float *beta,
                     float eps)
{
    __shared__ double red[LN_WARPS];
    const float *xi = x + (size_t)blockIdx.x * (size_t)n;
    float *yi = y + (size_t)blockIdx.x * (size_t)n;

    double s = 0;
    for (int j = threadIdx.x; j < n; j += LN_THREADS)
        s += xi[j];
    const double mean = ln_block_sum(s, red) / n;

    double q = 0;
    for (int j = threadIdx.x; j < n; j += LN_THREADS) {
        double d = xi[j] - mean;
        q += d * d;
    }
    const double var = ln_block_sum(q, red) / n;

    const float rstd = (float)(1.0 / sqrt(var + (double)eps));
    const float fmean = (float)mean;
    for (int j = threadIdx.x; j < n; j += LN_THREADS) {
        float v = __fmul_rn(__fsub_rn(xi[j], fmean), rstd);
        if (gamma)
            v = __fadd_rn(__fmul_rn(v, gamma[j]), beta[j]);
        yi[j] = v;
    }
}

extern "C" cudaError_t cuda_launch_layernorm(cudaStream_t st, float *y, const float *x, int m,
                                             int n, const float *gamma, const float *beta,
                                             float eps)
{
    if (m <= 0 || n <= 0)
        return cudaSuccess;
    if (!gamma != !beta)
        return cudaErrorInvalidValue;
    layernorm_kernel<<<(unsigned)m, LN_THREADS, 0, st>>>(y, x, n, gamma, beta, eps);
    return cudaGetLastError();
}

__global__ void __launch_bounds__(LN_THREADS)
    rmsnorm_kernel(float *y, const float *x, int n, const float *gamma, float eps)
{
    __shared__ double red[LN_WARPS];
    const float *xi = x + (size_t)blockIdx.x * (size_t)n;
    float *yi = y + (size_t)blockIdx.x * (size_t)n;

    double q = 0;
    for (int j = threadIdx.x; j < n; j += LN_THREADS) {
        const double v = xi[j];
        q += v * v;
    }
    const double ms = ln_block_sum(q, red) / n;

    const float rstd = (float)(1.0 / sqrt(ms + (double)eps));
    for (int j = threadIdx.x; j < n; j += LN_THREADS) {
        float v = __fmul_rn(xi[j], rstd);
        if (gamma)
            v = __fmul_rn(v, gamma[j]);
        yi[j] = v;
    }
}

extern "C" cudaError_t cuda_launch_rmsnorm(cudaStream_t st, float *y, const float *x, int m, int n,
                                           const float *gamma, float eps)
{
    if (m <= 0 || n <= 0)
        return cudaSuccess;
    rmsnorm_kernel<<<(unsigned)m, LN_THREADS, 0, st>>>(y, x, n, gamma, eps);
    return cudaGetLastError();
}
