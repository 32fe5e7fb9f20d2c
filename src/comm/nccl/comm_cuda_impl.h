/* Shared internals of the CUDA collectives (src/comm/nccl/): the two
 * implementations comm_group_create_cuda chooses between, and the host
 * barrier both use.
 *
 * Files:
 *   comm_cuda.c        comm_group_create_cuda (the choice), the host barrier
 *   comm_nccl.c        ranks on distinct GPUs: NCCL
 *   comm_cuda_local.c  ranks sharing a GPU: device pointers published in
 *                      host slots, a rank-order sum kernel (comm_cuda_sum.cu)
 */
#ifndef SHARDSWAP_COMM_NCCL_COMM_CUDA_IMPL_H
#define SHARDSWAP_COMM_NCCL_COMM_CUDA_IMPL_H

#include <pthread.h>

struct device;
struct comm_group;

/* An abortable barrier for the n ranks' threads (a generation counter
 * under a mutex). Waiting blocks on a condition variable: the CUDA ranks
 * spend their time waiting for the GPU, not for each other, so there is
 * nothing to gain from spinning. */
struct comm_cuda_barrier {
    pthread_mutex_t lock; /* guards the fields below; nothing else is done under it */
    pthread_cond_t cond;  /* gen moved or aborted was set */
    int n, arrived;
    unsigned gen;
    int aborted; /* 0, or the first comm_cuda_barrier_abort's rc */
};

void comm_cuda_barrier_init(struct comm_cuda_barrier *b, int n);
void comm_cuda_barrier_destroy(struct comm_cuda_barrier *b);
/* 0 once all n ranks have called it (what each wrote before is visible to
 * all after), or the abort's rc (< 0, no message) when the barrier is or
 * gets aborted. */
int comm_cuda_barrier_wait(struct comm_cuda_barrier *b);
/* Any thread: every waiting and later comm_cuda_barrier_wait returns rc.
 * The first rc stays. */
void comm_cuda_barrier_abort(struct comm_cuda_barrier *b, int rc);

/* rc from an aborted barrier, as an error of rank's collective `what`,
 * with a message on the calling thread. */
int comm_cuda_aborted(int rc, const char *what, int rank);

/* The two implementations; devices are CUDA devices, n_ranks >= 1. */
int comm_group_create_nccl(struct device *const *devices, int n_ranks, struct comm_group **out);
int comm_group_create_cuda_local(struct device *const *devices, int n_ranks,
                                 struct comm_group **out);

#endif
