/* The disconnect watcher: one thread polling the sockets of requests in
 * flight for a client that hung up. libmicrohttpd does not look at a
 * suspended connection's socket, so without it a client that goes away
 * while its request waits on the engine would keep its batch slot to the
 * end. On a hang-up the engine request is cancelled at once (it leaves its
 * batch at the next step boundary) and the connection resumed so MHD closes
 * it.
 *
 * A polled fd may be closed and reused after the snapshot (MHD closes a
 * connection after its completion notice, which unwatches the request
 * first): events are acted on only for requests still watched, so a reused
 * fd cancels nothing. */
#include <poll.h>
#include <stdlib.h>
#include <time.h>

#include "core/error.h"
#include "server/log.h"
#include "server/server_impl.h"

#define WATCH_POLL_MS 50

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

static void *watcher_main(void *arg)
{
    struct server *s = arg;
    struct pollfd *fds = NULL;
    struct srv_req **reqs = NULL;
    int cap = 0;
    pthread_mutex_lock(&s->watch_lock);
    while (!s->watch_stop) {
        if (!s->watched) {
            pthread_cond_wait(&s->watch_cv, &s->watch_lock);
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
            fds[n] = (struct pollfd){.fd = r->fd, .events = POLLRDHUP};
            n++;
        }
        pthread_mutex_unlock(&s->watch_lock);
        int k = poll(fds, (nfds_t)n, WATCH_POLL_MS);
        for (int i = 0; i < n; i++) {
            if (k > 0 && (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) {
                pthread_mutex_lock(&s->watch_lock);
                bool still = reqs[i]->watched;
                pthread_mutex_unlock(&s->watch_lock);
                if (still) {
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
