/* Autoregressive generation: prefill the prompt, then one token per step
 * through the KV cache. model_generate does it for one sequence, sampled,
 * until EOS, max_tokens or the model's position limit; model_generate_steps
 * is its loop, for callers that choose each step's ids themselves (bench
 * forward: a batch, greedy, a fixed number of steps, timed). */
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

/* model_generate with the sequence's LoRA adapter (model/adapter.h: a
 * shard of m's, on m's device; NULL: the base alone). */
int model_generate_lora(struct model *m, const struct model *adapter, const int32_t *prompt,
                        int n_prompt, int max_tokens, struct sampler *s, generate_token_fn on_token,
                        void *ctx, int32_t *out, int *n_out);

/* One step of model_generate_steps, on its caller's thread: given the
 * logits of the last forward (batch rows of vocab; step 0: the prefill's),
 * which it may overwrite (a sampler does), writes each sequence's next id
 * into next (batch entries) and returns 0 to run them through the model, 1
 * to stop before that, or a negative error, which the loop returns. */
typedef int (*generate_step_fn)(void *ctx, int step, float *logits, int32_t *next);

/* The loop: a forward of prompt (batch x n_prompt ids, row-major, batch
 * being ex's), then step(ctx, 0, ...), a forward of the ids it chose,
 * step(ctx, 1, ...), ... until a step stops it. logits (batch x vocab) and
 * next (batch) are the caller's; ex (model_exec_open) must have room for
 * n_prompt + every forwarded step. 0 once a step stopped, or the first
 * error of a forward or a step. */
int model_generate_steps(struct model *m, struct model_exec *ex, const int32_t *prompt,
                         int n_prompt, float *logits, int32_t *next, generate_step_fn step,
                         void *ctx);

#endif
