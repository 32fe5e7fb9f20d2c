/* config.json: defaults, every computation-changing field, and one specific
 * error for each kind of bad input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "model/gemma/gemma.h"
#include "model/llama/llama.h"
#include "model/opt/opt.h"
#include "test.h"

#define BASE "\"model_type\": \"opt\", \"hidden_size\": 64, \"ffn_dim\": 256, " \
             "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 300, " \
             "\"max_position_embeddings\": 128"

/* Parses json and checks it fails with `code` and a message containing `needle`. */
static void expect_error(const char *json, int code, const char *needle)
{
    struct model_config *mc = NULL;
    int rc = model_config_parse(json, "config.json", &mc);
    model_config_free(mc);
    CHECK_MSG(rc == code, "%s: got %d, expected %d (%s)", json, rc, code, err_msg());
    CHECK_MSG(strstr(err_msg(), needle) != NULL, "message \"%s\" lacks \"%s\"", err_msg(),
              needle);
}

/* OPT's config of json (the test fails when it does not parse). */
static struct opt_config parse_opt(const char *json)
{
    struct model_config *mc = NULL;
    struct opt_config c = {0};
    CHECK_MSG(model_config_parse(json, "config.json", &mc) == 0, "%s: %s", json, err_msg());
    if (mc) {
        CHECK(strcmp(mc->info.family, "opt") == 0);
        c = *ARCH_CONFIG(struct opt_config, mc);
    }
    model_config_free(mc);
    return c;
}

#define LDIMS "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, " \
              "\"max_position_embeddings\": 256"
#define LHEADS "\"num_attention_heads\": 8, \"vocab_size\": 300, " LDIMS
#define LBASE "\"model_type\": \"llama\", " LHEADS

/* The Llama family's config of json (the test fails when it does not parse). */
static struct llama_config parse_llama(const char *json)
{
    struct model_config *mc = NULL;
    struct llama_config c = {0};
    CHECK_MSG(model_config_parse(json, "config.json", &mc) == 0, "%s: %s", json, err_msg());
    if (mc) {
        CHECK(strcmp(mc->info.family, "llama") == 0);
        c = *ARCH_CONFIG(struct llama_config, mc);
    }
    model_config_free(mc);
    return c;
}

/* The Llama family: LlamaConfig's defaults, both spellings of the rotary
 * settings, each variant's quirks, and a one-line error for each hostile
 * config (before anything is sized). */
TEST(llama)
{
    struct llama_config c = parse_llama("{" LBASE "}");
    const struct model_info *in = &c.base.info;
    CHECK(in->n_kv_heads == 8 && in->head_dim == 8 && c.rot_dim == 8 && in->max_pos == 256);
    CHECK(c.rope == ROPE_DEFAULT && c.rope_theta == 10000 && c.act == KERN_ACT_SILU);
    CHECK(!c.qkv_bias && !c.o_bias && !c.mlp_bias && !c.tie_embeddings && in->n_eos == 0);
    CHECK(c.rms_eps == 1e-6 && in->bos_id == -1 && in->pad_id == -1);
    CHECK(strcmp(in->architecture, "LlamaForCausalLM") == 0);
    /* Hub spelling: rope_theta + rope_scaling; eos as a list; explicit head_dim */
    c = parse_llama("{" LBASE ", \"num_key_value_heads\": 2, \"head_dim\": 16, \"rope_theta\": "
                    "500000.0, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
                    "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                    "\"original_max_position_embeddings\": 64}, \"eos_token_id\": [2, 3, 4], "
                    "\"bos_token_id\": 1, \"attention_bias\": true, \"mlp_bias\": true}");
    CHECK(in->n_kv_heads == 2 && in->head_dim == 16 && c.rot_dim == 16 && c.rope == ROPE_LLAMA3);
    CHECK(c.rope_theta == 500000 && c.rope_factor == 8 && c.rope_orig_max_pos == 64);
    CHECK(in->n_eos == 3 && in->eos_ids[2] == 4 && in->bos_id == 1);
    CHECK(c.qkv_bias && c.o_bias && c.mlp_bias);
    /* transformers 5's spelling; "type" as older files say it */
    c = parse_llama("{" LBASE ", \"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": "
                    "2.0, \"rope_theta\": 1000.0}}");
    CHECK(c.rope == ROPE_LINEAR && c.rope_factor == 2 && c.rope_theta == 1000);
    c = parse_llama("{" LBASE ", \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0, "
                    "\"original_max_position_embeddings\": 128}}");
    CHECK(c.rope == ROPE_DYNAMIC && in->max_pos == 128); /* past it dynamic NTK would apply */
    c = parse_llama("{" LBASE ", \"partial_rotary_factor\": 0.5}");
    CHECK(c.rot_dim == 4);
    /* Qwen2: q/k/v biases always, none on o_proj; its window only when used */
    c = parse_llama("{\"model_type\": \"qwen2\", " LHEADS ", \"sliding_window\": 16, "
                    "\"use_sliding_window\": false}");
    CHECK(c.variant == LLAMA_VARIANT_QWEN2 && c.qkv_bias && !c.o_bias && in->max_pos == 256);
    /* Mistral's window applies to every layer and leaves the context whole */
    c = parse_llama("{\"model_type\": \"mistral\", " LHEADS ", \"sliding_window\": 32}");
    CHECK(c.variant == LLAMA_VARIANT_MISTRAL && in->max_pos == 256 && c.sliding_window == 32);
    CHECK(layer_windowed(&c.windows, 0) && layer_windowed(&c.windows, 1));
    /* Qwen2's window on the layers from max_window_layers, or as layer_types say */
    c = parse_llama("{\"model_type\": \"qwen2\", " LHEADS ", \"sliding_window\": 16, "
                    "\"use_sliding_window\": true, \"max_window_layers\": 1}");
    CHECK(c.sliding_window == 16 && !layer_windowed(&c.windows, 0) &&
          layer_windowed(&c.windows, 1) && in->max_pos == 256);
    c = parse_llama("{\"model_type\": \"qwen2\", " LHEADS ", \"sliding_window\": 16, "
                    "\"use_sliding_window\": true, \"layer_types\": [\"sliding_attention\", "
                    "\"full_attention\"]}");
    CHECK(layer_windowed(&c.windows, 0) && !layer_windowed(&c.windows, 1));
    expect_error("{\"model_type\": \"qwen2\", " LHEADS ", \"sliding_window\": 16, "
                 "\"use_sliding_window\": true, \"layer_types\": [\"full_attention\"]}",
                 ERR_FORMAT, "\"layer_types\" must be an array of 2 strings");
    expect_error("{\"model_type\": \"qwen2\", " LHEADS ", \"sliding_window\": 16, "
                 "\"use_sliding_window\": true, \"layer_types\": [\"full_attention\", 3]}",
                 ERR_FORMAT, "layer_types[1] is not");
    c = parse_llama("{\"model_type\": \"mistral\", " LHEADS ", \"sliding_window\": null}");
    CHECK(in->max_pos == 256 && c.sliding_window == 0);

    /* hostile: each its own message */
    expect_error("{" LBASE ", \"num_key_value_heads\": 3}", ERR_FORMAT,
                 "num_key_value_heads 3 does not divide num_attention_heads 8");
    expect_error("{" LBASE ", \"num_key_value_heads\": 0}", ERR_FORMAT,
                 "\"num_key_value_heads\" is 0");
    expect_error("{\"model_type\": \"llama\", \"vocab_size\": 300, " LDIMS ", \"num_attention_heads\": -8}", ERR_FORMAT,
                 "\"num_attention_heads\" is -8");
    expect_error("{\"model_type\": \"llama\", \"vocab_size\": 300, " LDIMS ", \"num_attention_heads\": 0}", ERR_FORMAT,
                 "\"num_attention_heads\" is 0");
    expect_error("{\"model_type\": \"llama\", \"vocab_size\": 300, " LDIMS ", \"num_attention_heads\": 7}", ERR_FORMAT, "not a multiple");
    expect_error("{" LBASE ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}}",
                 ERR_UNSUPPORTED, "rope type \"yarn\" is not supported");
    expect_error("{" LBASE ", \"rope_scaling\": {\"rope_type\": \"linear\"}}", ERR_FORMAT,
                 "\"factor\"");
    expect_error("{" LBASE ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, "
                 "\"low_freq_factor\": 4, \"high_freq_factor\": 1, "
                 "\"original_max_position_embeddings\": 64}}",
                 ERR_FORMAT, "high_freq_factor 1 must exceed low_freq_factor 4");
    expect_error("{" LBASE ", \"rope_scaling\": 3}", ERR_FORMAT, "must be an object");
    expect_error("{" LBASE ", \"hidden_act\": \"mish\"}", ERR_UNSUPPORTED,
                 "hidden_act \"mish\"");
    expect_error("{" LBASE ", \"head_dim\": 5000}", ERR_FORMAT, "\"head_dim\" is 5000");
    expect_error("{\"model_type\": \"llama\", \"vocab_size\": 300, " LDIMS ", \"head_dim\": "
                 "4000, \"num_attention_heads\": 4000, \"num_key_value_heads\": 1}",
                 ERR_FORMAT, "exceed");
    expect_error("{" LBASE ", \"partial_rotary_factor\": 0.2}", ERR_FORMAT, "rotary dims");
    expect_error("{\"model_type\": \"llama\", \"num_attention_heads\": 8, " LDIMS
                 ", \"vocab_size\": 2000000000}",
                 ERR_FORMAT, "\"vocab_size\" is");
    expect_error("{" LBASE ", \"eos_token_id\": [2, 300]}", ERR_FORMAT,
                 "eos_token_id 300 is outside the vocabulary");
    expect_error("{" LBASE ", \"eos_token_id\": [1, 2, 3, 4, 5, 6, 7, 8, 9]}", ERR_FORMAT,
                 "at most 8");
    expect_error("{" LBASE ", \"rms_norm_eps\": \"small\"}", ERR_FORMAT, "must be a number");
    expect_error("{\"model_type\": \"llama\", \"hidden_size\": 64}", ERR_FORMAT,
                 "\"intermediate_size\"");

    /* the layouts it can shard: KV heads split when tp divides them, replicated when tp is
     * a multiple of them; anything else names the numbers */
    struct model_config *mc = NULL;
    CHECK(model_config_parse("{\"model_type\": \"llama\", \"hidden_size\": 96, "
                             "\"intermediate_size\": 96, \"num_hidden_layers\": 2, "
                             "\"num_attention_heads\": 12, \"num_key_value_heads\": 6, "
                             "\"vocab_size\": 300, \"max_position_embeddings\": 64}",
                             "config.json", &mc) == 0);
    if (mc) {
        struct model_shard sh = {.tp_size = 2, .layer_end = 2};
        CHECK(model_shard_check(mc, &sh) == 0);
        sh.tp_size = 12; /* replicated: each KV head on 2 ranks */
        CHECK(model_shard_check(mc, &sh) == 0);
        sh.tp_size = 4;
        CHECK(model_shard_check(mc, &sh) == ERR_INVALID &&
              strstr(err_msg(), "must divide num_key_value_heads 6, or be a multiple"));
        sh.tp_size = 5;
        CHECK(model_shard_check(mc, &sh) == ERR_INVALID &&
              strstr(err_msg(), "must divide num_attention_heads 12"));
    }
    model_config_free(mc);
}

#define PHI3 "\"model_type\": \"phi3\", " LHEADS
#define LONGROPE(extra)                                                                            \
    "\"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": [1, 1.5, 2, 2.5], "               \
    "\"long_factor\": [4, 8, 16, 32]" extra "}"

/* Qwen3 and Phi-3: their defaults, what each turns on, LongRoPE's settings
 * and the attention factor transformers derives, and a one-line error for
 * each hostile config. */
TEST(qwen3_phi3)
{
    /* Qwen3: q/k norms, head_dim 128 when absent (Qwen3Config's), no mlp bias field */
    struct llama_config c = parse_llama("{\"model_type\": \"qwen3\", " LHEADS
                                        ", \"num_key_value_heads\": 2, \"mlp_bias\": true}");
    const struct model_info *in = &c.base.info;
    CHECK(c.variant == LLAMA_VARIANT_QWEN3 && llama_qk_norm(&c) && !llama_fused(&c) && in->head_dim == 128);
    CHECK(!c.qkv_bias && !c.o_bias && !c.mlp_bias && c.rot_dim == 128);
    CHECK(strcmp(in->architecture, "Qwen3ForCausalLM") == 0);
    c = parse_llama("{\"model_type\": \"qwen3\", " LHEADS ", \"head_dim\": 32, \"attention_bias\": "
                    "true, \"use_sliding_window\": false, \"sliding_window\": 16}");
    CHECK(in->head_dim == 32 && c.qkv_bias && c.o_bias && in->max_pos == 256);
    /* Phi-3: fused, no biases whatever the file says; partial rotary at top level or in
     * rope_parameters; its window is on every layer, as Mistral's, and leaves the context */
    c = parse_llama("{" PHI3 ", \"attention_bias\": true, \"partial_rotary_factor\": 0.75, "
                    "\"sliding_window\": 64}");
    CHECK(c.variant == LLAMA_VARIANT_PHI3 && llama_fused(&c) && !llama_qk_norm(&c) && !c.qkv_bias && !c.o_bias);
    CHECK(c.rot_dim == 6 && in->max_pos == 256 && c.rope == ROPE_DEFAULT);
    CHECK(c.sliding_window == 64 && layer_windowed(&c.windows, 0) &&
          layer_windowed(&c.windows, in->n_layers - 1));
    c = parse_llama("{" PHI3 ", \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": "
                    "10000.0, \"partial_rotary_factor\": 0.5}}");
    CHECK(c.rot_dim == 4 && c.rope_attn_factor == 1);
    /* LongRoPE: original 4096 by default (Phi3Config's), factor = max_pos / original, the
     * attention factor sqrt(1 + ln(factor) / ln(original)) unless given */
    c = parse_llama("{" PHI3 ", \"original_max_position_embeddings\": 64, " LONGROPE("") "}");
    CHECK(c.rope == ROPE_LONGROPE && c.rope_orig_max_pos == 64 && c.rope_factor == 4);
    CHECK(fabs(c.rope_attn_factor - sqrt(1 + log(4.0) / log(64.0))) < 1e-12);
    CHECK(c.short_factor[1] == 1.5f && c.long_factor[3] == 32 && in->max_pos == 256);
    float inv[4];
    llama_inv_freq(&c, false, inv);
    CHECK(inv[0] == 1.0f && inv[1] == 1.0f / (1.5f * powf(10000.0f, 0.25f)));
    llama_inv_freq(&c, true, inv);
    CHECK(inv[0] == 1.0f / 4 && inv[1] == 1.0f / (8 * powf(10000.0f, 0.25f)));
    c = parse_llama("{" PHI3 ", " LONGROPE(
        ", \"original_max_position_embeddings\": 128, \"attention_factor\": 1.5") "}");
    CHECK(c.rope_orig_max_pos == 128 && c.rope_attn_factor == 1.5);
    c = parse_llama("{" PHI3 ", " /* its older name */
                    "\"rope_scaling\": {\"type\": \"su\", \"short_factor\": [1, 1, 1, 1], "
                    "\"long_factor\": [2, 2, 2, 2]}}");
    CHECK(c.rope == ROPE_LONGROPE && c.rope_orig_max_pos == 4096 && c.rope_attn_factor == 1);

    /* hostile */
    expect_error("{" PHI3 ", \"partial_rotary_factor\": 0.5, " LONGROPE("") "}", ERR_FORMAT,
                 "rope short_factor must be a list of 2 numbers (rotary dims / 2), got 4");
    expect_error("{" PHI3 ", \"rope_scaling\": {\"type\": "
                 "\"longrope\", \"short_factor\": [1, 1, 1, 1]}}",
                 ERR_FORMAT, "rope long_factor must be a list of 4 numbers");
    expect_error("{" PHI3 ", \"rope_scaling\": {\"type\": "
                 "\"longrope\", \"short_factor\": [1, 1, -1, 1], \"long_factor\": [1, 1, 1, 1]}}",
                 ERR_FORMAT, "rope short_factor[2] must be a positive number");
    expect_error("{" PHI3 ", \"original_max_position_embeddings\": 1, " LONGROPE("") "}",
                 ERR_FORMAT, "original_max_position_embeddings 1 must be at least 2");
    expect_error("{" LBASE ", \"head_dim\": 1024, " LONGROPE("") "}", ERR_UNSUPPORTED,
                 "longrope over 1024 rotary dims is not supported");
    expect_error("{\"model_type\": \"qwen3\", " LHEADS ", \"head_dim\": 1}", ERR_FORMAT,
                 "\"head_dim\" is 1");
    expect_error("{\"model_type\": \"qwen3\", " LHEADS ", \"rope_scaling\": {\"rope_type\": "
                 "\"su\", \"factor\": 2}}",
                 ERR_UNSUPPORTED, "rope type \"su\" is not supported");
    expect_error("{\"model_type\": \"qwen3\", \"vocab_size\": 300, " LDIMS
                 ", \"head_dim\": 4096, \"num_attention_heads\": 4000, \"num_key_value_heads\": 1}",
                 ERR_FORMAT, "exceed");
}

#define MIXTRAL "\"model_type\": \"mixtral\", " LHEADS
#define QMOE "\"model_type\": \"qwen3_moe\", " LHEADS

/* Mixtral and Qwen3-MoE: their defaults, the sparse layers, both spellings
 * of the expert count, and a one-line error for each hostile config. */
TEST(moe)
{
    /* Mixtral: 8 experts, top 2 renormalised, every layer, intermediate_size each expert's;
     * router_aux_loss_coef and router_jitter_noise (training only) ignored */
    struct llama_config c = parse_llama("{" MIXTRAL ", \"router_aux_loss_coef\": 0.02, "
                                        "\"router_jitter_noise\": 0.1}");
    const struct model_info *in = &c.base.info;
    CHECK(c.variant == LLAMA_VARIANT_MIXTRAL && c.n_experts == 8 && c.top_k == 2);
    CHECK(c.moe_ffn == 128 && c.norm_topk && llama_moe_layer(&c, 0) && llama_moe_layer(&c, 1));
    CHECK(!llama_qk_norm(&c) && strcmp(in->architecture, "MixtralForCausalLM") == 0);
    c = parse_llama("{" MIXTRAL ", \"num_local_experts\": 4, \"num_experts_per_tok\": 4, "
                    "\"sliding_window\": 32}");
    CHECK(c.n_experts == 4 && c.top_k == 4 && c.sliding_window == 32);
    /* Qwen3-MoE: 128 experts, top 8, not renormalised, moe_intermediate_size 768 by default;
     * num_experts or num_local_experts; mlp_only_layers and decoder_sparse_step pick the
     * dense layers; q/k norms; head_dim hidden / heads when absent (unlike Qwen3's 128) */
    c = parse_llama("{" QMOE "}");
    CHECK(c.variant == LLAMA_VARIANT_QWEN3_MOE && c.n_experts == 128 && c.top_k == 8);
    CHECK(c.moe_ffn == 768 && !c.norm_topk && llama_qk_norm(&c) && in->head_dim == 8);
    CHECK(llama_moe_layer(&c, 0) && llama_moe_layer(&c, 1));
    c = parse_llama("{" QMOE ", \"num_experts\": 16, \"num_experts_per_tok\": 3, "
                    "\"moe_intermediate_size\": 32, \"norm_topk_prob\": true, "
                    "\"mlp_only_layers\": [0]}");
    CHECK(c.n_experts == 16 && c.top_k == 3 && c.moe_ffn == 32 && c.norm_topk);
    CHECK(!llama_moe_layer(&c, 0) && llama_moe_layer(&c, 1) && in->ffn == 128);
    c = parse_llama("{" QMOE ", \"num_local_experts\": 6, \"num_experts_per_tok\": 2, "
                    "\"decoder_sparse_step\": 2}");
    CHECK(c.n_experts == 6 && !llama_moe_layer(&c, 0) && llama_moe_layer(&c, 1));
    /* Qwen2-MoE: 60 experts, top 4, 1408 wide, a shared expert of 5632, q/k/v biases
     * (qkv_bias) and none on o_proj */
    c = parse_llama("{\"model_type\": \"qwen2_moe\", " LHEADS "}");
    CHECK(c.variant == LLAMA_VARIANT_QWEN2_MOE && c.n_experts == 60 && c.top_k == 4);
    CHECK(c.moe_ffn == 1408 && c.shared_ffn == 5632 && !c.norm_topk && c.qkv_bias && !c.o_bias);
    CHECK(!llama_qk_norm(&c) && strcmp(in->architecture, "Qwen2MoeForCausalLM") == 0);
    c = parse_llama("{\"model_type\": \"qwen2_moe\", " LHEADS ", \"qkv_bias\": false, "
                    "\"shared_expert_intermediate_size\": 96, \"num_experts\": 4, "
                    "\"num_experts_per_tok\": 1}");
    CHECK(!c.qkv_bias && c.shared_ffn == 96 && c.n_experts == 4 && c.top_k == 1);
    /* a dense model's config has no experts */
    c = parse_llama("{" LBASE "}");
    CHECK(c.n_experts == 0 && !llama_moe_layer(&c, 0));

    /* hostile */
    expect_error("{" MIXTRAL ", \"num_local_experts\": 0}", ERR_FORMAT, "num_local_experts");
    expect_error("{" MIXTRAL ", \"num_local_experts\": 100000}", ERR_FORMAT, "num_local_experts");
    expect_error("{" MIXTRAL ", \"num_local_experts\": 4, \"num_experts_per_tok\": 5}", ERR_FORMAT,
                 "num_experts_per_tok 5 exceeds the 4 experts");
    expect_error("{" MIXTRAL ", \"num_experts_per_tok\": -1}", ERR_FORMAT, "num_experts_per_tok");
    expect_error("{" MIXTRAL ", \"num_experts_per_tok\": 0}", ERR_FORMAT, "num_experts_per_tok");
    expect_error("{" MIXTRAL ", \"num_local_experts\": 1e12}", ERR_FORMAT, "num_local_experts");
    expect_error("{" MIXTRAL ", \"sliding_window\": -1}", ERR_FORMAT, "sliding_window");
    expect_error("{\"model_type\": \"qwen2_moe\", " LHEADS ", \"use_sliding_window\": true, "
                 "\"sliding_window\": 8, \"max_window_layers\": -1}",
                 ERR_FORMAT, "max_window_layers");
    expect_error("{" QMOE ", \"num_experts\": \"many\"}", ERR_FORMAT, "num_experts");
    expect_error("{" QMOE ", \"moe_intermediate_size\": 0}", ERR_FORMAT, "moe_intermediate_size");
    expect_error("{" QMOE ", \"decoder_sparse_step\": 0}", ERR_FORMAT, "decoder_sparse_step");
    expect_error("{" QMOE ", \"mlp_only_layers\": [5]}", ERR_FORMAT,
                 "mlp_only_layers[0] must be a layer index in [0, 2)");
    expect_error("{" QMOE ", \"mlp_only_layers\": 1}", ERR_FORMAT,
                 "mlp_only_layers must be a list");
    expect_error("{" QMOE ", \"shared_expert_intermediate_size\": 64}", ERR_UNSUPPORTED,
                 "shared experts");
    expect_error("{" MIXTRAL ", \"shared_expert_intermediate_size\": 64}", ERR_UNSUPPORTED,
                 "supported in qwen2_moe only");
    expect_error("{\"model_type\": \"qwen2_moe\", " LHEADS
                 ", \"shared_expert_intermediate_size\": 0}",
                 ERR_FORMAT, "shared_expert_intermediate_size");
    /* each expert is split across the TP ranks */
    struct model_config *mc = NULL;
    CHECK(model_config_parse("{" QMOE ", \"moe_intermediate_size\": 36}", "config.json", &mc) == 0);
    if (mc) {
        CHECK(model_shard_check(mc, &(struct model_shard){.tp_size = 4, .layer_end = 2}) == 0);
        CHECK(model_shard_check(mc, &(struct model_shard){.tp_size = 8, .layer_end = 2}) ==
              ERR_INVALID);
        CHECK_MSG(strstr(err_msg(), "must divide each expert's intermediate size 36"), "%s",
                  err_msg());
    }
    model_config_free(mc);
}

/* OPTConfig's defaults for every optional field */
#define GDIMS                                                                                      \
    "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 4, "                  \
    "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16, "                   \
    "\"vocab_size\": 300"

static struct gemma_config parse_gemma(const char *json)
{
    struct model_config *mc = NULL;
    struct gemma_config c = {0};
    CHECK_MSG(model_config_parse(json, "config.json", &mc) == 0, "%s: %s", json, err_msg());
    if (mc) {
        CHECK(strcmp(mc->info.family, "gemma") == 0);
        c = *ARCH_CONFIG(struct gemma_config, mc);
    }
    model_config_free(mc);
    return c;
}

/* The Gemma family: each class's defaults, both spellings of Gemma 3's
 * rotary settings and window pattern, the multimodal config's text part,
 * and a one-line error for each hostile config. */
TEST(gemma)
{
    struct gemma_config c = parse_gemma("{\"model_type\": \"gemma2\", " GDIMS "}");
    const struct model_info *in = &c.base.info;
    CHECK(c.variant == GEMMA_2 && c.attn_softcap == 50 && c.final_softcap == 30);
    CHECK(c.sliding_window == 4096 && c.query_pre_attn_scalar == 256 && c.rope_theta == 10000);
    CHECK(layer_windowed(&c.windows, 0) && !layer_windowed(&c.windows, 1) &&
          layer_windowed(&c.windows, 2) && !layer_windowed(&c.windows, 3));
    CHECK(in->bos_id == 2 && in->pad_id == 0 && in->n_eos == 1 && in->eos_ids[0] == 1);
    CHECK(c.act == KERN_ACT_GELU_TANH && in->max_pos == 8192);
    c = parse_gemma("{\"model_type\": \"gemma2\", " GDIMS ", \"attn_logit_softcapping\": null, "
                    "\"final_logit_softcapping\": null, \"sliding_window\": null}");
    CHECK(c.attn_softcap == 0 && c.final_softcap == 0 && c.sliding_window == 0);
    /* Gemma 3, the Hub's spelling */
    c = parse_gemma("{\"model_type\": \"gemma3_text\", " GDIMS ", \"sliding_window_pattern\": 3, "
                    "\"rope_theta\": 1000000.0, \"rope_local_base_freq\": 10000.0, "
                    "\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 8.0}}");
    CHECK(c.variant == GEMMA_3 && c.final_softcap == 0 && c.attn_softcap == 0);
    CHECK(c.rope_theta == 1e6 && c.rope_local_theta == 1e4 && c.rope_factor == 8);
    CHECK(layer_windowed(&c.windows, 0) && layer_windowed(&c.windows, 1) &&
          !layer_windowed(&c.windows, 2) && layer_windowed(&c.windows, 3));
    /* transformers 5's spelling */
    c = parse_gemma("{\"model_type\": \"gemma3_text\", " GDIMS ", \"layer_types\": "
                    "[\"full_attention\", \"sliding_attention\", \"full_attention\", "
                    "\"sliding_attention\"], \"rope_parameters\": {\"full_attention\": "
                    "{\"rope_type\": \"default\", \"rope_theta\": 500.0}, \"sliding_attention\": "
                    "{\"rope_type\": \"default\", \"rope_theta\": 50.0}}}");
    CHECK(!layer_windowed(&c.windows, 0) && layer_windowed(&c.windows, 1));
    CHECK(c.rope_theta == 500 && c.rope_local_theta == 50 && c.rope_factor == 1);
    /* the multimodal config: its text_config, with the class's defaults */
    c = parse_gemma("{\"model_type\": \"gemma3\", \"eos_token_id\": [1, 106], "
                    "\"image_token_index\": 262144, \"text_config\": {\"model_type\": "
                    "\"gemma3_text\", \"hidden_size\": 2560, \"num_hidden_layers\": 34}}");
    CHECK(c.variant == GEMMA_3_MM && in->hidden == 2560 && in->n_layers == 34);
    CHECK(in->vocab == 262208 && in->n_eos == 2 && in->eos_ids[1] == 106);
    CHECK(c.image_token == 262144 && !layer_windowed(&c.windows, 5));

    /* hostile: each its own message */
    expect_error("{\"model_type\": \"gemma3\"}", ERR_FORMAT, "needs a \"text_config\" object");
    expect_error("{\"model_type\": \"gemma3\", \"text_config\": {\"model_type\": \"siglip\"}}",
                 ERR_UNSUPPORTED, "text_config model_type \"siglip\"");
    expect_error(
        "{\"model_type\": \"gemma2\", \"num_attention_heads\": 4, \"num_key_value_heads\": 3}",
        ERR_FORMAT, "num_key_value_heads 3 does not divide num_attention_heads 4");
    expect_error("{\"model_type\": \"gemma2\", " GDIMS ", \"hidden_activation\": \"swish\"}",
                 ERR_UNSUPPORTED, "hidden_activation \"swish\"");
    expect_error("{\"model_type\": \"gemma2\", " GDIMS ", \"attn_logit_softcapping\": -1}",
                 ERR_FORMAT, "attn_logit_softcapping");
    expect_error("{\"model_type\": \"gemma2\", " GDIMS ", \"sliding_window\": 0}", ERR_FORMAT,
                 "sliding_window");
    expect_error("{\"model_type\": \"gemma3_text\", " GDIMS ", \"rope_scaling\": {\"rope_type\": "
                 "\"yarn\", \"factor\": 2}}",
                 ERR_UNSUPPORTED, "rope type \"yarn\"");
    expect_error("{\"model_type\": \"gemma3_text\", " GDIMS ", \"rope_parameters\": {}}",
                 ERR_FORMAT, "full_attention and sliding_attention");
    expect_error("{\"model_type\": \"gemma3_text\", " GDIMS ", \"use_bidirectional_attention\": "
                 "true}",
                 ERR_UNSUPPORTED, "use_bidirectional_attention");
    expect_error("{\"model_type\": \"gemma2\", \"head_dim\": 15}", ERR_FORMAT,
                 "head_dim 15 must be even");
    expect_error("{\"model_type\": \"gemma2\", \"num_hidden_layers\": 100000}", ERR_FORMAT,
                 "num_hidden_layers");
    expect_error("{\"model_type\": \"gemma2\", " GDIMS ", \"layer_types\": \"sliding\"}",
                 ERR_FORMAT, "layer_types");
    expect_error("{\"model_type\": \"gemma3_text\", " GDIMS ", \"sliding_window_pattern\": 0}",
                 ERR_FORMAT, "sliding_window_pattern");
    expect_error("{\"model_type\": \"gemma3_text\", " GDIMS ", \"layer_types\": "
                 "[\"full_attention\", \"sliding_attention\", \"full_attention\"]}",
                 ERR_FORMAT, "must be an array of 4 strings");
    expect_error("{\"model_type\": \"gemma2\", " GDIMS ", \"sliding_window\": -4096}", ERR_FORMAT,
                 "sliding_window");
}

TEST(opt_defaults)
{
    struct opt_config c = parse_opt("{" BASE "}");
    const struct model_info *in = &c.base.info;
    CHECK(in->hidden == 64 && in->ffn == 256 && in->n_layers == 2 && in->n_heads == 4 &&
          in->vocab == 300);
    CHECK(in->n_kv_heads == 4 && in->head_dim == 16);
    CHECK(in->max_pos == 128 && c.embed_dim == 64 && c.pre_ln && c.final_ln && c.bias);
    CHECK(c.ln_affine && c.tie_embeddings && c.act == OPT_ACT_RELU);
    CHECK(in->pad_id == 1 && in->bos_id == 2 && in->n_eos == 1 && in->eos_ids[0] == 2 &&
          in->dtype == DTYPE_F32);
}

/* every field that changes the computation is read */
TEST(opt_fields)
{
    struct opt_config c =
        parse_opt("{" BASE ", \"word_embed_proj_dim\": 32, \"do_layer_norm_before\": "
                  "false, \"enable_bias\": false, \"layer_norm_elementwise_affine\": "
                  "false, \"activation_function\": \"gelu_new\", \"torch_dtype\": "
                  "\"float16\", \"pad_token_id\": 0, \"eos_token_id\": 3, "
                  "\"tie_word_embeddings\": false}");
    CHECK(c.embed_dim == 32 && !c.pre_ln && !c.final_ln && !c.bias && !c.ln_affine);
    const struct model_info *in = &c.base.info;
    CHECK(c.act == OPT_ACT_GELU_TANH && in->dtype == DTYPE_F16 && in->pad_id == 0);
    CHECK(in->eos_ids[0] == 3 && !c.tie_embeddings);
    c = parse_opt("{" BASE ", \"_remove_final_layer_norm\": true, \"dtype\": \"bfloat16\"}");
    CHECK(c.pre_ln && !c.final_ln && in->dtype == DTYPE_BF16);
}

/* bad input: each its own message */
TEST(bad_input)
{
    expect_error("{" BASE, ERR_FORMAT, "invalid JSON");
    expect_error("[1, 2]", ERR_FORMAT, "JSON object");
    expect_error("{\"hidden_size\": 64}", ERR_FORMAT, "model_type");
    /* an unsupported family is named, with the ones that are */
    expect_error("{\"model_type\": \"gpt_neox\", \"hidden_size\": 64}", ERR_UNSUPPORTED,
                 "model_type \"gpt_neox\" is not supported (supported: opt");
    expect_error("{\"model_type\": \"opt\", \"hidden_size\": 64, \"ffn_dim\": 256, "
                 "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 300}",
                 ERR_FORMAT, "max_position_embeddings");
    expect_error("{" BASE ", \"hidden_size\": 64}", ERR_FORMAT, "invalid JSON"); /* duplicate */
    expect_error("{\"model_type\": \"opt\", \"hidden_size\": \"64\", \"ffn_dim\": 256, "
                 "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 300, "
                 "\"max_position_embeddings\": 128}",
                 ERR_FORMAT, "\"hidden_size\" must be an integer");
    expect_error("{\"model_type\": \"opt\", \"hidden_size\": -64, \"ffn_dim\": 256, "
                 "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 300, "
                 "\"max_position_embeddings\": 128}",
                 ERR_FORMAT, "\"hidden_size\" is -64");
    expect_error("{\"model_type\": \"opt\", \"hidden_size\": 66, \"ffn_dim\": 256, "
                 "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 300, "
                 "\"max_position_embeddings\": 128}",
                 ERR_FORMAT, "not a multiple");
    expect_error("{" BASE ", \"activation_function\": \"mish\"}", ERR_UNSUPPORTED, "mish");
    expect_error("{" BASE ", \"torch_dtype\": \"int8\"}", ERR_UNSUPPORTED, "int8");
    expect_error("{" BASE ", \"enable_bias\": 1}", ERR_FORMAT, "true or false");
    expect_error("{" BASE ", \"eos_token_id\": 300}", ERR_FORMAT, "outside the vocabulary");
}

/* a missing file names the path */
TEST(missing_file)
{
    struct model_config *mc = NULL;
    CHECK(model_config_load("/nonexistent/model", &mc) == ERR_NOT_FOUND);
    CHECK(strstr(err_msg(), "/nonexistent/model/config.json") != NULL);
}

/* config.json that is not a regular file is refused by type before it is read: a
 * FIFO without a writer would block forever (the alarm turns a hang into a failure) */
TEST(not_regular)
{
    struct model_config *mc = NULL;
    char dir[] = "/tmp/shardswap_cfg_XXXXXX", path[128];
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(path, sizeof(path), "%s/config.json", dir);
    alarm(30);
    CHECK(mkfifo(path, 0600) == 0);
    CHECK(model_config_load(dir, &mc) == ERR_IO);
    CHECK_MSG(strstr(err_msg(), path) && strstr(err_msg(), "is a FIFO, expected a regular file"),
              "%s", err_msg());
    CHECK(unlink(path) == 0 && mkdir(path, 0700) == 0);
    CHECK(model_config_load(dir, &mc) == ERR_IO);
    CHECK_MSG(strstr(err_msg(), path) &&
                  strstr(err_msg(), "is a directory, expected a regular file"),
              "%s", err_msg());
    alarm(0);
    CHECK(rmdir(path) == 0 && rmdir(dir) == 0);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
