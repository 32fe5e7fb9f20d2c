#include "core/copy.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/hugemem.h"
#include "core/timing.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

/* Below this, memcpy (the data may well be in cache and be read soon). */
#define STREAM_MIN ((size_t)1 << 20)

void copy_stream(void *dst, const void *src, size_t n)
{
#if defined(__AVX2__)
    if (n < STREAM_MIN) {
        memcpy(dst, src, n);
        return;
    }
    char *d = dst;
    const char *s = src;
    /* align the destination to 32 bytes; the loads may stay unaligned */
    size_t head = (32 - ((uintptr_t)d & 31)) & 31;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    size_t i = 0;
    for (; i + 256 <= n; i += 256) {
        __m256i r0 = _mm256_loadu_si256((const __m256i *)(s + i));
        __m256i r1 = _mm256_loadu_si256((const __m256i *)(s + i + 32));
        __m256i r2 = _mm256_loadu_si256((const __m256i *)(s + i + 64));
        __m256i r3 = _mm256_loadu_si256((const __m256i *)(s + i + 96));
        __m256i r4 = _mm256_loadu_si256((const __m256i *)(s + i + 128));
        __m256i r5 = _mm256_loadu_si256((const __m256i *)(s + i + 160));
        __m256i r6 = _mm256_loadu_si256((const __m256i *)(s + i + 192));
        __m256i r7 = _mm256_loadu_si256((const __m256i *)(s + i + 224));
        _mm256_stream_si256((__m256i *)(d + i), r0);
        _mm256_stream_si256((__m256i *)(d + i + 32), r1);
        _mm256_stream_si256((__m256i *)(d + i + 64), r2);
        _mm256_stream_si256((__m256i *)(d + i + 96), r3);
        _mm256_stream_si256((__m256i *)(d + i + 128), r4);
        _mm256_stream_si256((__m256i *)(d + i + 160), r5);
        _mm256_stream_si256((__m256i *)(d + i + 192), r6);
        _mm256_stream_si256((__m256i *)(d + i + 224), r7);
    }
    memcpy(d + i, s + i, n - i);
    _mm_sfence(); /* the stores are visible before whoever waits on the copy reads */
#else
    memcpy(dst, src, n);
#endif
}

/* ---- choosing between memcpy and copy_stream, by measurement ---- */

/* Far beyond the L2 and a core's share of a shared L3, and a layer's size
 * (opt-1.3b f32 layers are 50 MB); small enough to touch and time in well
 * under 100 ms. Each copy reads one half and writes the other. */
#define CAL_BYTES ((size_t)64 << 20)
#define CAL_REPS 3

static pthread_once_t choose_once = PTHREAD_ONCE_INIT;
static struct copy_choice choice = {.method = COPY_MEMCPY, .name = "memcpy"};

static void choice_set(enum copy_method m)
{
    choice.method = m;
    choice.name = m == COPY_STREAM ? "stream" : "memcpy";
}

/* Seconds one copy of n bytes takes with method m. */
static double copy_time(enum copy_method m, char *dst, const char *src, size_t n)
{
    double t0 = time_now();
    if (m == COPY_STREAM)
        copy_stream(dst, src, n);
    else
        memcpy(dst, src, n);
    return time_now() - t0;
}

/* Times both methods on fresh memory, alternating so drift in the machine's
 * load (other processes) falls on both; keeps memcpy when allocation fails. */
static void choose_by_measurement(void)
{
    char *buf = hugemem_map(2 * CAL_BYTES); /* as the device arenas have */
    if (!buf)
        return;
    memset(buf, 1, 2 * CAL_BYTES);
    char *src = buf, *dst = buf + CAL_BYTES;
    double best[2] = {1e30, 1e30};
    for (int rep = 0; rep < CAL_REPS; rep++) {
        for (int k = 0; k < 2; k++) {
            /* alternate which method goes first in a round */
            enum copy_method m = (enum copy_method)((rep + k) & 1);
            double t = copy_time(m, dst, src, CAL_BYTES);
            if (t < best[m])
                best[m] = t;
        }
    }
    munmap(buf, 2 * CAL_BYTES);
    choice.memcpy_gb_s = (double)CAL_BYTES / best[COPY_MEMCPY] / 1e9;
    choice.stream_gb_s = (double)CAL_BYTES / best[COPY_STREAM] / 1e9;
    choice_set(best[COPY_STREAM] < best[COPY_MEMCPY] ? COPY_STREAM : COPY_MEMCPY);
}

static void choose(void)
{
    double t0 = time_now();
    const char *env = getenv("SHARDSWAP_COPY");
    if (env && (strcmp(env, "memcpy") == 0 || strcmp(env, "stream") == 0)) {
        choice_set(strcmp(env, "stream") == 0 ? COPY_STREAM : COPY_MEMCPY);
        choice.forced = true;
    } else {
        if (env)
            fprintf(stderr,
                    "shardswap: SHARDSWAP_COPY=\"%.40s\" is neither memcpy nor stream; "
                    "choosing by measurement\n",
                    env);
        choose_by_measurement();
    }
    choice.calib_s = time_now() - t0;
}

const struct copy_choice *copy_choose(void)
{
    pthread_once(&choose_once, choose);
    return &choice;
}

const char *copy_method_name(void)
{
    return copy_choose()->name;
}

void copy_large(void *dst, const void *src, size_t n)
{
    if (copy_choose()->method == COPY_STREAM)
        copy_stream(dst, src, n);
    else
        memcpy(dst, src, n);
}
