#include "model/generate.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"

int model_generate(struct model *m, const int32_t *prompt, int n_prompt, int max_tokens,
                 struct sampler *s, generate_token_fn on_token, void *ctx, int32_t *out,
                 int *n_out)
{
    const struct model_info *c = m->info;
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
    /* on the model's device (model_open_on), else on the host */
    int rc = model_exec_open(m, &(struct model_exec_shape){.batch = 1, .max_len = n_prompt + max_tokens},
                           &ex);
    if (rc < 0)
        goto out;
    if (!logits) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto out;
    }
    /* prefill, then one step per token */
    if ((rc = model_forward(m, ex, prompt, NULL, n_prompt, false, logits)) < 0)
        goto out;
    bool warned = false;
    for (int i = 0; i < max_tokens; i++) {
        int32_t id = sampler_pick(s, logits, c->vocab);
        if (!warned && sampler_nonfinite(s)) {
            warned = true;
            fprintf(stderr, "shardswap: warning: NaN or Inf logits at generated token %d; the "
                            "model's weights or activations are not finite\n", i + 1);
        }
        if (model_info_is_eos(c, id))
            break;
        if (out)
            out[i] = id;
        (*n_out)++;
        if ((on_token && on_token(ctx, id)) || i + 1 == max_tokens)
            break;
        if ((rc = model_forward(m, ex, &id, NULL, 1, false, logits)) < 0)
            goto out;
    }
out:
    model_exec_free(ex);
    free(logits);
    return rc;
}
