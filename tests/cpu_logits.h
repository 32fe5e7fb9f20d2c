/* A prompt's logits from model m on the CPU (its mapped checkpoint): every
 * position in one prefill, and the last two positions decoded one token at a
 * time against that prefill. Include after test.h. */
#ifndef SHARDSWAP_TESTS_CPU_LOGITS_H
#define SHARDSWAP_TESTS_CPU_LOGITS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

/* The logits of all n positions of ids (n x vocab, caller-owned) from one
 * prefill of a fresh context. */
static inline void cpu_prefill_logits(struct model *m, const int32_t *ids, int n, float *logits)
{
    uint8_t *mask = malloc((size_t)n);
    CHECK(mask != NULL);
    if (!mask)
        return;
    memset(mask, 1, (size_t)n);
    struct model_exec *ex;
    struct model_exec_shape shape = {.batch = 1, .max_len = n, .max_rows = n};
    CHECK(model_exec_open_cpu(m, &shape, &ex) == 0);
    CHECK(model_forward(m, ex, ids, mask, n, true, logits) == 0);
    model_exec_free(ex);
    free(mask);
}

/* The worst relative error of the last two positions of ids fed one token
 * at a time, after a prefill of the first n - 2 (n >= 3), against prefill,
 * cpu_prefill_logits' logits of the same ids. */
static inline double cpu_decode_err(struct model *m, const int32_t *ids, int n,
                                    const float *prefill, size_t vocab)
{
    uint8_t *mask = malloc((size_t)n);
    float *part = malloc(sizeof(float) * (size_t)n * vocab), *step = malloc(sizeof(float) * vocab);
    CHECK(mask && part && step);
    double worst = 0;
    if (mask && part && step) {
        memset(mask, 1, (size_t)n);
        struct model_exec *ex;
        struct model_exec_shape shape = {.batch = 1, .max_len = n, .max_rows = n};
        CHECK(model_exec_open_cpu(m, &shape, &ex) == 0);
        CHECK(model_forward(m, ex, ids, mask, n - 2, true, part) == 0);
        for (int t = n - 2; t < n; t++) {
            CHECK(model_forward(m, ex, &ids[t], NULL, 1, false, step) == 0);
            worst = fmax(worst, test_rel_err(step, prefill + (size_t)t * vocab, vocab));
        }
        model_exec_free(ex);
    }
    free(mask);
    free(part);
    free(step);
    return worst;
}

#endif
