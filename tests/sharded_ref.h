/* The batch and the reference every sharded-execution test compares
 * against (test_sharded: threads of one process; tests/mpi: processes): a
 * left-padded batch of 3 sequences of lengths 6, 3, 1 over 6 positions, and
 * the whole model's logits for it, the prefill at every position (B, T, V)
 * and then SHARDED_STEPS greedy steps (B, V) each, with the ids each step
 * was fed. */
#ifndef SHARDSWAP_TESTS_SHARDED_REF_H
#define SHARDSWAP_TESTS_SHARDED_REF_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "format/safetensors.h"
#include "model/model.h"
#include "test.h"

#include "ref_batch.h"

#define B REF_BATCH_B
#define T REF_BATCH_T
#define SHARDED_STEPS 4

/* Runs m over the batch (made here, for the caller in ids and mask): the
 * prefill's logits at every position into pre (B, T, V), then SHARDED_STEPS
 * greedy steps (B, V) each into steps, the ids each was fed into step_ids. */
static inline void greedy_run(struct model *m, int32_t *ids, uint8_t *mask, float *pre,
                              float *steps, int32_t *step_ids)
{
    const int V = model_info(m)->vocab;
    ref_batch(V, ids, mask);
    struct model_exec *kv;
    struct model_exec_shape shape = {
        .batch = B, .max_len = T + SHARDED_STEPS, .max_rows = B * (T + SHARDED_STEPS)};
    CHECK(model_exec_open_cpu(m, &shape, &kv) == 0);
    CHECK(model_forward(m, kv, ids, mask, T, true, pre) == 0);
    for (int s = 0; s < SHARDED_STEPS; s++) {
        for (int b = 0; b < B; b++) {
            const float *last =
                s == 0 ? pre + ((size_t)b * T + T - 1) * V : steps + ((size_t)(s - 1) * B + b) * V;
            int best = 0;
            for (int v = 1; v < V; v++)
                if (last[v] > last[best])
                    best = v;
            step_ids[s * B + b] = best;
        }
        CHECK(model_forward(m, kv, &step_ids[s * B], NULL, 1, false, steps + (size_t)s * B * V) ==
              0);
    }
    model_exec_free(kv);
}

/* compute: the precision of the reference's linear layers. The whole model
 * is copied onto a CPU device in that precision (model_open_on), so its
 * weights are what the shards hold (an f16 checkpoint's as bf16 in bf16
 * mode). */
static void reference(const char *dir, enum kern_compute compute, float *pre, float *steps,
                      int32_t *step_ids)
{
    struct model *m = NULL;
    struct device *dev = NULL;
    uint64_t weights, exec;
    int rc = model_device_bytes(dir, NULL, &weights, &exec);
    if (rc == 0 && (rc = device_open_cpu(0, weights + (1u << 20), &dev)) == 0)
        rc = model_open_on(dir, dev, &compute, &m);
    CHECK_MSG(rc == 0, "%s: %s", dir, err_msg());
    if (!m) {
        device_close(dev);
        return;
    }
    int32_t ids[B * T];
    uint8_t mask[B * T];
    greedy_run(m, ids, mask, pre, steps, step_ids);
    model_close(m);
    device_close(dev);
}

/* One sharded case over the checkpoint at a directory: its config and
 * tensors (to open shards from), the reference's logits and step ids, and
 * the batch, all owned until sharded_case_close. */
struct sharded_case {
    struct model_config *cfg;
    struct st_checkpoint *ck;
    int vocab, layers;
    float *pre, *steps; /* (B, T, V), then SHARDED_STEPS x (B, V) */
    int32_t step_ids[SHARDED_STEPS * B], ids[B * T];
    uint8_t mask[B * T];
};

/* False (a check failed, nothing to close) when the checkpoint does not
 * open. */
static inline bool sharded_case_open(const char *dir, struct sharded_case *c)
{
    *c = (struct sharded_case){0};
    CHECK(model_config_load(dir, &c->cfg) == 0 && st_open(dir, &c->ck) == 0);
    if (!c->cfg || !c->ck) {
        st_close(c->ck);
        model_config_free(c->cfg);
        return false;
    }
    c->vocab = c->cfg->info.vocab;
    c->layers = c->cfg->info.n_layers;
    c->pre = malloc(sizeof(float) * B * T * c->vocab);
    c->steps = malloc(sizeof(float) * SHARDED_STEPS * B * c->vocab);
    reference(dir, KERN_COMPUTE_F32, c->pre, c->steps, c->step_ids);
    ref_batch(c->vocab, c->ids, c->mask);
    return true;
}

static inline void sharded_case_close(struct sharded_case *c)
{
    free(c->pre);
    free(c->steps);
    st_close(c->ck);
    model_config_free(c->cfg);
}

#endif
