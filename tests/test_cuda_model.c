/* Every family's forward on a GPU, against transformers and against the
 * CPU backend. Skipped (77) when device_open_cuda(0, 0, ...) fails: a build
 * without CUDA, or no GPU.
 *
 * - every fixture of tests/fixtures/models/ (OPT and the Llama family: the
 *   latter run the CUDA RMSNorm, rotary, gated-activation and grouped-query
 *   attention kernels), opened on cuda:0 and on cpu:0 through the same
 *   device-generic path (model_open_on: blobs copied onto the device), in
 *   the precisions test_opt runs them (bf16 where the fixture has
 *   expected_bf16.json: every OPT one, the Llama family's in bf16 storage):
 *   f32 compute against expected.json within 1e-4 (max |ours - ref| /
 *   max |ref| over real positions; the references are computed in f32 on
 *   the stored, possibly 16-bit, weights, and f32 compute widens them
 *   exactly); bf16 compute against expected_bf16.json within its stated
 *   tolerance, at most 3e-2. The padded batch, one prompt alone, the KV
 *   cache one token at a time against the full forward (1e-5 in f32, 1e-2
 *   in bf16), greedy continuations identical (bf16: up to the first step
 *   whose reference margin is below margin_min, a tie), and GPU against
 *   CPU within the same tolerance;
 * - the serving stack on cuda:0,cuda:0 (two partitions of GPU 0): TP = 2
 *   and PP = 2 models, every greedy reference exact through the engine;
 *   the same on cuda:0,cuda:1 when a second GPU opens;
 * - swapping on the GPU: two models on one device with room for one,
 *   requests alternating, each answer exact, each model loaded again and
 *   again (loads, offloads, events and layer overlap on the GPU);
 * - the quantized GGUF fixtures (gguf_quant: the CUDA block-type kernels in
 *   a model), GPU against the references and the CPU as that case says;
 * - the compressed-tensors fixtures (ct_models: the CUDA CT kernels in a
 *   model), the same way;
 * - expert-level residency (expert_residency): every MoE fixture on
 *   partitions of GPU 0 (TP 1, TP 2, TP 2 with expert parallelism, PP 2),
 *   every expert trimmed away and loaded on demand by the next forward,
 *   logits bit for bit those of the model without expert residency on the
 *   same devices, which are within the fixtures' tolerance of the CPU's. */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/device.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/stack.h"
#include "engine/workers.h"
#include "model/generate.h"
#include "model/model.h"
#include "swap/swap.h"
#include "test.h"

#include "fixture_expect.h"
#include "fixture_greedy.h"
#include "ref_batch.h"

#define MIB (1ull << 20)

/* ---- one model on one device ---- */

struct placed {
    struct device *dev;
    struct model *m;
};

static void placed_close(struct placed *p)
{
    model_close(p->m); /* its blobs, before the device */
    device_close(p->dev);
    p->m = NULL;
    p->dev = NULL;
}

/* dir on a fresh device (cuda:0 when gpu, else cpu:0) of budget bytes,
 * the weights copied there; compute mode. */
static bool place(const char *dir, bool gpu, uint64_t budget, enum kern_compute mode,
                  struct placed *p)
{
    memset(p, 0, sizeof(*p));
    int rc = gpu ? device_open_cuda(0, 0, budget, &p->dev) : device_open_cpu(0, budget, &p->dev);
    CHECK_MSG(rc == 0, "%s: open %s with %llu bytes: %s", dir, gpu ? "cuda:0" : "cpu:0",
              (unsigned long long)budget, err_msg());
    if (rc < 0)
        return false;
    /* this thread computes on the GPU (a CPU device keeps its threads) */
    if (gpu)
        device_compute_thread_init(p->dev);
    rc = model_open_on(dir, p->dev, &mode, &p->m);
    CHECK_MSG(rc == 0, "%s: model_open_on %s: %s", dir, device_name(p->dev), err_msg());
    if (rc < 0) {
        placed_close(p);
        return false;
    }
    CHECK(model_weights_device(p->m) == p->dev);
    CHECK(model_compute(p->m) == mode);
    return true;
}

/* ---- the forwards of one fixture ---- */

struct batch_in {
    int B, T;
    int32_t *ids;
    uint8_t *mask;
};

static void batch_in_load(json_t *batch, struct batch_in *in)
{
    json_t *jid = json_object_get(batch, "input_ids");
    json_t *jmask = json_object_get(batch, "attention_mask");
    in->B = (int)json_array_size(jid);
    in->T = (int)json_array_size(json_array_get(jid, 0));
    size_t cells = (size_t)in->B * (size_t)in->T;
    in->ids = malloc((cells ? cells : 1) * sizeof(int32_t));
    in->mask = malloc(cells ? cells : 1);
    for (int b = 0; b < in->B; b++)
        for (int t = 0; t < in->T; t++) {
            json_t *row = json_array_get(jid, (size_t)b), *mrow = json_array_get(jmask, (size_t)b);
            in->ids[b * in->T + t] = (int32_t)json_integer_value(json_array_get(row, (size_t)t));
            in->mask[b * in->T + t] = (uint8_t)json_integer_value(json_array_get(mrow, (size_t)t));
        }
}

/* Worst relative error over the real positions of a (B, T, V) batch. */
static double batch_err(const struct batch_in *in, const float *got, const float *ref, int V)
{
    double worst = 0;
    for (int b = 0; b < in->B; b++)
        for (int t = 0; t < in->T; t++) {
            if (!in->mask[b * in->T + t])
                continue;
            size_t o = ((size_t)b * in->T + t) * V;
            double e = test_rel_err(got + o, ref + o, (size_t)V);
            worst = e > worst ? e : worst;
        }
    return worst;
}

/* The padded batch on p: its logits (B, T, V) into out; false on failure. */
static bool run_batch(const char *label, struct placed *p, const struct batch_in *in, float *out)
{
    struct model_exec *ex = NULL;
    struct model_exec_shape sh = {.batch = in->B, .max_len = in->T, .max_rows = in->B * in->T};
    int rc = model_exec_open(p->m, &sh, &ex);
    CHECK_MSG(rc == 0, "%s: batch context on %s: %s", label, device_name(p->dev), err_msg());
    if (rc == 0) {
        rc = model_forward(p->m, ex, in->ids, in->mask, in->T, true, out);
        CHECK_MSG(rc == 0, "%s: batch forward on %s: %s", label, device_name(p->dev), err_msg());
    }
    model_exec_free(ex);
    return rc == 0;
}

/* One prompt alone against its reference, then the KV cache: half the
 * prompt prefilled, one token a step, against the full forward. */
static void check_single(const char *label, struct placed *p, const int32_t *ids, int n,
                         const struct st_tensor *ref, double tol)
{
    const int V = model_info(p->m)->vocab;
    float *full = malloc((size_t)n * V * sizeof(float)), *step = malloc((size_t)V * sizeof(float));
    int half = n / 2 > 0 ? n / 2 : 1;
    float *pre = malloc((size_t)half * V * sizeof(float));
    struct model_exec *ex = NULL;
    int rc =
        model_exec_open(p->m, &(struct model_exec_shape){.batch = 1, .max_len = n, .max_rows = n}, &ex);
    CHECK_MSG(rc == 0, "%s: single context: %s", label, err_msg());
    if (rc < 0 || !full || !step || !pre)
        goto out;
    rc = model_forward(p->m, ex, ids, NULL, n, true, full);
    CHECK_MSG(rc == 0, "%s: single forward: %s", label, err_msg());
    if (rc < 0)
        goto out;
    if (ref && ref->nbytes == (size_t)n * V * 4) {
        double e = test_rel_err(full, ref->data, (size_t)n * V);
        printf("%s: unpadded prompt logits rel err %.2e\n", label, e);
        CHECK_MSG(e <= tol, "%s: unpadded logits rel err %.3e > %.0e", label, e, tol);
    }
    model_exec_reset(ex);
    rc = model_forward(p->m, ex, ids, NULL, half, true, pre);
    CHECK_MSG(rc == 0, "%s: prefill: %s", label, err_msg());
    if (rc < 0)
        goto out;
    double worst = test_rel_err(pre, full, (size_t)half * V);
    for (int t = half; t < n; t++) {
        rc = model_forward(p->m, ex, &ids[t], NULL, 1, false, step);
        CHECK_MSG(rc == 0, "%s: decode step %d: %s", label, t, err_msg());
        if (rc < 0)
            goto out;
        double e = test_rel_err(step, full + (size_t)t * V, (size_t)V);
        worst = e > worst ? e : worst;
    }
    double kv_tol = model_compute(p->m) == KERN_COMPUTE_BF16 ? 1e-2 : 1e-5;
    printf("%s: KV-cache decode vs full recompute rel err %.2e (tolerance %.0e)\n", label, worst,
           kv_tol);
    CHECK_MSG(worst <= kv_tol, "%s: KV cache differs from recomputation: %.3e", label, worst);
out:
    model_exec_free(ex);
    free(full);
    free(step);
    free(pre);
}

/* The device bytes every check of one fixture needs at most: the weights
 * and the largest of its execution contexts (one at a time). */
static uint64_t fixture_budget(const char *dir, const struct batch_in *in, json_t *greedy)
{
    struct model_exec_shape shapes[8];
    int n = 0;
    shapes[n++] =
        (struct model_exec_shape){.batch = in->B, .max_len = in->T, .max_rows = in->B * in->T};
    for (size_t i = 0; i < json_array_size(greedy) && n < 8; i++) {
        json_t *g = json_array_get(greedy, i);
        int np = (int)json_array_size(json_object_get(g, "prompt"));
        int mx = (int)json_integer_value(json_object_get(g, "max_new_tokens"));
        shapes[n++] = (struct model_exec_shape){.batch = 1, .max_len = np + mx, .max_rows = np + mx};
    }
    uint64_t most = 0, weights = 0;
    for (int i = 0; i < n; i++) {
        uint64_t w, e;
        int rc = model_device_bytes(dir, &shapes[i], &w, &e);
        CHECK_MSG(rc == 0, "%s: sizing: %s", dir, err_msg());
        weights = w;
        most = e > most ? e : most;
    }
    return weights + most + MIB;
}

static void check_fixture(const char *name, enum kern_compute mode)
{
    char dir[1024], ref_dir[1024], path[1200], label[300];
    const char *suffix = mode == KERN_COMPUTE_BF16 ? "_bf16" : "";
    snprintf(dir, sizeof(dir), "%s/%s", FIXTURES, name);
    snprintf(path, sizeof(path), "%s/expected%s.json", dir, suffix);
    snprintf(label, sizeof(label), "%s [%s]", name, kern_compute_name(mode));
    json_error_t jerr;
    json_t *exp = json_load_file(path, 0, &jerr);
    CHECK_MSG(exp != NULL, "%s: %s", path, jerr.text);
    if (!exp)
        return;
    json_t *same = json_object_get(exp, "same_as");
    snprintf(ref_dir, sizeof(ref_dir), "%s/%s", FIXTURES, same ? json_string_value(same) : name);
    if (same) {
        json_decref(exp);
        snprintf(path, sizeof(path), "%s/expected%s.json", ref_dir, suffix);
        exp = json_load_file(path, 0, &jerr);
        CHECK_MSG(exp != NULL, "%s: %s", path, jerr.text);
        if (!exp)
            return;
    }
    /* f32: 1e-4 whatever the storage (f32 compute widens 16-bit weights
     * exactly, and the references are computed on the stored weights);
     * bf16: the file's tolerance, at most 3e-2 */
    double cap = mode == KERN_COMPUTE_BF16 ? 3e-2 : 1e-4;
    double tol = json_real_value(json_object_get(exp, "tolerance"));
    if (tol <= 0 || tol > cap)
        tol = cap;
    double margin_min = json_real_value(json_object_get(exp, "margin_min"));
    json_t *greedy = json_object_get(exp, "greedy");
    struct st_checkpoint *ref = NULL;
    snprintf(path, sizeof(path), "%s/expected_logits%s.safetensors", ref_dir, suffix);
    int rc = st_open(path, &ref);
    CHECK_MSG(rc == 0, "%s: %s", path, err_msg());
    struct batch_in in = {0};
    batch_in_load(json_object_get(exp, "batch"), &in);
    struct placed gpu = {0}, cpu = {0};
    float *lg = NULL, *lc = NULL;
    const struct st_tensor *bref = ref ? st_find(ref, "logits") : NULL;
    if (rc < 0 || !in.ids || !in.mask || in.B < 1 || in.T < 1)
        goto out;
    uint64_t budget = fixture_budget(dir, &in, greedy);
    if (!place(dir, true, budget, mode, &gpu) || !place(dir, false, budget, mode, &cpu))
        goto out;
    const int V = model_info(gpu.m)->vocab;
    size_t count = (size_t)in.B * in.T * V;
    CHECK_MSG(bref && bref->ndim == 3 && bref->nbytes == count * 4, "%s: expected logits shape",
              label);
    lg = malloc(count * sizeof(float));
    lc = malloc(count * sizeof(float));
    if (!bref || bref->nbytes != count * 4 || !lg || !lc)
        goto out;

    /* the padded batch: GPU and CPU against the reference and each other */
    if (run_batch(label, &gpu, &in, lg) && run_batch(label, &cpu, &in, lc)) {
        double eg = batch_err(&in, lg, bref->data, V), ec = batch_err(&in, lc, bref->data, V);
        double ed = batch_err(&in, lg, lc, V);
        printf("%s: batch %dx%d rel err: cuda %.2e, cpu %.2e, cuda vs cpu %.2e (tolerance "
               "%.0e)\n",
               label, in.B, in.T, eg, ec, ed, tol);
        CHECK_MSG(eg <= tol, "%s: cuda batch logits rel err %.3e > %.0e", label, eg, tol);
        CHECK_MSG(ec <= tol, "%s: cpu (blobs) batch logits rel err %.3e > %.0e", label, ec, tol);
        CHECK_MSG(ed <= tol, "%s: cuda vs cpu batch logits rel err %.3e > %.0e", label, ed, tol);
    }
    /* one prompt alone and the KV cache, then greedy, on the GPU */
    int n0;
    int32_t *p0 = json_ids(json_object_get(json_array_get(greedy, 0), "prompt"), &n0);
    if (p0 && n0 > 0)
        check_single(label, &gpu, p0, n0, st_find(ref, "logits_greedy0"), tol);
    free(p0);
    check_greedy(label, gpu.m, greedy, margin_min);
    /* the device's budget held everything */
    CHECK_MSG(device_high_water(gpu.dev) <= device_budget(gpu.dev), "%s: high water %llu > %llu",
              label, (unsigned long long)device_high_water(gpu.dev),
              (unsigned long long)device_budget(gpu.dev));
out:
    free(lg);
    free(lc);
    free(in.ids);
    free(in.mask);
    placed_close(&gpu);
    placed_close(&cpu);
    st_close(ref);
    json_decref(exp);
}

/* ---- through the engine ---- */

enum { F_PRE_LN_F32, F_POST_LN_PROJ, F_PRE_LN_F16, N_FIX };
static const char *fix_names[N_FIX] = {"pre_ln_f32", "post_ln_proj", "pre_ln_f16"};
static char fix_paths[N_FIX][512];
static struct expect expects[N_FIX][3];

static void longest(int *prompt, int *out)
{
    *prompt = *out = 0;
    for (int m = 0; m < N_FIX; m++)
        for (int i = 0; i < 3; i++) {
            *prompt = expects[m][i].n_prompt > *prompt ? expects[m][i].n_prompt : *prompt;
            *out = expects[m][i].n_out > *out ? expects[m][i].n_out : *out;
        }
}

static struct engine_req *submit(struct stack *s, const char *name, int fix, int which)
{
    const struct expect *x = &expects[fix][which];
    struct engine_request_params p = {.model_name = name,
                                      .prompt = x->prompt,
                                      .n_prompt = x->n_prompt,
                                      .max_tokens = x->n_out,
                                      .sampling = {.temperature = 0, .top_p = 1, .seed = 1}};
    struct engine_req *r = NULL;
    int rc = engine_submit(s->engine, &p, &r);
    CHECK_MSG(rc == 0 && r != NULL, "submit to %s: %d %s", name, rc, err_msg());
    return r;
}

/* Waits for r, releases it; its output must be the reference exactly. */
static void check_output(struct engine_req *r, const char *what, const char *name, int fix,
                         int which)
{
    if (!r)
        return;
    const struct expect *x = &expects[fix][which];
    int st = engine_req_wait(r);
    CHECK_MSG(st == 0, "%s: %s prompt %d: status %d (%s)", what, name, which, st,
              engine_req_error(r));
    int n = 0;
    const int32_t *out = engine_req_output(r, &n);
    bool same = st == 0 && n == x->n_out && memcmp(out, x->out, sizeof(int32_t) * (size_t)n) == 0;
    CHECK_MSG(same, "%s: %s (fixture %s) prompt %d: %d tokens, expected %d", what, name,
              fix_names[fix], which, n, x->n_out);
    if (!same && st == 0) {
        fprintf(stderr, "  got");
        for (int i = 0; i < n; i++)
            fprintf(stderr, " %d", out[i]);
        fprintf(stderr, "\n  expected");
        for (int i = 0; i < x->n_out; i++)
            fprintf(stderr, " %d", x->out[i]);
        fprintf(stderr, "\n");
    }
    engine_req_release(r);
}

/* TP = 2 and PP = 2 on two CUDA devices (gpus[0], gpus[1]): every prompt
 * of every model at once, each answer exact. */
static void test_parallel(const int gpus[2], bool overlap)
{
    static const int both[2] = {0, 1}, rev[2] = {1, 0}, one[1] = {1};
    const struct stack_model_config models[] = {
        {.name = "tp2", .path = fix_paths[F_PRE_LN_F32], .tp = 2, .pp = 1, .devices = both},
        {.name = "pp2", .path = fix_paths[F_POST_LN_PROJ], .tp = 1, .pp = 2, .devices = rev},
        {.name = "tp2f16", .path = fix_paths[F_PRE_LN_F16], .tp = 2, .pp = 1, .devices = both},
        {.name = "solo", .path = fix_paths[F_PRE_LN_F32], .devices = one},
    };
    const int fix[] = {F_PRE_LN_F32, F_POST_LN_PROJ, F_PRE_LN_F16, F_PRE_LN_F32};
    const int n_models = (int)(sizeof(models) / sizeof(models[0]));
    struct stack_config c = {.device_kind = "cuda",
                             .n_devices = 2,
                             .gpus = {gpus[0], gpus[1]},
                             .gpus_set = true,
                             .fit_models = n_models,
                             .engine = {.overlap_loads = overlap},
                             .models = models,
                             .n_models = n_models,
                             .compute = "f32"};
    longest(&c.fit_prompt, &c.fit_max_tokens);
    char what[96];
    snprintf(what, sizeof(what), "stack on cuda:%d,cuda:%d%s", gpus[0], gpus[1],
             overlap ? " (overlap)" : "");
    struct stack *s = NULL;
    int rc = stack_open(&c, &s);
    CHECK_MSG(rc == 0 && s, "%s: stack_open: %d %s", what, rc, err_msg());
    if (!s)
        return;
    struct engine_req *r[4][3];
    for (int i = 0; i < n_models; i++)
        for (int k = 0; k < 3; k++)
            r[i][k] = submit(s, models[i].name, fix[i], k);
    for (int i = 0; i < n_models; i++)
        for (int k = 0; k < 3; k++)
            check_output(r[i][k], what, models[i].name, fix[i], k);
    for (int d = 0; d < s->n_devices; d++)
        CHECK_MSG(device_high_water(s->devices[d]) <= device_budget(s->devices[d]),
                  "%s: device %d high water over budget", what, d);
    printf("%s: %d models x 3 greedy references exact\n", what, n_models);
    stack_close(s);
}

/* Two models on one GPU device with room for one: requests alternate, so
 * each is loaded, evicted and loaded again; every answer exact. */
TEST(swap)
{
    const struct stack_model_config models[] = {
        {.name = "a", .path = fix_paths[F_PRE_LN_F32]},
        {.name = "b", .path = fix_paths[F_POST_LN_PROJ]},
    };
    const int fix[] = {F_PRE_LN_F32, F_POST_LN_PROJ};
    struct stack_config c = {.device_kind = "cuda",
                             .n_devices = 1,
                             .fit_models = 1,
                             .engine = {.max_batch = 1, .overlap_loads = true},
                             .models = models,
                             .n_models = 2,
                             .compute = "f32"};
    longest(&c.fit_prompt, &c.fit_max_tokens);
    /* each model's need alone: the budget holds the larger and half the
     * smaller, never both */
    uint64_t need[2], host;
    for (int i = 0; i < 2; i++) {
        struct stack_config one = c;
        one.models = &models[i];
        one.n_models = 1;
        uint64_t sized[STACK_MAX_DEVICES] = {0};
        CHECK_MSG(stack_size(&one, sized, &host) == 0, "%s", err_msg());
        need[i] = sized[0] - MIB;
    }
    uint64_t big = need[0] > need[1] ? need[0] : need[1];
    uint64_t small = need[0] > need[1] ? need[1] : need[0];
    c.device_budget[0] = big + small / 2;
    struct stack *s = NULL;
    int rc = stack_open(&c, &s);
    CHECK_MSG(rc == 0 && s, "swap stack_open: %d %s", rc, err_msg());
    if (!s)
        return;
    const int rounds = 3;
    for (int k = 0; k < rounds; k++)
        for (int i = 0; i < 2; i++) /* one at a time: each request evicts the other model */
            check_output(submit(s, models[i].name, fix[i], k % 3), "swap", models[i].name, fix[i],
                         k % 3);
    for (int i = 0; i < 2; i++) {
        struct engine_model_stats ms;
        CHECK(engine_model_stats(s->engine, s->ids[i], &ms) == 0);
        printf("swap: model %s: %llu loads, %llu evictions, %llu ok\n", models[i].name,
               (unsigned long long)ms.loads, (unsigned long long)ms.evictions,
               (unsigned long long)ms.ok);
        CHECK_MSG(ms.loads >= (uint64_t)rounds && ms.ok == (uint64_t)rounds,
                  "swap: model %s: %llu loads, %llu ok (expected %d of each)", models[i].name,
                  (unsigned long long)ms.loads, (unsigned long long)ms.ok, rounds);
    }
    CHECK(device_high_water(s->devices[0]) <= device_budget(s->devices[0]));
    stack_close(s);
}

static bool two_gpus;

/* A GPU to test on (none: the program skips), and the fixtures' greedy
 * references for the engine cases. */
static void setup(void)
{
    struct device *probe = NULL;
    if (device_open_cuda(0, 0, MIB, &probe) < 0) {
        char why[600];
        snprintf(why, sizeof(why), "no CUDA device: %s", err_msg());
        test_skip(why);
    }
    device_close(probe);
    /* a second GPU for TP across GPUs, when there is one */
    two_gpus = device_open_cuda(1, 0, MIB, &probe) == 0;
    device_close(probe);
    for (int m = 0; m < N_FIX; m++) {
        snprintf(fix_paths[m], sizeof(fix_paths[m]), "%s/%s", FIXTURES, fix_names[m]);
        expect_load(fix_names[m], expects[m]);
    }
}

/* Every model fixture on the GPU, in f32 and (where there are references)
 * bf16 compute. */
TEST(fixtures)
{
    DIR *d = opendir(FIXTURES);
    CHECK_MSG(d != NULL, "no fixtures at %s", FIXTURES);
    if (!d)
        return;
    struct dirent *e;
    int n = 0;
    char names[32][200];
    while ((e = readdir(d)) && n < 32)
        if (e->d_name[0] != '.' && strlen(e->d_name) < sizeof(names[0]))
            memcpy(names[n++], e->d_name, strlen(e->d_name) + 1);
    closedir(d);
    CHECK_MSG(n >= 11, "expected at least 11 model fixtures (6 OPT, 5 Llama family), found %d",
              n);
    for (int i = 0; i < n; i++) {
        check_fixture(names[i], KERN_COMPUTE_F32);
        /* as test_opt: every OPT fixture has bf16 references (test_opt fails
         * one that lacks them); of the others, those in bf16 storage */
        if (fixture_has(names[i], "expected_bf16.json"))
            check_fixture(names[i], KERN_COMPUTE_BF16);
        else
            printf("%s: no expected_bf16.json: bf16 compute not checked\n", names[i]);
    }
}

TEST(parallel)
{
    test_parallel((const int[2]){0, 0}, false);
    test_parallel((const int[2]){0, 0}, true);
    if (two_gpus)
        test_parallel((const int[2]){0, 1}, true);
    else
        printf("one GPU: TP across GPUs not run\n");
}

/* ---- quantized GGUF files ---- */

#define QDIR SHARDSWAP_SOURCE_DIR "/tests/fixtures/gguf/llama_quant"
#define Q_MAXT 16
#define Q_TOL 1e-4
/* bf16 mode, the padded batch (B * T rows, above the GEMV): the GPU rounds
 * x and the dequantized weights to bf16 for cuBLAS where the CPU quantizes
 * x to 8 bits per block; each is within its method's error of the exact
 * product (the CPU's measured 2.2e-2 to 4.1e-2 against transformers,
 * test_gguf_quant's TOL_QX), so they differ by at most about as much */
#define Q_TOL_BATCH_BF16 6e-2

/* transformers' ("logits") or llama.cpp's ("llamacpp_logits") logits of
 * file f, prompt p, position t, from expected.json (V floats) */
static void q_ref(json_t *exp, const char *key, const char *f, int p, int t, int V, float *out)
{
    json_t *lg = json_object_get(json_object_get(json_object_get(exp, "files"), f), key);
    json_t *pos = json_array_get(json_array_get(lg, (size_t)p), (size_t)t);
    for (int v = 0; v < V; v++)
        out[v] = (float)json_real_value(json_array_get(pos, (size_t)v));
}

/* The quantized fixtures of tests/fixtures/gguf/llama_quant (a tiny Llama
 * as llama-quantize makes Q8_0, Q4_0 and Q4_K_M with Q6_K: the CUDA block
 * kernels of Q8_0, Q4_0, Q4_K and Q6_K in a model), on cuda:0 and cpu:0,
 * both precisions:
 * - each prompt alone (m = its length, at most 8: the GPU's GEMVs) against
 *   transformers' logits of the dequantized weights in f32 mode and
 *   llama.cpp's own logits of the file in bf16 mode, within 1e-4 (what the
 *   CPU holds: test_gguf_quant), and against the CPU's within 1e-4;
 * - decode one token at a time after a half prefill (m = 1) against the
 *   whole prompt's logits, 1e-4;
 * - the prompts as one left-padded batch (B * T rows: dequantized blocks
 *   and cuBLAS) against the CPU's batch, 1e-4 in f32 mode and
 *   Q_TOL_BATCH_BF16 in bf16 mode. */
TEST(gguf_quant)
{
    static const char *files[] = {"model-q8_0.gguf", "model-q4_0.gguf", "model-q4_k_m.gguf"};
    json_error_t jerr;
    json_t *exp = json_load_file(QDIR "/expected.json", 0, &jerr);
    CHECK_MSG(exp != NULL, "%s/expected.json: %s", QDIR, jerr.text);
    if (!exp)
        return;
    json_t *prompts = json_object_get(exp, "prompts");
    const int B = (int)json_array_size(prompts);
    int32_t ids[8][Q_MAXT], lens[8], T = 0;
    CHECK(B >= 1 && B <= 8);
    for (int b = 0; b < B && b < 8; b++) {
        json_t *a = json_array_get(prompts, (size_t)b);
        lens[b] = (int)json_array_size(a);
        CHECK(lens[b] >= 2 && lens[b] <= Q_MAXT);
        for (int t = 0; t < lens[b] && t < Q_MAXT; t++)
            ids[b][t] = (int32_t)json_integer_value(json_array_get(a, (size_t)t));
        T = lens[b] > T ? lens[b] : T;
    }
    for (size_t fi = 0; fi < sizeof(files) / sizeof(files[0]) && test_failures == 0; fi++) {
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", QDIR, files[fi]);
        struct model_exec_shape shape = {.batch = B, .max_len = T, .max_rows = B * T};
        uint64_t wbytes = 0, ebytes = 0;
        int rc = model_device_bytes(path, &shape, &wbytes, &ebytes);
        CHECK_MSG(rc == 0, "%s: sizing: %s", files[fi], err_msg());
        if (rc < 0)
            continue;
        for (int mode = 0; mode < 2; mode++) {
            const enum kern_compute c = mode ? KERN_COMPUTE_BF16 : KERN_COMPUTE_F32;
            char label[300];
            snprintf(label, sizeof(label), "%s [%s]", files[fi], kern_compute_name(c));
            struct placed gpu = {0}, cpu = {0};
            if (!place(path, true, wbytes + ebytes + MIB, c, &gpu) ||
                !place(path, false, wbytes + ebytes + MIB, c, &cpu)) {
                placed_close(&gpu);
                placed_close(&cpu);
                continue;
            }
            const int V = model_info(gpu.m)->vocab;
            float *lg = malloc((size_t)B * T * V * sizeof(float));
            float *lc = malloc((size_t)B * T * V * sizeof(float));
            float *ref = malloc((size_t)V * sizeof(float)),
                  *step = malloc((size_t)V * sizeof(float));
            double e_ref = 0, e_cpu = 0, e_dec = 0, e_batch = 0;
            /* each prompt alone, then decode after a half prefill */
            for (int b = 0; b < B; b++) {
                const int n = lens[b], half = n / 2;
                struct model_exec *ex = NULL;
                struct model_exec_shape one = {.batch = 1, .max_len = n, .max_rows = n};
                CHECK(model_exec_open(gpu.m, &one, &ex) == 0);
                CHECK_MSG(model_forward(gpu.m, ex, ids[b], NULL, n, true, lg) == 0, "%s: %s", label,
                          err_msg());
                model_exec_reset(ex);
                CHECK(model_forward(gpu.m, ex, ids[b], NULL, half, true, lc) == 0);
                for (int t = half; t < n; t++) {
                    CHECK(model_forward(gpu.m, ex, &ids[b][t], NULL, 1, false, step) == 0);
                    e_dec = fmax(e_dec, test_rel_err(step, lg + (size_t)t * V, (size_t)V));
                }
                model_exec_free(ex);
                ex = NULL;
                CHECK(model_exec_open(cpu.m, &one, &ex) == 0);
                CHECK(model_forward(cpu.m, ex, ids[b], NULL, n, true, lc) == 0);
                model_exec_free(ex);
                for (int t = 0; t < n; t++) {
                    q_ref(exp, mode ? "llamacpp_logits" : "logits", files[fi], b, t, V, ref);
                    e_ref = fmax(e_ref, test_rel_err(lg + (size_t)t * V, ref, (size_t)V));
                    e_cpu = fmax(e_cpu,
                                 test_rel_err(lg + (size_t)t * V, lc + (size_t)t * V, (size_t)V));
                }
            }
            /* the padded batch */
            int32_t bid[8 * Q_MAXT];
            uint8_t bmask[8 * Q_MAXT];
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++) {
                    const int pad = T - lens[b];
                    bmask[b * T + t] = t >= pad;
                    bid[b * T + t] = t >= pad ? ids[b][t - pad] : 0;
                }
            struct batch_in in = {.B = B, .T = T, .ids = bid, .mask = bmask};
            if (run_batch(label, &gpu, &in, lg) && run_batch(label, &cpu, &in, lc))
                e_batch = batch_err(&in, lg, lc, V);
            const double tb = mode ? Q_TOL_BATCH_BF16 : Q_TOL;
            printf("%s: alone vs %s %.2e, vs cpu %.2e; decode vs recomputation %.2e; batch "
                   "%dx%d vs cpu %.2e (tolerance %.0e)\n",
                   label, mode ? "llama.cpp" : "transformers", e_ref, e_cpu, e_dec, B, T, e_batch,
                   tb);
            CHECK_MSG(e_ref <= Q_TOL && e_cpu <= Q_TOL && e_dec <= Q_TOL,
                      "%s: %.3e %.3e %.3e > %.0e", label, e_ref, e_cpu, e_dec, Q_TOL);
            CHECK_MSG(e_batch <= tb, "%s: batch vs cpu %.3e > %.0e", label, e_batch, tb);
            free(lg);
            free(lc);
            free(ref);
            free(step);
            placed_close(&gpu);
            placed_close(&cpu);
        }
    }
    json_decref(exp);
}

/* ---- compressed-tensors checkpoints ---- */

#define CTDIR SHARDSWAP_SOURCE_DIR "/tests/fixtures/ctensors"
/* bf16 mode on both backends: the same values summed in other orders, so
 * a one-ulp difference may flip an activation's bf16 rounding downstream
 * (test_ct_model's bf16 tolerance against transformers) */
#define CT_TOL_BF16 3e-2
/* against transformers in f32 mode: 1e-4, and 1e-2 for the fixture whose
 * scales are bf16 (the reference rounded its weights to bf16 once more:
 * test_ct_model's TOL_BF16_SCALES) */
#define CT_TOL_REF_BF16_SCALES 1e-2

/* The fixtures of tests/fixtures/ctensors (tools/make_ct_fixtures.py: int8
 * per channel, int4 grouped with and without zero points, FP8 per tensor,
 * channel and 128x128 block; every CT type and both families) on cuda:0
 * and cpu:0, both precisions:
 * - each prompt alone (m = its length, at most 8: the GPU's CT GEMV)
 *   against the CPU's logits (f32 mode 1e-4, bf16 mode CT_TOL_BF16) and,
 *   in f32 mode, transformers' (1e-4; CT_TOL_REF_BF16_SCALES for bf16
 *   scales);
 * - decode one token at a time after a half prefill (m = 1) against the
 *   whole prompt's logits (1e-4 in f32 mode, 1e-2 in bf16 mode);
 * - the prompts as one left-padded batch (B * T rows: dequantized blocks
 *   and cuBLAS) against the CPU's batch, the same tolerances. */
TEST(ct_models)
{
    static const char *fixtures[] = {"llama_w8_channel", "llama_w4_group",    "qwen2_w4_group_asym",
                                     "llama_fp8_tensor", "llama_fp8_channel", "llama_fp8_block"};
    static const bool bf16_scales[] = {false, false, false, false, false, true};
    for (size_t fi = 0; fi < sizeof(fixtures) / sizeof(fixtures[0]) && test_failures == 0; fi++) {
        char dir[600], path[700];
        snprintf(dir, sizeof(dir), "%s/%s", CTDIR, fixtures[fi]);
        snprintf(path, sizeof(path), "%s/expected.json", dir);
        json_error_t jerr;
        json_t *exp = json_load_file(path, 0, &jerr);
        CHECK_MSG(exp != NULL, "%s: %s", path, jerr.text);
        if (!exp)
            continue;
        json_t *prompts = json_object_get(exp, "prompts");
        const int B = (int)json_array_size(prompts);
        int32_t ids[8][Q_MAXT], lens[8], T = 0;
        CHECK(B >= 1 && B <= 8);
        for (int b = 0; b < B && b < 8; b++) {
            json_t *a = json_array_get(prompts, (size_t)b);
            lens[b] = (int)json_array_size(a);
            CHECK(lens[b] >= 2 && lens[b] <= Q_MAXT);
            for (int t = 0; t < lens[b] && t < Q_MAXT; t++)
                ids[b][t] = (int32_t)json_integer_value(json_array_get(a, (size_t)t));
            T = lens[b] > T ? lens[b] : T;
        }
        struct model_exec_shape shape = {.batch = B, .max_len = T, .max_rows = B * T};
        uint64_t wbytes = 0, ebytes = 0;
        int rc = model_device_bytes(dir, &shape, &wbytes, &ebytes);
        CHECK_MSG(rc == 0, "%s: sizing: %s", fixtures[fi], err_msg());
        for (int mode = 0; mode < 2 && rc == 0; mode++) {
            const enum kern_compute c = mode ? KERN_COMPUTE_BF16 : KERN_COMPUTE_F32;
            char label[300];
            snprintf(label, sizeof(label), "%s [%s]", fixtures[fi], kern_compute_name(c));
            struct placed gpu = {0}, cpu = {0};
            if (!place(dir, true, wbytes + ebytes + MIB, c, &gpu) ||
                !place(dir, false, wbytes + ebytes + MIB, c, &cpu)) {
                placed_close(&gpu);
                placed_close(&cpu);
                continue;
            }
            const int V = model_info(gpu.m)->vocab;
            float *lg = malloc((size_t)B * T * V * sizeof(float));
            float *lc = malloc((size_t)B * T * V * sizeof(float));
            float *ref = malloc((size_t)V * sizeof(float)),
                  *step = malloc((size_t)V * sizeof(float));
            double e_ref = 0, e_cpu = 0, e_dec = 0, e_batch = 0;
            for (int b = 0; b < B; b++) {
                const int n = lens[b], half = n / 2;
                struct model_exec *ex = NULL;
                struct model_exec_shape one = {.batch = 1, .max_len = n, .max_rows = n};
                CHECK(model_exec_open(gpu.m, &one, &ex) == 0);
                CHECK_MSG(model_forward(gpu.m, ex, ids[b], NULL, n, true, lg) == 0, "%s: %s", label,
                          err_msg());
                model_exec_reset(ex);
                CHECK(model_forward(gpu.m, ex, ids[b], NULL, half, true, lc) == 0);
                for (int t = half; t < n; t++) {
                    CHECK(model_forward(gpu.m, ex, &ids[b][t], NULL, 1, false, step) == 0);
                    e_dec = fmax(e_dec, test_rel_err(step, lg + (size_t)t * V, (size_t)V));
                }
                model_exec_free(ex);
                ex = NULL;
                CHECK(model_exec_open(cpu.m, &one, &ex) == 0);
                CHECK(model_forward(cpu.m, ex, ids[b], NULL, n, true, lc) == 0);
                model_exec_free(ex);
                for (int t = 0; t < n; t++) {
                    json_t *pos = json_array_get(
                        json_array_get(json_object_get(exp, "logits"), (size_t)b), (size_t)t);
                    for (int v = 0; v < V; v++)
                        ref[v] = (float)json_real_value(json_array_get(pos, (size_t)v));
                    e_ref = fmax(e_ref, test_rel_err(lg + (size_t)t * V, ref, (size_t)V));
                    e_cpu = fmax(e_cpu,
                                 test_rel_err(lg + (size_t)t * V, lc + (size_t)t * V, (size_t)V));
                }
            }
            int32_t bid[8 * Q_MAXT];
            uint8_t bmask[8 * Q_MAXT];
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++) {
                    const int pad = T - lens[b];
                    bmask[b * T + t] = t >= pad;
                    bid[b * T + t] = t >= pad ? ids[b][t - pad] : 0;
                }
            struct batch_in in = {.B = B, .T = T, .ids = bid, .mask = bmask};
            if (run_batch(label, &gpu, &in, lg) && run_batch(label, &cpu, &in, lc))
                e_batch = batch_err(&in, lg, lc, V);
            const double t_cpu = mode ? CT_TOL_BF16 : Q_TOL, t_dec = mode ? 1e-2 : Q_TOL;
            const double t_ref = bf16_scales[fi] ? CT_TOL_REF_BF16_SCALES : Q_TOL;
            printf("%s: alone vs cpu %.2e, batch %dx%d vs cpu %.2e (tolerance %.0e); decode vs "
                   "recomputation %.2e\n",
                   label, e_cpu, B, T, e_batch, t_cpu, e_dec);
            if (!mode) {
                printf("%s: alone vs transformers %.2e (tolerance %.0e)\n", label, e_ref, t_ref);
                CHECK_MSG(e_ref <= t_ref, "%s: vs transformers %.3e > %.0e", label, e_ref, t_ref);
            }
            CHECK_MSG(e_cpu <= t_cpu && e_batch <= t_cpu, "%s: vs cpu %.3e, batch %.3e > %.0e",
                      label, e_cpu, e_batch, t_cpu);
            CHECK_MSG(e_dec <= t_dec, "%s: decode %.3e > %.0e", label, e_dec, t_dec);
            free(lg);
            free(lc);
            free(ref);
            free(step);
            placed_close(&gpu);
            placed_close(&cpu);
        }
        json_decref(exp);
    }
}

/* ---- expert-level residency ---- */

#define X_DEVICES 2
#define X_B REF_BATCH_B
#define X_T REF_BATCH_T

/* A swap manager and its workers on n devices: partitions 0..n-1 of GPU 0,
 * or cpu:0..n-1. */
struct xrig {
    struct device *devs[X_DEVICES];
    int n;
    struct swap_manager *mgr;
    struct workers *w;
};

static void xrig_close(struct xrig *g)
{
    workers_destroy(g->w);
    swap_manager_destroy(g->mgr);
    for (int i = 0; i < g->n; i++) {
        CHECK_MSG(device_used(g->devs[i]) == 0, "%s: %llu bytes left", device_name(g->devs[i]),
                  (unsigned long long)device_used(g->devs[i]));
        device_close(g->devs[i]);
    }
    memset(g, 0, sizeof(*g));
}

static bool xrig_open(struct xrig *g, bool gpu, int n)
{
    memset(g, 0, sizeof(*g));
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        rc = gpu ? device_open_cuda(0, i, 64 * MIB, &g->devs[i])
                 : device_open_cpu(i, 64 * MIB, &g->devs[i]);
        CHECK_MSG(rc == 0, "open %s%d: %s", gpu ? "cuda:0 partition " : "cpu:", i, err_msg());
        g->n += rc == 0;
    }
    struct swap_config cfg = {.host_budget = 256 * MIB};
    if (rc == 0 && (rc = swap_manager_create(g->devs, n, &cfg, &g->mgr)) == 0)
        rc = workers_create(g->mgr, &g->w);
    CHECK_MSG(rc == 0, "swap manager on %d %s devices: %s", n, gpu ? "cuda" : "cpu", err_msg());
    if (rc < 0)
        xrig_close(g);
    return rc == 0;
}

static struct swap_model *xrig_add(struct xrig *g, const char *name, const char *dir, int tp,
                                   int pp, bool ep, bool experts)
{
    static const int devices[X_DEVICES] = {0, 1};
    struct placement pl = {
        .tp = tp, .pp = pp, .devices = devices, .expert_parallel = ep, .expert_residency = experts};
    struct swap_model *m = NULL;
    int rc = swap_register(g->mgr, name, dir, &pl, false, &m);
    CHECK_MSG(rc == 0, "register %s on %s: %s", name, device_name(g->devs[0]), err_msg());
    return rc == 0 ? m : NULL;
}

static bool x_load(struct xrig *g, struct swap_model *m)
{
    int rc = swap_load(g->mgr, m, NULL);
    if (rc == 0)
        rc = swap_wait_loaded(g->mgr, m);
    CHECK_MSG(rc == 0, "load %s: %s", swap_model_name(m), err_msg());
    return rc == 0;
}

/* The batch's prefill, every position's logits into out (X_B, X_T, V), on
 * a context of its own; returns once the model is idle again (an expert's
 * copy job ends just after its event). */
static int x_forward(struct xrig *g, struct swap_model *m, float *out)
{
    static const struct model_exec_shape shape = {
        .batch = X_B, .max_len = X_T, .max_tokens = X_B * X_T, .max_rows = X_B * X_T};
    int32_t ids[X_B * X_T];
    uint8_t mask[X_B * X_T];
    ref_batch(swap_model_info(m)->vocab, ids, mask);
    struct group_exec *gb = NULL;
    int rc = swap_use_begin(g->mgr, m);
    if (rc == 0) {
        rc = group_exec_create(g->mgr, m, &shape, &gb);
        if (rc == 0)
            rc = group_forward(g->w, gb, ids, mask, X_T, true, true, out);
        group_exec_free(gb);
        swap_use_end(g->mgr, m);
    }
    swap_wait_idle(g->mgr, m);
    CHECK_MSG(rc == 0, "forward %s on %s: %s", swap_model_name(m), device_name(g->devs[0]),
              err_msg());
    return rc;
}

/* test_swap_experts' bitwise on CUDA devices: the model registered without
 * expert residency, the same with every expert resident (bit for bit), then
 * with every expert trimmed away and the next forward loading the routed
 * ones on demand through the engine's step (bit for bit); the plain
 * model's logits against the CPU's in the same layout and precision within
 * the fixtures' tolerance (f32 1e-4, bf16 3e-2), over real positions. */
static void check_experts(const char *name, int tp, int pp, bool ep)
{
    char dir[512], label[600];
    snprintf(dir, sizeof(dir), "%s/%s", FIXTURES, name);
    snprintf(label, sizeof(label), "%s tp %d pp %d%s", name, tp, pp, ep ? " ep" : "");
    const int n = tp * pp;
    struct xrig g, c;
    if (!xrig_open(&g, true, n))
        return;
    if (!xrig_open(&c, false, n)) {
        xrig_close(&g);
        return;
    }
    float *ref = NULL, *all = NULL, *got = NULL, *cpu = NULL;
    struct swap_model *plain = xrig_add(&g, "plain", dir, tp, pp, ep, false);
    struct swap_model *m = xrig_add(&g, "experts", dir, tp, pp, ep, true);
    struct swap_model *cm = xrig_add(&c, "cpu", dir, tp, pp, ep, false);
    if (!plain || !m || !cm)
        goto out;
    const int V = swap_model_info(m)->vocab;
    const size_t nl = (size_t)X_B * X_T * V;
    ref = malloc(nl * sizeof(float));
    all = malloc(nl * sizeof(float));
    got = malloc(nl * sizeof(float));
    cpu = malloc(nl * sizeof(float));
    if (!ref || !all || !got || !cpu)
        goto out;
    /* the plain model on the GPU, and on the CPU */
    if (!x_load(&g, plain) || x_forward(&g, plain, ref) < 0 || !x_load(&c, cm) ||
        x_forward(&c, cm, cpu) < 0)
        goto out;
    CHECK(swap_offload(g.mgr, plain, false) == 0);
    swap_wait_idle(g.mgr, plain);
    int32_t ids[X_B * X_T];
    uint8_t mask[X_B * X_T];
    ref_batch(V, ids, mask);
    const struct batch_in in = {.B = X_B, .T = X_T, .ids = ids, .mask = mask};
    const double tol = swap_model_compute(plain) == KERN_COMPUTE_BF16 ? 3e-2 : 1e-4;
    const double e_cpu = batch_err(&in, ref, cpu, V);
    CHECK_MSG(e_cpu <= tol, "%s: cuda vs cpu rel err %.3e > %.0e", label, e_cpu, tol);
    /* every expert resident: the layout differs, the computation does not */
    if (!x_load(&g, m))
        goto out;
    CHECK(swap_model_missing_bytes(g.mgr, m) == 0);
    if (x_forward(&g, m, all) < 0)
        goto out;
    CHECK_MSG(memcmp(all, ref, nl * sizeof(float)) == 0, "%s: all resident differs (%g)", label,
              test_rel_err(all, ref, nl));
    /* every expert trimmed away, device by device (a trim takes
     * the expert off every shard holding it): still resident */
    struct swap_stats st0, st1;
    swap_get_stats(g.mgr, &st0);
    CHECK(swap_model_expert_bytes(g.mgr, m, 0) > 0);
    for (int d = 0; d < n; d++) {
        const uint64_t want = swap_model_expert_bytes(g.mgr, m, d), used = device_used(g.devs[d]);
        uint64_t freed = 0;
        CHECK(swap_trim(g.mgr, m, d, want, &freed) == 0);
        CHECK_MSG(freed == want && device_used(g.devs[d]) == used - want,
                  "%s: %s: trim freed %llu of %llu", label, device_name(g.devs[d]),
                  (unsigned long long)freed, (unsigned long long)want);
        CHECK(swap_model_expert_bytes(g.mgr, m, d) == 0);
    }
    CHECK(swap_residency(g.mgr, m) == RES_ON_DEVICE);
    CHECK(swap_model_experts_resident(g.mgr, m) == 0);
    CHECK(swap_model_missing_bytes(g.mgr, m) > 0);
    /* the next forward brings the routed ones back on demand */
    if (x_forward(&g, m, got) < 0)
        goto out;
    CHECK_MSG(memcmp(got, ref, nl * sizeof(float)) == 0, "%s: experts loaded on demand differ (%g)",
              label, test_rel_err(got, ref, nl));
    swap_get_stats(g.mgr, &st1);
    CHECK(st1.experts_loaded > st0.experts_loaded);
    CHECK(swap_model_experts_resident(g.mgr, m) > 0);
    CHECK(swap_residency(g.mgr, m) == RES_ON_DEVICE);
    /* a whole load of a model offloaded with holes brings every expert */
    CHECK(swap_offload(g.mgr, m, false) == 0);
    swap_wait_idle(g.mgr, m);
    if (!x_load(&g, m))
        goto out;
    CHECK(swap_model_missing_bytes(g.mgr, m) == 0);
    printf("%-16s tp %d pp %d%s on %s: bitwise after %llu experts loaded on demand; cuda vs cpu "
           "%.2e (tolerance %.0e)\n",
           name, tp, pp, ep ? " ep" : "", device_name(g.devs[0]),
           (unsigned long long)(st1.experts_loaded - st0.experts_loaded), e_cpu, tol);
out:
    free(ref);
    free(all);
    free(got);
    free(cpu);
    xrig_close(&g);
    xrig_close(&c);
}

/* Expert-level residency on two partitions of GPU 0: every MoE fixture in
 * TP 1, TP 2, TP 2 with expert parallelism and PP 2 (check_experts). */
TEST(expert_residency)
{
    static const char *const fixtures[] = {"mixtral_moe_f32", "qwen3_moe_bf16", "qwen2_moe_f32"};
    for (size_t i = 0; i < sizeof(fixtures) / sizeof(fixtures[0]); i++) {
        check_experts(fixtures[i], 1, 1, false);
        check_experts(fixtures[i], 2, 1, false);
        check_experts(fixtures[i], 2, 1, true);
        check_experts(fixtures[i], 1, 2, false);
    }
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
