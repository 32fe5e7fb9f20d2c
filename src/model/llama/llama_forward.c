/* The Llama-family forward pass: RMSNorms before the shared attention
 * (with rotary, and Qwen3's per-head q/k norms) and gated MLP blocks, on
 * the execution context's stream; buffers are the context's. */
#include <stdlib.h>

#include "backend/kernels.h"
#include "model/llama/llama.h"

/* Tables of inverse frequencies in ex->aux: LongRoPE's short and long. */
static int llama_rope_tables(const struct llama_config *c)
{
    return c->rope == ROPE_LONGROPE ? 2 : 1;
}

static struct mlp_opts mlp_opts(const struct model *m)
{
    return (struct mlp_opts){.act = llama_cfg(m)->act, .gated = true};
}

static struct moe_opts moe_opts(const struct model *m)
{
    const struct llama_config *c = llama_cfg(m);
    const bool ep = m->shard.expert_parallel;
    struct moe_opts o = {.n_experts = c->n_experts,
                         .top_k = c->top_k,
                         .ffn_local = ep ? c->moe_ffn : c->moe_ffn / m->shard.tp_size,
                         .norm_topk = c->norm_topk,
                         .act = c->act,
                         .shared_local = c->shared_ffn / m->shard.tp_size};
    model_expert_range(&m->shard, c->n_experts, &o.expert_begin, &o.expert_end);
    return o;
}

void llama_exec_dims(const struct model *m, struct exec_dims *d)
{
    const struct mlp_opts mlp = mlp_opts(m);
    const struct moe_opts moe = moe_opts(m);
    *d = (struct exec_dims){
        .ffn_width = model_block_mlp_width(m, &mlp),
        .aux_floats = (size_t)llama_rope_tables(llama_cfg(m)) * llama_cfg(m)->rot_dim / 2,
        .positions = true,
        .window = llama_cfg(m)->sliding_window,
        .windows = &llama_cfg(m)->windows,
    };
    if (moe.n_experts > 0) {
        if (d->ffn_width < model_block_moe_ffn(&moe))
            d->ffn_width = model_block_moe_ffn(&moe);
        d->extra_width = model_block_moe_extra(m, &moe);
        d->host_width = model_block_moe_host(&moe);
        d->experts = moe.n_experts;
    }
}

uint64_t llama_required_ops(const struct model_config *mc)
{
    const struct llama_config *c = ARCH_CONFIG(struct llama_config, mc);
    uint64_t ops = KERN_OP_BIT(KERN_OP_EMBED) | KERN_OP_BIT(KERN_OP_RMSNORM) |
                   KERN_OP_BIT(KERN_OP_LINEAR) | KERN_OP_BIT(KERN_OP_ROPE) |
                   KERN_OP_BIT(KERN_OP_SCALE) | KERN_OP_BIT(KERN_OP_KV_APPEND) |
                   KERN_OP_BIT(KERN_OP_ATTENTION) | KERN_OP_BIT(KERN_OP_ADD) |
                   KERN_OP_BIT(kern_gated_op(c->act));
    if (c->qkv_bias || c->o_bias || c->mlp_bias)
        ops |= KERN_OP_BIT(KERN_OP_LINEAR_BIAS);
    if (c->sliding_window > 0)
        ops |= KERN_OP_BIT(KERN_OP_ATTENTION_WINDOW);
    if (c->n_experts > 0)
        ops |= KERN_OP_BIT(KERN_OP_GATHER_ROWS) | KERN_OP_BIT(KERN_OP_COMBINE_ROWS) |
               KERN_OP_BIT(KERN_OP_ROUTE_TOPK);
    return ops;
}

int llama_exec_prepare(const struct model *m, struct model_exec *ex)
{
    const struct llama_config *c = llama_cfg(m);
    const int half = c->rot_dim / 2, tables = llama_rope_tables(c);
    float *inv = malloc((size_t)tables * half * sizeof(float));
    if (!inv)
        return err_set(ERR_NOMEM, "out of memory");
    for (int t = 0; t < tables; t++)
        llama_inv_freq(c, t == 1, inv + (size_t)t * half);
    int rc = kern_to_device(ex->stream, ex->aux, inv, (size_t)tables * half * sizeof(float));
    free(inv);
    return rc;
}

int llama_embed(const struct model *m, struct model_exec *ex, const int32_t *ids,
                const uint8_t *mask, int t_new)
{
    const int n = ex->shape.batch * t_new;
    (void)mask;
    TRY(model_embed_ids(m, ex, ids, n));
    /* this rank's vocabulary rows; the all-reduce fills in the others */
    TRY(kern_embed(ex->stream, ex->x, &llama_w(m)->embed, ex->ids, n, m->vocab_begin));
    return model_reduce(ex, ex->x, (size_t)n * m->info->hidden);
}

int llama_layer(const struct model *m, int layer, struct model_exec *ex, int t_new)
{
    const struct llama_config *c = llama_cfg(m);
    const struct llama_layer *L = llama_layer_w(m, layer);
    const int l = m->shard.layer_begin + layer;
    const struct attn_opts attn = {
        .rot_dim = c->rot_dim,
        .rope_scale = (float)c->rope_attn_factor,
        .rope_long_after = c->rope == ROPE_LONGROPE ? c->rope_orig_max_pos : 0,
        .window = c->sliding_window > 0 && layer_windowed(&c->windows, l) ? c->sliding_window : 0,
        .eps = (float)c->rms_eps,
    };
    const struct mlp_opts mlp = mlp_opts(m);
    const int H = m->info->hidden, n = ex->shape.batch * t_new;
    const float eps = (float)c->rms_eps;

    /* x += attention(RMSNorm(x)), (Qwen3: q and k heads normed,) rotary on q and k */
    TRY(kern_rmsnorm(ex->stream, ex->h, ex->x, n, H, L->ln1, eps));
    TRY(model_block_attn(m, ex, layer, t_new, &L->attn, &attn));
    /* x += down(act(gate(h)) * up(h)), h = RMSNorm(x); or the experts
     * the router picks for each token */
    TRY(kern_rmsnorm(ex->stream, ex->h, ex->x, n, H, L->ln2, eps));
    if (llama_moe_layer(c, l)) {
        const struct moe_opts moe = moe_opts(m);
        return model_block_moe(m, ex, layer, t_new, &L->moe, &moe);
    }
    return model_block_mlp(m, ex, layer, t_new, &L->mlp, &mlp);
}

int llama_head(const struct model *m, struct model_exec *ex, int t_new, bool all_positions,
               float *logits)
{
    const struct llama_weights *w = llama_w(m);
    int n_rows;
    TRY(model_head_rows(m, ex, t_new, all_positions, &n_rows));
    TRY(kern_rmsnorm(ex->stream, ex->h, ex->h, n_rows, m->info->hidden, w->norm,
                     (float)llama_cfg(m)->rms_eps));
    return model_head_logits(m, ex, &w->lm_head, ex->h, n_rows, logits);
}
