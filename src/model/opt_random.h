/* Random-weight OPT checkpoints in Hugging Face layout, for tests, demos and
 * benchmarks: the shapes of the published OPT models, initialised as
 * transformers initialises OPT (normal std 0.02, zero biases, unit
 * LayerNorms, a zero padding row), so activations are realistic. */
#ifndef SHARDSWAP_MODEL_OPT_RANDOM_H
#define SHARDSWAP_MODEL_OPT_RANDOM_H

#include <stddef.h>
#include <stdint.h>

#include "format/opt_config.h"

/* Fills cfg with the shape of a published OPT model ("opt-125m" ... "opt-30b"). */
int opt_preset(const char *name, struct opt_config *cfg);
/* "opt-125m|opt-350m|..." for help texts. */
const char *opt_preset_names(void);

struct opt_random_opts {
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
int opt_random_write(const struct opt_config *cfg, const char *dir,
                     const struct opt_random_opts *opts);

/* Total bytes of the weights cfg describes in dtype (tied head not stored). */
uint64_t opt_checkpoint_bytes(const struct opt_config *cfg, enum dtype dtype);

#endif
