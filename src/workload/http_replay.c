#include "workload/http_replay.h"

#include <assert.h>
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/strbuf.h"
#include "core/timing.h"
#include "workload/replay.h"

/* A response body larger than this is refused (a completion of one token is
 * a few hundred bytes; /metrics a few tens of kB). */
#define BODY_MAX ((size_t)4 << 20)

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

/* curl_global_init is not thread-safe before 7.84: once per process. */
static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int curl_ready(void)
{
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return err_set(ERR_IO, "libcurl: %s", curl_easy_strerror(curl_init_rc));
    return 0;
}

int http_url_check(const char *url)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL;
    int rc = 0;
    if (!u)
        return err_set(ERR_NOMEM, "out of memory");
    if (curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !*host)
        rc = err_set(ERR_INVALID, "--url %s: not a URL (expected http://HOST:PORT)", url);
    else if (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)
        rc =
            err_set(ERR_INVALID, "--url %s: scheme %s (expected http:// or https://)", url, scheme);
    curl_free(scheme);
    curl_free(host);
    curl_url_cleanup(u);
    return rc;
}

/* target->url + path ("/v1/..."), without a doubled '/'; malloc'd. */
static char *url_join(const char *base, const char *path)
{
    size_t b = strlen(base);
    while (b > 0 && base[b - 1] == '/')
        b--;
    size_t p = strlen(path);
    char *s = malloc(b + p + 1);
    if (s) {
        memcpy(s, base, b);
        memcpy(s + b, path, p + 1);
    }
    return s;
}

/* ---- a response body: a string buffer (core/strbuf.h) up to BODY_MAX ---- */

struct membuf {
    struct strbuf b;
    bool over; /* more than BODY_MAX came */
};

static bool membuf_append(struct membuf *m, const char *d, size_t n)
{
    if (m->b.len + n > BODY_MAX) {
        m->over = true;
        return false;
    }
    return strbuf_append(&m->b, d, n) == 0;
}

static size_t membuf_write(char *d, size_t size, size_t nmemb, void *ctx)
{
    return membuf_append(ctx, d, size * nmemb) ? size * nmemb : 0;
}

/* The headers every request sends; NULL when out of memory. */
static struct curl_slist *headers_make(const struct http_target *t, bool json_body)
{
    struct curl_slist *h = NULL, *n;
    char auth[1024];
    if (json_body) {
        if (!(n = curl_slist_append(h, "Content-Type: application/json")))
            goto fail;
        h = n;
    }
    if (t->api_key) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", t->api_key);
        if (!(n = curl_slist_append(h, auth)))
            goto fail;
        h = n;
    }
    if (!(n = curl_slist_append(h, "Expect:"))) /* no 100-continue round trip */
        goto fail;
    return n;
fail:
    curl_slist_free_all(h);
    return NULL;
}

/* Options every easy handle of ours has. */
static void easy_common(CURL *e, const struct http_target *t, const char *url,
                        struct curl_slist *hdrs, char *errbuf)
{
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_PROXY, ""); /* a benchmark talks to the server, not a proxy */
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    if (t->timeout_s > 0)
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)ceil(t->timeout_s * 1e3));
}

int http_get(const struct http_target *t, const char *path, char **body, long *status)
{
    *body = NULL;
    *status = 0;
    int rc;
    if ((rc = curl_ready()) < 0)
        return rc;
    char errbuf[CURL_ERROR_SIZE] = "";
    struct membuf m = {0};
    char *url = url_join(t->url, path);
    struct curl_slist *hdrs = headers_make(t, false);
    CURL *e = curl_easy_init();
    if (!url || !hdrs || !e) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto out;
    }
    easy_common(e, t, url, hdrs, errbuf);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, membuf_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &m);
    CURLcode cc = curl_easy_perform(e);
    if (cc != CURLE_OK) {
        rc = err_set(ERR_IO, "GET %s: %s", url,
                     m.over    ? "response body over 4 MiB"
                     : *errbuf ? errbuf
                               : curl_easy_strerror(cc));
        goto out;
    }
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, status);
    if (!m.b.p && !membuf_append(&m, "", 0)) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto out;
    }
    *body = m.b.p; /* taken: the buffer is left empty */
    m.b = (struct strbuf){0};
out:
    curl_easy_cleanup(e);
    curl_slist_free_all(hdrs);
    free(url);
    strbuf_free(&m.b);
    return rc;
}

/* The message of an OpenAI error body, or the body's start. */
static void error_message(const char *body, size_t len, char *out, size_t cap)
{
    json_t *j = body ? json_loadb(body, len, 0, NULL) : NULL;
    const char *msg =
        j ? json_string_value(json_object_get(json_object_get(j, "error"), "message")) : NULL;
    if (msg)
        snprintf(out, cap, "%s", msg);
    else
        snprintf(out, cap, "%.*s", (int)(len < 120 ? len : 120), body ? body : "");
    for (char *c = out; *c; c++)
        if (*c == '\n' || *c == '\r')
            *c = ' ';
    json_decref(j);
}

void http_names_free(char **names, int n)
{
    for (int i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
}

int http_list_models(const struct http_target *t, char ***names_out, int *n_out)
{
    *names_out = NULL;
    *n_out = 0;
    char *body = NULL;
    long status = 0;
    int rc = http_get(t, "/v1/models", &body, &status);
    if (rc < 0)
        return rc;
    json_t *j = NULL;
    char **names = NULL;
    int n = 0;
    if (status != 200) {
        char msg[200];
        error_message(body, strlen(body), msg, sizeof(msg));
        rc = err_set(ERR_IO, "GET %s/v1/models: HTTP %ld: %s", t->url, status, msg);
        goto out;
    }
    json_t *data = (j = json_loads(body, 0, NULL)) ? json_object_get(j, "data") : NULL;
    if (!json_is_array(data)) {
        rc = err_set(ERR_FORMAT, "GET %s/v1/models: expected {\"data\": [{\"id\": ...}]}", t->url);
        goto out;
    }
    size_t k = json_array_size(data);
    if (!(names = calloc(k ? k : 1, sizeof(*names)))) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < k; i++) {
        const char *id = json_string_value(json_object_get(json_array_get(data, i), "id"));
        if (!id) {
            rc = err_set(ERR_FORMAT, "GET %s/v1/models: data[%zu] has no string \"id\"", t->url, i);
            goto out;
        }
        if (!(names[n] = strdup(id))) {
            rc = err_set(ERR_NOMEM, "out of memory");
            goto out;
        }
        n++;
    }
    *names_out = names;
    *n_out = n;
    names = NULL;
out:
    http_names_free(names, n);
    json_decref(j);
    free(body);
    return rc;
}

/* ---- the replay ---- */

/* The start of a run: every record's times are from it. */
struct replay_clock {
    double t0;
};

/* One request in flight. Lives from its release to its completion; all of
 * it is touched only by the thread running http_replay_run. */
struct xfer {
    CURL *easy;
    char *body;         /* the request's JSON */
    struct membuf resp; /* non-stream: the body; stream: what is not yet a whole line */
    const struct replay_clock *clk;
    struct request_record *rec;
    bool stream;
    bool first_seen; /* t_first_token is set */
    bool usage_seen, done_seen, bad_event;
    char event_error[160]; /* an error event in a stream */
    char errbuf[CURL_ERROR_SIZE];
};

static void mark_first(struct xfer *x)
{
    if (!x->first_seen) {
        x->first_seen = true;
        x->rec->t_first_token = time_now() - x->clk->t0;
    }
}

/* Usage and choices of one completion object (a whole body or an event). */
static void read_completion(struct xfer *x, json_t *j)
{
    json_t *usage = json_object_get(j, "usage");
    if (json_is_object(usage)) {
        json_t *ct = json_object_get(usage, "completion_tokens");
        json_t *pt = json_object_get(usage, "prompt_tokens");
        if (json_is_integer(ct)) {
            x->rec->n_output = (int)json_integer_value(ct);
            x->usage_seen = true;
        }
        if (json_is_integer(pt))
            x->rec->n_prompt = (int)json_integer_value(pt);
    }
}

/* One line of a server-sent event stream ("data: {...}", "data: [DONE]",
 * comments and other fields ignored). */
static void stream_line(struct xfer *x, char *line, size_t len)
{
    if (len && line[len - 1] == '\r')
        line[--len] = '\0';
    if (len < 5 || strncmp(line, "data:", 5) != 0)
        return;
    char *d = line + 5;
    while (*d == ' ')
        d++;
    if (strcmp(d, "[DONE]") == 0) {
        x->done_seen = true;
        return;
    }
    json_t *j = json_loads(d, 0, NULL);
    if (!j) {
        x->bad_event = true;
        return;
    }
    json_t *err = json_object_get(j, "error");
    if (err && !x->event_error[0]) {
        const char *m = json_string_value(json_object_get(err, "message"));
        snprintf(x->event_error, sizeof(x->event_error), "error event: %s", m ? m : "?");
    }
    json_t *choices = json_object_get(j, "choices");
    if (json_is_array(choices) && json_array_size(choices) > 0)
        mark_first(x);
    read_completion(x, j);
    json_decref(j);
}

/* libcurl's write callback: non-stream bodies are kept whole; a stream's
 * complete lines are read as they arrive. */
static size_t xfer_write(char *d, size_t size, size_t nmemb, void *ctx)
{
    struct xfer *x = ctx;
    size_t n = size * nmemb;
    if (!x->stream) {
        mark_first(x);
        return membuf_append(&x->resp, d, n) ? n : 0;
    }
    if (!membuf_append(&x->resp, d, n))
        return 0;
    char *start = x->resp.b.p, *nl;
    while ((nl = memchr(start, '\n', x->resp.b.len - (size_t)(start - x->resp.b.p)))) {
        *nl = '\0';
        stream_line(x, start, (size_t)(nl - start));
        start = nl + 1;
    }
    size_t rest = x->resp.b.len - (size_t)(start - x->resp.b.p);
    memmove(x->resp.b.p, start, rest);
    strbuf_truncate(&x->resp.b, rest);
    return n;
}

/* Computron's request for model name, seeded with idx (its prompt o's or
 * replay_prompt); malloc'd JSON. */
static char *request_body(const struct http_replay_opts *o, const char *model, size_t idx,
                          bool stream)
{
    json_t *ids = json_array();
    const int32_t *base = o->prompt ? o->prompt : replay_prompt;
    int n_base = o->prompt ? o->n_prompt : REPLAY_PROMPT_LEN;
    int n = o->lens ? o->lens[idx].n_prompt : n_base;
    for (int i = 0; ids && !o->chat_text && i < n; i++) {
        int32_t id = i < n_base ? base[i] : n_base > 1 ? base[1 + (i - 1) % (n_base - 1)] : base[0];
        if (json_array_append_new(ids, json_integer(id)) < 0) {
            json_decref(ids);
            return NULL;
        }
    }
    if (o->chat_text) {
        json_decref(ids);
        ids = json_pack("[{s:s, s:s}]", "role", "user", "content", o->chat_text);
    }
    json_t *j = json_pack("{s:s, s:o, s:i, s:f, s:i, s:f, s:I, s:b}", "model", model,
                          o->chat_text ? "messages" : "prompt", ids, "max_tokens",
                          o->lens         ? o->lens[idx].n_output
                          : o->max_tokens ? o->max_tokens
                                          : REPLAY_MAX_TOKENS,
                          "temperature",
                          (double)REPLAY_TEMPERATURE, "top_k", REPLAY_TOP_K, "top_p",
                          (double)REPLAY_TOP_P, "seed", (json_int_t)idx, "stream", stream);
    if (j && stream &&
        json_object_set_new(j, "stream_options", json_pack("{s:b}", "include_usage", 1)) < 0) {
        json_decref(j);
        return NULL;
    }
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

/* Records a failure of x: its status, the result's count, and the first
 * message. */
static void xfer_fail(struct http_replay_result *r, struct xfer *x, int status, size_t *count,
                      const char *fmt, const char *what)
{
    x->rec->status = status;
    (*count)++;
    if (!r->first_error[0])
        snprintf(r->first_error, sizeof(r->first_error), fmt, what);
}

/* A finished transfer: its status, body and times into its record. */
static void xfer_finish(struct http_replay_result *r, struct xfer *x, CURLcode cc)
{
    struct request_record *rec = x->rec;
    struct http_counts *c = &r->counts;
    long code = 0, conns = 0;
    rec->t_done = time_now() - x->clk->t0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_getinfo(x->easy, CURLINFO_NUM_CONNECTS, &conns);
    r->connections += (size_t)conns;
    char what[300];
    if (cc != CURLE_OK) {
        snprintf(what, sizeof(what), "%s",
                 x->resp.over ? "response body over 4 MiB"
                 : *x->errbuf ? x->errbuf
                              : curl_easy_strerror(cc));
        xfer_fail(r, x, cc == CURLE_OPERATION_TIMEDOUT ? ERR_TIMEOUT : ERR_IO, &c->transport,
                  "no response: %s", what);
        return;
    }
    rec->http_status = (int)code;
    if (code != 200) {
        char msg[200];
        error_message(x->resp.b.p, x->resp.b.len, msg, sizeof(msg));
        snprintf(what, sizeof(what), "HTTP %ld: %s", code, msg);
        if (code == 429)
            xfer_fail(r, x, ERR_BUSY, &c->busy, "%s", what);
        else if (code >= 400 && code < 500)
            xfer_fail(r, x, code == 404 ? ERR_NOT_FOUND : ERR_INVALID, &c->client, "%s", what);
        else if (code >= 500 && code < 600)
            xfer_fail(r, x, ERR_IO, &c->server, "%s", what);
        else
            xfer_fail(r, x, ERR_UNSUPPORTED, &c->other, "%s", what);
        return;
    }
    if (x->stream) {
        if (x->resp.b.len) /* a last line without its newline */
            stream_line(x, x->resp.b.p, x->resp.b.len);
        if (x->event_error[0])
            xfer_fail(r, x, ERR_IO, &c->server, "%s", x->event_error);
        else if (x->bad_event || !x->done_seen || !x->first_seen)
            xfer_fail(r, x, ERR_FORMAT, &c->malformed, "HTTP 200: %s",
                      x->bad_event    ? "an event that is not JSON"
                      : !x->done_seen ? "the stream ended without data: [DONE]"
                                      : "no event carried a choice");
        else
            c->ok++;
        return;
    }
    json_t *j = x->resp.b.p ? json_loadb(x->resp.b.p, x->resp.b.len, 0, NULL) : NULL;
    json_t *choices = j ? json_object_get(j, "choices") : NULL;
    if (json_is_array(choices) && json_array_size(choices) > 0) {
        read_completion(x, j);
        c->ok++;
    } else {
        xfer_fail(r, x, ERR_FORMAT, &c->malformed, "HTTP 200: %s",
                  j ? "a body without choices" : "a body that is not JSON");
    }
    json_decref(j);
}

static void xfer_free(struct xfer *x)
{
    curl_easy_cleanup(x->easy);
    free(x->body);
    strbuf_free(&x->resp.b);
    memset(x, 0, sizeof(*x));
}

/* Hands request i to libcurl; its record's arrival is now. */
static int xfer_start(CURLM *m, struct xfer *x, size_t i, const struct http_replay_opts *o,
                      const char *url, struct curl_slist *hdrs, int model,
                      struct request_record *rec, const struct replay_clock *clk)
{
    *x = (struct xfer){.clk = clk, .rec = rec, .stream = o->stream};
    *rec = (struct request_record){.id = i,
                                   .model = model,
                                   .t_start = NAN,
                                   .t_first_token = NAN,
                                   .t_done = NAN,
                                   .n_prompt = o->lens     ? o->lens[i].n_prompt
                                               : o->prompt ? o->n_prompt
                                                           : REPLAY_PROMPT_LEN};
    if (!(x->body = request_body(o, o->models[model], i, o->stream)) || !(x->easy = curl_easy_init()))
        return err_set(ERR_NOMEM, "out of memory");
    easy_common(x->easy, &o->target, url, hdrs, x->errbuf);
    curl_easy_setopt(x->easy, CURLOPT_POSTFIELDS, x->body);
    curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, xfer_write);
    curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->easy, CURLOPT_PRIVATE, x);
    rec->t_arrival = time_now() - clk->t0;
    CURLMcode mc = curl_multi_add_handle(m, x->easy);
    if (mc != CURLM_OK)
        return err_set(ERR_IO, "libcurl: %s", curl_multi_strerror(mc));
    return 0;
}

static void sleep_s(double d)
{
    struct timespec ts = {.tv_sec = (time_t)d, .tv_nsec = (long)((d - (double)(time_t)d) * 1e9)};
    nanosleep(&ts, NULL);
}

void http_replay_result_free(struct http_replay_result *r)
{
    if (!r)
        return;
    free(r->recs);
    memset(r, 0, sizeof(*r));
}

int http_replay_run(const struct http_replay_opts *o, const struct arrival *ev, size_t n,
                    struct http_replay_result *out)
{
    memset(out, 0, sizeof(*out));
    int rc;
    if ((rc = curl_ready()) < 0 || (rc = http_url_check(o->target.url)) < 0)
        return rc;
    for (size_t i = 0; i < n; i++)
        if (ev[i].model < 0 || ev[i].model >= o->n_models)
            return err_set(ERR_INVALID, "arrival %zu is for model %d; %d models are named", i,
                           ev[i].model, o->n_models);
    struct xfer *xs = calloc(n ? n : 1, sizeof(*xs));
    char *url = url_join(o->target.url, o->chat_text ? "/v1/chat/completions" : "/v1/completions");
    struct curl_slist *hdrs = headers_make(&o->target, true);
    CURLM *m = curl_multi_init();
    out->recs = calloc(n ? n : 1, sizeof(*out->recs));
    out->n = n;
    if (!xs || !url || !hdrs || !m || !out->recs) {
        rc = err_set(ERR_NOMEM, "out of memory for %zu requests", n);
        goto out;
    }
    /* the idle connections kept: without a size, libcurl sizes the cache
     * by the handles added, and with none between two requests it keeps none */
    curl_multi_setopt(m, CURLMOPT_MAXCONNECTS,
                      (long)(o->max_connections > 0 ? o->max_connections : 256));
    if (o->max_connections > 0)
        curl_multi_setopt(m, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)o->max_connections);
    struct replay_clock clk = {.t0 = time_now()};
    size_t next = 0, done = 0, in_flight = 0;
    while (done < n) {
        /* 1. release every request whose time has come */
        double now = time_now() - clk.t0;
        while (next < n && (o->closed_loop ? in_flight == 0 : ev[next].t <= now)) {
            if ((rc = xfer_start(m, &xs[next], next, o, url, hdrs, ev[next].model, &out->recs[next],
                                 &clk)) < 0)
                goto out;
            next++;
            in_flight++;
        }
        /* 2. move every transfer as far as it goes without waiting */
        int running = 0;
        CURLMcode mc = curl_multi_perform(m, &running);
        if (mc != CURLM_OK) {
            rc = err_set(ERR_IO, "libcurl: %s", curl_multi_strerror(mc));
            goto out;
        }
        /* 3. record the ones that ended */
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            char *priv = NULL;
            CURLcode cc = msg->data.result;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
            struct xfer *x = (struct xfer *)(void *)priv;
            assert(x && x->easy == msg->easy_handle);
            xfer_finish(out, x, cc);
            curl_multi_remove_handle(m, x->easy);
            xfer_free(x);
            in_flight--;
            done++;
        }
        if (done == n || (o->closed_loop && in_flight == 0))
            continue;
        /* 4. wait for the network or the next arrival, whichever is first */
        int wait_ms = 1000;
        if (!o->closed_loop && next < n) {
            double d = ev[next].t - (time_now() - clk.t0);
            if (d <= 0)
                continue;
            if (d < 1e-3) { /* below poll's resolution */
                sleep_s(d);
                continue;
            }
            wait_ms = (int)(d * 1e3);
        }
        if ((mc = curl_multi_poll(m, NULL, 0, wait_ms, NULL)) != CURLM_OK) {
            rc = err_set(ERR_IO, "libcurl: %s", curl_multi_strerror(mc));
            goto out;
        }
    }
    out->wall_s = time_now() - clk.t0;
    for (size_t i = 0; !o->closed_loop && i < n; i++) {
        double lag = out->recs[i].t_arrival - ev[i].t;
        out->lag_mean_s += lag / (double)n;
        out->lag_max_s = lag > out->lag_max_s ? lag : out->lag_max_s;
    }
out:
    for (size_t i = 0; xs && i < n; i++)
        if (xs[i].easy) {
            curl_multi_remove_handle(m, xs[i].easy);
            xfer_free(&xs[i]);
        }
    curl_multi_cleanup(m);
    curl_slist_free_all(hdrs);
    free(url);
    free(xs);
    return rc;
}
