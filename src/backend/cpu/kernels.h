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

/* kern_lora (backend/kernels.h) on host pointers, over the kernel pool
 * (lora.c); scratch holds the rank-r intermediates. 0, or ERR_NOMEM with a
 * message when a scratch buffer cannot grow. */
int cpu_lora(float *y, const float *x, int m, int nseg, const int *seg,
             const struct lora_pair *pairs, enum kern_compute c, float *scratch);

/* Copies rows ids[i] of table w (widened to f32) into y[i, w.cols]; a
 * packed table's row written back first (cpu_qlinear_row). 0, or
 * ERR_NOMEM when the row's scratch cannot grow. */
int cpu_embed(float *y, const struct weight_view *w, const int32_t *ids, int n);

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

/* x[i] *= a */
void cpu_scale(float *x, size_t n, float a);

/* x[i] = cap * tanh(x[i] / cap) */
void cpu_softcap(float *x, size_t n, float cap);

/* kern_route_topk and kern_route_group (backend/kernels.h) on host
 * pointers (route.c). */
int cpu_route_topk(const float *logits, const struct kern_route *r,
                   const struct kern_route_out *out);
int cpu_route_group(const struct kern_route *r, const struct kern_route_out *out);

/* Causal attention of every sequence's t_new queries against its KV cache,
 * over the kernel pool (scores in each task thread's scratch).
 * q:      (batch, t_new, heads * head_dim) dense; already scaled.
 * kc, vc: (batch, kv_heads, max_t, head_dim) caches, positions
 *         [0, past + t_new) filled (or rings of g->ring rows: struct
 *         kv_geom); query head h reads KV head h / (heads / kv_heads).
 * key_ok: (batch, max_t) 1 where the key is a real token, 0 for padding.
 * out:    (batch, t_new, heads * head_dim) dense.
 * Query t sits at position past + t and attends to keys s <= past + t with
 * key_ok[s] (and s > past + t - g->window under a window; scores soft-capped
 * first under g->softcap: backend/kernels.h); a query that sees no key (a pad before any real
 * token) gets 0. 0, or ERR_NOMEM with a message when a scratch buffer cannot grow. */
int cpu_attention(const struct kv_geom *g, float *out, const float *q, const float *kc,
                  const float *vc, const uint8_t *key_ok, int past, int t_new);
/* Whether cpu_attention gives a few query rows (a decode step's group of
 * heads) attn_vec.h's products where the CPU has them (the default), or
 * sgemm as a prefill's blocks: for tests and A/B timings. Not while an
 * attention runs. */
void cpu_attention_vec(bool on);

#include "backend/cpu/cpu.h"

#endif
