/* The disconnect watcher: one thread polling the sockets of requests in
 * flight for a client that hung up. libmicrohttpd does not look at a
 * suspended connection's socket, so without it a client that goes away
 * while its request waits on the engine would keep its batch slot to the
 * end. On a hang-up the engine request is cancelled at once (it leaves its
 * batch at the next step boundary) and the connection resumed so MHD closes
 * it. The same thread sweeps the connections' request deadlines (conns.c)
 * every SWEEP_S. The thread is a work queue's (core/workq.h) to which
 * nothing is posted: each pass is its idle callback, and srv_watch wakes it
 * from the sleep it takes while nothing is watched.
 *
 * A hang-up is POLLHUP or POLLERR. The end of the client's stream alone
 * (POLLRDHUP) is not one: HTTP/1.1 lets a client shut down its sending side
 * once the request is out and still read the answer (a half-close), and a
 * client that closed its socket looks the same until something is sent to
 * it, which its kernel answers with a reset (then POLLERR). So at POLLRDHUP
 * the watcher probes, once: a non-streamed HTTP/1.1 request gets an interim
 * "100 Continue" (which a client must accept before any final response),
 * written by the watcher while the connection is suspended, under the
 * request's lock (nobody resumes it meanwhile, so MHD writes nothing); a
 * stream gets an SSE comment line from its content reader. A half-closed
 * client ignores either and gets its answer; a gone one resets, and is
 * cancelled within a poll. HTTP/1.0 has no interim responses: its
 * end of stream is taken as a hang-up.
 *
 * A polled fd may be closed and reused after the snapshot (MHD closes a
 * connection after its completion notice, which unwatches the request
 * first): events are acted on only for requests still watched, so a reused
 * fd cancels nothing. */
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "core/error.h"
#include "core/timing.h"
#include "core/workq.h"
#include "server/log.h"
#include "server/server_impl.h"

#define WATCH_POLL_MS 50
#define SWEEP_S 0.2 /* between two sweeps of the connections' deadlines */

void srv_watch(struct server *s, struct srv_req *r)
{
    if (r->fd < 0)
        return;
    srv_req_ref(r);
    pthread_mutex_lock(&s->watch_lock);
    r->watched = true;
    queue_insert_head(&s->watched, &r->watch_link);
    pthread_mutex_unlock(&s->watch_lock);
    workq_wake(&s->watcher); /* out of its sleep, if the list was empty */
}

/* Drops r from the list (and the list's reference); any thread. */
void srv_unwatch(struct server *s, struct srv_req *r)
{
    bool found = false;
    pthread_mutex_lock(&s->watch_lock);
    if (r->watched) {
        queue_remove(&r->watch_link);
        r->watched = false;
        found = true;
    }
    pthread_mutex_unlock(&s->watch_lock);
    if (found)
        srv_req_unref(r);
}

/* A client hung up on r: cancel its engine request, wake its connection. */
static void watch_hangup(struct server *s, struct srv_req *r)
{
    pthread_mutex_lock(&r->lock);
    bool cancel = !r->done && r->er;
    r->client_gone = true;
    pthread_mutex_unlock(&r->lock);
    if (cancel && engine_cancel(s->stack->engine, r->er) == 0)
        log_debug("%s %s: client hung up, request cancelled", r->method, r->path);
    srv_req_wake(r);
}

enum half_close { HC_PROBED, HC_HANGUP, HC_LATER };

/* r's client ended its stream: probe it (above). HC_LATER: a non-streamed
 * request not suspended yet (it is about to be), asked again at the next
 * poll; done ones need no probe (their answer is one). */
static enum half_close watch_half_close(struct srv_req *r)
{
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    if (r->http10)
        return HC_HANGUP;
    bool wake = false;
    enum half_close hc = HC_PROBED;
    pthread_mutex_lock(&r->lock);
    if (r->creq.stream) {
        r->probe = true;
        wake = r->suspended;
        r->suspended = false;
    } else if (r->suspended && !r->done) {
        /* a failed or short write is a hang-up's, seen at the next poll */
        ssize_t n = send(r->fd, cont, sizeof(cont) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
        (void)n;
    } else if (!r->done) {
        hc = HC_LATER;
    }
    pthread_mutex_unlock(&r->lock);
    if (wake)
        MHD_resume_connection(r->conn);
    return hc;
}

/* Room for n in the poll set; false (the set as it was) when out of memory. */
static bool watch_reserve(struct server *s, int n)
{
    if (n <= s->watch_cap)
        return true;
    int c = n * 2;
    struct pollfd *f = realloc(s->watch_fds, (size_t)c * sizeof(*f));
    if (f)
        s->watch_fds = f;
    struct srv_req **q = realloc(s->watch_reqs, (size_t)c * sizeof(*q));
    if (q)
        s->watch_reqs = q;
    if (!f || !q)
        return false;
    s->watch_cap = c;
    return true;
}

/* What poll saw on r's socket (ev): a hang-up, or an end of stream
 * to probe; only for a request still watched (its fd may be reused). */
static void watch_event(struct server *s, struct srv_req *r, short ev)
{
    if (!(ev & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)))
        return;
    pthread_mutex_lock(&s->watch_lock);
    bool still = r->watched;
    pthread_mutex_unlock(&s->watch_lock);
    bool gone = ev & (POLLHUP | POLLERR | POLLNVAL);
    if (still && !gone) {
        enum half_close hc = watch_half_close(r);
        r->half_closed = hc == HC_PROBED;
        gone = hc == HC_HANGUP;
    }
    if (still && gone) {
        srv_unwatch(s, r);
        watch_hangup(s, r);
    }
}

/* The watcher thread's one pass, its work queue's idle callback (it runs
 * no items): the deadline sweep when due, then a poll of the watched
 * sockets for WATCH_POLL_MS. Returns how long to sleep when nothing is
 * watched (srv_watch's workq_wake ends the sleep), else 0: poll again. */
static double watcher_idle(void *arg)
{
    struct server *s = arg;
    if (time_now() - s->watch_swept >= SWEEP_S) {
        srv_conns_sweep(s);
        s->watch_swept = time_now();
    }
    pthread_mutex_lock(&s->watch_lock);
    if (queue_empty(&s->watched)) {
        pthread_mutex_unlock(&s->watch_lock);
        return SWEEP_S;
    }
    int n = 0;
    struct queue *q;
    queue_foreach(q, &s->watched)
        n++;
    if (!watch_reserve(s, n)) {
        /* try again later; a hang-up is then noticed late, not missed */
        pthread_mutex_unlock(&s->watch_lock);
        poll(NULL, 0, WATCH_POLL_MS);
        return 0;
    }
    n = 0;
    queue_foreach(q, &s->watched) {
        struct srv_req *r = queue_data(q, struct srv_req, watch_link);
        srv_req_ref(r);
        s->watch_reqs[n] = r;
        /* once half-closed, POLLRDHUP stays: only POLLHUP/POLLERR then */
        s->watch_fds[n] = (struct pollfd){.fd = r->fd, .events = r->half_closed ? 0 : POLLRDHUP};
        n++;
    }
    pthread_mutex_unlock(&s->watch_lock);
    int k = poll(s->watch_fds, (nfds_t)n, WATCH_POLL_MS);
    for (int i = 0; i < n; i++) {
        watch_event(s, s->watch_reqs[i], k > 0 ? s->watch_fds[i].revents : 0);
        srv_req_unref(s->watch_reqs[i]);
    }
    return 0;
}

static const struct workq_ops watcher_ops = {.idle = watcher_idle};

int srv_watcher_start(struct server *s)
{
    if (workq_init(&s->watcher, "watcher", &watcher_ops, s) < 0)
        return err_set(ERR_NOMEM, "could not start the watcher thread");
    return 0;
}

/* Joins the watcher (a pass in progress ends first, within WATCH_POLL_MS);
 * server_close frees its queue. */
void srv_watcher_stop(struct server *s)
{
    workq_stop(&s->watcher);
    /* what is still listed holds references; drop them */
    while (!queue_empty(&s->watched))
        srv_unwatch(s, queue_data(queue_head(&s->watched), struct srv_req, watch_link));
    free(s->watch_fds);
    free(s->watch_reqs);
    s->watch_fds = NULL;
    s->watch_reqs = NULL;
    s->watch_cap = 0;
}
