/* Messages in flight for one group or channel of comm/mpi (mpi_impl.h):
 * posted to the world's progress thread, counted, waited for together, and
 * abandoned (not freed) by an abort. */
#include <pthread.h>
#include <stdbool.h>
#include <time.h>

#include "comm/mpi/mpi_impl.h"

enum { DESTROY_WAIT_MS = 1000 };

void flight_init(struct flight *f)
{
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->cond, NULL);
    f->pending = f->aborted = f->failed = 0;
}

/* On the progress thread (mpi_impl.h: a short lock and a signal). */
static void flight_op_done(struct mpi_op *op)
{
    struct flight *f = op->arg;
    pthread_mutex_lock(&f->lock);
    if (op->status < 0 && f->failed == 0)
        f->failed = op->status;
    f->pending--;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
}

void flight_post(struct flight *f, struct mpi_world *w, struct mpi_op *op, enum mpi_op_kind kind,
                 int peer, int tag, void *buf, size_t len)
{
    *op = (struct mpi_op){.kind = kind,
                          .peer = peer,
                          .tag = tag,
                          .buf = buf,
                          .len = len,
                          .done = flight_op_done,
                          .arg = f};
    pthread_mutex_lock(&f->lock);
    f->pending++;
    pthread_mutex_unlock(&f->lock);
    mpi_world_post(w, op);
}

/* Waits until every op posted is done, or an abort; 0, the first op's
 * error, or the abort's rc. */
int flight_wait(struct flight *f)
{
    pthread_mutex_lock(&f->lock);
    while (f->pending > 0 && f->aborted == 0)
        pthread_cond_wait(&f->cond, &f->lock);
    int rc = f->aborted ? f->aborted : f->failed;
    f->failed = 0;
    pthread_mutex_unlock(&f->lock);
    return rc;
}

void flight_abort(struct flight *f, int rc)
{
    pthread_mutex_lock(&f->lock);
    if (f->aborted == 0)
        f->aborted = rc;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
}

/* True when nothing is in flight any more (waits up to DESTROY_WAIT_MS). */
bool flight_quiesce(struct flight *f)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += DESTROY_WAIT_MS / 1000;
    pthread_mutex_lock(&f->lock);
    while (f->pending > 0)
        if (pthread_cond_timedwait(&f->cond, &f->lock, &until) != 0)
            break;
    bool idle = f->pending == 0;
    pthread_mutex_unlock(&f->lock);
    return idle;
}

/* True when no op is in flight (after an abort some may still be). */
bool flight_idle(struct flight *f)
{
    pthread_mutex_lock(&f->lock);
    bool idle = f->pending == 0;
    pthread_mutex_unlock(&f->lock);
    return idle;
}

void flight_destroy(struct flight *f)
{
    pthread_mutex_destroy(&f->lock);
    pthread_cond_destroy(&f->cond);
}
