/* GGUF's quantized block types, byte by byte, and their dequantization.
 *
 * A quantized row is a run of blocks: QK elements each (32 for Q8_0/Q4_0,
 * 256 for the K-quants), every block self-contained. Little-endian; "f16"
 * is an IEEE half (core/dtype.h f16_to_f32). As ggml defines them
 * (ggml-common.h), with y the block's elements:
 *
 * Q8_0 (34 bytes, 32 elements)
 *   0  f16  d
 *   2  i8   qs[32]         y[j] = d * qs[j]
 * Q4_0 (18 bytes, 32 elements)
 *   0  f16  d
 *   2  u8   qs[16]         y[j] = d * ((qs[j] & 15) - 8), y[j + 16] = d * ((qs[j] >> 4) - 8)
 * Q5_0 (22 bytes, 32 elements)
 *   0  f16  d
 *   2  u32  qh             bit j: the fifth bit of element j
 *   6  u8   qs[16]         as Q4_0's nibbles; y[j] = d * (q - 16)
 * Q5_1 (24 bytes, 32 elements)
 *   0  f16  d, 2 f16 m
 *   4  u32  qh, 8 u8 qs[16] as Q5_0; y[j] = d * q + m
 * Q4_K (144 bytes, 256 elements: 8 sub-blocks of 32)
 *   0  f16  d, 2 f16 dmin
 *   4  u8   scales[12]     6-bit scale sc[s] and min mn[s] per sub-block (quant_scale_min)
 *  16  u8   qs[128]        sub-blocks 2g, 2g + 1 are the low / high nibbles of qs[32g, 32g + 32)
 *                          y = (d * sc[s]) * q - (dmin * mn[s])
 * Q5_K (176 bytes, 256 elements)
 *   0  f16  d, 2 f16 dmin
 *   4  u8   scales[12]     as Q4_K
 *  16  u8   qh[32]         bit s of qh[l] is the fifth bit of element l of sub-block s
 *  48  u8   qs[128]        as Q4_K's low four bits
 * Q6_K (210 bytes, 256 elements: 16 sub-blocks of 16)
 *   0  u8   ql[128]        low four bits, 2 halves of 128 elements: in half h, element
 *                          l + 32k (k < 4) takes ql[64h + l + 32(k & 1)] nibble k >> 1
 * 128  u8   qh[64]         high two bits: qh[32h + l] bits 2k, 2k + 1
 * 192  i8   scales[16]     one per 16 elements
 * 208  f16  d              y = (d * scales[s]) * (q - 32)
 *
 * The activations' blocks for the integer dot products (never stored):
 * Q8_K (292 bytes, 256 elements) f32 d, i8 qs[256], i16 bsums[16] (sums of
 * 16 quants each); Q8_0 as above.
 */
#ifndef SHARDSWAP_CORE_QUANT_H
#define SHARDSWAP_CORE_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"

#define QUANT_QK0 32  /* elements per Q8_0 / Q4_0 block */
#define QUANT_QKK 256 /* elements per K-quant block */

struct quant_q8_0 {
    uint16_t d;
    int8_t qs[QUANT_QK0];
};
struct quant_q4_0 {
    uint16_t d;
    uint8_t qs[QUANT_QK0 / 2];
};
struct quant_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[QUANT_QK0 / 2];
};
struct quant_q5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[QUANT_QK0 / 2];
};
struct quant_q4_k {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[QUANT_QKK / 2];
};
struct quant_q5_k {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[QUANT_QKK / 8];
    uint8_t qs[QUANT_QKK / 2];
};
struct quant_q6_k {
    uint8_t ql[QUANT_QKK / 2];
    uint8_t qh[QUANT_QKK / 4];
    int8_t scales[QUANT_QKK / 16];
    uint16_t d;
};
struct quant_q8_k {
    float d;
    int8_t qs[QUANT_QKK];
    int16_t bsums[QUANT_QKK / 16];
};

_Static_assert(sizeof(struct quant_q8_0) == 34, "Q8_0 block");
_Static_assert(sizeof(struct quant_q4_0) == 18, "Q4_0 block");
_Static_assert(sizeof(struct quant_q5_0) == 22, "Q5_0 block");
_Static_assert(sizeof(struct quant_q5_1) == 24, "Q5_1 block");
_Static_assert(sizeof(struct quant_q4_k) == 144, "Q4_K block");
_Static_assert(sizeof(struct quant_q5_k) == 176, "Q5_K block");
_Static_assert(sizeof(struct quant_q6_k) == 210, "Q6_K block");
_Static_assert(sizeof(struct quant_q8_k) == 292, "Q8_K block");

/* Bytes of one block of t (a block type). */
size_t quant_block_bytes(enum dtype t);

/* Scale j and min j (< 8) of a Q4_K/Q5_K block's 12 packed bytes: j < 4 in
 * the low six bits of bytes j and j + 4; j >= 4 in the nibbles of byte
 * j + 4 with their top two bits in the top bits of bytes j - 4 and j. */
static inline void quant_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *mn)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *mn = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* The reference dequantization: n elements (whole blocks) of type t at src
 * into dst, each element computed as the layout above says, in f32. */
void quant_dequantize(enum dtype t, const void *src, float *dst, size_t n);

/* Index of the first block (of n elements) whose f16 scales are NaN or
 * infinite, times the block size; n when there is none. */
size_t quant_find_nonfinite(enum dtype t, const void *src, size_t n);

/* Activations quantized as llama.cpp quantizes them for its integer dot
 * products: n floats (whole blocks) into out. Q8_0 as ggml's
 * quantize_row_q8_0_ref (d = amax / 127, q = roundf(x / d)); Q8_K as
 * quantize_row_q8_K_ref (the element of largest magnitude maps to -127,
 * nearest even, with the sums of each 16). */
void quant_q8_0_from_f32(const float *x, char *out, int n);
void quant_q8_k_from_f32(const float *x, char *out, int n);

#endif
