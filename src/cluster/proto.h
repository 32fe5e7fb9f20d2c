/* The messages between rank 0 and the other processes of a job serving
 * across nodes (docs/ARCHITECTURE.md: "Processes"): rank 0 sends commands,
 * in one global order per process, and each process answers.
 *
 * A message is a header and a body, every field little-endian (core/wire.h):
 *
 *   u32 magic   'S','S','W','1' (0x31575353)
 *   u32 kind    enum proto_kind
 *   u64 seq     the sender's running count; an answer carries its command's
 *   body        by kind, below
 *
 *   REGISTER     u32 model, str name, str path, u32 tp, u32 pp,
 *                i32s devices (tp * pp job-wide device indices), str compute,
 *                u8 expert_parallel (1: routed experts whole on the TP ranks)
 *   UNREGISTER   u32 model
 *   LOAD         u32 model, u32 n, then n x (u32 shard, u32 blob, u64 offset):
 *                where each blob of the receiver's shards goes on its device
 *   OFFLOAD      u32 model
 *   BATCH_OPEN   u64 batch, u32 model, u32 batch_size, u32 max_len,
 *                u32 max_tokens, u32 max_rows, u32 n, then n x (u32 shard,
 *                u64 offset): the receiver's shards' execution contexts;
 *                i32s group_tags (pp: the TP group of each stage, -1 none),
 *                i32s channel_tags ((pp - 1) * tp, stage-major)
 *   BATCH_CLEAR  u64 batch, u32 slot
 *   BATCH_CLOSE  u64 batch
 *   BATCH_ABORT  u64 batch, i32 status: the batch's step in progress, if
 *                any, stops (the receiver's ends of its collectives and
 *                channels aborted with status, so a shard waiting on a
 *                peer that failed returns); the batch runs no more steps
 *   STEP         u64 batch, u32 t_new, u8 flags (1: all positions,
 *                2: overlap), i32s ids (batch_size * t_new), u8s mask
 *                (the same count, or 0: every token real)
 *   SHUTDOWN     (empty)
 *   DEVICES      u8 kind (0 cpu, 1 cuda), f64 link_gbps (CPU devices'
 *                emulated host link, 0 none), u64 host_budget (bytes of
 *                host copies each process may keep), u32 n, then n x (i32 proc,
 *                i32 gpu, u64 budget): the job's devices for the next stack;
 *                each process opens its own
 *   END          (empty) the stack is closed: every model, batch and device
 *                of the receiver goes; it waits for the next DEVICES
 *   STATS        u8 flags (1: measure the host's copy speed), u32 threads,
 *                u64 bytes (per thread, for the measurement)
 *   STATS_DONE   i32 status, str message, u32 n, then n x f64: the
 *                receiver's numbers, PROTO_STAT_* order
 *   REPLY        i32 status (0 or an error code), str message
 *   STEP_DONE    u64 batch, i32 status, str message, f32s logits (only
 *                from the process holding TP rank 0 of the last stage)
 *
 * proto_decode checks everything a receiver relies on before any field is
 * used: the magic, a known kind, counts within the PROTO_MAX_* limits, and
 * no byte missing or left over; a refusal is ERR_INVALID naming the kind
 * and the field. */
#ifndef SHARDSWAP_CLUSTER_PROTO_H
#define SHARDSWAP_CLUSTER_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/strbuf.h"

#define PROTO_MAGIC 0x31575353u
#define PROTO_MAX_SHARDS 64         /* tp * pp of one model */
#define PROTO_MAX_ENTRIES 65536     /* blobs of one LOAD, contexts of one BATCH_OPEN */
#define PROTO_MAX_TOKENS (1u << 24) /* ids of one STEP */
#define PROTO_MAX_LOGITS (1u << 28) /* floats of one STEP_DONE */
#define PROTO_MAX_TEXT 4096         /* names, paths, messages */
#define PROTO_MAX_DEVICES 64        /* devices of one DEVICES */

enum proto_kind {
    PROTO_REGISTER = 1,
    PROTO_UNREGISTER,
    PROTO_LOAD,
    PROTO_OFFLOAD,
    PROTO_BATCH_OPEN,
    PROTO_BATCH_CLEAR,
    PROTO_BATCH_CLOSE,
    PROTO_STEP,
    PROTO_SHUTDOWN,
    PROTO_REPLY,
    PROTO_BATCH_ABORT,
    PROTO_STEP_DONE,
    PROTO_DEVICES,
    PROTO_END,
    PROTO_STATS,
    PROTO_STATS_DONE,
    PROTO_KIND_END,
};
const char *proto_kind_name(enum proto_kind k); /* "STEP"; "?" for an unknown one */

struct proto_place {
    uint32_t shard, blob; /* blob: unused in BATCH_OPEN */
    uint64_t offset;
};

struct proto_device {
    int32_t proc, gpu; /* gpu: the ordinal on that process's node (cuda) */
    uint64_t budget;
};
#define PROTO_DEVICE_CPU 0u
#define PROTO_DEVICE_CUDA 1u

/* STATS_DONE's numbers, in this order (a receiver may send more, later
 * ones unknown to older senders; never fewer) */
enum proto_stat {
    PROTO_STAT_MEMCPY_BPS, /* bytes/s of memcpy on the threads asked (0: not measured) */
    PROTO_STAT_STREAM_BPS, /* bytes/s of the streaming copy (0: not measured) */
    PROTO_STAT_HOST_USED,  /* bytes of its host tier in use */
    PROTO_STAT_HOST_BUDGET,
    PROTO_STAT_LOADS,      /* blobs loaded onto its devices */
    PROTO_STAT_LOAD_BYTES, /* their bytes */
    PROTO_STAT_DISK_BYTES, /* bytes read from its checkpoints */
    PROTO_STAT_OVERLAPPED, /* shard steps begun while that shard was still loading */
    PROTO_STAT_END,
};
#define PROTO_STATS_MEASURE 1u
#define PROTO_MAX_STATS 64

/* One message of any kind; the fields of other kinds are zero. Pointers are
 * owned by the message (proto_msg_free) after proto_decode; for
 * proto_encode they are the caller's and only read. */
struct proto_msg {
    enum proto_kind kind;
    uint64_t seq;
    uint32_t model;
    uint64_t batch;
    char *name, *path, *compute, *message;
    uint32_t tp, pp;
    uint8_t expert_parallel; /* REGISTER: 0 or 1 */
    int32_t *devices; /* REGISTER: (n_devices) */
    uint32_t n_devices;
    struct proto_place *places; /* LOAD, BATCH_OPEN: (n_places) */
    uint32_t n_places;
    uint32_t batch_size, max_len, max_tokens, max_rows; /* BATCH_OPEN */
    int32_t *group_tags, *channel_tags;
    uint32_t n_group_tags, n_channel_tags;
    uint32_t slot;  /* BATCH_CLEAR */
    uint32_t t_new; /* STEP */
    uint8_t flags;  /* STEP: PROTO_STEP_* */
    int32_t *ids;   /* STEP: (n_ids) */
    uint32_t n_ids;
    uint8_t *mask; /* STEP: (n_mask: n_ids or 0) */
    uint32_t n_mask;
    int32_t status;       /* REPLY, STEP_DONE, BATCH_ABORT (its reason) */
    float *logits;        /* STEP_DONE: (n_logits) */
    uint32_t n_logits;
    struct proto_device *devs; /* DEVICES: (n_devs) */
    uint32_t n_devs;
    uint8_t dev_kind; /* DEVICES: PROTO_DEVICE_* */
    double link_gbps; /* DEVICES */
    uint64_t host_budget; /* DEVICES */
    uint32_t threads;     /* STATS (flags: PROTO_STATS_*) */
    uint64_t bytes;       /* STATS */
    double *stats;        /* STATS_DONE: (n_stats) */
    uint32_t n_stats;
};
#define PROTO_STEP_ALL_POSITIONS 1u
#define PROTO_STEP_OVERLAP 2u

/* Appends m's header and body to out (a strbuf the caller owns). 0, or
 * ERR_NOMEM, or ERR_INVALID for counts above the limits (a bug above). */
int proto_encode(const struct proto_msg *m, struct strbuf *out);
/* Reads one message from the len bytes at p into *m (zeroed first). 0, or
 * ERR_INVALID naming the kind and field; *m holds nothing then. */
int proto_decode(const void *p, size_t len, struct proto_msg *m);
void proto_msg_free(struct proto_msg *m); /* frees what decode allocated; zeroes m */

#endif
