/* GGUF checkpoints as models (tests/fixtures/gguf, made by
 * tools/make_gguf_fixtures.py with llama.cpp's converter from the
 * llama_gqa_f32 and qwen2_bias_f32 fixtures): each file against the
 * safetensors model of the same weights, written here from the fixture with
 * its matrices rounded to the GGUF's type (the converter keeps 1-d tensors
 * in F32).
 *
 * config: the metadata gives the safetensors config (every model_info
 *   field, the llama3 rope as the rope_freqs factors) and inspect's lines.
 * logits: prefill logits at every position and four KV-cache decode steps,
 *   through both ways of opening a model (views of the mapping, where the
 *   Llama q/k rows the converter permuted are copied back; and a copy on a
 *   CPU device, which fills blobs as the swap engine does), within 1e-4
 *   relative in f32 mode (F32, F16 and BF16 files) and the bf16 tolerance
 *   1e-2 in bf16 mode (BF16 files); and each decode step equal to the
 *   recomputation of the whole sequence within 1e-4.
 * split: the split qwen2 set equals its single-file twin.
 * sharded: TP 2 and PP 2 through the swap engine equal the whole model.
 * truncated: a GGUF truncated while registered fails the load with the
 *   store's message naming the file.
 * quantized: a tensor of a block type not computed is an error naming it.
 * bad_metadata: an unknown architecture, a key out of range, a key of
 *   the wrong type and a mixture of experts (expert_count) are one-line
 *   errors naming the file and the key. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fs.h"
#include "engine/workers.h"
#include "file_patch.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "sharded_ref.h"
#include "swap/swap.h"
#include "swap_rig.h"
#include "test.h"

#define GGUF_DIR SHARDSWAP_SOURCE_DIR "/tests/fixtures/gguf"
#define MODELS SHARDSWAP_SOURCE_DIR "/tests/fixtures/models"
#define TOL 1e-4
#define TOL_BF16 1e-2

static char tmpdir[64];

struct fixture {
    const char *gguf; /* under GGUF_DIR */
    const char *st;   /* the safetensors fixture of the same weights, under MODELS */
    enum dtype type;  /* the GGUF's matrices */
};

static const struct fixture fixtures[] = {
    {"llama_gqa/model-f32.gguf", "llama_gqa_f32", DTYPE_F32},
    {"llama_gqa/model-f16.gguf", "llama_gqa_f32", DTYPE_F16},
    {"llama_gqa/model-bf16.gguf", "llama_gqa_f32", DTYPE_BF16},
    {"qwen2_bias/model-f16.gguf", "qwen2_bias_f32", DTYPE_F16},
    {"qwen2_bias/model-bf16.gguf", "qwen2_bias_f32", DTYPE_BF16},
};
#define N_FIXTURES (sizeof(fixtures) / sizeof(fixtures[0]))

static void copy_file(const char *from_dir, const char *to_dir, const char *name)
{
    char src[600], dst[600], *text = NULL;
    size_t len;
    snprintf(src, sizeof(src), "%s/%s", from_dir, name);
    snprintf(dst, sizeof(dst), "%s/%s", to_dir, name);
    CHECK_MSG(fs_read_regular(src, 1 << 20, &text, &len) == 0, "%s", err_msg());
    if (text)
        test_write_text(dst, text);
    free(text);
}

/* The safetensors twin of fixture f in out (cap bytes): its fixture with
 * every 2-d tensor rounded to f->type. */
static void write_twin(const struct fixture *f, char *out, size_t cap)
{
    char src[512];
    snprintf(src, sizeof(src), "%s/%s", MODELS, f->st);
    snprintf(out, cap, "%s/%s-%s", tmpdir, f->st, dtype_name(f->type));
    if (access(out, F_OK) == 0)
        return;
    mkdir(out, 0755);
    copy_file(src, out, "config.json");
    copy_file(src, out, "generation_config.json");
    struct st_checkpoint *ck = NULL;
    CHECK(st_open(src, &ck) == 0);
    if (!ck)
        return;
    char path[600];
    snprintf(path, sizeof(path), "%s/model.safetensors", out);
    struct st_writer *w = NULL;
    CHECK(st_writer_open(path, &w) == 0);
    for (size_t i = 0; w && i < st_count(ck); i++) {
        const struct st_tensor *t = st_get(ck, i);
        CHECK(st_writer_declare(w, t->name, t->ndim == 2 ? f->type : DTYPE_F32, t->ndim,
                                t->shape) == 0);
    }
    for (size_t i = 0; w && i < st_count(ck); i++) {
        const struct st_tensor *t = st_get(ck, i);
        enum dtype to = t->ndim == 2 ? f->type : DTYPE_F32;
        float *x = malloc(t->numel * sizeof(float));
        void *y = malloc(t->numel * dtype_size(to));
        dtype_to_f32(t->dtype, t->data, x, t->numel);
        dtype_from_f32(to, x, y, t->numel);
        CHECK(st_writer_write(w, y, t->numel * dtype_size(to)) == 0);
        free(x);
        free(y);
    }
    CHECK(w && st_writer_close(w) == 0);
    st_close(ck);
}

TEST(config)
{
    for (size_t i = 0; i < N_FIXTURES; i++) {
        char path[512], twin[512];
        snprintf(path, sizeof(path), "%s/%s", GGUF_DIR, fixtures[i].gguf);
        write_twin(&fixtures[i], twin, sizeof(twin));
        struct model_config *a = NULL, *b = NULL;
        CHECK_MSG(model_config_load(path, &a) == 0, "%s", err_msg());
        CHECK_MSG(model_config_load(twin, &b) == 0, "%s", err_msg());
        if (a && b) {
            const struct model_info *x = &a->info, *y = &b->info;
            CHECK_MSG(strcmp(x->family, y->family) == 0 &&
                          strcmp(x->architecture, y->architecture) == 0 && x->hidden == y->hidden &&
                          x->ffn == y->ffn && x->n_layers == y->n_layers &&
                          x->n_heads == y->n_heads && x->n_kv_heads == y->n_kv_heads &&
                          x->head_dim == y->head_dim && x->vocab == y->vocab &&
                          x->max_pos == y->max_pos && x->bos_id == y->bos_id,
                      "%s: model_info differs from %s's", fixtures[i].gguf, fixtures[i].st);
            CHECK(x->n_eos == 1 && x->eos_ids[0] == y->eos_ids[0]);
            char da[512], db[512];
            model_config_describe(a, da, sizeof(da));
            model_config_describe(b, db, sizeof(db));
            printf("%s: %s\n", fixtures[i].gguf, da);
            /* the same but for the rope's spelling (llama3 rule vs its factors) */
            CHECK_MSG(strstr(da, "tied head") &&
                          strcmp(strstr(da, "q/k/v bias"), strstr(db, "q/k/v bias")) == 0,
                      "%s\n%s", da, db);
        }
        model_config_free(a);
        model_config_free(b);
    }
    /* a directory holding the file, and inspect naming the format */
    char dir[512], cmd[1200];
    snprintf(dir, sizeof(dir), "%s/qwen2_bias", GGUF_DIR);
    struct model_config *c = NULL;
    CHECK_MSG(model_config_load(dir, &c) != 0 && strstr(err_msg(), "holds 2 GGUF models"), "%s",
              err_msg());
    model_config_free(c);
    snprintf(cmd, sizeof(cmd), "%s inspect --model %s/llama_gqa/model-f16.gguf", SHARDSWAP_BINARY,
             GGUF_DIR);
    FILE *p = popen(cmd, "r");
    char out[8192] = "";
    size_t n = p ? fread(out, 1, sizeof(out) - 1, p) : 0;
    out[n] = '\0';
    CHECK(p && pclose(p) == 0);
    CHECK_MSG(strstr(out, "format           gguf (version 3") &&
                  strstr(out, "weights          match") && strstr(out, "F16 "),
              "%s", out);
}

/* The batch's prefill logits and SHARDED_STEPS decode steps of the model
 * opened the way `how` says: 0 views of the mapping (model_open), 1 a copy
 * on a CPU device (model_open_on in `compute`). */
static int run(const char *path, int how, enum kern_compute compute, float *pre, float *steps,
               int32_t *step_ids)
{
    if (how == 1) {
        reference(path, compute, pre, steps, step_ids);
        return 0;
    }
    struct model *m = NULL;
    int rc = model_open(path, &m);
    CHECK_MSG(rc == 0, "%s: %s", path, err_msg());
    if (rc)
        return rc;
    int32_t ids[B * T];
    uint8_t mask[B * T];
    greedy_run(m, ids, mask, pre, steps, step_ids);
    const int V = model_info(m)->vocab;
    struct model_exec *ex;
    /* decode = recomputation: the whole sequence (prompt and fed steps) at once */
    const int L = T + SHARDED_STEPS;
    int32_t all_ids[B * L];
    uint8_t all_mask[B * L];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < L; t++) {
            all_ids[b * L + t] = t < T ? ids[b * T + t] : step_ids[(t - T) * B + b];
            all_mask[b * L + t] = t < T ? mask[b * T + t] : 1;
        }
    float *full = malloc(sizeof(float) * B * L * V);
    struct model_exec_shape shape2 = {.batch = B, .max_len = L, .max_rows = B * L};
    CHECK(model_exec_open_cpu(m, &shape2, &ex) == 0);
    CHECK(model_forward(m, ex, all_ids, all_mask, L, true, full) == 0);
    double worst = 0;
    for (int s = 0; s < SHARDED_STEPS - 1; s++) /* step s's logits: position T + s */
        for (int b = 0; b < B; b++)
            worst = fmax(worst, test_rel_err(steps + ((size_t)s * B + b) * V,
                                             full + ((size_t)b * L + T + s) * V, (size_t)V));
    CHECK_MSG(worst <= TOL, "%s: decode vs recomputation %.3e", path, worst);
    model_exec_free(ex);
    free(full);
    model_close(m);
    return 0;
}

TEST(logits)
{
    for (size_t i = 0; i < N_FIXTURES; i++) {
        char path[512], twin[512];
        snprintf(path, sizeof(path), "%s/%s", GGUF_DIR, fixtures[i].gguf);
        write_twin(&fixtures[i], twin, sizeof(twin));
        const size_t V = 256;
        float *pre[2], *steps[2];
        int32_t ids[2][SHARDED_STEPS * B];
        for (int k = 0; k < 2; k++) {
            pre[k] = malloc(sizeof(float) * B * T * V);
            steps[k] = malloc(sizeof(float) * SHARDED_STEPS * B * V);
        }
        for (int how = 0; how < 2; how++)
            for (int mode = 0; mode < (fixtures[i].type == DTYPE_BF16 && how ? 2 : 1); mode++) {
                enum kern_compute compute = mode ? KERN_COMPUTE_BF16 : KERN_COMPUTE_F32;
                if (run(path, how, compute, pre[0], steps[0], ids[0]) ||
                    run(twin, how, compute, pre[1], steps[1], ids[1]))
                    continue;
                int32_t mids[B * T];
                uint8_t mask[B * T];
                ref_batch((int)V, mids, mask);
                double worst = 0, worst_step;
                for (int r = 0; r < B * T; r++)
                    if (mask[r])
                        worst = fmax(worst, test_rel_err(pre[0] + r * V, pre[1] + r * V, V));
                worst_step = test_rel_err(steps[0], steps[1], SHARDED_STEPS * B * V);
                const double tol = mode ? TOL_BF16 : TOL;
                printf("%-28s %s %-4s: prefill rel err %.1e, decode %.1e\n", fixtures[i].gguf,
                       how ? "device copy" : "mapped     ", kern_compute_name(compute), worst,
                       worst_step);
                CHECK_MSG(worst <= tol && worst_step <= tol &&
                              memcmp(ids[0], ids[1], sizeof(ids[0])) == 0,
                          "%s: %.3e %.3e", fixtures[i].gguf, worst, worst_step);
            }
        for (int k = 0; k < 2; k++) {
            free(pre[k]);
            free(steps[k]);
        }
    }
}

TEST(split)
{
    const size_t V = 256;
    float *pre[2], *steps[2];
    int32_t ids[2][SHARDED_STEPS * B];
    for (int k = 0; k < 2; k++) {
        pre[k] = malloc(sizeof(float) * B * T * V);
        steps[k] = malloc(sizeof(float) * SHARDED_STEPS * B * V);
    }
    struct gguf_file *g = NULL;
    CHECK(gguf_open(GGUF_DIR "/qwen2_bias/split", &g) == 0 && gguf_file_count(g) == 3);
    gguf_close(g);
    CHECK(run(GGUF_DIR "/qwen2_bias/split/model-f16-00001-of-00003.gguf", 0, KERN_COMPUTE_F32,
              pre[0], steps[0], ids[0]) == 0);
    CHECK(run(GGUF_DIR "/qwen2_bias/model-f16.gguf", 0, KERN_COMPUTE_F32, pre[1], steps[1],
              ids[1]) == 0);
    CHECK(memcmp(pre[0], pre[1], sizeof(float) * B * T * V) == 0 &&
          memcmp(steps[0], steps[1], sizeof(float) * SHARDED_STEPS * B * V) == 0);
    for (int k = 0; k < 2; k++) {
        free(pre[k]);
        free(steps[k]);
    }
}

TEST(sharded)
{
    static const char *files[] = {"llama_gqa/model-f16.gguf", "qwen2_bias/model-bf16.gguf"};
    static const int layouts[][2] = {{1, 1}, {2, 1}, {1, 2}, {2, 2}};
    for (size_t f = 0; f < 2; f++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", GGUF_DIR, files[f]);
        struct sharded_case c;
        if (!sharded_case_open(path, &c))
            continue;
        const int V = c.vocab;
        float *got = malloc(sizeof(float) * B * T * V);
        for (size_t l = 0; l < 4; l++) {
            struct rig g;
            struct group_exec *gb = NULL;
            int tp = layouts[l][0], pp = layouts[l][1];
            int rc = rig_open(&g, "m", path, tp, pp);
            CHECK_MSG(rc == 0, "%s tp %d pp %d: %s", files[f], tp, pp, err_msg());
            if (rc == 0) {
                swap_model_set_compute(g.model, KERN_COMPUTE_F32);
                CHECK(swap_load(g.mgr, g.model, NULL) == 0);
                CHECK(swap_use_begin(g.mgr, g.model) == 0);
                const struct model_exec_shape shape = {
                    .batch = B, .max_len = T + SHARDED_STEPS, .max_rows = B * (T + SHARDED_STEPS)};
                CHECK(group_exec_create(g.mgr, g.model, &shape, &gb) == 0);
                CHECK(group_forward(g.w, gb, c.ids, c.mask, T, true, true, got) == 0);
                double worst = 0, worst_step = 0;
                for (int i = 0; i < B * T; i++)
                    if (c.mask[i])
                        worst = fmax(worst, test_rel_err(got + (size_t)i * V, c.pre + (size_t)i * V,
                                                         (size_t)V));
                for (int s = 0; s < SHARDED_STEPS; s++) {
                    CHECK(group_forward(g.w, gb, &c.step_ids[s * B], NULL, 1, false, true, got) ==
                          0);
                    worst_step = fmax(
                        worst_step, test_rel_err(got, c.steps + (size_t)s * B * V, (size_t)B * V));
                }
                printf("%-28s tp %d pp %d: prefill rel err %.1e, decode %.1e\n", files[f], tp, pp,
                       worst, worst_step);
                CHECK_MSG(worst <= 1e-5 && worst_step <= 1e-5, "%s tp %d pp %d: %.3e %.3e",
                          files[f], tp, pp, worst, worst_step);
                group_exec_free(gb);
                swap_use_end(g.mgr, g.model);
            }
            rig_close(&g);
        }
        free(got);
        sharded_case_close(&c);
    }
}

TEST(truncated)
{
    char path[512], src[512];
    snprintf(src, sizeof(src), "%s/llama_gqa/model-f16.gguf", GGUF_DIR);
    snprintf(path, sizeof(path), "%s/victim.gguf", tmpdir);
    char *data = NULL;
    size_t len = 0;
    CHECK(fs_read_regular(src, 1 << 24, &data, &len) == 0);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, len, f) == len && fclose(f) == 0);
    free(data);
    struct rig g;
    int rc = rig_open(&g, "m", path, 1, 1);
    CHECK_MSG(rc == 0, "%s", err_msg());
    if (rc == 0) {
        CHECK(truncate(path, (off_t)(len / 2)) == 0);
        rc = swap_load(g.mgr, g.model, NULL);
        if (rc == 0)
            rc = swap_wait_loaded(g.mgr, g.model);
        char sizes[64], msg[1024] = "";
        snprintf(sizes, sizeof(sizes), "%zu bytes now", len / 2);
        CHECK(swap_model_load_error(g.mgr, g.model, msg, sizeof(msg)) == rc);
        CHECK_MSG(rc == ERR_IO && strstr(msg, "victim.gguf") &&
                      strstr(msg, "truncated while in use") && strstr(msg, sizes),
                  "load of a truncated GGUF: %d %s", rc, msg);
    }
    rig_close(&g);
}

/* The F16 llama file with the bytes after the first `find` replaced by
 * `with` (n bytes, at `skip` past it), written to tmpdir/name (its path to
 * path). False (a check failed) when it could not be made. */
static bool patch_file(const char *name, const char *find, size_t skip, const void *with, size_t n,
                       char *path, size_t cap)
{
    char src[512];
    snprintf(src, sizeof(src), "%s/llama_gqa/model-f16.gguf", GGUF_DIR);
    snprintf(path, cap, "%s/%s", tmpdir, name);
    return file_patch(src, path, find, skip, with, n, NULL);
}

TEST(quantized)
{
    /* the F16 file with one matrix's type patched to Q4_1, a block type not
     * computed (64 elements: 2 blocks of 20 bytes, fewer bytes than F16's
     * 128, so the file still holds it) */
    char path[512];
    /* name, n_dims (u32), 2 x ne (u64), type (u32) */
    const char name[] = "blk.1.attn_v.weight";
    uint32_t q41 = GGML_TYPE_Q4_1;
    if (patch_file("q8.gguf", name, sizeof(name) - 1 + 4 + 16, &q41, 4, path, sizeof(path))) {
        struct model *m = NULL;
        CHECK(model_open(path, &m) < 0);
        CHECK_MSG(strstr(err_msg(), "tensor 'blk.1.attn_v.weight' has type Q4_1") &&
                      strstr(err_msg(), "q8.gguf"),
                  "%s", err_msg());
        model_close(m);
    }
}

TEST(bad_metadata)
{
    char path[512];
    struct model_config *c = NULL;
    patch_file("arch.gguf", "llama", 0, "mamba", 5, path, sizeof(path));
    CHECK(model_config_load(path, &c) == ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err_msg(), "arch.gguf") &&
                  strstr(err_msg(), "general.architecture \"mamba\" is not supported"),
              "%s", err_msg());
    model_config_free(c);
    c = NULL;
    /* the value of llama.attention.head_count (after its type) */
    uint32_t zero = 0;
    patch_file("heads.gguf", "llama.attention.head_count\x04", 26 + 4, &zero, 4, path,
               sizeof(path));
    CHECK(model_config_load(path, &c) < 0);
    CHECK_MSG(strstr(err_msg(), "heads.gguf") &&
                  strstr(err_msg(), "'llama.attention.head_count' is 0, expected 1 to 4096"),
              "%s", err_msg());
    model_config_free(c);
    c = NULL;
    /* a float where an integer belongs: llama.block_count's type u32 -> f32 */
    uint32_t f32 = GGUF_F32;
    patch_file("type.gguf", "llama.block_count", 17, &f32, 4, path, sizeof(path));
    CHECK(model_config_load(path, &c) < 0);
    CHECK_MSG(strstr(err_msg(), "'llama.block_count' is a f32, expected an integer"), "%s",
              err_msg());
    model_config_free(c);
    c = NULL;
    /* a mixture of experts (llama.cpp's Mixtral: llama.expert_count, 3-D expert
     * tensors): refused by its metadata, not by the dense tensor it lacks */
    static const char key1[] = "general.architecture", val1[] = "llama";
    static const char key2[] = "llama.expert_count";
    snprintf(path, sizeof(path), "%s/moe.gguf", tmpdir);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        const uint32_t version = 3, t_str = GGUF_STR, t_u32 = GGUF_U32, experts = 8;
        const uint64_t n_tensors = 0, n_kv = 2, n1 = strlen(key1), v1 = strlen(val1),
                       n2 = strlen(key2);
        fwrite("GGUF", 1, 4, f);
        fwrite(&version, 4, 1, f);
        fwrite(&n_tensors, 8, 1, f);
        fwrite(&n_kv, 8, 1, f);
        fwrite(&n1, 8, 1, f);
        fwrite(key1, 1, n1, f);
        fwrite(&t_str, 4, 1, f);
        fwrite(&v1, 8, 1, f);
        fwrite(val1, 1, v1, f);
        fwrite(&n2, 8, 1, f);
        fwrite(key2, 1, n2, f);
        fwrite(&t_u32, 4, 1, f);
        fwrite(&experts, 4, 1, f);
        CHECK(fclose(f) == 0);
    }
    CHECK(model_config_load(path, &c) == ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err_msg(), "llama.expert_count is 8: a mixture of experts in GGUF is not "
                                "supported") &&
                  !strchr(err_msg(), '\n'),
              "%s", err_msg());
    model_config_free(c);
}

static void setup(void)
{
    test_scratch_dir(tmpdir, sizeof(tmpdir), "gguf_model");
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
