#include "workload/report.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/fs.h"
#include "workload/stats.h"

/* ---- CSV ---- */

static void csv_time(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.6f", v);
}

int report_write_csv(const char *path, const struct request_record *recs, size_t n)
{
    FILE *f;
    char tmp[4200];
    int rc = fs_file_begin(path, tmp, sizeof(tmp), &f);
    if (rc < 0)
        return rc;
    fputs("id,model,status,t_arrival,t_start,t_first_token,t_done,latency,ttft,n_prompt,n_output,"
          "batch_size,http_status\n",
          f);
    for (size_t i = 0; i < n; i++) {
        const struct request_record *r = &recs[i];
        fprintf(f, "%llu,%d,%d,", (unsigned long long)r->id, r->model, r->status);
        double v[] = {r->t_arrival,
                      r->t_start,
                      r->t_first_token,
                      r->t_done,
                      r->t_done - r->t_arrival,
                      r->t_first_token - r->t_arrival};
        for (size_t k = 0; k < sizeof(v) / sizeof(v[0]); k++) {
            csv_time(f, v[k]);
            fputc(',', f);
        }
        fprintf(f, "%d,%d,%d,", r->n_prompt, r->n_output, r->batch_size);
        if (r->http_status)
            fprintf(f, "%d", r->http_status);
        fputc('\n', f);
    }
    return fs_file_commit(f, tmp, path, "the CSV report");
}

/* Field k (0-based) of a comma-separated line, copied into out; false when
 * the line has fewer fields. */
static bool csv_field(const char *line, int k, char *out, size_t cap)
{
    for (int i = 0; i < k; i++) {
        line = strchr(line, ',');
        if (!line)
            return false;
        line++;
    }
    size_t len = strcspn(line, ",\r\n");
    if (len >= cap)
        len = cap - 1;
    memcpy(out, line, len);
    out[len] = '\0';
    return true;
}

int report_read_latencies(const char *path, double **lat_out, size_t *n_out)
{
    *lat_out = NULL;
    *n_out = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return err_set(ERR_IO, "%s: cannot open CSV report: %s", path, strerror(errno));
    char line[4096], v[64];
    double *lat = NULL;
    size_t n = 0, cap = 0;
    int rc = 0, col_status = -1, col_lat = -1;
    if (!fgets(line, sizeof(line), f)) {
        rc = err_set(ERR_FORMAT, "%s: empty, expected a CSV report's header", path);
        goto out;
    }
    for (int k = 0; csv_field(line, k, v, sizeof(v)); k++) {
        if (strcmp(v, "status") == 0)
            col_status = k;
        if (strcmp(v, "latency") == 0)
            col_lat = k;
    }
    if (col_status < 0 || col_lat < 0) {
        rc = err_set(ERR_FORMAT, "%s:1: expected a header with status and latency columns", path);
        goto out;
    }
    for (size_t lineno = 2; fgets(line, sizeof(line), f); lineno++) {
        char st[32], *end;
        if (line[0] == '\n' || line[0] == '\r')
            continue;
        if (!csv_field(line, col_status, st, sizeof(st)) ||
            !csv_field(line, col_lat, v, sizeof(v))) {
            rc = err_set(ERR_FORMAT, "%s:%zu: fewer fields than the header", path, lineno);
            goto out;
        }
        if (strcmp(st, "0") != 0)
            continue;
        double x = strtod(v, &end);
        if (end == v || *end || !isfinite(x)) {
            rc = err_set(ERR_FORMAT, "%s:%zu: latency \"%s\" is not a number", path, lineno, v);
            goto out;
        }
        if (n == cap) {
            size_t c2 = cap ? 2 * cap : 256;
            double *p = realloc(lat, c2 * sizeof(*lat));
            if (!p) {
                rc = err_set(ERR_NOMEM, "out of memory reading %s", path);
                goto out;
            }
            lat = p;
            cap = c2;
        }
        lat[n++] = x;
    }
    if (ferror(f)) {
        rc = err_set(ERR_IO, "%s: cannot read: %s", path, strerror(errno));
        goto out;
    }
    *lat_out = lat;
    *n_out = n;
    lat = NULL;
out:
    free(lat);
    fclose(f);
    return rc;
}

/* ---- SVG CDF plot ---- */

/* Layout, in SVG user units. The plot area is [PX0, PX1] x [PY0, PY1]
 * (y grows downwards); the legend sits right of it. */
enum { SVG_W_MIN = 860, PX0 = 70, PX1 = 560, PY0 = 50, PY1 = 410, LEGEND_X = 600, ROW_H = 20 };

/* Evenly spaced ranks beyond this many samples; exact steps below. */
#define CURVE_POINTS 2000

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define N_COLORS (int)(sizeof(palette) / sizeof(palette[0]))
/* After the first ten series colours repeat with a dash pattern. */
static const char *const dashes[] = {"", "6,3", "2,2", "8,3,2,3"};
#define N_DASHES (int)(sizeof(dashes) / sizeof(dashes[0]))

/* Length of the valid UTF-8 sequence (that XML 1.0 allows) at s, or 0. */
static int utf8_len(const unsigned char *s)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return c >= 0x20 || c == '\t' || c == '\n' || c == '\r';
    int len = c >= 0xc2 && c <= 0xdf   ? 2
              : c >= 0xe0 && c <= 0xef ? 3
              : c >= 0xf0 && c <= 0xf4 ? 4
                                       : 0;
    if (!len)
        return 0;
    unsigned char lo = 0x80, hi = 0xbf; /* range of the second byte */
    if (c == 0xe0)
        lo = 0xa0; /* overlong */
    if (c == 0xed)
        hi = 0x9f; /* surrogates */
    if (c == 0xf0)
        lo = 0x90; /* overlong */
    if (c == 0xf4)
        hi = 0x8f; /* above U+10FFFF */
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (int i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    if (c == 0xef && s[1] == 0xbf && (s[2] == 0xbe || s[2] == 0xbf))
        return 0; /* U+FFFE, U+FFFF: not XML characters */
    return len;
}

static const char *xml_entity(unsigned char c)
{
    switch (c) {
    case '&':
        return "&amp;";
    case '<':
        return "&lt;";
    case '>':
        return "&gt;";
    case '"':
        return "&quot;";
    case '\'':
        return "&apos;";
    default:
        return NULL;
    }
}

/* Writes s as XML character data / attribute text. */
static void xml_text(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        const char *ent = xml_entity(*p);
        int len = ent ? 1 : utf8_len(p);
        if (ent)
            fputs(ent, f);
        else if (len)
            fwrite(p, 1, (size_t)len, f);
        else
            fputc('?', f); /* not valid UTF-8, or a control character XML forbids */
        p += len ? len : 1;
    }
}

/* The largest 1-2-5 step that cuts [0, span] into at least 4 intervals
 * (so 4 to 10 of them). */
static double nice_step(double span)
{
    double raw = span / 4, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f >= 5 ? 5 : f >= 2 ? 2 : 1) * mag;
}

/* Decimals that print every multiple of step exactly enough. */
static int step_decimals(double step)
{
    int d = (int)-floor(log10(step) + 1e-9);
    return d < 0 ? 0 : d > 9 ? 9 : d;
}

static int double_cmp(const void *pa, const void *pb)
{
    double a = *(const double *)pa, b = *(const double *)pb;
    return (a > b) - (a < b);
}

struct series {
    double *sorted; /* owned; ascending, +inf (never finished) last */
    size_t n;       /* samples, +inf included */
    size_t finite;  /* the first `finite` of sorted are finite */
};

static int series_prepare(struct series *s, const double *lat, size_t n, int idx)
{
    *s = (struct series){.n = n};
    if (!n)
        return 0;
    if (!lat)
        return err_set(ERR_INVALID, "series %d has %zu samples but no array", idx, n);
    for (size_t i = 0; i < n; i++)
        if (isnan(lat[i]))
            return err_set(ERR_INVALID, "series %d: latency sample %zu is NaN", idx, i);
    s->sorted = malloc(n * sizeof(double));
    if (!s->sorted)
        return err_set(ERR_NOMEM, "out of memory for %zu latencies", n);
    memcpy(s->sorted, lat, n * sizeof(double));
    qsort(s->sorted, n, sizeof(double), double_cmp);
    while (s->finite < n && isfinite(s->sorted[s->finite]))
        s->finite++;
    return 0;
}

/* Maps data to plot coordinates; latencies below 0 are clamped to the axis. */
struct axes {
    double xmax; /* latency at the right edge, a multiple of xstep */
    double xstep;
};

static double px(const struct axes *a, double x)
{
    if (x < 0)
        x = 0;
    return PX0 + (PX1 - PX0) * x / a->xmax;
}

static double py(double y)
{
    return PY1 - (PY1 - PY0) * y;
}

/* One polyline: the empirical CDF F(x) = (rank + 1) / n as a step function,
 * starting at (first sample, 0). */
static void svg_curve(FILE *f, const struct axes *a, const struct series *s, int i)
{
    const char *dash = dashes[(i / N_COLORS) % N_DASHES];
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\"", palette[i % N_COLORS]);
    if (*dash)
        fprintf(f, " stroke-dasharray=\"%s\"", dash);
    fputs(" points=\"", f);
    size_t m = s->finite;
    double n = (double)s->n;
    if (m) {
        fprintf(f, "%.2f,%.2f", px(a, s->sorted[0]), py(0));
        if (m <= CURVE_POINTS / 2) {
            for (size_t k = 0; k < m; k++)
                fprintf(f, " %.2f,%.2f %.2f,%.2f", px(a, s->sorted[k]), py(k / n),
                        px(a, s->sorted[k]), py((k + 1) / n));
        } else {
            for (size_t j = 0; j < CURVE_POINTS; j++) {
                size_t k = (size_t)llround((double)j * (double)(m - 1) / (CURVE_POINTS - 1));
                fprintf(f, " %.2f,%.2f", px(a, s->sorted[k]), py((k + 1) / n));
            }
        }
    }
    fputs("\"/>\n", f);
}

static void svg_axes(FILE *f, const struct axes *a, const char *title)
{
    fprintf(f, "<text x=\"%d\" y=\"28\" font-size=\"16\" text-anchor=\"middle\">", (PX0 + PX1) / 2);
    xml_text(f, title ? title : "");
    fputs("</text>\n", f);
    /* y grid at 0, 0.2, ..., 1 and dotted guides at the p90 and p99 levels */
    fputs("<g stroke=\"#dddddd\" stroke-width=\"1\">\n", f);
    for (int k = 0; k <= 5; k++)
        fprintf(f, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\"/>\n", PX0, py(k / 5.0), PX1,
                py(k / 5.0));
    int nx = (int)llround(a->xmax / a->xstep);
    for (int k = 0; k <= nx; k++)
        fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\"/>\n", px(a, k * a->xstep),
                PY0, px(a, k * a->xstep), PY1);
    fputs("</g>\n<g stroke=\"#999999\" stroke-width=\"1\" stroke-dasharray=\"2,3\">\n", f);
    const double guides[] = {0.9, 0.99};
    for (int k = 0; k < 2; k++)
        fprintf(f, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\"/>\n", PX0, py(guides[k]), PX1,
                py(guides[k]));
    fputs("</g>\n", f);
    fprintf(
        f,
        "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#333333\"/>\n",
        PX0, PY0, PX1 - PX0, PY1 - PY0);
    /* tick labels */
    fputs("<g font-size=\"12\" fill=\"#333333\">\n", f);
    for (int k = 0; k <= 5; k++)
        fprintf(f, "<text x=\"%d\" y=\"%.2f\" text-anchor=\"end\">%.1f</text>\n", PX0 - 6,
                py(k / 5.0) + 4, k / 5.0);
    fprintf(f, "<text x=\"%d\" y=\"%.2f\">p90</text>\n", PX1 + 3, py(0.9) + 4);
    fprintf(f, "<text x=\"%d\" y=\"%.2f\">p99</text>\n", PX1 + 3, py(0.99) - 2);
    int dec = step_decimals(a->xstep);
    for (int k = 0; k <= nx; k++)
        fprintf(f, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">%.*f</text>\n",
                px(a, k * a->xstep), PY1 + 18, dec, k * a->xstep);
    fputs("</g>\n", f);
    fprintf(f,
            "<text x=\"%d\" y=\"%d\" font-size=\"13\" text-anchor=\"middle\">latency (s)</text>\n",
            (PX0 + PX1) / 2, PY1 + 42);
    fprintf(f,
            "<text x=\"18\" y=\"%d\" font-size=\"13\" text-anchor=\"middle\" "
            "transform=\"rotate(-90 18 %d)\">fraction of requests</text>\n",
            (PY0 + PY1) / 2, (PY0 + PY1) / 2);
}

static void svg_legend(FILE *f, const struct series *s, const char *const *names, int n_series)
{
    fputs("<g font-size=\"12\">\n", f);
    for (int i = 0; i < n_series; i++) {
        int y = PY0 + 10 + i * ROW_H;
        const char *dash = dashes[(i / N_COLORS) % N_DASHES];
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"",
                LEGEND_X, y, LEGEND_X + 24, y, palette[i % N_COLORS]);
        if (*dash)
            fprintf(f, " stroke-dasharray=\"%s\"", dash);
        fprintf(f, "/>\n<text x=\"%d\" y=\"%d\">", LEGEND_X + 30, y + 4);
        if (names && names[i])
            xml_text(f, names[i]);
        else
            fprintf(f, "series %d", i);
        double p99 = s[i].n ? stats_percentile_sorted(s[i].sorted, s[i].n, 99) : 0;
        if (s[i].n && isfinite(p99))
            fprintf(f, " (n=%zu, p99=%.3g s)", s[i].n, p99);
        else if (s[i].n)
            fprintf(f, " (n=%zu, p99=inf)", s[i].n);
        else
            fputs(" (n=0)", f);
        fputs("</text>\n", f);
    }
    fputs("</g>\n", f);
}

int report_write_cdf_svg(const char *path, const char *title, const char *const *names,
                         const double *const *latencies, const size_t *counts, int n_series)
{
    if (n_series < 1 || n_series > REPORT_SERIES_MAX)
        return err_set(ERR_INVALID, "%d latency series to plot, expected 1..%d", n_series,
                       REPORT_SERIES_MAX);
    struct series s[REPORT_SERIES_MAX];
    int rc = 0, prepared = 0;
    double hi = 0;
    for (; prepared < n_series; prepared++) {
        int i = prepared;
        rc = series_prepare(&s[i], latencies[i], counts[i], i); /* owns nothing on error */
        if (rc)
            goto out;
        if (s[i].finite && s[i].sorted[s[i].finite - 1] > hi)
            hi = s[i].sorted[s[i].finite - 1];
    }
    /* x from 0 to the largest finite latency, rounded up to a tick */
    struct axes a = {.xmax = 1, .xstep = 0.2};
    if (hi > 0) {
        a.xstep = nice_step(hi);
        a.xmax = ceil(hi / a.xstep - 1e-9) * a.xstep;
        if (a.xmax < hi)
            a.xmax += a.xstep;
    }
    FILE *f;
    char tmp[4200];
    if ((rc = fs_file_begin(path, tmp, sizeof(tmp), &f)) < 0)
        goto out;
    /* grow the canvas to fit the legend: rows down, and about 7 units per
     * character of the longest name across */
    int height = PY1 + 60, legend_bottom = PY0 + 10 + n_series * ROW_H;
    if (legend_bottom + 20 > height)
        height = legend_bottom + 20;
    size_t longest = 0;
    for (int i = 0; i < n_series; i++)
        if (names && names[i] && strlen(names[i]) > longest)
            longest = strlen(names[i]);
    if (longest > 200)
        longest = 200;
    int width = LEGEND_X + 30 + (int)(longest + 28) * 7 + 10;
    if (width < SVG_W_MIN)
        width = SVG_W_MIN;
    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", f);
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n",
            width, height, width, height);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", width, height);
    svg_axes(f, &a, title);
    for (int i = 0; i < n_series; i++)
        svg_curve(f, &a, &s[i], i);
    svg_legend(f, s, names, n_series);
    fputs("</svg>\n", f);
    rc = fs_file_commit(f, tmp, path, "the SVG plot");
out:
    for (int i = 0; i < prepared; i++)
        free(s[i].sorted);
    return rc;
}
