/* Benchmark reports: one CSV row per request, and an SVG plot of latency
 * CDFs. Both are plain files with no dependencies; the SVG is
 * self-contained (no scripts, fonts or stylesheets) and valid XML. */
#ifndef SHARDSWAP_WORKLOAD_REPORT_H
#define SHARDSWAP_WORKLOAD_REPORT_H

#include <stddef.h>
#include <stdint.h>

/* One request as a benchmark saw it. Times are seconds on one clock
 * (normally from the start of the run); NaN for a point the request never
 * reached (e.g. t_first_token of a request that failed before it). */
struct request_record {
    uint64_t id;
    int model;              /* index into the benchmark's models */
    double t_arrival;       /* when the workload released it */
    double t_start;         /* when its first forward began */
    double t_first_token;   /* when its first output token was ready */
    double t_done;          /* when its last token was ready, or it failed */
    int n_prompt, n_output; /* tokens */
    int batch_size;         /* size of the batch that ran it (first forward) */
    int status;             /* 0 = completed, else a negative enum err code */
    int http_status;        /* its HTTP response's status (bench serve); 0: none (in process,
                               or no response came) */
};

/* Writes path as CSV, with the header
 *
 *   id,model,status,t_arrival,t_start,t_first_token,t_done,latency,ttft,n_prompt,n_output,batch_size,http_status
 *
 * and one line per record in the order given. Times use %.6f; latency is
 * t_done - t_arrival, ttft is t_first_token - t_arrival; a NaN value is an
 * empty field, and so is an http_status of 0. Errors: ERR_IO naming the path. */
int report_write_csv(const char *path, const struct request_record *recs, size_t n);

/* Reads back the latencies of the completed requests (status 0) of a CSV
 * that report_write_csv wrote (columns found by the header's names), in
 * file order, into *lat (malloc'd, the caller's; NULL when *n is 0).
 * Errors: ERR_IO, ERR_FORMAT naming the path and line, ERR_NOMEM. */
int report_read_latencies(const char *path, double **lat, size_t *n);

/* Writes path as an SVG plot of empirical latency CDFs, one curve per
 * series: x is latency in seconds (linear, from 0, ticks in 1-2-5 steps),
 * y is the fraction of the series' requests done within x (0..1). Series i
 * is latencies[i][0..counts[i]) named names[i]; +INFINITY marks a request
 * that never finished (it counts in the total, so that curve stays below 1);
 * NaN is refused. Each curve is one <polyline> of at most ~2000 points
 * (exact steps up to 1000 samples, evenly spaced ranks beyond). The legend
 * shows every name with its sample count and p99. title and names are
 * escaped; bytes that are not valid UTF-8 become '?'. At most
 * REPORT_SERIES_MAX series. Errors: ERR_INVALID, ERR_IO, ERR_NOMEM. */
#define REPORT_SERIES_MAX 64
int report_write_cdf_svg(const char *path, const char *title, const char *const *names,
                         const double *const *latencies, const size_t *counts, int n_series);

#endif
