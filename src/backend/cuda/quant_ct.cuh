/* Device-side decoding of compressed-tensors' block types (core/quant_ct.h
 * has the layouts byte by byte), shared by their GEMV (ctgemv.cu) and, via
 * quant.cuh's qdeq, the dequantizing copies of qconvert.cu. CUDA C++ only.
 *
 * Alignment: blocks are 37 (CT_I8), 21 (CT_I4) and 36 (CT_F8) bytes, so a
 * block and its f32 scale start at any byte: everything is read by byte
 * loads (the scale assembled from its four little-endian bytes), and the
 * launchers take any address.
 *
 * Exactness: an element is d * v with v the integer q - z or the e4m3
 * value, both exact in f32, so the one rounded product (__fmul_rn) is
 * core/quant_ct.c's quant_ct_dequantize bit for bit.
 */
#ifndef SHARDSWAP_BACKEND_CUDA_QUANT_CT_CUH
#define SHARDSWAP_BACKEND_CUDA_QUANT_CT_CUH

#include "cuda_common.cuh"

/* The block's f32 scale at b (any address). */
__device__ __forceinline__ float ct_scale(const uint8_t *b)
{
    return __uint_as_float((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                           (uint32_t)b[3] << 24);
}

/* An e4m3 byte (fn: no infinities, S.1111.111 a NaN) as f32, exactly as
 * core/quant_ct.c's quant_f8e4m3_to_f32. */
__device__ __forceinline__ float ct_e4m3(uint32_t v)
{
    const uint32_t e = (v >> 3) & 15, m = v & 7;
    float a;
    if (e == 15 && m == 7)
        a = __uint_as_float(0x7fc00000u); /* a quiet NaN */
    else if (e == 0)
        a = __fmul_rn((float)m, 0x1p-9f); /* subnormal: m / 8 * 2^-6, exact */
    else
        a = __uint_as_float((e + 120) << 23 | m << 20); /* (1 + m / 8) 2^(e - 7) */
    return v & 0x80 ? -a : a;
}

/* Quant j (< 32) of the block at b as the exact f32 value d multiplies:
 * q - z for the integer types, the e4m3 value for CT_F8. */
template <int QT> __device__ __forceinline__ float ct_value(const uint8_t *b, int j)
{
    if constexpr (QT == CUDA_CT_I8) {
        return (float)((int)(int8_t)b[5 + j] - (int)(int8_t)b[4]);
    } else if constexpr (QT == CUDA_CT_I4) {
        const int byte = b[5 + j / 2];
        return (float)((j & 1 ? byte >> 4 : byte & 15) - 8 - (int)(int8_t)b[4]);
    } else {
        static_assert(QT == CUDA_CT_F8, "a compressed-tensors block type");
        return ct_e4m3(b[4 + j]);
    }
}

/* Element j (< 32) of the block at b, dequantized as core/quant_ct.c does. */
template <int QT> __device__ __forceinline__ float ct_deq(const uint8_t *b, int j)
{
    return __fmul_rn(ct_scale(b), ct_value<QT>(b, j));
}

/* Lane t's (< 4) share of the block at b, as ctgemv.cu's warps read it:
 * elements 8t .. 8t + 7 dequantized (then rounded to bf16 when BF16, as
 * the CPU's bf16 mode rounds its dequantized rows) into w. The 8 quants
 * are 8 consecutive bytes (CT_I8, CT_F8) or 4 (CT_I4), so the 4 lanes of
 * a block read it front to back. */
template <int QT, bool BF16>
__device__ __forceinline__ void ct_lane8(const uint8_t *b, int t, float w[8])
{
    const float d = ct_scale(b);
#pragma unroll
    for (int e = 0; e < 8; e++) {
        const float v = __fmul_rn(d, ct_value<QT>(b, 8 * t + e));
        w[e] = BF16 ? cuda_bf16_round(v) : v;
    }
}

#endif
