#include "cli/read_limit.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/jsonout.h"
#include "core/timing.h"

void read_limit_init(struct read_limit *l, int threads, size_t bytes_per_thread, int rounds)
{
    memset(l, 0, sizeof(*l));
    l->threads = threads;
    l->bytes_per_thread = bytes_per_thread;
    l->rounds = rounds;
}

double read_limit_sample(struct read_limit *l)
{
    if (l->n == 0)
        l->t0 = time_now();
    const int i = l->n < READ_LIMIT_MAX_SAMPLES ? l->n++ : READ_LIMIT_MAX_SAMPLES - 1;
    l->at[i] = time_now() - l->t0;
    return membw_read_report(l->threads, l->bytes_per_thread, l->rounds, &l->s[i]);
}

double read_limit_bps(const struct read_limit *l)
{
    double best = 0;
    for (int i = 0; i < l->n; i++)
        best = fmax(best, l->s[i].bps);
    return best;
}

double read_limit_min_bps(const struct read_limit *l)
{
    double least = l->n ? l->s[0].bps : 0;
    for (int i = 1; i < l->n; i++)
        least = fmin(least, l->s[i].bps);
    return least;
}

/* Each way's best over every sample (the ways are the same in each). */
static void ways_best(const struct read_limit *l, double *bps, int *best)
{
    *best = 0;
    for (int w = 0; w < MEMBW_READ_WAYS_MAX; w++)
        bps[w] = 0;
    for (int i = 0; i < l->n; i++)
        for (int w = 0; w < l->s[i].n; w++)
            bps[w] = fmax(bps[w], l->s[i].way_bps[w]);
    for (int w = 1; l->n && w < l->s[0].n; w++)
        if (bps[w] > bps[*best])
            *best = w;
}

static double spread(const struct read_limit *l)
{
    const double best = read_limit_bps(l);
    return best > 0 ? (best - read_limit_min_bps(l)) / best : 0;
}

json_t *read_limit_json(const struct read_limit *l, bool ways)
{
    json_t *samples = json_array();
    for (int i = 0; i < l->n; i++) {
        const struct membw_read_report *r = &l->s[i];
        json_array_append_new(
            samples,
            json_pack("{s:o, s:o, s:o, s:o, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "at_s",
                      jsonout_real(l->at[i], 3), "gb_s", jsonout_real(r->bps / 1e9, 3),
                      "round_min_gb_s", jsonout_real(r->round_min / 1e9, 3), "round_median_gb_s",
                      jsonout_real(r->round_median / 1e9, 3), "best_way",
                      r->n ? r->name[r->best] : "none", "huge_page_share",
                      jsonout_real(r->huge_share, 3), "others_cpu_share",
                      jsonout_real(r->others, 3), "steal_share", jsonout_real(r->steal, 3),
                      "chain_ghz", jsonout_real(r->ghz, 3), "best_on_cpu",
                      jsonout_real(r->best_on_cpu, 3), "on_cpu_median",
                      jsonout_real(r->on_cpu_median, 3), "seconds", jsonout_real(r->seconds, 3)));
    }
    json_t *j = json_pack("{s:i, s:I, s:i, s:o, s:o, s:o, s:o}", "threads", l->threads,
                          "bytes_per_thread", (json_int_t)l->bytes_per_thread, "rounds", l->rounds,
                          "gb_s", jsonout_real(read_limit_bps(l) / 1e9, 3), "min_gb_s",
                          jsonout_real(read_limit_min_bps(l) / 1e9, 3), "spread",
                          jsonout_real(spread(l), 3), "samples", samples);
    if (j && ways && l->n) {
        double bps[MEMBW_READ_WAYS_MAX];
        int best;
        ways_best(l, bps, &best);
        json_t *a = json_array();
        for (int w = 0; w < l->s[0].n; w++)
            json_array_append_new(a, json_pack("{s:s, s:o}", "way", l->s[0].name[w], "gb_s",
                                               jsonout_real(bps[w] / 1e9, 3)));
        json_object_set_new(j, "ways", a);
    }
    return j;
}

/* "12%", or "?" for NaN. */
static const char *pct(char *buf, size_t cap, double share)
{
    if (isnan(share))
        snprintf(buf, cap, "?");
    else
        snprintf(buf, cap, "%.0f%%", 100 * share);
    return buf;
}

void read_limit_print(const struct read_limit *l, bool ways, const char *indent)
{
    if (l->n == 0)
        return;
    printf("%sread limit %.2f GB/s on %d thread%s: best of %d sample%s over %.0f s (%.2f-%.2f, "
           "spread %.0f%%)\n",
           indent, read_limit_bps(l) / 1e9, l->threads, l->threads > 1 ? "s" : "", l->n,
           l->n > 1 ? "s" : "", l->at[l->n - 1] + l->s[l->n - 1].seconds,
           read_limit_min_bps(l) / 1e9, read_limit_bps(l) / 1e9, 100 * spread(l));
    for (int i = 0; i < l->n; i++) {
        const struct membw_read_report *r = &l->s[i];
        char h[16], o[16], st[16];
        char bo[16], mo[16];
        printf("%s  at %5.1f s: %6.2f GB/s (rounds %.2f-%.2f, median %.2f), best way %s; on a "
               "CPU %s of the best pass, %s of the median; huge pages %s, others' CPU %s, "
               "steal %s, chain %.2f GHz\n",
               indent, l->at[i], r->bps / 1e9, r->round_min / 1e9, r->bps / 1e9,
               r->round_median / 1e9, r->n ? r->name[r->best] : "none",
               pct(bo, sizeof bo, r->best_on_cpu), pct(mo, sizeof mo, r->on_cpu_median),
               pct(h, sizeof h, r->huge_share), pct(o, sizeof o, r->others),
               pct(st, sizeof st, r->steal), r->ghz);
    }
    if (!ways)
        return;
    double bps[MEMBW_READ_WAYS_MAX];
    int best;
    ways_best(l, bps, &best);
    printf("%s  each way's best (GB/s):", indent);
    for (int w = 0; w < l->s[0].n; w++)
        printf("%s%s %.1f%s", w % 4 ? ", " : "\n    ", l->s[0].name[w], bps[w] / 1e9,
               w == best ? "*" : "");
    printf("\n");
}
