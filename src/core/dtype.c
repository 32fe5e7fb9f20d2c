#include "core/dtype.h"

#include <assert.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "core/quant.h"
#include "core/quant_ct.h"

#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

size_t dtype_size(enum dtype t)
{
    assert(!dtype_is_block(t) && "a block type's sizes go through dtype_row_bytes");
    return t == DTYPE_F32 ? 4 : 2;
}

bool dtype_is_block(enum dtype t)
{
    return t != DTYPE_F32 && t != DTYPE_F16 && t != DTYPE_BF16;
}

int dtype_block(enum dtype t)
{
    switch (t) {
    case DTYPE_F32:
    case DTYPE_F16:
    case DTYPE_BF16:
        return 1;
    case DTYPE_Q8_0:
    case DTYPE_Q4_0:
    case DTYPE_Q5_0:
    case DTYPE_Q5_1:
        return QUANT_QK0;
    case DTYPE_Q4_K:
    case DTYPE_Q5_K:
    case DTYPE_Q6_K:
        return QUANT_QKK;
    case DTYPE_CT_I8:
    case DTYPE_CT_I4:
    case DTYPE_CT_F8:
        return QUANT_CT_QK;
    }
    return 1;
}

size_t dtype_row_bytes(enum dtype t, size_t n)
{
    if (!dtype_is_block(t))
        return n * dtype_size(t);
    assert(n % (size_t)dtype_block(t) == 0);
    return n / (size_t)dtype_block(t) * quant_block_bytes(t);
}

int dtype_check_cols(enum dtype t, size_t c0, size_t n, const char *what)
{
    const size_t qk = (size_t)dtype_block(t);
    if (c0 % qk == 0 && n % qk == 0)
        return 0;
    return err_set(ERR_INVALID,
                   "%s: columns [%zu, %zu) of %s do not fall on its %zu-element block boundaries",
                   what, c0, c0 + n, dtype_name(t), qk);
}

const char *dtype_torch_name(enum dtype t)
{
    return t == DTYPE_F16 ? "float16" : t == DTYPE_BF16 ? "bfloat16" : "float32";
}

const char *dtype_name(enum dtype t)
{
    switch (t) {
    case DTYPE_F32: return "F32";
    case DTYPE_F16: return "F16";
    case DTYPE_BF16: return "BF16";
    case DTYPE_Q8_0:
        return "Q8_0";
    case DTYPE_Q4_0:
        return "Q4_0";
    case DTYPE_Q4_K:
        return "Q4_K";
    case DTYPE_Q5_K:
        return "Q5_K";
    case DTYPE_Q6_K:
        return "Q6_K";
    case DTYPE_Q5_0:
        return "Q5_0";
    case DTYPE_Q5_1:
        return "Q5_1";
    case DTYPE_CT_I8:
        return "CT_I8";
    case DTYPE_CT_I4:
        return "CT_I4";
    case DTYPE_CT_F8:
        return "CT_F8";
    }
    return "?";
}

int dtype_parse(const char *s, enum dtype *out)
{
    static const struct {
        const char *name;
        enum dtype t;
    } names[] = {
        {"F32", DTYPE_F32},     {"float32", DTYPE_F32}, {"float", DTYPE_F32},
        {"F16", DTYPE_F16},     {"float16", DTYPE_F16}, {"half", DTYPE_F16},
        {"BF16", DTYPE_BF16},   {"bfloat16", DTYPE_BF16},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcasecmp(s, names[i].name) == 0) {
            *out = names[i].t;
            return 0;
        }
    }
    return ERR_INVALID;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f) /* inf or nan */
        return bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0)
            return bits_f32(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan */
        return sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0);
    if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return sign | 0x7c00;
    if (ax < 0x38800000u) { /* below the smallest normal f16: subnormal or zero */
        /* magic-number trick: adding 0.5 aligns the mantissa so the FPU rounds to nearest even */
        float v = bits_f32(ax) + 0.5f;
        return sign | (uint16_t)(f32_bits(v) - 0x3f000000u);
    }
    uint32_t odd = (ax >> 13) & 1;
    ax += 0xc8000fffu + odd; /* rebias exponent (-112 << 23) and round to nearest even */
    return sign | (uint16_t)(ax >> 13);
}

void dtype_to_f32(enum dtype t, const void *src, float *dst, size_t n)
{
    switch (t) {
    case DTYPE_F32:
        memcpy(dst, src, n * 4);
        return;
    case DTYPE_F16: {
        const uint16_t *s = src;
        size_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
#endif
        for (; i < n; i++)
            dst[i] = f16_to_f32(s[i]);
        return;
    }
    case DTYPE_BF16: {
        const uint16_t *s = src;
        size_t i = 0;
#if defined(__AVX2__)
        for (; i + 8 <= n; i += 8) {
            __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i)));
            _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
        }
#endif
        for (; i < n; i++)
            dst[i] = bf16_to_f32(s[i]);
        return;
    }
    case DTYPE_Q8_0:
    case DTYPE_Q4_0:
    case DTYPE_Q4_K:
    case DTYPE_Q5_K:
    case DTYPE_Q6_K:
    case DTYPE_Q5_0:
    case DTYPE_Q5_1:
        quant_dequantize(t, src, dst, n);
        return;
    case DTYPE_CT_I8:
    case DTYPE_CT_I4:
    case DTYPE_CT_F8:
        quant_ct_dequantize(t, src, dst, n);
        return;
    }
}

void dtype_from_f32(enum dtype t, const float *src, void *dst, size_t n)
{
    switch (t) {
    case DTYPE_F32:
        memcpy(dst, src, n * 4);
        return;
    case DTYPE_F16: {
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = f32_to_f16(src[i]);
        return;
    }
    case DTYPE_BF16: {
        /* f32_to_bf16 on the bits, 8 at a time where AVX2 is compiled in (a
         * swap rounds whole f16 checkpoints with it in bf16 mode) */
        uint16_t *d = dst;
        size_t i = 0;
#if defined(__AVX2__)
        const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff);
        const __m256i mag = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
        const __m256i quiet_bit = _mm256_set1_epi32(0x0040);
        for (; i + 8 <= n; i += 8) {
            __m256i u = _mm256_loadu_si256((const __m256i *)(src + i));
            __m256i hi = _mm256_srli_epi32(u, 16);
            __m256i rounded = _mm256_srli_epi32(
                _mm256_add_epi32(_mm256_add_epi32(u, half), _mm256_and_si256(hi, one)), 16);
            __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, mag), inf);
            __m256i v = _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, quiet_bit), nan);
            /* every lane is below 2^16: the signed pack cannot saturate */
            __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0xd8);
            _mm_storeu_si128((__m128i *)(d + i), _mm256_castsi256_si128(packed));
        }
#endif
        for (; i < n; i++)
            d[i] = f32_to_bf16(src[i]);
        return;
    }
    case DTYPE_Q8_0:
    case DTYPE_Q4_0:
    case DTYPE_Q4_K:
    case DTYPE_Q5_K:
    case DTYPE_Q6_K:
    case DTYPE_Q5_0:
    case DTYPE_Q5_1:
    case DTYPE_CT_I8:
    case DTYPE_CT_I4:
    case DTYPE_CT_F8:
        break;
    }
    assert(!"dtype_from_f32: not a plain type");
}

size_t dtype_find_nonfinite(enum dtype t, const void *src, size_t n)
{
    const unsigned char *p = src;
    if (quant_ct_is(t))
        return quant_ct_find_nonfinite(t, src, n);
    if (dtype_is_block(t))
        return quant_find_nonfinite(t, src, n);
    if (t == DTYPE_F32) {
        for (size_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, p + 4 * i, 4);
            if ((u & 0x7f800000u) == 0x7f800000u)
                return i;
        }
        return n;
    }
    const uint16_t mask = t == DTYPE_F16 ? 0x7c00 : 0x7f80;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        if ((h & mask) == mask)
            return i;
    }
    return n;
}
