/* gemv_avx512.c's kernel over one weight row at a time: the weights read
 * as one sequential stream instead of four rows side by side (see
 * gemv_avx512bf16_r1.c). gemv.c measures it beside gemv_avx512.c for every
 * class of weights; each row's sum runs in the same order in either, so
 * their results are bitwise equal. Compiled with gemv_avx512.c's flags
 * (CMakeLists.txt). */
#define GEMV_R 1
#define GEMV_AVX512_EXPORT gemv_rows_avx512_r1
#include "backend/cpu/gemv_avx512.c"
