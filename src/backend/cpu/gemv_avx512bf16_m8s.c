/* gemv_avx512bf16_m8.c's blocks of 3 weight rows x 8 input rows, the
 * columns in spans of 512 each taken against 12 weight rows before the
 * next (gemv_body.h's GEMV_XSPAN_COLS): the input rows' span stays in L1
 * instead of streaming from L2 once per block. The same sums in the same
 * order, so the results are bitwise equal to gemv_avx512bf16.c's; gemv.c
 * measures it beside the others. Compiled with the same flags as
 * gemv_avx512bf16.c (CMakeLists.txt). */
#define GEMV_R 3
#define GEMV_MB 8
#define GEMV_XSPAN_COLS 512
#define GEMV_BF16_EXPORT gemv_rows_avx512bf16_m8s
#include "backend/cpu/gemv_avx512bf16.c"
