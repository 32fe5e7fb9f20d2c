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
};
