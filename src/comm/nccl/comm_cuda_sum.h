/* The rank-order sum kernel of comm_cuda_local.c (comm_cuda_sum.cu), callable from C. */
#ifndef SHARDSWAP_COMM_NCCL_COMM_CUDA_SUM_H
#define SHARDSWAP_COMM_NCCL_COMM_CUDA_SUM_H

#include <cuda_runtime.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Most ranks of one local group: the buffers travel as a kernel argument. */
#define COMM_CUDA_SUM_MAX_RANKS 64

/* Queues on s, for every i in [lo, hi):
 *   acc = bufs[0][i] + bufs[1][i] + ... + bufs[n_ranks - 1][i]  (in rank order)
 *   bufs[q][i] = acc for every q,
 * so every buffer gets the same bits, equal to the serial rank-order sum.
 * bufs: n_ranks (<= COMM_CUDA_SUM_MAX_RANKS) device pointers readable and
 * writable from s's GPU. hi > lo. Returns the launch's status. */
cudaError_t comm_cuda_sum_slice(float *const *bufs, int n_ranks, size_t lo, size_t hi,
                                cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
