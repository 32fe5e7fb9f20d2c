/* The shard store: what every process does with the shards it holds,
 * written once. Process 0's swap manager (swap.c, loader.c) and every
 * follower under mpirun (cluster/follower.c) are its users; neither keeps a
 * host tier, a checkpoint read or a copy-in of its own.
 *
 * A shard (struct store_shard) is one TP x PP slice of a model: its model
 * view and blob layout (model/layout.c: blob 0 the embeddings and head,
 * blob 1 + i layer i), and per blob a host copy, a device copy and a
 * readiness event that is complete once the device copy is there (a
 * forward waits on it blob by blob, so it computes while later layers
 * arrive).
 *
 * The host tier (struct store_tier) keeps host copies under a byte budget;
 * room is made by dropping the copies of the least recently used owner
 * (the shards of one model share an owner and leave the tier together),
 * never those of an owner the caller says is busy.
 *
 * A loader (struct store_loader) is one thread per device. store_shard_load
 * runs on it: each blob comes from its host copy, or is read from the
 * checkpoint under st_check and fault_guard (a file truncated under us
 * fails the load with a message naming both sizes, never the process),
 * then is queued on the device's copy stream with its event.
 *
 * Placement stays with the caller: the swap manager allocates device blobs
 * inside its budgets, a follower at the offsets process 0 chose; which
 * model leaves is decided above both.
 *
 * Locks: a tier is guarded by its owner's lock (tier->lock: the manager's,
 * the follower's), which guards every shard's host[] and stamp too. The
 * functions marked "tier lock held" are called with it; store_shard_load
 * and store_shard_free take it themselves, so they are called without.
 */
#ifndef SHARDSWAP_SWAP_STORE_H
#define SHARDSWAP_SWAP_STORE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/device.h"
#include "core/queue.h"
#include "core/workq.h"
#include "model/model.h"

struct st_checkpoint;

struct store_tier {
    pthread_mutex_t *lock; /* the owner's; guards everything below */
    uint64_t used, budget, high_water;
    struct queue shards; /* every open shard, in the order opened (LRU ties: the first) */
};

struct store_shard {
    /* fixed from store_shard_init to store_shard_free; read without a lock */
    struct store_tier *tier;
    struct device *device;
    const struct st_checkpoint *ck; /* the owner's */
    const void *owner;              /* shared by the shards of one model */
    char name[64];                  /* the model's, for messages */
    struct model *m;                /* its views point into dev[] while placed */
    struct model_layout layout;
    struct device_event **ready; /* (n_blobs) complete once blob b is on the device */
    /* (n_blobs) device copies, NULL where absent: the caller's, who places
     * and frees them (store_blob_arm, store_blobs_release) */
    struct dbuf **dev;
    /* under tier->lock: (n_blobs) host copies, NULL where absent; the
     * owner's last use, for the tier's LRU */
    void **host;
    uint64_t stamp;
    /* the last failed load's message, written before its events complete
     * with the error: a step that sees one failed reads it */
    char load_error[512];
    struct queue node; /* in tier->shards, under tier->lock */
};

/* How the tier may make room: droppable(arg, sh) says whether sh's host
 * copies may go now (tier lock held: no lock taken, no call back in);
 * dropped(arg, sh), when set, is told of each shard whose copies went.
 * NULL (or NULL members): every copy may go, nobody is told. */
struct store_drop {
    bool (*droppable)(void *arg, const struct store_shard *sh);
    void (*dropped)(void *arg, struct store_shard *sh);
    void *arg;
};

void store_tier_init(struct store_tier *t, pthread_mutex_t *lock, uint64_t budget);
/* Tier lock held. Drops the host copies of droppable owners, least
 * recently used first (the smallest stamp among their shards), until need
 * more bytes fit the budget; ERR_BUSY naming the budget, the bytes in use
 * and the need when they cannot. */
int store_tier_make_room(struct store_tier *t, uint64_t need, const struct store_drop *how);
/* Tier lock held. Counts bytes a loader is about to fill (the high water
 * too), or gives back bytes reserved and never filled. */
void store_tier_reserve(struct store_tier *t, uint64_t bytes);
void store_tier_unreserve(struct store_tier *t, uint64_t bytes);

/* Opens shard spec of the model in ck (model_shard_open), its arrays, and
 * one event per blob on dev, every one complete (nothing placed); joins
 * tier. Tier lock not held. On failure sh holds nothing (store_shard_free
 * is still safe). */
int store_shard_init(struct store_shard *sh, struct store_tier *tier, struct device *dev,
                     const void *owner, const char *name, const struct model_config *cfg,
                     const struct st_checkpoint *ck, const struct model_shard *spec);
/* Leaves the tier, frees the host copies it still has (their bytes given
 * back), its events, layout and view. Its device copies are the caller's,
 * freed before (store_blobs_release). Tier lock not held; zeroed-safe. */
void store_shard_free(struct store_shard *sh);

/* Tier lock held. True when sh has a host copy of every blob with bytes
 * (any: of at least one). */
bool store_host_complete(const struct store_shard *sh);
bool store_host_any(const struct store_shard *sh);
/* Tier lock held. Frees sh's host copies, giving their bytes back. */
void store_host_drop(struct store_shard *sh);
/* Tier lock held. Host bytes sh lacks among blobs [from, n_blobs). */
uint64_t store_host_missing(const struct store_shard *sh, int from);
/* Tier lock not held (a loader thread): blob b's host copy p, filled,
 * becomes sh's (its bytes were reserved). */
void store_host_set(struct store_shard *sh, int b, void *p);

/* Blob b's copy is about to arrive: its event reset and, when a device
 * copy is placed (dev[b]), the shard's views bound to it. */
void store_blob_arm(struct store_shard *sh, int b);
/* Frees device copies [from, n_blobs), resetting the events of the blobs
 * freed (an empty blob's stays as it is). */
void store_blobs_release(struct store_shard *sh, int from);

/* Copies blob b of sh from its checkpoint into dst (blob_bytes[b] bytes):
 * the checkpoint checked first (st_check: not shrunk since it was mapped),
 * the copy guarded (fault_guard); errors name the model. Any thread. */
int store_fill(const struct store_shard *sh, int b, void *dst);

/* One device's loader thread (a core/workq.h queue whose items and ops
 * the user defines) and the staging buffer of the blobs that get no host
 * copy, kept and grown to the largest. */
struct store_loader {
    struct device *dev;
    struct workq q;
    void *stage;
    size_t stage_cap;
};
int store_loader_start(struct store_loader *ld, struct device *dev, int index,
                       const struct workq_ops *ops, void *arg);
/* Runs what is still queued, then joins. Zeroed-safe. */
void store_loader_stop(struct store_loader *ld);

/* Where a blob without a host copy gets one. */
enum store_host_mode {
    /* the caller reserved host bytes for every copy the shard lacks
     * (store_tier_reserve): each is made; one that cannot be allocated
     * gives its bytes back and fails the load */
    STORE_HOST_RESERVED,
    /* room is made per blob now (how: the tier's drop rules); a blob the
     * tier has no room for is staged and copied without a host copy */
    STORE_HOST_IF_ROOM,
};

struct store_load {
    enum store_host_mode mode;
    const struct store_drop *how; /* STORE_HOST_IF_ROOM's */
    bool to_device;               /* false: host copies only, of every blob */
    /* counted by the load: bytes read from the checkpoint and copied to
     * the device, blobs copied to the device */
    uint64_t disk, h2d;
    int blobs;
    int failed_at; /* the blob that failed (n_blobs when none) */
};

/* On ld's thread. With to_device: every blob of sh from `from` on whose
 * event is pending (armed) is copied in, in order: placed ones from their
 * host copy or the checkpoint, each one's event set as it lands; empty
 * ones' events just set (a pending blob with bytes and no device copy is
 * not this load's). On the first failure the message is kept in
 * sh->load_error and every pending event of a placed or empty blob from
 * `from` on completes with the error, so no step waits forever (the device copies stay placed, garbage,
 * until the caller frees them). Without to_device, host copies of every
 * blob the shard lacks. Returns 0 or the first error. */
int store_shard_load(struct store_loader *ld, struct store_shard *sh, int from,
                     struct store_load *how);

#endif
