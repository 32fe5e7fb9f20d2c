#include <math.h>
#include <string.h>

#include "core/dtype.h"
#include "test.h"

/* Known bit patterns. */
TEST(bit_patterns)
{
    CHECK(f32_to_f16(1.0f) == 0x3c00);
    CHECK(f32_to_f16(-2.0f) == 0xc000);
    CHECK(f32_to_f16(65504.0f) == 0x7bff);
    CHECK(f32_to_f16(65520.0f) == 0x7c00);
    CHECK(f32_to_f16(5.9604645e-08f) == 0x0001);
    CHECK(f16_to_f32(0x0001) == 5.9604645e-08f);
    CHECK(f32_to_bf16(1.0f) == 0x3f80);
    CHECK(bf16_to_f32(0x3f80) == 1.0f);
    /* Ties round to even: 1 + 2^-11 is halfway between two f16 values. */
    CHECK(f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00);
    CHECK(f32_to_f16(1.0f + 3.0f / 2048) == 0x3c02);
}

/* Every f16 value survives a round trip through f32, and the vector path agrees. */
TEST(round_trip)
{
    static uint16_t all[65536];
    static float wide[65536];
    for (uint32_t i = 0; i < 65536; i++)
        all[i] = (uint16_t)i;
    dtype_to_f32(DTYPE_F16, all, wide, 65536);
    int bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        float f = f16_to_f32((uint16_t)i);
        if (isnan(f))
            continue;
        if (f32_to_f16(f) != i || memcmp(&f, &wide[i], 4) != 0)
            bad++;
    }
    CHECK_MSG(bad == 0, "%d f16 values do not round-trip", bad);
    dtype_to_f32(DTYPE_BF16, all, wide, 65536);
    bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        float f = bf16_to_f32((uint16_t)i);
        if (!isnan(f) && (f32_to_bf16(f) != i || memcmp(&f, &wide[i], 4) != 0))
            bad++;
    }
    CHECK_MSG(bad == 0, "%d bf16 values do not round-trip", bad);
}

/* The vector rounding to bf16 agrees with f32_to_bf16 bit for bit: on
 * every bf16 value and its neighbours (ties both ways, NaNs, infinities,
 * subnormals), at every offset of a vector */
TEST(bf16_rounding)
{
    static float in[4 * 65536];
    static uint16_t out[4 * 65536];
    for (uint32_t i = 0; i < 65536; i++) {
        const uint32_t hi = i << 16, low[4] = {0, 0x7fff, 0x8000, 0x8001};
        for (int k = 0; k < 4; k++) {
            uint32_t u = hi | low[k];
            memcpy(&in[4 * i + k], &u, 4);
        }
    }
    dtype_from_f32(DTYPE_BF16, in + 1, out + 1, 4 * 65536 - 1);
    int bad = 0;
    for (uint32_t i = 1; i < 4 * 65536; i++)
        bad += out[i] != f32_to_bf16(in[i]);
    CHECK_MSG(bad == 0, "%d values round to bf16 differently in dtype_from_f32", bad);
}

TEST(parse)
{
    enum dtype t;
    CHECK(dtype_parse("bfloat16", &t) == 0 && t == DTYPE_BF16);
    CHECK(dtype_parse("int8", &t) < 0);
}

/* dtype_find_nonfinite: the first NaN or Inf, at an unaligned address too */
TEST(find_nonfinite)
{
    unsigned char buf[1 + 8 * 4];
    float f[8] = {0, 1, -2, 65504, 1e-40f, 3, 4, 5};
    memcpy(buf + 1, f, sizeof(f));
    CHECK(dtype_find_nonfinite(DTYPE_F32, buf + 1, 8) == 8);
    f[5] = INFINITY;
    f[6] = NAN;
    memcpy(buf + 1, f, sizeof(f));
    CHECK(dtype_find_nonfinite(DTYPE_F32, buf + 1, 8) == 5);
    uint16_t h[4] = {0x3c00, 0x7bff, 0xfc00, 0x7e00}; /* 1, max, -inf, nan */
    CHECK(dtype_find_nonfinite(DTYPE_F16, h, 2) == 2);
    CHECK(dtype_find_nonfinite(DTYPE_F16, h, 4) == 2);
    uint16_t b[3] = {0x3f80, 0x7f7f, 0x7fc0}; /* 1, max, nan */
    CHECK(dtype_find_nonfinite(DTYPE_BF16, b, 3) == 2);
    CHECK(dtype_find_nonfinite(DTYPE_BF16, b, 2) == 2);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
