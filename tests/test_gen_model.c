/* Random checkpoints (gen-model) and checkpoint binding errors.
 * - a generated checkpoint is initialised like transformers (std 0.02 normal,
 *   zero biases, unit LayerNorms, zero padding row) and runs;
 * - the same model sharded over several files gives bit-identical logits;
 * - a missing tensor or a tensor of the wrong shape is named in the error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "format/safetensors.h"
#include "model/llama/llama.h"
#include "model/model.h"
#include "model/random.h"
#include "test.h"
#include "tiny_opt.h"

static char tmp[256];

static void forward_ids(struct model *m, float *logits, int n)
{
    int32_t ids[8] = {2, 100, 5, 999, 17, 4, 300, 42};
    struct model_exec *kv;
    CHECK(model_exec_open_cpu(m, &(struct model_exec_shape){.batch = 1, .max_len = n, .max_rows = (1) * (n)}, &kv) == 0);
    CHECK(model_forward(m, kv, ids, NULL, n, true, logits) == 0);
    model_exec_free(kv);
}

static void check_init(const struct st_checkpoint *ck)
{
    const struct st_tensor *e = st_find(ck, "model.decoder.embed_tokens.weight");
    CHECK(e && e->dtype == DTYPE_F16 && e->shape[0] == 1000 && e->shape[1] == 128);
    if (!e)
        return;
    float *w = malloc(e->numel * sizeof(float));
    dtype_to_f32(e->dtype, e->data, w, e->numel);
    double s = 0, s2 = 0;
    int pad_zero = 1;
    for (size_t i = 0; i < e->numel; i++) {
        s += w[i];
        s2 += (double)w[i] * w[i];
        if (i / 128 == 1 && w[i] != 0)
            pad_zero = 0;
    }
    double mean = s / e->numel, std = sqrt(s2 / e->numel - mean * mean);
    CHECK_MSG(fabs(std - 0.02) < 0.001 && fabs(mean) < 0.001, "embed mean %g std %g", mean, std);
    CHECK(pad_zero);
    free(w);
    const struct st_tensor *b = st_find(ck, "model.decoder.layers.1.fc1.bias");
    const struct st_tensor *g = st_find(ck, "model.decoder.layers.0.self_attn_layer_norm.weight");
    CHECK(b && g);
    if (b && g) {
        float x, y;
        dtype_to_f32(b->dtype, (const char *)b->data + 2 * 7, &x, 1);
        dtype_to_f32(g->dtype, (const char *)g->data + 2 * 7, &y, 1);
        CHECK(x == 0.0f && y == 1.0f);
    }
    CHECK(st_find(ck, "lm_head.weight") == NULL); /* tied, as transformers saves it */
}

/* Copies every tensor of src but `skip` into dir/model.safetensors; `reshape`
 * gets its two dims swapped. */
static void write_variant(const struct st_checkpoint *src, const char *dir, const char *skip,
                          const char *reshape)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    struct st_writer *w;
    CHECK(st_writer_open(path, &w) == 0);
    for (size_t i = 0; i < st_count(src); i++) {
        const struct st_tensor *t = st_get(src, i);
        if (strcmp(t->name, skip) == 0)
            continue;
        int64_t shape[ST_MAX_DIMS];
        memcpy(shape, t->shape, sizeof(shape));
        if (strcmp(t->name, reshape) == 0) {
            shape[0] = t->shape[1];
            shape[1] = t->shape[0];
        }
        CHECK(st_writer_declare(w, t->name, t->dtype, t->ndim, shape) == 0);
    }
    for (size_t i = 0; i < st_count(src); i++) {
        const struct st_tensor *t = st_get(src, i);
        if (strcmp(t->name, skip) != 0)
            CHECK(st_writer_write(w, t->data, t->nbytes) == 0);
    }
    CHECK(st_writer_close(w) == 0);
}

/* the generated model's directory when in one file; the model opened from
 * one file (a) and from several (b); its vocabulary size */
static char one[300];
static struct model *a, *b;
static int V;

/* Closes the models (before the scratch tree goes: atexit runs last
 * registered first). */
static void close_models(void)
{
    model_close(a);
    model_close(b);
}

/* The same generated model, in one file and in several, opened. */
static void setup(void)
{
    test_scratch_dir(tmp, sizeof(tmp), "gen");
    atexit(close_models);
    char many[300], bad[300];
    snprintf(one, sizeof(one), "%s/one", tmp);
    snprintf(many, sizeof(many), "%s/many", tmp);
    snprintf(bad, sizeof(bad), "%s/bad", tmp);
    mkdir(one, 0755);
    mkdir(many, 0755);
    mkdir(bad, 0755);

    struct model_config *c = tiny_opt_config(2, 1000);
    struct model_random_opts o = {.dtype = DTYPE_F16, .seed = 5};
    CHECK(model_random_write(c, one, &o) == 0);
    o.max_shard_bytes = 300000; /* forces several files */
    CHECK(model_random_write(c, many, &o) == 0);
    V = c->info.vocab;
    model_config_free(c);

    CHECK_MSG(model_open(one, &a) == 0, "%s", err_msg());
    CHECK_MSG(model_open(many, &b) == 0, "%s", err_msg());
}

/* one file or several: the same tensors, the same logits, all finite */
TEST(shards_agree)
{
    if (!a || !b)
        return;
    CHECK(st_file_count(a->ck) == 1 && st_file_count(b->ck) > 2);
    CHECK(a->info->dtype == DTYPE_F16 && a->info->n_layers == 2);
    check_init(a->ck);
    const int n = 8;
    float *la = malloc((size_t)n * V * sizeof(float)), *lb = malloc((size_t)n * V * sizeof(float));
    forward_ids(a, la, n);
    forward_ids(b, lb, n);
    CHECK(memcmp(la, lb, (size_t)n * V * sizeof(float)) == 0);
    int finite = 1;
    for (int i = 0; i < n * V; i++)
        finite &= isfinite(la[i]);
    CHECK(finite);
    free(la);
    free(lb);
}

/* a missing tensor and a wrongly shaped one are named */
TEST(named_errors)
{
    if (!a || !b)
        return;
    char bad[300];
    snprintf(bad, sizeof(bad), "%s/bad", tmp);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "cp %s/config.json %s/", one, bad);
    CHECK(system(cmd) == 0);
    struct model *m = NULL;
    write_variant(a->ck, bad, "model.decoder.layers.1.fc2.weight", "");
    CHECK(model_open(bad, &m) == ERR_NOT_FOUND);
    CHECK_MSG(strstr(err_msg(), "model.decoder.layers.1.fc2.weight"), "%s", err_msg());
    write_variant(a->ck, bad, "", "model.decoder.layers.0.fc1.weight");
    CHECK(model_open(bad, &m) == ERR_FORMAT);
    CHECK_MSG(strstr(err_msg(), "model.decoder.layers.0.fc1.weight has shape [128, 256], "
                                "expected [256, 128]"), "%s", err_msg());
    CHECK(m == NULL);
}

/* A missing expert is named; experts fused into one 3-D tensor (the layout
 * transformers 5 holds in memory, never what save_pretrained writes) are
 * refused in one line. ck: a narrowed Qwen3-MoE, its config.json in dir. */
static void check_moe_names(const struct st_checkpoint *ck, const char *dir)
{
    char bad[400], cmd[1024];
    snprintf(bad, sizeof(bad), "%s-bad", dir);
    mkdir(bad, 0755);
    snprintf(cmd, sizeof(cmd), "cp %s/config.json %s/", dir, bad);
    CHECK(system(cmd) == 0);
    struct model *m = NULL;
    write_variant(ck, bad, "model.layers.1.mlp.experts.5.down_proj.weight", "");
    CHECK(model_open(bad, &m) == ERR_NOT_FOUND);
    CHECK_MSG(strstr(err_msg(), "model.layers.1.mlp.experts.5.down_proj.weight"), "%s", err_msg());
    char path[512];
    snprintf(path, sizeof(path), "%s/model.safetensors", bad);
    struct st_writer *w;
    CHECK(st_writer_open(path, &w) == 0);
    static float fused[8 * 64 * 64];
    const int64_t shape[3] = {8, 64, 64};
    for (size_t i = 0; i < st_count(ck); i++) {
        const struct st_tensor *t = st_get(ck, i);
        CHECK(st_writer_declare(w, t->name, t->dtype, t->ndim, t->shape) == 0);
    }
    CHECK(st_writer_declare(w, "model.layers.0.mlp.experts.gate_up_proj", DTYPE_F32, 3, shape) ==
          0);
    for (size_t i = 0; i < st_count(ck); i++)
        CHECK(st_writer_write(w, st_get(ck, i)->data, st_get(ck, i)->nbytes) == 0);
    CHECK(st_writer_write(w, fused, sizeof(fused)) == 0);
    CHECK(st_writer_close(w) == 0);
    CHECK(model_open(bad, &m) == ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err_msg(), "experts fused into one 3-D tensor are not supported"), "%s",
              err_msg());
    CHECK(m == NULL);
}

/* The mixture-of-experts presets: the published models' parameter counts
 * (Mixtral-8x7B 46.7 B, Qwen3-30B-A3B 30.5 B), and a narrowed copy of each
 * written, read back (its experts and sparse layers as written) and run. */
TEST(moe_presets)
{
    static const struct {
        const char *name;
        double params;
    } want[] = {{"mixtral-8x7b", 46.70e9}, {"qwen3-30b-a3b", 30.53e9}};
    for (int i = 0; i < 2; i++) {
        struct model_config *mc = NULL;
        CHECK(model_preset(want[i].name, &mc) == 0);
        if (!mc)
            continue;
        double params = (double)model_checkpoint_bytes(mc, DTYPE_BF16) / 2;
        printf("%s: %.2f B parameters\n", want[i].name, params / 1e9);
        CHECK_MSG(fabs(params / want[i].params - 1) < 2e-3, "%s: %.4g parameters", want[i].name,
                  params);
        /* narrowed: the same variant and routing, small widths */
        struct llama_config *c = (struct llama_config *)mc;
        struct model_info *in = &mc->info;
        in->hidden = 64;
        in->ffn = c->moe_ffn = 32;
        in->n_layers = 2;
        in->n_heads = 4;
        in->n_kv_heads = 2;
        in->head_dim = c->rot_dim = 16;
        in->vocab = 1000;
        in->bos_id = 1;
        in->eos_ids[0] = 2;
        in->n_eos = 1;
        c->n_experts = 8;
        c->top_k = 3;
        char dir[300];
        snprintf(dir, sizeof(dir), "%s/%s", tmp, want[i].name);
        mkdir(dir, 0755);
        struct model_random_opts o = {.dtype = DTYPE_F32, .seed = 7};
        CHECK_MSG(model_random_write(mc, dir, &o) == 0, "%s", err_msg());
        model_config_free(mc);
        struct model *m = NULL;
        CHECK_MSG(model_open(dir, &m) == 0, "%s: %s", want[i].name, err_msg());
        if (!m)
            continue;
        const struct llama_config *r = ARCH_CONFIG(struct llama_config, m->cfg);
        CHECK(r->n_experts == 8 && r->top_k == 3 && r->moe_ffn == 32 && r->norm_topk);
        CHECK(llama_moe_layer(r, 0) && llama_moe_layer(r, 1));
        float *logits = malloc((size_t)8 * 1000 * sizeof(float));
        forward_ids(m, logits, 8);
        int finite = 1;
        for (int j = 0; j < 8 * 1000; j++)
            finite &= isfinite(logits[j]);
        CHECK(finite);
        /* the router's counts: top_k per real token per layer, padding not counted */
        struct model_exec *ex = NULL;
        CHECK(model_exec_open_cpu(m, &(struct model_exec_shape){.batch = 2, .max_len = 4}, &ex) ==
              0);
        const int32_t ids[8] = {5, 6, 7, 8, 1, 9, 10, 11};
        const uint8_t mask[8] = {1, 1, 1, 1, 0, 1, 1, 1};
        CHECK(ex && model_forward(m, ex, ids, mask, 4, false, logits) == 0);
        int experts = 0;
        const uint64_t *routed = ex ? model_exec_routed(ex, &experts) : NULL;
        CHECK(routed && experts == 8);
        for (int l = 0; routed && l < 2; l++) {
            uint64_t sum = 0;
            for (int e = 0; e < experts; e++)
                sum += routed[l * experts + e];
            CHECK_MSG(sum == 7 * 3, "layer %d: %llu choices", l, (unsigned long long)sum);
        }
        model_exec_free(ex);
        free(logits);
        if (i == 1)
            check_moe_names(m->ck, dir);
        model_close(m);
    }
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
