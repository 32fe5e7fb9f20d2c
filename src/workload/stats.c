#include "workload/stats.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static int double_cmp(const void *pa, const void *pb)
{
    double a = *(const double *)pa, b = *(const double *)pb;
    return (a > b) - (a < b);
}

double stats_percentile_sorted(const double *sorted, size_t n, double q)
{
    assert(n >= 1 && q >= 0 && q <= 100);
    double h = (double)(n - 1) * q / 100.0;
    size_t lo = (size_t)h;
    if (lo >= n - 1)
        return sorted[n - 1];
    double frac = h - (double)lo, a = sorted[lo], b = sorted[lo + 1];
    /* exact when both neighbours are equal; an infinite lower neighbour
     * would make inf - inf */
    if (frac == 0 || a == b || isinf(a))
        return a;
    return a + frac * (b - a);
}

int stats_latency_compute(const double *lat, size_t n, struct latency_stats *out)
{
    *out = (struct latency_stats){
        .n = n, .mean = NAN, .min = NAN, .p50 = NAN, .p90 = NAN, .p99 = NAN, .max = NAN};
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (isnan(lat[i]))
            return err_set(ERR_INVALID, "latency sample %zu is NaN, expected seconds or +inf", i);
    double *s = malloc(n * sizeof(*s));
    if (!s)
        return err_set(ERR_NOMEM, "out of memory sorting %zu latencies", n);
    memcpy(s, lat, n * sizeof(*s));
    qsort(s, n, sizeof(*s), double_cmp);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += s[i];
    out->mean = sum / (double)n;
    out->min = s[0];
    out->max = s[n - 1];
    out->p50 = stats_percentile_sorted(s, n, 50);
    out->p90 = stats_percentile_sorted(s, n, 90);
    out->p99 = stats_percentile_sorted(s, n, 99);
    free(s);
    return 0;
}

double stats_slo_attainment(const double *lat, size_t n, double slo)
{
    if (n == 0)
        return NAN;
    size_t ok = 0;
    for (size_t i = 0; i < n; i++)
        ok += lat[i] <= slo;
    return (double)ok / (double)n;
}
