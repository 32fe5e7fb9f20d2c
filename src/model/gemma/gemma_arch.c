/* The Gemma family's entry in the family table. Its heads and MLP units
 * shard as the Llama family's do, so it shares that family's checks. */
#include "model/gemma/gemma.h"
#include "model/llama/llama.h"

static const char *const gemma_model_types[] = {"gemma2", "gemma3_text", "gemma3", NULL};

const struct arch_ops gemma_arch = {
    .name = "gemma",
    .model_types = gemma_model_types,
    .config_size = sizeof(struct gemma_config),
    .weights_size = sizeof(struct gemma_weights),
    .layer_size = sizeof(struct gemma_layer),
    .config_parse = gemma_config_parse,
    .config_save = gemma_config_save,
    .describe = gemma_describe,
    .shard_check = llama_shard_check,
    .shard_init = llama_shard_init,
    .plan = gemma_plan,
    .exec_dims = gemma_exec_dims,
    .exec_prepare = gemma_exec_prepare,
    .embed = gemma_embed,
    .layer = gemma_layer,
    .head = gemma_head,
    .required_ops = gemma_required_ops,
    .preset_names = "gemma-2-2b|gemma-3-1b",
    .preset = gemma_preset,
    .tensors = gemma_tensors,
};
