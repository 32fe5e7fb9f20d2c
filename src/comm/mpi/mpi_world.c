/* The MPI world of this process: MPI_Init_thread, the progress thread that
 * makes every MPI call (mpi_impl.h says how ops flow through it), and
 * MPI_Finalize. Data moves on a duplicate of MPI_COMM_WORLD whose errors
 * return codes (MPI_ERRORS_RETURN) instead of aborting, so a failed
 * message becomes an error of the op that carried it. */
#include <assert.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/mpi/mpi_impl.h"
#include "core/error.h"
#include "core/event.h"

enum {
    OP_NEW,             /* posted, not started */
    OP_PROBING,         /* a receive waiting for its message to arrive */
    OP_MOVING,          /* MPI_Isend or MPI_Imrecv in flight */
    IDLE_YIELDS = 2000, /* rounds without progress before sleeping between rounds */
    IDLE_SLEEP_NS = 50 * 1000,
};

/* Heartbeats with one peer: a standing receive and the send in flight. */
struct beat {
    bool watched;
    MPI_Request recv, send; /* MPI_REQUEST_NULL when none */
    uint64_t in, out;       /* the received and sent counters (the payload) */
    double heard;           /* when the last one arrived (or watching began) */
    bool lost;              /* silent for longer than the timeout */
    bool closed;            /* its last one said it is closing (BEAT_CLOSING) */
};

/* The payload of a process's last heartbeat, sent as it closes its world:
 * from then on it is silent because it waits in MPI_Finalize for the
 * others. It is lost all the same once the timeout passes (a follower
 * still leaves when process 0 has gone), but a peer closing later does not
 * end the job for it: MPI_Finalize will find it there (one that closed a
 * few seconds after another used to abort the finished job). */
static const uint64_t BEAT_CLOSING = UINT64_MAX;

struct mpi_world {
    int proc, procs, max_tag;
    MPI_Comm data; /* dup of MPI_COMM_WORLD, MPI_ERRORS_RETURN */
    char library[MPI_MAX_LIBRARY_VERSION_STRING];

    pthread_t thread;
    pthread_mutex_t lock; /* guards posted, stopping */
    pthread_cond_t wake;  /* an op was posted, or stopping */
    struct mpi_op *posted, **posted_tail;
    bool stopping;

    /* heartbeats (the progress thread's, but for cfg and the lost flags,
     * read under lock by mpi_world_proc_lost) */
    struct mpi_watch_config watch;
    bool watching;
    struct beat *beats; /* (procs) */
    double next_beat;
};

/* The tag heartbeats use: above every tag mpi_world_max_tag allows. */
static int beat_tag(const struct mpi_world *w)
{
    return w->max_tag;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One round of heartbeats: take what arrived, send when due, and call
 * lost/found on changes (progress thread, no lock held). True when a
 * heartbeat moved. */
static bool beats_step(struct mpi_world *w)
{
    bool moved = false;
    double now = now_s();
    bool send_now = now >= w->next_beat;
    if (send_now)
        w->next_beat = now + w->watch.interval_s;
    for (int p = 0; p < w->procs; p++) {
        struct beat *b = &w->beats[p];
        if (!b->watched)
            continue;
        int flag = 0;
        if (b->recv == MPI_REQUEST_NULL) /* the first round: the standing receive */
            MPI_Irecv(&b->in, 1, MPI_UINT64_T, p, beat_tag(w), w->data, &b->recv);
        else if (MPI_Test(&b->recv, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag) {
            b->heard = now;
            b->closed |= b->in == BEAT_CLOSING;
            moved = true;
            MPI_Irecv(&b->in, 1, MPI_UINT64_T, p, beat_tag(w), w->data, &b->recv);
        }
        if (b->send != MPI_REQUEST_NULL)
            MPI_Test(&b->send, &flag, MPI_STATUS_IGNORE);
        if (send_now && b->send == MPI_REQUEST_NULL) {
            b->out++;
            MPI_Isend(&b->out, 1, MPI_UINT64_T, p, beat_tag(w), w->data, &b->send);
        }
        bool lost = now - b->heard > w->watch.timeout_s;
        if (lost != b->lost) { /* the callbacks under the lock: mpi_world_unwatch */
            pthread_mutex_lock(&w->lock);
            b->lost = lost;
            if (lost && w->watch.lost)
                w->watch.lost(w->watch.arg, p, now - b->heard);
            else if (!lost && w->watch.found)
                w->watch.found(w->watch.arg, p);
            pthread_mutex_unlock(&w->lock);
        }
    }
    return moved;
}

/* At close: the last heartbeat (BEAT_CLOSING) to every watched peer, the
 * standing receives cancelled, the sends let go (a send to a peer that is
 * gone may never complete; MPI_Finalize finishes the others). */
static void beats_end(struct mpi_world *w)
{
    for (int p = 0; w->beats && p < w->procs; p++) {
        struct beat *b = &w->beats[p];
        if (b->watched) {
            MPI_Request last;
            if (MPI_Isend(&BEAT_CLOSING, 1, MPI_UINT64_T, p, beat_tag(w), w->data, &last) ==
                MPI_SUCCESS)
                MPI_Request_free(&last);
        }
        if (b->recv != MPI_REQUEST_NULL) {
            MPI_Cancel(&b->recv);
            MPI_Wait(&b->recv, MPI_STATUS_IGNORE);
        }
        if (b->send != MPI_REQUEST_NULL)
            MPI_Request_free(&b->send);
    }
}

bool mpi_built(void)
{
    return true;
}

static void op_finish(struct mpi_op *op, int status)
{
    op->status = status;
    op->done(op);
}

/* One step of op; true when it moved (started, matched or completed). */
static bool op_step(struct mpi_world *w, struct mpi_op *op, bool *finished)
{
    int flag = 0, rc;
    *finished = false;
    switch (op->state) {
    case OP_NEW:
        if (op->kind == MPI_OP_CALL) {
            op_finish(op, op->call(op, w->data));
            *finished = true;
            return true;
        }
        if (op->kind == MPI_OP_SEND) {
            rc = MPI_Isend(op->buf, (int)op->len, MPI_BYTE, op->peer, op->tag, w->data, &op->req);
            op->state = OP_MOVING;
            if (rc != MPI_SUCCESS) {
                op_finish(op, ERR_IO);
                *finished = true;
            }
            return true;
        }
        op->buf = NULL;
        op->len = 0;
        op->state = OP_PROBING;
        __attribute__((fallthrough)); /* probe at once */
    case OP_PROBING: {
        if (op->stop && atomic_load(op->stop)) { /* nothing matched: nothing to undo */
            op_finish(op, ERR_CANCELLED);
            *finished = true;
            return true;
        }
        MPI_Status st;
        rc = MPI_Improbe(op->peer, op->tag, w->data, &flag, &op->msg, &st);
        if (rc != MPI_SUCCESS) {
            op_finish(op, ERR_IO);
            *finished = true;
            return true;
        }
        if (!flag)
            return false;
        int count = 0;
        MPI_Get_count(&st, MPI_BYTE, &count);
        op->len = (size_t)count;
        op->buf = count > 0 ? malloc((size_t)count) : NULL;
        if (count > 0 && !op->buf) {
            /* The message is matched and must be taken off the wire: a
             * zero-byte receive consumes it (MPI_ERR_TRUNCATE, returned). */
            char sink;
            MPI_Mrecv(&sink, 0, MPI_BYTE, &op->msg, MPI_STATUS_IGNORE);
            op->len = 0;
            op_finish(op, ERR_NOMEM);
            *finished = true;
            return true;
        }
        rc = MPI_Imrecv(op->buf, count, MPI_BYTE, &op->msg, &op->req);
        op->state = OP_MOVING;
        if (rc != MPI_SUCCESS) {
            op_finish(op, ERR_IO);
            *finished = true;
        }
        return true;
    }
    case OP_MOVING:
        rc = MPI_Test(&op->req, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || flag) {
            op_finish(op, rc == MPI_SUCCESS ? 0 : ERR_IO);
            *finished = true;
            return true;
        }
        if (op->stop && atomic_load(op->stop)) {
            /* MPI keeps the request (and may still touch the bytes): a
             * receive's buffer is leaked, a send's is the caller's to leak */
            MPI_Request_free(&op->req);
            if (op->kind == MPI_OP_RECV) {
                op->buf = NULL;
                op->len = 0;
            }
            op_finish(op, ERR_CANCELLED);
            *finished = true;
            return true;
        }
        return false;
    }
    assert(!"unknown op state");
    return false;
}

static void *progress_main(void *arg)
{
    struct mpi_world *w = arg;
    struct mpi_op *active = NULL, **active_tail = &active;
    int idle = 0;
    for (;;) {
        pthread_mutex_lock(&w->lock);
        while (!active && !w->posted && !w->stopping) {
            if (!w->watching) {
                pthread_cond_wait(&w->wake, &w->lock);
                continue;
            }
            /* nothing in flight but heartbeats: poll them every millisecond */
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += 1000 * 1000;
            if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
            }
            if (pthread_cond_timedwait(&w->wake, &w->lock, &until) != 0)
                break;
        }
        if (w->posted) { /* append in posting order */
            *active_tail = w->posted;
            active_tail = w->posted_tail;
            w->posted = NULL;
            w->posted_tail = &w->posted;
        }
        bool stopping = w->stopping, watching = w->watching;
        pthread_mutex_unlock(&w->lock);
        if (stopping && !active)
            break;

        bool moved = watching && beats_step(w);
        for (struct mpi_op **p = &active; *p;) {
            struct mpi_op *op = *p;
            struct mpi_op *next = op->next; /* done may hand op back to its owner */
            bool finished;
            moved |= op_step(w, op, &finished);
            if (finished) {
                *p = next;
                if (!next)
                    active_tail = p;
            } else {
                p = &op->next;
            }
        }
        if (stopping) /* a closing world drops what never arrives */
            break;
        if (!active)
            continue;
        if (moved) {
            idle = 0;
        } else if (++idle < IDLE_YIELDS) {
            sched_yield();
        } else {
            struct timespec ts = {0, IDLE_SLEEP_NS};
            nanosleep(&ts, NULL);
        }
    }
    if (w->watching)
        beats_end(w);
    return NULL;
}

void mpi_world_post(struct mpi_world *w, struct mpi_op *op)
{
    assert(op->done && (op->kind != MPI_OP_CALL || op->call));
    op->next = NULL;
    op->state = OP_NEW;
    op->status = 0;
    pthread_mutex_lock(&w->lock);
    *w->posted_tail = op;
    w->posted_tail = &op->next;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
}

int mpi_world_open(struct mpi_world **out)
{
    *out = NULL;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized)
        return err_set(ERR_INVALID, "mpi: the world is already open in this process");
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return err_set(ERR_IO, "mpi: MPI_Init_thread failed");
    if (provided < MPI_THREAD_SERIALIZED) {
        MPI_Finalize();
        return err_set(ERR_UNSUPPORTED,
                       "mpi: the MPI library gives thread level %d, shardswap needs "
                       "MPI_THREAD_SERIALIZED (%d)",
                       provided, MPI_THREAD_SERIALIZED);
    }
    struct mpi_world *w = calloc(1, sizeof *w);
    if (!w) {
        MPI_Finalize();
        return err_set(ERR_NOMEM, "mpi: out of memory");
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &w->proc);
    MPI_Comm_size(MPI_COMM_WORLD, &w->procs);
    int *ub = NULL, found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
    w->max_tag = (found && ub ? *ub : 32767) - 1; /* the top tag is the heartbeats' */
    int len = 0;
    MPI_Get_library_version(w->library, &len);
    char *nl = strchr(w->library, ','); /* "Open MPI v4.1.4, package: ..." */
    if (nl)
        *nl = '\0';
    MPI_Comm_dup(MPI_COMM_WORLD, &w->data);
    MPI_Comm_set_errhandler(w->data, MPI_ERRORS_RETURN);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->wake, NULL);
    w->posted_tail = &w->posted;
    if (pthread_create(&w->thread, NULL, progress_main, w) != 0) {
        MPI_Comm_free(&w->data);
        MPI_Finalize();
        free(w);
        return err_set(ERR_IO, "mpi: cannot start the progress thread");
    }
    *out = w;
    return ERR_OK;
}

void mpi_world_close(struct mpi_world *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->stopping = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    int lost = -1; /* and not waiting in MPI_Finalize already */
    for (int p = 0; w->beats && p < w->procs && lost < 0; p++)
        if (w->beats[p].lost && !w->beats[p].closed)
            lost = p;
    if (lost >= 0) {
        /* MPI_Finalize waits for every process: a silent one would hang it */
        fprintf(stderr, "shardswap: process %d of %d is not answering; ending the job\n", lost,
                w->procs);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    free(w->beats);
    MPI_Comm_free(&w->data);
    MPI_Finalize();
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->wake);
    free(w);
}

/* The one MPI call made off the progress thread: the job ends either way. */
void mpi_world_abort(struct mpi_world *w, int code)
{
    (void)w;
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code); /* MPI_Abort does not return; in case it does */
}

int mpi_world_proc(const struct mpi_world *w)
{
    return w->proc;
}

int mpi_world_procs(const struct mpi_world *w)
{
    return w->procs;
}

const char *mpi_world_library(const struct mpi_world *w)
{
    return w->library;
}

int mpi_world_max_tag(const struct mpi_world *w)
{
    return w->max_tag;
}

struct bench_call {
    float *buf;
    size_t n;
    int iters;
    double seconds;
    struct event done;
};

static int bench_allreduce_call(struct mpi_op *op, MPI_Comm comm)
{
    struct bench_call *b = op->arg;
    if (MPI_Barrier(comm) != MPI_SUCCESS)
        return ERR_IO;
    double t0 = MPI_Wtime();
    for (int i = 0; i < b->iters; i++)
        if (MPI_Allreduce(MPI_IN_PLACE, b->buf, (int)b->n, MPI_FLOAT, MPI_SUM, comm) != MPI_SUCCESS)
            return ERR_IO;
    if (MPI_Barrier(comm) != MPI_SUCCESS)
        return ERR_IO;
    b->seconds = MPI_Wtime() - t0;
    return 0;
}

static void bench_call_done(struct mpi_op *op)
{
    struct bench_call *b = op->arg;
    event_set(&b->done, op->status);
}

int mpi_world_bench_allreduce(struct mpi_world *w, float *buf, size_t n, int iters, double *seconds)
{
    if (n > (size_t)INT_MAX)
        return err_set(ERR_INVALID, "mpi: an all-reduce of %zu floats is too large for MPI", n);
    struct bench_call b = {.buf = buf, .n = n, .iters = iters};
    event_init(&b.done);
    struct mpi_op op = {
        .kind = MPI_OP_CALL, .call = bench_allreduce_call, .done = bench_call_done, .arg = &b};
    mpi_world_post(w, &op);
    int rc = event_wait(&b.done);
    event_destroy(&b.done);
    if (rc < 0)
        return err_set(rc, "mpi: MPI_Allreduce of %zu floats failed", n);
    *seconds = b.seconds;
    return 0;
}

int mpi_world_watch(struct mpi_world *w, const struct mpi_watch_config *cfg)
{
    if (!(cfg->interval_s > 0) || !(cfg->timeout_s > cfg->interval_s))
        return err_set(ERR_INVALID,
                       "mpi: heartbeats need an interval above 0 and a timeout above it "
                       "(got %g s and %g s)",
                       cfg->interval_s, cfg->timeout_s);
    pthread_mutex_lock(&w->lock);
    bool already = w->watching || w->beats;
    pthread_mutex_unlock(&w->lock);
    if (already)
        return err_set(ERR_INVALID, "mpi: heartbeats are already on");
    struct beat *beats = calloc((size_t)w->procs, sizeof *beats);
    if (!beats)
        return err_set(ERR_NOMEM, "mpi: out of memory");
    double now = now_s();
    for (int p = 0; p < w->procs; p++) {
        beats[p].recv = beats[p].send = MPI_REQUEST_NULL;
        beats[p].heard = now;
        /* a star: process 0 watches everyone, everyone watches 0 */
        beats[p].watched = p != w->proc && (w->proc == 0 || p == 0);
    }
    /* The standing receives are made by the progress thread (the only one
     * that calls MPI): it posts them on its first round. */
    pthread_mutex_lock(&w->lock);
    w->watch = *cfg;
    w->beats = beats;
    w->next_beat = now;
    w->watching = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    return 0;
}

void mpi_world_unwatch(struct mpi_world *w)
{
    pthread_mutex_lock(&w->lock);
    w->watch.lost = NULL;
    w->watch.found = NULL;
    w->watch.arg = NULL;
    pthread_mutex_unlock(&w->lock);
}

bool mpi_world_proc_lost(struct mpi_world *w, int proc)
{
    if (proc < 0 || proc >= w->procs)
        return false;
    pthread_mutex_lock(&w->lock);
    bool lost = w->beats && w->beats[proc].lost;
    pthread_mutex_unlock(&w->lock);
    return lost;
}

static void message_done(struct mpi_op *op)
{
    event_set(op->arg, op->status);
}

/* Posts op and waits for it. */
static int message_run(struct mpi_world *w, struct mpi_op *op)
{
    struct event done;
    event_init(&done);
    op->done = message_done;
    op->arg = &done;
    mpi_world_post(w, op);
    int rc = event_wait(&done);
    event_destroy(&done);
    return rc;
}

int mpi_world_send_unless(struct mpi_world *w, int peer, int tag, const void *p, size_t n,
                          const atomic_bool *stop)
{
    if (n > (size_t)INT_MAX)
        return err_set(ERR_INVALID, "mpi: a message of %zu bytes is too large", n);
    struct mpi_op op = {
        .kind = MPI_OP_SEND, .peer = peer, .tag = tag, .buf = (void *)p, .len = n, .stop = stop};
    int rc = message_run(w, &op);
    if (rc == ERR_CANCELLED)
        return err_set(rc, "mpi: sending %zu bytes to process %d was given up", n, peer);
    if (rc < 0)
        return err_set(rc, "mpi: sending %zu bytes to process %d failed", n, peer);
    return 0;
}

/* A posted send: the op and the caller's callback, freed once done. */
struct posted_send {
    struct mpi_op op;
    void (*done)(void *arg, int status);
    void *arg;
};

static void posted_send_done(struct mpi_op *op)
{
    struct posted_send *s = (struct posted_send *)op;
    s->done(s->arg, op->status);
    free(s);
}

int mpi_world_send_post(struct mpi_world *w, int peer, int tag, const void *p, size_t n,
                        const atomic_bool *stop, void (*done)(void *arg, int status), void *arg)
{
    if (n > (size_t)INT_MAX)
        return err_set(ERR_INVALID, "mpi: a message of %zu bytes is too large", n);
    struct posted_send *s = malloc(sizeof *s);
    if (!s)
        return err_set(ERR_NOMEM, "mpi: out of memory for a send of %zu bytes", n);
    *s = (struct posted_send){.op = {.kind = MPI_OP_SEND,
                                     .peer = peer,
                                     .tag = tag,
                                     .buf = (void *)p,
                                     .len = n,
                                     .stop = stop,
                                     .done = posted_send_done},
                              .done = done,
                              .arg = arg};
    mpi_world_post(w, &s->op);
    return 0;
}

int mpi_world_send(struct mpi_world *w, int peer, int tag, const void *p, size_t n)
{
    return mpi_world_send_unless(w, peer, tag, p, n, NULL);
}

int mpi_world_recv_unless(struct mpi_world *w, int peer, int tag, const atomic_bool *stop, void **p,
                          size_t *n)
{
    struct mpi_op op = {.kind = MPI_OP_RECV, .peer = peer, .tag = tag, .stop = stop};
    int rc = message_run(w, &op);
    *p = op.buf;
    *n = op.len;
    if (rc < 0) {
        free(op.buf);
        *p = NULL;
        *n = 0;
        if (rc == ERR_CANCELLED)
            return err_set(rc, "mpi: the receive from process %d was given up", peer);
        return err_set(rc, "mpi: receiving from process %d failed", peer);
    }
    return 0;
}

int mpi_world_recv(struct mpi_world *w, int peer, int tag, void **p, size_t *n)
{
    return mpi_world_recv_unless(w, peer, tag, NULL, p, n);
}
