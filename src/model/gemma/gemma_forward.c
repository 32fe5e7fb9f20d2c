/* The Gemma forward pass: the scaled embedding, Gemma's norms before and
 * after the shared attention and gated MLP blocks, the soft-capped head; on
 * the execution context's stream and buffers. */
#include <math.h>
#include <stdlib.h>

#include "backend/kernels.h"
#include "core/dtype.h"
#include "model/gemma/gemma.h"

static struct mlp_opts mlp_opts(const struct model *m, const float *post_norm)
{
    return (struct mlp_opts){.act = gemma_cfg(m)->act,
                             .gated = true,
                             .post_norm = post_norm,
                             .eps = (float)gemma_cfg(m)->rms_eps};
}

static bool any_window(const struct gemma_config *c)
{
    for (int i = 0; c->sliding_window > 0 && i < c->base.info.n_layers; i++)
        if (layer_windowed(&c->windows, i))
            return true;
    return false;
}

void gemma_exec_dims(const struct model *m, struct exec_dims *d)
{
    const struct mlp_opts mlp = mlp_opts(m, NULL);
    *d = (struct exec_dims){
        .ffn_width = model_block_mlp_width(m, &mlp),
        .aux_floats = (size_t)m->info->head_dim, /* global, then local inverse frequencies */
        .positions = true,
        .window = gemma_cfg(m)->sliding_window,
        .windows = &gemma_cfg(m)->windows,
    };
}

uint64_t gemma_required_ops(const struct model_config *mc)
{
    const struct gemma_config *c = ARCH_CONFIG(struct gemma_config, mc);
    uint64_t ops = KERN_OP_BIT(KERN_OP_EMBED) | KERN_OP_BIT(KERN_OP_RMSNORM) |
                   KERN_OP_BIT(KERN_OP_LINEAR) | KERN_OP_BIT(KERN_OP_ROPE) |
                   KERN_OP_BIT(KERN_OP_SCALE) | KERN_OP_BIT(KERN_OP_KV_APPEND) |
                   KERN_OP_BIT(KERN_OP_ATTENTION) | KERN_OP_BIT(KERN_OP_ADD) |
                   KERN_OP_BIT(kern_gated_op(c->act));
    if (c->attn_bias)
        ops |= KERN_OP_BIT(KERN_OP_LINEAR_BIAS);
    if (any_window(c))
        ops |= KERN_OP_BIT(KERN_OP_ATTENTION_WINDOW);
    if (c->variant == GEMMA_2 && c->attn_softcap > 0)
        ops |= KERN_OP_BIT(KERN_OP_ATTENTION_SOFTCAP);
    if (c->final_softcap > 0 && c->variant != GEMMA_3_MM)
        ops |= KERN_OP_BIT(KERN_OP_SOFTCAP);
    return ops;
}

int gemma_exec_prepare(const struct model *m, struct model_exec *ex)
{
    const int half = m->info->head_dim / 2;
    float *inv = malloc((size_t)2 * half * sizeof(float));
    if (!inv)
        return err_set(ERR_NOMEM, "out of memory");
    gemma_inv_freq(gemma_cfg(m), false, inv);
    gemma_inv_freq(gemma_cfg(m), true, inv + half);
    int rc = kern_to_device(ex->stream, ex->aux, inv, (size_t)2 * half * sizeof(float));
    free(inv);
    return rc;
}

int gemma_embed(const struct model *m, struct model_exec *ex, const int32_t *ids,
                const uint8_t *mask, int t_new)
{
    const struct gemma_config *c = gemma_cfg(m);
    const int n = ex->shape.batch * t_new, H = m->info->hidden;
    for (int i = 0; c->image_token >= 0 && i < n; i++)
        if (ids[i] == c->image_token && (!mask || mask[i]))
            return err_set(ERR_UNSUPPORTED,
                           "token id %d is Gemma 3's image placeholder: image input is not "
                           "supported (the text model only)",
                           ids[i]);
    TRY(model_embed_ids(m, ex, ids, n));
    /* this rank's vocabulary rows; the all-reduce fills in the others */
    TRY(kern_embed(ex->stream, ex->x, &gemma_w(m)->embed, ex->ids, n, m->vocab_begin));
    TRY(model_reduce(ex, ex->x, (size_t)n * H));
    /* times sqrt(hidden), rounded to the dtype the model computes in */
    float normalizer = (float)sqrt((double)H);
    if (m->compute == KERN_COMPUTE_BF16)
        normalizer = bf16_round(normalizer);
    return kern_scale(ex->stream, ex->x, (size_t)n * H, normalizer);
}

int gemma_layer(const struct model *m, int layer, struct model_exec *ex, int t_new)
{
    const struct gemma_config *c = gemma_cfg(m);
    const struct gemma_layer *L = gemma_layer_w(m, layer);
    const int H = m->info->hidden, n = ex->shape.batch * t_new;
    const bool local =
        c->sliding_window > 0 && layer_windowed(&c->windows, m->shard.layer_begin + layer);
    const float eps = (float)c->rms_eps;
    const struct attn_opts attn = {
        .rot_dim = m->info->head_dim,
        .inv_freq = ex->aux + (local ? m->info->head_dim / 2 : 0),
        .scale = (float)(1.0 / sqrt(c->query_pre_attn_scalar)),
        .window = local ? c->sliding_window : 0,
        .softcap = c->variant == GEMMA_2 ? (float)c->attn_softcap : 0.0f,
        .post_norm = L->ln_post_attn,
        .eps = eps,
    };
    const struct mlp_opts mlp = mlp_opts(m, L->ln_post_ff);

    /* x += post_norm(attention(input_norm(x))) */
    TRY(kern_rmsnorm(ex->stream, ex->h, ex->x, n, H, L->ln_in, eps));
    TRY(model_block_attn(m, ex, layer, t_new, &L->attn, &attn));
    /* x += post_norm(down(gelu_tanh(gate(h)) * up(h))), h = pre_norm(x) */
    TRY(kern_rmsnorm(ex->stream, ex->h, ex->x, n, H, L->ln_pre_ff, eps));
    return model_block_mlp(m, ex, layer, t_new, &L->mlp, &mlp);
}

int gemma_head(const struct model *m, struct model_exec *ex, int t_new, bool all_positions,
               float *logits)
{
    const struct gemma_config *c = gemma_cfg(m);
    const struct gemma_weights *w = gemma_w(m);
    int n_rows;
    TRY(model_head_rows(m, ex, t_new, all_positions, &n_rows));
    TRY(kern_rmsnorm(ex->stream, ex->h, ex->h, n_rows, m->info->hidden, w->norm,
                     (float)c->rms_eps));
    /* Gemma 3 multimodal's head applies no soft-capping (transformers') */
    const float cap = c->variant == GEMMA_3_MM ? 0.0f : (float)c->final_softcap;
    return model_head_logits_capped(m, ex, &w->lm_head, ex->h, n_rows, cap, logits);
}
