/* The greedy references of a fixture model (tests/fixtures/models/NAME/
 * expected.json, following "same_as"): three prompts and transformers'
 * greedy continuations. Include after test.h. */
#ifndef SHARDSWAP_TESTS_FIXTURE_EXPECT_H
#define SHARDSWAP_TESTS_FIXTURE_EXPECT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIXTURES SHARDSWAP_SOURCE_DIR "/tests/fixtures/models"

struct expect {
    int n_prompt, n_out;
    int32_t prompt[16], out[16];
};

/* Whether fixture directory `name` holds an OPT model (its config.json says
 * "model_type": "opt"; a missing config.json counts as OPT, so the test
 * that needs it fails on it). Every OPT fixture has bf16 references; of the
 * Llama family's (tools/make_llama_fixtures.py) only those stored in bf16. */
static inline bool fixture_is_opt(const char *name)
{
    char path[8192];
    snprintf(path, sizeof(path), "%s/%s/config.json", FIXTURES, name);
    json_t *j = json_load_file(path, 0, NULL);
    const char *mt = json_string_value(json_object_get(j, "model_type"));
    bool opt = mt && strcmp(mt, "opt") == 0;
    json_decref(j);
    return opt || !j;
}

/* Whether fixture `name` has the file `file`. */
static inline bool fixture_has(const char *name, const char *file)
{
    char path[8192];
    snprintf(path, sizeof(path), "%s/%s/%s", FIXTURES, name, file);
    FILE *f = fopen(path, "rb");
    if (f)
        fclose(f);
    return f != NULL;
}

/* A JSON array of token ids as a malloc'd array (the caller frees it);
 * *n its length. */
static inline int32_t *json_ids(json_t *arr, int *n)
{
    *n = (int)json_array_size(arr);
    int32_t *ids = malloc((size_t)(*n ? *n : 1) * sizeof(int32_t));
    for (int i = 0; ids && i < *n; i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(arr, (size_t)i));
    return ids;
}

/* Steps of greedy continuation g that are decided by the model: all n of
 * them, or those before the first whose margin (bf16 references) is below
 * margin_min. */
static inline int decided_steps(json_t *g, int n, double margin_min)
{
    json_t *margins = json_object_get(g, "margins");
    for (int i = 0; margins && i < n && i < (int)json_array_size(margins); i++)
        if (json_real_value(json_array_get(margins, (size_t)i)) < margin_min)
            return i;
    return n;
}

/* Fills x[0..3) from fixture `name`; a missing or short file fails checks. */
static inline void expect_load(const char *name, struct expect x[3])
{
    char path[600];
    snprintf(path, sizeof(path), "%s/%s/expected.json", FIXTURES, name);
    json_t *j = json_load_file(path, 0, NULL);
    CHECK_MSG(j != NULL, "%s", path);
    json_t *same = json_object_get(j, "same_as");
    if (same) {
        snprintf(path, sizeof(path), "%s/%s/expected.json", FIXTURES, json_string_value(same));
        json_decref(j);
        j = json_load_file(path, 0, NULL);
        CHECK_MSG(j != NULL, "%s", path);
    }
    json_t *g = json_object_get(j, "greedy");
    CHECK(json_array_size(g) >= 3);
    for (int i = 0; i < 3; i++) {
        json_t *e = json_array_get(g, (size_t)i);
        json_t *p = json_object_get(e, "prompt"), *o = json_object_get(e, "output");
        x[i].n_prompt = (int)json_array_size(p);
        x[i].n_out = (int)json_array_size(o);
        CHECK(x[i].n_prompt >= 1 && x[i].n_prompt <= 16 && x[i].n_out >= 1 && x[i].n_out <= 16);
        for (int k = 0; k < x[i].n_prompt && k < 16; k++)
            x[i].prompt[k] = (int32_t)json_integer_value(json_array_get(p, (size_t)k));
        for (int k = 0; k < x[i].n_out && k < 16; k++)
            x[i].out[k] = (int32_t)json_integer_value(json_array_get(o, (size_t)k));
    }
    json_decref(j);
}

#endif
