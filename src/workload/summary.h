/* Latency summaries of a benchmark's requests: over all of them or one
 * model's, the latency statistics of those that completed (workload/stats.h),
 * SLO attainment, throughput and time spent queueing. */
#ifndef SHARDSWAP_WORKLOAD_SUMMARY_H
#define SHARDSWAP_WORKLOAD_SUMMARY_H

#include <stddef.h>

#include "workload/report.h"
#include "workload/stats.h"

struct summary {
    struct latency_stats all; /* arrival -> done of the completed requests (all.n of them) */
    double slo_attain;        /* fraction of those within the SLO; NaN when none */
    double throughput;        /* completed / (last done - first arrival); 0 when none */
    double queue_s;           /* summed arrival -> start */
    size_t failed;            /* requests with a non-zero status */
};

/* Summarizes recs[0..n) of model (-1: every model) against slo seconds. When
 * lat is not NULL, *lat gets the latencies summarized (malloc'd, the
 * caller's to free, in record order) and *n_lat their number. Errors:
 * ERR_NOMEM; *lat is then NULL. */
int summary_compute(const struct request_record *recs, size_t n, int model, double slo,
                    struct summary *s, double **lat, size_t *n_lat);

/* Token SLOs, as DistServe and Aegaeon measure them: a request's time to
 * first token (TTFT, arrival -> first token) and time per output token
 * (TPOT, (last token - first token) / (n_output - 1); 0 for a one-token
 * answer). A request meets the SLO when it completed with TTFT <= ttft_slo
 * and TPOT <= tpot_slo; a failed request, or one without a first token's
 * time (NaN: over HTTP without streaming), is a miss. */
struct token_summary {
    size_t n;                 /* requests of the model (failed ones too) */
    size_t met;               /* meeting both SLOs */
    double attain;            /* met / n; NaN when n == 0 */
    double goodput;           /* met / (last done - first arrival) of the completed, req/s;
                               * 0 when none completed */
    struct latency_stats ttft, tpot; /* over the completed requests */
};

/* Summarizes recs[0..n) of model (-1: every model). Errors: ERR_NOMEM. */
int summary_tokens(const struct request_record *recs, size_t n, int model, double ttft_slo,
                   double tpot_slo, struct token_summary *s);

#endif
