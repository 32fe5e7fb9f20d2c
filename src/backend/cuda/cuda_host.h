/* A CUDA device's pool of pinned host memory: the host tier's blocks
 * (device_host_alloc) carved out of a few large pinned chunks that are
 * pinned once and reused until the device closes. See cuda_host.c. */
#ifndef SHARDSWAP_BACKEND_CUDA_CUDA_HOST_H
#define SHARDSWAP_BACKEND_CUDA_CUDA_HOST_H

#include <pthread.h>
#include <stddef.h>

struct cuda_host_chunk; /* one pinned mapping and its arena */

struct cuda_host_pool {
    /* Guards chunks and their arenas. Held while a new chunk is mapped and
     * pinned (tens of milliseconds per 256 MiB), which only the first fill
     * of the host tier pays; never held across a copy. */
    pthread_mutex_t lock;
    struct cuda_host_chunk *chunks; /* newest first */
    int gpu;
    int numa_node;   /* the GPU's NUMA node, -1 when unknown or the host has one node */
    const char *dev; /* "device cuda:0", for messages; owned by the device */
};

/* Finds the GPU's NUMA node; pins nothing yet. Call with gpu current. */
void cuda_host_pool_init(struct cuda_host_pool *p, int gpu, const char *dev);
/* Unregisters and unmaps every chunk. Blocks still handed out are lost
 * (a message says how many). No copy may still use the pool. */
void cuda_host_pool_destroy(struct cuda_host_pool *p);
/* bytes > 0. 64-byte aligned pinned memory; ERR_NOMEM (mapping) or
 * ERR_DEVICE (cudaHostRegister) with a message. Thread-safe; the caller
 * has made the GPU current. */
int cuda_host_pool_alloc(struct cuda_host_pool *p, size_t bytes, void **out);
/* Returns what cuda_host_pool_alloc gave, with the same bytes. Thread-safe. */
void cuda_host_pool_free(struct cuda_host_pool *p, void *ptr, size_t bytes);

#endif
