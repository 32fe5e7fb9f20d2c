/* vec.h's loops for AVX-512 F + BW + VL, sixteen lanes: this file alone is compiled
 * with that instruction set (CMakeLists.txt), and runs only where vec.c
 * found it. The exponential is glibc's vector expf (libmvec, the x86-64
 * vector function ABI's name for the 16-lane AVX-512 variant), as are the
 * GELUs' tanhf and erff (glibc 2.35 and later). */
#include "backend/cpu/vec.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "core/dtype.h"

__m512 _ZGVeN16v_expf(__m512 x);
__m512 _ZGVeN16v_tanhf(__m512 x);
__m512 _ZGVeN16v_erff(__m512 x);

/* bf16_round on 16 lanes, as bits: nearest even; NaNs quieted */
static inline __m512i round_bits(__m512 v)
{
    const __m512i u = _mm512_castps_si512(v);
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i rounded =
        _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), hi);
    __m512i quiet = _mm512_and_si512(_mm512_or_si512(u, _mm512_set1_epi32(0x00400000)), hi);
    __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    __mmask16 nan = _mm512_cmpgt_epi32_mask(mag, _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_blend_epi32(nan, rounded, quiet);
}

void vec_round_bf16_avx512(float *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_si512(dst + i, round_bits(_mm512_loadu_ps(src + i)));
    for (; i < n; i++)
        dst[i] = bf16_round(src[i]);
}

void vec_to_bf16_avx512(uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i b = _mm512_srli_epi32(round_bits(_mm512_loadu_ps(src + i)), 16);
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(b));
    }
    for (; i < n; i++)
        dst[i] = f32_to_bf16(src[i]);
}

/* n < 16 lanes through a masked load and store */
static inline __m512 load_tail(const float *p, size_t n)
{
    return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
}

static inline void store_tail(float *p, __m512 v, size_t n)
{
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), v);
}

void vec_exp_avx512(float *x, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, _ZGVeN16v_expf(_mm512_loadu_ps(x + i)));
    if (i < n)
        store_tail(x + i, _ZGVeN16v_expf(load_tail(x + i, n - i)), n - i);
}

static inline __m512 silu16(__m512 g)
{
    __m512 e = _ZGVeN16v_expf(_mm512_sub_ps(_mm512_setzero_ps(), g));
    return _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

void vec_silu_avx512(float *y, const float *g, const float *up, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = silu16(_mm512_loadu_ps(g + i));
        if (up)
            v = _mm512_mul_ps(v, _mm512_loadu_ps(up + i));
        _mm512_storeu_ps(y + i, v);
    }
    if (i < n) {
        __m512 v = silu16(load_tail(g + i, n - i));
        if (up)
            v = _mm512_mul_ps(v, load_tail(up + i, n - i));
        store_tail(y + i, v, n - i);
    }
}

static inline __m512 gelu16(__m512 v, bool tanh_approx)
{
    const __m512 half_v = _mm512_mul_ps(_mm512_set1_ps(0.5f), v);
    __m512 t;
    if (tanh_approx) {
        const __m512 v3 = _mm512_mul_ps(_mm512_mul_ps(v, v), v);
        const __m512 in = _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), v3, v);
        t = _ZGVeN16v_tanhf(_mm512_mul_ps(_mm512_set1_ps(0.79788456080286536f), in));
    } else {
        t = _ZGVeN16v_erff(_mm512_mul_ps(v, _mm512_set1_ps(0.70710678118654752f)));
    }
    return _mm512_fmadd_ps(half_v, t, half_v);
}

void vec_gelu_avx512(float *y, const float *g, const float *up, size_t n, bool tanh_approx)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = gelu16(_mm512_loadu_ps(g + i), tanh_approx);
        if (up)
            v = _mm512_mul_ps(v, _mm512_loadu_ps(up + i));
        _mm512_storeu_ps(y + i, v);
    }
    if (i < n) {
        __m512 v = gelu16(load_tail(g + i, n - i), tanh_approx);
        if (up)
            v = _mm512_mul_ps(v, load_tail(up + i, n - i));
        store_tail(y + i, v, n - i);
    }
}

void vec_softcap_avx512(float *x, size_t n, float cap)
{
    const __m512 c = _mm512_set1_ps(cap);
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(
            x + i, _mm512_mul_ps(_ZGVeN16v_tanhf(_mm512_div_ps(_mm512_loadu_ps(x + i), c)), c));
    if (i < n)
        store_tail(x + i, _mm512_mul_ps(_ZGVeN16v_tanhf(_mm512_div_ps(load_tail(x + i, n - i), c)), c),
                   n - i);
}

/* lanes j of 16 whose ok byte is set, up to n */
static inline __mmask16 ok_mask(const uint8_t *ok, size_t n)
{
    __mmask16 in = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
    __m128i b = _mm_maskz_loadu_epi8(in, ok);
    return _mm512_mask_cmpneq_epi32_mask(in, _mm512_cvtepu8_epi32(b), _mm512_setzero_si512());
}

void vec_softmax_masked_avx512(float *s, const uint8_t *ok, int visible, int n)
{
    const size_t v = (size_t)visible;
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (size_t j = 0; j < v; j += 16) {
        size_t k = v - j < 16 ? v - j : 16;
        __mmask16 m = ok_mask(ok + j, k);
        mx = _mm512_mask_max_ps(mx, m, mx, _mm512_maskz_loadu_ps(m, s + j));
    }
    float top = _mm512_reduce_max_ps(mx);
    if (top == -INFINITY) {
        memset(s, 0, (size_t)n * sizeof(float));
        return;
    }
    const __m512 t = _mm512_set1_ps(top);
    __m512 sum = _mm512_setzero_ps();
    for (size_t j = 0; j < v; j += 16) {
        size_t k = v - j < 16 ? v - j : 16;
        __mmask16 m = ok_mask(ok + j, k);
        __m512 e = _mm512_maskz_mov_ps(
            m, _ZGVeN16v_expf(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), t)));
        sum = _mm512_add_ps(sum, e);
        _mm512_mask_storeu_ps(s + j, (__mmask16)(k == 16 ? 0xffff : (1u << k) - 1), e);
    }
    memset(s + v, 0, (size_t)(n - visible) * sizeof(float));
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (size_t j = 0; j < v; j += 16) {
        size_t k = v - j < 16 ? v - j : 16;
        __mmask16 in = (__mmask16)(k == 16 ? 0xffff : (1u << k) - 1);
        _mm512_mask_storeu_ps(s + j, in, _mm512_mul_ps(_mm512_maskz_loadu_ps(in, s + j), inv));
    }
}
#endif
