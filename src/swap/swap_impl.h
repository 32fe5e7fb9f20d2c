/* Internal to swap/: the models, the manager and its loader threads.
 * Outside swap/, swap.h's accessors read a model and its shards. */
#ifndef SHARDSWAP_SWAP_SWAP_IMPL_H
#define SHARDSWAP_SWAP_SWAP_IMPL_H

#include <pthread.h>

#include "core/workq.h"
#include "swap/peers.h"
#include "swap/store.h"
#include "swap/swap.h"

/* A loader job: the shard it moves and what it does (enum loader_kind). */
struct shard_job {
    struct workq_item item;
    struct swap_shard *sh;
    int kind;
};

/* One TP x PP shard: its blobs in the shard store (st: the model view,
 * layout, host and device copies, events, load error) and its residency.
 * Fixed from registration to unregistration, read without the lock:
 * model, stage, rank, device, remote, st's fixed part, device_bytes,
 * host_bytes. Under mgr->lock (the tier's lock): st.host[], st.dev[],
 * state, failed, the load times (a loader fills the bytes of host[b] and
 * dev[b] outside it, for the job it holds). job.kind: written by
 * loader_submit before it posts job, read by the loader thread; job: its
 * loader's work queue's. With expert residency, an expert blob's dev[b]
 * (b >= n_dense, b < kept) may be freed (a hole: its event reset) and
 * placed again under the lock while the model stays resident. */
struct swap_shard {
    struct swap_model *model;
    int stage, rank, device;
    /* its device is another process's (device_proc > 0): its blobs move
     * there through mgr->remote, and this process keeps no host copy */
    bool remote;
    struct store_shard st;
    uint64_t device_bytes, host_bytes;
    enum residency state;
    /* blobs [0, kept) are on the device and complete, and stay through the
     * transition in progress; [kept, n_blobs) are arriving (LOADING),
     * leaving (OFFLOADING) or absent. n_blobs when ON_DEVICE, 0 when off the
     * device, between (never 0: blob 0 is never trimmed) for a trimmed
     * shard. Fixed while a loader job runs: the loader reads it unlocked. */
    int kept;
    bool failed;               /* the last load failed: the device copy is garbage */
    double load_t0, load_t1;   /* last load: queued, last blob on the device */
    int layer_begin;           /* its first layer (fixed) */
    /* the shard's place in its loader's queue: job, one transition at a
     * time; xjob, the on-demand expert loads (swap_experts.c), beside it.
     * Under mgr->lock: xjob_state, and xjob_again (a blob armed while xjob
     * ran, which it may have passed: xjob runs once more) */
    struct shard_job job, xjob;
    enum { XJOB_IDLE, XJOB_QUEUED, XJOB_RUNNING } xjob_state;
    bool xjob_again;
};

/* A registered model. Fixed from swap_register to swap_unregister, read
 * without the lock: name, cfg, ck, tp, pp, expert_parallel, shards, pinned. Under mgr->lock:
 * id (its index into the manager's models and bytes) and the rest. */
struct swap_model {
    int id;
    char name[64];
    struct model_config *cfg;  /* owned */
    const struct model_info *info; /* &cfg->info */
    struct st_checkpoint *ck;
    char *dir;                 /* the checkpoint directory, as registered (owned) */
    int tp, pp;
    bool expert_parallel;      /* placement.expert_parallel */
    struct swap_shard *shards; /* tp * pp, stage-major */
    bool pinned;
    /* an adapter's base (fixed), and under mgr->lock how many adapters a
     * model has registered over it */
    struct swap_model *base;
    int n_adapters;
    int in_flight;             /* batches using it now */
    bool offload_pending;      /* offload once in_flight drops to 0 / the load ends */
    uint64_t last_used;        /* the manager's clock at its last load or use, for LRU */
    int shards_busy;           /* shards still loading or offloading */
    int load_status;           /* 0, or the error of the last load */
    double load_t0, load_t1;   /* last load: requested, every shard on its device */
    /* expert-level residency (placement.expert_residency, fixed): each
     * routed expert is a blob of its own on each shard holding it; under
     * mgr->lock, hot (n_layers, hot_experts): every (layer, expert)'s
     * routed tokens, decayed (swap_experts.c) */
    bool expert_residency;
    int hot_experts;
    float *hot;
};

enum loader_kind {
    LOADER_LOAD,     /* of blobs [kept, n): host copy (from disk if absent), then device
                      * copy, blob by blob */
    LOADER_PREFETCH, /* host copy only */
    LOADER_OFFLOAD,  /* device -> host copy of the leaving blobs ([kept, n)) the host lacks */
    LOADER_EXPERTS,  /* the expert blobs placed on demand (swap_experts_request) */
};

/* One thread per device moving that device's shards: FIFO jobs (the
 * store's loader, whose run is loader_run), no polling. */
struct loader {
    struct swap_manager *mgr;
    int device;
    struct store_loader ld;
};

struct swap_manager {
    pthread_mutex_t lock;          /* every residency field of every model */
    pthread_cond_t changed;        /* broadcast on every transition */
    struct device *devices[EVICT_MAX_DEVICES];
    int n_devices;
    struct loader loaders[EVICT_MAX_DEVICES];
    struct swap_model **models;    /* (cap) in registration order; models[i]->id == i */
    struct evict_model *lru;       /* (cap) scratch for victim choices under the lock */
    uint64_t *bytes;               /* (cap, n_devices) device bytes of models[i] */
    int n_models, cap;
    uint64_t clock;                /* logical time of uses, for LRU */
    struct swap_stats stats;       /* but host_used/host_high_water/budget: the tier's */
    struct store_tier tier;        /* the host tier, under lock */
    const struct swap_peers *remote; /* the other processes' devices (swap_set_peers) */
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
/* Some of its blobs stay on its devices while it is not resident: PARTIAL,
 * or copying back what a trim gave up (mgr->lock held). */
bool swap_model_partial(const struct swap_model *model);
/* Device bytes of the model's blobs on device d now (mgr->lock held). */
uint64_t swap_model_held_locked(const struct swap_model *model, int d);

/* The host tier's drop rules of a load of keep (mgr->lock held when
 * used): idle models' copies, not keep's. */
struct tier_room {
    struct swap_manager *mgr;
    const struct swap_model *keep;
};
bool swap_tier_droppable(void *arg, const struct store_shard *st);
void swap_tier_dropped(void *arg, struct store_shard *st);
uint64_t swap_blob_device_bytes(const struct swap_shard *sh, int b);
bool swap_model_in_transition(const struct swap_model *model);

/* ---- expert-level residency (swap_experts.c), mgr->lock held ---- */

/* Blob of routed expert e of layer l (global) on sh, or -1. */
int swap_expert_blob(const struct swap_shard *sh, int l, int e);
/* Frees model's experts on device, coldest first (any layer), until at
 * least bytes are freed there or none is left there; each expert leaves
 * every shard holding it (its TP slices together). Returns the bytes freed
 * on device; *all, those freed on every device. The model is idle. */
uint64_t swap_experts_trim_locked(struct swap_manager *mgr, struct swap_model *model, int device,
                                  uint64_t bytes, uint64_t *all);
/* Device bytes of the expert blobs missing among sh's kept blobs (holes). */
uint64_t swap_experts_missing(const struct swap_shard *sh);

int loader_start(struct loader *l, struct swap_manager *mgr, int device);
void loader_stop(struct loader *l);
void loader_submit(struct loader *l, struct swap_shard *sh, enum loader_kind kind);

void swap_shard_done(struct swap_manager *mgr, struct swap_shard *sh, enum loader_kind kind,
                     int status);
void swap_count_bytes(struct swap_manager *mgr, uint64_t disk, uint64_t h2d, uint64_t d2h);

#endif
