/* `avx2-far`: avx2's single-row kernels over 4 far-apart streams of a
 * thread's lane in lockstep (qdot_far.h), a candidate beside avx2 chosen by
 * the calibration (qlinear.c). Its prefetch distance per stream is a
 * quarter of avx2's 8 KiB: four streams keep the same bytes in flight.
 * Compiled with qdot_avx2.c's flags (CMakeLists.txt), run only where the
 * CPU has AVX2. */
#include "backend/cpu/qdot.h"

#include <assert.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/* qdot_avx2.c's product: no pair saturates 16 bits */
#define QD_DOT(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
#define QD_XR
#define QD_PREFETCH 1024
#define QDOT_PIECES_FN qdot_pieces_avx2_far
#define QDOT_PIECES_ROWS qdot_rows_avx2
#include "backend/cpu/qdot_body.h"

#else
void qdot_pieces_avx2_far(const struct qdot_piece *p, int n)
{
    for (int k = 0; k < n; k++)
        qdot_rows_scalar(p[k].a, p[k].r0, p[k].r1);
}
#endif
