/* kern_route_topk's launcher (cuda_launch.h); the kernels are in
 * route.cuh, which says what each does. */
#include "route.cuh"

extern "C" cudaError_t cuda_launch_route_topk(cudaStream_t st, const float *logits, int n, int E,
                                              int k, int norm, const uint8_t *real, int real_group,
                                              int real_stride, int32_t *choice, float *choice_w,
                                              int32_t *counts)
{
    if (n <= 0)
        return cudaSuccess;
    if (E < 1 || E > CUDA_ROUTE_MAX_EXPERTS || k < 1 || k > E || k > CUDA_ROUTE_MAX_K)
        return cudaErrorInvalidValue;
    route_choose_kernel<<<(unsigned)((n + ROUTE_WARPS - 1) / ROUTE_WARPS), 32 * ROUTE_WARPS, 0,
                          st>>>(choice, choice_w, logits, n, E, k, norm);
    cudaError_t rc = cudaGetLastError();
    if (rc != cudaSuccess)
        return rc;
    route_count_kernel<<<1, CUDA_ROUTE_MAX_EXPERTS, 0, st>>>(counts, choice, n, E, k, real,
                                                             real_group, real_stride);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_launch_route_group(cudaStream_t st, const int32_t *choice,
                                               const float *choice_w, const int32_t *counts, int n,
                                               int E, int k, int eb, int ee, const uint8_t *have,
                                               int K, const float *gate, int32_t *rows,
                                               int32_t *slots, float *slot_w)
{
    if (n <= 0)
        return cudaSuccess;
    if (E < 1 || E > CUDA_ROUTE_MAX_EXPERTS || k < 1 || k > E ||
        (size_t)n * (size_t)K > (size_t)INT32_MAX)
        return cudaErrorInvalidValue;
    struct route_group_args a = {choice, counts, choice_w, gate, n,     E,
                                 k,      K,      {0},      rows, slots, slot_w};
    for (int e = eb; e < ee; e++)
        if (!have || have[e])
            a.has[e / 32] |= 1u << (e % 32);
    route_group_kernel<<<1, CUDA_ROUTE_MAX_EXPERTS, 0, st>>>(a);
    return cudaGetLastError();
}
