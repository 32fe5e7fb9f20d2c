/* compressed-tensors checkpoints as models (tests/fixtures/ctensors, made by
 * tools/make_ct_fixtures.py: tiny Llama / Qwen2 models quantized and
 * compressed by the compressed-tensors package, with the logits of the
 * package's own decompression run by transformers in f32).
 *
 * dequant: a weight repacked at load (ct_copy) and dequantized
 *   (dtype_to_f32) equals the package's decompression exactly: bit for bit
 *   with f32 scales, and rounded to bf16 with bf16 scales (the package
 *   computes (q - z) * scale in the scale's dtype; ours is that product
 *   exact in f32, core/quant_ct.h).
 * logits: every position of each prompt, mapped and on a CPU device: f32
 *   mode within TOL of transformers' (TOL_BF16_SCALES for the bf16 model,
 *   whose reference weights were rounded to bf16 once more); bf16 mode
 *   (weights and x rounded to bf16) within TOL_BF16; the default compute of
 *   such a model is bf16; KV decode equals recomputation within TOL;
 *   greedy ids in f32 mode equal transformers'.
 * sharded: TP 2 and PP 2 through the swap engine equal the unsharded model
 *   in f32 mode; the store holds the repacked (quantized) bytes.
 * refused: hostile or unsupported quantization_config values, other quant
 *   methods (awq, gptq), activation reordering (g_idx), static input scales,
 *   a raw dtype without quantization_config: one-line errors naming them,
 *   from model_config_load (before anything is allocated) or st_open. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/device.h"
#include "core/error.h"
#include "core/quant_ct.h"
#include "engine/workers.h"
#include "format/ct.h"
#include "format/safetensors.h"
#include "model/generate.h"
#include "model/model.h"
#include "model/sampler.h"
#include "swap/swap.h"
#include "swap_rig.h"
#include "test.h"

#include "cpu_logits.h"

#define CDIR SHARDSWAP_SOURCE_DIR "/tests/fixtures/ctensors"
#define TOL 1e-4
/* the bf16 model's reference weights are the package's bf16 products; ours
 * are exact in f32 mode: at most half a bf16 ulp apart (2^-9 relative) */
#define TOL_BF16_SCALES 1e-2
/* bf16 mode rounds x (and f32-scale weights) to bf16 before each product */
#define TOL_BF16 3e-2
#define MAXT 16
#define V 128

static const char *fixtures[] = {"llama_w8_channel", "llama_w4_group",    "qwen2_w4_group_asym",
                                 "llama_fp8_tensor", "llama_fp8_channel", "llama_fp8_block"};
#define N_FIX 6
static const enum dtype fix_types[N_FIX] = {DTYPE_CT_I8, DTYPE_CT_I4, DTYPE_CT_I4,
                                            DTYPE_CT_F8, DTYPE_CT_F8, DTYPE_CT_F8};
static const char *fix_formats[N_FIX] = {"int-quantized",   "pack-quantized",  "pack-quantized",
                                         "float-quantized", "float-quantized", "float-quantized"};
static const bool bf16_scales[N_FIX] = {false, false, false, false, false, true};

static char tmpdir[64];

static json_t *load_expected(const char *fix)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s/expected.json", CDIR, fix);
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    CHECK_MSG(j != NULL, "%s: %s", path, e.text);
    return j;
}

static int prompt(json_t *exp, int p, int32_t *ids)
{
    json_t *a = json_array_get(json_object_get(exp, "prompts"), (size_t)p);
    int n = (int)json_array_size(a);
    for (int i = 0; i < n && i < MAXT; i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    return n;
}

static void ref_logits(json_t *exp, int p, int t, float *out)
{
    json_t *pos =
        json_array_get(json_array_get(json_object_get(exp, "logits"), (size_t)p), (size_t)t);
    for (size_t v = 0; v < V; v++)
        out[v] = (float)json_real_value(json_array_get(pos, v));
}

TEST(dequant)
{
    for (int i = 0; i < N_FIX; i++) {
        char dir[512], path[600];
        snprintf(dir, sizeof(dir), "%s/%s", CDIR, fixtures[i]);
        json_t *exp = load_expected(fixtures[i]);
        struct st_checkpoint *ck = NULL;
        CHECK_MSG(st_open(dir, &ck) == 0, "%s: %s", fixtures[i], err_msg());
        if (!ck || !exp) {
            json_decref(exp);
            continue;
        }
        CHECK(strcmp(st_format(ck), "compressed-tensors") == 0);
        CHECK_MSG(strcmp(st_ct_format(ck), fix_formats[i]) == 0, "%s", st_ct_format(ck));
        const char *name = json_string_value(json_object_get(exp, "dequant_tensor"));
        const struct st_tensor *t = st_find(ck, name);
        CHECK_MSG(t && t->ct && t->dtype == fix_types[i], "%s: %s", fixtures[i], name);
        /* the companions are gone: one tensor per weight */
        CHECK(!st_find(ck, "model.layers.0.mlp.down_proj.weight_scale"));
        CHECK(!st_find(ck, "model.layers.0.mlp.down_proj.weight_packed"));
        if (t) {
            const size_t rows = (size_t)t->shape[0], cols = (size_t)t->shape[1];
            CHECK(t->nbytes == rows * dtype_row_bytes(t->dtype, cols));
            char *blocks = malloc(t->nbytes);
            float *got = malloc(rows * cols * sizeof(float));
            float *want = malloc(rows * cols * sizeof(float));
            snprintf(path, sizeof(path), "%s/dequant.f32", dir);
            FILE *f = fopen(path, "rb");
            CHECK(f && fread(want, sizeof(float), rows * cols, f) == rows * cols);
            if (f)
                fclose(f);
            ct_copy(t, 0, rows, 0, cols, blocks);
            dtype_to_f32(t->dtype, blocks, got, rows * cols);
            size_t diff = 0, first = 0;
            for (size_t k = 0; k < rows * cols; k++) {
                float g = bf16_scales[i] ? bf16_round(got[k]) : got[k];
                if (memcmp(&g, &want[k], 4) != 0 && diff++ == 0)
                    first = k;
            }
            printf("%-20s %s %s: %zu x %zu, %zu of %zu elements differ from the package's "
                   "decompression%s\n",
                   fixtures[i], dtype_name(t->dtype), st_ct_format(ck), rows, cols, diff,
                   rows * cols, bf16_scales[i] ? " (ours rounded to bf16)" : "");
            CHECK_MSG(diff == 0, "%s: element %zu: %.9g, expected %.9g", fixtures[i], first,
                      got[first], want[first]);
            /* a slice of rows and 32-aligned columns is the same blocks */
            char *part = malloc(t->nbytes);
            const size_t bb = dtype_row_bytes(t->dtype, 32);
            ct_copy(t, 3, 2, 32, 32, part);
            CHECK(memcmp(part, blocks + 3 * dtype_row_bytes(t->dtype, cols) + bb, bb) == 0);
            CHECK(memcmp(part + bb, blocks + 4 * dtype_row_bytes(t->dtype, cols) + bb, bb) == 0);
            free(part);
            free(blocks);
            free(got);
            free(want);
        }
        st_close(ck);
        json_decref(exp);
    }
}

/* The worst relative error of m's logits against the fixture's over every
 * prompt's positions; decode against the prefill in *decode. */
static double compare(struct model *m, json_t *exp, double *decode)
{
    double worst = 0;
    *decode = 0;
    float *got = malloc(sizeof(float) * MAXT * V);
    float ref[V];
    for (int p = 0; p < (int)json_array_size(json_object_get(exp, "prompts")); p++) {
        int32_t ids[MAXT];
        int n = prompt(exp, p, ids);
        cpu_prefill_logits(m, ids, n, got);
        for (int t = 0; t < n; t++) {
            ref_logits(exp, p, t, ref);
            worst = fmax(worst, test_rel_err(got + (size_t)t * V, ref, V));
        }
        *decode = fmax(*decode, cpu_decode_err(m, ids, n, got, V));
    }
    free(got);
    return worst;
}

/* model_generate's greedy ids against transformers' (expected.json "greedy",
 * after the first prompt; they stop at EOS). */
static int greedy_same(struct model *m, json_t *exp, int *n_exp)
{
    int32_t ids[MAXT], got[MAXT];
    int n = prompt(exp, 0, ids), n_got = 0;
    json_t *g = json_object_get(exp, "greedy");
    *n_exp = (int)json_array_size(g);
    struct sampler_params sp = {.temperature = 0, .top_p = 1};
    struct sampler s;
    CHECK(sampler_init(&s, &sp) == 0);
    CHECK(model_generate(m, ids, n, *n_exp, &s, NULL, NULL, got, &n_got) == 0);
    int same = 0;
    while (same < n_got && got[same] == (int32_t)json_integer_value(json_array_get(g, same)))
        same++;
    /* stopped at an EOS transformers went past */
    if (same == n_got && n_got < *n_exp &&
        json_integer_value(json_array_get(g, (size_t)n_got)) == model_info(m)->eos_ids[0])
        same = *n_exp;
    return same;
}

TEST(logits)
{
    for (int i = 0; i < N_FIX; i++) {
        char dir[512];
        snprintf(dir, sizeof(dir), "%s/%s", CDIR, fixtures[i]);
        json_t *exp = load_expected(fixtures[i]);
        for (int how = 0; exp && how < 2; how++) {
            struct model *m = NULL;
            struct device *d = NULL;
            int rc;
            if (how == 0) {
                rc = model_open(dir, &m);
            } else {
                CHECK(device_open_cpu(0, 64u << 20, &d) == 0);
                rc = model_open_on(dir, d, NULL, &m);
            }
            CHECK_MSG(rc == 0, "%s: %s", fixtures[i], err_msg());
            if (rc == 0) {
                CHECK(model_compute(m) == KERN_COMPUTE_BF16);
                CHECK(model_weight_dtype(m) == fix_types[i]);
                for (int mode = 0; mode < 2; mode++) {
                    const enum kern_compute c = mode ? KERN_COMPUTE_BF16 : KERN_COMPUTE_F32;
                    model_set_compute(m, c);
                    double dec, worst = compare(m, exp, &dec);
                    const double tol = mode ? TOL_BF16 : bf16_scales[i] ? TOL_BF16_SCALES : TOL;
                    int n_exp, same = greedy_same(m, exp, &n_exp);
                    printf("%-20s %s %-4s: rel err %.1e (tolerance %.0e), decode vs "
                           "recomputation %.1e, greedy ids equal for %d of %d\n",
                           fixtures[i], how ? "device copy" : "mapped     ", kern_compute_name(c),
                           worst, tol, dec, same, n_exp);
                    CHECK_MSG(worst <= tol && dec <= TOL, "%s %s: %.3e %.3e", fixtures[i],
                              kern_compute_name(c), worst, dec);
                    if (mode == 0)
                        CHECK_MSG(same == n_exp, "%s: greedy ids equal for %d of %d", fixtures[i],
                                  same, n_exp);
                }
            }
            model_close(m);
            if (d)
                device_close(d);
        }
        json_decref(exp);
    }
}

TEST(sharded)
{
    static const int layouts[][2] = {{1, 1}, {2, 1}, {1, 2}};
    for (int i = 0; i < N_FIX; i++) {
        char dir[512];
        snprintf(dir, sizeof(dir), "%s/%s", CDIR, fixtures[i]);
        json_t *exp = load_expected(fixtures[i]);
        float *got = malloc(sizeof(float) * MAXT * V),
              *whole = malloc(sizeof(float) * 2 * MAXT * V);
        for (size_t l = 0; exp && l < 3; l++) {
            struct rig g;
            const int tp = layouts[l][0], pp = layouts[l][1];
            int rc = rig_open(&g, "m", dir, tp, pp);
            CHECK_MSG(rc == 0, "%s tp %d pp %d: %s", fixtures[i], tp, pp, err_msg());
            if (rc == 0) {
                if (tp == 1 && pp == 1) {
                    /* the store holds the repacked quantized bytes, give or take alignment */
                    uint64_t held = swap_model_total_bytes(g.model), in_ck = 0;
                    const struct st_checkpoint *ck = swap_model_checkpoint(g.model);
                    for (size_t k = 0; k < st_count(ck); k++)
                        in_ck += st_get(ck, k)->nbytes;
                    printf("%-20s held %llu bytes, %llu repacked\n", fixtures[i],
                           (unsigned long long)held, (unsigned long long)in_ck);
                    CHECK(held >= in_ck && held <= in_ck + 64 * st_count(ck));
                }
                swap_model_set_compute(g.model, KERN_COMPUTE_F32);
                CHECK(swap_load(g.mgr, g.model, NULL) == 0);
                CHECK(swap_use_begin(g.mgr, g.model) == 0);
                double worst = 0;
                for (int p = 0; p < 2; p++) {
                    int32_t ids[MAXT];
                    uint8_t mask[MAXT];
                    int n = prompt(exp, p, ids);
                    memset(mask, 1, sizeof(mask));
                    struct group_exec *gb = NULL;
                    const struct model_exec_shape shape = {.batch = 1, .max_len = n, .max_rows = n};
                    CHECK(group_exec_create(g.mgr, g.model, &shape, &gb) == 0);
                    CHECK(group_forward(g.w, gb, ids, mask, n, true, true, got) == 0);
                    float *w = whole + (size_t)p * MAXT * V;
                    if (l == 0)
                        memcpy(w, got, sizeof(float) * (size_t)n * V);
                    for (int t = 0; t < n; t++)
                        worst =
                            fmax(worst, test_rel_err(got + (size_t)t * V, w + (size_t)t * V, V));
                    group_exec_free(gb);
                }
                printf("%-20s tp %d pp %d: rel err vs unsharded %.1e\n", fixtures[i], tp, pp,
                       worst);
                CHECK_MSG(worst <= TOL, "%s tp %d pp %d: %.3e", fixtures[i], tp, pp, worst);
                swap_use_end(g.mgr, g.model);
            }
            rig_close(&g);
        }
        free(got);
        free(whole);
        json_decref(exp);
    }
}

TEST(ops)
{
    for (int i = 0; i < N_FIX; i++) {
        char dir[512];
        snprintf(dir, sizeof(dir), "%s/%s", CDIR, fixtures[i]);
        struct model_config *c = NULL;
        CHECK_MSG(model_config_load(dir, &c) == 0, "%s: %s", fixtures[i], err_msg());
        if (!c)
            continue;
        /* an int4 scheme needs both (naive-quantized int4 is one int8 each) */
        uint64_t want = kern_weight_ops(fix_types[i]) |
                        (fix_types[i] == DTYPE_CT_I4 ? kern_weight_ops(DTYPE_CT_I8) : 0);
        CHECK_MSG(c->weight_ops == want && (model_required_ops(c) & want) == want,
                  "%s: weight ops %llx, expected %llx", fixtures[i],
                  (unsigned long long)c->weight_ops, (unsigned long long)want);
        /* the CUDA table runs every CT type (a view of another process's
         * GPU answers with this program's table) */
        struct device *r = NULL;
        if (device_open_view(1, DEVICE_CUDA, "cuda:0", 1u << 20, &r) == 0) {
            CHECK_MSG(model_check_device(c, r) == 0, "%s on cuda:0: %s", fixtures[i], err_msg());
            device_close(r);
        }
        model_config_free(c);
    }
}

/* ---- refusals ---- */

/* A copy of fixture fix in tmpdir/name whose config.json's
 * quantization_config has key (a path "a.b.c" below it) set to value (JSON;
 * NULL: removed). */
static void copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    CHECK(a && b);
    char buf[65536];
    size_t n;
    while (a && b && (n = fread(buf, 1, sizeof(buf), a)) > 0)
        CHECK(fwrite(buf, 1, n, b) == n);
    if (a)
        fclose(a);
    if (b)
        fclose(b);
}

static const char *patched(const char *fix, const char *name, const char *key, const char *value)
{
    static char dir[512];
    char src[600], dst[600];
    snprintf(dir, sizeof(dir), "%s/%s", tmpdir, name);
    mkdir(dir, 0700);
    snprintf(src, sizeof(src), "%s/%s/model.safetensors", CDIR, fix);
    snprintf(dst, sizeof(dst), "%s/model.safetensors", dir);
    copy_file(src, dst);
    snprintf(src, sizeof(src), "%s/%s/config.json", CDIR, fix);
    json_t *root = json_load_file(src, 0, NULL);
    json_t *o = json_object_get(root, "quantization_config");
    char k[256];
    snprintf(k, sizeof(k), "%s", key);
    char *save, *tok = strtok_r(k, ".", &save), *next;
    while ((next = strtok_r(NULL, ".", &save)) != NULL) {
        o = json_object_get(o, tok);
        tok = next;
    }
    if (value)
        json_object_set_new(o, tok, json_loads(value, JSON_DECODE_ANY, NULL));
    else
        json_object_del(o, tok);
    snprintf(dst, sizeof(dst), "%s/config.json", dir);
    CHECK(json_dump_file(root, dst, 0) == 0);
    json_decref(root);
    return dir;
}

/* Both model_config_load and model_open refuse dir with a one-line message
 * holding want. */
static void expect_refused(const char *dir, const char *want)
{
    struct model_config *c = NULL;
    int rc = model_config_load(dir, &c);
    CHECK_MSG(rc < 0 && !c && strstr(err_msg(), want) && !strchr(err_msg(), '\n'),
              "%s: %d %s (expected '%s')", dir, rc, err_msg(), want);
    printf("refused: %s\n", err_msg());
    model_config_free(c);
    struct model *m = NULL;
    rc = model_open(dir, &m);
    CHECK_MSG(rc < 0 && !m && strstr(err_msg(), want), "%s: open %d %s", dir, rc, err_msg());
    model_close(m);
}

/* model_open refuses a copy of fixture fix (in tmpdir/name) whose
 * safetensors header has its first `from` replaced by `to` (the same length)
 * with a one-line message holding want. */
static void refused_header(const char *fix, const char *name, const char *from, const char *to,
                           const char *want)
{
    CHECK(strlen(from) == strlen(to));
    const char *dir = patched(fix, name, "x", NULL);
    char p[600];
    snprintf(p, sizeof(p), "%s/model.safetensors", dir);
    FILE *f = fopen(p, "r+b");
    CHECK(f != NULL);
    if (!f)
        return;
    char head[8192];
    size_t n = fread(head, 1, sizeof(head), f);
    char *at = memmem(head, n, from, strlen(from));
    CHECK_MSG(at != NULL, "%s: no %s", fix, from);
    if (at) {
        memcpy(at, to, strlen(to));
        fseek(f, 0, SEEK_SET);
        CHECK(fwrite(head, 1, n, f) == n);
    }
    fclose(f);
    struct model *m = NULL;
    int rc = model_open(dir, &m);
    CHECK_MSG(rc < 0 && !m && strstr(err_msg(), want) && !strchr(err_msg(), '\n'),
              "%s: %d %s (expected '%s')", name, rc, err_msg(), want);
    printf("refused at open: %s\n", err_msg());
    model_close(m);
}

TEST(refused)
{
    static const struct {
        const char *fix, *key, *value, *want;
        bool at_open; /* the config is valid; its tensors disagree with it */
    } cases[] = {
        {"llama_w4_group", "quant_method", "\"awq\"", "quant_method \"awq\"", false},
        {"llama_w4_group", "quant_method", "\"gptq\"", "quant_method \"gptq\"", false},
        {"llama_w4_group", "quant_method", "7", "quant_method is missing or not a string", false},
        {"llama_w4_group", "format", "\"marlin-24\"", "format \"marlin-24\"", false},
        {"llama_w4_group", "config_groups.group_0.format", "\"nvfp4-pack-quantized\"",
         "format \"nvfp4-pack-quantized\"", false},
        {"llama_w4_group", "config_groups.group_0.weights.num_bits", "3", "num_bits 3", false},
        {"llama_w4_group", "config_groups.group_0.weights.num_bits", "-1", "num_bits", false},
        {"llama_w4_group", "config_groups.group_0.weights.type", "\"fp4\"", "type \"fp4\"", false},
        {"llama_w4_group", "config_groups.group_0.weights.strategy", "\"token\"",
         "strategy \"token\"", false},
        {"llama_w4_group", "config_groups.group_0.weights.group_size", "48",
         "group_size 48 is not a multiple of 32", false},
        {"llama_w4_group", "config_groups.group_0.weights.group_size", "0", "group_size", false},
        {"llama_w4_group", "config_groups.group_0.weights.group_size", "1e40", "group_size", false},
        {"llama_w4_group", "config_groups.group_0.weights.actorder", "\"group\"",
         "activation reordering", false},
        {"llama_w4_group", "config_groups.group_0.weights.actorder", "\"dynamic\"",
         "activation reordering", false},
        {"llama_w4_group", "config_groups.group_0.targets", "[\"re:(unclosed\"]",
         "is not a regular expression", false},
        {"llama_w4_group", "config_groups.group_0.weights.dynamic", "true", "dynamic", false},
        {"llama_w4_group", "config_groups.group_0.targets", "[]", "targets", false},
        {"llama_w4_group", "config_groups.group_0.input_activations",
         "{\"dynamic\": false, \"num_bits\": 8, \"type\": \"int\", \"strategy\": \"tensor\"}",
         "static activation quantization", false},
        {"llama_w4_group", "config_groups.group_0.output_activations", "{\"num_bits\": 8}",
         "output quantization", false},
        {"llama_w4_group", "sparsity_config", "{\"format\": \"sparse-24-bitmask\"}",
         "sparse weights", false},
        {"llama_w4_group", "kv_cache_scheme", "{\"num_bits\": 8}", "quantized KV cache", false},
        {"llama_w4_group", "config_groups", "[]", "config_groups", false},
        {"llama_fp8_block", "config_groups.group_0.weights.block_structure", "[128, 100]",
         "block_structure's 100 columns", false},
        {"llama_fp8_block", "config_groups.group_0.weights.block_structure", "[0, 128]",
         "block_structure", false},
        {"llama_fp8_block", "config_groups.group_0.weights.symmetric", "false", "asymmetric float",
         false},
        /* a scheme that disagrees with the tensors */
        {"llama_w4_group", "config_groups.group_0.weights.group_size", "32",
         "does not hold the 64 x 4 scales", true},
        {"llama_w8_channel", "config_groups.group_0.weights.type", "\"float\"",
         "is I8, but its scheme's weights are float", true},
        {"qwen2_w4_group_asym", "config_groups.group_0.weights.symmetric", "true",
         "is a zero point of symmetric weights", true},
        {"llama_w4_group", "config_groups.group_0.targets", "[\"re:.*attn.*\"]",
         "no config group of config.json's quantization_config targets model.layers.0.mlp", true},
        {"llama_w8_channel", NULL, NULL, "quantized weights need config.json's quantization_config",
         true},
    };
    char name[32];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(name, sizeof(name), "case%zu", i);
        const char *dir = cases[i].key ? patched(cases[i].fix, name, cases[i].key, cases[i].value)
                                       : patched(cases[i].fix, name, "x", NULL);
        if (!cases[i].key) { /* no quantization_config at all */
            char p[600];
            snprintf(p, sizeof(p), "%s/config.json", dir);
            json_t *root = json_load_file(p, 0, NULL);
            json_object_del(root, "quantization_config");
            CHECK(json_dump_file(root, p, 0) == 0);
            json_decref(root);
            struct model *m = NULL;
            int rc = model_open(dir, &m);
            CHECK_MSG(rc == ERR_UNSUPPORTED && strstr(err_msg(), cases[i].want) &&
                          strstr(err_msg(), "unsupported dtype I8") && !strchr(err_msg(), '\n'),
                      "%d %s", rc, err_msg());
            printf("refused: %s\n", err_msg());
            model_close(m);
            continue;
        }
        if (!cases[i].at_open) {
            expect_refused(dir, cases[i].want);
            continue;
        }
        struct model_config *c = NULL;
        CHECK_MSG(model_config_load(dir, &c) == 0, "%s: %s", name, err_msg());
        model_config_free(c);
        struct model *m = NULL;
        int rc = model_open(dir, &m);
        CHECK_MSG(rc < 0 && !m && strstr(err_msg(), cases[i].want) && !strchr(err_msg(), '\n'),
                  "%s: open %d %s (expected '%s')", name, rc, err_msg(), cases[i].want);
        printf("refused at open: %s\n", err_msg());
        model_close(m);
    }
    /* accepted: actorder "weight" (GPTQ's calibration order; groups stored
     * as they are) and targets by regular expression */
    static const char *const fine[][2] = {
        {"config_groups.group_0.weights.actorder", "\"weight\""},
        {"config_groups.group_0.targets", "[\"re:.*self_attn\\\\.\", \"re:.*mlp.*_proj$\"]"},
    };
    for (int k = 0; k < 2; k++) {
        snprintf(name, sizeof(name), "fine%d", k);
        struct model *m = NULL;
        const char *d = patched("llama_w4_group", name, fine[k][0], fine[k][1]);
        CHECK_MSG(model_open(d, &m) == 0, "%s: %s", fine[k][1], err_msg());
        model_close(m);
    }
    /* activation reordering: the int4 fixture with down_proj's
     * weight_shape renamed weight_g_idx (the same length) */
    refused_header("llama_w4_group", "gidx", "layers.0.mlp.down_proj.weight_shape",
                   "layers.0.mlp.down_proj.weight_g_idx", "activation reordering");
    /* tensors of the wrong dtype, the header's dtype changed to one of the same width */
    refused_header("llama_w4_group", "packed_f32",
                   "layers.0.mlp.down_proj.weight_packed\":{\"dtype\":\"I32",
                   "layers.0.mlp.down_proj.weight_packed\":{\"dtype\":\"F32",
                   "is F32, but packed weights are I32");
    refused_header("llama_w4_group", "scale_i32",
                   "layers.0.mlp.down_proj.weight_scale\":{\"dtype\":\"F32",
                   "layers.0.mlp.down_proj.weight_scale\":{\"dtype\":\"I32",
                   "is not an F32, F16 or BF16 scale");
    refused_header("llama_fp8_tensor", "fp8_int8",
                   "layers.0.mlp.down_proj.weight\":{\"dtype\":\"F8_E4M3\"",
                   "layers.0.mlp.down_proj.weight\":{\"dtype\":\"I8\"     ",
                   "is I8, but its scheme's weights are float 8 bits");
}

static void setup(void)
{
    test_scratch_dir(tmpdir, sizeof(tmpdir), "ct_model");
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
