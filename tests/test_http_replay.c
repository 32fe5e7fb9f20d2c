/* workload/http_replay against a canned HTTP server on a thread of this
 * test (127.0.0.1, a free port): each request's outcome is counted by its
 * cause (200, 429, 4xx, 5xx, a closed connection, a timeout, a body that is
 * no completion), nothing is lost, times are ordered, connections are kept
 * alive, streams are read event by event, and the request sent is
 * Computron's with the API key. The server answers by the model named in
 * the body:
 *
 *   ok       200, a completion with usage (1 completion token)
 *   slow     the same after 60 ms
 *   busy     429 with an OpenAI error body
 *   boom     500
 *   missing  404
 *   garbage  200, "not json"
 *   close    closes the connection without a response
 *   hang     never answers
 *   stream   (stream: true) 200, a choice event, 40 ms, a usage event, [DONE]
 *   cut      (stream: true) 200, a choice event, then the end without [DONE]
 */
#include <arpa/inet.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "test.h"
#include "workload/http_replay.h"
#include "workload/replay.h"

#define MAX_CONNS 64
#define BUF_CAP 65536

struct conn {
    int fd;
    char buf[BUF_CAP];
    size_t len;
};

struct server {
    int listen_fd, port;
    pthread_t thread;
    atomic_bool stop;
    atomic_int accepted, requests;
    pthread_mutex_t lock; /* guards last_auth and last_body */
    char last_auth[256];
    char last_body[8192];
    struct conn conns[MAX_CONNS];
};

static void ms_sleep(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void send_all(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

static void respond(int fd, int status, const char *type, const char *body)
{
    char head[256];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %zu\r\n\r\n", status,
                     type, strlen(body));
    send_all(fd, head, (size_t)n);
    send_all(fd, body, strlen(body));
}

/* A chunk of a chunked response. */
static void chunk(int fd, const char *s)
{
    char head[32];
    int n = snprintf(head, sizeof(head), "%zx\r\n", strlen(s));
    send_all(fd, head, (size_t)n);
    send_all(fd, s, strlen(s));
    send_all(fd, "\r\n", 2);
}

static const char *completion =
    "{\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[{\"text\":\" x\",\"index\":0,"
    "\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":1,"
    "\"total_tokens\":9}}";

/* Answers one whole request; false when the connection is to be closed. */
static bool answer(struct server *s, int fd, const char *head, const char *body)
{
    atomic_fetch_add(&s->requests, 1);
    if (strncmp(head, "GET /v1/models ", 15) == 0) {
        respond(fd, 200, "application/json",
                "{\"object\":\"list\",\"data\":[{\"id\":\"ok\"},{\"id\":\"busy\"}]}");
        return true;
    }
    pthread_mutex_lock(&s->lock);
    const char *auth = strcasestr(head, "\r\nAuthorization: ");
    snprintf(s->last_auth, sizeof(s->last_auth), "%.*s", auth ? (int)strcspn(auth + 2, "\r") : 0,
             auth ? auth + 2 : "");
    snprintf(s->last_body, sizeof(s->last_body), "%s", body);
    pthread_mutex_unlock(&s->lock);
    json_t *j = json_loads(body, 0, NULL);
    const char *model = json_string_value(json_object_get(j, "model"));
    char m[32];
    snprintf(m, sizeof(m), "%s", model ? model : "");
    json_decref(j);
    if (strcmp(m, "ok") == 0 || strcmp(m, "slow") == 0) {
        if (m[0] == 's')
            ms_sleep(60);
        respond(fd, 200, "application/json", completion);
    } else if (strcmp(m, "busy") == 0) {
        respond(fd, 429, "application/json",
                "{\"error\":{\"message\":\"queue full\",\"type\":\"rate_limit_error\"}}");
    } else if (strcmp(m, "boom") == 0) {
        respond(fd, 500, "application/json", "{\"error\":{\"message\":\"engine failed\"}}");
    } else if (strcmp(m, "missing") == 0) {
        respond(fd, 404, "application/json", "{\"error\":{\"message\":\"no such model\"}}");
    } else if (strcmp(m, "garbage") == 0) {
        respond(fd, 200, "application/json", "not json");
    } else if (strcmp(m, "close") == 0) {
        return false;
    } else if (strcmp(m, "hang") == 0) {
        return true; /* the client times out */
    } else if (strcmp(m, "stream") == 0 || strcmp(m, "cut") == 0) {
        const char *h = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                        "Transfer-Encoding: chunked\r\n\r\n";
        send_all(fd, h, strlen(h));
        /* an event split over two chunks, then the rest later */
        chunk(fd, "data: {\"choices\":[{\"text\":\" x\",");
        chunk(fd, "\"index\":0}]}\n\n");
        ms_sleep(300);
        if (m[0] == 's') {
            chunk(fd, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":8,"
                      "\"completion_tokens\":1,\"total_tokens\":9}}\r\n\r\ndata: [DONE]\n\n");
        }
        chunk(fd, "");
    } else {
        respond(fd, 400, "application/json", "{\"error\":{\"message\":\"unknown model\"}}");
    }
    return true;
}

/* Every whole request in c's buffer; false when c is to be closed. */
static bool serve_buffer(struct server *s, struct conn *c)
{
    for (;;) {
        c->buf[c->len] = '\0';
        char *end = strstr(c->buf, "\r\n\r\n");
        if (!end)
            return true;
        size_t head_len = (size_t)(end - c->buf) + 4, body_len = 0;
        const char *cl = strcasestr(c->buf, "\r\nContent-Length:");
        if (cl && cl < end)
            body_len = strtoul(cl + 17, NULL, 10);
        if (c->len < head_len + body_len)
            return true;
        char head[4096], body[8192];
        snprintf(head, sizeof(head), "%.*s", (int)head_len, c->buf);
        snprintf(body, sizeof(body), "%.*s", (int)body_len, c->buf + head_len);
        memmove(c->buf, c->buf + head_len + body_len, c->len - head_len - body_len);
        c->len -= head_len + body_len;
        if (!answer(s, c->fd, head, body))
            return false;
    }
}

/* The server's thread: one poll over the listener and every connection. */
static void *server_main(void *arg)
{
    struct server *s = arg;
    while (!atomic_load(&s->stop)) {
        struct pollfd p[MAX_CONNS + 1];
        int idx[MAX_CONNS + 1], n = 0;
        p[n] = (struct pollfd){.fd = s->listen_fd, .events = POLLIN};
        idx[n++] = -1;
        for (int i = 0; i < MAX_CONNS; i++)
            if (s->conns[i].fd >= 0) {
                p[n] = (struct pollfd){.fd = s->conns[i].fd, .events = POLLIN};
                idx[n++] = i;
            }
        if (poll(p, (nfds_t)n, 20) <= 0)
            continue;
        for (int k = 0; k < n; k++) {
            if (!p[k].revents)
                continue;
            if (idx[k] < 0) {
                int fd = accept(s->listen_fd, NULL, NULL);
                int slot = -1;
                for (int i = 0; fd >= 0 && i < MAX_CONNS && slot < 0; i++)
                    if (s->conns[i].fd < 0)
                        slot = i;
                if (slot < 0) {
                    if (fd >= 0)
                        close(fd);
                    continue;
                }
                atomic_fetch_add(&s->accepted, 1);
                int one = 1; /* small writes go out at once (no Nagle against delayed ACKs) */
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                s->conns[slot].fd = fd;
                s->conns[slot].len = 0;
                continue;
            }
            struct conn *c = &s->conns[idx[k]];
            ssize_t r = recv(c->fd, c->buf + c->len, BUF_CAP - 1 - c->len, 0);
            if (r <= 0 || !serve_buffer(s, (c->len += (size_t)r, c))) {
                close(c->fd);
                c->fd = -1;
            }
        }
    }
    for (int i = 0; i < MAX_CONNS; i++)
        if (s->conns[i].fd >= 0)
            close(s->conns[i].fd);
    return NULL;
}

static int server_start(struct server *s)
{
    memset(s, 0, sizeof(*s));
    for (int i = 0; i < MAX_CONNS; i++)
        s->conns[i].fd = -1;
    pthread_mutex_init(&s->lock, NULL);
    s->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (s->listen_fd < 0 || bind(s->listen_fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(s->listen_fd, 64) != 0 ||
        getsockname(s->listen_fd, (struct sockaddr *)&a, &len) != 0)
        return -1;
    s->port = ntohs(a.sin_port);
    return pthread_create(&s->thread, NULL, server_main, s) == 0 ? 0 : -1;
}

static void server_stop(struct server *s)
{
    atomic_store(&s->stop, true);
    pthread_join(s->thread, NULL);
    close(s->listen_fd);
    pthread_mutex_destroy(&s->lock);
}

static char url[64];

/* Replays events (times t[i], model index m[i]) over models. */
static int replay(const char *const *models, int n_models, const double *t, const int *m, size_t n,
                  bool stream, double timeout, struct http_replay_result *res)
{
    struct arrival ev[64];
    for (size_t i = 0; i < n; i++)
        ev[i] = (struct arrival){.t = t[i], .model = m[i]};
    struct http_replay_opts o = {.target = {.url = url, .api_key = "sekret", .timeout_s = timeout},
                                 .models = models,
                                 .n_models = n_models,
                                 .stream = stream};
    return http_replay_run(&o, ev, n, res);
}

static size_t counts_sum(const struct http_counts *c)
{
    return c->ok + c->malformed + c->busy + c->client + c->server + c->other + c->transport;
}

/* Every outcome in one run, each counted once, none lost. */
static void test_outcomes(struct server *s)
{
    const char *models[] = {"ok", "busy", "boom", "close", "garbage", "missing"};
    double t[] = {0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06};
    int m[] = {0, 1, 2, 3, 4, 5, 0};
    struct http_replay_result r;
    int rc = replay(models, 6, t, m, 7, false, 5, &r);
    CHECK_MSG(rc == 0, "%s", err_msg());
    CHECK(r.n == 7);
    CHECK(counts_sum(&r.counts) == 7);
    CHECK(r.counts.ok == 2 && r.counts.busy == 1 && r.counts.server == 1);
    CHECK(r.counts.transport == 1 && r.counts.malformed == 1 && r.counts.client == 1);
    int want_status[] = {0, ERR_BUSY, ERR_IO, ERR_IO, ERR_FORMAT, ERR_NOT_FOUND, 0};
    int want_http[] = {200, 429, 500, 0, 200, 404, 200};
    for (size_t i = 0; i < r.n && i < 7; i++) {
        const struct request_record *q = &r.recs[i];
        CHECK_MSG(q->status == want_status[i], "request %zu: status %d", i, q->status);
        CHECK_MSG(r.recs[i].http_status == want_http[i], "request %zu: HTTP %d", i,
                  r.recs[i].http_status);
        CHECK(q->id == i && q->model == m[i]);
        CHECK(q->t_arrival >= t[i] - 1e-6 && q->t_arrival < t[i] + 0.05);
        CHECK(q->t_done >= q->t_arrival);
        CHECK(isnan(q->t_start));
    }
    CHECK(r.recs[0].n_output == 1 && r.recs[0].n_prompt == 8);
    CHECK(r.recs[0].t_first_token >= r.recs[0].t_arrival &&
          r.recs[0].t_first_token <= r.recs[0].t_done);
    CHECK_MSG(strstr(r.first_error, "429") && strstr(r.first_error, "queue full"), "%s",
              r.first_error);
    /* Computron's request, with the key */
    pthread_mutex_lock(&s->lock);
    CHECK_MSG(strcmp(s->last_auth, "Authorization: Bearer sekret") == 0, "%s", s->last_auth);
    json_t *j = json_loads(s->last_body, 0, NULL);
    pthread_mutex_unlock(&s->lock);
    json_t *p = json_object_get(j, "prompt");
    CHECK(json_array_size(p) == REPLAY_PROMPT_LEN);
    for (size_t i = 0; i < json_array_size(p); i++)
        CHECK(json_integer_value(json_array_get(p, i)) == replay_prompt[i]);
    CHECK(json_integer_value(json_object_get(j, "max_tokens")) == REPLAY_MAX_TOKENS);
    CHECK(json_integer_value(json_object_get(j, "top_k")) == REPLAY_TOP_K);
    CHECK(json_integer_value(json_object_get(j, "seed")) == 6);
    CHECK(json_is_false(json_object_get(j, "stream")));
    json_decref(j);
    http_replay_result_free(&r);
}

/* Requests one after the other reuse one connection; requests at once
 * each get their own and all complete. "One after the other" is 100 ms
 * apart, far more than a request to the fake server takes even on a busy
 * machine (at 20 ms apart a loaded 2-core machine overlapped two and
 * opened a second connection). */
static void test_connections(struct server *s)
{
    const char *models[] = {"ok", "slow"};
    double t[16];
    int m[16] = {0};
    for (int i = 0; i < 10; i++)
        t[i] = 0.1 * i;
    int before = atomic_load(&s->accepted);
    struct http_replay_result r;
    CHECK(replay(models, 1, t, m, 10, false, 5, &r) == 0);
    CHECK(r.counts.ok == 10);
    CHECK_MSG(r.connections == 1, "%zu connections", r.connections);
    CHECK(atomic_load(&s->accepted) - before == 1);
    http_replay_result_free(&r);
    /* 8 slow ones at t = 0: the server answers in turn; all of them arrive at once */
    for (int i = 0; i < 8; i++) {
        t[i] = 0;
        m[i] = 1;
    }
    CHECK(replay(models, 2, t, m, 8, false, 5, &r) == 0);
    CHECK(r.counts.ok == 8);
    CHECK(r.connections >= 2 && r.connections <= 8);
    double last = 0;
    for (int i = 0; i < 8; i++) {
        CHECK(r.recs[i].t_arrival < 0.03);
        last = r.recs[i].t_done > last ? r.recs[i].t_done : last;
    }
    CHECK_MSG(last >= 8 * 0.06 - 0.01, "last done %.3f s", last);
    http_replay_result_free(&r);
}

/* A closed loop releases each request when the last one ends. */
TEST(closed_loop)
{
    const char *models[] = {"ok", "slow"};
    struct arrival ev[4] = {{0, 1}, {0, 0}, {0, 1}, {0, 0}};
    struct http_replay_opts o = {
        .target = {.url = url}, .models = models, .n_models = 2, .closed_loop = true};
    struct http_replay_result r;
    CHECK(http_replay_run(&o, ev, 4, &r) == 0);
    CHECK(r.counts.ok == 4);
    for (size_t i = 1; i < r.n; i++)
        CHECK(r.recs[i].t_arrival >= r.recs[i - 1].t_done);
    CHECK(r.recs[0].t_done - r.recs[0].t_arrival >= 0.055);
    http_replay_result_free(&r);
}

/* Streams: the first token's time is the first choice's event, usage is
 * read from the last; a stream that ends without [DONE] is malformed. */
TEST(stream)
{
    const char *models[] = {"stream", "cut"};
    double t[] = {0, 0.2};
    int m[] = {0, 1};
    struct http_replay_result r;
    CHECK(replay(models, 2, t, m, 2, true, 5, &r) == 0);
    CHECK(r.counts.ok == 1 && r.counts.malformed == 1);
    const struct request_record *q = &r.recs[0];
    CHECK(q->status == 0 && q->n_output == 1);
    /* the server waits 300 ms after the first event: the first token was
     * timed at it, not at the end, unless the client's thread lost its CPU
     * for half of that (a lower bound on a difference of two client-side
     * times cannot be exact: 40 ms with a 35 ms bound failed under ASan on
     * a busy machine) */
    CHECK_MSG(q->t_done - q->t_first_token >= 0.15, "first %.4f done %.4f", q->t_first_token,
              q->t_done);
    CHECK(r.recs[1].status == ERR_FORMAT);
    CHECK(strstr(r.first_error, "[DONE]") != NULL);
    http_replay_result_free(&r);
}

/* No answer within the timeout, and no server at all: transport errors,
 * every request recorded. */
TEST(transport)
{
    const char *models[] = {"hang"};
    double t[] = {0, 0.01};
    int m[] = {0, 0};
    struct http_replay_result r;
    CHECK(replay(models, 1, t, m, 2, false, 0.2, &r) == 0);
    CHECK(r.counts.transport == 2);
    CHECK(r.recs[0].status == ERR_TIMEOUT && r.recs[0].http_status == 0);
    CHECK(r.recs[1].t_done - r.recs[1].t_arrival >= 0.19);
    http_replay_result_free(&r);

    /* a port nobody listens on: bind one, note it, close it */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    CHECK(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    char dead[64];
    snprintf(dead, sizeof(dead), "http://127.0.0.1:%d/", ntohs(a.sin_port));
    struct arrival ev[3] = {{0, 0}, {0, 0}, {0.01, 0}};
    struct http_replay_opts o = {
        .target = {.url = dead, .timeout_s = 2}, .models = models, .n_models = 1};
    CHECK(http_replay_run(&o, ev, 3, &r) == 0);
    CHECK(r.n == 3 && r.counts.transport == 3);
    for (int i = 0; i < 3; i++)
        CHECK(r.recs[i].status == ERR_IO);
    http_replay_result_free(&r);
    char **names = NULL;
    int n = 0;
    CHECK(http_list_models(&o.target, &names, &n) == ERR_IO);
    CHECK(strstr(err_msg(), "/v1/models") != NULL);
}

TEST(models_and_urls)
{
    struct http_target t = {.url = url};
    char **names = NULL;
    int n = 0;
    CHECK_MSG(http_list_models(&t, &names, &n) == 0, "%s", err_msg());
    CHECK(n == 2 && names && strcmp(names[0], "ok") == 0 && strcmp(names[1], "busy") == 0);
    http_names_free(names, n);
    char *body = NULL;
    long status = 0;
    CHECK(http_get(&t, "/nothing", &body, &status) == 0);
    CHECK(status == 400 && body);
    free(body);
    CHECK(http_url_check("http://127.0.0.1:8000") == 0);
    CHECK(http_url_check("https://example.com/prefix/") == 0);
    CHECK(http_url_check("ftp://127.0.0.1") == ERR_INVALID);
    CHECK(http_url_check("not a url") == ERR_INVALID);
    CHECK(http_url_check("http://") == ERR_INVALID);
    /* an arrival for a model with no name is refused before anything is sent */
    const char *models[] = {"ok"};
    struct arrival ev[1] = {{0, 1}};
    struct http_replay_opts o = {.target = t, .models = models, .n_models = 1};
    struct http_replay_result r;
    CHECK(http_replay_run(&o, ev, 1, &r) == ERR_INVALID);
    http_replay_result_free(&r);
}

/* The fake server every case talks to. */
static struct server srv;

TEST(outcomes)
{
    test_outcomes(&srv);
}

TEST(connections)
{
    test_connections(&srv);
}

static void stop_server(void)
{
    server_stop(&srv);
}

static void setup(void)
{
    if (server_start(&srv) != 0)
        test_skip("cannot listen on 127.0.0.1");
    atexit(stop_server);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", srv.port);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
