/* shardswap bench serve: `bench workload`'s experiment against a running
 * OpenAI-compatible server. The same workloads (workload/computron.h) and
 * the same arrivals (replay_arrivals: same config and seed, same times),
 * each released at its time as the same request, over HTTP
 * (workload/http_replay.h); the same summaries, table, JSON, CSV and CDF
 * plot, plus what HTTP adds: responses by status and connections. One run
 * measures one server (one policy); --compare prints the runs of several
 * --json outputs (of this command or of `bench workload`) side by side,
 * with one CDF plot of all of them. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/jsonout.h"
#include "workload/arrival.h"
#include "workload/computron.h"
#include "workload/http_replay.h"
#include "workload/replay.h"
#include "workload/report.h"
#include "workload/stats.h"
#include "workload/summary.h"

#define MAX_MODELS WORKLOAD_MAX_MODELS
#define MAX_RUNS REPORT_SERIES_MAX

/* --models a,b,c: at most max names into names[] (pointers into buf). */
static int names_parse(char *buf, const char **names, int max, int *n)
{
    *n = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (*n == max)
            return err_set(ERR_INVALID, "--models: at most %d names", max);
        names[(*n)++] = tok;
    }
    if (*n == 0)
        return err_set(ERR_INVALID, "--models names no model (expected NAME,NAME,...)");
    return 0;
}

/* Time to first token of the completed requests of recs. */
static int ttft_stats(const struct request_record *recs, size_t n, struct latency_stats *out)
{
    double *t = calloc(n ? n : 1, sizeof(double));
    size_t k = 0;
    if (!t)
        return err_set(ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        if (recs[i].status == 0 && isfinite(recs[i].t_first_token))
            t[k++] = recs[i].t_first_token - recs[i].t_arrival;
    int rc = stats_latency_compute(t, k, out);
    free(t);
    return rc;
}

/* The latency fields of a summary, as `bench workload` writes them. */
static int summary_json_set(json_t *o, const struct summary *s)
{
    return json_object_set_new(o, "mean_s", jsonout_real(s->all.mean, 6)) |
           json_object_set_new(o, "p50_s", jsonout_real(s->all.p50, 6)) |
           json_object_set_new(o, "p90_s", jsonout_real(s->all.p90, 6)) |
           json_object_set_new(o, "p99_s", jsonout_real(s->all.p99, 6)) |
           json_object_set_new(o, "max_s", jsonout_real(s->all.max, 6)) |
           json_object_set_new(o, "slo_attainment", jsonout_real(s->slo_attain, 4));
}

/* The sum of every sample of metric name (all label sets) in a Prometheus
 * text exposition; NaN when none is there. */
static double metric_sum(const char *text, const char *name)
{
    size_t len = strlen(name);
    double sum = 0;
    bool found = false;
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, name, len) != 0 || (l[len] != '{' && l[len] != ' '))
            continue;
        const char *v = l + len;
        if (*v == '{' && !(v = strchr(v, '}')))
            continue;
        char *end;
        double x = strtod(v + 1, &end);
        if (end != v + 1) {
            sum += x;
            found = true;
        }
    }
    return found ? sum : NAN;
}

/* The server's swap counters (shardswap serve's /metrics: swaps and seconds
 * spent swapping, over all models); NaN when the server has none. */
static void scrape_swaps(const struct http_target *t, double *swaps, double *swap_s)
{
    char *body = NULL;
    long status = 0;
    *swaps = *swap_s = NAN;
    if (http_get(t, "/metrics", &body, &status) == 0 && status == 200) {
        *swaps = metric_sum(body, "shardswap_swaps_total");
        *swap_s = metric_sum(body, "shardswap_swap_duration_seconds_sum");
    }
    free(body);
}

/* What one run measured, for the table and the JSON. */
struct run {
    const char *config_s, *label, *url, *csv, *plot;
    const struct workload_config *c;
    const char *const *names;
    double warm, slo, duration;
    uint64_t seed;
    bool stream;
    const struct http_replay_result *res;
    struct summary sum;
    struct latency_stats ttft;
    struct token_summary tok; /* chat configs: the token SLOs (summary_tokens) */
    double swaps, swap_s; /* the server's, during the run (NaN: unknown) */
};

/* The run as one JSON object, shaped like `bench workload`'s (its one
 * entry of "policies" named by the label), so --compare reads both. */
static int print_json(const struct run *r)
{
    const struct workload_config *c = r->c;
    const struct http_counts *h = &r->res->counts;
    json_t *rates = json_array(), *names = json_array(), *per_model = json_array();
    int bad = !rates || !names || !per_model;
    for (int i = 0; !bad && i < c->n_models; i++) {
        struct summary m;
        bad |= json_array_append_new(rates, jsonout_real(c->rates[i], 6));
        bad |= json_array_append_new(names, jsonout_string(r->names[i]));
        if (summary_compute(r->res->recs, r->res->n, i, r->slo, &m, NULL, NULL) < 0) {
            bad = 1;
            break;
        }
        json_t *o =
            json_pack("{s:i, s:o, s:I, s:I}", "model", i, "name", jsonout_string(r->names[i]),
                      "requests", (json_int_t)m.all.n, "failed", (json_int_t)m.failed);
        bad |= !o || summary_json_set(o, &m) != 0;
        bad |= json_array_append_new(per_model, o);
    }
    size_t n = r->res->n;
    json_t *http = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:I}", "ok",
                             (json_int_t)h->ok, "status_429", (json_int_t)h->busy, "status_4xx",
                             (json_int_t)h->client, "status_5xx", (json_int_t)h->server,
                             "status_other", (json_int_t)h->other, "transport_errors",
                             (json_int_t)h->transport, "malformed", (json_int_t)h->malformed,
                             "share_429", jsonout_real(n ? (double)h->busy / (double)n : NAN, 4),
                             "connections", (json_int_t)r->res->connections);
    json_t *o = json_pack("{s:s, s:I, s:I}", "policy", r->label, "requests",
                          (json_int_t)r->sum.all.n, "failed", (json_int_t)r->sum.failed);
    bad |= !http || !o || summary_json_set(o, &r->sum) != 0;
    if (!bad)
        bad |=
            json_object_set_new(o, "throughput_rps", jsonout_real(r->sum.throughput, 3)) |
            json_object_set_new(
                o, "swaps", isfinite(r->swaps) ? json_integer((json_int_t)r->swaps) : json_null()) |
            json_object_set_new(o, "swap_s", jsonout_real(r->swap_s, 4)) |
            json_object_set_new(o, "ttft_p50_s", jsonout_real(r->ttft.p50, 6)) |
            json_object_set_new(o, "ttft_p99_s", jsonout_real(r->ttft.p99, 6)) |
            json_object_set_new(o, "http", http) | json_object_set_new(o, "per_model", per_model) |
            json_object_set_new(o, "csv", jsonout_string(r->csv));
    if (!bad && c->chat)
        bad |= json_object_set_new(o, "tpot_p50_s", jsonout_real(r->tok.tpot.p50, 6)) |
               json_object_set_new(o, "tpot_p99_s", jsonout_real(r->tok.tpot.p99, 6)) |
               json_object_set_new(o, "token_slo_attainment", jsonout_real(r->tok.attain, 4)) |
               json_object_set_new(o, "goodput_rps", jsonout_real(r->tok.goodput, 3)) |
               json_object_set_new(o, "slo_ttft_s", jsonout_real(c->slo_ttft_s, 6)) |
               json_object_set_new(o, "slo_tpot_s", jsonout_real(c->slo_tpot_s, 6));
    json_t *pols = json_array();
    if (bad || !pols || json_array_append_new(pols, o) < 0) {
        if (bad) {
            json_decref(o);
            json_decref(http);
            json_decref(per_model);
        }
        json_decref(rates);
        json_decref(names);
        json_decref(pols);
        return jsonout_print(NULL); /* the out-of-memory error */
    }
    return jsonout_print(json_pack(
        "{s:s, s:o, s:s, s:i, s:o, s:o, s:o, s:o, s:I, s:I, s:b, s:o, s:o, s:o, s:o, s:o, s:o, "
        "s:o}",
        "config", r->config_s, "url", jsonout_string(r->url), "client", "http", "models",
        c->n_models, "model_names", names, "cv", jsonout_real(c->cv, 6), "rates", rates,
        "duration_s", jsonout_real(r->duration, 6), "requests_sent", (json_int_t)n, "seed",
        (json_int_t)r->seed, "stream", r->stream, "wall_s", jsonout_real(r->res->wall_s, 4),
        "release_lag_mean_s", jsonout_real(r->res->lag_mean_s, 6), "release_lag_max_s",
        jsonout_real(r->res->lag_max_s, 6), "warm_latency_s", jsonout_real(r->warm, 6), "slo_s",
        jsonout_real(r->slo, 6), "plot", jsonout_string(r->plot), "policies", pols));
}

static void print_table(const struct run *r)
{
    const struct workload_config *c = r->c;
    const struct http_counts *h = &r->res->counts;
    printf("%s via %s: %d models (", r->config_s, r->url, c->n_models);
    for (int i = 0; i < c->n_models; i++)
        printf("%s%s", i ? "," : "", r->names[i]);
    printf(")");
    if (!c->round_robin) {
        printf(", rates");
        for (int i = 0; i < c->n_models; i++)
            printf("%s%g", i ? "," : " ", c->rates[i]);
        printf(", CV %g, seed %llu", c->cv, (unsigned long long)r->seed);
    }
    printf("; %zu requests%s; warm latency %.1f ms over HTTP, SLO %.1f ms\n", r->res->n,
           r->stream ? ", streamed" : "", r->warm * 1e3, r->slo * 1e3);
    printf("%-10s %6s %8s %8s %8s %8s %8s %6s %7s %6s %8s %6s %5s %5s %5s %5s %5s\n", "policy",
           "reqs", "mean ms", "p50 ms", "p90 ms", "p99 ms", "max ms", "SLO%", "req/s", "swaps",
           "swap s", "failed", "429", "4xx", "5xx", "net", "bad");
    const struct summary *s = &r->sum;
    char swaps[24] = "-", swap_s[24] = "-";
    if (isfinite(r->swaps))
        snprintf(swaps, sizeof(swaps), "%.0f", r->swaps);
    if (isfinite(r->swap_s))
        snprintf(swap_s, sizeof(swap_s), "%.2f", r->swap_s);
    printf("%-10s %6zu %8.1f %8.1f %8.1f %8.1f %8.1f %6.1f %7.2f %6s %8s %6zu %5zu %5zu %5zu %5zu "
           "%5zu\n",
           r->label, s->all.n, s->all.mean * 1e3, s->all.p50 * 1e3, s->all.p90 * 1e3,
           s->all.p99 * 1e3, s->all.max * 1e3, 100 * s->slo_attain, s->throughput, swaps, swap_s,
           s->failed, h->busy, h->client, h->server, h->transport, h->malformed + h->other);
    if (r->stream)
        printf("time to first token: p50 %.1f ms, p99 %.1f ms\n", r->ttft.p50 * 1e3,
               r->ttft.p99 * 1e3);
    if (c->chat)
        printf("time per output token: p50 %.2f ms, p99 %.2f ms; token SLO (TTFT <= %g s, TPOT "
               "<= %g s) met by %.1f%%, goodput %.2f req/s\n",
               r->tok.tpot.p50 * 1e3, r->tok.tpot.p99 * 1e3, c->slo_ttft_s, c->slo_tpot_s,
               100 * r->tok.attain, r->tok.goodput);
    printf("per model\n%-10s %5s %6s %8s %8s %8s %8s %8s %6s %6s\n", "policy", "model", "reqs",
           "mean ms", "p50 ms", "p90 ms", "p99 ms", "max ms", "SLO%", "failed");
    for (int i = 0; i < c->n_models; i++) {
        struct summary m;
        if (summary_compute(r->res->recs, r->res->n, i, r->slo, &m, NULL, NULL) < 0)
            break;
        if (m.all.n == 0 && m.failed == 0)
            continue;
        printf("%-10s %5d %6zu %8.1f %8.1f %8.1f %8.1f %8.1f %6.1f %6zu\n", r->label, i, m.all.n,
               m.all.mean * 1e3, m.all.p50 * 1e3, m.all.p90 * 1e3, m.all.p99 * 1e3, m.all.max * 1e3,
               100 * m.slo_attain, m.failed);
    }
    printf("connections opened %zu for %zu requests; released %.2f ms after their arrival "
           "times on average (at most %.2f ms)\nplot %s, requests %s\n",
           r->res->connections, r->res->n, r->res->lag_mean_s * 1e3, r->res->lag_max_s * 1e3,
           r->plot, r->csv);
    if (r->res->first_error[0])
        printf("first error: %s\n", r->res->first_error);
}

/* A number of a run's JSON object, NaN when absent or null. */
static double jnum(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static long long jint(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (long long)json_integer_value(v) : -1;
}

/* --compare A.json,B.json,...: every run of every file (one JSON object
 * each, as --json prints it here or in `bench workload`) in one table, with
 * ratios against the first run, and one CDF plot of them all from the CSVs
 * they name. */
static int compare(char *files, const char *plot, bool json_out)
{
    json_t *docs[MAX_RUNS], *runs[MAX_RUNS];
    const char *names[MAX_RUNS], *configs[MAX_RUNS];
    double *lat[MAX_RUNS] = {0};
    size_t n_lat[MAX_RUNS] = {0};
    int n_docs = 0, n = 0, rc = 0;
    bool have_csv = true;
    for (char *f = strtok(files, ","); f; f = strtok(NULL, ",")) {
        json_error_t e;
        if (n_docs == MAX_RUNS) {
            rc = err_set(ERR_INVALID, "--compare: at most %d files", MAX_RUNS);
            goto out;
        }
        json_t *d = json_load_file(f, JSON_DISABLE_EOF_CHECK, &e);
        if (!d) {
            rc = err_set(ERR_FORMAT, "--compare %s:%d: %s", f, e.line, e.text);
            goto out;
        }
        docs[n_docs++] = d;
        json_t *pols = json_object_get(d, "policies");
        if (!json_is_array(pols) || json_array_size(pols) == 0) {
            rc = err_set(ERR_FORMAT,
                         "--compare %s: expected the --json output of bench serve or "
                         "bench workload (an object with \"policies\")",
                         f);
            goto out;
        }
        for (size_t i = 0; i < json_array_size(pols); i++) {
            json_t *p = json_array_get(pols, i);
            if (n == MAX_RUNS) {
                rc = err_set(ERR_INVALID, "--compare: at most %d runs", MAX_RUNS);
                goto out;
            }
            const char *name = json_string_value(json_object_get(p, "policy"));
            names[n] = name ? name : "?";
            configs[n] = json_string_value(json_object_get(d, "config"));
            if (!configs[n])
                configs[n] = "?";
            const char *csv = json_string_value(json_object_get(p, "csv"));
            if (!csv) {
                have_csv = false;
            } else if (plot && (rc = report_read_latencies(csv, &lat[n], &n_lat[n])) < 0) {
                goto out;
            }
            runs[n++] = p;
        }
    }
    if (n == 0) {
        rc = err_set(ERR_INVALID, "--compare names no file (expected A.json,B.json)");
        goto out;
    }
    for (int i = 1; i < n; i++)
        if (strcmp(configs[i], configs[0]) != 0)
            fprintf(stderr,
                    "shardswap bench serve: warning: --compare: run %s is of %s, run %s "
                    "of %s\n",
                    names[i], configs[i], names[0], configs[0]);
    const char *plot_done = NULL;
    if (plot && have_csv) {
        char title[256];
        snprintf(title, sizeof(title), "latency CDF, %s", configs[0]);
        if ((rc = report_write_cdf_svg(plot, title, names, (const double *const *)lat, n_lat, n)) <
            0)
            goto out;
        plot_done = plot;
    }
    if (json_out) {
        json_t *arr = json_array();
        for (int i = 0; arr && i < n; i++) {
            json_t *o = json_pack("{s:s, s:s, s:o, s:o, s:o, s:o}", "policy", names[i], "config",
                                  configs[i], "p50_s", jsonout_real(jnum(runs[i], "p50_s"), 6),
                                  "p99_s", jsonout_real(jnum(runs[i], "p99_s"), 6), "p50_ratio",
                                  jsonout_real(jnum(runs[i], "p50_s") / jnum(runs[0], "p50_s"), 4),
                                  "p99_ratio",
                                  jsonout_real(jnum(runs[i], "p99_s") / jnum(runs[0], "p99_s"), 4));
            if (json_array_append_new(arr, o) < 0) {
                json_decref(arr);
                arr = NULL;
            }
        }
        rc = jsonout_print(
            arr ? json_pack("{s:o, s:o}", "runs", arr, "plot", jsonout_string(plot_done)) : NULL);
        goto out;
    }
    int w = 10; /* the name column: the longest name */
    for (int i = 0; i < n; i++)
        w = (int)strlen(names[i]) > w ? (int)strlen(names[i]) : w;
    printf("%s; ratios against %s\n", configs[0], names[0]);
    printf("%-*s %6s %8s %8s %8s %8s %8s %6s %7s %6s %6s %5s %5s %9s %9s\n", w, "policy", "reqs",
           "mean ms", "p50 ms", "p90 ms", "p99 ms", "max ms", "SLO%", "req/s", "swaps", "failed",
           "429", "5xx", "p50 ratio", "p99 ratio");
    for (int i = 0; i < n; i++) {
        json_t *p = runs[i], *h = json_object_get(p, "http");
        char swaps[16] = "-", c429[16] = "-", c5xx[16] = "-";
        if (isfinite(jnum(p, "swaps")))
            snprintf(swaps, sizeof(swaps), "%.0f", jnum(p, "swaps"));
        if (h) {
            snprintf(c429, sizeof(c429), "%lld", jint(h, "status_429"));
            snprintf(c5xx, sizeof(c5xx), "%lld", jint(h, "status_5xx"));
        }
        printf("%-*s %6lld %8.1f %8.1f %8.1f %8.1f %8.1f %6.1f %7.2f %6s %6lld %5s %5s %9.3f "
               "%9.3f\n",
               w, names[i], jint(p, "requests"), jnum(p, "mean_s") * 1e3, jnum(p, "p50_s") * 1e3,
               jnum(p, "p90_s") * 1e3, jnum(p, "p99_s") * 1e3, jnum(p, "max_s") * 1e3,
               100 * jnum(p, "slo_attainment"), jnum(p, "throughput_rps"), swaps, jint(p, "failed"),
               c429, c5xx, jnum(p, "p50_s") / jnum(runs[0], "p50_s"),
               jnum(p, "p99_s") / jnum(runs[0], "p99_s"));
    }
    if (plot_done)
        printf("plot %s\n", plot_done);
    else if (plot)
        printf("no plot: a run names no CSV\n");
out:
    for (int i = 0; i < n; i++)
        free(lat[i]);
    for (int i = 0; i < n_docs; i++)
        json_decref(docs[i]);
    return rc;
}

/* The warm latency over HTTP: `warm` requests to model 0 one after the
 * other, the best of all but the first (which may load it); the same
 * measurement replay_warm_latency makes on the engine. */
static int warm_latency(const struct http_replay_opts *o, int warm, double *secs)
{
    struct arrival ev[64];
    struct http_replay_opts w = *o;
    struct http_replay_result res;
    w.closed_loop = true;
    *secs = 0;
    for (int i = 0; i < warm; i++)
        ev[i] = (struct arrival){.t = 0, .model = 0};
    int rc = http_replay_run(&w, ev, (size_t)warm, &res);
    for (size_t i = 0; rc == 0 && i < res.n; i++) {
        const struct request_record *r = &res.recs[i];
        if (r->status != 0) {
            rc = err_set(r->status, "the warm-up request to %s failed: %s", o->models[0],
                         res.first_error);
            break;
        }
        double lat = r->t_done - r->t_arrival;
        if ((i > 0 || res.n == 1) && (*secs == 0 || lat < *secs))
            *secs = lat;
    }
    http_replay_result_free(&res);
    return rc;
}

int bench_serve(int argc, char **argv)
{
    const char *url = NULL, *config_s = "computron:4", *rates_s = NULL, *models_s = NULL;
    const char *label = "serve", *out_dir = "bench-out", *csv_s = NULL, *plot_s = NULL;
    const char *api_key = NULL, *compare_s = NULL, *prompt_ids_s = NULL;
    const char *chat_text = "Berkeley is the number one public";
    int max_tokens = 1;
    bool chat = false;
    int n_models = 0, rr_requests = 40, warm_n = 4, max_conn = 128;
    float cv = 0, duration = 20, alpha = -1, total_rate = 0, slo = 0, slo_scale = 5;
    float timeout = 300, slo_ttft = CHAT_SLO_TTFT_S, slo_tpot = CHAT_SLO_TPOT_S;
    uint64_t seed = 1;
    bool json = false, stream = false, prime = false;
    struct flag flags[] = {
        FLAG("url", FLAG_STR, &url, "URL", "the server, e.g. http://127.0.0.1:8000 (required)"),
        FLAG("config", FLAG_STR, &config_s, "computron:K|chat:M:R[:CV[:ZIPF]]|round-robin|custom",
             "Computron's config K (0..18), chat traffic as bench workload's (per request a "
             "log-normal prompt, median 200 tokens, sigma 1.0, in [1, 1536], and max_tokens, "
             "median 100, sigma 0.8, in [1, 512]; streamed, for TTFT and TPOT), its round-robin "
             "worst case, or custom (default computron:4)"),
        FLAG_RANGE("slo-ttft", FLAG_FLOAT, &slo_ttft, "S",
                   "chat: SLO on time to first token, seconds (default 5)", FLT_TRUE_MIN, 86400,
                   "0 < S <= 86400"),
        FLAG_RANGE("slo-tpot", FLAG_FLOAT, &slo_tpot, "S",
                   "chat: SLO on time per output token after the first, seconds (default 0.2)",
                   FLT_TRUE_MIN, 86400, "0 < S <= 86400"),
        FLAG("models", FLAG_STR, &models_s, "A,B,...",
             "the server's names of the config's models 0, 1, ... (default: GET /v1/models, in "
             "its order)"),
        FLAG("rates", FLAG_STR, &rates_s, "R1,R2,...", "custom: requests/s per model"),
        FLAG_RANGE("n-models", FLAG_INT, &n_models, "N",
                   "custom with --alpha, round-robin: number of models", 1, MAX_MODELS, "1..256"),
        FLAG_RANGE("alpha", FLAG_FLOAT, &alpha, "A", "custom: power-law skew instead of --rates", 0,
                   100, "0..100"),
        FLAG_RANGE("total-rate", FLAG_FLOAT, &total_rate, "R",
                   "custom: requests/s over all models with --alpha", FLT_TRUE_MIN, 1e6,
                   "0 < R <= 1000000"),
        FLAG_RANGE("cv", FLAG_FLOAT, &cv, "C",
                   "custom: Gamma CV of inter-arrival times (1 = Poisson)", FLT_TRUE_MIN, 100,
                   "0 < C <= 100"),
        FLAG_RANGE("duration", FLAG_FLOAT, &duration, "S", "seconds of arrivals (default 20)",
                   FLT_TRUE_MIN, 86400, "0 < S <= 86400"),
        FLAG_RANGE("requests", FLAG_INT, &rr_requests, "N", "round-robin: requests (default 40)", 1,
                   1000000, "1..1000000"),
        FLAG("seed", FLAG_U64, &seed, "S",
             "arrival seed (default 1; bench workload's seed gives its arrivals)"),
        FLAG_RANGE("slo", FLAG_FLOAT, &slo, "S",
                   "SLO in seconds (default: --slo-scale x warm latency)", FLT_TRUE_MIN, 86400,
                   "0 < S <= 86400"),
        FLAG_RANGE("slo-scale", FLAG_FLOAT, &slo_scale, "X",
                   "SLO as a multiple of the warm single-request latency (default 5)", FLT_TRUE_MIN,
                   1e6, "0 < X <= 1000000"),
        FLAG_RANGE("warm-requests", FLAG_INT, &warm_n, "N",
                   "requests to model 0, one at a time, before the run: the warm latency is "
                   "the best after the first (default 4; 0: none, needs --slo)",
                   0, 64, "0..64"),
        FLAG("prime", FLAG_BOOL, &prime, NULL,
             "before the warm-up, one request to every model, the last first: each is read "
             "from disk once (bench workload's stack stages every model in host memory at open)"),
        FLAG("label", FLAG_STR, &label, "NAME",
             "this run's name in tables, files and the plot, e.g. the server's policy (default "
             "serve)"),
        FLAG("stream", FLAG_BOOL, &stream, NULL,
             "stream responses (server-sent events): time to first token per request"),
        FLAG("prompt-ids", FLAG_STR, &prompt_ids_s, "I,J,...",
             "every request's prompt as these token ids (default: Computron's 8, OPT's ids of "
             "\"Berkeley is the number one public\"; for a model whose vocabulary lacks them)"),
        FLAG("chat", FLAG_BOOL, &chat, NULL,
             "send chat requests (POST /v1/chat/completions) with one user message, "
             "--chat-text, rendered by each model's chat template"),
        FLAG("chat-text", FLAG_STR, &chat_text, "TEXT",
             "the user message of --chat (default \"Berkeley is the number one public\")"),
        FLAG_RANGE("max-tokens", FLAG_INT, &max_tokens, "N",
                   "max_tokens of every request (default 1, as Computron's)", 1, 1 << 20,
                   "1..1048576"),
        FLAG("api-key", FLAG_STR, &api_key, "KEY", "sent as Authorization: Bearer KEY"),
        FLAG_RANGE("timeout", FLAG_FLOAT, &timeout, "S",
                   "per request; one without a response by then fails (default 300)", FLT_TRUE_MIN,
                   86400, "0 < S <= 86400"),
        FLAG_RANGE("max-connections", FLAG_INT, &max_conn, "N",
                   "connections open at once; more requests wait for one (default 128)", 1, 100000,
                   "1..100000"),
        FLAG("out-dir", FLAG_STR, &out_dir, "DIR", "CSV and plot go here (default bench-out)"),
        FLAG("csv", FLAG_STR, &csv_s, "PATH",
             "the requests' CSV (default OUT-DIR/CONFIG-LABEL.csv)"),
        FLAG("plot", FLAG_STR, &plot_s, "PATH",
             "the CDF plot (default OUT-DIR/CONFIG-LABEL-cdf.svg; with --compare, "
             "OUT-DIR/compare-cdf.svg)"),
        FLAG("compare", FLAG_STR, &compare_s, "A.json,B.json",
             "no run: the --json outputs of earlier runs (of bench serve or bench workload) "
             "side by side, ratios against the first, one CDF plot of them all"),
        FLAG("json", FLAG_BOOL, &json, NULL, "print one JSON object instead of tables"),
    };
    int rc = args_parse("bench serve",
                        "Replays a workload in real time against an OpenAI-compatible server "
                        "(shardswap serve): the arrivals of bench workload with the same "
                        "--config and --seed, each released at its time as the same request "
                        "(\"Berkeley is the number one public\" as 8 token ids, or --prompt-ids, "
                        "or with --chat as a chat message; max_tokens 1 or --max-tokens, "
                        "top_k 50, top_p 0.5, temperature 0.7, seed = request index) through one "
                        "libcurl multi handle with kept-alive connections. Prints latency "
                        "(arrival to last byte) mean/p50/p90/p99/max, SLO attainment, throughput "
                        "and responses by HTTP status (a failed request is counted, never "
                        "dropped), per model and overall; writes a CSV of every request in bench "
                        "workload's format and an SVG latency CDF. One run measures one server; "
                        "run it once per policy with --json and --label, then --compare the "
                        "files.",
                        argc, argv, flags, sizeof(flags) / sizeof(flags[0]));
    if (rc)
        return rc;
    char path_buf[1024], plot_buf[1024], names_buf[4096], tag[64];
    char **listed = NULL;
    int n_listed = 0;
    const char *names[MAX_MODELS];
    struct workload_config c;
    struct arrival *ev = NULL;
    struct chat_request *lens = NULL; /* chat: (n_ev) each request's lengths */
    size_t n_ev = 0;
    struct http_replay_result res;
    double *lat = NULL;
    size_t n_lat = 0;
    memset(&res, 0, sizeof(res));
    if (compare_s) {
        char *files = strdup(compare_s);
        if (!files)
            return cli_fail("bench serve");
        if (!plot_s) {
            if ((rc = cli_check_out_dir(out_dir)) < 0) {
                free(files);
                return cli_fail("bench serve");
            }
            snprintf(plot_buf, sizeof(plot_buf), "%s/compare-cdf.svg", out_dir);
            plot_s = plot_buf;
        }
        rc = compare(files, plot_s, json);
        free(files);
        return rc < 0 ? cli_fail("bench serve") : 0;
    }
    /* every flag is checked here, before a request is sent */
    if (!url) {
        fprintf(stderr, "shardswap bench serve: --url is required (or --compare)\n");
        return EXIT_USAGE;
    }
    if (http_url_check(url) < 0)
        return args_usage_fail("bench serve");
    if (strcmp(config_s, "computron:all") == 0) {
        fprintf(stderr, "shardswap bench serve: --config computron:all is bench workload "
                        "--simulate's; run one config at a time\n");
        return EXIT_USAGE;
    }
    struct workload_flags wf = {.config = config_s,
                                .rates = rates_s,
                                .n_models = n_models,
                                .alpha = alpha,
                                .total_rate = total_rate,
                                .cv = cv};
    if (workload_config_from_flags(&wf, &c) < 0)
        return args_usage_fail("bench serve");
    if (c.chat) { /* TTFT and TPOT come from the streamed tokens */
        c.slo_ttft_s = slo_ttft;
        c.slo_tpot_s = slo_tpot;
        stream = true;
    }
    if (warm_n == 0 && slo <= 0) {
        fprintf(stderr, "shardswap bench serve: --warm-requests 0 needs --slo\n");
        return EXIT_USAGE;
    }
    if (!*label || strchr(label, '/')) {
        fprintf(stderr, "shardswap bench serve: --label \"%s\": expected a name without '/'\n",
                label);
        return EXIT_USAGE;
    }
    int n_names = 0;
    if (models_s) {
        snprintf(names_buf, sizeof(names_buf), "%s", models_s);
        if (names_parse(names_buf, names, MAX_MODELS, &n_names) < 0)
            return args_usage_fail("bench serve");
        if (n_names < c.n_models) {
            fprintf(stderr, "shardswap bench serve: --models names %d models; %s has %d\n", n_names,
                    config_s, c.n_models);
            return EXIT_USAGE;
        }
    }
    if (chat && prompt_ids_s) {
        fprintf(stderr, "shardswap bench serve: --chat sends text (--chat-text), not "
                        "--prompt-ids; give one of them\n");
        return EXIT_USAGE;
    }
    int32_t *prompt_ids = NULL;
    int n_prompt_ids = 0;
    if (prompt_ids_s && cli_ids_parse("prompt-ids", prompt_ids_s, &prompt_ids, &n_prompt_ids) < 0)
        return args_usage_fail("bench serve");
    if ((!csv_s || !plot_s) && (rc = cli_check_out_dir(out_dir)) < 0)
        goto out;
    snprintf(tag, sizeof(tag), "%s", config_s);
    for (char *q = tag; *q; q++)
        if (*q == ':')
            *q = '-';
    if (!csv_s) {
        snprintf(path_buf, sizeof(path_buf), "%s/%s-%s.csv", out_dir, tag, label);
        csv_s = path_buf;
    }
    if (!plot_s) {
        snprintf(plot_buf, sizeof(plot_buf), "%s/%s-%s-cdf.svg", out_dir, tag, label);
        plot_s = plot_buf;
    }
    struct http_replay_opts o = {.target = {.url = url, .api_key = api_key, .timeout_s = timeout},
                                 .models = names,
                                 .n_models = c.n_models,
                                 .stream = stream,
                                 .max_connections = max_conn,
                                 .prompt = prompt_ids,
                                 .n_prompt = n_prompt_ids,
                                 .chat_text = chat ? chat_text : NULL,
                                 .max_tokens = max_tokens};
    /* the server's model names: what it lists, unless named */
    if (!models_s) {
        if ((rc = http_list_models(&o.target, &listed, &n_listed)) < 0)
            goto out;
        if (n_listed < c.n_models) {
            rc = err_set(ERR_INVALID,
                         "%s has %d models, the server lists %d: serve more or "
                         "name them with --models",
                         config_s, c.n_models, n_listed);
            goto out;
        }
        for (int i = 0; i < c.n_models; i++)
            names[i] = listed[i];
    }
    /* the arrivals: bench workload's, or a closed loop for round-robin */
    if (c.round_robin) {
        n_ev = (size_t)rr_requests;
        if (!(ev = calloc(n_ev, sizeof(*ev)))) {
            rc = err_set(ERR_NOMEM, "out of memory");
            goto out;
        }
        for (size_t i = 0; i < n_ev; i++)
            ev[i] = (struct arrival){.t = 0, .model = (int)(i % (size_t)c.n_models)};
        o.closed_loop = true;
    } else if ((rc = replay_arrivals(&c, duration, seed, &ev, &n_ev)) < 0) {
        goto out;
    }
    if (prime) {
        struct arrival pe[MAX_MODELS];
        struct http_replay_opts po = o;
        struct http_replay_result pr;
        po.closed_loop = true;
        for (int i = 0; i < c.n_models; i++)
            pe[i] = (struct arrival){.t = 0, .model = c.n_models - 1 - i};
        fprintf(stderr, "priming %d models, one request each...\n", c.n_models);
        rc = http_replay_run(&po, pe, (size_t)c.n_models, &pr);
        if (rc == 0 && pr.counts.ok != pr.n)
            rc = err_set(ERR_IO, "--prime: a request failed: %s", pr.first_error);
        http_replay_result_free(&pr);
        if (rc < 0)
            goto out;
    }
    double warm = 0;
    if (warm_n > 0) {
        fprintf(stderr, "measuring the warm latency of %s (%d requests, one at a time)...\n",
                names[0], warm_n);
        if ((rc = warm_latency(&o, warm_n, &warm)) < 0)
            goto out;
    }
    if (slo <= 0)
        slo = slo_scale * (float)warm;
    fprintf(stderr, "running %s against %s as %s (%zu requests)...\n", config_s, url, label, n_ev);
    double swaps0, swap_s0, swaps1, swap_s1;
    if (c.chat) { /* each request's lengths, as bench workload draws them */
        if (!(lens = calloc(n_ev ? n_ev : 1, sizeof(*lens)))) {
            rc = err_set(ERR_NOMEM, "out of memory for %zu requests", n_ev);
            goto out;
        }
        chat_requests_make(&c.lengths, seed, ev, n_ev, lens);
        o.lens = lens; /* the run's only: priming and the warm latency are Computron's */
    }
    scrape_swaps(&o.target, &swaps0, &swap_s0);
    if ((rc = http_replay_run(&o, ev, n_ev, &res)) < 0)
        goto out;
    scrape_swaps(&o.target, &swaps1, &swap_s1);
    struct run r = {.config_s = config_s,
                    .label = label,
                    .url = url,
                    .csv = csv_s,
                    .plot = plot_s,
                    .c = &c,
                    .names = names,
                    .warm = warm,
                    .slo = slo,
                    .duration = duration,
                    .seed = seed,
                    .stream = stream,
                    .res = &res,
                    .swaps = swaps1 - swaps0,
                    .swap_s = swap_s1 - swap_s0};
    if ((rc = report_write_csv(csv_s, res.recs, res.n)) < 0 ||
        (rc = summary_compute(res.recs, res.n, -1, slo, &r.sum, &lat, &n_lat)) < 0 ||
        (rc = ttft_stats(res.recs, res.n, &r.ttft)) < 0 ||
        (c.chat &&
         (rc = summary_tokens(res.recs, res.n, -1, c.slo_ttft_s, c.slo_tpot_s, &r.tok)) < 0))
        goto out;
    char title[256];
    snprintf(title, sizeof(title), "latency CDF over HTTP, %s (%d models)", config_s, c.n_models);
    const char *series[1] = {label};
    const double *lats[1] = {lat};
    if ((rc = report_write_cdf_svg(plot_s, title, series, lats, &n_lat, 1)) < 0)
        goto out;
    if (json)
        rc = print_json(&r);
    else
        print_table(&r);
out:
    http_replay_result_free(&res);
    http_names_free(listed, n_listed);
    free(prompt_ids);
    free(lens);
    free(ev);
    free(lat);
    return rc < 0 ? cli_fail("bench serve") : 0;
}
