/* A latency histogram: fixed buckets, 8 per doubling from 1 us, so a
 * quantile is within 9% (the upper edge of the bucket holding it, capped at
 * the maximum); the count, sum and maximum are exact. It also counts, as
 * observations arrive, how many were <= each of up to HIST_MAX_LE upper
 * bounds the caller gives (a Prometheus histogram's cumulative buckets).
 * No lock: the caller serialises every call on one histogram. */
#ifndef SHARDSWAP_CORE_HIST_H
#define SHARDSWAP_CORE_HIST_H

#include <stdint.h>

#define HIST_PER_OCTAVE 8
#define HIST_BUCKETS 256 /* bucket 0: <= 1 us; bucket k: (1 us 2^((k-1)/8), 1 us 2^(k/8)] */
#define HIST_BASE 1e-6
#define HIST_MAX_LE 16

struct hist {
    uint64_t n;
    double sum, max;
    uint32_t count[HIST_BUCKETS];
    const double *le; /* (n_le) ascending upper bounds: the caller's, outlive h */
    int n_le;
    uint64_t le_count[HIST_MAX_LE]; /* [i]: observations <= le[i] */
};

struct hist_summary {
    uint64_t n;
    double mean, p50, p90, p99, max; /* 0 when n == 0 */
};

/* An empty histogram counting against the bounds le[0 .. n_le) (n_le <=
 * HIST_MAX_LE; le may be NULL when n_le is 0). */
void hist_init(struct hist *h, const double *le, int n_le);
void hist_add(struct hist *h, double x);
/* The upper edge of the bucket holding the q-quantile, capped at the max. */
double hist_quantile(const struct hist *h, double q);
void hist_summarize(const struct hist *h, struct hist_summary *out);

#endif
