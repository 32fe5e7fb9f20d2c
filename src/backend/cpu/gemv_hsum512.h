/* gv_hsum8 for the AVX-512 GEMV kernels (gemv_avx512.c,
 * gemv_avx512bf16.c), included after their gv_t; compiled with their
 * AVX-512 flags. */
#ifndef SHARDSWAP_BACKEND_CPU_GEMV_HSUM512_H
#define SHARDSWAP_BACKEND_CPU_GEMV_HSUM512_H

#include <immintrin.h>

/* gv_hsum of 8 vectors at once: _mm512_reduce_add_ps's tree (each vector's
 * upper 8 lanes plus its lower 8, then the 4s, then lanes 0 + 2 and 1 + 3,
 * then those two), taken for all 8 side by side, so every sum is bitwise
 * the one gv_hsum gives: about 25 instructions where 8 reductions take 64
 * (8 input rows x 3 weight rows of sums end every block of gemv_body.h's
 * m8 kernels). */
static inline __attribute__((unused)) void gv_hsum8(const __m512 v[8], float out[8])
{
    __m512 u[4];
    for (int j = 0; j < 4; j++) /* [v0 hi + lo (8), v1 hi + lo (8)] */
        u[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0xEE),
                             _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0x44));
    /* block j of w0: vector j's 4 upper plus its 4 lower; w1: vector 4 + j */
    const __m512 w0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0xDD),
                                    _mm512_shuffle_f32x4(u[0], u[1], 0x88));
    const __m512 w1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0xDD),
                                    _mm512_shuffle_f32x4(u[2], u[3], 0x88));
    /* per block: [0 + 2, 1 + 3 of w0's, 0 + 2, 1 + 3 of w1's] */
    const __m512 z =
        _mm512_add_ps(_mm512_shuffle_ps(w0, w1, 0x44), _mm512_shuffle_ps(w0, w1, 0xEE));
    const __m512 f = _mm512_add_ps(z, _mm512_permute_ps(z, 0xB1));
    const __m512i pick = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 14, 10, 6, 2, 12, 8, 4, 0);
    _mm256_storeu_ps(out, _mm512_castps512_ps256(_mm512_permutexvar_ps(pick, f)));
}

#endif
