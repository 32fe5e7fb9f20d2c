/* GET /metrics: the Prometheus text format 0.0.4, from the engine's and the
 * swap manager's statistics and the server's own counters. Every family is
 * written whole (HELP, TYPE, its samples) before the next. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_impl.h"

/* A label value with \, " and newline escaped. */
static void put_label(FILE *f, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\')
            fputs("\\\\", f);
        else if (*v == '"')
            fputs("\\\"", f);
        else if (*v == '\n')
            fputs("\\n", f);
        else
            fputc(*v, f);
    }
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A model's row: its counters, and for a served model (st not NULL) the
 * engine's statistics, whose gauges only served models show. */
struct model_row {
    const char *name;
    const char *base; /* an adapter's base; "" for a model */
    struct srv_counts c;
    const struct engine_model_stats *st;
};

static void model_sample(FILE *f, const char *name, const struct model_row *row,
                         unsigned long long v)
{
    fprintf(f, "%s{model=\"", name);
    put_label(f, row->name);
    fprintf(f, "\"} %llu\n", v);
}

static void model_hist(FILE *f, const char *name, const struct model_row *row,
                       const struct engine_hist *h)
{
    for (int i = 0; i < ENGINE_HIST_LE; i++) {
        fprintf(f, "%s_bucket{model=\"", name);
        put_label(f, row->name);
        fprintf(f, "\",le=\"%g\"} %llu\n", engine_hist_le[i], (unsigned long long)h->le[i]);
    }
    fprintf(f, "%s_bucket{model=\"", name);
    put_label(f, row->name);
    fprintf(f, "\",le=\"+Inf\"} %llu\n", (unsigned long long)h->count);
    fprintf(f, "%s_sum{model=\"", name);
    put_label(f, row->name);
    fprintf(f, "\"} %.9g\n", h->sum);
    fprintf(f, "%s_count{model=\"", name);
    put_label(f, row->name);
    fprintf(f, "\"} %llu\n", (unsigned long long)h->count);
}

/* shardswap_expert_tokens_total, for the served models with experts (the
 * family whole: HELP and TYPE only when some model has samples). */
static void expert_tokens(FILE *f, struct server *s, const struct model_row *rows, int n_live)
{
    bool head = false;
    for (int i = 0; i < n_live; i++) {
        int layers = 0, experts = 0;
        if (engine_model_expert_tokens(s->stack->engine, rows[i].st->id, NULL, 0, &layers,
                                       &experts) < 0 ||
            !experts)
            continue;
        /* the shape is fixed once it is not 0 */
        uint64_t *c = calloc((size_t)layers * experts, sizeof(*c));
        if (!c || engine_model_expert_tokens(s->stack->engine, rows[i].st->id, c,
                                             (size_t)layers * experts, &layers, &experts) < 0) {
            free(c);
            continue;
        }
        if (!head)
            family(f, "shardswap_expert_tokens_total", "counter",
                   "Real tokens (prompt and generated) the model's router sent to each expert "
                   "of each layer, each token to its top-k experts; counted on the serving "
                   "process (a pipeline stage served wholly by other processes counts 0).");
        head = true;
        for (int l = 0; l < layers; l++)
            for (int x = 0; x < experts; x++) {
                fputs("shardswap_expert_tokens_total{model=\"", f);
                put_label(f, rows[i].name);
                fprintf(f, "\",layer=\"%d\",expert=\"%d\"} %llu\n", l, x,
                        (unsigned long long)c[(size_t)l * experts + x]);
            }
        free(c);
    }
}

static int float_desc(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Expert-level residency, for the served models with it: how skewed the
 * router is (the share of the decayed routed tokens that the hottest 1%,
 * 10% and 25% of the (layer, expert) pairs hold: three samples a model,
 * whatever its experts), how many expert blobs are on its devices and the
 * bytes it lacks there; the on-demand loads and evictions of the manager. */
static void expert_residency(FILE *f, struct server *s, const struct model_row *rows, int n_live,
                             const struct swap_stats *ss)
{
    static const double tops[] = {0.01, 0.1, 0.25};
    bool head = false;
    for (int i = 0; i < n_live; i++) {
        struct swap_model *sm = engine_model_swap(s->stack->engine, rows[i].st->id);
        int layers = 0, experts = 0;
        if (!sm || !swap_model_expert_residency(sm) ||
            swap_model_expert_hot(s->stack->mgr, sm, NULL, 0, &layers, &experts) < 0 || !experts)
            continue;
        const size_t n = (size_t)layers * experts;
        float *hot = malloc(n * sizeof(*hot));
        if (!hot || swap_model_expert_hot(s->stack->mgr, sm, hot, n, &layers, &experts) < 0) {
            free(hot);
            continue;
        }
        qsort(hot, n, sizeof(*hot), float_desc);
        double sum = 0;
        for (size_t k = 0; k < n; k++)
            sum += hot[k];
        if (!head)
            family(f, "shardswap_expert_hot_share", "gauge",
                   "Of the model's routed tokens, decayed by half every 64 steps of each layer, "
                   "the share the hottest top fraction of its (layer, expert) pairs took "
                   "(expert residency only; 0 before any step).");
        head = true;
        for (size_t t = 0; t < sizeof(tops) / sizeof(tops[0]); t++) {
            size_t m = (size_t)(tops[t] * (double)n + 0.5);
            double part = 0;
            for (size_t k = 0; k < (m ? m : 1); k++)
                part += hot[k];
            fputs("shardswap_expert_hot_share{model=\"", f);
            put_label(f, rows[i].name);
            fprintf(f, "\",top=\"%g\"} %.6g\n", tops[t], sum > 0 ? part / sum : 0.0);
        }
        free(hot);
    }
    if (!head)
        return;
    family(f, "shardswap_experts_resident", "gauge",
           "Expert blobs of the model on its devices now (one per expert per shard holding "
           "it; expert residency only).");
    for (int i = 0; i < n_live; i++) {
        struct swap_model *sm = engine_model_swap(s->stack->engine, rows[i].st->id);
        if (sm && swap_model_expert_residency(sm))
            model_sample(f, "shardswap_experts_resident", &rows[i],
                         swap_model_experts_resident(s->stack->mgr, sm));
    }
    family(f, "shardswap_expert_missing_bytes", "gauge",
           "Bytes a load of the model would copy now: with expert residency a resident model "
           "counts the experts it lacks.");
    for (int i = 0; i < n_live; i++) {
        struct swap_model *sm = engine_model_swap(s->stack->engine, rows[i].st->id);
        if (sm && swap_model_expert_residency(sm))
            model_sample(f, "shardswap_expert_missing_bytes", &rows[i],
                         swap_model_missing_bytes(s->stack->mgr, sm));
    }
    family(f, "shardswap_expert_loads_total", "counter",
           "Experts a step brought onto their devices on demand (expert residency).");
    fprintf(f, "shardswap_expert_loads_total %llu\n", (unsigned long long)ss->experts_loaded);
    family(f, "shardswap_expert_evictions_total", "counter",
           "Experts that left their devices for room while their model stayed resident (trims, "
           "and other models' on-demand loads).");
    fprintf(f, "shardswap_expert_evictions_total %llu\n", (unsigned long long)ss->experts_evicted);
}

/* An adapter's sample: {model="NAME",base="BASE"} V */
static void adapter_sample(FILE *f, const char *name, const struct model_row *row, const char *v)
{
    fprintf(f, "%s{model=\"", name);
    put_label(f, row->name);
    fputs("\",base=\"", f);
    put_label(f, row->base);
    fprintf(f, "\"} %s\n", v);
}

/* The adapters' loads, bytes and seconds (the families whole, also when
 * no adapter is served: a scrape's families do not come and go). */
static void adapter_loads(FILE *f, const struct model_row *rows, int n, const char *note)
{
    static const struct {
        const char *name, *help;
    } fams[] = {
        {"shardswap_adapter_loads_total", "Loads of the LoRA adapter onto its base's devices."},
        {"shardswap_adapter_load_bytes_total",
         "Bytes copied host to device over the adapter's loads."},
        {"shardswap_adapter_load_seconds_total",
         "Seconds from the request of each of the adapter's loads to every shard on its "
         "device, summed."},
    };
    char help[512], v[64];
    for (size_t k = 0; k < sizeof(fams) / sizeof(fams[0]); k++) {
        snprintf(help, sizeof(help), "%s %s", fams[k].help, note);
        family(f, fams[k].name, "counter", help);
        for (int i = 0; i < n; i++) {
            if (!rows[i].base[0])
                continue;
            const struct srv_counts *c = &rows[i].c;
            if (k == 0)
                snprintf(v, sizeof(v), "%llu", (unsigned long long)c->loads);
            else if (k == 1)
                snprintf(v, sizeof(v), "%llu", (unsigned long long)c->bytes_loaded);
            else
                snprintf(v, sizeof(v), "%.9g", c->load.sum);
            adapter_sample(f, fams[k].name, &rows[i], v);
        }
    }
}

/* rows[0 .. n_live) are served models, rows[n_live .. n) removed ones. */
static void write_metrics(FILE *f, struct server *s, struct model_row *rows, int n_live, int n)
{
    char retained_note[200];
    snprintf(retained_note, sizeof(retained_note),
             "A removed model's counters (every _total and histogram family) stay, for the "
             "last %d names removed, and go on from there if the name is added again.",
             SRV_MAX_RETAINED);
    char help[768];
    snprintf(help, sizeof(help),
             "Completion requests by model and outcome (invalid: refused by the server with a "
             "4xx before reaching the engine; rejected: the model's queue was full). %s",
             retained_note);
    family(f, "shardswap_requests_total", "counter", help);
    for (int i = 0; i < n; i++) {
        const struct srv_counts *c = &rows[i].c;
        const struct {
            const char *outcome;
            unsigned long long v;
        } o[] = {{"ok", c->ok},
                 {"error", c->failed},
                 {"cancelled", c->cancelled},
                 {"timeout", c->timed_out},
                 {"rejected", c->rejected},
                 {"invalid", c->invalid}};
        for (size_t k = 0; k < sizeof(o) / sizeof(o[0]); k++) {
            fputs("shardswap_requests_total{model=\"", f);
            put_label(f, rows[i].name);
            fprintf(f, "\",outcome=\"%s\"} %llu\n", o[k].outcome, o[k].v);
        }
    }
    family(f, "shardswap_api_requests_total", "counter",
           "Requests to the generation routes by model and route (completions, chat), "
           "whatever their outcome.");
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 2; k++) {
            fputs("shardswap_api_requests_total{model=\"", f);
            put_label(f, rows[i].name);
            fprintf(f, "\",route=\"%s\"} %llu\n", k ? "chat" : "completions",
                    (unsigned long long)rows[i].c.route[k]);
        }
    family(f, "shardswap_http_responses_total", "counter", "HTTP responses by status code.");
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < SRV_HTTP_CODES && s->http_code[i]; i++)
        fprintf(f, "shardswap_http_responses_total{code=\"%d\"} %llu\n", s->http_code[i],
                (unsigned long long)s->http_count[i]);
    pthread_mutex_unlock(&s->lock);

    family(f, "shardswap_queue_depth", "gauge", "Requests waiting in the model's queue.");
    for (int i = 0; i < n_live; i++)
        model_sample(f, "shardswap_queue_depth", &rows[i],
                     (unsigned long long)rows[i].st->queue_len);
    family(f, "shardswap_running", "gauge", "Sequences of the model's batch in flight.");
    for (int i = 0; i < n_live; i++)
        model_sample(f, "shardswap_running", &rows[i], (unsigned long long)rows[i].st->running);

    family(f, "shardswap_ttft_seconds", "histogram",
           "Time from arrival to the first token, of requests that completed.");
    for (int i = 0; i < n; i++)
        model_hist(f, "shardswap_ttft_seconds", &rows[i], &rows[i].c.ttft);
    family(f, "shardswap_request_duration_seconds", "histogram",
           "Time from arrival to completion, of requests that completed.");
    for (int i = 0; i < n; i++)
        model_hist(f, "shardswap_request_duration_seconds", &rows[i], &rows[i].c.latency);
    family(f, "shardswap_swap_duration_seconds", "histogram",
           "Time from the request of a load to every shard on its device.");
    for (int i = 0; i < n; i++)
        model_hist(f, "shardswap_swap_duration_seconds", &rows[i], &rows[i].c.load);

    family(f, "shardswap_swaps_total", "counter", "Loads of the model onto its devices.");
    for (int i = 0; i < n; i++)
        model_sample(f, "shardswap_swaps_total", &rows[i], rows[i].c.loads);
    family(f, "shardswap_swapped_bytes_total", "counter",
           "Bytes copied host to device over the model's loads.");
    for (int i = 0; i < n; i++)
        model_sample(f, "shardswap_swapped_bytes_total", &rows[i], rows[i].c.bytes_loaded);
    family(f, "shardswap_trims_total", "counter",
           "Times the model gave up its last layers on a device for another model's load, "
           "keeping its first ones (partial residency).");
    for (int i = 0; i < n; i++)
        model_sample(f, "shardswap_trims_total", &rows[i], rows[i].c.trims);
    family(f, "shardswap_trimmed_bytes_total", "counter",
           "Device bytes of the layers the model gave up in its trims.");
    for (int i = 0; i < n; i++)
        model_sample(f, "shardswap_trimmed_bytes_total", &rows[i], rows[i].c.bytes_trimmed);
    family(f, "shardswap_evictions_total", "counter",
           "Times the scheduling policy evicted the model to make room.");
    for (int i = 0; i < n; i++)
        model_sample(f, "shardswap_evictions_total", &rows[i], rows[i].c.evictions);

    snprintf(help, sizeof(help),
             "Times the model left its devices, by reason (idle: past its keep_alive; evicted: "
             "for another model's room; requested: POST /admin/models/NAME/unload; removed: "
             "DELETE /admin/models/NAME while it was resident or loading; preempted: for another "
             "model's room while its batch was paused at a step boundary, its KV cache kept on "
             "the devices until it is loaded again and resumes). %s",
             retained_note);
    family(f, "shardswap_unloads_total", "counter", help);
    for (int i = 0; i < n; i++) {
        const struct {
            const char *reason;
            unsigned long long v;
        } u[] = {{"idle", rows[i].c.idle_unloads},
                 {"evicted", rows[i].c.evictions},
                 {"requested", rows[i].c.unloads},
                 {"removed", rows[i].c.removal_unloads},
                 {"preempted", rows[i].c.preempt_unloads}};
        for (size_t k = 0; k < sizeof(u) / sizeof(u[0]); k++) {
            fputs("shardswap_unloads_total{model=\"", f);
            put_label(f, rows[i].name);
            fprintf(f, "\",reason=\"%s\"} %llu\n", u[k].reason, u[k].v);
        }
    }

    expert_tokens(f, s, rows, n_live);
    adapter_loads(f, rows, n, retained_note);

    static const enum residency res[] = {RES_ON_DISK,   RES_IN_HOST,    RES_LOADING,
                                         RES_ON_DEVICE, RES_OFFLOADING, RES_PARTIAL};
    family(f, "shardswap_model_resident", "gauge",
           "1 for the residency the model is in now, 0 for the others.");
    for (int i = 0; i < n_live; i++)
        for (size_t k = 0; k < sizeof(res) / sizeof(res[0]); k++) {
            fputs("shardswap_model_resident{model=\"", f);
            put_label(f, rows[i].name);
            fprintf(f, "\",residency=\"%s\"} %d\n", srv_residency_name(res[k]),
                    rows[i].st->residency == res[k]);
        }

    struct swap_manager *mgr = s->stack->mgr;
    family(f, "shardswap_device_bytes_used", "gauge", "Device memory in use, in bytes.");
    for (int d = 0; d < swap_device_count(mgr); d++) {
        fputs("shardswap_device_bytes_used{device=\"", f);
        put_label(f, device_name(swap_device(mgr, d)));
        fprintf(f, "\"} %llu\n", (unsigned long long)device_used(swap_device(mgr, d)));
    }
    family(f, "shardswap_device_bytes_budget", "gauge", "Device memory budget, in bytes.");
    for (int d = 0; d < swap_device_count(mgr); d++) {
        fputs("shardswap_device_bytes_budget{device=\"", f);
        put_label(f, device_name(swap_device(mgr, d)));
        fprintf(f, "\"} %llu\n", (unsigned long long)device_budget(swap_device(mgr, d)));
    }
    struct swap_stats ss;
    swap_get_stats(mgr, &ss);
    /* the host budget holds the host tier's copies and what the served
     * models' registrations are charged (tokenizers, tables: models.c) */
    unsigned long long reg = atomic_load(&s->registered_bytes);
    family(f, "shardswap_host_bytes_used", "gauge",
           "Host memory in use against the host budget, in bytes: the host tier's copies "
           "and the served models' registrations.");
    fprintf(f, "shardswap_host_bytes_used %llu\n", (unsigned long long)ss.host_used + reg);
    family(f, "shardswap_host_bytes_registered", "gauge",
           "Host memory the served models' registrations are charged (tokenizers, chat "
           "templates, tables), in bytes; part of shardswap_host_bytes_used.");
    fprintf(f, "shardswap_host_bytes_registered %llu\n", reg);
    family(f, "shardswap_host_bytes_budget", "gauge",
           "Host memory budget of the host tier, in bytes.");
    fprintf(f, "shardswap_host_bytes_budget %llu\n", (unsigned long long)ss.host_budget);
    expert_residency(f, s, rows, n_live, &ss);
    uint64_t cut;
    int n_conns = srv_conns_count(s, &cut);
    family(f, "shardswap_http_connections", "gauge", "Open HTTP connections.");
    fprintf(f, "shardswap_http_connections %d\n", n_conns);
    family(f, "shardswap_http_deadline_closes_total", "counter",
           "Connections closed because a request's headers or body were not in within "
           "header_timeout_s / body_timeout_s.");
    fprintf(f, "shardswap_http_deadline_closes_total %llu\n", (unsigned long long)cut);
}

enum MHD_Result srv_metrics(struct srv_req *r)
{
    struct server *s = r->s;
    struct srv_model **ms = malloc(SRV_MAX_LIST * sizeof(*ms));
    int n = 0, n_ret = 0;
    struct srv_retained *ret = ms ? srv_models_snapshot(s, ms, SRV_MAX_LIST, &n, &n_ret) : NULL;
    struct model_row *rows = calloc((size_t)(n + n_ret ? n + n_ret : 1), sizeof(*rows));
    struct engine_model_stats *st = calloc((size_t)(n ? n : 1), sizeof(*st));
    char *text = NULL;
    size_t len = 0;
    FILE *f = rows && st && ms ? open_memstream(&text, &len) : NULL;
    if (!f) {
        if (ms)
            srv_models_put_all(ms, n);
        free(ms);
        free(ret);
        free(rows);
        free(st);
        return srv_reply_errorf(r, 500, NULL, NULL, "", "Out of memory.");
    }
    /* a model removed since the snapshot is in neither list: left out of
     * this scrape, its counters in the next */
    int k = 0;
    for (int i = 0; i < n; i++)
        if (engine_model_stats(s->stack->engine, ms[i]->id, &st[k]) == 0) {
            rows[k].name = ms[i]->name;
            rows[k].base = ms[i]->base_name;
            rows[k].st = &st[k];
            srv_counts_of(ms[i], &st[k], &rows[k].c);
            k++;
        }
    int n_live = k;
    for (int i = 0; i < n_ret; i++, k++) {
        rows[k].name = ret[i].name;
        rows[k].base = ret[i].base;
        rows[k].c = ret[i].c;
    }
    write_metrics(f, s, rows, n_live, k);
    bool bad = fclose(f) != 0 || !text;
    free(rows);
    free(st);
    free(ret);
    srv_models_put_all(ms, n);
    free(ms);
    if (bad) {
        free(text);
        return srv_reply_errorf(r, 500, NULL, NULL, "", "Out of memory.");
    }
    enum MHD_Result reply =
        srv_reply_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", text);
    free(text);
    return reply;
}
