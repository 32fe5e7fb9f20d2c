/* The CUDA kernels' launchers: the only interface between the C host code
 * (cuda_kernels.c, cuda_linear.c) and the .cu files, so it is valid C and
 * C++ and includes nothing of the project (whose headers are C11 only).
 *
 * Every launcher queues its kernel(s) on stream st of the current device
 * (the caller has called cudaSetDevice) and returns cudaGetLastError()
 * after the launch: cudaSuccess, or why the launch failed. Pointers are
 * device addresses; sizes are elements. A launcher with nothing to do (a
 * zero dimension) launches nothing and returns cudaSuccess. Shapes the
 * kernels cannot take (a grid too large) return cudaErrorInvalidValue
 * before launching anything.
 */
#ifndef SHARDSWAP_BACKEND_CUDA_CUDA_LAUNCH_H
#define SHARDSWAP_BACKEND_CUDA_CUDA_LAUNCH_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Weight element types as the kernels know them (the host maps enum dtype). */
enum cuda_wtype {
    CUDA_W_F32 = 0,
    CUDA_W_F16 = 1,
    CUDA_W_BF16 = 2,
};

enum cuda_act {
    CUDA_ACT_RELU = 0,
    CUDA_ACT_GELU = 1,      /* exact, erff */
    CUDA_ACT_GELU_TANH = 2, /* tanh approximation */
    CUDA_ACT_SILU = 3,
};

/* Up to this many input rows a linear layer runs the fused GEMV (gemv.cu):
 * it reads each weight row once for all rows of x, so decode and small
 * batches are bound by HBM bandwidth as they should be. Above, cuBLAS: its
 * tensor-core GEMMs win once the weights are reused enough. The kernel
 * keeps m accumulators per lane in registers, instantiated for 1..this. */
#define CUDA_GEMV_MAX_M 8

/* Largest head_dim cuda_launch_attention takes (each of its 128 threads
 * owns head_dim / 128 output elements, at most 2). */
#define CUDA_ATTN_MAX_HEAD_DIM 256

/* y[m, n] = x[m, k] @ w^T (+ bias[n] when not NULL), 1 <= m <=
 * CUDA_GEMV_MAX_M. w: n rows of k elements of type wtype, row stride ld
 * elements (any alignment of w and ld: 16-byte vector loads only where both
 * allow). x dense f32 (row stride k), y dense (row stride n); f32
 * accumulation. */
cudaError_t cuda_launch_gemv(cudaStream_t st, float *y, const float *x, int m, const void *w,
                             int wtype, int n, int k, size_t ld, const float *bias);

/* dst[i] = x[i] rounded to bf16 (nearest even; NaN stays a quiet NaN),
 * kept in f32: the input of a bf16-mode linear layer. dst may equal x. */
cudaError_t cuda_launch_round_bf16(cudaStream_t st, float *dst, const float *x, size_t n);
/* dst[i] = x[i] as wtype (CUDA_W_F16 or CUDA_W_BF16), nearest even. */
cudaError_t cuda_launch_to_16bit(cudaStream_t st, void *dst, const float *x, size_t n, int wtype);
/* dst[r, cols] (dense) = rows [0, rows) of w (row stride ld, type wtype)
 * widened to f32. */
cudaError_t cuda_launch_widen_rows(cudaStream_t st, float *dst, const void *w, int wtype, int rows,
                                   int cols, size_t ld);
/* y[i, n] += bias[n] for i < m. */
cudaError_t cuda_launch_add_bias(cudaStream_t st, float *y, const float *bias, int m, int n);
/* y[i, cols] = row ids[i] - row0 of w (rows x cols, stride ld, type
 * wtype) widened to f32, or zeros when that row is outside [0, rows). */
cudaError_t cuda_launch_embed(cudaStream_t st, float *y, const void *w, int wtype, int rows,
                              int cols, size_t ld, const int32_t *ids, int n, int row0);

/* LayerNorm over m rows of width n (two passes, double sums); gamma and
 * beta both NULL or both set; y may equal x. */
cudaError_t cuda_launch_layernorm(cudaStream_t st, float *y, const float *x, int m, int n,
                                  const float *gamma, const float *beta, float eps);

/* RMSNorm over m rows of width n (the squares summed in double), then y =
 * (x * rstd) * gamma in f32 as kern_rmsnorm states it; gamma may be NULL; y
 * may equal x. */
cudaError_t cuda_launch_rmsnorm(cudaStream_t st, float *y, const float *x, int m, int n,
                                const float *gamma, float eps);

/* kern_rope (backend/kernels.h) in place on x: n rows of heads * head_dim,
 * the first rot_dim (even, <= head_dim) elements of each head rotated by
 * pos[r] * inv_freq[i], cosf and sinf in f32, times scale. */
cudaError_t cuda_launch_rope(cudaStream_t st, float *x, int n, int heads, int head_dim, int rot_dim,
                             const int32_t *pos, const float *inv_freq, float scale);

/* x = act(x) (enum cuda_act); y += x; x *= a. n elements. */
cudaError_t cuda_launch_activation(cudaStream_t st, float *x, size_t n, int act);
cudaError_t cuda_launch_add(cudaStream_t st, float *y, const float *x, size_t n);
cudaError_t cuda_launch_scale(cudaStream_t st, float *x, size_t n, float a);
/* x = tanh(x / cap) * cap, n elements, cap > 0. */
cudaError_t cuda_launch_softcap(cudaStream_t st, float *x, size_t n, float cap);
/* y[i] = act(gate[i]) * up[i] with act as cuda_launch_activation computes
 * it; y may equal gate or up. */
cudaError_t cuda_launch_gated_act(cudaStream_t st, float *y, const float *gate, const float *up,
                                  size_t n, int act);

/* The cache layout of backend/kernels.h: kc, vc (batch, kv_heads, max_t,
 * head_dim); k, v (batch * t_new, kv_heads * head_dim) written at positions
 * [pos, pos + t_new). */
cudaError_t cuda_launch_kv_append(cudaStream_t st, float *kc, float *vc, const float *k,
                                  const float *v, int batch, int kv_heads, int head_dim, int max_t,
                                  int t_new, int pos);
/* Causal + padding attention of kern_attention (backend/kernels.h), online
 * softmax, no scratch: q and out (batch * t_new, heads * head_dim), query
 * head h reading KV head h / (heads / kv_heads) of the cache. head_dim <=
 * CUDA_ATTN_MAX_HEAD_DIM; heads a multiple of kv_heads; window and softcap
 * as struct kv_geom says them (0: none). */
cudaError_t cuda_launch_attention(cudaStream_t st, float *out, const float *q, const float *kc,
                                  const float *vc, const uint8_t *key_ok, int batch, int heads,
                                  int kv_heads, int head_dim, int max_t, int past, int t_new,
                                  int window, float softcap);

/* y[i, width] = x[rows[i], width] for i < n. */
cudaError_t cuda_launch_gather_rows(cudaStream_t st, float *y, const float *x, const int32_t *rows,
                                    int n, int width);

/* The segmented low-rank update of kern_lora (backend/kernels.h), up to
 * CUDA_LORA_MAX_SEGS segments per launch: their table travels as a kernel
 * argument (copied at the launch, so the host's may be reused at once). */
#define CUDA_LORA_MAX_SEGS 32
struct cuda_lora_seg {
    const void *a, *b; /* lora_A (r, in) and lora_B (out, r), types at and bt */
    size_t lda, ldb;   /* their row strides, elements */
    int row0, rows;    /* rows [row0, row0 + rows) of x, y and t */
    int r, at, bt;     /* the rank; enum cuda_wtype */
    float scale;
};
struct cuda_lora_table {
    struct cuda_lora_seg seg[CUDA_LORA_MAX_SEGS];
    int n; /* segments used, each with rows > 0 */
};
/* For each segment: t[i, j] = x[i, :] . a[j, :] (x and then t rounded to
 * bf16 when round_bf16), then y[i, o] = y[i, o] + scale * (t[i, :] .
 * b[o, :]), products and sums in f32. x (rows, in), y (rows, out) dense; t
 * (rows, ts) with ts >= every r. */
cudaError_t cuda_launch_lora(cudaStream_t st, float *y, const float *x, int in, int out,
                             const struct cuda_lora_table *tab, int round_bf16, float *t, int ts);

#ifdef __cplusplus
}
#endif

#endif
