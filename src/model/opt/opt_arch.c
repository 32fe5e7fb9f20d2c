/* OPT's entry in the family table. */
#include "model/opt/opt.h"

static const char *const opt_model_types[] = {"opt", NULL};

const struct arch_ops opt_arch = {
    .name = "opt",
    .model_types = opt_model_types,
    .config_size = sizeof(struct opt_config),
    .weights_size = sizeof(struct opt_weights),
    .layer_size = sizeof(struct opt_layer),
    .config_parse = opt_config_parse,
    .config_save = opt_config_save,
    .describe = opt_describe,
    .shard_check = opt_shard_check,
    .shard_init = opt_shard_init,
    .plan = opt_plan,
    .exec_dims = opt_exec_dims,
    .embed = opt_embed,
    .layer = opt_layer,
    .head = opt_head,
    .required_ops = opt_required_ops,
    .preset_names = "opt-125m|opt-350m|opt-1.3b|opt-2.7b|opt-6.7b|opt-13b|opt-30b",
    .preset = opt_preset,
    .tensors = opt_tensors,
    .lora_layer = "model.decoder.layers.%d.",
    .lora_modules = {[LORA_Q] = "self_attn.q_proj",
                     [LORA_K] = "self_attn.k_proj",
                     [LORA_V] = "self_attn.v_proj",
                     [LORA_O] = "self_attn.out_proj",
                     [LORA_UP] = "fc1",
                     [LORA_DOWN] = "fc2"},
    .lora_outside = {"model.decoder.embed_tokens", "model.decoder.embed_positions",
                     "model.decoder.project_in", "model.decoder.project_out", "lm_head"},
};
