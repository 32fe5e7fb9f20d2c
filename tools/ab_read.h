/* What the in-process A/B harnesses (tools/qdot_ab.c, tools/ctdot_ab.c)
 * share: the calling thread's CPU time, and the read they judge a kernel
 * by. Not part of the build. */
#ifndef SHARDSWAP_TOOLS_AB_READ_H
#define SHARDSWAP_TOOLS_AB_READ_H

#include <immintrin.h>
#include <stddef.h>
#include <time.h>

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* the read limit: n bytes summed by four streams of 64-byte loads */
__attribute__((target("avx512f"))) static float read_sum(const char *p, size_t n)
{
    __m512 a = _mm512_setzero_ps(), b = a, c = a, d = a;
    for (size_t i = 0; i + 256 <= n; i += 256) {
        a = _mm512_add_ps(a, _mm512_loadu_ps((const float *)(p + i)));
        b = _mm512_add_ps(b, _mm512_loadu_ps((const float *)(p + i + 64)));
        c = _mm512_add_ps(c, _mm512_loadu_ps((const float *)(p + i + 128)));
        d = _mm512_add_ps(d, _mm512_loadu_ps((const float *)(p + i + 192)));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a, b), _mm512_add_ps(c, d)));
}

#endif
