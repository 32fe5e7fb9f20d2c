/* The measurement behind `shardswap bench swap`: how fast one checkpoint
 * moves onto its devices under each TP x PP layout, and what a cold request
 * costs with and without layer overlap.
 *
 *   swapbench_run(config) -> for each layout, on a stack of its own
 *   (engine/stack.h: tp x pp devices, the model placed on them in order):
 *     the host tier filled once (disk -> host, timed);
 *     CUDA devices only: the link, a pinned copy of the same bytes onto every
 *       device of the layout at once and back (when all are this process's);
 *     repeat swap-ins (host -> devices, every shard at once) and swap-outs;
 *     repeat rounds of a cold request (not resident -> first token's
 *       logits) with layer overlap, one without, and the same request warm;
 *   with an adapter (config.adapter): registered over the model
 *     (swap_register_adapter) once the model is resident, its host copy
 *     filled (timed), then repeat swap-ins and swap-outs of it alone;
 *   medians of the repeat runs; beside them, on CPU devices, the host's
 *   memcpy and streaming copy on 1 .. max_workers threads, the reference the
 *   table compares with.
 *
 * Under mpirun (config.job, docs/ARCHITECTURE.md: "Processes") device d of
 * every layout is process d % P's: each stack is led (cluster_job_lead
 * before stack_open, cluster_job_release after stack_close), the shards on
 * other processes are loaded by their owner from its own copy of the
 * checkpoint (into its host copy at the first load; copies from it after),
 * and the
 * results say per shard which process holds it and per process its
 * aggregate. The reference and the host fill are process 0's. A cold
 * request's step waits for the other processes' shards to be loaded (their
 * owner answers a load once, so their compute does not overlap it).
 *
 * Everything runs on the caller's thread, which waits for every transfer;
 * the stacks are closed before it returns. Errors name what failed (a
 * layout the model cannot be cut into, a device that cannot be opened, a
 * load that failed). No timing decides anything: the results are numbers
 * to print. */
#ifndef SHARDSWAP_WORKLOAD_SWAPBENCH_H
#define SHARDSWAP_WORKLOAD_SWAPBENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/stack.h"
#include "swap/swap.h"

#define SWAPBENCH_MAX_LAYOUTS 9  /* --layouts' 8 and --tp/--pp's one */
#define SWAPBENCH_MAX_WORKERS 16 /* tp * pp of a layout */
#define SWAPBENCH_MAX_PROMPT 512 /* tokens of the cold request */

struct cluster_job;

struct swapbench_config {
    const char *dir; /* the checkpoint */
    int n_layouts;   /* 1 .. SWAPBENCH_MAX_LAYOUTS */
    int tp[SWAPBENCH_MAX_LAYOUTS], pp[SWAPBENCH_MAX_LAYOUTS];
    /* every layout's routed experts whole on its TP ranks
     * (placement.expert_parallel), not split */
    bool expert_parallel;
    int repeat;     /* medians of this many runs, >= 1 */
    int prompt_len; /* tokens of the cold request, 1 .. SWAPBENCH_MAX_PROMPT */
    /* CUDA devices: a layout's shards go on the first tp x pp of gpus[]
     * (n_gpus of them; a GPU listed again is another partition of it), each
     * sized by the stack for its shard and the cold request. Else CPU
     * devices, one per shard, each with a budget of the most any layout
     * puts on it (its shard, the cold request's KV cache and activations). */
    bool cuda;
    int n_gpus;
    int gpus[STACK_MAX_DEVICES];
    /* bytes per thread of the host's copy reference (CPU devices only);
     * 0: not measured (memcpy_bps and stream_bps stay 0) */
    size_t ref_bytes;
    /* under mpirun, the job (cluster/job.h; process 0's side): device d of
     * each layout on process d % cluster_job_procs(job). NULL: every device
     * is this process's. Not owned. */
    struct cluster_job *job;
    /* a PEFT LoRA adapter of the model (NULL: none), measured over it */
    const char *adapter;
};

/* One layout's medians, in seconds; 0 where not measured. */
struct swapbench_layout {
    int tp, pp;
    /* "" when measured; else why not: the checkpoint's tensors cannot be
     * split that way (a quantized tensor's columns off its block
     * boundaries), the planner's one line. Nothing below is filled then. */
    char skipped[256];
    uint64_t bytes; /* device bytes of the weights, all shards (swap_shard_device_bytes) */
    double load_s, offload_s, host_fill_s;
    /* CUDA devices: the layout's bytes copied H2D and D2H on all its
     * devices at once (0 on CPU devices, and when one of the layout's
     * devices is another process's) */
    double link_h2d_s, link_d2h_s;
    double worker_gbs[SWAPBENCH_MAX_WORKERS]; /* each shard's load, GB/s (tp * pp) */
    uint64_t shard_bytes[SWAPBENCH_MAX_WORKERS]; /* each shard's device bytes */
    int shard_proc[SWAPBENCH_MAX_WORKERS]; /* the process holding each shard (0 without a job) */
    /* per process p (shards only on p < tp * pp with d % P placement): the
     * bytes of its shards and its aggregate, those bytes / the slowest of
     * its shards' loads, median of the repeat runs in GB/s; 0 where it
     * holds none. The job's aggregate is bytes / load_s. */
    uint64_t proc_bytes[SWAPBENCH_MAX_WORKERS];
    double proc_gbs[SWAPBENCH_MAX_WORKERS];
    double cold_overlap_s, cold_serial_s, warm_s;
    /* config.adapter: its device bytes (all shards), its host fill, and the
     * medians of its swap-in (every shard at once, the model resident) and
     * swap-out */
    uint64_t adapter_bytes;
    double adapter_load_s, adapter_offload_s, adapter_host_fill_s;
    /* the layout's swap manager at the end of its run: every load and byte
     * the measurement moved (loads: 3 x repeat, each moving every shard's
     * blobs once) */
    struct swap_stats stats;
};

struct swapbench_report {
    int procs; /* the job's processes (1 without one) */
    int n_layouts;
    struct swapbench_layout layouts[SWAPBENCH_MAX_LAYOUTS]; /* as configured */
    int max_workers;                                        /* the largest tp * pp */
    /* CPU devices with ref_bytes: bytes/s of memcpy and of the streaming
     * copy on t threads of process 0, [t] for t in 1 .. max_workers ([0]
     * unused) */
    double memcpy_bps[SWAPBENCH_MAX_WORKERS + 1], stream_bps[SWAPBENCH_MAX_WORKERS + 1];
    /* under mpirun, CPU devices with ref_bytes: each process's own memcpy
     * and streaming copy on one thread, measured there (STATS) in the same
     * run, the reference of its shards' rates ([0]: memcpy_bps[1]) */
    double proc_memcpy_bps[SWAPBENCH_MAX_WORKERS], proc_stream_bps[SWAPBENCH_MAX_WORKERS];
};

/* Checks every layout against the model in c->dir (TP against its heads,
 * PP against its layers), sizes the devices and the host tier, measures
 * each layout in order, then the reference, into out. A layout whose shards
 * the checkpoint's tensors cannot be cut into (quantized columns off their
 * blocks) is skipped, its reason in .skipped, unless every layout is. 0, or
 * an error naming the layout or the step that failed (out partly filled
 * then). */
int swapbench_run(const struct swapbench_config *c, struct swapbench_report *out);

#endif
