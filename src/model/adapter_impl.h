/* An adapter's config and a shard's views (model/adapter.h). Internal to
 * model/. */
#ifndef SHARDSWAP_MODEL_ADAPTER_IMPL_H
#define SHARDSWAP_MODEL_ADAPTER_IMPL_H

#include "model/adapter.h"
#include "model/arch.h"

/* The most layers a base of an adapter may have. */
#define ADAPTER_MAX_LAYERS 512

/* adapter_config.json read against the base: info is the base's (so the
 * generic shard checks and the family's shard_init see the base's
 * numbers), arch is adapter_arch. */
struct adapter_config {
    struct model_config base;
    const struct arch_ops *base_arch;
    int max_r;
    int r[ADAPTER_MAX_LAYERS][LORA_SLOTS];       /* rank of layer l's pair at a slot; 0: none */
    float scale[ADAPTER_MAX_LAYERS][LORA_SLOTS]; /* lora_alpha / r, or / sqrt(r) (rsLoRA) */
};

static inline const struct adapter_config *adapter_cfg(const struct model_config *c)
{
    return ARCH_CONFIG(struct adapter_config, c);
}

/* A shard's views of local layer i (model.layers): a pair per slot, no
 * a.data where the adapter does not target it. */
struct adapter_layer {
    struct lora_pair pair[LORA_SLOTS];
};

extern const struct arch_ops adapter_arch;

/* y (n rows) += each sequence's adapter's pair at `slot` of local layer
 * `layer` applied to x: kern_lora over the runs of sequences that share an
 * adapter (the base's runs add nothing). 0 at once when the batch has no
 * adapters. */
int model_block_lora(const struct model *m, struct model_exec *ex, int layer, enum lora_slot slot,
                     float *y, const float *x, int t_new);

#endif
