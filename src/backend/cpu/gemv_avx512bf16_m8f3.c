/* gemv_avx512bf16_m8f.c's block with its second prefetch 3 KiB ahead in
 * each weight row's own stream (GEMV_PF_FAR_IN_ROWS in gemv_body.h), where
 * -m8f's lands 11 KiB past its first one in memory. Which pays depends on
 * where the rows end: on the AMD EPYC Zen 4 (family 25, 2026-12-08, 8 input
 * rows, weights from memory on huge pages, 1 thread, GFLOP/s, three
 * alternated runs) -m8f against this read 2048 x 8192 (rows of 16 KiB, a
 * down projection, where -m8f's lands in the block's own next row) at
 * 116-122 against 146-160, but 8192 x 2048 (4 KiB rows, where -m8f's lands
 * in the next blocks' rows) at 138-154 against 127-136; 3 to 12 KiB ahead
 * in the rows ran alike, 2 KiB slower. gemv.c measures both, for each
 * length class of rows (its buckets), and keeps the faster. The same sums
 * in the same order: bitwise gemv_avx512bf16.c's. */
#define GEMV_PF_BYTES 1024
#define GEMV_PF_FAR_BYTES 3072
#define GEMV_PF_FAR_IN_ROWS
#define GEMV_BF16_EXPORT gemv_rows_avx512bf16_m8f3
#include "backend/cpu/gemv_avx512bf16_m8.c"
