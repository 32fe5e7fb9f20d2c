/* A serving command's job under mpirun (docs/ARCHITECTURE.md: "Processes"):
 * every process parses the same command line and config; process 0 then
 * runs the command with a stack whose other processes' devices it reaches
 * through the leader (cluster_job_lead), and every other process opens its
 * own devices of that config and carries out process 0's commands until it
 * is told to leave (cluster_job_follow).
 *
 * Heartbeats run both ways (mpi_world_watch): process 0 fails the calls of
 * a follower silent for longer than the timeout, naming it, and a follower
 * that stops hearing process 0 leaves instead of waiting for ever. */
#ifndef SHARDSWAP_CLUSTER_JOB_H
#define SHARDSWAP_CLUSTER_JOB_H

#include <stdbool.h>
#include <stddef.h>

struct stack_config;
struct cluster_job;

#define CLUSTER_BEAT_INTERVAL_S 1.0
#define CLUSTER_BEAT_TIMEOUT_S 10.0

/* Heartbeats (every process of the job must use the same numbers): a
 * beat every interval_s, a process silent for timeout_s lost; 0: the
 * defaults above. */
struct cluster_job_config {
    double beat_interval_s, beat_timeout_s;
};

/* Not under mpirun, or one process: *out NULL and 0, the command runs as
 * it always does. Under mpirun with several: opens the MPI world (once per
 * process) into *out. ERR_UNSUPPORTED naming the build when it has no MPI,
 * ERR_INVALID unless 0 < interval < timeout. cfg NULL: the defaults. */
int cluster_job_open(const struct cluster_job_config *cfg, struct cluster_job **out);
int cluster_job_proc(const struct cluster_job *j);  /* this process's number; 0 for NULL */
int cluster_job_procs(const struct cluster_job *j); /* 1 for NULL */
/* The world (comm/mpi.h), for a caller's own messages on tags below 100. */
struct mpi_world *cluster_job_world(const struct cluster_job *j);

/* Process 0, once leading: whether process proc is lost for good (its
 * heartbeats stopped, or its channel broke), why in reason (cap bytes).
 * false for process 0, NULL, or before cluster_job_lead. */
bool cluster_job_lost(const struct cluster_job *j, int proc, char *reason, size_t cap);

/* Process 0: starts the leader and the remote table, and sets sc->remote
 * and sc->n_procs for stack_open (sc's devices say which process owns
 * each). */
int cluster_job_lead(struct cluster_job *j, struct stack_config *sc);
/* Any other process: opens its devices of sc (stack_open_devices_of),
 * serves process 0's commands until SHUTDOWN, closes them. 0, or why it
 * left early (process 0 lost, a device that did not open). */
int cluster_job_follow(struct cluster_job *j, const struct stack_config *sc);

/* Process 0: tells every follower to leave (after the stack is closed)
 * and waits for them; every process: closes the world. NULL-safe. */
void cluster_job_close(struct cluster_job *j);

#endif
