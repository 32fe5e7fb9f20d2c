/* Rank 0's side of the command channel to the other processes of a job
 * serving across processes (docs/ARCHITECTURE.md: "Processes"): any thread
 * of process 0 sends a command (cluster/proto.h) to one follower or to
 * every one, and waits for that command's answer.
 *
 * Order: every command gets the next sequence number of the leader, and a
 * command to several processes is sent to all of them before any later
 * command is sent to any (one lock over numbering and posting the sends),
 * so every follower sees the commands in one global order, the order
 * NCCL's and the collectives' rule of one order per group needs. Sends are
 * only posted (mpi_world_send_post) and the lock is never held while one
 * completes: a follower that takes no message (stopped, with a command
 * past MPI's eager limit or a full socket bound for it) holds up no caller
 * and no command to another follower; each follower's commands still leave
 * in their order. Answers are matched to their command by the sequence
 * number, so callers on several threads get their own answers.
 *
 * Threads: MPI is called only by the world's progress thread
 * (comm/mpi.h); callers block on their answer; one receiver thread per
 * follower waits for its answers (mpi_world_recv_unless, so shutdown can
 * join it even when the follower is silent).
 *
 * Failure: with heartbeats on (beat_timeout_s > 0; every follower must
 * watch with the same numbers, mpi_world_watch), a follower silent for
 * longer than the timeout is lost: its pending calls and every later one
 * fail at once with ERR_UNREACHABLE, "process P is not answering (...)",
 * and its sends not yet taken are given up (their bytes leaked: MPI may
 * still read them). A failure
 * is final: the follower's state is unknown (a found-again follower is
 * only told to shut down). A follower that dies ends the job under
 * OpenMPI's default, and mpirun names its rank. */
#ifndef SHARDSWAP_CLUSTER_LEADER_H
#define SHARDSWAP_CLUSTER_LEADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mpi_world;
struct proto_msg;
struct leader;

struct leader_config {
    int ctl_tag; /* the tag of the commands and answers (follower_create's) */
    /* heartbeats (mpi_world_watch, turned on by leader_create): 0 for none,
     * when nothing tells a silent follower from a slow one */
    double beat_interval_s, beat_timeout_s;
};

/* Process 0 only; starts a receiver per follower (processes 1..procs-1). */
int leader_create(struct mpi_world *w, const struct leader_config *cfg, struct leader **out);

/* Sends cmd (any kind but SHUTDOWN; its seq is the leader's, not read) to
 * process proc and waits for the answer: 0, or the answer's status with
 * err_msg() "process P: <the follower's message>", or ERR_UNREACHABLE when proc is
 * lost, ERR_INVALID for proc out of range. Any thread. */
int leader_call(struct leader *l, int proc, const struct proto_msg *cmd);
/* cmd to every follower, one sequence number for all; waits for every
 * answer: 0 or the error of the lowest process that failed (all answer). */
int leader_call_all(struct leader *l, const struct proto_msg *cmd);
/* The same to followers to[0..n) only (the processes a model's shards are
 * on): one that is lost fails only the commands sent to it. */
int leader_call_some(struct leader *l, const int *to, int n, const struct proto_msg *cmd);
/* A STEP to every follower; waits for every STEP_DONE. The one process
 * answering with logits (TP rank 0 of the last stage) fills logits[0..n):
 * *got is how many it sent (0 when rank 0 holds that shard), ERR_INVALID
 * when more than n. Errors as leader_call_all. */
int leader_step(struct leader *l, const struct proto_msg *step, float *logits, size_t n,
                size_t *got);

/* The two halves of a call to every follower, for a caller that must send
 * in one order with work of its own and wait outside its lock (the device
 * workers: a step's STEP leaves in the order its shards are queued here).
 * leader_begin sends cmd (any kind leader_call_all or leader_step takes)
 * to followers to[0..n) (to NULL: every one) and returns; *out must be
 * given to leader_end or leader_abandon exactly once; leader_end waits
 * for every answer and frees it: errors, and a STEP's logits, as
 * leader_call_all and leader_step (logits may be NULL with n 0 for other
 * kinds). */
struct leader_call;
int leader_begin(struct leader *l, const int *to, int n, const struct proto_msg *cmd,
                 struct leader_call **out);
int leader_end(struct leader *l, struct leader_call *c, float *logits, size_t n, size_t *got);
/* Waits until every answer of c has come or one has failed (an error in
 * it, or its process lost): true when one failed. c is still to be given
 * to leader_end. For a STEP whose failure on one process leaves the others
 * waiting in a collective with it until they are told (BATCH_ABORT). */
bool leader_wait_failed(struct leader *l, struct leader_call *c);
/* STATS to follower proc and its STATS_DONE's numbers into out[0..*n)
 * (at most max; proto.h's PROTO_STAT_* order). Errors as leader_call. */
int leader_stats(struct leader *l, int proc, const struct proto_msg *cmd, double *out,
                 uint32_t max, uint32_t *n);
/* Whether follower proc has failed (lost, or its channel broken: final),
 * with why in reason (cap bytes; may be NULL). Any thread. */
bool leader_lost(struct leader *l, int proc, char *reason, size_t cap);
/* Gives up waiting for c (not yet ended): its answers, when they come, are
 * dropped as leader_post's are. Frees c. NULL-safe. */
void leader_abandon(struct leader *l, struct leader_call *c);
/* Sends cmd to followers to[0..n) (NULL: every one) in the global order and never waits: for
 * commands whose only effect that matters is their place in the order
 * (closing a batch). An error in an answer is written to stderr. */
int leader_post(struct leader *l, const int *to, int n, const struct proto_msg *cmd);

/* Tells every follower to leave follower_serve (SHUTDOWN), waits for the
 * answers of those not lost, and joins the receivers: 0 or the first
 * error. Later calls fail with ERR_INVALID. Once. */
int leader_shutdown(struct leader *l);
/* Shuts down first when leader_shutdown was not called. NULL-safe. */
void leader_destroy(struct leader *l);

#endif
