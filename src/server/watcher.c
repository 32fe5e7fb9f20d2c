/* The disconnect watcher: one thread polling the sockets of requests in
 * flight for a client that hung up. libmicrohttpd does not look at a
 * suspended connection's socket, so without it a client that goes away
 * while its request waits on the engine would keep its batch slot to the
 * end. On a hang-up the engine request is cancelled at once (it leaves its
 * batch at the next step boundary) and the connection resumed so MHD closes
 * it. The same thread sweeps the connections' request deadlines (conns.c)
 * every SWEEP_S.
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
    r->watch_next = s->watched;
    s->watched = r;
    pthread_cond_signal(&s->watch_cv);
    pthread_mutex_unlock(&s->watch_lock);
}

/* Drops r from the list (and the list's reference); any thread. */
void srv_unwatch(struct server *s, struct srv_req *r)
{
    bool found = false;
    pthread_mutex_lock(&s->watch_lock);
    if (r->watched) {
        for (struct srv_req **p = &s->watched; *p; p = &(*p)->watch_next)
            if (*p == r) {
                *p = r->watch_next;
                break;
            }
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

static void *watcher_main(void *arg)
{
    struct server *s = arg;
    struct pollfd *fds = NULL;
    struct srv_req **reqs = NULL;
    int cap = 0;
    double swept = 0;
    pthread_mutex_lock(&s->watch_lock);
    while (!s->watch_stop) {
        if (time_now() - swept >= SWEEP_S) {
            pthread_mutex_unlock(&s->watch_lock);
            srv_conns_sweep(s);
            swept = time_now();
            pthread_mutex_lock(&s->watch_lock);
        }
        if (!s->watched) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += (long)(SWEEP_S * 1e9);
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&s->watch_cv, &s->watch_lock, &ts);
            continue;
        }
        int n = 0;
        for (struct srv_req *r = s->watched; r; r = r->watch_next)
            n++;
        if (n > cap) {
            int c = n * 2;
            struct pollfd *f = realloc(fds, (size_t)c * sizeof(*f));
            if (f)
                fds = f;
            struct srv_req **q = realloc(reqs, (size_t)c * sizeof(*q));
            if (q)
                reqs = q;
            if (!f || !q) {
                /* try again later; a hang-up is then noticed late, not missed */
                pthread_mutex_unlock(&s->watch_lock);
                poll(NULL, 0, WATCH_POLL_MS);
                pthread_mutex_lock(&s->watch_lock);
                continue;
            }
            cap = c;
        }
        n = 0;
        for (struct srv_req *r = s->watched; r; r = r->watch_next) {
            srv_req_ref(r);
            reqs[n] = r;
            /* once half-closed, POLLRDHUP stays: only POLLHUP/POLLERR then */
            fds[n] = (struct pollfd){.fd = r->fd, .events = r->half_closed ? 0 : POLLRDHUP};
            n++;
        }
        pthread_mutex_unlock(&s->watch_lock);
        int k = poll(fds, (nfds_t)n, WATCH_POLL_MS);
        for (int i = 0; i < n; i++) {
            short ev = k > 0 ? fds[i].revents : 0;
            if (ev & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) {
                pthread_mutex_lock(&s->watch_lock);
                bool still = reqs[i]->watched;
                pthread_mutex_unlock(&s->watch_lock);
                bool gone = ev & (POLLHUP | POLLERR | POLLNVAL);
                if (still && !gone) {
                    enum half_close hc = watch_half_close(reqs[i]);
                    reqs[i]->half_closed = hc == HC_PROBED;
                    gone = hc == HC_HANGUP;
                }
                if (still && gone) {
                    srv_unwatch(s, reqs[i]);
                    watch_hangup(s, reqs[i]);
                }
            }
            srv_req_unref(reqs[i]);
        }
        pthread_mutex_lock(&s->watch_lock);
    }
    pthread_mutex_unlock(&s->watch_lock);
    free(fds);
    free(reqs);
    return NULL;
}

int srv_watcher_start(struct server *s)
{
    if (pthread_create(&s->watcher, NULL, watcher_main, s) != 0)
        return err_set(ERR_NOMEM, "could not start the watcher thread");
    s->watcher_started = true;
    return 0;
}

void srv_watcher_stop(struct server *s)
{
    if (!s->watcher_started)
        return;
    pthread_mutex_lock(&s->watch_lock);
    s->watch_stop = true;
    pthread_cond_signal(&s->watch_cv);
    pthread_mutex_unlock(&s->watch_lock);
    pthread_join(s->watcher, NULL);
    s->watcher_started = false;
    /* what is still listed holds references; drop them */
    while (s->watched)
        srv_unwatch(s, s->watched);
}
