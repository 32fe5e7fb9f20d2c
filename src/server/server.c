/* The server's daemon: lifecycle (open, run until a signal, graceful
 * shutdown, close), libmicrohttpd's callbacks, routing, auth, body limits
 * and the access log. The routes live in routes_*.c and metrics.c. */
#include "server/server.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cluster/job.h"
#include "core/error.h"
#include "core/timing.h"
#include "sched/sched.h"
#include "server/log.h"
#include "server/server_impl.h"

/* Budgets left 0 hold a full batch of requests of this shape. */
#define SRV_FIT_PROMPT 512
#define SRV_FIT_MAX_TOKENS 512

/* ---- request state ---- */

static struct srv_req *srv_req_new(struct server *s, struct MHD_Connection *conn, const char *url,
                                   const char *method, const char *version)
{
    struct srv_req *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    atomic_init(&r->refs, 1);
    r->s = s;
    r->conn = conn;
    r->sc = srv_conn_of(conn);
    r->http10 = strcmp(version, MHD_HTTP_VERSION_1_0) == 0;
    r->t0 = time_now();
    r->fd = -1;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci)
        r->fd = ci->connect_fd;
    ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (!sa || getnameinfo(sa,
                           sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                     : sizeof(struct sockaddr_in),
                           r->client, sizeof(r->client), NULL, 0, NI_NUMERICHOST) != 0)
        snprintf(r->client, sizeof(r->client), "?");
    snprintf(r->method, sizeof(r->method), "%s", method);
    snprintf(r->path, sizeof(r->path), "%s", url);
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_lock(&s->lock);
    r->live_next = s->live;
    if (s->live)
        s->live->live_prev = r;
    s->live = r;
    pthread_mutex_unlock(&s->lock);
    return r;
}

void srv_req_ref(struct srv_req *r)
{
    atomic_fetch_add(&r->refs, 1);
}

/* Any thread; the last reference frees r (never under r's lock). */
void srv_req_unref(struct srv_req *r)
{
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    struct server *s = r->s;
    pthread_mutex_lock(&s->lock);
    if (r->live_prev)
        r->live_prev->live_next = r->live_next;
    else
        s->live = r->live_next;
    if (r->live_next)
        r->live_next->live_prev = r->live_prev;
    pthread_cond_broadcast(&s->idle_cv);
    pthread_mutex_unlock(&s->lock);
    srv_completions_free(r);
    free(r->body);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

void srv_req_wake(struct srv_req *r)
{
    pthread_mutex_lock(&r->lock);
    bool resume = r->suspended;
    r->suspended = false;
    pthread_mutex_unlock(&r->lock);
    if (resume)
        MHD_resume_connection(r->conn);
}

bool srv_req_suspend_unless(struct srv_req *r, bool (*ready)(struct srv_req *r))
{
    pthread_mutex_lock(&r->lock);
    bool now = ready(r);
    if (!now) {
        r->suspended = true;
        MHD_suspend_connection(r->conn);
    }
    pthread_mutex_unlock(&r->lock);
    return !now;
}

bool srv_accepting(const struct server *s)
{
    return atomic_load(&s->state) == SERVER_SERVING;
}

bool srv_inflight_enter(struct server *s)
{
    pthread_mutex_lock(&s->lock);
    bool ok = srv_accepting(s);
    if (ok)
        s->n_inflight++;
    pthread_mutex_unlock(&s->lock);
    return ok;
}

void srv_reply_closing(struct srv_req *r, struct MHD_Response *resp)
{
    if (atomic_load(&r->s->state) == SERVER_STOPPING)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
}

void srv_inflight_add(struct server *s, int d)
{
    pthread_mutex_lock(&s->lock);
    s->n_inflight += d;
    if (s->n_inflight == 0)
        pthread_cond_broadcast(&s->idle_cv);
    pthread_mutex_unlock(&s->lock);
}

/* ---- routing and auth ---- */

static const char *const admin_actions[] = {"load", "unload", "pin", "unpin"};

/* Sets r->route (and arg, action) from the path; *allow is the methods the
 * path takes when method is not one of them (then the route stays NONE). */
static void route_find(struct srv_req *r, const char *url, const char *method, const char **allow)
{
    bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    bool post = strcmp(method, "POST") == 0, del = strcmp(method, "DELETE") == 0;
    *allow = NULL;
    const char *mp = "/v1/models/", *ap = "/admin/models/";
    bool chat = strcmp(url, "/v1/chat/completions") == 0;
    if (chat || strcmp(url, "/v1/completions") == 0) {
        r->route = !post ? ROUTE_NONE : chat ? ROUTE_CHAT : ROUTE_COMPLETIONS;
        *allow = "POST";
    } else if (strcmp(url, "/v1/models") == 0) {
        r->route = get ? ROUTE_MODELS : ROUTE_NONE;
        *allow = "GET";
    } else if (strncmp(url, mp, strlen(mp)) == 0 && url[strlen(mp)]) {
        snprintf(r->arg, sizeof(r->arg), "%s", url + strlen(mp));
        r->route = get ? ROUTE_MODEL : ROUTE_NONE;
        *allow = "GET";
    } else if (strcmp(url, "/health") == 0) {
        r->route = get ? ROUTE_HEALTH : ROUTE_NONE;
        *allow = "GET";
    } else if (strcmp(url, "/metrics") == 0) {
        r->route = get ? ROUTE_METRICS : ROUTE_NONE;
        *allow = "GET";
    } else if (strcmp(url, "/admin/models") == 0) {
        r->route = post ? ROUTE_ADMIN_ADD : ROUTE_NONE;
        *allow = "POST";
    } else if (strncmp(url, ap, strlen(ap)) == 0 && url[strlen(ap)]) {
        const char *rest = url + strlen(ap), *slash = strrchr(rest, '/');
        bool action = false; /* .../{id}/load etc.; else the path names a model */
        for (size_t i = 0;
             slash && slash > rest && i < sizeof(admin_actions) / sizeof(admin_actions[0]); i++)
            if (strcmp(slash + 1, admin_actions[i]) == 0) {
                action = true;
                if (post) {
                    snprintf(r->action, sizeof(r->action), "%s", admin_actions[i]);
                    snprintf(r->arg, sizeof(r->arg), "%.*s", (int)(slash - rest), rest);
                    r->route = ROUTE_ADMIN_ACTION;
                    return;
                }
            }
        snprintf(r->arg, sizeof(r->arg), "%s", rest);
        r->route = del ? ROUTE_ADMIN_MODEL : ROUTE_NONE;
        *allow = action ? "POST, DELETE" : "DELETE";
    }
}

/* Compares in time that depends only on the lengths, not on where the
 * strings first differ. */
static bool key_equal(const char *a, size_t na, const char *b)
{
    size_t nb = strlen(b);
    unsigned char diff = na != nb;
    for (size_t i = 0; i < nb; i++)
        diff |= (unsigned char)(b[i] ^ (i < na ? a[i] : 0));
    return diff == 0;
}

/* NULL when r may proceed; else the error to answer. */
static bool auth_ok(struct srv_req *r, struct oai_error *e)
{
    const struct serve_config *c = r->s->cfg;
    bool admin = r->route == ROUTE_ADMIN_ADD || r->route == ROUTE_ADMIN_MODEL ||
                 r->route == ROUTE_ADMIN_ACTION;
    const char *key = admin && c->admin_key ? c->admin_key : c->api_key;
    if (r->route == ROUTE_HEALTH || r->route == ROUTE_METRICS || !key)
        return true;
    const char *h =
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *tok = NULL;
    if (h && strncasecmp(h, "Bearer ", 7) == 0) {
        tok = h + 7;
        while (*tok == ' ')
            tok++;
    }
    if (tok && key_equal(tok, strlen(tok), key))
        return true;
    oai_error_set(e, 401, "authentication_error", "invalid_api_key", "",
                  tok ? "Incorrect API key provided%s."
                      : "Missing API key%s: send "
                        "'Authorization: Bearer KEY'.",
                  admin && c->admin_key ? " (admin routes take the admin key)" : "");
    return false;
}

/* GET /health: 200 while accepting, 503 while starting or stopping. Under
 * mpirun it lists the processes of the job, and a lost one makes the
 * status "degraded" (still 200: the models on the others serve; those on
 * it answer 503 naming it). */
static enum MHD_Result health(struct srv_req *r)
{
    bool ok = srv_accepting(r->s);
    json_t *body = json_object();
    bool degraded = false;
    if (r->s->job) {
        json_t *procs = json_array();
        for (int p = 0; p < cluster_job_procs(r->s->job); p++) {
            char why[256] = "";
            bool lost = cluster_job_lost(r->s->job, p, why, sizeof why);
            degraded |= lost;
            json_t *e = json_pack("{s:i, s:s}", "process", p, "status", lost ? "lost" : "ok");
            if (lost)
                json_object_set_new(e, "reason", json_string(why));
            json_array_append_new(procs, e);
        }
        json_object_set_new(body, "processes", procs);
    }
    json_object_set_new(body, "status",
                        json_string(!ok ? "unavailable" : degraded ? "degraded" : "ok"));
    return srv_reply_json(r, ok ? 200 : 503, body);
}

/* ---- libmicrohttpd callbacks ---- */

static enum MHD_Result dispatch(struct srv_req *r)
{
    switch (r->route) {
    case ROUTE_COMPLETIONS:
    case ROUTE_CHAT:
        return srv_completions(r);
    case ROUTE_MODELS:
        return srv_models_list(r);
    case ROUTE_MODEL:
        return srv_model_get(r);
    case ROUTE_HEALTH:
        return health(r);
    case ROUTE_METRICS:
        return srv_metrics(r);
    case ROUTE_ADMIN_ADD:
        return srv_admin_add(r);
    case ROUTE_ADMIN_MODEL:
        return srv_admin_delete(r);
    case ROUTE_ADMIN_ACTION:
        return srv_admin_action(r);
    case ROUTE_NONE:
        break;
    }
    return MHD_NO;
}

/* The framing headers of a request: how many Content-Length and
 * Transfer-Encoding headers, and the last Transfer-Encoding's value. */
struct framing {
    int n_cl, n_te;
    const char *te;
};

/* MHD's header iterator: fills the struct framing at cls. */
static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    (void)kind;
    struct framing *f = cls;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0)
        f->n_cl++;
    if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        f->n_te++;
        f->te = value;
    }
    return MHD_YES;
}

/* Whether the comma-separated codings of a Transfer-Encoding end in
 * "chunked" (RFC 9112 6.1: the only framing a request body may have). */
static bool te_ends_chunked(const char *te)
{
    const char *last = strrchr(te, ',');
    last = last ? last + 1 : te;
    while (*last == ' ' || *last == '\t')
        last++;
    size_t n = strlen(last);
    while (n && (last[n - 1] == ' ' || last[n - 1] == '\t'))
        n--;
    return n == 7 && strncasecmp(last, "chunked", 7) == 0;
}

/* The body's framing, checked before anything else: a request whose body
 * length two parties could read differently is refused (RFC 9112 6.1, 6.3:
 * 400 and the connection closed), since a proxy in front may have framed it
 * the other way and the rest of the bytes would be a request of its own
 * (smuggling). libmicrohttpd reads Transfer-Encoding and ignores
 * Content-Length, reads the first of two Content-Lengths, and reads a body
 * with a coding other than chunked until the connection closes. */
static bool framing_ok(struct srv_req *r, struct oai_error *e)
{
    struct framing f = {0};
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, count_framing, &f);
    if (f.n_cl > 1) {
        oai_error_set(e, 400, "invalid_request_error", NULL, "",
                      "The request has %d Content-Length headers, expected at most one.", f.n_cl);
        return false;
    }
    if (f.n_te == 0)
        return true;
    if (f.n_cl) {
        oai_error_set(e, 400, "invalid_request_error", NULL, "",
                      "The request has both Transfer-Encoding and Content-Length headers, "
                      "expected one of them.");
        return false;
    }
    if (f.n_te > 1) {
        oai_error_set(e, 400, "invalid_request_error", NULL, "",
                      "The request has %d Transfer-Encoding headers, expected at most one.",
                      f.n_te);
        return false;
    }
    if (strcasecmp(f.te, "chunked") == 0)
        return true;
    if (te_ends_chunked(f.te))
        oai_error_set(e, 501, "invalid_request_error", "not_implemented", "",
                      "The request's Transfer-Encoding has a coding other than chunked, which is "
                      "not implemented: expected \"Transfer-Encoding: chunked\".");
    else
        oai_error_set(e, 400, "invalid_request_error", NULL, "",
                      "The request's Transfer-Encoding does not end in chunked, so its body has "
                      "no length: expected \"Transfer-Encoding: chunked\" or a Content-Length.");
    return false;
}

bool srv_framing_refused(struct MHD_Connection *conn, uint64_t max_body, struct oai_error *e)
{
    struct framing f = {0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, count_framing, &f);
    const char *cl =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (f.n_te || !cl)
        return false; /* MHD reads no Content-Length then */
    /* MHD's rule: decimal digits only, the value within 64 bits */
    uint64_t n = 0;
    bool overflow = false;
    size_t i = 0;
    for (; cl[i] >= '0' && cl[i] <= '9'; i++) {
        unsigned d = (unsigned)(cl[i] - '0');
        if (n > (UINT64_MAX - d) / 10)
            overflow = true;
        else
            n = n * 10 + d;
    }
    if (i > 0 && cl[i] == '\0' && !overflow)
        return false;
    if (i > 0 && cl[i] == '\0')
        oai_error_set(e, 413, "invalid_request_error", "request_too_large", "",
                      "The request's Content-Length is past 2^64 bytes; the limit is %llu bytes.",
                      (unsigned long long)max_body);
    else
        oai_error_set(e, 400, "invalid_request_error", NULL, "",
                      "The request's Content-Length is not a number of bytes: expected decimal "
                      "digits only.");
    return true;
}

/* The first call for a request: its framing, route, the server's state,
 * auth and the declared body size. Queues the answer when the request is
 * refused. */
static enum MHD_Result request_start(struct srv_req *r, const char *url, const char *method)
{
    struct server *s = r->s;
    struct oai_error e;
    if (!framing_ok(r, &e))
        return srv_reply_error_hdr(r, &e, MHD_HTTP_HEADER_CONNECTION, "close");
    const char *allow;
    route_find(r, url, method, &allow);
    if (r->route == ROUTE_NONE && !allow) {
        oai_error_set(&e, 404, "invalid_request_error", "not_found", "", "No route %s %s.", method,
                      url);
        return srv_reply_error(r, &e);
    }
    if (r->route == ROUTE_NONE) {
        oai_error_set(&e, 405, "invalid_request_error", "method_not_allowed", "",
                      "Method %s is not allowed on %s (allowed: %s).", method, url, allow);
        return srv_reply_error_hdr(r, &e, MHD_HTTP_HEADER_ALLOW, allow);
    }
    if (!srv_accepting(s) && r->route != ROUTE_HEALTH && r->route != ROUTE_METRICS) {
        oai_error_set(&e, 503, "server_error", "server_shutting_down", "",
                      "The server is shutting down.");
        return srv_reply_error(r, &e);
    }
    if (!auth_ok(r, &e))
        return srv_reply_error(r, &e);
    const char *cl =
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(cl, &end, 10);
        if (errno == 0 && end != cl && n > s->cfg->max_body_bytes) {
            oai_error_set(&e, 413, "invalid_request_error", "request_too_large", "",
                          "The request body of %llu bytes exceeds the limit of %llu bytes.", n,
                          (unsigned long long)s->cfg->max_body_bytes);
            return srv_reply_error(r, &e);
        }
    }
    return MHD_YES;
}

/* Appends a piece of the body, up to max_body_bytes. */
static void body_append(struct srv_req *r, const char *data, size_t n)
{
    uint64_t max = r->s->cfg->max_body_bytes;
    if (r->body_too_big || r->body_len + n > max) {
        r->body_too_big = true;
        return;
    }
    if (r->body_len + n + 1 > r->body_cap) {
        size_t cap = r->body_cap ? r->body_cap : 4096;
        while (cap < r->body_len + n + 1)
            cap *= 2;
        char *b = realloc(r->body, cap);
        if (!b) {
            r->body_too_big = true;
            return;
        }
        r->body = b;
        r->body_cap = cap;
    }
    memcpy(r->body + r->body_len, data, n);
    r->body_len += n;
    r->body[r->body_len] = '\0';
}

/* MHD's access handler: on a pool thread, several times per request (the
 * headers, each piece of the body, the end of the body, and again after
 * each resume while no response is queued). */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    struct server *s = cls;
    struct srv_req *r = *req_cls;
    if (!r) {
        if (!(r = srv_req_new(s, conn, url, method, version)))
            return MHD_NO;
        *req_cls = r;
        srv_conn_headers_in(s, r->sc); /* the body's deadline starts */
        return request_start(r, url, method);
    }
    if (*upload_data_size) {
        body_append(r, upload_data, *upload_data_size);
        *upload_data_size = 0;
        if (!r->body_too_big)
            return MHD_YES;
        /* a chunked body past the limit (a Content-Length past it is
         * refused with the headers): answered now, not after a body that
         * may never end (MHD reads a chunk of 2^64-1 bytes as well) */
        struct oai_error e;
        oai_error_set(&e, 413, "invalid_request_error", "request_too_large", "",
                      "The request body exceeds the limit of %llu bytes.",
                      (unsigned long long)s->cfg->max_body_bytes);
        return srv_reply_error_now(r, &e);
    }
    srv_conn_body_in(s, r->sc);
    if (r->er)
        return srv_completions_resumed(r);
    if (r->handled)
        return MHD_YES; /* a stream's response is queued */
    return dispatch(r);
}

static void access_log(struct srv_req *r, enum MHD_RequestTerminationCode toe)
{
    /* a probe's requests (a load balancer's /health, a scraper's /metrics)
     * come every few seconds and say nothing of the traffic: debug */
    bool probe = strcmp(r->path, "/health") == 0 || strcmp(r->path, "/metrics") == 0;
    enum log_level level = probe ? LOG_DEBUG : LOG_INFO;
    if (log_get_level() < level)
        return;
    double now = time_now();
    char extra[256] = "";
    if (r->m) {
        struct engine_req_timings t = {0};
        if (r->er)
            engine_req_timings(r->er, &t); /* so far, when it is still running */
        pthread_mutex_lock(&r->lock);
        int n_gen = r->n_gen;
        pthread_mutex_unlock(&r->lock);
        double wait = t.t_start > 0 ? t.t_start - t.t_arrival : 0;
        double ttft = t.t_first_token > 0 ? t.t_first_token - t.t_arrival : 0;
        double compute = t.t_done > 0 && t.t_start > 0 ? t.t_done - t.t_start : 0;
        snprintf(extra, sizeof(extra),
                 " model=%s%s%s prompt_tokens=%d completion_tokens=%d queue_load_ms=%.1f "
                 "ttft_ms=%.1f compute_ms=%.1f%s",
                 r->m->name, r->id[0] ? " id=" : "", r->id, r->n_prompt, n_gen, wait * 1e3,
                 ttft * 1e3, compute * 1e3, r->creq.stream ? " stream" : "");
    }
    const char *how = srv_conn_cut(r->sc)                             ? " (deadline: closed)"
                      : r->answered_now                               ? " (connection closed)"
                      : toe == MHD_REQUEST_TERMINATED_COMPLETED_OK    ? ""
                      : toe == MHD_REQUEST_TERMINATED_CLIENT_ABORT    ? " (client closed)"
                      : toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED ? " (timed out)"
                      : toe == MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN ? " (shutdown)"
                                                                      : " (client gone)";
    log_msg(level, "%s %s %s %d%s%s total_ms=%.1f", r->client, r->method, r->path,
            r->http_status ? r->http_status : 499, how, extra, (now - r->t0) * 1e3);
}

/* MHD's completion notice: once per request the access handler saw, on a
 * pool thread (also for a client that went away: its engine request is
 * cancelled at once). */
static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct server *s = cls;
    struct srv_req *r = *req_cls;
    if (!r)
        return;
    *req_cls = NULL;
    pthread_mutex_lock(&r->lock);
    bool cancel = r->er && !r->done;
    pthread_mutex_unlock(&r->lock);
    if (cancel && engine_cancel(s->stack->engine, r->er) == 0)
        log_debug("%s %s: client went away, request cancelled", r->method, r->path);
    srv_unwatch(s, r);
    access_log(r, toe);
    srv_conn_request_done(s, r->sc);
    srv_req_unref(r);
}

static char mhd_last_error[256];

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[256];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    struct server *s = cls;
    /* kept for server_open's message; later, pool threads log concurrently */
    if (atomic_load(&s->state) == SERVER_STARTING)
        snprintf(mhd_last_error, sizeof(mhd_last_error), "%s", msg);
    log_debug("libmicrohttpd: %s", msg);
    /* the only callback MHD makes before it answers headers it refuses */
    if (atomic_load(&s->state) != SERVER_STARTING)
        srv_conns_headers_refused(s);
    /* 0.9.75: "... 413 ('... The chunk size used in your HTTP chunked
     * encoded request is too large. ...')", logged before it answers */
    if (atomic_load(&s->state) != SERVER_STARTING && strstr(msg, "chunk size") &&
        strstr(msg, "too large"))
        srv_conns_chunk_refused(s);
}

/* ---- lifecycle ---- */

/* The self-pipe: SIGINT and SIGTERM write their number to it, server_run
 * reads it. (Blocking the signals for a signalfd is not enough: threads that
 * libraries start before main, OpenBLAS's, would still take them.) */
static int signal_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    ssize_t n = write(signal_pipe[1], &b, 1); /* full pipe: a stop is pending anyway */
    (void)n;
    errno = saved;
}

int server_signals_init(void)
{
    if (signal_pipe[0] < 0 && pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
        return err_set(ERR_IO, "pipe: %s", strerror(errno));
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

static int listen_start(struct server *s)
{
    const struct serve_config *c = s->cfg;
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char port[16];
    snprintf(port, sizeof(port), "%d", c->port);
    int g = getaddrinfo(c->host, port, &hints, &ai);
    if (g != 0)
        return err_set(ERR_INVALID, "--host %s: %s", c->host, gai_strerror(g));
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG | MHD_USE_ITC;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    mhd_last_error[0] = '\0';
    s->mhd = MHD_start_daemon(
        flags, (uint16_t)c->port, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log,
        s, MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned)(c->http_threads > 0 ? c->http_threads : 4), MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)c->max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)c->connection_timeout_s, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)serve_config_per_client(c), MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)(32 * 1024), MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)128,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, srv_conn_notify,
        s, MHD_OPTION_URI_LOG_CALLBACK, srv_conn_request_line, s, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->mhd)
        return err_set(ERR_IO, "could not listen on %s:%d%s%s", c->host, c->port,
                       mhd_last_error[0] ? ": " : "", mhd_last_error);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : c->port;
    return 0;
}

static double mib(uint64_t n)
{
    return (double)n / (double)(1u << 20);
}

/* The engine's on_move: one line per load, eviction, trim and unload (under
 * the engine lock: a line and nothing more). */
static void log_move(void *ctx, const struct engine_move *mv)
{
    (void)ctx;
    const char *end = mv->deferred ? " (at the end of its batch in flight)" : "";
    unsigned long long b = (unsigned long long)mv->bytes;
    switch (mv->kind) {
    case ENGINE_MOVE_LOADED:
        log_info("model %s: loaded %llu bytes (%.1f MiB) in %.3f s", mv->model, b, mib(mv->bytes),
                 mv->seconds);
        break;
    case ENGINE_MOVE_LOAD_FAILED:
        log_warn("model %s: load failed after %.3f s: %s", mv->model, mv->seconds, mv->why);
        break;
    case ENGINE_MOVE_EVICTED:
    case ENGINE_MOVE_PREEMPTED:
        log_info("model %s: evicted for %s%s: %llu bytes (%.1f MiB) freed after %.1f s on its "
                 "devices%s",
                 mv->model, mv->for_model ? mv->for_model : "another model",
                 mv->kind == ENGINE_MOVE_PREEMPTED ? " (preempted: its batch paused, its KV "
                                                     "caches kept)"
                                                   : "",
                 b, mib(mv->bytes), mv->seconds, end);
        break;
    case ENGINE_MOVE_TRIMMED:
        log_info("model %s: trimmed for %s: %llu bytes (%.1f MiB) of its last layers freed on "
                 "device %d",
                 mv->model, mv->for_model ? mv->for_model : "another model", b, mib(mv->bytes),
                 mv->device);
        break;
    case ENGINE_MOVE_IDLE:
        if (isnan(mv->keep_alive))
            log_info("model %s: unloaded after %.1f s idle (the policy's keep_alive): %llu bytes "
                     "(%.1f MiB) freed%s",
                     mv->model, mv->seconds, b, mib(mv->bytes), end);
        else
            log_info("model %s: unloaded after %.1f s idle (keep_alive %g s): %llu bytes "
                     "(%.1f MiB) freed%s",
                     mv->model, mv->seconds, mv->keep_alive, b, mib(mv->bytes), end);
        break;
    case ENGINE_MOVE_UNLOADED:
        log_info("model %s: unloaded by an admin: %llu bytes (%.1f MiB) freed after %.1f s on "
                 "its devices%s",
                 mv->model, b, mib(mv->bytes), mv->seconds, end);
        break;
    }
}

/* The budgets and the policy the stack opened with, one line each. */
static void log_budgets(const struct server *s, const struct stack_config *sc)
{
    const struct stack *st = s->stack;
    for (int d = 0; d < st->n_devices; d++)
        log_info("device %s: budget %.1f MiB (%s)", device_name(st->devices[d]),
                 mib(device_budget(st->devices[d])), st->budget_why[d]);
    log_info("host: budget %.1f MiB for the models' copies (%s)", mib(st->host_budget),
             st->host_why);
    log_info("policy: %s%s", sc->engine.policy ? sc->engine.policy : sched_policy_default(),
             sc->engine.policy ? "" : " (the default)");
}

/* The stack a config serves: what server_open opens and what every
 * follower sizes its devices by (the same numbers on every process). */
static void server_stack_config(const struct serve_config *c, struct stack_config *sc,
                                struct stack_model_config *mc, struct stack_adapter_config *ac)
{
    serve_config_stack(c, sc, mc);
    serve_config_stack_adapters(c, sc, ac);
    /* budgets left 0 are sized for batches of requests this long (the
     * stack's defaults fit a benchmark's short prompts, not a client's) */
    sc->fit_prompt = SRV_FIT_PROMPT;
    sc->fit_max_tokens = SRV_FIT_MAX_TOKENS;
    sc->engine.on_move = log_move;
}

/* The entries of the config's adapters, which stack_open served after the
 * models (stack.adapters, in the config's order). */
static int serve_adapters(struct server *s, const struct serve_config *c)
{
    for (int i = 0; i < s->stack->n_adapters; i++) {
        const struct serve_adapter *a = &c->adapters[i];
        struct srv_model *base = srv_model_find(s, a->base);
        int rc = base ? srv_adapter_add(s, s->stack->adapters[i], a->path, base,
                                        s->stack->adapter_ids[i])
                      : err_set(ERR_INVALID, "no model named '%s' is served", a->base);
        srv_model_put(base);
        if (rc < 0)
            return err_wrap(rc, "adapters[%d] (%s).path", i, a->name);
        log_info("adapter %s: %s over model %s%s", a->name, a->path, a->base,
                 a->pinned ? " (pinned)" : "");
    }
    return 0;
}

int server_open(const struct serve_config *c, struct cluster_job *job, struct server **out)
{
    *out = NULL;
    struct server *s = calloc(1, sizeof(*s));
    if (!s)
        return err_set(ERR_NOMEM, "out of memory for the server");
    s->cfg = c;
    atomic_init(&s->state, SERVER_STARTING);
    s->started = (long long)time(NULL);
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->admin_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->idle_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->watch_lock, NULL);
    queue_init(&s->watched);
    pthread_mutex_init(&s->conn_lock, NULL);
    int rc;
    struct stack_config sc;
    struct stack_model_config *mc = calloc((size_t)(c->n_models ? c->n_models : 1), sizeof(*mc));
    struct stack_adapter_config *ac = calloc((size_t)c->n_adapters + 1, sizeof(*ac));
    if (!mc || !ac) {
        free(mc);
        free(ac);
        rc = err_set(ERR_NOMEM, "out of memory for the server");
        goto fail;
    }
    server_stack_config(c, &sc, mc, ac);
    log_info("opening %d model(s) and %d adapter(s) on %d %s device(s)%s", c->n_models,
             c->n_adapters, sc.n_devices, sc.device_kind ? sc.device_kind : "cpu",
             job ? " across processes" : "");
    s->job = job;
    rc = job ? cluster_job_lead(job, &sc) : 0;
    if (rc == 0)
        rc = stack_open(&sc, &s->stack);
    free(mc);
    free(ac);
    if (rc < 0)
        goto fail;
    log_budgets(s, &sc);
    for (int i = 0; i < s->stack->n_models; i++) {
        const struct serve_model *m = &c->models[i];
        if ((rc = srv_model_add(s, s->stack->models[i], m->path, m->chat_template, m->aliases,
                                m->n_aliases, s->stack->ids[i])) < 0)
            goto fail;
        log_info("model %s: %s (tp %d, pp %d%s)", m->name, m->path, m->tp, m->pp,
                 m->pinned ? ", pinned" : "");
    }
    if ((rc = serve_adapters(s, c)) < 0)
        goto fail;
    /* pinned models are on their devices before the first request */
    if ((rc = stack_load_pinned(s->stack)) < 0)
        goto fail;
    if ((rc = srv_watcher_start(s)) < 0 || (rc = listen_start(s)) < 0)
        goto fail;
    atomic_store(&s->state, SERVER_SERVING);
    log_info("listening on http://%s%s%s:%d", strchr(c->host, ':') ? "[" : "", c->host,
             strchr(c->host, ':') ? "]" : "", s->port);
    *out = s;
    return 0;
fail:
    server_close(s);
    return rc;
}

int server_port(const struct server *s)
{
    return s->port;
}

/* Waits on idle_cv until pred holds or the monotonic deadline passes;
 * under s->lock. */
static bool wait_until(struct server *s, bool (*pred)(struct server *s), double deadline)
{
    while (!pred(s)) {
        double left = deadline - time_now();
        if (left <= 0)
            return false;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double t = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + (left < 0.1 ? left : 0.1);
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&s->idle_cv, &s->lock, &ts);
    }
    return true;
}

static bool no_inflight(struct server *s)
{
    return s->n_inflight == 0;
}

/* The grace period ends early at a second SIGINT/SIGTERM. */
static bool no_inflight_or_signal(struct server *s)
{
    unsigned char b;
    if (s->n_inflight == 0)
        return true;
    if (read(signal_pipe[0], &b, 1) == 1) {
        log_warn("%s again: ending the grace period", strsignal(b));
        return true;
    }
    return false;
}

/* Cancels every request in flight as the server stops; under s->lock. */
static void cancel_all(struct server *s)
{
    for (struct srv_req *r = s->live; r; r = r->live_next) {
        pthread_mutex_lock(&r->lock);
        bool cancel = r->er && !r->done;
        if (cancel)
            r->cancel_shutdown = true;
        pthread_mutex_unlock(&r->lock);
        if (cancel)
            engine_cancel(s->stack->engine, r->er);
    }
}

/* The end of a shutdown: responses (cancelled ones are errors) go out to
 * clients still reading, each with Connection: close (srv_reply_closing),
 * and a request arriving on a kept-alive connection gets its 503 and a
 * close, so connections end after an answer, never before one. A
 * connection idle for DRAIN_IDLE_S (no byte of a next request) is shut
 * down; whatever is left after DRAIN_S is closed by MHD_stop_daemon. */
#define DRAIN_S 5.0
#define DRAIN_IDLE_S 0.5
static void drain(struct server *s)
{
    double end = time_now() + DRAIN_S;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        bool live = s->live != NULL;
        pthread_mutex_unlock(&s->lock);
        int n = srv_conns_count(s, NULL);
        if (!live && n == 0)
            return;
        if (time_now() >= end) {
            log_warn("closing %d connection(s)%s", n,
                     live ? " with responses still being sent" : "");
            return;
        }
        srv_conns_close_idle(s, DRAIN_IDLE_S);
        poll(NULL, 0, 20);
    }
}

int server_run(struct server *s)
{
    if (signal_pipe[0] < 0)
        return err_set(ERR_INVALID, "server_run: server_signals_init was not called");
    unsigned char sig = 0;
    for (;;) {
        struct pollfd pfd = {.fd = signal_pipe[0], .events = POLLIN};
        if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
            return err_set(ERR_IO, "waiting for a signal: %s", strerror(errno));
        if (read(signal_pipe[0], &sig, 1) == 1)
            break;
    }
    const double grace = s->cfg->grace_s;
    log_info("%s: stopping (in-flight requests get %.0f s)", strsignal(sig), grace);
    /* still accepting through the grace period, so a probe or a client
     * gets a 503 rather than a refused connection; changed under the lock
     * srv_inflight_enter counts under, so no request is submitted after
     * the count below is read */
    pthread_mutex_lock(&s->lock);
    atomic_store(&s->state, SERVER_STOPPING);
    if (!wait_until(s, no_inflight_or_signal, time_now() + grace) || s->n_inflight > 0) {
        log_warn("grace period over: cancelling %d request(s)", s->n_inflight);
        /* again every 100 ms: a request being submitted as the state
         * changed has no handle in the list yet */
        for (double end = time_now() + 30; time_now() < end;) {
            cancel_all(s);
            if (wait_until(s, no_inflight, time_now() + 0.1))
                break;
        }
    }
    pthread_mutex_unlock(&s->lock);
    /* no new connections: refused from now on, not left in the backlog */
    MHD_socket lfd = MHD_quiesce_daemon(s->mhd);
    if (lfd != MHD_INVALID_SOCKET)
        close(lfd);
    drain(s);
    /* the watcher writes to suspended connections' sockets (its probe):
     * stopped before MHD closes them */
    srv_watcher_stop(s);
    MHD_stop_daemon(s->mhd);
    s->mhd = NULL;
    log_info("stopped");
    return 0;
}

void server_close(struct server *s)
{
    if (!s)
        return;
    if (s->mhd)
        MHD_stop_daemon(s->mhd);
    srv_watcher_stop(s);
    stack_close(s->stack);
    cluster_job_release(s->job); /* the other processes close their devices */
    srv_models_free(s);
    workq_free(&s->watcher);
    pthread_mutex_destroy(&s->watch_lock);
    pthread_mutex_destroy(&s->conn_lock);
    pthread_cond_destroy(&s->idle_cv);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->admin_lock);
    free(s);
}
