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

#else
void qdot_rows_avx2(const struct qdot_args *a, int r0, int r1)
{
    qdot_rows_scalar(a, r0, r1);
}
#endif
