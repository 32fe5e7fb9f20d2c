/* Processes of one job started by mpirun (OpenMPI), one per node, and the
 * collectives of worker groups whose ranks live in several of them.
 *
 * The world is this process's view of the job: its own process number
 * (`proc`, MPI's rank in MPI_COMM_WORLD; "rank" stays the rank inside a
 * worker group, as in comm.h) and the number of processes. MPI is called
 * from exactly one thread per process, the world's progress thread
 * (comm/mpi/mpi_world.c), so nothing relies on MPI_THREAD_MULTIPLE: every
 * other thread posts its messages to that thread and waits for them.
 *
 * A group spanning processes (comm_group_create_mpi) is created in every
 * process that holds one of its ranks, with the same arguments in each (the
 * same n_ranks, proc_of and tag), and each process calls the collectives of
 * its own ranks only (a handle of another process's rank exists but must not
 * be used: an assert). The all-reduce sums every rank's buffer in rank order, as the
 * threads backend does, so a group of CPU ranks gives the same bits whether
 * its ranks are threads of one process or spread over several. Tags tell
 * groups and channels apart: two groups, or two channels between the same
 * pair of processes, never share one (0 <= tag < mpi_world_max_tag).
 *
 * Without MPI at build time (comm/mpi/mpi_stub.c) mpi_launched() still
 * reads the launcher's environment, and every other entry point returns
 * ERR_UNSUPPORTED, "built without MPI support".
 */
#ifndef SHARDSWAP_COMM_MPI_H
#define SHARDSWAP_COMM_MPI_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

struct comm_group;
struct comm_channel;
struct mpi_world;

/* True when this binary was built with MPI. */
bool mpi_built(void);

/* The number of processes the launcher started (OpenMPI's
 * OMPI_COMM_WORLD_SIZE, or PMIx's / PMI's PMIX_RANK / PMI_SIZE), or 0 when
 * this process was not started by an MPI launcher. Reads only the
 * environment, so it answers before (and without) MPI_Init. */
int mpi_launched(void);

/* MPI_Init_thread (MPI_THREAD_SERIALIZED: only the progress thread calls MPI
 * afterwards) and the progress thread. Once per process, from the main
 * thread. ERR_UNSUPPORTED without MPI, ERR_IO when MPI fails to start. */
int mpi_world_open(struct mpi_world **out);
/* Stops the progress thread and finalizes MPI; every process of the job
 * must close (MPI_Finalize is collective). No group or channel may be in
 * use. NULL-safe. */
void mpi_world_close(struct mpi_world *w);
/* Ends the whole job at once (MPI_Abort) with exit code `code`: for a
 * process that cannot go on and must not leave its peers waiting. */
void mpi_world_abort(struct mpi_world *w, int code);
int mpi_world_proc(const struct mpi_world *w);
int mpi_world_procs(const struct mpi_world *w);
/* The library, e.g. "Open MPI v4.1.4" (static storage). */
const char *mpi_world_library(const struct mpi_world *w);
/* Tags run from 0 to this, exclusive (MPI_TAG_UB, at least 32767; the tag
 * above is the heartbeats'). */
int mpi_world_max_tag(const struct mpi_world *w);

/* Byte messages with another process, for commands and answers
 * (cluster/proto.h): mpi_world_send returns once the bytes have left p (it
 * may be reused); mpi_world_recv waits for the next message from peer with
 * tag and hands over a malloc'd copy (*p, *n; NULL when n is 0; the caller
 * frees it). Any thread but the progress thread; one (peer, tag) keeps its
 * order. ERR_IO when MPI fails. */
int mpi_world_send(struct mpi_world *w, int peer, int tag, const void *p, size_t n);
int mpi_world_recv(struct mpi_world *w, int peer, int tag, void **p, size_t *n);
/* For a thread that waits on a peer that may never answer again
 * (cluster/leader.c): the same calls, given up with ERR_CANCELLED once
 * *stop is true (set by any thread; the progress thread reads it every
 * round). A receive given up before its message started to arrive received
 * nothing (the message stays for the next receive); one given up half way
 * dropped the message, and the order of (peer, tag) is lost. A send given
 * up may still be read by MPI: the caller must then leave p allocated and
 * unchanged for good (leak it), as it must a peer that is gone. */
int mpi_world_recv_unless(struct mpi_world *w, int peer, int tag, const atomic_bool *stop, void **p,
                          size_t *n);
int mpi_world_send_unless(struct mpi_world *w, int peer, int tag, const void *p, size_t n,
                          const atomic_bool *stop);
/* A send that is only posted: returns at once (any thread but the progress
 * thread), and done(arg, status) runs on the progress thread once the
 * bytes have left p (0), MPI failed (ERR_IO), or the send was given up
 * because *stop (may be NULL) became true (ERR_CANCELLED: p must then stay
 * allocated and unchanged for good, as for mpi_world_send_unless). p stays
 * the caller's, unchanged, until done. done may take a short lock and
 * signal; it never blocks, waits or calls into the world. Sends posted to
 * one (peer, tag) leave in posting order; one that a peer does not take
 * (stopped, its socket full, past MPI's eager limit) holds up no send to
 * another peer. 0, or ERR_INVALID (too large) or ERR_NOMEM, and done is
 * never called then. */
int mpi_world_send_post(struct mpi_world *w, int peer, int tag, const void *p, size_t n,
                        const atomic_bool *stop, void (*done)(void *arg, int status), void *arg);

/* Heartbeats: every interval_s process 0 sends one to every other process
 * and each of them one to process 0 (a star), on the progress thread. A
 * peer silent for more than timeout_s is lost: lost(arg, proc, silent_s)
 * is called once, on the progress thread (it may take a short lock and
 * signal, never block or call into the world); if it is heard again,
 * found(arg, proc). A process stopped (SIGSTOP) or cut off is lost; one
 * that dies ends the whole job under OpenMPI's default (mpirun names it).
 * mpi_world_close with a peer still lost ends the job (MPI_Abort) instead
 * of hanging in MPI_Finalize, which waits for every process; a peer that
 * closed its world first said so in its last heartbeat and ends nothing
 * (it waits in MPI_Finalize, however long the others take; it is still
 * lost once silent for the timeout, so a follower leaves a process 0 that
 * has gone). Once per
 * world; ERR_INVALID unless 0 < interval_s < timeout_s. */
struct mpi_watch_config {
    double interval_s, timeout_s;
    void (*lost)(void *arg, int proc, double silent_s);
    void (*found)(void *arg, int proc);
    void *arg;
};
int mpi_world_watch(struct mpi_world *w, const struct mpi_watch_config *cfg);
/* No lost/found callback is called once this returns (the heartbeats go
 * on): for an owner of the callbacks' arg that goes away before the world
 * (cluster/leader.c). The callbacks run under a lock this takes. */
void mpi_world_unwatch(struct mpi_world *w);
/* Whether proc is lost now (false before mpi_world_watch). Any thread. */
bool mpi_world_proc_lost(struct mpi_world *w, int proc);

/* The reference a bench compares against: MPI's own MPI_Allreduce (sum,
 * in place) of buf[0..n), iters times between two barriers, over every
 * process of the job (each calls it), on the progress thread; *seconds
 * is the time between the barriers. */
int mpi_world_bench_allreduce(struct mpi_world *w, float *buf, size_t n, int iters,
                              double *seconds);

/* A group of n_ranks whose rank r is in process proc_of[r] (0 <= proc_of[r] <
 * procs; the ranks of one process need not be consecutive). Created (and destroyed) in every
 * process that holds one of its ranks; ERR_INVALID when this process holds none, for a process out
 * of range or a tag out of range, ERR_NOMEM. */
int comm_group_create_mpi(struct mpi_world *w, int n_ranks, const int *proc_of, int tag,
                          struct comm_group **out);

/* One end of a channel between this process and process peer (a different
 * one): the sender's end and the receiver's end are created in their own
 * processes with the same tag, and used as comm.h's channels (comm_send on
 * one, comm_recv on the other). ERR_INVALID for a peer or tag out of range. */
int comm_channel_create_mpi(struct mpi_world *w, int peer, int tag, struct comm_channel **out);

#endif
