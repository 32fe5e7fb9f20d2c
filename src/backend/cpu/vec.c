/* vec.h: AVX-512 where the CPU has it (decided once), else plain C. */
#include "backend/cpu/vec.h"

#include <math.h>
#include <stdbool.h>

#include "core/dtype.h"

static bool have_avx512(void)
{
#if defined(__x86_64__)
    return __builtin_cpu_supports("avx512f");
#else
    return false;
#endif
}

void vec_round_bf16(float *dst, const float *src, size_t n)
{
#if defined(__x86_64__)
    if (have_avx512()) {
        vec_round_bf16_avx512(dst, src, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        dst[i] = bf16_round(src[i]);
}

void vec_to_bf16(uint16_t *dst, const float *src, size_t n)
{
#if defined(__x86_64__)
    if (have_avx512()) {
        vec_to_bf16_avx512(dst, src, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        dst[i] = f32_to_bf16(src[i]);
}

void vec_exp(float *x, size_t n)
{
#if defined(__x86_64__)
    if (have_avx512()) {
        vec_exp_avx512(x, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        x[i] = expf(x[i]);
}

void vec_silu(float *y, const float *g, const float *up, size_t n)
{
#if defined(__x86_64__)
    if (have_avx512()) {
        vec_silu_avx512(y, g, up, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) {
        float v = g[i] / (1.0f + expf(-g[i]));
        y[i] = up ? v * up[i] : v;
    }
}
