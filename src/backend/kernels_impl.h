/* What a backend implements for backend/kernels.h: one static const table
 * per backend, with designated initializers, handed to device_create().
 * A slot left NULL is an op the backend does not run (kernels.h: enum
 * kern_op): kern_supports answers false for it, registration refuses a
 * model that needs it there and the wrapper refuses the call. Only the
 * copies to_host and to_device are required, and attention_scratch where
 * attention is filled (device_create asserts them). The wrappers in
 * kernels.c have checked the arguments: a backend sees valid shapes and
 * non-NULL buffers only, and only ops its table runs. Slots are called on
 * the thread that owns the stream. */
#ifndef SHARDSWAP_BACKEND_KERNELS_IMPL_H
#define SHARDSWAP_BACKEND_KERNELS_IMPL_H

#include "backend/kernels.h"

struct kernel_ops {
    int (*linear)(struct stream *s, float *y, const float *x, int m, const struct weight_view *w,
                  const float *bias, enum kern_compute c);
    /* optional: NULL runs the jobs one linear each (kernels.c) */
    int (*linear_group)(struct stream *s, const struct kern_linear_job *jobs, int n,
                        enum kern_compute c);
    int (*embed)(struct stream *s, float *y, const struct weight_view *w, const int32_t *ids, int n,
                 int row0);
    int (*layernorm)(struct stream *s, float *y, const float *x, int m, int n, const float *gamma,
                     const float *beta, float eps);
    int (*rmsnorm)(struct stream *s, float *y, const float *x, int m, int n, const float *gamma,
                   float eps);
    int (*rope)(struct stream *s, float *x, int n, int heads, int head_dim, int rot_dim,
                const int32_t *pos, const float *inv_freq, float scale);
    int (*activation)(struct stream *s, float *x, size_t n, enum kern_act act);
    int (*gated_act)(struct stream *s, float *y, const float *gate, const float *up, size_t n,
                     enum kern_act act);
    int (*add)(struct stream *s, float *y, const float *x, size_t n);
    int (*scale)(struct stream *s, float *x, size_t n, float a);
    int (*softcap)(struct stream *s, float *x, size_t n, float cap);
    int (*kv_append)(struct stream *s, float *kc, float *vc, const float *k, const float *v,
                     const struct kv_geom *g, int t_new, int pos);
    int (*attention)(struct stream *s, float *out, const float *q, const float *kc, const float *vc,
                     const uint8_t *key_ok, const struct kv_geom *g, int past, int t_new,
                     float *scratch);
    size_t (*attention_scratch)(const struct kv_geom *g, int t_new, int t_all);
    int (*gather_rows)(struct stream *s, float *y, const float *x, const int32_t *rows, int n,
                       int width);
    int (*copy)(struct stream *s, void *dst, const void *src, size_t n);
    int (*combine_rows)(struct stream *s, float *y, const float *x, const int32_t *rows,
                        const float *w, int n, int k, int width);
    /* both or neither: KERN_OP_ROUTE_TOPK */
    int (*route_topk)(struct stream *s, const float *logits, const struct kern_route *r,
                      const struct kern_route_out *out);
    int (*route_group)(struct stream *s, const struct kern_route *r,
                       const struct kern_route_out *out);
    int (*lora)(struct stream *s, float *y, const float *x, int m, int nseg, const int *seg,
                const struct lora_pair *pairs, enum kern_compute c, float *scratch);
    int (*to_host)(struct stream *s, void *host, const void *src, size_t n);
    int (*to_device)(struct stream *s, void *dst, const void *host, size_t n);
    /* kern_weight_pack's answer for a block type (NULL: rows) */
    enum weight_pack (*weight_pack)(enum dtype t);

    /* What the filled slots declare they refuse: ops (KERN_OP_BITs: an
     * activation kind, a linear's bias, attention's window or soft-cap) and the largest head_dim
     * attention takes (0: any). */
    uint64_t lacks;
    int attention_max_head_dim;
};

/* The ops table k runs (KERN_OP_BITs): its filled slots less k->lacks. */
uint64_t kern_table_ops(const struct kernel_ops *k);

#endif
