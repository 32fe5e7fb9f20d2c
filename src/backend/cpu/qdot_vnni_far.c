/* `vnni-far`: vnni-near's kernels over far-apart streams of a task's rows
 * (qdot_far.h), with each stream's prefetch half vnni-near's (512 bytes
 * into L1, 2 KiB into L2; Q5_0/Q5_1 1 KiB into L1 alone): four streams in
 * lockstep keep four times the distance in flight. On the 2-core Xeon with
 * AMX (2026-12-06, 2 threads, 8192 x 2048, 4864 x 896 and 896 x 4864 from
 * huge pages, the slower thread's CPU time against a 4-stream read) Q8_0
 * went from 0.80-0.82 of the read (vnni-near) to 0.85-0.87 at vnni-near's
 * distances and 0.89-0.91 at these; the K-quants, bound by their
 * instructions more than by the stream, gained nothing either way. A
 * candidate beside vnni-near, chosen by the calibration (qlinear.c);
 * compiled with vnni's sets, run only where the CPU has them. */
#include "backend/cpu/qdot.h"

#include <assert.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/* one weight row at a time with these distances: a task's rows past its
 * streams' whole rows (qdot_far.h) */
void qdot_rows_vnni_far_one(const struct qdot_args *a, int r0, int r1);

#define QD_DOT(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
#define QDOT_ROWS_FN qdot_rows_vnni_far_one
#define QDOT_ROWS_FAR_FN qdot_rows_vnni_far
#define QD_K512
#define QD_XR
#define QD_PREFETCH 512
#define QD_PREFETCH_FAR 2048
#define QD_PREFETCH_Q5 1024
#include "backend/cpu/qdot_body.h"

#else
void qdot_rows_vnni_far(const struct qdot_args *a, int r0, int r1)
{
    qdot_rows_scalar(a, r0, r1);
}
#endif
