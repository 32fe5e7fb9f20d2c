/* gemv_avx2.c's kernel over blocks of 3 weight rows x 4 input rows, in
 * column spans of 512, without software prefetch, compiled at -O3
 * (CMakeLists.txt): AVX2 has 16 vector registers, and gemv_avx2.c's blocks
 * of 4 x 4 (16 sums, 4 weight vectors and an input's) spilled from 3 input
 * rows on; 12 sums keep 12 multiply-adds in flight against the FMA's
 * latency, where 2 x 4 kept 8 (at -O2 the input vectors were loaded again
 * for each weight row). Where several input rows share a call the product
 * is bound by multiplying, not by reading (AMD EPYC Zen 2, 4096 x 4096 bf16
 * weights, 2 threads, 2026-12-06: 8 input rows 2.3 ms a call against
 * gemv_avx2.c's 3.1, 4 rows 1.24 against 1.77; one row 0.98). The same sums
 * in the same order, so the same bits. */
#define GEMV_R 3
#define GEMV_MB 4
#define GEMV_KC 512
#define GEMV_PF_BYTES 0
#define GEMV_AVX2_EXPORT gemv_rows_avx2_m8
#include "backend/cpu/gemv_avx2.c"
