/* gemv_avx512bf16_r1.c's single stream of weights with the software
 * prefetch in two steps: to L1 1 KiB ahead (where the read limit's best way
 * here prefetches) and to L2 4 KiB ahead, so that more lines of the one
 * stream are on their way from memory than the L1 prefetch alone keeps in
 * flight. On the 2-core Xeon with AMX (2026-12-05, 8192 x 2048 bf16, one
 * input row, lanes, interleaved in one process) it read 4-8% faster than
 * avx512bf16-r1 on 2 threads and 2-3% on 1; other prefetch distances tried
 * there (2 KiB alone, 3 KiB, 4 KiB, 2 KiB to L2 only, 1 KiB + 3 KiB,
 * 512 B + 4 KiB, 1 KiB + 6 KiB, 2 KiB + 8 KiB) were 0-6% slower. gemv.c
 * measures it beside the others; each row's sum runs in the same order, so
 * the results are bitwise equal. Compiled with the same flags as
 * gemv_avx512bf16.c (CMakeLists.txt). */
#define GEMV_R 1
#define GEMV_PF_BYTES 1024
#define GEMV_PF_FAR_BYTES 4096
#define GEMV_BF16_EXPORT gemv_rows_avx512bf16_r1f
#include "backend/cpu/gemv_avx512bf16.c"
