/* A device of another process (backend/device.h: device_open_view): the
 * view rank 0's swap manager and scheduler keep of a device that a process
 * under mpirun owns. Its memory is an arena of offsets with nothing behind
 * them: an allocation here is a placement that the owner carries out at
 * the same offset (device_alloc_at, arena_alloc_at), so this view's free
 * bytes, largest free block and fragmentation are the owner's, with no
 * round trip. Its dbufs' pointers are tokens (offset + DEVICE_ALIGN, never
 * dereferenced; dbuf_offset reads them back). Its events are host events,
 * which the messages from the owner signal. Copies and compute streams are
 * the owner's: here they are refused, naming the process.
 *
 * The kernel table is the one of the owner's kind in this process (CPU, or
 * CUDA when built with it; every process of a job runs the same program),
 * read only to size a batch's scratch exactly as the owner will
 * (model_exec_bytes) and to say what the owner's kernels run
 * (kern_supports, which registration checks); no kernel ever runs on this
 * device. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/arena.h"
#include "backend/cpu/cpu_impl.h"
#include "backend/device.h"
#include "backend/device_impl.h"
#include "core/error.h"
#include "core/event.h"

struct remote_ctx {
    struct arena arena;
    int proc;
};

static int remote_alloc(struct device *d, size_t bytes, void **out)
{
    struct remote_ctx *c = d->ctx;
    uint64_t off = 0;
    if (arena_alloc(&c->arena, bytes, &off) < 0)
        return ERR_NOMEM;
    *out = (void *)(uintptr_t)(off + DEVICE_ALIGN);
    return 0;
}

static int remote_alloc_at(struct device *d, uint64_t off, size_t bytes, void **out)
{
    struct remote_ctx *c = d->ctx;
    if (arena_alloc_at(&c->arena, off, bytes) < 0)
        return ERR_NOMEM;
    *out = (void *)(uintptr_t)(off + DEVICE_ALIGN);
    return 0;
}

static uint64_t remote_offset(const struct device *d, const void *ptr)
{
    (void)d;
    return (uint64_t)(uintptr_t)ptr - DEVICE_ALIGN;
}

static void remote_free(struct device *d, void *ptr, size_t bytes)
{
    struct remote_ctx *c = d->ctx;
    arena_free(&c->arena, remote_offset(d, ptr), bytes);
}

static uint64_t remote_largest_free(const struct device *d)
{
    return arena_largest_free(&((const struct remote_ctx *)d->ctx)->arena);
}

static size_t remote_free_blocks(const struct device *d)
{
    return arena_free_blocks(&((const struct remote_ctx *)d->ctx)->arena);
}

static int remote_refuse(const struct device *d, const char *what)
{
    const struct remote_ctx *c = d->ctx;
    return err_set(ERR_UNSUPPORTED, "device %s is process %d's: its %s happen there", d->name,
                   c->proc, what);
}

static int remote_host_alloc(struct device *d, size_t bytes, void **out)
{
    (void)bytes;
    *out = NULL;
    return remote_refuse(d, "host copies");
}

static void remote_host_free(struct device *d, void *p, size_t bytes)
{
    (void)d, (void)p, (void)bytes;
}

static int remote_copy(struct device *d, void *dst, const void *src, size_t n,
                       struct device_event *ev)
{
    (void)dst, (void)src, (void)n, (void)ev;
    return remote_refuse(d, "copies");
}

static void remote_sync(struct device *d)
{
    (void)d;
}

/* Events: a host event each, signalled when the owner reports. */
static int remote_event_create(struct device *d, struct device_event *ev)
{
    (void)d;
    struct event *e = malloc(sizeof *e);
    if (!e)
        return err_set(ERR_NOMEM, "out of memory for an event");
    event_init(e);
    ev->ctx = e;
    return 0;
}

static void remote_event_destroy(struct device_event *ev)
{
    event_destroy(ev->ctx);
    free(ev->ctx);
}

static void remote_event_reset(struct device_event *ev)
{
    event_reset(ev->ctx);
}

static void remote_event_signal(struct device_event *ev, int status)
{
    event_set(ev->ctx, status);
}

static int remote_event_wait(struct device_event *ev)
{
    return event_wait(ev->ctx);
}

static bool remote_event_done(const struct device_event *ev)
{
    return event_is_set(ev->ctx);
}

static int remote_stream_create(struct device *d, struct stream *s)
{
    (void)s;
    return remote_refuse(d, "computations");
}

static void remote_stream_destroy(struct stream *s)
{
    (void)s;
}

static int remote_stream_record(struct stream *s, struct device_event *ev)
{
    (void)ev;
    return remote_refuse(s->dev, "computations");
}

static int remote_stream_wait_event(struct stream *s, struct device_event *ev)
{
    (void)ev;
    return remote_refuse(s->dev, "computations");
}

static int remote_stream_sync(struct stream *s)
{
    return remote_refuse(s->dev, "computations");
}

static void remote_close(struct device *d)
{
    struct remote_ctx *c = d->ctx;
    arena_destroy(&c->arena);
    free(c);
}

#define REMOTE_OPS(KIND)                                                                           \
    {                                                                                              \
        .kind = KIND, .alloc = remote_alloc, .alloc_at = remote_alloc_at, .offset = remote_offset, \
        .free = remote_free, .largest_free = remote_largest_free,                                  \
        .free_blocks = remote_free_blocks, .host_alloc = remote_host_alloc,                        \
        .host_free = remote_host_free, .copy_h2d = remote_copy, .copy_d2h = remote_copy,           \
        .sync = remote_sync, .event_create = remote_event_create,                                  \
        .event_destroy = remote_event_destroy, .event_reset = remote_event_reset,                  \
        .event_signal = remote_event_signal, .event_wait = remote_event_wait,                      \
        .event_done = remote_event_done, .stream_create = remote_stream_create,                    \
        .stream_destroy = remote_stream_destroy, .stream_record = remote_stream_record,            \
        .stream_wait_event = remote_stream_wait_event, .stream_sync = remote_stream_sync,          \
        .close = remote_close,                                                                     \
    }
static const struct device_ops remote_cpu_ops = REMOTE_OPS(DEVICE_CPU);
static const struct device_ops remote_cuda_ops = REMOTE_OPS(DEVICE_CUDA);

int device_open_view(int proc, enum device_kind kind, const char *name, uint64_t budget_bytes,
                     struct device **out)
{
    *out = NULL;
    const struct kernel_ops *kern = kind == DEVICE_CPU ? &cpu_kernel_ops : cuda_kernel_table();
    char full[32];
    snprintf(full, sizeof full, "%d/%s", proc, name);
    if (!kern)
        return err_set(ERR_UNSUPPORTED,
                       "device %s: this process was built without CUDA, so it cannot size "
                       "batches for a CUDA device of process %d",
                       full, proc);
    struct remote_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return err_set(ERR_NOMEM, "device %s: out of memory", full);
    c->proc = proc;
    int rc = arena_init(&c->arena, budget_bytes);
    if (rc == 0)
        rc = device_create(kind == DEVICE_CPU ? &remote_cpu_ops : &remote_cuda_ops, kern, c, full,
                           budget_bytes, out);
    if (rc < 0) {
        arena_destroy(&c->arena);
        free(c);
        return rc;
    }
    (*out)->proc = proc;
    return 0;
}
