/* compressed-tensors checkpoints: config.json's quantization_config with
 * quant_method "compressed-tensors", and the quantized tensors as the
 * package writes them, presented as one tensor of a CT block type
 * (core/quant_ct.h) per weight.
 *
 * The package stores a quantized Linear P as (pack-quantized, int4/int8):
 *   P.weight_packed      I32 [rows, ceil(cols * bits / 32)]: element c of a row at bit
 *                        c * bits of its words (little-endian), as q + 2^(bits-1)
 *   P.weight_shape       I64 or I32 [2]: rows, cols
 * or (int-quantized, naive-quantized, float-quantized):
 *   P.weight             I8 [rows, cols] (int) or F8_E4M3 [rows, cols] (float)
 * with
 *   P.weight_scale       F32, F16 or BF16: [1] (tensor), [rows, 1] (channel),
 *                        [rows, cols / G] (group of G columns), [ceil(rows / bh),
 *                        ceil(cols / bw)] (block of bh x bw)
 *   P.weight_zero_point  asymmetric only: I8 shaped as the scale, or (pack-quantized,
 *                        group and channel) I32 with the scale's rows packed as the
 *                        weights' columns are: [ceil(scale rows * bits / 32), scale cols]
 * and the element y = (q - z) * scale. P.weight_g_idx (activation reordering),
 * static input scales, sparsity, transforms, KV cache schemes, and any other
 * quant_method (awq, gptq, ...) are refused in one line.
 */
#ifndef SHARDSWAP_FORMAT_CT_H
#define SHARDSWAP_FORMAT_CT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "format/safetensors.h"

struct ct_config;

/* config.json's quantization_config in root (path names the file in
 * messages): *out NULL and 0 when there is none; else checked completely
 * (method, formats, every config group's weights scheme) before anything
 * else is read, a one-line error naming the field on a value we do not
 * run. *out is the caller's (ct_config_free). */
int ct_config_parse(json_t *root, const char *path, struct ct_config **out);
void ct_config_free(struct ct_config *c); /* NULL-safe */
/* The format as config.json names it ("pack-quantized", ...), for inspect and
 * /v1/models: the groups' formats, joined by "+" when they differ. */
const char *ct_config_format(const struct ct_config *c);
/* The block types c's groups produce, as a mask of (1 << enum dtype). */
unsigned ct_config_dtypes(const struct ct_config *c);

/* One weight as the checkpoint holds it (st_tensor.ct). */
struct ct_tensor;

/* The tensors ts[0, n) of a checkpoint under c: every quantized weight's
 * tensors replaced by one tensor P.weight of its CT type ([rows, cols],
 * nbytes its repacked size, file and offset its quantized values'), the
 * rest as they are. *out (count *n_out) and *owned are the caller's
 * (free both, after the checkpoint's names). Errors name the file and the
 * tensor: a tensor of a raw dtype left over, shapes or dtypes that do not
 * agree with the scheme, zero points out of range. */
int ct_wrap(const struct ct_config *c, const struct st_tensor *ts, size_t n, struct st_tensor **out,
            size_t *n_out, void **owned);

/* Rows [r0, r0 + nr), columns [c0, c0 + nc) of t (a CT tensor; c0 and nc
 * multiples of 32) repacked into out, nr rows of nc / 32 blocks. Reads the
 * checkpoint's mapping (guard it as any read of a mapping is). */
void ct_copy(const struct st_tensor *t, size_t r0, size_t nr, size_t c0, size_t nc, void *out);

/* The first element of the first block of t whose scale is not finite (or,
 * FP8, that holds a NaN), or t->numel. */
size_t ct_find_nonfinite(const struct st_tensor *t);

#endif
