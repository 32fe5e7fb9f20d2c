/* gemv_avx512bf16.c's kernel over one weight row at a time: the weights
 * read as one sequential stream (with the same software prefetch) instead
 * of four rows side by side. Which reads memory faster differs by CPU (on a
 * Zen 5 without AMX the single stream did, by 10-40% at one input row
 * under load; the four rows' streams, a row's length apart, are what Intel
 * was tuned with), so gemv.c measures both. Each row's sum runs in the same
 * order in either, so their results are bitwise equal. Compiled with the
 * same flags as gemv_avx512bf16.c (CMakeLists.txt). */
#define GEMV_R 1
#define GEMV_BF16_EXPORT gemv_rows_avx512bf16_r1
#include "backend/cpu/gemv_avx512bf16.c"
