/* The sharding plan of the Gemma family (gemma.h): the Llama family's
 * slices, with Gemma's four norms per layer, Gemma 3's per-head q/k norms
 * and every norm weight widened as 1 + w.
 *
 * Tensor names follow transformers: "model.layers.N.self_attn.q_proj.weight",
 * ..., "model.norm.weight"; a Gemma 3 multimodal checkpoint's language model
 * under "model.language_model." (transformers 5) or "language_model.model."
 * (the Hub's), its vision tower and projector never read. The head is tied
 * to embed_tokens unless "lm_head.weight" is present.
 */
#include <stdio.h>

#include "model/gemma/gemma.h"

#define NAME(s) plan_name(p, "%slayers.%d.%s", prefix, l, s)

static int plan_norm(struct model_planner *p, int blob, const char *name, int n, const float **v)
{
    return plan_vector_plus(p, blob, name, n, 0, n, 1.0f, v);
}

static int plan_attention(struct model_planner *p, const char *prefix, const struct model *m,
                          struct gemma_layer *L, int l, int blob)
{
    const struct gemma_config *c = gemma_cfg(m);
    const struct model_info *in = m->info;
    const int H = in->hidden, hd = in->head_dim;
    const int Q = in->n_heads * hd, K = in->n_kv_heads * hd;
    const int qr = m->heads_local * hd, q0 = m->shard.tp_rank * qr;
    const int kr = m->kv_heads_local * hd, k0 = m->kv_head_begin * hd;
    TRY(plan_matrix(p, blob, NAME("self_attn.q_proj.weight"), Q, H, q0, qr, 0, H, &L->attn.q));
    TRY(plan_matrix(p, blob, NAME("self_attn.k_proj.weight"), K, H, k0, kr, 0, H, &L->attn.k));
    TRY(plan_matrix(p, blob, NAME("self_attn.v_proj.weight"), K, H, k0, kr, 0, H, &L->attn.v));
    TRY(plan_matrix(p, blob, NAME("self_attn.o_proj.weight"), H, Q, 0, H, q0, qr, &L->attn.o));
    if (c->attn_bias) {
        TRY(plan_vector(p, blob, NAME("self_attn.q_proj.bias"), Q, q0, qr, &L->attn.q_b));
        TRY(plan_vector(p, blob, NAME("self_attn.k_proj.bias"), K, k0, kr, &L->attn.k_b));
        TRY(plan_vector(p, blob, NAME("self_attn.v_proj.bias"), K, k0, kr, &L->attn.v_b));
        if (m->shard.tp_rank == 0)
            TRY(plan_vector(p, blob, NAME("self_attn.o_proj.bias"), H, 0, H, &L->attn.o_b));
    }
    if (gemma_qk_norm(c)) {
        TRY(plan_norm(p, blob, NAME("self_attn.q_norm.weight"), hd, &L->attn.q_norm));
        TRY(plan_norm(p, blob, NAME("self_attn.k_norm.weight"), hd, &L->attn.k_norm));
    }
    return 0;
}

static int plan_layer(struct model_planner *p, const char *prefix, const struct model *m, int li)
{
    const struct model_info *in = m->info;
    struct gemma_layer *L = gemma_layer_w(m, li);
    const int l = m->shard.layer_begin + li, blob = 1 + li, H = in->hidden, F = in->ffn;
    const int fr = m->ffn_local, f0 = m->shard.tp_rank * fr;
    TRY(plan_attention(p, prefix, m, L, l, blob));
    TRY(plan_matrix(p, blob, NAME("mlp.gate_proj.weight"), F, H, f0, fr, 0, H, &L->mlp.gate));
    TRY(plan_matrix(p, blob, NAME("mlp.up_proj.weight"), F, H, f0, fr, 0, H, &L->mlp.up));
    TRY(plan_matrix(p, blob, NAME("mlp.down_proj.weight"), H, F, 0, H, f0, fr, &L->mlp.down));
    TRY(plan_norm(p, blob, NAME("input_layernorm.weight"), H, &L->ln_in));
    TRY(plan_norm(p, blob, NAME("post_attention_layernorm.weight"), H, &L->ln_post_attn));
    TRY(plan_norm(p, blob, NAME("pre_feedforward_layernorm.weight"), H, &L->ln_pre_ff));
    TRY(plan_norm(p, blob, NAME("post_feedforward_layernorm.weight"), H, &L->ln_post_ff));
    return 0;
}

#undef NAME

/* Where the language model's tensors are: "model.", a multimodal
 * checkpoint's "model.language_model." or "language_model.model.", or none. */
static const char *plan_prefix(const struct st_checkpoint *ck)
{
    static const char *const prefixes[] = {"model.", "model.language_model.",
                                           "language_model.model.", ""};
    char name[96];
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
        snprintf(name, sizeof(name), "%sembed_tokens.weight", prefixes[i]);
        if (st_find(ck, name))
            return prefixes[i];
    }
    return "model."; /* the missing tensor is named by the plan */
}

int gemma_plan(struct model *m, const struct st_checkpoint *ck, struct model_planner *p)
{
    const struct model_info *in = m->info;
    struct gemma_weights *w = m->w;
    const char *prefix = plan_prefix(ck);
    const int H = in->hidden;
    char embed[128];
    snprintf(embed, sizeof(embed), "%sembed_tokens.weight", prefix);
    if (m->shard.layer_begin == 0)
        TRY(plan_vocab_embed(p, m, ck, embed, H, &w->embed, &w->lm_head));
    if (m->shard.layer_end == in->n_layers) {
        TRY(plan_norm(p, 0, plan_name(p, "%snorm.weight", prefix), H, &w->norm));
        TRY(plan_vocab_head(p, m, ck, embed, H, true, &w->lm_head));
    }
    for (int i = 0; i < m->shard.layer_end - m->shard.layer_begin; i++)
        TRY(plan_layer(p, prefix, m, i));
    return 0;
}
