/* Devices: where model shards live and compute.
 *
 * A device is four things, as on a GPU:
 * - memory with a byte budget (dbufs);
 * - streams: in-order queues of work. Every device has one copy stream
 *   (host<->device copies, device_copy_*) and hands out compute streams
 *   (device_stream_create) on which the kernels of backend/kernels.h run;
 * - events (struct device_event): a point in a stream's work. Record one on a
 *   stream, make another stream wait for it without the host in between
 *   (stream_wait_event: how a forward waits for a layer still being copied),
 *   or wait for it on the host;
 * - a kernel table (backend/kernels.h), reached through the stream.
 * Host memory for the host tier comes from the device's backend so it can be
 * pinned where that helps (CUDA); the CPU backend uses ordinary pages.
 *
 * The CPU backend makes a device of a memory arena: its whole budget is
 * reserved and touched once at open (as a GPU serving system reserves device
 * memory up front), allocations are carved out of it, and a copy is a real
 * memcpy on the device's own copy thread, so swap costs are real costs.
 *
 * Budgets are exact: device_alloc fails when used + size would exceed the
 * budget, and the high-water mark of used bytes is kept for tests.
 */
#ifndef SHARDSWAP_BACKEND_DEVICE_H
#define SHARDSWAP_BACKEND_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct device;
struct dbuf;         /* an allocation in device memory */
struct stream;       /* an in-order queue of work on one device */
struct device_event; /* a point in a stream's work */

enum device_kind { DEVICE_CPU, DEVICE_CUDA };

/* A CPU device with a memory arena of budget_bytes. index names it "cpu:<index>". */
int device_open_cpu(int index, uint64_t budget_bytes, struct device **out);
/* A CUDA device: budget_bytes of GPU gpu's memory, taken in one allocation
 * at open. part > 0 opens a further partition of the same GPU, with its own
 * budget, named "cuda:<gpu>.<part>" (part 0 is "cuda:<gpu>"): several
 * devices on one GPU, as tensor parallelism on a one-GPU machine needs.
 * ERR_INVALID for a GPU that does not exist, ERR_NOMEM when the budget is
 * more than the GPU has free; without CUDA support ERR_UNSUPPORTED ("built
 * without CUDA"). */
int device_open_cuda(int gpu, int part, uint64_t budget_bytes, struct device **out);
/* The memory CPU devices are made of: the machine's available memory
 * (MemAvailable of /proc/meminfo: free pages plus what the page cache can
 * give back) into *avail and its physical memory into *total. Where
 * /proc/meminfo has no MemAvailable, *avail is the physical memory too.
 * ERR_IO when neither is known. */
int device_cpu_memory(uint64_t *avail, uint64_t *total);
/* GPU gpu's free and total memory (cudaMemGetInfo), as device_open_cuda
 * sees it; ERR_INVALID for a GPU that does not exist, ERR_UNSUPPORTED
 * without CUDA. */
int device_cuda_memory(int gpu, uint64_t *free_bytes, uint64_t *total);
/* Another process's device, as rank 0 sees it under mpirun: budget_bytes
 * of memory that is only bookkeeping (allocations are placements the owner
 * carries out at the same offsets, device_alloc_at), host events that the
 * owner's messages signal, and no copies or computations (refused, naming
 * the process). kind is the owner's; named "<proc>/<name>", e.g. "1/cpu:0".
 * A CUDA one needs this process built with CUDA (to size batches exactly as
 * the owner will): ERR_UNSUPPORTED otherwise. */
int device_open_view(int proc, enum device_kind kind, const char *name, uint64_t budget_bytes,
                     struct device **out);
/* -1 for this process's device, else the process that owns it. */
int device_proc(const struct device *d);
/* Waits for queued copies, then frees everything. Every dbuf must be freed first. */
void device_close(struct device *d); /* NULL-safe */


const char *device_name(const struct device *d);
enum device_kind device_kind(const struct device *d);
uint64_t device_budget(const struct device *d);
uint64_t device_used(const struct device *d);
uint64_t device_high_water(const struct device *d);
/* Largest single allocation that would succeed now (fragmentation aware). */
uint64_t device_largest_free(const struct device *d);
/* Number of free blocks in device memory: 1 when nothing is allocated, more
 * when it is fragmented; 0 when full, or when the backend cannot tell. For
 * tests and metrics. */
size_t device_free_blocks(const struct device *d);

/* Allocations are 64-byte aligned. Thread-safe. ERR_NOMEM with a message
 * naming the device, the size and the bytes in use when it does not fit.
 * Each allocation counts towards used (and the budget) at its size rounded
 * up to 64 bytes. bytes == 0 is ERR_INVALID. The caller owns *out and
 * releases it with device_free before closing d. */
int device_alloc(struct device *d, size_t bytes, struct dbuf **out);
/* Allocates exactly [off, off + bytes) of d's memory: the placement rank
 * 0's view of d chose (a remote device there, backend/view). ERR_NOMEM
 * naming the device and offset when the range is not free (the two views
 * disagree), ERR_INVALID for an offset that is not 64-byte aligned;
 * otherwise as device_alloc. */
int device_alloc_at(struct device *d, uint64_t off, size_t bytes, struct dbuf **out);
/* Where b starts in its device's memory (what device_alloc_at takes). */
uint64_t dbuf_offset(const struct dbuf *b);
/* NULL-safe. No queued copy may still use b: wait for its event, or
 * device_sync, first (the memory may be handed out again at once). */
void device_free(struct dbuf *b);
/* The memory: for the CPU backend addressable by the host. */
void *dbuf_ptr(const struct dbuf *b);
size_t dbuf_size(const struct dbuf *b);

/* Host-tier memory from d's backend (pinned where supported), 64-byte aligned.
 * Not counted in d's budget (the host tier keeps its own). The CPU backend
 * has nothing to pin and returns ordinary pages. Free with the same d and
 * bytes; device_host_free is NULL-safe in p. */
int device_host_alloc(struct device *d, size_t bytes, void **out);
void device_host_free(struct device *d, void *p, size_t bytes);

/* Queue a copy on d's copy stream. ev, when not NULL, is recorded on the
 * copy stream right after it, so it completes (status 0) once this copy is
 * done; copies complete in submission order. The source must stay valid and
 * unchanged until then. Thread-safe. */
int device_copy_h2d(struct device *d, struct dbuf *dst, size_t dst_off, const void *src,
                    size_t n, struct device_event *ev);
int device_copy_d2h(struct device *d, void *dst, const struct dbuf *src, size_t src_off,
                    size_t n, struct device_event *ev);
/* Waits until every copy queued so far on d is done. */
void device_sync(struct device *d);

/* ---- events ----
 *
 * An event starts complete-less ("pending"). It completes when the work
 * queued on a stream before stream_record() is done, or when the host
 * signals it (device_event_signal: for work that will never be queued, such
 * as a failed load, so nobody waits forever). Every event carries a status:
 * 0, or the error the host signalled. device_event_reset makes it pending
 * again; only when nothing waits on it or has it recorded. */
int device_event_create(struct device *d, struct device_event **out);
void device_event_destroy(struct device_event *ev); /* NULL-safe; nothing may wait on it */
void device_event_reset(struct device_event *ev);
void device_event_signal(struct device_event *ev, int status);
/* Blocks the calling thread until ev completes; returns its status. */
int device_event_wait(struct device_event *ev);
bool device_event_done(const struct device_event *ev);

/* ---- compute streams ----
 *
 * Kernels queued on a stream run in order. The CPU backend runs them at once
 * on the calling thread (the device's compute thread), so a CPU stream is
 * already done when a kernel returns; CUDA queues them. One thread queues
 * work on a stream at a time. */
int device_stream_create(struct device *d, struct stream **out);
/* Makes the calling thread d's compute thread: one per device, each computing
 * beside the others (the CPU backend: the thread's kernels run on it alone,
 * and BLAS on one thread per caller). Call before its first kernel. */
void device_compute_thread_init(struct device *d);
void device_stream_destroy(struct stream *s); /* NULL-safe; waits for its work */
struct device *stream_device(const struct stream *s);
/* ev completes once the work queued on s so far is done. */
int stream_record(struct stream *s, struct device_event *ev);
/* Work queued on s after this call starts only once ev completes, without
 * blocking the host where the backend can (CUDA); the CPU backend waits
 * here. Returns ev's status when it is known now (0 otherwise): a forward
 * waiting for a layer whose load failed learns it. */
int stream_wait_event(struct stream *s, struct device_event *ev);
/* Blocks until the work queued on s is done. */
int stream_sync(struct stream *s);

/* CPU devices only: holds copies to bytes_per_s (0 = unlimited), emulating a
 * host link such as a GPU's PCIe lane, for experiments that need a GPU's ratio
 * of swap time to compute time on a CPU. */
int device_cpu_set_link(struct device *d, double bytes_per_s);

#endif
