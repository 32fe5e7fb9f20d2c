/* The CUDA device (device_ops): a budget of one GPU's memory, two copy
 * streams, events and compute streams.
 *
 * - Memory: the whole budget is one cudaMalloc at open, carved by
 *   backend/arena.h (first fit, coalescing) under the device lock that
 *   device.c holds around alloc/free. No cudaMalloc or cudaFree per
 *   allocation, so allocating never synchronizes the GPU, and running out
 *   of the budget is an error, never an abort. Partitions of one GPU
 *   (part > 0) are separate devices, each with its own cudaMalloc.
 * - Host tier: pinned memory from the device's pool (cuda_host.c).
 * - Copies: host->device on the H2D stream, device->host on the D2H stream
 *   (both non-blocking streams of this device), so loads and offloads
 *   overlap each other and compute. A copy's event is recorded on its
 *   stream right after it. A D2H copy first makes the D2H stream wait for
 *   the H2D copies queued before it, so a device->host copy sees every
 *   host->device copy submitted earlier (device.h: copies complete in
 *   submission order); an H2D copy does not wait for earlier D2H copies
 *   (the swap manager never overwrites memory a queued copy still reads).
 * - Events: a state (PENDING, RECORDED, SIGNALLED) and status under a
 *   mutex, plus a cudaEvent. A CUDA event that was never recorded counts as
 *   complete for cudaStreamWaitEvent, so every wait first blocks the host
 *   until the event is recorded or signalled; once recorded, the compute
 *   stream waits on the copy on the GPU, without the host in between.
 * - Compute streams: struct cuda_stream (cuda_impl.h), a non-blocking CUDA
 *   stream plus the kernels' per-stream state.
 *
 * Threads: loaders queue copies and record events, compute threads wait
 * on events and queue kernels, the engine polls events: every entry point
 * first makes the device's GPU current on the calling thread. No lock is
 * held across a CUDA call that waits for the GPU, except copy_lock around a
 * copy of pageable memory (see struct cuda_device).
 */
#include <assert.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/arena.h"
#include "backend/cuda/cuda_host.h"
#include "backend/cuda/cuda_impl.h"
#include "backend/device.h"
#include "backend/device_impl.h"
#include "core/error.h"

static_assert(ARENA_ALIGN == DEVICE_ALIGN, "the arena hands out device-aligned blocks");

struct cuda_device {
    int gpu;
    char label[48];     /* "device cuda:0.1": how messages name the device */
    char *base;         /* the budget: one cudaMalloc */
    struct arena arena; /* offsets into base; guarded by the device lock */
    cudaStream_t h2d, d2h;
    /* Serializes copy submissions, so that a copy and its event's record are
     * adjacent on the stream and h2d_tail marks every H2D copy queued before
     * a D2H copy. Held only while queuing, except that a copy to or from
     * pageable memory (the runtime stages it) may wait for the GPU under it;
     * the host tier is pinned, so loads and offloads never do. */
    pthread_mutex_t copy_lock;
    cudaEvent_t h2d_tail;
    struct cuda_host_pool host;
    bool host_init;
    atomic_bool logged; /* a failure in a void slot was reported once */
};

enum cuda_event_state { EV_PENDING, EV_RECORDED, EV_SIGNALLED };

/* struct device_event's ctx. */
struct cuda_event {
    pthread_mutex_t lock; /* guards state and status */
    pthread_cond_t cond;  /* state left EV_PENDING */
    enum cuda_event_state state;
    int status; /* EV_SIGNALLED's */
    cudaEvent_t e;
};

/* A failed CUDA call in a slot that cannot return it (void or bool): the
 * first one per device goes to stderr; later ones are likely its echo (a
 * sticky error fails every call after it). */
static void cuda_log(struct cuda_device *c, const char *call, cudaError_t e)
{
    (void)cudaGetLastError();
    if (!atomic_exchange(&c->logged, true))
        fprintf(stderr, "%s: %s: %s (%s)\n", c->label, call, cudaGetErrorString(e),
                cudaGetErrorName(e));
}

static void cuda_set_device_or_log(struct cuda_device *c)
{
    cudaError_t e = cudaSetDevice(c->gpu);
    if (e != cudaSuccess)
        cuda_log(c, "cudaSetDevice", e);
}

/* ---- memory ---- */

static int cuda_alloc(struct device *d, size_t bytes, void **out)
{
    struct cuda_device *c = d->ctx;
    uint64_t off;
    int rc = arena_alloc(&c->arena, bytes, &off);
    if (rc < 0)
        return rc;
    *out = c->base + off;
    return ERR_OK;
}

static int cuda_alloc_at(struct device *d, uint64_t off, size_t bytes, void **out)
{
    struct cuda_device *c = d->ctx;
    int rc = arena_alloc_at(&c->arena, off, bytes);
    if (rc < 0)
        return rc;
    *out = c->base + off;
    return ERR_OK;
}

static uint64_t cuda_offset(const struct device *d, const void *ptr)
{
    const struct cuda_device *c = d->ctx;
    return (uint64_t)((const char *)ptr - c->base);
}

const struct kernel_ops *cuda_kernel_table(void)
{
    return &cuda_kernel_ops;
}

static void cuda_free(struct device *d, void *ptr, size_t bytes)
{
    struct cuda_device *c = d->ctx;
    assert((char *)ptr >= c->base && (char *)ptr < c->base + c->arena.size);
    arena_free(&c->arena, (uint64_t)((char *)ptr - c->base), bytes);
}

static uint64_t cuda_largest_free(const struct device *d)
{
    const struct cuda_device *c = d->ctx;
    return arena_largest_free(&c->arena);
}

static size_t cuda_free_blocks(const struct device *d)
{
    const struct cuda_device *c = d->ctx;
    return arena_free_blocks(&c->arena);
}

static int cuda_host_alloc(struct device *d, size_t bytes, void **out)
{
    struct cuda_device *c = d->ctx;
    *out = NULL;
    CUDA_CHECK(c->label, cudaSetDevice(c->gpu));
    return cuda_host_pool_alloc(&c->host, bytes, out);
}

static void cuda_host_free(struct device *d, void *p, size_t bytes)
{
    struct cuda_device *c = d->ctx;
    cuda_host_pool_free(&c->host, p, bytes);
}

/* ---- events ---- */

static struct cuda_event *cuda_ev(const struct device_event *ev)
{
    return ev->ctx;
}

/* ev's cudaEvent was just recorded: wake whoever waits for that. */
static void cuda_event_mark_recorded(struct cuda_event *ce)
{
    pthread_mutex_lock(&ce->lock);
    ce->state = EV_RECORDED;
    ce->status = 0;
    pthread_cond_broadcast(&ce->cond);
    pthread_mutex_unlock(&ce->lock);
}

/* Blocks until ev is recorded or signalled; returns the state, and the
 * status through *status. */
static enum cuda_event_state cuda_event_wait_known(struct cuda_event *ce, int *status)
{
    pthread_mutex_lock(&ce->lock);
    while (ce->state == EV_PENDING)
        pthread_cond_wait(&ce->cond, &ce->lock);
    enum cuda_event_state st = ce->state;
    *status = ce->status;
    pthread_mutex_unlock(&ce->lock);
    return st;
}

static int cuda_event_create(struct device *d, struct device_event *ev)
{
    struct cuda_device *c = d->ctx;
    CUDA_CHECK(c->label, cudaSetDevice(c->gpu));
    struct cuda_event *ce = calloc(1, sizeof(*ce));
    if (!ce)
        return err_set(ERR_NOMEM, "%s: out of host memory for an event", c->label);
    cudaError_t e = cudaEventCreateWithFlags(&ce->e, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        free(ce);
        return cuda_error(c->label, "cudaEventCreateWithFlags", e);
    }
    pthread_mutex_init(&ce->lock, NULL);
    pthread_cond_init(&ce->cond, NULL);
    ce->state = EV_PENDING;
    ev->ctx = ce;
    return ERR_OK;
}

static void cuda_event_destroy(struct device_event *ev)
{
    struct cuda_device *c = ev->dev->ctx;
    struct cuda_event *ce = cuda_ev(ev);
    cuda_set_device_or_log(c);
    cudaError_t e = cudaEventDestroy(ce->e);
    if (e != cudaSuccess)
        cuda_log(c, "cudaEventDestroy", e);
    pthread_cond_destroy(&ce->cond);
    pthread_mutex_destroy(&ce->lock);
    free(ce);
    ev->ctx = NULL;
}

/* The cudaEvent needs no reset: the next record replaces the last. */
static void cuda_event_reset(struct device_event *ev)
{
    struct cuda_event *ce = cuda_ev(ev);
    pthread_mutex_lock(&ce->lock);
    ce->state = EV_PENDING;
    ce->status = 0;
    pthread_mutex_unlock(&ce->lock);
}

static void cuda_event_signal(struct device_event *ev, int status)
{
    struct cuda_event *ce = cuda_ev(ev);
    pthread_mutex_lock(&ce->lock);
    ce->state = EV_SIGNALLED;
    ce->status = status;
    pthread_cond_broadcast(&ce->cond);
    pthread_mutex_unlock(&ce->lock);
}

static int cuda_event_wait(struct device_event *ev)
{
    struct cuda_device *c = ev->dev->ctx;
    struct cuda_event *ce = cuda_ev(ev);
    int status;
    if (cuda_event_wait_known(ce, &status) == EV_SIGNALLED)
        return status;
    CUDA_CHECK(c->label, cudaSetDevice(c->gpu));
    CUDA_CHECK(c->label, cudaEventSynchronize(ce->e));
    return ERR_OK;
}

/* A failed query counts as done: waiting on the event then reports the
 * error, where polling for it would never end. */
static bool cuda_event_done(const struct device_event *ev)
{
    struct cuda_device *c = ev->dev->ctx;
    struct cuda_event *ce = cuda_ev(ev);
    pthread_mutex_lock(&ce->lock);
    enum cuda_event_state st = ce->state;
    pthread_mutex_unlock(&ce->lock);
    if (st != EV_RECORDED)
        return st == EV_SIGNALLED;
    cuda_set_device_or_log(c);
    cudaError_t e = cudaEventQuery(ce->e);
    if (e == cudaSuccess)
        return true;
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError(); /* not an error: keep it out of the next launch check */
        return false;
    }
    cuda_log(c, "cudaEventQuery", e);
    return true;
}

/* ---- copies ---- */

static int cuda_copy(struct device *d, void *dst, const void *src, size_t n,
                     struct device_event *ev, bool to_device)
{
    struct cuda_device *c = d->ctx;
    CUDA_CHECK(c->label, cudaSetDevice(c->gpu));
    cudaStream_t st = to_device ? c->h2d : c->d2h;
    const char *call = NULL;
    cudaError_t e = cudaSuccess;

    pthread_mutex_lock(&c->copy_lock);
    if (!to_device) { /* see every earlier H2D copy (top of the file) */
        e = cudaEventRecord(c->h2d_tail, c->h2d);
        call = "cudaEventRecord(h2d_tail)";
        if (e == cudaSuccess) {
            e = cudaStreamWaitEvent(c->d2h, c->h2d_tail, 0);
            call = "cudaStreamWaitEvent(d2h, h2d_tail)";
        }
    }
    if (e == cudaSuccess && n > 0) {
        e = cudaMemcpyAsync(dst, src, n,
                            to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, st);
        call = to_device ? "cudaMemcpyAsync(host to device)" : "cudaMemcpyAsync(device to host)";
    }
    if (e == cudaSuccess && ev) {
        e = cudaEventRecord(cuda_ev(ev)->e, st);
        call = "cudaEventRecord";
    }
    pthread_mutex_unlock(&c->copy_lock);

    if (e != cudaSuccess)
        return cuda_error(c->label, call, e);
    if (ev)
        cuda_event_mark_recorded(cuda_ev(ev));
    return ERR_OK;
}

static int cuda_copy_h2d(struct device *d, void *dst, const void *src, size_t n,
                         struct device_event *ev)
{
    return cuda_copy(d, dst, src, n, ev, true);
}

static int cuda_copy_d2h(struct device *d, void *dst, const void *src, size_t n,
                         struct device_event *ev)
{
    return cuda_copy(d, dst, src, n, ev, false);
}

static void cuda_sync(struct device *d)
{
    struct cuda_device *c = d->ctx;
    cuda_set_device_or_log(c);
    cudaError_t e = cudaStreamSynchronize(c->h2d);
    if (e != cudaSuccess)
        cuda_log(c, "cudaStreamSynchronize(h2d)", e);
    e = cudaStreamSynchronize(c->d2h);
    if (e != cudaSuccess)
        cuda_log(c, "cudaStreamSynchronize(d2h)", e);
}

/* ---- compute streams ---- */

static struct cuda_stream *cuda_st(const struct stream *s)
{
    return s->ctx;
}

static void cuda_compute_thread_init(struct device *d)
{
    cuda_set_device_or_log(d->ctx);
}

static int cuda_stream_create(struct device *d, struct stream *s)
{
    struct cuda_device *c = d->ctx;
    CUDA_CHECK(c->label, cudaSetDevice(c->gpu));
    struct cuda_stream *cs = calloc(1, sizeof(*cs));
    if (!cs)
        return err_set(ERR_NOMEM, "%s: out of host memory for a stream", c->label);
    cudaError_t e = cudaStreamCreateWithFlags(&cs->s, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        free(cs);
        return cuda_error(c->label, "cudaStreamCreateWithFlags", e);
    }
    cs->gpu = c->gpu;
    cs->kern = NULL;
    s->ctx = cs;
    int rc = cuda_kernels_stream_init(s);
    if (rc < 0) {
        (void)cudaStreamDestroy(cs->s);
        (void)cudaGetLastError();
        free(cs);
        s->ctx = NULL;
        return rc;
    }
    return ERR_OK;
}

/* device.c has waited for the stream's work. */
static void cuda_stream_destroy(struct stream *s)
{
    struct cuda_device *c = s->dev->ctx;
    struct cuda_stream *cs = cuda_st(s);
    cuda_set_device_or_log(c);
    cuda_kernels_stream_free(s);
    cudaError_t e = cudaStreamDestroy(cs->s);
    if (e != cudaSuccess)
        cuda_log(c, "cudaStreamDestroy", e);
    free(cs);
    s->ctx = NULL;
}

static int cuda_stream_record(struct stream *s, struct device_event *ev)
{
    struct cuda_device *c = s->dev->ctx;
    CUDA_CHECK(c->label, cudaSetDevice(c->gpu));
    CUDA_CHECK(c->label, cudaEventRecord(cuda_ev(ev)->e, cuda_st(s)->s));
    cuda_event_mark_recorded(cuda_ev(ev));
    return ERR_OK;
}

/* Blocks the host only while ev is neither recorded nor signalled (a
 * cudaStreamWaitEvent on a never-recorded event would not wait at all);
 * after that the GPU waits, not the host. */
static int cuda_stream_wait_event(struct stream *s, struct device_event *ev)
{
    struct cuda_device *c = s->dev->ctx;
    int status;
    if (cuda_event_wait_known(cuda_ev(ev), &status) == EV_SIGNALLED)
        return status;
    CUDA_CHECK(c->label, cudaSetDevice(c->gpu));
    CUDA_CHECK(c->label, cudaStreamWaitEvent(cuda_st(s)->s, cuda_ev(ev)->e, 0));
    return ERR_OK;
}

static int cuda_stream_sync(struct stream *s)
{
    struct cuda_device *c = s->dev->ctx;
    CUDA_CHECK(c->label, cudaSetDevice(c->gpu));
    CUDA_CHECK(c->label, cudaStreamSynchronize(cuda_st(s)->s));
    return ERR_OK;
}

/* ---- open and close ---- */

/* Frees whatever of c exists (a failed open's, or close's). */
static void cuda_ctx_destroy(struct cuda_device *c)
{
    cuda_set_device_or_log(c);
    cudaError_t e;
    if (c->h2d && (e = cudaStreamSynchronize(c->h2d)) != cudaSuccess)
        cuda_log(c, "cudaStreamSynchronize(h2d)", e);
    if (c->d2h && (e = cudaStreamSynchronize(c->d2h)) != cudaSuccess)
        cuda_log(c, "cudaStreamSynchronize(d2h)", e);
    if (c->host_init)
        cuda_host_pool_destroy(&c->host);
    if (c->h2d_tail && (e = cudaEventDestroy(c->h2d_tail)) != cudaSuccess)
        cuda_log(c, "cudaEventDestroy(h2d_tail)", e);
    if (c->h2d && (e = cudaStreamDestroy(c->h2d)) != cudaSuccess)
        cuda_log(c, "cudaStreamDestroy(h2d)", e);
    if (c->d2h && (e = cudaStreamDestroy(c->d2h)) != cudaSuccess)
        cuda_log(c, "cudaStreamDestroy(d2h)", e);
    if (c->base && (e = cudaFree(c->base)) != cudaSuccess)
        cuda_log(c, "cudaFree", e);
    arena_destroy(&c->arena);
    pthread_mutex_destroy(&c->copy_lock);
    free(c);
}

static void cuda_close(struct device *d)
{
    cuda_ctx_destroy(d->ctx);
    d->ctx = NULL;
}

static const struct device_ops cuda_ops = {
    .kind = DEVICE_CUDA,
    .alloc = cuda_alloc,
    .alloc_at = cuda_alloc_at,
    .offset = cuda_offset,
    .free = cuda_free,
    .largest_free = cuda_largest_free,
    .free_blocks = cuda_free_blocks,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .copy_h2d = cuda_copy_h2d,
    .copy_d2h = cuda_copy_d2h,
    .sync = cuda_sync,
    .close = cuda_close,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_reset = cuda_event_reset,
    .event_signal = cuda_event_signal,
    .event_wait = cuda_event_wait,
    .event_done = cuda_event_done,
    .compute_thread_init = cuda_compute_thread_init,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_record = cuda_stream_record,
    .stream_wait_event = cuda_stream_wait_event,
    .stream_sync = cuda_stream_sync,
};

/* The budget, the copy streams and the pool of a device on GPU c->gpu,
 * which is current. */
static int cuda_ctx_init(struct cuda_device *c, uint64_t budget)
{
    CUDA_CHECK(c->label, cudaMalloc((void **)&c->base, (size_t)budget));
    int rc = arena_init(&c->arena, budget);
    if (rc < 0)
        return err_wrap(rc, "%s", c->label);
    CUDA_CHECK(c->label, cudaStreamCreateWithFlags(&c->h2d, cudaStreamNonBlocking));
    CUDA_CHECK(c->label, cudaStreamCreateWithFlags(&c->d2h, cudaStreamNonBlocking));
    CUDA_CHECK(c->label, cudaEventCreateWithFlags(&c->h2d_tail, cudaEventDisableTiming));
    cuda_host_pool_init(&c->host, c->gpu, c->label);
    c->host_init = true;
    return ERR_OK;
}

/* GPU gpu exists and is made current, and its free and total memory read:
 * 0, or the error naming label and what the machine has. */
static int gpu_memory(int gpu, const char *label, size_t *free_b, size_t *total_b)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return err_set(ERR_DEVICE, "%s: no usable CUDA GPU: %s (%s)", label, cudaGetErrorString(e),
                       cudaGetErrorName(e));
    }
    if (gpu >= count && count == 0)
        return err_set(ERR_INVALID, "%s: no such GPU: this machine has no CUDA GPU", label);
    if (gpu >= count && count == 1)
        return err_set(ERR_INVALID, "%s: no such GPU: this machine has 1 CUDA GPU (cuda:0)", label);
    if (gpu >= count)
        return err_set(ERR_INVALID,
                       "%s: no such GPU: this machine has %d CUDA GPUs (cuda:0 to cuda:%d)", label,
                       count, count - 1);
    CUDA_CHECK(label, cudaSetDevice(gpu));
    CUDA_CHECK(label, cudaMemGetInfo(free_b, total_b));
    return 0;
}

int device_cuda_memory(int gpu, uint64_t *free_bytes, uint64_t *total)
{
    *free_bytes = *total = 0;
    char label[48];
    snprintf(label, sizeof(label), "device cuda:%d", gpu);
    if (gpu < 0)
        return err_set(ERR_INVALID, "%s: GPU must be >= 0", label);
    size_t f = 0, t = 0;
    int rc = gpu_memory(gpu, label, &f, &t);
    if (rc < 0)
        return rc;
    *free_bytes = f;
    *total = t;
    return 0;
}

int device_open_cuda(int gpu, int part, uint64_t budget_bytes, struct device **out)
{
    assert(out);
    *out = NULL;
    char name[32], label[48];
    if (part > 0)
        snprintf(name, sizeof(name), "cuda:%d.%d", gpu, part);
    else
        snprintf(name, sizeof(name), "cuda:%d", gpu);
    snprintf(label, sizeof(label), "device %s", name);
    if (gpu < 0 || part < 0)
        return err_set(ERR_INVALID, "%s: GPU and partition must be >= 0", label);
    if (budget_bytes == 0)
        return err_set(ERR_INVALID, "%s: budget must be more than 0 bytes", label);

    size_t free_b = 0, total_b = 0;
    int grc = gpu_memory(gpu, label, &free_b, &total_b);
    if (grc < 0)
        return grc;
    if (budget_bytes > free_b)
        return err_set(ERR_NOMEM,
                       "%s: budget of %" PRIu64 " bytes exceeds the %zu bytes free on GPU %d "
                       "(of %zu)",
                       label, budget_bytes, free_b, gpu, total_b);

    struct cuda_device *c = calloc(1, sizeof(*c));
    if (!c)
        return err_set(ERR_NOMEM, "%s: out of host memory", label);
    c->gpu = gpu;
    snprintf(c->label, sizeof(c->label), "%s", label);
    pthread_mutex_init(&c->copy_lock, NULL);
    atomic_init(&c->logged, false);

    int rc = cuda_ctx_init(c, budget_bytes);
    if (rc < 0)
        goto fail;
    rc = device_create(&cuda_ops, &cuda_kernel_ops, c, name, budget_bytes, out);
    if (rc < 0)
        goto fail;
    return ERR_OK;

fail:
    cuda_ctx_destroy(c);
    return rc;
}

int cuda_device_gpu(const struct device *d)
{
    assert(d && d->ops == &cuda_ops);
    const struct cuda_device *c = d->ctx;
    return c->gpu;
}

cudaStream_t cuda_stream_handle(const struct stream *s)
{
    assert(s && s->dev->ops == &cuda_ops);
    return cuda_st(s)->s;
}
