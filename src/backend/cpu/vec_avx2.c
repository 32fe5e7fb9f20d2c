/* vec.h's loops of exponentials (vec_body.h) for AVX2 + FMA, eight lanes,
 * where the CPU has no AVX-512 (AMD EPYC Zen 2): this file alone is compiled
 * with those sets (CMakeLists.txt), and runs only where vec.c found them.
 * The exponential, tanhf and erff are glibc's 8-lane AVX2 vector functions
 * (libmvec): on Zen 2 a qwen2.5-0.5b decode step's SwiGLU (24 calls of 4864
 * elements) took 0.44 ms through the scalar expf, 0.09 through these. */
#include "backend/cpu/vec.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

__m256 _ZGVdN8v_expf(__m256 x);
__m256 _ZGVdN8v_tanhf(__m256 x);
__m256 _ZGVdN8v_erff(__m256 x);

/* vec_body.h's operations on 8 lanes, a mask a vector of all-ones lanes */
typedef __m256 vx_t;
#define VX_LANES 8
#define VX_FN(name) name##_avx2

/* lanes [0, n) of 8 all ones */
static inline __m256i lanes(size_t n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline __m256 vx_load_tail(const float *p, size_t n)
{
    return _mm256_maskload_ps(p, lanes(n));
}

static inline void vx_store_tail(float *p, __m256 v, size_t n)
{
    _mm256_maskstore_ps(p, lanes(n), v);
}

/* lanes j < n of 8 whose ok byte is set */
static inline __m256 vx_ok(const uint8_t *ok, size_t n)
{
    uint8_t b[8] = {0};
    memcpy(b, ok, n < 8 ? n : 8);
    uint64_t u;
    memcpy(&u, b, 8);
    const __m256i w = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)u));
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(w, _mm256_setzero_si256()));
}

static inline float vx_hmax(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

static inline float vx_hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

#define vx_load _mm256_loadu_ps
#define vx_store _mm256_storeu_ps
#define vx_set1 _mm256_set1_ps
#define vx_add _mm256_add_ps
#define vx_sub _mm256_sub_ps
#define vx_mul _mm256_mul_ps
#define vx_div _mm256_div_ps
#define vx_fmadd _mm256_fmadd_ps
#define vx_max _mm256_max_ps
#define vx_select(m, a) _mm256_and_ps(m, a)
#define vx_select_or(m, a, b) _mm256_blendv_ps(b, a, m)
#define vx_expf _ZGVdN8v_expf
#define vx_tanhf _ZGVdN8v_tanhf
#define vx_erff _ZGVdN8v_erff
#include "backend/cpu/vec_body.h"
#endif
