/* Binding an OPT shard to checkpoint tensors: names, shapes, slices.
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

struct binder {
    const struct st_checkpoint *ck;
    const char *prefix; /* "model.decoder." or "decoder." */
    float *params;      /* bump allocator into the model's parameter block */
    size_t params_left;
};

/* Finds prefix + name. A tensor whose data is not aligned to its element
 * size (possible in files from other writers) is refused rather than read
 * through a misaligned pointer. */
static const struct st_tensor *bind_find(const struct binder *b, const char *name, char *full,
                                         size_t cap)
{
    snprintf(full, cap, "%s%s", b->prefix, name);
    return st_find(b->ck, full);
}

static int bind_aligned(const struct st_tensor *t)
{
    if ((uintptr_t)t->data % dtype_size(t->dtype) == 0)
        return 0;
    return err_set(ERR_UNSUPPORTED, "%s: tensor %s starts at byte %zu, not a multiple of its "
                                    "element size %zu", t->file, t->name, t->file_offset,
                   dtype_size(t->dtype));
}

static int bind_shape_error(const struct st_tensor *t, int ndim, const int64_t *want)
{
    char got[128] = "", exp[128] = "";
    for (int i = 0; i < t->ndim; i++)
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%lld", i ? ", " : "",
                 (long long)t->shape[i]);
    for (int i = 0; i < ndim; i++)
        snprintf(exp + strlen(exp), sizeof(exp) - strlen(exp), "%s%lld", i ? ", " : "",
                 (long long)want[i]);
    return err_set(ERR_FORMAT, "%s: tensor %s has shape [%s], expected [%s] from config.json",
                   t->file, t->name, got, exp);
}

/* Finds a (rows, cols) matrix and views rows [r0, r0 + nr) x cols [c0, c0 + nc). */
static int bind_matrix(const struct binder *b, const char *name, int rows, int cols, int r0,
                       int nr, int c0, int nc, struct weight_view *out)
{
    char full[256];
    const struct st_tensor *t = bind_find(b, name, full, sizeof(full));
    if (!t)
        return err_set(ERR_NOT_FOUND, "checkpoint has no tensor %s", full);
    int64_t want[2] = {rows, cols};
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols)
        return bind_shape_error(t, 2, want);
    if (bind_aligned(t) < 0)
        return ERR_UNSUPPORTED;
    size_t es = dtype_size(t->dtype);
    out->dtype = t->dtype;
    out->data = (const char *)t->data + ((size_t)r0 * cols + c0) * es;
    out->rows = nr;
    out->cols = nc;
    out->ld = (size_t)cols;
    return 0;
}

/* Finds a vector of n elements and widens elements [i0, i0 + count) into the
 * parameter block. A missing optional vector gives *out = NULL. */
static int bind_vector(struct binder *b, const char *name, int n, int i0, int count,
                       bool required, const float **out)
{
    char full[256];
    const struct st_tensor *t = bind_find(b, name, full, sizeof(full));
    *out = NULL;
    if (!t) {
        if (required)
            return err_set(ERR_NOT_FOUND, "checkpoint has no tensor %s", full);
        return 0;
    }
    int64_t want[1] = {n};
    if (t->ndim != 1 || t->shape[0] != n)
        return bind_shape_error(t, 1, want);
    if (bind_aligned(t) < 0)
        return ERR_UNSUPPORTED;
    assert((size_t)count <= b->params_left);
    dtype_to_f32(t->dtype, (const char *)t->data + (size_t)i0 * dtype_size(t->dtype), b->params,
                 (size_t)count);
    *out = b->params;
    b->params += count;
    b->params_left -= (size_t)count;
    return 0;
}

static int bind_layer(struct binder *b, const struct opt_model *m, int li, struct opt_layer *L)
{
    const struct opt_config *c = &m->cfg;
    const int H = c->hidden, hd = H / c->n_heads;
    const int qr = m->heads_local * hd, q0 = m->shard.tp_rank * qr;
    const int fr = m->ffn_local, f0 = m->shard.tp_rank * fr;
    const bool rank0 = m->shard.tp_rank == 0;
    char n[128];
    int rc;
#define LNAME(s) (snprintf(n, sizeof(n), "layers.%d.%s", li, s), n)
    if ((rc = bind_matrix(b, LNAME("self_attn.q_proj.weight"), H, H, q0, qr, 0, H, &L->q)) < 0 ||
        (rc = bind_matrix(b, LNAME("self_attn.k_proj.weight"), H, H, q0, qr, 0, H, &L->k)) < 0 ||
        (rc = bind_matrix(b, LNAME("self_attn.v_proj.weight"), H, H, q0, qr, 0, H, &L->v)) < 0 ||
        (rc = bind_matrix(b, LNAME("self_attn.out_proj.weight"), H, H, 0, H, q0, qr, &L->o)) < 0 ||
        (rc = bind_matrix(b, LNAME("fc1.weight"), c->ffn, H, f0, fr, 0, H, &L->fc1)) < 0 ||
        (rc = bind_matrix(b, LNAME("fc2.weight"), H, c->ffn, 0, H, f0, fr, &L->fc2)) < 0)
        return rc;
    if (c->bias) {
        if ((rc = bind_vector(b, LNAME("self_attn.q_proj.bias"), H, q0, qr, true, &L->q_b)) < 0 ||
            (rc = bind_vector(b, LNAME("self_attn.k_proj.bias"), H, q0, qr, true, &L->k_b)) < 0 ||
            (rc = bind_vector(b, LNAME("self_attn.v_proj.bias"), H, q0, qr, true, &L->v_b)) < 0 ||
            (rc = bind_vector(b, LNAME("fc1.bias"), c->ffn, f0, fr, true, &L->fc1_b)) < 0)
            return rc;
        if (rank0 &&
            ((rc = bind_vector(b, LNAME("self_attn.out_proj.bias"), H, 0, H, true, &L->o_b)) < 0 ||
             (rc = bind_vector(b, LNAME("fc2.bias"), H, 0, H, true, &L->fc2_b)) < 0))
            return rc;
    }
    if (c->ln_affine) {
        if ((rc = bind_vector(b, LNAME("self_attn_layer_norm.weight"), H, 0, H, true, &L->ln1_g)) < 0 ||
            (rc = bind_vector(b, LNAME("self_attn_layer_norm.bias"), H, 0, H, true, &L->ln1_b)) < 0 ||
            (rc = bind_vector(b, LNAME("final_layer_norm.weight"), H, 0, H, true, &L->ln2_g)) < 0 ||
            (rc = bind_vector(b, LNAME("final_layer_norm.bias"), H, 0, H, true, &L->ln2_b)) < 0)
            return rc;
    }
#undef LNAME
    return 0;
}

static int bind_ends(struct binder *b, struct opt_model *m)
{
    const struct opt_config *c = &m->cfg;
    const bool first = m->shard.layer_begin == 0, last = m->shard.layer_end == c->n_layers;
    const bool proj = c->embed_dim != c->hidden;
    int rc;
    if (first || last) { /* the tied head reads the embedding table */
        rc = bind_matrix(b, "embed_tokens.weight", c->vocab, c->embed_dim, 0, c->vocab, 0,
                         c->embed_dim, &m->embed);
        if (rc < 0)
            return rc;
    }
    if (first) {
        if ((rc = bind_matrix(b, "embed_positions.weight", c->max_pos + 2, c->hidden, 0,
                              c->max_pos + 2, 0, c->hidden, &m->pos)) < 0)
            return rc;
        if (proj && (rc = bind_matrix(b, "project_in.weight", c->hidden, c->embed_dim, 0,
                                      c->hidden, 0, c->embed_dim, &m->project_in)) < 0)
            return rc;
    }
    if (!last)
        return 0;
    if (c->final_ln && c->ln_affine &&
        ((rc = bind_vector(b, "final_layer_norm.weight", c->hidden, 0, c->hidden, true,
                           &m->final_ln_g)) < 0 ||
         (rc = bind_vector(b, "final_layer_norm.bias", c->hidden, 0, c->hidden, true,
                           &m->final_ln_b)) < 0))
        return rc;
    if (proj && (rc = bind_matrix(b, "project_out.weight", c->embed_dim, c->hidden, 0,
                                  c->embed_dim, 0, c->hidden, &m->project_out)) < 0)
        return rc;
    struct binder head = *b;
    head.prefix = "";
    if (st_find(b->ck, "lm_head.weight"))
        return bind_matrix(&head, "lm_head.weight", c->vocab, c->embed_dim, 0, c->vocab, 0,
                           c->embed_dim, &m->lm_head);
    if (!c->tie_embeddings)
        return err_set(ERR_NOT_FOUND, "checkpoint has no tensor lm_head.weight (config.json "
                                      "says tie_word_embeddings is false)");
    m->lm_head = m->embed;
    return 0;
}

int opt_model_open_shard(const struct opt_config *cfg, struct st_checkpoint *ck,
                         const struct opt_shard *shard, struct opt_model **out)
{
    *out = NULL;
    const struct opt_shard s = *shard;
    if (s.tp_size < 1 || s.tp_rank < 0 || s.tp_rank >= s.tp_size)
        return err_set(ERR_INVALID, "tensor-parallel rank %d of %d is out of range", s.tp_rank,
                       s.tp_size);
    if (cfg->n_heads % s.tp_size || cfg->ffn % s.tp_size)
        return err_set(ERR_INVALID,
                       "tensor-parallel size %d must divide num_attention_heads %d and ffn_dim %d",
                       s.tp_size, cfg->n_heads, cfg->ffn);
    if (s.layer_begin < 0 || s.layer_end > cfg->n_layers || s.layer_begin >= s.layer_end)
        return err_set(ERR_INVALID, "layer range [%d, %d) is not inside [0, %d)", s.layer_begin,
                       s.layer_end, cfg->n_layers);
    struct opt_model *m = calloc(1, sizeof(*m));
    if (!m)
        return err_set(ERR_NOMEM, "out of memory for the model");
    m->cfg = *cfg;
    m->shard = s;
    m->ck = ck;
    m->heads_local = cfg->n_heads / s.tp_size;
    m->ffn_local = cfg->ffn / s.tp_size;
    int n_local = s.layer_end - s.layer_begin;
    size_t per_layer = (size_t)9 * cfg->hidden + (size_t)cfg->ffn;
    size_t n_params = per_layer * (size_t)n_local + 2 * (size_t)cfg->hidden;
    m->layers = calloc((size_t)n_local, sizeof(*m->layers));
    m->params = malloc(n_params * sizeof(float));
    int rc;
    if (!m->layers || !m->params) {
        rc = err_set(ERR_NOMEM, "out of memory for %zu model parameters", n_params);
        goto fail;
    }
    struct binder b = {.ck = ck, .params = m->params, .params_left = n_params};
    b.prefix = st_find(ck, "model.decoder.embed_tokens.weight") ? "model.decoder."
               : st_find(ck, "decoder.embed_tokens.weight") ? "decoder."
                                                             : "model.decoder.";
    if ((rc = bind_ends(&b, m)) < 0)
        goto fail;
    for (int i = 0; i < n_local; i++)
        if ((rc = bind_layer(&b, m, s.layer_begin + i, &m->layers[i])) < 0)
            goto fail;
    *out = m;
    return 0;
fail:
    opt_model_close(m);
    return rc;
}

int opt_model_open(const char *dir, struct opt_model **out)
{
    struct opt_config cfg;
    struct st_checkpoint *ck = NULL;
    int rc;
    *out = NULL;
    if ((rc = opt_config_load(dir, &cfg)) < 0)
        return rc;
    if ((rc = st_open(dir, &ck)) < 0)
        return rc;
    struct opt_shard whole = {.tp_rank = 0, .tp_size = 1, .layer_begin = 0,
                              .layer_end = cfg.n_layers};
    if ((rc = opt_model_open_shard(&cfg, ck, &whole, out)) < 0) {
        err_wrap(rc, "%s", dir);
        st_close(ck);
        return rc;
    }
    (*out)->owns_ck = true;
    return 0;
}

void opt_model_close(struct opt_model *m)
{
    if (!m)
        return;
    if (m->owns_ck)
        st_close(m->ck);
    free(m->layers);
    free(m->params);
    free(m);
}

static size_t view_bytes(const struct weight_view *w)
{
    return w->data ? (size_t)w->rows * w->cols * dtype_size(w->dtype) : 0;
}

size_t opt_model_weight_bytes(const struct opt_model *m)
{
    size_t n = 0;
    for (int i = 0; i < m->shard.layer_end - m->shard.layer_begin; i++) {
        const struct opt_layer *L = &m->layers[i];
        n += view_bytes(&L->q) + view_bytes(&L->k) + view_bytes(&L->v) + view_bytes(&L->o) +
             view_bytes(&L->fc1) + view_bytes(&L->fc2);
    }
    return n + view_bytes(&m->project_in) + view_bytes(&m->project_out) + view_bytes(&m->lm_head);
}
