/* gemv_avx2.c's kernel with its software prefetch going on, past the end of
 * a weight row, in the same row of the next block (GEMV_PF_NEXT in
 * gemv_body.h) instead of in the next row, which the block reads already:
 * then each block's first 2 KiB a row were fetched while the block before it
 * ran. On AMD EPYC Zen 2 (one input row, 2 threads, bf16, 2026-12-06) it
 * read 4864 x 896 weights at 0.38-0.40 ms a call against gemv_avx2.c's 0.45
 * and no prefetch's 0.48-0.49, and 8192 x 2048 at 1.03-1.11 against 1.31-1.37
 * and 1.11-1.17. The same sums in the same order, so the same bits.
 * Compiled with gemv_avx2.c's flags (CMakeLists.txt). */
#define GEMV_PF_NEXT
/* and its rows over 2, 4 or 8 far-apart streams at once (gemv_streams.h) */
#define GEMV_PIECES_FN gemv_pieces_avx2_s
#define GEMV_AVX2_EXPORT gemv_rows_avx2_next
#include "backend/cpu/gemv_avx2.c"
