/* bench workload --expert-residency: mixtures of experts on the simulated
 * clock (workload/simulate.h's simulate_workload_experts), whole-model
 * swapping against expert-level residency over a list of routing skews,
 * side by side. The flags' parsing and the table; the simulation is
 * workload/'s. */
#ifndef SHARDSWAP_CLI_BENCH_EXPERTS_H
#define SHARDSWAP_CLI_BENCH_EXPERTS_H

#include <stdbool.h>
#include <stdint.h>

#include "cli/sim_controls.h"
#include "workload/computron.h"
#include "workload/sim_costs.h"

#define BENCH_EXPERTS_MAX_SKEWS 8

/* The flags as given (NULL / 0: not given). */
struct bench_experts_flags {
    const char *mode;  /* --expert-residency on|off|both */
    const char *skews; /* --routing-skew S1,S2,... */
    int drift;         /* --routing-drift steps */
    float room;        /* --room models (0: max_loaded + 0.5) */
    float copy_latency_s;
};

/* Whether any of the flags is given. */
bool bench_experts_any(const struct bench_experts_flags *f);

/* What the flags say: which runs (off, on) and the skews. ERR_INVALID with
 * a one-line message naming the flag and what was expected. */
struct bench_experts_plan {
    bool off, on;
    int n_skews;
    double skews[BENCH_EXPERTS_MAX_SKEWS];
};
int bench_experts_parse(const struct bench_experts_flags *f, struct bench_experts_plan *p);

/* The runs: c's models of preset's shape (cut to layers, 0: all) on tp
 * devices, policies[0..n_pol), the costs given (all of them: there is no
 * model here to measure; ERR_INVALID naming what is missing), slo (<= 0:
 * slo_scale x a batch of 1); a table, or one JSON object. */
int bench_experts_run(const struct bench_experts_flags *f, const struct bench_experts_plan *plan,
                      const struct workload_config *c, const char *label, const char *preset,
                      int layers, int tp, const struct sim_costs *given, const char *costs_from,
                      const struct sim_controls *ctl, const char *const *policies, int n_pol,
                      uint64_t seed, int seeds, double duration, double slo, double slo_scale,
                      bool json);

#endif
