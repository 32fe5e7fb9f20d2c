/* Host stand-ins for what src/backend/cuda/quant.cuh and quant_ct.cuh take
 * from the real cuda_common.cuh, cuda_launch.h and the CUDA headers, so
 * that their device code compiles as host C++ (run.sh): each intrinsic as
 * the single IEEE operation it is. */
#ifndef SHARDSWAP_TESTS_CUDA_EMULATE_CUDA_COMMON_CUH
#define SHARDSWAP_TESTS_CUDA_EMULATE_CUDA_COMMON_CUH
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#define __device__
#define __forceinline__ inline
enum cuda_qtype {
    CUDA_Q8_0 = 0,
    CUDA_Q4_0 = 1,
    CUDA_Q5_0 = 2,
    CUDA_Q5_1 = 3,
    CUDA_Q4_K = 4,
    CUDA_Q5_K = 5,
    CUDA_Q6_K = 6,
    CUDA_CT_I8 = 7,
    CUDA_CT_I4 = 8,
    CUDA_CT_F8 = 9
};
static inline int cuda_qtype_is_ct(int qtype)
{
    return qtype >= CUDA_CT_I8 && qtype <= CUDA_CT_F8;
}
typedef int cudaError_t;
static inline float __fmul_rn(float a, float b)
{
    volatile float r = a * b;
    return r;
}
static inline float __fadd_rn(float a, float b)
{
    volatile float r = a + b;
    return r;
}
static inline float __fsub_rn(float a, float b)
{
    volatile float r = a - b;
    return r;
}
static inline int __dp4a(int a, int b, int c)
{
    for (int i = 0; i < 4; i++)
        c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
}
extern "C" float f16_to_f32(uint16_t h);
extern "C" uint16_t f32_to_f16(float f);
static inline float cuda_f16_bits_to_f32(uint16_t h)
{
    return f16_to_f32(h);
}
static inline float __uint_as_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* the real one is core/dtype.h's bf16_round in device code (checked
 * against the CPU by test_backend_ops where a GPU is); the CPU's here */
extern "C" {
#include "core/dtype.h"
}
static inline float cuda_bf16_round(float f)
{
    return bf16_round(f);
}

#endif
