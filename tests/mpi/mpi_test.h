/* The main of every program in tests/mpi: skip without MPI or without
 * mpirun, open the world, run the named cases (test.h), close it. The cases
 * read world, me (this process) and procs. */
#ifndef SHARDSWAP_TESTS_MPI_TEST_H
#define SHARDSWAP_TESTS_MPI_TEST_H

#include "comm/mpi.h"
#include "core/error.h"
#include "test.h"

static struct mpi_world *world;
static int me, procs;

int main(int argc, char **argv)
{
    if (!mpi_built())
        test_skip("built without MPI");
    if (mpi_launched() == 0)
        test_skip("not started by mpirun (tests/CMakeLists.txt launches it)");
    if (mpi_world_open(&world) < 0) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    me = mpi_world_proc(world);
    procs = mpi_world_procs(world);
    int rc = test_main(argc, argv, NULL);
    mpi_world_close(world);
    return rc;
}

#endif
