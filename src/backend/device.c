/* The public device functions: argument checks, byte accounting, then the
 * backend's ops. Nothing backend-specific lives here. */
#include "backend/device.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/device_impl.h"
#include "core/error.h"

/* The lock guards accounting, not the observable state: the getters take
 * const devices and still lock. */
static pthread_mutex_t *device_lock(const struct device *d)
{
    return (pthread_mutex_t *)&d->lock;
}

int device_create(const struct device_ops *ops, const struct kernel_ops *kern, void *ctx,
                  const char *name, uint64_t budget, struct device **out)
{
    assert(ops && ops->alloc && ops->free && ops->largest_free && ops->host_alloc &&
           ops->host_free && ops->copy_h2d && ops->copy_d2h && ops->sync && ops->close);
    assert(ops->event_create && ops->event_destroy && ops->event_reset && ops->event_signal &&
           ops->event_wait && ops->event_done && ops->stream_create && ops->stream_destroy &&
           ops->stream_record && ops->stream_wait_event && ops->stream_sync);
    /* the compute slots may be absent (kern_supports); these never are */
    assert(kern && kern->to_host && kern->to_device &&
           (!kern->attention || kern->attention_scratch));
    assert(budget <= SIZE_MAX / 2);
    *out = NULL;
    struct device *d = calloc(1, sizeof(*d));
    if (!d)
        return err_set(ERR_NOMEM, "device %s: out of host memory for the device object", name);
    d->ops = ops;
    d->kern = kern;
    d->ctx = ctx;
    snprintf(d->name, sizeof(d->name), "%s", name);
    d->budget = budget;
    d->proc = -1;
    pthread_mutex_init(&d->lock, NULL);
    *out = d;
    return ERR_OK;
}

void device_close(struct device *d)
{
    if (!d)
        return;
    d->ops->sync(d);
    pthread_mutex_lock(&d->lock);
    size_t live = d->n_bufs;
    pthread_mutex_unlock(&d->lock);
    if (live != 0) {
        fprintf(stderr, "device %s: closed with %zu allocations still live\n", d->name, live);
        assert(live == 0 && "device_close: every dbuf must be freed first");
    }
    d->ops->close(d);
    pthread_mutex_destroy(&d->lock);
    free(d);
}

const char *device_name(const struct device *d)
{
    return d->name;
}

enum device_kind device_kind(const struct device *d)
{
    return d->ops->kind;
}

uint64_t device_budget(const struct device *d)
{
    return d->budget;
}

uint64_t device_used(const struct device *d)
{
    pthread_mutex_lock(device_lock(d));
    uint64_t v = d->used;
    pthread_mutex_unlock(device_lock(d));
    return v;
}

uint64_t device_high_water(const struct device *d)
{
    pthread_mutex_lock(device_lock(d));
    uint64_t v = d->high_water;
    pthread_mutex_unlock(device_lock(d));
    return v;
}

/* Called with d->lock held. The backend's largest block, capped by what is
 * left of the budget (a backend may hold more memory than the budget). */
static uint64_t device_largest_free_locked(const struct device *d)
{
    uint64_t v = d->ops->largest_free(d);
    uint64_t room = d->budget - d->used;
    if (v > room)
        v = room;
    return v & ~(uint64_t)(DEVICE_ALIGN - 1);
}

uint64_t device_largest_free(const struct device *d)
{
    pthread_mutex_lock(device_lock(d));
    uint64_t v = device_largest_free_locked(d);
    pthread_mutex_unlock(device_lock(d));
    return v;
}

size_t device_free_blocks(const struct device *d)
{
    if (!d->ops->free_blocks)
        return 0;
    pthread_mutex_lock(device_lock(d));
    size_t v = d->ops->free_blocks(d);
    pthread_mutex_unlock(device_lock(d));
    return v;
}

static size_t device_round(size_t bytes)
{
    return (bytes + (DEVICE_ALIGN - 1)) & ~(size_t)(DEVICE_ALIGN - 1);
}

/* Called with d->lock held. */
static int device_nomem(const struct device *d, size_t bytes)
{
    return err_set(ERR_NOMEM,
                   "device %s: cannot allocate %zu bytes: %" PRIu64 " of %" PRIu64
                   " in use, largest free block %" PRIu64,
                   d->name, bytes, d->used, d->budget, device_largest_free_locked(d));
}

/* device_alloc, or device_alloc_at when at is not NULL. */
static int device_alloc_impl(struct device *d, size_t bytes, const uint64_t *at, struct dbuf **out)
{
    assert(d && out);
    *out = NULL;
    if (bytes == 0)
        return err_set(ERR_INVALID, "device %s: cannot allocate 0 bytes", d->name);

    struct dbuf *b = malloc(sizeof(*b));
    if (!b)
        return err_set(ERR_NOMEM, "device %s: out of host memory for a buffer handle", d->name);

    pthread_mutex_lock(&d->lock);
    int rc;
    uint64_t room = d->budget - d->used;
    /* bytes <= room first, so the rounding cannot wrap (budgets are far below SIZE_MAX). */
    size_t reserved = 0;
    if (bytes > room || (reserved = device_round(bytes)) > room) {
        rc = device_nomem(d, bytes);
        goto fail;
    }
    void *ptr = NULL;
    rc = at ? d->ops->alloc_at(d, *at, reserved, &ptr) : d->ops->alloc(d, reserved, &ptr);
    if (rc == ERR_NOMEM && at) {
        rc = err_set(ERR_NOMEM,
                     "device %s: cannot place %zu bytes at offset %" PRIu64 ": not free there",
                     d->name, bytes, *at);
        goto fail;
    }
    if (rc == ERR_NOMEM) {
        rc = device_nomem(d, bytes);
        goto fail;
    }
    if (rc < 0)
        goto fail;
    assert(((uintptr_t)ptr & (DEVICE_ALIGN - 1)) == 0);
    d->used += reserved;
    if (d->used > d->high_water)
        d->high_water = d->used;
    d->n_bufs++;
    pthread_mutex_unlock(&d->lock);

    *b = (struct dbuf){.dev = d, .ptr = ptr, .size = bytes, .reserved = reserved};
    *out = b;
    return ERR_OK;

fail:
    pthread_mutex_unlock(&d->lock);
    free(b);
    return rc;
}

int device_alloc(struct device *d, size_t bytes, struct dbuf **out)
{
    return device_alloc_impl(d, bytes, NULL, out);
}

int device_alloc_at(struct device *d, uint64_t off, size_t bytes, struct dbuf **out)
{
    *out = NULL;
    if (!d->ops->alloc_at)
        return err_set(ERR_UNSUPPORTED, "device %s cannot place allocations", d->name);
    if (off % DEVICE_ALIGN != 0)
        return err_set(ERR_INVALID, "device %s: offset %" PRIu64 " is not a multiple of %d",
                       d->name, off, DEVICE_ALIGN);
    return device_alloc_impl(d, bytes, &off, out);
}

uint64_t dbuf_offset(const struct dbuf *b)
{
    assert(b->dev->ops->offset);
    return b->dev->ops->offset(b->dev, b->ptr);
}

int device_proc(const struct device *d)
{
    return d->proc;
}

void device_free(struct dbuf *b)
{
    if (!b)
        return;
    struct device *d = b->dev;
    pthread_mutex_lock(&d->lock);
    assert(d->used >= b->reserved && d->n_bufs > 0);
    d->ops->free(d, b->ptr, b->reserved);
    d->used -= b->reserved;
    d->n_bufs--;
    pthread_mutex_unlock(&d->lock);
    free(b);
}

void *dbuf_ptr(const struct dbuf *b)
{
    return b->ptr;
}

size_t dbuf_size(const struct dbuf *b)
{
    return b->size;
}

int device_host_alloc(struct device *d, size_t bytes, void **out)
{
    assert(d && out);
    *out = NULL;
    if (bytes == 0)
        return err_set(ERR_INVALID, "device %s: cannot allocate 0 bytes of host memory", d->name);
    return d->ops->host_alloc(d, bytes, out);
}

void device_host_free(struct device *d, void *p, size_t bytes)
{
    if (!p)
        return;
    d->ops->host_free(d, p, bytes);
}

/* ERR_INVALID unless [off, off + n) lies in b, which belongs to d. */
static int device_check_range(const struct device *d, const struct dbuf *b, size_t off, size_t n,
                              const void *host, const char *what)
{
    if (b->dev != d)
        return err_set(ERR_INVALID, "device %s: %s: buffer belongs to device %s", d->name, what,
                       b->dev->name);
    if (off > b->size || n > b->size - off)
        return err_set(ERR_INVALID,
                       "device %s: %s: range [%zu, %zu + %zu) outside a buffer of %zu bytes",
                       d->name, what, off, off, n, b->size);
    if (n > 0 && !host)
        return err_set(ERR_INVALID, "device %s: %s: NULL host pointer", d->name, what);
    return ERR_OK;
}

int device_copy_h2d(struct device *d, struct dbuf *dst, size_t dst_off, const void *src, size_t n,
                    struct device_event *ev)
{
    assert(d && dst && (!ev || ev->dev == d));
    int rc = device_check_range(d, dst, dst_off, n, src, "copy to device");
    if (rc < 0)
        return rc;
    return d->ops->copy_h2d(d, (char *)dst->ptr + dst_off, src, n, ev);
}

int device_copy_d2h(struct device *d, void *dst, const struct dbuf *src, size_t src_off, size_t n,
                    struct device_event *ev)
{
    assert(d && src && (!ev || ev->dev == d));
    int rc = device_check_range(d, src, src_off, n, dst, "copy to host");
    if (rc < 0)
        return rc;
    return d->ops->copy_d2h(d, dst, (const char *)src->ptr + src_off, n, ev);
}

void device_sync(struct device *d)
{
    assert(d);
    d->ops->sync(d);
}

/* ---- events ---- */

int device_event_create(struct device *d, struct device_event **out)
{
    assert(d && out);
    *out = NULL;
    struct device_event *ev = calloc(1, sizeof(*ev));
    if (!ev)
        return err_set(ERR_NOMEM, "device %s: out of host memory for an event", d->name);
    ev->dev = d;
    int rc = d->ops->event_create(d, ev);
    if (rc < 0) {
        free(ev);
        return rc;
    }
    *out = ev;
    return ERR_OK;
}

void device_event_destroy(struct device_event *ev)
{
    if (!ev)
        return;
    ev->dev->ops->event_destroy(ev);
    free(ev);
}

void device_event_reset(struct device_event *ev)
{
    ev->dev->ops->event_reset(ev);
}

void device_event_signal(struct device_event *ev, int status)
{
    assert(status <= 0);
    ev->dev->ops->event_signal(ev, status);
}

int device_event_wait(struct device_event *ev)
{
    return ev->dev->ops->event_wait(ev);
}

bool device_event_done(const struct device_event *ev)
{
    return ev->dev->ops->event_done(ev);
}

/* ---- streams ---- */

int device_stream_create(struct device *d, struct stream **out)
{
    assert(d && out);
    *out = NULL;
    struct stream *s = calloc(1, sizeof(*s));
    if (!s)
        return err_set(ERR_NOMEM, "device %s: out of host memory for a stream", d->name);
    s->dev = d;
    int rc = d->ops->stream_create(d, s);
    if (rc < 0) {
        free(s);
        return rc;
    }
    *out = s;
    return ERR_OK;
}

void device_stream_destroy(struct stream *s)
{
    if (!s)
        return;
    (void)s->dev->ops->stream_sync(s);
    s->dev->ops->stream_destroy(s);
    free(s);
}

void device_compute_thread_init(struct device *d)
{
    assert(d);
    if (d->ops->compute_thread_init)
        d->ops->compute_thread_init(d);
}

struct device *stream_device(const struct stream *s)
{
    return s->dev;
}

int stream_record(struct stream *s, struct device_event *ev)
{
    assert(s && ev && ev->dev == s->dev);
    return s->dev->ops->stream_record(s, ev);
}

int stream_wait_event(struct stream *s, struct device_event *ev)
{
    assert(s && ev && ev->dev == s->dev);
    return s->dev->ops->stream_wait_event(s, ev);
}

int stream_sync(struct stream *s)
{
    assert(s);
    return s->dev->ops->stream_sync(s);
}
