/* Run by killed_rank.py under mpirun: process 0 drives the followers
 * through cluster/leader with heartbeats on; the last process dies
 * (SIGKILL) instead of serving while process 0's call to it waits. The job
 * must end promptly and name the dead process's rank, never hang: either
 * OpenMPI ends it (a dead rank aborts the job; mpirun names it) or the
 * leader's call fails once the heartbeats stop, which this program reports
 * naming the rank before it ends the job. */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include "backend/device.h"
#include "cluster/follower.h"
#include "cluster/leader.h"
#include "cluster/proto.h"
#include "comm/mpi.h"
#include "core/error.h"

#define CTL 9000

int main(void)
{
    struct mpi_world *w = NULL;
    if (mpi_world_open(&w) < 0) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    int me = mpi_world_proc(w), procs = mpi_world_procs(w), proc_of[1] = {1};
    struct mpi_watch_config wc = {.interval_s = 0.2, .timeout_s = 3.0};
    if (me == procs - 1) {
        fprintf(stderr, "process %d: dying\n", me);
        kill(getpid(), SIGKILL);
    }
    if (me != 0) { /* a follower with no device of its own */
        struct device *none[1] = {NULL};
        struct follower *f = NULL;
        if (mpi_world_watch(w, &wc) < 0 || follower_create(w, none, proc_of, 1, CTL, &f) < 0 ||
            follower_serve(f) < 0)
            fprintf(stderr, "process %d: %s\n", me, err_msg());
        follower_destroy(f);
        mpi_world_close(w);
        return 0;
    }
    struct leader *l = NULL;
    struct leader_config cfg = {.ctl_tag = CTL, .beat_interval_s = 0.2, .beat_timeout_s = 3.0};
    if (leader_create(w, &cfg, &l) < 0) {
        fprintf(stderr, "%s\n", err_msg());
        mpi_world_abort(w, 1);
    }
    struct proto_msg unreg = {.kind = PROTO_UNREGISTER, .model = 1};
    int rc = leader_call(l, procs - 1, &unreg); /* waits for the dead one */
    fprintf(stderr, "process 0: the call to rank %d returned %d: %s\n", procs - 1, rc,
            rc < 0 ? err_msg() : "");
    leader_destroy(l);
    mpi_world_close(w); /* with the dead one lost: ends the job */
    return rc < 0 ? 1 : 0;
}
