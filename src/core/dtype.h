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

enum dtype { DTYPE_F32, DTYPE_F16, DTYPE_BF16 };

size_t dtype_size(enum dtype t);
const char *dtype_name(enum dtype t); /* "F32", "F16", "BF16" (safetensors spelling) */
/* Parses "F32"/"F16"/"BF16" (and the lower-case and torch spellings
 * "float32", "float16", "bfloat16", "f32", "f16", "bf16"); returns 0 or ERR_INVALID. */
int dtype_parse(const char *s, enum dtype *out);

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);   /* round to nearest even, like torch */
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);  /* round to nearest even, like torch */

/* dst[i] = (float)src[i] for n elements of type t. */
void dtype_to_f32(enum dtype t, const void *src, float *dst, size_t n);
/* dst (type t)[i] = src[i], rounding to nearest even. */
void dtype_from_f32(enum dtype t, const float *src, void *dst, size_t n);

/* The index of the first NaN or infinity among n elements of type t at src
 * (which need not be aligned), or n when all are finite. By bit pattern: an
 * all-ones exponent. */
size_t dtype_find_nonfinite(enum dtype t, const void *src, size_t n);

#endif
