/* vec.h's loops for AVX2 + FMA, eight lanes, where the CPU has no AVX-512
 * (AMD EPYC Zen 2): this file alone is compiled with those sets
 * (CMakeLists.txt), and runs only where vec.c found them. The exponential,
 * tanhf and erff are glibc's vector functions (libmvec's 8-lane AVX2
 * variants), as vec_avx512.c's 16-lane ones: on Zen 2 a qwen2.5-0.5b decode
 * step's SwiGLU (24 calls of 4864 elements) took 0.44 ms through the scalar
 * expf. The loops are vec_avx512.c's, the tails through masked loads and
 * stores. */
#include "backend/cpu/vec.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <string.h>

__m256 _ZGVdN8v_expf(__m256 x);
__m256 _ZGVdN8v_tanhf(__m256 x);
__m256 _ZGVdN8v_erff(__m256 x);

/* lanes [0, n) of 8 all ones */
static inline __m256i lanes_below(size_t n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* n < 8 lanes through a masked load and store (zeros past n) */
static inline __m256 load_tail(const float *p, size_t n)
{
    return _mm256_maskload_ps(p, lanes_below(n));
}

static inline void store_tail(float *p, __m256 v, size_t n)
{
    _mm256_maskstore_ps(p, lanes_below(n), v);
}

void vec_exp_avx2(float *x, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _ZGVdN8v_expf(_mm256_loadu_ps(x + i)));
    if (i < n)
        store_tail(x + i, _ZGVdN8v_expf(load_tail(x + i, n - i)), n - i);
}

static inline __m256 silu8(__m256 g)
{
    __m256 e = _ZGVdN8v_expf(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

void vec_silu_avx2(float *y, const float *g, const float *up, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = silu8(_mm256_loadu_ps(g + i));
        if (up)
            v = _mm256_mul_ps(v, _mm256_loadu_ps(up + i));
        _mm256_storeu_ps(y + i, v);
    }
    if (i < n) {
        __m256 v = silu8(load_tail(g + i, n - i));
        if (up)
            v = _mm256_mul_ps(v, load_tail(up + i, n - i));
        store_tail(y + i, v, n - i);
    }
}

static inline __m256 gelu8(__m256 v, bool tanh_approx)
{
    const __m256 half_v = _mm256_mul_ps(_mm256_set1_ps(0.5f), v);
    __m256 t;
    if (tanh_approx) {
        const __m256 v3 = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
        const __m256 in = _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), v3, v);
        t = _ZGVdN8v_tanhf(_mm256_mul_ps(_mm256_set1_ps(0.79788456080286536f), in));
    } else {
        t = _ZGVdN8v_erff(_mm256_mul_ps(v, _mm256_set1_ps(0.70710678118654752f)));
    }
    return _mm256_fmadd_ps(half_v, t, half_v);
}

void vec_gelu_avx2(float *y, const float *g, const float *up, size_t n, bool tanh_approx)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = gelu8(_mm256_loadu_ps(g + i), tanh_approx);
        if (up)
            v = _mm256_mul_ps(v, _mm256_loadu_ps(up + i));
        _mm256_storeu_ps(y + i, v);
    }
    if (i < n) {
        __m256 v = gelu8(load_tail(g + i, n - i), tanh_approx);
        if (up)
            v = _mm256_mul_ps(v, load_tail(up + i, n - i));
        store_tail(y + i, v, n - i);
    }
}

void vec_softcap_avx2(float *x, size_t n, float cap)
{
    const __m256 c = _mm256_set1_ps(cap);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(
            x + i, _mm256_mul_ps(_ZGVdN8v_tanhf(_mm256_div_ps(_mm256_loadu_ps(x + i), c)), c));
    if (i < n)
        store_tail(x + i, _mm256_mul_ps(_ZGVdN8v_tanhf(_mm256_div_ps(load_tail(x + i, n - i), c)), c),
                   n - i);
}

/* lanes j < n of 8 whose ok byte is set, all ones */
static inline __m256 ok_lanes(const uint8_t *ok, size_t n)
{
    uint8_t b[8] = {0};
    memcpy(b, ok, n < 8 ? n : 8);
    uint64_t u;
    memcpy(&u, b, 8);
    const __m256i w = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)u));
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(w, _mm256_setzero_si256()));
}

static inline float hmax8(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

void vec_softmax_masked_avx2(float *s, const uint8_t *ok, int visible, int n)
{
    const size_t v = (size_t)visible;
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 mx = ninf;
    for (size_t j = 0; j < v; j += 8) {
        const size_t k = v - j < 8 ? v - j : 8;
        const __m256 m = ok_lanes(ok + j, k);
        mx = _mm256_max_ps(mx, _mm256_blendv_ps(ninf, load_tail(s + j, k), m));
    }
    const float top = hmax8(mx);
    if (top == -INFINITY) {
        memset(s, 0, (size_t)n * sizeof(float));
        return;
    }
    const __m256 t = _mm256_set1_ps(top);
    __m256 sum = _mm256_setzero_ps();
    for (size_t j = 0; j < v; j += 8) {
        const size_t k = v - j < 8 ? v - j : 8;
        const __m256 m = ok_lanes(ok + j, k);
        const __m256 e = _mm256_and_ps(m, _ZGVdN8v_expf(_mm256_sub_ps(load_tail(s + j, k), t)));
        sum = _mm256_add_ps(sum, e);
        store_tail(s + j, e, k);
    }
    memset(s + v, 0, (size_t)(n - visible) * sizeof(float));
    const __m256 inv = _mm256_set1_ps(1.0f / hsum8(sum));
    for (size_t j = 0; j < v; j += 8) {
        const size_t k = v - j < 8 ? v - j : 8;
        store_tail(s + j, _mm256_mul_ps(load_tail(s + j, k), inv), k);
    }
}
#endif
