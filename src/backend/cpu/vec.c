/* vec.h: AVX-512 where the CPU has it (AVX-512 F, BW and VL), else AVX2 +
 * FMA for the loops of exponentials (vec_avx2.c), else plain C. */
#include "backend/cpu/vec.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "core/dtype.h"

static bool have_avx512(void)
{
#if defined(__x86_64__)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
#else
    return false;
#endif
}

static bool have_avx2(void)
{
#if defined(__x86_64__)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
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
    if (have_avx2()) {
        vec_exp_avx2(x, n);
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
    if (have_avx2()) {
        vec_silu_avx2(y, g, up, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) {
        float v = g[i] / (1.0f + expf(-g[i]));
        y[i] = up ? v * up[i] : v;
    }
}

void vec_gelu(float *y, const float *g, const float *up, size_t n, bool tanh_approx)
{
#if defined(__x86_64__)
    if (have_avx512()) {
        vec_gelu_avx512(y, g, up, n, tanh_approx);
        return;
    }
    if (have_avx2()) {
        vec_gelu_avx2(y, g, up, n, tanh_approx);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) {
        const float v = g[i];
        float a = tanh_approx
                      ? 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)))
                      : 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
        y[i] = up ? a * up[i] : a;
    }
}

void vec_softcap(float *x, size_t n, float cap)
{
#if defined(__x86_64__)
    if (have_avx512()) {
        vec_softcap_avx512(x, n, cap);
        return;
    }
    if (have_avx2()) {
        vec_softcap_avx2(x, n, cap);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        x[i] = tanhf(x[i] / cap) * cap;
}

void vec_softmax_masked(float *s, const uint8_t *ok, int visible, int n)
{
#if defined(__x86_64__)
    if (have_avx512()) {
        vec_softmax_masked_avx512(s, ok, visible, n);
        return;
    }
    if (have_avx2()) {
        vec_softmax_masked_avx2(s, ok, visible, n);
        return;
    }
#endif
    float mx = -INFINITY;
    for (int j = 0; j < visible; j++)
        if (ok[j] && s[j] > mx)
            mx = s[j];
    if (mx == -INFINITY) {
        memset(s, 0, (size_t)n * sizeof(float));
        return;
    }
    float sum = 0;
    for (int j = 0; j < visible; j++) {
        s[j] = ok[j] ? expf(s[j] - mx) : 0.0f;
        sum += s[j];
    }
    memset(s + visible, 0, (size_t)(n - visible) * sizeof(float));
    float inv = 1.0f / sum;
    for (int j = 0; j < visible; j++)
        s[j] *= inv;
}
