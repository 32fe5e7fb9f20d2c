/* The CPU backend's kernel table: the kernels of cpu/kernels.c on host
 * pointers, run at once on the calling thread (a CPU stream is synchronous:
 * its compute thread is the caller). */
#include <string.h>

#include "backend/cpu/cpu_impl.h"
#include "backend/cpu/ctlinear.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/qlinear.h"
#include "backend/kernels_impl.h"
#include "core/quant_ct.h"

static int k_linear(struct stream *s, float *y, const float *x, int m, const struct weight_view *w,
                    const float *bias, enum kern_compute c)
{
    (void)s;
    return cpu_linear(y, x, m, w, bias, c);
}

/* The kinds of weights a group's jobs of a few rows are run by: each kind
 * has its own group entry point (one run of the pool for its jobs). */
enum k_group_kind { K_GROUP_PLAIN, K_GROUP_GGUF, K_GROUP_CT, K_GROUP_KINDS };

static enum k_group_kind k_group_kind_of(enum dtype t)
{
    return quant_ct_is(t) ? K_GROUP_CT : dtype_is_block(t) ? K_GROUP_GGUF : K_GROUP_PLAIN;
}

/* The n jobs' products as one group of their kind, then each job's bias
 * added row by row (cpu_linear's f32 adds, so the same bits). */
static int k_group_flush(enum k_group_kind kind, const struct kern_linear_job *jobs, int n,
                         enum kern_compute c)
{
    if (n == 0)
        return 0;
    int rc = kind == K_GROUP_GGUF ? cpu_qlinear_group(jobs, n, c)
             : kind == K_GROUP_CT ? cpu_ctlinear_group(jobs, n, c)
                                  : cpu_gemv_group(jobs, n, c);
    for (int i = 0; rc == 0 && i < n; i++)
        for (int r = 0; jobs[i].bias && r < jobs[i].m; r++)
            cpu_add(jobs[i].y + (size_t)r * jobs[i].w.rows, jobs[i].bias, (size_t)jobs[i].w.rows);
    return rc;
}

/* The jobs of a few rows each as one run of the pool per kind of weights
 * (plain: cpu_gemv_group; GGUF block types, mixed: cpu_qlinear_group;
 * compressed-tensors': cpu_ctlinear_group), in batches of
 * CPU_GEMV_GROUP_MAX; the others one cpu_linear each. */
static int k_linear_group(struct stream *s, const struct kern_linear_job *jobs, int n,
                          enum kern_compute c)
{
    (void)s;
    struct kern_linear_job few[K_GROUP_KINDS][CPU_GEMV_GROUP_MAX];
    int nf[K_GROUP_KINDS] = {0};
    for (int i = 0; i < n; i++) {
        const struct kern_linear_job *j = &jobs[i];
        if (j->m > CPU_GEMV_MAX_M) {
            int rc = cpu_linear(j->y, j->x, j->m, &j->w, j->bias, c);
            if (rc < 0)
                return rc;
            continue;
        }
        const enum k_group_kind kind = k_group_kind_of(j->w.dtype);
        few[kind][nf[kind]++] = *j;
        if (nf[kind] == CPU_GEMV_GROUP_MAX) {
            int rc = k_group_flush(kind, few[kind], nf[kind], c);
            if (rc < 0)
                return rc;
            nf[kind] = 0;
        }
    }
    for (int kind = 0; kind < K_GROUP_KINDS; kind++) {
        int rc = k_group_flush(kind, few[kind], nf[kind], c);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int k_embed(struct stream *s, float *y, const struct weight_view *w, const int32_t *ids,
                   int n, int row0)
{
    (void)s;
    for (int i = 0; i < n; i++) {
        int32_t r = ids[i] - row0;
        if (r >= 0 && r < w->rows) {
            const int rc = cpu_embed(y + (size_t)i * w->cols, w, &r, 1);
            if (rc < 0)
                return rc;
        } else {
            memset(y + (size_t)i * w->cols, 0, (size_t)w->cols * sizeof(float));
        }
    }
    return 0;
}

static int k_layernorm(struct stream *s, float *y, const float *x, int m, int n, const float *gamma,
                       const float *beta, float eps)
{
    (void)s;
    cpu_layernorm(y, x, m, n, gamma, beta, eps);
    return 0;
}

static int k_rmsnorm(struct stream *s, float *y, const float *x, int m, int n, const float *gamma,
                     float eps)
{
    (void)s;
    cpu_rmsnorm(y, x, m, n, gamma, eps);
    return 0;
}

static int k_rope(struct stream *s, float *x, int n, int heads, int head_dim, int rot_dim,
                  const int32_t *pos, const float *inv_freq, float scale)
{
    (void)s;
    cpu_rope(x, n, heads, head_dim, rot_dim, pos, inv_freq, scale);
    return 0;
}

static int k_activation(struct stream *s, float *x, size_t n, enum kern_act act)
{
    (void)s;
    cpu_activation(x, n, act);
    return 0;
}

static int k_gated_act(struct stream *s, float *y, const float *gate, const float *up, size_t n,
                       enum kern_act act)
{
    (void)s;
    cpu_gated_act(y, gate, up, n, act);
    return 0;
}

static int k_add(struct stream *s, float *y, const float *x, size_t n)
{
    (void)s;
    cpu_add(y, x, n);
    return 0;
}

static int k_scale(struct stream *s, float *x, size_t n, float a)
{
    (void)s;
    cpu_scale(x, n, a);
    return 0;
}

/* Cache rows of sequence b: (kv_heads, rows, head_dim), rows max_t or the
 * ring's. */
static size_t kv_seq(const struct kv_geom *g, int b)
{
    return (size_t)b * g->kv_heads * (g->ring ? g->ring : g->max_t) * g->head_dim;
}

static int k_kv_append(struct stream *s, float *kc, float *vc, const float *k, const float *v,
                       const struct kv_geom *g, int t_new, int pos)
{
    (void)s;
    const int hd = g->head_dim, width = g->kv_heads * hd, rows = g->ring ? g->ring : g->max_t;
    for (int b = 0; b < g->batch; b++)
        for (int t = 0; t < t_new; t++)
            for (int h = 0; h < g->kv_heads; h++) {
                size_t src = ((size_t)b * t_new + t) * width + (size_t)h * hd;
                size_t dst = kv_seq(g, b) + ((size_t)h * rows + (pos + t) % rows) * hd;
                memcpy(kc + dst, k + src, (size_t)hd * sizeof(float));
                memcpy(vc + dst, v + src, (size_t)hd * sizeof(float));
            }
    return 0;
}

static int k_softcap(struct stream *s, float *x, size_t n, float cap)
{
    (void)s;
    cpu_softcap(x, n, cap);
    return 0;
}

static int k_attention(struct stream *s, float *out, const float *q, const float *kc,
                       const float *vc, const uint8_t *key_ok, const struct kv_geom *g, int past,
                       int t_new, float *scratch)
{
    (void)s;
    (void)scratch;
    return cpu_attention(g, out, q, kc, vc, key_ok, past, t_new);
}

/* None from the context: the scores live in each task thread's scratch. */
static size_t k_attention_scratch(const struct kv_geom *g, int t_new, int t_all)
{
    (void)g;
    (void)t_new;
    (void)t_all;
    return 0;
}

static int k_gather_rows(struct stream *s, float *y, const float *x, const int32_t *rows, int n,
                         int width)
{
    (void)s;
    for (int i = 0; i < n; i++)
        memcpy(y + (size_t)i * width, x + (size_t)rows[i] * width, (size_t)width * sizeof(float));
    return 0;
}

static int k_combine_rows(struct stream *s, float *y, const float *x, const int32_t *rows,
                          const float *w, int n, int k, int width)
{
    (void)s;
    for (int i = 0; i < n; i++) {
        float *out = y + (size_t)i * width;
        for (int j = 0; j < k; j++) {
            const float *in = x + (size_t)rows[(size_t)i * k + j] * width, a = w[(size_t)i * k + j];
            for (int c = 0; c < width; c++) {
                const float p = a * in[c]; /* rounded, then added, as torch does */
                out[c] = j ? out[c] + p : p;
            }
        }
    }
    return 0;
}

static int k_route_topk(struct stream *s, const float *logits, const struct kern_route *r,
                        const struct kern_route_out *out)
{
    (void)s;
    return cpu_route_topk(logits, r, out);
}

static int k_route_group(struct stream *s, const struct kern_route *r,
                         const struct kern_route_out *out)
{
    (void)s;
    return cpu_route_group(r, out);
}

static int k_copy(struct stream *s, void *dst, const void *src, size_t n)
{
    (void)s;
    memcpy(dst, src, n);
    return 0;
}

static int k_lora(struct stream *s, float *y, const float *x, int m, int nseg, const int *seg,
                  const struct lora_pair *pairs, enum kern_compute c, float *scratch)
{
    (void)s;
    return cpu_lora(y, x, m, nseg, seg, pairs, c, scratch);
}

static enum weight_pack k_weight_pack(enum dtype t)
{
    return cpu_qlinear_packs(t) ? WEIGHT_PACK_X16 : WEIGHT_PACK_ROWS;
}

const struct kernel_ops cpu_kernel_ops = {
    .linear = k_linear,
    .linear_group = k_linear_group,
    .embed = k_embed,
    .layernorm = k_layernorm,
    .rmsnorm = k_rmsnorm,
    .rope = k_rope,
    .activation = k_activation,
    .gated_act = k_gated_act,
    .add = k_add,
    .scale = k_scale,
    .softcap = k_softcap,
    .kv_append = k_kv_append,
    .attention = k_attention,
    .attention_scratch = k_attention_scratch,
    .gather_rows = k_gather_rows,
    .combine_rows = k_combine_rows,
    .route_topk = k_route_topk,
    .route_group = k_route_group,
    .copy = k_copy,
    .lora = k_lora,
    .to_host = k_copy,
    .to_device = k_copy,
    .weight_pack = k_weight_pack,
};
