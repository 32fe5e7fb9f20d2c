/* Request arrival processes for benchmarks, as in AlpaServe and Computron
 * (arXiv 2306.13835): every model has its own process, and the merged,
 * time-sorted sequence of (time, model) events over a duration is what a
 * benchmark replays in real time.
 *
 *   ARRIVAL_GAMMA          inter-arrival times ~ Gamma(shape 1/cv^2,
 *                          scale cv^2/rate): mean 1/rate, coefficient of
 *                          variation cv. cv = 1 is a Poisson process; cv > 1
 *                          is burstier, cv < 1 more regular. The first event
 *                          is one interval after t = 0 (AlpaServe's
 *                          GammaProcess does the same).
 *   ARRIVAL_DETERMINISTIC  events at exactly t_k = k / rate, k = 0, 1, ...
 *                          (phase 0: every model's first event is at t = 0).
 *   ARRIVAL_TRACE          replay of a CSV file; format at arrival_trace_load.
 *
 * Times are seconds from the start of the run; events are in [0, duration).
 * Each model draws from its own generator stream, rng_seed(seed, model), so
 * the same spec always gives the same events and adding a model, or changing
 * one model's rate, leaves the other models' arrival times unchanged. */
#ifndef SHARDSWAP_WORKLOAD_ARRIVAL_H
#define SHARDSWAP_WORKLOAD_ARRIVAL_H

#include <stddef.h>
#include <stdint.h>

#define ARRIVAL_MODELS_MAX 256
/* Most events one spec may make (16 bytes each): specs whose expected count
 * (sum of rates x duration) is above it are refused, and so is a run or trace
 * that reaches it. */
#define ARRIVAL_EVENTS_MAX 10000000

enum arrival_kind {
    ARRIVAL_GAMMA,
    ARRIVAL_DETERMINISTIC,
    ARRIVAL_TRACE,
};

struct arrival_spec {
    enum arrival_kind kind;
    int n_models;                     /* 1..ARRIVAL_MODELS_MAX */
    double rates[ARRIVAL_MODELS_MAX]; /* requests/s per model, >= 0; not used by TRACE */
    double cv;                        /* GAMMA only: > 0 (1 = Poisson) */
    double duration_s;                /* > 0; TRACE: 0 keeps every event, > 0 drops t >= it */
    uint64_t seed;                    /* GAMMA only */
    const char *trace_path;           /* TRACE only; models must be 0..n_models-1 */
};

struct arrival {
    double t;  /* seconds from the start of the run */
    int model; /* index into the spec's models */
};

/* Makes the events of spec s, sorted by time (ties by model index), in a
 * malloc'd array the caller frees; *n may be 0 (then *events is NULL).
 * Errors: ERR_INVALID for a bad spec, ERR_IO / ERR_FORMAT for a trace,
 * ERR_NOMEM. */
int arrival_generate(const struct arrival_spec *s, struct arrival **events, size_t *n);

/* Reads a trace:
 *
 *   time,model          header, exactly these two names (spaces around them allowed)
 *   0.125,0             one event per line: time in seconds (a decimal number
 *   0.031,2             >= 0), model an integer index 0..n_models-1
 *
 * Lines may come in any order (the result is sorted); blank lines are
 * skipped; CRLF line ends are accepted. A bad line is an ERR_FORMAT whose
 * message names the file, the line number and what was expected. Caller
 * frees *events. */
int arrival_trace_load(const char *path, int n_models, struct arrival **events, size_t *n);

/* Parses a comma-separated list of rates ("10,1,1") into rates[0..*n);
 * spaces around items are allowed. Every item must be a finite number >= 0;
 * at most max items. Errors (ERR_INVALID) name the bad item and its position;
 * then *n is 0 and rates may be partly written. */
int arrival_rates_parse(const char *list, double *rates, int max, int *n);

/* Power-law skew: rates[i] = total_rate * (i+1)^-alpha / sum_j (j+1)^-alpha
 * for i in 0..n-1. alpha = 0 gives equal rates; the rates always sum to
 * total_rate. n >= 1, total_rate >= 0, alpha finite. */
void arrival_rates_powerlaw(int n, double alpha, double total_rate, double *rates);

#endif
