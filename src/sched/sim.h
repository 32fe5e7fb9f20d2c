/* The engine on a simulated clock: the same scheduling policies (sched.h),
 * fed the same snapshots the engine builds, with loads and batches that take
 * modelled times instead of running. Computron's experiments/sim.py did the
 * same for its engine.
 *
 * It carries out the policy's actions through sched_act (act.c), as the engine does,
 * with simulated operations in place of the engine's.
 *
 * What it models, as the engine does it: per-model FIFO queues; a batch takes
 * up to max_batch requests from its queue head by the engine's rule
 * (sched_batch_joins: with the policy's batch_same_params_only, one
 * params_class) and runs one forward (max_tokens 1, Computron's requests), or
 * for chat requests (n_output > 0) a prefill that grows with the batch's
 * prompt tokens and then decode steps until its longest request is done,
 * each request done at its own last step (no request joins a batch in
 * flight); a
 * load makes a model resident after load_s and is refused when its bytes do
 * not fit; victims leave at once, or at the end of their batch when one is in
 * flight; a trimming load's victims give up their last layers at once and
 * stay partly resident, and a reload copies only what is missing
 * (sim_config.layers); with overlap_loads a batch
 * may start on a loading model and then ends no earlier than the load's end
 * plus overlap_tail of its compute (the layers that still had to arrive);
 * a SCHED_PREEMPT pauses a batch at its first step boundary at or after the
 * action (requests done by then are done), and the SCHED_SERVE that resumes
 * it runs what was left from then on, every later time of its requests moved
 * by the pause; a paused batch's memory (kv_bytes) stays while its model's
 * weights leave.
 * LoRA adapters (sim_config.n_adapters) follow the engine's rules: an
 * adapter's requests queue with its base's (the policy sees the base, its
 * queue and bytes counting its adapters'); a request whose adapter is not
 * on the devices does not join a batch, and its adapter loads (its bytes
 * over the link, every shard at once, after its base's load when that is
 * still going) as soon as its base is resident, making room from free
 * bytes, then by evicting the least recently used idle adapters (none of
 * a batch in flight, none with a request waiting), then, when nothing of
 * its base can run, through the policy as a load of the base (the base
 * shown lacking the adapter's bytes); adapters leave with their base.
 * What it leaves out: copies slowing compute (CPU devices at memory speed),
 * compute noise, and two batches sharing a device (neither policy does that).
 *
 * Used to compare policies over many seeds in seconds, where a real-time run
 * of one config takes a minute, and by tests that need exact timing. */
#ifndef SHARDSWAP_SCHED_SIM_H
#define SHARDSWAP_SCHED_SIM_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "sched/sched.h"

#define SIM_MAX_BATCH 256

struct sim_config {
    const struct sched_policy *policy;
    int n_models, n_devices;
    const uint64_t *bytes;  /* n_models x n_devices: each model's shard bytes per device */
    uint64_t budget[SCHED_MAX_DEVICES];
    int max_loaded;         /* 0 = no count limit */
    int max_batch;          /* 1..SIM_MAX_BATCH */
    double load_s;          /* one model's swap-in, all shards in parallel */
    double batch_s[SIM_MAX_BATCH + 1]; /* [b]: compute time of a batch of b requests */
    double overlap_tail;    /* 0..1 */
    /* Chat requests (sim_request.n_output > 0): batch_s[b] is then the
     * prefill of b requests of base_prompt tokens each, prefill_token_s the
     * cost of every prompt token beyond that, and step_s[b] one decode step
     * of b requests still generating. All 0 for Computron's one-token
     * requests, whose batches cost batch_s alone. */
    int base_prompt;
    double prefill_token_s;
    double step_s[SIM_MAX_BATCH + 1];
    bool overlap_loads;
    /* Partial residency (sched_action.trim): a model's weights on a device
     * (bytes less kv_bytes) hold `layers` layers of layer_bytes each
     * (n_models x n_devices; NULL: the weights / layers each); the
     * rest of the weights (embeddings and head) is never trimmed. A trim
     * makes the model partly resident at once: its batches' reserve
     * (kv_bytes, held only while resident, as the engine holds it) leaves
     * on every device, then whole layers, last first, on the device asked.
     * A load of a partly resident model allocates the reserve again and
     * copies only the missing layers, in load_s x the largest missing
     * share of the weights over its devices (the shards load in parallel);
     * with overlap_loads its batch may start at once and ends no earlier
     * than that load's end plus overlap_tail of its compute (the tail is
     * the compute of the layers that arrive last, not scaled).
     * layers 0: no trims (exec_trim gives nothing: victims leave whole). */
    int layers;
    const uint64_t *layer_bytes;
    /* Per-model controls, each NULL (every model the default) or an array
     * of n_models, given to the policy as the engine gives the values of
     * engine_set_keep_alive, engine_set_priority, engine_set_min_resident
     * and engine_pin_model (sched.h's sched_model says what each means):
     * keep_alive seconds idle, from the end of the model's last batch (or
     * its load), before it is unloaded (NAN: the policy's own; INFINITY:
     * never; default NAN); priority -SCHED_PRIORITY_MAX..SCHED_PRIORITY_MAX
     * (default 0); max_queue_wait seconds (0: no bound); min_resident
     * seconds from a load (0: none); pinned: never a victim. */
    const double *keep_alive;
    const int *priority;
    const double *max_queue_wait;
    const double *min_resident;
    const bool *pinned;
    /* n_models x n_devices or NULL (0): of bytes, the memory a batch paused
     * by a SCHED_PREEMPT keeps on the devices while the rest of its model
     * leaves (its KV caches and activations, as the engine keeps them) */
    const uint64_t *kv_bytes;
    /* LoRA adapters (0: none): adapter k is registered over model
     * adapter_base[k] (n_adapters), holds adapter_bytes[k * n_devices + d]
     * on device d (on every device its base has weights on) and loads in
     * adapter_load_s[k] seconds (its shards in parallel). Its base's bytes
     * plus its own must fit every budget (else ERR_INVALID naming it). */
    int n_adapters;
    const int *adapter_base;
    const uint64_t *adapter_bytes;
    const double *adapter_load_s;
    /* Expert-level residency (sim_moe below): moe is NULL (no model has
     * routed experts) or n_models shapes, a model with n_experts 0 being
     * dense. With expert_residency false the experts are part of the
     * weights and nothing below happens (the results are those of moe
     * NULL, bit for bit). With it true, each sparse layer's routed experts
     * are units of residency (an expert's slices on every device come and
     * go together), as the swap manager keeps them: the victims of a
     * trimming load (sched_action.trim: swapwise-partial's and
     * clairvoyant-partial's) give up their coldest experts first (one
     * that gave only experts stays resident, and the policy sees it
     * resident, holding what it holds), then whole layers as partial
     * residency does (only once every expert on the device is gone); other
     * policies' victims leave whole, as without it; a batch routes
     * each token of each step to top_k experts per sparse layer (sim_moe's
     * Zipf trace), and a step whose routing picks experts not on the
     * devices waits, layer by layer, copy_latency_s plus the most bytes
     * one device copies (link_bytes_per_s per device; 0: the rate of a
     * whole load, the largest shard's weights over load_s) before its
     * compute. Their room comes from free bytes, then the coldest experts
     * of the other idle models, never the model's own; with none left
     * they stream through (copied, used, not kept; expert_streamed: the
     * engine's step fails there). The routing and the copies of a batch's
     * steps are drawn when it starts, against the residency then. A load
     * of a model brings back all its experts. */
    const struct sim_moe *moe;
    bool expert_residency;
    double link_bytes_per_s;
    double copy_latency_s;
    FILE *trace;            /* non-NULL: one line per action carried out */
    /* optional: told of each operation carried out (sched_act's carried),
     * at simulated time now; model is the request's model index */
    void (*on_op)(void *ctx, double now, const struct sched_carried *op);
    void *on_op_ctx;
};

/* A mixture of experts' shape and routing trace, per model (sim_config.moe).
 * Of each device's weights, sparse_layers x n_experts experts of
 * expert_bytes[d] each; the sparse layers are the last sparse_layers of
 * sim_config.layers when layers > 0 (each layer's layer_bytes holding its
 * experts). Each token of a step picks top_k distinct experts per sparse
 * layer (top_k <= SIM_MAX_TOP_K, n_experts <= SIM_MAX_EXPERTS): the expert
 * of popularity rank r with weight 1 / (r + 1)^zipf (0: uniform), drawn
 * from the model's own generator (seed; deterministic), ranks mapped to
 * experts by a per-layer permutation that rotates by one every
 * drift_steps of the model's steps (0: never). Hotness: per (layer,
 * expert) the tokens routed there, each step's worth halving over
 * SIM_EXPERT_HALF_LIFE steps (the swap manager's). */
struct sim_moe {
    int sparse_layers, n_experts, top_k;
    uint64_t expert_bytes[SCHED_MAX_DEVICES];
    double zipf;
    uint64_t seed;
    int drift_steps;
};

#define SIM_EXPERT_HALF_LIFE 64 /* steps */
#define SIM_MAX_TOP_K 64
#define SIM_MAX_EXPERTS 4096

struct sim_request {
    double arrival; /* input; requests sorted by arrival */
    int model;      /* input */
    /* input: 0, the model alone; k + 1, adapter k over it (model must be
     * adapter k's base) */
    int adapter;
    /* input: its sampling parameters' class (the engine compares temperature,
     * top-k and top-p); requests of one class sample alike. 0 for all: one class */
    int params_class;
    /* input, chat requests: prompt tokens and tokens to generate; n_output 0
     * (Computron's) is one token costing batch_s */
    int n_prompt, n_output;
    /* input, optional: of bytes on each device its model has weights on, a
     * batch of this request's memory (KV cache and activations; 0: the
     * model's kv_bytes hold it). Once it has arrived, its model's reserve
     * is at least that, as the engine's grows with the longest request: a
     * resident model takes the growth when the device has room, else the
     * policy makes the room as for a load (the model is shown partly
     * resident, lacking it), evicting or trimming idle models. One that can
     * never fit beside its weights, or beside the pinned models, is
     * sim_run's ERR_INVALID, as the engine refuses it. */
    uint64_t batch_bytes;
    double start, first_token, done;
    int batch_size;
};

struct sim_stats {
    uint64_t loads, evictions, batches;
    uint64_t preemptions; /* batches paused with sequences left (SCHED_PREEMPT) */
    uint64_t trims;       /* trims carried out (one per victim and device asked) */
    uint64_t bytes_loaded; /* bytes loads moved, over every device */
    /* adapters: loads, their bytes over every device, and adapters that
     * left (with their base, or as another adapter's victims); swap_s and
     * bytes_loaded count models only, adapter_swap_s the adapters' loads */
    uint64_t adapter_loads, adapter_bytes_loaded, adapter_evictions;
    double adapter_swap_s;
    /* expert residency (sim_config.expert_residency): the steps batches ran
     * (a prefill and each decode step), the experts copied on demand (one per
     * layer and expert, its slices on every device) and their bytes over
     * every device (not in bytes_loaded), of those the ones streamed
     * through for want of room (the engine's step fails there), the time
     * steps waited for them (in compute_s too), and the experts victims
     * and room-making gave up (one per layer and expert) */
    uint64_t steps, expert_loads, expert_bytes_loaded, expert_streamed, expert_trims;
    double expert_wait_s;
    double swap_s, compute_s;
    uint64_t high_water[SCHED_MAX_DEVICES]; /* most bytes resident at once, per device */
};

/* Runs every request to completion (they all complete: a policy that leaves
 * work waiting with nothing in progress is an ERR_INVALID naming the policy
 * and the time). A control out of its range, or pinned models that leave
 * another model no room on some device, is an ERR_INVALID naming the model
 * and the control; a request whose batch_bytes never fit is one naming the
 * request, its model and the bytes. */
int sim_run(const struct sim_config *c, struct sim_request *reqs, size_t n, struct sim_stats *st);

#endif
