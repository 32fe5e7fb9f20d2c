/* gemv_avx2.c's kernel over blocks of 2 weight rows x 4 input rows, in
 * column spans of 512, without software prefetch: AVX2 has 16 vector
 * registers, and gemv_avx2.c's blocks of 4 x 4 (16 sums, 4 weight vectors
 * and an input's) spilled from 3 input rows on. Where several input rows
 * share a call the product is bound by multiplying, not by reading (AMD EPYC
 * Zen 2, 8 input rows of 4096 x 4096 bf16 weights, 2 threads: 2.25-2.30 ms a
 * call against gemv_avx2.c's 3.1; 2026-12-06). The same sums in the same
 * order, so the same bits. Compiled with gemv_avx2.c's flags
 * (CMakeLists.txt). */
#define GEMV_R 2
#define GEMV_MB 4
#define GEMV_KC 512
#define GEMV_PF_BYTES 0
#define GEMV_AVX2_EXPORT gemv_rows_avx2_m8
#include "backend/cpu/gemv_avx2.c"
