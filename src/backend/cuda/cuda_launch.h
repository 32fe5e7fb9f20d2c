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

/* The block types as the kernels know them (the host maps enum dtype):
 * GGUF's (core/quant.h has the layouts), then compressed-tensors' (core/
 * quant_ct.h), which only the dequantizing copies and cuda_launch_ctgemv
 * take. */
enum cuda_qtype {
    CUDA_Q8_0 = 0,
    CUDA_Q4_0 = 1,
    CUDA_Q5_0 = 2,
    CUDA_Q5_1 = 3,
    CUDA_Q4_K = 4,
    CUDA_Q5_K = 5,
    CUDA_Q6_K = 6,
    CUDA_CT_I8 = 7,
    CUDA_CT_I4 = 8,
    CUDA_CT_F8 = 9,
};

/* Elements per block of a qtype: 256 for the K-quants, else 32. */
static inline int cuda_qtype_qk(int qtype)
{
    return qtype >= CUDA_Q4_K && qtype <= CUDA_Q6_K ? 256 : 32;
}
static inline int cuda_qtype_is_ct(int qtype)
{
    return qtype >= CUDA_CT_I8 && qtype <= CUDA_CT_F8;
}

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

/* ---- block-type weights (qgemv.cu, ctgemv.cu, qconvert.cu) ----
 * w: n (or rows) rows of k (or cols) elements of block type qtype, whole
 * blocks, row_bytes apart (a column slice on block boundaries is a view
 * with row_bytes larger than its own blocks); for GGUF's types w and
 * row_bytes even (every block starts at an even address), else
 * cudaErrorMisalignedAddress; compressed-tensors' take any address. */

/* x quantized for the integer dot products of cuda_launch_qgemv_dot, as
 * the CPU backend quantizes it: per block of 32 to Q8_0 (d = amax / 127
 * rounded to f16, q = roundf(x / d)) for Q8_0/Q4_0/Q5_0/Q5_1 weights, of
 * 256 to Q8_K (the element of largest magnitude, the first of equals, maps
 * to -127; nearest even; d = 1 / scale in f32) for the K-quants. Layout in
 * xq: the quants int8 (m, k) dense, then the scales f32 (m, k / block) at
 * byte cuda_qx_scales_at(m, k). */
static inline size_t cuda_qx_scales_at(int m, int k)
{
    return ((size_t)m * (size_t)k + 255) / 256 * 256;
}
static inline size_t cuda_qx_bytes(int qtype, int m, int k)
{
    return cuda_qx_scales_at(m, k) + (size_t)m * (size_t)(k / cuda_qtype_qk(qtype)) * sizeof(float);
}
cudaError_t cuda_launch_quantize_x(cudaStream_t st, void *xq, const float *x, int m, int k,
                                   int qtype);
/* y[m, n] = xq @ w^T (+ bias) for 1 <= m <= CUDA_GEMV_MAX_M, xq what
 * cuda_launch_quantize_x made of x[m, k]: each block's integer dot product
 * exactly (dp4a), then scaled and summed in f32 in the CPU backend's order
 * (block b into partial b % 8 by fmaf, the partials summed as qdot_sum8):
 * the CPU's bf16-mode result. One warp per weight row. */
cudaError_t cuda_launch_qgemv_dot(cudaStream_t st, float *y, const void *xq, int m, const void *w,
                                  int qtype, int n, int k, size_t row_bytes, const float *bias);
/* y[m, n] = x[m, k] @ w^T (+ bias), 1 <= m <= CUDA_GEMV_MAX_M, the weights
 * dequantized exactly in registers and multiplied in f32 (f32 mode). */
cudaError_t cuda_launch_qgemv_f32(cudaStream_t st, float *y, const float *x, int m, const void *w,
                                  int qtype, int n, int k, size_t row_bytes, const float *bias);
/* y[m, n] = x[m, k] @ w^T (+ bias), 1 <= m <= CUDA_GEMV_MAX_M, w in a
 * compressed-tensors type (cuda_qtype_is_ct): each element dequantized
 * exactly in registers (rounded to bf16 when round_bf16: bf16 mode, with
 * x already rounded by the caller), f32 products and sums. One warp per
 * weight row, 4 lanes per block. */
cudaError_t cuda_launch_ctgemv(cudaStream_t st, float *y, const float *x, int m, const void *w,
                               int qtype, int n, int k, size_t row_bytes, const float *bias,
                               int round_bf16);
/* dst[r, cols] (dense) = rows [0, rows) of w dequantized, as f32
 * (to_bf16 0) or rounded to bf16 (to_bf16 1: 16-bit elements). */
cudaError_t cuda_launch_dequant_rows(cudaStream_t st, void *dst, int to_bf16, const void *w,
                                     int qtype, int rows, int cols, size_t row_bytes);
/* cuda_launch_embed with a block-type table: row ids[i] - row0 of w
 * dequantized, or zeros outside [0, rows). */
cudaError_t cuda_launch_qembed(cudaStream_t st, float *y, const void *w, int qtype, int rows,
                               int cols, size_t row_bytes, const int32_t *ids, int n, int row0);

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
 * head_dim), or (batch, kv_heads, ring, head_dim) with position p at row
 * p % ring when ring > 0; k, v (batch * t_new, kv_heads * head_dim) written
 * at positions [pos, pos + t_new). */
cudaError_t cuda_launch_kv_append(cudaStream_t st, float *kc, float *vc, const float *k,
                                  const float *v, int batch, int kv_heads, int head_dim, int max_t,
                                  int t_new, int pos, int ring);
/* Causal + padding attention of kern_attention (backend/kernels.h), online
 * softmax, no scratch: q and out (batch * t_new, heads * head_dim), query
 * head h reading KV head h / (heads / kv_heads) of the cache. head_dim <=
 * CUDA_ATTN_MAX_HEAD_DIM; heads a multiple of kv_heads; window, softcap
 * and ring as struct kv_geom says them (0: none). */
cudaError_t cuda_launch_attention(cudaStream_t st, float *out, const float *q, const float *kc,
                                  const float *vc, const uint8_t *key_ok, int batch, int heads,
                                  int kv_heads, int head_dim, int max_t, int past, int t_new,
                                  int window, float softcap, int ring);

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

/* y[i, width] = sum over j < k of w[i * k + j] * x[rows[i * k + j], width],
 * in j order, each product rounded before it is added (kern_combine_rows). */
cudaError_t cuda_launch_combine_rows(cudaStream_t st, float *y, const float *x, const int32_t *rows,
                                     const float *w, int n, int k, int width);

/* The most experts and choices per token cuda_launch_route_topk takes
 * (backend/kernels.h's KERN_ROUTE_MAX_EXPERTS and KERN_ROUTE_MAX_K). */
#define CUDA_ROUTE_MAX_EXPERTS 256
#define CUDA_ROUTE_MAX_K 16

/* kern_route_topk (backend/kernels.h) for logits (n, E) (route.cu): choice
 * and choice_w (n, k), counts (2, E); real NULL or read at (i /
 * real_group) * real_stride + i % real_group. Two launches, the second
 * one block. */
cudaError_t cuda_launch_route_topk(cudaStream_t st, const float *logits, int n, int E, int k,
                                   int norm, const uint8_t *real, int real_group, int real_stride,
                                   int32_t *choice, float *choice_w, int32_t *counts);
/* kern_route_group from what cuda_launch_route_topk wrote: rows (n * k),
 * slots and slot_w (n, K) with K = k + (gate != NULL); the experts in
 * [eb, ee) with have[e] (host memory, E bytes, or NULL: all) get rows.
 * One block. */
cudaError_t cuda_launch_route_group(cudaStream_t st, const int32_t *choice, const float *choice_w,
                                    const int32_t *counts, int n, int E, int k, int eb, int ee,
                                    const uint8_t *have, int K, const float *gate, int32_t *rows,
                                    int32_t *slots, float *slot_w);

#ifdef __cplusplus
}
#endif

#endif
