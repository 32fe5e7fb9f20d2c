/* gemv_avx2.c's kernel without software prefetch: on AMD EPYC Zen 2 a
 * prefetch per 8-lane step (four per cache line of each weight row) took the
 * load ports the hardware prefetcher did not need, and one input row read
 * 4096 x 4096 bf16 weights at 21 GB/s on one thread with none, 17 with them
 * (2 threads: 37-38 against 29-33; 2026-12-06). The same sums in the same
 * order, so the same bits. Compiled with gemv_avx2.c's flags
 * (CMakeLists.txt). */
#define GEMV_PF_BYTES 0
#define GEMV_AVX2_EXPORT gemv_rows_avx2_npf
#include "backend/cpu/gemv_avx2.c"
