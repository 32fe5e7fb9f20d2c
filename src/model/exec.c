/* The execution context of a batch on one shard: one device allocation
 * carved into the KV cache, the activations and the scratch of a step. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "backend/kernels.h"
#include "core/error.h"
#include "model/arch.h"

/* Widths of one shard's buffers: the family's, and what every family has. */
struct dims {
    struct exec_dims fam;
    int layers, layer_begin, heads, kv_heads, hd, qr, kvr;
    bool last;
};

static struct dims dims_of(const struct model *m)
{
    struct dims d = {
        .layers = m->shard.layer_end - m->shard.layer_begin,
        .layer_begin = m->shard.layer_begin,
        .heads = m->heads_local,
        .kv_heads = m->kv_heads_local,
        .hd = m->info->head_dim,
        .last = m->shard.layer_end == m->info->n_layers,
    };
    m->arch->exec_dims(m, &d.fam);
    d.qr = d.heads * d.hd;
    d.kvr = d.kv_heads * d.hd;
    return d;
}

bool model_exec_shape_resolve(const struct model_exec_shape *in, struct model_exec_shape *out)
{
    *out = *in;
    if (out->batch < 1 || out->max_len < 1 || out->max_tokens < 0 || out->max_rows < 0 ||
        out->max_lora_rank < 0 || out->max_lora_rank > (1 << 16))
        return false;
    if (out->max_tokens == 0)
        out->max_tokens = out->batch * out->max_len;
    if (out->max_rows == 0)
        out->max_rows = out->batch;
    if (out->max_tokens < out->batch)
        out->max_tokens = out->batch;
    if (out->max_tokens < out->max_rows)
        out->max_tokens = out->max_rows;
    return true;
}

/* Offsets of every buffer in the one allocation, 64-byte aligned. */
struct exec_layout {
    size_t k, v, key_ok, x, h, q, kn, vn, attn, f, e, scores, aux, logits_local, logits, ids, rows,
        pos, lora;
    size_t total;
};

static size_t carve(size_t *off, size_t bytes)
{
    size_t at = *off;
    *off += (bytes + 63) / 64 * 64;
    return at;
}

/* The longest step (positions per sequence) a resolved shape holds. */
static int step_max(const struct model_exec_shape *sh)
{
    return sh->max_tokens / sh->batch < sh->max_len ? sh->max_tokens / sh->batch : sh->max_len;
}

/* The ring of local layer i (0: none): a layer attending within a window
 * of W keys keeps only what a step's queries see, the W - 1 keys before a
 * step and the step's own up to t_max, so W + t_max - 1 rows per sequence
 * and KV head, position p at row p % ring; where that is not shorter than
 * max_len, the whole cache instead. */
static int layer_ring(const struct dims *d, const struct model_exec_shape *sh, int i)
{
    if (d->fam.window <= 0 || !d->fam.windows ||
        !layer_windowed(d->fam.windows, d->layer_begin + i))
        return 0;
    long ring = (long)d->fam.window + step_max(sh) - 1;
    return ring < sh->max_len ? (int)ring : 0;
}

/* The layout on dev; with kv_at and ring (each d.layers long) not NULL,
 * each layer's cache offset (floats into k and v) and ring too. */
static void exec_layout(const struct model *m, const struct device *dev,
                        const struct model_exec_shape *sh, struct exec_layout *L, size_t *kv_at,
                        int *ring)
{
    const struct model_info *in = m->info;
    struct dims d = dims_of(m);
    const size_t T = (size_t)sh->max_tokens, R = (size_t)sh->max_rows, F = sizeof(float);
    size_t cache = 0; /* floats of every layer's k (and of v) */
    for (int i = 0; i < d.layers; i++) {
        int r = layer_ring(&d, sh, i);
        if (kv_at) {
            kv_at[i] = cache;
            ring[i] = r;
        }
        cache += (size_t)sh->batch * d.kv_heads * (r ? r : sh->max_len) * d.hd;
    }
    int t_max = step_max(sh);
    struct kv_geom g = {.batch = sh->batch,
                        .heads = d.heads,
                        .kv_heads = d.kv_heads,
                        .head_dim = d.hd,
                        .max_t = sh->max_len};
    size_t off = 0;
    L->k = carve(&off, cache * F);
    L->v = carve(&off, cache * F);
    L->key_ok = carve(&off, (size_t)sh->batch * sh->max_len);
    L->x = carve(&off, T * in->hidden * F);
    L->h = carve(&off, T * in->hidden * F);
    L->q = carve(&off, T * d.qr * F);
    L->kn = carve(&off, T * d.kvr * F);
    L->vn = carve(&off, T * d.kvr * F);
    L->attn = carve(&off, T * d.qr * F);
    L->f = carve(&off, T * d.fam.ffn_width * F);
    L->e = carve(&off, T * d.fam.extra_width * F);
    L->scores = carve(&off, kern_attention_scratch(dev, &g, t_max, sh->max_len) * F);
    L->aux = carve(&off, d.fam.aux_floats * F);
    L->logits_local = carve(&off, d.last ? R * m->vocab_local * F : 0);
    L->logits = carve(&off, d.last && m->vocab_local != in->vocab ? R * in->vocab * F : 0);
    L->ids = carve(&off, T * sizeof(int32_t));
    L->rows = carve(&off, T * sizeof(int32_t));
    L->pos = carve(&off, d.fam.positions ? T * sizeof(int32_t) : 0);
    L->lora = carve(
        &off, sh->max_lora_rank ? kern_lora_scratch(sh->max_tokens, sh->max_lora_rank) * F : 0);
    L->total = off;
}

size_t model_exec_bytes(const struct model *m, const struct device *dev,
                      const struct model_exec_shape *shape)
{
    struct model_exec_shape sh;
    if (!model_exec_shape_resolve(shape, &sh))
        return 0;
    /* guard the products below against overflow: a context larger than
     * 2^48 bytes fits no device */
    struct dims d = dims_of(m);
    double approx = (double)sh.batch * sh.max_len * d.layers * (d.kvr + m->info->hidden) * 8.0 +
                    (double)sh.max_tokens * (d.fam.ffn_width + d.qr + d.fam.extra_width) * 4.0;
    if (approx > (double)(1ull << 48))
        return 0;
    struct exec_layout L;
    exec_layout(m, dev, &sh, &L, NULL, NULL);
    return L.total;
}

size_t model_exec_scratch_bound(const struct model_info *info, int tp_size,
                                const struct model_exec_shape *shape)
{
    struct model_exec_shape sh;
    if (tp_size < 1 || !model_exec_shape_resolve(shape, &sh))
        return 0;
    /* for the longest step exec_layout sizes the scratch for */
    size_t scores = (size_t)sh.batch * (size_t)(info->n_heads / tp_size) * (size_t)step_max(&sh) *
                    (size_t)sh.max_len;
    return (scores * sizeof(float) + 63) / 64 * 64;
}

size_t model_exec_bytes_bound(const struct model *m, const struct model_exec_shape *shape)
{
    size_t cpu = model_exec_bytes(m, NULL, shape);
    if (cpu == 0)
        return 0;
    assert(m->heads_local == m->info->n_heads / m->shard.tp_size);
    return cpu + model_exec_scratch_bound(m->info, m->shard.tp_size, shape);
}

/* The shape resolved, checked against the model before anything is sized
 * or allocated; *bytes its size on dev (NULL: a CPU device). */
static int shape_check(const struct model *m, const struct device *dev,
                       const struct model_exec_shape *shape, struct model_exec_shape *sh,
                       size_t *bytes)
{
    if (!model_exec_shape_resolve(shape, sh))
        return err_set(ERR_INVALID,
                       "an execution context needs batch >= 1 and length >= 1 (got %d, %d)",
                       shape->batch, shape->max_len);
    if (sh->max_len > m->info->max_pos)
        return err_set(ERR_INVALID, "sequence of %d tokens exceeds %s %d", sh->max_len,
                       m->info->max_pos_from, m->info->max_pos);
    if ((*bytes = model_exec_bytes(m, dev, sh)) == 0)
        return err_set(ERR_NOMEM,
                       "a batch of %d sequences of %d positions is too large for any device",
                       sh->batch, sh->max_len);
    return 0;
}

/* model_exec_init, or model_exec_init_at when at is not NULL. */
static int exec_init(const struct model *m, struct device *dev, struct comm *tp,
                     const struct model_exec_shape *shape, const uint64_t *at,
                     struct model_exec **out)
{
    assert(dev);
    *out = NULL;
    struct model_exec_shape sh;
    size_t bytes;
    int rc = shape_check(m, dev, shape, &sh, &bytes);
    if (rc < 0)
        return rc;
    struct dims d = dims_of(m);
    struct model_exec *ex = calloc(1, sizeof(*ex));
    if (!ex)
        return err_set(ERR_NOMEM, "out of host memory for an execution context");
    ex->dev = dev;
    ex->tp = tp;
    ex->shape = sh;
    ex->layers = d.layers;
    ex->heads = d.heads;
    ex->kv_heads = d.kv_heads;
    ex->head_dim = d.hd;
    ex->kv_at = calloc((size_t)d.layers, sizeof(size_t));
    ex->ring = calloc((size_t)d.layers, sizeof(int));
    ex->ring_window = d.fam.window;
    ex->key_ok_host = calloc((size_t)sh.batch * sh.max_len, 1);
    ex->n_real = calloc((size_t)sh.batch, sizeof(int));
    ex->rows_host = calloc((size_t)sh.max_tokens, sizeof(int32_t));
    ex->pos_host = calloc((size_t)sh.max_tokens, sizeof(int32_t));
    if (d.fam.host_width)
        ex->host = calloc((size_t)sh.max_tokens, (size_t)d.fam.host_width * 4);
    ex->experts = d.fam.experts;
    if (d.fam.experts)
        ex->routed = calloc((size_t)d.layers * d.fam.experts, sizeof(uint64_t));
    ex->lora_seg = calloc((size_t)sh.batch + 1, sizeof(int));
    ex->lora_pairs = calloc((size_t)sh.batch, sizeof(struct lora_pair));
    if (!ex->kv_at || !ex->ring || !ex->key_ok_host || !ex->n_real || !ex->rows_host ||
        !ex->pos_host || (d.fam.host_width && !ex->host) || (d.fam.experts && !ex->routed) ||
        !ex->lora_seg || !ex->lora_pairs) {
        rc = err_set(ERR_NOMEM, "out of host memory for an execution context");
        goto fail;
    }
    if ((rc = device_stream_create(dev, &ex->stream)) < 0)
        goto fail;
    struct exec_layout L;
    exec_layout(m, dev, &sh, &L, ex->kv_at, ex->ring);
    rc = at ? device_alloc_at(dev, *at, bytes, &ex->mem) : device_alloc(dev, bytes, &ex->mem);
    if (rc < 0) {
        err_wrap(rc, "KV cache and activations of a batch of %d x %d positions", sh.batch,
                 sh.max_len);
        goto fail;
    }
    char *base = dbuf_ptr(ex->mem);
    ex->k = (float *)(base + L.k);
    ex->v = (float *)(base + L.v);
    ex->key_ok = (uint8_t *)(base + L.key_ok);
    ex->x = (float *)(base + L.x);
    ex->h = (float *)(base + L.h);
    ex->q = (float *)(base + L.q);
    ex->kn = (float *)(base + L.kn);
    ex->vn = (float *)(base + L.vn);
    ex->attn = (float *)(base + L.attn);
    ex->f = (float *)(base + L.f);
    ex->e = d.fam.extra_width ? (float *)(base + L.e) : NULL;
    ex->scores = (float *)(base + L.scores);
    ex->aux = d.fam.aux_floats ? (float *)(base + L.aux) : NULL;
    ex->logits_local = d.last ? (float *)(base + L.logits_local) : NULL;
    ex->logits = !d.last                            ? NULL
                 : m->vocab_local != m->info->vocab ? (float *)(base + L.logits)
                                                    : ex->logits_local;
    ex->ids = (int32_t *)(base + L.ids);
    ex->rows = (int32_t *)(base + L.rows);
    ex->pos = d.fam.positions ? (int32_t *)(base + L.pos) : NULL;
    ex->lora_scratch = sh.max_lora_rank ? (float *)(base + L.lora) : NULL;
    *out = ex;
    return 0;
fail:
    model_exec_free(ex);
    return rc;
}

int model_exec_init(const struct model *m, struct device *dev, struct comm *tp,
                    const struct model_exec_shape *shape, struct model_exec **out)
{
    return exec_init(m, dev, tp, shape, NULL, out);
}

int model_exec_init_at(const struct model *m, struct device *dev, struct comm *tp,
                       const struct model_exec_shape *shape, uint64_t off,
                       struct model_exec **out)
{
    return exec_init(m, dev, tp, shape, &off, out);
}

void model_exec_reset(struct model_exec *ex)
{
    ex->len = 0;
    memset(ex->key_ok_host, 0, (size_t)ex->shape.batch * ex->shape.max_len);
    memset(ex->n_real, 0, (size_t)ex->shape.batch * sizeof(int));
}

void model_exec_clear_slot(struct model_exec *ex, int b)
{
    memset(ex->key_ok_host + (size_t)b * ex->shape.max_len, 0, (size_t)ex->shape.max_len);
    ex->n_real[b] = 0;
}

void model_exec_free(struct model_exec *ex)
{
    if (!ex)
        return;
    device_stream_destroy(ex->stream);
    device_free(ex->mem);
    if (ex->owns_dev)
        device_close(ex->dev);
    free(ex->kv_at);
    free(ex->ring);
    free(ex->key_ok_host);
    free(ex->n_real);
    free(ex->rows_host);
    free(ex->pos_host);
    free(ex->host);
    free(ex->routed);
    free(ex->adapters);
    free(ex->lora_seg);
    free(ex->lora_pairs);
    free(ex);
}

struct stream *model_exec_stream(const struct model_exec *ex)
{
    return ex->stream;
}

int model_exec_batch(const struct model_exec *ex)
{
    return ex->shape.batch;
}

int model_exec_kv_rows(const struct model_exec *ex, int layer)
{
    assert(layer >= 0 && layer < ex->layers);
    return ex->ring[layer] ? ex->ring[layer] : ex->shape.max_len;
}

const uint64_t *model_exec_routed(const struct model_exec *ex, int *experts)
{
    *experts = ex->experts;
    return ex->routed;
}

int model_exec_open_cpu(const struct model *m, const struct model_exec_shape *shape,
                      struct model_exec **out)
{
    *out = NULL;
    struct model_exec_shape sh;
    size_t bytes;
    int rc = shape_check(m, NULL, shape, &sh, &bytes);
    if (rc < 0)
        return rc;
    struct device *dev;
    rc = device_open_cpu(0, bytes, &dev);
    if (rc < 0)
        return err_wrap(rc, "a device for a batch of %d x %d positions", shape->batch,
                        shape->max_len);
    if ((rc = model_exec_init(m, dev, NULL, shape, out)) < 0) {
        device_close(dev);
        return rc;
    }
    (*out)->owns_dev = true;
    return 0;
}

int model_exec_open(const struct model *m, const struct model_exec_shape *shape,
                  struct model_exec **out)
{
    return m->dev ? model_exec_init(m, m->dev, NULL, shape, out) : model_exec_open_cpu(m, shape, out);
}

int model_exec_begin(const struct model *m, struct model_exec *ex, const uint8_t *mask, int t_new)
{
    const struct model_exec_shape *sh = &ex->shape;
    if (t_new < 1 || ex->len + t_new > sh->max_len)
        return err_set(ERR_INVALID, "sequence length %d exceeds the KV cache capacity %d",
                       ex->len + t_new, sh->max_len);
    if ((long)sh->batch * t_new > sh->max_tokens)
        return err_set(ERR_INVALID,
                       "a step of %d x %d tokens exceeds the %d the batch was sized "
                       "for",
                       sh->batch, t_new, sh->max_tokens);
    /* positions: the running count of real tokens (a pad gets 0; no query
     * sees it) */
    for (int b = 0; b < sh->batch; b++) {
        int count = ex->n_real[b];
        for (int t = 0; t < t_new; t++) {
            bool real = !mask || mask[b * t_new + t];
            ex->key_ok_host[(size_t)b * sh->max_len + ex->len + t] = real;
            ex->pos_host[b * t_new + t] = real ? count : 0;
            count += real;
        }
        if (count > m->info->max_pos)
            return err_set(ERR_INVALID, "sequence of %d tokens exceeds %s %d", count,
                           m->info->max_pos_from, m->info->max_pos);
    }
    /* the family's tables, once, on the thread that computes */
    if (!ex->aux_ready && m->arch->exec_prepare)
        TRY(m->arch->exec_prepare(m, ex));
    ex->aux_ready = true;
    /* the whole mask: slots cleared since the last step change old columns */
    TRY(kern_to_device(ex->stream, ex->key_ok, ex->key_ok_host, (size_t)sh->batch * sh->max_len));
    if (!ex->pos)
        return 0;
    return kern_to_device(ex->stream, ex->pos, ex->pos_host,
                          (size_t)sh->batch * t_new * sizeof(int32_t));
}

void model_exec_commit(struct model_exec *ex, const uint8_t *mask, int t_new)
{
    for (int b = 0; b < ex->shape.batch; b++)
        for (int t = 0; t < t_new; t++)
            ex->n_real[b] += mask ? mask[b * t_new + t] != 0 : 1;
    ex->len += t_new;
}
