/* comm_group_create_cuda: which implementation serves a group of CUDA
 * devices, and the host barrier both implementations use.
 *
 * NCCL when every rank has a GPU of its own (one communicator per GPU,
 * created once with the group); otherwise, when ranks share a GPU
 * (partitions of one, which NCCL refuses), the in-process implementation of
 * comm_cuda_local.c. A group of one rank needs no NCCL either.
 */
#include <assert.h>
#include <stdbool.h>

#include "backend/cuda/cuda_impl.h"
#include "comm/comm_cuda.h"
#include "comm/nccl/comm_cuda_impl.h"
#include "core/error.h"

int comm_group_create_cuda(struct device *const *devices, int n_ranks, struct comm_group **out)
{
    *out = NULL;
    if (n_ranks < 1)
        return err_set(ERR_INVALID, "comm: a group needs at least 1 rank, got %d", n_ranks);
    for (int r = 0; r < n_ranks; r++)
        assert(device_kind(devices[r]) == DEVICE_CUDA);
    bool shared = false;
    for (int r = 0; r < n_ranks && !shared; r++)
        for (int q = 0; q < r && !shared; q++)
            shared = cuda_device_gpu(devices[r]) == cuda_device_gpu(devices[q]);
    if (n_ranks == 1 || shared)
        return comm_group_create_cuda_local(devices, n_ranks, out);
    return comm_group_create_nccl(devices, n_ranks, out);
}

/* ---- the host barrier ---- */

void comm_cuda_barrier_init(struct comm_cuda_barrier *b, int n)
{
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->cond, NULL);
    b->n = n;
    b->arrived = 0;
    b->gen = 0;
    b->aborted = 0;
}

void comm_cuda_barrier_destroy(struct comm_cuda_barrier *b)
{
    pthread_cond_destroy(&b->cond);
    pthread_mutex_destroy(&b->lock);
}

int comm_cuda_barrier_wait(struct comm_cuda_barrier *b)
{
    pthread_mutex_lock(&b->lock);
    int rc = b->aborted;
    if (rc == 0) {
        unsigned g = b->gen;
        if (++b->arrived == b->n) {
            b->arrived = 0;
            b->gen++;
            pthread_cond_broadcast(&b->cond);
        } else {
            while (b->gen == g && b->aborted == 0)
                pthread_cond_wait(&b->cond, &b->lock);
        }
        rc = b->aborted;
    }
    pthread_mutex_unlock(&b->lock);
    return rc;
}

void comm_cuda_barrier_abort(struct comm_cuda_barrier *b, int rc)
{
    assert(rc < 0);
    pthread_mutex_lock(&b->lock);
    if (b->aborted == 0)
        b->aborted = rc;
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
}

int comm_cuda_aborted(int rc, const char *what, int rank)
{
    return err_set(rc, "comm: rank %d: %s: the group was aborted (%s: a rank failed)", rank, what,
                   err_name(rc));
}
