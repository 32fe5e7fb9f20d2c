/* The CUDA backend's kernel table: each slot makes the stream's GPU current,
 * maps the project's enums to the launchers' (cuda_launch.h) and queues the
 * work on the stream's cudaStream without waiting, except to_host (a sync
 * point) and to_device from pinned memory (below). Also the per-stream state
 * the kernels need (cuda_kernels.h), made and freed with the stream. */
#include "backend/cuda/cuda_kernels.h"

#include <assert.h>
#include <stdlib.h>

#include "backend/cuda/cuda_launch.h"
#include "backend/device_impl.h"
#include "backend/kernels_impl.h"
#include "core/error.h"

int cuda_kern_enter(struct stream *s, struct cuda_stream **out)
{
    struct cuda_stream *cs = s->ctx;
    assert(cs && cs->kern);
    CUDA_CHECK(s->dev->name, cudaSetDevice(cs->gpu));
    *out = cs;
    return 0;
}

/* Fills k (zeroed by the caller) on the current device; on failure the
 * caller releases what was made (kern_ctx_release). */
static int kern_ctx_make(const char *dev, cudaStream_t st, struct cuda_kernels_ctx *k)
{
    CUBLAS_CHECK(dev, cublasCreate(&k->blas));
    CUBLAS_CHECK(dev, cublasSetStream(k->blas, st));
    /* CUBLAS_DEFAULT_MATH never uses TF32 for f32 products (only
     * CUBLAS_TF32_TENSOR_OP_MATH or NVIDIA_TF32_OVERRIDE would): f32 mode
     * must hold 1e-4 against transformers */
    CUBLAS_CHECK(dev, cublasSetMathMode(k->blas, CUBLAS_DEFAULT_MATH));
    CUDA_CHECK(dev, cudaMalloc(&k->workspace, CUDA_CUBLAS_WORKSPACE));
    /* after cublasSetStream, which resets the workspace to cuBLAS's pool */
    CUBLAS_CHECK(dev, cublasSetWorkspace(k->blas, k->workspace, CUDA_CUBLAS_WORKSPACE));
    CUDA_CHECK(dev, cudaMalloc(&k->scratch, CUDA_KERN_SCRATCH));
    return 0;
}

/* Teardown cannot fail usefully: a failure here (a GPU already lost) leaves
 * nothing to undo, so the status is dropped. */
static void kern_ctx_release(struct cuda_kernels_ctx *k)
{
    if (k->blas)
        (void)cublasDestroy(k->blas);
    if (k->workspace)
        (void)cudaFree(k->workspace);
    if (k->scratch)
        (void)cudaFree(k->scratch);
    free(k);
}

int cuda_kernels_stream_init(struct stream *s)
{
    struct cuda_stream *cs = s->ctx;
    assert(cs && !cs->kern);
    CUDA_CHECK(s->dev->name, cudaSetDevice(cs->gpu));
    struct cuda_kernels_ctx *k = calloc(1, sizeof(*k));
    if (!k)
        return err_set(ERR_NOMEM, "%s: out of host memory for a stream's kernel state",
                       s->dev->name);
    int rc = kern_ctx_make(s->dev->name, cs->s, k);
    if (rc < 0) {
        kern_ctx_release(k);
        return rc;
    }
    cs->kern = k;
    return 0;
}

void cuda_kernels_stream_free(struct stream *s)
{
    struct cuda_stream *cs = s ? s->ctx : NULL;
    if (!cs || !cs->kern)
        return;
    /* cudaFree waits for the device, so nothing queued still uses the
     * scratch when it goes; the status is dropped as in kern_ctx_release */
    (void)cudaSetDevice(cs->gpu);
    kern_ctx_release(cs->kern);
    cs->kern = NULL;
}

static int k_embed(struct stream *s, float *y, const struct weight_view *w, const int32_t *ids,
                   int n, int row0)
{
    struct cuda_stream *cs;
    int rc = cuda_kern_enter(s, &cs);
    if (rc < 0)
        return rc;
    if (dtype_is_block(w->dtype))
        CUDA_CHECK(s->dev->name,
                   cuda_launch_qembed(cs->s, y, w->data, cuda_qtype_of(w->dtype), w->rows, w->cols,
                                      dtype_row_bytes(w->dtype, w->ld), ids, n, row0));
    else
        CUDA_CHECK(s->dev->name, cuda_launch_embed(cs->s, y, w->data, cuda_wtype_of(w->dtype),
                                                   w->rows, w->cols, w->ld, ids, n, row0));
    return 0;
}

static int k_layernorm(struct stream *s, float *y, const float *x, int m, int n, const float *gamma,
                       const float *beta, float eps)
{
    struct cuda_stream *cs;
    int rc = cuda_kern_enter(s, &cs);
    if (rc < 0)
        return rc;
    CUDA_CHECK(s->dev->name, cuda_launch_layernorm(cs->s, y, x, m, n, gamma, beta, eps));
    return 0;
}

static int k_rmsnorm(struct stream *s, float *y, const float *x, int m, int n, const float *gamma,
                     float eps)
{
    struct cuda_stream *cs;
    int rc = cuda_kern_enter(s, &cs);
    if (rc < 0)
        return rc;
    CUDA_CHECK(s->dev->name, cuda_launch_rmsnorm(cs->s, y, x, m, n, gamma, eps));
    return 0;
}

static int k_rope(struct stream *s, float *x, int n, int heads, int head_dim, int rot_dim,
                  const int32_t *pos, const float *inv_freq, float scale)
{
    struct cuda_stream *cs;
    int rc = cuda_kern_enter(s, &cs);
    if (rc < 0)
        return rc;
    CUDA_CHECK(s->dev->name,
               cuda_launch_rope(cs->s, x, n, heads, head_dim, rot_dim, pos, inv_freq, scale));
    return 0;
}

static int act_of(enum kern_act act)
{
    switch (act) {
    case KERN_ACT_RELU:
        return CUDA_ACT_RELU;
    case KERN_ACT_GELU:
        return CUDA_ACT_GELU;
    case KERN_ACT_GELU_TANH:
        return CUDA_ACT_GELU_TANH;
    case KERN_ACT_SILU:
        return CUDA_ACT_SILU;
    }
    assert(!"unknown activation");
    return CUDA_ACT_RELU;
}

static int k_activation(struct stream *s, float *x, size_t n, enum kern_act act)
{
    struct cuda_stream *cs;
    int rc = cuda_kern_enter(s, &cs);
    if (rc < 0)
        return rc;
    CUDA_CHECK(s->dev->name, cuda_launch_activation(cs->s, x, n, act_of(act)));
    return 0;
}

static int k_gated_act(struct stream *s, float *y, const float *gate, const float *up, size_t n,
                       enum kern_act act)
{
    struct cuda_stream *cs;
    int rc = cuda_kern_enter(s, &cs);
    if (rc < 0)
        return rc;
    CUDA_CHECK(s->dev->name, cuda_launch_gated_act(cs->s, y, gate, up, n, act_of(act)));
    return 0;
}

static int k_add(struct stream *s, float *y, const float *x, size_t n)
{
    struct cuda_stream *cs;
    int rc = cuda_kern_enter(s, &cs);
    if (rc < 0)
        return rc;
    CUDA_CHECK(s->dev->name, cuda_launch_add(cs->s, y, x, n));
    return 0;
}

static int k_scale(struct stream *s, float *x, size_t n, float a)
{
    struct cuda_stream *cs;
    int rc = cuda_kern_enter(s, &cs);
    if (rc < 0)
        return rc;
    CUDA_CHECK(s->dev->name, cuda_launch_scale(cs->s, x, n, a));
    return 0;
}

static int k_softcap(struct stream *s, float *x, size_t n, float cap)
{
    struct cuda_stream *cs;
    int rc = cuda_kern_enter(s, &cs);
    if (rc < 0)
        return rc;
    CUDA_CHECK(s->dev->name, cuda_launch_softcap(cs->s, x, n, cap));
    return 0;
}

static int k_kv_append(struct stream *s, float *kc, float *vc, const float *k, const float *v,
                       const struct kv_geom *g, int t_new, int pos)
{
    struct cuda_stream *cs;
    int rc = cuda_kern_enter(s, &cs);
    if (rc < 0)
        return rc;
    CUDA_CHECK(s->dev->name, cuda_launch_kv_append(cs->s, kc, vc, k, v, g->batch, g->kv_heads,
                                                   g->head_dim, g->max_t, t_new, pos, g->ring));
    return 0;
}

static int k_attention(struct stream *s, float *out, const float *q, const float *kc,
                       const float *vc, const uint8_t *key_ok, const struct kv_geom *g, int past,
                       int t_new, float *scratch)
{
    (void)scratch; /* online softmax: nothing to keep between tiles but registers */
    /* head_dim <= CUDA_ATTN_MAX_HEAD_DIM: the table declares it, the wrapper checks */
    struct cuda_stream *cs;
    int rc = cuda_kern_enter(s, &cs);
    if (rc < 0)
        return rc;
    CUDA_CHECK(s->dev->name, cuda_launch_attention(cs->s, out, q, kc, vc, key_ok, g->batch,
                                                   g->heads, g->kv_heads, g->head_dim, g->max_t,
                                                   past, t_new, g->window, g->softcap, g->ring));
    return 0;
}

/* The kernel needs no scratch; the callers carve a buffer of this size
 * anyway and pass it, so a small non-zero size. */
static size_t k_attention_scratch(const struct kv_geom *g, int t_new, int t_all)
{
    (void)g;
    (void)t_new;
    (void)t_all;
    return 64;
}

static int k_gather_rows(struct stream *s, float *y, const float *x, const int32_t *rows, int n,
                         int width)
{
    struct cuda_stream *cs;
    int rc = cuda_kern_enter(s, &cs);
    if (rc < 0)
        return rc;
    CUDA_CHECK(s->dev->name, cuda_launch_gather_rows(cs->s, y, x, rows, n, width));
    return 0;
}

static int k_combine_rows(struct stream *s, float *y, const float *x, const int32_t *rows,
                          const float *w, int n, int k, int width)
{
    struct cuda_stream *cs;
    int rc = cuda_kern_enter(s, &cs);
    if (rc < 0)
        return rc;
    CUDA_CHECK(s->dev->name, cuda_launch_combine_rows(cs->s, y, x, rows, w, n, k, width));
    return 0;
}

_Static_assert(KERN_ROUTE_MAX_EXPERTS == CUDA_ROUTE_MAX_EXPERTS &&
                   KERN_ROUTE_MAX_K == CUDA_ROUTE_MAX_K,
               "the router kernels take what kern_route_topk allows");

static int k_route_topk(struct stream *s, const float *logits, const struct kern_route *r,
                        const struct kern_route_out *o)
{
    struct cuda_stream *cs;
    int rc = cuda_kern_enter(s, &cs);
    if (rc < 0)
        return rc;
    CUDA_CHECK(s->dev->name, cuda_launch_route_topk(cs->s, logits, r->n, r->n_experts, r->top_k,
                                                    r->norm, r->real, r->real_group, r->real_stride,
                                                    o->choice, o->choice_w, o->counts));
    return 0;
}

static int k_route_group(struct stream *s, const struct kern_route *r,
                         const struct kern_route_out *o)
{
    struct cuda_stream *cs;
    int rc = cuda_kern_enter(s, &cs);
    if (rc < 0)
        return rc;
    CUDA_CHECK(s->dev->name, cuda_launch_route_group(cs->s, o->choice, o->choice_w, o->counts, r->n,
                                                     r->n_experts, r->top_k, r->expert_begin,
                                                     r->expert_end, r->have, r->slot_stride,
                                                     r->shared_gate, o->rows, o->slots, o->slot_w));
    return 0;
}

static int k_copy(struct stream *s, void *dst, const void *src, size_t n)
{
    struct cuda_stream *cs;
    int rc = cuda_kern_enter(s, &cs);
    if (rc < 0)
        return rc;
    CUDA_CHECK(s->dev->name, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, cs->s));
    return 0;
}

/* kern_lora: the active segments (a pair with data, rows > 0) in tables of
 * CUDA_LORA_MAX_SEGS, two launches per table; t in the caller's scratch
 * with the stride of the largest rank (kern_lora_scratch's m * max_r). */
static int k_lora(struct stream *s, float *y, const float *x, int m, int nseg, const int *seg,
                  const struct lora_pair *pairs, enum kern_compute c, float *scratch)
{
    (void)m;
    struct cuda_stream *cs;
    int rc = cuda_kern_enter(s, &cs);
    if (rc < 0)
        return rc;
    int in = 0, out = 0, ts = 0;
    for (int i = 0; i < nseg; i++)
        if (pairs[i].a.data && seg[i + 1] > seg[i]) {
            in = pairs[i].a.cols;
            out = pairs[i].b.rows;
            ts = pairs[i].a.rows > ts ? pairs[i].a.rows : ts;
        }
    struct cuda_lora_table tab;
    tab.n = 0;
    for (int i = 0; i <= nseg; i++) {
        if (i < nseg && pairs[i].a.data && seg[i + 1] > seg[i]) {
            const struct lora_pair *p = &pairs[i];
            tab.seg[tab.n++] = (struct cuda_lora_seg){.a = p->a.data,
                                                      .b = p->b.data,
                                                      .lda = p->a.ld,
                                                      .ldb = p->b.ld,
                                                      .row0 = seg[i],
                                                      .rows = seg[i + 1] - seg[i],
                                                      .r = p->a.rows,
                                                      .at = cuda_wtype_of(p->a.dtype),
                                                      .bt = cuda_wtype_of(p->b.dtype),
                                                      .scale = p->scale};
        }
        if (tab.n == CUDA_LORA_MAX_SEGS || (i == nseg && tab.n > 0)) {
            CUDA_CHECK(s->dev->name, cuda_launch_lora(cs->s, y, x, in, out, &tab,
                                                      c == KERN_COMPUTE_BF16, scratch, ts));
            tab.n = 0;
        }
    }
    return 0;
}

/* A sync point: the copy is queued behind the stream's work and waited for. */
static int k_to_host(struct stream *s, void *host, const void *src, size_t n)
{
    struct cuda_stream *cs;
    int rc = cuda_kern_enter(s, &cs);
    if (rc < 0)
        return rc;
    CUDA_CHECK(s->dev->name, cudaMemcpyAsync(host, src, n, cudaMemcpyDeviceToHost, cs->s));
    CUDA_CHECK(s->dev->name, cudaStreamSynchronize(cs->s));
    return 0;
}

/* "host may be reused when this returns": from pageable memory
 * cudaMemcpyAsync returns once the bytes are staged, but from pinned
 * (cudaHostAlloc'ed or registered) or managed memory the DMA reads host
 * memory later, so then the stream is waited for. */
static int k_to_device(struct stream *s, void *dst, const void *host, size_t n)
{
    struct cuda_stream *cs;
    int rc = cuda_kern_enter(s, &cs);
    if (rc < 0)
        return rc;
    struct cudaPointerAttributes attr;
    CUDA_CHECK(s->dev->name, cudaPointerGetAttributes(&attr, host));
    CUDA_CHECK(s->dev->name, cudaMemcpyAsync(dst, host, n, cudaMemcpyHostToDevice, cs->s));
    if (attr.type != cudaMemoryTypeUnregistered)
        CUDA_CHECK(s->dev->name, cudaStreamSynchronize(cs->s));
    return 0;
}

const struct kernel_ops cuda_kernel_ops = {
    .linear = cuda_linear,
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
    .to_host = k_to_host,
    .to_device = k_to_device,
    .attention_max_head_dim = CUDA_ATTN_MAX_HEAD_DIM,
};
