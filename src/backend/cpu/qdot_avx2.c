/* The quantized dot products for AVX2: bytes multiplied in pairs to 16
 * bits (VPMADDUBSW) and the pairs summed to 32 (VPMADDWD). This file alone
 * is compiled with AVX2 (CMakeLists.txt); qlinear.c runs it only where the
 * CPU has it. */
#include "backend/cpu/qdot.h"

#include <assert.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/* no pair saturates 16 bits: at most 2 * 128 * 127 (qdot_body.h) */
#define QD_DOT(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
#define QDOT_ROWS_FN qdot_rows_avx2
#define QD_XR
#include "backend/cpu/qdot_body.h"

/* x's layout for the types of 32 (qd_xr), read by this file's and by
 * vnni-near's kernels: AVX2 alone lays it out */
size_t qdot_xr_row_bytes(int n)
{
    return (qd_xr_bytes(n / QUANT_QK0) + 63) / 64 * 64;
}

void qdot_pack_x_xr(const char *xq, int n, char *xr)
{
    const int nb = n / QUANT_QK0;
    const struct qd_xr r = qd_xr_at(xr, nb);
    qd_xr_fill(&r, xq, nb);
}

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
static inline __m256i qdt_mul16(__m256i xv, const void *wp)
{
    int32_t w4;
    memcpy(&w4, wp, 4);
    return _mm256_maddubs_epi16(xv, _mm256_set1_epi32(w4));
}
/* the 4 unsigned bytes at wp (each row's 4 elements) times xs (signed) */
static inline __m256i qdt_mul16u(const void *wp, __m256i xs)
{
    int32_t w4;
    memcpy(&w4, wp, 4);
    return _mm256_maddubs_epi16(_mm256_set1_epi32(w4), xs);
}
#define QDT_DOT4 qdt_dot4
#define QDT_MUL16 qdt_mul16
#define QDT_MUL16U qdt_mul16u
#define QDT_NW 2
#define QDT_DOT4_Q8 qdt_dot4_q8
#define QDT_Q8_BIAS 0
#define QDOT_TILE_FN qdot_tile_avx2
#include "backend/cpu/qdot_tile_body.h"

void qdot_x_q8_0_avx2(const float *x, void *xq, int n)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0.5f);
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    char *o = xq;
    for (int b = 0; b < n / QUANT_QK0; b++, x += QUANT_QK0, o += sizeof(struct quant_q8_0)) {
        __m256 v[4], m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + 8 * k);
            /* a NaN leaves the maximum as it was, as fmaxf does */
            m = _mm256_max_ps(_mm256_andnot_ps(sign, v[k]), m);
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        const float d = _mm_cvtss_f32(h) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t dh = f32_to_f16(d);
        memcpy(o, &dh, 2);
        __m256i q[4];
        for (int k = 0; k < 4; k++) {
            /* roundf: toward zero, then one away from zero where the rest
             * (exact) is at least a half */
            const __m256 s = _mm256_mul_ps(v[k], _mm256_set1_ps(id));
            const __m256 t = _mm256_round_ps(s, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m256 big =
                _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(s, t)), half, _CMP_GE_OQ);
            const __m256 away = _mm256_and_ps(big, _mm256_or_ps(one, _mm256_and_ps(sign, s)));
            q[k] = _mm256_cvttps_epi32(_mm256_add_ps(t, away));
        }
        /* |q| <= 127: the packs saturate nothing */
        const __m256i p =
            _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *)(o + 2), _mm256_permutevar8x32_epi32(p, order));
    }
}

#else
size_t qdot_xr_row_bytes(int n)
{
    (void)n;
    return 0; /* no layout: avx2 and vnni-near are never offered without x86 */
}

void qdot_pack_x_xr(const char *xq, int n, char *xr)
{
    (void)xq, (void)n, (void)xr;
    assert(!"qdot_pack_x_xr without x86");
}

void qdot_rows_avx2(const struct qdot_args *a, int r0, int r1)
{
    qdot_rows_scalar(a, r0, r1);
}

int qdot_tile_avx2(const struct qdot_args *a, int r0, int r1)
{
    qdot_rows_scalar(a, r0, r1);
    return 0;
}

void qdot_x_q8_0_avx2(const float *x, void *xq, int n)
{
    quant_q8_0_from_f32(x, xq, n);
}
#endif
