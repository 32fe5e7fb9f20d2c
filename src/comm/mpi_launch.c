/* Was this process started by an MPI launcher? Read from the environment
 * the launchers set, so it is answered with or without MPI built in, and
 * before MPI_Init. */
#include <stdlib.h>

#include "comm/mpi.h"

int mpi_launched(void)
{
    /* OpenMPI's mpirun; PMIx (OpenMPI 5, Slurm); PMI (MPICH's Hydra) */
    static const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const char *v = getenv(sizes[i]);
        if (v && *v) {
            int n = atoi(v);
            return n > 0 ? n : 1;
        }
    }
    return getenv("PMIX_RANK") ? 1 : 0;
}
