/* The OPT forward pass: a flat list of kernel-table calls per layer on the
 * execution context's stream; buffers are the context's (nothing is
 * allocated here). */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "backend/kernels.h"
#include "core/error.h"
#include "model/opt.h"

#define OPT_LN_EPS 1e-5f

/* Runs one kernel call; on failure leaves the function with its code. */
#define TRY(call)                                                                                  \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ < 0)                                                                               \
            return rc_;                                                                            \
    } while (0)

static enum kern_act act_of(enum opt_act a)
{
    switch (a) {
    case OPT_ACT_RELU:
        return KERN_ACT_RELU;
    case OPT_ACT_GELU:
        return KERN_ACT_GELU;
    case OPT_ACT_GELU_TANH:
        return KERN_ACT_GELU_TANH;
    case OPT_ACT_SILU:
        return KERN_ACT_SILU;
    }
    assert(0 && "unknown activation");
    return KERN_ACT_RELU;
}

/* Sums partial results over the TP ranks (row-parallel outputs, embeddings). */
static int opt_reduce(struct opt_exec *ex, float *y, size_t n)
{
    return ex->tp ? comm_allreduce_sum(ex->tp, ex->stream, y, n) : 0;
}

int opt_forward_embed(const struct opt_model *m, struct opt_exec *ex, const int32_t *ids,
                      const uint8_t *mask, int t_new)
{
    const struct opt_config *c = &m->cfg;
    struct stream *s = ex->stream;
    const int B = ex->shape.batch, n = B * t_new, H = c->hidden, E = c->embed_dim;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab)
            return err_set(ERR_INVALID, "token id %d is outside the vocabulary (size %d)", ids[i],
                           c->vocab);
    /* position rows: running count of real tokens + 1 (transformers' offset 2 on
     * cumsum - 1); a pad gets row 1 */
    for (int b = 0; b < B; b++) {
        int count = ex->n_real[b];
        for (int t = 0; t < t_new; t++) {
            bool real = !mask || mask[b * t_new + t];
            count += real;
            ex->rows_host[b * t_new + t] = real ? count + 1 : 1;
        }
        if (count + 1 > c->max_pos + 1)
            return err_set(ERR_INVALID, "sequence of %d tokens exceeds max_position_embeddings %d",
                           count, c->max_pos);
    }
    TRY(kern_to_device(s, ex->ids, ids, (size_t)n * sizeof(int32_t)));
    TRY(kern_to_device(s, ex->rows, ex->rows_host, (size_t)n * sizeof(int32_t)));
    /* token embeddings (this rank's vocabulary rows; the all-reduce fills in
     * the others), through project_in when word_embed_proj_dim != hidden */
    float *e = m->project_in.data ? ex->e : ex->x;
    TRY(kern_embed(s, e, &m->embed, ex->ids, n, m->vocab_begin));
    TRY(opt_reduce(ex, e, (size_t)n * E));
    if (m->project_in.data)
        TRY(kern_linear(s, ex->x, e, n, &m->project_in, NULL, m->compute));
    /* + learned positions */
    TRY(kern_embed(s, ex->h, &m->pos, ex->rows, n, 0));
    return kern_add(s, ex->x, ex->h, (size_t)n * H);
}

int opt_forward_layer(const struct opt_model *m, int layer, struct opt_exec *ex, int t_new)
{
    const struct opt_config *c = &m->cfg;
    const struct opt_layer *L = &m->layers[layer];
    struct stream *s = ex->stream;
    const int H = c->hidden, n = ex->shape.batch * t_new;
    const int hd = ex->head_dim, qr = ex->heads * hd, fr = m->ffn_local;
    const struct kv_geom g = {.batch = ex->shape.batch,
                              .heads = ex->heads,
                              .kv_heads = ex->heads,
                              .head_dim = hd,
                              .max_t = ex->shape.max_len};
    const size_t cache = (size_t)g.batch * g.heads * g.max_t * hd;
    float *x = ex->x, *h = ex->h, *kc = ex->k + layer * cache, *vc = ex->v + layer * cache;

    /* attention block: h = LN1(x) before (pre-LN) */
    if (c->pre_ln)
        TRY(kern_layernorm(s, h, x, n, H, L->ln1_g, L->ln1_b, OPT_LN_EPS));
    else
        TRY(kern_copy(s, h, x, (size_t)n * H * sizeof(float)));
    TRY(kern_linear(s, ex->q, h, n, &L->q, L->q_b, m->compute));
    TRY(kern_linear(s, ex->kn, h, n, &L->k, L->k_b, m->compute));
    TRY(kern_linear(s, ex->vn, h, n, &L->v, L->v_b, m->compute));
    TRY(kern_scale(s, ex->q, (size_t)n * qr, 1.0f / sqrtf((float)hd)));
    TRY(kern_kv_append(s, kc, vc, ex->kn, ex->vn, &g, t_new, ex->len));
    TRY(kern_attention(s, ex->attn, ex->q, kc, vc, ex->key_ok, &g, ex->len, t_new, ex->scores));
    TRY(kern_linear(s, h, ex->attn, n, &L->o, L->o_b, m->compute));
    TRY(opt_reduce(ex, h, (size_t)n * H));
    TRY(kern_add(s, x, h, (size_t)n * H));
    if (!c->pre_ln)
        TRY(kern_layernorm(s, x, x, n, H, L->ln1_g, L->ln1_b, OPT_LN_EPS));

    /* feed-forward block */
    if (c->pre_ln)
        TRY(kern_layernorm(s, h, x, n, H, L->ln2_g, L->ln2_b, OPT_LN_EPS));
    else
        TRY(kern_copy(s, h, x, (size_t)n * H * sizeof(float)));
    TRY(kern_linear(s, ex->f, h, n, &L->fc1, L->fc1_b, m->compute));
    TRY(kern_activation(s, ex->f, (size_t)n * fr, act_of(c->act)));
    TRY(kern_linear(s, h, ex->f, n, &L->fc2, L->fc2_b, m->compute));
    TRY(opt_reduce(ex, h, (size_t)n * H));
    TRY(kern_add(s, x, h, (size_t)n * H));
    if (!c->pre_ln)
        TRY(kern_layernorm(s, x, x, n, H, L->ln2_g, L->ln2_b, OPT_LN_EPS));
    return 0;
}

int opt_forward_head(const struct opt_model *m, struct opt_exec *ex, int t_new, bool all_positions,
                     float *logits)
{
    const struct opt_config *c = &m->cfg;
    struct stream *s = ex->stream;
    const int H = c->hidden;
    /* the rows that get logits: every position, or each sequence's last */
    int n_rows = 0;
    for (int b = 0; b < ex->shape.batch; b++)
        for (int t = all_positions ? 0 : t_new - 1; t < t_new; t++)
            ex->rows_host[n_rows++] = b * t_new + t;
    if (n_rows > ex->shape.max_rows)
        return err_set(ERR_INVALID, "%d rows of logits exceed the %d the batch was sized for",
                       n_rows, ex->shape.max_rows);
    TRY(kern_to_device(s, ex->rows, ex->rows_host, (size_t)n_rows * sizeof(int32_t)));
    float *h = ex->h, *e = m->project_out.data ? ex->e : ex->h;
    TRY(kern_gather_rows(s, h, ex->x, ex->rows, n_rows, H));
    if (c->final_ln)
        TRY(kern_layernorm(s, h, h, n_rows, H, m->final_ln_g, m->final_ln_b, OPT_LN_EPS));
    if (m->project_out.data)
        TRY(kern_linear(s, e, h, n_rows, &m->project_out, NULL, m->compute));
    /* this rank's vocabulary block, then every block into rank 0's logits */
    TRY(kern_linear(s, ex->logits_local, e, n_rows, &m->lm_head, NULL, m->compute));
    if (ex->logits != ex->logits_local)
        TRY(comm_gather_cols(ex->tp, s, 0, ex->logits_local, n_rows, m->vocab_local, m->vocab_begin,
                             ex->logits, c->vocab));
    if (!logits)
        return 0;
    return kern_to_host(s, logits, ex->logits, (size_t)n_rows * c->vocab * sizeof(float));
}

int opt_forward(struct opt_model *m, struct opt_exec *ex, const int32_t *ids, const uint8_t *mask,
                int t_new, bool all_positions, float *logits)
{
    assert(m->shard.tp_size == 1 && m->shard.layer_begin == 0 &&
           m->shard.layer_end == m->cfg.n_layers);
    TRY(opt_exec_begin(ex, mask, t_new));
    TRY(opt_forward_embed(m, ex, ids, mask, t_new));
    for (int l = 0; l < m->cfg.n_layers; l++)
        TRY(opt_forward_layer(m, l, ex, t_new));
    opt_exec_commit(ex, mask, t_new);
    return opt_forward_head(m, ex, t_new, all_positions, logits);
}
