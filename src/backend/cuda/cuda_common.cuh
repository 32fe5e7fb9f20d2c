/* Device-side helpers the .cu files share (CUDA C++ only; never included by
 * C): weight element decoding, bf16 rounding bit-identical to core/dtype.h,
 * warp sums and the grid of an elementwise launch. */
#ifndef SHARDSWAP_BACKEND_CUDA_CUDA_COMMON_CUH
#define SHARDSWAP_BACKEND_CUDA_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_launch.h"

/* Threads per block of the elementwise kernels, and the most blocks one
 * launches (grid-stride loops cover the rest: 8192 x 256 threads fill any
 * current GPU many times over). */
#define CUDA_EW_THREADS 256
#define CUDA_EW_MAX_BLOCKS 8192

static inline unsigned cuda_ew_blocks(size_t n)
{
    size_t b = (n + CUDA_EW_THREADS - 1) / CUDA_EW_THREADS;
    return (unsigned)(b < CUDA_EW_MAX_BLOCKS ? b : CUDA_EW_MAX_BLOCKS);
}

/* Bytes of one element of a weight type. */
static inline size_t cuda_wtype_size(int wtype)
{
    return wtype == CUDA_W_F32 ? 4 : 2;
}

__device__ __forceinline__ float cuda_bf16_bits_to_f32(uint32_t h)
{
    return __uint_as_float(h << 16);
}

__device__ __forceinline__ float cuda_f16_bits_to_f32(uint16_t h)
{
    return __half2float(__ushort_as_half(h));
}

/* core/dtype.h's bf16_round, bit for bit: nearest even, a NaN stays a quiet
 * NaN; the low 16 bits cleared. */
__device__ __forceinline__ float cuda_bf16_round(float f)
{
    uint32_t u = __float_as_uint(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    uint32_t quiet = (u | 0x00400000u) & 0xffff0000u;
    u = (u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded;
    return __uint_as_float(u);
}

/* Element i of a weight array of type WT, widened to f32. */
template <int WT> __device__ __forceinline__ float cuda_load_w(const void *w, size_t i)
{
    if constexpr (WT == CUDA_W_F32)
        return ((const float *)w)[i];
    else if constexpr (WT == CUDA_W_F16)
        return cuda_f16_bits_to_f32(((const uint16_t *)w)[i]);
    else
        return cuda_bf16_bits_to_f32(((const uint16_t *)w)[i]);
}

/* The sum of v over the 32 lanes of a full warp, in every lane. */
__device__ __forceinline__ float cuda_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double cuda_warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

#endif
