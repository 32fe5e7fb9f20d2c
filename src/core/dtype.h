/* Element types of stored weights and their conversion to f32.
 *
 * Checkpoints keep weights in f32, f16 or bf16, or in GGUF's quantized
 * blocks (core/quant.h: a block of 32 or 256 elements shares its scales),
 * or compressed-tensors' int8/int4/FP8, repacked into such blocks
 * (core/quant_ct.h);
 * every kernel computes in f32.
 * The row converters are the hot path of f16/bf16 matmuls: they widen a block
 * of weights into a scratch buffer that BLAS then reads.
 */
#ifndef SHARDSWAP_CORE_DTYPE_H
#define SHARDSWAP_CORE_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum dtype {
    DTYPE_F32,
    DTYPE_F16,
    DTYPE_BF16,
    /* GGUF's block types (core/quant.h has their layouts) */
    DTYPE_Q8_0,
    DTYPE_Q4_0,
    DTYPE_Q4_K,
    DTYPE_Q5_K,
    DTYPE_Q6_K,
    DTYPE_Q5_0,
    DTYPE_Q5_1,
    /* compressed-tensors' int8, int4 and FP8 e4m3 weights, repacked at load
     * into blocks of 32 that carry their scale (core/quant_ct.h) */
    DTYPE_CT_I8,
    DTYPE_CT_I4,
    DTYPE_CT_F8,
};
/* How many dtypes there are (a macro, so switches over enum dtype stay
 * checked for every case): the size of an array indexed by dtype. */
#define DTYPE_COUNT (DTYPE_CT_F8 + 1)

/* Bytes of one element of a plain type (f32, f16, bf16). A block type has
 * no element size: asking is a broken invariant (asserts); its sizes go
 * through dtype_row_bytes. */
size_t dtype_size(enum dtype t);
/* Whether t is a block type (the elements of a block share scales). */
bool dtype_is_block(enum dtype t);
/* Elements per block: 1 for a plain type, 32 or 256 for a block type. */
int dtype_block(enum dtype t);
/* Bytes of n elements of type t stored contiguously (a row, or a slice of
 * one): n * dtype_size for a plain type, n / block blocks for a block type,
 * where n must be a whole number of blocks (asserts; check first with
 * dtype_check_cols where n comes from a file). */
size_t dtype_row_bytes(enum dtype t, size_t n);
/* 0 when n elements starting at element c0 of a row fall on t's block
 * boundaries (always for a plain type); else ERR_INVALID with one line
 * naming what (a tensor, say), the numbers and the block size. */
int dtype_check_cols(enum dtype t, size_t c0, size_t n, const char *what);
/* "F32", "F16", "BF16" (safetensors spelling), "Q8_0", "Q4_K", ... (GGUF's),
 * "CT_I8", "CT_I4", "CT_F8" */
const char *dtype_name(enum dtype t);
const char *dtype_torch_name(enum dtype t); /* "float32", "float16", "bfloat16" (config.json's) */
/* Parses the plain types "F32"/"F16"/"BF16" (and the lower-case and torch spellings
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

/* dst[i] = (float)src[i] for n elements of type t; a block type's
 * dequantization (src at a block's start, n whole blocks). */
void dtype_to_f32(enum dtype t, const void *src, float *dst, size_t n);
/* dst (type t)[i] = src[i], rounding to nearest even. Plain types only
 * (quantizing weights is llama-quantize's job, not ours; asserts). */
void dtype_from_f32(enum dtype t, const float *src, void *dst, size_t n);

/* The index of the first NaN or infinity among n elements of type t at src
 * (which need not be aligned), or n when all are finite. By bit pattern: an
 * all-ones exponent. For a block type, the first element of the first
 * block whose f16 scales are not finite (the quants are integers). */
size_t dtype_find_nonfinite(enum dtype t, const void *src, size_t n);

#endif
