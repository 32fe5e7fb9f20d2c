/* The Gemma family as transformers computes it: Gemma2ForCausalLM,
 * Gemma3ForCausalLM (model_type gemma3_text) and the text part of
 * Gemma3ForConditionalGeneration (model_type gemma3: its text_config and
 * its language_model weights; the vision tower is never read). Internal to
 * model/gemma/: the family's config and views behind gemma_arch.
 *
 * A decoder layer, every RMSNorm Gemma's (x * rsqrt(mean(x^2) + eps) *
 * (1 + w) in f32: the 1 is added to the widened weight once, at load):
 *   x += post_attention_norm(o(attn(q, k, v of input_norm(x))))
 *   x += post_feedforward_norm(down(gelu_tanh(gate(h)) * up(h))), h = pre_feedforward_norm(x)
 * with the embedding scaled by sqrt(hidden) (rounded to the compute dtype,
 * as transformers rounds it to the model's), q scaled by
 * query_pre_attn_scalar^-0.5, grouped-query attention, rotary (rotate_half)
 * with each layer type's own base, and a tied head. Gemma 2: tanh
 * soft-capping of the attention scores and of the final logits. Gemma 3:
 * per-head RMSNorms of q and k before the rotary (a kern_rmsnorm over rows
 * of head_dim). Local layers (layer_types "sliding_attention", or all but
 * every sliding_window_pattern-th) attend within sliding_window keys; Gemma
 * 3's use rope_local_base_freq, its global layers rope_theta (and a linear
 * rope_scaling where the config has one).
 *
 * Sharding plan: as the Llama family's (q/k/v and gate/up by output rows,
 * o and down by input columns, KV heads split or replicated, embedding and
 * head by vocabulary rows, norms replicated).
 */
#ifndef SHARDSWAP_MODEL_GEMMA_GEMMA_H
#define SHARDSWAP_MODEL_GEMMA_GEMMA_H

#include "model/block.h"
#include "model/window.h"

enum gemma_variant {
    GEMMA_2,    /* Gemma2ForCausalLM, model_type gemma2 */
    GEMMA_3,    /* Gemma3ForCausalLM, model_type gemma3_text */
    GEMMA_3_MM, /* Gemma3ForConditionalGeneration, model_type gemma3: text only */
};

struct gemma_config {
    struct model_config base;
    enum gemma_variant variant;
    double rms_eps;
    enum kern_act act;            /* hidden_activation */
    bool attn_bias;               /* attention_bias: q/k/v/o biases */
    double query_pre_attn_scalar; /* q is scaled by its -1/2 power */
    double attn_softcap;          /* Gemma 2's attn_logit_softcapping (0: none) */
    double final_softcap;         /* final_logit_softcapping (0: none) */
    int sliding_window;           /* keys a local layer sees (0: none) */
    struct layer_windows windows; /* the local layers */
    double rope_theta;            /* global layers (Gemma 2: every layer) */
    double rope_local_theta;      /* Gemma 3's local layers: rope_local_base_freq */
    double rope_factor;           /* Gemma 3's global layers: linear rope_scaling (1: none) */
    int image_token;              /* Gemma 3 multimodal: image_token_index (-1: none) */
    int max_pos_config;
};

static inline const struct gemma_config *gemma_cfg(const struct model *m)
{
    return ARCH_CONFIG(struct gemma_config, m->cfg);
}

static inline bool gemma_qk_norm(const struct gemma_config *c)
{
    return c->variant != GEMMA_2;
}

struct gemma_layer {
    struct attn_weights attn; /* q/k/v/o_proj (biases: attn_bias), q_norm/k_norm (Gemma 3) */
    struct mlp_weights mlp;   /* gate_proj, up_proj, down_proj */
    const float *ln_in, *ln_post_attn, *ln_pre_ff, *ln_post_ff; /* (hidden), 1 + w */
};

/* A shard's views (model.w). */
struct gemma_weights {
    struct weight_view embed;   /* (vocab_local, hidden), first stage */
    const float *norm;          /* model.norm (hidden), 1 + w, last stage */
    struct weight_view lm_head; /* (vocab_local, hidden), last stage; maybe bound with embed */
};

static inline const struct gemma_weights *gemma_w(const struct model *m)
{
    return m->w;
}

static inline struct gemma_layer *gemma_layer_w(const struct model *m, int i)
{
    return (struct gemma_layer *)m->layers + i;
}

/* gemma_config.c */
int gemma_config_parse(json_t *root, const char *what, struct model_config **out);
int gemma_config_save(const struct model_config *c, const char *dir);
void gemma_describe(const struct model_config *c, char *buf, size_t cap);
/* The rotary inverse frequencies (head_dim / 2) of the global (local
 * false) or local layers, as transformers computes them in float32. */
void gemma_inv_freq(const struct gemma_config *c, bool local, float *inv_freq);
/* gemma_plan.c */
int gemma_plan(struct model *m, const struct st_checkpoint *ck, struct model_planner *p);
/* gemma_forward.c */
void gemma_exec_dims(const struct model *m, struct exec_dims *d);
uint64_t gemma_required_ops(const struct model_config *c);
int gemma_exec_prepare(const struct model *m, struct model_exec *ex);
int gemma_embed(const struct model *m, struct model_exec *ex, const int32_t *ids,
                const uint8_t *mask, int t_new);
int gemma_layer(const struct model *m, int layer, struct model_exec *ex, int t_new);
int gemma_head(const struct model *m, struct model_exec *ex, int t_new, bool all_positions,
               float *logits);
/* gemma_random.c */
int gemma_preset(const char *name, struct model_config **out);
int gemma_tensors(const struct model_config *c, struct tensor_spec **out, int *n);

#endif
