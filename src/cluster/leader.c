/* cluster/leader.h: numbering and posting the sends under one lock, a list
 * of the calls waiting for their answers, a receiver thread per follower that
 * hands each answer to its call, and heartbeats that fail a silent
 * follower's calls. */
#include "cluster/leader.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/proto.h"
#include "comm/mpi.h"
#include "core/error.h"
#include "core/strbuf.h"

/* One process's part of one call: registered before the command leaves, so
 * an answer arriving at once finds it. */
struct pending {
    struct pending *next;
    int proc;
    uint64_t seq;
    bool done;
    int status;           /* < 0: no answer (why says what happened) */
    char why[256];        /* the leader's own failure */
    struct proto_msg ans; /* the answer, owned, when done with status 0 */
};

struct peer {
    int proc;
    struct leader *l;
    pthread_t thread;
    bool started;
    atomic_bool stop;   /* the receiver gives up its wait and ends */
    atomic_bool ended;  /* the receiver has left its loop */
    atomic_bool silent; /* lost now (heartbeats): a send to it gives up */
    bool failed;        /* under the leader's lock */
    char reason[256];   /* why, when failed */
};

struct leader {
    struct mpi_world *w;
    struct leader_config cfg;
    int procs;
    bool watching;
    /* guards seq and the order in which commands are posted to the world
     * (every send is only posted under it: it is never held while one
     * completes); taken before lock, never under it */
    pthread_mutex_t send_lock;
    uint64_t seq;
    /* guards pending, the peers' failed and reason, and shut; never held
     * across an MPI call. Taken by the heartbeats' lost callback under the
     * world's lock, so nothing here calls into the world under it. */
    pthread_mutex_t lock;
    pthread_cond_t cond; /* some pending part is done */
    struct pending *pending;
    int sending; /* commands with a send still posted (struct outgoing) */
    bool shut;
    struct peer *peers; /* (procs); [0] unused */
};

/* ---- failing a follower ---- */

/* Marks proc failed (the first reason stays) and ends its pending calls.
 * Under l->lock. */
static void fail_locked(struct leader *l, int proc, const char *reason)
{
    struct peer *p = &l->peers[proc];
    if (!p->failed) {
        p->failed = true;
        snprintf(p->reason, sizeof p->reason, "%s", reason);
    }
    for (struct pending *c = l->pending; c; c = c->next)
        if (c->proc == proc && !c->done) {
            c->done = true;
            c->status = ERR_UNREACHABLE;
            snprintf(c->why, sizeof c->why, "%s", p->reason);
        }
    pthread_cond_broadcast(&l->cond);
}

static void fail_peer(struct leader *l, int proc, const char *reason)
{
    pthread_mutex_lock(&l->lock);
    fail_locked(l, proc, reason);
    pthread_mutex_unlock(&l->lock);
}

/* The heartbeats' lost callback: the progress thread, under the world's
 * lock (a short lock and a signal). */
static void on_lost(void *arg, int proc, double silent_s)
{
    struct leader *l = arg;
    if (proc <= 0 || proc >= l->procs)
        return;
    atomic_store(&l->peers[proc].silent, true);
    char reason[128];
    snprintf(reason, sizeof reason, "process %d is not answering (no heartbeat for %.1f s)", proc,
             silent_s);
    fail_peer(l, proc, reason);
}

static void on_found(void *arg, int proc)
{
    struct leader *l = arg;
    if (proc > 0 && proc < l->procs)
        atomic_store(&l->peers[proc].silent, false);
}

/* ---- receiving ---- */

/* Hands m to the call waiting for it. An answer nobody waits for (to a call
 * failed already, or to a leader_post) is dropped, its error written to
 * stderr: nobody else can tell it. */
static void deliver(struct leader *l, int proc, struct proto_msg *m)
{
    pthread_mutex_lock(&l->lock);
    struct pending *c = l->pending;
    while (c && !(c->proc == proc && c->seq == m->seq && !c->done))
        c = c->next;
    if (c) {
        c->ans = *m;
        memset(m, 0, sizeof *m);
        c->done = true;
        c->status = 0;
        pthread_cond_broadcast(&l->cond);
    }
    pthread_mutex_unlock(&l->lock);
    if (!c && m->status < 0)
        fprintf(stderr, "shardswap: process %d: %s\n", proc,
                m->message && m->message[0] ? m->message : err_name(m->status));
    proto_msg_free(m);
}

static void *receiver_main(void *arg)
{
    struct peer *p = arg;
    struct leader *l = p->l;
    while (!atomic_load(&p->stop)) {
        void *buf = NULL;
        size_t n = 0;
        int rc = mpi_world_recv_unless(l->w, p->proc, l->cfg.ctl_tag, &p->stop, &buf, &n);
        if (rc == ERR_CANCELLED)
            break;
        if (rc < 0) { /* the transport is broken: nothing more comes */
            char reason[300];
            snprintf(reason, sizeof reason, "process %d: %s", p->proc, err_msg());
            fail_peer(l, p->proc, reason);
            break;
        }
        struct proto_msg m;
        rc = proto_decode(buf, n, &m);
        free(buf);
        if (rc < 0) { /* no sequence number to match it to: the channel is broken */
            char reason[300];
            snprintf(reason, sizeof reason, "process %d answered what is not a message: %s",
                     p->proc, err_msg());
            fail_peer(l, p->proc, reason);
            continue;
        }
        deliver(l, p->proc, &m);
    }
    atomic_store(&p->ended, true);
    return NULL;
}

/* ---- calling ---- */

/* One encoded command on its way to one or more followers: the bytes
 * stay until every send of them is done (or for good when one was given
 * up: MPI may still read them). */
struct outgoing {
    struct leader *l;
    struct strbuf b;
    atomic_int refs;  /* sends not done */
    atomic_bool leak; /* a send was given up */
    struct outgoing_to {
        struct outgoing *o;
        int proc;
    } to[]; /* (the followers it is sent to) */
};

/* A send of o is done (mpi_world_send_post's callback: the progress thread,
 * a short lock). A failed one fails its follower, and with it every call
 * waiting there; the last one frees o. */
static void outgoing_sent(void *arg, int status)
{
    struct outgoing_to *t = arg;
    struct outgoing *o = t->o;
    struct leader *l = o->l;
    if (status < 0) {
        if (status == ERR_CANCELLED)
            atomic_store(&o->leak, true);
        char reason[300];
        if (status == ERR_CANCELLED)
            snprintf(reason, sizeof reason,
                     "process %d: a command of %zu bytes to it was given up (it took no "
                     "message)",
                     t->proc, o->b.len);
        else
            snprintf(reason, sizeof reason, "process %d: MPI failed sending a command of %zu bytes",
                     t->proc, o->b.len);
        fail_peer(l, t->proc, reason);
    }
    if (atomic_fetch_sub(&o->refs, 1) == 1) {
        if (!atomic_load(&o->leak))
            strbuf_free(&o->b);
        free(o);
        pthread_mutex_lock(&l->lock);
        if (--l->sending == 0)
            pthread_cond_broadcast(&l->cond);
        pthread_mutex_unlock(&l->lock);
    }
}

/* Sends cmd, with the next seq, to procs[0..n); parts[i] (NULL: nobody
 * waits, leader_post) is procs[i]'s, waited for by wait_procs (answer owned
 * by the caller: part_free). A failed follower is skipped (its part fails
 * with the reason), except for a shutdown, which is sent anyway and waited
 * for only from a follower that can still answer (not lost now, its
 * receiver running).
 *
 * The sends are only posted, under send_lock (which keeps the order): a
 * follower that takes no message (stopped, or a message past MPI's eager
 * limit that it has not read) holds up neither this caller nor a command
 * to any other follower. A send that fails or is given up (its follower
 * lost) fails that follower's parts with ERR_UNREACHABLE. */
static void send_procs(struct leader *l, const int *procs, int n, const struct proto_msg *cmd,
                       struct pending *parts, bool shutdown)
{
    struct proto_msg m = *cmd;
    struct outgoing *o = calloc(1, sizeof *o + (size_t)n * sizeof o->to[0]);
    pthread_mutex_lock(&l->send_lock);
    m.seq = ++l->seq;
    int rc = o ? proto_encode(&m, &o->b) : err_set(ERR_NOMEM, "leader: out of memory");
    if (o) {
        o->l = l;
        atomic_init(&o->refs, 1); /* this call's own, dropped at the end */
        atomic_init(&o->leak, false);
        pthread_mutex_lock(&l->lock);
        l->sending++;
        pthread_mutex_unlock(&l->lock);
    }
    for (int i = 0; i < n; i++) {
        struct pending post, *c = parts ? &parts[i] : &post;
        struct peer *p = &l->peers[procs[i]];
        *c = (struct pending){.proc = procs[i], .seq = m.seq};
        if (rc < 0 && !parts) {
            fprintf(stderr, "shardswap: leader: %s\n", err_msg());
            continue;
        }
        if (rc < 0) {
            c->done = true;
            c->status = rc;
            snprintf(c->why, sizeof c->why, "%s", err_msg());
            continue;
        }
        bool lost_now = shutdown && l->watching && mpi_world_proc_lost(l->w, procs[i]);
        pthread_mutex_lock(&l->lock);
        bool send = !p->failed || shutdown;
        bool wait = !p->failed || (shutdown && !lost_now && !atomic_load(&p->ended));
        if (!parts) {
            /* posted: nobody waits */
        } else if (!wait) {
            c->done = true;
            c->status = ERR_UNREACHABLE;
            snprintf(c->why, sizeof c->why, "%s", p->reason);
        } else {
            c->next = l->pending;
            l->pending = c;
        }
        pthread_mutex_unlock(&l->lock);
        if (!send)
            continue;
        /* a send to a silent follower is given up, so MPI holds it no
         * longer than the heartbeat timeout */
        o->to[i] = (struct outgoing_to){.o = o, .proc = procs[i]};
        atomic_fetch_add(&o->refs, 1);
        int prc = mpi_world_send_post(l->w, procs[i], l->cfg.ctl_tag, o->b.p, o->b.len, &p->silent,
                                      outgoing_sent, &o->to[i]);
        if (prc < 0) {
            atomic_fetch_sub(&o->refs, 1);
            char reason[300];
            snprintf(reason, sizeof reason, "process %d: %s", procs[i], err_msg());
            fail_peer(l, procs[i], reason);
        }
    }
    pthread_mutex_unlock(&l->send_lock);
    if (o) /* this call's reference: every send may be done already */
        outgoing_sent(&(struct outgoing_to){.o = o}, 0);
}

/* Takes parts[0..n) out of the list of pending ones (l->lock held): an
 * answer for them, later, finds nobody and is dropped. */
static void unlink_locked(struct leader *l, struct pending *parts, int n)
{
    for (int i = 0; i < n; i++)
        for (struct pending **pp = &l->pending; *pp; pp = &(*pp)->next)
            if (*pp == &parts[i]) {
                *pp = parts[i].next;
                break;
            }
}

/* Waits for every part send_procs registered, then takes them out of the list. */
static void wait_procs(struct leader *l, struct pending *parts, int n)
{
    pthread_mutex_lock(&l->lock);
    for (int i = 0; i < n; i++)
        while (!parts[i].done)
            pthread_cond_wait(&l->cond, &l->lock);
    unlink_locked(l, parts, n);
    pthread_mutex_unlock(&l->lock);
}

/* The status of one part, its message in err_msg() when it failed:
 * answered with an error, not answered, or answered with the wrong kind. */
static int part_status(const struct pending *c, enum proto_kind want)
{
    if (c->status < 0)
        return err_set(c->status, "%s", c->why);
    if (c->ans.kind != want)
        return err_set(ERR_INVALID, "process %d answered a command with %s, not %s", c->proc,
                       proto_kind_name(c->ans.kind), proto_kind_name(want));
    if (c->ans.status >= 0)
        return 0;
    const char *msg =
        c->ans.message && c->ans.message[0] ? c->ans.message : err_name(c->ans.status);
    char named[32]; /* most of the follower's messages name it already */
    int k = snprintf(named, sizeof named, "process %d", c->proc);
    if (strncmp(msg, named, (size_t)k) == 0 && (msg[k] == ':' || msg[k] == ','))
        return err_set(c->ans.status, "%s", msg);
    return err_set(c->ans.status, "process %d: %s", c->proc, msg);
}

/* The first failing part's status (its message set), or 0. */
static int parts_status(const struct pending *parts, int n, enum proto_kind want)
{
    int first = 0;
    char msg[512] = "";
    for (int i = 0; i < n; i++) {
        int rc = part_status(&parts[i], want);
        if (rc < 0 && first == 0) {
            first = rc;
            snprintf(msg, sizeof msg, "%s", err_msg());
        }
    }
    return first < 0 ? err_set(first, "%s", msg) : 0;
}

static void parts_free(struct pending *parts, int n)
{
    for (int i = 0; i < n; i++)
        proto_msg_free(&parts[i].ans);
}

static int check_cmd(struct leader *l, const struct proto_msg *cmd, bool step)
{
    pthread_mutex_lock(&l->lock);
    bool shut = l->shut;
    pthread_mutex_unlock(&l->lock);
    if (shut)
        return err_set(ERR_INVALID, "leader: the followers were shut down already");
    bool answer =
        cmd->kind == PROTO_REPLY || cmd->kind == PROTO_STEP_DONE || cmd->kind == PROTO_STATS_DONE;
    if (step != (cmd->kind == PROTO_STEP) || cmd->kind == PROTO_SHUTDOWN || cmd->kind <= 0 ||
        cmd->kind >= PROTO_KIND_END || answer)
        return err_set(ERR_INVALID, "leader: %s is not a command for %s",
                       proto_kind_name(cmd->kind), step ? "leader_step" : "leader_call");
    return 0;
}

/* cmd (checked) to follower proc alone, its answer of kind want awaited in
 * *part (the caller's to parts_free); 0 or the call's error. */
static int call_one(struct leader *l, int proc, const struct proto_msg *cmd, enum proto_kind want,
                    struct pending *part)
{
    int rc = check_cmd(l, cmd, false);
    if (rc < 0)
        return rc;
    if (proc < 1 || proc >= l->procs)
        return err_set(ERR_INVALID, "leader: process %d is not a follower (1..%d)", proc,
                       l->procs - 1);
    send_procs(l, &proc, 1, cmd, part, false);
    wait_procs(l, part, 1);
    if ((rc = part_status(part, want)) < 0)
        parts_free(part, 1);
    return rc;
}

int leader_call(struct leader *l, int proc, const struct proto_msg *cmd)
{
    struct pending part;
    int rc = call_one(l, proc, cmd, PROTO_REPLY, &part);
    if (rc == 0)
        parts_free(&part, 1);
    return rc;
}

/* Followers to[0..n) as a checked list in *set (to NULL: every one; *n
 * their count then). */
static int procs_set(struct leader *l, const int *to, int *n, int **set)
{
    *set = NULL;
    if (!to)
        *n = l->procs - 1;
    if (*n == 0)
        return 0;
    if (*n < 0 || *n > l->procs - 1 || !(*set = calloc((size_t)*n, sizeof(int))))
        return err_set(*n < 0 || *n > l->procs - 1 ? ERR_INVALID : ERR_NOMEM,
                       "leader: %d followers named (of %d)", *n, l->procs - 1);
    for (int i = 0; i < *n; i++) {
        (*set)[i] = to ? to[i] : i + 1;
        if ((*set)[i] < 1 || (*set)[i] >= l->procs) {
            int bad = (*set)[i];
            free(*set);
            *set = NULL;
            return err_set(ERR_INVALID, "leader: process %d is not a follower (1..%d)", bad,
                           l->procs - 1);
        }
    }
    return 0;
}

/* Sends cmd to followers to[0..n) (to NULL: every one, *n set). parts: NULL
 * for a post (nobody waits), else *parts gets n registered parts (NULL for
 * none), the caller's to wait_procs and free. */
static int send_set(struct leader *l, const int *to, int *n, const struct proto_msg *cmd,
                    struct pending **parts, bool shutdown)
{
    if (parts)
        *parts = NULL;
    int *set;
    int rc = procs_set(l, to, n, &set);
    if (rc < 0 || *n == 0)
        return rc;
    struct pending *p = parts ? calloc((size_t)*n, sizeof *p) : NULL;
    if (parts && !p) {
        free(set);
        return err_set(ERR_NOMEM, "leader: out of memory");
    }
    send_procs(l, set, *n, cmd, p, shutdown);
    free(set);
    if (parts)
        *parts = p;
    return 0;
}

int leader_call_some(struct leader *l, const int *to, int n, const struct proto_msg *cmd)
{
    struct leader_call *c;
    size_t none;
    if (cmd->kind == PROTO_STEP) /* leader_begin takes one; this answers REPLY only */
        return check_cmd(l, cmd, false);
    int rc = leader_begin(l, to, n, cmd, &c);
    return rc < 0 ? rc : leader_end(l, c, NULL, 0, &none);
}

int leader_call_all(struct leader *l, const struct proto_msg *cmd)
{
    return leader_call_some(l, NULL, 0, cmd);
}

int leader_post(struct leader *l, const int *to, int n, const struct proto_msg *cmd)
{
    int rc = check_cmd(l, cmd, false);
    return rc < 0 ? rc : send_set(l, to, &n, cmd, NULL, false);
}

struct leader_call {
    enum proto_kind kind;
    uint64_t batch;
    int n;                 /* followers called */
    struct pending *parts; /* (n), NULL for none */
};

int leader_begin(struct leader *l, const int *to, int n, const struct proto_msg *cmd,
                 struct leader_call **out)
{
    *out = NULL;
    int rc = check_cmd(l, cmd, cmd->kind == PROTO_STEP);
    struct leader_call *c = rc == 0 ? calloc(1, sizeof *c) : NULL;
    if (rc == 0 && !c)
        rc = err_set(ERR_NOMEM, "leader: out of memory");
    if (rc == 0 && (rc = send_set(l, to, &n, cmd, &c->parts, false)) == 0) {
        c->n = n;
        c->kind = cmd->kind;
        c->batch = cmd->batch;
        *out = c;
        return 0;
    }
    free(c);
    return rc;
}

bool leader_wait_failed(struct leader *l, struct leader_call *c)
{
    bool failed = false, all = false;
    pthread_mutex_lock(&l->lock);
    while (!failed && !all) {
        all = true;
        for (int i = 0; c->parts && i < c->n; i++) {
            const struct pending *p = &c->parts[i];
            all &= p->done;
            failed |= p->done && (p->status < 0 || p->ans.status < 0);
        }
        if (!failed && !all)
            pthread_cond_wait(&l->cond, &l->lock);
    }
    pthread_mutex_unlock(&l->lock);
    return failed;
}

int leader_end(struct leader *l, struct leader_call *c, float *logits, size_t n, size_t *got)
{
    *got = 0;
    if (!c->parts) {
        free(c);
        return 0;
    }
    const int k = c->n;
    wait_procs(l, c->parts, k);
    int rc = parts_status(c->parts, k, c->kind == PROTO_STEP ? PROTO_STEP_DONE : PROTO_REPLY);
    for (int i = 0; i < k && rc == 0; i++) {
        const struct proto_msg *a = &c->parts[i].ans;
        if (a->n_logits == 0)
            continue;
        if (*got)
            rc = err_set(ERR_INVALID, "leader: batch %llu: two processes answered with logits",
                         (unsigned long long)c->batch);
        else if (a->n_logits > n)
            rc = err_set(ERR_INVALID,
                         "leader: batch %llu: process %d answered %u logits, room for %zu",
                         (unsigned long long)c->batch, c->parts[i].proc, a->n_logits, n);
        else {
            memcpy(logits, a->logits, sizeof(float) * a->n_logits);
            *got = a->n_logits;
        }
    }
    parts_free(c->parts, k);
    free(c->parts);
    free(c);
    return rc;
}

int leader_stats(struct leader *l, int proc, const struct proto_msg *cmd, double *out,
                 uint32_t max, uint32_t *n)
{
    *n = 0;
    if (cmd->kind != PROTO_STATS)
        return err_set(ERR_INVALID, "leader: %s is not STATS", proto_kind_name(cmd->kind));
    struct pending part;
    int rc = call_one(l, proc, cmd, PROTO_STATS_DONE, &part);
    if (rc < 0)
        return rc;
    *n = part.ans.n_stats < max ? part.ans.n_stats : max;
    memcpy(out, part.ans.stats, sizeof(double) * *n);
    parts_free(&part, 1);
    return 0;
}

bool leader_lost(struct leader *l, int proc, char *reason, size_t cap)
{
    if (proc < 1 || proc >= l->procs)
        return false;
    pthread_mutex_lock(&l->lock);
    bool failed = l->peers[proc].failed;
    if (failed && reason)
        snprintf(reason, cap, "%s", l->peers[proc].reason);
    pthread_mutex_unlock(&l->lock);
    return failed;
}

void leader_abandon(struct leader *l, struct leader_call *c)
{
    if (!c)
        return;
    const int k = c->parts ? c->n : 0;
    pthread_mutex_lock(&l->lock);
    unlink_locked(l, c->parts, k);
    pthread_mutex_unlock(&l->lock);
    parts_free(c->parts, k);
    free(c->parts);
    free(c);
}

int leader_step(struct leader *l, const struct proto_msg *step, float *logits, size_t n,
                size_t *got)
{
    *got = 0;
    struct leader_call *c;
    if (step->kind != PROTO_STEP) /* leader_begin takes any command */
        return check_cmd(l, step, true);
    int rc = leader_begin(l, NULL, 0, step, &c);
    return rc < 0 ? rc : leader_end(l, c, logits, n, got);
}

/* ---- start and end ---- */

int leader_create(struct mpi_world *w, const struct leader_config *cfg, struct leader **out)
{
    *out = NULL;
    if (mpi_world_proc(w) != 0)
        return err_set(ERR_INVALID, "leader: process %d is not process 0", mpi_world_proc(w));
    if (cfg->ctl_tag < 0 || cfg->ctl_tag >= mpi_world_max_tag(w))
        return err_set(ERR_INVALID, "leader: tag %d is out of range 0..%d", cfg->ctl_tag,
                       mpi_world_max_tag(w) - 1);
    struct leader *l = calloc(1, sizeof *l);
    if (!l)
        return err_set(ERR_NOMEM, "leader: out of memory");
    l->w = w;
    l->cfg = *cfg;
    l->procs = mpi_world_procs(w);
    pthread_mutex_init(&l->send_lock, NULL);
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->cond, NULL);
    l->peers = calloc((size_t)l->procs, sizeof *l->peers);
    if (!l->peers) {
        l->shut = true;
        leader_destroy(l);
        return err_set(ERR_NOMEM, "leader: out of memory");
    }
    for (int p = 1; p < l->procs; p++) {
        struct peer *peer = &l->peers[p];
        peer->proc = p;
        peer->l = l;
        atomic_init(&peer->stop, false);
        atomic_init(&peer->ended, false);
        atomic_init(&peer->silent, false);
    }
    int rc = 0;
    if (cfg->beat_timeout_s > 0) {
        struct mpi_watch_config wc = {.interval_s = cfg->beat_interval_s,
                                      .timeout_s = cfg->beat_timeout_s,
                                      .lost = on_lost,
                                      .found = on_found,
                                      .arg = l};
        if ((rc = mpi_world_watch(w, &wc)) == 0)
            l->watching = true;
    }
    for (int p = 1; p < l->procs && rc == 0; p++) {
        if (pthread_create(&l->peers[p].thread, NULL, receiver_main, &l->peers[p]) != 0)
            rc = err_set(ERR_NOMEM, "leader: cannot start the receiver of process %d", p);
        else
            l->peers[p].started = true;
    }
    if (rc < 0) {
        l->shut = true; /* nothing was sent: no follower to tell */
        leader_destroy(l);
        return rc;
    }
    *out = l;
    return 0;
}

int leader_shutdown(struct leader *l)
{
    pthread_mutex_lock(&l->lock);
    bool shut = l->shut;
    l->shut = true;
    pthread_mutex_unlock(&l->lock);
    if (shut)
        return err_set(ERR_INVALID, "leader: the followers were shut down already");
    struct proto_msg bye = {.kind = PROTO_SHUTDOWN};
    struct pending *parts = NULL;
    int n;
    int rc = send_set(l, NULL, &n, &bye, &parts, true);
    if (rc == 0 && parts) {
        wait_procs(l, parts, n);
        rc = parts_status(parts, n, PROTO_REPLY);
        parts_free(parts, n);
        free(parts);
    }
    char msg[512] = "";
    if (rc < 0)
        snprintf(msg, sizeof msg, "%s", err_msg());
    /* every posted send done (a lost follower's given up) before the peers
     * that their callbacks read go */
    pthread_mutex_lock(&l->lock);
    while (l->sending > 0)
        pthread_cond_wait(&l->cond, &l->lock);
    pthread_mutex_unlock(&l->lock);
    if (l->watching)
        mpi_world_unwatch(l->w);
    for (int p = 1; p < l->procs; p++)
        if (l->peers[p].started) {
            atomic_store(&l->peers[p].stop, true);
            pthread_join(l->peers[p].thread, NULL);
            l->peers[p].started = false;
        }
    return rc < 0 ? err_set(rc, "leader: shutdown: %s", msg) : 0;
}

void leader_destroy(struct leader *l)
{
    if (!l)
        return;
    if (!l->shut)
        leader_shutdown(l);
    for (int p = 1; l->peers && p < l->procs; p++) /* a create that failed half way */
        if (l->peers[p].started) {
            atomic_store(&l->peers[p].stop, true);
            pthread_join(l->peers[p].thread, NULL);
        }
    if (l->watching)
        mpi_world_unwatch(l->w);
    free(l->peers);
    pthread_mutex_destroy(&l->send_lock);
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->cond);
    free(l);
}
