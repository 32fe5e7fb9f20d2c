/* The server's open connections and their request deadlines (slowloris).
 *
 * libmicrohttpd's connection timeout is an idle timeout: a client that
 * sends a byte a little more often than it keeps its slot for ever. So
 * every connection is tracked (MHD's connection notice) with the phase of
 * its current request and when that phase began:
 *
 *   HEADERS  from the connection's start, or from the first byte after the
 *            previous response (the socket's received-byte count, TCP_INFO,
 *            moved), to the headers' end: at most header_timeout_s;
 *   BODY     from the headers' end (the access handler's first call) to the
 *            body's end: at most body_timeout_s;
 *   BUSY     the request is in: the server's turn (no deadline);
 *   IDLE     between requests on a kept-alive connection (the idle timeout).
 *
 * The watcher thread sweeps the list a few times a second and shuts down
 * (shutdown(2), SHUT_RDWR) the socket of a request past its deadline; MHD
 * then reads the end of the stream and closes the connection. The shutdown
 * is done under conn_lock, which MHD's closed notice also takes, and MHD
 * closes a socket only after that notice: a swept fd is never one MHD has
 * closed and reused. (A per-address connection limit, MHD's, keeps one
 * client from taking every slot while its deadlines run.)
 *
 * Headers MHD refuses by itself. libmicrohttpd 0.9 answers a Content-Length
 * it cannot parse (-1, 1e3, past 2^64) before the access handler sees the
 * request, with an HTML page, and 0.9.75 sends that answer's status line and
 * headers twice; the only callback on that path is its log. So each
 * connection keeps, from its request line (MHD's URI notice) to the access
 * handler's first call, that its headers are pending on this pool thread;
 * at a log line, the one connection of this thread whose headers are all in
 * (MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE), with no response queued and no
 * first call yet, is the one MHD is parsing: when its Content-Length is one
 * MHD refuses (srv_framing_refused), the server's JSON error is written on
 * its socket and the sending side shut, so MHD's own answer fails to send
 * and it closes the connection. A chunk size of more hex digits than 64
 * bits hold is refused by MHD mid-body the same way (a 413 page, after a
 * log line that names the chunk size): the one chunked request of this
 * thread reading its body gets the server's JSON 413 instead.
 *
 * A chunk size that fits 64 bits is MHD's alone: 0.9.75 keeps the size a
 * chunk declares to itself (no callback, option or connection info gives
 * it; the access handler sees only the bytes that came), so a chunk that
 * declares 2^64-1 bytes and sends a few is bounded like any slow body: by
 * --body-timeout (the BODY deadline above: the connection is closed) and
 * by --max-body as its bytes arrive (413 once they pass it). Refusing it
 * at once would take a chunked-framing parser of our own in front of MHD's. */
#include <errno.h>
#include <linux/tcp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/timing.h"
#include "server/log.h"
#include "server/server_impl.h"

enum conn_phase { CONN_HEADERS, CONN_BODY, CONN_BUSY, CONN_IDLE };

struct srv_conn {
    struct srv_conn *prev, *next; /* server.conns, under conn_lock */
    struct MHD_Connection *conn;
    int fd;
    pthread_t thread;  /* the pool thread that read the request line */
    bool head_pending; /* from the request line to the access handler's first call */
    char uri[96];      /* the request line's target, cut short */
    char client[64];
    enum conn_phase phase;
    double t_phase;   /* when the phase began (time_now) */
    uint64_t rx_mark; /* IDLE: bytes received when the last request completed */
    bool cut;         /* shut down by a deadline */
};

/* The bytes the socket has received so far; false when the kernel does not
 * say (tcpi_bytes_received is Linux 4.1's). */
static bool tcp_rx(int fd, uint64_t *rx)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    memset(&ti, 0, sizeof(ti));
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(ti.tcpi_bytes_received))
        return false;
    *rx = ti.tcpi_bytes_received;
    return true;
}

/* MHD's connection notice: on a pool thread, when a connection is accepted
 * and when it is closed (before MHD closes its socket). */
void srv_conn_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                     enum MHD_ConnectionNotificationCode code)
{
    struct server *s = cls;
    struct srv_conn *c = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        if (!(c = calloc(1, sizeof(*c))))
            return; /* untracked: only the idle timeout bounds it */
        c->fd = -1;
        c->conn = conn;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci)
            c->fd = ci->connect_fd;
        ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        const struct sockaddr *sa = ci ? ci->client_addr : NULL;
        if (!sa || getnameinfo(sa,
                               sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                         : sizeof(struct sockaddr_in),
                               c->client, sizeof(c->client), NULL, 0, NI_NUMERICHOST) != 0)
            snprintf(c->client, sizeof(c->client), "?");
        c->phase = CONN_HEADERS;
        c->t_phase = time_now();
        pthread_mutex_lock(&s->conn_lock);
        c->next = s->conns;
        if (s->conns)
            s->conns->prev = c;
        s->conns = c;
        s->n_conns++;
        pthread_mutex_unlock(&s->conn_lock);
        *socket_context = c;
        return;
    }
    if (!c)
        return;
    pthread_mutex_lock(&s->conn_lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->n_conns--;
    pthread_mutex_unlock(&s->conn_lock);
    *socket_context = NULL;
    free(c);
}

struct srv_conn *srv_conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void *srv_conn_request_line(void *cls, const char *uri, struct MHD_Connection *conn)
{
    struct server *s = cls;
    struct srv_conn *c = srv_conn_of(conn);
    if (!c)
        return NULL;
    pthread_mutex_lock(&s->conn_lock);
    c->thread = pthread_self();
    c->head_pending = true;
    snprintf(c->uri, sizeof(c->uri), "%s", uri ? uri : "");
    pthread_mutex_unlock(&s->conn_lock);
    return NULL;
}

void srv_conns_headers_refused(struct server *s)
{
    pthread_t self = pthread_self();
    int status = 0;
    pthread_mutex_lock(&s->conn_lock);
    for (struct srv_conn *c = s->conns; c; c = c->next) {
        struct oai_error e;
        if (!c->head_pending || !pthread_equal(c->thread, self) || c->fd < 0 || c->cut ||
            !MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE) ||
            MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_HTTP_STATUS) ||
            !srv_framing_refused(c->conn, s->cfg->max_body_bytes, &e))
            continue;
        c->head_pending = false;
        srv_write_error(c->fd, &e);
        /* MHD's own answer, queued next, now fails to send: the close follows ours */
        shutdown(c->fd, SHUT_WR);
        log_info("%s %s %d (headers refused: connection closed): %s", c->client, c->uri, e.status,
                 e.message);
        status = e.status;
        break;
    }
    pthread_mutex_unlock(&s->conn_lock);
    if (status)
        srv_count_status(s, status);
}

void srv_conns_chunk_refused(struct server *s)
{
    pthread_t self = pthread_self();
    struct oai_error e;
    int n = 0;
    pthread_mutex_lock(&s->conn_lock);
    struct srv_conn *hit = NULL;
    for (struct srv_conn *c = s->conns; c; c = c->next)
        if (c->phase == CONN_BODY && pthread_equal(c->thread, self) && c->fd >= 0 && !c->cut &&
            !MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_HTTP_STATUS) &&
            MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND,
                                        MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
            hit = c;
            n++;
        }
    if (n == 1) {
        oai_error_set(&e, 413, "invalid_request_error", "request_too_large", "",
                      "A chunk of the request's body declares a size past 2^64 bytes; the limit "
                      "is %llu bytes.",
                      (unsigned long long)s->cfg->max_body_bytes);
        srv_write_error(hit->fd, &e);
        shutdown(hit->fd, SHUT_WR); /* MHD's own answer, queued next, fails to send */
        log_info("%s %s %d (chunk size refused: connection closed): %s", hit->client, hit->uri,
                 e.status, e.message);
    }
    pthread_mutex_unlock(&s->conn_lock);
    if (n == 1)
        srv_count_status(s, 413);
}

void srv_conn_headers_in(struct server *s, struct srv_conn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&s->conn_lock);
    c->head_pending = false;
    c->phase = CONN_BODY;
    c->t_phase = time_now();
    pthread_mutex_unlock(&s->conn_lock);
}

void srv_conn_body_in(struct server *s, struct srv_conn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&s->conn_lock);
    c->phase = CONN_BUSY;
    pthread_mutex_unlock(&s->conn_lock);
}

void srv_conn_request_done(struct server *s, struct srv_conn *c)
{
    if (!c)
        return;
    uint64_t rx = 0;
    bool known = c->fd >= 0 && tcp_rx(c->fd, &rx);
    pthread_mutex_lock(&s->conn_lock);
    /* without the byte count, the next request's deadline runs from now */
    c->phase = known ? CONN_IDLE : CONN_HEADERS;
    c->t_phase = time_now();
    c->rx_mark = rx;
    pthread_mutex_unlock(&s->conn_lock);
}

bool srv_conn_cut(struct srv_conn *c)
{
    return c && c->cut;
}

/* Shuts c's socket down; under conn_lock. */
static void conn_shut(struct srv_conn *c)
{
    if (c->cut || c->fd < 0)
        return;
    c->cut = true;
    shutdown(c->fd, SHUT_RDWR);
}

void srv_conns_sweep(struct server *s)
{
    const struct serve_config *cfg = s->cfg;
    double now = time_now();
    pthread_mutex_lock(&s->conn_lock);
    for (struct srv_conn *c = s->conns; c; c = c->next) {
        uint64_t rx;
        if (c->phase == CONN_IDLE && c->fd >= 0 && tcp_rx(c->fd, &rx) && rx > c->rx_mark) {
            c->phase = CONN_HEADERS; /* the next request's first bytes */
            c->t_phase = now;
        }
        double limit = c->phase == CONN_HEADERS ? cfg->header_timeout_s
                       : c->phase == CONN_BODY  ? cfg->body_timeout_s
                                                : 0;
        if (limit <= 0 || c->cut || now - c->t_phase <= limit)
            continue;
        log_info("%s: request %s not in within %.0f s: connection closed", c->client,
                 c->phase == CONN_HEADERS ? "headers" : "body", limit);
        conn_shut(c);
        s->n_deadline_closes++;
    }
    pthread_mutex_unlock(&s->conn_lock);
}

int srv_conns_close_idle(struct server *s, double idle_s)
{
    int n = 0;
    double now = time_now();
    pthread_mutex_lock(&s->conn_lock);
    for (struct srv_conn *c = s->conns; c; c = c->next) {
        uint64_t rx;
        if (c->phase == CONN_IDLE && !c->cut && now - c->t_phase >= idle_s &&
            !(c->fd >= 0 && tcp_rx(c->fd, &rx) && rx > c->rx_mark)) {
            conn_shut(c);
            n++;
        }
    }
    pthread_mutex_unlock(&s->conn_lock);
    return n;
}

int srv_conns_count(struct server *s, uint64_t *deadline_closes)
{
    pthread_mutex_lock(&s->conn_lock);
    int n = s->n_conns;
    if (deadline_closes)
        *deadline_closes = s->n_deadline_closes;
    pthread_mutex_unlock(&s->conn_lock);
    return n;
}
