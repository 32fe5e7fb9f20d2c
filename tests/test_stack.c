/* The serving stack from one config (engine/stack.h), on CPU devices and the
 * fixture models:
 * - serving: three models of different layouts (TP=2 over both devices,
 *   PP=2, TP=1 on device 1) on budgets the stack sizes for one, for two and
 *   for every model per device; every request, named by its model, returns the
 *   fixture's transformers greedy reference exactly; the models are
 *   registered under their names with the configured placements, and no
 *   device's high-water mark passes its budget;
 * - stack_size against its contract: a device holding nothing sizes 0, a
 *   device holds fit_models of its largest shard plus 1 MiB, sizes grow
 *   with the engine's batch, a budget is at least the weights placed there
 *   (swap_layout_bytes), the host a copy of every model plus 64 MiB, and
 *   stack_open gives the devices the budgets stack_size reports; with
 *   fit_models 0 a device holds every model placed on it (stack_budgets
 *   too, where the memory has room), and the reserves a default leaves;
 * - errors: each config mistake is a negative code whose message names the
 *   model, device or field, leaves *out NULL and leaks nothing (ASan);
 * - devices on processes (stack_config_check): every device on a process of
 *   the job, CPU models across processes, CUDA models on one process;
 * - a per-model max_batch: a model configured with 1 runs four requests one
 *   per batch while a model on the engine's default batches all four.
 * Ordering in the max_batch case is made by a gate (a pinned model and the
 * memory beside it keep the others off the device), never by timing. */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/device.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/stack.h"
#include "swap/swap.h"
#include "test.h"

#include "fixture_expect.h"
#define MIB (1ull << 20)

/* ---- the references ---- */

enum { F_PRE_LN_F32, F_POST_LN_PROJ, F_BF16, F_PRE_LN_F16, N_FIX };
static const char *fix_names[N_FIX] = {"pre_ln_f32", "post_ln_proj", "bf16_nobias_untied",
                                       "pre_ln_f16"};
static char fix_paths[N_FIX][512];

static struct expect expects[N_FIX][3];

static void load_expectations(void)
{
    for (int m = 0; m < N_FIX; m++) {
        snprintf(fix_paths[m], sizeof(fix_paths[m]), "%s/%s", FIXTURES, fix_names[m]);
        expect_load(fix_names[m], expects[m]);
    }
}

/* The longest prompt and answer of the references: what budgets are sized for. */
static void longest(int *prompt, int *out)
{
    *prompt = *out = 0;
    for (int m = 0; m < N_FIX; m++)
        for (int i = 0; i < 3; i++) {
            *prompt = expects[m][i].n_prompt > *prompt ? expects[m][i].n_prompt : *prompt;
            *out = expects[m][i].n_out > *out ? expects[m][i].n_out : *out;
        }
}

/* Submits fixture fix's greedy prompt `which` to the model served as name,
 * for as many tokens as its reference. */
static struct engine_req *submit(struct stack *s, const char *name, int fix, int which)
{
    const struct expect *x = &expects[fix][which];
    struct engine_request_params p = {
        .model_name = name, .prompt = x->prompt, .n_prompt = x->n_prompt,
        .max_tokens = x->n_out, .sampling = {.temperature = 0, .top_p = 1, .seed = 1}};
    struct engine_req *r = NULL;
    int rc = engine_submit(s->engine, &p, &r);
    CHECK_MSG(rc == 0 && r != NULL, "submit to %s: %d %s", name, rc, err_msg());
    return r;
}

/* Waits for r; its output must be the reference exactly. */
static void check_output(struct engine_req *r, const char *name, int fix, int which)
{
    if (!r)
        return;
    const struct expect *x = &expects[fix][which];
    int st = engine_req_wait(r);
    CHECK_MSG(st == 0, "%s prompt %d: status %d (%s)", name, which, st, engine_req_error(r));
    int n = 0;
    const int32_t *out = engine_req_output(r, &n);
    bool same = n == x->n_out && memcmp(out, x->out, sizeof(int32_t) * (size_t)n) == 0;
    CHECK_MSG(same, "%s (fixture %s) prompt %d: %d tokens, expected %d", name, fix_names[fix],
              which, n, x->n_out);
    if (!same) {
        fprintf(stderr, "  got");
        for (int i = 0; i < n; i++)
            fprintf(stderr, " %d", out[i]);
        fprintf(stderr, "\n  expected");
        for (int i = 0; i < x->n_out; i++)
            fprintf(stderr, " %d", x->out[i]);
        fprintf(stderr, "\n");
    }
}

static void check_high_water(const struct stack *s, const char *what)
{
    for (int d = 0; d < s->n_devices; d++)
        CHECK_MSG(device_high_water(s->devices[d]) <= device_budget(s->devices[d]),
                  "%s: device %d high water %llu > budget %llu", what, d,
                  (unsigned long long)device_high_water(s->devices[d]),
                  (unsigned long long)device_budget(s->devices[d]));
}

/* ---- 1. three layouts on two devices ---- */

static const int both[2] = {0, 1}, pp_rev[2] = {1, 0}, dev1[1] = {1};

/* TP=2 over devices 0 and 1, PP=2 with stage 0 on device 1, TP=1 on device 1;
 * the served names differ from the directories' so lookups go by name. */
#define N_SERVE 3
static const struct stack_model_config serve_models[N_SERVE] = {
    {.name = "tp2", .path = fix_paths[F_PRE_LN_F32], .tp = 2, .pp = 1, .devices = both},
    {.name = "pp2", .path = fix_paths[F_POST_LN_PROJ], .tp = 1, .pp = 2, .devices = pp_rev},
    {.name = "solo", .path = fix_paths[F_BF16], .devices = dev1},
};
static const int serve_fix[N_SERVE] = {F_PRE_LN_F32, F_POST_LN_PROJ, F_BF16};
static const int serve_shards[N_SERVE] = {2, 2, 1};
static const int *const serve_devices[N_SERVE] = {both, pp_rev, dev1};

static struct stack_config serve_config(int fit)
{
    /* f32: transformers' f32 references exactly, whatever the layout */
    struct stack_config c = {.device_kind = "cpu", .n_devices = 2, .fit_models = fit,
                             .engine = {.policy = "swapwise"}, .models = serve_models,
                             .n_models = N_SERVE, .compute = "f32"};
    longest(&c.fit_prompt, &c.fit_max_tokens);
    return c;
}

static void test_serve(int fit)
{
    struct stack_config c = serve_config(fit);
    uint64_t sized[STACK_MAX_DEVICES] = {0}, host = 0;
    CHECK_MSG(stack_size(&c, sized, &host) == 0, "%s", err_msg());
    struct stack *s = NULL;
    int rc = stack_open(&c, &s);
    CHECK_MSG(rc == 0 && s, "stack_open (fit %d): %d %s", fit, rc, err_msg());
    if (!s)
        return;
    /* the stack as configured */
    CHECK(s->n_devices == 2 && s->n_models == N_SERVE && s->engine && s->mgr && s->workers);
    for (int d = 0; d < 2; d++)
        CHECK_MSG(device_budget(s->devices[d]) == sized[d], "device %d budget %llu, sized %llu",
                  d, (unsigned long long)device_budget(s->devices[d]),
                  (unsigned long long)sized[d]);
    int ids[8];
    CHECK(engine_list_models(s->engine, ids, 8) == N_SERVE);
    for (int i = 0; i < N_SERVE; i++) {
        CHECK(s->models[i] != NULL && s->ids[i] >= 0);
        for (int j = 0; j < i; j++)
            CHECK(s->ids[i] != s->ids[j]);
        CHECK_MSG(engine_find_model(s->engine, serve_models[i].name) == s->ids[i], "%s",
                  serve_models[i].name);
        struct engine_model_stats ms;
        CHECK(engine_model_stats(s->engine, s->ids[i], &ms) == 0);
        CHECK(strcmp(ms.name, serve_models[i].name) == 0 && ms.id == s->ids[i] && !ms.pinned);
        CHECK(ms.n_shards == serve_shards[i]);
        for (int k = 0; k < ms.n_shards && k < serve_shards[i]; k++)
            CHECK_MSG(ms.shards[k].device == serve_devices[i][k], "%s shard %d on device %d",
                      serve_models[i].name, k, ms.shards[k].device);
    }
    CHECK(engine_find_model(s->engine, "pre_ln_f32") == ERR_NOT_FOUND);

    /* every prompt of every model at once, by name */
    struct engine_req *r[N_SERVE][3];
    for (int i = 0; i < N_SERVE; i++)
        for (int k = 0; k < 3; k++)
            r[i][k] = submit(s, serve_models[i].name, serve_fix[i], k);
    for (int i = 0; i < N_SERVE; i++)
        for (int k = 0; k < 3; k++) {
            check_output(r[i][k], serve_models[i].name, serve_fix[i], k);
            engine_req_release(r[i][k]);
        }
    for (int i = 0; i < N_SERVE; i++) {
        struct engine_model_stats ms;
        CHECK(engine_model_stats(s->engine, s->ids[i], &ms) == 0);
        CHECK_MSG(ms.submitted == 3 && ms.ok == 3, "%s: submitted %llu ok %llu",
                  serve_models[i].name, (unsigned long long)ms.submitted,
                  (unsigned long long)ms.ok);
    }
    check_high_water(s, fit == 0   ? "serve, every model"
                        : fit == 1 ? "serve, fit 1"
                                   : "serve, fit 2");
    stack_close(s);
}

/* ---- 2. stack_size ---- */

static void test_size(void)
{
    /* three devices, models on 0 and 1 only */
    struct stack_config c = serve_config(1);
    c.n_devices = 3;
    uint64_t one[STACK_MAX_DEVICES] = {0}, two[STACK_MAX_DEVICES] = {0};
    uint64_t host1 = 0, host2 = 0;
    CHECK_MSG(stack_size(&c, one, &host1) == 0, "%s", err_msg());
    CHECK(one[2] == 0);
    c.fit_models = 2;
    CHECK_MSG(stack_size(&c, two, &host2) == 0, "%s", err_msg());
    CHECK(two[2] == 0);
    CHECK(host2 == host1); /* the host holds every model whatever the devices fit */
    for (int d = 0; d < 2; d++) {
        CHECK(one[d] > MIB && two[d] > one[d]);
        /* fit_models of the largest shard there, plus 1 MiB */
        CHECK_MSG(two[d] - MIB == 2 * (one[d] - MIB), "device %d: %llu for 2, %llu for 1", d,
                  (unsigned long long)two[d], (unsigned long long)one[d]);
    }

    /* the reference: the largest shard on each device, weights and the
     * engine's largest batch (engine_batch_shape), by swap_layout_bytes; the
     * host a copy of every model plus 64 MiB */
    uint64_t need[3] = {0}, need_gpu[3] = {0}, weights[3] = {0}, all[3] = {0};
    uint64_t host_ref = 64 * MIB;
    const int batch = 8; /* the engine's default */
    for (int i = 0; i < N_SERVE; i++) {
        const struct stack_model_config *m = &serve_models[i];
        int tp = m->tp > 0 ? m->tp : 1, pp = m->pp > 0 ? m->pp : 1;
        struct model_config *oc = NULL;
        CHECK(model_config_load(m->path, &oc) == 0);
        if (!oc)
            continue;
        const struct model_info info = oc->info;
        model_config_free(oc);
        struct model_exec_shape shape =
            engine_batch_shape(info.max_pos, batch, c.fit_prompt, c.fit_prompt + c.fit_max_tokens,
                               c.fit_max_tokens > 1);
        uint64_t with[4] = {0}, without[4] = {0}, h1 = 0, h2 = 0;
        CHECK(swap_layout_bytes(m->path, tp, pp, &shape, with, &h1) == 0);
        CHECK(swap_layout_bytes(m->path, tp, pp, NULL, without, &h2) == 0);
        CHECK(h1 == h2);
        host_ref += h2;
        /* on a GPU, room for an attention scratch of every head at once */
        const uint64_t scratch = model_exec_scratch_bound(&info, tp, &shape);
        CHECK(scratch > 0);
        for (int k = 0; k < tp * pp; k++) {
            int d = m->devices[k];
            CHECK(with[k] > without[k] && without[k] > 0);
            need[d] = with[k] > need[d] ? with[k] : need[d];
            need_gpu[d] = with[k] + scratch > need_gpu[d] ? with[k] + scratch : need_gpu[d];
            all[d] += with[k];
            weights[d] = without[k] > weights[d] ? without[k] : weights[d];
        }
        if (tp * pp == 1) {
            /* the same bytes as a whole model sized for any backend */
            uint64_t w = 0, e = 0;
            CHECK(model_device_bytes(m->path, &shape, &w, &e) == 0);
            CHECK_MSG(w == without[0] && e == with[0] - without[0] + scratch,
                      "%s: weights %llu, context %llu; expected %llu, %llu", m->name,
                      (unsigned long long)w, (unsigned long long)e, (unsigned long long)without[0],
                      (unsigned long long)(with[0] - without[0] + scratch));
        }
    }
    CHECK_MSG(host1 == host_ref, "host %llu, expected %llu", (unsigned long long)host1,
              (unsigned long long)host_ref);
    for (int d = 0; d < 2; d++) {
        CHECK_MSG(one[d] == need[d] + MIB, "device %d: sized %llu, expected %llu", d,
                  (unsigned long long)one[d], (unsigned long long)(need[d] + MIB));
        CHECK(one[d] >= weights[d]);
    }
    /* CUDA devices: sized with the scratch (nothing is opened to size them) */
    struct stack_config cg = serve_config(1);
    cg.n_devices = 3;
    cg.device_kind = "cuda";
    uint64_t gpu[STACK_MAX_DEVICES] = {0}, hg = 0;
    CHECK_MSG(stack_size(&cg, gpu, &hg) == 0, "%s", err_msg());
    for (int d = 0; d < 2; d++)
        CHECK_MSG(gpu[d] == need_gpu[d] + MIB && gpu[d] > one[d],
                  "cuda device %d: sized %llu, expected %llu", d, (unsigned long long)gpu[d],
                  (unsigned long long)(need_gpu[d] + MIB));

    /* fit_models 0, the default: every model placed on a device at once;
     * stack_budgets gives that where the memory holds it (these models are
     * far below any machine's reserve), a budget given as it is, and a
     * device holding no model 1 MiB */
    uint64_t every[STACK_MAX_DEVICES] = {0}, budgets[STACK_MAX_DEVICES] = {0}, host0 = 0, hb = 0;
    c.fit_models = 0;
    CHECK_MSG(stack_size(&c, every, &host0) == 0, "%s", err_msg());
    CHECK(host0 == host1 && every[2] == 0);
    for (int d = 0; d < 2; d++)
        CHECK_MSG(every[d] == all[d] + MIB && every[d] > one[d],
                  "device %d: every model %llu, expected %llu", d, (unsigned long long)every[d],
                  (unsigned long long)(all[d] + MIB));
    c.device_budget[1] = 3 * MIB;
    CHECK_MSG(stack_budgets(&c, budgets, &hb) == 0, "%s", err_msg());
    CHECK_MSG(budgets[0] == every[0] && budgets[1] == 3 * MIB && budgets[2] == MIB && hb == host1,
              "budgets %llu %llu %llu, host %llu", (unsigned long long)budgets[0],
              (unsigned long long)budgets[1], (unsigned long long)budgets[2],
              (unsigned long long)hb);
    c.device_budget[1] = 0;

    /* the reserves a default budget leaves: a tenth, at least 1 GiB (CPU);
     * a twentieth, at least 512 MiB (GPU) */
    CHECK(stack_cpu_reserve(4ull << 30) == 1ull << 30);
    CHECK(stack_cpu_reserve(100ull << 30) == 10ull << 30);
    CHECK(stack_gpu_reserve(8ull << 30) == 512ull << 20);
    CHECK(stack_gpu_reserve(140ull << 30) == 7ull << 30);

    /* every single model: its budget is at least its weights there */
    for (int i = 0; i < N_SERVE; i++) {
        struct stack_config ci = serve_config(1);
        ci.models = &serve_models[i];
        ci.n_models = 1;
        uint64_t b[STACK_MAX_DEVICES] = {0}, h = 0, w[4] = {0}, hw = 0;
        const struct stack_model_config *m = &serve_models[i];
        CHECK_MSG(stack_size(&ci, b, &h) == 0, "%s", err_msg());
        CHECK(swap_layout_bytes(m->path, m->tp > 0 ? m->tp : 1, m->pp > 0 ? m->pp : 1, NULL, w,
                                &hw) == 0);
        bool used[2] = {false, false};
        for (int k = 0; k < serve_shards[i]; k++) {
            int d = m->devices[k];
            used[d] = true;
            CHECK_MSG(b[d] >= w[k], "%s shard %d: %llu < weights %llu", m->name, k,
                      (unsigned long long)b[d], (unsigned long long)w[k]);
        }
        for (int d = 0; d < 2; d++)
            if (!used[d])
                CHECK_MSG(b[d] == 0, "%s: device %d holds none of it, sized %llu", m->name, d,
                          (unsigned long long)b[d]);
        CHECK(h == 64 * MIB + hw);
    }

    /* the engine's batch: more sequences, more device memory */
    struct stack_config cb = serve_config(1);
    uint64_t b1[STACK_MAX_DEVICES] = {0}, b8[STACK_MAX_DEVICES] = {0}, b16[STACK_MAX_DEVICES] = {0};
    uint64_t h = 0;
    cb.engine.max_batch = 1;
    CHECK(stack_size(&cb, b1, &h) == 0);
    cb.engine.max_batch = 8;
    CHECK(stack_size(&cb, b8, &h) == 0);
    cb.engine.max_batch = 16;
    CHECK(stack_size(&cb, b16, &h) == 0);
    for (int d = 0; d < 2; d++) {
        CHECK_MSG(b1[d] < b8[d] && b8[d] < b16[d], "device %d: %llu %llu %llu", d,
                  (unsigned long long)b1[d], (unsigned long long)b8[d],
                  (unsigned long long)b16[d]);
        CHECK(b8[d] == one[d]); /* 8 is the default */
    }
    /* a model's own max_batch replaces the engine's: the solo model (device 1
     * only) at max_batch 1 on an engine of 16 sizes as on an engine of 1 */
    struct stack_model_config solo = serve_models[2];
    solo.max_batch = 1;
    struct stack_config cs = serve_config(1);
    cs.models = &solo;
    cs.n_models = 1;
    cs.engine.max_batch = 16;
    uint64_t s1[STACK_MAX_DEVICES] = {0}, s16[STACK_MAX_DEVICES] = {0};
    CHECK(stack_size(&cs, s1, &h) == 0);
    solo.max_batch = 0;
    CHECK(stack_size(&cs, s16, &h) == 0);
    CHECK(s1[0] == 0 && s16[0] == 0 && s1[1] > 0 && s1[1] < s16[1]);
}

/* ---- 3. errors ---- */

/* stack_open fails with a negative code (want, when not 0), leaves *out NULL,
 * and its message holds each of the NULL-terminated strings. */
__attribute__((sentinel)) static void expect_open_fails(const struct stack_config *c, int want,
                                                        const char *what, ...)
{
    static struct stack sentinel;
    struct stack *s = &sentinel;
    int rc = stack_open(c, &s);
    CHECK_MSG(rc < 0, "%s: stack_open returned %d", what, rc);
    if (want)
        CHECK_MSG(rc == want, "%s: %d (%s), expected %d", what, rc, err_msg(), want);
    CHECK_MSG(s == NULL, "%s: *out left set", what);
    if (s && s != &sentinel)
        stack_close(s);
    va_list ap;
    va_start(ap, what);
    for (const char *k = va_arg(ap, const char *); k; k = va_arg(ap, const char *))
        CHECK_MSG(strstr(err_msg(), k) != NULL, "%s: message '%s' does not name '%s'", what,
                  err_msg(), k);
    va_end(ap);
}

static void test_errors(void)
{
    struct stack_config c;
    struct stack_model_config m[2];

    /* two models under one name */
    c = serve_config(1);
    m[0] = serve_models[0];
    m[1] = serve_models[2];
    m[1].name = "tp2";
    c.models = m;
    c.n_models = 2;
    expect_open_fails(&c, ERR_INVALID, "duplicate names", "tp2", (char *)NULL);

    /* a shard on device 2 of a two-device stack */
    c = serve_config(1);
    static const int off[2] = {0, 2};
    m[0] = serve_models[0];
    m[0].devices = off;
    c.models = m;
    c.n_models = 1;
    expect_open_fails(&c, ERR_INVALID, "device out of range", "tp2", "device 2", (char *)NULL);
    uint64_t b[STACK_MAX_DEVICES], h;
    CHECK(stack_size(&c, b, &h) == ERR_INVALID && strstr(err_msg(), "device 2"));
    /* no devices at all: the same default placement on 0 .. tp - 1 */
    m[0].devices = NULL;
    c.n_devices = 1;
    expect_open_fails(&c, ERR_INVALID, "default placement beyond the stack", "tp2", "device 1",
                      (char *)NULL);

    /* a model's own precision overrides the stack's */
    c = serve_config(1);
    m[0] = serve_models[2];
    m[0].compute = "bf16";
    m[1] = serve_models[0];
    c.models = m;
    c.n_models = 2;
    struct stack *sp = NULL;
    CHECK_MSG(stack_open(&c, &sp) == 0, "%s", err_msg());
    CHECK(sp && swap_model_compute(sp->models[0]) == KERN_COMPUTE_BF16 &&
          swap_model_compute(sp->models[1]) == KERN_COMPUTE_F32);
    stack_close(sp);

    /* a precision that does not exist, for the stack and for one model */
    c = serve_config(1);
    c.compute = "f8";
    expect_open_fails(&c, ERR_INVALID, "stack compute f8", "f8", "expected f32, bf16 or auto",
                      (char *)NULL);
    c = serve_config(1);
    m[0] = serve_models[0];
    m[0].compute = "half";
    c.models = m;
    c.n_models = 1;
    expect_open_fails(&c, ERR_INVALID, "model compute half", "tp2", "half", (char *)NULL);

    /* a checkpoint that is not there */
    c = serve_config(1);
    m[0] = serve_models[2];
    m[0].name = "ghost";
    m[0].path = FIXTURES "/no_such_model";
    c.models = m;
    c.n_models = 1;
    expect_open_fails(&c, 0, "missing path", "ghost", (char *)NULL);

    /* no devices */
    c = serve_config(1);
    c.n_devices = 0;
    c.n_models = 0;
    expect_open_fails(&c, ERR_INVALID, "no devices", "devices", "got 0", (char *)NULL);
    c.n_devices = STACK_MAX_DEVICES + 1;
    expect_open_fails(&c, ERR_INVALID, "too many devices", "devices", (char *)NULL);

    /* an unknown device kind */
    c = serve_config(1);
    c.device_kind = "tpu";
    expect_open_fails(&c, ERR_INVALID, "device kind tpu", "tpu", (char *)NULL);

    /* cuda in a build without it; a build with CUDA (and a GPU) opens it */
    struct device *probe = NULL;
    int prc = device_open_cuda(0, 0, MIB, &probe);
    if (prc == ERR_UNSUPPORTED && strstr(err_msg(), "built without CUDA")) {
        c = serve_config(1);
        c.device_kind = "cuda";
        expect_open_fails(&c, ERR_UNSUPPORTED, "device kind cuda", "built without CUDA",
                          (char *)NULL);
    } else {
        printf("note: CUDA is built in (device_open_cuda: %d); the stub case is not run\n", prc);
        device_close(probe);
    }

    /* a budget too small for a model fails after the devices, manager,
     * workers and engine are up: they are all taken down again */
    c = serve_config(1);
    c.device_budget[0] = c.device_budget[1] = 4096;
    expect_open_fails(&c, 0, "budget too small", "tp2", "cpu:", (char *)NULL);
}

/* stack_config_check refuses c with ERR_INVALID and a message holding
 * needle. */
static void expect_check_fails(const struct stack_config *c, const char *what, const char *needle)
{
    int rc = stack_config_check(c);
    CHECK_MSG(rc == ERR_INVALID && strstr(err_msg(), needle) && !strchr(err_msg(), '\n'),
              "%s: %d '%s' lacks '%s'", what, rc, err_msg(), needle);
}

/* Devices of other processes (procs[]): checked against the job's count
 * before anything opens; a CPU model may span processes, a CUDA one not. */
static void test_procs(void)
{
    struct stack_config c = serve_config(1); /* tp2 on 0, 1; pp2 on 1, 0; solo on 1 */
    c.procs_set = true;
    c.procs[0] = 0;
    c.procs[1] = 1;
    c.n_procs = 2;
    CHECK_MSG(stack_config_check(&c) == 0, "CPU models across 2 processes: %s", err_msg());
    c.n_procs = 3; /* a process without devices */
    CHECK_MSG(stack_config_check(&c) == 0, "%s", err_msg());
    c.procs_set = false; /* procs[] unread then */
    c.procs[1] = 7;
    c.n_procs = 0;
    CHECK_MSG(stack_config_check(&c) == 0, "procs_set false: %s", err_msg());

    /* a process the job does not have */
    c.procs_set = true;
    c.procs[1] = 1;
    expect_check_fails(&c, "no job",
                       "devices: device 1 is on process 1, but the job has 1 "
                       "process (start it with mpirun -n 2 or more)");
    c.n_procs = 1;
    expect_check_fails(&c, "1 process", "the job has 1 process");
    c.procs[1] = 3;
    c.n_procs = 2;
    expect_check_fails(&c, "process 3 of 2",
                       "devices: device 1 is on process 3, but the job has 2 processes "
                       "(mpirun -n 2)");
    c.procs[0] = -1;
    c.procs[1] = 1;
    expect_check_fails(&c, "negative",
                       "devices: device 0 is on process -1 (expected a process "
                       "number >= 0)");
    c.procs[0] = 0;
    c.n_procs = -1;
    expect_check_fails(&c, "n_procs -1", "a job of -1 processes");

    /* CUDA: each model on one process (the check opens nothing, so it runs
     * without CUDA too) */
    struct stack_model_config m[1];
    c = serve_config(1);
    c.device_kind = "cuda";
    c.procs_set = true;
    c.procs[0] = 0;
    c.procs[1] = 1;
    c.n_procs = 2;
    c.models = m;
    c.n_models = 1;
    m[0] = serve_models[0];
    expect_check_fails(&c, "cuda tp2",
                       "model tp2: its shards span processes 0 and 1 on CUDA "
                       "devices, which needs NCCL across processes, not in this "
                       "version");
    m[0] = serve_models[1]; /* stage 0 on device 1 (process 1), stage 1 on device 0 */
    expect_check_fails(&c, "cuda pp2", "model pp2: its shards span processes 0 and 1");
    m[0] = serve_models[2]; /* wholly process 1's */
    CHECK_MSG(stack_config_check(&c) == 0, "cuda solo on process 1: %s", err_msg());
    c.procs[0] = 1; /* both devices process 1's: tp2 is on one process */
    m[0] = serve_models[0];
    CHECK_MSG(stack_config_check(&c) == 0, "cuda tp2 on process 1: %s", err_msg());
}

/* ---- 4. a per-model max_batch ---- */

static void test_max_batch(void)
{
    /* one device: the gate (pinned), a model of batch 1, one of the engine's
     * batch (8) */
    static const int dev0[1] = {0};
    struct stack_model_config m[3] = {
        {.name = "gate", .path = fix_paths[F_PRE_LN_F16], .devices = dev0, .pinned = true},
        {.name = "single", .path = fix_paths[F_PRE_LN_F32], .devices = dev0, .max_batch = 1},
        {.name = "batched", .path = fix_paths[F_POST_LN_PROJ], .devices = dev0},
    };
    struct stack_config c = {.n_devices = 1, .fit_models = 1, .engine = {.policy = "swapwise"},
                             .models = m, .n_models = 3};
    longest(&c.fit_prompt, &c.fit_max_tokens);
    struct stack *s = NULL;
    CHECK_MSG(stack_open(&c, &s) == 0 && s, "%s", err_msg());
    if (!s)
        return;

    /* close the gate: the pinned model on the device, the rest of its memory
     * taken, so neither other model can load until it opens */
    struct engine_model_stats gs;
    CHECK(engine_model_stats(s->engine, s->ids[0], &gs) == 0 && gs.pinned);
    CHECK_MSG(engine_load_model(s->engine, s->ids[0]) == 0, "%s", err_msg());
    CHECK(swap_wait_loaded(s->mgr, s->models[0]) == 0);
    struct dbuf *ballast = NULL;
    uint64_t rest = device_largest_free(s->devices[0]);
    if (rest > 0)
        CHECK(device_alloc(s->devices[0], rest, &ballast) == 0);

    enum { N = 4 };
    static const int which[N] = {0, 1, 2, 0};
    struct engine_req *single[N], *batched[N];
    for (int i = 0; i < N; i++) {
        single[i] = submit(s, "single", F_PRE_LN_F32, which[i]);
        batched[i] = submit(s, "batched", F_POST_LN_PROJ, which[i]);
    }
    /* all eight wait behind the gate */
    for (int i = 0; i < 3; i++) {
        struct engine_model_stats ms;
        CHECK(engine_model_stats(s->engine, s->ids[i], &ms) == 0);
        CHECK_MSG(ms.ok == 0 && ms.running == 0 && ms.queue_len == (i ? N : 0),
                  "%s: ok %llu running %d queued %d", m[i].name, (unsigned long long)ms.ok,
                  ms.running, ms.queue_len);
    }

    device_free(ballast);
    CHECK(engine_pin_model(s->engine, s->ids[0], false) == 0);

    struct engine_req_timings t[N];
    for (int i = 0; i < N; i++) {
        check_output(single[i], "single", F_PRE_LN_F32, which[i]);
        engine_req_timings(single[i], &t[i]);
        /* alone from its first step (it may have joined the slot its
         * predecessor freed, so batch ids may repeat) */
        CHECK_MSG(t[i].batch_size == 1 && t[i].slot == 0, "single request %d: batch of %d, slot %d",
                  i, t[i].batch_size, t[i].slot);
    }
    for (int i = 0; i < N; i++) {
        check_output(batched[i], "batched", F_POST_LN_PROJ, which[i]);
        engine_req_timings(batched[i], &t[i]);
        /* all four were queued when the model was first served: one batch */
        CHECK_MSG(t[i].batch_size == N && t[i].batch_id == t[0].batch_id,
                  "batched request %d: batch %llu of %d", i, (unsigned long long)t[i].batch_id,
                  t[i].batch_size);
    }
    for (int i = 0; i < N; i++) {
        engine_req_release(single[i]);
        engine_req_release(batched[i]);
    }
    struct engine_model_stats ms;
    CHECK(engine_model_stats(s->engine, s->ids[1], &ms) == 0 && ms.ok == N);
    CHECK(engine_model_stats(s->engine, s->ids[2], &ms) == 0 && ms.ok == N && ms.batches == 1);
    check_high_water(s, "max_batch");
    stack_close(s);
}

/* ---- 5. one add path, and pinned models at start ---- */

/* stack_add_model on an open stack: each refusal names the key it is about
 * and leaves nothing served; an add with its controls serves the fixture's
 * reference and shows the controls. */
static void test_add_model(void)
{
    struct stack_config c = serve_config(2);
    c.n_models = 1; /* tp2 */
    struct stack *s = NULL;
    CHECK_MSG(stack_open(&c, &s) == 0 && s, "%s", err_msg());
    if (!s)
        return;
    static const int twice[2] = {0, 0}, off[1] = {2};
    static const struct {
        struct stack_model_config m;
        const char *setting, *needle;
    } bad[] = {
        {{.name = "x", .path = fix_paths[F_BF16], .tp = 3}, "tp", "more than the 2 devices"},
        {{.name = "x", .path = fix_paths[F_BF16], .devices = off}, "devices", "no device 2"},
        {{.name = "x", .path = fix_paths[F_BF16], .tp = 2, .devices = twice},
         "devices",
         "holds two of its shards"},
        {{.name = "x", .path = fix_paths[F_BF16], .max_batch = -1}, "max_batch", "max_batch"},
        {{.name = "x", .path = fix_paths[F_BF16], .priority = 5000}, "priority", "priority"},
        {{.name = "x", .path = fix_paths[F_BF16], .min_resident = -1},
         "min_resident",
         "min_resident"},
        {{.name = "x", .path = fix_paths[F_BF16], .compute = "f64"}, "compute", "f64"},
        {{.name = "x", .path = "/nonexistent/model"}, "path", "/nonexistent/model"},
        {{.name = "x", .path = fix_paths[F_BF16], .max_batch = 4096}, "max_batch", "x"},
        {{.name = "", .path = fix_paths[F_BF16]}, "name", "a name"},
        {{.name = "tp2", .path = fix_paths[F_BF16]}, "", "tp2"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct swap_model *sm = (struct swap_model *)1;
        const char *setting = NULL;
        int rc = stack_add_model(s, &bad[i].m, &sm, &setting);
        CHECK_MSG(rc < 0 && sm == NULL && setting && strcmp(setting, bad[i].setting) == 0 &&
                      strstr(err_msg(), bad[i].needle),
                  "bad add %zu: %d, setting '%s': %s", i, rc, setting ? setting : "none",
                  err_msg());
        if (bad[i].m.name[0] && strcmp(bad[i].m.name, "tp2") != 0)
            CHECK_MSG(engine_find_model(s->engine, bad[i].m.name) == ERR_NOT_FOUND,
                      "bad add %zu left %s served", i, bad[i].m.name);
    }
    /* an add with its controls, served as stack_open serves */
    struct stack_model_config ok = {.name = "added",
                                    .path = fix_paths[F_BF16],
                                    .devices = dev1,
                                    .max_batch = 2,
                                    .keep_alive_set = true,
                                    .keep_alive = 7,
                                    .priority = 3,
                                    .max_queue_wait = 1.5,
                                    .min_resident = 2};
    struct swap_model *sm = NULL;
    int id = stack_add_model(s, &ok, &sm, NULL);
    CHECK_MSG(id >= 0 && sm && engine_find_model(s->engine, "added") == id, "add: %d %s", id,
              err_msg());
    struct engine_model_stats *ms = calloc(1, sizeof(*ms));
    CHECK(ms && engine_model_stats(s->engine, id, ms) == 0);
    CHECK_MSG(ms && ms->keep_alive == 7 && ms->priority == 3 && ms->max_queue_wait == 1.5 &&
                  ms->min_resident == 2 && !ms->pinned,
              "added's controls: keep_alive %g priority %d", ms ? ms->keep_alive : 0,
              ms ? ms->priority : 0);
    /* the stack's precision (f32) unless the model says */
    CHECK(swap_model_compute(sm) == KERN_COMPUTE_F32);
    free(ms);
    struct engine_req *r = submit(s, "added", F_BF16, 0);
    check_output(r, "added", F_BF16, 0);
    engine_req_release(r);
    check_high_water(s, "add_model");
    stack_close(s);
}

/* Device 0's bytes for model path (one shard) with a batch of one sequence
 * of one token: what stack_load_pinned holds room for. */
static uint64_t need_one(const char *path)
{
    struct model_config *mc = NULL;
    CHECK(model_config_load(path, &mc) == 0);
    struct model_exec_shape one = engine_batch_shape(mc ? mc->info.max_pos : 8, 1, 1, 1, false);
    model_config_free(mc);
    uint64_t shard[1] = {0}, host;
    CHECK(swap_layout_bytes(path, 1, 1, &one, shard, &host) == 0);
    return shard[0];
}

/* stack_load_pinned: pinned models are on their devices when it returns
 * (loaded by the engine, as an admin's load); a pinned model that, with its
 * own weights and batch of one, leaves another one byte short of its
 * weights and a batch of one is refused naming both and the bytes (and so
 * is one that leaves room for the other's least only without its own
 * batch), and with that byte it passes; pinned models that do not fit
 * together are refused naming them. */
static void test_pinned(void)
{
    static const int dev0[1] = {0};
    struct stack_model_config m[2] = {
        {.name = "fixed", .path = fix_paths[F_PRE_LN_F16], .devices = dev0, .pinned = true},
        {.name = "other", .path = fix_paths[F_PRE_LN_F32], .devices = dev0},
    };
    struct stack_config c = {.n_devices = 1,
                             .engine = {.policy = "swapwise"},
                             .models = m,
                             .n_models = 2,
                             .compute = "f32"};
    /* the pinned model's weights as registered: from a stack with room */
    c.device_budget[0] = 256 * MIB;
    struct stack *s = NULL;
    CHECK_MSG(stack_open(&c, &s) == 0 && s, "%s", err_msg());
    if (!s)
        return;
    const uint64_t fixed = swap_model_device_bytes(s->models[0], 0);
    const uint64_t other_weights = swap_model_device_bytes(s->models[1], 0);
    CHECK_MSG(stack_load_pinned(s) == 0, "%s", err_msg());
    CHECK(swap_residency(s->mgr, s->models[0]) == RES_ON_DEVICE);
    CHECK(swap_residency(s->mgr, s->models[1]) == RES_ON_DISK);
    stack_close(s);

    const uint64_t other = need_one(fix_paths[F_PRE_LN_F32]);
    const uint64_t fixed_one = need_one(fix_paths[F_PRE_LN_F16]);
    CHECK(fixed_one > fixed);
    /* one byte short, and room for the pinned model's weights but not for
     * its own batch of one beside the other's least */
    const uint64_t short_of[2] = {fixed_one + other - 1, fixed + other};
    for (int k = 0; k < 2; k++) {
        c.device_budget[0] = short_of[k];
        CHECK_MSG(stack_open(&c, &s) == 0 && s, "%s", err_msg());
        if (!s)
            continue;
        char want[128];
        snprintf(want, sizeof(want), "%llu bytes pinned plus its %llu",
                 (unsigned long long)fixed_one, (unsigned long long)other);
        CHECK_MSG(stack_load_pinned(s) == ERR_NOMEM && strstr(err_msg(), "pinned model fixed") &&
                      strstr(err_msg(), "model other") && strstr(err_msg(), "cpu:0") &&
                      strstr(err_msg(), want),
                  "short by %llu: %s", (unsigned long long)(fixed_one + other - short_of[k]),
                  err_msg());
        CHECK(swap_residency(s->mgr, s->models[0]) == RES_ON_DISK);
        stack_close(s);
    }
    c.device_budget[0] = fixed_one + other;
    CHECK_MSG(stack_open(&c, &s) == 0 && s, "%s", err_msg());
    if (s) {
        CHECK_MSG(stack_load_pinned(s) == 0, "exactly room: %s", err_msg());
        CHECK(swap_residency(s->mgr, s->models[0]) == RES_ON_DEVICE);
        stack_close(s);
    }

    /* both pinned, room for either's weights but not both */
    m[1].pinned = true;
    c.device_budget[0] = fixed + other_weights - 1;
    CHECK_MSG(stack_open(&c, &s) == 0 && s, "%s", err_msg());
    if (s) {
        CHECK_MSG(stack_load_pinned(s) == ERR_NOMEM &&
                      strstr(err_msg(), "pinned models fixed and other need"),
                  "two pinned: %s", err_msg());
        stack_close(s);
    }
}

int main(void)
{
    load_expectations();
    test_serve(0);
    test_serve(1);
    test_serve(2);
    test_size();
    test_errors();
    test_procs();
    test_max_batch();
    test_add_model();
    test_pinned();
    return test_finish();
}
