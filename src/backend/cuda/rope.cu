/* Rotary position embedding in place, as kern_rope states it
 * (backend/kernels.h): one thread per (row, head, pair i < rot_dim / 2),
 * grid-stride. Every thread computes its own angle, cos and sin: a decode
 * step has a few rows, so the threads over heads are what fill the GPU,
 * and the recomputation is cheap next to the loads.
 *
 * The arithmetic is cpu_rope's, operation by operation: the f32 angle
 * pos * inv_freq, the accurate cosf and sinf (not __cosf / __sinf: nvcc's
 * are within 2 ulp without --use_fast_math), and __fmul_rn / __fsub_rn /
 * __fadd_rn so that nvcc does not fuse the products into FMAs the CPU does
 * not have. */
#include "cuda_common.cuh"

/* Thread idx is pair i of head h of row r, idx = (r * heads + h) * half + i;
 * the pair is elements i and i + half of that head. */
__global__ void rope_kernel(float *x, size_t total, int heads, int head_dim, int half,
                            const int32_t *__restrict__ pos, const float *__restrict__ inv_freq,
                            float scale)
{
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const int i = (int)(idx % (size_t)half);
        const size_t rh = idx / (size_t)half; /* r * heads + h */
        const size_t r = rh / (size_t)heads;
        float *lo = x + rh * (size_t)head_dim + i;
        float *hi = lo + half;
        const float a = __fmul_rn((float)pos[r], inv_freq[i]);
        const float c = __fmul_rn(cosf(a), scale);
        const float s = __fmul_rn(sinf(a), scale);
        const float x0 = *lo, x1 = *hi;
        *lo = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        *hi = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
    }
}

extern "C" cudaError_t cuda_launch_rope(cudaStream_t st, float *x, int n, int heads, int head_dim,
                                        int rot_dim, const int32_t *pos, const float *inv_freq,
                                        float scale)
{
    if (n <= 0 || heads <= 0 || rot_dim <= 0)
        return cudaSuccess;
    if (rot_dim % 2 != 0 || rot_dim > head_dim)
        return cudaErrorInvalidValue;
    const int half = rot_dim / 2;
    const size_t total = (size_t)n * (size_t)heads * (size_t)half;
    rope_kernel<<<cuda_ew_blocks(total), CUDA_EW_THREADS, 0, st>>>(x, total, heads, head_dim, half,
                                                                   pos, inv_freq, scale);
    return cudaGetLastError();
}
