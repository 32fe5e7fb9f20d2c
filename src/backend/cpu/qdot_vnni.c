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

/* the multi-row kernel of the types of 32 on 512 bits */
#include "backend/cpu/qdot_tile512.h"

/* quant_q8_k_from_f32's bytes 16 at a time (the scalar one spent 1.5 us on
 * a row of 2048, on the calling thread while the pool waits) */
void qdot_x_q8_k_avx512(const float *x, void *xq, int n)
{
    const __m512 sign = _mm512_set1_ps(-0.0f);
    const __m512i ones = _mm512_set1_epi8(1), top = _mm512_set1_epi32(127);
    /* dword 4 i + l of the sums' vector below holds sub-block 4 l + i */
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    char *o = xq;
    for (int b = 0; b < n / QUANT_QKK; b++, x += QUANT_QKK, o += sizeof(struct quant_q8_k)) {
        /* a NaN leaves the maximum as it was, as the scalar comparison does */
        __m512 m = _mm512_setzero_ps();
        for (int k = 0; k < QUANT_QKK / 16; k++)
            m = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + 16 * k)), m);
        const float amax = _mm512_reduce_max_ps(m);
        if (amax == 0.0f) {
            memset(o, 0, sizeof(struct quant_q8_k));
            continue;
        }
        /* the first element of that magnitude gives the scale its sign */
        float max = 0.0f;
        for (int k = 0; k < QUANT_QKK / 16; k++) {
            const __mmask16 at =
                _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + 16 * k)),
                                   _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (at) {
                max = x[16 * k + __builtin_ctz(at)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m512 is = _mm512_set1_ps(iscale);
        int8_t *qs = (int8_t *)(o + 4);
        for (int k = 0; k < QUANT_QKK / 16; k++) {
            /* nearest even (the current rounding, as nearbyintf), at most
             * 127, then the low byte as the scalar (int8_t) keeps it */
            const __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(is, _mm512_loadu_ps(x + 16 * k)));
            _mm_storeu_si128((__m128i *)(qs + 16 * k),
                             _mm512_cvtepi32_epi8(_mm512_min_epi32(v, top)));
        }
        /* the sums of 16: per 64 bytes four sums of 4 in each 128-bit lane
         * (one lane a sub-block), reduced across four such vectors */
        __m512i s[4];
        for (int i = 0; i < 4; i++)
            s[i] =
                _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(qs + 64 * i));
        const __m512i sums = qd5_sum4_lanes(s);
        _mm256_storeu_si256((__m256i *)(o + 4 + QUANT_QKK),
                            _mm512_cvtepi32_epi16(_mm512_permutexvar_epi32(order, sums)));
        const float d = 1.0f / iscale;
        memcpy(o, &d, 4);
    }
}

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

int qdot_tile_vnni_z(const struct qdot_args *a, int r0, int r1)
{
    qdot_rows_scalar(a, r0, r1);
    return 0;
}

void qdot_x_q8_k_avx512(const float *x, void *xq, int n)
{
    quant_q8_k_from_f32(x, xq, n);
}

int qdot_mr_vnni(const struct qdot_args *a, int r0, int r1)
{
    qdot_rows_scalar(a, r0, r1);
    return 0;
}
#endif
