/* Run by killed_rank.py under mpirun: every process joins a group over all
 * of them; the last process then dies (SIGKILL) while the others wait in an
 * all-reduce with it. The job must end promptly, naming the dead process,
 * never hang (what killed_rank.py checks). */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/mpi.h"
#include "core/error.h"

int main(void)
{
    struct mpi_world *w = NULL;
    if (mpi_world_open(&w) < 0) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    int me = mpi_world_proc(w), procs = mpi_world_procs(w), every[16];
    for (int p = 0; p < procs && p < 16; p++)
        every[p] = p;
    struct comm_group *g = NULL;
    if (procs > 16 || comm_group_create_mpi(w, procs, every, 1, &g) < 0) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    struct comm *c = comm_group_rank(g, me);
    if (comm_barrier(c) < 0)
        return 1;
    if (me == procs - 1) {
        fprintf(stderr, "process %d: dying\n", me);
        kill(getpid(), SIGKILL);
    }
    float x[4] = {0};
    int rc = comm_allreduce_sum(c, NULL, x, 4); /* waits for the dead one */
    fprintf(stderr, "process %d: all-reduce returned %d\n", me, rc);
    comm_group_destroy(g);
    mpi_world_close(w);
    return 0;
}
