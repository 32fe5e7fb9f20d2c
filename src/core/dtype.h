/* Element types of stored weights and their conversion to f32.
 *
 * Checkpoints keep weights in f32, f16 or bf16; every kernel computes in f32.
 * The row converters are the hot path of f16/bf16 matmuls: they widen a block
 * of weights into a scratch buffer that BLAS then reads.
 */
#ifndef SHARDSWAP_CORE_DTYPE_H
#define SHARDSWAP_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum dtype { DTYPE_F32, DTYPE_F16, DTYPE_BF16 };

size_t dtype_size(enum dtype t);
const char *dtype_name(enum dtype t); /* "F32", "F16", "BF16" (safetensors spelling) */
const char *dtype_torch_name(enum dtype t); /* "float32", "float16", "bfloat16" (config.json's) */
/* Parses "F32"/"F16"/"BF16" (and the lower-case and torch spellings
 * "float32", "float16", "bfloat16", "f32", "f16", "bf16"); returns 0 or ERR_INVALID. */
int dtype_parse(const char *s, enum dtype *out);

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);   /* round to nearest even, like torch */
/* bf16 is the top half of an f32. Inline: the kernels round every
 * activation entering a bf16-mode linear layer with these, and a call per
 * element cost 15% of a bf16 prefill. */
static inline float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* f rounded to the nearest bf16 (even on a tie, like torch; a NaN stays a
 * quiet NaN), as an f32: the low 16 bits cleared. */
static inline float bf16_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    uint32_t quiet = (u | 0x00400000u) & 0xffff0000u;
    u = (u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    f = bf16_round(f);
    memcpy(&u, &f, sizeof(u));
    return (uint16_t)(u >> 16);
}

/* dst[i] = (float)src[i] for n elements of type t. */
void dtype_to_f32(enum dtype t, const void *src, float *dst, size_t n);
/* dst (type t)[i] = src[i], rounding to nearest even. */
void dtype_from_f32(enum dtype t, const float *src, void *dst, size_t n);

/* The index of the first NaN or infinity among n elements of type t at src
 * (which need not be aligned), or n when all are finite. By bit pattern: an
 * all-ones exponent. */
size_t dtype_find_nonfinite(enum dtype t, const void *src, size_t n);

#endif
