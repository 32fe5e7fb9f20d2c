/* Random checkpoints of every family: presets by name, and the writer that
 * streams a family's tensors into safetensors files in transformers'
 * sharding. */
#include "model/random.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/rng.h"
#include "format/safetensors.h"
#include "model/arch.h"

static char preset_names[512];
static pthread_once_t preset_names_once = PTHREAD_ONCE_INIT;

static void preset_names_make(void)
{
    size_t at = 0;
    for (int a = 0; model_archs[a]; a++)
        at += (size_t)snprintf(preset_names + at, sizeof(preset_names) - at, "%s%s",
                               at ? "|" : "", model_archs[a]->preset_names);
}

const char *model_preset_names(void)
{
    pthread_once(&preset_names_once, preset_names_make);
    return preset_names;
}

int model_preset(const char *name, struct model_config **out)
{
    *out = NULL;
    for (int a = 0; model_archs[a]; a++) {
        int rc = model_archs[a]->preset(name, out);
        if (rc != ERR_NOT_FOUND)
            return rc;
    }
    return err_set(ERR_INVALID, "unknown preset \"%s\" (expected one of %s)", name,
                   model_preset_names());
}

void tensor_spec_set(struct tensor_spec *t, int ndim, int64_t rows, int64_t cols,
                     enum tensor_init init, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof(t->name), fmt, ap);
    va_end(ap);
    t->ndim = ndim;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->init = init;
    t->zero_row = -1;
}

static uint64_t spec_numel(const struct tensor_spec *s)
{
    return (uint64_t)s->shape[0] * (uint64_t)(s->ndim == 2 ? s->shape[1] : 1);
}

uint64_t model_checkpoint_bytes(const struct model_config *cfg, enum dtype dtype)
{
    struct tensor_spec *s;
    int n;
    if (cfg->arch->tensors(cfg, &s, &n) < 0)
        return 0;
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += spec_numel(&s[i]) * dtype_size(dtype);
    free(s);
    return total;
}

/* n normal(0, std) floats by Box-Muller, two per pair of uniforms. */
static void fill_normal(float *dst, size_t n, float std, struct rng *rng)
{
    for (size_t i = 0; i < n; i += 2) {
        double r = sqrt(-2.0 * log(rng_uniform(rng))) * std, a = 2 * M_PI * rng_uniform(rng);
        dst[i] = (float)(r * cos(a));
        if (i + 1 < n)
            dst[i + 1] = (float)(r * sin(a));
    }
}

#define CHUNK_ELEMS (1u << 20)

struct writer_state {
    const struct model_random_opts *o;
    uint64_t done, total;
    float *f32;
    void *out;
};

/* Generates tensor s and streams it into w in chunks. */
static int write_tensor(struct st_writer *w, const struct tensor_spec *s, uint64_t seed, int index,
                        struct writer_state *ws)
{
    /* one stream per tensor: the weights do not depend on the shard layout */
    struct rng rng;
    rng_seed(&rng, seed, (uint64_t)index);
    uint64_t numel = spec_numel(s), row = s->ndim == 2 ? (uint64_t)s->shape[1] : 1;
    size_t es = dtype_size(ws->o->dtype);
    for (uint64_t off = 0; off < numel; off += CHUNK_ELEMS) {
        size_t n = numel - off < CHUNK_ELEMS ? (size_t)(numel - off) : CHUNK_ELEMS;
        switch (s->init) {
        case TENSOR_NORMAL:
            fill_normal(ws->f32, n, 0.02f, &rng);
            break;
        case TENSOR_ZERO:
        case TENSOR_ONE:
            for (size_t i = 0; i < n; i++)
                ws->f32[i] = s->init == TENSOR_ONE ? 1.0f : 0.0f;
            break;
        }
        if (s->zero_row >= 0) {
            uint64_t z0 = (uint64_t)s->zero_row * row, z1 = z0 + row;
            for (uint64_t i = z0 > off ? z0 : off; i < z1 && i < off + n; i++)
                ws->f32[i - off] = 0.0f;
        }
        dtype_from_f32(ws->o->dtype, ws->f32, ws->out, n);
        int rc = st_writer_write(w, ws->out, n * es);
        if (rc < 0)
            return rc;
        ws->done += n * es;
        if (ws->o->progress)
            ws->o->progress(ws->o->progress_ctx, ws->done, ws->total);
    }
    return 0;
}

/* Writes specs [i0, i1) into one safetensors file. */
static int write_file(const char *path, const struct tensor_spec *s, int i0, int i1,
                      struct writer_state *ws)
{
    struct st_writer *w;
    int rc = st_writer_open(path, &w);
    if (rc < 0)
        return rc;
    for (int i = i0; i < i1; i++)
        if ((rc = st_writer_declare(w, s[i].name, ws->o->dtype, s[i].ndim, s[i].shape)) < 0)
            goto fail;
    for (int i = i0; i < i1; i++)
        if ((rc = write_tensor(w, &s[i], ws->o->seed, i, ws)) < 0)
            goto fail;
    return st_writer_close(w);
fail:
    st_writer_abort(w);
    return rc;
}

int model_random_write(const struct model_config *cfg, const char *dir,
                       const struct model_random_opts *o)
{
    struct model_config *c = NULL;
    uint64_t max_shard = o->max_shard_bytes ? o->max_shard_bytes : 5000000000ull;
    struct tensor_spec *s = NULL;
    int n = 0, rc;
    json_t *map = NULL;
    struct writer_state ws = {.o = o, .total = model_checkpoint_bytes(cfg, o->dtype)};
    if ((rc = model_config_dup(cfg, &c)) < 0)
        return rc;
    c->info.dtype = o->dtype;
    rc = model_config_save(c, dir);
    if (rc == 0)
        rc = c->arch->tensors(c, &s, &n);
    model_config_free(c);
    if (rc < 0)
        return rc;
    ws.f32 = malloc(CHUNK_ELEMS * sizeof(float));
    ws.out = malloc(CHUNK_ELEMS * sizeof(float));
    /* shard boundaries as transformers draws them: start a new file when the
     * next tensor would push a non-empty one past the limit */
    int *first = calloc((size_t)n + 1, sizeof(int)), n_files = 0;
    if (!ws.f32 || !ws.out || !first) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto out;
    }
    uint64_t cur = 0;
    for (int i = 0; i < n; i++) {
        uint64_t b = spec_numel(&s[i]) * dtype_size(o->dtype);
        if (i == 0 || (cur > 0 && cur + b > max_shard)) {
            first[n_files++] = i;
            cur = 0;
        }
        cur += b;
    }
    first[n_files] = n;
    char path[4096], fname[64];
    if (n_files == 1) {
        snprintf(path, sizeof(path), "%s/model.safetensors", dir);
        rc = write_file(path, s, 0, n, &ws);
        goto out;
    }
    map = json_object();
    for (int f = 0; f < n_files && rc == 0; f++) {
        snprintf(fname, sizeof(fname), "model-%05d-of-%05d.safetensors", f + 1, n_files);
        snprintf(path, sizeof(path), "%s/%s", dir, fname);
        rc = write_file(path, s, first[f], first[f + 1], &ws);
        for (int i = first[f]; i < first[f + 1]; i++)
            json_object_set_new(map, s[i].name, json_string(fname));
    }
    if (rc == 0) {
        json_t *index = json_pack("{s:{s:I}, s:O}", "metadata", "total_size",
                                  (json_int_t)ws.total, "weight_map", map);
        snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
        if (!index || json_dump_file(index, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0)
            rc = err_set(ERR_IO, "%s: cannot write", path);
        json_decref(index);
    }
out:
    json_decref(map);
    free(first);
    free(ws.f32);
    free(ws.out);
    free(s);
    return rc;
}

int model_random_adapter_write(const struct model_config *base, const char *dir, int rank,
                               const struct model_random_opts *o)
{
    const struct arch_ops *a = base->arch;
    const struct model_info *in = &base->info;
    if (!a->lora_layer)
        return err_set(ERR_UNSUPPORTED, "the %s family takes no LoRA adapters", a->name);
    const int64_t h = in->hidden, q = (int64_t)in->n_heads * in->head_dim,
                  kv = (int64_t)in->n_kv_heads * in->head_dim, f = in->ffn;
    const int64_t io[LORA_SLOTS][2] = {{h, q}, {h, kv}, {h, kv}, {q, h}, {h, f}, {h, f}, {f, h}};
    /* the config: every projection the family adapts, by its last name */
    json_t *targets = json_array();
    for (int s = 0; targets && s < LORA_SLOTS; s++) {
        const char *m = a->lora_modules[s], *dot = m ? strrchr(m, '.') : NULL;
        if (m)
            json_array_append_new(targets, json_string(dot ? dot + 1 : m));
    }
    json_t *cfg =
        json_pack("{s:s, s:i, s:i, s:o, s:f, s:s, s:b, s:b, s:b}", "peft_type", "LORA", "r", rank,
                  "lora_alpha", 2 * rank, "target_modules", targets, "lora_dropout", 0.0, "bias",
                  "none", "use_rslora", 0, "use_dora", 0, "fan_in_fan_out", 0);
    char path[4096];
    snprintf(path, sizeof(path), "%s/adapter_config.json", dir);
    int rc = 0;
    if (!cfg || json_dump_file(cfg, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0)
        rc = err_set(ERR_IO, "%s: cannot write", path);
    json_decref(cfg);
    if (rc < 0)
        return rc;
    /* the pairs, A (rank, in) and B (out, rank) of each, in PEFT's names */
    int n = 0;
    struct tensor_spec *s = calloc((size_t)in->n_layers * LORA_SLOTS * 2, sizeof(*s));
    if (!s)
        return err_set(ERR_NOMEM, "out of memory");
    char layer[128];
    for (int l = 0; l < in->n_layers; l++) {
        snprintf(layer, sizeof(layer), a->lora_layer, l);
        for (int k = 0; k < LORA_SLOTS; k++) {
            if (!a->lora_modules[k])
                continue;
            tensor_spec_set(&s[n++], 2, rank, io[k][0], TENSOR_NORMAL,
                            "base_model.model.%s%s.lora_A.weight", layer, a->lora_modules[k]);
            tensor_spec_set(&s[n++], 2, io[k][1], rank, TENSOR_NORMAL,
                            "base_model.model.%s%s.lora_B.weight", layer, a->lora_modules[k]);
        }
    }
    struct writer_state ws = {.o = o};
    for (int i = 0; i < n; i++)
        ws.total += spec_numel(&s[i]) * dtype_size(o->dtype);
    ws.f32 = malloc(CHUNK_ELEMS * sizeof(float));
    ws.out = malloc(CHUNK_ELEMS * sizeof(float));
    if (!ws.f32 || !ws.out)
        rc = err_set(ERR_NOMEM, "out of memory");
    snprintf(path, sizeof(path), "%s/adapter_model.safetensors", dir);
    if (rc == 0)
        rc = write_file(path, s, 0, n, &ws);
    free(ws.f32);
    free(ws.out);
    free(s);
    return rc;
}
