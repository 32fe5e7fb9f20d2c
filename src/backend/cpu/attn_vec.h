/* The two products of attention over a few query rows (a decode step's
 * group of query heads against one KV head's cache): the scores q k^T and
 * the weighted sum of the values P v, each reading the keys or values once
 * from memory in a single pass for all the rows. Bound by that read, not
 * by the multiplies: OpenBLAS's sgemm at 4 x 144 x 64 spent more in its
 * call and packing than in the products. Each row's sums are the same
 * whatever the number of rows. kernels.c uses them for every block where
 * attn_vec_have() (AVX-512 F, or AVX2 and FMA: attn_vec.c picks the width)
 * and the head fits, and sgemm elsewhere. Internal to backend/cpu/. */
#ifndef SHARDSWAP_BACKEND_CPU_ATTN_VEC_H
#define SHARDSWAP_BACKEND_CPU_ATTN_VEC_H

#include <stdbool.h>
#include <stddef.h>

/* The widest head they take. */
#define ATTN_VEC_MAX_HEAD_DIM 256

/* Whether the CPU runs the kernels below. */
bool attn_vec_have(void);

/* s[r * lds + j] = q_r . k_j for rows r < rows (q_r at q + r * ldq) and the
 * keys j < n (k_j at k + j * head_dim, dense), each sum in f32 over
 * head_dim (any width up to ATTN_VEC_MAX_HEAD_DIM). The keys are
 * prefetched ahead of the products and, unless v is NULL, the values the
 * next call reads (v's first n rows, as k's) into L2 alongside: two
 * streams in flight rather than one, then one after the other. */
void attn_scores(float *s, size_t lds, const float *q, size_t ldq, int rows, int head_dim,
                 const float *k, const float *v, int n);

/* out_r (+)= sum over j < n of p[r * ldp + j] * v_j for rows r < rows
 * (out_r at out + r * ldo; v_j at v + j * head_dim, dense); add: added to
 * what out holds, else written. */
void attn_values(float *out, size_t ldo, const float *p, size_t ldp, int rows, int head_dim,
                 const float *v, int n, bool add);

/* The two widths' (attn_avx512.c, attn_avx2.c): only where the CPU has
 * their sets. */
void attn_scores_avx512(float *s, size_t lds, const float *q, size_t ldq, int rows, int head_dim,
                        const float *k, const float *v, int n);
void attn_values_avx512(float *out, size_t ldo, const float *p, size_t ldp, int rows, int head_dim,
                        const float *v, int n, bool add);
void attn_scores_avx2(float *s, size_t lds, const float *q, size_t ldq, int rows, int head_dim,
                      const float *k, const float *v, int n);
void attn_values_avx2(float *out, size_t ldo, const float *p, size_t ldp, int rows, int head_dim,
                      const float *v, int n, bool add);

#endif
