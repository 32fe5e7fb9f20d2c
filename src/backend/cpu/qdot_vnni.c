/* The quantized dot products for AVX512-VNNI: on 256-bit vectors
 * (AVX512VL) four byte products summed into 32 bits by one VPDPBUSD, and
 * the K-quants on 512-bit vectors (AVX512BW, qdot_k512.h). This file alone
 * is compiled with those sets (CMakeLists.txt); qlinear.c runs it only
 * where the CPU has them. */
#include "backend/cpu/qdot.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define QD_DOT(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
#define QDOT_ROWS_FN qdot_rows_vnni
#define QD_K512
#include "backend/cpu/qdot_body.h"

/* the multi-row kernel: the weights' quads broadcast against x + 128 */
static inline __m256i qdt_dot4(__m256i acc, __m256i xv, const void *wp)
{
    int32_t w4;
    memcpy(&w4, wp, 4);
    return _mm256_dpbusd_epi32(acc, xv, _mm256_set1_epi32(w4));
}
#define QDT_DOT4 qdt_dot4
#define QDT_NW 4
#define QDT_DOT4_Q8 qdt_dot4
#define QDT_Q8_BIAS 1
#define QDOT_TILE_FN qdot_tile_vnni
#include "backend/cpu/qdot_tile_body.h"

#include "backend/cpu/qdot_mr_body.h"

#else
void qdot_rows_vnni(const struct qdot_args *a, int r0, int r1)
{
    qdot_rows_scalar(a, r0, r1);
}

int qdot_tile_vnni(const struct qdot_args *a, int r0, int r1)
{
    qdot_rows_scalar(a, r0, r1);
    return 0;
}

int qdot_mr_vnni(const struct qdot_args *a, int r0, int r1)
{
    qdot_rows_scalar(a, r0, r1);
    return 0;
}
#endif
