/* The sharding plan of OPT: which slice of which checkpoint tensor a shard
 * holds, and how it is bound, checked, packed into blobs and unpacked.
 *
 * Tensor names follow transformers: "model.decoder.layers.N.self_attn.q_proj.weight"
 * and so on, or the same without the "model." prefix (the opt-6.7b/13b/30b
 * files). "lm_head.weight" is used when present, else the head is tied to
 * embed_tokens. Linear weights are (out_features, in_features).
 */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/opt.h"
#include "model/opt_plan.h"

#define BLOB_ALIGN 64

int opt_shard_check(const struct opt_config *cfg, const struct opt_shard *s)
{
    if (s->tp_size < 1 || s->tp_rank < 0 || s->tp_rank >= s->tp_size)
        return err_set(ERR_INVALID, "tensor-parallel rank %d of %d is out of range", s->tp_rank,
                       s->tp_size);
    if (cfg->n_heads % s->tp_size || cfg->ffn % s->tp_size)
        return err_set(ERR_INVALID,
                       "tensor-parallel size %d must divide num_attention_heads %d and ffn_dim %d",
                       s->tp_size, cfg->n_heads, cfg->ffn);
    if (s->tp_size > cfg->vocab)
        return err_set(ERR_INVALID, "tensor-parallel size %d exceeds the vocabulary size %d",
                       s->tp_size, cfg->vocab);
    if (s->layer_begin < 0 || s->layer_end > cfg->n_layers || s->layer_begin >= s->layer_end)
        return err_set(ERR_INVALID, "layer range [%d, %d) is not inside [0, %d)", s->layer_begin,
                       s->layer_end, cfg->n_layers);
    return 0;
}

int opt_shard_alloc(const struct opt_config *cfg, const struct opt_shard *s,
                    struct opt_model **out)
{
    *out = NULL;
    int rc = opt_shard_check(cfg, s);
    if (rc < 0)
        return rc;
    struct opt_model *m = calloc(1, sizeof(*m));
    if (m)
        m->layers = calloc((size_t)(s->layer_end - s->layer_begin), sizeof(*m->layers));
    if (!m || !m->layers) {
        free(m);
        return err_set(ERR_NOMEM, "out of memory for a model shard");
    }
    m->cfg = *cfg;
    m->shard = *s;
    m->heads_local = cfg->n_heads / s->tp_size;
    m->ffn_local = cfg->ffn / s->tp_size;
    /* vocabulary rows: ceil-sized blocks, the last one shorter */
    int per = (cfg->vocab + s->tp_size - 1) / s->tp_size;
    m->vocab_begin = per * s->tp_rank < cfg->vocab ? per * s->tp_rank : cfg->vocab;
    int end = m->vocab_begin + per < cfg->vocab ? m->vocab_begin + per : cfg->vocab;
    m->vocab_local = end - m->vocab_begin;
    *out = m;
    return 0;
}

/* ---- the plan ---- */

struct planner {
    struct opt_part *parts;
    int n, cap;
    const char *prefix;
};

static struct opt_part *plan_add(struct planner *p, int blob, const char *name, bool prefixed)
{
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        struct opt_part *np = realloc(p->parts, (size_t)cap * sizeof(*np));
        if (!np)
            return NULL;
        p->parts = np;
        p->cap = cap;
    }
    struct opt_part *q = &p->parts[p->n++];
    memset(q, 0, sizeof(*q));
    snprintf(q->name, sizeof(q->name), "%s%s", prefixed ? p->prefix : "", name);
    q->blob = blob;
    return q;
}

/* A (rows, cols) matrix sliced to rows [r0, r0 + nr) x cols [c0, c0 + nc). */
static int plan_matrix(struct planner *p, int blob, const char *name, bool prefixed, int rows,
                       int cols, int r0, int nr, int c0, int nc, struct weight_view *view)
{
    struct opt_part *q = plan_add(p, blob, name, prefixed);
    if (!q)
        return err_set(ERR_NOMEM, "out of memory");
    q->matrix = true;
    q->rows = rows;
    q->cols = cols;
    q->r0 = r0;
    q->nr = nr;
    q->c0 = c0;
    q->nc = nc;
    q->view = view;
    return 0;
}

/* A vector of n elements sliced to [i0, i0 + count). */
static int plan_vector(struct planner *p, int blob, const char *name, int n, int i0, int count,
                       const float **vec)
{
    struct opt_part *q = plan_add(p, blob, name, true);
    if (!q)
        return err_set(ERR_NOMEM, "out of memory");
    q->rows = n;
    q->cols = 1;
    q->r0 = i0;
    q->nr = count;
    q->nc = 1;
    q->vec = vec;
    return 0;
}

static int plan_layer(struct planner *p, struct opt_model *m, int li)
{
    const struct opt_config *c = &m->cfg;
    struct opt_layer *L = &m->layers[li];
    const int l = m->shard.layer_begin + li, blob = 1 + li;
    const int H = c->hidden, hd = H / c->n_heads;
    const int qr = m->heads_local * hd, q0 = m->shard.tp_rank * qr;
    const int fr = m->ffn_local, f0 = m->shard.tp_rank * fr;
    const bool rank0 = m->shard.tp_rank == 0;
    char n[128];
    int rc = 0;
#define LNAME(s) (snprintf(n, sizeof(n), "layers.%d.%s", l, s), n)
#define TRY(x)                                                                           \
    do {                                                                                 \
        if ((rc = (x)) < 0)                                                              \
            return rc;                                                                   \
    } while (0)
    TRY(plan_matrix(p, blob, LNAME("self_attn.q_proj.weight"), true, H, H, q0, qr, 0, H, &L->q));
    TRY(plan_matrix(p, blob, LNAME("self_attn.k_proj.weight"), true, H, H, q0, qr, 0, H, &L->k));
    TRY(plan_matrix(p, blob, LNAME("self_attn.v_proj.weight"), true, H, H, q0, qr, 0, H, &L->v));
    TRY(plan_matrix(p, blob, LNAME("self_attn.out_proj.weight"), true, H, H, 0, H, q0, qr, &L->o));
    TRY(plan_matrix(p, blob, LNAME("fc1.weight"), true, c->ffn, H, f0, fr, 0, H, &L->fc1));
    TRY(plan_matrix(p, blob, LNAME("fc2.weight"), true, H, c->ffn, 0, H, f0, fr, &L->fc2));
    if (c->bias) {
        TRY(plan_vector(p, blob, LNAME("self_attn.q_proj.bias"), H, q0, qr, &L->q_b));
        TRY(plan_vector(p, blob, LNAME("self_attn.k_proj.bias"), H, q0, qr, &L->k_b));
        TRY(plan_vector(p, blob, LNAME("self_attn.v_proj.bias"), H, q0, qr, &L->v_b));
        TRY(plan_vector(p, blob, LNAME("fc1.bias"), c->ffn, f0, fr, &L->fc1_b));
        if (rank0) {
            TRY(plan_vector(p, blob, LNAME("self_attn.out_proj.bias"), H, 0, H, &L->o_b));
            TRY(plan_vector(p, blob, LNAME("fc2.bias"), H, 0, H, &L->fc2_b));
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

static int plan_ends(struct planner *p, struct opt_model *m, bool has_lm_head)
{
    const struct opt_config *c = &m->cfg;
    const bool first = m->shard.layer_begin == 0, last = m->shard.layer_end == c->n_layers;
    const bool proj = c->embed_dim != c->hidden;
    const int v0 = m->vocab_begin, nv = m->vocab_local, V = c->vocab, E = c->embed_dim;
    int rc = 0;
    if (first) {
        TRY(plan_matrix(p, 0, "embed_tokens.weight", true, V, E, v0, nv, 0, E, &m->embed));
        TRY(plan_matrix(p, 0, "embed_positions.weight", true, c->max_pos + 2, c->hidden, 0,
                        c->max_pos + 2, 0, c->hidden, &m->pos));
        if (proj)
            TRY(plan_matrix(p, 0, "project_in.weight", true, c->hidden, E, 0, c->hidden, 0, E,
                            &m->project_in));
    }
    if (!last)
        return 0;
    if (c->final_ln && c->ln_affine) {
        TRY(plan_vector(p, 0, "final_layer_norm.weight", c->hidden, 0, c->hidden, &m->final_ln_g));
        TRY(plan_vector(p, 0, "final_layer_norm.bias", c->hidden, 0, c->hidden, &m->final_ln_b));
    }
    if (proj)
        TRY(plan_matrix(p, 0, "project_out.weight", true, E, c->hidden, 0, E, 0, c->hidden,
                        &m->project_out));
    if (has_lm_head)
        return plan_matrix(p, 0, "lm_head.weight", false, V, E, v0, nv, 0, E, &m->lm_head);
    if (!c->tie_embeddings)
        return err_set(ERR_NOT_FOUND, "checkpoint has no tensor lm_head.weight (config.json "
                                      "says tie_word_embeddings is false)");
    if (!first) /* tied, on a stage without the embedding: its own copy of the rows */
        return plan_matrix(p, 0, "embed_tokens.weight", true, V, E, v0, nv, 0, E, &m->lm_head);
    m->head_is_embed = true; /* bound to m->embed's memory whenever that is bound */
    return 0;
#undef TRY
}

enum kern_compute opt_compute_default(enum dtype weights)
{
    return weights == DTYPE_BF16 ? KERN_COMPUTE_BF16 : KERN_COMPUTE_F32;
}

int opt_plan(struct opt_model *m, const struct st_checkpoint *ck, struct opt_part **parts,
             int *n_parts)
{
    struct planner p = {0};
    p.prefix = st_find(ck, "model.decoder.embed_tokens.weight") ? "model.decoder."
               : st_find(ck, "decoder.embed_tokens.weight")     ? "decoder."
                                                                : "model.decoder.";
    int rc = plan_ends(&p, m, st_find(ck, "lm_head.weight") != NULL);
    for (int i = 0; rc == 0 && i < m->shard.layer_end - m->shard.layer_begin; i++)
        rc = plan_layer(&p, m, i);
    if (rc < 0) {
        free(p.parts);
        return rc;
    }
    *parts = p.parts;
    *n_parts = p.n;
    return 0;
}

static int shape_error(const struct st_tensor *t, const struct opt_part *q)
{
    char got[128] = "";
    for (int i = 0; i < t->ndim; i++)
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%lld", i ? ", " : "",
                 (long long)t->shape[i]);
    if (q->matrix)
        return err_set(ERR_FORMAT, "%s: tensor %s has shape [%s], expected [%lld, %lld] from "
                                   "config.json", t->file, t->name, got, (long long)q->rows,
                       (long long)q->cols);
    return err_set(ERR_FORMAT, "%s: tensor %s has shape [%s], expected [%lld] from config.json",
                   t->file, t->name, got, (long long)q->rows);
}

const struct st_tensor *opt_part_tensor(const struct st_checkpoint *ck, const struct opt_part *q,
                                        int *rc)
{
    const struct st_tensor *t = st_find(ck, q->name);
    *rc = 0;
    if (!t) {
        *rc = err_set(ERR_NOT_FOUND, "checkpoint has no tensor %s", q->name);
        return NULL;
    }
    bool ok = q->matrix ? t->ndim == 2 && t->shape[0] == q->rows && t->shape[1] == q->cols
                        : t->ndim == 1 && t->shape[0] == q->rows;
    if (!ok) {
        *rc = shape_error(t, q);
        return NULL;
    }
    /* a tensor not aligned to its element size (possible in files from other
     * writers) is refused rather than read through a misaligned pointer */
    if ((uintptr_t)t->data % dtype_size(t->dtype) != 0) {
        *rc = err_set(ERR_UNSUPPORTED, "%s: tensor %s starts at byte %zu, not a multiple of its "
                                       "element size %zu", t->file, t->name, t->file_offset,
                      dtype_size(t->dtype));
        return NULL;
    }
    return t;
}

/* ---- blobs ---- */

int opt_shard_open(const struct opt_config *cfg, const struct st_checkpoint *ck,
                   const struct opt_shard *shard, struct opt_model **out,
                   struct opt_layout *layout)
{
    memset(layout, 0, sizeof(*layout));
    struct opt_model *m;
    int rc = opt_shard_alloc(cfg, shard, &m);
    if (rc < 0)
        return rc;
    if ((rc = opt_plan(m, ck, &layout->parts, &layout->n_parts)) < 0)
        goto fail;
    layout->n_blobs = 1 + shard->layer_end - shard->layer_begin;
    layout->blob_bytes = calloc((size_t)layout->n_blobs, sizeof(size_t));
    if (!layout->blob_bytes) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < layout->n_parts; i++) {
        struct opt_part *q = &layout->parts[i];
        const struct st_tensor *t = opt_part_tensor(ck, q, &rc);
        if (!t)
            goto fail;
        q->dtype = q->matrix ? t->dtype : DTYPE_F32;
        if (q->matrix)
            m->compute = opt_compute_default(t->dtype);
        size_t bytes = (size_t)q->nr * q->nc * dtype_size(q->dtype);
        size_t *end = &layout->blob_bytes[q->blob];
        q->offset = (*end + BLOB_ALIGN - 1) / BLOB_ALIGN * BLOB_ALIGN;
        *end = q->offset + bytes;
    }
    *out = m;
    return 0;
fail:
    opt_layout_free(layout);
    opt_model_close(m);
    return rc;
}

void opt_layout_free(struct opt_layout *layout)
{
    free(layout->parts);
    free(layout->blob_bytes);
    memset(layout, 0, sizeof(*layout));
}

int opt_shard_fill(const struct opt_model *m, const struct opt_layout *layout,
                   const struct st_checkpoint *ck, int b, void *dst)
{
    (void)m;
    for (int i = 0; i < layout->n_parts; i++) {
        const struct opt_part *q = &layout->parts[i];
        if (q->blob != b)
            continue;
        int rc;
        const struct st_tensor *t = opt_part_tensor(ck, q, &rc);
        if (!t)
            return rc;
        char *out = (char *)dst + q->offset;
        size_t es = dtype_size(t->dtype);
        if (!q->matrix) {
            dtype_to_f32(t->dtype, (const char *)t->data + (size_t)q->r0 * es, (float *)out,
                         (size_t)q->nr);
        } else if (q->nc == q->cols) { /* whole rows: one contiguous range */
            memcpy(out, (const char *)t->data + (size_t)q->r0 * q->cols * es,
                   (size_t)q->nr * q->cols * es);
        } else { /* a block of columns: part of every row */
            for (int r = 0; r < q->nr; r++)
                memcpy(out + (size_t)r * q->nc * es,
                       (const char *)t->data + (((size_t)q->r0 + r) * q->cols + q->c0) * es,
                       (size_t)q->nc * es);
        }
    }
    return 0;
}

void opt_shard_bind(struct opt_model *m, const struct opt_layout *layout, int b, const void *base)
{
    for (int i = 0; i < layout->n_parts; i++) {
        const struct opt_part *q = &layout->parts[i];
        if (q->blob != b)
            continue;
        const char *p = (const char *)base + q->offset;
        if (q->matrix)
            *q->view = (struct weight_view){
                .dtype = q->dtype, .data = p, .rows = q->nr, .cols = q->nc, .ld = (size_t)q->nc};
        else
            *q->vec = (const float *)p;
    }
    if (b == 0 && m->head_is_embed)
        m->lm_head = m->embed; /* re-bound on every load: the blob moves */
}
