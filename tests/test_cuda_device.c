/* The CUDA device against device.h's contract, as the CPU device is tested:
 * budget accounting, fragmentation, copies of odd sizes and offsets from
 * pinned and ordinary memory, events, a compute stream waiting for a copy
 * that is queued only later, the pinned pool's reuse, partitions of one
 * GPU, and the errors of a bad open.
 *
 * Uses only public headers, so it builds without CUDA too; it exits 77
 * (skipped) with the reason when no CUDA device opens: a build without
 * CUDA, or a machine without a GPU. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backend/device.h"
#include "backend/kernels.h"
#include "core/error.h"
#include "test.h"

#define MiB ((uint64_t)1 << 20)
#define KiB ((uint64_t)1 << 10)

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void fill_pattern(unsigned char *p, size_t n, unsigned seed)
{
    uint32_t x = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (unsigned char)x;
    }
}

static struct device *open_or_skip(uint64_t budget)
{
    struct device *d = NULL;
    int rc = device_open_cuda(0, 0, budget, &d);
    if (rc < 0) {
        static char why[600];
        snprintf(why, sizeof(why), "no CUDA device to test (%s): %s", err_name(rc), err_msg());
        test_skip(why);
    }
    return d;
}

TEST(identity_and_budget)
{
    struct device *d = open_or_skip(1 * MiB);
    CHECK(strcmp(device_name(d), "cuda:0") == 0);
    CHECK(device_kind(d) == DEVICE_CUDA);
    CHECK(device_budget(d) == 1 * MiB);
    CHECK(device_used(d) == 0);
    CHECK(device_free_blocks(d) == 1);
    CHECK(device_largest_free(d) == 1 * MiB);

    struct dbuf *zero = (struct dbuf *)1;
    CHECK(device_alloc(d, 0, &zero) == ERR_INVALID);
    CHECK(zero == NULL);

    /* sizes are accounted rounded up to 64 bytes */
    struct dbuf *a = NULL, *b = NULL, *c = NULL;
    CHECK(device_alloc(d, 1000, &a) == 0);
    CHECK(device_used(d) == 1024);
    CHECK(dbuf_size(a) == 1000);
    CHECK(((uintptr_t)dbuf_ptr(a) & 63) == 0);
    CHECK(device_alloc(d, 1 * MiB - 1024, &b) == 0);
    CHECK(device_used(d) == 1 * MiB);
    CHECK(device_largest_free(d) == 0);
    CHECK(device_free_blocks(d) == 0);
    /* the budget is exact: one more byte fails with a message */
    int rc = device_alloc(d, 1, &c);
    CHECK(rc == ERR_NOMEM);
    CHECK(c == NULL);
    CHECK_MSG(strstr(err_msg(), "cuda:0") && strstr(err_msg(), "in use"), "got \"%s\"", err_msg());
    CHECK(device_high_water(d) == 1 * MiB);
    device_free(a);
    device_free(b);
    CHECK(device_used(d) == 0);
    CHECK(device_free_blocks(d) == 1);
    CHECK(device_high_water(d) == 1 * MiB);
    device_close(d);
}

TEST(fragmentation)
{
    struct device *d = open_or_skip(1 * MiB);
    struct dbuf *q[4];
    for (int i = 0; i < 4; i++)
        CHECK(device_alloc(d, 256 * KiB, &q[i]) == 0);
    CHECK(device_largest_free(d) == 0);
    device_free(q[1]); /* a hole in the middle */
    CHECK(device_largest_free(d) == 256 * KiB);
    CHECK(device_free_blocks(d) == 1);
    device_free(q[3]); /* two holes */
    CHECK(device_free_blocks(d) == 2);
    CHECK(device_largest_free(d) == 256 * KiB);
    struct dbuf *big = NULL;
    CHECK(device_alloc(d, 512 * KiB, &big) == ERR_NOMEM); /* 512 KiB free, but not in one piece */
    device_free(q[2]);                                    /* coalesces 1..3 */
    CHECK(device_free_blocks(d) == 1);
    CHECK(device_largest_free(d) == 768 * KiB);
    CHECK(device_alloc(d, 768 * KiB, &big) == 0);
    device_free(big);
    device_free(q[0]);
    CHECK(device_free_blocks(d) == 1);
    device_close(d);
}

/* h2d then d2h, back to back without a sync between them (a D2H copy sees
 * every earlier H2D copy), for odd sizes and offsets. */
static void round_trip(struct device *d, unsigned char *src, unsigned char *back, size_t n,
                       size_t off, unsigned seed, const char *what)
{
    struct dbuf *b = NULL;
    CHECK(device_alloc(d, n + off + 5, &b) == 0);
    if (!b)
        return;
    fill_pattern(src, n, seed);
    memset(back, 0xEE, n + 2);
    CHECK(device_copy_h2d(d, b, off, src, n, NULL) == 0);
    CHECK(device_copy_d2h(d, back + 1, b, off, n, NULL) == 0);
    device_sync(d);
    CHECK_MSG(memcmp(back + 1, src, n) == 0, "%s: %zu bytes at offset %zu", what, n, off);
    CHECK(back[0] == 0xEE && back[n + 1] == 0xEE);
    device_free(b);
}

TEST(copies)
{
    struct device *d = open_or_skip(64 * MiB);
    const size_t sizes[] = {1, 3, 63, 65, 4097, (size_t)(1 * MiB) + 13, (size_t)(9 * MiB) + 7};
    const size_t offs[] = {0, 1, 7, 61};
    const size_t cap = (size_t)(9 * MiB) + 7 + 64;
    unsigned char *pin_src = NULL, *pin_back = NULL;
    CHECK(device_host_alloc(d, cap, (void **)&pin_src) == 0);
    CHECK(device_host_alloc(d, cap + 2, (void **)&pin_back) == 0);
    unsigned char *mal_src = malloc(cap), *mal_back = malloc(cap + 2);
    CHECK(pin_src && pin_back && mal_src && mal_back);
    if (!pin_src || !pin_back || !mal_src || !mal_back)
        return;
    CHECK(((uintptr_t)pin_src & 63) == 0 && ((uintptr_t)pin_back & 63) == 0);
    unsigned seed = 1;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        for (size_t j = 0; j < sizeof(offs) / sizeof(offs[0]); j++) {
            round_trip(d, pin_src + offs[j], pin_back, sizes[i], offs[j], seed++, "pinned");
            round_trip(d, mal_src + offs[j], mal_back, sizes[i], offs[j], seed++, "malloc");
        }
    /* a zero-byte copy is a no-op that still completes its event */
    struct device_event *ev = NULL;
    struct dbuf *b = NULL;
    CHECK(device_event_create(d, &ev) == 0 && device_alloc(d, 64, &b) == 0);
    CHECK(device_copy_h2d(d, b, 64, pin_src, 0, ev) == 0);
    CHECK(device_event_wait(ev) == 0);
    /* out-of-range copies are refused */
    CHECK(device_copy_h2d(d, b, 1, pin_src, 64, NULL) == ERR_INVALID);
    device_free(b);
    device_event_destroy(ev);
    free(mal_src);
    free(mal_back);
    device_host_free(d, pin_src, cap);
    device_host_free(d, pin_back, cap + 2);
    device_close(d);
}

TEST(events)
{
    struct device *d = open_or_skip(64 * MiB);
    const size_t n = 32 * MiB;
    unsigned char *h = NULL;
    struct dbuf *b = NULL;
    struct device_event *ev = NULL;
    CHECK(device_host_alloc(d, n, (void **)&h) == 0);
    CHECK(device_alloc(d, n, &b) == 0);
    CHECK(device_event_create(d, &ev) == 0);
    if (!h || !b || !ev)
        return;
    CHECK(!device_event_done(ev)); /* pending */
    memset(h, 0x5A, n);
    CHECK(device_copy_h2d(d, b, 0, h, n, ev) == 0);
    CHECK(device_event_wait(ev) == 0);
    CHECK(device_event_done(ev));
    /* reset makes it pending; a signal completes it with a status */
    device_event_reset(ev);
    CHECK(!device_event_done(ev));
    device_event_signal(ev, ERR_IO);
    CHECK(device_event_done(ev));
    CHECK(device_event_wait(ev) == ERR_IO);
    /* recorded again after a reset, on the D2H stream this time */
    device_event_reset(ev);
    memset(h, 0, n);
    CHECK(device_copy_d2h(d, h, b, 0, n, ev) == 0);
    CHECK(device_event_wait(ev) == 0);
    CHECK(h[0] == 0x5A && h[n - 1] == 0x5A);
    /* a compute stream's record */
    struct stream *s = NULL;
    CHECK(device_stream_create(d, &s) == 0);
    device_event_reset(ev);
    CHECK(stream_record(s, ev) == 0);
    CHECK(device_event_wait(ev) == 0);
    CHECK(stream_sync(s) == 0);
    device_stream_destroy(s);
    device_event_destroy(ev);
    device_free(b);
    device_host_free(d, h, n);
    device_close(d);
}

/* ---- a stream waiting for an event that another thread records later ---- */

struct late {
    struct device *d;
    struct dbuf *dst;
    const void *src;
    size_t n;
    struct device_event *ev;
    int signal; /* 0: queue the copy with ev; < 0: signal ev with it */
    atomic_int acted;
    int rc;
};

static void *late_main(void *p)
{
    struct late *l = p;
    sleep_ms(50);
    atomic_store(&l->acted, 1);
    if (l->signal < 0)
        device_event_signal(l->ev, l->signal);
    else
        l->rc = device_copy_h2d(l->d, l->dst, 0, l->src, l->n, l->ev);
    return NULL;
}

TEST(stream_wait_pending)
{
    struct device *d = open_or_skip(128 * MiB);
    device_compute_thread_init(d);
    const size_t n = 16 * MiB + 12;
    unsigned char *h = NULL, *out = malloc(n);
    struct dbuf *b = NULL, *b2 = NULL;
    struct device_event *ev = NULL;
    struct stream *s = NULL;
    CHECK(device_host_alloc(d, n, (void **)&h) == 0);
    CHECK(device_alloc(d, n, &b) == 0 && device_alloc(d, n, &b2) == 0);
    CHECK(device_event_create(d, &ev) == 0);
    CHECK(device_stream_create(d, &s) == 0);
    if (!h || !out || !b || !b2 || !ev || !s)
        return;
    fill_pattern(h, n, 77);

    /* the copy is queued 50 ms after the stream asks to wait for it */
    struct late l = {.d = d, .dst = b, .src = h, .n = n, .ev = ev, .signal = 0};
    atomic_init(&l.acted, 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, late_main, &l) == 0);
    CHECK(stream_wait_event(s, ev) == 0);
    CHECK(atomic_load(&l.acted) == 1); /* the host waited for the record */
    /* the compute stream's later work sees the copied data */
    CHECK(kern_copy(s, dbuf_ptr(b2), dbuf_ptr(b), n) == 0);
    CHECK(kern_to_host(s, out, dbuf_ptr(b2), n) == 0);
    pthread_join(t, NULL);
    CHECK(l.rc == 0);
    CHECK_MSG(memcmp(out, h, n) == 0, "the stream ran before the copy it waited for");

    /* a load that fails: the waiting stream learns its status */
    device_event_reset(ev);
    l = (struct late){.d = d, .ev = ev, .signal = ERR_IO};
    atomic_init(&l.acted, 0);
    CHECK(pthread_create(&t, NULL, late_main, &l) == 0);
    CHECK(stream_wait_event(s, ev) == ERR_IO);
    CHECK(atomic_load(&l.acted) == 1);
    pthread_join(t, NULL);
    /* already signalled: answered at once */
    CHECK(stream_wait_event(s, ev) == ERR_IO);

    CHECK(stream_sync(s) == 0);
    device_stream_destroy(s);
    device_event_destroy(ev);
    device_free(b);
    device_free(b2);
    device_host_free(d, h, n);
    free(out);
    device_close(d);
}

/* Freed pinned blocks are reused, not pinned again: the same request gets
 * the same address back, and a second block comes from the same chunk. */
TEST(host_pool_reuse)
{
    struct device *d = open_or_skip(1 * MiB);
    const size_t n = 3 * MiB + 5;
    char *p1 = NULL, *p2 = NULL, *p3 = NULL;
    CHECK(device_host_alloc(d, n, (void **)&p1) == 0);
    if (!p1)
        return;
    memset(p1, 1, n);
    device_host_free(d, p1, n);
    CHECK(device_host_alloc(d, n, (void **)&p2) == 0);
    CHECK(p2 == p1);
    CHECK(device_host_alloc(d, n, (void **)&p3) == 0);
    CHECK(p3 != p2);
    CHECK(p3 > p2 && (size_t)(p3 - p2) < 256 * MiB); /* the same 256 MiB chunk */
    memset(p3, 2, n);
    device_host_free(d, p2, n);
    device_host_free(d, p3, n);
    /* a block larger than a chunk gets a chunk of its own, and comes back too */
    const size_t big = 300 * MiB;
    char *q1 = NULL, *q2 = NULL;
    CHECK(device_host_alloc(d, big, (void **)&q1) == 0);
    if (q1) {
        q1[0] = q1[big - 1] = 3;
        device_host_free(d, q1, big);
        CHECK(device_host_alloc(d, big, (void **)&q2) == 0);
        CHECK(q2 == q1);
        device_host_free(d, q2, big);
    }
    device_close(d);
}

/* Two partitions of GPU 0: separate devices with separate budgets. */
TEST(partitions)
{
    struct device *d0 = open_or_skip(1 * MiB), *d1 = NULL;
    int rc = device_open_cuda(0, 1, 2 * MiB, &d1);
    CHECK_MSG(rc == 0, "%s", err_msg());
    if (rc < 0) {
        device_close(d0);
        return;
    }
    CHECK(strcmp(device_name(d1), "cuda:0.1") == 0);
    CHECK(device_budget(d0) == 1 * MiB && device_budget(d1) == 2 * MiB);
    struct dbuf *a = NULL, *b = NULL, *c = NULL;
    CHECK(device_alloc(d0, 1 * MiB, &a) == 0); /* d0 full */
    CHECK(device_alloc(d1, 1 * MiB, &b) == 0); /* d1 has its own */
    CHECK(device_alloc(d0, 64, &c) == ERR_NOMEM);
    CHECK(device_used(d0) == 1 * MiB && device_used(d1) == 1 * MiB);
    /* data does not leak between them */
    unsigned char x[256], y[256], back[258];
    fill_pattern(x, sizeof(x), 5);
    fill_pattern(y, sizeof(y), 6);
    CHECK(device_copy_h2d(d0, a, 0, x, sizeof(x), NULL) == 0);
    CHECK(device_copy_h2d(d1, b, 0, y, sizeof(y), NULL) == 0);
    device_sync(d0);
    device_sync(d1);
    CHECK(device_copy_d2h(d0, back, a, 0, sizeof(x), NULL) == 0);
    device_sync(d0);
    CHECK(memcmp(back, x, sizeof(x)) == 0);
    CHECK(device_copy_d2h(d1, back, b, 0, sizeof(y), NULL) == 0);
    device_sync(d1);
    CHECK(memcmp(back, y, sizeof(y)) == 0);
    round_trip(d1, y, back, 100, 3, 9, "partition"); /* d1 still has room */
    device_free(a);
    device_free(b);
    device_close(d1);
    device_close(d0);
}

TEST(bad_opens)
{
    struct device *probe = open_or_skip(1 * MiB);
    device_close(probe);
    struct device *d = (struct device *)1;
    int rc = device_open_cuda(0, 0, (uint64_t)1 << 50, &d); /* a petabyte */
    CHECK(rc == ERR_NOMEM);
    CHECK(d == NULL);
    CHECK_MSG(strstr(err_msg(), "cuda:0") && strstr(err_msg(), "free"), "got \"%s\"", err_msg());
    d = (struct device *)1;
    rc = device_open_cuda(99, 0, 1 * MiB, &d);
    CHECK(rc == ERR_INVALID);
    CHECK(d == NULL);
    CHECK_MSG(strstr(err_msg(), "cuda:99") && strstr(err_msg(), "GPU"), "got \"%s\"", err_msg());
    d = (struct device *)1;
    CHECK(device_open_cuda(0, 0, 0, &d) == ERR_INVALID);
    CHECK(d == NULL);
    CHECK(strstr(err_msg(), "budget") != NULL);
    d = (struct device *)1;
    CHECK(device_open_cuda(-1, 0, 1 * MiB, &d) == ERR_INVALID);
    CHECK(d == NULL);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
