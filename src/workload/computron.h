/* Computron's experiments (arXiv 2306.13835, experiments/sim.py): the 19
 * workload configs its paper evaluates, as rates, CV, max_loaded and batch. */
#ifndef SHARDSWAP_WORKLOAD_COMPUTRON_H
#define SHARDSWAP_WORKLOAD_COMPUTRON_H

#include <stdbool.h>

#include "workload/arrival.h"
#include "workload/chat.h"

#define WORKLOAD_MAX_MODELS ARRIVAL_MODELS_MAX
#define WORKLOAD_COMPUTRON_CONFIGS 19

struct workload_config {
    int n_models;
    double rates[WORKLOAD_MAX_MODELS]; /* requests/s per model */
    double cv;                         /* Gamma CV of inter-arrival times */
    int max_loaded, max_batch;
    bool round_robin;                  /* closed loop, alternating models */
    bool chat;                         /* chat traffic (workload/chat.h): lengths per request */
    double zipf;                       /* chat: the popularity exponent of the rates */
    struct chat_lengths lengths;       /* chat: the length distributions */
    double slo_ttft_s, slo_tpot_s;     /* chat: the token SLOs its summaries count
                                        * (summary_tokens) */
};

/* Config k (0..18), in sim.py's order: rates (1,1,1), (10,1,1), (10,10,1),
 * each with CV 0.25, 1, 4, max_loaded 2, batch 8 (k = 0..8); rates
 * (1,1,1,1,1,1), (10,10,1,1,1,1), (10,10,10,10,1,1), each with CV 0.25, 1, 4,
 * max_loaded 4, batch 32 (k = 9..17); (1,1) CV 1, max_loaded 1, batch 8
 * (k = 18). ERR_INVALID for another k. */
int workload_computron(int k, struct workload_config *c);

/* What a benchmark's flags say about its workload. */
struct workload_flags {
    const char *config; /* "computron:K", "chat:M:R[:CV[:ZIPF]]", "round-robin" or "custom" */
    const char *rates;  /* custom: "R1,R2,..." requests/s per model, or NULL */
    int n_models;       /* custom with alpha, round-robin: models (0: unset) */
    double alpha;       /* custom: power-law skew (< 0: unset) */
    double total_rate;  /* custom with alpha: requests/s over all models */
    double cv;          /* custom: Gamma CV (<= 0: 1, Poisson) */
};

/* The workload f names, as `bench workload` and `bench serve` read it:
 * computron:K is workload_computron(K); round-robin is n_models (default 2)
 * models in a closed loop, max_loaded 1, batch 8; custom is rates (or
 * n_models power-law rates summing to total_rate), CV cv, max_loaded half
 * the models, batch 8; chat:M:R[:CV[:ZIPF]] is chat traffic (workload/chat.h)
 * over M models (1..WORKLOAD_MAX_MODELS) with Zipf rates (exponent ZIPF,
 * default 1) summing to R requests/s, Gamma CV (default 1), max_loaded a
 * quarter of the models (at least 1), batch 8, the default lengths and the
 * token SLOs CHAT_SLO_TTFT_S and CHAT_SLO_TPOT_S.
 * ERR_INVALID naming the flag otherwise. */
int workload_config_from_flags(const struct workload_flags *f, struct workload_config *c);

#endif
