/* The kernels of kern_route_topk and kern_route_group (backend/kernels.h)
 * on the GPU: a mixture of experts' choices and the grouping of its rows,
 * so that the router's logits never leave the device. Launched by
 * route.cu; run on the CPU, a host thread per CUDA thread, by
 * tests/cuda_emulate. Written to be read against the CPU's
 * (backend/cpu/route.c) line by line rather than to be fast: a decode step
 * routes a few tokens, and a prefill's expert products dwarf this.
 * kern_route_topk:
 *   1. route_choose_kernel, one warp per token: the softmax (max by
 *      shuffles, the exponentials into shared memory, summed by lane 0 in
 *      expert order as the CPU adds them), then top_k rounds of a warp
 *      argmax (higher probability, then lower index), the weights
 *      renormalised and listed by ascending expert.
 *   2. route_count_kernel, one block, thread e for expert e: the tokens
 *      that chose e, all and the real ones, walking the choices in order.
 * kern_route_group:
 *   3. route_group_kernel, one block: thread 0 lays out the first rows of
 *      the experts with rows in expert order, then thread e writes its
 *      rows and slots walking the tokens in order: exactly the CPU's
 *      grouping, with no atomics. */
#ifndef SHARDSWAP_BACKEND_CUDA_ROUTE_CUH
#define SHARDSWAP_BACKEND_CUDA_ROUTE_CUH

#include "cuda_common.cuh"

#define ROUTE_WARPS 4 /* tokens per block of route_choose_kernel */
#define ROUTE_PER_LANE (CUDA_ROUTE_MAX_EXPERTS / 32)
#define FULL_MASK 0xffffffffu

/* Whether (pa, ea) ranks above (pb, eb): the higher probability, ties to
 * the lower expert; e < 0 is nothing. */
__device__ __forceinline__ bool route_above(float pa, int ea, float pb, int eb)
{
    return ea >= 0 && (eb < 0 || pa > pb || (pa == pb && ea < eb));
}

__global__ void route_choose_kernel(int32_t *__restrict__ choice, float *__restrict__ choice_w,
                                    const float *__restrict__ logits, int n, int E, int k, int norm)
{
    __shared__ float p_s[ROUTE_WARPS][CUDA_ROUTE_MAX_EXPERTS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int i = blockIdx.x * ROUTE_WARPS + warp;
    if (i >= n)
        return; /* the whole warp: nothing below syncs the block */
    const float *l = logits + (size_t)i * E;
    float *p = p_s[warp];

    /* p = softmax(l): the max (order-free), expf, the sum in expert order */
    float mx = l[0];
    for (int e = lane; e < E; e += 32)
        mx = l[e] > mx ? l[e] : mx;
    for (int o = 16; o > 0; o >>= 1) {
        const float v = __shfl_xor_sync(FULL_MASK, mx, o);
        mx = v > mx ? v : mx;
    }
    for (int e = lane; e < E; e += 32)
        p[e] = expf(l[e] - mx);
    __syncwarp();
    float sum = 0;
    if (lane == 0)
        for (int e = 0; e < E; e++)
            sum += p[e];
    sum = __shfl_sync(FULL_MASK, sum, 0);
    for (int e = lane; e < E; e += 32)
        p[e] = p[e] / sum;
    __syncwarp();

    /* the top k: lane owns experts lane + 32 c, bit c of taken once chosen */
    int sel[CUDA_ROUTE_MAX_K];
    float wt[CUDA_ROUTE_MAX_K], top = 0;
    unsigned taken = 0;
    for (int j = 0; j < k; j++) {
        float bp = 0;
        int be = -1;
        for (int c = 0; c < ROUTE_PER_LANE && lane + 32 * c < E; c++)
            if (!(taken & (1u << c)) && route_above(p[lane + 32 * c], lane + 32 * c, bp, be)) {
                bp = p[lane + 32 * c];
                be = lane + 32 * c;
            }
        for (int o = 16; o > 0; o >>= 1) { /* a total order: every lane ends alike */
            const float op = __shfl_xor_sync(FULL_MASK, bp, o);
            const int oe = __shfl_xor_sync(FULL_MASK, be, o);
            if (route_above(op, oe, bp, be)) {
                bp = op;
                be = oe;
            }
        }
        if (be % 32 == lane)
            taken |= 1u << (be / 32);
        sel[j] = be;
        wt[j] = bp;
        top += bp;
    }
    if (lane != 0)
        return;
    for (int j = 0; norm && j < k; j++)
        wt[j] = wt[j] / top;
    for (int j = 1; j < k; j++) /* insertion sort of k by expert */
        for (int q = j; q > 0 && sel[q - 1] > sel[q]; q--) {
            const int te = sel[q];
            const float tw = wt[q];
            sel[q] = sel[q - 1];
            wt[q] = wt[q - 1];
            sel[q - 1] = te;
            wt[q - 1] = tw;
        }
    for (int j = 0; j < k; j++) {
        choice[(size_t)i * k + j] = sel[j];
        choice_w[(size_t)i * k + j] = wt[j];
    }
}

/* Thread e counts the tokens that chose expert e, and the real ones among
 * them (real NULL: all), walking the choices in token order: one block of
 * CUDA_ROUTE_MAX_EXPERTS threads, no atomics. */
__global__ void route_count_kernel(int32_t *__restrict__ counts, const int32_t *__restrict__ choice,
                                   int n, int E, int k, const uint8_t *__restrict__ real,
                                   int real_group, int real_stride)
{
    const int e = threadIdx.x;
    if (e >= E)
        return;
    int c = 0, cr = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < k; j++)
            if (choice[(size_t)i * k + j] == e) {
                c++;
                cr += !real || real[(size_t)(i / real_group) * real_stride + i % real_group] != 0;
            }
    counts[e] = c;
    counts[E + e] = cr;
}

/* route_group_kernel's arguments: has holds a bit per expert that gets
 * rows (bit e % 32 of word e / 32), made by the launcher from the range and
 * the host's have. */
struct route_group_args {
    const int32_t *choice, *counts;
    const float *choice_w, *gate;
    int n, E, k, K;
    uint32_t has[CUDA_ROUTE_MAX_EXPERTS / 32];
    int32_t *rows, *slots;
    float *slot_w;
};

__device__ __forceinline__ bool route_has(const struct route_group_args &a, int e)
{
    return (a.has[e / 32] >> (e % 32)) & 1u;
}

/* One block of CUDA_ROUTE_MAX_EXPERTS threads: thread 0 lays out the first
 * row of each expert with rows, in expert order; then thread e writes its
 * rows and the slots that read them walking the tokens in order (the
 * CPU's grouping), and all threads the zeros past the rows and the shared
 * expert's slots. */
__global__ void route_group_kernel(struct route_group_args a)
{
    __shared__ int at_s[CUDA_ROUTE_MAX_EXPERTS], nl_s;
    const int e = threadIdx.x, nk = a.n * a.k;
    if (e == 0) {
        int nl = 0;
        for (int q = 0; q < a.E; q++) {
            at_s[q] = nl;
            nl += route_has(a, q) ? a.counts[q] : 0;
        }
        nl_s = nl;
    }
    __syncthreads();
    const int nl = nl_s;

    /* thread e's rows in token order, and the slots that read them */
    if (e < a.E) {
        const bool mine = route_has(a, e);
        int row = mine ? at_s[e] : nl;
        for (int i = 0; i < a.n; i++)
            for (int j = 0; j < a.k; j++)
                if (a.choice[(size_t)i * a.k + j] == e) {
                    a.slots[(size_t)i * a.K + j] = row;
                    a.slot_w[(size_t)i * a.K + j] = mine ? a.choice_w[(size_t)i * a.k + j] : 0.0f;
                    if (mine)
                        a.rows[row++] = i;
                }
    }
    /* zeros past the rows; the shared expert's slot last, its weight
     * sigmoid(gate) in f32 */
    for (int q = nl + e; q < nk; q += blockDim.x)
        a.rows[q] = 0;
    for (int i = e; a.gate && i < a.n; i += blockDim.x) {
        a.slots[(size_t)i * a.K + a.k] = nk + i;
        a.slot_w[(size_t)i * a.K + a.k] = 1.0f / (1.0f + expf(-a.gate[i]));
    }
}

#endif
