/* The CPU kernels' element-wise loops that the compiler cannot vectorise
 * for the baseline instruction set: rounding to bf16 and the exponential
 * (SiLU, softmax), the GELUs' erf and tanh, and the masked softmax around
 * it. vec.c picks the AVX-512 versions (vec_avx512.c, compiled for that set
 * alone) where the CPU has it, else for the loops of exponentials the AVX2
 * ones (vec_avx2.c), else plain C; each gives the same results on every
 * path: the roundings bit for bit, the exponential within glibc's vector
 * expf's error (a few ulp) of expf. Internal to backend/cpu/. */
#ifndef SHARDSWAP_BACKEND_CPU_VEC_H
#define SHARDSWAP_BACKEND_CPU_VEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* dst[i] = bf16_round(src[i]) (core/dtype.h); dst may equal src. */
void vec_round_bf16(float *dst, const float *src, size_t n);
/* dst[i] = f32_to_bf16(src[i]). */
void vec_to_bf16(uint16_t *dst, const float *src, size_t n);
/* x[i] = exp(x[i]) */
void vec_exp(float *x, size_t n);
/* y[i] = silu(g[i]) (* up[i] when up is not NULL), silu(v) = v / (1 +
 * exp(-v)); y may equal g or up. */
void vec_silu(float *y, const float *g, const float *up, size_t n);
/* y[i] = gelu(g[i]) (* up[i] when up is not NULL): with tanh_approx
 * 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))), else exact, 0.5 v (1 +
 * erf(v / sqrt 2)); y may equal g or up. */
void vec_gelu(float *y, const float *g, const float *up, size_t n, bool tanh_approx);
/* x[i] = tanh(x[i] / cap) * cap, each step rounded to f32 as torch does. */
void vec_softcap(float *x, size_t n, float cap);

/* Softmax in place over the keys s[j], j < visible, with ok[j]; every other
 * s[j], j < n, becomes 0, and all n when no key is ok. */
void vec_softmax_masked(float *s, const uint8_t *ok, int visible, int n);

/* The AVX-512 versions (vec_avx512.c): only where the CPU has AVX-512 F, BW
 * and VL. */
void vec_round_bf16_avx512(float *dst, const float *src, size_t n);
void vec_to_bf16_avx512(uint16_t *dst, const float *src, size_t n);
void vec_exp_avx512(float *x, size_t n);
void vec_silu_avx512(float *y, const float *g, const float *up, size_t n);
void vec_gelu_avx512(float *y, const float *g, const float *up, size_t n, bool tanh_approx);
void vec_softcap_avx512(float *x, size_t n, float cap);
void vec_softmax_masked_avx512(float *s, const uint8_t *ok, int visible, int n);

/* The AVX2 + FMA versions (vec_avx2.c): only where the CPU has them. */
void vec_exp_avx2(float *x, size_t n);
void vec_silu_avx2(float *y, const float *g, const float *up, size_t n);
void vec_gelu_avx2(float *y, const float *g, const float *up, size_t n, bool tanh_approx);
void vec_softcap_avx2(float *x, size_t n, float cap);
void vec_softmax_masked_avx2(float *s, const uint8_t *ok, int visible, int n);

#endif
