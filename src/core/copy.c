#include "core/copy.h"

#include <stdint.h>
#include <string.h>

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
