/* Sharded execution equals the whole model: every fixture (and a generated
 * checkpoint with a vocabulary that no TP size divides) under TP in {1, 2, 4}
 * x PP in {1, 2}, loaded through the swap engine onto CPU devices and run by
 * the device workers, against model_forward on the unsharded model:
 *   - the left-padded batch's logits at every position, and
 *   - four decode steps through the sharded KV caches,
 * within max |diff| / max |ref| <= 1e-5 in f32 mode, every fixture (sums
 * happen in another order across ranks: f32 rounding, nothing more); and
 * bf16 checkpoints again in bf16 mode, their default, within 1e-2, as in
 * test_opt's KV-cache check: a last-bit difference of an f32 activation from
 * the other order can round it to the neighbouring bf16 value on its way into
 * the next linear layer (2^-8 relative).
 * The mixtures of experts again with their experts placed whole on the TP
 * ranks (expert parallelism) under TP {2, 4} x PP {1, 2}, the same bounds,
 * and in f32 mode the same greedy choice at every row; each rank's bytes
 * are its own experts' (model_expert_cost, the layout's blobs,
 * swap_layout_bytes_ep), and what expert parallelism refuses, in one line.
 * And a shard that fails: every other shard returns, the caller gets the
 * failing shard's error and message, and the batch stays failed. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "engine/workers.h"
#include "model/random.h"
#include "swap/swap.h"
#include "test.h"
#include "sharded_ref.h"
#include "swap_rig.h"
#include "tiny_opt.h"

#define FIXTURES SHARDSWAP_SOURCE_DIR "/tests/fixtures/models"
#define TOL 1e-5
#define TOL_BF16 1e-2

static int argmax(const float *l, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        best = l[i] > l[best] ? i : best;
    return best;
}

static void check_layout(const char *name, const char *dir, int tp, int pp, bool ep,
                         enum kern_compute compute, const float *pre, const float *steps,
                         const int32_t *step_ids)
{
    struct rig g;
    struct group_exec *gb = NULL;
    const char *how = ep ? " ep" : "";
    int rc = rig_open_placed(&g, name, dir, tp, pp, ep);
    struct swap_manager *mgr = g.mgr;
    struct workers *w = g.w;
    struct swap_model *model = g.model;
    CHECK_MSG(rc == 0, "%s tp %d pp %d: %s", name, tp, pp, err_msg());
    if (rc == 0) {
        swap_model_set_compute(model, compute);
        const int V = swap_model_info(model)->vocab;
        int32_t ids[B * T];
        uint8_t mask[B * T];
        ref_batch(V, ids, mask);
        float *got = malloc((size_t)B * T * V * sizeof(float));
        CHECK(swap_load(mgr, model, NULL) == 0);
        CHECK(swap_use_begin(mgr, model) == 0);
        /* steps of at most the prefill: a windowed layer's cache is a ring
         * of window + T - 1 positions, which the decode steps wrap */
        const struct model_exec_shape shape = {
            .batch = B, .max_len = T + 4, .max_tokens = B * T, .max_rows = B * T};
        CHECK(group_exec_create(mgr, model, &shape, &gb) == 0);
        CHECK_MSG(group_forward(w, gb, ids, mask, T, true, true, got) == 0, "%s", err_msg());
        /* the greedy choice of every row (f32 mode, where the bound is the
         * rounding of another summation order) */
        const bool greedy = ep && compute == KERN_COMPUTE_F32;
        int other = 0;
        double worst = 0;
        for (int i = 0; i < B * T; i++)
            if (mask[i]) {
                worst = fmax(worst, test_rel_err(got + (size_t)i * V, pre + (size_t)i * V, (size_t)V));
                other += greedy && argmax(got + (size_t)i * V, V) != argmax(pre + (size_t)i * V, V);
            }
        double worst_step = 0;
        for (int s = 0; s < 4; s++) {
            CHECK(group_forward(w, gb, &step_ids[s * B], NULL, 1, false, true, got) == 0);
            const float *ref = steps + (size_t)s * B * V;
            worst_step = fmax(worst_step, test_rel_err(got, ref, (size_t)B * V));
            for (int b = 0; greedy && b < B; b++)
                other += argmax(got + (size_t)b * V, V) != argmax(ref + (size_t)b * V, V);
        }
        const double tol = compute == KERN_COMPUTE_BF16 ? TOL_BF16 : TOL;
        printf("%-20s %-4s tp %d pp %d%s: prefill rel err %.1e, decode rel err %.1e\n", name,
               kern_compute_name(compute), tp, pp, how, worst, worst_step);
        CHECK_MSG(worst <= tol && worst_step <= tol, "%s tp %d pp %d%s: %.3e / %.3e", name, tp, pp,
                  how, worst, worst_step);
        CHECK_MSG(other == 0, "%s tp %d pp %d%s: %d rows chose another greedy id", name, tp, pp,
                  how, other);
        swap_use_end(mgr, model);
        free(got);
    }
    group_exec_free(gb);
    rig_close(&g);
}

/* A token id outside the vocabulary, which only the first stage checks (it
 * embeds): its shards fail before sending, and without the abort the later
 * stages would wait in comm_recv forever (alarm turns that hang into a
 * failure). The message is the first stage's, read on this thread. */
static void check_failure(const char *dir, int tp, int pp)
{
    struct rig g;
    struct group_exec *gb = NULL;
    CHECK(rig_open(&g, "failing", dir, tp, pp) == 0);
    struct swap_manager *mgr = g.mgr;
    struct workers *w = g.w;
    struct swap_model *model = g.model;
    CHECK(swap_load(mgr, model, NULL) == 0);
    CHECK(swap_use_begin(mgr, model) == 0);
    const int V = swap_model_info(model)->vocab;
    const struct model_exec_shape shape = {.batch = B, .max_len = T + 4, .max_rows = B * (T + 4)};
    int32_t ids[B * T];
    uint8_t mask[B * T];
    ref_batch(V, ids, mask);
    float *got = malloc((size_t)B * T * V * sizeof(float));
    CHECK(group_exec_create(mgr, model, &shape, &gb) == 0);
    ids[T - 1] = V + 5;
    err_set(ERR_OK, "%s", ""); /* no stale message on this thread */
    alarm(20);
    int rc = group_forward(w, gb, ids, mask, T, true, true, got);
    alarm(0);
    CHECK_MSG(rc == ERR_INVALID && strstr(err_msg(), "outside the vocabulary"),
              "tp %d pp %d: rc %d, message '%s'", tp, pp, rc, err_msg());
    CHECK(group_exec_failed(gb) == ERR_INVALID);
    /* the failed batch runs no more steps, even valid ones... */
    ref_batch(V, ids, mask);
    alarm(20);
    rc = group_forward(w, gb, ids, mask, T, true, true, got);
    alarm(0);
    CHECK_MSG(rc == ERR_INVALID && strstr(err_msg(), "earlier step"), "tp %d pp %d: '%s'", tp, pp,
              err_msg());
    group_exec_free(gb);
    gb = NULL;
    /* ...and a new batch on the same workers does */
    CHECK(group_exec_create(mgr, model, &shape, &gb) == 0);
    alarm(20);
    CHECK_MSG(group_forward(w, gb, ids, mask, T, true, true, got) == 0, "tp %d pp %d: %s", tp, pp,
              err_msg());
    alarm(0);
    CHECK(group_exec_failed(gb) == 0);
    group_exec_free(gb);
    swap_use_end(mgr, model);
    free(got);
    rig_close(&g);
}

static void check_model(const char *name, const char *dir, bool ep)
{
    struct model_config *mc = NULL;
    CHECK(model_config_load(dir, &mc) == 0);
    if (!mc)
        return;
    const struct model_info c = mc->info;
    size_t V = (size_t)c.vocab;
    float *pre = malloc((size_t)B * T * V * sizeof(float));
    float *steps = malloc((size_t)4 * B * V * sizeof(float));
    int32_t step_ids[4 * B];
    static const int tps[] = {1, 2, 4}, pps[] = {1, 2};
    /* f32 for every checkpoint; bf16 too for f16 and bf16 storage (an f16
     * checkpoint's shards hold bf16 there) */
    const int modes = c.dtype == DTYPE_F32 ? 1 : 2;
    for (int mode = 0; mode < modes; mode++) {
        const enum kern_compute compute = mode ? KERN_COMPUTE_BF16 : KERN_COMPUTE_F32;
        reference(dir, compute, pre, steps, step_ids);
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 2; j++)
                if (pps[j] <= c.n_layers &&
                    model_shard_check(mc, &(struct model_shard){.tp_size = tps[i],
                                                                .layer_end = c.n_layers}) == 0) {
                    check_layout(name, dir, tps[i], pps[j], false, compute, pre, steps, step_ids);
                    if (ep && tps[i] > 1)
                        check_layout(name, dir, tps[i], pps[j], true, compute, pre, steps,
                                     step_ids);
                }
    }
    model_config_free(mc);
    free(pre);
    free(steps);
}

/* Under expert parallelism each TP rank holds its own experts whole and
 * nothing of the others: its routed experts' bytes are its share of the
 * whole model's (every expert alike), and its layout and
 * swap_layout_bytes_ep differ from the split layout's by exactly the
 * experts' difference (the rest is planned alike). */
static void check_ep_bytes(const char *name, const char *dir)
{
    struct model_config *mc = NULL;
    struct st_checkpoint *ck = NULL;
    CHECK(model_config_load(dir, &mc) == 0 && st_open(dir, &ck) == 0);
    if (!mc || !ck) {
        model_config_free(mc);
        st_close(ck);
        return;
    }
    const int L = mc->info.n_layers;
    struct model *m = NULL;
    struct model_layout lay;
    size_t whole = 0;
    double macs;
    CHECK(model_shard_open(mc, ck, &(struct model_shard){.tp_size = 1, .layer_end = L}, &m, &lay) ==
          0);
    model_expert_cost(m, &whole, &macs);
    model_layout_free(&lay);
    model_close(m);
    /* the experts: the router's rows */
    const struct st_tensor *router = st_find(ck, "model.layers.0.block_sparse_moe.gate.weight");
    if (!router)
        router = st_find(ck, "model.layers.0.mlp.gate.weight");
    CHECK(router != NULL);
    const int n_experts = router ? (int)router->shape[0] : 1;
    static const int tps[] = {2, 4};
    for (int i = 0; i < 2; i++) {
        const int tp = tps[i];
        uint64_t dev_ep[4], dev_tp[4], host_ep, host_tp;
        CHECK_MSG(swap_layout_bytes_ep(dir, tp, 1, true, false, NULL, dev_ep, &host_ep) == 0, "%s",
                  err_msg());
        CHECK(swap_layout_bytes_ep(dir, tp, 1, false, false, NULL, dev_tp, &host_tp) == 0);
        for (int r = 0; r < tp; r++) {
            size_t bytes[2], blobs[2] = {0, 0};
            for (int ep = 0; ep < 2; ep++) {
                struct model_shard s = {
                    .tp_rank = r, .tp_size = tp, .layer_end = L, .expert_parallel = ep};
                CHECK_MSG(model_shard_open(mc, ck, &s, &m, &lay) == 0, "%s", err_msg());
                model_expert_cost(m, &bytes[ep], &macs);
                for (int b = 0; b < lay.n_blobs; b++)
                    blobs[ep] += lay.blob_bytes[b];
                model_layout_free(&lay);
                model_close(m);
            }
            int eb, ee;
            model_expert_range(
                &(struct model_shard){.tp_rank = r, .tp_size = tp, .expert_parallel = true},
                n_experts, &eb, &ee);
            printf("%-20s tp %d rank %d ep: experts %d..%d, %zu expert bytes (split: %zu), "
                   "%llu device bytes (split: %llu)\n",
                   name, tp, r, eb, ee - 1, bytes[1], bytes[0], (unsigned long long)dev_ep[r],
                   (unsigned long long)dev_tp[r]);
            CHECK_MSG(bytes[1] == whole / n_experts * (size_t)(ee - eb) && bytes[0] == whole / tp,
                      "%s tp %d rank %d: expert bytes %zu (split %zu) of %zu", name, tp, r,
                      bytes[1], bytes[0], whole);
            CHECK(blobs[1] - bytes[1] == blobs[0] - bytes[0]);
            CHECK(dev_ep[r] - bytes[1] == dev_tp[r] - bytes[0]);
        }
        CHECK(host_ep == host_tp); /* every expert once, either way */
    }
    st_close(ck);
    model_config_free(mc);
}

/* What expert parallelism refuses, before anything is allocated. */
static void check_ep_refused(void)
{
    struct model_config *mc = NULL;
    CHECK(model_config_load(FIXTURES "/llama_gqa_f32", &mc) == 0);
    struct model_shard s = {.tp_size = 2, .layer_end = 1, .expert_parallel = true};
    CHECK_MSG(mc && model_shard_check(mc, &s) == ERR_INVALID &&
                  strstr(err_msg(), "expert parallelism needs routed experts"),
              "'%s'", err_msg());
    model_config_free(mc);
    CHECK(model_config_load(FIXTURES "/pre_ln_f32", &mc) == 0);
    CHECK(mc && model_shard_check(mc, &s) == ERR_INVALID &&
          strstr(err_msg(), "expert parallelism needs routed experts"));
    model_config_free(mc);
    /* 2 experts over 4 ranks */
    CHECK(model_config_parse(
              "{\"model_type\": \"mixtral\", \"hidden_size\": 32, "
              "\"intermediate_size\": 16, \"num_attention_heads\": 4, "
              "\"num_key_value_heads\": 2, \"num_hidden_layers\": 2, "
              "\"vocab_size\": 256, \"max_position_embeddings\": 64, \"num_local_experts\": 2, "
              "\"num_experts_per_tok\": 1}",
              "config.json", &mc) == 0);
    s.tp_size = 4;
    int rc = mc ? model_shard_check(mc, &s) : 0;
    CHECK_MSG(rc == ERR_INVALID && strstr(err_msg(), "needs at least as many experts"), "'%s'",
              err_msg());
    model_config_free(mc);
}

int main(void)
{
    /* every fixture: OPT's, and the Llama family's (GQA with 2 KV heads split
     * at TP 2 and replicated at TP 4, MQA replicated, head_dim != hidden /
     * heads, q/k/v biases, tied heads) */
    static const char *fixtures[] = {
        "pre_ln_f32", "post_ln_proj", "pre_ln_f16", "bf16_nobias_untied", "no_final_ln",
        "decoder_prefix_f32", "llama_gqa_f32", "llama_mha_tied_f16", "llama_mqa_bf16",
        "mistral_headdim_f32", "qwen2_bias_f32",
        /* Qwen3 (per-head q/k norms), Phi-3 (fused qkv and gate_up split per rank,
         * partial rotary, LongRoPE's two tables) */
        "qwen3_qknorm_bf16", "phi3_partial_f32", "phi3_longrope_f32", "phi3_longrope_short_f32",
        /* Gemma 2 and 3 (soft-capping, q/k norms, MQA replicated),
         * and sliding windows shorter than the context */
        "gemma2_softcap_f32", "gemma3_qknorm_bf16", "gemma3_mm_text_f32", "mistral_window_f32",
        "qwen2_window_f32",
        /* mixtures of experts: each expert split across the TP ranks, the
         * router whole on each */
        "mixtral_moe_f32", "qwen3_moe_bf16", "qwen2_moe_f32"};
    char dir[512];
    for (size_t i = 0; i < sizeof(fixtures) / sizeof(fixtures[0]); i++) {
        snprintf(dir, sizeof(dir), "%s/%s", FIXTURES, fixtures[i]);
        const bool moe = strstr(fixtures[i], "moe") != NULL;
        check_model(fixtures[i], dir, moe);
        if (moe)
            check_ep_bytes(fixtures[i], dir);
    }
    check_ep_refused();
    snprintf(dir, sizeof(dir), "%s/pre_ln_f32", FIXTURES);
    check_failure(dir, 1, 1);
    check_failure(dir, 1, 2);
    check_failure(dir, 2, 2);
    /* generated: 4 layers, a vocabulary of 1001 (uneven vocab-parallel blocks), f16 */
    char tmp[] = "/tmp/shardswap_sharded_XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    struct model_config *c = tiny_opt_config(4, 1001);
    struct model_random_opts o = {.dtype = DTYPE_F16, .seed = 9};
    CHECK(model_random_write(c, tmp, &o) == 0);
    model_config_free(c);
    check_model("generated-v1001", tmp, false);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
    CHECK(system(cmd) == 0);
    return test_finish();
}
