/* CPU kernels of the transformer forward. Everything computes in f32;
 * weights may be stored in f32, f16 or bf16 and are widened on the fly.
 *
 * A weight is a row-major matrix view with a row stride, so that a tensor
 * parallel slice of a checkpoint tensor (a block of rows for column-parallel
 * layers, a block of columns for row-parallel ones) is a view, not a copy.
 */
#ifndef SHARDSWAP_BACKEND_CPU_KERNELS_H
#define SHARDSWAP_BACKEND_CPU_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "format/opt_config.h"

struct weight_view {
    enum dtype dtype;
    const void *data; /* element (0, 0) */
    int rows, cols;
    size_t ld;        /* elements between the starts of consecutive rows */
};

/* Element (r, 0) of w. */
static inline const void *weight_row(const struct weight_view *w, int r)
{
    return (const char *)w->data + (size_t)r * w->ld * dtype_size(w->dtype);
}

/* y[m, w.rows] = x[m, w.cols] @ w^T (+ bias[w.rows] when not NULL): torch's
 * Linear. x and y are dense (row stride = width). */
void cpu_linear(float *y, const float *x, int m, const struct weight_view *w, const float *bias);

/* Copies rows ids[i] of table w (widened to f32) into y[i, w.cols]. */
void cpu_embed(float *y, const struct weight_view *w, const int32_t *ids, int n);

/* y = LayerNorm(x) over rows of width n; gamma/beta may be NULL (no affine).
 * y may equal x. */
void cpu_layernorm(float *y, const float *x, int m, int n, const float *gamma, const float *beta,
                   float eps);

void cpu_activation(float *x, size_t n, enum opt_act act);

/* y[i] += x[i] */
void cpu_add(float *y, const float *x, size_t n);

/* Causal attention of one sequence against its KV cache.
 * q:      (t_new, n_heads * head_dim), row stride ldq; already scaled.
 * kc, vc: (n_heads, max_t, head_dim) cache of this sequence, positions
 *         [0, past + t_new) filled.
 * key_ok: (past + t_new) 1 where the key is a real token, 0 for padding.
 * out:    (t_new, n_heads * head_dim), row stride ldo.
 * scores: scratch of t_new * (past + t_new) floats.
 * Query t sits at position past + t and attends to keys s <= past + t with
 * key_ok[s]; a query that sees no key (a pad before any real token) gets 0. */
void cpu_attention(float *out, size_t ldo, const float *q, size_t ldq, const float *kc,
                   const float *vc, int n_heads, int head_dim, size_t max_t, int past, int t_new,
                   const uint8_t *key_ok, float *scores);

/* Threads the CPU kernels may use (BLAS included); n < 1 means all cores. */
void cpu_set_threads(int n);
int cpu_threads(void);

/* Makes the calling thread run every kernel on itself alone (no worker pool):
 * the compute thread of a CPU device is one core. BLAS's own thread count is
 * process-wide; set it with cpu_set_threads(1) when devices compute in
 * parallel. */
void cpu_kernels_single_thread(bool alone);

#endif
