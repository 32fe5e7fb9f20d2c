/* The device interface on the CPU backend: exact budgets and accounting,
 * the arena's first fit and coalescing, the copy stream's ordering and
 * events, device events (recorded, signalled with an error, reset) and
 * compute streams waiting on copy events, devices copying in parallel, the
 * CUDA stub. (Copy bandwidths are measured by `shardswap bench swap`, not
 * here; no check here depends on how fast anything runs.) */
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend/device.h"
#include "backend/kernels.h"
#include "core/error.h"
#include "core/event.h"
#include "core/timing.h"
#include "test.h"

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#ifdef TEST_ASAN
#include <sanitizer/asan_interface.h>
#endif

#define MiB ((size_t)1 << 20)

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

static size_t round64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

static void fill_random(void *p, size_t n, uint64_t seed)
{
    unsigned char *b = p;
    uint64_t s = seed | 1;
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(rng_next(&s) >> 56);
}

static struct device *open_cpu(int index, uint64_t budget)
{
    struct device *d = NULL;
    int rc = device_open_cpu(index, budget, &d);
    CHECK_MSG(rc == ERR_OK && d, "open cpu:%d: %s", index, err_msg());
    if (!d) {
        fprintf(stderr, "cannot go on without a device\n");
        exit(1);
    }
    return d;
}

TEST(basics)
{
    struct device *d = open_cpu(0, 8 * MiB);
    CHECK(strcmp(device_name(d), "cpu:0") == 0);
    CHECK(device_budget(d) == 8 * MiB);
    CHECK(device_used(d) == 0);
    CHECK(device_high_water(d) == 0);
    CHECK(device_largest_free(d) == 8 * MiB);
    CHECK(device_free_blocks(d) == 1);

    struct dbuf *a, *b, *c;
    CHECK(device_alloc(d, 100, &a) == ERR_OK);
    CHECK(dbuf_size(a) == 100);
    CHECK(((uintptr_t)dbuf_ptr(a) & 63) == 0);
    CHECK(device_used(d) == 128);
    CHECK(device_alloc(d, 1, &b) == ERR_OK);
    CHECK(((uintptr_t)dbuf_ptr(b) & 63) == 0);
    CHECK(device_used(d) == 192);
    CHECK(device_alloc(d, 64, &c) == ERR_OK);
    CHECK(device_used(d) == 256);
    CHECK(device_high_water(d) == 256);
    /* first fit from the bottom: consecutive */
    CHECK((char *)dbuf_ptr(b) == (char *)dbuf_ptr(a) + 128);
    CHECK((char *)dbuf_ptr(c) == (char *)dbuf_ptr(b) + 64);
    memset(dbuf_ptr(a), 0xab, 100); /* CPU device memory is host addressable */

#ifdef TEST_ASAN
    /* free device memory is poisoned, live buffers are not */
    CHECK(!__asan_address_is_poisoned(dbuf_ptr(b)));
    CHECK(__asan_address_is_poisoned((char *)dbuf_ptr(c) + 64));
    void *freed = dbuf_ptr(b);
    device_free(b);
    CHECK(__asan_address_is_poisoned(freed));
    CHECK(!__asan_address_is_poisoned(dbuf_ptr(a)));
#else
    device_free(b);
#endif
    CHECK(device_used(d) == 192);
    CHECK(device_high_water(d) == 256);
    CHECK(device_free_blocks(d) == 2);
    device_free(a);
    CHECK(device_free_blocks(d) == 2); /* [0, 192) coalesced, plus the tail */
    device_free(c);
    CHECK(device_used(d) == 0);
    CHECK(device_high_water(d) == 256);
    CHECK(device_free_blocks(d) == 1);
    CHECK(device_largest_free(d) == 8 * MiB);
    device_free(NULL);

    struct dbuf *z = (struct dbuf *)1;
    CHECK(device_alloc(d, 0, &z) == ERR_INVALID);
    CHECK(z == NULL);
    CHECK(strstr(err_msg(), "cpu:0") != NULL);

    /* a budget that is not a multiple of 64 still bounds used */
    struct device *e = open_cpu(5, 1000);
    CHECK(device_alloc(e, 960, &a) == ERR_OK);
    CHECK(device_alloc(e, 1, &b) == ERR_NOMEM);
    CHECK(device_used(e) == 960);
    device_free(a);
    device_close(e);

    device_close(d);
    device_close(NULL);
}

TEST(fragmentation)
{
    struct device *d = open_cpu(1, 8 * MiB);
    struct dbuf *a, *b, *c, *x = NULL;
    CHECK(device_alloc(d, 2 * MiB, &a) == ERR_OK);
    CHECK(device_alloc(d, 2 * MiB, &b) == ERR_OK);
    CHECK(device_alloc(d, 2 * MiB, &c) == ERR_OK);
    device_free(b);
    CHECK(device_used(d) == 4 * MiB);
    CHECK(device_largest_free(d) == 2 * MiB);
    CHECK(device_free_blocks(d) == 2);

    /* 3 MiB fits the budget (4 MiB free) but no block */
    CHECK(device_alloc(d, 3 * MiB, &x) == ERR_NOMEM);
    CHECK(x == NULL);
    char want[256];
    snprintf(want, sizeof(want),
             "device cpu:1: cannot allocate %zu bytes: %zu of %zu in use, largest free block %zu",
             3 * MiB, 4 * MiB, 8 * MiB, 2 * MiB);
    CHECK_MSG(strcmp(err_msg(), want) == 0, "got \"%s\"", err_msg());
    CHECK(device_used(d) == 4 * MiB);

    /* freeing A coalesces [A, B) into 4 MiB at the bottom */
    void *pa = dbuf_ptr(a);
    device_free(a);
    CHECK(device_free_blocks(d) == 2);
    CHECK(device_largest_free(d) == 4 * MiB);
    CHECK(device_alloc(d, 3 * MiB, &x) == ERR_OK);
    CHECK(x && dbuf_ptr(x) == pa);
    CHECK(device_used(d) == 5 * MiB);
    CHECK(device_high_water(d) == 6 * MiB);

    /* over the budget outright */
    struct dbuf *y = NULL;
    CHECK(device_alloc(d, 4 * MiB, &y) == ERR_NOMEM);
    snprintf(want, sizeof(want),
             "device cpu:1: cannot allocate %zu bytes: %zu of %zu in use, largest free block %zu",
             4 * MiB, 5 * MiB, 8 * MiB, 2 * MiB);
    CHECK_MSG(strcmp(err_msg(), want) == 0, "got \"%s\"", err_msg());
    CHECK(device_alloc(d, SIZE_MAX, &y) == ERR_NOMEM);
    CHECK(device_alloc(d, SIZE_MAX - 10, &y) == ERR_NOMEM);
    CHECK(y == NULL);
    device_free(x);
    device_free(c);

    /* the whole budget in one piece, then nothing more */
    CHECK(device_alloc(d, 8 * MiB, &x) == ERR_OK);
    CHECK(device_alloc(d, 1, &y) == ERR_NOMEM);
    snprintf(want, sizeof(want),
             "device cpu:1: cannot allocate 1 bytes: %zu of %zu in use, largest free block 0",
             8 * MiB, 8 * MiB);
    CHECK_MSG(strcmp(err_msg(), want) == 0, "got \"%s\"", err_msg());
    CHECK(device_free_blocks(d) == 0);
    device_free(x);
    CHECK(device_free_blocks(d) == 1);
    CHECK(device_used(d) == 0);
    device_close(d);
}

/* Random allocs and frees: the budget holds at every step, accounting is
 * exact, live buffers never overlap, and an alloc succeeds exactly when
 * its rounded size fits the largest free block. */
TEST(stress)
{
    enum { SLOTS = 64, OPS = 10000 };
    const size_t budget = 8 * MiB;
    struct device *d = open_cpu(2, budget);
    struct dbuf *live[SLOTS] = {0};
    uint64_t s = 0x5eed1234abcdULL;
    size_t sum = 0, high = 0;
    int n_ok = 0, n_fail = 0, bad = 0;

    for (int op = 0; op < OPS; op++) {
        int i = (int)(rng_next(&s) % SLOTS);
        if (live[i]) {
            unsigned char *p = dbuf_ptr(live[i]);
            size_t n = dbuf_size(live[i]);
            if (p[0] != (unsigned char)i || p[n - 1] != (unsigned char)i)
                bad++;
            sum -= round64(n);
            device_free(live[i]);
            live[i] = NULL;
        } else {
            uint64_t r = rng_next(&s);
            size_t n = (r & 3) == 0 ? 1 + (size_t)(r >> 8) % (1 * MiB)
                                    : 1 + (size_t)(r >> 8) % (128 * 1024);
            uint64_t largest = device_largest_free(d);
            int rc = device_alloc(d, n, &live[i]);
            if (round64(n) <= largest) {
                CHECK_MSG(rc == ERR_OK, "op %d: %zu bytes, largest free %" PRIu64, op, n, largest);
            } else {
                CHECK_MSG(rc == ERR_NOMEM, "op %d: %zu bytes, largest free %" PRIu64, op, n,
                          largest);
                CHECK(strstr(err_msg(), "device cpu:2: cannot allocate") == err_msg());
            }
            if (rc == ERR_OK) {
                n_ok++;
                unsigned char *p = dbuf_ptr(live[i]);
                if (((uintptr_t)p & 63) != 0)
                    bad++;
                for (int j = 0; j < SLOTS; j++) {
                    if (j == i || !live[j])
                        continue;
                    unsigned char *q = dbuf_ptr(live[j]);
                    if (p < q + dbuf_size(live[j]) && q < p + n)
                        bad++;
                }
                p[0] = p[n - 1] = (unsigned char)i;
                sum += round64(n);
                if (sum > high)
                    high = sum;
            } else {
                n_fail++;
            }
        }
        uint64_t used = device_used(d);
        if (used != sum || used > budget || device_high_water(d) != high ||
            device_high_water(d) > budget)
            bad++;
    }
    CHECK_MSG(bad == 0, "%d broken invariants", bad);
    CHECK(n_ok > 1000 && n_fail > 10); /* both paths exercised */
    for (int i = 0; i < SLOTS; i++)
        device_free(live[i]);
    CHECK(device_used(d) == 0);
    CHECK(device_free_blocks(d) == 1);
    CHECK(device_largest_free(d) == budget);
    printf("stress: %d allocs, %d refused, high water %zu of %zu\n", n_ok, n_fail, high, budget);
    device_close(d);
}

/* 100 cycles of allocating a layer's worth of shards and freeing them in
 * random order leave nothing behind. */
TEST(cycles)
{
    enum { N = 12 };
    struct device *d = open_cpu(3, 8 * MiB);
    uint64_t s = 42;
    int bad = 0;
    for (int cycle = 0; cycle < 100; cycle++) {
        struct dbuf *b[N];
        for (int i = 0; i < N; i++)
            if (device_alloc(d, 1 + rng_next(&s) % (512 * 1024), &b[i]) != ERR_OK)
                bad++;
        for (int i = N - 1; i > 0; i--) {
            int j = (int)(rng_next(&s) % (uint64_t)(i + 1));
            struct dbuf *t = b[i];
            b[i] = b[j];
            b[j] = t;
        }
        for (int i = 0; i < N; i++)
            device_free(b[i]);
        if (device_used(d) != 0 || device_free_blocks(d) != 1 || device_largest_free(d) != 8 * MiB)
            bad++;
    }
    CHECK_MSG(bad == 0, "%d cycles left something behind", bad);
    device_close(d);
}

TEST(round_trip)
{
    struct device *d = open_cpu(4, 8 * MiB);
    const size_t cap = 1 * MiB + 8192;
    void *src = NULL, *back = NULL;
    CHECK(device_host_alloc(d, cap, &src) == ERR_OK);
    CHECK(device_host_alloc(d, cap, &back) == ERR_OK);
    CHECK(((uintptr_t)src & 63) == 0 && ((uintptr_t)back & 63) == 0);
    struct dbuf *b;
    CHECK(device_alloc(d, cap, &b) == ERR_OK);

    static const size_t offs[] = {0, 1, 63, 64, 4097};
    static const size_t sizes[] = {0, 1, 100, 4096, 65537, 1 * MiB};
    uint64_t seed = 7;
    for (size_t io = 0; io < sizeof(offs) / sizeof(offs[0]); io++) {
        for (size_t is = 0; is < sizeof(sizes) / sizeof(sizes[0]); is++) {
            size_t off = offs[io], n = sizes[is];
            fill_random(src, n, seed++);
            memset(back, 0, n);
            struct device_event *e1 = NULL, *e2 = NULL;
            CHECK(device_event_create(d, &e1) == 0 && device_event_create(d, &e2) == 0);
            int rc1 = device_copy_h2d(d, b, off, src, n, e1);
            int rc2 = device_copy_d2h(d, back, b, off, n, e2);
            CHECK_MSG(rc1 == ERR_OK && rc2 == ERR_OK, "%s", err_msg());
            if (rc1 == ERR_OK && rc2 == ERR_OK) {
                CHECK(device_event_wait(e2) == 0);
                CHECK(device_event_done(e1)); /* in order */
                CHECK_MSG(memcmp(src, back, n) == 0, "offset %zu, %zu bytes", off, n);
                CHECK(memcmp((char *)dbuf_ptr(b) + off, src, n) == 0);
            }
            device_sync(d);
            device_event_destroy(e1);
            device_event_destroy(e2);
        }
    }

    /* out of range, wrong device, NULL host: refused, nothing queued */
    struct device_event *e;
    CHECK(device_event_create(d, &e) == 0);
    CHECK(device_copy_h2d(d, b, cap - 10, src, 11, e) == ERR_INVALID);
    CHECK(strstr(err_msg(), "cpu:4") && strstr(err_msg(), "outside"));
    CHECK(device_copy_d2h(d, back, b, SIZE_MAX, 2, e) == ERR_INVALID);
    CHECK(device_copy_h2d(d, b, 0, NULL, 10, e) == ERR_INVALID);
    struct device *other = open_cpu(9, 1 * MiB);
    CHECK(device_copy_h2d(other, b, 0, src, 10, NULL) == ERR_INVALID);
    CHECK(strstr(err_msg(), "belongs to device cpu:4") != NULL);
    device_sync(d);
    CHECK(!device_event_done(e));
    device_event_destroy(e);
    device_close(other);

    device_free(b);
    device_host_free(d, src, cap);
    device_host_free(d, back, cap);
    device_host_free(d, NULL, 0);
    device_close(d);
}

/* 100 copies into one region complete in submission order: the last wins,
 * and each event is set only after every earlier one. A sync waits for
 * everything queued before it. */
TEST(ordering)
{
    enum { N = 100, LEN = 64 * 1024 };
    struct device *d = open_cpu(5, 8 * MiB);
    struct dbuf *b;
    CHECK(device_alloc(d, LEN, &b) == ERR_OK);
    uint32_t *src[N];
    struct device_event *ev[N];
    for (int i = 0; i < N; i++) {
        CHECK(device_host_alloc(d, LEN, (void **)&src[i]) == ERR_OK);
        for (size_t k = 0; k < LEN / 4; k++)
            src[i][k] = (uint32_t)i;
        CHECK(device_event_create(d, &ev[i]) == 0);
    }
    for (int i = 0; i < N; i++)
        CHECK(device_copy_h2d(d, b, 0, src[i], LEN, ev[i]) == ERR_OK);
    int out_of_order = 0;
    /* wait on a middle event, then the last: all earlier ones must be set by then */
    CHECK(device_event_wait(ev[N / 2]) == 0);
    for (int j = 0; j < N / 2; j++)
        out_of_order += !device_event_done(ev[j]);
    CHECK(device_event_wait(ev[N - 1]) == 0);
    for (int j = 0; j < N; j++)
        out_of_order += !device_event_done(ev[j]);
    CHECK(out_of_order == 0);
    uint32_t got[LEN / 4];
    CHECK(device_copy_d2h(d, got, b, 0, LEN, NULL) == ERR_OK);
    device_sync(d);
    int wrong = 0;
    for (size_t k = 0; k < LEN / 4; k++)
        wrong += got[k] != N - 1;
    CHECK(wrong == 0);

    /* sync without events: 16 x 512 KiB into a 8 MiB - LEN device */
    struct dbuf *big;
    CHECK(device_alloc(d, 4 * MiB, &big) == ERR_OK);
    void *h;
    CHECK(device_host_alloc(d, 4 * MiB, &h) == ERR_OK);
    fill_random(h, 4 * MiB, 99);
    for (int i = 0; i < 16; i++)
        CHECK(device_copy_h2d(d, big, (size_t)i * 256 * 1024, (char *)h + (size_t)i * 256 * 1024,
                              256 * 1024, NULL) == ERR_OK);
    device_sync(d);
    CHECK(memcmp(dbuf_ptr(big), h, 4 * MiB) == 0);
    device_sync(d); /* nothing queued: returns */

    for (int i = 0; i < N; i++) {
        device_event_destroy(ev[i]);
        device_host_free(d, src[i], LEN);
    }
    device_host_free(d, h, 4 * MiB);
    device_free(big);
    device_free(b);
    device_close(d);
}

struct worker {
    struct device *d;
    struct dbuf *b; /* NULL: allocate its own */
    size_t base, span;
    uint64_t seed;
    int rounds;
    int errors;
};

/* Round trips of random sizes through [base, base + span) of w->b. */
static void *worker_run(void *arg)
{
    struct worker *w = arg;
    unsigned char *src = malloc(w->span), *back = malloc(w->span);
    uint64_t s = w->seed;
    for (int r = 0; r < w->rounds; r++) {
        size_t n = 1 + rng_next(&s) % w->span;
        size_t off = rng_next(&s) % (w->span - n + 1);
        fill_random(src, n, rng_next(&s));
        struct device_event *e;
        if (device_event_create(w->d, &e) != ERR_OK) {
            w->errors++;
            break;
        }
        if (device_copy_h2d(w->d, w->b, w->base + off, src, n, NULL) != ERR_OK ||
            device_copy_d2h(w->d, back, w->b, w->base + off, n, e) != ERR_OK) {
            w->errors++;
            device_event_destroy(e);
            break;
        }
        if (device_event_wait(e) != 0 || memcmp(src, back, n) != 0)
            w->errors++;
        device_event_destroy(e);
    }
    free(src);
    free(back);
    return NULL;
}

/* Two devices driven from two threads, and four threads sharing one device. */
TEST(concurrency)
{
    struct device *d0 = open_cpu(10, 4 * MiB), *d1 = open_cpu(11, 4 * MiB);
    struct worker w[4] = {0};
    CHECK(device_alloc(d0, 2 * MiB, &w[0].b) == ERR_OK);
    CHECK(device_alloc(d1, 2 * MiB, &w[1].b) == ERR_OK);
    for (int i = 0; i < 2; i++) {
        w[i].d = i ? d1 : d0;
        w[i].span = 2 * MiB;
        w[i].seed = 100 + (uint64_t)i;
        w[i].rounds = 40;
    }
    pthread_t t[4];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, worker_run, &w[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    CHECK(w[0].errors == 0 && w[1].errors == 0);
    device_free(w[0].b);
    device_free(w[1].b);

    /* one device, four submitters on disjoint quarters of one buffer, while
     * a fifth thread allocates and frees */
    struct dbuf *shared;
    CHECK(device_alloc(d0, 2 * MiB, &shared) == ERR_OK);
    for (int i = 0; i < 4; i++)
        w[i] = (struct worker){.d = d0,
                               .b = shared,
                               .base = (size_t)i * 512 * 1024,
                               .span = 512 * 1024,
                               .seed = 200 + (uint64_t)i,
                               .rounds = 40};
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, worker_run, &w[i]);
    int alloc_errors = 0;
    for (int k = 0; k < 200; k++) {
        struct dbuf *x;
        if (device_alloc(d0, 1 + (size_t)k * 977, &x) != ERR_OK)
            alloc_errors++;
        else
            device_free(x);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 4; i++)
        CHECK(w[i].errors == 0);
    CHECK(alloc_errors == 0);
    device_free(shared);
    CHECK(device_used(d0) == 0 && device_used(d1) == 0);
    device_close(d0);
    device_close(d1);
}

/* Events on their own and on a compute stream: created pending, done at
 * once when recorded on a CPU stream, carrying the status the host
 * signals, pending again after a reset. */
TEST(events)
{
    struct device *d = open_cpu(12, 1 * MiB);
    CHECK(device_kind(d) == DEVICE_CPU);
    struct stream *s = NULL;
    CHECK(device_stream_create(d, &s) == ERR_OK && s);
    CHECK(stream_device(s) == d);
    struct device_event *ev = NULL;
    CHECK(device_event_create(d, &ev) == ERR_OK && ev);
    CHECK(!device_event_done(ev));

    /* a CPU stream runs its work on the caller: recorded means done */
    struct dbuf *b;
    CHECK(device_alloc(d, 256, &b) == ERR_OK);
    float ones[64], got[64];
    for (int i = 0; i < 64; i++)
        ones[i] = 1.0f;
    CHECK(kern_to_device(s, dbuf_ptr(b), ones, sizeof(ones)) == 0);
    CHECK(kern_scale(s, dbuf_ptr(b), 64, 3.0f) == 0);
    CHECK(stream_record(s, ev) == ERR_OK);
    bool done = device_event_done(ev);
    CHECK(done);
    if (done) { /* (waiting on a pending event would hang the test) */
        CHECK(device_event_wait(ev) == 0);
        CHECK(stream_wait_event(s, ev) == 0);
    }
    CHECK(stream_sync(s) == ERR_OK);
    CHECK(kern_to_host(s, got, dbuf_ptr(b), sizeof(got)) == 0);
    int wrong = 0;
    for (int i = 0; i < 64; i++)
        wrong += got[i] != 3.0f;
    CHECK(wrong == 0);

    /* a host-signalled failure reaches whoever waits, every time */
    device_event_reset(ev);
    CHECK(!device_event_done(ev));
    device_event_signal(ev, ERR_IO);
    CHECK(device_event_done(ev));
    CHECK(stream_wait_event(s, ev) == ERR_IO);
    CHECK(device_event_wait(ev) == ERR_IO);
    CHECK(stream_wait_event(s, ev) == ERR_IO);

    /* reset: pending again, and the old status is gone */
    device_event_reset(ev);
    CHECK(!device_event_done(ev));
    CHECK(stream_record(s, ev) == ERR_OK);
    done = device_event_done(ev);
    CHECK(done);
    if (done) {
        CHECK(device_event_wait(ev) == 0);
        CHECK(stream_wait_event(s, ev) == 0);
    }

    /* two events are independent */
    struct device_event *other = NULL;
    CHECK(device_event_create(d, &other) == ERR_OK);
    device_event_signal(other, ERR_NOT_FOUND);
    CHECK(device_event_wait(other) == ERR_NOT_FOUND);
    CHECK(device_event_done(ev));

    device_free(b);
    device_event_destroy(other);
    device_event_destroy(ev);
    device_event_destroy(NULL);
    device_stream_destroy(s);
    device_stream_destroy(NULL);
    device_close(d);
}

struct signaller {
    struct device_event *ev;
    int status;
};

static void *signaller_run(void *arg)
{
    struct signaller *g = arg;
    device_event_signal(g->ev, g->status);
    return NULL;
}

/* A compute stream waits for an h2d copy through the copy's event. The
 * link is held to 32 MiB/s, so the 8 MiB copy cannot complete before
 * 0.25 s after it was queued: the checks below hold whatever the timing,
 * and the wait is certainly a wait whenever the queueing thread gets to
 * it sooner. Then a failed load: a stream waiting on an event the host
 * signals with an error from another thread learns the error. */
TEST(stream_waits_copy)
{
    const size_t n = 8 * MiB;
    const double rate = 32.0 * (double)MiB;
    struct device *d = open_cpu(13, 16 * MiB);
    struct stream *s = NULL;
    CHECK(device_stream_create(d, &s) == ERR_OK);
    struct dbuf *b;
    CHECK(device_alloc(d, n, &b) == ERR_OK);
    void *src = NULL;
    CHECK(device_host_alloc(d, n, &src) == ERR_OK);
    fill_random(src, n, 1234);
    struct device_event *ev = NULL;
    CHECK(device_event_create(d, &ev) == ERR_OK);

    CHECK(device_cpu_set_link(d, -1.0) == ERR_INVALID);
    CHECK(device_cpu_set_link(NULL, 1.0) == ERR_UNSUPPORTED);
    CHECK(device_cpu_set_link(d, rate) == ERR_OK);
    double t0 = time_now();
    CHECK(device_copy_h2d(d, b, 0, src, n, ev) == ERR_OK);
    bool pending = !device_event_done(ev);
    double t1 = time_now();
    /* done this early only if the link let it through faster than its rate
     * (1 ms of slack for the pacing's rounding of its sleeps) */
    const double least = (double)n / rate - 1e-3;
    CHECK_MSG(pending || t1 - t0 >= least, "done after %.3f s", t1 - t0);
    CHECK(stream_wait_event(s, ev) == 0);
    /* the wait returned only once the copy was done */
    CHECK(device_event_done(ev));
    CHECK(time_now() - t0 >= least);
    CHECK(memcmp(dbuf_ptr(b), src, n) == 0);
    /* work queued after the wait sees the bytes, the last ones included */
    unsigned char tail[4096];
    CHECK(kern_to_host(s, tail, (char *)dbuf_ptr(b) + n - sizeof(tail), sizeof(tail)) == 0);
    CHECK(memcmp(tail, (char *)src + n - sizeof(tail), sizeof(tail)) == 0);
    CHECK(device_cpu_set_link(d, 0) == ERR_OK);
    /* nothing in flight below, even when the wait above did not wait */
    device_sync(d);

    /* a reset event serves the next copy */
    device_event_reset(ev);
    CHECK(!device_event_done(ev));
    void *back = NULL;
    CHECK(device_host_alloc(d, n, &back) == ERR_OK);
    CHECK(device_copy_d2h(d, back, b, 0, n, ev) == ERR_OK);
    CHECK(stream_wait_event(s, ev) == 0);
    CHECK(memcmp(back, src, n) == 0);

    /* a load that failed: signalled by another thread, before or after
     * the stream starts waiting; either way the stream gets the error */
    device_event_reset(ev);
    struct signaller g = {.ev = ev, .status = ERR_IO};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, signaller_run, &g) == 0);
    CHECK(stream_wait_event(s, ev) == ERR_IO);
    pthread_join(t, NULL);
    CHECK(device_event_wait(ev) == ERR_IO);

    device_sync(d);
    device_event_destroy(ev);
    device_host_free(d, src, n);
    device_host_free(d, back, n);
    device_free(b);
    device_stream_destroy(s);
    device_close(d);
}

TEST(cuda_stub)
{
    struct device *d = (struct device *)1;
    int rc = device_open_cuda(3, 0, 1 * MiB, &d);
    CHECK(rc < 0);
    CHECK(d == NULL);
    /* without CUDA the stub refuses every GPU; with it, this machine's
     * answer for a fourth GPU (none, or not that many) must name it */
    if (rc == ERR_UNSUPPORTED)
        CHECK_MSG(strncmp(err_msg(), "device cuda:3: built without CUDA support", 41) == 0,
                  "got \"%s\"", err_msg());
    else
        CHECK_MSG(strstr(err_msg(), "cuda:3") != NULL, "got \"%s\"", err_msg());
    device_close(d);
}

TEST(bad_budgets)
{
    struct device *d = (struct device *)1;
    CHECK(device_open_cpu(7, 0, &d) == ERR_INVALID);
    CHECK(d == NULL);
    CHECK(strstr(err_msg(), "device cpu:7") && strstr(err_msg(), "budget"));

    d = (struct device *)1;
    uint64_t huge = (uint64_t)1 << 60;
    CHECK(device_open_cpu(8, huge, &d) == ERR_NOMEM);
    CHECK(d == NULL);
    char num[32];
    snprintf(num, sizeof(num), "%" PRIu64, huge);
    CHECK_MSG(strstr(err_msg(), "device cpu:8") && strstr(err_msg(), num) &&
                  strstr(err_msg(), "physical memory"),
              "got \"%s\"", err_msg());

    CHECK(device_open_cpu(-1, 1 * MiB, &d) == ERR_INVALID);
    CHECK(d == NULL);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
