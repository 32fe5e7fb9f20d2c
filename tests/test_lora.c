/* LoRA adapters against PEFT: every adapter under tests/fixtures/lora/
 * (tools/make_lora_fixtures.py) on its base from tests/fixtures/models/.
 *
 * f32 mode against PeftModel in float32 (expected.json): max |ours - ref| /
 * max |ref| <= 1e-4 over real positions of the base's left-padded batch;
 * greedy ids identical. bf16 mode (expected_bf16.json, a bf16 base) within
 * the tolerance it states (3e-2), greedy ids up to a bf16 tie.
 * A batch of 8 sequences over 4 adapters and the base: each row bitwise the
 * same as in a batch where every sequence has that row's adapter, and within
 * 1e-5 of the sequence run alone. Hostile adapter directories: one-line
 * errors naming the key or tensor. */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/error.h"
#include "core/fs.h"
#include "format/safetensors.h"
#include "model/adapter.h"
#include "model/generate.h"
#include "model/model.h"
#include "test.h"
/* after test.h */
#include "fixture_expect.h"

#define LORA SHARDSWAP_SOURCE_DIR "/tests/fixtures/lora"

static char scratch[512];

static json_t *load_json(const char *adapter, const char *file)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s/%s", LORA, adapter, file);
    json_t *j = json_load_file(path, 0, NULL);
    CHECK_MSG(j != NULL, "%s", path);
    return j;
}

static void base_dir(const char *base, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", FIXTURES, base);
}

/* The base's batch as ids and mask; *B, *T its shape. */
static void batch_read(json_t *batch, int32_t **ids, uint8_t **mask, int *B, int *T)
{
    json_t *jid = json_object_get(batch, "input_ids"),
           *jm = json_object_get(batch, "attention_mask");
    *B = (int)json_array_size(jid);
    *T = (int)json_array_size(json_array_get(jid, 0));
    *ids = malloc((size_t)*B * *T * sizeof(int32_t));
    *mask = malloc((size_t)*B * *T);
    for (int b = 0; b < *B; b++)
        for (int t = 0; t < *T; t++) {
            (*ids)[b * *T + t] =
                (int32_t)json_integer_value(json_array_get(json_array_get(jid, b), t));
            (*mask)[b * *T + t] =
                (uint8_t)json_integer_value(json_array_get(json_array_get(jm, b), t));
        }
}

/* Logits of every position of the batch with per[b] the adapters. */
static int run_batch(struct model *m, const struct model *const *per, int rank, const int32_t *ids,
                     const uint8_t *mask, int B, int T, float *logits)
{
    struct model_exec *ex;
    const struct model_exec_shape sh = {
        .batch = B, .max_len = T, .max_rows = B * T, .max_lora_rank = rank};
    int rc = model_exec_open_cpu(m, &sh, &ex);
    if (rc < 0)
        return rc;
    if ((rc = model_exec_set_adapters(ex, per)) == 0)
        rc = model_forward(m, ex, ids, mask, T, true, logits);
    model_exec_free(ex);
    return rc;
}

/* Worst relative error over the real positions. */
static double batch_err(const float *got, const float *ref, const uint8_t *mask, int B, int T,
                        int V)
{
    double worst = 0;
    for (int i = 0; i < B * T; i++)
        if (mask[i]) {
            double e = test_rel_err(got + (size_t)i * V, ref + (size_t)i * V, (size_t)V);
            worst = e > worst ? e : worst;
        }
    return worst;
}

/* Greedy continuations with the adapter; up to a tie where margins say. */
static void check_greedy_lora(const char *label, struct model *m, const struct model *ad,
                              json_t *greedy, double margin_min)
{
    struct sampler_params sp = {.temperature = 0, .top_p = 1};
    for (size_t i = 0; i < json_array_size(greedy); i++) {
        json_t *g = json_array_get(greedy, i);
        int n_prompt, n_exp, n_got = 0;
        int32_t *prompt = json_ids(json_object_get(g, "prompt"), &n_prompt);
        int32_t *exp = json_ids(json_object_get(g, "output"), &n_exp);
        int32_t got[64];
        struct sampler s;
        CHECK(sampler_init(&s, &sp) == 0);
        int rc = model_generate_lora(m, ad, prompt, n_prompt, n_exp, &s, NULL, NULL, got, &n_got);
        CHECK_MSG(rc == 0, "%s: generate: %s", label, err_msg());
        int decided = decided_steps(g, n_exp, margin_min);
        CHECK_MSG(n_got >= decided && memcmp(got, exp, (size_t)decided * sizeof(int32_t)) == 0,
                  "%s: greedy continuation %zu differs from PEFT's", label, i);
        sampler_free(&s);
        free(prompt);
        free(exp);
    }
}

/* One adapter in one precision against its references. */
static void check_adapter(const char *name, bool bf16)
{
    json_t *x = load_json(name, "expected.json");
    json_t *xb = bf16 ? load_json(name, bf16 ? "expected_bf16.json" : "expected.json") : NULL;
    json_t *ref_j = bf16 ? xb : x;
    char bdir[1024], adir[1024], lpath[2048];
    base_dir(json_string_value(json_object_get(x, "base")), bdir, sizeof(bdir));
    snprintf(adir, sizeof(adir), "%s/%s", LORA, name);
    snprintf(lpath, sizeof(lpath), "%s/%s", adir,
             bf16 ? "expected_logits_bf16.safetensors" : "expected_logits.safetensors");
    struct model *m = NULL, *ad = NULL;
    struct st_checkpoint *ref = NULL;
    CHECK_MSG(model_open(bdir, &m) == 0, "%s: %s", name, err_msg());
    model_set_compute(m, bf16 ? KERN_COMPUTE_BF16 : KERN_COMPUTE_F32);
    CHECK_MSG(model_adapter_open(adir, m, bdir, &ad) == 0, "%s: %s", name, err_msg());
    CHECK_MSG(st_open(lpath, &ref) == 0, "%s: %s", lpath, err_msg());
    if (!m || !ad || !ref)
        goto out;
    int32_t *ids;
    uint8_t *mask;
    int B, T, V = model_info(m)->vocab;
    batch_read(json_object_get(ref_j, "batch"), &ids, &mask, &B, &T);
    float *logits = malloc((size_t)B * T * V * sizeof(float));
    const struct model *per[8];
    for (int b = 0; b < B; b++)
        per[b] = ad;
    int rc = run_batch(m, per, model_adapter_rank(ad), ids, mask, B, T, logits);
    CHECK_MSG(rc == 0, "%s: forward: %s", name, err_msg());
    const struct st_tensor *t = st_find(ref, "logits");
    CHECK(t && t->nbytes == (size_t)B * T * V * sizeof(float));
    double tol = json_real_value(json_object_get(ref_j, "tolerance"));
    if (rc == 0 && t && t->nbytes == (size_t)B * T * V * sizeof(float)) {
        double e = batch_err(logits, t->data, mask, B, T, V);
        printf("%s (%s): batch logits rel err %.2e (tolerance %.0e)\n", name, bf16 ? "bf16" : "f32",
               e, tol);
        CHECK_MSG(e <= tol, "%s: logits rel err %.3e > %.0e", name, e, tol);
    }
    double margin_min = bf16 ? json_real_value(json_object_get(xb, "margin_min")) : 0;
    check_greedy_lora(name, m, ad, json_object_get(ref_j, "greedy"), margin_min);
    free(ids);
    free(mask);
    free(logits);
out:
    st_close(ref);
    model_close(ad);
    model_close(m);
    json_decref(x);
    json_decref(xb);
}

static const char *const adapters[] = {"llama_r8_qv",
                                       "llama_r16_all_rslora",
                                       "llama_r4_regex_patterns",
                                       "llama_r32_mlp_layer1",
                                       "qwen2_r64_mlp",
                                       "opt_r8_all",
                                       "llama_bf16_r16",
                                       "mistral_headdim_r8",
                                       "qwen3_qknorm_r8",
                                       NULL};

TEST(peft_f32)
{
    for (int i = 0; adapters[i]; i++)
        check_adapter(adapters[i], false);
}

TEST(peft_bf16)
{
    for (int i = 0; adapters[i]; i++) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s/expected_bf16.json", LORA, adapters[i]);
        if (access(path, F_OK) == 0)
            check_adapter(adapters[i], true);
    }
}

/* 8 sequences over 4 adapters of llama_gqa_f32 and the base. */
TEST(mixed_batch)
{
    static const char *const names[4] = {"llama_r8_qv", "llama_r16_all_rslora",
                                         "llama_r4_regex_patterns", "llama_r32_mlp_layer1"};
    char bdir[1024];
    base_dir("llama_gqa_f32", bdir, sizeof(bdir));
    struct model *m = NULL, *ad[4] = {0};
    CHECK_MSG(model_open(bdir, &m) == 0, "%s", err_msg());
    model_set_compute(m, KERN_COMPUTE_F32);
    int rank = 0;
    for (int i = 0; m && i < 4; i++) {
        char adir[1024];
        snprintf(adir, sizeof(adir), "%s/%s", LORA, names[i]);
        CHECK_MSG(model_adapter_open(adir, m, bdir, &ad[i]) == 0, "%s", err_msg());
        if (ad[i] && model_adapter_rank(ad[i]) > rank)
            rank = model_adapter_rank(ad[i]);
    }
    if (!m || !ad[0] || !ad[1] || !ad[2] || !ad[3])
        goto out;
    /* prompts of different lengths, left-padded */
    enum { B = 8, T = 7 };
    const int V = model_info(m)->vocab;
    int32_t ids[B * T];
    uint8_t mask[B * T];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int len = 3 + b % 5;
            mask[b * T + t] = t >= T - len;
            ids[b * T + t] = mask[b * T + t] ? (t == T - len ? 1 : 5 + (b * 37 + t * 11) % 250) : 2;
        }
    const struct model *per[B] = {ad[0], NULL, ad[1], ad[2], ad[0], ad[3], NULL, ad[1]};
    float *mixed = malloc((size_t)B * T * V * sizeof(float));
    float *uni = malloc((size_t)B * T * V * sizeof(float));
    float *alone = malloc((size_t)T * V * sizeof(float));
    CHECK_MSG(run_batch(m, per, rank, ids, mask, B, T, mixed) == 0, "%s", err_msg());
    for (int b = 0; b < B; b++) {
        /* the same batch with every sequence on b's adapter: row b bitwise */
        const struct model *same[B];
        for (int i = 0; i < B; i++)
            same[i] = per[b];
        CHECK_MSG(run_batch(m, same, rank, ids, mask, B, T, uni) == 0, "%s", err_msg());
        size_t row = (size_t)b * T * V;
        CHECK_MSG(memcmp(mixed + row, uni + row, (size_t)T * V * sizeof(float)) == 0,
                  "sequence %d: its logits depend on the adapters beside it", b);
        /* alone, unpadded */
        int len = 3 + b % 5;
        CHECK_MSG(run_batch(m, &per[b], rank, ids + b * T + (T - len), mask + b * T + (T - len), 1,
                            len, alone) == 0,
                  "%s", err_msg());
        double e = test_rel_err(mixed + row + (size_t)(T - len) * V, alone, (size_t)len * V);
        CHECK_MSG(e <= 1e-5, "sequence %d: batch vs alone rel err %.3e", b, e);
    }
    printf("mixed batch of %d over 4 adapters and the base: rows bitwise independent\n", B);
    free(mixed);
    free(uni);
    free(alone);
out:
    for (int i = 0; i < 4; i++)
        model_close(ad[i]);
    model_close(m);
}

/* ---- sharded: TP 2 and PP 2 against the whole model ---- */

/* One shard's part of a step, on its own thread (as a device's compute
 * thread runs it). */
struct shard_run {
    struct model *m;
    struct model_exec *ex;
    struct model_stage_io io;
    const int32_t *ids;
    const uint8_t *mask;
    int T;
    float *logits;
    int rc;
    pthread_t th;
};

static void *shard_main(void *arg)
{
    struct shard_run *r = arg;
    int wait_rc;
    r->rc =
        model_forward_stage(r->m, r->ex, &r->io, r->ids, r->mask, r->T, true, r->logits, &wait_rc);
    return NULL;
}

/* The batch through two shards of the base (TP 2, or PP 2: two stages),
 * each with its shard of every adapter; sequence b on adapter per_i[b]
 * (-1: the base). */
static void run_split(const char *bdir, const char *const *adirs, int n_ad, const int *per_i,
                      bool tp, const int32_t *ids, const uint8_t *mask, int B, int T, float *logits)
{
    struct model_config *cfg = NULL;
    struct st_checkpoint *ck = NULL;
    struct model *m[2] = {0}, *ad[2][4] = {{0}};
    struct model_exec *ex[2] = {0};
    struct device *dev[2] = {0};
    struct comm_group *grp = NULL;
    struct comm_channel *ch = NULL;
    CHECK(model_config_load(bdir, &cfg) == 0 && st_open(bdir, &ck) == 0);
    if (!cfg || !ck)
        goto out;
    const int L = cfg->info.n_layers;
    if (tp)
        CHECK(comm_group_create_threads(2, &grp) == 0);
    else
        CHECK(comm_channel_create(&ch) == 0);
    int rank = 0;
    for (int r = 0; r < 2; r++) {
        struct model_shard sh =
            tp ? (struct model_shard){.tp_rank = r, .tp_size = 2, .layer_end = L}
               : (struct model_shard){
                     .tp_size = 1, .layer_begin = r ? L / 2 : 0, .layer_end = r ? L : L / 2};
        CHECK_MSG(model_open_shard(cfg, ck, &sh, &m[r]) == 0, "%s", err_msg());
        if (!m[r])
            goto out;
        model_set_compute(m[r], KERN_COMPUTE_F32);
        for (int a = 0; a < n_ad; a++) {
            CHECK_MSG(model_adapter_open(adirs[a], m[r], bdir, &ad[r][a]) == 0, "%s", err_msg());
            if (!ad[r][a])
                goto out;
            rank = model_adapter_rank(ad[r][a]) > rank ? model_adapter_rank(ad[r][a]) : rank;
        }
    }
    const struct model_exec_shape shape = {
        .batch = B, .max_len = T, .max_rows = B * T, .max_lora_rank = rank};
    struct shard_run run[2];
    for (int r = 0; r < 2; r++) {
        CHECK(device_open_cpu(0, model_exec_bytes(m[r], NULL, &shape) + (1u << 20), &dev[r]) == 0);
        CHECK_MSG(
            model_exec_init(m[r], dev[r], tp ? comm_group_rank(grp, r) : NULL, &shape, &ex[r]) == 0,
            "%s", err_msg());
        if (!ex[r])
            goto out;
        const struct model *per[8];
        for (int b = 0; b < B; b++)
            per[b] = per_i[b] < 0 ? NULL : ad[r][per_i[b]];
        CHECK_MSG(model_exec_set_adapters(ex[r], per) == 0, "%s", err_msg());
        run[r] = (struct shard_run){.m = m[r], .ex = ex[r], .ids = ids, .mask = mask, .T = T};
        if (!tp) {
            run[r].io.in = r ? ch : NULL;
            run[r].io.out = r ? NULL : ch;
        }
        run[r].logits = (tp ? r == 0 : r == 1) ? logits : NULL;
    }
    for (int r = 0; r < 2; r++)
        CHECK(pthread_create(&run[r].th, NULL, shard_main, &run[r]) == 0);
    for (int r = 0; r < 2; r++) {
        pthread_join(run[r].th, NULL);
        CHECK_MSG(run[r].rc == 0, "shard %d: %s", r, err_msg());
    }
out:
    for (int r = 0; r < 2; r++) {
        model_exec_free(ex[r]);
        device_close(dev[r]);
        for (int a = 0; a < 4; a++)
            model_close(ad[r][a]);
        model_close(m[r]);
    }
    comm_group_destroy(grp);
    comm_channel_destroy(ch);
    st_close(ck);
    model_config_free(cfg);
}

/* Two adapters and the base in one batch, whole and split both ways. */
static void check_split(const char *base, const char *a0, const char *a1)
{
    char bdir[1024], adirs[2][1024];
    base_dir(base, bdir, sizeof(bdir));
    snprintf(adirs[0], sizeof(adirs[0]), "%s/%s", LORA, a0);
    snprintf(adirs[1], sizeof(adirs[1]), "%s/%s", LORA, a1);
    const char *const ad_names[2] = {adirs[0], adirs[1]};
    json_t *x = load_json(a0, "expected.json");
    int32_t *ids;
    uint8_t *mask;
    int B, T;
    batch_read(json_object_get(x, "batch"), &ids, &mask, &B, &T);
    struct model *m = NULL, *ad[2] = {0};
    CHECK(model_open(bdir, &m) == 0);
    model_set_compute(m, KERN_COMPUTE_F32);
    for (int a = 0; m && a < 2; a++)
        CHECK_MSG(model_adapter_open(adirs[a], m, bdir, &ad[a]) == 0, "%s", err_msg());
    const int V = m ? model_info(m)->vocab : 1;
    const int per_i[3] = {0, -1, 1};
    float *whole = malloc((size_t)B * T * V * sizeof(float));
    float *split = malloc((size_t)B * T * V * sizeof(float));
    if (m && ad[0] && ad[1]) {
        const struct model *per[3] = {ad[0], NULL, ad[1]};
        int rank = model_adapter_rank(ad[0]) > model_adapter_rank(ad[1])
                       ? model_adapter_rank(ad[0])
                       : model_adapter_rank(ad[1]);
        CHECK_MSG(run_batch(m, per, rank, ids, mask, B, T, whole) == 0, "%s", err_msg());
        for (int tp = 1; tp >= 0; tp--) {
            memset(split, 0, (size_t)B * T * V * sizeof(float));
            run_split(bdir, ad_names, 2, per_i, tp, ids, mask, B, T, split);
            double e = batch_err(split, whole, mask, B, T, V);
            printf("%s with %s, %s and the base: %s 2 vs whole rel err %.2e\n", base, a0, a1,
                   tp ? "TP" : "PP", e);
            CHECK_MSG(e <= 1e-5, "%s: %s 2 rel err %.3e", base, tp ? "TP" : "PP", e);
        }
    }
    free(whole);
    free(split);
    free(ids);
    free(mask);
    for (int a = 0; a < 2; a++)
        model_close(ad[a]);
    model_close(m);
    json_decref(x);
}

TEST(sharded)
{
    check_split("llama_gqa_f32", "llama_r16_all_rslora", "llama_r4_regex_patterns");
    check_split("pre_ln_f32", "opt_r8_all", "opt_r8_all");
    check_split("mistral_headdim_f32", "mistral_headdim_r8", "mistral_headdim_r8");
}

/* ---- hostile adapter directories ---- */

static struct model *hostile_base;
static char hostile_base_dir[1024];

/* Opening the adapter in dir on hostile_base must fail with a one-line
 * message that names needle. */
static void expect_open_refused(const char *label, const char *dir, const char *needle)
{
    struct model *ad = NULL;
    int rc = model_adapter_open(dir, hostile_base, hostile_base_dir, &ad);
    const char *msg = err_msg();
    CHECK_MSG(rc < 0 && !ad, "%s: accepted", label);
    CHECK_MSG(!strchr(msg, '\n') && strstr(msg, needle), "%s: message \"%s\" lacks \"%s\"", label,
              msg, needle);
    printf("%s: %s\n", label, msg);
    model_close(ad);
}

/* An adapter dir in scratch with config text cfg and the weights of
 * llama_r8_qv (or none); the error of opening it, one line. */
static void expect_refused(const char *label, const char *cfg, bool weights, const char *needle)
{
    static int n;
    char dir[1024], path[2048];
    snprintf(dir, sizeof(dir), "%s/h%d", scratch, n++);
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(path, sizeof(path), "%s/adapter_config.json", dir);
    test_write_text(path, cfg);
    if (weights) {
        char src[1024], cmd[4096];
        snprintf(src, sizeof(src), "%s/llama_r8_qv/adapter_model.safetensors", LORA);
        snprintf(cmd, sizeof(cmd), "cp '%s' '%s/'", src, dir);
        CHECK(system(cmd) == 0);
    } else {
        snprintf(path, sizeof(path), "%s/adapter_model.bin", dir);
        test_write_text(path, "PK");
    }
    expect_open_refused(label, dir, needle);
}

/* An adapter dir in scratch with config text cfg and llama_r8_qv's weights
 * opens. */
static void expect_opens(const char *label, const char *cfg)
{
    static int n;
    char dir[1024], path[2048], cmd[4096];
    snprintf(dir, sizeof(dir), "%s/ok%d", scratch, n++);
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(path, sizeof(path), "%s/adapter_config.json", dir);
    test_write_text(path, cfg);
    snprintf(cmd, sizeof(cmd), "cp '%s/llama_r8_qv/adapter_model.safetensors' '%s/'", LORA, dir);
    CHECK(system(cmd) == 0);
    struct model *ad = NULL;
    CHECK_MSG(model_adapter_open(dir, hostile_base, hostile_base_dir, &ad) == 0, "%s: %s", label,
              err_msg());
    model_close(ad);
}

/* llama_r8_qv's adapter with one more tensor, `extra` (2 x 2 f32), beside
 * its config; the error of opening it must name needle. */
static void expect_extra_refused(const char *label, const char *extra, const char *needle)
{
    static int n;
    char dir[600], path[2400], src[600];
    snprintf(dir, sizeof(dir), "%s/x%d", scratch, n++);
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(src, sizeof(src), "%s/llama_r8_qv", LORA);
    snprintf(path, sizeof(path), "cp '%s/adapter_config.json' '%s/'", src, dir);
    CHECK(system(path) == 0);
    snprintf(src, sizeof(src), "%s/llama_r8_qv/adapter_model.safetensors", LORA);
    snprintf(path, sizeof(path), "%s/adapter_model.safetensors", dir);
    struct st_checkpoint *ck = NULL;
    struct st_writer *w = NULL;
    CHECK(st_open(src, &ck) == 0 && st_writer_open(path, &w) == 0);
    if (!ck || !w) {
        st_close(ck);
        st_writer_abort(w);
        return;
    }
    const int64_t two[2] = {2, 2};
    const float zeros[4] = {0};
    for (size_t i = 0; i < st_count(ck); i++) {
        const struct st_tensor *t = st_get(ck, i);
        CHECK(st_writer_declare(w, t->name, t->dtype, t->ndim, t->shape) == 0);
    }
    CHECK(st_writer_declare(w, extra, DTYPE_F32, 2, two) == 0);
    for (size_t i = 0; i < st_count(ck); i++)
        CHECK(st_writer_write(w, st_get(ck, i)->data, st_get(ck, i)->nbytes) == 0);
    CHECK(st_writer_write(w, zeros, sizeof(zeros)) == 0);
    CHECK(st_writer_close(w) == 0);
    st_close(ck);
    expect_open_refused(label, dir, needle);
}

#define CFGR(r, extra)                                                                             \
    "{\"peft_type\": \"LORA\", \"r\": " r                                                          \
    ", \"lora_alpha\": 16, \"target_modules\": [\"q_proj\", "                                      \
    "\"v_proj\"]" extra "}"
#define CFG(extra) CFGR("8", extra)

TEST(hostile)
{
    base_dir("llama_gqa_f32", hostile_base_dir, sizeof(hostile_base_dir));
    CHECK(model_open(hostile_base_dir, &hostile_base) == 0);
    if (!hostile_base)
        return;
    expect_refused("peft_type", "{\"peft_type\": \"LOHA\", \"r\": 8}", true, "peft_type");
    expect_refused("dora", CFG(", \"use_dora\": true"), true, "use_dora");
    expect_refused("bias", CFG(", \"bias\": \"all\""), true, "bias");
    expect_refused("lora_bias", CFG(", \"lora_bias\": true"), true, "lora_bias");
    expect_refused("embedding",
                   "{\"peft_type\": \"LORA\", \"r\": 8, \"target_modules\": [\"embed_tokens\"]}",
                   true, "embed_tokens");
    expect_refused(
        "head regex",
        "{\"peft_type\": \"LORA\", \"r\": 8, \"target_modules\": \"(lm_head|.*q_proj)\"}", true,
        "lm_head");
    expect_refused("fused only",
                   "{\"peft_type\": \"LORA\", \"r\": 8, \"target_modules\": [\"qkv_proj\"]}", true,
                   "adapts no projection");
    /* Python's syntax is read as PEFT reads it; what would blow up a
     * matcher is one line */
    expect_opens("python regex", "{\"peft_type\": \"LORA\", \"r\": 8, \"target_modules\": "
                                 "\"model\\\\.layers\\\\.\\\\d+\\\\..*(?:q_proj|v_proj)\"}");
    expect_refused("regex repeats",
                   "{\"peft_type\": \"LORA\", \"r\": 8, \"target_modules\": \"q+++_proj\"}", true,
                   "target_modules pattern: \"q+++_proj\" is not a regular expression");
    expect_refused("regex too large",
                   "{\"peft_type\": \"LORA\", \"r\": 8, \"target_modules\": [\"q_proj\", "
                   "\"v_proj\"], \"rank_pattern\": {\"((a|b){1000}){1000}\": 4}}",
                   true, "rank_pattern pattern");
    expect_refused("rank 0", CFGR("0", ""), true, "r");
    expect_refused("no targets", "{\"peft_type\": \"LORA\", \"r\": 8}", true, "target_modules");
    expect_refused("targets type", "{\"peft_type\": \"LORA\", \"target_modules\": [1]}", true,
                   "target_modules");
    expect_refused("rank_pattern", CFG(", \"rank_pattern\": [1]"), true, "rank_pattern");
    expect_refused("dup key", "{\"peft_type\": \"LORA\", \"peft_type\": \"LORA\"}", true,
                   "adapter_config.json");
    expect_refused("not json", "{\"peft_type\": ", true, "adapter_config.json");
    expect_refused("layers", CFG(", \"layers_to_transform\": \"x\""), true, "layers_to_transform");
    expect_refused("modules_to_save", CFG(", \"target_parameters\": [\"x\"]"), true,
                   "target_parameters");
    /* the weights do not match the config: rank 4 said, 8 stored */
    expect_refused("shape", CFGR("4", ""), true, "lora_A.weight");
    /* a target the file has no pair for */
    expect_refused("missing",
                   "{\"peft_type\": \"LORA\", \"r\": 8, \"target_modules\": [\"q_proj\", "
                   "\"v_proj\", \"k_proj\"]}",
                   true, "k_proj.lora_A.weight");
    /* pairs the config does not name */
    expect_refused("extra", "{\"peft_type\": \"LORA\", \"r\": 8, \"target_modules\": [\"q_proj\"]}",
                   true, "v_proj.lora_A.weight");
    /* layers the config excludes */
    expect_refused("layers excluded", CFG(", \"layers_to_transform\": [0]"), true, "layers.1.");
    expect_refused("bin", CFG(""), false, "adapter_model");
    expect_extra_refused("embedding tensor", "base_model.model.model.embed_tokens.lora_embedding_A",
                         "(embedding LoRA)");
    expect_extra_refused("dora tensor",
                         "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector",
                         "(DoRA)");
    expect_extra_refused("modules_to_save tensor",
                         "base_model.model.lm_head.modules_to_save.default.weight",
                         "(modules_to_save)");
    expect_extra_refused("fused tensor",
                         "base_model.model.model.layers.0.self_attn.qkv_proj.lora_A.weight",
                         "fused projection");
    model_close(hostile_base);
}

static void setup(void)
{
    test_scratch_dir(scratch, sizeof(scratch), "lora");
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
