/* Forecasting a model's next request from the arrivals seen so far, for the
 * scheduler's eviction and prefetch choices.
 *
 * The gaps between a model's arrivals are summarised by their mean and
 * variance (every gap weighs the same until FORECAST_WINDOW of them, then
 * exponentially weighted over about that many, so a changing workload is
 * followed), and the process is taken as the Gamma renewal process with that
 * mean and coefficient of variation, the family AlpaServe and Computron use
 * for their workloads: CV 1 is Poisson (memoryless), CV < 1 is regular (the
 * next request is due about one mean gap after the last), CV > 1 is bursty
 * (right after a request another is likely; after a long silence, unlikely).
 * With fewer than two gaps the process is taken as Poisson at the rate seen
 * so far. */
#ifndef SHARDSWAP_SCHED_FORECAST_H
#define SHARDSWAP_SCHED_FORECAST_H

#define FORECAST_WINDOW 64
#ifndef FORECAST_PRIOR
#define FORECAST_PRIOR 4
#endif /* pseudo-gaps of CV 1 that the sample CV is shrunk with */

struct forecast {
    int n;           /* arrivals seen */
    double first;    /* time of the first */
    double last;     /* time of the latest */
    double gap_mean; /* of the gaps between arrivals */
    double gap_var;
};

/* Adds an arrival at time t (times never decrease). */
void forecast_add(struct forecast *f, double t);

/* Probability that the next request arrives within `horizon` seconds of
 * `now` (now >= the latest arrival). 0 for a model never requested. */
double forecast_within(const struct forecast *f, double now, double horizon);

/* Expected time from `now` to the next request; INFINITY for a model never
 * requested. */
double forecast_wait(const struct forecast *f, double now);

/* The coefficient of variation of the fitted gaps (1 until 3 arrivals). */
double forecast_cv(const struct forecast *f);

/* Q(a, x) = Gamma(a, x) / Gamma(a), the regularised upper incomplete gamma
 * function, for a > 0, x >= 0. */
double forecast_gamma_q(double a, double x);

#endif
