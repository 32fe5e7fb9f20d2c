#include "model/opt_random.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/error.h"
#include "core/rng.h"
#include "format/safetensors.h"

static const struct {
    const char *name;
    int hidden, ffn, layers, heads, embed_dim;
    int pre_ln;
} presets[] = {
    {"opt-125m", 768, 3072, 12, 12, 768, 1},
    {"opt-350m", 1024, 4096, 24, 16, 512, 0},
    {"opt-1.3b", 2048, 8192, 24, 32, 2048, 1},
    {"opt-2.7b", 2560, 10240, 32, 32, 2560, 1},
    {"opt-6.7b", 4096, 16384, 32, 32, 4096, 1},
    {"opt-13b", 5120, 20480, 40, 40, 5120, 1},
    {"opt-30b", 7168, 28672, 48, 56, 7168, 1},
};
#define N_PRESETS (sizeof(presets) / sizeof(presets[0]))

const char *opt_preset_names(void)
{
    return "opt-125m|opt-350m|opt-1.3b|opt-2.7b|opt-6.7b|opt-13b|opt-30b";
}

int opt_preset(const char *name, struct opt_config *cfg)
{
    for (size_t i = 0; i < N_PRESETS; i++) {
        if (strcmp(name, presets[i].name) != 0)
            continue;
        memset(cfg, 0, sizeof(*cfg));
        cfg->hidden = presets[i].hidden;
        cfg->ffn = presets[i].ffn;
        cfg->n_layers = presets[i].layers;
        cfg->n_heads = presets[i].heads;
        cfg->embed_dim = presets[i].embed_dim;
        cfg->pre_ln = presets[i].pre_ln;
        cfg->final_ln = presets[i].pre_ln;
        cfg->vocab = 50272;
        cfg->max_pos = 2048;
        cfg->bias = true;
        cfg->ln_affine = true;
        cfg->tie_embeddings = true;
        cfg->act = OPT_ACT_RELU;
        cfg->pad_id = 1;
        cfg->bos_id = 2;
        cfg->eos_id = 2;
        cfg->torch_dtype = DTYPE_F16;
        return 0;
    }
    return err_set(ERR_INVALID, "unknown preset \"%s\" (expected one of %s)", name,
                   opt_preset_names());
}

enum init { INIT_NORMAL, INIT_ZERO, INIT_ONE };

struct spec {
    char name[96];
    int ndim;
    int64_t shape[2];
    enum init init;
    int zero_row; /* row left zero (the padding embedding), or -1 */
};

/* The tensors of cfg in transformers' state_dict order. *out is malloc'd. */
static int spec_list(const struct opt_config *c, struct spec **out, int *n_out)
{
    int cap = 8 + c->n_layers * 16, n = 0;
    struct spec *s = calloc((size_t)cap, sizeof(*s));
    if (!s)
        return err_set(ERR_NOMEM, "out of memory");
#define ADD(nd, r, cl, in, ...)                                                         \
    do {                                                                                \
        snprintf(s[n].name, sizeof(s[n].name), __VA_ARGS__);                            \
        s[n].ndim = nd;                                                                 \
        s[n].shape[0] = r;                                                              \
        s[n].shape[1] = cl;                                                             \
        s[n].init = in;                                                                 \
        s[n].zero_row = -1;                                                             \
        n++;                                                                            \
    } while (0)
    const int H = c->hidden;
    ADD(2, c->vocab, c->embed_dim, INIT_NORMAL, "model.decoder.embed_tokens.weight");
    s[n - 1].zero_row = c->pad_id;
    ADD(2, c->max_pos + 2, H, INIT_NORMAL, "model.decoder.embed_positions.weight");
    if (c->final_ln && c->ln_affine) {
        ADD(1, H, 0, INIT_ONE, "model.decoder.final_layer_norm.weight");
        ADD(1, H, 0, INIT_ZERO, "model.decoder.final_layer_norm.bias");
    }
    if (c->embed_dim != H) {
        ADD(2, c->embed_dim, H, INIT_NORMAL, "model.decoder.project_out.weight");
        ADD(2, H, c->embed_dim, INIT_NORMAL, "model.decoder.project_in.weight");
    }
    for (int l = 0; l < c->n_layers; l++) {
        static const char *proj[] = {"k_proj", "v_proj", "q_proj", "out_proj"};
        for (int p = 0; p < 4; p++) {
            ADD(2, H, H, INIT_NORMAL, "model.decoder.layers.%d.self_attn.%s.weight", l, proj[p]);
            if (c->bias)
                ADD(1, H, 0, INIT_ZERO, "model.decoder.layers.%d.self_attn.%s.bias", l, proj[p]);
        }
        if (c->ln_affine) {
            ADD(1, H, 0, INIT_ONE, "model.decoder.layers.%d.self_attn_layer_norm.weight", l);
            ADD(1, H, 0, INIT_ZERO, "model.decoder.layers.%d.self_attn_layer_norm.bias", l);
        }
        ADD(2, c->ffn, H, INIT_NORMAL, "model.decoder.layers.%d.fc1.weight", l);
        if (c->bias)
            ADD(1, c->ffn, 0, INIT_ZERO, "model.decoder.layers.%d.fc1.bias", l);
        ADD(2, H, c->ffn, INIT_NORMAL, "model.decoder.layers.%d.fc2.weight", l);
        if (c->bias)
            ADD(1, H, 0, INIT_ZERO, "model.decoder.layers.%d.fc2.bias", l);
        if (c->ln_affine) {
            ADD(1, H, 0, INIT_ONE, "model.decoder.layers.%d.final_layer_norm.weight", l);
            ADD(1, H, 0, INIT_ZERO, "model.decoder.layers.%d.final_layer_norm.bias", l);
        }
    }
    if (!c->tie_embeddings)
        ADD(2, c->vocab, c->embed_dim, INIT_NORMAL, "lm_head.weight");
#undef ADD
    *out = s;
    *n_out = n;
    return 0;
}

static uint64_t spec_numel(const struct spec *s)
{
    return (uint64_t)s->shape[0] * (uint64_t)(s->ndim == 2 ? s->shape[1] : 1);
}

uint64_t opt_checkpoint_bytes(const struct opt_config *cfg, enum dtype dtype)
{
    struct spec *s;
    int n;
    if (spec_list(cfg, &s, &n) < 0)
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
    const struct opt_random_opts *o;
    uint64_t done, total;
    float *f32;
    void *out;
};

/* Generates tensor s and streams it into w in chunks. */
static int write_tensor(struct st_writer *w, const struct spec *s, uint64_t seed, int index,
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
        case INIT_NORMAL:
            fill_normal(ws->f32, n, 0.02f, &rng);
            break;
        case INIT_ZERO:
        case INIT_ONE:
            for (size_t i = 0; i < n; i++)
                ws->f32[i] = s->init == INIT_ONE ? 1.0f : 0.0f;
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
static int write_file(const char *path, const struct spec *s, int i0, int i1,
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

static int write_generation_config(const struct opt_config *c, const char *dir)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/generation_config.json", dir);
    json_t *g = json_pack("{s:i, s:i, s:i, s:s}", "bos_token_id", c->bos_id, "eos_token_id",
                          c->eos_id, "pad_token_id", c->pad_id, "transformers_version",
                          "shardswap");
    int rc = 0;
    if (!g || json_dump_file(g, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0)
        rc = err_set(ERR_IO, "%s: cannot write", path);
    json_decref(g);
    return rc;
}

int opt_random_write(const struct opt_config *cfg, const char *dir,
                     const struct opt_random_opts *o)
{
    struct opt_config c = *cfg;
    c.torch_dtype = o->dtype;
    uint64_t max_shard = o->max_shard_bytes ? o->max_shard_bytes : 5000000000ull;
    struct spec *s = NULL;
    int n = 0, rc;
    json_t *map = NULL;
    struct writer_state ws = {.o = o, .total = opt_checkpoint_bytes(&c, o->dtype)};
    if ((rc = opt_config_save(&c, dir)) < 0 || (rc = write_generation_config(&c, dir)) < 0 ||
        (rc = spec_list(&c, &s, &n)) < 0)
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
