/* Causal + padding attention over the KV cache, as kern_attention states it
 * (backend/kernels.h): query t of sequence b sits at position past + t and
 * attends to the keys s <= past + t with key_ok[b * max_t + s] != 0, and
 * s > past + t - window under a window (the tiles start there; key s at row
 * s % ring of a ring, row s otherwise); scores are
 * soft-capped (softcap * tanh(s / softcap)) first when softcap > 0; a query
 * that sees no key gets zeros. q is already scaled. Query head h reads KV
 * head h / (heads / kv_heads) (grouped-query attention; the blocks of one
 * group read the same cache rows, from L2 after the first).
 *
 * One block of ATT_THREADS per (sequence, query head, query), online softmax (no
 * scores matrix, no scratch): the visible keys go by in tiles of ATT_TILE.
 * Per tile:
 *   1. scores: each warp takes ATT_KPW consecutive keys of the tile and
 *      computes their dot products side by side (ATT_KPW independent loads
 *      in flight per lane); its lanes split head_dim (coalesced loads of
 *      each key row), shuffle sums give q . k; masked keys get -inf. Into
 *      s_sh[j]. (Decode is bound by the latency of these loads, not by
 *      bandwidth: one block per (sequence, head).)
 *   2. the tile's max over s_sh (every thread, same order: one answer); a
 *      tile with no visible key is skipped.
 *   3. m_new = max(m, tile max); p_j = exp(s_j - m_new) into s_sh (0 for
 *      masked keys); the running sum l and the output accumulators are
 *      rescaled by exp(m - m_new) (0 on the first visible tile, where m is
 *      -inf) and take the tile's p_j and p_j * v_j.
 * Each thread owns output elements d = tid and tid + ATT_THREADS (head_dim
 * <= 2 * ATT_THREADS), read from v rows coalesced. At the end out = acc / l,
 * or 0 when l == 0 (no key visible).
 *
 * Barriers: s_sh is written in steps 1 and 3 and read by every thread in
 * steps 2 and 3; a __syncthreads separates every write from the reads
 * before and after it (marked below), all reached by the whole block (the
 * branch that skips a tile depends only on shared data, so it is uniform).
 */
#include <math.h>

#include "cuda_common.cuh"

#define ATT_THREADS 128
#define ATT_WARPS (ATT_THREADS / 32)
#define ATT_TILE 64 /* keys per tile; <= ATT_THREADS (step 3: one thread per key) */
#define ATT_PER_THREAD (CUDA_ATTN_MAX_HEAD_DIM / ATT_THREADS)
#define ATT_KPW (ATT_TILE / ATT_WARPS) /* keys per warp in step 1 */
#define ATT_VB 16                      /* rows of v in flight per thread in step 3 */

/* The cache row of key s: s % ring in a ring (ring > 0), else s. */
__device__ __forceinline__ size_t att_row(int s, int ring)
{
    return (size_t)(ring > 0 ? s % ring : s);
}

static_assert(ATT_TILE <= ATT_THREADS, "step 3 gives each key of a tile one thread");
static_assert(ATT_PER_THREAD * ATT_THREADS == CUDA_ATTN_MAX_HEAD_DIM, "head_dim split");
static_assert(ATT_KPW * ATT_WARPS == ATT_TILE, "step 1 covers the tile");

__global__ void __launch_bounds__(ATT_THREADS)
    attention_kernel(float *__restrict__ out, const float *__restrict__ q,
                     const float *__restrict__ kc, const float *__restrict__ vc,
                     const uint8_t *__restrict__ key_ok, int heads, int kv_heads, int head_dim,
                     int max_t, int past, int t_new, int window, float softcap, int ring)
{
    __shared__ float q_sh[CUDA_ATTN_MAX_HEAD_DIM];
    __shared__ float s_sh[ATT_TILE];

    /* block -> (b, h, t), t fastest so that one head's queries share the
     * cache rows in L2 */
    const size_t blk = blockIdx.x;
    const int t = (int)(blk % (size_t)t_new);
    const size_t bh = blk / (size_t)t_new;
    const int h = (int)(bh % (size_t)heads);
    const size_t b = bh / (size_t)heads;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const size_t width = (size_t)heads * head_dim;
    const size_t row = b * (size_t)t_new + (size_t)t; /* of q and out */
    const float *qr = q + row * width + (size_t)h * head_dim;
    float *orow = out + row * width + (size_t)h * head_dim;
    const int kvh = h / (heads / kv_heads);
    const size_t rows = (size_t)(ring > 0 ? ring : max_t);
    const size_t cache0 = (b * (size_t)kv_heads + (size_t)kvh) * rows * head_dim;
    const float *kh = kc + cache0;
    const float *vh = vc + cache0;
    const uint8_t *ok = key_ok + b * (size_t)max_t;
    const int n_keys = past + t + 1; /* keys [0, n_keys) are causally visible */
    const int first = window > 0 && n_keys > window ? n_keys - window : 0; /* and from here */

    for (int d = tid; d < head_dim; d += ATT_THREADS)
        q_sh[d] = qr[d];
    __syncthreads(); /* q_sh written -> read */

    float m = -INFINITY, l = 0.0f;
    float acc[ATT_PER_THREAD];
#pragma unroll
    for (int e = 0; e < ATT_PER_THREAD; e++)
        acc[e] = 0.0f;

    for (int s0 = first; s0 < n_keys; s0 += ATT_TILE) {
        /* 1. scores of this tile: warp w takes keys [w * KPW, (w + 1) * KPW)
         * of it, KPW dot products side by side so their loads overlap */
        {
            const int j0 = warp * ATT_KPW;
            float dot[ATT_KPW];
            size_t krow[ATT_KPW];
#pragma unroll
            for (int u = 0; u < ATT_KPW; u++) {
                dot[u] = 0.0f;
                krow[u] = att_row(s0 + j0 + u, ring) * head_dim;
            }
            for (int d = lane; d < head_dim; d += 32) {
                const float qd = q_sh[d];
#pragma unroll
                for (int u = 0; u < ATT_KPW; u++)
                    if (s0 + j0 + u < n_keys) /* the same in every lane */
                        dot[u] = fmaf(qd, kh[krow[u] + d], dot[u]);
            }
#pragma unroll
            for (int u = 0; u < ATT_KPW; u++) {
                float sc = cuda_warp_sum(dot[u]); /* every lane takes part */
                if (softcap > 0.0f)
                    sc = tanhf(sc / softcap) * softcap;
                const int s = s0 + j0 + u;
                if (lane == 0)
                    s_sh[j0 + u] = s < n_keys && ok[s] ? sc : -INFINITY;
            }
        }
        __syncthreads(); /* scores written -> read */

        /* 2. the tile's max */
        float tmax = -INFINITY;
        for (int j = 0; j < ATT_TILE; j++)
            tmax = fmaxf(tmax, s_sh[j]);
        if (tmax == -INFINITY) { /* nothing visible here: the same answer in every thread */
            __syncthreads();     /* scores read -> next tile's written */
            continue;
        }

        /* 3. probabilities and the running sums */
        const float m_new = fmaxf(m, tmax);
        const float alpha = expf(m - m_new); /* m == -inf: 0 */
        __syncthreads();                     /* scores read -> overwritten */
        if (tid < ATT_TILE) {
            const float sc = s_sh[tid];
            s_sh[tid] = sc == -INFINITY ? 0.0f : expf(sc - m_new);
        }
        __syncthreads(); /* probabilities written -> read */
        float psum = 0.0f;
        for (int j = 0; j < ATT_TILE; j++)
            psum += s_sh[j];
        l = l * alpha + psum;
        const int tile_n = min(ATT_TILE, n_keys - s0);
#pragma unroll
        for (int e = 0; e < ATT_PER_THREAD; e++) {
            const int d = tid + e * ATT_THREADS;
            if (d < head_dim) {
                float a = acc[e] * alpha;
                /* ATT_VB rows of v loaded before they are used; a masked key
                 * (p == 0) is skipped, not multiplied: its row may hold
                 * anything, NaN included */
                for (int j0 = 0; j0 < tile_n; j0 += ATT_VB) {
                    float vv[ATT_VB];
#pragma unroll
                    for (int u = 0; u < ATT_VB; u++)
                        vv[u] =
                            j0 + u < tile_n ? vh[att_row(s0 + j0 + u, ring) * head_dim + d] : 0.0f;
#pragma unroll
                    for (int u = 0; u < ATT_VB; u++) {
                        const float p = j0 + u < tile_n ? s_sh[j0 + u] : 0.0f;
                        if (p != 0.0f)
                            a = fmaf(p, vv[u], a);
                    }
                }
                acc[e] = a;
            }
        }
        m = m_new;
        __syncthreads(); /* probabilities read -> next tile's scores written */
    }

#pragma unroll
    for (int e = 0; e < ATT_PER_THREAD; e++) {
        const int d = tid + e * ATT_THREADS;
        if (d < head_dim)
            orow[d] = l > 0.0f ? acc[e] / l : 0.0f;
    }
}

extern "C" cudaError_t cuda_launch_attention(cudaStream_t st, float *out, const float *q,
                                             const float *kc, const float *vc,
                                             const uint8_t *key_ok, int batch, int heads,
                                             int kv_heads, int head_dim, int max_t, int past,
                                             int t_new, int window, float softcap, int ring)
{
    if (batch <= 0 || heads <= 0 || head_dim <= 0 || t_new <= 0)
        return cudaSuccess;
    if (head_dim > CUDA_ATTN_MAX_HEAD_DIM || past < 0 || (int64_t)past + t_new > max_t ||
        kv_heads <= 0 || heads % kv_heads != 0 || window < 0 || !(softcap >= 0.0f) || ring < 0 ||
        (ring > 0 && (window == 0 || (int64_t)window + t_new - 1 > ring)))
        return cudaErrorInvalidValue;
    const size_t blocks = (size_t)batch * (size_t)heads * (size_t)t_new;
    if (blocks > 0x7fffffffu)
        return cudaErrorInvalidValue;
    attention_kernel<<<(unsigned)blocks, ATT_THREADS, 0, st>>>(out, q, kc, vc, key_ok, heads,
                                                               kv_heads, head_dim, max_t, past,
                                                               t_new, window, softcap, ring);
    return cudaGetLastError();
}
