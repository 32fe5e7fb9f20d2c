/* comm.h's channels between two processes (comm/mpi.h:
 * comm_channel_create_mpi): one message in flight per direction through the
 * world's progress thread. */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backend/kernels.h"
#include "comm/comm.h"
#include "comm/comm_impl.h"
#include "comm/mpi/mpi_impl.h"
#include "core/error.h"

/* One end of a channel between two processes. The sender keeps one message
 * in flight (a comm_send waits for the previous one to leave, then copies
 * buf and returns); the receiver posts a receive per comm_recv. Channels
 * are one-way (comm.h), but sending and receiving have their own op and
 * flight, so an end used both ways still never reuses an op in flight. */
struct mpi_channel {
    struct comm_channel base;
    struct mpi_world *w;
    int peer, tag;
    struct flight sending, receiving;
    struct mpi_op send_op, recv_op;
    float *stage; /* the message in flight, owned */
    size_t stage_cap;
};

static void mpi_channel_abort(struct comm_channel *base, int rc)
{
    struct mpi_channel *c = (struct mpi_channel *)base;
    flight_abort(&c->sending, rc);
    flight_abort(&c->receiving, rc);
}

static int mpi_channel_aborted(struct comm_channel *base)
{
    struct mpi_channel *c = (struct mpi_channel *)base;
    pthread_mutex_lock(&c->sending.lock);
    int rc = c->sending.aborted;
    pthread_mutex_unlock(&c->sending.lock);
    return rc;
}

static int channel_error(struct mpi_channel *c, int rc, const char *what)
{
    if (mpi_channel_aborted(&c->base))
        return err_set(rc, "%s: the channel to process %d was aborted (%s: the peer stage failed)",
                       what, c->peer, err_name(rc));
    return err_set(rc, "%s: the message to or from process %d failed (%s)", what, c->peer,
                   err_name(rc));
}

static int mpi_channel_send(struct comm_channel *base, struct stream *s, const float *buf, size_t n)
{
    struct mpi_channel *c = (struct mpi_channel *)base;
    int rc = flight_wait(&c->sending); /* the previous message is on its way */
    if (rc < 0)
        return channel_error(c, rc, "comm_send");
    if (n > c->stage_cap) {
        float *grown = realloc(c->stage, n * sizeof(float));
        if (!grown)
            return err_set(ERR_NOMEM, "comm_send: out of memory for a message of %zu floats", n);
        c->stage = grown;
        c->stage_cap = n;
    }
    if (s && n > 0 && (rc = kern_to_host(s, c->stage, buf, n * sizeof(float))) < 0)
        return rc;
    if (!s && n > 0)
        memcpy(c->stage, buf, n * sizeof(float));
    flight_post(&c->sending, c->w, &c->send_op, MPI_OP_SEND, c->peer, c->tag, c->stage,
                n * sizeof(float));
    return 0;
}

static int mpi_channel_recv(struct comm_channel *base, struct stream *s, float *buf, size_t n)
{
    struct mpi_channel *c = (struct mpi_channel *)base;
    flight_post(&c->receiving, c->w, &c->recv_op, MPI_OP_RECV, c->peer, c->tag, NULL, 0);
    int rc = flight_wait(&c->receiving);
    if (rc < 0)
        return channel_error(c, rc, "comm_recv");
    size_t sent = c->recv_op.len / sizeof(float);
    if (sent == n && n > 0 && s)
        rc = kern_to_device(s, buf, c->recv_op.buf, n * sizeof(float));
    else if (sent == n && n > 0)
        memcpy(buf, c->recv_op.buf, n * sizeof(float));
    free(c->recv_op.buf);
    c->recv_op.buf = NULL;
    if (sent != n)
        return err_set(ERR_INVALID,
                       "comm_recv: the message from process %d has %zu floats, the receiver "
                       "expected %zu",
                       c->peer, sent, n);
    return rc;
}

static void mpi_channel_destroy(struct comm_channel *base)
{
    struct mpi_channel *c = (struct mpi_channel *)base;
    if (!flight_quiesce(&c->sending) || !flight_quiesce(&c->receiving))
        return; /* a message still in flight into this memory: keep it (top of file) */
    flight_destroy(&c->sending);
    flight_destroy(&c->receiving);
    free(c->recv_op.buf);
    free(c->stage);
    free(c);
}

static const struct comm_channel_ops mpi_channel_ops = {
    .name = "mpi",
    .destroy = mpi_channel_destroy,
    .send = mpi_channel_send,
    .recv = mpi_channel_recv,
    .abort = mpi_channel_abort,
    .aborted = mpi_channel_aborted,
};

int comm_channel_create_mpi(struct mpi_world *w, int peer, int tag, struct comm_channel **out)
{
    *out = NULL;
    if (peer < 0 || peer >= mpi_world_procs(w) || peer == mpi_world_proc(w))
        return err_set(ERR_INVALID,
                       "comm mpi: a channel's peer must be another process of "
                       "0..%d, got %d (this is %d)",
                       mpi_world_procs(w) - 1, peer, mpi_world_proc(w));
    if (tag < 0 || tag >= mpi_world_max_tag(w))
        return err_set(ERR_INVALID, "comm mpi: tag %d is out of range 0..%d", tag,
                       mpi_world_max_tag(w) - 1);
    struct mpi_channel *c = calloc(1, sizeof *c);
    if (!c)
        return err_set(ERR_NOMEM, "comm mpi: out of memory for a channel");
    c->base.ops = &mpi_channel_ops;
    c->w = w;
    c->peer = peer;
    c->tag = tag;
    flight_init(&c->sending);
    flight_init(&c->receiving);
    *out = &c->base;
    return 0;
}
