/* The sharding plan of OPT: which slice of which checkpoint tensor a shard
 * holds (model/layout.c checks, packs, copies and binds them).
 *
 * Tensor names follow transformers: "model.decoder.layers.N.self_attn.q_proj.weight"
 * and so on, or the same without the "model." prefix (the opt-6.7b/13b/30b
 * files). "lm_head.weight" is used when present, else the head is tied to
 * embed_tokens. Linear weights are (out_features, in_features).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/opt/opt.h"

int opt_shard_check(const struct model_config *mc, const struct model_shard *s)
{
    const struct model_info *in = &mc->info;
    if (in->n_heads % s->tp_size || in->ffn % s->tp_size)
        return err_set(ERR_INVALID,
                       "tensor-parallel size %d must divide num_attention_heads %d and ffn_dim %d",
                       s->tp_size, in->n_heads, in->ffn);
    if (s->expert_parallel)
        return err_set(ERR_INVALID, "expert parallelism needs routed experts; %s has none",
                       in->architecture);
    return 0;
}

int opt_shard_init(struct model *m)
{
    m->heads_local = m->kv_heads_local = m->info->n_heads / m->shard.tp_size;
    m->kv_head_begin = m->shard.tp_rank * m->heads_local;
    m->ffn_local = m->info->ffn / m->shard.tp_size;
    return 0;
}

/* ---- the plan ---- */

static int plan_layer(struct model_planner *p, const char *prefix, const struct model *m, int li)
{
    const struct opt_config *c = opt_cfg(m);
    const struct model_info *in = m->info;
    struct opt_layer *L = opt_layer_w(m, li);
    const int l = m->shard.layer_begin + li, blob = 1 + li;
    const int H = in->hidden, hd = in->head_dim;
    const int qr = m->heads_local * hd, q0 = m->shard.tp_rank * qr;
    const int fr = m->ffn_local, f0 = m->shard.tp_rank * fr;
    const bool rank0 = m->shard.tp_rank == 0;
#define LNAME(s) plan_name(p, "%slayers.%d.%s", prefix, l, s)
    TRY(plan_matrix(p, blob, LNAME("self_attn.q_proj.weight"), H, H, q0, qr, 0, H, &L->attn.q));
    TRY(plan_matrix(p, blob, LNAME("self_attn.k_proj.weight"), H, H, q0, qr, 0, H, &L->attn.k));
    TRY(plan_matrix(p, blob, LNAME("self_attn.v_proj.weight"), H, H, q0, qr, 0, H, &L->attn.v));
    TRY(plan_matrix(p, blob, LNAME("self_attn.out_proj.weight"), H, H, 0, H, q0, qr, &L->attn.o));
    TRY(plan_matrix(p, blob, LNAME("fc1.weight"), in->ffn, H, f0, fr, 0, H, &L->mlp.up));
    TRY(plan_matrix(p, blob, LNAME("fc2.weight"), H, in->ffn, 0, H, f0, fr, &L->mlp.down));
    if (c->bias) {
        TRY(plan_vector(p, blob, LNAME("self_attn.q_proj.bias"), H, q0, qr, &L->attn.q_b));
        TRY(plan_vector(p, blob, LNAME("self_attn.k_proj.bias"), H, q0, qr, &L->attn.k_b));
        TRY(plan_vector(p, blob, LNAME("self_attn.v_proj.bias"), H, q0, qr, &L->attn.v_b));
        TRY(plan_vector(p, blob, LNAME("fc1.bias"), in->ffn, f0, fr, &L->mlp.up_b));
        if (rank0) {
            TRY(plan_vector(p, blob, LNAME("self_attn.out_proj.bias"), H, 0, H, &L->attn.o_b));
            TRY(plan_vector(p, blob, LNAME("fc2.bias"), H, 0, H, &L->mlp.down_b));
        }
    }
    if (c->ln_affine) {
        TRY(plan_vector(p, blob, LNAME("self_attn_layer_norm.weight"), H, 0, H, &L->ln1_g));
        TRY(plan_vector(p, blob, LNAME("self_attn_layer_norm.bias"), H, 0, H, &L->ln1_b));
        TRY(plan_vector(p, blob, LNAME("final_layer_norm.weight"), H, 0, H, &L->ln2_g));
        TRY(plan_vector(p, blob, LNAME("final_layer_norm.bias"), H, 0, H, &L->ln2_b));
    }
#undef LNAME
    return 0;
}

static int plan_ends(struct model_planner *p, const char *prefix, const struct model *m,
                     const struct st_checkpoint *ck)
{
    const struct opt_config *c = opt_cfg(m);
    const struct model_info *in = m->info;
    struct opt_weights *w = m->w;
    const bool first = m->shard.layer_begin == 0, last = m->shard.layer_end == in->n_layers;
    const bool proj = c->embed_dim != in->hidden;
    const int E = c->embed_dim, H = in->hidden;
    char embed[128];
    snprintf(embed, sizeof(embed), "%sembed_tokens.weight", prefix);
    if (first) {
        TRY(plan_vocab_embed(p, m, ck, embed, E, &w->embed, &w->lm_head));
        TRY(plan_table(p, 0, plan_name(p, "%sembed_positions.weight", prefix), in->max_pos + 2,
                       H, 0, in->max_pos + 2, 0, H, &w->pos));
        if (proj)
            TRY(plan_matrix(p, 0, plan_name(p, "%sproject_in.weight", prefix), H, E, 0, H, 0, E,
                            &w->project_in));
    }
    if (!last)
        return 0;
    if (c->final_ln && c->ln_affine) {
        TRY(plan_vector(p, 0, plan_name(p, "%sfinal_layer_norm.weight", prefix), H, 0, H,
                        &w->final_ln_g));
        TRY(plan_vector(p, 0, plan_name(p, "%sfinal_layer_norm.bias", prefix), H, 0, H,
                        &w->final_ln_b));
    }
    if (proj)
        TRY(plan_head(p, 0, plan_name(p, "%sproject_out.weight", prefix), E, H, 0, E, 0, H,
                      &w->project_out));
    return plan_vocab_head(p, m, ck, embed, E, c->tie_embeddings, &w->lm_head);
}

int opt_plan(struct model *m, const struct st_checkpoint *ck, struct model_planner *p)
{
    const char *prefix = st_find(ck, "model.decoder.embed_tokens.weight") ? "model.decoder."
                         : st_find(ck, "decoder.embed_tokens.weight")     ? "decoder."
                                                                          : "model.decoder.";
    int rc = plan_ends(p, prefix, m, ck);
    for (int i = 0; rc == 0 && i < m->shard.layer_end - m->shard.layer_begin; i++)
        rc = plan_layer(p, prefix, m, i);
    return rc;
}
