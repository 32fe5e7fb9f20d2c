/* OPT (Zhang et al. 2022) as transformers' OPTForCausalLM computes it.
 * Internal to model/opt/: the family's config and views behind opt_arch.
 *
 * Sharding plan (Megatron): q/k/v and fc1 are split by output rows
 * (column-parallel: each rank owns n_heads/tp heads and ffn/tp hidden units);
 * out_proj and fc2 are split by input columns (row-parallel) and their outputs
 * summed across ranks by the all-reduce; biases of row-parallel layers
 * are added by rank 0 only. The embedding table and the head are split by
 * vocabulary rows (vocab-parallel): a rank looks up only the ids in its range
 * and the all-reduce assembles the embeddings; each rank computes the logits
 * of its range and the gather assembles them. Splitting them, rather than
 * replicating, keeps every rank's share of a load equal to 1/tp of the model
 * (the tables are 8% of opt-1.3b). Position embeddings, project_in/out and
 * LayerNorms are replicated. The first stage owns the embeddings, the last
 * the final LayerNorm, project_out and the head (a tied head on a last stage
 * that is not also the first holds its own copy of its embedding rows).
 */
#ifndef SHARDSWAP_MODEL_OPT_OPT_H
#define SHARDSWAP_MODEL_OPT_OPT_H

#include "model/block.h"

enum opt_act {
    OPT_ACT_RELU,
    OPT_ACT_GELU,      /* exact, erf-based ("gelu") */
    OPT_ACT_GELU_TANH, /* tanh approximation ("gelu_new", "gelu_pytorch_tanh", "gelu_fast") */
    OPT_ACT_SILU,      /* "silu", "swish" */
};

/* config.json of an OPT checkpoint: every field that changes the
 * computation (info holds the shared ones: hidden, layers, heads, vocab,
 * max positions, ids, dtype). */
struct opt_config {
    struct model_config base;
    int embed_dim;           /* word_embed_proj_dim (== hidden unless project_in/out exist) */
    bool pre_ln;             /* do_layer_norm_before */
    bool final_ln;           /* pre_ln && !_remove_final_layer_norm */
    bool bias;               /* enable_bias */
    bool ln_affine;          /* layer_norm_elementwise_affine */
    bool tie_embeddings;     /* tie_word_embeddings */
    enum opt_act act;        /* activation_function */
};

static inline const struct opt_config *opt_cfg(const struct model *m)
{
    return ARCH_CONFIG(struct opt_config, m->cfg);
}

struct opt_layer {
    struct attn_weights attn;   /* self_attn: q/k/v_proj, out_proj (biases: enable_bias) */
    struct mlp_weights mlp;     /* fc1 as up, fc2 as down, not gated (biases: enable_bias) */
    const float *ln1_g, *ln1_b; /* self_attn_layer_norm (hidden) or NULL */
    const float *ln2_g, *ln2_b; /* final_layer_norm of the layer (hidden) or NULL */
};

/* A shard's views (model.w). */
struct opt_weights {
    /* first stage */
    struct weight_view embed;       /* (vocab_local, embed_dim) */
    struct weight_view pos;         /* (max_pos + 2, hidden) */
    struct weight_view project_in;  /* (hidden, embed_dim), data NULL when absent */
    /* last stage */
    const float *final_ln_g, *final_ln_b;
    struct weight_view project_out; /* (embed_dim, hidden), data NULL when absent */
    struct weight_view lm_head;     /* (vocab_local, embed_dim), maybe bound with embed */
};

static inline const struct opt_weights *opt_w(const struct model *m)
{
    return m->w;
}

/* Local layer i's views (model.layers). */
static inline struct opt_layer *opt_layer_w(const struct model *m, int i)
{
    return (struct opt_layer *)m->layers + i;
}

/* opt_config.c */
int opt_config_parse(json_t *root, const char *what, struct model_config **out);
int opt_config_save(const struct model_config *c, const char *dir);
void opt_describe(const struct model_config *c, char *buf, size_t cap);
const char *opt_act_name(enum opt_act a);
/* opt_plan.c */
int opt_shard_check(const struct model_config *c, const struct model_shard *s);
int opt_shard_init(struct model *m);
int opt_plan(struct model *m, const struct st_checkpoint *ck, struct model_planner *p);
/* opt_forward.c */
void opt_exec_dims(const struct model *m, struct exec_dims *d);
uint64_t opt_required_ops(const struct model_config *c);
int opt_embed(const struct model *m, struct model_exec *ex, const int32_t *ids,
              const uint8_t *mask, int t_new);
int opt_layer(const struct model *m, int layer, struct model_exec *ex, int t_new);
int opt_head(const struct model *m, struct model_exec *ex, int t_new, bool all_positions,
             float *logits);
/* opt_random.c */
int opt_preset(const char *name, struct model_config **out);
int opt_tensors(const struct model_config *c, struct tensor_spec **out, int *n);

#endif
