/* The OPT forward pass: LayerNorms before (pre-LN) or after (post-LN)
 * the shared attention and MLP blocks, learned positions and the optional
 * projections around the embeddings, on the execution context's stream;
 * buffers are the context's (nothing is allocated here). */
#include <assert.h>
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

static struct mlp_opts mlp_opts(const struct model *m)
{
    return (struct mlp_opts){.act = act_of(opt_cfg(m)->act), .gated = false};
}

void opt_exec_dims(const struct model *m, struct exec_dims *d)
{
    const struct opt_config *c = opt_cfg(m);
    const struct mlp_opts mlp = mlp_opts(m);
    *d = (struct exec_dims){
        .ffn_width = model_block_mlp_width(m, &mlp),
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

/* A block's LayerNorm (g, b): pre-LN normalizes its input, h = LN(x)
 * (post-LN: h = x); post-LN normalizes the residual after it, x = LN(x). */
static int norm_before(const struct model *m, struct model_exec *ex, int n, const float *g,
                       const float *b)
{
    const int H = m->info->hidden;
    if (opt_cfg(m)->pre_ln)
        return kern_layernorm(ex->stream, ex->h, ex->x, n, H, g, b, OPT_LN_EPS);
    return kern_copy(ex->stream, ex->h, ex->x, (size_t)n * H * sizeof(float));
}

static int norm_after(const struct model *m, struct model_exec *ex, int n, const float *g,
                      const float *b)
{
    if (opt_cfg(m)->pre_ln)
        return 0;
    return kern_layernorm(ex->stream, ex->x, ex->x, n, m->info->hidden, g, b, OPT_LN_EPS);
}

int opt_layer(const struct model *m, int layer, struct model_exec *ex, int t_new)
{
    const struct opt_layer *L = opt_layer_w(m, layer);
    const struct attn_opts attn = {.rot_dim = 0}; /* learned positions, added at the embedding */
    const struct mlp_opts mlp = mlp_opts(m);
    const int n = ex->shape.batch * t_new;

    /* x += attention(LN1(x)) (pre-LN), or x = LN1(x + attention(x)) */
    TRY(norm_before(m, ex, n, L->ln1_g, L->ln1_b));
    TRY(model_block_attn(m, ex, layer, t_new, &L->attn, &attn));
    TRY(norm_after(m, ex, n, L->ln1_g, L->ln1_b));
    /* x += fc2(act(fc1(LN2(x)))) (pre-LN), or x = LN2(x + fc2(act(fc1(x)))) */
    TRY(norm_before(m, ex, n, L->ln2_g, L->ln2_b));
    TRY(model_block_mlp(m, ex, layer, t_new, &L->mlp, &mlp));
    return norm_after(m, ex, n, L->ln2_g, L->ln2_b);
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
