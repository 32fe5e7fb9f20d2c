/* The small OPT shape tests generate random models in: opt-125m's config
 * cut to hidden 128, 4 heads, ffn 256, 64 positions, with the layers and
 * vocabulary a test asks for. Include after test.h. */
#ifndef SHARDSWAP_TESTS_TINY_OPT_H
#define SHARDSWAP_TESTS_TINY_OPT_H

#include "model/opt_random.h"

static inline void tiny_opt_config(struct opt_config *c, int n_layers, int vocab)
{
    CHECK(opt_preset("opt-125m", c) == 0);
    c->hidden = c->embed_dim = 128;
    c->n_heads = 4;
    c->ffn = 256;
    c->n_layers = n_layers;
    c->vocab = vocab;
    c->max_pos = 64;
}

#endif
