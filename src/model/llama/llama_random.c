/* Random-weight Llama-family checkpoints: the shapes of published models,
 * and their tensors as transformers initialises them (normal std 0.02,
 * zero biases, unit RMSNorms, a zero padding row). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/llama/llama.h"

extern const struct arch_ops llama_arch;

static const struct preset {
    const char *name;
    enum llama_variant variant;
    int hidden, ffn, layers, heads, kv_heads, head_dim, vocab, max_pos;
    double theta, eps;
    enum rope_kind rope;
    double factor;
    int orig_max_pos;
    bool tied, qkv_bias;
    int bos, eos[3], n_eos;
} presets[] = {
    {"llama-3.2-1b", LLAMA_VARIANT_LLAMA, 2048, 8192, 16, 32, 8, 64, 128256, 131072, 500000.0,
     1e-5, ROPE_LLAMA3, 32.0, 8192, true, false, 128000, {128001, 128008, 128009}, 3},
    {"llama-3.1-8b", LLAMA_VARIANT_LLAMA, 4096, 14336, 32, 32, 8, 128, 128256, 131072, 500000.0,
     1e-5, ROPE_LLAMA3, 8.0, 8192, false, false, 128000, {128001, 128008, 128009}, 3},
    {"qwen2.5-0.5b", LLAMA_VARIANT_QWEN2, 896, 4864, 24, 14, 2, 64, 151936, 32768, 1000000.0,
     1e-6, ROPE_DEFAULT, 1.0, 0, true, true, 151643, {151645, 151643}, 2},
    {"qwen2.5-7b", LLAMA_VARIANT_QWEN2, 3584, 18944, 28, 28, 4, 128, 152064, 32768, 1000000.0,
     1e-6, ROPE_DEFAULT, 1.0, 0, false, true, 151643, {151645, 151643}, 2},
    {"mistral-7b", LLAMA_VARIANT_MISTRAL, 4096, 14336, 32, 32, 8, 128, 32768, 32768, 1000000.0,
     1e-5, ROPE_DEFAULT, 1.0, 0, false, false, 1, {2}, 1},
    {"qwen3-0.6b", LLAMA_VARIANT_QWEN3, 1024, 3072, 28, 16, 8, 128, 151936, 40960, 1000000.0,
     1e-6, ROPE_DEFAULT, 1.0, 0, true, false, 151643, {151645, 151643}, 2},
    {"qwen3-8b", LLAMA_VARIANT_QWEN3, 4096, 12288, 36, 32, 8, 128, 151936, 40960, 1000000.0,
     1e-6, ROPE_DEFAULT, 1.0, 0, false, false, 151643, {151645, 151643}, 2},
    {"phi-3-mini", LLAMA_VARIANT_PHI3, 3072, 8192, 32, 32, 32, 96, 32064, 4096, 10000.0, 1e-5,
     ROPE_DEFAULT, 1.0, 0, false, false, 1, {32000, 32001, 32007}, 3},
    {"mixtral-8x7b", LLAMA_VARIANT_MIXTRAL, 4096, 14336, 32, 32, 8, 128, 32000, 32768, 1000000.0,
     1e-5, ROPE_DEFAULT, 1.0, 0, false, false, 1, {2}, 1},
    {"qwen3-30b-a3b", LLAMA_VARIANT_QWEN3_MOE, 2048, 6144, 48, 32, 4, 128, 151936, 40960,
     1000000.0, 1e-6, ROPE_DEFAULT, 1.0, 0, false, false, 151643, {151645, 151643}, 2},
    {"tinyllama-1.1b", LLAMA_VARIANT_LLAMA, 2048, 5632, 22, 32, 4, 64, 32000, 2048, 10000.0,
     1e-5, ROPE_DEFAULT, 1.0, 0, false, false, 1, {2}, 1},
    /* test shapes: a real family's vocabulary and special ids (so its real
     * tokenizer and chat template fit), two narrow layers */
    {"llama-3-tiny", LLAMA_VARIANT_LLAMA, 64, 128, 2, 4, 2, 16, 128256, 8192, 500000.0, 1e-5,
     ROPE_LLAMA3, 8.0, 8192, false, false, 128000, {128001, 128008, 128009}, 3},
    {"qwen2.5-tiny", LLAMA_VARIANT_QWEN2, 64, 128, 2, 4, 2, 16, 151936, 32768, 1000000.0, 1e-6,
     ROPE_DEFAULT, 1.0, 0, true, true, 151643, {151645, 151643}, 2},
    {"llama-2-tiny", LLAMA_VARIANT_LLAMA, 64, 128, 2, 4, 4, 16, 32000, 4096, 10000.0, 1e-5,
     ROPE_DEFAULT, 1.0, 0, false, false, 1, {2}, 1},
};
#define N_PRESETS (sizeof(presets) / sizeof(presets[0]))

/* The presets with experts (on every layer): how many, how many per token,
 * each one's width, renormalised. */
static const struct preset_moe {
    const char *name;
    int experts, top_k, ffn;
    bool norm_topk;
} moe_presets[] = {
    {"mixtral-8x7b", 8, 2, 14336, true},
    {"qwen3-30b-a3b", 128, 8, 768, true},
};

static void preset_moe(const char *name, struct llama_config *c)
{
    for (size_t i = 0; i < sizeof(moe_presets) / sizeof(moe_presets[0]); i++)
        if (strcmp(name, moe_presets[i].name) == 0) {
            c->n_experts = moe_presets[i].experts;
            c->top_k = moe_presets[i].top_k;
            c->moe_ffn = moe_presets[i].ffn;
            c->norm_topk = moe_presets[i].norm_topk;
            /* every layer, so --layers may add more */
            memset(c->moe_bits, 0xff, sizeof(c->moe_bits));
        }
}

/* Phi-3-mini-4k-instruct's sliding window (longer contexts are refused
 * until attention within a window is done) and pad id. */
#define PHI3_MINI_WINDOW 2047
#define PHI3_MINI_PAD 32000

int llama_preset(const char *name, struct model_config **out)
{
    *out = NULL;
    for (size_t i = 0; i < N_PRESETS; i++) {
        const struct preset *p = &presets[i];
        if (strcmp(name, p->name) != 0)
            continue;
        int rc = arch_config_alloc(&llama_arch, out);
        if (rc < 0)
            return rc;
        struct llama_config *c = (struct llama_config *)*out;
        struct model_info *in = &c->base.info;
        snprintf(in->architecture, sizeof(in->architecture), "%s", llama_variant_arch(p->variant));
        in->hidden = p->hidden;
        in->ffn = p->ffn;
        in->n_layers = p->layers;
        in->n_heads = p->heads;
        in->n_kv_heads = p->kv_heads;
        in->head_dim = p->head_dim;
        in->vocab = p->vocab;
        in->max_pos = c->max_pos_config = p->max_pos;
        in->bos_id = p->bos;
        memcpy(in->eos_ids, p->eos, sizeof(p->eos));
        in->n_eos = p->n_eos;
        in->dtype = DTYPE_BF16;
        c->variant = p->variant;
        c->rms_eps = p->eps;
        c->act = KERN_ACT_SILU;
        c->qkv_bias = p->qkv_bias;
        c->tie_embeddings = p->tied;
        c->rot_dim = p->head_dim;
        c->rope_attn_factor = 1.0;
        if (p->variant == LLAMA_VARIANT_PHI3) {
            c->sliding_window = PHI3_MINI_WINDOW;
            if ((rc = layer_windows_parse(NULL, name, in->n_layers, LAYERS_ALL, 0, &c->windows)) <
                0)
                return rc;
            in->pad_id = PHI3_MINI_PAD;
        }
        c->rope_theta = p->theta;
        c->rope = p->rope;
        c->rope_factor = p->factor;
        c->low_freq_factor = 1.0;
        c->high_freq_factor = 4.0;
        c->rope_orig_max_pos = p->orig_max_pos;
        preset_moe(name, c);
        return 0;
    }
    return ERR_NOT_FOUND;
}

int llama_tensors(const struct model_config *mc, struct tensor_spec **out, int *n_out)
{
    const struct llama_config *c = ARCH_CONFIG(struct llama_config, mc);
    const struct model_info *in = &mc->info;
    int cap = 4 + in->n_layers * (16 + 5 + 3 * c->n_experts), n = 0;
    struct tensor_spec *s = calloc((size_t)cap, sizeof(*s));
    if (!s)
        return err_set(ERR_NOMEM, "out of memory");
#define ADD(nd, r, cl, init, ...) tensor_spec_set(&s[n++], nd, r, cl, init, __VA_ARGS__)
    const int H = in->hidden, F = in->ffn, Q = in->n_heads * in->head_dim;
    const int K = in->n_kv_heads * in->head_dim;
    ADD(2, in->vocab, H, TENSOR_NORMAL, "model.embed_tokens.weight");
    s[n - 1].zero_row = in->pad_id;
    for (int l = 0; l < in->n_layers; l++) {
        static const char *proj[] = {"q_proj", "k_proj", "v_proj"};
        if (llama_fused(c))
            ADD(2, Q + 2 * K, H, TENSOR_NORMAL, "model.layers.%d.self_attn.qkv_proj.weight", l);
        for (int p = 0; p < 3 && !llama_fused(c); p++) {
            ADD(2, p ? K : Q, H, TENSOR_NORMAL, "model.layers.%d.self_attn.%s.weight", l, proj[p]);
            if (c->qkv_bias)
                ADD(1, p ? K : Q, 0, TENSOR_ZERO, "model.layers.%d.self_attn.%s.bias", l, proj[p]);
        }
        ADD(2, H, Q, TENSOR_NORMAL, "model.layers.%d.self_attn.o_proj.weight", l);
        if (c->o_bias)
            ADD(1, H, 0, TENSOR_ZERO, "model.layers.%d.self_attn.o_proj.bias", l);
        if (llama_qk_norm(c)) {
            ADD(1, in->head_dim, 0, TENSOR_ONE, "model.layers.%d.self_attn.q_norm.weight", l);
            ADD(1, in->head_dim, 0, TENSOR_ONE, "model.layers.%d.self_attn.k_norm.weight", l);
        }
        static const char *mlp[] = {"gate_proj", "up_proj", "down_proj"};
        if (llama_moe_layer(c, l)) { /* as save_pretrained writes them: one tensor per expert */
            const bool mx = c->variant == LLAMA_VARIANT_MIXTRAL;
            static const char *w[] = {"w1", "w3", "w2"};
            const char *moe = mx ? "block_sparse_moe" : "mlp";
            const int M = c->moe_ffn;
            ADD(2, c->n_experts, H, TENSOR_NORMAL, "model.layers.%d.%s.gate.weight", l, moe);
            for (int e = 0; e < c->n_experts; e++)
                for (int p = 0; p < 3; p++)
                    ADD(2, p < 2 ? M : H, p < 2 ? H : M, TENSOR_NORMAL,
                        "model.layers.%d.%s.experts.%d.%s.weight", l, moe, e, mx ? w[p] : mlp[p]);
            for (int p = 0; p < 3 && c->shared_ffn; p++)
                ADD(2, p < 2 ? c->shared_ffn : H, p < 2 ? H : c->shared_ffn, TENSOR_NORMAL,
                    "model.layers.%d.mlp.shared_expert.%s.weight", l, mlp[p]);
            if (c->shared_ffn)
                ADD(2, 1, H, TENSOR_NORMAL, "model.layers.%d.mlp.shared_expert_gate.weight", l);
        } else if (llama_fused(c))
            ADD(2, 2 * F, H, TENSOR_NORMAL, "model.layers.%d.mlp.gate_up_proj.weight", l);
        for (int p = llama_fused(c) ? 2 : 0; p < 3 && !llama_moe_layer(c, l); p++) {
            ADD(2, p < 2 ? F : H, p < 2 ? H : F, TENSOR_NORMAL, "model.layers.%d.mlp.%s.weight", l,
                mlp[p]);
            if (c->mlp_bias)
                ADD(1, p < 2 ? F : H, 0, TENSOR_ZERO, "model.layers.%d.mlp.%s.bias", l, mlp[p]);
        }
        ADD(1, H, 0, TENSOR_ONE, "model.layers.%d.input_layernorm.weight", l);
        ADD(1, H, 0, TENSOR_ONE, "model.layers.%d.post_attention_layernorm.weight", l);
    }
    ADD(1, H, 0, TENSOR_ONE, "model.norm.weight");
    if (!c->tie_embeddings)
        ADD(2, in->vocab, H, TENSOR_NORMAL, "lm_head.weight");
#undef ADD
    *out = s;
    *n_out = n;
    return 0;
}
