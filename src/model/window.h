/* Which layers attend within a sliding window: config.json's "layer_types"
 * ("sliding_attention" / "full_attention" per layer, transformers 5), or a
 * rule when it is absent. Shared by the families that declare windows
 * (Mistral, Qwen2, Gemma 2 and 3). Internal to model/. */
#ifndef SHARDSWAP_MODEL_WINDOW_H
#define SHARDSWAP_MODEL_WINDOW_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define MODEL_MAX_LAYERS 4096

/* One bit per layer: set where the layer attends within the window. */
struct layer_windows {
    uint64_t bits[MODEL_MAX_LAYERS / 64];
};

static inline bool layer_windowed(const struct layer_windows *w, int layer)
{
    return (w->bits[layer / 64] >> (layer % 64)) & 1;
}

static inline void layer_window_set(struct layer_windows *w, int layer)
{
    w->bits[layer / 64] |= (uint64_t)1 << (layer % 64);
}

/* The rule transformers applies when config.json has no layer_types. */
enum layer_rule {
    LAYERS_ALL,     /* every layer (Mistral) */
    LAYERS_FROM,    /* layers >= arg (Qwen2's max_window_layers) */
    LAYERS_PATTERN, /* all but every arg-th: (i + 1) % arg != 0 (Gemma's sliding_window_pattern) */
};

/* Reads "layer_types" of root into *out when present (an array of
 * n_layers strings, each "sliding_attention" or "full_attention"), else
 * (or root NULL) applies the rule. 0, or ERR_FORMAT naming the field. */
int layer_windows_parse(json_t *root, const char *what, int n_layers, enum layer_rule rule, int arg,
                        struct layer_windows *out);

/* "layer_types" for config.json: a new JSON array. */
json_t *layer_windows_json(const struct layer_windows *w, int n_layers);

#endif
