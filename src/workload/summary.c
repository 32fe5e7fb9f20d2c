#include "workload/summary.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

int summary_compute(const struct request_record *recs, size_t n, int model, double slo,
                    struct summary *s, double **lat_out, size_t *n_out)
{
    memset(s, 0, sizeof(*s));
    if (lat_out) {
        *lat_out = NULL;
        *n_out = 0;
    }
    double *lat = calloc(n ? n : 1, sizeof(double));
    if (!lat)
        return err_set(ERR_NOMEM, "out of memory summarizing %zu requests", n);
    size_t k = 0;
    double first = 1e300, last = 0;
    for (size_t i = 0; i < n; i++) {
        const struct request_record *q = &recs[i];
        if (model >= 0 && q->model != model)
            continue;
        if (q->status != 0) {
            s->failed++;
            continue;
        }
        lat[k++] = q->t_done - q->t_arrival;
        s->queue_s += q->t_start - q->t_arrival;
        first = q->t_arrival < first ? q->t_arrival : first;
        last = q->t_done > last ? q->t_done : last;
    }
    int rc = stats_latency_compute(lat, k, &s->all);
    s->slo_attain = stats_slo_attainment(lat, k, slo);
    s->throughput = k && last > first ? (double)k / (last - first) : 0;
    if (rc == 0 && lat_out) {
        *lat_out = lat;
        *n_out = k;
    } else {
        free(lat);
    }
    return rc;
}

int summary_tokens(const struct request_record *recs, size_t n, int model, double ttft_slo,
                   double tpot_slo, struct token_summary *s)
{
    memset(s, 0, sizeof(*s));
    double *ttft = calloc(n ? n : 1, sizeof(double)), *tpot = calloc(n ? n : 1, sizeof(double));
    int rc = 0;
    if (!ttft || !tpot) {
        rc = err_set(ERR_NOMEM, "out of memory summarizing %zu requests", n);
        goto out;
    }
    size_t k = 0;
    double first = 1e300, last = 0;
    for (size_t i = 0; i < n; i++) {
        const struct request_record *q = &recs[i];
        if (model >= 0 && q->model != model)
            continue;
        s->n++;
        if (q->status != 0 || !isfinite(q->t_first_token))
            continue;
        ttft[k] = q->t_first_token - q->t_arrival;
        tpot[k] = q->n_output > 1 ? (q->t_done - q->t_first_token) / (q->n_output - 1) : 0;
        s->met += ttft[k] <= ttft_slo && tpot[k] <= tpot_slo;
        k++;
        first = q->t_arrival < first ? q->t_arrival : first;
        last = q->t_done > last ? q->t_done : last;
    }
    s->attain = s->n ? (double)s->met / (double)s->n : NAN;
    s->goodput = k && last > first ? (double)s->met / (last - first) : 0;
    if ((rc = stats_latency_compute(ttft, k, &s->ttft)) == 0)
        rc = stats_latency_compute(tpot, k, &s->tpot);
out:
    free(ttft);
    free(tpot);
    return rc;
}
