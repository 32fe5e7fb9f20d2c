/* The blocks under a family's forward: attention and the MLP as every
 * family computes them, from the family's weights and options, on the
 * execution context's buffers through the kernel table. A family's layer
 * says where its norms go and which blocks it uses (llama.cpp's
 * build_attn / build_ffn, on our ops table). Internal to model/.
 *
 * Both blocks read the normalized activations ex->h, (batch * t_new,
 * hidden), overwrite it, and add their output to the residual ex->x; the
 * output projection is row-parallel, so its partial sums are reduced over
 * the TP ranks first. */
#ifndef SHARDSWAP_MODEL_BLOCK_H
#define SHARDSWAP_MODEL_BLOCK_H

#include "model/arch.h"

/* An attention block's views on one shard: q, k, v split by output rows
 * (this rank's query heads and KV heads), o by input columns. */
struct attn_weights {
    struct weight_view q, k, v, o;
    const float *q_b, *k_b, *v_b; /* this rank's rows, or NULL */
    const float *o_b;             /* (hidden), TP rank 0 only, or NULL */
    /* (head_dim) RMSNorm weights of every query and key head before the
     * rotary (kern_rmsnorm over rows of head_dim, eps the opts'), or NULL */
    const float *q_norm, *k_norm;
};

struct attn_opts {
    /* rotary embeddings on the first rot_dim dims of every q and k head
     * (rotate_half), at the positions in ex->pos, with the inverse
     * frequencies inv_freq (device; NULL: what the family put in ex->aux);
     * 0: none */
    int rot_dim;
    const float *inv_freq;
    /* cos and sin scaled by it (LongRoPE's attention factor); 0 means 1 */
    float rope_scale;
    /* a second table of inverse frequencies at inv_freq + rot_dim / 2 for
     * the sequences whose largest position this step + 1 exceeds this
     * (LongRoPE's long factors); 0: one table */
    int rope_long_after;
    float scale;   /* of q: 0 is 1 / sqrt(head_dim) */
    int window;    /* attention within a sliding window of this many keys (0: none) */
    float softcap; /* tanh soft-capping of the scores (0: none) */
    /* (hidden) RMSNorm of the block's output before the residual add (Gemma's
     * post-attention norm), or NULL; eps for it and the q/k norms */
    const float *post_norm;
    float eps;
};

/* x += o(attention(q(h), k(h), v(h))): q and k normalized per head when w
 * has q_norm / k_norm, rotary on q and k when o asks, q scaled, k and v
 * appended to local layer `layer`'s KV cache, grouped-query attention over
 * the cached keys that are real (ex->key_ok), not in the future and, under
 * a window, not older than it; the output normalized when o has a
 * post_norm. */
int model_block_attn(const struct model *m, struct model_exec *ex, int layer, int t_new,
                     const struct attn_weights *w, const struct attn_opts *o);

/* An MLP's views on one shard: up and gate split by output rows (this
 * rank's hidden units), down by input columns. */
struct mlp_weights {
    struct weight_view up, gate, down; /* gate: gated MLPs only */
    const float *up_b, *gate_b;        /* this rank's rows, or NULL */
    const float *down_b;               /* (hidden), TP rank 0 only, or NULL */
};

struct mlp_opts {
    enum kern_act act;
    bool gated; /* down(act(gate(h)) * up(h)) (SwiGLU with silu), else down(act(up(h))) */
    const float *post_norm; /* (hidden) RMSNorm of the output before the add, or NULL */
    float eps;
};

/* Floats per token of ex->f the MLP takes (the family's exec_dims
 * ffn_width): gate and up side by side when gated. */
int model_block_mlp_width(const struct model *m, const struct mlp_opts *o);

/* x += the MLP of h (local layer `layer`, for the batch's adapters). */
int model_block_mlp(const struct model *m, struct model_exec *ex, int layer, int t_new,
                    const struct mlp_weights *w, const struct mlp_opts *o);

/* The most experts a layer may have. */
#define MODEL_MAX_EXPERTS 128

/* One expert's gated MLP on one shard, split as a dense one (gate and up by
 * output rows, down by input columns). */
struct expert_weights {
    struct weight_view gate, up, down;
};

/* A sparse mixture of experts' views: the router (every rank holds it
 * whole, so every rank routes alike) and n_experts experts. */
struct moe_weights {
    struct weight_view router;            /* (n_experts, hidden) */
    const struct expert_weights *experts; /* (n_experts) */
    /* a shared expert every token takes, weighted by sigmoid(shared_gate(h))
     * (Qwen2-MoE; opts.shared_local > 0): shared_gate (1, hidden) whole on
     * every rank */
    struct expert_weights shared;
    struct weight_view shared_gate;
};

struct moe_opts {
    int n_experts, top_k;
    int ffn_local;  /* each expert's hidden units on this rank */
    bool norm_topk; /* the top k probabilities renormalised to sum to 1 */
    enum kern_act act;
    int shared_local; /* the shared expert's hidden units on this rank (0: none) */
    /* the routed experts this rank computes (model_expert_range): all of
     * them, each split (ffn_local a part of the width), or under expert
     * parallelism a range, each whole */
    int expert_begin, expert_end;
};

/* Floats per token of ex->e, of ex->f and of ex->host the MoE block takes
 * (the family's exec_dims extra_width, at least ffn_width, host_width). */
int model_block_moe_extra(const struct model *m, const struct moe_opts *o);
int model_block_moe_ffn(const struct moe_opts *o);
int model_block_moe_host(const struct moe_opts *o);

/* x += the mixture of experts of h, as transformers computes it: router
 * logits = router(h); probabilities = softmax in f32; each token's top_k
 * experts (ties to the lower index) with their probabilities, renormalised
 * when o->norm_topk; each expert's gated MLP run once over the rows routed
 * to it (gathered, in token order), and every token's outputs weighted and
 * summed in the experts' order, then the shared expert's output weighted by
 * sigmoid(shared_gate(h)) when there is one. The choices and their
 * grouping are made on the device (kern_route_topk, kern_route_group);
 * only the counts per expert come back to the host between the two (a
 * small sync point per layer), and every rank chooses alike.
 * The choices for real tokens are counted in local layer `layer`'s row of
 * ex->routed when the family asked for counters (exec_dims.experts), for
 * every expert on every rank.
 * Under expert parallelism (o->expert_begin .. expert_end not all of them)
 * the rank runs only its experts over the rows routed to them, and a
 * token's slots of other ranks' experts read a row of zeros: its sum is
 * then its own experts' share, and the TP all-reduce that follows (which
 * the split experts need as well) adds the ranks' shares. That is exact
 * because every rank holds the same h and routes alike, so no rows need to
 * travel (no all-to-all). */
int model_block_moe(const struct model *m, struct model_exec *ex, int layer, int t_new,
                    const struct moe_weights *w, const struct moe_opts *o);

#endif
