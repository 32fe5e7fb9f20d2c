#include "core/quant_ct.h"

#include <assert.h>
#include <math.h>
#include <string.h>

bool quant_ct_is(enum dtype t)
{
    return t == DTYPE_CT_I8 || t == DTYPE_CT_I4 || t == DTYPE_CT_F8;
}

size_t quant_ct_block_bytes(enum dtype t)
{
    assert(quant_ct_is(t));
    return t == DTYPE_CT_I8   ? QUANT_CT_I8_BYTES
           : t == DTYPE_CT_I4 ? QUANT_CT_I4_BYTES
                              : QUANT_CT_F8_BYTES;
}

float quant_f8e4m3_to_f32(uint8_t v)
{
    const int e = (v >> 3) & 15, m = v & 7;
    float a;
    if (e == 15 && m == 7)
        a = NAN;
    else if (e == 0)
        a = ldexpf((float)m, -9); /* subnormal: m / 8 * 2^-6 */
    else
        a = ldexpf((float)(8 + m), e - 10); /* (1 + m / 8) * 2^(e - 7) */
    return v & 0x80 ? -a : a;
}

void quant_ct_dequantize(enum dtype t, const void *src, float *dst, size_t n)
{
    assert(n % QUANT_CT_QK == 0);
    const size_t bb = quant_ct_block_bytes(t);
    const unsigned char *p = src;
    for (size_t b = 0; b < n / QUANT_CT_QK; b++, p += bb, dst += QUANT_CT_QK) {
        float d;
        memcpy(&d, p, 4);
        if (t == DTYPE_CT_F8) {
            for (int j = 0; j < QUANT_CT_QK; j++)
                dst[j] = d * quant_f8e4m3_to_f32(p[4 + j]);
            continue;
        }
        const int z = (int8_t)p[4];
        const unsigned char *qs = p + 5;
        if (t == DTYPE_CT_I8) {
            for (int j = 0; j < QUANT_CT_QK; j++)
                dst[j] = d * (float)((int8_t)qs[j] - z);
        } else {
            for (int i = 0; i < QUANT_CT_QK / 2; i++) {
                dst[2 * i] = d * (float)((qs[i] & 15) - 8 - z);
                dst[2 * i + 1] = d * (float)((qs[i] >> 4) - 8 - z);
            }
        }
    }
}

size_t quant_ct_find_nonfinite(enum dtype t, const void *src, size_t n)
{
    const size_t bb = quant_ct_block_bytes(t);
    const unsigned char *p = src;
    for (size_t b = 0; b < n / QUANT_CT_QK; b++, p += bb) {
        uint32_t u;
        memcpy(&u, p, 4);
        bool bad = (u & 0x7f800000u) == 0x7f800000u;
        for (int j = 0; t == DTYPE_CT_F8 && j < QUANT_CT_QK; j++)
            bad |= (p[4 + j] & 0x7f) == 0x7f;
        if (bad)
            return b * QUANT_CT_QK;
    }
    return n;
}
