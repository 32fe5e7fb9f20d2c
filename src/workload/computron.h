/* Computron's experiments (arXiv 2306.13835, experiments/sim.py): the 19
 * workload configs its paper evaluates, as rates, CV, max_loaded and batch. */
#ifndef SHARDSWAP_WORKLOAD_COMPUTRON_H
#define SHARDSWAP_WORKLOAD_COMPUTRON_H

#include <stdbool.h>

#define WORKLOAD_MAX_MODELS 64
#define WORKLOAD_COMPUTRON_CONFIGS 19

struct workload_config {
    int n_models;
    double rates[WORKLOAD_MAX_MODELS]; /* requests/s per model */
    double cv;                         /* Gamma CV of inter-arrival times */
    int max_loaded, max_batch;
    bool round_robin;                  /* closed loop, alternating models */
};

/* Config k (0..18), in sim.py's order: rates (1,1,1), (10,1,1), (10,10,1),
 * each with CV 0.25, 1, 4, max_loaded 2, batch 8 (k = 0..8); rates
 * (1,1,1,1,1,1), (10,10,1,1,1,1), (10,10,10,10,1,1), each with CV 0.25, 1, 4,
 * max_loaded 4, batch 32 (k = 9..17); (1,1) CV 1, max_loaded 1, batch 8
 * (k = 18). ERR_INVALID for another k. */
int workload_computron(int k, struct workload_config *c);

#endif
