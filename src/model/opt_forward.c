/* The OPT forward pass: a flat list of kernel calls per layer. */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/opt.h"

#define OPT_LN_EPS 1e-5f

int opt_kv_init(const struct opt_model *m, int batch, int max_len, struct opt_kv **out)
{
    *out = NULL;
    if (batch < 1 || max_len < 1)
        return err_set(ERR_INVALID, "KV cache needs batch >= 1 and length >= 1 (got %d, %d)",
                       batch, max_len);
    struct opt_kv *kv = calloc(1, sizeof(*kv));
    if (!kv)
        return err_set(ERR_NOMEM, "out of memory for the KV cache");
    kv->batch = batch;
    kv->max_len = max_len;
    kv->layers = m->shard.layer_end - m->shard.layer_begin;
    kv->heads = m->heads_local;
    kv->head_dim = m->cfg.hidden / m->cfg.n_heads;
    size_t n = (size_t)kv->layers * batch * kv->heads * max_len * kv->head_dim;
    kv->k = malloc(n * sizeof(float));
    kv->v = malloc(n * sizeof(float));
    kv->key_ok = calloc((size_t)batch * max_len, 1);
    kv->n_real = calloc((size_t)batch, sizeof(int));
    if (!kv->k || !kv->v || !kv->key_ok || !kv->n_real) {
        opt_kv_free(kv);
        return err_set(ERR_NOMEM, "out of memory for a KV cache of %zu MiB",
                       2 * n * sizeof(float) >> 20);
    }
    *out = kv;
    return 0;
}

void opt_kv_reset(struct opt_kv *kv)
{
    kv->len = 0;
    memset(kv->key_ok, 0, (size_t)kv->batch * kv->max_len);
    memset(kv->n_real, 0, (size_t)kv->batch * sizeof(int));
}

void opt_kv_clear_slot(struct opt_kv *kv, int b)
{
    memset(kv->key_ok + (size_t)b * kv->max_len, 0, (size_t)kv->max_len);
    kv->n_real[b] = 0;
}

void opt_kv_free(struct opt_kv *kv)
{
    if (!kv)
        return;
    free(kv->k);
    free(kv->v);
    free(kv->key_ok);
    free(kv->n_real);
    free(kv);
}

/* Cache rows of (layer, sequence b): (heads, max_len, head_dim). */
static float *kv_at(const struct opt_kv *kv, float *base, int layer, int b)
{
    size_t per_seq = (size_t)kv->heads * kv->max_len * kv->head_dim;
    return base + ((size_t)layer * kv->batch + b) * per_seq;
}

int opt_kv_begin(struct opt_kv *kv, const uint8_t *mask, int t_new)
{
    if (t_new < 1 || kv->len + t_new > kv->max_len)
        return err_set(ERR_INVALID, "sequence length %d exceeds the KV cache capacity %d",
                       kv->len + t_new, kv->max_len);
    for (int b = 0; b < kv->batch; b++)
        for (int t = 0; t < t_new; t++)
            kv->key_ok[(size_t)b * kv->max_len + kv->len + t] = mask ? mask[b * t_new + t] : 1;
    return 0;
}

void opt_kv_commit(struct opt_kv *kv, const uint8_t *mask, int t_new)
{
    for (int b = 0; b < kv->batch; b++)
        for (int t = 0; t < t_new; t++)
            kv->n_real[b] += mask ? mask[b * t_new + t] != 0 : 1;
    kv->len += t_new;
}

/* Sums partial results over the TP ranks (row-parallel outputs, embeddings). */
static void opt_reduce(const struct opt_kv *kv, float *y, size_t n)
{
    if (kv->tp.allreduce)
        kv->tp.allreduce(kv->tp.ctx, y, n);
}

int opt_forward_embed(const struct opt_model *m, const struct opt_kv *kv, const int32_t *ids,
                      const uint8_t *mask, int t_new, float *x)
{
    const struct opt_config *c = &m->cfg;
    const int n = kv->batch * t_new;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab)
            return err_set(ERR_INVALID, "token id %d is outside the vocabulary (size %d)", ids[i],
                           c->vocab);
    /* position rows: running count of real tokens + 1 (transformers' offset 2 on
     * cumsum - 1); a pad gets row 1 */
    int32_t *rows = malloc((size_t)n * sizeof(int32_t));
    if (!rows)
        return err_set(ERR_NOMEM, "out of memory");
    for (int b = 0; b < kv->batch; b++) {
        int count = kv->n_real[b];
        for (int t = 0; t < t_new; t++) {
            bool real = !mask || mask[b * t_new + t];
            count += real;
            rows[b * t_new + t] = real ? count + 1 : 1;
        }
        if (count + 1 > c->max_pos + 1) {
            free(rows);
            return err_set(ERR_INVALID, "sequence of %d tokens exceeds max_position_embeddings %d",
                           count, c->max_pos);
        }
    }
    /* token embeddings (this rank's vocabulary rows; the all-reduce fills in
     * the others), through project_in when word_embed_proj_dim != hidden */
    const int E = c->embed_dim;
    float *e = x;
    if (m->project_in.data && !(e = malloc((size_t)n * E * sizeof(float)))) {
        free(rows);
        return err_set(ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        int32_t local = ids[i] - m->vocab_begin;
        if (local >= 0 && local < m->vocab_local)
            cpu_embed(e + (size_t)i * E, &m->embed, &local, 1);
        else
            memset(e + (size_t)i * E, 0, (size_t)E * sizeof(float));
    }
    opt_reduce(kv, e, (size_t)n * E);
    if (m->project_in.data) {
        cpu_linear(x, e, n, &m->project_in, NULL);
        free(e);
    }
    /* + learned positions */
    float *p = malloc((size_t)c->hidden * sizeof(float));
    if (!p) {
        free(rows);
        return err_set(ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        cpu_embed(p, &m->pos, &rows[i], 1);
        cpu_add(x + (size_t)i * c->hidden, p, (size_t)c->hidden);
    }
    free(p);
    free(rows);
    return 0;
}

void opt_forward_layer(const struct opt_model *m, int layer, struct opt_kv *kv, int t_new,
                       float *x)
{
    const struct opt_config *c = &m->cfg;
    const struct opt_layer *L = &m->layers[layer];
    const int H = c->hidden, B = kv->batch, n = B * t_new;
    const int hd = kv->head_dim, qr = m->heads_local * hd, fr = m->ffn_local;
    const int past = kv->len, t_all = past + t_new;
    const float scale = 1.0f / sqrtf((float)hd);

    /* scratch: h (n, H) | q, k, v, attn (n, qr) each | f (n, fr) | scores */
    size_t n_scratch = (size_t)n * H + 4 * (size_t)n * qr + (size_t)n * fr +
                       (size_t)t_new * t_all;
    float *h = malloc(n_scratch * sizeof(float));
    assert(h && "out of memory for layer scratch");
    float *q = h + (size_t)n * H, *k = q + (size_t)n * qr, *v = k + (size_t)n * qr;
    float *attn = v + (size_t)n * qr, *f = attn + (size_t)n * qr, *scores = f + (size_t)n * fr;

    /* attention block: h = LN1(x) before (pre-LN) */
    if (c->pre_ln)
        cpu_layernorm(h, x, n, H, L->ln1_g, L->ln1_b, OPT_LN_EPS);
    else
        memcpy(h, x, (size_t)n * H * sizeof(float));
    cpu_linear(q, h, n, &L->q, L->q_b);
    cpu_linear(k, h, n, &L->k, L->k_b);
    cpu_linear(v, h, n, &L->v, L->v_b);
    for (size_t i = 0; i < (size_t)n * qr; i++)
        q[i] *= scale;
    /* append k, v to the cache: (n, heads*hd) -> (heads, max_len, hd) per sequence */
    for (int b = 0; b < B; b++) {
        float *kc = kv_at(kv, kv->k, layer, b), *vc = kv_at(kv, kv->v, layer, b);
        for (int t = 0; t < t_new; t++)
            for (int hh = 0; hh < m->heads_local; hh++) {
                size_t src = ((size_t)b * t_new + t) * qr + (size_t)hh * hd;
                size_t dst = ((size_t)hh * kv->max_len + past + t) * hd;
                memcpy(kc + dst, k + src, (size_t)hd * sizeof(float));
                memcpy(vc + dst, v + src, (size_t)hd * sizeof(float));
            }
    }
    for (int b = 0; b < B; b++)
        cpu_attention(attn + (size_t)b * t_new * qr, (size_t)qr, q + (size_t)b * t_new * qr,
                      (size_t)qr, kv_at(kv, kv->k, layer, b), kv_at(kv, kv->v, layer, b),
                      m->heads_local, hd, (size_t)kv->max_len, past, t_new,
                      kv->key_ok + (size_t)b * kv->max_len, scores);
    cpu_linear(h, attn, n, &L->o, L->o_b);
    opt_reduce(kv, h, (size_t)n * H);
    cpu_add(x, h, (size_t)n * H);
    if (!c->pre_ln)
        cpu_layernorm(x, x, n, H, L->ln1_g, L->ln1_b, OPT_LN_EPS);

    /* feed-forward block */
    if (c->pre_ln)
        cpu_layernorm(h, x, n, H, L->ln2_g, L->ln2_b, OPT_LN_EPS);
    else
        memcpy(h, x, (size_t)n * H * sizeof(float));
    cpu_linear(f, h, n, &L->fc1, L->fc1_b);
    cpu_activation(f, (size_t)n * fr, c->act);
    cpu_linear(h, f, n, &L->fc2, L->fc2_b);
    opt_reduce(kv, h, (size_t)n * H);
    cpu_add(x, h, (size_t)n * H);
    if (!c->pre_ln)
        cpu_layernorm(x, x, n, H, L->ln2_g, L->ln2_b, OPT_LN_EPS);
    free(h);
}

int opt_forward_head(const struct opt_model *m, const struct opt_kv *kv, const float *x,
                     const int *rows, int n_rows, float *logits)
{
    const struct opt_config *c = &m->cfg;
    const int H = c->hidden, nv = m->vocab_local;
    const bool split = kv->tp.gather_cols != NULL;
    float *h = malloc((size_t)n_rows * (H + c->embed_dim + (split ? nv : 0)) * sizeof(float));
    if (!h)
        return err_set(ERR_NOMEM, "out of memory for the head of %d rows", n_rows);
    float *e = h + (size_t)n_rows * H, *local = split ? e + (size_t)n_rows * c->embed_dim : logits;
    for (int i = 0; i < n_rows; i++)
        memcpy(h + (size_t)i * H, x + (size_t)rows[i] * H, (size_t)H * sizeof(float));
    if (c->final_ln)
        cpu_layernorm(h, h, n_rows, H, m->final_ln_g, m->final_ln_b, OPT_LN_EPS);
    if (m->project_out.data)
        cpu_linear(e, h, n_rows, &m->project_out, NULL);
    else
        e = h;
    /* this rank's vocabulary block, then every block into rank 0's logits */
    cpu_linear(local, e, n_rows, &m->lm_head, NULL);
    if (split)
        kv->tp.gather_cols(kv->tp.ctx, 0, local, n_rows, nv, m->vocab_begin, logits, c->vocab);
    free(h);
    return 0;
}

int opt_forward(struct opt_model *m, struct opt_kv *kv, const int32_t *ids, const uint8_t *mask,
                int t_new, bool all_positions, float *logits)
{
    assert(m->shard.tp_size == 1 && m->shard.layer_begin == 0 &&
           m->shard.layer_end == m->cfg.n_layers);
    const int n = kv->batch * t_new;
    int rc = opt_kv_begin(kv, mask, t_new);
    if (rc < 0)
        return rc;
    float *x = malloc((size_t)n * m->cfg.hidden * sizeof(float));
    int *rows = malloc((size_t)n * sizeof(int));
    if (!x || !rows) {
        rc = err_set(ERR_NOMEM, "out of memory for activations of %d tokens", n);
        goto out;
    }
    if ((rc = opt_forward_embed(m, kv, ids, mask, t_new, x)) < 0)
        goto out;
    for (int l = 0; l < m->cfg.n_layers; l++)
        opt_forward_layer(m, l, kv, t_new, x);
    opt_kv_commit(kv, mask, t_new);
    int n_rows = 0;
    for (int b = 0; b < kv->batch; b++)
        for (int t = all_positions ? 0 : t_new - 1; t < t_new; t++)
            rows[n_rows++] = b * t_new + t;
    rc = opt_forward_head(m, kv, x, rows, n_rows, logits);
out:
    free(x);
    free(rows);
    return rc;
}
