/* Random-weight checkpoints in Hugging Face layout, for tests, demos and
 * benchmarks: the shapes of published models of every family (presets),
 * initialised as transformers initialises them (normal std 0.02, zero
 * biases, unit norms, a zero padding row), so activations are realistic. */
#ifndef SHARDSWAP_MODEL_RANDOM_H
#define SHARDSWAP_MODEL_RANDOM_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

/* The config of a published model ("opt-125m", "llama-3.2-1b", ...); the
 * caller frees it (model_config_free). ERR_INVALID naming the presets. */
int model_preset(const char *name, struct model_config **out);
/* "opt-125m|opt-350m|..." for help texts. */
const char *model_preset_names(void);

struct model_random_opts {
    enum dtype dtype;         /* storage dtype; also written as torch_dtype */
    uint64_t seed;
    uint64_t max_shard_bytes; /* 0 = transformers' default, 5 GB */
    /* called now and then with bytes written so far; may be NULL */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
};

/* Writes config.json, generation_config.json and model.safetensors (or
 * model-0000i-of-0000n.safetensors + model.safetensors.index.json when the
 * weights exceed max_shard_bytes) into dir, which must exist. */
int model_random_write(const struct model_config *cfg, const char *dir,
                       const struct model_random_opts *opts);

/* Writes a random PEFT LoRA adapter of base's shape into dir (which must
 * exist): adapter_config.json (r = rank, lora_alpha = 2 rank, every
 * projection the family adapts) and adapter_model.safetensors, A and B of
 * every layer's pairs in PEFT's names, normal std 0.02, in o->dtype with
 * o->seed. Only shapes and bytes: no reference of anything. */
int model_random_adapter_write(const struct model_config *base, const char *dir, int rank,
                               const struct model_random_opts *o);

/* Total bytes of the weights cfg describes in dtype (a tied head not stored). */
uint64_t model_checkpoint_bytes(const struct model_config *cfg, enum dtype dtype);

#endif
