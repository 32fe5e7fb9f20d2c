/* gemv_avx512bf16.c's kernel over 8 weight rows at a time instead of 4,
 * without software prefetch: twice the streams in flight, left to the
 * hardware prefetchers. gemv.c measures it beside the others; each row's
 * sum runs in the same order, so the results are bitwise equal. Compiled
 * with the same flags as gemv_avx512bf16.c (CMakeLists.txt). */
#define GEMV_R 8
#define GEMV_PF_BYTES 0
#define GEMV_BF16_EXPORT gemv_rows_avx512bf16_r8
#include "backend/cpu/gemv_avx512bf16.c"
