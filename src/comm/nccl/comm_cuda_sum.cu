/* The rank-order sum of comm_cuda_local.c's all-reduce (comm_cuda_sum.h).
 * Plain adds, one element per thread in a grid-stride loop: the order of
 * the additions is the host's (buf_0 + buf_1) + buf_2 + ..., and nvcc does
 * not contract or reassociate separate float adds, so the result is the
 * host's bit for bit. */
#include "comm/nccl/comm_cuda_sum.h"

namespace
{

struct sum_bufs {
    float *p[COMM_CUDA_SUM_MAX_RANKS];
};

__global__ void sum_slice_kernel(sum_bufs b, int n_ranks, size_t lo, size_t hi)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = lo + (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < hi; i += stride) {
        float acc = b.p[0][i];
        for (int q = 1; q < n_ranks; q++)
            acc = __fadd_rn(acc, b.p[q][i]);
        for (int q = 0; q < n_ranks; q++)
            b.p[q][i] = acc;
    }
}

} // namespace

extern "C" cudaError_t comm_cuda_sum_slice(float *const *bufs, int n_ranks, size_t lo, size_t hi,
                                           cudaStream_t s)
{
    if (n_ranks < 1 || n_ranks > COMM_CUDA_SUM_MAX_RANKS || hi <= lo)
        return cudaErrorInvalidValue;
    sum_bufs b = {};
    for (int q = 0; q < n_ranks; q++)
        b.p[q] = bufs[q];
    const int threads = 256;
    size_t blocks = (hi - lo + threads - 1) / threads;
    if (blocks > 4096)
        blocks = 4096; /* the grid-stride loop covers the rest */
    sum_slice_kernel<<<(unsigned)blocks, threads, 0, s>>>(b, n_ranks, lo, hi);
    return cudaGetLastError();
}
