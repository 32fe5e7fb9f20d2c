/* What a device says it runs, and who listens (backend/kernels.h:
 * kern_supports; model.h: model_required_ops, model_check_device).
 *
 * - Every backend's mask matches its table: an op is supported exactly when
 *   its slot is filled and the table does not declare it lacking (the
 *   CUDA table is read here even where no GPU is, when built with CUDA).
 * - A CPU device given a copy of the CPU table with slots removed (the
 *   test-only device: only its struct device's kern changes) refuses those
 *   kernels with the op and the device named, makes swap_register and
 *   model_open_on refuse a model that calls one, and runs a model whose
 *   kernels it has.
 * - Each family's mask is the kernels its forward calls: the fixtures'
 *   configs give the expected masks, and every fixture runs a forward on a
 *   device holding only the ops its mask names.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_impl.h"
#include "backend/device.h"
#include "backend/device_impl.h"
#include "backend/kernels.h"
#include "backend/kernels_impl.h"
#include "core/error.h"
#include "model/model.h"
#include "swap/swap.h"
#include "test.h"

#define FIXTURES SHARDSWAP_SOURCE_DIR "/tests/fixtures/models"
#define ALL_OPS (KERN_OP_BIT(KERN_OP_COUNT) - 1)
#define BIT(op) KERN_OP_BIT(KERN_OP_##op)
#define MiB ((uint64_t)1 << 20)
/* compressed-tensors' types */
#define CT_OPS (BIT(W_CT_I8) | BIT(W_CT_I4) | BIT(W_CT_F8))

/* Each op's slot, written out apart from kernels.c's own mapping. */
#define SLOTS(X)                                                                                   \
    X(LINEAR, linear)                                                                              \
    X(LINEAR_BIAS, linear)                                                                         \
    X(EMBED, embed)                                                                                \
    X(LAYERNORM, layernorm)                                                                        \
    X(RMSNORM, rmsnorm)                                                                            \
    X(ROPE, rope)                                                                                  \
    X(RELU, activation)                                                                            \
    X(GELU, activation)                                                                            \
    X(GELU_TANH, activation)                                                                       \
    X(SILU, activation)                                                                            \
    X(REGLU, gated_act)                                                                            \
    X(GEGLU, gated_act)                                                                            \
    X(GEGLU_TANH, gated_act)                                                                       \
    X(SWIGLU, gated_act)                                                                           \
    X(ADD, add)                                                                                    \
    X(SCALE, scale)                                                                                \
    X(KV_APPEND, kv_append)                                                                        \
    X(ATTENTION, attention)                                                                        \
    X(GATHER_ROWS, gather_rows)                                                                    \
    X(COPY, copy)                                                                                  \
    X(SOFTCAP, softcap)                                                                            \
    X(ATTENTION_WINDOW, attention)                                                                 \
    X(ATTENTION_SOFTCAP, attention)                                                                \
    X(W_Q8_0, linear)                                                                              \
    X(W_Q4_0, linear)                                                                              \
    X(W_Q4_K, linear)                                                                              \
    X(W_Q5_K, linear)                                                                              \
    X(W_Q6_K, linear)                                                                              \
    X(W_Q5_0, linear)                                                                              \
    X(W_Q5_1, linear)                                                                              \
    X(LORA, lora)                                                                                  \
    X(COMBINE_ROWS, combine_rows)                                                                  \
    X(W_CT_I8, linear)                                                                             \
    X(W_CT_I4, linear)                                                                             \
    X(W_CT_F8, linear)                                                                             \
    X(ROUTE_TOPK, route_topk)

static bool slot_filled(const struct kernel_ops *k, enum kern_op op)
{
#define FILLED(o, slot)                                                                            \
    case KERN_OP_##o:                                                                              \
        return k->slot != NULL;
    switch (op) {
        SLOTS(FILLED)
    case KERN_OP_COUNT:
        break;
    }
#undef FILLED
    CHECK_MSG(false, "op %d has no slot", (int)op);
    return false;
}

static void slot_clear(struct kernel_ops *k, enum kern_op op)
{
#define CLEAR(o, slot)                                                                             \
    case KERN_OP_##o:                                                                              \
        k->slot = NULL;                                                                            \
        break;
    switch (op) {
        SLOTS(CLEAR)
    case KERN_OP_COUNT:
        break;
    }
#undef CLEAR
}

/* base running only the ops of keep: a slot none of them uses is removed,
 * the rest of what is not kept is declared lacking. */
static struct kernel_ops restricted(const struct kernel_ops *base, uint64_t keep)
{
    struct kernel_ops k = *base;
    k.lacks = ALL_OPS & ~keep;
    for (int op = 0; op < KERN_OP_COUNT; op++) {
        if (keep & KERN_OP_BIT(op))
            continue;
        struct kernel_ops t = k;
        slot_clear(&t, (enum kern_op)op);
        if (kern_table_ops(&t) == kern_table_ops(&k))
            k = t;
    }
    if (!k.attention)
        k.attention_scratch = NULL;
    return k;
}

static bool has(const char *s, const char *part)
{
    return strstr(s, part) != NULL;
}

TEST(names)
{
    for (int a = 0; a < KERN_OP_COUNT; a++) {
        const char *n = kern_op_name((enum kern_op)a);
        CHECK(n && n[0]);
        for (int b = 0; b < a; b++)
            CHECK_MSG(strcmp(n, kern_op_name((enum kern_op)b)) != 0, "%s twice", n);
    }
    CHECK(strcmp(kern_op_name(KERN_OP_RMSNORM), "rmsnorm") == 0);
    CHECK(kern_act_op(KERN_ACT_RELU) == KERN_OP_RELU);
    CHECK(kern_act_op(KERN_ACT_GELU) == KERN_OP_GELU);
    CHECK(kern_act_op(KERN_ACT_GELU_TANH) == KERN_OP_GELU_TANH);
    CHECK(kern_act_op(KERN_ACT_SILU) == KERN_OP_SILU);
    CHECK(kern_gated_op(KERN_ACT_RELU) == KERN_OP_REGLU);
    CHECK(kern_gated_op(KERN_ACT_GELU) == KERN_OP_GEGLU);
    CHECK(kern_gated_op(KERN_ACT_GELU_TANH) == KERN_OP_GEGLU_TANH);
    CHECK(kern_gated_op(KERN_ACT_SILU) == KERN_OP_SWIGLU);
    CHECK(kern_weight_ops(DTYPE_F32) == 0 && kern_weight_ops(DTYPE_BF16) == 0);
    CHECK(kern_weight_ops(DTYPE_Q8_0) == BIT(W_Q8_0) && kern_weight_ops(DTYPE_Q5_K) == BIT(W_Q5_K));
}

/* The mask of table k is its filled slots less what it declares lacking. */
static void check_table(const char *name, const struct kernel_ops *k)
{
    uint64_t ops = kern_table_ops(k);
    for (int op = 0; op < KERN_OP_COUNT; op++) {
        bool want = slot_filled(k, (enum kern_op)op) && !(k->lacks & KERN_OP_BIT(op));
        CHECK_MSG(!!(ops & KERN_OP_BIT(op)) == want, "%s: %s", name,
                  kern_op_name((enum kern_op)op));
    }
    CHECK(k->to_host && k->to_device);
    CHECK(!k->attention || k->attention_scratch);
    /* every op of a removed slot goes, and nothing else */
    for (int op = 0; op < KERN_OP_COUNT; op++) {
        struct kernel_ops t = *k;
        slot_clear(&t, (enum kern_op)op);
        uint64_t left = kern_table_ops(&t);
        CHECK_MSG(!(left & KERN_OP_BIT(op)), "%s without %s", name, kern_op_name((enum kern_op)op));
        for (int o = 0; o < KERN_OP_COUNT; o++)
            if ((ops & KERN_OP_BIT(o)) && !(left & KERN_OP_BIT(o)))
                CHECK(!slot_filled(&t, (enum kern_op)o));
    }
}

TEST(tables)
{
    check_table("cpu", &cpu_kernel_ops);
    /* both backends run every op today */
    CHECK(kern_table_ops(&cpu_kernel_ops) == ALL_OPS);
    CHECK(cpu_kernel_ops.attention_max_head_dim == 0);
    const struct kernel_ops *cuda = cuda_kernel_table();
    if (cuda) {
        check_table("cuda", cuda);
        CHECK(kern_table_ops(cuda) == ALL_OPS);
        CHECK(cuda->attention_max_head_dim > 0); /* its attention holds a row in registers */
    } else {
        printf("built without CUDA: its table not checked\n");
    }
    /* a declared lack */
    struct kernel_ops t = cpu_kernel_ops;
    t.lacks = BIT(SWIGLU) | BIT(LINEAR_BIAS);
    CHECK(kern_table_ops(&t) == (ALL_OPS & ~(BIT(SWIGLU) | BIT(LINEAR_BIAS))));
}

TEST(devices)
{
    struct device *d = NULL, *r = NULL;
    CHECK(device_open_cpu(0, MiB, &d) == 0);
    CHECK(kern_supported(d) == kern_table_ops(&cpu_kernel_ops));
    for (int op = 0; op < KERN_OP_COUNT; op++)
        CHECK(kern_supports(d, (enum kern_op)op));
    CHECK(kern_attention_max_head_dim(d) == 0);
    CHECK(kern_check(d, ALL_OPS, 100000) == 0);
    /* another process's device answers for its owner's kind */
    CHECK(device_open_view(1, DEVICE_CPU, "cpu:0", MiB, &r) == 0);
    CHECK(kern_supported(r) == kern_table_ops(&cpu_kernel_ops));
    device_close(r);
    r = NULL;
    const struct kernel_ops *cuda = cuda_kernel_table();
    int rc = device_open_view(1, DEVICE_CUDA, "cuda:0", MiB, &r);
    if (cuda) {
        CHECK(rc == 0);
        CHECK(r && kern_supported(r) == kern_table_ops(cuda));
        CHECK(r && kern_attention_max_head_dim(r) == cuda->attention_max_head_dim);
        CHECK(r && kern_check(r, BIT(ATTENTION), cuda->attention_max_head_dim) == 0);
        CHECK(r &&
              kern_check(r, BIT(ATTENTION), cuda->attention_max_head_dim + 1) == ERR_UNSUPPORTED);
        CHECK(has(err_msg(), "device 1/cuda:0 runs attention up to head_dim"));
        /* a quantized model's block types, GGUF's and compressed-tensors', run
         * on a GPU */
        CHECK(r &&
              kern_check(r, kern_weight_ops(DTYPE_Q4_K) | kern_weight_ops(DTYPE_Q6_K), 64) == 0);
        CHECK(r && kern_check(r, CT_OPS, 64) == 0);
    } else {
        CHECK(rc == ERR_UNSUPPORTED && r == NULL);
    }
    device_close(r);
    device_close(d);
}

/* The wrappers refuse what the table lacks, naming the op and the device,
 * and run the rest. */
TEST(wrappers_refuse)
{
    struct device *d = NULL;
    struct stream *s = NULL;
    CHECK(device_open_cpu(0, MiB, &d) == 0);
    CHECK(device_stream_create(d, &s) == 0);
    struct kernel_ops t = cpu_kernel_ops;
    t.rmsnorm = NULL;
    t.lacks = BIT(SWIGLU) | BIT(LINEAR_BIAS) | BIT(W_Q4_K);
    t.attention_max_head_dim = 8;
    d->kern = &t;

    CHECK(!kern_supports(d, KERN_OP_RMSNORM) && kern_supports(d, KERN_OP_LAYERNORM));
    CHECK(!kern_supports(d, KERN_OP_SWIGLU) && kern_supports(d, KERN_OP_GEGLU));
    CHECK(!kern_supports(d, KERN_OP_LINEAR_BIAS) && kern_supports(d, KERN_OP_LINEAR));
    CHECK(kern_supported(d) ==
          (ALL_OPS & ~(BIT(RMSNORM) | BIT(SWIGLU) | BIT(LINEAR_BIAS) | BIT(W_Q4_K))));

    enum { M = 2, N = 16 };
    float x[M * N], y[M * N], g[M * N], w[N * N], b[N];
    for (int i = 0; i < M * N; i++)
        x[i] = g[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < N * N; i++)
        w[i] = (float)(i % 5) * 0.1f;
    for (int i = 0; i < N; i++)
        b[i] = 1.0f;
    CHECK(kern_rmsnorm(s, y, x, M, N, g, 1e-5f) == ERR_UNSUPPORTED);
    CHECK_MSG(has(err_msg(), "cpu:0") && has(err_msg(), "rmsnorm"), "%s", err_msg());
    CHECK(kern_layernorm(s, y, x, M, N, NULL, NULL, 1e-5f) == 0);
    CHECK(kern_gated_act(s, y, x, g, M * N, KERN_ACT_SILU) == ERR_UNSUPPORTED);
    CHECK_MSG(strcmp(err_msg(), "device cpu:0 has no swiglu kernel") == 0, "%s", err_msg());
    CHECK(kern_gated_act(s, y, x, g, M * N, KERN_ACT_GELU) == 0);
    struct weight_view wv = {.data = w, .dtype = DTYPE_F32, .rows = N, .cols = N, .ld = N};
    CHECK(kern_linear(s, y, x, M, &wv, b, KERN_COMPUTE_F32) == ERR_UNSUPPORTED);
    CHECK_MSG(has(err_msg(), "linear_bias"), "%s", err_msg());
    CHECK(kern_linear(s, y, x, M, &wv, NULL, KERN_COMPUTE_F32) == 0);
    /* a block type the table lacks, for a product and a lookup; one it has runs */
    static unsigned char qw[2 * 144];
    static float qx[256], qy[2 * 256];
    const int32_t id0 = 0;
    struct weight_view qv = {.data = qw, .dtype = DTYPE_Q4_K, .rows = 2, .cols = 256, .ld = 256};
    CHECK(kern_linear(s, qy, qx, 1, &qv, NULL, KERN_COMPUTE_F32) == ERR_UNSUPPORTED);
    CHECK_MSG(strcmp(err_msg(), "device cpu:0 has no Q4_K weights kernel") == 0, "%s", err_msg());
    CHECK(kern_embed(s, qy, &qv, &id0, 1, 0) == ERR_UNSUPPORTED);
    qv.dtype = DTYPE_Q8_0; /* 8 blocks of 34 bytes: a row fits in the buffer */
    qv.rows = 1;
    CHECK(kern_linear(s, qy, qx, 1, &qv, NULL, KERN_COMPUTE_F32) == 0);
    CHECK(kern_embed(s, qy, &qv, &id0, 1, 0) == 0);
    /* attention past the declared head_dim */
    struct kv_geom geom = {.batch = 1, .heads = 1, .kv_heads = 1, .head_dim = N, .max_t = M};
    float kc[M * N] = {0}, vc[M * N] = {0}, out[M * N], scratch[64];
    uint8_t key_ok[M] = {1, 1};
    CHECK(kern_attention(s, out, x, kc, vc, key_ok, &geom, 0, M, scratch) == ERR_UNSUPPORTED);
    CHECK_MSG(strcmp(err_msg(), "device cpu:0 runs attention up to head_dim 8, not 16") == 0, "%s",
              err_msg());
    geom.head_dim = 8;
    CHECK(kern_attention(s, out, x, kc, vc, key_ok, &geom, 0, 1, scratch) == 0);

    /* kern_check names every op missing, then the limit */
    CHECK(kern_check(d, BIT(LINEAR) | BIT(RMSNORM), 0) == ERR_UNSUPPORTED);
    CHECK_MSG(strcmp(err_msg(), "device cpu:0 has no rmsnorm kernel") == 0, "%s", err_msg());
    CHECK(kern_check(d, BIT(RMSNORM) | BIT(SWIGLU) | BIT(ADD), 0) == ERR_UNSUPPORTED);
    CHECK_MSG(strcmp(err_msg(), "device cpu:0 has no kernels for rmsnorm, swiglu") == 0, "%s",
              err_msg());
    CHECK(kern_check(d, BIT(ATTENTION), 8) == 0);
    CHECK(kern_check(d, BIT(ATTENTION), 9) == ERR_UNSUPPORTED);
    CHECK(kern_check(d, BIT(ADD), 9) == 0); /* no attention: no limit */

    device_stream_destroy(s);
    device_close(d);
}

/* The fixtures and the kernels their configs call. */
static const struct {
    const char *dir;
    uint64_t ops;
} fixtures[] = {
#define HEAD (BIT(GATHER_ROWS) | BIT(LINEAR))
#define OPT                                                                                        \
    (HEAD | BIT(EMBED) | BIT(ADD) | BIT(LAYERNORM) | BIT(SCALE) | BIT(KV_APPEND) | BIT(ATTENTION))
#define LLAMA                                                                                      \
    (HEAD | BIT(EMBED) | BIT(RMSNORM) | BIT(ROPE) | BIT(SCALE) | BIT(KV_APPEND) | BIT(ATTENTION) | \
     BIT(ADD) | BIT(SWIGLU))
    {"pre_ln_f32", OPT | BIT(RELU) | BIT(LINEAR_BIAS)},
    {"post_ln_proj", OPT | BIT(RELU) | BIT(LINEAR_BIAS) | BIT(COPY)},
    {"bf16_nobias_untied", OPT | BIT(GELU)},
    {"llama_gqa_f32", LLAMA},
    {"mistral_headdim_f32", LLAMA},
    {"qwen2_bias_f32", LLAMA | BIT(LINEAR_BIAS)},
    {"qwen3_qknorm_bf16", LLAMA},
    {"phi3_partial_f32", LLAMA},
    {"phi3_longrope_f32", LLAMA},
    {"mistral_window_f32", LLAMA | BIT(ATTENTION_WINDOW)},
    {"qwen2_window_f32", LLAMA | BIT(LINEAR_BIAS) | BIT(ATTENTION_WINDOW)},
    {"gemma2_softcap_f32", (LLAMA & ~BIT(SWIGLU)) | BIT(GEGLU_TANH) | BIT(ATTENTION_WINDOW) |
                               BIT(ATTENTION_SOFTCAP) | BIT(SOFTCAP)},
    {"gemma3_qknorm_bf16", (LLAMA & ~BIT(SWIGLU)) | BIT(GEGLU_TANH) | BIT(ATTENTION_WINDOW)},
    {"mixtral_moe_f32", LLAMA | BIT(COMBINE_ROWS) | BIT(ROUTE_TOPK)},
    {"qwen3_moe_bf16", LLAMA | BIT(COMBINE_ROWS) | BIT(ROUTE_TOPK)},
    {"qwen2_moe_f32", LLAMA | BIT(LINEAR_BIAS) | BIT(COMBINE_ROWS) | BIT(ROUTE_TOPK)},
#undef HEAD
#undef OPT
#undef LLAMA
};
#define N_FIXTURES (sizeof(fixtures) / sizeof(fixtures[0]))

static void fixture_dir(const char *name, char *dir, size_t cap)
{
    snprintf(dir, cap, "%s/%s", FIXTURES, name);
}

TEST(required_ops)
{
    char dir[512];
    for (size_t i = 0; i < N_FIXTURES; i++) {
        fixture_dir(fixtures[i].dir, dir, sizeof(dir));
        struct model_config *c = NULL;
        CHECK_MSG(model_config_load(dir, &c) == 0, "%s", err_msg());
        if (!c)
            continue;
        uint64_t ops = model_required_ops(c);
        CHECK_MSG(ops == fixtures[i].ops, "%s: 0x%llx, expected 0x%llx", fixtures[i].dir,
                  (unsigned long long)ops, (unsigned long long)fixtures[i].ops);
        model_config_free(c);
    }
}

/* A device that runs only what a model's mask names runs its forward: the
 * mask covers every kernel the forward calls. */
TEST(required_ops_run)
{
    char dir[512];
    for (size_t i = 0; i < N_FIXTURES; i++) {
        fixture_dir(fixtures[i].dir, dir, sizeof(dir));
        struct model_config *c = NULL;
        CHECK(model_config_load(dir, &c) == 0);
        if (!c)
            continue;
        struct kernel_ops t = restricted(&cpu_kernel_ops, model_required_ops(c));
        t.attention_max_head_dim = c->info.head_dim; /* the limit, met exactly */
        model_config_free(c);
        struct device *d = NULL;
        CHECK(device_open_cpu(0, 16 * MiB, &d) == 0);
        d->kern = &t;
        device_compute_thread_init(d);
        struct model *m = NULL;
        struct model_exec *ex = NULL;
        int rc = model_open_on(dir, d, NULL, &m);
        CHECK_MSG(rc == 0, "%s: %s", fixtures[i].dir, err_msg());
        struct model_exec_shape shape = {.batch = 2, .max_len = 8};
        if (m)
            CHECK_MSG(model_exec_open(m, &shape, &ex) == 0, "%s: %s", fixtures[i].dir, err_msg());
        if (ex) {
            const int32_t ids[6] = {1, 5, 9, 2, 7, 3};
            const uint8_t mask[6] = {1, 1, 1, 0, 1, 1};
            float *logits = malloc((size_t)2 * model_info(m)->vocab * sizeof(float));
            rc = model_forward(m, ex, ids, mask, 3, false, logits);
            CHECK_MSG(rc == 0, "%s: prefill: %s", fixtures[i].dir, err_msg());
            const int32_t next[2] = {4, 6};
            const uint8_t one[2] = {1, 1};
            rc = model_forward(m, ex, next, one, 1, false, logits);
            CHECK_MSG(rc == 0, "%s: decode: %s", fixtures[i].dir, err_msg());
            bool finite = true;
            for (int v = 0; v < 2 * model_info(m)->vocab; v++)
                finite = finite && isfinite(logits[v]);
            CHECK(finite);
            free(logits);
        }
        model_exec_free(ex);
        model_close(m);
        CHECK(device_used(d) == 0);
        device_close(d);
    }
}

TEST(register_refused)
{
    char llama[512], opt[512], gelu[512];
    fixture_dir("llama_gqa_f32", llama, sizeof(llama));
    fixture_dir("pre_ln_f32", opt, sizeof(opt));
    fixture_dir("bf16_nobias_untied", gelu, sizeof(gelu));
    struct device *devs[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++)
        CHECK(device_open_cpu(i, 16 * MiB, &devs[i]) == 0);
    struct kernel_ops t = cpu_kernel_ops;
    t.rmsnorm = NULL;
    devs[1]->kern = &t;
    struct swap_config cfg = {.host_budget = 64 * MiB};
    struct swap_manager *mgr = NULL;
    CHECK(swap_manager_create(devs, 2, &cfg, &mgr) == 0);
    static const int on0[1] = {0}, on1[1] = {1}, both[2] = {0, 1};
    struct placement one = {.tp = 1, .pp = 1, .devices = on1};
    struct swap_model *m = NULL;

    /* llama needs rmsnorm: refused on cpu:1, alone or as one shard of two */
    CHECK(swap_register(mgr, "llama", llama, &one, false, &m) == ERR_UNSUPPORTED && !m);
    CHECK_MSG(has(err_msg(), "model llama: device cpu:1 has no rmsnorm kernel"), "%s", err_msg());
    CHECK(!strchr(err_msg(), '\n'));
    struct placement two = {.tp = 2, .pp = 1, .devices = both};
    CHECK(swap_register(mgr, "llama2", llama, &two, false, &m) == ERR_UNSUPPORTED && !m);
    CHECK_MSG(has(err_msg(), "device cpu:1 has no rmsnorm kernel"), "%s", err_msg());
    two.tp = 1, two.pp = 2; /* a pipeline stage on it: the same */
    CHECK(swap_register(mgr, "llama3", llama, &two, false, &m) == ERR_UNSUPPORTED && !m);
    struct placement zero = {.tp = 1, .pp = 1, .devices = on0};
    CHECK_MSG(swap_register(mgr, "llama", llama, &zero, false, &m) == 0 && m, "%s", err_msg());
    /* OPT calls no rmsnorm */
    CHECK_MSG(swap_register(mgr, "opt", opt, &one, false, &m) == 0 && m, "%s", err_msg());

    /* a kind of activation declared lacking: OPT's relu, not gelu */
    t.lacks = BIT(RELU);
    CHECK(swap_register(mgr, "opt-relu", opt, &one, false, &m) == ERR_UNSUPPORTED && !m);
    CHECK_MSG(has(err_msg(), "model opt-relu: device cpu:1 has no relu kernel"), "%s", err_msg());
    CHECK_MSG(swap_register(mgr, "opt-gelu", gelu, &one, false, &m) == 0 && m, "%s", err_msg());
    /* the attention limit: llama_gqa's heads are of 16 */
    t.rmsnorm = cpu_kernel_ops.rmsnorm;
    t.lacks = 0;
    t.attention_max_head_dim = 8;
    CHECK(swap_register(mgr, "llama-hd", llama, &one, false, &m) == ERR_UNSUPPORTED && !m);
    CHECK_MSG(has(err_msg(), "device cpu:1 runs attention up to head_dim 8, not 16"), "%s",
              err_msg());
    t.attention_max_head_dim = 16;
    CHECK_MSG(swap_register(mgr, "llama-16", llama, &one, false, &m) == 0 && m, "%s", err_msg());

    swap_manager_destroy(mgr);
    for (int i = 0; i < 2; i++) {
        CHECK(device_used(devs[i]) == 0);
        device_close(devs[i]);
    }
}

/* The one-device commands' path (model_open_on) refuses alike, leaving the
 * device as it was. */
TEST(open_on_refused)
{
    char llama[512], opt[512];
    fixture_dir("llama_gqa_f32", llama, sizeof(llama));
    fixture_dir("pre_ln_f32", opt, sizeof(opt));
    struct device *d = NULL;
    CHECK(device_open_cpu(0, 16 * MiB, &d) == 0);
    struct kernel_ops t = cpu_kernel_ops;
    t.rope = NULL;
    t.rmsnorm = NULL;
    d->kern = &t;
    struct model *m = NULL;
    CHECK(model_open_on(llama, d, NULL, &m) == ERR_UNSUPPORTED && !m);
    CHECK_MSG(has(err_msg(), llama) &&
                  has(err_msg(), "device cpu:0 has no kernels for rmsnorm, rope"),
              "%s", err_msg());
    CHECK(device_used(d) == 0);
    CHECK_MSG(model_open_on(opt, d, NULL, &m) == 0 && m, "%s", err_msg());
    model_close(m);
    device_close(d);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
