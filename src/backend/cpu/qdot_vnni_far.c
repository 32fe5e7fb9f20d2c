/* `vnni-far`: vnni-near's kernels over far-apart streams of rows, a task's
 * pieces (the next unit of each sub-lane of the thread's lane: lanes.h) in
 * lockstep (qdot_far.h), with each stream's prefetch half vnni-near's (512
 * bytes into L1, 2 KiB into L2; Q5_0/Q5_1 1 KiB into L1 alone): four
 * streams in lockstep keep four times the distance in flight. A candidate
 * beside vnni-near, chosen by the calibration (qlinear.c); compiled with
 * vnni's sets, run only where the CPU has them. */
#include "backend/cpu/qdot.h"

#include <assert.h>

#ifndef QDOT_PIECES_FN /* qdot_vnni_far_gfni.c names its own */
#define QDOT_PIECES_FN qdot_pieces_vnni_far
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define QD_DOT(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
#define QD_K512
#define QD_XR
#define QD_PREFETCH 512
#define QD_PREFETCH_FAR 2048
#define QD_PREFETCH_Q5 1024
#define QDOT_PIECES_ROWS qdot_rows_vnni_near
#include "backend/cpu/qdot_body.h"

#else
void QDOT_PIECES_FN(const struct qdot_piece *p, int n)
{
    for (int k = 0; k < n; k++)
        qdot_rows_scalar(p[k].a, p[k].r0, p[k].r1);
}
#endif
