/* The main of the tests/mpi programs that run the serving stack as a cluster
 * job (cluster/job.h) and stop processes by their pids: skip without MPI or
 * with fewer than 2 processes, open the job with heartbeats every
 * BEAT_INTERVAL seconds timing out after BEAT_TIMEOUT, call config_make
 * (every process, with me and procs set), send each follower's pid to
 * process 0 (pids, for kill), then process 0 runs the named cases (test.h)
 * while the others follow the job until it closes. Define BEAT_INTERVAL and
 * BEAT_TIMEOUT before including this, and config_make in the program;
 * JOB_TEST_ENV, when defined as `"NAME", "value"`, is set in every process's
 * environment before MPI starts (an MCA parameter of the transport). */
#ifndef SHARDSWAP_TESTS_MPI_JOB_TEST_H
#define SHARDSWAP_TESTS_MPI_JOB_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/job.h"
#include "comm/mpi.h"
#include "core/error.h"
#include "test.h"

static struct cluster_job *job;
static int me, procs;
static pid_t pids[8]; /* the followers', sent to process 0 before they follow */
#define PID_TAG 7

static void config_make(void);

int main(int argc, char **argv)
{
    if (!mpi_built())
        test_skip("built without MPI");
    if (mpi_launched() < 2)
        test_skip("not started by mpirun as 2 or more processes (tests/CMakeLists.txt does)");
#ifdef JOB_TEST_ENV
    setenv(JOB_TEST_ENV, 1);
#endif
    struct cluster_job_config jc = {.beat_interval_s = BEAT_INTERVAL,
                                    .beat_timeout_s = BEAT_TIMEOUT};
    if (cluster_job_open(&jc, &job) < 0) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    me = cluster_job_proc(job);
    procs = cluster_job_procs(job);
    config_make();
    struct mpi_world *w = cluster_job_world(job);
    if (me > 0) {
        pid_t pid = getpid();
        if (mpi_world_send(w, 0, PID_TAG, &pid, sizeof pid) < 0)
            fprintf(stderr, "process %d: %s\n", me, err_msg());
    }
    for (int p = 1; me == 0 && p < procs && p < 8; p++) {
        void *buf = NULL;
        size_t n = 0;
        if (mpi_world_recv(w, p, PID_TAG, &buf, &n) == 0 && n == sizeof(pid_t))
            memcpy(&pids[p], buf, sizeof(pid_t));
        free(buf);
    }
    int rc = 0;
    if (me == 0) {
        rc = test_main(argc, argv, NULL);
    } else if (cluster_job_follow(job) < 0) {
        fprintf(stderr, "process %d: %s\n", me, err_msg());
        rc = 1;
    }
    cluster_job_close(job);
    return rc;
}

#endif
