/* attn_vec.h's two products (attn_body.h) in AVX-512 F, sixteen lanes:
 * this file alone is compiled with that instruction set (CMakeLists.txt),
 * and runs only where attn_vec.c found it. */
#include "backend/cpu/attn_vec.h"

#if defined(__x86_64__)
#include <immintrin.h>

/* attn_body.h's operations on 16 lanes, a row's last vector masked by a
 * mask register */
typedef __m512 at_t;
typedef __mmask16 at_m;
#define AT_LANES 16
#define AT_NC_MAX 8
#define AT_FN(name) name##_avx512

/* lanes [0, n) of 16 */
static inline __mmask16 at_lanes(int n)
{
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

static inline __m512 at_chunk(const float *p, int c, int C, __mmask16 last)
{
    return _mm512_maskz_loadu_ps(c == C - 1 ? last : (__mmask16)0xffff, p + 16 * c);
}

static inline void at_store_chunk(float *p, int c, int C, __mmask16 last, __m512 v)
{
    _mm512_mask_storeu_ps(p + 16 * c, c == C - 1 ? last : (__mmask16)0xffff, v);
}

static inline void at_store_first(float *p, int n, __m512 v)
{
    _mm512_mask_storeu_ps(p, at_lanes(n), v);
}

#define at_zero _mm512_setzero_ps
#define at_fmadd _mm512_fmadd_ps
#define at_add _mm512_add_ps
#define at_set1 _mm512_set1_ps

/* The lane sums of v[0..15], v[i]'s in lane i: pairs interleaved and added
 * (8 vectors), then quadruples within each 128-bit lane (4), then the four
 * 128-bit lanes (2, 1). */
static inline __attribute__((always_inline)) __m512 at_sum(const __m512 *v)
{
    __m512 t[8], u[4];
#pragma GCC unroll 16
    for (int i = 0; i < 8; i++)
        t[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
#pragma GCC unroll 16
    for (int i = 0; i < 4; i++)
        u[i] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0xee));
    const __m512 w0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88),
                                    _mm512_shuffle_f32x4(u[0], u[1], 0xdd));
    const __m512 w1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88),
                                    _mm512_shuffle_f32x4(u[2], u[3], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w0, w1, 0x88), _mm512_shuffle_f32x4(w0, w1, 0xdd));
}

#include "backend/cpu/attn_body.h"
#else
void attn_scores_avx512(float *s, size_t lds, const float *q, size_t ldq, int rows, int head_dim,
                        const float *k, const float *v, int n)
{
    (void)s, (void)lds, (void)q, (void)ldq, (void)rows, (void)head_dim, (void)k, (void)n;
}

void attn_values_avx512(float *out, size_t ldo, const float *p, size_t ldp, int rows, int head_dim,
                        const float *v, int n, bool add)
{
    (void)out, (void)ldo, (void)p, (void)ldp, (void)rows, (void)head_dim, (void)v, (void)n,
        (void)add;
}
#endif
