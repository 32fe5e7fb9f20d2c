/* The quantized dot products for AVX2: bytes multiplied in pairs to 16
 * bits (VPMADDUBSW) and the pairs summed to 32 (VPMADDWD). This file alone
 * is compiled with AVX2 (CMakeLists.txt); qlinear.c runs it only where the
 * CPU has it. */
#include "backend/cpu/qdot.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/* no pair saturates 16 bits: at most 2 * 128 * 127 (qdot_body.h) */
#define QD_DOT(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
#define QDOT_ROWS_FN qdot_rows_avx2
#include "backend/cpu/qdot_body.h"

/* the multi-row kernel: the weights' quads broadcast against x + 128; for
 * Q8_0's full range |w| against x with w's sign, as above */
static inline __m256i qdt_dot4(__m256i acc, __m256i xv, const void *wp)
{
    int32_t w4;
    memcpy(&w4, wp, 4);
    const __m256i wb = _mm256_set1_epi32(w4);
    return _mm256_add_epi32(acc,
                            _mm256_madd_epi16(_mm256_maddubs_epi16(xv, wb), _mm256_set1_epi16(1)));
}

static inline __m256i qdt_dot4_q8(__m256i acc, __m256i xv, const void *wp)
{
    int32_t w4;
    memcpy(&w4, wp, 4);
    const __m256i wb = _mm256_set1_epi32(w4);
    const __m256i xs = _mm256_xor_si256(xv, _mm256_set1_epi8(-128));
    return _mm256_add_epi32(acc, QD_DOT(_mm256_sign_epi8(wb, wb), _mm256_sign_epi8(xs, wb)));
}
#define QDT_DOT4 qdt_dot4
#define QDT_NW 2
#define QDT_DOT4_Q8 qdt_dot4_q8
#define QDT_Q8_BIAS 0
#define QDOT_TILE_FN qdot_tile_avx2
#include "backend/cpu/qdot_tile_body.h"

#else
void qdot_rows_avx2(const struct qdot_args *a, int r0, int r1)
{
    qdot_rows_scalar(a, r0, r1);
}

int qdot_tile_avx2(const struct qdot_args *a, int r0, int r1)
{
    qdot_rows_scalar(a, r0, r1);
    return 0;
}
#endif
