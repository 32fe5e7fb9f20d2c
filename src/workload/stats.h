/* Latency statistics over a set of finished requests.
 *
 * Percentiles use linear interpolation between closest ranks, numpy's default
 * (method "linear"): for sorted x[0..n) and q in [0, 100], h = (n-1) q/100 and
 * P(q) = x[floor h] + (h - floor h) (x[floor h + 1] - x[floor h]). So for
 * 1..100, p50 = 50.5 and p99 = 99.01.
 *
 * +INFINITY is a valid latency: pass it for a request that was dropped or
 * failed, so it counts against percentiles and SLO attainment (AlpaServe
 * counts rejected requests as SLO misses). NaN is refused. */
#ifndef SHARDSWAP_WORKLOAD_STATS_H
#define SHARDSWAP_WORKLOAD_STATS_H

#include <stddef.h>

struct latency_stats {
    size_t n;                             /* samples */
    double mean, min, p50, p90, p99, max; /* seconds; NaN when n == 0 */
};

/* Fills *out from lat[0..n) (not modified; a sorted copy is made). n == 0 is
 * fine and gives NaN fields. Errors: ERR_INVALID for a NaN sample (the
 * message names its index), ERR_NOMEM. */
int stats_latency_compute(const double *lat, size_t n, struct latency_stats *out);

/* Percentile q in [0, 100] of sorted[0..n), n >= 1, by the rule above. */
double stats_percentile_sorted(const double *sorted, size_t n, double q);

/* Fraction of lat[0..n) that is <= slo seconds; NaN when n == 0. */
double stats_slo_attainment(const double *lat, size_t n, double slo);

#endif
