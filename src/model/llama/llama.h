/* The Llama family as transformers computes it: LlamaForCausalLM (Llama 2,
 * Llama 3.x, SmolLM2, TinyLlama), MistralForCausalLM, Qwen2ForCausalLM,
 * Qwen3ForCausalLM (per-head RMSNorms of q and k before rotary) and
 * Phi3ForCausalLM (Phi-3, Phi-4: fused qkv_proj and gate_up_proj, split
 * by rows at load; LongRoPE), MixtralForCausalLM and Qwen3MoeForCausalLM
 * (a sparse mixture of gated-MLP experts in place of the MLP: every
 * layer of Mixtral, the sparse layers of Qwen3-MoE). Internal to model/llama/: the family's config
 * and views behind llama_arch.
 *
 * A decoder layer: x += o(attn(rope(q(n1(x))), rope(k(n1(x))), v(n1(x))));
 * x += down(act(gate(n2(x))) * up(n2(x))), with RMSNorms n1, n2,
 * grouped-query attention (n_kv_heads KV heads shared by groups of query
 * heads) and rotary position embeddings (rotate_half convention, on the
 * first rot_dim dims of each head).
 *
 * Sharding plan: q/k/v and gate/up by output rows (heads, hidden units;
 * each expert's too, the router whole on every rank),
 * o and down by input columns (row-parallel, summed by the all-reduce; their
 * biases added by rank 0 only). KV heads are split across ranks when tp
 * divides them, and replicated when tp exceeds them (tp a multiple of
 * n_kv_heads: each rank holds the one KV head its query heads use, as
 * vLLM does). Embedding and head by vocabulary rows; norms replicated.
 */
#ifndef SHARDSWAP_MODEL_LLAMA_LLAMA_H
#define SHARDSWAP_MODEL_LLAMA_LLAMA_H

#include "model/block.h"
#include "model/window.h"

enum rope_kind {
    ROPE_DEFAULT,
    ROPE_LINEAR,   /* positions divided by factor */
    ROPE_DYNAMIC,  /* NTK-aware past original_max_position_embeddings: max_pos capped there */
    ROPE_LLAMA3,   /* Llama 3.1's per-frequency rule */
    ROPE_LONGROPE, /* per-frequency short / long factors, chosen per sequence by its length */
    ROPE_FACTORS,  /* each frequency divided by its given factor (a GGUF's rope_freqs tensor,
                      which is how llama.cpp's converter stores the llama3 rule) */
};

#define LLAMA_MAX_FREQS 2048 /* rot_dim / 2 with head_dim up to 4096 */

enum llama_variant {
    LLAMA_VARIANT_LLAMA,
    LLAMA_VARIANT_MISTRAL,
    LLAMA_VARIANT_QWEN2,
    LLAMA_VARIANT_QWEN3,
    LLAMA_VARIANT_PHI3,
    LLAMA_VARIANT_MIXTRAL,   /* Mistral's attention, a sparse mixture of experts per layer */
    LLAMA_VARIANT_QWEN3_MOE, /* Qwen3's attention, experts on the sparse layers */
    LLAMA_VARIANT_QWEN2_MOE, /* Qwen2's attention, experts and a gated shared expert */
};

/* The most LongRoPE factors (rot_dim / 2) a config may list. */
#define LLAMA_LONGROPE_MAX 256

struct llama_config {
    struct model_config base;
    enum llama_variant variant;
    double rms_eps;          /* rms_norm_eps (the kernels take it as a float, as torch adds it to f32) */
    enum kern_act act;       /* hidden_act */
    bool qkv_bias, o_bias;   /* attention_bias (Llama: all four; Qwen2: q/k/v only) */
    bool mlp_bias;
    bool tie_embeddings;
    int rot_dim;             /* head_dim * partial_rotary_factor, even */
    double rope_theta;
    enum rope_kind rope;
    double rope_factor;      /* linear, dynamic, llama3 */
    double low_freq_factor, high_freq_factor; /* llama3 */
    int rope_orig_max_pos;   /* llama3, dynamic, longrope: original_max_position_embeddings */
    double rope_attn_factor; /* longrope: cos and sin scaled by it (1 otherwise) */
    float short_factor[LLAMA_LONGROPE_MAX],
        long_factor[LLAMA_LONGROPE_MAX]; /* longrope (rot_dim/2) */
    int sliding_window;      /* 0: none (or not used) */
    struct layer_windows windows; /* the layers that attend within it */
    int max_pos_config;      /* max_position_embeddings as config.json says it */
    float freq_factors[LLAMA_MAX_FREQS]; /* ROPE_FACTORS: rot_dim / 2 of them */
    /* mixtures of experts (n_experts 0: none) */
    int n_experts, top_k; /* num_local_experts / num_experts, num_experts_per_tok */
    int moe_ffn;          /* each expert's intermediate size */
    bool norm_topk;       /* the top k probabilities renormalised (Mixtral: always) */
    int shared_ffn;       /* the shared expert's intermediate size (Qwen2-MoE; 0: none) */
    uint64_t moe_bits[MODEL_MAX_LAYERS / 64]; /* the layers whose MLP is the experts */
};

static inline bool llama_moe_layer(const struct llama_config *c, int layer)
{
    return c->n_experts > 0 && (c->moe_bits[layer / 64] >> (layer % 64)) & 1;
}

/* Qwen3: self_attn.q_norm, k_norm (head_dim) before the rotary. */
static inline bool llama_qk_norm(const struct llama_config *c)
{
    return c->variant == LLAMA_VARIANT_QWEN3 || c->variant == LLAMA_VARIANT_QWEN3_MOE;
}

/* Phi-3: self_attn.qkv_proj and mlp.gate_up_proj, fused in the checkpoint. */
static inline bool llama_fused(const struct llama_config *c)
{
    return c->variant == LLAMA_VARIANT_PHI3;
}

static inline const struct llama_config *llama_cfg(const struct model *m)
{
    return ARCH_CONFIG(struct llama_config, m->cfg);
}

struct llama_layer {
    struct attn_weights attn; /* self_attn: q/k/v_proj (biases: qkv_bias), o_proj (o_bias) */
    struct mlp_weights mlp;   /* gated: gate_proj, up_proj, down_proj (biases: mlp_bias) */
    const float *ln1, *ln2;   /* input_layernorm, post_attention_layernorm (hidden) */
    /* a sparse layer's router and experts instead of mlp (llama_moe_layer) */
    struct moe_weights moe;
    struct expert_weights experts[MODEL_MAX_EXPERTS];
};

/* A shard's views (model.w). */
struct llama_weights {
    struct weight_view embed;   /* (vocab_local, hidden), first stage */
    const float *norm;          /* model.norm (hidden), last stage */
    struct weight_view lm_head; /* (vocab_local, hidden), last stage; maybe bound with embed */
};

static inline const struct llama_weights *llama_w(const struct model *m)
{
    return m->w;
}

/* Local layer i's views (model.layers). */
static inline struct llama_layer *llama_layer_w(const struct model *m, int i)
{
    return (struct llama_layer *)m->layers + i;
}

/* llama_config.c */
int llama_config_parse(json_t *root, const char *what, struct model_config **out);
int llama_config_save(const struct model_config *c, const char *dir);
void llama_describe(const struct model_config *c, char *buf, size_t cap);
/* "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", ... */
const char *llama_variant_arch(enum llama_variant v);
/* The rotary inverse frequencies (rot_dim / 2) as transformers computes
 * them in float32 for the config's rope type; longrope: the short
 * factors' when !long_ctx, else the long factors'. */
void llama_inv_freq(const struct llama_config *c, bool long_ctx, float *inv_freq);
/* llama_plan.c */
int llama_shard_check(const struct model_config *c, const struct model_shard *s);
int llama_shard_init(struct model *m);
int llama_plan(struct model *m, const struct st_checkpoint *ck, struct model_planner *p);
/* llama_forward.c */
void llama_exec_dims(const struct model *m, struct exec_dims *d);
uint64_t llama_required_ops(const struct model_config *c);
int llama_exec_prepare(const struct model *m, struct model_exec *ex);
int llama_embed(const struct model *m, struct model_exec *ex, const int32_t *ids,
                const uint8_t *mask, int t_new);
int llama_layer(const struct model *m, int layer, struct model_exec *ex, int t_new);
int llama_head(const struct model *m, struct model_exec *ex, int t_new, bool all_positions,
               float *logits);
/* llama_random.c */
int llama_preset(const char *name, struct model_config **out);
int llama_tensors(const struct model_config *c, struct tensor_spec **out, int *n);

#endif
