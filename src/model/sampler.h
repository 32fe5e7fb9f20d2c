/* Next-token selection: greedy, or temperature, then top-k, then top-p
 * (nucleus), the order transformers applies its logits warpers in. Each
 * request owns a sampler with its own seeded generator, so the same seed and
 * parameters give the same tokens whatever else shares the batch. */
#ifndef SHARDSWAP_MODEL_SAMPLER_H
#define SHARDSWAP_MODEL_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/rng.h"

struct sampler_params {
    float temperature; /* 0 = greedy (argmax) */
    int top_k;         /* 0 = off */
    float top_p;       /* 1 = off; (0, 1] */
    uint64_t seed;
};

struct sampler {
    struct sampler_params p;
    struct rng rng;
    /* scratch for sorting candidates; grown on demand, owned */
    float *prob;
    int32_t *idx, *tmp;
    int cap;
    bool nonfinite; /* some pick saw NaN or Inf logits (sticky) */
};

/* True once a pick of s has seen NaN or Inf among the logits. */
static inline bool sampler_nonfinite(const struct sampler *s)
{
    return s->nonfinite;
}

/* The first index of the largest of x[0..n) (NaNs never win; 0 when all are
 * NaN), with *all_finite false when some x is NaN or infinite. */
int32_t logits_argmax(const float *x, int n, bool *all_finite);

/* Validates p: temperature >= 0, top_k >= 0, 0 < top_p <= 1. */
int sampler_init(struct sampler *s, const struct sampler_params *p);
void sampler_free(struct sampler *s); /* frees scratch; s itself is the caller's */

/* Picks a token from logits[0..vocab). logits is scratch and may be overwritten. */
int32_t sampler_pick(struct sampler *s, float *logits, int vocab);


#endif
