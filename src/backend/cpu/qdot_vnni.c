/* The quantized dot products for AVX512-VNNI on 256-bit vectors
 * (AVX512VL): four byte products summed into 32 bits by one VPDPBUSD. This
 * file alone is compiled with those sets (CMakeLists.txt); qlinear.c runs
 * it only where the CPU has them. */
#include "backend/cpu/qdot.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define QD_DOT(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
#define QDOT_ROWS_FN qdot_rows_vnni
#include "backend/cpu/qdot_body.h"

#else
void qdot_rows_vnni(const struct qdot_args *a, int r0, int r1)
{
    qdot_rows_scalar(a, r0, r1);
}
#endif
