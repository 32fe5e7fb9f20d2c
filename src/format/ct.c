/* compressed-tensors checkpoints (ct.h has the tensors byte by byte):
 * quantization_config's checks, the weights' tensors gathered into one
 * CT tensor each, and their rows repacked into core/quant_ct.h's blocks.
 *
 * quantization_config, as the package writes it (ModelCompressor.update_config):
 *   {"quant_method": "compressed-tensors", "format": "pack-quantized",
 *    "config_groups": {"group_0": {"targets": ["Linear"], "format": ...,
 *        "weights": {"num_bits": 4, "type": "int", "symmetric": true,
 *                    "strategy": "group", "group_size": 128, "block_structure": null,
 *                    "actorder": null, "dynamic": false, ...},
 *        "input_activations": null or {"dynamic": true, ...},
 *        "output_activations": null}},
 *    "ignore": ["lm_head"], "kv_cache_scheme": null, "sparsity_config": {},
 *    "transform_config": {}, "quantization_status": "compressed", ...}
 * A weight's group is the first whose targets name it: "Linear" (every
 * quantized weight here is a Linear's), "re:REGEX" matching the module's name
 * from its start (Python's syntax, as the package's re.match reads it:
 * core/pyre.h, compiled once at parse), or the module's exact name. */
#include "format/ct.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/pyre.h"
#include "core/quant_ct.h"

/* returns a failing call's code */
#define CT_TRY(call)                                                                               \
    do {                                                                                           \
        int ct_rc_ = (call);                                                                       \
        if (ct_rc_ < 0)                                                                            \
            return ct_rc_;                                                                         \
    } while (0)

#define CT_MAX_GROUPS 16
#define CT_MAX_TARGETS 64
#define CT_NAME_MAX 256

enum ct_strategy { CT_TENSOR, CT_CHANNEL, CT_GROUP, CT_BLOCK };

struct ct_scheme {
    int bits;
    bool is_float, symmetric;
    enum ct_strategy strategy;
    int group;  /* CT_GROUP: columns per scale */
    int bh, bw; /* CT_BLOCK: rows and columns per scale */
};

struct ct_group {
    struct ct_scheme w;
    bool has_weights;
    const char *format; /* into the config's JSON */
    const char *targets[CT_MAX_TARGETS];
    struct pyre *res[CT_MAX_TARGETS]; /* compiled "re:" targets, else NULL */
    int n_targets;
};

struct ct_config {
    json_t *root; /* quantization_config, held */
    const char *path;
    struct ct_group groups[CT_MAX_GROUPS];
    int n_groups;
    char format[96];
};

struct ct_tensor {
    struct ct_scheme s;
    int rows, cols;
    size_t rdiv, cdiv, sc_cols; /* scale (r, c) at (r / rdiv) * sc_cols + c / cdiv */
    struct st_tensor q, scale, zp;
    bool packed, has_zp;
};

static const char *const formats[] = {"pack-quantized", "int-quantized", "float-quantized",
                                      "naive-quantized", "dense"};

static int cfg_err(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int cfg_err(const char *path, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return err_set(ERR_UNSUPPORTED, "%s: quantization_config: %s", path, msg);
}

static bool is_empty(json_t *v)
{
    return !v || json_is_null(v) || (json_is_object(v) && json_object_size(v) == 0);
}

static int format_check(const char *path, const char *where, json_t *v, const char **out)
{
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return cfg_err(path, "%sformat is not a string", where);
    const char *f = json_string_value(v);
    for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++)
        if (strcmp(f, formats[i]) == 0) {
            *out = f;
            return 0;
        }
    return cfg_err(path,
                   "%sformat \"%.64s\" is not supported (supported: pack-quantized, "
                   "int-quantized, float-quantized, naive-quantized)",
                   where, f);
}

static int get_int(const char *path, const char *g, json_t *o, const char *key, int lo, int hi,
                   int *out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return cfg_err(path, "%s.weights.%s is not an integer in [%d, %d]", g, key, lo, hi);
    *out = (int)json_integer_value(v);
    return 0;
}

/* One group's "weights" object. */
static int scheme_parse(const char *path, const char *g, json_t *w, struct ct_scheme *s)
{
    if (!json_is_object(w))
        return cfg_err(path, "%s.weights is not an object", g);
    json_t *type = json_object_get(w, "type"), *strat = json_object_get(w, "strategy");
    const char *ty = json_is_string(type) ? json_string_value(type) : "";
    if (strcmp(ty, "int") != 0 && strcmp(ty, "float") != 0)
        return cfg_err(path, "%s.weights.type \"%.32s\" is not supported (expected int or float)",
                       g, ty);
    s->is_float = ty[0] == 'f';
    CT_TRY(get_int(path, g, w, "num_bits", 1, 64, &s->bits));
    if (s->is_float ? s->bits != 8 : s->bits != 4 && s->bits != 8)
        return cfg_err(path,
                       "%s.weights: %s with num_bits %d is not supported (expected int 4, "
                       "int 8 or float 8, FP8 e4m3)",
                       g, ty, s->bits);
    json_t *sym = json_object_get(w, "symmetric");
    if (sym && !json_is_boolean(sym))
        return cfg_err(path, "%s.weights.symmetric is not true or false", g);
    s->symmetric = !sym || json_is_true(sym);
    if (s->is_float && !s->symmetric)
        return cfg_err(path, "%s.weights: asymmetric float weights are not supported", g);
    json_t *dyn = json_object_get(w, "dynamic");
    if (dyn && !json_is_false(dyn) && !json_is_null(dyn))
        return cfg_err(path, "%s.weights.dynamic is not false (weights are quantized ahead)", g);
    /* "weight" (alias "static") orders GPTQ's calibration, not the stored
     * groups; "group" ("dynamic") stores permuted groups with a g_idx */
    json_t *ao = json_object_get(w, "actorder");
    const char *aos = json_is_string(ao) ? json_string_value(ao) : NULL;
    if (ao && !json_is_null(ao) && !json_is_false(ao) &&
        !(aos && (!strcmp(aos, "weight") || !strcmp(aos, "static"))))
        return cfg_err(path,
                       "%s.weights.actorder: activation reordering (g_idx) is not "
                       "supported",
                       g);
    const char *st = json_is_string(strat) ? json_string_value(strat) : "";
    if (strcmp(st, "tensor") == 0)
        s->strategy = CT_TENSOR;
    else if (strcmp(st, "channel") == 0)
        s->strategy = CT_CHANNEL;
    else if (strcmp(st, "group") == 0)
        s->strategy = CT_GROUP;
    else if (strcmp(st, "block") == 0)
        s->strategy = CT_BLOCK;
    else
        return cfg_err(path,
                       "%s.weights.strategy \"%.32s\" is not supported (expected tensor, "
                       "channel, group or block)",
                       g, st);
    if (s->strategy == CT_GROUP) {
        CT_TRY(get_int(path, g, w, "group_size", 1, 1 << 20, &s->group));
        if (s->group % QUANT_CT_QK != 0)
            return cfg_err(path, "%s.weights.group_size %d is not a multiple of %d", g, s->group,
                           QUANT_CT_QK);
    }
    if (s->strategy == CT_BLOCK) {
        json_t *b = json_object_get(w, "block_structure");
        json_t *h = json_array_get(b, 0), *wd = json_array_get(b, 1);
        if (!json_is_array(b) || json_array_size(b) != 2 || !json_is_integer(h) ||
            !json_is_integer(wd) || json_integer_value(h) < 1 || json_integer_value(h) > 1 << 20 ||
            json_integer_value(wd) < 1 || json_integer_value(wd) > 1 << 20)
            return cfg_err(path,
                           "%s.weights.block_structure is not [rows, columns] of positive "
                           "integers",
                           g);
        s->bh = (int)json_integer_value(h);
        s->bw = (int)json_integer_value(wd);
        if (s->bw % QUANT_CT_QK != 0)
            return cfg_err(path, "%s.weights.block_structure's %d columns are not a multiple of %d",
                           g, s->bw, QUANT_CT_QK);
    }
    return 0;
}

static int group_parse(struct ct_config *c, const char *name, json_t *g)
{
    const char *path = c->path;
    if (!json_is_object(g))
        return cfg_err(path, "config_groups.%.64s is not an object", name);
    if (c->n_groups == CT_MAX_GROUPS)
        return cfg_err(path, "more than %d config_groups", CT_MAX_GROUPS);
    struct ct_group *cg = &c->groups[c->n_groups++];
    char where[96];
    snprintf(where, sizeof(where), "config_groups.%.64s", name);
    json_t *t = json_object_get(g, "targets");
    if (!json_is_array(t) || json_array_size(t) == 0 || json_array_size(t) > CT_MAX_TARGETS)
        return cfg_err(path, "%s.targets is not a list of 1 to %d strings", where, CT_MAX_TARGETS);
    for (size_t i = 0; i < json_array_size(t); i++) {
        json_t *v = json_array_get(t, i);
        if (!json_is_string(v))
            return cfg_err(path, "%s.targets[%zu] is not a string", where, i);
        const char *tg = json_string_value(v);
        cg->targets[cg->n_targets] = tg;
        if (strncmp(tg, "re:", 3) == 0) {
            int rc = pyre_compile(tg + 3, &cg->res[cg->n_targets]);
            if (rc < 0)
                return err_wrap(rc, "%s: quantization_config: %s.targets[%zu]", path, where, i);
        }
        cg->n_targets++;
    }
    char fw[112];
    snprintf(fw, sizeof(fw), "%s.", where);
    CT_TRY(format_check(path, fw, json_object_get(g, "format"), &cg->format));
    json_t *in = json_object_get(g, "input_activations");
    if (in && !json_is_null(in)) {
        json_t *dyn = json_object_get(in, "dynamic");
        /* dynamic: x quantized per call by int8/FP8 kernels, not part of the
         * weights; ours compute with x as it is (f32, or bf16 in bf16 mode) */
        if (!json_is_object(in) || !(json_is_true(dyn) || json_is_string(dyn)))
            return cfg_err(path,
                           "%s.input_activations: static activation quantization (input "
                           "scales) is not supported (dynamic is)",
                           where);
    }
    json_t *outa = json_object_get(g, "output_activations");
    if (outa && !json_is_null(outa))
        return cfg_err(path, "%s.output_activations: output quantization is not supported", where);
    json_t *w = json_object_get(g, "weights");
    if (w && !json_is_null(w)) {
        cg->has_weights = true;
        CT_TRY(scheme_parse(path, where, w, &cg->w));
    }
    return 0;
}

void ct_config_free(struct ct_config *c)
{
    if (!c)
        return;
    for (int g = 0; g < c->n_groups; g++)
        for (int t = 0; t < c->groups[g].n_targets; t++)
            pyre_free(c->groups[g].res[t]);
    json_decref(c->root);
    free(c);
}

int ct_config_parse(json_t *root, const char *path, struct ct_config **out)
{
    *out = NULL;
    json_t *q = json_object_get(root, "quantization_config");
    if (!q || json_is_null(q))
        return 0;
    if (!json_is_object(q))
        return err_set(ERR_FORMAT, "%s: quantization_config is not an object", path);
    json_t *m = json_object_get(q, "quant_method");
    const char *method = json_is_string(m) ? json_string_value(m) : NULL;
    if (!method)
        return err_set(ERR_FORMAT,
                       "%s: quantization_config.quant_method is missing or not a "
                       "string",
                       path);
    if (strcmp(method, "compressed-tensors") != 0)
        return err_set(ERR_UNSUPPORTED,
                       "%s: quantization_config.quant_method \"%.64s\" is not "
                       "supported (supported: compressed-tensors; GGUF files "
                       "are read as they are)",
                       path, method);
    struct ct_config *c = calloc(1, sizeof(*c));
    if (!c)
        return err_set(ERR_NOMEM, "out of memory");
    c->root = json_incref(q);
    c->path = path;
    const char *global = NULL;
    int rc = format_check(path, "", json_object_get(q, "format"), &global);
    json_t *sp = json_object_get(q, "sparsity_config");
    json_t *sf = json_object_get(sp, "format");
    if (rc == 0 && !is_empty(sp) &&
        !(json_is_string(sf) && !strcmp(json_string_value(sf), "dense")))
        rc = cfg_err(path, "sparsity_config: sparse weights are not supported");
    if (rc == 0 && !is_empty(json_object_get(q, "transform_config")))
        rc = cfg_err(path, "transform_config: weight transforms are not supported");
    if (rc == 0 && !is_empty(json_object_get(q, "kv_cache_scheme")))
        rc = cfg_err(path, "kv_cache_scheme: a quantized KV cache is not supported");
    json_t *ig = json_object_get(q, "ignore");
    if (rc == 0 && ig && !json_is_null(ig) && !json_is_array(ig))
        rc = cfg_err(path, "ignore is not a list");
    json_t *groups = json_object_get(q, "config_groups");
    if (rc == 0 && !json_is_object(groups))
        rc = cfg_err(path, "config_groups is missing or not an object");
    const char *name;
    json_t *g;
    if (rc == 0)
        json_object_foreach(groups, name, g)
        {
            if ((rc = group_parse(c, name, g)) < 0)
                break;
        }
    /* the format shown: each group's, else the global one */
    for (int i = 0; rc == 0 && i < c->n_groups; i++) {
        const char *f = c->groups[i].format ? c->groups[i].format : global;
        if (!c->groups[i].has_weights || !f)
            continue;
        c->groups[i].format = f;
        if (!strstr(c->format, f) && strlen(c->format) + strlen(f) + 2 < sizeof(c->format))
            snprintf(c->format + strlen(c->format), sizeof(c->format) - strlen(c->format), "%s%s",
                     c->format[0] ? "+" : "", f);
    }
    if (rc == 0 && !c->format[0])
        snprintf(c->format, sizeof(c->format), "%s", global ? global : "dense");
    if (rc < 0) {
        ct_config_free(c);
        return rc;
    }
    c->path = NULL; /* the caller's buffer: messages after this name the tensor's file */
    *out = c;
    return 0;
}

const char *ct_config_format(const struct ct_config *c)
{
    return c->format;
}

/* The CT type a weight of scheme s stored as raw becomes. */
static enum dtype ct_dtype(const struct ct_scheme *s, enum st_raw raw)
{
    if (raw == ST_RAW_F8_E4M3)
        return DTYPE_CT_F8;
    return raw == ST_RAW_I32 && s->bits == 4 ? DTYPE_CT_I4 : DTYPE_CT_I8;
}

unsigned ct_config_dtypes(const struct ct_config *c)
{
    unsigned m = 0;
    for (int i = 0; i < c->n_groups; i++) {
        const struct ct_group *g = &c->groups[i];
        if (!g->has_weights || (g->format && !strcmp(g->format, "dense")))
            continue;
        /* int4 is packed (CT_I4) or, naive-quantized, one int8 each (CT_I8) */
        if (g->w.is_float)
            m |= 1u << DTYPE_CT_F8;
        else
            m |= 1u << DTYPE_CT_I8 | (g->w.bits == 4 ? 1u << DTYPE_CT_I4 : 0);
    }
    return m;
}

/* ---- the tensors ---- */

static int target_matches(const struct ct_group *g, int t, const char *module, bool *match)
{
    if (g->res[t])
        return pyre_match(g->res[t], module, PYRE_MATCH, match);
    *match = strcmp(g->targets[t], "Linear") == 0 || strcmp(g->targets[t], module) == 0;
    return 0;
}

/* The first group whose targets name module, in *out (NULL when none). */
static int group_of(const struct ct_config *c, const char *module, const struct ct_group **out)
{
    *out = NULL;
    for (int i = 0; i < c->n_groups; i++)
        for (int t = 0; c->groups[i].has_weights && t < c->groups[i].n_targets; t++) {
            bool m;
            int rc = target_matches(&c->groups[i], t, module, &m);
            if (rc < 0)
                return rc;
            if (m) {
                *out = &c->groups[i];
                return 0;
            }
        }
    return 0;
}

/* ts's tensor named module + suffix, or NULL */
static const struct st_tensor *find(const struct st_tensor *ts, size_t n, const char *module,
                                    const char *suffix)
{
    char name[CT_NAME_MAX + 32];
    snprintf(name, sizeof(name), "%s%s", module, suffix);
    for (size_t i = 0; i < n; i++)
        if (strcmp(ts[i].name, name) == 0)
            return &ts[i];
    return NULL;
}

static bool has_suffix(const char *s, const char *suf, size_t *stem)
{
    size_t n = strlen(s), m = strlen(suf);
    *stem = n - m;
    return n > m && strcmp(s + n - m, suf) == 0;
}

static int t_err(const struct st_tensor *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int t_err(const struct st_tensor *t, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return err_set(ERR_FORMAT, "%s: tensor '%s' %s", t->file, t->name, msg);
}

static int64_t read_int(const struct st_tensor *t, size_t i)
{
    if (t->raw == ST_RAW_I64) {
        int64_t v;
        memcpy(&v, (const char *)t->data + 8 * i, 8);
        return v;
    }
    int32_t v;
    memcpy(&v, (const char *)t->data + 4 * i, 4);
    return v;
}

static float scale_at(const struct ct_tensor *ct, size_t i)
{
    float f;
    dtype_to_f32(ct->scale.dtype, (const char *)ct->scale.data + i * dtype_size(ct->scale.dtype),
                 &f, 1);
    return f;
}

static int zp_at(const struct ct_tensor *ct, size_t i)
{
    if (!ct->has_zp)
        return 0;
    if (ct->zp.raw == ST_RAW_I8)
        return ((const int8_t *)ct->zp.data)[i];
    /* packed along the scale's rows: element (sr, sc) at bit sr * bits of column sc */
    const size_t sr = i / ct->sc_cols, sc = i % ct->sc_cols, bit = sr * (size_t)ct->s.bits;
    const uint32_t w = (uint32_t)read_int(&ct->zp, bit / 32 * ct->sc_cols + sc);
    return (int)((w >> (bit % 32)) & ((1u << ct->s.bits) - 1)) - (1 << (ct->s.bits - 1));
}

static int shape2(const struct st_tensor *t, int64_t r, int64_t c)
{
    return t->ndim == 2 && t->shape[0] == r && t->shape[1] == c;
}

/* The CT tensor of module from its tensors; checks every shape and dtype
 * against the scheme. */
static int weight_build(const struct ct_group *g, const struct st_tensor *ts, size_t n,
                        const char *module, const struct st_tensor *q, struct ct_tensor *ct,
                        struct st_tensor *out)
{
    const struct ct_scheme *s = &g->w;
    const struct st_tensor *sc = find(ts, n, module, ".weight_scale");
    const struct st_tensor *zp = find(ts, n, module, ".weight_zero_point");
    const struct st_tensor *gi = find(ts, n, module, ".weight_g_idx");
    if (gi)
        return t_err(gi, "holds activation reordering (g_idx), which is not supported");
    if (!sc)
        return t_err(q, "has no %s.weight_scale", module);
    if (sc->raw != ST_RAW_NONE || sc->ndim > 2)
        return t_err(sc, "is not an F32, F16 or BF16 scale of at most 2 dimensions");
    memset(ct, 0, sizeof(*ct));
    ct->s = *s;
    ct->q = *q;
    ct->scale = *sc;
    ct->packed = q->raw == ST_RAW_I32;
    size_t stem;
    if (has_suffix(q->name, ".weight_packed", &stem) && !ct->packed)
        return t_err(q, "is %s, but packed weights are I32",
                     q->raw == ST_RAW_NONE ? dtype_name(q->dtype) : st_raw_name(q->raw));
    int64_t rows, cols;
    if (ct->packed) {
        const struct st_tensor *shp = find(ts, n, module, ".weight_shape");
        if (!shp || (shp->raw != ST_RAW_I64 && shp->raw != ST_RAW_I32) || shp->numel != 2)
            return t_err(q, "has no %s.weight_shape of two integers", module);
        rows = read_int(shp, 0);
        cols = read_int(shp, 1);
        if (s->is_float)
            return t_err(q, "is packed integers, but its scheme's weights are float");
        if (rows < 1 || cols < 1 || rows > (1 << 24) || cols > (1 << 24) ||
            !shape2(q, rows, (cols * s->bits + 31) / 32))
            return t_err(q,
                         "does not hold %lld x %lld elements of %d bits packed in int32 "
                         "(weight_shape)",
                         (long long)rows, (long long)cols, s->bits);
    } else {
        if (q->ndim != 2 || q->shape[0] < 1 || q->shape[1] < 1 || q->shape[0] > (1 << 24) ||
            q->shape[1] > (1 << 24))
            return t_err(q, "is not a matrix");
        rows = q->shape[0];
        cols = q->shape[1];
        if ((q->raw == ST_RAW_F8_E4M3) != s->is_float || q->raw == ST_RAW_I32 ||
            q->raw == ST_RAW_I64)
            return t_err(q, "is %s, but its scheme's weights are %s %d bits", st_raw_name(q->raw),
                         s->is_float ? "float" : "int", s->bits);
    }
    if (cols % QUANT_CT_QK != 0)
        return t_err(q,
                     "has %lld columns, not a multiple of the %d-element blocks its weights "
                     "are computed in",
                     (long long)cols, QUANT_CT_QK);
    ct->rows = (int)rows;
    ct->cols = (int)cols;
    switch (s->strategy) {
    case CT_TENSOR:
        ct->rdiv = (size_t)rows;
        ct->cdiv = (size_t)cols;
        break;
    case CT_CHANNEL:
        ct->rdiv = 1;
        ct->cdiv = (size_t)cols;
        break;
    case CT_GROUP:
        if (cols % s->group != 0)
            return t_err(q, "has %lld columns, not a multiple of group_size %d", (long long)cols,
                         s->group);
        ct->rdiv = 1;
        ct->cdiv = (size_t)s->group;
        break;
    case CT_BLOCK:
        ct->rdiv = (size_t)s->bh;
        ct->cdiv = (size_t)s->bw;
        break;
    }
    const size_t srows = ((size_t)rows + ct->rdiv - 1) / ct->rdiv;
    ct->sc_cols = ((size_t)cols + ct->cdiv - 1) / ct->cdiv;
    bool sc_ok = sc->numel == srows * ct->sc_cols &&
                 (sc->ndim < 2 || shape2(sc, (int64_t)srows, (int64_t)ct->sc_cols)) &&
                 (sc->ndim != 1 || srows == 1 || ct->sc_cols == 1);
    if (!sc_ok)
        return t_err(sc, "does not hold the %zu x %zu scales of a %s-strategy %lld x %lld weight",
                     srows, ct->sc_cols,
                     (const char *[]){"tensor", "channel", "group", "block"}[s->strategy],
                     (long long)rows, (long long)cols);
    if (s->symmetric) {
        if (zp && zp->numel && s->strategy != CT_TENSOR)
            return t_err(zp, "is a zero point of symmetric weights");
    } else {
        if (!zp)
            return t_err(q, "has no %s.weight_zero_point (its weights are asymmetric)", module);
        ct->zp = *zp;
        ct->has_zp = true;
        bool ok = zp->raw == ST_RAW_I8 ? zp->numel == sc->numel
                  : zp->raw == ST_RAW_I32
                      ? ct->packed &&
                            shape2(zp, (int64_t)((srows * s->bits + 31) / 32), (int64_t)ct->sc_cols)
                      : false;
        if (!ok)
            return t_err(zp, "is not the zero points of its scales (I8 shaped as them, or I32 "
                             "packed along their rows)");
        const int lo = -(1 << (s->bits - 1)), hi = (1 << (s->bits - 1)) - 1;
        for (size_t i = 0; i < sc->numel; i++) {
            int z = zp_at(ct, i);
            if (z < lo || z > hi)
                return t_err(zp, "holds zero point %d at %zu, outside [%d, %d]", z, i, lo, hi);
        }
    }
    /* the one tensor the loader sees */
    const enum dtype dt = ct_dtype(s, q->raw);
    char *name = (char *)(ct + 1);
    snprintf(name, CT_NAME_MAX + 8, "%s.weight", module);
    *out = *q;
    out->name = name;
    out->raw = ST_RAW_NONE;
    out->dtype = dt;
    out->ndim = 2;
    out->shape[0] = rows;
    out->shape[1] = cols;
    out->numel = (size_t)rows * (size_t)cols;
    out->nbytes = (size_t)rows * dtype_row_bytes(dt, (size_t)cols);
    out->ct = ct;
    return 0;
}

/* Whether t is one of a quantized weight's companions (scale, zero point,
 * shape), which the weight's CT tensor replaces. */
static bool companion(const char *name)
{
    static const char *const sfx[] = {".weight_scale", ".weight_zero_point", ".weight_shape"};
    size_t stem;
    for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++)
        if (has_suffix(name, sfx[i], &stem))
            return true;
    return false;
}

int ct_wrap(const struct ct_config *c, const struct st_tensor *ts, size_t n, struct st_tensor **out,
            size_t *n_out, void **owned)
{
    *out = NULL;
    *owned = NULL;
    *n_out = 0;
    const size_t one = sizeof(struct ct_tensor) + CT_NAME_MAX + 8;
    size_t n_weights = 0;
    for (size_t i = 0; i < n; i++) {
        size_t stem;
        if (has_suffix(ts[i].name, ".weight_packed", &stem) ||
            (has_suffix(ts[i].name, ".weight", &stem) && ts[i].raw != ST_RAW_NONE))
            n_weights++;
    }
    struct st_tensor *o = calloc(n + 1, sizeof(*o));
    char *cts = calloc(n_weights + 1, one);
    if (!o || !cts) {
        free(o);
        free(cts);
        return err_set(ERR_NOMEM, "out of memory for %zu tensors", n);
    }
    size_t k = 0, w = 0;
    int rc = 0;
    for (size_t i = 0, stem; c && i < n; i++)
        if (has_suffix(ts[i].name, ".weight_g_idx", &stem)) {
            rc = t_err(&ts[i], "holds activation reordering (g_idx), which is not supported");
            break;
        }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const struct st_tensor *t = &ts[i];
        size_t stem;
        bool packed = has_suffix(t->name, ".weight_packed", &stem);
        bool quant = packed || (has_suffix(t->name, ".weight", &stem) && t->raw != ST_RAW_NONE);
        if (quant && c) {
            char module[CT_NAME_MAX];
            if (stem >= sizeof(module)) {
                rc = t_err(t, "has a name longer than %d bytes", CT_NAME_MAX - 1);
                break;
            }
            memcpy(module, t->name, stem);
            module[stem] = '\0';
            const struct ct_group *g;
            if ((rc = group_of(c, module, &g)) < 0) {
                rc = err_wrap(rc, "%s: tensor '%s': quantization_config's targets", t->file,
                              t->name);
                break;
            }
            if (!g) {
                rc = t_err(t,
                           "is quantized, but no config group of config.json's "
                           "quantization_config targets %s",
                           module);
                break;
            }
            struct ct_tensor *ct = (struct ct_tensor *)(cts + w++ * one);
            rc = weight_build(g, ts, n, module, t, ct, &o[k++]);
            continue;
        }
        if (c && companion(t->name))
            continue;
        if (t->raw != ST_RAW_NONE) {
            rc = err_set(ERR_UNSUPPORTED,
                         "%s: unsupported dtype %s in tensor '%s' (supported: F32, "
                         "F16, BF16; %s)",
                         t->file, st_raw_name(t->raw), t->name,
                         c ? "not a weight of config.json's quantization_config"
                           : "quantized weights need config.json's quantization_config");
            break;
        }
        o[k++] = *t;
    }
    if (rc < 0) {
        free(o);
        free(cts);
        return rc;
    }
    *out = o;
    *n_out = k;
    *owned = cts;
    return 0;
}

void ct_copy(const struct st_tensor *t, size_t r0, size_t nr, size_t c0, size_t nc, void *out)
{
    const struct ct_tensor *ct = t->ct;
    const size_t bb = quant_ct_block_bytes(t->dtype);
    const int bits = ct->packed ? ct->s.bits : 8;
    const size_t words = ((size_t)ct->cols * (size_t)bits + 31) / 32;
    unsigned char *o = out;
    for (size_t r = r0; r < r0 + nr; r++) {
        for (size_t c = c0; c < c0 + nc; c += QUANT_CT_QK, o += bb) {
            const size_t si = (r / ct->rdiv) * ct->sc_cols + c / ct->cdiv;
            const float d = scale_at(ct, si);
            memcpy(o, &d, 4);
            if (t->dtype == DTYPE_CT_F8) {
                memcpy(o + 4, (const char *)ct->q.data + r * (size_t)ct->cols + c, QUANT_CT_QK);
                continue;
            }
            o[4] = (unsigned char)(int8_t)zp_at(ct, si);
            unsigned char *qs = o + 5;
            if (!ct->packed) { /* int8 as it is */
                memcpy(qs, (const char *)ct->q.data + r * (size_t)ct->cols + c, QUANT_CT_QK);
                continue;
            }
            /* 32 elements of `bits` bits are `bits` whole words from word c * bits / 32 */
            uint32_t wd[8];
            memcpy(wd, (const char *)ct->q.data + (r * words + c * (size_t)bits / 32) * 4,
                   (size_t)bits * 4);
            if (bits == 8) {
                for (int j = 0; j < QUANT_CT_QK; j++)
                    qs[j] =
                        (unsigned char)(int8_t)((int)((wd[j / 4] >> (8 * (j % 4))) & 255) - 128);
            } else { /* nibbles in order: byte i of the words is elements 2i, 2i + 1 */
                for (int i = 0; i < QUANT_CT_QK / 2; i++)
                    qs[i] = (unsigned char)(wd[i / 4] >> (8 * (i % 4)));
            }
        }
    }
}

size_t ct_find_nonfinite(const struct st_tensor *t)
{
    const struct ct_tensor *ct = t->ct;
    unsigned char blk[QUANT_CT_I8_BYTES];
    for (size_t r = 0; r < (size_t)ct->rows; r++)
        for (size_t c = 0; c < (size_t)ct->cols; c += QUANT_CT_QK) {
            ct_copy(t, r, 1, c, QUANT_CT_QK, blk);
            if (quant_ct_find_nonfinite(t->dtype, blk, QUANT_CT_QK) < QUANT_CT_QK)
                return r * (size_t)ct->cols + c;
        }
    return t->numel;
}
