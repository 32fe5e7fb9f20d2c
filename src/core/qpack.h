/* Quantized weight rows laid out for the CPU's kernels once, when a blob is
 * filled for a CPU device: 16 rows at a time, each block's bytes of the 16
 * rows interleaved so that one 512-bit load holds the same 4-byte piece of
 * every row (a row a 32-bit lane), and the product of the 16 rows with an
 * input row needs no horizontal sum and no per-call transposition.
 *
 * A packed matrix of `rows` rows keeps its size and its row addresses at
 * multiples of 16: rows [16 g, 16 g + 16) for g < rows / 16 are group g,
 * in the same bytes the 16 rows took; the last rows % 16 rows stay as
 * they were (weight.h's WEIGHT_PACK_X16).
 *
 * Q4_K, per block b of a group (2304 bytes, 16 x 144, at b x 2304):
 *     0  f16 d[16]            row r's d
 *    32  f16 dmin[16]         row r's dmin
 *    64  u32 sc[3][16]        bytes 4j .. 4j + 3 of row r's 12 scale bytes at [j][r]
 *   256  u32 qs[32][16]       bytes 4k .. 4k + 3 of row r's 128 quant bytes at [k][r]
 * so vector k of qs holds, in its low nibbles, elements 64 (k / 8) + 4 (k % 8)
 * .. + 3 of each row (sub-block 2 (k / 8)) and in its high nibbles the same
 * of sub-block 2 (k / 8) + 1.
 *
 * Q5_K, per block b of a group (2816 bytes, 16 x 176, at b x 2816): Q4_K's
 * first 256 bytes, then qs words 0..7 each followed by qh word 0..7, then
 * qs words 8..31 (qpack_q5k_qs, qpack_q5k_qh; the order its kernel reads
 * them): qh word k holds bytes 4k .. 4k + 3 of each row's 32 fifth-bit
 * bytes, bit s the fifth bit of sub-block s's elements 4k .. 4k + 3.
 *
 * Q6_K, per pair of blocks b, b + 1 of a group (6720 bytes, 2 x 16 x 210, at
 * b / 2 x 6720): the two blocks' d (f16 d[16] each), then block b's 3328
 * bytes and block b + 1's, so that every vector of both sits on a cache
 * line and the pair is read front to back (a group's odd last block: its
 * 3328 bytes, then its d); a block's 3328 bytes, in the order its kernel
 * reads them:
 *     0  u32 sc[4][16]        row r's 16 int8 scales, 4 a word
 *   256  per half h of the block, 1536 bytes at 256 + 1536 h, per part
 *        p < 2 (768 bytes at + 768 p), per k < 4 (192 bytes at + 192 k):
 *          ql word 16 h + 4 p + k, qh word 8 h + 4 p + k, ql word 16 h +
 *          8 + 4 p + k (qpack_q6k_ql, qpack_q6k_qh), each word of the 16
 *          rows' 128 low-bit bytes (ql) or 64 high-bit bytes (qh) as [r]
 * (qpack_q6k_d: where a block's d is). So ql word 16 h + k (k < 16) holds, in its
 * low nibbles, the low bits of elements 128 h + 4 k .. + 3 of each row and
 * in its high nibbles those of the same + 64; their top two bits are in
 * qh word 8 h + k % 8, bits 2 (k / 8) and 2 (k / 8) + 4: the two ql words
 * beside a qh word are all that read it. (Laid out in the order the
 * kernel reads a block, front to back and each byte once: in the file's
 * order, ql then qh, one thread read 8 GB/s; with qh words read twice,
 * and half of the blocks' vectors across two cache lines, 20-22 where a
 * plain read took 25-27.) */
#ifndef SHARDSWAP_CORE_QPACK_H
#define SHARDSWAP_CORE_QPACK_H

#include <stdbool.h>
#include <stddef.h>

#include "core/dtype.h"

/* rows a group */
#define QPACK_ROWS 16

/* Where ql word v (< 32) and qh word u (< 16) of a packed Q6_K block's
 * 3328 bytes start, where block b of a group's nb starts in the group, and
 * where its d is (qpack.h's order above). */
static inline size_t qpack_q6k_ql(int v)
{
    const int h = v / 16, k = v % 16;
    return 256 + 1536 * (size_t)h + 768 * (size_t)(k % 8 / 4) + 192 * (size_t)(k % 4) +
           (k < 8 ? 0 : 128);
}

static inline size_t qpack_q6k_qh(int u)
{
    const int h = u / 8, k = u % 8;
    return 256 + 1536 * (size_t)h + 768 * (size_t)(k / 4) + 192 * (size_t)(k % 4) + 64;
}

static inline size_t qpack_q6k_blk(int b, int nb)
{
    return 6720 * (size_t)(b / 2) + (b % 2 ? 64 + 3328 : b + 1 < nb ? 64 : 0);
}

static inline size_t qpack_q6k_d(int b, int nb)
{
    return 6720 * (size_t)(b / 2) + (b % 2 ? 32 : b + 1 < nb ? 0 : 3328);
}

/* Where qs word v (< 32) and qh word u (< 8) of a packed Q5_K block
 * start (qpack.h's order above). */
static inline size_t qpack_q5k_qs(int v)
{
    return v < 8 ? 256 + 128 * (size_t)v : 1280 + 64 * (size_t)(v - 8);
}

static inline size_t qpack_q5k_qh(int u)
{
    return 256 + 128 * (size_t)u + 64;
}

/* Whether rows of type t have a packed layout (Q4_K, Q5_K, Q6_K). */
bool qpack_takes(enum dtype t);

/* Rows [0, rows / 16 x 16) of a dense matrix of type t (cols elements a
 * row, whole blocks) rearranged in place into groups; the rest as they
 * are. tmp: 16 rows' bytes of scratch. */
void qpack_matrix(enum dtype t, void *data, int rows, int cols, void *tmp);

/* Group src (16 rows of cols elements, the packed layout) written back as
 * 16 rows at dst, row_bytes apart: the inverse. */
void qpack_group_unpack(enum dtype t, const void *src, int cols, void *dst, size_t row_bytes);

/* Row r (< 16) of packed group src back in its own layout at dst
 * (dtype_row_bytes(t, cols) bytes). */
void qpack_row_unpack(enum dtype t, const void *src, int cols, int r, void *dst);

#endif
