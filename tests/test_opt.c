/* Every family's forward against transformers: every fixture under
 * tests/fixtures/models/ (OPT by tools/make_fixtures.py, the Llama family by
 * tools/make_llama_fixtures.py) holds a tiny random checkpoint, the logits transformers computed for a left-padded batch and
 * for one unpadded prompt, and its greedy continuations.
 *
 * f32 mode against transformers in float32 (expected.json): max |ours - ref|
 * / max |ref| <= 1e-4 over real (unpadded) positions (the value the fixture
 * states); greedy ids identical.
 * bf16 mode against transformers in bfloat16 (expected_bf16.json, made by
 * tools/make_bf16_expect.py): the tolerance that file states (3e-2: both
 * round differently, see there); greedy ids identical up to the first step
 * where transformers' bf16 logits tie for the top (its margin below
 * margin_min: a choice of the rounding, not of the model).
 * The KV cache reproduces full recomputation within 1e-5 in f32 mode; in
 * bf16 mode within 1e-2, as a last-bit difference between the two orders of
 * summation can round an activation to the neighbouring bf16 value. */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/generate.h"
#include "model/model.h"
#include "test.h"
#include "fixture_expect.h"
#include "fixture_greedy.h"

/* The padded batch: compare logits at real positions. */
static void check_batch(const char *name, struct model *m, json_t *batch,
                        const struct st_tensor *ref, double tol)
{
    json_t *jid = json_object_get(batch, "input_ids"), *jmask = json_object_get(batch, "attention_mask");
    int B = (int)json_array_size(jid), T = (int)json_array_size(json_array_get(jid, 0));
    const int V = model_info(m)->vocab;
    CHECK_MSG(ref && ref->ndim == 3 && ref->shape[0] == B && ref->shape[1] == T &&
                  ref->shape[2] == V, "%s: expected logits shape", name);
    if (!ref || ref->nbytes != (size_t)B * T * V * 4)
        return;
    int32_t *ids = malloc((size_t)B * T * sizeof(int32_t));
    uint8_t *mask = malloc((size_t)B * T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            ids[b * T + t] = (int32_t)json_integer_value(json_array_get(json_array_get(jid, b), t));
            mask[b * T + t] = (uint8_t)json_integer_value(json_array_get(json_array_get(jmask, b), t));
        }
    float *logits = malloc((size_t)B * T * V * sizeof(float));
    struct model_exec *kv;
    CHECK(model_exec_open_cpu(m, &(struct model_exec_shape){.batch = B, .max_len = T, .max_rows = (B) * (T)}, &kv) == 0);
    int rc = model_forward(m, kv, ids, mask, T, true, logits);
    CHECK_MSG(rc == 0, "%s: forward failed: %s", name, err_msg());
    const float *r = ref->data;
    double worst = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            if (!mask[b * T + t])
                continue;
            size_t o = ((size_t)b * T + t) * V;
            double e = test_rel_err(logits + o, r + o, (size_t)V);
            if (e > worst)
                worst = e;
        }
    printf("%s: batch %dx%d logits rel err %.2e (tolerance %.0e)\n", name, B, T, worst, tol);
    CHECK_MSG(worst <= tol, "%s: batch logits rel err %.3e > %.0e", name, worst, tol);
    model_exec_free(kv);
    free(ids);
    free(mask);
    free(logits);
}

/* One prompt alone: full forward vs ref, then the KV cache one token at a time
 * against the full forward. */
static void check_single(const char *name, struct model *m, const int32_t *ids, int n,
                         const struct st_tensor *ref, double tol)
{
    const int V = model_info(m)->vocab;
    float *full = malloc((size_t)n * V * sizeof(float)), *step = malloc((size_t)V * sizeof(float));
    struct model_exec *kv;
    CHECK(model_exec_open_cpu(m, &(struct model_exec_shape){.batch = 1, .max_len = n, .max_rows = (1) * (n)}, &kv) == 0);
    CHECK(model_forward(m, kv, ids, NULL, n, true, full) == 0);
    if (ref && ref->nbytes == (size_t)n * V * 4) {
        double e = test_rel_err(full, ref->data, (size_t)n * V);
        printf("%s: unpadded prompt logits rel err %.2e\n", name, e);
        CHECK_MSG(e <= tol, "%s: unpadded logits rel err %.3e > %.0e", name, e, tol);
    }
    /* incremental: a prefill of half the prompt, then one token per step */
    model_exec_reset(kv);
    int half = n / 2 > 0 ? n / 2 : 1;
    float *pre = malloc((size_t)half * V * sizeof(float));
    CHECK(model_forward(m, kv, ids, NULL, half, true, pre) == 0);
    double worst = test_rel_err(pre, full, (size_t)half * V);
    for (int t = half; t < n; t++) {
        CHECK(model_forward(m, kv, &ids[t], NULL, 1, false, step) == 0);
        double e = test_rel_err(step, full + (size_t)t * V, (size_t)V);
        if (e > worst)
            worst = e;
    }
    printf("%s: KV-cache decode vs full recompute rel err %.2e\n", name, worst);
    double kv_tol = model_compute(m) == KERN_COMPUTE_BF16 ? 1e-2 : 1e-5;
    CHECK_MSG(worst <= kv_tol, "%s: KV cache differs from recomputation: %.3e", name, worst);
    model_exec_free(kv);
    free(pre);
    free(full);
    free(step);
}

/* The model at dir as the engine serves it: its weights copied onto a CPU
 * device, in precision mode (model_open_on); *dev the device, NULL on
 * failure. */
static struct model *open_copy(const char *dir, enum kern_compute mode, struct device **dev)
{
    struct model *m = NULL;
    uint64_t weights, exec;
    *dev = NULL;
    int rc = model_device_bytes(dir, NULL, &weights, &exec);
    if (rc == 0 && (rc = device_open_cpu(0, weights + (1u << 20), dev)) == 0)
        rc = model_open_on(dir, *dev, &mode, &m);
    CHECK_MSG(rc == 0, "%s: model_open_on: %s", dir, err_msg());
    return m;
}

/* copy: the weights copied onto a device (open_copy), else views of the
 * mapped checkpoint. */
static void check_fixture(const char *name, enum kern_compute mode, bool copy)
{
    char dir[1024], path[1200];
    const char *suffix = mode == KERN_COMPUTE_BF16 ? "_bf16" : "";
    if (strlen(name) > 200)
        return;
    snprintf(dir, sizeof(dir), "%s/%s", FIXTURES, name);
    snprintf(path, sizeof(path), "%s/expected%s.json", dir, suffix);
    json_error_t jerr;
    json_t *exp = json_load_file(path, 0, &jerr);
    CHECK_MSG(exp != NULL, "%s: %s", path, jerr.text);
    if (!exp)
        return;
    /* a fixture may reuse another's expected outputs */
    json_t *same = json_object_get(exp, "same_as");
    char ref_dir[1024];
    snprintf(ref_dir, sizeof(ref_dir), "%s/%s", FIXTURES,
             same ? json_string_value(same) : name);
    if (same) {
        json_decref(exp);
        snprintf(path, sizeof(path), "%s/expected%s.json", ref_dir, suffix);
        exp = json_load_file(path, 0, &jerr);
        CHECK_MSG(exp != NULL, "%s: %s", path, jerr.text);
        if (!exp)
            return;
    }
    double tol = json_real_value(json_object_get(exp, "tolerance"));
    double cap = mode == KERN_COMPUTE_BF16 ? 3e-2 : 1e-4;
    if (tol <= 0 || tol > cap)
        tol = cap;
    double margin_min = json_real_value(json_object_get(exp, "margin_min"));
    struct model *m = NULL;
    struct device *dev = NULL;
    struct st_checkpoint *ref = NULL;
    snprintf(path, sizeof(path), "%s/expected_logits%s.safetensors", ref_dir, suffix);
    int rc = 0;
    if (copy) {
        m = open_copy(dir, mode, &dev);
        /* copied in bf16 mode, an f16 checkpoint's matrices are bf16 (as
         * transformers converts them) */
        CHECK_MSG(!m || mode != KERN_COMPUTE_BF16 || model_weight_dtype(m) != DTYPE_F16,
                  "%s: f16 weights kept in bf16 mode", name);
    } else {
        rc = model_open(dir, &m);
        CHECK_MSG(rc == 0, "%s: open failed: %s", name, err_msg());
    }
    rc = st_open(path, &ref);
    CHECK_MSG(rc == 0, "%s: %s", path, err_msg());
    char label[300];
    snprintf(label, sizeof(label), "%s [%s%s]", name, kern_compute_name(mode),
             copy ? ", copied" : "");
    name = label;
    if (m && ref) {
        model_set_compute(m, mode);
        check_batch(name, m, json_object_get(exp, "batch"), st_find(ref, "logits"), tol);
        json_t *greedy = json_object_get(exp, "greedy");
        int n0;
        int32_t *p0 = json_ids(json_object_get(json_array_get(greedy, 0), "prompt"), &n0);
        check_single(name, m, p0, n0, st_find(ref, "logits_greedy0"), tol);
        free(p0);
        check_greedy(name, m, greedy, margin_min);
    }
    st_close(ref);
    model_close(m);
    device_close(dev);
    json_decref(exp);
}

/* A context longer than the model's positions is refused by its shape,
 * before a device of its (here many gigabytes of) bytes is opened. */
static void check_shape_first(void)
{
    struct model *m = NULL;
    CHECK(model_open(FIXTURES "/pre_ln_f32", &m) == 0);
    struct model_exec *ex = (struct model_exec *)&ex;
    struct model_exec_shape big = {.batch = 64, .max_len = 1 << 20};
    CHECK(m && model_exec_open_cpu(m, &big, &ex) == ERR_INVALID && ex == NULL);
    CHECK_MSG(strstr(err_msg(), "exceeds max_position_embeddings"), "%s", err_msg());
    model_close(m);
}

/* Gemma 3 multimodal runs its text model only: an image placeholder id is
 * refused in one line. */
static void check_image_refused(void)
{
    struct model *m = NULL;
    CHECK(model_open(FIXTURES "/gemma3_mm_text_f32", &m) == 0);
    struct model_exec *ex = NULL;
    if (m)
        CHECK(model_exec_open_cpu(
                  m, &(struct model_exec_shape){.batch = 1, .max_len = 4, .max_rows = 4}, &ex) ==
              0);
    if (ex) {
        const int32_t ids[3] = {1, 252, 7}; /* its image_token_index */
        float *logits = malloc((size_t)model_info(m)->vocab * sizeof(float));
        CHECK(model_forward(m, ex, ids, NULL, 3, false, logits) == ERR_UNSUPPORTED);
        CHECK_MSG(strstr(err_msg(), "image input is not supported"), "%s", err_msg());
        free(logits);
    }
    model_exec_free(ex);
    model_close(m);
}

int main(void)
{
    check_shape_first();
    check_image_refused();
    DIR *d = opendir(FIXTURES);
    CHECK_MSG(d != NULL, "no fixtures at %s", FIXTURES);
    if (!d)
        return test_finish();
    struct dirent *e;
    int n = 0;
    char names[32][200];
    while ((e = readdir(d)) && n < 32)
        if (e->d_name[0] != '.' && strlen(e->d_name) < sizeof(names[0]))
            memcpy(names[n++], e->d_name, strlen(e->d_name) + 1);
    closedir(d);
    CHECK_MSG(n >= 16,
              "expected at least 16 model fixtures (6 OPT, 7 Llama family, 3 Gemma), found %d", n);
    for (int i = 0; i < n; i++) {
        check_fixture(names[i], KERN_COMPUTE_F32, false);
        /* every OPT fixture has bf16 references; of the others, those in
         * bf16 storage (tools/make_llama_fixtures.py) */
        if (fixture_is_opt(names[i]) || fixture_has(names[i], "expected_bf16.json")) {
            check_fixture(names[i], KERN_COMPUTE_BF16, false);
            check_fixture(names[i], KERN_COMPUTE_BF16, true);
        }
    }
    return test_finish();
}
