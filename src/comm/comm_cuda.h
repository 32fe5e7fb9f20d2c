/* Collectives for a group of CUDA devices (src/comm/nccl/): NCCL when every
 * rank has its own GPU; when ranks share a GPU (partitions of one, as
 * `--devices cuda:0,cuda:0` makes), an in-process implementation of the
 * same table over that GPU's memory, since NCCL refuses two ranks on one
 * GPU. Built without CUDA, ERR_UNSUPPORTED ("built without CUDA"). Called by
 * comm_group_create for DEVICE_CUDA groups. */
#ifndef SHARDSWAP_COMM_COMM_CUDA_H
#define SHARDSWAP_COMM_COMM_CUDA_H

struct device;
struct comm_group;

int comm_group_create_cuda(struct device *const *devices, int n_ranks, struct comm_group **out);

#endif
