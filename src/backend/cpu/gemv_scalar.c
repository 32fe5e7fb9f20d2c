/* The fused GEMV without vector instructions: the fallback of a CPU that
 * has neither AVX2 nor AVX-512, and a reference the tests run on any
 * machine. Compiled for the baseline of the target, like the rest. */
#include <stdint.h>
#include <string.h>

#include "core/dtype.h"

typedef float gv_t;
#define GV_LANES 1

static inline gv_t gv_zero(void)
{
    return 0;
}

static inline gv_t gv_load_f32(const void *p)
{
    float f;
    memcpy(&f, p, 4);
    return f;
}

static inline gv_t gv_load_f16(const void *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return f16_to_f32(h);
}

static inline gv_t gv_load_bf16(const void *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline gv_t gv_fma(gv_t a, gv_t b, gv_t c)
{
    return a * b + c;
}

static inline float gv_hsum(gv_t v)
{
    return v;
}

#define GEMV_ROWS_FN gemv_rows_scalar
#include "backend/cpu/gemv_body.h"
