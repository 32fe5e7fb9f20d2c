/* Model-parallel swapping: every registered model is split into TP x PP
 * shards, one per device of its placement, and moves between three tiers:
 *
 *   disk   the checkpoint itself (memory-mapped; weights are immutable, so
 *          nothing is ever written back)
 *   host   a copy of each shard's blobs in host memory, under a byte budget
 *   device each shard's blobs in its device's memory, under that device's budget
 *
 * Residency of each shard:
 *
 *   ON_DISK -> IN_HOST -> LOADING -> ON_DEVICE -> OFFLOADING -> IN_HOST (or ON_DISK)
 *                            ^           |                         ^
 *                            |       swap_trim                     |
 *                            |           v                         |
 *                            +------- PARTIAL ---- swap_offload ---+
 *
 * A load moves every shard at once, each on its own device's loader thread
 * and copy stream, blob by blob (embeddings first, then layer 0, 1, ...), and
 * sets a readiness event per blob so a forward can start on layer 0 while
 * later layers are still arriving. An offload releases device memory when
 * the host still holds the bytes, else copies them back first (or drops to
 * disk when the host budget has no room).
 *
 * Partial residency: swap_trim takes an idle model's last layers off one
 * device (whole blobs, last first, never blob 0), freeing as an offload
 * does (a copy back first for the blobs the host lacks: the shard is
 * OFFLOADING until it ends). Each shard then keeps a prefix of its blobs,
 * and every shard of the model is PARTIAL (those untouched keep all of
 * theirs): not servable (swap_use_begin refuses), but its next swap_load
 * copies only the missing blobs, needs room only for them, and leaves the
 * kept blobs' events complete, so a forward computes on the kept layers at
 * once. swap_offload of a partial model frees what it kept.
 *
 * The manager is mechanism only: it loads, offloads and says why a load
 * cannot happen now (struct swap_room: which device lacks room, the bytes
 * needed, free and in the largest free block), but never chooses a model to
 * leave its devices. Who leaves is decided above it: by the engine's
 * scheduling policy, or for callers without an engine by swap_load_lru (least
 * recently used, sched/evict.h). Free device memory that is in pieces too small
 * for a load is the caller's to resolve too, with an explicit, counted step
 * (swap_compact). The host tier is the manager's own cache: it drops idle
 * models' host copies, least recently used first, when its budget needs room.
 *
 * Threads: loads, offloads and queries never block on a transfer; only the
 * wait functions (swap_wait_loaded, swap_wait_idle, swap_prefetch_host,
 * swap_load_lru) wait, so a caller holding a lock of its own must not call
 * those. All state lives under one manager lock, taken only at transitions,
 * never on the forward's hot path and never across a copy.
 *
 * Lifetime: a struct swap_model is the manager's from swap_register to
 * swap_unregister (or swap_manager_destroy); what a model is made of (its
 * name, config, placement, each shard's model and blob events) is fixed
 * for that whole time, so the accessors that read it take no lock.
 */
#ifndef SHARDSWAP_SWAP_SWAP_H
#define SHARDSWAP_SWAP_SWAP_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/device.h"
#include "core/event.h"
#include "model/model.h"
#include "sched/evict.h" /* EVICT_MAX_DEVICES */

/* RES_PARTIAL: some of its blobs are on its devices, not all (swap_trim);
 * not resident. swap_residency of a model whose shards differ reports the
 * transition in progress (LOADING or OFFLOADING). */
enum residency {
    RES_ON_DISK,
    RES_IN_HOST,
    RES_LOADING,
    RES_ON_DEVICE,
    RES_OFFLOADING,
    RES_PARTIAL
};
const char *residency_name(enum residency r);

struct swap_config {
    uint64_t host_budget;  /* bytes of host memory for the host tier */
};

/* Where a model's shards go: shard (stage s, rank r) on devices[s * tp + r]. */
struct placement {
    int tp, pp;
    const int *devices; /* tp * pp indices into the manager's devices */
    /* a mixture of experts' routed experts whole on the TP ranks
     * (model_shard.expert_parallel), not split */
    bool expert_parallel;
    /* expert-level residency: each routed expert a unit of residency of
     * its own (swap_experts_request, swap_trim); refused for a model
     * without routed experts or with a shard on another process */
    bool expert_residency;
};

/* A registered model and its shards: opaque handles, the manager's
 * (swap_impl.h). Read them through the accessors below. */
struct swap_model;
struct swap_shard;
struct store_shard;
struct swap_manager;
struct swap_peers;

struct swap_stats {
    uint64_t loads, offloads, bytes_h2d, bytes_d2h, bytes_disk;
    uint64_t evictions;   /* models swap_load_lru offloaded to make room */
    uint64_t compactions; /* swap_compact calls that offloaded a model */
    uint64_t trims;       /* swap_trim calls that released blobs */
    uint64_t bytes_trimmed; /* device bytes they released */
    /* expert-level residency: experts brought in on demand by a step, and
     * experts that left (trims and evictions for a step's room); an
     * expert counts once for all the shards holding it */
    uint64_t experts_loaded, experts_evicted;
    uint64_t host_used, host_high_water, host_budget;
};

/* Why a load cannot start now. */
enum swap_room_kind {
    SWAP_ROOM_OK,         /* it fits (or is resident or loading already) */
    SWAP_ROOM_BYTES,      /* device lacks free bytes: a model there must leave */
    SWAP_ROOM_FRAGMENTED, /* device has the free bytes, but no free block holds one of
                           * the model's blobs: swap_compact */
    SWAP_ROOM_MOVING,     /* the model itself is still offloading or being prefetched */
    SWAP_ROOM_HOST,       /* the host budget is full of copies that cannot be dropped now */
    SWAP_ROOM_BASE,       /* an adapter whose base is not resident or loading: load the base */
};

struct swap_room {
    enum swap_room_kind kind;
    int device;       /* BYTES, FRAGMENTED: the first device that lacks room; else -1 */
    uint64_t need;    /* device bytes the model needs there */
    uint64_t free;    /* budget - used there, now */
    uint64_t largest; /* the largest free block there, now */
    uint64_t blob;    /* FRAGMENTED: the blob that found no block */
    /* bytes there that offloads under way will free on their own (copies
     * back to the host, offloads deferred to the end of a load; not those
     * deferred to the end of a batch): waiting for the listener may be
     * enough, before anything else leaves */
    uint64_t leaving;
};

/* devices stay owned by the caller and must outlive the manager. */
int swap_manager_create(struct device **devices, int n_devices, const struct swap_config *cfg,
                        struct swap_manager **out);
/* Waits for transitions in progress, then gives every model back as
 * swap_unregister does (work still in flight is the caller's bug). */
void swap_manager_destroy(struct swap_manager *mgr); /* NULL-safe */

/* Under mpirun, process 0's manager sees the other processes' devices as
 * views (device_open_view) and reaches them through r (swap/peers.h,
 * the caller's, outliving the manager): set it before the first
 * swap_register when any device is another process's. A shard on such a
 * device has no host copy here (host_bytes 0: its owner reads its own
 * checkpoint); its load and offload run on its view's loader thread as
 * calls of r, and it leaves the devices to RES_ON_DISK. */
void swap_set_peers(struct swap_manager *mgr, const struct swap_peers *r);
/* The table swap_set_peers set; NULL without one. */
const struct swap_peers *swap_peers_of(const struct swap_manager *mgr);

/* Registers the checkpoint in dir under name with a placement. Refused, with
 * the bytes needed and available, when a device's share or the host copy can
 * never fit its budget, and ERR_UNSUPPORTED naming the device and the
 * kernel when a device of the placement lacks one the model calls
 * (model_check_device). The model starts ON_DISK. */
int swap_register(struct swap_manager *mgr, const char *name, const char *dir,
                  const struct placement *pl, bool pinned, struct swap_model **out);

/* Registers the PEFT adapter in dir (adapter_config.json +
 * adapter_model.safetensors) under name over base (registered here, not an
 * adapter): one shard per base shard on the same device, planned with that
 * shard's spec (model_adapter_open's split). It starts ON_DISK and moves as
 * a model does (swap_load, swap_offload, the host tier, swap_unregister),
 * but swap_load of it is refused (ERR_BUSY, why->kind SWAP_ROOM_BASE, the
 * message naming the base) while its base is not resident or loading, and
 * an offload or trim of the base takes its idle adapters off first (one
 * still loading leaves at its load's end). swap_unregister of a base that still has adapters is
 * refused (ERR_BUSY naming one). One-line errors: the adapter's config
 * against the base's (model_adapter_config_load's), the budgets. */
int swap_register_adapter(struct swap_manager *mgr, const char *name, const char *dir,
                          struct swap_model *base, struct swap_model **out);
/* The base model of an adapter, NULL for a model. */
struct swap_model *swap_model_base(const struct swap_model *model);
/* An adapter's largest rank (0 for a model). */
int swap_model_lora_rank(const struct swap_model *model);

/* Gives the model back: the reverse of swap_register. Refused with ERR_BUSY
 * (a one-line message naming the model) while it has work in flight
 * (between swap_use_begin and swap_use_end) or a shard in transition
 * (loading, offloading, being staged into host memory): end the work, then
 * swap_wait_idle. Otherwise, under the manager's lock, it leaves its devices
 * at once if resident (no copy back: its host copy goes too; counted in
 * stats.offloads), its host copies are freed (stats.host_used drops by
 * them) and the manager no longer sees it (no victim choice, no host room
 * made from it); then, outside the lock, its device events, its shards'
 * models and layouts are freed and its checkpoint closed (its files
 * unmapped). model is invalid afterwards, and so is every pointer an
 * accessor returned for it: free its group batches (workers.h) first, and
 * let no other thread use it meanwhile. Any thread; it never waits (a
 * transition in progress refuses it instead). */
int swap_unregister(struct swap_manager *mgr, struct swap_model *model);

/* What registering dir with a TP x PP layout would need, without
 * registering: device bytes of each shard (tp * pp, stage-major, as placed),
 * plus, when batch is not NULL, each shard's execution context for a batch
 * of that shape (on a CPU device; see model_exec_bytes), and host bytes in
 * all. For sizing devices and budgets. */
int swap_layout_bytes(const char *dir, int tp, int pp, const struct model_exec_shape *batch,
                      uint64_t *device_bytes,
                      uint64_t *host_bytes);
/* The same with the routed experts placed whole on the TP ranks when
 * expert_parallel (placement.expert_parallel): each shard counts its own
 * experts only; with expert_blobs (placement.expert_residency) each routed
 * expert a blob of its own, rounded as the load places it, so the device
 * bytes are exactly what a whole load places. */
int swap_layout_bytes_ep(const char *dir, int tp, int pp, bool expert_parallel, bool expert_blobs,
                         const struct model_exec_shape *batch, uint64_t *device_bytes,
                         uint64_t *host_bytes);

/* Starts loading every shard onto its device; returns once the copies are
 * queued, never waiting for a transfer. Already resident or loading: 0. A
 * partly resident model loads only its missing blobs (their bytes are what
 * the room checks and stats.bytes_h2d count; swap_room.need too), and its
 * kept blobs' events stay complete.
 * Never makes a model leave: ERR_BUSY, with a message naming the device and
 * the bytes (needed, free, largest free block), when the blobs do not fit
 * the devices' free memory now; why (may be NULL) tells which kind of
 * refusal it is, so the caller can choose: offload models there (BYTES),
 * swap_compact (FRAGMENTED), or wait for the transition in progress (MOVING,
 * or leaving > 0) — the manager's listener fires when it ends. */
int swap_load(struct swap_manager *mgr, struct swap_model *model, struct swap_room *why);
/* The explicit step for a load refused with SWAP_ROOM_FRAGMENTED on device:
 * offloads victim, a resident model with a shard there chosen by the caller
 * (the engine's policy, or swap_load_lru), so its blocks join the free
 * memory around them; counted in stats.compactions. Device memory is freed
 * at once when the host holds the victim's bytes, else when its copy back
 * ends. ERR_INVALID when victim has no shard on device or is not on its
 * devices; ERR_BUSY (as swap_offload) when it has work in flight or is in
 * transition. */
int swap_compact(struct swap_manager *mgr, int device, struct swap_model *victim);
/* For callers without an engine (bench swap, tests): swap_load after making
 * room by least recent use (sched/evict.h): idle resident models that are not
 * pinned leave, least recently used first and only ones that free bytes
 * where model lacks them, none the others make room without; free memory in pieces gets swap_compact on the
 * least recently used idle model of that device. Waits while room is still
 * being freed by offloads under way or the model itself is offloading, so
 * never call it holding a lock the listener takes. ERR_BUSY when the models
 * that may leave cannot make room (the others have work in flight, are in
 * transition or pinned; short of bytes it then offloads none, short of a
 * block those it offloaded stay offloaded), or when the host budget cannot. */
int swap_load_lru(struct swap_manager *mgr, struct swap_model *model);
/* Waits until the model's last load finished; returns its status. */
int swap_wait_loaded(struct swap_manager *mgr, struct swap_model *model);
/* Stages every shard into the host tier (disk -> host) without a device;
 * waits for a transition of the model in progress, then for the copies. */
int swap_prefetch_host(struct swap_manager *mgr, struct swap_model *model);

/* Offloads a resident or partly resident model (what it kept goes too).
 * With work in flight or a transition in progress (a load, a trim's copy
 * back): ERR_BUSY, or with defer the offload happens as soon as that ends
 * (0). Nothing on its devices (or leaving them already): 0. */
int swap_offload(struct swap_manager *mgr, struct swap_model *model, bool defer);
/* Partial residency: with expert residency, model first gives up its
 * coldest experts on device (swap_experts.c: every layer's, the lowest
 * hotness first, each leaving all the shards that hold it at once, at
 * once and without a copy back: the host tier's copy stays, else the
 * checkpoint's is read again) and stays resident if that freed enough;
 * then, or without expert residency, it gives up its last layers on device, so that
 * another model's load fits there while it keeps its first ones. model must
 * be idle (no swap_use_begin in flight, not in transition: ERR_BUSY) and
 * resident or partly resident (ERR_INVALID otherwise, and when it has no
 * shard on device). Its shard there releases whole layer blobs, the last
 * first and never blob 0 (embeddings and head), until at least bytes device
 * bytes are released or no layer blob is left there; *released says how
 * many (0: none, and nothing changed: bytes was 0 or only blob 0 is left).
 * Device memory of a blob the host tier holds is freed at once; the others
 * are copied back first on the device's loader thread (the shard is
 * OFFLOADING meanwhile, the listener fires at the end; their bytes count in
 * swap_room.leaving), or dropped to disk when the host budget has no room.
 * Then the model is RES_PARTIAL. A shard on another process's device
 * (swap_set_peers) is not trimmed: ERR_UNSUPPORTED, *released 0 (the
 * owner's protocol moves whole shards). Counted in stats.trims and
 * stats.bytes_trimmed. Any thread; never waits. */
int swap_trim(struct swap_manager *mgr, struct swap_model *model, int device, uint64_t bytes,
              uint64_t *released);

/* Expert-level residency, on the compute thread of shard's step (its
 * model in use: swap_use_begin): the step's sparse layer `layer` (local)
 * routed rows[e] rows, real[e] of them real tokens, to each of n_experts
 * experts. Adds real to the model's hotness (TP rank 0 only: every rank
 * routes alike) and, for each expert the shard holds with rows and lacks,
 * places it on every shard that holds it (evicting the coldest experts of
 * other idle models on a device without room) and queues its copy on
 * their loaders, all of the layer's at once; the caller then waits on
 * each one's blob event (swap_shard_blob_ready, store_shard's
 * layout.expert_blob). An expert it cannot place gets ok[e] = 0 and the
 * call returns ERR_BUSY naming the device and bytes (the other experts
 * are still brought). 0 at once for a model without expert residency.
 * Never waits. */
int swap_experts_request(struct swap_manager *mgr, const struct swap_shard *shard, int layer,
                         const int *rows, const int *real, int n_experts, uint8_t *ok);
/* The model's expert hotness, (layers, experts) row-major into out (cap
 * floats; NULL: just the shape): each (layer, expert)'s routed real
 * tokens decayed by 2^(-1/64) at each step of that layer. 0 layers for a
 * model without expert residency. Takes the manager's lock. */
int swap_model_expert_hot(struct swap_manager *mgr, const struct swap_model *model, float *out,
                          size_t cap, int *layers, int *experts);
/* Expert blobs on the model's devices now (one per expert per shard
 * holding it). Takes the manager's lock. */
uint64_t swap_model_experts_resident(struct swap_manager *mgr, const struct swap_model *model);
/* Device bytes of the model's expert blobs on device d now (placed, their
 * copy done or under way): what trimming every expert there frees. 0 for
 * a model without expert residency. Takes the manager's lock. */
uint64_t swap_model_expert_bytes(struct swap_manager *mgr, const struct swap_model *model, int d);

/* Waits until no shard of the model is in transition. */
void swap_wait_idle(struct swap_manager *mgr, struct swap_model *model);

/* A batch starts/ends using a resident (or loading) model: while in use it
 * stays on its devices (swap_offload refuses or defers). begin fails with
 * ERR_INVALID when the model is not resident (a partly resident model is
 * not: swap_load brings the rest). */
int swap_use_begin(struct swap_manager *mgr, struct swap_model *model);
void swap_use_end(struct swap_manager *mgr, struct swap_model *model);

/* fn(ctx) is called after every transition a loader thread completes (a
 * load or offload finished), on that loader thread, outside the manager's
 * lock: how a scheduler learns that memory or a model became available
 * without polling, and re-decides. fn may take the caller's own locks and
 * call the manager's non-waiting functions; it must not call a wait function
 * (the loader would wait on itself). When this returns, the previous
 * listener is not running and will not be called. */
void swap_set_listener(struct swap_manager *mgr, void (*fn)(void *ctx), void *ctx);

enum residency swap_residency(struct swap_manager *mgr, const struct swap_model *model);
struct device *swap_device(struct swap_manager *mgr, int index);
int swap_device_count(const struct swap_manager *mgr);
void swap_get_stats(struct swap_manager *mgr, struct swap_stats *st);
/* ---- what a model is made of ----
 * Any thread, no lock: these values are fixed from swap_register to
 * swap_unregister (a pointer returned is valid as long as the model), so a
 * forward on its devices' compute threads reads them without the manager's
 * lock. */

const char *swap_model_name(const struct swap_model *model);
/* The checkpoint directory it was registered from. */
const char *swap_model_path(const struct swap_model *model);
/* Its config.json, as registered. */
const struct model_info *swap_model_info(const struct swap_model *model);
/* Its checkpoint (mapped while it is registered): format and tensor types. */
const struct st_checkpoint *swap_model_checkpoint(const struct swap_model *model);
int swap_model_tp(const struct swap_model *model);
int swap_model_pp(const struct swap_model *model);
/* Its placement's expert_parallel, expert_residency. */
bool swap_model_expert_parallel(const struct swap_model *model);
bool swap_model_expert_residency(const struct swap_model *model);
/* As registered (the engine keeps its own pinned flag from there). */
bool swap_model_pinned(const struct swap_model *model);
/* tp * pp, and shard i of them, stage-major (stage i / tp, rank i % tp).
 * i must be in 0 .. count - 1. */
int swap_model_shard_count(const struct swap_model *model);
const struct swap_shard *swap_model_shard(const struct swap_model *model, int i);

/* The shard's index into the manager's devices, its PP stage and TP rank. */
int swap_shard_device(const struct swap_shard *sh);
int swap_shard_stage(const struct swap_shard *sh);
int swap_shard_rank(const struct swap_shard *sh);
/* The shard's model, for model_exec_init and the forward; its weight views
 * point into the shard's device copies while it is resident (or loading:
 * blob b may be read once swap_shard_blob_ready(sh, b) is complete). */
const struct model *swap_shard_model(const struct swap_shard *sh);
/* Device bytes its blobs take (each rounded to the manager's alignment). */
uint64_t swap_shard_device_bytes(const struct swap_shard *sh);
/* Its blobs (embeddings and head, then one per layer): how many, the bytes
 * of blob b, and the event that completes once blob b is on the device (a
 * load that brings it resets it, a failed load signals it with the error;
 * a blob a partly resident model kept stays complete). b must be in
 * 0 .. n_blobs - 1. The event is the manager's: wait on it, never reset,
 * signal or destroy it. */
int swap_shard_n_blobs(const struct swap_shard *sh);
/* Of them, 1 + its layers: the ones every step reads; with expert
 * residency blobs [n_dense, n_blobs) are one routed expert each, read
 * when routed to (model_layout.expert_blob). */
int swap_shard_n_dense_blobs(const struct swap_shard *sh);
uint64_t swap_shard_blob_bytes(const struct swap_shard *sh, int b);
struct device_event *swap_shard_blob_ready(const struct swap_shard *sh, int b);
/* Why the shard's last load failed (its loader's message: a checkpoint file
 * truncated while served, a host allocation, ...); read it after a wait on
 * one of its blob events returned an error, while that load's batch still
 * holds the model (swap_use_begin). "" when none failed. */
const char *swap_shard_load_error(const struct swap_shard *sh);
/* The shard's blobs in the shard store (swap/store.h), for the shard step
 * (engine/step.h): read them, never place, free or arm them. */
const struct store_shard *swap_shard_store(const struct swap_shard *sh);
/* The status of the model's last load (0, or the error of its first failed
 * shard) with that shard's message in msg (cap bytes; "" when it did not
 * fail). Meaningful once that load ended. Any thread; takes the manager's
 * lock. */
int swap_model_load_error(struct swap_manager *mgr, const struct swap_model *model, char *msg,
                          size_t cap);

/* ---- the last load's timings ---- */

/* Seconds the model's last load took, from swap_load to its last shard on
 * its device; the shard's, from the load's request to its last blob there.
 * Meaningful once that load ended (swap_wait_loaded, or residency past
 * RES_LOADING); 0 before the first load. Any thread; takes the manager's
 * lock (never waits under it). */
double swap_model_load_seconds(struct swap_manager *mgr, const struct swap_model *model);
double swap_shard_load_seconds(struct swap_manager *mgr, const struct swap_shard *sh);

/* Device bytes the model needs on device d (0 when it has no shard there). */
uint64_t swap_model_device_bytes(const struct swap_model *model, int d);
uint64_t swap_model_total_bytes(const struct swap_model *model);
/* Device bytes the model holds on device d now and keeps: all of its bytes
 * there while resident (or loading); partly resident, its kept blobs there
 * (not those a trim is still copying back: they are leaving); else 0. Any
 * thread; takes the manager's lock. */
uint64_t swap_model_resident_bytes(struct swap_manager *mgr, const struct swap_model *model, int d);
/* Of swap_model_total_bytes, those a load copies now: all of them from the
 * disk or host tier, the missing ones of a partly resident model (during a
 * load: the ones it brings), 0 when resident but for the experts it lacks
 * (expert residency). Any thread; takes the
 * manager's lock. */
uint64_t swap_model_missing_bytes(struct swap_manager *mgr, const struct swap_model *model);
/* The precision its shards compute in (the checkpoint's default at
 * registration), and what their blobs hold (model_layout_set_compute): set
 * it before the model's first load. */
enum kern_compute swap_model_compute(const struct swap_model *model);
void swap_model_set_compute(struct swap_model *model, enum kern_compute c);

#endif
