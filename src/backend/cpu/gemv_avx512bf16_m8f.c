/* gemv_avx512bf16_m8.c's blocks of 3 weight rows x 8 input rows with the
 * software prefetch in two steps: to L1 1 KiB ahead and to L2 12 KiB
 * ahead. A block of several input rows is bound by its VDPBF16PS, which
 * issue too few loads to keep many lines of the three streams in flight,
 * and a weight row of a few KiB ends before the hardware's prefetch has
 * learnt it. On an AMD EPYC Zen 4 (2026-12-07, 8 input rows, weights from
 * memory) the far step took 8192 x 2048 from 3.07 to 1.9-2.1 ms on 1
 * thread and from 1.6 to 1.0-1.2 ms on 2, and 4864 x 896 from 0.96 to 0.46
 * ms on 1; 4 KiB ahead to L2 helped less, 16 KiB as much, and 2 KiB to L1
 * as much as 1. gemv.c measures it beside the others; each row's sum runs
 * in the same order, so the results are bitwise equal. Compiled with the
 * same flags as gemv_avx512bf16.c (CMakeLists.txt); the block is
 * gemv_avx512bf16_m8.c's, included with these distances. */
#define GEMV_PF_BYTES 1024
#define GEMV_PF_FAR_BYTES 12288
#define GEMV_BF16_EXPORT gemv_rows_avx512bf16_m8f
#include "backend/cpu/gemv_avx512bf16_m8.c"
