/* The OPT forward pass: a flat list of kernel-table calls per layer on the
 * execution context's stream; buffers are the context's (nothing is
 * allocated here). */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "backend/kernels.h"
#include "model/opt/opt.h"

#define OPT_LN_EPS 1e-5f

static enum kern_act act_of(enum opt_act a)
{
    switch (a) {
    case OPT_ACT_RELU:
        return KERN_ACT_RELU;
    case OPT_ACT_GELU:
        return KERN_ACT_GELU;
    case OPT_ACT_GELU_TANH:
        return KERN_ACT_GELU_TANH;
    case OPT_ACT_SILU:
        return KERN_ACT_SILU;
    }
    assert(0 && "unknown activation");
    return KERN_ACT_RELU;
}

void opt_exec_dims(const struct model *m, struct exec_dims *d)
{
    const struct opt_config *c = opt_cfg(m);
    *d = (struct exec_dims){
        .ffn_width = m->ffn_local,
        .extra_width = c->embed_dim != m->info->hidden ? c->embed_dim : 0,
    };
}

uint64_t opt_required_ops(const struct model_config *mc)
{
    const struct opt_config *c = ARCH_CONFIG(struct opt_config, mc);
    uint64_t ops = KERN_OP_BIT(KERN_OP_EMBED) | KERN_OP_BIT(KERN_OP_ADD) |
                   KERN_OP_BIT(KERN_OP_LINEAR) | KERN_OP_BIT(KERN_OP_LAYERNORM) |
                   KERN_OP_BIT(KERN_OP_SCALE) | KERN_OP_BIT(KERN_OP_KV_APPEND) |
                   KERN_OP_BIT(KERN_OP_ATTENTION) | KERN_OP_BIT(kern_act_op(act_of(c->act)));
    if (c->bias)
        ops |= KERN_OP_BIT(KERN_OP_LINEAR_BIAS);
    if (!c->pre_ln) /* post-LN: each block starts from a copy of x */
        ops |= KERN_OP_BIT(KERN_OP_COPY);
    return ops;
}

int opt_embed(const struct model *m, struct model_exec *ex, const int32_t *ids, const uint8_t *mask,
              int t_new)
{
    const struct opt_config *c = opt_cfg(m);
    const struct opt_weights *w = opt_w(m);
    struct stream *s = ex->stream;
    const int n = ex->shape.batch * t_new, H = m->info->hidden, E = c->embed_dim;
    TRY(model_embed_ids(m, ex, ids, n));
    /* position rows: transformers' offset 2 on cumsum - 1; a pad gets row 1 */
    for (int i = 0; i < n; i++)
        ex->rows_host[i] = mask && !mask[i] ? 1 : ex->pos_host[i] + 2;
    TRY(kern_to_device(s, ex->rows, ex->rows_host, (size_t)n * sizeof(int32_t)));
    /* token embeddings (this rank's vocabulary rows; the all-reduce fills in
     * the others), through project_in when word_embed_proj_dim != hidden */
    float *e = w->project_in.data ? ex->e : ex->x;
    TRY(kern_embed(s, e, &w->embed, ex->ids, n, m->vocab_begin));
    TRY(model_reduce(ex, e, (size_t)n * E));
    if (w->project_in.data)
        TRY(kern_linear(s, ex->x, e, n, &w->project_in, NULL, m->compute));
    /* + learned positions */
    TRY(kern_embed(s, ex->h, &w->pos, ex->rows, n, 0));
    return kern_add(s, ex->x, ex->h, (size_t)n * H);
}

int opt_layer(const struct model *m, int layer, struct model_exec *ex, int t_new)
{
    const struct opt_config *c = opt_cfg(m);
    const struct opt_layer *L = opt_layer_w(m, layer);
    struct stream *s = ex->stream;
    const int H = m->info->hidden, n = ex->shape.batch * t_new;
    const int hd = ex->head_dim, qr = ex->heads * hd, fr = m->ffn_local;
    float *x = ex->x, *h = ex->h, *kc, *vc;
    const struct kv_geom g = model_layer_kv(ex, layer, &kc, &vc);

    /* attention block: h = LN1(x) before (pre-LN) */
    if (c->pre_ln)
        TRY(kern_layernorm(s, h, x, n, H, L->ln1_g, L->ln1_b, OPT_LN_EPS));
    else
        TRY(kern_copy(s, h, x, (size_t)n * H * sizeof(float)));
    TRY(kern_linear(s, ex->q, h, n, &L->q, L->q_b, m->compute));
    TRY(kern_linear(s, ex->kn, h, n, &L->k, L->k_b, m->compute));
    TRY(kern_linear(s, ex->vn, h, n, &L->v, L->v_b, m->compute));
    TRY(kern_scale(s, ex->q, (size_t)n * qr, 1.0f / sqrtf((float)hd)));
    TRY(kern_kv_append(s, kc, vc, ex->kn, ex->vn, &g, t_new, ex->len));
    TRY(kern_attention(s, ex->attn, ex->q, kc, vc, ex->key_ok, &g, ex->len, t_new, ex->scores));
    TRY(kern_linear(s, h, ex->attn, n, &L->o, L->o_b, m->compute));
    TRY(model_reduce(ex, h, (size_t)n * H));
    TRY(kern_add(s, x, h, (size_t)n * H));
    if (!c->pre_ln)
        TRY(kern_layernorm(s, x, x, n, H, L->ln1_g, L->ln1_b, OPT_LN_EPS));

    /* feed-forward block */
    if (c->pre_ln)
        TRY(kern_layernorm(s, h, x, n, H, L->ln2_g, L->ln2_b, OPT_LN_EPS));
    else
        TRY(kern_copy(s, h, x, (size_t)n * H * sizeof(float)));
    TRY(kern_linear(s, ex->f, h, n, &L->fc1, L->fc1_b, m->compute));
    TRY(kern_activation(s, ex->f, (size_t)n * fr, act_of(c->act)));
    TRY(kern_linear(s, h, ex->f, n, &L->fc2, L->fc2_b, m->compute));
    TRY(model_reduce(ex, h, (size_t)n * H));
    TRY(kern_add(s, x, h, (size_t)n * H));
    if (!c->pre_ln)
        TRY(kern_layernorm(s, x, x, n, H, L->ln2_g, L->ln2_b, OPT_LN_EPS));
    return 0;
}

int opt_head(const struct model *m, struct model_exec *ex, int t_new, bool all_positions,
             float *logits)
{
    const struct opt_config *c = opt_cfg(m);
    const struct opt_weights *w = opt_w(m);
    struct stream *s = ex->stream;
    int n_rows;
    TRY(model_head_rows(m, ex, t_new, all_positions, &n_rows));
    float *h = ex->h, *e = w->project_out.data ? ex->e : ex->h;
    if (c->final_ln)
        TRY(kern_layernorm(s, h, h, n_rows, m->info->hidden, w->final_ln_g, w->final_ln_b,
                           OPT_LN_EPS));
    if (w->project_out.data)
        TRY(kern_linear(s, e, h, n_rows, &w->project_out, NULL, m->compute));
    return model_head_logits(m, ex, &w->lm_head, e, n_rows, logits);
}
