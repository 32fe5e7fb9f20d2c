/* gemv_avx512bf16.c's kernel over blocks of 3 weight rows x 8 input rows
 * (24 accumulators, as a matrix product's micro-kernel holds): each weight
 * vector loaded feeds 8 input rows and each input vector 3 weight rows, 11
 * loads per 24 VDPBF16PS where the 4 x 4 block takes 8 per 16, and the 5-8
 * rows of a batch go over the columns in one pass instead of two groups of
 * 4 over spans. From a few input rows on the product is bound by these
 * instructions, not by reading the weights, so its prefetch runs on into
 * the next block (GEMV_PF_NEXT in gemv_body.h). Each row's sum runs in the same
 * order as in gemv_avx512bf16.c, so their results are bitwise equal; gemv.c
 * measures it beside the others. Compiled with the same flags as
 * gemv_avx512bf16.c (CMakeLists.txt). */
#define GEMV_R 3
#define GEMV_MB 8
#define GEMV_PF_NEXT
#define GEMV_HSUM8
#ifndef GEMV_BF16_EXPORT /* gemv_avx512bf16_m8f.c names its own */
#define GEMV_BF16_EXPORT gemv_rows_avx512bf16_m8
#endif
#include "backend/cpu/gemv_avx512bf16.c"
