/* The simulator's costs as a file or as flags, so `bench workload
 * --simulate` can replay on the same costs from run to run instead of
 * measuring them each time (a measured load moves with the machine's load).
 *
 * A costs file is one JSON object; sim_costs.c documents its keys. What is
 * not given is measured (workload/replay.h) and what is given replaces what
 * was measured; the costs used can be written back as a file. */
#ifndef SHARDSWAP_WORKLOAD_SIM_COSTS_H
#define SHARDSWAP_WORKLOAD_SIM_COSTS_H

#include <jansson.h>
#include <stdint.h>

#include "sched/sim.h"

/* Each field as given; the "not given" value says it was not. */
struct sim_costs {
    /* seconds a load takes per GB of the weights its largest shard holds
     * (the shards of a model load in parallel); 0: not given */
    double load_s_per_gb;
    /* batch_s[b], b = 1..batch_max: one forward of a batch of b requests
     * (a chat config: the prefill of b prompts of base_prompt tokens);
     * batch_max 0: not given */
    int batch_max;
    double batch_s[SIM_MAX_BATCH + 1];
    double overlap_tail;   /* sim_config.overlap_tail, 0..1; < 0: not given */
    double warm_latency_s; /* the unit of --slo-scale; 0: not given */
    /* chat configs (sim_config's chat terms): base_prompt < 0, prefill_token_s
     * < 0 and step_max 0 when not given */
    int base_prompt;
    double prefill_token_s;
    int step_max;
    double step_s[SIM_MAX_BATCH + 1];
};

/* c with nothing given. */
void sim_costs_init(struct sim_costs *c);

/* Reads the costs file at path into c (sim_costs_init'd first). ERR_IO when
 * it cannot be read; ERR_FORMAT naming the file and the key when it is not
 * the format (an unknown key, a value out of its range, a curve whose sizes
 * do not rise from 1). */
int sim_costs_read(const char *path, struct sim_costs *c);

/* A cost curve as a flag gives it, "B1:S1,B2:S2,...": batch sizes rising
 * from 1 with their seconds, linear in between, into s[1..*max] (*max the
 * last size, at most SIM_MAX_BATCH). ERR_INVALID naming flag otherwise. */
int sim_costs_parse_curve(const char *flag, const char *text, double *s, int *max);

/* The costs c gives as the file's JSON object (every curve point written,
 * each number as it is, so reading it back gives c again); keys not given
 * are left out. New reference; NULL when out of memory. */
json_t *sim_costs_json(const struct sim_costs *c);

/* Writes sim_costs_json(c) to path (created or replaced). ERR_IO naming the
 * path when it cannot. */
int sim_costs_write(const char *path, const struct sim_costs *c);

#endif
