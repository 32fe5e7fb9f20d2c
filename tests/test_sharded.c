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

static void check_layout(const char *name, const char *dir, int tp, int pp,
                         enum kern_compute compute, const float *pre, const float *steps,
                         const int32_t *step_ids)
{
    struct rig g;
    struct group_exec *gb = NULL;
    int rc = rig_open(&g, name, dir, tp, pp);
    struct swap_manager *mgr = g.mgr;
    struct workers *w = g.w;
    struct swap_model *model = g.model;
    CHECK_MSG(rc == 0, "%s tp %d pp %d: %s", name, tp, pp, err_msg());
    if (rc == 0) {
        swap_model_set_compute(model, compute);
        const int V = swap_model_info(model)->vocab;
        int32_t ids[B * T];
        uint8_t mask[B * T];
        make_batch(V, ids, mask);
        float *got = malloc((size_t)B * T * V * sizeof(float));
        CHECK(swap_load(mgr, model, NULL) == 0);
        CHECK(swap_use_begin(mgr, model) == 0);
        /* steps of at most the prefill: a windowed layer's cache is a ring
         * of window + T - 1 positions, which the decode steps wrap */
        const struct model_exec_shape shape = {
            .batch = B, .max_len = T + 4, .max_tokens = B * T, .max_rows = B * T};
        CHECK(group_exec_create(mgr, model, &shape, &gb) == 0);
        CHECK_MSG(group_forward(w, gb, ids, mask, T, true, true, got) == 0, "%s", err_msg());
        double worst = 0;
        for (int i = 0; i < B * T; i++)
            if (mask[i])
                worst = fmax(worst, test_rel_err(got + (size_t)i * V, pre + (size_t)i * V, (size_t)V));
        double worst_step = 0;
        for (int s = 0; s < 4; s++) {
            CHECK(group_forward(w, gb, &step_ids[s * B], NULL, 1, false, true, got) == 0);
            worst_step = fmax(worst_step, test_rel_err(got, steps + (size_t)s * B * V, (size_t)B * V));
        }
        const double tol = compute == KERN_COMPUTE_BF16 ? TOL_BF16 : TOL;
        printf("%-20s %-4s tp %d pp %d: prefill rel err %.1e, decode rel err %.1e\n", name,
               kern_compute_name(compute), tp, pp, worst, worst_step);
        CHECK_MSG(worst <= tol && worst_step <= tol, "%s tp %d pp %d: %.3e / %.3e", name, tp, pp,
                  worst, worst_step);
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
    make_batch(V, ids, mask);
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
    make_batch(V, ids, mask);
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

static void check_model(const char *name, const char *dir)
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
                                                                .layer_end = c.n_layers}) == 0)
                    check_layout(name, dir, tps[i], pps[j], compute, pre, steps, step_ids);
    }
    model_config_free(mc);
    free(pre);
    free(steps);
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
        check_model(fixtures[i], dir);
    }
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
    check_model("generated-v1001", tmp);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
    CHECK(system(cmd) == 0);
    return test_finish();
}
