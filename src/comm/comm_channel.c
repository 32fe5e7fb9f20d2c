/* Point-to-point channels between two threads (pipeline stages): a one-slot
 * mailbox (and the dispatch of comm.h's channel calls, at the end, which
 * comm/mpi's channels between processes share). The slot's buffer is owned by the channel and grows to the largest
 * message sent. Everything is guarded by one mutex, with a condition variable
 * per direction. Blocking right away costs a futex sleep and wake-up per
 * hand-over (50 us per message on the 2-core dev box; 1 us with the spin), so a waiter
 * first polls `full` without the lock for CHANNEL_SPIN_ITERS pause
 * instructions (about 10 us here), which catches the common case of a
 * peer that is just about to send or receive.
 *
 * comm_channel_abort sets `aborted` under the lock and wakes both sides; a
 * side waiting (or arriving) then returns the abort's error. */
#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"

#include "backend/kernels.h"
#include "comm/comm_impl.h"
#include "core/error.h"

enum { CHANNEL_SPIN_ITERS = 400 };

struct mailbox {
    struct comm_channel base;
    pthread_mutex_t lock;
    pthread_cond_t emptied; /* full became false */
    pthread_cond_t filled;  /* full became true */
    atomic_bool full;       /* written under lock; also polled without it */
    atomic_int aborted;     /* 0 or the abort's rc; written under lock, polled without it */
    size_t n;               /* floats in the message, when full */
    size_t cap;             /* floats data can hold */
    float *data;            /* (cap), owned */
};

static const struct comm_channel_ops mailbox_ops;

int comm_channel_create(struct comm_channel **out)
{
    struct mailbox *c = calloc(1, sizeof *c);
    *out = NULL;
    if (!c)
        return err_set(ERR_NOMEM, "comm: out of memory for a channel");
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->emptied, NULL);
    pthread_cond_init(&c->filled, NULL);
    atomic_init(&c->full, false);
    atomic_init(&c->aborted, 0);
    c->base.ops = &mailbox_ops;
    *out = &c->base;
    return ERR_OK;
}

static void mailbox_destroy(struct comm_channel *base)
{
    struct mailbox *c = (struct mailbox *)base;
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->emptied);
    pthread_cond_destroy(&c->filled);
    free(c->data);
    free(c);
}

/* Polls until full == want (or an abort) or the spin budget runs out; the
 * caller then re-checks under the lock, so giving up early is always safe. */
static void channel_spin(struct mailbox *c, bool want)
{
    for (int i = 0; i < CHANNEL_SPIN_ITERS; i++) {
        if (atomic_load_explicit(&c->full, memory_order_relaxed) == want ||
            atomic_load_explicit(&c->aborted, memory_order_relaxed) != 0)
            return;
        comm_cpu_relax();
    }
}

/* The error of a send or receive on an aborted channel (lock held). */
static int channel_aborted_error(struct mailbox *c, const char *what)
{
    int rc = atomic_load(&c->aborted);
    pthread_mutex_unlock(&c->lock);
    return err_set(rc, "%s: the channel was aborted (%s: the peer stage failed)", what,
                   err_name(rc));
}

static void mailbox_abort(struct comm_channel *base, int rc)
{
    struct mailbox *c = (struct mailbox *)base;
    pthread_mutex_lock(&c->lock);
    if (atomic_load(&c->aborted) == 0) {
        atomic_store(&c->aborted, rc);
        c->full = false; /* the message in flight is dropped */
        pthread_cond_broadcast(&c->emptied);
        pthread_cond_broadcast(&c->filled);
    }
    pthread_mutex_unlock(&c->lock);
}

static int mailbox_aborted(struct comm_channel *base)
{
    return atomic_load(&((struct mailbox *)base)->aborted);
}

static int mailbox_send(struct comm_channel *base, struct stream *s, const float *buf, size_t n)
{
    struct mailbox *c = (struct mailbox *)base;
    channel_spin(c, false);
    pthread_mutex_lock(&c->lock);
    while (c->full && !c->aborted)
        pthread_cond_wait(&c->emptied, &c->lock);
    if (c->aborted)
        return channel_aborted_error(c, "comm_send");
    if (n > c->cap) {
        float *grown = realloc(c->data, n * sizeof(float));
        if (!grown) {
            pthread_mutex_unlock(&c->lock);
            return err_set(ERR_NOMEM, "comm_send: out of memory for a message of %zu floats", n);
        }
        c->data = grown;
        c->cap = n;
    }
    int rc = s ? kern_to_host(s, c->data, buf, n * sizeof(float)) : 0;
    if (rc < 0) {
        pthread_mutex_unlock(&c->lock);
        return rc;
    }
    if (!s && n > 0)
        memcpy(c->data, buf, n * sizeof(float));
    c->n = n;
    c->full = true;
    pthread_cond_signal(&c->filled);
    pthread_mutex_unlock(&c->lock);
    return ERR_OK;
}

static int mailbox_recv(struct comm_channel *base, struct stream *s, float *buf, size_t n)
{
    struct mailbox *c = (struct mailbox *)base;
    channel_spin(c, true);
    pthread_mutex_lock(&c->lock);
    while (!c->full && !c->aborted)
        pthread_cond_wait(&c->filled, &c->lock);
    if (c->aborted)
        return channel_aborted_error(c, "comm_recv");
    size_t sent = c->n;
    int rc = 0;
    if (sent == n && n > 0 && s)
        rc = kern_to_device(s, buf, c->data, n * sizeof(float));
    else if (sent == n && n > 0)
        memcpy(buf, c->data, n * sizeof(float));
    /* A mismatched message is dropped too, so neither side hangs on it. */
    c->full = false;
    pthread_cond_signal(&c->emptied);
    pthread_mutex_unlock(&c->lock);
    if (sent != n)
        return err_set(ERR_INVALID,
                       "comm_recv: the message has %zu floats, the receiver expected %zu", sent, n);
    return rc;
}

static const struct comm_channel_ops mailbox_ops = {
    .name = "mailbox",
    .destroy = mailbox_destroy,
    .send = mailbox_send,
    .recv = mailbox_recv,
    .abort = mailbox_abort,
    .aborted = mailbox_aborted,
};

/* comm.h's channel functions, whatever the implementation. */
void comm_channel_destroy(struct comm_channel *c)
{
    if (c)
        c->ops->destroy(c);
}

void comm_channel_abort(struct comm_channel *c, int rc)
{
    assert(c && rc < 0);
    c->ops->abort(c, rc);
}

int comm_channel_aborted(struct comm_channel *c)
{
    return c->ops->aborted(c);
}

int comm_send(struct comm_channel *c, struct stream *s, const float *buf, size_t n)
{
    assert(c && (buf || n == 0));
    return c->ops->send(c, s, buf, n);
}

int comm_recv(struct comm_channel *c, struct stream *s, float *buf, size_t n)
{
    assert(c && (buf || n == 0));
    return c->ops->recv(c, s, buf, n);
}
