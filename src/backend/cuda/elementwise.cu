/* The elementwise and data-movement kernels: activations, the gated
 * activation, add, scale, the KV-cache append and the row gather. Grid-stride loops over size_t
 * indices; each element's formula is the CPU backend's (cpu/kernels.c),
 * with the same libm functions (erff, tanhf, expf: nvcc's are accurate to a
 * couple of ulps without --use_fast_math). */
#include "cuda_common.cuh"

template <int ACT> __device__ __forceinline__ float act_apply(float v)
{
    if constexpr (ACT == CUDA_ACT_RELU)
        return v > 0.0f ? v : 0.0f;
    else if constexpr (ACT == CUDA_ACT_GELU)
        return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    else if constexpr (ACT == CUDA_ACT_GELU_TANH)
        return 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
    else
        return v / (1.0f + expf(-v));
}

template <int ACT> __global__ void activation_kernel(float *x, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = act_apply<ACT>(x[i]);
}

extern "C" cudaError_t cuda_launch_activation(cudaStream_t st, float *x, size_t n, int act)
{
    if (n == 0)
        return cudaSuccess;
    const unsigned blocks = cuda_ew_blocks(n);
    switch (act) {
    case CUDA_ACT_RELU:
        activation_kernel<CUDA_ACT_RELU><<<blocks, CUDA_EW_THREADS, 0, st>>>(x, n);
        break;
    case CUDA_ACT_GELU:
        activation_kernel<CUDA_ACT_GELU><<<blocks, CUDA_EW_THREADS, 0, st>>>(x, n);
        break;
    case CUDA_ACT_GELU_TANH:
        activation_kernel<CUDA_ACT_GELU_TANH><<<blocks, CUDA_EW_THREADS, 0, st>>>(x, n);
        break;
    case CUDA_ACT_SILU:
        activation_kernel<CUDA_ACT_SILU><<<blocks, CUDA_EW_THREADS, 0, st>>>(x, n);
        break;
    default:
        return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* y may be gate or up: no __restrict__. act_apply as activation_kernel
 * has it, so the activation is the same formula. */
template <int ACT>
__global__ void gated_act_kernel(float *y, const float *gate, const float *up, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = act_apply<ACT>(gate[i]) * up[i];
}

extern "C" cudaError_t cuda_launch_gated_act(cudaStream_t st, float *y, const float *gate,
                                             const float *up, size_t n, int act)
{
    if (n == 0)
        return cudaSuccess;
    const unsigned blocks = cuda_ew_blocks(n);
    switch (act) {
    case CUDA_ACT_RELU:
        gated_act_kernel<CUDA_ACT_RELU><<<blocks, CUDA_EW_THREADS, 0, st>>>(y, gate, up, n);
        break;
    case CUDA_ACT_GELU:
        gated_act_kernel<CUDA_ACT_GELU><<<blocks, CUDA_EW_THREADS, 0, st>>>(y, gate, up, n);
        break;
    case CUDA_ACT_GELU_TANH:
        gated_act_kernel<CUDA_ACT_GELU_TANH><<<blocks, CUDA_EW_THREADS, 0, st>>>(y, gate, up, n);
        break;
    case CUDA_ACT_SILU:
        gated_act_kernel<CUDA_ACT_SILU><<<blocks, CUDA_EW_THREADS, 0, st>>>(y, gate, up, n);
        break;
    default:
        return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* y and x may be the same array (y += y): no __restrict__. */
__global__ void add_kernel(float *y, const float *x, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

extern "C" cudaError_t cuda_launch_add(cudaStream_t st, float *y, const float *x, size_t n)
{
    if (n == 0)
        return cudaSuccess;
    add_kernel<<<cuda_ew_blocks(n), CUDA_EW_THREADS, 0, st>>>(y, x, n);
    return cudaGetLastError();
}

__global__ void scale_kernel(float *x, size_t n, float a)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] *= a;
}

extern "C" cudaError_t cuda_launch_scale(cudaStream_t st, float *x, size_t n, float a)
{
    if (n == 0)
        return cudaSuccess;
    scale_kernel<<<cuda_ew_blocks(n), CUDA_EW_THREADS, 0, st>>>(x, n, a);
    return cudaGetLastError();
}

/* as torch: (x / cap).tanh() * cap, each step rounded to f32 */
__global__ void softcap_kernel(float *x, size_t n, float cap)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = tanhf(x[i] / cap) * cap;
}

extern "C" cudaError_t cuda_launch_softcap(cudaStream_t st, float *x, size_t n, float cap)
{
    if (n == 0)
        return cudaSuccess;
    if (!(cap > 0.0f))
        return cudaErrorInvalidValue;
    softcap_kernel<<<cuda_ew_blocks(n), CUDA_EW_THREADS, 0, st>>>(x, n, cap);
    return cudaGetLastError();
}

/* Element i of the new keys/values (batch * t_new, kv_heads * head_dim) is
 * (b, t, h, d) in that order, and goes to cache element (b, h, pos + t, d). */
__global__ void kv_append_kernel(float *__restrict__ kc, float *__restrict__ vc,
                                 const float *__restrict__ k, const float *__restrict__ v,
                                 size_t total, int kv_heads, int head_dim, int rows, int ring,
                                 int t_new, int pos)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t rest = i;
        const size_t d = rest % (size_t)head_dim;
        rest /= (size_t)head_dim;
        const size_t h = rest % (size_t)kv_heads;
        rest /= (size_t)kv_heads;
        const size_t t = rest % (size_t)t_new;
        const size_t b = rest / (size_t)t_new;
        const size_t p = (size_t)pos + t, row = ring > 0 ? p % (size_t)ring : p;
        const size_t dst = ((b * (size_t)kv_heads + h) * (size_t)rows + row) * (size_t)head_dim + d;
        kc[dst] = k[i];
        vc[dst] = v[i];
    }
}

extern "C" cudaError_t cuda_launch_kv_append(cudaStream_t st, float *kc, float *vc, const float *k,
                                             const float *v, int batch, int kv_heads, int head_dim,
                                             int max_t, int t_new, int pos, int ring)
{
    if (batch <= 0 || kv_heads <= 0 || head_dim <= 0 || t_new <= 0)
        return cudaSuccess;
    if (pos < 0 || max_t <= 0 || (int64_t)pos + t_new > max_t || ring < 0 ||
        (ring > 0 && t_new > ring))
        return cudaErrorInvalidValue;
    const size_t total = (size_t)batch * (size_t)t_new * (size_t)kv_heads * (size_t)head_dim;
    kv_append_kernel<<<cuda_ew_blocks(total), CUDA_EW_THREADS, 0, st>>>(
        kc, vc, k, v, total, kv_heads, head_dim, ring > 0 ? ring : max_t, ring, t_new, pos);
    return cudaGetLastError();
}

/* One block per gathered row. */
__global__ void gather_rows_kernel(float *__restrict__ y, const float *__restrict__ x,
                                   const int32_t *__restrict__ rows, int width)
{
    const size_t i = blockIdx.x;
    const float *src = x + (size_t)rows[i] * (size_t)width;
    float *dst = y + i * (size_t)width;
    for (int c = threadIdx.x; c < width; c += blockDim.x)
        dst[c] = src[c];
}

extern "C" cudaError_t cuda_launch_gather_rows(cudaStream_t st, float *y, const float *x,
                                               const int32_t *rows, int n, int width)
{
    if (n <= 0 || width <= 0)
        return cudaSuccess;
    gather_rows_kernel<<<(unsigned)n, CUDA_EW_THREADS, 0, st>>>(y, x, rows, width);
    return cudaGetLastError();
}

/* One block per output row; each product rounded before the add (__fmul_rn
 * keeps nvcc from fusing it into an fma), as the CPU and torch do. */
__global__ void combine_rows_kernel(float *__restrict__ y, const float *__restrict__ x,
                                    const int32_t *__restrict__ rows, const float *__restrict__ w,
                                    int k, int width)
{
    const size_t i = blockIdx.x;
    float *dst = y + i * (size_t)width;
    for (int c = threadIdx.x; c < width; c += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < k; j++) {
            const size_t at = i * (size_t)k + (size_t)j;
            const float p = __fmul_rn(w[at], x[(size_t)rows[at] * (size_t)width + c]);
            acc = j ? __fadd_rn(acc, p) : p;
        }
        dst[c] = acc;
    }
}

extern "C" cudaError_t cuda_launch_combine_rows(cudaStream_t st, float *y, const float *x,
                                                const int32_t *rows, const float *w, int n, int k,
                                                int width)
{
    if (n <= 0 || k <= 0 || width <= 0)
        return cudaSuccess;
    combine_rows_kernel<<<(unsigned)n, CUDA_EW_THREADS, 0, st>>>(y, x, rows, w, k, width);
    return cudaGetLastError();
}
