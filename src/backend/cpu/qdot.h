/* Products of GGUF block-type weights (core/quant.h) with activations
 * quantized as llama.cpp quantizes them: the integer dot products of the
 * CPU's quantized linear layer (qlinear.c), one translation unit per
 * instruction set (qdot_<isa>.c, the body written once in qdot_body.h).
 * Internal to backend/cpu/.
 *
 * Every kernel computes each block's integer sums exactly and combines the
 * blocks in one order with the same float operations (QDOT_LANES below),
 * so every instruction set gives the same bits as the scalar reference. */
#ifndef SHARDSWAP_BACKEND_CPU_QDOT_H
#define SHARDSWAP_BACKEND_CPU_QDOT_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/weight.h"
#include "core/quant.h"

/* The activations' block type for weights of type t: Q8_0 for the types
 * of 32 (Q8_0, Q4_0, Q5_0, Q5_1), Q8_K for the K-quants. */
enum qdot_xtype { QDOT_X_Q8_0, QDOT_X_Q8_K };
enum qdot_xtype qdot_xtype_of(enum dtype t);
/* Bytes of a row of n activations quantized for weights of type t. */
size_t qdot_x_row_bytes(enum dtype t, int n);
/* x (n floats, whole blocks) quantized for weights of type t into xq
 * (qdot_x_row_bytes): Q8_0 or Q8_K, core/quant.h's quant_q8_0_from_f32 and
 * quant_q8_k_from_f32. */
void qdot_quantize_x(enum dtype t, const float *x, void *xq, int n);
/* quant_q8_0_from_f32's bits 32 at a time on AVX2 (the scalar one spent 5
 * ns an element in roundf, a tenth of a Q8_0 decode step) */
void qdot_x_q8_0_avx2(const float *x, void *xq, int n);
/* quant_q8_k_from_f32's bits on AVX-512 (F, BW, VL and VNNI) */
void qdot_x_q8_k_avx512(const float *x, void *xq, int n);

/* The multi-row kernels' x: the quantized rows packed in groups of
 * QDOT_GROUP, one lane per row, so that a weight block's integer sums
 * against all of a group's rows come out of one vector without a
 * horizontal sum. Per block of x (Q8_0: 32 elements, Q8_K: 256), in order:
 *   u[e / 4][row]   int32: elements e .. e + 3 of the row, each plus 128
 *                   (unsigned bytes, x ^ 0x80), for every e in steps of 4
 *   dx[row]         f32: the block's scale
 *   Q8_0: xs[row]   int32: the sum of the block's 32 quants
 *   Q8_K: bs[p][row] two int16: the sums of 32 of sub-blocks 2p and 2p + 1
 *                   (from bsums), p = 0 .. 3
 * A group's rows past m are x = 0 (u = 128, dx = 0). */
#define QDOT_GROUP 8
/* Bytes of one packed group of rows of n activations for weights of type t */
size_t qdot_xp_group_bytes(enum dtype t, int n);
/* Group g (rows [g QDOT_GROUP, +QDOT_GROUP) of xq's m rows, xq_ld bytes
 * apart, n activations each) packed into xp */
void qdot_pack_x(enum dtype t, const char *xq, size_t xq_ld, int m, int n, int g, char *xp);

/* One call's operands: y[i * ldy + r] = w[r] . xq[i] for the m input rows,
 * xq rows xq_ld bytes apart; the multi-row kernels read xp instead, its
 * groups xp_ld bytes apart. */
struct qdot_args {
    float *y;
    size_t ldy;
    const char *xq;
    size_t xq_ld;
    const char *xp;
    size_t xp_ld;
    int m;
    const struct weight_view *w;
};

/* Weight rows [r0, r1) for every input row. Runs on a pool thread; reads
 * and writes nothing but its operands. */
typedef void (*qdot_rows_fn)(const struct qdot_args *a, int r0, int r1);

void qdot_rows_scalar(const struct qdot_args *a, int r0, int r1);
/* AVX2: pairs of bytes multiplied and summed by VPMADDUBSW + VPMADDWD;
 * x of the types of 32 as vnni-near's (a->xp laid out by qdot_pack_x_xr,
 * or NULL: laid out per task) */
void qdot_rows_avx2(const struct qdot_args *a, int r0, int r1);
/* AVX512-VNNI (256-bit, VL): quads of bytes by VPDPBUSD */
void qdot_rows_vnni(const struct qdot_args *a, int r0, int r1);
/* vnni's with a shorter prefetch and the types of 32 against x laid out
 * (qdot_xr.h): a->xp NULL, or for a type of 32 each input row laid out by
 * qdot_pack_x_xr, xp_ld bytes apart (otherwise laid out per task) */
void qdot_rows_vnni_near(const struct qdot_args *a, int r0, int r1);
/* A run of weight rows [r0, r1) of a's product: one stream of a task that
 * reads several at once (a sub-lane's unit: lanes.h). */
struct qdot_piece {
    const struct qdot_args *a;
    int r0, r1;
};
/* The most pieces a qdot_pieces_fn takes at once */
#define QDOT_PIECES_MAX 4
/* Every piece's rows (n <= QDOT_PIECES_MAX), each row's bits those of the
 * single-row kernel. Runs on a pool thread; reads and writes nothing but
 * its operands. */
typedef void (*qdot_pieces_fn)(const struct qdot_piece *p, int n);
/* vnni-far: vnni-near's kernels over the n pieces' rows in lockstep (one
 * row of each at a time, a step of 8 blocks of each in turn), each stream
 * prefetched half as far ahead (qdot_far.h, qdot_vnni_far.c); pieces of
 * one type, width and count of input rows (their x may differ), x as
 * vnni-near's (xp as qdot_pack_x_xr lays it out for the types of 32, or
 * NULL); pieces that differ go one by one to qdot_rows_vnni_near. */
void qdot_pieces_vnni_far(const struct qdot_piece *p, int n);
/* avx2-far: avx2's kernels over the pieces' rows in lockstep, as vnni-far
 * (qdot_avx2_far.c); pieces that differ go one by one to qdot_rows_avx2 */
void qdot_pieces_avx2_far(const struct qdot_piece *p, int n);
/* vnni-near and vnni-far built again with GFNI (qdot_vnni_near_gfni.c,
 * qdot_vnni_far_gfni.c): the same bits; only where the CPU has GFNI */
void qdot_rows_vnni_near_gfni(const struct qdot_args *a, int r0, int r1);
void qdot_pieces_vnni_far_gfni(const struct qdot_piece *p, int n);
/* The bytes of a row of n columns of Q8_0 x laid out for vnni-near's and
 * avx2's types of 32 (whole runs of 8 blocks: the quants, block k and k + 4
 * of a run side by side, then the scales in f32 and the sums of the
 * quants), a multiple of 64; and a quantized row (qdot_quantize_x's Q8_0)
 * laid out so into xr (64-byte aligned). Only where the CPU has AVX2. */
size_t qdot_xr_row_bytes(int n);
void qdot_pack_x_xr(const char *xq, int n, char *xr);

/* The multi-row kernels (qdot_tile_body.h): each weight row's blocks
 * unpacked once into the task's scratch, then multiplied with every group
 * of QDOT_GROUP packed input rows, a quad of the weights' bytes broadcast
 * against one quad of each of the group's rows. The same integer sums per
 * block and the same float operations per row as the kernels above, so
 * the same bits. 0, or ERR_NOMEM when the scratch cannot grow (nothing
 * written then). */
typedef int (*qdot_tile_fn)(const struct qdot_args *a, int r0, int r1);
int qdot_tile_avx2(const struct qdot_args *a, int r0, int r1);
int qdot_tile_vnni(const struct qdot_args *a, int r0, int r1);

/* vnni-m8z (qdot_tile512.h): the types of 32, four weight rows a pass
 * (two pairs) against groups of QDOT_GROUP input rows on 512-bit vectors,
 * a pair of a weight row's quads (8 bytes, unsigned) broadcast against the
 * same pair of each of the group's rows, lane 2i for row i's even quads
 * and 2i + 1 for its odd ones. Its x, packed in pairs, per block of 32, in
 * order:
 *   u[k][row]     8 bytes: elements 8k .. 8k + 7 of the row, as they are
 *                 (signed), k = 0 .. 3
 *   dx[row][2]    f32: the block's scale, twice
 *   xs[row][2]    int32: the sum of the block's 32 quants, twice
 * (rows past m x = 0); the K-quants are vnni-m8's (x in qdot_pack_x's
 * groups: q_layout). The same bits as the kernels above. */
#define QDOT_XZ_BLOCK (256 + 64 + 64)
size_t qdot_xz_group_bytes(int n);
void qdot_pack_x_pairs(const char *xq, size_t xq_ld, int m, int n, int g, char *xp);
int qdot_tile_vnni_z(const struct qdot_args *a, int r0, int r1);

/* The multi-row kernel with the blocks in the lanes (qdot_mr_body.h): two
 * weight rows' runs of 8 blocks unpacked once into one vector per quad
 * (lane 8 h + k: block k of row h), and multiplied with every input row,
 * whose quantized rows q_prepare lays out to match (qdot_pack_x_mr). Per
 * run of 8 blocks of x, in order, 64 bytes each (lanes k and 8 + k: block
 * k of the run, zero past the row's blocks):
 *   Q8_0 x:  u[q], q < 8     the block's quad q, each byte plus 128
 *            (Q8_0, Q4_0, Q5_0 and Q5_1 weights)
 *   Q8_K x:  s[j], j < 64    the block's quad j
 *            pr[p]           two int16 sums of x a lane, against the
 *                            weights' pairs: Q4_K/Q5_K sub-blocks of 32
 *                            (2p, 2p + 1), p < 4; Q6_K sub-blocks of 16
 *                            (4v, 4v + 2) at p = 2v, (4v + 1, 4v + 3) at
 *                            p = 2v + 1, v < 4
 *   Q5_1 x:  s               int32: the sum of the block's quants (its
 *                            min's operand)
 *   then     dx[k]           f32: the block's scale
 * Returns as qdot_tile_fn. */
/* Bytes of one run of x for weights of type t, and of a row of n */
size_t qdot_xmr_run_bytes(enum dtype t);
size_t qdot_xmr_row_bytes(enum dtype t, int n);
/* Input row xq (qdot_quantize_x's, n activations) laid out into xr */
void qdot_pack_x_mr(enum dtype t, const char *xq, int n, char *xr);
int qdot_mr_vnni(const struct qdot_args *a, int r0, int r1);

/* The AMX-INT8 kernel (qdot_amx.c): 16 weight rows a tile (A, the quants
 * as int8, Q8_0's in place, the K-quants' with their sub-block scales
 * folded in) times 16 input rows (B) into exact int32 sums per block, then
 * the f32 steps below per block: the same bits as the kernels above. Its x
 * is laid out once per call in groups of QDOT_TGROUP rows, per block of x
 * (Q8_0: 32 elements, Q8_K: 256), in order:
 *   t[q][row]   4 bytes: elements 4q .. 4q + 3 of the row, as they are
 *               (signed; B's VNNI layout: tile row q, one input row a
 *               4-byte column)
 *   dx[row]     f32: the block's scale
 *   Q8_K: bs[p][row] two int16: the sums of 32 of sub-blocks 2p and 2p + 1
 * A group's rows past m are zeros. Types it lacks (Q5_1) go to the
 * single-row kernel. Returns as qdot_tile_fn; only where AMX-INT8 was
 * granted. */
#define QDOT_TGROUP 16
bool qdot_amx_takes(enum dtype t);
size_t qdot_xt_group_bytes(enum dtype t, int n);
void qdot_pack_x_tiles(enum dtype t, const char *xq, size_t xq_ld, int m, int n, int g, char *xt);
int qdot_tile_amx(const struct qdot_args *a, int r0, int r1);

/* The AMX-INT8 kernel of decode batches (qdot_amx_few.c): x's rows the A
 * operand, read in place from xq (up to 16 a product), 16 weight rows
 * laid out as the B operand from their packed bytes once per call; sums
 * per block (Q4_K: per sub-block of 32, times the scales after), then the
 * f32 steps above: the same bits. Q8_0, Q4_0, Q5_0 and Q4_K; the other
 * types go to qdot_rows_vnni_near. Returns as qdot_tile_fn; only where
 * AMX-INT8 was granted. */
bool qdot_amx_few_takes(enum dtype t);
int qdot_tile_amx_few(const struct qdot_args *a, int r0, int r1);

/* The products with weights packed in groups of 16 rows (weight.h's
 * WEIGHT_PACK_X16, core/qpack.h), x's rows in place (q_prepare's, no
 * layout); r0 a multiple of 16 or past the groups. vnni-x16
 * (qdot_x16.c): a group's block multiplied with the rows in the lanes,
 * each input row's quads broadcast (Q4_K, Q5_K, Q6_K; another type goes to
 * qdot_x16_rows); qdot_x16_rows, on any CPU: each group written back as
 * rows into the scratch, then the scalar reference. The same bits as the
 * kernels above. Return as qdot_tile_fn. */
int qdot_x16_vnni(const struct qdot_args *a, int r0, int r1);
/* vnni-x16 built again with GFNI (qdot_x16_gfni.c): the same bits; only
 * where the CPU has GFNI */
int qdot_x16_vnni_gfni(const struct qdot_args *a, int r0, int r1);
int qdot_x16_rows(const struct qdot_args *a, int r0, int r1);

/* The blocks' combination, shared by every kernel: block b of a row adds
 * to partial sum b % QDOT_LANES (with explicit fmaf: a contraction left to
 * each compiler would differ between the files), and the partials are
 * summed as qdot_sum8 says, so that a vector kernel keeps the partials in
 * one register and still gives the scalar reference's bits.
 *   Q8_0/Q4_0/Q5_0:  p = fmaf(dw * dx, isum, p)
 *   Q5_1:       as a K-quant with dmin = -m and msum = the sum of x's quants
 *   K-quants:   p = fmaf(d * dx, isum, p); p = fmaf(-(dmin * dx), msum, p)
 * (Q6_K: dmin = msum = 0, which leaves p as it was: a partial is never -0.) */
#define QDOT_LANES 8

static inline float qdot_sum8(const float p[QDOT_LANES])
{
    return ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
}

#endif
