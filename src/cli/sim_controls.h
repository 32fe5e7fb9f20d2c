/* bench workload --simulate's per-model controls, named as the server's
 * YAML keys (models[].keep_alive, priority, max_queue_wait, min_resident,
 * pinned): each flag one value for every model or a comma list of one per
 * model, into the arrays sched/sim.h's sim_config reads. */
#ifndef SHARDSWAP_CLI_SIM_CONTROLS_H
#define SHARDSWAP_CLI_SIM_CONTROLS_H

#include <stdbool.h>

#include "sched/sim.h"
#include "workload/computron.h"

/* The flags' texts; NULL: not given. */
struct sim_controls_flags {
    const char *keep_alive, *priority, *max_queue_wait, *min_resident, *pinned;
};

struct sim_controls {
    /* (WORKLOAD_MAX_MODELS) each model's value; one value given fills all */
    double keep_alive[WORKLOAD_MAX_MODELS];
    int priority[WORKLOAD_MAX_MODELS];
    double max_queue_wait[WORKLOAD_MAX_MODELS];
    double min_resident[WORKLOAD_MAX_MODELS];
    bool pinned[WORKLOAD_MAX_MODELS];
    bool set[5]; /* which flags were given, in the order above */
};

/* Whether any flag is given. */
bool sim_controls_any(const struct sim_controls_flags *f);

/* Parses f for n_models models: a list must name exactly n_models values
 * (lists_ok false: one value only, for configs whose models' counts
 * differ). keep_alive: seconds >= 0 or -1 (forever); priority: an integer
 * from -ENGINE_PRIORITY_MAX to ENGINE_PRIORITY_MAX; max_queue_wait and
 * min_resident: seconds >= 0 (0: none); pinned: true or false. ERR_INVALID
 * with a one-line message naming the flag, the item and what was expected. */
int sim_controls_parse(const struct sim_controls_flags *f, int n_models, bool lists_ok,
                       struct sim_controls *out);

/* Points sc's controls at c's arrays, for the flags given (the others stay
 * NULL: the defaults). c must outlive sc's use. */
void sim_controls_apply(const struct sim_controls *c, struct sim_config *sc);

#endif
