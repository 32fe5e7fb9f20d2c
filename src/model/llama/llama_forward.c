/* The Llama-family forward pass: a flat list of kernel-table calls per
 * layer on the execution context's stream; buffers are the context's. */
#include <math.h>
#include <stdlib.h>

#include "backend/kernels.h"
#include "model/llama/llama.h"

void llama_exec_dims(const struct model *m, struct exec_dims *d)
{
    *d = (struct exec_dims){
        .ffn_width = 2 * m->ffn_local, /* gate, then up */
        .aux_floats = (size_t)llama_cfg(m)->rot_dim / 2,
        .positions = true,
    };
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
    return ops;
}

int llama_exec_prepare(const struct model *m, struct model_exec *ex)
{
    const int half = llama_cfg(m)->rot_dim / 2;
    float *inv = malloc((size_t)half * sizeof(float));
    if (!inv)
        return err_set(ERR_NOMEM, "out of memory");
    llama_inv_freq(llama_cfg(m), inv);
    int rc = kern_to_device(ex->stream, ex->aux, inv, (size_t)half * sizeof(float));
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
    struct stream *s = ex->stream;
    const int H = m->info->hidden, n = ex->shape.batch * t_new;
    const int hd = ex->head_dim, qr = ex->heads * hd, fr = m->ffn_local;
    float *x = ex->x, *h = ex->h, *kc, *vc;
    const struct kv_geom g = model_layer_kv(ex, layer, &kc, &vc);
    float *gate = ex->f, *up = ex->f + (size_t)n * fr;

    /* attention block: h = RMSNorm(x); q, k, v; rotary on q and k */
    TRY(kern_rmsnorm(s, h, x, n, H, L->ln1, (float)c->rms_eps));
    TRY(kern_linear(s, ex->q, h, n, &L->q, L->q_b, m->compute));
    TRY(kern_linear(s, ex->kn, h, n, &L->k, L->k_b, m->compute));
    TRY(kern_linear(s, ex->vn, h, n, &L->v, L->v_b, m->compute));
    TRY(kern_rope(s, ex->q, n, ex->heads, hd, c->rot_dim, ex->pos, ex->aux, 1.0f));
    TRY(kern_rope(s, ex->kn, n, ex->kv_heads, hd, c->rot_dim, ex->pos, ex->aux, 1.0f));
    TRY(kern_scale(s, ex->q, (size_t)n * qr, 1.0f / sqrtf((float)hd)));
    TRY(kern_kv_append(s, kc, vc, ex->kn, ex->vn, &g, t_new, ex->len));
    TRY(kern_attention(s, ex->attn, ex->q, kc, vc, ex->key_ok, &g, ex->len, t_new, ex->scores));
    TRY(kern_linear(s, h, ex->attn, n, &L->o, L->o_b, m->compute));
    TRY(model_reduce(ex, h, (size_t)n * H));
    TRY(kern_add(s, x, h, (size_t)n * H));

    /* MLP block: down(act(gate(h)) * up(h)), h = RMSNorm(x) */
    TRY(kern_rmsnorm(s, h, x, n, H, L->ln2, (float)c->rms_eps));
    TRY(kern_linear(s, gate, h, n, &L->gate, L->gate_b, m->compute));
    TRY(kern_linear(s, up, h, n, &L->up, L->up_b, m->compute));
    TRY(kern_gated_act(s, gate, gate, up, (size_t)n * fr, c->act));
    TRY(kern_linear(s, h, gate, n, &L->down, L->down_b, m->compute));
    TRY(model_reduce(ex, h, (size_t)n * H));
    return kern_add(s, x, h, (size_t)n * H);
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
