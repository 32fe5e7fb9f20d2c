/* Inside comm/mpi: the world's progress thread and the messages other
 * threads hand it.
 *
 * Every MPI call of the process is made on the progress thread. A thread
 * that needs a message sent or received fills in a struct mpi_op and posts
 * it (mpi_world_post); the progress thread starts it (MPI_Isend, or
 * MPI_Improbe then MPI_Imrecv for a receive of any size), tests it until
 * it completes, and then calls op->done on the progress thread. Ops start
 * in the order they were posted, and MPI keeps messages between one pair
 * of processes with one tag in order, so the k-th receive posted for
 * (peer, tag) gets the k-th message sent there.
 *
 * op->done runs on the progress thread: it may take a short lock and
 * signal, never block, wait, or post. After done the op belongs to its
 * owner again (a received message's bytes, op->buf, are the owner's to
 * free).
 *
 * While no op is in flight the thread sleeps on a condition variable;
 * while some are, it polls them, with sched_yield between rounds that made
 * no progress and short sleeps after about a millisecond of none (a peer
 * that is slow or gone), so a waiting message costs little CPU.
 */
#ifndef SHARDSWAP_COMM_MPI_IMPL_H
#define SHARDSWAP_COMM_MPI_IMPL_H

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "comm/mpi.h"

/* SEND and RECV move one message; CALL runs op->call(op) on the progress
 * thread (for MPI's own blocking calls, e.g. a reference MPI_Allreduce:
 * nothing else progresses meanwhile). */
enum mpi_op_kind { MPI_OP_SEND, MPI_OP_RECV, MPI_OP_CALL };

struct mpi_op {
    /* the caller's */
    enum mpi_op_kind kind;
    int peer, tag;
    void *buf;  /* send: the bytes, kept alive until done; recv: set before done
                   (malloc'd, the owner frees it; NULL when len is 0) */
    size_t len; /* send: bytes to send; recv: set before done */
    int status; /* set before done: 0 or a negative error code */
    void (*done)(struct mpi_op *op);
    void *arg;
    int (*call)(struct mpi_op *op, MPI_Comm comm); /* CALL: returns the status */
    const atomic_bool *stop; /* SEND, RECV, or NULL: give up (ERR_CANCELLED) once
                                true (comm/mpi.h: mpi_world_recv_unless) */

    /* the progress thread's */
    struct mpi_op *next;
    int state;
    MPI_Request req;
    MPI_Message msg;
};

/* Hands op to the progress thread; any thread but the progress thread. */
void mpi_world_post(struct mpi_world *w, struct mpi_op *op);

/* Messages in flight and their completions, for one group or channel
 * (mpi_flight.c): post several, wait for all of them or an abort. */
struct flight {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int pending; /* ops posted and not done */
    int aborted; /* 0 or the abort's rc */
    int failed;  /* 0 or the first op's error */
};
void flight_init(struct flight *f);
void flight_destroy(struct flight *f);
/* Fills in op and posts it, counted in f. */
void flight_post(struct flight *f, struct mpi_world *w, struct mpi_op *op, enum mpi_op_kind kind,
                 int peer, int tag, void *buf, size_t len);
/* Waits until every op posted is done, or an abort: 0, the first op's
 * error, or the abort's rc. */
int flight_wait(struct flight *f);
/* Any thread: wakes a waiter, which returns rc from then on. */
void flight_abort(struct flight *f, int rc);
/* True when no op is in flight (after an abort some may still be). */
bool flight_idle(struct flight *f);
/* True when nothing is in flight any more, waiting up to a second. */
bool flight_quiesce(struct flight *f);

#endif
