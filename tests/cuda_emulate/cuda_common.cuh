/* Host stand-ins for what src/backend/cuda/quant.cuh takes from the real
 * cuda_common.cuh and the CUDA headers, so that its device code compiles as
 * host C++ (run.sh): each intrinsic as the single IEEE operation it is. */
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
    CUDA_Q6_K = 6
};
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
