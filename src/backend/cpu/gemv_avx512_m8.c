/* gemv_avx512.c's kernel over blocks of 3 weight rows x 8 input rows (see
 * gemv_avx512bf16_m8.c): each widened weight vector feeds 8 input rows, so
 * f16 and bf16 weights are widened once per 8 rows instead of per 4, and
 * the prefetch runs on into the next block (GEMV_PF_NEXT). Each
 * row's sum runs in the same order as in gemv_avx512.c, so their results
 * are bitwise equal; gemv.c measures it beside the others for every class
 * of weights. Compiled with gemv_avx512.c's flags (CMakeLists.txt). */
#define GEMV_R 3
#define GEMV_MB 8
#define GEMV_PF_NEXT
#define GEMV_HSUM8
#ifndef GEMV_AVX512_EXPORT /* gemv_avx512_m8f.c names its own */
#define GEMV_AVX512_EXPORT gemv_rows_avx512_m8
#endif
#include "backend/cpu/gemv_avx512.c"
