/* The KV cache of a layer attending within a sliding window is a ring of
 * window + (the longest step) - 1 positions per sequence (model/exec.c,
 * kv_geom.ring), on the committed window fixtures (tools/make_window_fixtures.py:
 * Mistral with every layer windowed, Qwen2 with use_sliding_window from
 * max_window_layers, Gemma 2 and 3 with local and global layers; window 4,
 * contexts of up to 21 positions, so the rings wrap several times).
 *
 * - rows: which layers keep a ring, and its size, per shape.
 * - bytes: a long context of a windowed model costs what its rings and its
 *   global layers hold: the stated bytes.
 * - engine_admits: the engine sizes a request's batch by its rings: a
 *   device with room for the model and a ring-sized batch, short of a
 *   whole cache, admits and serves a request decoding past the window.
 * - decode_fixtures: decoding past the window with the rings (one token a
 *   step, steps of 6, a prompt longer than the window in one prefill, the
 *   left-padded batch) equals recomputation within 1e-5 (f32), the
 *   fixtures' transformers logits within their tolerance (1e-4) and their
 *   greedy ids; bitwise equal to the whole cache on the CPU as long as no
 *   step reads across a ring's end (the same products in the same order);
 *   past that the keys before and after the ring's end are summed in two
 *   products, so within 1e-5. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/stack.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "test.h"

#include "fixture_expect.h"

#define WINDOW 4 /* every window fixture's */

/* Each window fixture and which of its layers attend within the window. */
static const struct {
    const char *name;
    int layers;
    bool local[4];
} fixtures[] = {
    {"mistral_window_f32", 2, {true, true}},
    {"qwen2_window_f32", 3, {false, true, true}},
    {"gemma2_softcap_f32", 4, {true, false, true, false}},
    {"gemma3_mm_text_f32", 4, {true, false, true, false}},
    {"gemma3_qknorm_bf16", 4, {true, true, false, true}}, /* sliding_window_pattern 3 */
};
#define N_FIXTURES (int)(sizeof(fixtures) / sizeof(fixtures[0]))

static struct model *open_fixture(const char *name)
{
    char dir[600];
    snprintf(dir, sizeof(dir), "%s/%s", FIXTURES, name);
    struct model *m = NULL;
    int rc = model_open(dir, &m);
    CHECK_MSG(rc == 0, "%s: %s", name, err_msg());
    if (m)
        model_set_compute(m, KERN_COMPUTE_F32);
    return m;
}

TEST(rows)
{
    for (int f = 0; f < N_FIXTURES; f++) {
        struct model *m = open_fixture(fixtures[f].name);
        if (!m)
            continue;
        /* decode steps: the window; steps of 6: window + 5; steps as long
         * as the context: no ring (it would not be shorter) */
        const struct {
            int max_tokens, ring;
        } shapes[] = {{2, WINDOW}, {12, WINDOW + 5}, {0, 0}};
        for (int s = 0; s < 3; s++) {
            struct model_exec *ex = NULL;
            struct model_exec_shape sh = {
                .batch = 2, .max_len = 40, .max_tokens = shapes[s].max_tokens};
            CHECK(model_exec_open_cpu(m, &sh, &ex) == 0);
            for (int l = 0; ex && l < fixtures[f].layers; l++) {
                int want = fixtures[f].local[l] && shapes[s].ring ? shapes[s].ring : 40;
                CHECK_MSG(model_exec_kv_rows(ex, l) == want,
                          "%s layer %d, steps of %d: %d rows, "
                          "expected %d",
                          fixtures[f].name, l, shapes[s].max_tokens / 2, model_exec_kv_rows(ex, l),
                          want);
            }
            model_exec_free(ex);
        }
        model_close(m);
    }
}

/* A context of 64 positions (the fixtures' max_position_embeddings) for two
 * sequences decoding one token a step, against one of 16: only the global
 * layers' caches and the key mask grow. */
TEST(bytes)
{
    const int B = 2, KVH = 2, HD = 16, F = 4;
    const struct {
        const char *name;
        int global, local;
    } cases[] = {{"mistral_window_f32", 0, 2}, {"gemma2_softcap_f32", 2, 2}};
    for (int c = 0; c < 2; c++) {
        struct model *m = open_fixture(cases[c].name);
        if (!m)
            continue;
        struct model_exec_shape longer = {.batch = B, .max_len = 64, .max_tokens = B},
                                shorter = {.batch = B, .max_len = 16, .max_tokens = B};
        size_t big = model_exec_bytes(m, NULL, &longer),
               small = model_exec_bytes(m, NULL, &shorter);
        /* k and v of every global layer for 48 more positions, and the key
         * mask (one byte a position, 64-byte rounded: 32 -> 64, 128) */
        size_t want = (size_t)cases[c].global * 2 * B * KVH * 48 * HD * F + (128 - 64);
        printf("%s: a batch of %d x 64 positions decoding takes %zu bytes, of 16 %zu: %zu more "
               "(expected %zu; a whole cache on the local layers would add %zu)\n",
               cases[c].name, B, big, small, big - small, want,
               (size_t)cases[c].local * 2 * B * KVH * 48 * HD * F);
        CHECK_MSG(big - small == want, "%s: %zu more bytes, expected %zu", cases[c].name,
                  big - small, want);
        /* the local layers' rings: WINDOW positions of k and v each */
        struct model_exec *ex = NULL;
        CHECK(model_exec_open_cpu(m, &longer, &ex) == 0);
        size_t ring_bytes = 0;
        for (int l = 0; ex && l < cases[c].global + cases[c].local; l++)
            if (model_exec_kv_rows(ex, l) < 64)
                ring_bytes += (size_t)2 * B * KVH * model_exec_kv_rows(ex, l) * HD * F;
        CHECK(ring_bytes == (size_t)cases[c].local * 2 * B * KVH * WINDOW * HD * F);
        model_exec_free(ex);
        model_close(m);
    }
}

/* Runs ids (B, n) (mask NULL: all real) through a fresh context of
 * max_tokens (0: no limit, so no ring) in steps of `step` positions, every
 * position's logits into out (B, n, V). */
static int run_steps(struct model *m, const int32_t *ids, const uint8_t *mask, int B, int n,
                     int step, int max_tokens, float *out)
{
    const int V = model_info(m)->vocab;
    struct model_exec *ex = NULL;
    struct model_exec_shape sh = {
        .batch = B, .max_len = n, .max_tokens = max_tokens, .max_rows = B * step};
    int rc = model_exec_open_cpu(m, &sh, &ex);
    int32_t *cid = malloc((size_t)B * step * sizeof(int32_t));
    uint8_t *cmask = malloc((size_t)B * step);
    float *lg = malloc((size_t)B * step * V * sizeof(float));
    for (int t0 = 0; rc == 0 && t0 < n; t0 += step) {
        int t_new = n - t0 < step ? n - t0 : step;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < t_new; t++) {
                cid[b * t_new + t] = ids[b * n + t0 + t];
                cmask[b * t_new + t] = mask ? mask[b * n + t0 + t] : 1;
            }
        rc = model_forward(m, ex, cid, cmask, t_new, true, lg);
        for (int b = 0; rc == 0 && b < B; b++)
            memcpy(out + ((size_t)b * n + t0) * V, lg + (size_t)b * t_new * V,
                   (size_t)t_new * V * sizeof(float));
    }
    model_exec_free(ex);
    free(cid);
    free(cmask);
    free(lg);
    return rc;
}

/* Greedy continuation g (prompt + transformers' output) through the rings
 * in three schedules against recomputation and the reference ids. */
static void check_sequence(const char *name, int local, struct model *m, json_t *g)
{
    const int V = model_info(m)->vocab;
    int n_prompt, n_out;
    int32_t *prompt = json_ids(json_object_get(g, "prompt"), &n_prompt);
    int32_t *out = json_ids(json_object_get(g, "output"), &n_out);
    const int n = n_prompt + n_out - 1; /* the last output is predicted, never fed */
    int32_t *seq = malloc((size_t)n * sizeof(int32_t));
    memcpy(seq, prompt, (size_t)n_prompt * sizeof(int32_t));
    memcpy(seq + n_prompt, out, (size_t)(n_out - 1) * sizeof(int32_t));
    float *full = malloc((size_t)n * V * sizeof(float)),
          *ring = malloc((size_t)n * V * sizeof(float));
    CHECK(run_steps(m, seq, NULL, 1, n, n, 0, full) == 0);
    /* one token a step (a ring of the window), steps of 6 (window + 5),
     * the prompt in one prefill then single tokens (window + prompt - 1,
     * shorter than the context) */
    const int steps[3] = {1, 6, n_prompt};
    for (int s = 0; s < 3; s++) {
        int rc;
        if (s < 2) {
            rc = run_steps(m, seq, NULL, 1, n, steps[s], steps[s], ring);
        } else {
            struct model_exec *ex = NULL;
            rc = model_exec_open_cpu(
                m,
                &(struct model_exec_shape){
                    .batch = 1, .max_len = n, .max_tokens = n_prompt, .max_rows = n_prompt},
                &ex);
            CHECK(!ex || model_exec_kv_rows(ex, local) == WINDOW + n_prompt - 1);
            if (rc == 0)
                rc = model_forward(m, ex, seq, NULL, n_prompt, true, ring);
            for (int t = n_prompt; rc == 0 && t < n; t++)
                rc = model_forward(m, ex, seq + t, NULL, 1, true, ring + (size_t)t * V);
            model_exec_free(ex);
        }
        CHECK_MSG(rc == 0, "%s: %s", name, err_msg());
        double e = test_rel_err(ring, full, (size_t)n * V);
        printf("%s: %d positions in steps of %d through the rings vs recomputation: rel err "
               "%.2e\n",
               name, n, steps[s], e);
        CHECK_MSG(e <= 1e-5, "%s: steps of %d: rel err %.3e > 1e-5", name, steps[s], e);
        /* transformers' greedy ids, predicted from the prompt on */
        for (int i = 0; i < n_out; i++) {
            const float *row = ring + (size_t)(n_prompt - 1 + i) * V;
            int best = 0;
            for (int v = 1; v < V; v++)
                best = row[v] > row[best] ? v : best;
            CHECK_MSG(best == out[i], "%s: steps of %d: output %d is %d, transformers %d", name,
                      steps[s], i, best, out[i]);
        }
    }
    free(prompt);
    free(out);
    free(seq);
    free(full);
    free(ring);
}

/* The fixture's left-padded batch one token a step, through rings of the
 * window, against transformers' logits and the whole cache. */
static void check_batch(const char *name, struct model *m, json_t *batch,
                        const struct st_tensor *ref, double tol)
{
    json_t *jid = json_object_get(batch, "input_ids"),
           *jmask = json_object_get(batch, "attention_mask");
    const int B = (int)json_array_size(jid), T = (int)json_array_size(json_array_get(jid, 0));
    const int V = model_info(m)->vocab;
    CHECK_MSG(ref && ref->nbytes == (size_t)B * T * V * 4 && T > WINDOW, "%s: reference logits",
              name);
    if (!ref || ref->nbytes != (size_t)B * T * V * 4)
        return;
    int32_t *ids = malloc((size_t)B * T * sizeof(int32_t));
    uint8_t *mask = malloc((size_t)B * T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            ids[b * T + t] = (int32_t)json_integer_value(json_array_get(json_array_get(jid, b), t));
            mask[b * T + t] =
                (uint8_t)json_integer_value(json_array_get(json_array_get(jmask, b), t));
        }
    float *ring = malloc((size_t)B * T * V * sizeof(float));
    float *whole = malloc((size_t)B * T * V * sizeof(float));
    CHECK(run_steps(m, ids, mask, B, T, 1, B, ring) == 0);
    CHECK(run_steps(m, ids, mask, B, T, 1, 0, whole) == 0);
    double worst = 0, vs_whole = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            size_t o = ((size_t)b * T + t) * V;
            /* no read crosses a ring's end before the window is full */
            if (t < WINDOW)
                CHECK_MSG(memcmp(ring + o, whole + o, (size_t)V * sizeof(float)) == 0,
                          "%s: sequence %d position %d: the ring differs from the whole cache",
                          name, b, t);
            double e = test_rel_err(ring + o, whole + o, (size_t)V);
            vs_whole = e > vs_whole ? e : vs_whole;
            if (!mask[b * T + t])
                continue;
            e = test_rel_err(ring + o, (const float *)ref->data + o, (size_t)V);
            worst = e > worst ? e : worst;
        }
    printf("%s: batch %dx%d one token a step through rings of %d: rel err %.2e vs transformers "
           "(tolerance %.0e), %.2e vs the whole cache (bitwise over the first %d)\n",
           name, B, T, WINDOW, worst, tol, vs_whole, WINDOW);
    CHECK_MSG(worst <= tol, "%s: rel err %.3e > %.0e", name, worst, tol);
    CHECK_MSG(vs_whole <= 1e-5, "%s: vs the whole cache %.3e > 1e-5", name, vs_whole);
    free(ids);
    free(mask);
    free(ring);
    free(whole);
}

TEST(decode_fixtures)
{
    for (int f = 0; f < N_FIXTURES; f++) {
        const char *name = fixtures[f].name;
        char path[600];
        snprintf(path, sizeof(path), "%s/%s/expected.json", FIXTURES, name);
        json_t *exp = json_load_file(path, 0, NULL);
        CHECK_MSG(exp != NULL, "%s", path);
        snprintf(path, sizeof(path), "%s/%s/expected_logits.safetensors", FIXTURES, name);
        struct st_checkpoint *ref = NULL;
        CHECK_MSG(st_open(path, &ref) == 0, "%s: %s", path, err_msg());
        struct model *m = open_fixture(name);
        if (exp && ref && m) {
            double tol = json_real_value(json_object_get(exp, "tolerance"));
            check_batch(name, m, json_object_get(exp, "batch"), st_find(ref, "logits"),
                        tol > 0 && tol <= 1e-4 ? tol : 1e-4);
            int local = 0;
            while (!fixtures[f].local[local])
                local++;
            json_t *greedy = json_object_get(exp, "greedy");
            for (size_t i = 0; i < json_array_size(greedy); i++)
                check_sequence(name, local, m, json_array_get(greedy, i));
        }
        model_close(m);
        st_close(ref);
        json_decref(exp);
    }
}

/* A request of 9 + 40 tokens to Mistral (every layer windowed) on one CPU
 * device with room for its weights and the batch its rings need, less than
 * a whole cache would: admitted ("can it ever fit" counts the rings), its
 * reserve fits, and it decodes transformers' greedy ids past the window. */
TEST(engine_admits)
{
    const char *name = "mistral_window_f32";
    struct expect x[3];
    expect_load(name, x);
    const struct expect *e = &x[1]; /* the 9-token prompt */
    const int gen = 40, B = 1, KVH = 2, HD = 16, F = 4, LAYERS = 2;
    char dir[600];
    snprintf(dir, sizeof(dir), "%s/%s", FIXTURES, name);
    struct model *m = open_fixture(name);
    if (!m || e->n_prompt != 9)
        return;
    /* the engine's batch of this one request: 64 positions (the model's
     * every one), steps of at most the prompt: rings of 4 + 9 - 1 */
    struct model_exec_shape sh =
        engine_batch_shape(model_info(m)->max_pos, B, e->n_prompt, e->n_prompt + gen, true);
    CHECK(sh.max_len == 64 && sh.max_tokens == 9);
    const size_t batch = model_exec_bytes(m, NULL, &sh);
    const size_t whole_more = (size_t)LAYERS * 2 * B * KVH * (64 - (WINDOW + 9 - 1)) * HD * F;
    model_close(m);
    uint64_t weights = 0, unused = 0;
    CHECK(model_device_bytes(dir, NULL, &weights, &unused) == 0);
    /* room for the rings and a little, short of a whole cache by far */
    const uint64_t budget = weights + batch + whole_more / 4;
    CHECK(weights + batch + whole_more > budget); /* a whole cache is refused at submit */
    printf("%s: weights %llu bytes, a batch of 9 + %d tokens %zu with rings (a whole cache: "
           "%zu more); budget %llu\n",
           name, (unsigned long long)weights, gen, batch, whole_more, (unsigned long long)budget);
    struct stack_model_config mc = {.name = "mistral", .path = dir};
    struct stack_config c = {.n_devices = 1,
                             .device_budget = {budget},
                             .engine = {.policy = "swapwise", .max_batch = 1},
                             .models = &mc,
                             .n_models = 1,
                             .compute = "f32"};
    struct stack *st = NULL;
    int rc = stack_open(&c, &st);
    CHECK_MSG(rc == 0 && st, "stack_open: %s", err_msg());
    if (!st)
        return;
    struct engine_request_params p = {.model_name = "mistral",
                                      .prompt = e->prompt,
                                      .n_prompt = e->n_prompt,
                                      .max_tokens = gen,
                                      .sampling = {.temperature = 0, .top_p = 1, .seed = 1}};
    struct engine_req *r = NULL;
    rc = engine_submit(st->engine, &p, &r);
    CHECK_MSG(rc == 0 && r, "submit: %s", err_msg());
    if (r) {
        int status = engine_req_wait(r), n = 0;
        CHECK_MSG(status == 0, "status %d: %s", status, engine_req_error(r));
        const int32_t *out = engine_req_output(r, &n);
        int cmp = n < e->n_out ? n : e->n_out;
        CHECK_MSG(cmp == e->n_out && memcmp(out, e->out, (size_t)cmp * sizeof(int32_t)) == 0,
                  "%d tokens; transformers' first %d differ", n, e->n_out);
        printf("%s: served 9 + %d tokens (%d generated) in rings of %d\n", name, gen, n,
               WINDOW + 9 - 1);
        engine_req_release(r);
    }
    engine_drain(st->engine);
    stack_close(st);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
