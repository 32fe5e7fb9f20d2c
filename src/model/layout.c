/* The shard layout of any family: the family's plan lists which slice of
 * which checkpoint tensor a shard holds; here the slices are checked,
 * packed into blobs, copied, bound, or bound straight to a mapped
 * checkpoint. */
#include <assert.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/kernels.h"
#include "core/error.h"
#include "core/qpack.h"
#include "format/ct.h"
#include "format/gguf_hf.h"
#include "model/arch.h"

#define BLOB_ALIGN 64

/* One tensor slice a shard holds. */
struct model_part {
    char name[128];            /* checkpoint tensor name */
    int blob;                  /* 0: embeddings and head, 1 + i: local layer i, or an
                                * expert's own (model_layout.expert_blob) */
    int expert;                /* a routed expert's index in its layer, else -1 */
    bool matrix;               /* else a vector (rows = length, cols = 1) */
    enum part_use {
        PART_TOKEN, /* multiplies every token */
        PART_ROW,   /* multiplies the rows that get logits (the head) */
        PART_TABLE, /* looked up, not multiplied (unless also bound as a head) */
        PART_EXPERT, /* a routed expert's: multiplies the tokens routed to it */
    } use;
    int rows, cols;            /* full tensor shape */
    int r0, nr, c0, nc;        /* the slice: rows [r0, r0 + nr) x cols [c0, c0 + nc) */
    enum dtype dtype;          /* in the blob: the checkpoint's for matrices (or bf16 for f16,
                                * model_layout_set_compute), F32 for vectors */
    enum dtype ck_dtype;       /* in the checkpoint */
    enum weight_pack pack;     /* how the blob holds a matrix's rows (model_layout_set_pack) */
    size_t offset;             /* in the blob */
    struct weight_view *view;  /* where a matrix binds */
    struct weight_view *also;  /* and a second place (a tied head), or NULL */
    const float **vec;         /* where a vector binds */
    float add;                 /* added to every element of a vector as it is widened */
};

struct model_planner {
    struct model_part *parts;
    int n, cap;
    char name[128];
};

/* ---- the shard ---- */

/* An unbound shard: its config, numbers and the family's (empty) views. */
static int shard_alloc(const struct model_config *cfg, const struct model_shard *s,
                       struct model **out)
{
    *out = NULL;
    int rc = model_shard_check(cfg, s);
    if (rc < 0)
        return rc;
    struct model *m = calloc(1, sizeof(*m));
    if (!m)
        return err_set(ERR_NOMEM, "out of memory for a model shard");
    if ((rc = model_config_dup(cfg, &m->cfg)) < 0) {
        free(m);
        return rc;
    }
    m->arch = cfg->arch;
    m->info = &m->cfg->info;
    m->shard = *s;
    const int V = m->info->vocab;
    /* vocabulary rows: ceil-sized blocks, the last one shorter */
    int per = (V + s->tp_size - 1) / s->tp_size;
    m->vocab_begin = per * s->tp_rank < V ? per * s->tp_rank : V;
    int end = m->vocab_begin + per < V ? m->vocab_begin + per : V;
    m->vocab_local = end - m->vocab_begin;
    m->w = calloc(1, m->arch->weights_size);
    m->layers = calloc((size_t)(s->layer_end - s->layer_begin), m->arch->layer_size);
    if (!m->w || !m->layers)
        rc = err_set(ERR_NOMEM, "out of memory for a model shard");
    if (rc < 0 || (rc = m->arch->shard_init(m)) < 0) {
        model_close(m);
        return rc;
    }
    *out = m;
    return 0;
}

void model_close(struct model *m)
{
    if (!m)
        return;
    if (m->owns_ck)
        st_close(m->ck);
    for (int b = 0; b < m->n_blobs; b++)
        device_free(m->blobs[b]);
    free(m->blobs);
    free(m->w);
    free(m->layers);
    free(m->params);
    model_config_free(m->cfg);
    free(m);
}

size_t model_weight_bytes(const struct model *m)
{
    return m->streamed_bytes;
}

const struct model_info *model_info(const struct model *m)
{
    return m->info;
}

enum kern_compute model_compute(const struct model *m)
{
    return m->compute;
}

void model_set_compute(struct model *m, enum kern_compute c)
{
    m->compute = c;
}

enum dtype model_weight_dtype(const struct model *m)
{
    return m->weight_dtype;
}

void model_expert_cost(const struct model *m, size_t *bytes, double *macs)
{
    *bytes = m->expert_bytes;
    *macs = m->expert_macs;
}

void model_macs(const struct model *m, double *per_token, double *per_row)
{
    *per_token = m->macs_token;
    *per_row = m->macs_row;
}

struct device *model_weights_device(const struct model *m)
{
    return m->dev;
}

/* ---- the plan ---- */

static struct model_part *plan_add(struct model_planner *p, int blob, const char *name)
{
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        struct model_part *np = realloc(p->parts, (size_t)cap * sizeof(*np));
        if (!np)
            return NULL;
        p->parts = np;
        p->cap = cap;
    }
    struct model_part *q = &p->parts[p->n++];
    memset(q, 0, sizeof(*q));
    snprintf(q->name, sizeof(q->name), "%s", name);
    q->blob = blob;
    q->expert = -1;
    return q;
}

/* v[i] += a in f32 (Gemma's 1 + w, as torch adds it to the widened weight) */
static void vec_add_const(float *v, size_t n, float a)
{
    for (size_t i = 0; a != 0 && i < n; i++)
        v[i] += a;
}

static int plan_slice(struct model_planner *p, int blob, const char *name, int rows, int cols,
                      int r0, int nr, int c0, int nc, struct weight_view *view, enum part_use use)
{
    struct model_part *q = plan_add(p, blob, name);
    if (!q)
        return err_set(ERR_NOMEM, "out of memory");
    assert(r0 >= 0 && nr > 0 && r0 + nr <= rows && c0 >= 0 && nc > 0 && c0 + nc <= cols);
    q->matrix = true;
    q->use = use;
    q->rows = rows;
    q->cols = cols;
    q->r0 = r0;
    q->nr = nr;
    q->c0 = c0;
    q->nc = nc;
    q->view = view;
    return 0;
}

int plan_matrix(struct model_planner *p, int blob, const char *name, int rows, int cols, int r0,
                int nr, int c0, int nc, struct weight_view *view)
{
    return plan_slice(p, blob, name, rows, cols, r0, nr, c0, nc, view, PART_TOKEN);
}

int plan_head(struct model_planner *p, int blob, const char *name, int rows, int cols, int r0,
              int nr, int c0, int nc, struct weight_view *view)
{
    return plan_slice(p, blob, name, rows, cols, r0, nr, c0, nc, view, PART_ROW);
}

int plan_expert(struct model_planner *p, int blob, int expert, const char *name, int rows, int cols,
                int r0, int nr, int c0, int nc, struct weight_view *view)
{
    TRY(plan_slice(p, blob, name, rows, cols, r0, nr, c0, nc, view, PART_EXPERT));
    p->parts[p->n - 1].expert = expert;
    return 0;
}

int plan_table(struct model_planner *p, int blob, const char *name, int rows, int cols, int r0,
               int nr, int c0, int nc, struct weight_view *view)
{
    return plan_slice(p, blob, name, rows, cols, r0, nr, c0, nc, view, PART_TABLE);
}

void plan_also(struct model_planner *p, struct weight_view *also)
{
    assert(p->n > 0 && p->parts[p->n - 1].matrix);
    p->parts[p->n - 1].also = also;
}

int plan_vector_plus(struct model_planner *p, int blob, const char *name, int n, int i0, int count,
                     float add, const float **vec)
{
    TRY(plan_vector(p, blob, name, n, i0, count, vec));
    p->parts[p->n - 1].add = add;
    return 0;
}

int plan_vector(struct model_planner *p, int blob, const char *name, int n, int i0, int count,
                const float **vec)
{
    struct model_part *q = plan_add(p, blob, name);
    if (!q)
        return err_set(ERR_NOMEM, "out of memory");
    assert(i0 >= 0 && count > 0 && i0 + count <= n);
    q->rows = n;
    q->cols = 1;
    q->r0 = i0;
    q->nr = count;
    q->nc = 1;
    q->vec = vec;
    return 0;
}

int plan_vocab_embed(struct model_planner *p, const struct model *m, const struct st_checkpoint *ck,
                     const char *embed_name, int width, struct weight_view *embed,
                     struct weight_view *head)
{
    const int V = m->info->vocab, v0 = m->vocab_begin, nv = m->vocab_local;
    TRY(plan_table(p, 0, embed_name, V, width, v0, nv, 0, width, embed));
    if (m->shard.layer_end == m->info->n_layers && !st_find(ck, "lm_head.weight"))
        plan_also(p, head); /* a tied head, bound to the embedding's memory */
    return 0;
}

int plan_vocab_head(struct model_planner *p, const struct model *m, const struct st_checkpoint *ck,
                    const char *embed_name, int width, bool tie, struct weight_view *head)
{
    const int V = m->info->vocab, v0 = m->vocab_begin, nv = m->vocab_local;
    if (st_find(ck, "lm_head.weight"))
        return plan_head(p, 0, "lm_head.weight", V, width, v0, nv, 0, width, head);
    if (!tie)
        return err_set(ERR_NOT_FOUND, "checkpoint has no tensor lm_head.weight (config.json "
                                      "says tie_word_embeddings is false)");
    if (m->shard.layer_begin == 0) /* bound with the embedding (plan_vocab_embed) */
        return 0;
    /* tied, on a stage without the embedding: its own copy of the rows */
    return plan_head(p, 0, embed_name, V, width, v0, nv, 0, width, head);
}

const char *plan_name(struct model_planner *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->name, sizeof(p->name), fmt, ap);
    va_end(ap);
    return p->name;
}

/* The parts of m against ck; *parts malloc'd. */
static int plan_run(struct model *m, const struct st_checkpoint *ck, struct model_part **parts,
                    int *n_parts)
{
    struct model_planner p = {0};
    int rc = m->arch->plan(m, ck, &p);
    if (rc < 0) {
        free(p.parts);
        return rc;
    }
    *parts = p.parts;
    *n_parts = p.n;
    return 0;
}

static int shape_error(const struct st_tensor *t, const struct model_part *q)
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

/* ck's tensor for q, checked (presence, shape, alignment); NULL and *rc on error. */
static const struct st_tensor *part_tensor(const struct st_checkpoint *ck,
                                           const struct model_part *q, int *rc)
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
     * writers) is refused rather than read through a misaligned pointer; a
     * block type's blocks start with f16 scales */
    size_t align = t->ct                      ? 1 /* read by ct_copy */
                   : dtype_is_block(t->dtype) ? sizeof(uint16_t)
                                              : dtype_size(t->dtype);
    if ((uintptr_t)t->data % align != 0) {
        *rc = err_set(ERR_UNSUPPORTED, "%s: tensor %s starts at byte %zu, not a multiple of its "
                                       "element size %zu", t->file, t->name, t->file_offset,
                      align);
        return NULL;
    }
    /* quantized blocks stay whole: vectors are widened element by element,
     * and a tensor-parallel split of columns must fall on block boundaries */
    if (dtype_is_block(t->dtype) && !q->matrix) {
        *rc = err_set(ERR_UNSUPPORTED, "%s: tensor %s is %s, expected F32, F16 or BF16 for a "
                                       "vector", t->file, t->name, dtype_name(t->dtype));
        return NULL;
    }
    if (q->matrix && ((*rc = dtype_check_cols(t->dtype, 0, (size_t)q->cols, t->name)) < 0 ||
                      (*rc = dtype_check_cols(t->dtype, (size_t)q->c0, (size_t)q->nc, t->name)) < 0))
        return NULL;
    return t;
}

static size_t part_bytes(const struct model_part *q, enum dtype dt)
{
    return (size_t)q->nr * dtype_row_bytes(dt, (size_t)q->nc);
}

/* Bytes from the start of a matrix of `cols` columns of type t to its
 * element (r, c); c on a block boundary (part_tensor checked). */
static size_t elem_offset(enum dtype t, size_t r, size_t cols, size_t c)
{
    return r * dtype_row_bytes(t, cols) + dtype_row_bytes(t, c);
}

/* What a matrix part adds to the shard's streamed bytes and multiply-adds. */
static void part_count(struct model *m, const struct model_part *q, enum dtype dt)
{
    double macs = (double)q->nr * q->nc;
    /* a quantized model reports (and computes by) its block types, though
     * a few of its matrices may be kept plain */
    if (!dtype_is_block(m->weight_dtype) || dtype_is_block(dt)) {
        m->weight_dtype = dt;
        m->compute = model_compute_default(dt);
    }
    if (q->use == PART_EXPERT) {
        m->expert_macs += macs;
        m->expert_bytes += part_bytes(q, dt);
        return;
    }
    if (q->use == PART_TOKEN)
        m->macs_token += macs;
    else if (q->use == PART_ROW || q->also)
        m->macs_row += macs;
    if (q->use != PART_TABLE || q->also)
        m->streamed_bytes += part_bytes(q, dt);
}

/* ---- blobs ---- */

/* With expert blobs: each routed expert's parts move from their layer's
 * blob to one of the expert's own, numbered from n_dense in the order the
 * plan lists them (local layer by local layer, the shard's experts in
 * order); sets the layout's map and n_blobs. */
static int layout_expert_blobs(struct model_layout *layout, int n_local)
{
    int experts = 0;
    for (int i = 0; i < layout->n_parts; i++)
        if (layout->parts[i].use == PART_EXPERT && layout->parts[i].expert >= experts)
            experts = layout->parts[i].expert + 1;
    if (experts == 0)
        return 0; /* no routed experts on this shard: nothing to split */
    layout->expert_blob = malloc((size_t)n_local * experts * sizeof(int));
    if (!layout->expert_blob)
        return err_set(ERR_NOMEM, "out of memory");
    for (int i = 0; i < n_local * experts; i++)
        layout->expert_blob[i] = -1;
    layout->n_experts = experts;
    int next = layout->n_dense;
    for (int i = 0; i < layout->n_parts; i++) {
        struct model_part *q = &layout->parts[i];
        if (q->use != PART_EXPERT)
            continue;
        assert(q->blob >= 1 && q->blob < layout->n_dense && q->expert >= 0);
        int *b = &layout->expert_blob[(size_t)(q->blob - 1) * experts + q->expert];
        if (*b < 0)
            *b = next++;
        q->blob = *b;
    }
    layout->n_blobs = next;
    return 0;
}

int model_shard_open(const struct model_config *cfg, const struct st_checkpoint *ck,
                     const struct model_shard *shard, struct model **out,
                     struct model_layout *layout)
{
    memset(layout, 0, sizeof(*layout));
    *out = NULL;
    struct model *m;
    int rc = shard_alloc(cfg, shard, &m);
    if (rc < 0)
        return rc;
    if ((rc = plan_run(m, ck, &layout->parts, &layout->n_parts)) < 0)
        goto fail;
    layout->n_blobs = layout->n_dense = 1 + shard->layer_end - shard->layer_begin;
    if (shard->expert_blobs &&
        (rc = layout_expert_blobs(layout, shard->layer_end - shard->layer_begin)) < 0)
        goto fail;
    layout->blob_bytes = calloc((size_t)layout->n_blobs, sizeof(size_t));
    if (!layout->blob_bytes) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < layout->n_parts; i++) {
        struct model_part *q = &layout->parts[i];
        const struct st_tensor *t = part_tensor(ck, q, &rc);
        if (!t)
            goto fail;
        q->ck_dtype = t->dtype;
        q->dtype = q->matrix ? t->dtype : DTYPE_F32;
        if (q->matrix)
            part_count(m, q, q->dtype);
        size_t *end = &layout->blob_bytes[q->blob];
        q->offset = (*end + BLOB_ALIGN - 1) / BLOB_ALIGN * BLOB_ALIGN;
        *end = q->offset + part_bytes(q, q->dtype);
    }
    *out = m;
    return 0;
fail:
    model_layout_free(layout);
    model_close(m);
    return rc;
}

const char *model_part_name(const struct model_layout *layout, int i)
{
    return layout->parts[i].name;
}

void model_layout_free(struct model_layout *layout)
{
    free(layout->expert_blob);
    free(layout->parts);
    free(layout->blob_bytes);
    memset(layout, 0, sizeof(*layout));
}

/* n elements of type from at src, as type to at dst (from == to: a copy of
 * the bytes, quantized blocks too; f16 to bf16: widened exactly through an
 * f32 span, then rounded to nearest even, as torch's .to(torch.bfloat16)
 * rounds). */
static void copy_elems(void *dst, enum dtype to, const void *src, enum dtype from, size_t n)
{
    if (from == to) {
        memcpy(dst, src, dtype_row_bytes(from, n));
        return;
    }
    assert(!dtype_is_block(from) && !dtype_is_block(to));
    float span[1024];
    for (size_t i = 0; i < n; i += 1024) {
        size_t len = n - i < 1024 ? n - i : 1024;
        dtype_to_f32(from, (const char *)src + i * dtype_size(from), span, len);
        dtype_from_f32(to, span, (char *)dst + i * dtype_size(to), len);
    }
}

/* q's slice of t into out, as dtype `to` for a matrix (f32 for a vector, plus its
 * constant add: Gemma's 1 + w), rows
 * back in transformers' order where the checkpoint stored them permuted
 * (a GGUF's llama q and k), a compressed-tensors weight repacked into its
 * CT blocks (format/ct.h). */
static void part_copy(const struct model_part *q, const struct st_tensor *t, char *out,
                      enum dtype to)
{
    const char *src = t->data;
    size_t hd = t->rope_perm_heads ? (size_t)q->rows / (size_t)t->rope_perm_heads : 0;
    if (!q->matrix) {
        size_t es = dtype_size(t->dtype); /* a plain type (part_tensor) */
        if (!hd)
            dtype_to_f32(t->dtype, src + (size_t)q->r0 * es, (float *)out, (size_t)q->nr);
        for (int r = 0; hd && r < q->nr; r++)
            dtype_to_f32(t->dtype, src + gguf_hf_perm_row((size_t)q->r0 + r, hd) * es,
                         (float *)out + r, 1);
        vec_add_const((float *)out, (size_t)q->nr, q->add);
    } else if (t->ct) { /* compressed-tensors: repacked into its blocks as it is copied */
        assert(to == t->dtype);
        ct_copy(t, (size_t)q->r0, (size_t)q->nr, (size_t)q->c0, (size_t)q->nc, out);
    } else if (!hd && q->nc == q->cols) { /* whole rows: one contiguous range */
        copy_elems(out, to, src + elem_offset(t->dtype, (size_t)q->r0, (size_t)q->cols, 0),
                   t->dtype, (size_t)q->nr * q->cols);
    } else { /* a block of columns, or permuted rows (whole quantized rows): row by row */
        size_t os = dtype_row_bytes(to, (size_t)q->nc);
        for (int r = 0; r < q->nr; r++) {
            size_t row = hd ? gguf_hf_perm_row((size_t)q->r0 + r, hd) : (size_t)q->r0 + r;
            copy_elems(out + (size_t)r * os, to,
                       src + elem_offset(t->dtype, row, (size_t)q->cols, (size_t)q->c0), t->dtype,
                       (size_t)q->nc);
        }
    }
}

int model_shard_fill(const struct model *m, const struct model_layout *layout,
                     const struct st_checkpoint *ck, int b, void *dst)
{
    (void)m;
    void *tmp = NULL; /* 16 rows, for packing */
    size_t tmp_bytes = 0;
    int rc = 0;
    for (int i = 0; i < layout->n_parts && rc == 0; i++) {
        const struct model_part *q = &layout->parts[i];
        if (q->blob != b)
            continue;
        const struct st_tensor *t = part_tensor(ck, q, &rc);
        if (!t)
            break;
        char *out = (char *)dst + q->offset;
        part_copy(q, t, out, q->matrix ? q->dtype : DTYPE_F32);
        if (q->pack != WEIGHT_PACK_X16)
            continue;
        const size_t need = QPACK_ROWS * dtype_row_bytes(q->dtype, (size_t)q->nc);
        if (need > tmp_bytes) {
            free(tmp);
            tmp_bytes = 0;
            if (!(tmp = malloc(need))) {
                rc = err_set(ERR_NOMEM, "out of memory packing %s", q->name);
                break;
            }
            tmp_bytes = need;
        }
        qpack_matrix(q->dtype, out, q->nr, q->nc, tmp);
    }
    free(tmp);
    return rc;
}

void model_layout_set_compute(struct model *m, struct model_layout *layout, enum kern_compute c)
{
    m->compute = c;
    for (int i = 0; i < layout->n_parts; i++) {
        struct model_part *q = &layout->parts[i];
        if (!q->matrix || q->ck_dtype != DTYPE_F16)
            continue;
        q->dtype = c == KERN_COMPUTE_BF16 ? DTYPE_BF16 : DTYPE_F16; /* the same bytes */
        m->weight_dtype = q->dtype;
    }
}

void model_layout_set_pack(struct model_layout *layout, struct device *dev)
{
    for (int i = 0; i < layout->n_parts; i++) {
        struct model_part *q = &layout->parts[i];
        /* a table only looked up keeps its rows; one a tied head shares
         * is multiplied too (kern_embed reads a packed row back) */
        q->pack = q->matrix && (q->use != PART_TABLE || q->also)
                      ? kern_weight_pack(dev, q->dtype, q->nr)
                      : WEIGHT_PACK_ROWS;
    }
}

void model_shard_bind(struct model *m, const struct model_layout *layout, int b, const void *base)
{
    (void)m;
    for (int i = 0; i < layout->n_parts; i++) {
        const struct model_part *q = &layout->parts[i];
        if (q->blob != b)
            continue;
        const char *p = (const char *)base + q->offset;
        if (q->matrix) {
            *q->view = (struct weight_view){.dtype = q->dtype,
                                            .data = p,
                                            .rows = q->nr,
                                            .cols = q->nc,
                                            .ld = (size_t)q->nc,
                                            .pack = q->pack};
            if (q->also) /* re-bound on every load: the blob moves */
                *q->also = *q->view;
        } else {
            *q->vec = (const float *)p;
        }
    }
}

/* ---- views of a mapped checkpoint ---- */

int model_open_shard(const struct model_config *cfg, struct st_checkpoint *ck,
                     const struct model_shard *shard, struct model **out)
{
    struct model *m;
    struct model_part *parts = NULL;
    int n = 0, rc = shard_alloc(cfg, shard, &m);
    *out = NULL;
    if (rc < 0)
        return rc;
    if ((rc = plan_run(m, ck, &parts, &n)) < 0)
        goto fail;
    /* widened vectors, and copies of the matrices whose rows the checkpoint
     * permuted (a view cannot reorder rows) or whose blocks are repacked
     * (compressed-tensors), in one allocation */
    size_t n_params = 0, copy_bytes = 0;
    for (int i = 0; i < n; i++) {
        const struct model_part *q = &parts[i];
        const struct st_tensor *t = part_tensor(ck, q, &rc);
        if (!t)
            goto fail;
        if (!q->matrix)
            n_params += (size_t)q->nr;
        else if (t->rope_perm_heads || t->ct)
            copy_bytes += (part_bytes(q, t->dtype) + BLOB_ALIGN - 1) / BLOB_ALIGN * BLOB_ALIGN;
    }
    size_t params_bytes = (n_params * sizeof(float) + BLOB_ALIGN - 1) / BLOB_ALIGN * BLOB_ALIGN;
    if (!(m->params = aligned_alloc(BLOB_ALIGN, params_bytes + copy_bytes + BLOB_ALIGN))) {
        rc = err_set(ERR_NOMEM, "out of memory for %zu model parameters", n_params);
        goto fail;
    }
    float *next = m->params;
    char *copies = (char *)m->params + params_bytes;
    for (int i = 0; i < n; i++) {
        const struct model_part *q = &parts[i];
        const struct st_tensor *t = part_tensor(ck, q, &rc);
        if (!t)
            goto fail;
        if (q->matrix) {
            part_count(m, q, t->dtype);
            /* a column slice is a view with the full row stride */
            *q->view = (struct weight_view){
                .dtype = t->dtype,
                .data = t->ct ? NULL
                              : (const char *)t->data + elem_offset(t->dtype, (size_t)q->r0,
                                                                    (size_t)q->cols, (size_t)q->c0),
                .rows = q->nr,
                .cols = q->nc,
                .ld = (size_t)q->cols,
            };
            if (t->rope_perm_heads || t->ct) {
                part_copy(q, t, copies, t->dtype);
                q->view->data = copies;
                q->view->ld = (size_t)q->nc;
                copies += (part_bytes(q, t->dtype) + BLOB_ALIGN - 1) / BLOB_ALIGN * BLOB_ALIGN;
            }
            if (q->also)
                *q->also = *q->view;
        } else {
            part_copy(q, t, (char *)next, DTYPE_F32);
            *q->vec = next;
            next += q->nr;
        }
    }
    m->ck = ck;
    free(parts);
    *out = m;
    return 0;
fail:
    free(parts);
    model_close(m);
    return rc;
}

int model_open(const char *dir, struct model **out)
{
    struct model_config *cfg = NULL;
    struct st_checkpoint *ck = NULL;
    int rc;
    *out = NULL;
    if ((rc = model_config_load(dir, &cfg)) < 0)
        return rc;
    if ((rc = st_open(dir, &ck)) < 0)
        goto out;
    struct model_shard whole = {.tp_size = 1, .layer_end = cfg->info.n_layers};
    if ((rc = model_open_shard(cfg, ck, &whole, out)) < 0) {
        err_wrap(rc, "%s", dir);
        st_close(ck);
        goto out;
    }
    (*out)->owns_ck = true;
out:
    model_config_free(cfg);
    return rc;
}
