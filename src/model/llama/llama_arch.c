/* The Llama family's entry in the family table. */
#include "model/llama/llama.h"

static const char *const llama_model_types[] = {
    "llama", "mistral", "qwen2", "qwen3", "phi3", "mixtral", "qwen3_moe", "qwen2_moe", NULL};

const struct arch_ops llama_arch = {
    .name = "llama",
    .model_types = llama_model_types,
    .config_size = sizeof(struct llama_config),
    .weights_size = sizeof(struct llama_weights),
    .layer_size = sizeof(struct llama_layer),
    .config_parse = llama_config_parse,
    .config_save = llama_config_save,
    .describe = llama_describe,
    .shard_check = llama_shard_check,
    .shard_init = llama_shard_init,
    .plan = llama_plan,
    .exec_dims = llama_exec_dims,
    .exec_prepare = llama_exec_prepare,
    .embed = llama_embed,
    .layer = llama_layer,
    .head = llama_head,
    .required_ops = llama_required_ops,
    .preset_names =
        "llama-3.2-1b|llama-3.1-8b|qwen2.5-0.5b|qwen2.5-7b|qwen3-0.6b|qwen3-8b|phi-3-mini|"
        "mistral-7b|mixtral-8x7b|qwen3-30b-a3b|tinyllama-1.1b|"
        "llama-3-tiny|qwen2.5-tiny|llama-2-tiny",
    .preset = llama_preset,
    .tensors = llama_tensors,
    .lora_layer = "model.layers.%d.",
    .lora_modules = {[LORA_Q] = "self_attn.q_proj",
                     [LORA_K] = "self_attn.k_proj",
                     [LORA_V] = "self_attn.v_proj",
                     [LORA_O] = "self_attn.o_proj",
                     [LORA_GATE] = "mlp.gate_proj",
                     [LORA_UP] = "mlp.up_proj",
                     [LORA_DOWN] = "mlp.down_proj"},
    .lora_refused = {"self_attn.qkv_proj", "mlp.gate_up_proj"},
    .lora_outside = {"model.embed_tokens", "lm_head"},
};
