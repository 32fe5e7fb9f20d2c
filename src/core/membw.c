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
    uint64_t sum; /* MEMBW_READ: kept so the reads are not optimised away */
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

static void *copy_run(void *arg)
{
    struct copy_job *j = arg;
    switch (j->op) {
    case MEMBW_STREAM:
        copy_stream(j->dst, j->src, j->n);
        break;
    case MEMBW_READ:
        j->sum = read_sum(j->src, j->n);
        break;
    default:
        memcpy(j->dst, j->src, j->n);
        break;
    }
    return NULL;
}

static double membw_measure(int threads, size_t bytes_per_thread, int reps, enum membw_op op)
{
    if (threads < 1)
        threads = 1;
    if (threads > MEMBW_MAX_THREADS)
        threads = MEMBW_MAX_THREADS;
    bytes_per_thread = (bytes_per_thread + 63) / 64 * 64; /* read_sum's unit */
    size_t bytes = bytes_per_thread * (size_t)threads;
    /* the best copy the machine can do: huge pages where the kernel allows,
     * as the device arenas and host-tier blobs have */
    char *src = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    /* reading needs no destination */
    size_t dst_bytes = op == MEMBW_READ ? 4096 : bytes;
    char *dst = mmap(NULL, dst_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    double best = 0;
    if (src == MAP_FAILED || dst == MAP_FAILED)
        goto out;
#ifdef MADV_HUGEPAGE
    (void)madvise(src, bytes, MADV_HUGEPAGE);
    (void)madvise(dst, dst_bytes, MADV_HUGEPAGE);
#endif
    memset(src, 1, bytes);
    memset(dst, 2, dst_bytes);
    for (int rep = 0; rep < reps; rep++) {
        pthread_t tid[MEMBW_MAX_THREADS];
        struct copy_job jobs[MEMBW_MAX_THREADS];
        bool started[MEMBW_MAX_THREADS];
        double t0 = time_now();
        for (int t = 0; t < threads; t++) {
            size_t a = bytes_per_thread * t, b = a + bytes_per_thread;
            jobs[t] = (struct copy_job){op == MEMBW_READ ? dst : dst + a, src + a, b - a, op, 0};
            started[t] = pthread_create(&tid[t], NULL, copy_run, &jobs[t]) == 0;
            if (!started[t])
                copy_run(&jobs[t]); /* no thread: copy here, still correct */
        }
        for (int t = 0; t < threads; t++)
            if (started[t])
                pthread_join(tid[t], NULL);
        double bw = bytes / (time_now() - t0);
        if (bw > best)
            best = bw;
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
    return membw_measure(threads, bytes_per_thread, reps, MEMBW_MEMCPY);
}

double membw_stream(int threads, size_t bytes_per_thread, int reps)
{
    return membw_measure(threads, bytes_per_thread, reps, MEMBW_STREAM);
}

double membw_read(int threads, size_t bytes_per_thread, int reps)
{
    return membw_measure(threads, bytes_per_thread, reps, MEMBW_READ);
}
