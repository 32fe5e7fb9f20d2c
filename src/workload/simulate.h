/* Policies compared on a simulated clock (sched/sim.h) over many arrival
 * seeds of a workload, with the device bytes and budgets its real-time
 * replay (workload/replay.h) would have and the costs measured there. */
#ifndef SHARDSWAP_WORKLOAD_SIMULATE_H
#define SHARDSWAP_WORKLOAD_SIMULATE_H

#include <stdint.h>

#include "sched/sim.h"
#include "workload/computron.h"
#include "workload/replay.h"

/* One policy over the seeds: each field the mean over the seeds of that
 * seed's statistic (latencies in seconds, arrival -> done). */
struct simulate_summary {
    double mean, p50, p90, p99, max; /* latency */
    double slo;                      /* SLO attainment */
    double swaps;                    /* loads of models */
    double adapter_loads;            /* loads of adapters */
    double bytes;                    /* bytes the loads moved (models' and adapters'), over
                                      * every device */
    double worst_p99_ratio;          /* the largest over seeds of p99 / the first policy's p99
                                      * (0 for the first policy) */
    /* chat workloads only (0 otherwise), summary_tokens against c's token SLOs */
    double ttft_p50, ttft_p99, tpot_p50, tpot_p99; /* seconds */
    double token_slo;                /* fraction meeting TTFT and TPOT */
    double goodput;                  /* requests/s meeting them */
    /* simulate_workload_experts only (0 otherwise): requests/s from the
     * first arrival to the last completion, experts copied on demand per
     * step (one per layer, expert and device), and seconds steps waited
     * for them; bytes counts those copies too */
    double throughput, expert_loads_per_step, expert_wait_s;
    double expert_streamed_per_step; /* of those copies, the ones streamed through for want of
                                      * room (sim_stats.expert_streamed) */
};

/* The bytes a load of rig's model 0 copies to its busiest device (its
 * largest shard's weights, the shards loading in parallel): what a costs
 * file's load_s_per_gb (workload/sim_costs.h) is per. */
int simulate_load_bytes(const struct replay_rig *rig, uint64_t *bytes);

/* Runs policies[0..n_pol) on the Gamma arrivals of workload c (replay_arrivals)
 * for seeds seed .. seed + seeds - 1, each over duration seconds, on the
 * stack rig would build for c (rig->tp devices sized for c->max_loaded
 * models, every model the shape of rig's model 0) with load and batch times
 * from costs (replay_measure_costs); s[p] is policy p's summary. A seed
 * without arrivals adds nothing (every seed weighs 1/seeds). A chat workload
 * (c->chat) draws each request's lengths (chat_requests_make, with the
 * seed's arrival seed) and costs them with costs' prefill and decode terms
 * (sched/sim.h). policies are the simulator's (sched_policy_find_sim, so
 * "clairvoyant" too). Errors name the policy, the arrivals or the allocation.
 */
int simulate_workload(const struct replay_rig *rig, const struct workload_config *c,
                      const struct sim_config *costs, const char *const *policies, int n_pol,
                      uint64_t seed, int seeds, double duration, double slo,
                      struct simulate_summary *s);
/* simulate_workload, and with floor (NULL: not wanted) a lower bound no
 * policy beats on the same requests and costs, as latency statistics (swaps
 * 0, no token fields; its worst_p99_ratio the largest over seeds of its p99 /
 * the first policy's): each request takes at least its own compute at the
 * cheapest batch size (a chat request: the cheapest prefill plus its
 * prompt's extra tokens plus one cheapest decode step per token after the
 * first), and is done no earlier than the first moment any load can end
 * (load_s; with overlap_loads, a one-token request overlap_tail of its
 * compute later, a chat request not bounded by it). It counts no queueing
 * behind other requests and no reload, so it is loose where swaps dominate:
 * a limit, not a policy. */
int simulate_workload_floor(const struct replay_rig *rig, const struct workload_config *c,
                            const struct sim_config *costs, const char *const *policies,
                            int n_pol, uint64_t seed, int seeds, double duration, double slo,
                            struct simulate_summary *s, struct simulate_summary *floor);

/* The bytes per device of a LoRA adapter of the given rank over every
 * projection the family adapts (q, k, v, o and the MLP's) of the model in
 * dir, split tp ways as its shards are (column-parallel projections: A
 * whole, B by output rows; row-parallel: A by input columns, B whole), in
 * the model's dtype, each layer's blob rounded up to 64 bytes. */
int simulate_adapter_bytes(const char *dir, int tp, int rank, uint64_t *bytes);

/* simulate_workload with c's models served as LoRA adapters of rank rank
 * over one base of rig's model 0's shape, on the same devices and budgets
 * (sized for c->max_loaded full models) and the same arrivals: request i
 * names adapter ev[i].model over the base. An adapter's load moves its
 * largest shard at the rate a model's load moves its weights (costs'
 * load_s for the largest shard's weights); its sequences cost what the
 * base's do (the LoRA update's compute is not modelled). s[p].swaps counts
 * the base's loads, adapter_loads the adapters'; no floor. */
int simulate_workload_adapters(const struct replay_rig *rig, const struct workload_config *c,
                               const struct sim_config *costs, const char *const *policies,
                               int n_pol, uint64_t seed, int seeds, double duration, double slo,
                               int rank, struct simulate_summary *s);

/* A mixture of experts' shape, from a gen-model preset's published
 * numbers (no weights needed), in bf16: its layers (all sparse), routed
 * experts per layer, experts per token, the weights' bytes, one expert's
 * bytes (its gate, up and down matrices), one layer's (attention, router
 * and its experts) and a token's KV cache over all layers. */
struct simulate_moe_shape {
    int layers, n_experts, top_k;
    uint64_t weights, expert, layer, kv_per_token;
};

/* The shape of preset ("mixtral-8x7b" or "qwen3-30b-a3b") cut to layers
 * (0: all of them). ERR_INVALID naming the presets otherwise. */
int simulate_moe_shape(const char *preset, int layers, struct simulate_moe_shape *sh);

/* What simulate_workload_experts simulates beyond the workload. */
struct simulate_moe {
    struct simulate_moe_shape shape; /* every model's */
    int tp;                          /* devices every model spans, each expert split over them */
    double room;           /* each device's memory, in models' shards (weights and reserve) */
    double zipf;           /* routing skew (sched/sim.h's sim_moe.zipf) */
    int drift_steps;       /* sim_moe.drift_steps */
    double copy_latency_s; /* sim_config.copy_latency_s */
    bool residency;        /* sim_config.expert_residency */
};

/* policies[0..n_pol) on the arrivals (and chat lengths) of workload c for
 * seeds seed .. seed + seeds - 1, as simulate_workload draws them, with c's
 * models mixtures of experts of m's shape on m->tp devices: each model's
 * shard its weights / tp and the KV reserve of c->max_batch requests of
 * the longest lengths (chat) or 16 tokens, the budgets m->room such
 * shards, no count limit (max_loaded 0), the layers partial residency and
 * expert trims give up those of the shape. costs gives the batch, step and
 * prefill terms and load_s (a whole shard's load; on-demand copies at its
 * rate); model i's routing seed is the arrival seed's, times 1000, plus i.
 * s[p]: policy p's averages over seeds. Errors name the policy, the
 * arrivals or the allocation. */
int simulate_workload_experts(const struct workload_config *c, const struct sim_config *costs,
                              const char *const *policies, int n_pol, uint64_t seed, int seeds,
                              double duration, double slo, const struct simulate_moe *m,
                              struct simulate_summary *s);

/* Of a shape, a shard's weights and its batch reserve on each of tp
 * devices for c (simulate_workload_experts' sizes). */
void simulate_moe_shard(const struct simulate_moe_shape *sh, int tp,
                        const struct workload_config *c, uint64_t *weights, uint64_t *kv);

#endif
