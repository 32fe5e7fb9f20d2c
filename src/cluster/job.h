/* A command's job under mpirun (docs/ARCHITECTURE.md: "Processes"):
 * process 0 runs the command; every other process follows (it needs no
 * config of its own: process 0 tells it which devices to open).
 *
 *   process 0                          every other process
 *   cluster_job_open                   cluster_job_open
 *   for each stack the command opens:  cluster_job_follow: until SHUTDOWN,
 *     cluster_job_lead(sc)  DEVICES ->   open its devices of the stack,
 *     stack_open(sc) ... stack_close     carry out the commands,
 *     cluster_job_release   END     ->   close them
 *   cluster_job_close       SHUTDOWN ->  (returns)     cluster_job_close
 *
 * Heartbeats run both ways (mpi_world_watch): process 0 fails the calls of
 * a follower silent for longer than the timeout, naming it (ERR_UNREACHABLE:
 * a server answers 503), and a follower that stops hearing process 0
 * leaves instead of waiting for ever. */
#ifndef SHARDSWAP_CLUSTER_JOB_H
#define SHARDSWAP_CLUSTER_JOB_H

#include <stdbool.h>
#include <stddef.h>

struct mpi_world;
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

/* Process 0, before stack_open(sc): the other processes open their devices
 * of sc (DEVICES, with stack_budgets' budgets), and sc->remote and
 * sc->n_procs are set for stack_open. NULL j: nothing to do (0). One
 * stack at a time. */
int cluster_job_lead(struct cluster_job *j, struct stack_config *sc);
/* Process 0, after stack_close: the other processes close theirs (END).
 * NULL-safe; nothing when not leading a stack. */
void cluster_job_release(struct cluster_job *j);
/* Process 0: whether process proc is lost for good (its heartbeats
 * stopped, or its channel broke), why in reason (cap bytes). false for
 * process 0 and for NULL. */
bool cluster_job_lost(const struct cluster_job *j, int proc, char *reason, size_t cap);

/* Process 0: another process's numbers (STATS): its host's copy speed on
 * threads threads of bytes each when measure (0 otherwise), its host tier,
 * and what it loaded onto its devices since the job began. */
struct cluster_proc_stats {
    double memcpy_bps, stream_bps;
    double host_used, host_budget;
    double loads, load_bytes, disk_bytes;
    double overlapped; /* its shards' steps begun before their load had ended */
};
int cluster_job_stats(struct cluster_job *j, int proc, bool measure, int threads, size_t bytes,
                      struct cluster_proc_stats *out);

/* Any other process: follows process 0's stacks until SHUTDOWN (0), or
 * until process 0 is lost (ERR_UNREACHABLE). */
int cluster_job_follow(struct cluster_job *j);

/* Process 0: tells every follower to leave (after the last stack is
 * closed) and waits for them; every process: closes the world. NULL-safe. */
void cluster_job_close(struct cluster_job *j);

#endif
