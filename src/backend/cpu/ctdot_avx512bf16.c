/* The compressed-tensors dot products in bf16 mode on AVX512-BF16
 * (ctdot.h): each block widened to f32 with its scale and zero point,
 * rounded to 32 bf16 (VCVTNE2PS2BF16, nearest even) and multiplied in
 * pairs with x's bf16 (VDPBF16PS): one multiply per 32 weights and input
 * row, the sums in another order than the reference's. This file alone is
 * compiled with AVX512-BF16 (CMakeLists.txt); ctlinear.c runs it only
 * where the CPU has it, and only in bf16 mode. */
#if defined(__x86_64__) || defined(__i386__)

#define CT_PREPARE(rnd, w0, w1)                                                                    \
    (void)(rnd);                                                                                   \
    const __m512bh wb_ = _mm512_cvtne2ps_pbh(w1, w0)
#define CT_FMA_BLOCK(a, acc, w0, w1, i, b)                                                         \
    acc = _mm512_dpbf16_ps(                                                                        \
        acc, wb_,                                                                                  \
        (__m512bh)_mm512_loadu_si512((a)->xb + (size_t)(i) * (a)->w->cols + (size_t)(b)*QK))

#include "backend/cpu/ctdot_avx512_body.h"

void ctdot_rows_avx512bf16(const struct ctdot_args *a, int r0, int r1)
{
    ct_rows(a, r0, r1);
}

#else
#include <assert.h>

#include "backend/cpu/ctdot.h"

void ctdot_rows_avx512bf16(const struct ctdot_args *a, int r0, int r1)
{
    (void)a, (void)r0, (void)r1;
    assert(!"ctdot_rows_avx512bf16 on a CPU without AVX512-BF16");
}
#endif
