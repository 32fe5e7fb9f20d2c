#include "core/membw.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "core/copy.h"
#include "core/hugemem.h"
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
    int cpu;      /* pin the thread to this CPU first; -1: the scheduler places it */
    double cpu_s; /* the thread's own CPU time over its part */
};

/* This thread's CPU seconds so far. */
static double thread_cpu_s(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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
 * prefetch that many bytes ahead in every stream (to L1), `far` > 0 a second
 * one that far ahead to L2 only, and `nt` loads with vmovntdqa (a streaming
 * hint some parts honour on write-back memory). */
__attribute__((target("avx512f"))) static uint64_t
read_sum_avx512(const char *p, size_t n, int streams, size_t ahead, size_t far, bool nt)
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
            if (far && i + far < part) {
                /* every line at both distances, as the GEMV prefetches
                 * per 64-byte vector (the L1 one above takes one line of
                 * two alone, pf1k's way) */
                _mm_prefetch(q + ahead + 64, _MM_HINT_T0);
                _mm_prefetch(q + far, _MM_HINT_T1);
                _mm_prefetch(q + far + 64, _MM_HINT_T1);
            }
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

/* The same with 32-byte loads (AVX2), four per step of each stream: the
 * ways of a CPU without AVX-512 (AMD EPYC Zen 2), where sse2x4 alone had
 * been the limit. */
__attribute__((target("avx2"))) static uint64_t
read_sum_avx2(const char *p, size_t n, int streams, size_t ahead, size_t far, bool nt)
{
    const size_t part = n / (size_t)streams / 128 * 128;
    __m256i acc[8];
    for (int k = 0; k < 8; k++)
        acc[k] = _mm256_setzero_si256();
    for (size_t i = 0; i < part; i += 128) {
        for (int k = 0; k < streams; k++) {
            const char *q = p + (size_t)k * part + i;
            if (ahead && i + ahead < part) {
                _mm_prefetch(q + ahead, _MM_HINT_T0);
                _mm_prefetch(q + ahead + 64, _MM_HINT_T0);
            }
            if (far && i + far < part) {
                _mm_prefetch(q + far, _MM_HINT_T1);
                _mm_prefetch(q + far + 64, _MM_HINT_T1);
            }
            __m256i v[4];
            for (int j = 0; j < 4; j++)
                v[j] = nt ? _mm256_stream_load_si256((const void *)(q + 32 * j))
                          : _mm256_load_si256((const void *)(q + 32 * j));
            acc[k] = _mm256_add_epi64(acc[k], _mm256_add_epi64(_mm256_add_epi64(v[0], v[1]),
                                                               _mm256_add_epi64(v[2], v[3])));
        }
    }
    __m256i s = acc[0];
    for (int k = 1; k < 8; k++)
        s = _mm256_add_epi64(s, acc[k]);
    uint64_t lanes[4], sum = 0;
    _mm256_storeu_si256((void *)lanes, s);
    for (int k = 0; k < 4; k++)
        sum += lanes[k];
    for (size_t i = part * (size_t)streams; i < n; i += 8) /* what the parts leave */
        sum += *(const uint64_t *)(const void *)(p + i);
    return sum;
}
#endif

/* The ways of reading membw_read tries, in its order. */
enum read_isa { READ_BASE, READ_AVX2, READ_AVX512 };
static const struct read_method {
    const char *name;
    enum read_isa isa; /* READ_BASE: read_sum, the baseline vector width */
    int streams;
    size_t ahead;
    size_t far; /* the second prefetch's distance, to L2 (0: none) */
    bool nt;
} READ_METHODS[] = {
    {"sse2x4", READ_BASE, 4, 0, 0, false},
#ifdef MEMBW_AVX512
    /* AVX2's only where the CPU has no AVX-512 (whose ways read as far) */
    {"avx2x4", READ_AVX2, 4, 0, 0, false},
    {"avx2x8", READ_AVX2, 8, 0, 0, false},
    {"avx2x4+pf1k+4k", READ_AVX2, 4, 1024, 4096, false},
    {"avx2x4-nt", READ_AVX2, 4, 0, 0, true},
    {"avx512x4", READ_AVX512, 4, 0, 0, false},
    {"avx512x8", READ_AVX512, 8, 0, 0, false},
    {"avx512x4+pf1k", READ_AVX512, 4, 1024, 0, false},
    {"avx512x8+pf512", READ_AVX512, 8, 512, 0, false},
    /* the prefetch in two steps, 1 KiB to L1 and 4 KiB to L2, per stream:
     * what the bf16 GEMV's fastest kernels do, so the limit must include
     * it (2 threads x 128 MB on the 2-core Xeon with AMX, 2026-12-06: 4
     * streams so read 37.8-38.0 GB/s where avx512x4+pf1k read 35-36) */
    {"avx512x4+pf1k+4k", READ_AVX512, 4, 1024, 4096, false},
    {"avx512x8+pf1k+4k", READ_AVX512, 8, 1024, 4096, false},
    {"avx512x4-nt", READ_AVX512, 4, 0, 0, true},
#endif
};
#define N_READ_METHODS (sizeof(READ_METHODS) / sizeof(READ_METHODS[0]))

static bool read_method_runs(const struct read_method *m)
{
#ifdef MEMBW_AVX512
    const bool avx512 = __builtin_cpu_supports("avx512f");
    return m->isa == READ_BASE || (m->isa == READ_AVX512 && avx512) ||
           (m->isa == READ_AVX2 && !avx512 && __builtin_cpu_supports("avx2"));
#else
    return m->isa == READ_BASE;
#endif
}

static uint64_t read_with(const struct read_method *m, const char *p, size_t n)
{
#ifdef MEMBW_AVX512
    if (m->isa == READ_AVX512)
        return read_sum_avx512(p, n, m->streams, m->ahead, m->far, m->nt);
    if (m->isa == READ_AVX2)
        return read_sum_avx2(p, n, m->streams, m->ahead, m->far, m->nt);
#endif
    (void)m;
    return read_sum(p, n);
}

static void *copy_run(void *arg)
{
    struct copy_job *j = arg;
    if (j->cpu >= 0) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(j->cpu, &one);
        (void)pthread_setaffinity_np(pthread_self(), sizeof one,
                                     &one); /* a hint: unpinned reads too */
    }
    const double c0 = thread_cpu_s();
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
    j->cpu_s = thread_cpu_s() - c0;
    return NULL;
}

/* One pass of op over src (and dst) on `threads` threads, each its own
 * bytes_per_thread from its slice's start (slices `stride` apart); thread t
 * pinned to cpus[t] when cpus is not NULL: bytes per second, and in *on_cpu
 * (may be NULL) the share of the pass the threads held a CPU (below 1 when
 * the scheduler gave their CPU to another process meanwhile). */
static double membw_pass(char *dst, const char *src, int threads, size_t bytes_per_thread,
                         size_t stride, enum membw_op op, const struct read_method *rm,
                         const int *cpus, double *on_cpu)
{
    pthread_t tid[MEMBW_MAX_THREADS];
    struct copy_job jobs[MEMBW_MAX_THREADS];
    bool started[MEMBW_MAX_THREADS];
    double t0 = time_now();
    for (int t = 0; t < threads; t++) {
        size_t a = stride * t;
        jobs[t] = (struct copy_job){op == MEMBW_READ ? dst : dst + a,
                                    src + a,
                                    bytes_per_thread,
                                    op,
                                    rm,
                                    0,
                                    cpus ? cpus[t] : -1,
                                    0};
        started[t] = pthread_create(&tid[t], NULL, copy_run, &jobs[t]) == 0;
        if (!started[t]) {
            jobs[t].cpu = -1;   /* never pin the caller */
            copy_run(&jobs[t]); /* no thread: copy here, still correct */
        }
    }
    double cpu_s = 0;
    for (int t = 0; t < threads; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        cpu_s += jobs[t].cpu_s;
    }
    const double wall = time_now() - t0;
    if (on_cpu)
        *on_cpu = fmin(1, cpu_s / (wall * threads));
    return (double)bytes_per_thread * threads / wall;
}

/* bytes rounded up to the readers' unit, in huge pages where the kernel
 * allows (as the device arenas and host-tier blobs have them), every page
 * written (faulted in) with `fill`; MAP_FAILED when it cannot. */
static char *membw_buffer(size_t bytes, int fill)
{
    char *p = hugemem_map(bytes);
    if (!p)
        return MAP_FAILED;
    memset(p, fill, bytes);
    return p;
}

/* The best of reps passes of memcpy or copy_stream. */
static double membw_copy(int threads, size_t bytes_per_thread, int reps, enum membw_op op)
{
    if (threads < 1)
        threads = 1;
    if (threads > MEMBW_MAX_THREADS)
        threads = MEMBW_MAX_THREADS;
    bytes_per_thread = (bytes_per_thread + 127) / 128 * 128;
    const size_t bytes = bytes_per_thread * (size_t)threads;
    char *src = membw_buffer(bytes, 1), *dst = membw_buffer(bytes, 2);
    double best = 0;
    for (int rep = 0; rep < reps && src != MAP_FAILED && dst != MAP_FAILED; rep++) {
        double bw =
            membw_pass(dst, src, threads, bytes_per_thread, bytes_per_thread, op, NULL, NULL, NULL);
        if (bw > best)
            best = bw;
    }
    if (src != MAP_FAILED)
        munmap(src, bytes);
    if (dst != MAP_FAILED)
        munmap(dst, bytes);
    return best;
}

double membw_memcpy(int threads, size_t bytes_per_thread, int reps)
{
    return membw_copy(threads, bytes_per_thread, reps, MEMBW_MEMCPY);
}

double membw_stream(int threads, size_t bytes_per_thread, int reps)
{
    return membw_copy(threads, bytes_per_thread, reps, MEMBW_STREAM);
}

double membw_read(int threads, size_t bytes_per_thread, int reps)
{
    return membw_read_report(threads, bytes_per_thread, reps, NULL);
}

/* The share of the mapping holding p in transparent huge pages
 * (core/hugemem.h); NaN when unreadable. */
static double huge_share(const void *p)
{
    struct hugemem_info h;
    return hugemem_query(p, &h) == 0 && h.rss_kb > 0 ? h.huge_kb / h.rss_kb : NAN;
}

/* The machine's CPU time so far from /proc/stat's first line, in ticks: all
 * of it, the busy part (not idle or iowait) and the hypervisor's steal;
 * false when unreadable. */
static bool cpu_ticks(double *total, double *busy, double *steal)
{
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[8] = {0};
    int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                       &v[4], &v[5], &v[6], &v[7])
              : 0;
    if (f)
        fclose(f);
    if (n < 8)
        return false;
    *total = 0;
    for (int i = 0; i < 8; i++)
        *total += (double)v[i];
    *steal = (double)v[7];
    *busy = *total - (double)v[3] - (double)v[4] - *steal;
    return true;
}

/* This process's CPU seconds so far. */
static double self_cpu_s(void)
{
    struct rusage u;
    if (getrusage(RUSAGE_SELF, &u) != 0)
        return 0;
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec +
           (double)u.ru_stime.tv_sec + 1e-6 * (double)u.ru_stime.tv_usec;
}

/* Dependent adds per second on this thread over about 2 ms, in GHz: one add
 * a cycle, so the clock this thread gets (a core shared with another
 * tenant or clocked down reads low). NaN where there is no such loop. */
static double chain_ghz(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    uint64_t x = 0;
    const long n = 1000000;
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = time_now();
        for (long i = 0; i < n; i++)
            __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                             "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
                             : "+r"(x));
        double g = 8.0 * (double)n / (time_now() - t0) / 1e9;
        if (g > best)
            best = g;
    }
    return best;
#else
    return NAN;
#endif
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The CPUs this process may run on, the first `threads` of them into cpus
 * (repeating when there are fewer); false when the mask is unreadable. */
static bool membw_cpus(int threads, int *cpus)
{
    cpu_set_t set;
    int have[MEMBW_MAX_THREADS], n = 0;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return false;
    for (int c = 0; c < CPU_SETSIZE && n < MEMBW_MAX_THREADS; c++)
        if (CPU_ISSET(c, &set))
            have[n++] = c;
    for (int t = 0; t < threads && n > 0; t++)
        cpus[t] = have[t % n];
    return n > 0;
}

#define MEMBW_PLACES 2     /* the scheduler's placement, then pinned */
#define MEMBW_FOOTPRINTS 2 /* the whole buffer, then a quarter of each slice */

double membw_read_report(int threads, size_t bytes_per_thread, int reps,
                         struct membw_read_report *out)
{
    struct membw_read_report r = {.huge_share = NAN, .others = NAN, .steal = NAN};
    double t_start = time_now();
    if (threads < 1)
        threads = 1;
    if (threads > MEMBW_MAX_THREADS)
        threads = MEMBW_MAX_THREADS;
    if (reps < 1)
        reps = 1;
    bytes_per_thread = (bytes_per_thread + 127) / 128 * 128;
    const size_t bytes = bytes_per_thread * (size_t)threads;
    long llc_l = sysconf(_SC_LEVEL3_CACHE_SIZE);
    const double llc =
        llc_l > 0 ? (double)llc_l : 256.0 * (1 << 20); /* unknown: assume a large one */
    int cpus[MEMBW_MAX_THREADS];
    const bool can_pin = membw_cpus(threads, cpus);
    /* the ways, in the order a round takes them */
    int way_method[MEMBW_READ_WAYS_MAX], way_place[MEMBW_READ_WAYS_MAX];
    size_t way_bytes[MEMBW_READ_WAYS_MAX];
    for (size_t k = 0; k < N_READ_METHODS; k++)
        for (int pl = 0; pl < (can_pin ? MEMBW_PLACES : 1); pl++)
            for (int fp = 0; fp < MEMBW_FOOTPRINTS && r.n < MEMBW_READ_WAYS_MAX; fp++) {
                if (!read_method_runs(&READ_METHODS[k]))
                    continue;
                way_method[r.n] = (int)k;
                way_place[r.n] = pl;
                way_bytes[r.n] = fp ? bytes_per_thread / 4 / 128 * 128 : bytes_per_thread;
                /* the smaller footprint only where it is still 4x the
                 * last-level cache: a read from the cache is no limit */
                if (fp && (double)way_bytes[r.n] * threads < 4 * llc)
                    continue;
                snprintf(r.name[r.n], sizeof r.name[r.n], "%s %s %zuM", READ_METHODS[k].name,
                         pl ? "pin" : "free", way_bytes[r.n] >> 20);
                r.n++;
            }
    r.ghz = chain_ghz();
    char *src = membw_buffer(bytes, 1);
    /* the reads need no destination */
    char *dst = membw_buffer(4096, 2);
    double *round_best = calloc((size_t)reps, sizeof(double));
    double *oncpu = calloc((size_t)reps * MEMBW_READ_WAYS_MAX, sizeof(double));
    double total0 = 0, busy0 = 0, steal0 = 0, total1, busy1, steal1;
    const bool ticks = cpu_ticks(&total0, &busy0, &steal0);
    const double self0 = self_cpu_s();
    if (src == MAP_FAILED || dst == MAP_FAILED || !round_best || !oncpu)
        goto out;
    r.huge_share = huge_share(src);
    (void)membw_pass(dst, src, threads, bytes_per_thread, bytes_per_thread, MEMBW_READ,
                     &READ_METHODS[0], NULL,
                     NULL); /* untimed: the first pass's TLB and cache misses */
    for (int rep = 0; rep < reps; rep++) {
        for (int w = 0; w < r.n; w++) {
            double on;
            double bw = membw_pass(dst, src, threads, way_bytes[w], bytes_per_thread, MEMBW_READ,
                                   &READ_METHODS[way_method[w]], way_place[w] ? cpus : NULL, &on);
            oncpu[rep * r.n + w] = on;
            if (bw > r.way_bps[w])
                r.way_bps[w] = bw;
            if (bw > round_best[rep])
                round_best[rep] = bw;
            if (bw > r.bps) {
                r.bps = bw;
                r.best = w;
                r.best_on_cpu = on;
            }
        }
    }
    r.rounds = reps;
    qsort(oncpu, (size_t)reps * r.n, sizeof(double), cmp_double);
    r.on_cpu_median = oncpu[(size_t)reps * r.n / 2];
    qsort(round_best, (size_t)reps, sizeof(double), cmp_double);
    r.round_min = round_best[0];
    r.round_median =
        reps % 2 ? round_best[reps / 2] : (round_best[reps / 2 - 1] + round_best[reps / 2]) / 2;
    if (ticks && cpu_ticks(&total1, &busy1, &steal1) && total1 > total0) {
        /* our own CPU time in /proc/stat's unit */
        const double self = (double)sysconf(_SC_CLK_TCK) * (self_cpu_s() - self0);
        r.steal = (steal1 - steal0) / (total1 - total0);
        r.others = fmax(0, (busy1 - busy0) - self) / (total1 - total0);
    }
out:
    free(round_best);
    free(oncpu);
    if (src != MAP_FAILED)
        munmap(src, bytes);
    if (dst != MAP_FAILED)
        munmap(dst, 4096);
    r.seconds = time_now() - t_start;
    if (out)
        *out = r;
    return r.bps;
}
