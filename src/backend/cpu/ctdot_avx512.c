/* The compressed-tensors dot products on AVX-512 (ctdot.h): each block
 * widened to f32 with its scale and zero point (and rounded to bf16 in
 * bf16 mode), then fused multiply-adds into 16 lanes in ctdot.h's order,
 * so the result is the scalar reference's bits. This file alone is
 * compiled with AVX-512F/BW/VL (CMakeLists.txt); ctlinear.c runs it only
 * where the CPU has them. */
#if defined(__x86_64__) || defined(__i386__)

#define CT_PREPARE(rnd, w0, w1)                                                                    \
    do {                                                                                           \
        if (rnd) {                                                                                 \
            w0 = ct_round_bf16(w0);                                                                \
            w1 = ct_round_bf16(w1);                                                                \
        }                                                                                          \
    } while (0)
/* elements j and j + 16 of block b of input row i into lane j */
#define CT_FMA_BLOCK(a, acc, w0, w1, i, b)                                                         \
    do {                                                                                           \
        const float *xi_ = (a)->x + (size_t)(i) * (a)->ldx + (size_t)(b)*QK;                       \
        acc = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xi_), acc);                                      \
        acc = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xi_ + 16), acc);                                 \
    } while (0)

#include "backend/cpu/ctdot_avx512_body.h"

void ctdot_rows_avx512(const struct ctdot_args *a, int r0, int r1)
{
    ct_rows(a, r0, r1);
}

CT_INLINE void ct_dequant_t(enum dtype t, const unsigned char *p, void *dst, size_t n, bool to_bf16)
{
    for (size_t b = 0; b < n / QK; b++, p += ct_bb(t)) {
        __m512 w0, w1;
        ct_block(t, p, &w0, &w1);
        if (!to_bf16) {
            _mm512_storeu_ps((float *)dst + b * QK, w0);
            _mm512_storeu_ps((float *)dst + b * QK + 16, w1);
            continue;
        }
        uint16_t *o = (uint16_t *)dst + b * QK;
        _mm256_storeu_si256((__m256i *)o, _mm512_cvtepi32_epi16(_mm512_srli_epi32(
                                              _mm512_castps_si512(ct_round_bf16(w0)), 16)));
        _mm256_storeu_si256((__m256i *)(o + 16), _mm512_cvtepi32_epi16(_mm512_srli_epi32(
                                                     _mm512_castps_si512(ct_round_bf16(w1)), 16)));
    }
}

void ctdot_dequant_avx512(enum dtype t, const void *src, void *dst, size_t n, bool to_bf16)
{
    switch (t) {
    case DTYPE_CT_I8:
        ct_dequant_t(DTYPE_CT_I8, src, dst, n, to_bf16);
        break;
    case DTYPE_CT_I4:
        ct_dequant_t(DTYPE_CT_I4, src, dst, n, to_bf16);
        break;
    default:
        ct_dequant_t(DTYPE_CT_F8, src, dst, n, to_bf16);
        break;
    }
}

#else
#include <assert.h>

#include "backend/cpu/ctdot.h"

void ctdot_rows_avx512(const struct ctdot_args *a, int r0, int r1)
{
    (void)a, (void)r0, (void)r1;
    assert(!"ctdot_rows_avx512 on a CPU without AVX-512");
}

void ctdot_dequant_avx512(enum dtype t, const void *src, void *dst, size_t n, bool to_bf16)
{
    (void)t, (void)src, (void)dst, (void)n, (void)to_bf16;
    assert(!"ctdot_dequant_avx512 on a CPU without AVX-512");
}
#endif
