/* transformers' greedy continuations of a fixture (expected.json's "greedy"
 * array) against model_generate on model m, wherever its weights are (the CPU's
 * mapped checkpoint or a device). Include after test.h and fixture_expect.h. */
#ifndef SHARDSWAP_TESTS_FIXTURE_GREEDY_H
#define SHARDSWAP_TESTS_FIXTURE_GREEDY_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/generate.h"
#include "model/model.h"
#include "model/sampler.h"

/* Every continuation must equal transformers' ids; with bf16 references
 * only up to the first step whose margin is below margin_min (a tie). */
static inline void check_greedy(const char *label, struct model *m, json_t *greedy,
                                double margin_min)
{
    struct sampler_params sp = {.temperature = 0, .top_p = 1};
    for (size_t i = 0; i < json_array_size(greedy); i++) {
        json_t *g = json_array_get(greedy, i);
        int n_prompt, n_exp;
        int32_t *prompt = json_ids(json_object_get(g, "prompt"), &n_prompt);
        int32_t *exp = json_ids(json_object_get(g, "output"), &n_exp);
        int max_new = (int)json_integer_value(json_object_get(g, "max_new_tokens"));
        int32_t *got = malloc((size_t)(max_new + 1) * sizeof(int32_t));
        struct sampler s;
        int n_got = 0;
        CHECK(sampler_init(&s, &sp) == 0);
        int rc = model_generate(m, prompt, n_prompt, max_new, &s, NULL, NULL, got, &n_got);
        CHECK_MSG(rc == 0, "%s: generate %zu: %s", label, i, err_msg());
        /* transformers keeps the EOS it stopped at; model_generate stops there */
        int n_cmp = n_exp;
        if (n_exp > 0 && exp[n_exp - 1] == model_info(m)->eos_ids[0] && n_exp < max_new)
            n_cmp = n_exp - 1;
        int decided = decided_steps(g, n_cmp, margin_min);
        bool same = decided < n_cmp ? n_got >= decided : n_got == n_cmp;
        same = same && memcmp(got, exp, (size_t)decided * sizeof(int32_t)) == 0;
        CHECK_MSG(rc == 0 && same,
                  "%s: greedy continuation %zu differs (got %d tokens, expected %d)", label, i,
                  n_got, n_cmp);
        if (decided < n_cmp)
            printf("%s: continuation %zu compared for its first %d of %d tokens (then a bf16 "
                   "tie)\n",
                   label, i, decided, n_cmp);
        sampler_free(&s);
        free(prompt);
        free(exp);
        free(got);
    }
    printf("%s: %zu greedy continuations checked\n", label, json_array_size(greedy));
}

#endif
