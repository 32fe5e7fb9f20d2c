/* gemv_avx512_m8.c's blocks of 3 weight rows x 8 input rows with the
 * software prefetch in two steps, to L1 1 KiB ahead and to L2 12 KiB ahead,
 * as gemv_avx512bf16_m8f.c has for bf16 mode (why: there). On the AMD EPYC
 * Zen 4 (2026-12-07, 8192 x 2048, 8 input rows, weights from memory) f32
 * weights went from 5.2-5.4 to 4.1-4.5 ms on 1 thread and from 2.8-2.9 to
 * 2.2-2.3 on 2; f16 and bf16, widened on the way, are bound by the core
 * and did not move. Each row's sum
 * runs in the same order as in gemv_avx512.c, so the results are bitwise
 * equal; gemv.c measures it beside the others for every class of weights.
 * Compiled with gemv_avx512.c's flags (CMakeLists.txt); the block is
 * gemv_avx512_m8.c's, included with these distances. */
#define GEMV_PF_BYTES 1024
#define GEMV_PF_FAR_BYTES 12288
#define GEMV_AVX512_EXPORT gemv_rows_avx512_m8f
#include "backend/cpu/gemv_avx512_m8.c"
