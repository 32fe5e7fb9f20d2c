/* Internal to swap/: the manager and its loader threads. */
#ifndef SHARDSWAP_SWAP_SWAP_IMPL_H
#define SHARDSWAP_SWAP_SWAP_IMPL_H

#include <pthread.h>

#include "swap/swap.h"

enum loader_kind {
    LOADER_LOAD,     /* host copy (from disk if absent), then device copy, blob by blob */
    LOADER_PREFETCH, /* host copy only */
    LOADER_OFFLOAD,  /* device -> host copy of the blobs the host lacks */
};

/* One thread per device moving that device's shards: FIFO jobs, no polling. */
struct loader {
    struct swap_manager *mgr;
    int device;
    pthread_t tid;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct swap_shard *head, *tail; /* linked through job_next */
    bool stop, started;
};

struct swap_manager {
    pthread_mutex_t lock;          /* every residency field of every model */
    pthread_cond_t changed;        /* broadcast on every transition */
    struct device *devices[EVICT_MAX_DEVICES];
    int n_devices;
    struct loader loaders[EVICT_MAX_DEVICES];
    struct swap_model **models;
    struct evict_model *lru;       /* (cap) scratch for victim choices under the lock */
    uint64_t *bytes;               /* (cap, n_devices) device bytes of each model */
    int n_models, cap;
    uint64_t clock;                /* logical time of uses, for LRU */
    struct swap_stats stats;       /* host_used/host_high_water/budget live here */
    void (*listener)(void *ctx);   /* told of every completed transition */
    void *listener_ctx;
    int listener_calls;            /* calls in progress (outside the lock) */
};

/* Under mgr->lock: swap_load, swap_compact and an offload of an idle
 * resident model, for swap_load_lru (swap_lru.c). */
int swap_load_locked(struct swap_manager *mgr, struct swap_model *model, struct swap_room *why);
int swap_compact_locked(struct swap_manager *mgr, int device, struct swap_model *victim);
void swap_offload_locked(struct swap_manager *mgr, struct swap_model *model);
bool swap_model_idle(const struct swap_model *model); /* no work in flight, not in transition */
bool swap_model_resident(const struct swap_model *model);

int loader_start(struct loader *l, struct swap_manager *mgr, int device);
void loader_stop(struct loader *l);
void loader_submit(struct loader *l, struct swap_shard *sh, enum loader_kind kind);

void swap_shard_done(struct swap_manager *mgr, struct swap_shard *sh, enum loader_kind kind,
                     int status);
void swap_shard_host_filled(struct swap_manager *mgr, struct swap_shard *sh, int b, void *host);
void swap_shard_host_unreserve(struct swap_manager *mgr, uint64_t bytes);
void swap_count_bytes(struct swap_manager *mgr, uint64_t disk, uint64_t h2d, uint64_t d2h);

#endif
