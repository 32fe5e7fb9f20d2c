/* Copying large blocks at the memory's speed. */
#ifndef SHARDSWAP_CORE_COPY_H
#define SHARDSWAP_CORE_COPY_H

#include <stdbool.h>
#include <stddef.h>

/* memcpy for blocks far larger than the caches (a layer of weights): the
 * destination is written with non-temporal stores, so it neither evicts the
 * caches nor is read before it is written. Whether that beats glibc's
 * memcpy depends on the machine (1.5x on an AMD EPYC, 0.9x on an Intel
 * Xeon): callers that want the faster one use copy_large. Small or
 * unsupported cases fall back to memcpy. */
void copy_stream(void *dst, const void *src, size_t n);

/* How copy_large copies: chosen once per process, by measurement. */
enum copy_method { COPY_MEMCPY, COPY_STREAM };

struct copy_choice {
    enum copy_method method;
    const char *name;   /* "memcpy" or "stream" */
    bool forced;        /* SHARDSWAP_COPY chose it, nothing was measured */
    double memcpy_gb_s; /* the calibration's best of each, one thread; 0 when forced */
    double stream_gb_s;
    double calib_s; /* what choosing cost (allocation, touching, timing) */
};

/* Chooses copy_large's method, once per process (pthread_once: any thread,
 * any number of times; the first caller pays, others wait for it). The
 * environment variable SHARDSWAP_COPY=memcpy|stream decides when set (an
 * unknown value is reported once on stderr and ignored); otherwise each
 * method copies a 64 MiB block a few times, alternately, and the faster best
 * time wins. Costs ~30-60 ms on one core; the CPU device calls it at open,
 * so processes that never open one never pay. Returns the choice (static
 * storage, never NULL). */
const struct copy_choice *copy_choose(void);

/* Copies n bytes with the method copy_choose picked (choosing first if no
 * one has): the CPU devices' copy engine. Blocks under 1 MiB use memcpy. */
void copy_large(void *dst, const void *src, size_t n);

/* copy_choose()->name. */
const char *copy_method_name(void);

#endif
