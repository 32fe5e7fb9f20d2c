#include "core/membw.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/copy.h"
#include "core/timing.h"

#define MEMBW_MAX_THREADS 64

struct copy_job {
    char *dst;
    const char *src;
    size_t n;
    bool stream;
};

static void *copy_run(void *arg)
{
    struct copy_job *j = arg;
    if (j->stream)
        copy_stream(j->dst, j->src, j->n);
    else
        memcpy(j->dst, j->src, j->n);
    return NULL;
}

static double membw_measure(int threads, size_t bytes_per_thread, int reps, bool stream)
{
    if (threads < 1)
        threads = 1;
    if (threads > MEMBW_MAX_THREADS)
        threads = MEMBW_MAX_THREADS;
    size_t bytes = bytes_per_thread * (size_t)threads;
    /* the best copy the machine can do: huge pages where the kernel allows,
     * as the device arenas and host-tier blobs have */
    char *src = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *dst = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    double best = 0;
    if (src == MAP_FAILED || dst == MAP_FAILED)
        goto out;
#ifdef MADV_HUGEPAGE
    (void)madvise(src, bytes, MADV_HUGEPAGE);
    (void)madvise(dst, bytes, MADV_HUGEPAGE);
#endif
    memset(src, 1, bytes);
    memset(dst, 2, bytes);
    for (int rep = 0; rep < reps; rep++) {
        pthread_t tid[MEMBW_MAX_THREADS];
        struct copy_job jobs[MEMBW_MAX_THREADS];
        bool started[MEMBW_MAX_THREADS];
        double t0 = time_now();
        for (int t = 0; t < threads; t++) {
            size_t a = bytes * t / threads, b = bytes * (t + 1) / threads;
            jobs[t] = (struct copy_job){dst + a, src + a, b - a, stream};
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
        munmap(dst, bytes);
    return best;
}

double membw_memcpy(int threads, size_t bytes_per_thread, int reps)
{
    return membw_measure(threads, bytes_per_thread, reps, false);
}

double membw_stream(int threads, size_t bytes_per_thread, int reps)
{
    return membw_measure(threads, bytes_per_thread, reps, true);
}
