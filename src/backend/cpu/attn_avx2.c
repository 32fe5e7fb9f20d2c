/* attn_vec.h's two products (attn_body.h) in AVX2 + FMA, eight lanes, for
 * CPUs without AVX-512 (AMD EPYC Zen 2): this file alone is compiled with
 * those sets (CMakeLists.txt), and runs only where attn_vec.c found them.
 * On Zen 2 a qwen2.5-0.5b decode step's attention had gone to OpenBLAS's
 * sgemm (7 query heads x 145 keys x 64): 0.67 ms a step of 24 layers,
 * 0.39 through these. */
#include "backend/cpu/attn_vec.h"

#if defined(__x86_64__)
#include <immintrin.h>

/* attn_body.h's operations on 8 lanes, a row's last vector masked by a
 * vector of all-ones lanes */
typedef __m256 at_t;
typedef __m256i at_m;
#define AT_LANES 8
#define AT_NC_MAX 4
#define AT_FN(name) name##_avx2

/* lanes [0, n) of 8 all ones */
static inline __m256i at_lanes(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The lane sums of v[0..7], v[i]'s in lane i: pairs, then quadruples
 * within each 128-bit lane (VHADDPS), then the two 128-bit lanes. */
static inline __attribute__((always_inline)) __m256 at_sum(const __m256 *v)
{
    const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

static inline __m256 at_chunk(const float *p, int c, int C, __m256i last)
{
    return c == C - 1 ? _mm256_maskload_ps(p + 8 * c, last) : _mm256_loadu_ps(p + 8 * c);
}

static inline void at_store_chunk(float *p, int c, int C, __m256i last, __m256 v)
{
    if (c == C - 1)
        _mm256_maskstore_ps(p + 8 * c, last, v);
    else
        _mm256_storeu_ps(p + 8 * c, v);
}

/* a whole vector by a plain store: VMASKMOVPS's store took about an eighth
 * of the scores' time on AMD EPYC Zen 2 (7 rows x 160 keys of 64) */
static inline void at_store_first(float *p, int n, __m256 v)
{
    if (n == 8)
        _mm256_storeu_ps(p, v);
    else
        _mm256_maskstore_ps(p, at_lanes(n), v);
}

#define at_zero _mm256_setzero_ps
#define at_fmadd _mm256_fmadd_ps
#define at_add _mm256_add_ps
#define at_set1 _mm256_set1_ps

#include "backend/cpu/attn_body.h"
#else
void attn_scores_avx2(float *s, size_t lds, const float *q, size_t ldq, int rows, int head_dim,
                      const float *k, const float *v, int n)
{
    (void)s, (void)lds, (void)q, (void)ldq, (void)rows, (void)head_dim, (void)k, (void)v, (void)n;
}

void attn_values_avx2(float *out, size_t ldo, const float *p, size_t ldp, int rows, int head_dim,
                      const float *v, int n, bool add)
{
    (void)out, (void)ldo, (void)p, (void)ldp, (void)rows, (void)head_dim, (void)v, (void)n,
        (void)add;
}
#endif
