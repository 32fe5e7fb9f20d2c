/* The Hugging Face config.json of an OPT checkpoint: every field that changes
 * the computation, validated. */
#ifndef SHARDSWAP_FORMAT_OPT_CONFIG_H
#define SHARDSWAP_FORMAT_OPT_CONFIG_H

#include <stdbool.h>

#include "core/dtype.h"

enum opt_act {
    OPT_ACT_RELU,
    OPT_ACT_GELU,      /* exact, erf-based ("gelu") */
    OPT_ACT_GELU_TANH, /* tanh approximation ("gelu_new", "gelu_pytorch_tanh", "gelu_fast") */
    OPT_ACT_SILU,      /* "silu", "swish" */
};

struct opt_config {
    int hidden;              /* hidden_size */
    int ffn;                 /* ffn_dim */
    int n_layers;            /* num_hidden_layers */
    int n_heads;             /* num_attention_heads */
    int vocab;               /* vocab_size */
    int max_pos;             /* max_position_embeddings (the table has max_pos + 2 rows) */
    int embed_dim;           /* word_embed_proj_dim (== hidden unless project_in/out exist) */
    bool pre_ln;             /* do_layer_norm_before */
    bool final_ln;           /* pre_ln && !_remove_final_layer_norm */
    bool bias;               /* enable_bias */
    bool ln_affine;          /* layer_norm_elementwise_affine */
    bool tie_embeddings;     /* tie_word_embeddings */
    enum opt_act act;        /* activation_function */
    int pad_id, bos_id, eos_id;
    enum dtype torch_dtype;  /* storage dtype the checkpoint declares (F32 when absent) */
};

/* Reads DIR/config.json. Errors name the file and the field: a missing
 * required field, a wrong JSON type, a value out of range, an architecture
 * other than OPT, an activation we do not implement. */
int opt_config_load(const char *dir, struct opt_config *cfg);

/* The same from a JSON text already in memory (`what` names it in errors). */
int opt_config_parse(const char *json, const char *what, struct opt_config *cfg);

/* Writes cfg as a transformers-style config.json (for gen-model). */
int opt_config_save(const struct opt_config *cfg, const char *dir);

const char *opt_act_name(enum opt_act a);

#endif
