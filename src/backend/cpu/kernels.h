/* The CPU backend's kernels, on host pointers: internal to backend/cpu/.
 * Everything above the backend calls them through the kernel table
 * (backend/kernels.h). Everything computes in f32; weights may be stored in
 * f32, f16 or bf16 and are widened on the fly.
 */
#ifndef SHARDSWAP_BACKEND_CPU_KERNELS_H
#define SHARDSWAP_BACKEND_CPU_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/kernels.h"
#include "backend/weight.h"
#include "core/dtype.h"

/* y[m, w.rows] = x[m, w.cols] @ w^T (+ bias[w.rows] when not NULL): torch's
 * Linear, in precision c (backend/kernels.h). x and y are dense (row stride
 * = width). 0, or ERR_NOMEM (with a message) when a scratch buffer cannot
 * grow. */
int cpu_linear(float *y, const float *x, int m, const struct weight_view *w, const float *bias,
               enum kern_compute c);

/* Copies rows ids[i] of table w (widened to f32) into y[i, w.cols]. */
void cpu_embed(float *y, const struct weight_view *w, const int32_t *ids, int n);

/* y = LayerNorm(x) over rows of width n; gamma/beta may be NULL (no affine).
 * y may equal x. */
void cpu_layernorm(float *y, const float *x, int m, int n, const float *gamma, const float *beta,
                   float eps);

/* y = x * rsqrt(mean(x^2) + eps) * gamma over rows of width n, as
 * kern_rmsnorm (backend/kernels.h); gamma may be NULL. y may equal x. */
void cpu_rmsnorm(float *y, const float *x, int m, int n, const float *gamma, float eps);

/* Rotary embedding of kern_rope (backend/kernels.h), in place on n rows of
 * heads * head_dim. */
void cpu_rope(float *x, int n, int heads, int head_dim, int rot_dim, const int32_t *pos,
              const float *inv_freq, float scale);

void cpu_activation(float *x, size_t n, enum kern_act act);

/* y[i] = act(gate[i]) * up[i], act exactly as cpu_activation computes it;
 * y may equal gate or up. */
void cpu_gated_act(float *y, const float *gate, const float *up, size_t n, enum kern_act act);

/* y[i] += x[i] */
void cpu_add(float *y, const float *x, size_t n);

/* Causal attention of one sequence against its KV cache.
 * q:      (t_new, n_heads * head_dim), row stride ldq; already scaled.
 * kc, vc: (n_kv_heads, max_t, head_dim) cache of this sequence, positions
 *         [0, past + t_new) filled; query head h reads KV head
 *         h / (n_heads / n_kv_heads).
 * key_ok: (past + t_new) 1 where the key is a real token, 0 for padding.
 * out:    (t_new, n_heads * head_dim), row stride ldo.
 * scores: scratch of cpu_attention_scratch(n_heads, n_kv_heads, t_new,
 *         past + t_new) floats.
 * Query t sits at position past + t and attends to keys s <= past + t with
 * key_ok[s]; a query that sees no key (a pad before any real token) gets 0. */
void cpu_attention(float *out, size_t ldo, const float *q, size_t ldq, const float *kc,
                   const float *vc, int n_heads, int n_kv_heads, int head_dim, size_t max_t,
                   int past, int t_new, const uint8_t *key_ok, float *scores);

/* Floats of scores cpu_attention needs for t_new queries over t_all keys:
 * also enough for every call with fewer queries or keys (one head's
 * (t_new, t_all) scores at a time, or in a decode step a group's
 * (n_heads / n_kv_heads, t_all)). */
size_t cpu_attention_scratch(int n_heads, int n_kv_heads, int t_new, int t_all);

#include "backend/cpu/cpu.h"

#endif
