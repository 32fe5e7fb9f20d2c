/* A LoRA adapter as a model-like handle (model/adapter.h): its family
 * entry (adapter_arch, whose plan lists the A and B slices of a shard), its
 * checkpoint, opening one beside its base, and the per-sequence adapters of
 * a batch applied after the shared blocks' projections. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/kernels.h"
#include "core/error.h"
#include "model/adapter_impl.h"

/* Tensor `ab` (A or B) of layer l's pair at slot s as PEFT names it. */
static void pair_name(const struct adapter_config *c, int l, int s, char ab, char *out, size_t cap)
{
    int at = snprintf(out, cap, "base_model.model.");
    at += snprintf(out + at, cap - (size_t)at, c->base_arch->lora_layer, l);
    snprintf(out + at, cap - (size_t)at, "%s.lora_%c.weight", c->base_arch->lora_modules[s], ab);
}

/* Whether name is one of c's pairs' tensors (any layer: a shard's file
 * holds the others' too). */
static bool pair_named(const struct adapter_config *c, const char *name)
{
    char want[256];
    for (int l = 0; l < c->base.info.n_layers; l++)
        for (int s = 0; s < LORA_SLOTS; s++)
            for (int ab = 0; c->r[l][s] && ab < 2; ab++) {
                pair_name(c, l, s, ab ? 'B' : 'A', want, sizeof(want));
                if (strcmp(want, name) == 0)
                    return true;
            }
    return false;
}

/* ---- the family entry ---- */

/* Shards split as the base's: its family's checks and per-rank numbers,
 * which read only the info (the base's). */
static int adapter_shard_check(const struct model_config *c, const struct model_shard *s)
{
    /* an adapter adapts no routed expert: where the base places them (its
     * shard's expert_parallel) is the base's check */
    struct model_shard t = *s;
    t.expert_parallel = false;
    return adapter_cfg(c)->base_arch->shard_check(c, &t);
}

static int adapter_shard_init(struct model *m)
{
    return adapter_cfg(m->cfg)->base_arch->shard_init(m);
}

/* Where a slot's pair sits in its base layer, for this shard: in and out
 * widths of the base projection, whether it is row-parallel (A split by
 * input columns, B whole) or column-parallel (A whole, B split by output
 * rows), and this rank's range [i0, i0 + n) of the split dimension. */
struct slot_geo {
    int in, out;
    bool row_parallel;
    int i0, n;
};

static void slot_geometry(const struct model *m, struct slot_geo g[LORA_SLOTS])
{
    const struct model_info *in = m->info;
    const int H = in->hidden, hd = in->head_dim, F = in->ffn, rank = m->shard.tp_rank;
    const int Q = in->n_heads * hd, K = in->n_kv_heads * hd;
    const int qr = m->heads_local * hd, q0 = rank * qr;
    const int kr = m->kv_heads_local * hd, k0 = m->kv_head_begin * hd;
    const int fr = m->ffn_local, f0 = rank * fr;
    g[LORA_Q] = (struct slot_geo){H, Q, false, q0, qr};
    g[LORA_K] = (struct slot_geo){H, K, false, k0, kr};
    g[LORA_V] = (struct slot_geo){H, K, false, k0, kr};
    g[LORA_O] = (struct slot_geo){Q, H, true, q0, qr};
    g[LORA_GATE] = (struct slot_geo){H, F, false, f0, fr};
    g[LORA_UP] = (struct slot_geo){H, F, false, f0, fr};
    g[LORA_DOWN] = (struct slot_geo){F, H, true, f0, fr};
}

/* Tensor names as PEFT saves them: "base_model.model." + the module key +
 * ".lora_A.weight" / ".lora_B.weight". Blob 1 + i: local layer i's pairs;
 * blob 0 is empty. */
static int adapter_plan(struct model *m, const struct st_checkpoint *ck, struct model_planner *p)
{
    (void)ck;
    const struct adapter_config *c = adapter_cfg(m->cfg);
    struct slot_geo g[LORA_SLOTS];
    slot_geometry(m, g);
    char name[256];
    for (int li = 0; li < m->shard.layer_end - m->shard.layer_begin; li++) {
        const int l = m->shard.layer_begin + li, blob = 1 + li;
        struct adapter_layer *L = (struct adapter_layer *)m->layers + li;
        for (int s = 0; s < LORA_SLOTS; s++) {
            const int r = c->r[l][s];
            struct lora_pair *pr = &L->pair[s];
            if (!r)
                continue;
            pair_name(c, l, s, 'A', name, sizeof(name));
            const struct slot_geo *q = &g[s];
            if (q->row_parallel)
                TRY(plan_matrix(p, blob, name, r, q->in, 0, r, q->i0, q->n, &pr->a));
            else
                TRY(plan_matrix(p, blob, name, r, q->in, 0, r, 0, q->in, &pr->a));
            pair_name(c, l, s, 'B', name, sizeof(name));
            if (q->row_parallel)
                TRY(plan_matrix(p, blob, name, q->out, r, 0, q->out, 0, r, &pr->b));
            else
                TRY(plan_matrix(p, blob, name, q->out, r, q->i0, q->n, 0, r, &pr->b));
            pr->scale = c->scale[l][s];
        }
    }
    return 0;
}

static void adapter_exec_dims(const struct model *m, struct exec_dims *d)
{
    (void)m;
    *d = (struct exec_dims){0};
}

static int alone(void)
{
    return err_set(ERR_INVALID, "a LoRA adapter runs only with its base (model_exec_set_adapters)");
}

static int adapter_embed(const struct model *m, struct model_exec *ex, const int32_t *ids,
                         const uint8_t *mask, int t_new)
{
    (void)m, (void)ex, (void)ids, (void)mask, (void)t_new;
    return alone();
}

static int adapter_layer(const struct model *m, int layer, struct model_exec *ex, int t_new)
{
    (void)m, (void)layer, (void)ex, (void)t_new;
    return alone();
}

static int adapter_head(const struct model *m, struct model_exec *ex, int t_new, bool all_positions,
                        float *logits)
{
    (void)m, (void)ex, (void)t_new, (void)all_positions, (void)logits;
    return alone();
}

static uint64_t adapter_required_ops(const struct model_config *c)
{
    (void)c;
    return KERN_OP_BIT(KERN_OP_LORA);
}

static void adapter_describe(const struct model_config *mc, char *buf, size_t cap)
{
    const struct adapter_config *c = adapter_cfg(mc);
    int pairs = 0;
    for (int l = 0; l < mc->info.n_layers; l++)
        for (int s = 0; s < LORA_SLOTS; s++)
            pairs += c->r[l][s] > 0;
    snprintf(buf, cap, "LoRA adapter of a %s base: %d pairs, ranks up to %d\n", c->base_arch->name,
             pairs, c->max_r);
}

static const char *const adapter_types[] = {NULL};

const struct arch_ops adapter_arch = {
    .name = "lora",
    .model_types = adapter_types,
    .config_size = sizeof(struct adapter_config),
    .weights_size = 1,
    .layer_size = sizeof(struct adapter_layer),
    .describe = adapter_describe,
    .shard_check = adapter_shard_check,
    .shard_init = adapter_shard_init,
    .plan = adapter_plan,
    .exec_dims = adapter_exec_dims,
    .embed = adapter_embed,
    .layer = adapter_layer,
    .head = adapter_head,
    .required_ops = adapter_required_ops,
};

/* ---- the checkpoint ---- */

int model_adapter_checkpoint_open(const char *dir, struct st_checkpoint **out)
{
    char path[4096];
    *out = NULL;
    if ((size_t)snprintf(path, sizeof(path), "%s/adapter_model.safetensors", dir) >= sizeof(path))
        return err_set(ERR_INVALID, "%s: path too long", dir);
    if (access(path, F_OK) != 0) {
        char bin[4096];
        snprintf(bin, sizeof(bin), "%s/adapter_model.bin", dir);
        if (access(bin, F_OK) == 0)
            return err_set(ERR_UNSUPPORTED,
                           "%s: pickled adapter weights are not read (expected "
                           "adapter_model.safetensors)",
                           bin);
        return err_set(ERR_NOT_FOUND, "%s: cannot open (expected a PEFT adapter directory)", path);
    }
    return st_open(path, out);
}

int model_adapter_check_tensors(const struct model_config *cfg, const struct st_checkpoint *ck)
{
    for (size_t i = 0; i < st_count(ck); i++) {
        const struct st_tensor *t = st_get(ck, i);
        if (pair_named(adapter_cfg(cfg), t->name))
            continue;
        for (int f = 0; f < 4 && adapter_cfg(cfg)->base_arch->lora_refused[f]; f++)
            if (strstr(t->name, adapter_cfg(cfg)->base_arch->lora_refused[f]))
                return err_set(ERR_UNSUPPORTED,
                               "%s: tensor %s adapts a fused projection (not "
                               "supported)",
                               t->file, t->name);
        const char *why = strstr(t->name, "modules_to_save")         ? " (modules_to_save)"
                          : strstr(t->name, "lora_embedding")        ? " (embedding LoRA)"
                          : strstr(t->name, "lora_magnitude_vector") ? " (DoRA)"
                          : strstr(t->name, "lora_")                 ? ""
                                                                     : " (not a LoRA pair)";
        return err_set(ERR_UNSUPPORTED,
                       "%s: tensor %s%s is not one adapter_config.json's targets give the "
                       "base",
                       t->file, t->name, why);
    }
    return 0;
}

/* ---- one adapter beside its base ---- */

/* Every blob of m in one host allocation (m->params), filled and bound. */
static int host_blobs(struct model *m, const struct model_layout *lay,
                      const struct st_checkpoint *ck)
{
    size_t total = 0;
    for (int b = 0; b < lay->n_blobs; b++)
        total += (lay->blob_bytes[b] + 63) / 64 * 64;
    if (!(m->params = aligned_alloc(64, total + 64)))
        return err_set(ERR_NOMEM, "out of memory for %zu bytes of adapter weights", total);
    char *at = (char *)m->params;
    for (int b = 0; b < lay->n_blobs; b++) {
        if (lay->blob_bytes[b] == 0)
            continue;
        TRY(model_shard_fill(m, lay, ck, b, at));
        model_shard_bind(m, lay, b, at);
        at += (lay->blob_bytes[b] + 63) / 64 * 64;
    }
    return 0;
}

int model_adapter_open(const char *dir, const struct model *base, const char *base_dir,
                       struct model **out)
{
    struct model_config *cfg = NULL;
    struct st_checkpoint *ck = NULL;
    struct model *m = NULL;
    struct model_layout lay = {0};
    int rc;
    *out = NULL;
    if ((rc = model_adapter_config_load(dir, base->cfg, base_dir, &cfg)) < 0)
        return rc;
    if ((rc = model_adapter_checkpoint_open(dir, &ck)) < 0)
        goto out;
    /* the file's names first: what it holds beyond pairs says why it is refused */
    if ((rc = model_adapter_check_tensors(cfg, ck)) < 0 ||
        (rc = model_shard_open(cfg, ck, &base->shard, &m, &lay)) < 0) {
        err_wrap(rc, "adapter %s", dir);
        goto out;
    }
    /* the pairs keep the file's dtype in either precision: the update is
     * computed in f32 (model_block_lora) */
    if (base->dev) {
        if ((rc = model_check_device(cfg, base->dev)) < 0)
            goto out;
        rc = model_upload_blobs(m, &lay, ck, base->dev);
    } else {
        rc = host_blobs(m, &lay, ck);
    }
    if (rc < 0) {
        err_wrap(rc, "adapter %s", dir);
        goto out;
    }
    *out = m;
    m = NULL;
out:
    model_layout_free(&lay);
    model_close(m);
    st_close(ck);
    model_config_free(cfg);
    return rc;
}

int model_adapter_bytes(const char *dir, const struct model_config *base, const char *base_dir,
                        uint64_t *bytes, int *max_rank)
{
    struct model_config *cfg = NULL;
    struct st_checkpoint *ck = NULL;
    struct model *m = NULL;
    struct model_layout lay = {0};
    *bytes = 0;
    *max_rank = 0;
    int rc = model_adapter_config_load(dir, base, base_dir, &cfg);
    if (rc < 0)
        return rc;
    struct model_shard whole = {.tp_size = 1, .layer_end = base->info.n_layers};
    if ((rc = model_adapter_checkpoint_open(dir, &ck)) == 0 &&
        (rc = model_shard_open(cfg, ck, &whole, &m, &lay)) < 0)
        err_wrap(rc, "adapter %s", dir);
    for (int b = 0; rc == 0 && b < lay.n_blobs; b++)
        *bytes += ((uint64_t)lay.blob_bytes[b] + 63) / 64 * 64;
    if (rc == 0)
        *max_rank = adapter_cfg(cfg)->max_r;
    model_layout_free(&lay);
    model_close(m);
    st_close(ck);
    model_config_free(cfg);
    return rc;
}

int model_adapter_rank(const struct model *adapter)
{
    return model_adapter_max_rank(adapter->cfg);
}

/* ---- a batch's adapters ---- */

int model_exec_set_adapters(struct model_exec *ex, const struct model *const *per)
{
    const int B = ex->shape.batch;
    if (!per) {
        free(ex->adapters);
        ex->adapters = NULL;
        return 0;
    }
    bool any = false;
    for (int b = 0; b < B; b++) {
        const struct model *a = per[b];
        if (!a)
            continue;
        any = true;
        if (!model_config_is_adapter(a->cfg))
            return err_set(ERR_INVALID, "sequence %d's adapter is not a LoRA adapter", b);
        if (a->shard.layer_end - a->shard.layer_begin != ex->layers)
            return err_set(ERR_INVALID, "sequence %d's adapter holds %d layers, its batch %d", b,
                           a->shard.layer_end - a->shard.layer_begin, ex->layers);
        if (adapter_cfg(a->cfg)->max_r > ex->shape.max_lora_rank)
            return err_set(ERR_INVALID,
                           "sequence %d's adapter has rank %d, more than the %d its batch was "
                           "sized for",
                           b, adapter_cfg(a->cfg)->max_r, ex->shape.max_lora_rank);
    }
    if (!any)
        return model_exec_set_adapters(ex, NULL);
    if (!ex->adapters && !(ex->adapters = calloc((size_t)B, sizeof(*ex->adapters))))
        return err_set(ERR_NOMEM, "out of memory");
    memcpy(ex->adapters, per, (size_t)B * sizeof(*ex->adapters));
    return 0;
}

int model_block_lora(const struct model *m, struct model_exec *ex, int layer, enum lora_slot slot,
                     float *y, const float *x, int t_new)
{
    if (!ex->adapters)
        return 0;
    const int B = ex->shape.batch;
    int nseg = 0;
    bool any = false;
    /* runs of consecutive sequences with the same adapter */
    for (int b = 0; b < B; b++) {
        const struct model *a = ex->adapters[b];
        if (nseg > 0 && a == ex->adapters[b - 1])
            continue;
        ex->lora_seg[nseg] = b * t_new;
        ex->lora_pairs[nseg] =
            a ? ((const struct adapter_layer *)a->layers)[layer].pair[slot] : (struct lora_pair){0};
        any |= ex->lora_pairs[nseg].a.data != NULL;
        nseg++;
    }
    ex->lora_seg[nseg] = B * t_new;
    if (!any)
        return 0;
    /* in f32 whatever the base's precision, as PEFT runs an adapter by default
     * (autocast_adapter_dtype: its weights float32, the input cast to them,
     * the update added to the base's output) */
    (void)m;
    return kern_lora(ex->stream, y, x, B * t_new, nseg, ex->lora_seg, ex->lora_pairs,
                     KERN_COMPUTE_F32, ex->lora_scratch);
}
