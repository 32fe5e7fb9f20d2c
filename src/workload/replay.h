/* Real-time replay of a workload through the engine: the stack a benchmark
 * runs on (engine/stack.h), Computron's requests released at their arrival
 * times, and each request's times recorded as it completes.
 *
 *   replay_run(rig, workload, policy, arrivals) -> a fresh stack, every
 *   arrival submitted at its time (or, for a round-robin workload, one
 *   blocking request after the other), the engine drained; per-request
 *   records and the engine's counters; the stack closed
 *   replay_warm_latency(rig) -> one request's latency on a resident model
 *   replay_measure_costs(rig) -> a load's time and batches of 1..max_batch,
 *   the costs sched/sim.h replays with
 *
 * The rig: rig->tp devices (CPU, or CUDA as rig->device_kind says) with room for max_loaded models
 * (every model has the same shape) and the largest batch of Computron's requests each; every model
 * over all of them with TP = tp; all models start in host memory, as in Computron. Requests are
 * Computron's: "Berkeley is the number one public" (8 tokens, as replay_prompt_for gives them to
 * each model's family), max_tokens 1. Every function runs on the caller's thread and returns once
 * the engine has drained; errors name what failed.
 *
 * Under mpirun (rig->job, docs/ARCHITECTURE.md: "Processes") device d is
 * process rig->procs[d]'s, or by default process d % P's, and every stack
 * is led: cluster_job_lead before stack_open, cluster_job_release after
 * stack_close. The other processes' shards have no host copy on process 0:
 * their owners load them from their own copy of each checkpoint (the same
 * path on every node). */
#ifndef SHARDSWAP_WORKLOAD_REPLAY_H
#define SHARDSWAP_WORKLOAD_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "engine/stack.h"
#include "model/model.h"
#include "sched/sim.h"
#include "workload/arrival.h"
#include "workload/computron.h"
#include "workload/report.h"

#define REPLAY_PROMPT_LEN 8 /* tokens of Computron's prompt */

struct cluster_job;

/* Computron's request, as every replay sends it (through the engine here,
 * over HTTP in workload/http_replay.h): "Berkeley is the number one public"
 * through the OPT tokenizer (BOS first), max_tokens 1, top_k 50, top_p 0.5,
 * temperature 0.7, seeded with the request's index. */
extern const int32_t replay_prompt[REPLAY_PROMPT_LEN];
/* Computron's prompt for a model of any family: its BOS first (OPT's 2
 * when it declares none), then the same ids folded into its vocabulary
 * (id % vocab), so a Llama-family model gets its own BOS and ids it has.
 * For an OPT checkpoint it is replay_prompt. */
void replay_prompt_for(const struct model_info *info, int32_t out[REPLAY_PROMPT_LEN]);
/* A prompt of n tokens for a chat request: replay_prompt_for's first, its
 * ids after the BOS repeated to length n. */
void replay_prompt_fill(const struct model_info *info, int32_t *out, int n);
#define REPLAY_MAX_TOKENS 1
#define REPLAY_TEMPERATURE 0.7f
#define REPLAY_TOP_K 50
#define REPLAY_TOP_P 0.5f

struct replay_rig {
    const char *const *paths; /* (n_models) checkpoint directories, the caller's */
    int n_models;             /* 1..WORKLOAD_MAX_MODELS */
    int tp;                   /* devices, every model over all of them */
    const char *device_kind;  /* "cpu" (NULL too) or "cuda" */
    const int *gpus;          /* cuda: (tp) the GPU of each device (stack_config.gpus);
                               * NULL: device d on GPU d */
    double link_gbps;         /* CPU devices: emulated host link per device (0: memory
                               * speed); a stack of CUDA devices refuses one */
    const char *compute;      /* stack_config.compute: "f32", "bf16", NULL: auto */
    int fit_prompt, fit_max_tokens; /* the largest request the stack sizes for (chat:
                                     * the lengths' max); 0: Computron's, 8 and 1 */
    /* replay_run's adapters form: with n_adapters > 0 (the workload's
     * models), the workload's model k is served as LoRA adapter k
     * (adapters[k], a PEFT directory; the caller's) over paths[0], the one
     * model on the stack, whose device budget is what the same workload's
     * models would be sized (room for max_loaded of them) */
    const char *const *adapters;
    int n_adapters;
    /* under mpirun, the job (cluster/job.h; process 0's side, not owned);
     * NULL: every device is this process's */
    struct cluster_job *job;
    const int *procs; /* with job: (tp) the process of each device
                       * (stack_config.procs); NULL: device d on process d % P */
};

struct replay_result {
    const char *policy;            /* the name passed to replay_run (not copied) */
    struct request_record *recs;   /* (n) owned; times from the start of the run */
    size_t n;
    struct engine_stats st;        /* the engine's counters once drained */
    uint64_t bytes_loaded;         /* host -> device over every load, models' and adapters' */
    double wall_s;                 /* first submission -> drained */
};

/* The stack config of a rig serving its first n_models models (names "m0",
 * "m1", ... written into names) with room for max_loaded of them, batches of
 * max_batch and the policy, its devices on the rig's processes (procs[],
 * n_procs); mc and names must hold n_models entries and outlive *sc. For
 * sizing (stack_size) as well as stack_open. */
void replay_stack_config(const struct replay_rig *rig, int n_models, int max_loaded,
                         int max_batch, const char *policy, struct stack_config *sc,
                         struct stack_model_config *mc, char (*names)[16]);

/* The Gamma arrivals of workload c (its rates and CV) over duration seconds
 * with seed, as arrival_generate makes them; *ev is the caller's to free. */
int replay_arrivals(const struct workload_config *c, double duration, uint64_t seed,
                    struct arrival **ev, size_t *n);

/* Replays c with policy on a fresh stack of rig's first c->n_models models
 * (with rig->n_adapters, of model 0 and the adapters, request of model k to
 * adapter k):
 * ev[0..n_ev) released at their times, or, when c->round_robin,
 * rr_requests blocking requests alternating over the models (ev unused).
 * *out is the caller's (replay_result_free), also after an error. A request
 * the engine refuses is recorded with its error status; only a failure to
 * build the stack or to allocate is an error. */
int replay_run(const struct replay_rig *rig, const struct workload_config *c, const char *policy,
               const struct arrival *ev, size_t n_ev, int rr_requests, struct replay_result *out);
/* replay_run of a chat workload (c->chat): request i has lens[i]'s prompt
 * length (replay_prompt_fill's ids) and max_tokens = its output length;
 * lens (n_ev) as chat_requests_make gives them for ev. The stack sizes for
 * rig's fit_prompt and fit_max_tokens, which must cover c's lengths. */
int replay_run_chat(const struct replay_rig *rig, const struct workload_config *c,
                    const char *policy, const struct arrival *ev, size_t n_ev,
                    const struct chat_request *lens, struct replay_result *out);
/* Frees out's records and zeroes it. NULL-safe. */
void replay_result_free(struct replay_result *out);

/* The latency of one request on model 0 once resident (best of three after
 * the one that loads it), on rig's devices at memory speed: the unit of an
 * SLO scale. */
int replay_warm_latency(const struct replay_rig *rig, double *secs);

/* Whether the rig's copies take no compute (a link, or CUDA devices): its
 * engine overlaps loads with batches, and sim_config.overlap_loads says so. */
bool replay_overlap_loads(const struct replay_rig *rig);

/* Measures, on model 0 of rig, what sched/sim.h needs: load_s (one load)
 * and batch_s[1..max_batch] (batches of 1, 2, 3, 4, 6, 8, 12, ... up to
 * max_batch, best of two, linear in between), and sets max_batch,
 * overlap_tail and overlap_loads (as the rig's engine runs: with a link or
 * CUDA devices, none of them another process's) to match; the rest of *sc
 * is left as it was. max_batch in 1..SIM_MAX_BATCH. */
int replay_measure_costs(const struct replay_rig *rig, int max_batch, struct sim_config *sc);

/* Measures, on model 0 of rig, the chat terms of sched/sim.h: base_prompt
 * (REPLAY_PROMPT_LEN), prefill_token_s (one request of REPLAY_CHAT_PROBE
 * prompt tokens against one of REPLAY_PROMPT_LEN, best of two, per extra
 * token) and step_s[1..max_batch] (batches of the sizes replay_measure_costs
 * uses generating REPLAY_CHAT_STEPS + 1 tokens: the slowest request's time
 * per token after its first, linear in between). The rest of *sc is left as
 * it was; rig must fit prompts of REPLAY_CHAT_PROBE tokens and
 * REPLAY_CHAT_STEPS + 1 outputs (fit_prompt, fit_max_tokens). */
#define REPLAY_CHAT_PROBE 128
#define REPLAY_CHAT_STEPS 8
int replay_measure_chat_costs(const struct replay_rig *rig, int max_batch, struct sim_config *sc);

#endif
