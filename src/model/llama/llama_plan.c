/* The sharding plan of the Llama family (llama.h says which slice of what
 * each rank holds; model/layout.c checks, packs, copies and binds them).
 *
 * Tensor names follow transformers: "model.layers.N.self_attn.q_proj.weight",
 * "model.layers.N.mlp.gate_proj.weight", "model.norm.weight", ... (or the
 * same without "model."); "lm_head.weight" when present, else the head is
 * tied to embed_tokens (with tie_word_embeddings true). Linear weights are
 * (out_features, in_features).
 *
 * Mixtral and Qwen3-MoE: see plan_moe.
 *
 * Phi-3 fuses them: self_attn.qkv_proj is q_proj, k_proj and v_proj stacked
 * by rows (heads * head_dim, then kv_heads * head_dim twice), mlp.gate_up_proj
 * gate_proj then up_proj (intermediate_size each); every rank's slices are
 * the same rows of the fused tensor as of the separate ones, offset by the
 * parts before them, so the shards and the forward are the unfused ones.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/llama/llama.h"

extern const struct arch_ops llama_arch;

int llama_shard_check(const struct model_config *mc, const struct model_shard *s)
{
    const struct model_info *in = &mc->info;
    const int tp = s->tp_size, kv = in->n_kv_heads;
    if (in->n_heads % tp || in->ffn % tp)
        return err_set(ERR_INVALID,
                       "tensor-parallel size %d must divide num_attention_heads %d and "
                       "intermediate_size %d",
                       tp, in->n_heads, in->ffn);
    /* Gemma shares these checks; only the Llama family's config has experts */
    const struct llama_config *c =
        mc->arch == &llama_arch ? ARCH_CONFIG(struct llama_config, mc) : NULL;
    if (s->expert_parallel && (!c || c->n_experts == 0))
        return err_set(ERR_INVALID, "expert parallelism needs routed experts; %s has none",
                       in->architecture);
    /* whole experts on each rank: every rank needs one (a rank without
     * would hold only the split parts) */
    if (s->expert_parallel && tp > c->n_experts)
        return err_set(ERR_INVALID,
                       "expert parallelism over %d tensor-parallel ranks needs at least as many "
                       "experts, the model has %d",
                       tp, c->n_experts);
    if (c && c->n_experts > 0 && !s->expert_parallel && c->moe_ffn % tp)
        return err_set(ERR_INVALID,
                       "tensor-parallel size %d must divide each expert's intermediate size %d "
                       "(or place whole experts: expert parallelism)",
                       tp, c->moe_ffn);
    if (c && c->shared_ffn % tp)
        return err_set(ERR_INVALID,
                       "tensor-parallel size %d must divide the shared expert's intermediate "
                       "size %d",
                       tp, c->shared_ffn);
    if (tp <= kv ? kv % tp : tp % kv)
        return err_set(ERR_INVALID,
                       "tensor-parallel size %d must divide num_key_value_heads %d, or be a "
                       "multiple of it (KV heads replicated)",
                       tp, kv);
    return 0;
}

int llama_shard_init(struct model *m)
{
    const int tp = m->shard.tp_size, rank = m->shard.tp_rank, kv = m->info->n_kv_heads;
    m->heads_local = m->info->n_heads / tp;
    m->kv_heads_local = tp <= kv ? kv / tp : 1;
    /* replicated past tp = kv: the KV head this rank's query heads share */
    m->kv_head_begin = tp <= kv ? rank * m->kv_heads_local : rank * kv / tp;
    m->ffn_local = m->info->ffn / tp;
    return 0;
}

#define NAME(s) plan_name(p, "%slayers.%d.%s", prefix, l, s)
#define NAME2(fmt, ...) plan_name(p, "%slayers.%d." fmt, prefix, l, __VA_ARGS__)

static int plan_attention(struct model_planner *p, const char *prefix, const struct model *m,
                          struct llama_layer *L, int l, int blob)
{
    const struct llama_config *c = llama_cfg(m);
    const struct model_info *in = m->info;
    const int H = in->hidden, hd = in->head_dim;
    const int Q = in->n_heads * hd, K = in->n_kv_heads * hd;
    const int qr = m->heads_local * hd, q0 = m->shard.tp_rank * qr;
    const int kr = m->kv_heads_local * hd, k0 = m->kv_head_begin * hd;
    if (llama_fused(c)) {
        const int R = Q + 2 * K; /* qkv_proj rows: q, then k, then v */
        TRY(plan_matrix(p, blob, NAME("self_attn.qkv_proj.weight"), R, H, q0, qr, 0, H,
                        &L->attn.q));
        TRY(plan_matrix(p, blob, NAME("self_attn.qkv_proj.weight"), R, H, Q + k0, kr, 0, H,
                        &L->attn.k));
        TRY(plan_matrix(p, blob, NAME("self_attn.qkv_proj.weight"), R, H, Q + K + k0, kr, 0, H,
                        &L->attn.v));
    } else {
        TRY(plan_matrix(p, blob, NAME("self_attn.q_proj.weight"), Q, H, q0, qr, 0, H, &L->attn.q));
        TRY(plan_matrix(p, blob, NAME("self_attn.k_proj.weight"), K, H, k0, kr, 0, H, &L->attn.k));
        TRY(plan_matrix(p, blob, NAME("self_attn.v_proj.weight"), K, H, k0, kr, 0, H, &L->attn.v));
    }
    TRY(plan_matrix(p, blob, NAME("self_attn.o_proj.weight"), H, Q, 0, H, q0, qr, &L->attn.o));
    if (llama_qk_norm(c)) { /* per head, the same on every rank */
        TRY(plan_vector(p, blob, NAME("self_attn.q_norm.weight"), hd, 0, hd, &L->attn.q_norm));
        TRY(plan_vector(p, blob, NAME("self_attn.k_norm.weight"), hd, 0, hd, &L->attn.k_norm));
    }
    if (c->qkv_bias) {
        TRY(plan_vector(p, blob, NAME("self_attn.q_proj.bias"), Q, q0, qr, &L->attn.q_b));
        TRY(plan_vector(p, blob, NAME("self_attn.k_proj.bias"), K, k0, kr, &L->attn.k_b));
        TRY(plan_vector(p, blob, NAME("self_attn.v_proj.bias"), K, k0, kr, &L->attn.v_b));
    }
    if (c->o_bias && m->shard.tp_rank == 0)
        TRY(plan_vector(p, blob, NAME("self_attn.o_proj.bias"), H, 0, H, &L->attn.o_b));
    return 0;
}

/* A sparse layer's router (whole on every rank) and experts, each split as
 * a dense MLP or, under expert parallelism, this rank's range of them
 * whole (model_expert_range; the others are not in its blob), in expert
 * order within the layer's blob: Mixtral's
 * block_sparse_moe.gate and experts.E.w1 (gate), w3 (up), w2 (down), or
 * Qwen3-MoE's mlp.gate and mlp.experts.E.gate_proj, up_proj, down_proj
 * (what save_pretrained writes, one tensor per expert). */
static int plan_moe(struct model_planner *p, const char *prefix, const struct model *m,
                    const struct st_checkpoint *ck, struct llama_layer *L, int l, int blob)
{
    const struct llama_config *c = llama_cfg(m);
    /* split: every expert's rows f0 .. f0 + fr of F; expert parallelism:
     * experts eb .. ee whole */
    int eb, ee;
    model_expert_range(&m->shard, c->n_experts, &eb, &ee);
    const bool ep = m->shard.expert_parallel;
    const int H = m->info->hidden, F = c->moe_ffn, fr = ep ? F : F / m->shard.tp_size;
    const int f0 = ep ? 0 : m->shard.tp_rank * fr;
    char probe[160];
    snprintf(probe, sizeof(probe), "%slayers.%d.block_sparse_moe.gate.weight", prefix, l);
    const bool mixtral = st_find(ck, probe) != NULL;
    snprintf(probe, sizeof(probe), "%slayers.%d.mlp.experts.gate_up_proj", prefix, l);
    if (st_find(ck, probe))
        return err_set(ERR_UNSUPPORTED,
                       "checkpoint has %s: experts fused into one 3-D tensor are not supported "
                       "(expected one tensor per expert, as save_pretrained writes them)",
                       probe);
    const char *moe = mixtral ? "block_sparse_moe" : "mlp";
    static const char *const names[2][3] = {{"gate_proj", "up_proj", "down_proj"},
                                            {"w1", "w3", "w2"}};
    const char *const *nm = names[mixtral];
    TRY(plan_matrix(p, blob, NAME2("%s.gate.weight", moe), c->n_experts, H, 0, c->n_experts, 0, H,
                    &L->moe.router));
    for (int e = eb; e < ee; e++) {
        struct expert_weights *x = &L->experts[e];
        TRY(plan_expert(p, blob, e, NAME2("%s.experts.%d.%s.weight", moe, e, nm[0]), F, H, f0, fr,
                        0, H, &x->gate));
        TRY(plan_expert(p, blob, e, NAME2("%s.experts.%d.%s.weight", moe, e, nm[1]), F, H, f0, fr,
                        0, H, &x->up));
        TRY(plan_expert(p, blob, e, NAME2("%s.experts.%d.%s.weight", moe, e, nm[2]), H, F, 0, H, f0,
                        fr, &x->down));
    }
    L->moe.experts = L->experts;
    if (c->shared_ffn == 0)
        return 0;
    /* Qwen2-MoE's shared expert, split as the others, and its gate */
    const int S = c->shared_ffn, sr = S / m->shard.tp_size, s0 = m->shard.tp_rank * sr;
    struct expert_weights *x = &L->moe.shared;
    TRY(plan_matrix(p, blob, NAME("mlp.shared_expert.gate_proj.weight"), S, H, s0, sr, 0, H,
                    &x->gate));
    TRY(plan_matrix(p, blob, NAME("mlp.shared_expert.up_proj.weight"), S, H, s0, sr, 0, H, &x->up));
    TRY(plan_matrix(p, blob, NAME("mlp.shared_expert.down_proj.weight"), H, S, 0, H, s0, sr,
                    &x->down));
    return plan_matrix(p, blob, NAME("mlp.shared_expert_gate.weight"), 1, H, 0, 1, 0, H,
                       &L->moe.shared_gate);
}

static int plan_layer(struct model_planner *p, const char *prefix, const struct model *m,
                      const struct st_checkpoint *ck, int li)
{
    const struct llama_config *c = llama_cfg(m);
    const struct model_info *in = m->info;
    struct llama_layer *L = llama_layer_w(m, li);
    const int l = m->shard.layer_begin + li, blob = 1 + li, H = in->hidden, F = in->ffn;
    const int fr = m->ffn_local, f0 = m->shard.tp_rank * fr;
    TRY(plan_attention(p, prefix, m, L, l, blob));
    if (llama_moe_layer(c, l))
        TRY(plan_moe(p, prefix, m, ck, L, l, blob));
    else if (llama_fused(c)) { /* gate_up_proj rows: gate, then up */
        TRY(plan_matrix(p, blob, NAME("mlp.gate_up_proj.weight"), 2 * F, H, f0, fr, 0, H,
                        &L->mlp.gate));
        TRY(plan_matrix(p, blob, NAME("mlp.gate_up_proj.weight"), 2 * F, H, F + f0, fr, 0, H,
                        &L->mlp.up));
    } else {
        TRY(plan_matrix(p, blob, NAME("mlp.gate_proj.weight"), F, H, f0, fr, 0, H, &L->mlp.gate));
        TRY(plan_matrix(p, blob, NAME("mlp.up_proj.weight"), F, H, f0, fr, 0, H, &L->mlp.up));
    }
    if (!llama_moe_layer(c, l))
        TRY(plan_matrix(p, blob, NAME("mlp.down_proj.weight"), H, F, 0, H, f0, fr, &L->mlp.down));
    if (c->mlp_bias) {
        TRY(plan_vector(p, blob, NAME("mlp.gate_proj.bias"), F, f0, fr, &L->mlp.gate_b));
        TRY(plan_vector(p, blob, NAME("mlp.up_proj.bias"), F, f0, fr, &L->mlp.up_b));
        if (m->shard.tp_rank == 0)
            TRY(plan_vector(p, blob, NAME("mlp.down_proj.bias"), H, 0, H, &L->mlp.down_b));
    }
    TRY(plan_vector(p, blob, NAME("input_layernorm.weight"), H, 0, H, &L->ln1));
    TRY(plan_vector(p, blob, NAME("post_attention_layernorm.weight"), H, 0, H, &L->ln2));
    return 0;
}

#undef NAME
#undef NAME2

static int plan_ends(struct model_planner *p, const char *prefix, const struct model *m,
                     const struct st_checkpoint *ck)
{
    const struct model_info *in = m->info;
    struct llama_weights *w = m->w;
    const int H = in->hidden;
    char embed[128];
    snprintf(embed, sizeof(embed), "%sembed_tokens.weight", prefix);
    if (m->shard.layer_begin == 0)
        TRY(plan_vocab_embed(p, m, ck, embed, H, &w->embed, &w->lm_head));
    if (m->shard.layer_end != in->n_layers)
        return 0;
    TRY(plan_vector(p, 0, plan_name(p, "%snorm.weight", prefix), H, 0, H, &w->norm));
    return plan_vocab_head(p, m, ck, embed, H, llama_cfg(m)->tie_embeddings, &w->lm_head);
}

int llama_plan(struct model *m, const struct st_checkpoint *ck, struct model_planner *p)
{
    const char *prefix =
        !st_find(ck, "model.embed_tokens.weight") && st_find(ck, "embed_tokens.weight") ? ""
                                                                                        : "model.";
    int rc = plan_ends(p, prefix, m, ck);
    for (int i = 0; rc == 0 && i < m->shard.layer_end - m->shard.layer_begin; i++)
        rc = plan_layer(p, prefix, m, ck, i);
    return rc;
}
