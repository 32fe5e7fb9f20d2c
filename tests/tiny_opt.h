/* The small OPT shape tests generate random models in: opt-125m's config
 * cut to hidden 128, 4 heads, ffn 256, 64 positions, with the layers and
 * vocabulary a test asks for (the caller frees it with model_config_free).
 * Include after test.h. */
#ifndef SHARDSWAP_TESTS_TINY_OPT_H
#define SHARDSWAP_TESTS_TINY_OPT_H

#include "model/opt/opt.h"
#include "model/random.h"

static inline struct model_config *tiny_opt_config(int n_layers, int vocab)
{
    struct model_config *c = NULL;
    CHECK(model_preset("opt-125m", &c) == 0);
    if (!c)
        exit(1);
    struct model_info *in = &c->info;
    in->hidden = ((struct opt_config *)c)->embed_dim = 128;
    in->n_heads = in->n_kv_heads = 4;
    in->head_dim = 32;
    in->ffn = 256;
    in->n_layers = n_layers;
    in->vocab = vocab;
    in->max_pos = 64;
    return c;
}

#endif
