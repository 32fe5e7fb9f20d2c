/* The CPU device: an arena of host memory with a budget and a copy thread.
 *
 * The whole budget is mapped and touched once at open, as a GPU server
 * reserves device memory up front, so that allocations never fault pages in
 * later and a swap costs what the copy costs. Copies run one at a time, in
 * submission order, on the device's own thread: each device is one "link",
 * and devices copy in parallel with nothing shared between them.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "backend/arena.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_impl.h"
#include "backend/device.h"
#include "backend/device_impl.h"
#include "core/copy.h"
#include "core/error.h"
#include "core/event.h"
#include "core/hugemem.h"
#include "core/timing.h"
#include "core/workq.h"

static_assert(ARENA_ALIGN == DEVICE_ALIGN, "the arena hands out device-aligned blocks");

/* In AddressSanitizer builds the arena's free space is poisoned, so a
 * kernel or copy that runs past its buffer into free device memory, or
 * touches a freed buffer, is reported like a heap overflow. */
#if defined(__SANITIZE_ADDRESS__)
#define CPU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CPU_ASAN 1
#endif
#endif
#ifdef CPU_ASAN
#include <sanitizer/asan_interface.h>
#define cpu_poison(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define cpu_unpoison(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define cpu_poison(p, n) ((void)(p), (void)(n))
#define cpu_unpoison(p, n) ((void)(p), (void)(n))
#endif

/* One queued copy. */
struct cpu_copy {
    void *dst;
    const void *src;
    size_t n;
    struct device_event *ev; /* completed when done, or NULL */
    struct workq_item item;  /* in the copy stream */
};

struct cpu_device {
    char *base; /* the arena's memory: map_bytes, page aligned */
    size_t map_bytes;
    struct arena arena; /* guarded by the device lock (see device_impl.h) */

    /* The copy stream: a work queue (core/workq.h) of struct cpu_copy; a
     * sync is workq_sync, a wait for the copies queued before it. */
    struct workq copies;
    _Atomic double link_bytes_per_s; /* 0 = as fast as memory goes */
};

/* The copy engine of a CPU device is a core's time: at the lowest
 * priority it takes only what the compute threads leave, as a GPU's copy
 * engine takes nothing from its SMs. A load then fills the gaps of running
 * batches instead of slowing them (and their collectives) down. */
static void copy_thread_lower_priority(void)
{
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
}

/* A copy held to `rate` bytes/s, in 4 MiB pieces: an emulated host link
 * (PCIe-like) for experiments that need a GPU's ratio of swap to compute. */
static void copy_paced(void *dst, const void *src, size_t n, double rate)
{
    const size_t piece = (size_t)4 << 20;
    double t0 = time_now();
    for (size_t off = 0; off < n; off += piece) {
        size_t k = n - off < piece ? n - off : piece;
        copy_large((char *)dst + off, (const char *)src + off, k);
        double ahead = t0 + (double)(off + k) / rate - time_now();
        if (ahead > 0) {
            struct timespec ts = {.tv_sec = (time_t)ahead,
                                  .tv_nsec = (long)((ahead - (double)(time_t)ahead) * 1e9)};
            nanosleep(&ts, NULL);
        }
    }
}

/* The copy thread's setup (core/workq.h): the lowest priority, above. */
static void cpu_copy_thread_init(void *arg)
{
    (void)arg;
    copy_thread_lower_priority();
}

/* One copy, on the copy thread; its event set, its request freed. */
static void cpu_copy_run(struct workq_item *item, void *arg)
{
    struct cpu_device *c = arg;
    struct cpu_copy *r = queue_data(item, struct cpu_copy, item);
    /* one copy however large, by the method measured fastest on this
     * machine: the device's "DMA engine" */
    double rate = c->link_bytes_per_s;
    if (r->n > 0 && rate <= 0)
        copy_large(r->dst, r->src, r->n);
    else if (r->n > 0)
        copy_paced(r->dst, r->src, r->n, rate);
    if (r->ev)
        event_set(r->ev->ctx, 0);
    free(r);
}

static const struct workq_ops cpu_copy_ops = {.thread_init = cpu_copy_thread_init,
                                              .run = cpu_copy_run};

/* Stops the copy thread after it drains the queue and frees everything. */
static void cpu_ctx_destroy(struct cpu_device *c)
{
    workq_free(&c->copies); /* a no-op when it never started */
    arena_destroy(&c->arena);
    if (c->base) {
        cpu_unpoison(c->base, c->map_bytes);
        munmap(c->base, c->map_bytes);
    }
    free(c);
}

static int cpu_alloc(struct device *d, size_t bytes, void **out)
{
    struct cpu_device *c = d->ctx;
    uint64_t off;
    int rc = arena_alloc(&c->arena, bytes, &off);
    if (rc < 0)
        return rc;
    *out = c->base + off;
    cpu_unpoison(*out, bytes);
    return ERR_OK;
}

static int cpu_alloc_at(struct device *d, uint64_t off, size_t bytes, void **out)
{
    struct cpu_device *c = d->ctx;
    int rc = arena_alloc_at(&c->arena, off, bytes);
    if (rc < 0)
        return rc;
    *out = c->base + off;
    cpu_unpoison(*out, bytes);
    return ERR_OK;
}

static uint64_t cpu_offset(const struct device *d, const void *ptr)
{
    const struct cpu_device *c = d->ctx;
    return (uint64_t)((const char *)ptr - c->base);
}

static void cpu_free(struct device *d, void *ptr, size_t bytes)
{
    struct cpu_device *c = d->ctx;
    assert((char *)ptr >= c->base && (char *)ptr < c->base + c->map_bytes);
    arena_free(&c->arena, (uint64_t)((char *)ptr - c->base), bytes);
    cpu_poison(ptr, bytes);
}

static uint64_t cpu_largest_free(const struct device *d)
{
    const struct cpu_device *c = d->ctx;
    return arena_largest_free(&c->arena);
}

static size_t cpu_free_blocks(const struct device *d)
{
    const struct cpu_device *c = d->ctx;
    return arena_free_blocks(&c->arena);
}

/* Host-tier blobs of this size or more get their own mapping with huge
 * pages, as the arena has: copies between them then pay no TLB misses. */
#define HOST_MAP_MIN HUGEMEM_PAGE

/* Nothing to pin on a CPU: 64-byte aligned memory; large blocks are their
 * own mappings at a huge-page boundary, in huge pages where the kernel
 * allows (core/hugemem.h). */
static int cpu_host_alloc(struct device *d, size_t bytes, void **out)
{
    if (bytes >= HOST_MAP_MIN) {
        if (!(*out = hugemem_map(bytes)))
            return err_set(ERR_NOMEM, "device %s: cannot map %zu bytes of host memory: %s", d->name,
                           bytes, strerror(errno));
        return ERR_OK;
    }
    int rc = posix_memalign(out, DEVICE_ALIGN, bytes);
    if (rc != 0) {
        *out = NULL;
        return err_set(ERR_NOMEM, "device %s: cannot allocate %zu bytes of host memory: %s",
                       d->name, bytes, strerror(rc));
    }
    return ERR_OK;
}

static void cpu_host_free(struct device *d, void *p, size_t bytes)
{
    (void)d;
    if (bytes >= HOST_MAP_MIN)
        munmap(p, bytes);
    else
        free(p);
}

static int cpu_copy(struct device *d, void *dst, const void *src, size_t n,
                    struct device_event *ev)
{
    struct cpu_device *c = d->ctx;
    struct cpu_copy *r = malloc(sizeof(*r));
    if (!r)
        return err_set(ERR_NOMEM, "device %s: out of host memory to queue a copy", d->name);
    *r = (struct cpu_copy){.dst = dst, .src = src, .n = n, .ev = ev};
    workq_post(&c->copies, &r->item);
    return ERR_OK;
}

static void cpu_sync(struct device *d)
{
    struct cpu_device *c = d->ctx;
    workq_sync(&c->copies);
}

/* ---- events: a host event; the copy thread or the host completes it ---- */

static int cpu_event_create(struct device *d, struct device_event *ev)
{
    struct event *e = malloc(sizeof(*e));
    if (!e)
        return err_set(ERR_NOMEM, "device %s: out of host memory for an event", d->name);
    event_init(e);
    ev->ctx = e;
    return ERR_OK;
}

static void cpu_event_destroy(struct device_event *ev)
{
    event_destroy(ev->ctx);
    free(ev->ctx);
}

static void cpu_event_reset(struct device_event *ev)
{
    event_reset(ev->ctx);
}

static void cpu_event_signal(struct device_event *ev, int status)
{
    event_set(ev->ctx, status);
}

static int cpu_event_wait(struct device_event *ev)
{
    return event_wait(ev->ctx);
}

static bool cpu_event_done(const struct device_event *ev)
{
    return event_is_set(ev->ctx);
}

/* ---- compute streams: kernels run on the caller, so a stream has no state
 * and its work is done when a call returns ---- */

/* Devices compute in parallel, one core each: this thread runs its kernels
 * alone, and BLAS (process-wide) uses one thread per caller. */
static pthread_once_t cpu_blas_once = PTHREAD_ONCE_INIT;

static void cpu_blas_one_thread(void)
{
    cpu_set_threads(1);
}

static void cpu_compute_thread_init(struct device *d)
{
    (void)d;
    cpu_kernels_single_thread(true);
    pthread_once(&cpu_blas_once, cpu_blas_one_thread);
}

static int cpu_stream_create(struct device *d, struct stream *s)
{
    (void)d;
    s->ctx = NULL;
    return ERR_OK;
}

static void cpu_stream_destroy(struct stream *s)
{
    (void)s;
}

static int cpu_stream_record(struct stream *s, struct device_event *ev)
{
    (void)s;
    event_set(ev->ctx, 0);
    return ERR_OK;
}

/* The host waits: the calling thread is the stream. */
static int cpu_stream_wait_event(struct stream *s, struct device_event *ev)
{
    (void)s;
    return event_wait(ev->ctx);
}

static int cpu_stream_sync(struct stream *s)
{
    (void)s;
    return ERR_OK;
}

static void cpu_close(struct device *d)
{
    cpu_ctx_destroy(d->ctx);
    d->ctx = NULL;
}

static const struct device_ops cpu_ops = {
    .kind = DEVICE_CPU,
    .alloc = cpu_alloc,
    .alloc_at = cpu_alloc_at,
    .offset = cpu_offset,
    .free = cpu_free,
    .largest_free = cpu_largest_free,
    .free_blocks = cpu_free_blocks,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_host_free,
    .copy_h2d = cpu_copy,
    .copy_d2h = cpu_copy,
    .sync = cpu_sync,
    .close = cpu_close,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_reset = cpu_event_reset,
    .event_signal = cpu_event_signal,
    .event_wait = cpu_event_wait,
    .event_done = cpu_event_done,
    .compute_thread_init = cpu_compute_thread_init,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_record = cpu_stream_record,
    .stream_wait_event = cpu_stream_wait_event,
    .stream_sync = cpu_stream_sync,
};

/* Maps budget bytes and faults every page in. The weights computed from
 * live here (serve's resident models, a swap-in's copies, the one-device
 * commands' whole model), so the map starts at a huge-page boundary with
 * transparent huge pages asked for (core/hugemem.h: 1.5x faster weight
 * streams on the Xeon of docs/performance.md); where the kernel refuses
 * them, 4 KiB pages work the same, slower. */
static int cpu_map_arena(struct cpu_device *c, const char *name, uint64_t budget)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    c->map_bytes = (size_t)((budget + page - 1) / page * page);
    void *p = hugemem_map(c->map_bytes);
    if (!p)
        return err_set(ERR_NOMEM, "device %s: cannot map a %" PRIu64 "-byte arena: %s", name,
                       budget, strerror(errno));
    c->base = p;
    volatile char *v = (volatile char *)c->base;
    for (size_t off = 0; off < c->map_bytes; off += page)
        v[off] = 0;
    cpu_poison(c->base, c->map_bytes);
    return ERR_OK;
}

int device_open_cpu(int index, uint64_t budget_bytes, struct device **out)
{
    assert(out);
    *out = NULL;
    char name[32];
    snprintf(name, sizeof(name), "cpu:%d", index);
    if (index < 0)
        return err_set(ERR_INVALID, "device %s: index must be >= 0", name);
    if (budget_bytes == 0)
        return err_set(ERR_INVALID, "device %s: budget must be more than 0 bytes", name);
    uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    if (budget_bytes > phys)
        return err_set(ERR_NOMEM,
                       "device %s: budget of %" PRIu64 " bytes exceeds the %" PRIu64
                       " bytes of physical memory",
                       name, budget_bytes, phys);

    /* the copy engine's method: measured once per process, here rather than
     * on the first copy so that no swap-in pays for it */
    (void)copy_choose();

    struct cpu_device *c = calloc(1, sizeof(*c));
    if (!c)
        return err_set(ERR_NOMEM, "device %s: out of host memory", name);

    int rc = cpu_map_arena(c, name, budget_bytes);
    if (rc < 0)
        goto fail;
    rc = arena_init(&c->arena, budget_bytes);
    if (rc < 0) {
        err_wrap(rc, "device %s", name);
        goto fail;
    }
    char tname[16]; /* the kernel keeps 15 characters */
    snprintf(tname, sizeof(tname), "copy-cpu:%u", (unsigned)index % 1000000u);
    if ((rc = workq_init(&c->copies, tname, &cpu_copy_ops, c)) < 0) {
        err_wrap(rc, "device %s", name);
        goto fail;
    }

    rc = device_create(&cpu_ops, &cpu_kernel_ops, c, name, budget_bytes, out);
    if (rc < 0)
        goto fail;
    return ERR_OK;

fail:
    cpu_ctx_destroy(c);
    return rc;
}

int device_cpu_memory(uint64_t *avail, uint64_t *total)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    *total = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    *avail = *total;
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    unsigned long long kib;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
            *avail = (uint64_t)kib * 1024;
            break;
        }
    if (f)
        fclose(f);
    if (*total == 0)
        return err_set(ERR_IO, "the machine's memory is unknown (sysconf and /proc/meminfo)");
    *avail = *avail < *total ? *avail : *total;
    return 0;
}

int device_cpu_set_link(struct device *d, double bytes_per_s)
{
    if (!d || d->ops != &cpu_ops)
        return err_set(ERR_UNSUPPORTED, "an emulated link rate needs a CPU device");
    if (!(bytes_per_s >= 0))
        return err_set(ERR_INVALID, "device %s: link rate must be >= 0 bytes/s", d->name);
    struct cpu_device *c = d->ctx;
    c->link_bytes_per_s = bytes_per_s;
    return 0;
}
