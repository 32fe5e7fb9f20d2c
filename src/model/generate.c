#include "model/generate.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "model/adapter.h"

int model_generate_steps(struct model *m, struct model_exec *ex, const int32_t *prompt,
                         int n_prompt, float *logits, int32_t *next, generate_step_fn step,
                         void *ctx)
{
    /* prefill, then one forward per step */
    int rc = model_forward(m, ex, prompt, NULL, n_prompt, false, logits);
    for (int i = 0; rc == 0; i++) {
        if ((rc = step(ctx, i, logits, next)) != 0)
            return rc < 0 ? rc : 0;
        rc = model_forward(m, ex, next, NULL, 1, false, logits);
    }
    return rc;
}

/* model_generate's step: sample, stop at EOS, hand the token on. */
struct sample_ctx {
    const struct model_info *info;
    struct sampler *s;
    int max_tokens;
    generate_token_fn on_token;
    void *ctx;
    int32_t *out;
    int *n_out;
    bool warned;
};

static int sample_step(void *ctx, int i, float *logits, int32_t *next)
{
    struct sample_ctx *g = ctx;
    int32_t id = sampler_pick(g->s, logits, g->info->vocab);
    if (!g->warned && sampler_nonfinite(g->s)) {
        g->warned = true;
        fprintf(stderr, "shardswap: warning: NaN or Inf logits at generated token %d; the "
                        "model's weights or activations are not finite\n", i + 1);
    }
    if (model_info_is_eos(g->info, id))
        return 1;
    if (g->out)
        g->out[i] = id;
    (*g->n_out)++;
    if ((g->on_token && g->on_token(g->ctx, id)) || i + 1 == g->max_tokens)
        return 1;
    *next = id;
    return 0;
}

int model_generate(struct model *m, const int32_t *prompt, int n_prompt, int max_tokens,
                 struct sampler *s, generate_token_fn on_token, void *ctx, int32_t *out,
                 int *n_out)
{
    return model_generate_lora(m, NULL, prompt, n_prompt, max_tokens, s, on_token, ctx, out, n_out);
}

int model_generate_lora(struct model *m, const struct model *adapter, const int32_t *prompt,
                        int n_prompt, int max_tokens, struct sampler *s, generate_token_fn on_token,
                        void *ctx, int32_t *out, int *n_out)
{
    const struct model_info *c = model_info(m);
    *n_out = 0;
    if (n_prompt < 1)
        return err_set(ERR_INVALID, "the prompt has no tokens");
    if (n_prompt > c->max_pos)
        return err_set(ERR_INVALID, "the prompt has %d tokens, more than the model's %d positions",
                       n_prompt, c->max_pos);
    if (max_tokens < 0)
        return err_set(ERR_INVALID, "max_tokens must be >= 0 (got %d)", max_tokens);
    if (max_tokens > c->max_pos - n_prompt)
        max_tokens = c->max_pos - n_prompt; /* the position table ends there */
    if (max_tokens == 0)
        return 0;
    struct model_exec *ex = NULL;
    float *logits = malloc((size_t)c->vocab * sizeof(float));
    /* on the model's device (model_open_on), else on the host; the longest
     * step is the prompt (a windowed layer's ring is sized by it) */
    const struct model_exec_shape shape = {.batch = 1,
                                           .max_len = n_prompt + max_tokens,
                                           .max_tokens = n_prompt,
                                           .max_lora_rank =
                                               adapter ? model_adapter_rank(adapter) : 0};
    int rc = model_exec_open(m, &shape, &ex);
    if (rc < 0 || (adapter && (rc = model_exec_set_adapters(ex, &adapter)) < 0))
        goto out;
    if (!logits) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto out;
    }
    struct sample_ctx g = {.info = c, .s = s, .max_tokens = max_tokens, .on_token = on_token,
                           .ctx = ctx, .out = out, .n_out = n_out};
    int32_t next;
    rc = model_generate_steps(m, ex, prompt, n_prompt, logits, &next, sample_step, &g);
out:
    model_exec_free(ex);
    free(logits);
    return rc;
}
