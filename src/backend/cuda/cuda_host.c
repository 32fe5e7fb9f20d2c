/* The pinned host pool of a CUDA device (cuda_host.h).
 *
 * Copies between the GPU and pageable memory go through the driver's
 * staging buffers at a fraction of the link's speed, and cudaHostRegister
 * costs about as much as the copy it would speed up (the pages are touched,
 * locked and mapped for the GPU). So the host tier's memory is pinned once,
 * in chunks, and reused:
 *   - a request is served first fit from the chunks already pinned (an
 *     arena per chunk, backend/arena.h, 64-byte blocks, coalesced on free);
 *   - when none has room, a new chunk of max(request rounded up to 2 MiB,
 *     256 MiB) is mapped, placed on the GPU's NUMA node when the host has
 *     several (mbind with MPOL_PREFERRED, raw syscall so no libnuma is
 *     needed; a failure only costs locality), touched, and pinned with
 *     cudaHostRegister;
 *   - freed blocks go back to their chunk's arena; chunks are unpinned and
 *     unmapped only when the device closes.
 * The pinning cost is thus paid when the host tier first fills (at start,
 * when the server stages every model), and never again in steady state.
 * The pool only grows: its size is the host tier's high-water mark, rounded
 * to chunks.
 */
#include "backend/cuda/cuda_host.h"

#include <assert.h>
#include <errno.h>
#include <linux/mempolicy.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "backend/arena.h"
#include "backend/cuda/cuda_impl.h"

#define CHUNK_ROUND ((size_t)2 << 20)
#define CHUNK_MIN ((size_t)256 << 20)

struct cuda_host_chunk {
    char *base; /* mmap'd, pinned: bytes */
    size_t bytes;
    struct arena arena; /* offsets into base */
    struct cuda_host_chunk *next;
};

/* The NUMA node of GPU gpu's PCI device, or -1 when the host has one node
 * or the node is unknown. */
static int gpu_numa_node(int gpu)
{
    if (access("/sys/devices/system/node/node1", F_OK) != 0)
        return -1;
    char bus[64];
    cudaError_t e = cudaDeviceGetPCIBusId(bus, (int)sizeof(bus), gpu);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    /* the runtime says "0000:3B:00.0" (the domain may have 8 digits);
     * sysfs names it "0000:3b:00.0" */
    unsigned dom, b, dv, fn;
    if (sscanf(bus, "%x:%x:%x.%x", &dom, &b, &dv, &fn) != 4)
        return -1;
    char path[128];
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%04x:%02x:%02x.%x/numa_node", dom, b, dv,
             fn);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int node = -1;
    if (fscanf(f, "%d", &node) != 1)
        node = -1;
    fclose(f);
    return node >= 0 ? node : -1;
}

/* Asks the kernel to place the pages of [p, p + n) on node (MPOL_PREFERRED:
 * elsewhere when that node is full). Best effort: errors are ignored. */
static void chunk_bind(void *p, size_t n, int node)
{
    enum { MASK_LONGS = 16, LONG_BITS = 8 * sizeof(unsigned long) };
    if (node < 0 || node >= MASK_LONGS * LONG_BITS)
        return;
    unsigned long mask[MASK_LONGS] = {0};
    mask[node / LONG_BITS] |= 1UL << (node % LONG_BITS);
    /* maxnode counts one more than the mask's bits, as libnuma passes it */
    (void)syscall(SYS_mbind, p, n, MPOL_PREFERRED, mask,
                  (unsigned long)(MASK_LONGS * LONG_BITS + 1), 0u);
}

/* Maps, places, touches and pins a chunk with room for need bytes. */
static int chunk_create(struct cuda_host_pool *p, size_t need, struct cuda_host_chunk **out)
{
    *out = NULL;
    size_t bytes = (need + CHUNK_ROUND - 1) / CHUNK_ROUND * CHUNK_ROUND;
    if (bytes < CHUNK_MIN)
        bytes = CHUNK_MIN;
    struct cuda_host_chunk *ch = calloc(1, sizeof(*ch));
    if (!ch)
        return err_set(ERR_NOMEM, "%s: out of host memory for a pinned chunk's bookkeeping",
                       p->dev);
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        int err = errno;
        free(ch);
        return err_set(ERR_NOMEM, "%s: cannot map %zu bytes of host memory to pin: %s", p->dev,
                       bytes, strerror(err));
    }
    chunk_bind(m, bytes, p->numa_node);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    volatile char *v = m;
    for (size_t off = 0; off < bytes; off += page)
        v[off] = 0;
    cudaError_t e = cudaHostRegister(m, bytes, cudaHostRegisterPortable);
    if (e != cudaSuccess) {
        int rc = cuda_error(p->dev, "cudaHostRegister", e);
        munmap(m, bytes);
        free(ch);
        return rc;
    }
    ch->base = m;
    ch->bytes = bytes;
    int rc = arena_init(&ch->arena, bytes);
    if (rc < 0) {
        (void)cudaHostUnregister(m);
        (void)cudaGetLastError();
        munmap(m, bytes);
        free(ch);
        return err_wrap(rc, "%s", p->dev);
    }
    *out = ch;
    return ERR_OK;
}

static void chunk_destroy(struct cuda_host_pool *p, struct cuda_host_chunk *ch)
{
    cudaError_t e = cudaHostUnregister(ch->base);
    if (e != cudaSuccess) {
        fprintf(stderr, "%s: cudaHostUnregister: %s (%s)\n", p->dev, cudaGetErrorString(e),
                cudaGetErrorName(e));
        (void)cudaGetLastError();
    }
    munmap(ch->base, ch->bytes);
    arena_destroy(&ch->arena);
    free(ch);
}

void cuda_host_pool_init(struct cuda_host_pool *p, int gpu, const char *dev)
{
    pthread_mutex_init(&p->lock, NULL);
    p->chunks = NULL;
    p->gpu = gpu;
    p->numa_node = gpu_numa_node(gpu);
    p->dev = dev;
}

void cuda_host_pool_destroy(struct cuda_host_pool *p)
{
    size_t live = 0;
    for (struct cuda_host_chunk *ch = p->chunks, *next; ch; ch = next) {
        next = ch->next;
        live += ch->arena.n_live;
        chunk_destroy(p, ch);
    }
    p->chunks = NULL;
    if (live > 0)
        fprintf(stderr, "%s: closed with %zu pinned host blocks still handed out\n", p->dev, live);
    pthread_mutex_destroy(&p->lock);
}

static size_t host_round(size_t bytes)
{
    return (bytes + (ARENA_ALIGN - 1)) & ~(size_t)(ARENA_ALIGN - 1);
}

int cuda_host_pool_alloc(struct cuda_host_pool *p, size_t bytes, void **out)
{
    *out = NULL;
    assert(bytes > 0);
    if (bytes > SIZE_MAX / 4)
        return err_set(ERR_NOMEM, "%s: cannot pin %zu bytes of host memory", p->dev, bytes);
    size_t need = host_round(bytes);
    uint64_t off;

    pthread_mutex_lock(&p->lock);
    for (struct cuda_host_chunk *ch = p->chunks; ch; ch = ch->next) {
        if (arena_alloc(&ch->arena, need, &off) == ERR_OK) {
            *out = ch->base + off;
            pthread_mutex_unlock(&p->lock);
            return ERR_OK;
        }
    }
    struct cuda_host_chunk *ch;
    int rc = chunk_create(p, need, &ch);
    if (rc < 0) {
        pthread_mutex_unlock(&p->lock);
        return rc;
    }
    ch->next = p->chunks;
    p->chunks = ch;
    rc = arena_alloc(&ch->arena, need, &off); /* fits: the chunk is at least need */
    if (rc < 0) {
        pthread_mutex_unlock(&p->lock);
        return err_set(rc, "%s: out of host memory for pinned-pool bookkeeping", p->dev);
    }
    *out = ch->base + off;
    pthread_mutex_unlock(&p->lock);
    return ERR_OK;
}

void cuda_host_pool_free(struct cuda_host_pool *p, void *ptr, size_t bytes)
{
    char *c = ptr;
    pthread_mutex_lock(&p->lock);
    struct cuda_host_chunk *ch = p->chunks;
    while (ch && !(c >= ch->base && c < ch->base + ch->bytes))
        ch = ch->next;
    assert(ch && "device_host_free: a block this device's pool did not hand out");
    if (ch)
        arena_free(&ch->arena, (uint64_t)(c - ch->base), host_round(bytes));
    pthread_mutex_unlock(&p->lock);
}
