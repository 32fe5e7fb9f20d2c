/* Autoregressive generation of one sequence: prefill the prompt, then one
 * token per step through the KV cache, until EOS, max_tokens or the model's
 * position limit. */
#ifndef SHARDSWAP_MODEL_GENERATE_H
#define SHARDSWAP_MODEL_GENERATE_H

#include <stdint.h>

#include "model/model.h"
#include "model/sampler.h"

/* Called with each new token (never EOS); a non-zero return stops generation. */
typedef int (*generate_token_fn)(void *ctx, int32_t id);

/* Generates up to max_tokens after prompt[0..n_prompt), computing where the
 * weights are: on m->dev (model_open_on, whose budget must hold a batch
 * of one sequence of n_prompt + max_tokens positions beside the weights) or,
 * for host views, on a CPU device of its own. out (max_tokens
 * entries, may be NULL) receives the ids; *n_out how many. */
int model_generate(struct model *m, const int32_t *prompt, int n_prompt, int max_tokens,
                 struct sampler *s, generate_token_fn on_token, void *ctx, int32_t *out,
                 int *n_out);

#endif
