/* `vnni-near`: qdot_vnni.c's single-row kernels with the software prefetch
 * 2 KiB ahead instead of 8 KiB, and the types of 32 (Q8_0, Q4_0, Q5_0,
 * Q5_1) against x laid out (qdot_xr.h; once per call by qlinear.c, with
 * qdot_pack_x_xr, qdot_avx2.c). A candidate beside
 * `vnni`, not its replacement: each machine's calibration (qlinear.c)
 * times both and keeps the faster. On a Zen 5 8 KiB was measured best; on
 * an Intel Xeon (KVM, 2026-12-05) 8 KiB ahead into L1 left the core
 * waiting on L1's few line fill buffers, and one thread streamed 9-10 GB/s
 * of 20 where 1-2 KiB ahead streams 13-15 (8192 x 2048 weights from
 * memory, every type). Since 2026-12-06 two steps, as avx512bf16-r1f: 1 KiB
 * ahead into L1 and 4 KiB ahead into L2, which kept more of the stream in
 * flight (same Xeon, 8192 x 2048, CPU time against a read, 1 and 2
 * threads: Q4_K/Q5_K/Q6_K and Q4_0 4-9% faster, Q8_0 within 1-3%); Q5_0/Q5_1,
 * whose runs take the most instructions, lost 2-5% to the L2 prefetch's
 * and 5-8% to 1 KiB alone, so they keep one prefetch 2 KiB ahead.
 * Compiled with qdot_vnni.c's sets; qlinear.c runs it only where the CPU
 * has them. */
#include "backend/cpu/qdot.h"

#ifndef QDOT_ROWS_FN /* qdot_vnni_near_gfni.c names its own */
#define QDOT_ROWS_FN qdot_rows_vnni_near
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define QD_DOT(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
#define QD_K512
#define QD_XR
#define QD_PREFETCH 1024
#define QD_PREFETCH_FAR 4096
#define QD_PREFETCH_Q5 2048
#include "backend/cpu/qdot_body.h"

#else
void QDOT_ROWS_FN(const struct qdot_args *a, int r0, int r1)
{
    qdot_rows_scalar(a, r0, r1);
}
#endif
