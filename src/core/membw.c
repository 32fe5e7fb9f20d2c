#include "core/membw.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/copy.h"
#include "core/timing.h"

#define MEMBW_MAX_THREADS 64

enum membw_op { MEMBW_MEMCPY, MEMBW_STREAM, MEMBW_READ };

struct copy_job {
    char *dst;
    const char *src;
    size_t n;
    enum membw_op op;
    const struct read_method *rm; /* MEMBW_READ: how */
    uint64_t sum;                 /* MEMBW_READ: kept so the reads are not optimised away */
};

/* The sum of n bytes at p (64-byte aligned, n a multiple of 64) as 64-bit
 * words, read as four streams side by side (the quarters of the buffer):
 * one core's hardware prefetchers fetch more from memory for a few streams
 * than for one, as a GEMV reading several weight rows at once does. The
 * baseline SSE2 of x86-64 (or any target's vector unit) adds at two loads a
 * cycle, far above what memory delivers to one core. */
typedef uint64_t membw_v2 __attribute__((vector_size(16)));

static uint64_t read_sum(const char *p, size_t n)
{
    const size_t part = n / 4 / 64 * 64;
    const membw_v2 *v0 = (const membw_v2 *)(const void *)p;
    const membw_v2 *v1 = v0 + part / 16, *v2 = v1 + part / 16, *v3 = v2 + part / 16;
    membw_v2 a0 = {0, 0}, a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < part / 16; i += 4) {
        a0 += v0[i] + v0[i + 1] + v0[i + 2] + v0[i + 3];
        a1 += v1[i] + v1[i + 1] + v1[i + 2] + v1[i + 3];
        a2 += v2[i] + v2[i + 1] + v2[i + 2] + v2[i + 3];
        a3 += v3[i] + v3[i + 1] + v3[i + 2] + v3[i + 3];
    }
    for (size_t i = 4 * part / 16; i < n / 16; i++) /* what the quarters leave */
        a0 += v0[i];
    membw_v2 s = a0 + a1 + a2 + a3;
    return s[0] + s[1];
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MEMBW_AVX512 1

/* The same sum with 64-byte loads over `streams` parts of the buffer side by
 * side (4 or 8), two lines of each per step; `ahead` > 0 adds a software
 * prefetch that many bytes ahead in every stream, and `nt` loads with
 * vmovntdqa (a streaming hint some parts honour on write-back memory). */
__attribute__((target("avx512f"))) static uint64_t read_sum_avx512(const char *p, size_t n,
                                                                     int streams, size_t ahead,
                                                                     bool nt)
{
    const size_t part = n / (size_t)streams / 128 * 128;
    __m512i acc[8];
    for (int k = 0; k < 8; k++)
        acc[k] = _mm512_setzero_si512();
    for (size_t i = 0; i < part; i += 128) {
        for (int k = 0; k < streams; k++) {
            const char *q = p + (size_t)k * part + i;
            if (ahead && i + ahead < part)
                _mm_prefetch(q + ahead, _MM_HINT_T0);
            __m512i x, y;
            if (nt) {
                x = _mm512_stream_load_si512((void *)q);
                y = _mm512_stream_load_si512((void *)(q + 64));
            } else {
                x = _mm512_load_si512((const void *)q);
                y = _mm512_load_si512((const void *)(q + 64));
            }
            acc[k] = _mm512_add_epi64(acc[k], _mm512_add_epi64(x, y));
        }
    }
    __m512i s = acc[0];
    for (int k = 1; k < 8; k++)
        s = _mm512_add_epi64(s, acc[k]);
    uint64_t lanes[8], sum = 0; /* summed unsigned: the reduce intrinsic adds signed */
    _mm512_storeu_si512((void *)lanes, s);
    for (int k = 0; k < 8; k++)
        sum += lanes[k];
    for (size_t i = part * (size_t)streams; i < n; i += 8) /* what the parts leave */
        sum += *(const uint64_t *)(const void *)(p + i);
    return sum;
}
#endif

/* The ways of reading membw_read tries, in its order. */
static const struct read_method {
    const char *name;
    int streams; /* 0: read_sum, the baseline vector width */
    size_t ahead;
    bool nt;
} READ_METHODS[] = {
    {"sse2x4", 0, 0, false},
#ifdef MEMBW_AVX512
    {"avx512x4", 4, 0, false},
    {"avx512x8", 8, 0, false},
    {"avx512x4+pf1k", 4, 1024, false},
    {"avx512x8+pf512", 8, 512, false},
    {"avx512x4-nt", 4, 0, true},
#endif
};
#define N_READ_METHODS (sizeof(READ_METHODS) / sizeof(READ_METHODS[0]))

static bool read_method_runs(const struct read_method *m)
{
#ifdef MEMBW_AVX512
    return m->streams == 0 || __builtin_cpu_supports("avx512f");
#else
    return m->streams == 0;
#endif
}

static uint64_t read_with(const struct read_method *m, const char *p, size_t n)
{
#ifdef MEMBW_AVX512
    if (m->streams)
        return read_sum_avx512(p, n, m->streams, m->ahead, m->nt);
#endif
    (void)m;
    return read_sum(p, n);
}

static void *copy_run(void *arg)
{
    struct copy_job *j = arg;
    switch (j->op) {
    case MEMBW_STREAM:
        copy_stream(j->dst, j->src, j->n);
        break;
    case MEMBW_READ:
        j->sum = read_with(j->rm, j->src, j->n);
        break;
    default:
        memcpy(j->dst, j->src, j->n);
        break;
    }
    return NULL;
}

/* One pass of op over src (and dst) on `threads` threads, each its own
 * bytes_per_thread: bytes per second. */
static double membw_pass(char *dst, const char *src, int threads, size_t bytes_per_thread,
                         enum membw_op op, const struct read_method *rm)
{
    pthread_t tid[MEMBW_MAX_THREADS];
    struct copy_job jobs[MEMBW_MAX_THREADS];
    bool started[MEMBW_MAX_THREADS];
    double t0 = time_now();
    for (int t = 0; t < threads; t++) {
        size_t a = bytes_per_thread * t;
        jobs[t] = (struct copy_job){op == MEMBW_READ ? dst : dst + a, src + a, bytes_per_thread,
                                    op, rm, 0};
        started[t] = pthread_create(&tid[t], NULL, copy_run, &jobs[t]) == 0;
        if (!started[t])
            copy_run(&jobs[t]); /* no thread: copy here, still correct */
    }
    for (int t = 0; t < threads; t++)
        if (started[t])
            pthread_join(tid[t], NULL);
    return (double)bytes_per_thread * threads / (time_now() - t0);
}

/* The best of reps passes of op; for MEMBW_READ every method of
 * READ_METHODS the machine runs, taken in turn within each rep (so a drift of
 * the machine's rate meets them all), each one's best in per_method. */
static double membw_measure(int threads, size_t bytes_per_thread, int reps, enum membw_op op,
                            double per_method[N_READ_METHODS])
{
    if (threads < 1)
        threads = 1;
    if (threads > MEMBW_MAX_THREADS)
        threads = MEMBW_MAX_THREADS;
    bytes_per_thread = (bytes_per_thread + 127) / 128 * 128; /* the readers' unit */
    size_t bytes = bytes_per_thread * (size_t)threads;
    /* the best copy the machine can do: huge pages where the kernel allows,
     * as the device arenas and host-tier blobs have */
    char *src = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    /* reading needs no destination */
    size_t dst_bytes = op == MEMBW_READ ? 4096 : bytes;
    char *dst = mmap(NULL, dst_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    double best = 0;
    if (per_method)
        for (size_t k = 0; k < N_READ_METHODS; k++)
            per_method[k] = 0;
    if (src == MAP_FAILED || dst == MAP_FAILED)
        goto out;
#ifdef MADV_HUGEPAGE
    (void)madvise(src, bytes, MADV_HUGEPAGE);
    (void)madvise(dst, dst_bytes, MADV_HUGEPAGE);
#endif
    memset(src, 1, bytes);
    memset(dst, 2, dst_bytes);
    for (int rep = 0; rep < reps; rep++) {
        for (size_t k = 0; k < (op == MEMBW_READ ? N_READ_METHODS : 1); k++) {
            if (op == MEMBW_READ && !read_method_runs(&READ_METHODS[k]))
                continue;
            double bw = membw_pass(dst, src, threads, bytes_per_thread, op, &READ_METHODS[k]);
            if (per_method && bw > per_method[k])
                per_method[k] = bw;
            if (bw > best)
                best = bw;
        }
    }
out:
    if (src != MAP_FAILED)
        munmap(src, bytes);
    if (dst != MAP_FAILED)
        munmap(dst, dst_bytes);
    return best;
}

double membw_memcpy(int threads, size_t bytes_per_thread, int reps)
{
    return membw_measure(threads, bytes_per_thread, reps, MEMBW_MEMCPY, NULL);
}

double membw_stream(int threads, size_t bytes_per_thread, int reps)
{
    return membw_measure(threads, bytes_per_thread, reps, MEMBW_STREAM, NULL);
}

double membw_read(int threads, size_t bytes_per_thread, int reps)
{
    return membw_read_detail(threads, bytes_per_thread, reps, NULL);
}

double membw_read_detail(int threads, size_t bytes_per_thread, int reps,
                         struct membw_read_methods *out)
{
    double per[N_READ_METHODS];
    double best = membw_measure(threads, bytes_per_thread, reps, MEMBW_READ, per);
    if (out) {
        *out = (struct membw_read_methods){.best = "none"};
        for (size_t k = 0; k < N_READ_METHODS && out->n < MEMBW_READ_METHODS_MAX; k++) {
            if (!read_method_runs(&READ_METHODS[k]))
                continue;
            out->name[out->n] = READ_METHODS[k].name;
            out->bps[out->n++] = per[k];
            if (per[k] == best && best > 0)
                out->best = READ_METHODS[k].name;
        }
    }
    return best;
}
