/* vec.h's loops for AVX-512 F + BW + VL, sixteen lanes: this file alone is compiled
 * with that instruction set (CMakeLists.txt), and runs only where vec.c
 * found it. The roundings to bf16 are its own; the loops of exponentials
 * are vec_body.h's, with glibc's vector expf (libmvec, the x86-64 vector
 * function ABI's name for the 16-lane AVX-512 variant), as are the GELUs'
 * tanhf and erff (glibc 2.35 and later). */
#include "backend/cpu/vec.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "core/dtype.h"

__m512 _ZGVeN16v_expf(__m512 x);
__m512 _ZGVeN16v_tanhf(__m512 x);
__m512 _ZGVeN16v_erff(__m512 x);

/* bf16_round on 16 lanes, as bits: nearest even; NaNs quieted */
static inline __m512i round_bits(__m512 v)
{
    const __m512i u = _mm512_castps_si512(v);
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i rounded =
        _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), hi);
    __m512i quiet = _mm512_and_si512(_mm512_or_si512(u, _mm512_set1_epi32(0x00400000)), hi);
    __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    __mmask16 nan = _mm512_cmpgt_epi32_mask(mag, _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_blend_epi32(nan, rounded, quiet);
}

void vec_round_bf16_avx512(float *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_si512(dst + i, round_bits(_mm512_loadu_ps(src + i)));
    for (; i < n; i++)
        dst[i] = bf16_round(src[i]);
}

void vec_to_bf16_avx512(uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i b = _mm512_srli_epi32(round_bits(_mm512_loadu_ps(src + i)), 16);
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(b));
    }
    for (; i < n; i++)
        dst[i] = f32_to_bf16(src[i]);
}

/* vec_body.h's operations on 16 lanes */
typedef __m512 vx_t;
#define VX_LANES 16
#define VX_FN(name) name##_avx512

/* lanes [0, n) of 16 */
static inline __mmask16 lanes(size_t n)
{
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

static inline __m512 vx_load_tail(const float *p, size_t n)
{
    return _mm512_maskz_loadu_ps(lanes(n), p);
}

static inline void vx_store_tail(float *p, __m512 v, size_t n)
{
    _mm512_mask_storeu_ps(p, lanes(n), v);
}

/* lanes j < n of 16 whose ok byte is set */
static inline __mmask16 vx_ok(const uint8_t *ok, size_t n)
{
    const __mmask16 in = lanes(n);
    const __m128i b = _mm_maskz_loadu_epi8(in, ok);
    return _mm512_mask_cmpneq_epi32_mask(in, _mm512_cvtepu8_epi32(b), _mm512_setzero_si512());
}

#define vx_load _mm512_loadu_ps
#define vx_store _mm512_storeu_ps
#define vx_set1 _mm512_set1_ps
#define vx_add _mm512_add_ps
#define vx_sub _mm512_sub_ps
#define vx_mul _mm512_mul_ps
#define vx_div _mm512_div_ps
#define vx_fmadd _mm512_fmadd_ps
#define vx_max _mm512_max_ps
#define vx_select(m, a) _mm512_maskz_mov_ps(m, a)
#define vx_select_or(m, a, b) _mm512_mask_mov_ps(b, m, a)
#define vx_hmax _mm512_reduce_max_ps
#define vx_hsum _mm512_reduce_add_ps
#define vx_expf _ZGVeN16v_expf
#define vx_tanhf _ZGVeN16v_tanhf
#define vx_erff _ZGVeN16v_erff
#include "backend/cpu/vec_body.h"
#endif
