/* The attention and MLP blocks of every family (block.h): one kernel-table
 * call per step on the execution context's buffers; nothing is allocated. */
#include "model/block.h"

#include <assert.h>
#include <math.h>

#include "backend/kernels.h"
#include "model/adapter_impl.h"

/* Whether sequence b's length this step (its largest position + 1) is
 * past o->rope_long_after. */
static bool block_rope_long(const struct model_exec *ex, int b, int t_new,
                            const struct attn_opts *o)
{
    int32_t last = 0;
    for (int t = 0; t < t_new; t++)
        if (ex->pos_host[b * t_new + t] > last)
            last = ex->pos_host[b * t_new + t];
    return o->rope_long_after > 0 && last + 1 > o->rope_long_after;
}

/* Rotary on the rows of x (heads heads each, ex's step) with the table
 * inv_freq: one table, or per sequence the short one there or the long one
 * after it (o->rope_long_after). */
static int block_rope(struct model_exec *ex, float *x, int t_new, int heads, const float *inv_freq,
                      const struct attn_opts *o)
{
    const int B = ex->shape.batch, hd = ex->head_dim, half = o->rot_dim / 2;
    const float scale = o->rope_scale > 0 ? o->rope_scale : 1.0f;
    int n_long = 0;
    for (int b = 0; o->rope_long_after > 0 && b < B; b++)
        n_long += block_rope_long(ex, b, t_new, o);
    if (n_long == 0 || n_long == B)
        return kern_rope(ex->stream, x, B * t_new, heads, hd, o->rot_dim, ex->pos,
                         inv_freq + (n_long ? half : 0), scale);
    for (int b = 0; b < B; b++) {
        const size_t r0 = (size_t)b * t_new;
        TRY(kern_rope(ex->stream, x + r0 * heads * hd, t_new, heads, hd, o->rot_dim, ex->pos + r0,
                      inv_freq + (block_rope_long(ex, b, t_new, o) ? half : 0), scale));
    }
    return 0;
}

int model_block_attn(const struct model *m, struct model_exec *ex, int layer, int t_new,
                     const struct attn_weights *w, const struct attn_opts *o)
{
    struct stream *s = ex->stream;
    const int H = m->info->hidden, n = ex->shape.batch * t_new;
    const int hd = ex->head_dim, qr = ex->heads * hd;
    float *h = ex->h, *kc, *vc;
    struct kv_geom g = model_layer_kv(ex, layer, &kc, &vc);
    const float *inv_freq = o->inv_freq ? o->inv_freq : ex->aux;
    assert(o->rot_dim == 0 || (ex->pos && inv_freq));
    g.window = o->window;
    g.softcap = o->softcap;

    /* q, k, v of this rank's heads (and each sequence's adapter's) */
    TRY(kern_linear(s, ex->q, h, n, &w->q, w->q_b, m->compute));
    TRY(model_block_lora(m, ex, layer, LORA_Q, ex->q, h, t_new));
    TRY(kern_linear(s, ex->kn, h, n, &w->k, w->k_b, m->compute));
    TRY(model_block_lora(m, ex, layer, LORA_K, ex->kn, h, t_new));
    TRY(kern_linear(s, ex->vn, h, n, &w->v, w->v_b, m->compute));
    TRY(model_block_lora(m, ex, layer, LORA_V, ex->vn, h, t_new));
    /* per-head norms of q and k: rows of head_dim */
    if (w->q_norm)
        TRY(kern_rmsnorm(s, ex->q, ex->q, n * ex->heads, hd, w->q_norm, o->eps));
    if (w->k_norm)
        TRY(kern_rmsnorm(s, ex->kn, ex->kn, n * ex->kv_heads, hd, w->k_norm, o->eps));
    /* rotary positions on q and k */
    if (o->rot_dim > 0) {
        TRY(block_rope(ex, ex->q, t_new, ex->heads, inv_freq, o));
        TRY(block_rope(ex, ex->kn, t_new, ex->kv_heads, inv_freq, o));
    }
    TRY(kern_scale(s, ex->q, (size_t)n * qr, o->scale > 0 ? o->scale : 1.0f / sqrtf((float)hd)));
    /* the new keys and values into the cache, attention over it */
    TRY(kern_kv_append(s, kc, vc, ex->kn, ex->vn, &g, t_new, ex->len));
    TRY(kern_attention(s, ex->attn, ex->q, kc, vc, ex->key_ok, &g, ex->len, t_new, ex->scores));
    /* output projection, summed over the TP ranks, into the residual */
    TRY(kern_linear(s, h, ex->attn, n, &w->o, w->o_b, m->compute));
    TRY(model_block_lora(m, ex, layer, LORA_O, h, ex->attn, t_new));
    TRY(model_reduce(ex, h, (size_t)n * H));
    if (o->post_norm)
        TRY(kern_rmsnorm(s, h, h, n, H, o->post_norm, o->eps));
    return kern_add(s, ex->x, h, (size_t)n * H);
}

int model_block_mlp_width(const struct model *m, const struct mlp_opts *o)
{
    return o->gated ? 2 * m->ffn_local : m->ffn_local;
}

int model_block_mlp(const struct model *m, struct model_exec *ex, int layer, int t_new,
                    const struct mlp_weights *w, const struct mlp_opts *o)
{
    struct stream *s = ex->stream;
    const int H = m->info->hidden, n = ex->shape.batch * t_new, fr = m->ffn_local;
    float *h = ex->h, *f = ex->f;

    /* this rank's hidden units: act(gate(h)) * up(h), or act(up(h)) */
    if (o->gated) {
        float *up = ex->f + (size_t)n * fr;
        TRY(kern_linear(s, f, h, n, &w->gate, w->gate_b, m->compute));
        TRY(model_block_lora(m, ex, layer, LORA_GATE, f, h, t_new));
        TRY(kern_linear(s, up, h, n, &w->up, w->up_b, m->compute));
        TRY(model_block_lora(m, ex, layer, LORA_UP, up, h, t_new));
        TRY(kern_gated_act(s, f, f, up, (size_t)n * fr, o->act));
    } else {
        TRY(kern_linear(s, f, h, n, &w->up, w->up_b, m->compute));
        TRY(model_block_lora(m, ex, layer, LORA_UP, f, h, t_new));
        TRY(kern_activation(s, f, (size_t)n * fr, o->act));
    }
    /* down projection, summed over the TP ranks, into the residual */
    TRY(kern_linear(s, h, f, n, &w->down, w->down_b, m->compute));
    TRY(model_block_lora(m, ex, layer, LORA_DOWN, h, f, t_new));
    TRY(model_reduce(ex, h, (size_t)n * H));
    if (o->post_norm)
        TRY(kern_rmsnorm(s, h, h, n, H, o->post_norm, o->eps));
    return kern_add(s, ex->x, h, (size_t)n * H);
}
