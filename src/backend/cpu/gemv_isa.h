/* The fused GEMV's kernels, one per instruction set, each in its own
 * translation unit compiled for that set (CMakeLists.txt); gemv.c picks one
 * per process at run time. Internal to backend/cpu/. */
#ifndef SHARDSWAP_BACKEND_CPU_GEMV_ISA_H
#define SHARDSWAP_BACKEND_CPU_GEMV_ISA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/weight.h"

/* One call's operands: y[i * ldy + r] = x[i * ldx ...] . w[r] for the m
 * input rows. xb, when not NULL, is x rounded to bf16 (m * w.cols, nearest
 * even) for a kernel that multiplies bf16 pairs (VDPBF16PS); x is then that
 * rounding widened back, so either gives the bf16 mode's result. xp, when
 * not NULL, is x with each whole 32 columns reordered as their 16 even then
 * their 16 odd ones (rows of ldx), for the kernel that widens bf16 weights
 * in pairs. xv, when not NULL, is x rounded to bf16 in AMX's pair layout
 * (for column pair p and input row i: xv[(p * m + i) * 2 + 0, 1] =
 * columns 2p, 2p + 1 of row i), for the AMX kernel. */
struct gemv_args {
    float *y;
    size_t ldy;
    const float *x;
    size_t ldx;
    const uint16_t *xb;
    const float *xp;
    const uint16_t *xv;
    int m;
    const struct weight_view *w;
};

/* Weight rows [r0, r1) for every input row. Runs on a pool thread; reads
 * and writes nothing but its operands. */
typedef void (*gemv_rows_fn)(const struct gemv_args *a, int r0, int r1);

void gemv_rows_scalar(const struct gemv_args *a, int r0, int r1);
void gemv_rows_avx2(const struct gemv_args *a, int r0, int r1);
/* the same with the prefetch run on into the next block's rows, and
 * without prefetch over blocks of 3 weight rows x 4 input rows: the same
 * results bitwise */
void gemv_rows_avx2_next(const struct gemv_args *a, int r0, int r1);
void gemv_rows_avx2_m8(const struct gemv_args *a, int r0, int r1);
void gemv_rows_avx512(const struct gemv_args *a, int r0, int r1);
/* the same one weight row at a time: the same results bitwise */
void gemv_rows_avx512_r1(const struct gemv_args *a, int r0, int r1);
/* the same over blocks of 3 weight rows x 8 input rows: the same results
 * bitwise, fewer loads per multiply-add from 5 input rows on */
void gemv_rows_avx512_m8(const struct gemv_args *a, int r0, int r1);
/* and with its prefetch to L1 and further ahead to L2 (gemv_avx512_m8f.c) */
void gemv_rows_avx512_m8f(const struct gemv_args *a, int r0, int r1);
/* gemv_rows_avx512 with bf16 weights times xb by VDPBF16PS (AVX512-BF16);
 * other dtypes, or xb NULL, as gemv_rows_avx512. */
void gemv_rows_avx512bf16(const struct gemv_args *a, int r0, int r1);
/* the same one weight row at a time (one stream of weights), and 8 rows at
 * a time without software prefetch: the same results bitwise, other ways of
 * reading memory */
void gemv_rows_avx512bf16_r1(const struct gemv_args *a, int r0, int r1);
void gemv_rows_avx512bf16_r8(const struct gemv_args *a, int r0, int r1);
/* the one stream again, prefetched to L1 and further ahead to L2 */
void gemv_rows_avx512bf16_r1f(const struct gemv_args *a, int r0, int r1);
/* the same over blocks of 3 weight rows x 8 input rows (the same results
 * bitwise): fewer loads per VDPBF16PS when several input rows share a call */
void gemv_rows_avx512bf16_m8(const struct gemv_args *a, int r0, int r1);
/* and with its prefetch to L1 and further ahead to L2 (gemv_avx512bf16_m8f.c) */
void gemv_rows_avx512bf16_m8f(const struct gemv_args *a, int r0, int r1);
/* and with that prefetch ahead in each row's stream (gemv_avx512bf16_m8f3.c) */
void gemv_rows_avx512bf16_m8f3(const struct gemv_args *a, int r0, int r1);
/* the same with the columns in spans over 12 weight rows at a time, so the
 * input rows' span stays in L1 (the same results bitwise) */
void gemv_rows_avx512bf16_m8s(const struct gemv_args *a, int r0, int r1);
/* gemv_rows_avx512 with bf16 weights widened in pairs against xp; other
 * dtypes, or xp NULL, as gemv_rows_avx512. */
void gemv_rows_avx512pairs(const struct gemv_args *a, int r0, int r1);
/* bf16 weights in bf16 mode by AMX tiles against xv (and xb, for rows past
 * the last whole 16 and for columns not a multiple of 32); other dtypes as
 * gemv_rows_avx512bf16. Only after gemv_amx_enable returned true. */
void gemv_rows_amx(const struct gemv_args *a, int r0, int r1);
/* How many 16-row tiles gemv_rows_amx takes together, rows that many
 * apart, for rows of row_bytes (row stride): 1 for rows of 9 KiB and more. */
int gemv_amx_groups(size_t row_bytes);
/* xv (gemv_args) from xb's m rows of ldx (m <= 16): the same values, in
 * xv's order pair by pair, from 12 rows by transposes of 16 pairs. */
void gemv_amx_pack_x(uint16_t *xv, const uint16_t *xb, size_t ldx, int m, int cols);
/* A run of rows [r0, r1) of a's product: one stream of a task that reads
 * several far-apart streams at once (lanes.h's sub-lanes). */
struct gemv_piece {
    const struct gemv_args *a;
    int r0, r1;
};
#define GEMV_STREAMS_MAX 8

/* Every piece's rows (n <= GEMV_STREAMS_MAX). Runs on a pool thread; reads
 * and writes nothing but their operands. */
typedef void (*gemv_pieces_fn)(const struct gemv_piece *p, int n);
/* the bf16 mode's one input row over the n pieces' streams in lockstep,
 * each row summed as gemv_rows_avx512bf16_r1 sums it (the same results
 * bitwise); other shapes piece by piece through gemv_rows_avx512bf16_r1f */
void gemv_pieces_avx512bf16_s(const struct gemv_piece *p, int n);
/* the same with no software prefetch (`avx512bf16-s2n`, `-s4n`) */
void gemv_pieces_avx512bf16_sn(const struct gemv_piece *p, int n);
/* the n pieces' streams in lockstep (one input row, or several the pieces
 * share), each row summed as gemv_rows_avx2_next sums it (the same results
 * bitwise), any weight dtype; other shapes piece by piece through
 * gemv_rows_avx2_next */
void gemv_pieces_avx2_s(const struct gemv_piece *p, int n);
/* Asks Linux for the AMX tile data (once per process suffices; repeating
 * is harmless): true when granted. */
bool gemv_amx_enable(void);

#endif
