/* The block types compressed-tensors checkpoints are repacked into at load
 * (format/ct.h), byte by byte, and their dequantization.
 *
 * A checkpoint's int8, int4 and FP8 weights keep their quantized values; the
 * scale (and zero point) that a group, channel, tensor or 128x128 block of
 * the checkpoint shares is written into every 32-element block it covers,
 * so a row is whole self-contained blocks like GGUF's and a slice of rows
 * or of 32-aligned columns is a view. The scale is kept exact: an f32
 * holding the checkpoint's own f32, f16 or bf16 value. Little-endian,
 * unaligned (read with memcpy); y the block's elements:
 *
 * CT_I8 (37 bytes, 32 elements): int8 weights (int-quantized,
 *   naive-quantized, pack-quantized with 8 bits)
 *   0  f32  d              the scale
 *   4  i8   z              the zero point (0 when symmetric)
 *   5  i8   qs[32]         y[j] = d * (qs[j] - z)
 * CT_I4 (21 bytes, 32 elements): int4 weights (pack-quantized)
 *   0  f32  d
 *   4  i8   z              in [-8, 7]
 *   5  u8   qs[16]         q[2i] = (qs[i] & 15) - 8, q[2i + 1] = (qs[i] >> 4) - 8;
 *                          y[j] = d * (q[j] - z)
 * CT_F8 (36 bytes, 32 elements): FP8 e4m3 weights (float-quantized)
 *   0  f32  d
 *   4  u8   qs[32]         y[j] = d * e4m3(qs[j])  (no infinities; S.1111.111 is NaN)
 *
 * Every product above is exact in f32 (an integer of at most 9 bits or an
 * e4m3 value, times a scale of at most 24 significant bits rounded once);
 * the package's own dequantization computes it in the scale's dtype, so it
 * equals ours rounded to that dtype (exactly ours for f32 scales).
 */
#ifndef SHARDSWAP_CORE_QUANT_CT_H
#define SHARDSWAP_CORE_QUANT_CT_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"

#define QUANT_CT_QK 32 /* elements per block of every CT type */
#define QUANT_CT_I8_BYTES 37
#define QUANT_CT_I4_BYTES 21
#define QUANT_CT_F8_BYTES 36

/* Whether t is one of the CT block types. */
bool quant_ct_is(enum dtype t);
/* Bytes of one block of t (a CT type). */
size_t quant_ct_block_bytes(enum dtype t);
/* An FP8 e4m3 (fn: no infinities) value as f32, exactly. */
float quant_f8e4m3_to_f32(uint8_t v);
/* n elements (whole blocks) of CT type t at src into dst, as above. */
void quant_ct_dequantize(enum dtype t, const void *src, float *dst, size_t n);
/* The first element of the first block whose scale is NaN or infinite (or,
 * for CT_F8, that holds a NaN), or n. */
size_t quant_ct_find_nonfinite(enum dtype t, const void *src, size_t n);

#endif
