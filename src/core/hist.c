#include "core/hist.h"

#include <assert.h>
#include <math.h>
#include <string.h>

void hist_init(struct hist *h, const double *le, int n_le)
{
    assert(n_le >= 0 && n_le <= HIST_MAX_LE);
    memset(h, 0, sizeof(*h));
    h->le = le;
    h->n_le = n_le;
}

void hist_add(struct hist *h, double x)
{
    int b = 0;
    if (x > HIST_BASE) {
        b = (int)ceil(log2(x / HIST_BASE) * HIST_PER_OCTAVE);
        b = b < 1 ? 1 : b >= HIST_BUCKETS ? HIST_BUCKETS - 1 : b;
    }
    h->count[b]++;
    h->n++;
    h->sum += x;
    h->max = x > h->max ? x : h->max;
    for (int i = 0; i < h->n_le; i++)
        h->le_count[i] += x <= h->le[i];
}

double hist_quantile(const struct hist *h, double q)
{
    uint64_t rank = (uint64_t)ceil(q * (double)h->n), seen = 0;
    rank = rank < 1 ? 1 : rank;
    for (int b = 0; b < HIST_BUCKETS; b++) {
        seen += h->count[b];
        if (seen >= rank) {
            double edge = HIST_BASE * exp2((double)b / HIST_PER_OCTAVE);
            return edge < h->max ? edge : h->max;
        }
    }
    return h->max;
}

void hist_summarize(const struct hist *h, struct hist_summary *out)
{
    memset(out, 0, sizeof(*out));
    out->n = h->n;
    if (h->n == 0)
        return;
    out->mean = h->sum / (double)h->n;
    out->p50 = hist_quantile(h, 0.50);
    out->p90 = hist_quantile(h, 0.90);
    out->p99 = hist_quantile(h, 0.99);
    out->max = h->max;
}
