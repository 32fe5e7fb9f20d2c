/* The segmented low-rank update of LoRA adapters (kern_lora): two launches
 * over every segment of a table (cuda_launch.h), Punica's SGMV split into
 * its shrink and its expansion.
 *
 * - shrink: one warp per (row, rank index): t[i, j] = x[i, :] . A[j, :],
 *   the lanes striding over the columns, summed by shuffles; x rounded to
 *   bf16 as it is read and t rounded when written, in bf16 mode.
 * - expansion: one thread per (row, output): u = t[i, :] . B[o, :] over the
 *   rank (a few dozen), then y = y + scale * u, the product and the sum
 *   each rounded (no contraction into an FMA, as the CPU computes it).
 * A segment is blockIdx.y; blocks past a segment's work return at once.
 * Simple rather than fast: the weights of an adapter are small, and each
 * row reads its pair's from L2 after the first. */
#include "cuda_common.cuh"

#define LORA_WARPS 8
#define LORA_THREADS (LORA_WARPS * 32)

__device__ __forceinline__ float lora_w(const void *w, int wt, size_t i)
{
    switch (wt) {
    case CUDA_W_F16:
        return cuda_load_w<CUDA_W_F16>(w, i);
    case CUDA_W_BF16:
        return cuda_load_w<CUDA_W_BF16>(w, i);
    default:
        return cuda_load_w<CUDA_W_F32>(w, i);
    }
}

__global__ void __launch_bounds__(LORA_THREADS)
    lora_shrink_kernel(const struct cuda_lora_table tab, const float *__restrict__ x, int in,
                       float *__restrict__ t, int ts, int round_bf16)
{
    const struct cuda_lora_seg *sg = &tab.seg[blockIdx.y];
    const long long item = (long long)blockIdx.x * LORA_WARPS + (threadIdx.x >> 5);
    if (item >= (long long)sg->rows * sg->r)
        return; /* the whole warp */
    const int lane = threadIdx.x & 31;
    const int i = sg->row0 + (int)(item / sg->r), j = (int)(item % sg->r);
    const float *xr = x + (size_t)i * in;
    const size_t w0 = (size_t)j * sg->lda;
    float acc = 0.0f;
    for (int c = lane; c < in; c += 32) {
        float xv = xr[c];
        if (round_bf16)
            xv = cuda_bf16_round(xv);
        acc = fmaf(lora_w(sg->a, sg->at, w0 + c), xv, acc);
    }
    acc = cuda_warp_sum(acc);
    if (lane == 0)
        t[(size_t)i * ts + j] = round_bf16 ? cuda_bf16_round(acc) : acc;
}

__global__ void __launch_bounds__(LORA_THREADS)
    lora_expand_kernel(const struct cuda_lora_table tab, float *__restrict__ y, int out,
                       const float *__restrict__ t, int ts)
{
    const struct cuda_lora_seg *sg = &tab.seg[blockIdx.y];
    const long long item = (long long)blockIdx.x * LORA_THREADS + threadIdx.x;
    if (item >= (long long)sg->rows * out)
        return;
    const int i = sg->row0 + (int)(item / out), o = (int)(item % out);
    const float *tr = t + (size_t)i * ts;
    const size_t w0 = (size_t)o * sg->ldb;
    float u = 0.0f;
    for (int j = 0; j < sg->r; j++)
        u = fmaf(tr[j], lora_w(sg->b, sg->bt, w0 + j), u);
    float *yo = y + (size_t)i * out + o;
    *yo = __fadd_rn(*yo, __fmul_rn(sg->scale, u));
}

extern "C" cudaError_t cuda_launch_lora(cudaStream_t st, float *y, const float *x, int in, int out,
                                        const struct cuda_lora_table *tab, int round_bf16, float *t,
                                        int ts)
{
    if (tab->n <= 0 || in <= 0 || out <= 0)
        return cudaSuccess;
    if (tab->n > CUDA_LORA_MAX_SEGS)
        return cudaErrorInvalidValue;
    long long shrink_items = 0, expand_items = 0;
    for (int s = 0; s < tab->n; s++) {
        const struct cuda_lora_seg *sg = &tab->seg[s];
        if (sg->rows <= 0 || sg->r <= 0 || sg->r > ts)
            return cudaErrorInvalidValue;
        const long long si = (long long)sg->rows * sg->r, ei = (long long)sg->rows * out;
        shrink_items = si > shrink_items ? si : shrink_items;
        expand_items = ei > expand_items ? ei : expand_items;
    }
    const long long sb = (shrink_items + LORA_WARPS - 1) / LORA_WARPS;
    const long long eb = (expand_items + LORA_THREADS - 1) / LORA_THREADS;
    if (sb > 0x7fffffffLL || eb > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    lora_shrink_kernel<<<dim3((unsigned)sb, (unsigned)tab->n), LORA_THREADS, 0, st>>>(
        *tab, x, in, t, ts, round_bf16);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    lora_expand_kernel<<<dim3((unsigned)eb, (unsigned)tab->n), LORA_THREADS, 0, st>>>(*tab, y, out,
                                                                                      t, ts);
    return cudaGetLastError();
}
