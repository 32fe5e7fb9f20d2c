/* What a device backend implements, and the generic device object around it.
 *
 * Only device.c and the backends include this. A backend fills a
 * `static const struct device_ops` with designated initializers, builds its
 * context, and hands both to device_create(); the public functions in
 * device.c check arguments, keep the byte accounting and call the ops.
 *
 * Locking: alloc, free, largest_free and free_blocks are called with
 * d->lock held, so a backend needs no lock of its own for its allocator.
 * The copy slots are called without it (copies must not wait on allocations)
 * and must be thread-safe on their own. No lock is shared between devices.
 */
#ifndef SHARDSWAP_BACKEND_DEVICE_IMPL_H
#define SHARDSWAP_BACKEND_DEVICE_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/device.h"
#include "backend/kernels_impl.h"

/* Every allocation starts on, and is accounted in, units of this many bytes. */
#define DEVICE_ALIGN 64

struct device_ops {
    enum device_kind kind;
    /* Carves bytes (a non-zero multiple of DEVICE_ALIGN, already within the
     * budget) out of device memory. ERR_NOMEM when no free block is large
     * enough: the wrapper then writes the message. Any other error code
     * comes with a message set by the backend. */
    int (*alloc)(struct device *d, size_t bytes, void **out);
    /* Optional: carves exactly [off, off + bytes) (the placement another
     * process chose: backend/view); ERR_NOMEM when it is not free. And the
     * offset of an allocation's pointer in the device's memory. */
    int (*alloc_at)(struct device *d, uint64_t off, size_t bytes, void **out);
    uint64_t (*offset)(const struct device *d, const void *ptr);
    /* Returns what alloc gave, with the same bytes. */
    void (*free)(struct device *d, void *ptr, size_t bytes);
    /* Largest bytes alloc would satisfy now. */
    uint64_t (*largest_free)(const struct device *d);
    /* Optional: number of free blocks (1 when memory is unfragmented and
     * not full); the wrapper answers 0 without it. */
    size_t (*free_blocks)(const struct device *d);

    /* Host-tier memory, 64-byte aligned; host_free gets the same bytes. */
    int (*host_alloc)(struct device *d, size_t bytes, void **out);
    void (*host_free)(struct device *d, void *p, size_t bytes);

    /* Queue a copy on the copy stream (pointers already offset and bounds
     * checked); complete ev (status 0) when it is done, in submission order. */
    int (*copy_h2d)(struct device *d, void *dst, const void *src, size_t n,
                    struct device_event *ev);
    int (*copy_d2h)(struct device *d, void *dst, const void *src, size_t n,
                    struct device_event *ev);
    /* Returns once every copy queued before the call is done. */
    void (*sync)(struct device *d);

    /* Events: the backend's state in ev->ctx (the semantics of device.h). */
    int (*event_create)(struct device *d, struct device_event *ev);
    void (*event_destroy)(struct device_event *ev);
    void (*event_reset)(struct device_event *ev);
    void (*event_signal)(struct device_event *ev, int status);
    int (*event_wait)(struct device_event *ev);
    bool (*event_done)(const struct device_event *ev);

    /* Optional: see device_compute_thread_init. */
    void (*compute_thread_init)(struct device *d);
    /* Compute streams: the backend's state in s->ctx. */
    int (*stream_create)(struct device *d, struct stream *s);
    void (*stream_destroy)(struct stream *s);
    int (*stream_record)(struct stream *s, struct device_event *ev);
    int (*stream_wait_event)(struct stream *s, struct device_event *ev);
    int (*stream_sync)(struct stream *s);

    /* Releases ctx and everything the backend holds. Called after sync, with
     * no allocation left. */
    void (*close)(struct device *d);
};

struct device {
    const struct device_ops *ops;
    const struct kernel_ops *kern;
    void *ctx;     /* the backend's; freed by ops->close */
    char name[32]; /* "cpu:0", "cuda:1"; another process's: "1/cpu:0" */
    int proc;      /* -1: this process's; else the process that owns it (backend/view) */
    uint64_t budget;
    /* Guarded by lock. used counts each live allocation at its size rounded
     * up to DEVICE_ALIGN, i.e. the bytes it takes from the device, so that
     * used <= budget bounds real memory exactly. */
    pthread_mutex_t lock;
    uint64_t used;
    uint64_t high_water; /* max of used since open */
    size_t n_bufs;       /* live dbufs; must be 0 at close */
};

struct dbuf {
    struct device *dev;
    void *ptr;       /* from ops->alloc: a host address on CPU, a device address on CUDA */
    size_t size;     /* as requested */
    size_t reserved; /* size rounded up to DEVICE_ALIGN: what used counts */
};

struct stream {
    struct device *dev;
    void *ctx; /* the backend's */
};

struct device_event {
    struct device *dev;
    void *ctx; /* the backend's */
};

/* The CUDA backend's kernel table, or NULL when built without CUDA (for a
 * remote CUDA device's sizing, backend/view). */
const struct kernel_ops *cuda_kernel_table(void);

/* Wraps a backend context in a device named name with budget bytes. On
 * failure (ERR_NOMEM) nothing is created and the caller still owns ctx. */
int device_create(const struct device_ops *ops, const struct kernel_ops *kern, void *ctx,
                  const char *name, uint64_t budget, struct device **out);

#endif
