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

    /* the progress thread's */
    struct mpi_op *next;
    int state;
    MPI_Request req;
    MPI_Message msg;
};

/* Hands op to the progress thread; any thread but the progress thread. */
void mpi_world_post(struct mpi_world *w, struct mpi_op *op);

#endif
