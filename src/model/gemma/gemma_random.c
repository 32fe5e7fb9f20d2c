/* Random-weight Gemma checkpoints: the shapes of published models, and
 * their tensors as transformers initialises them (normal std 0.02, zero
 * RMSNorm weights: Gemma's norms scale by 1 + w). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gemma/gemma.h"

extern const struct arch_ops gemma_arch;

static const struct preset {
    const char *name;
    enum gemma_variant variant;
    int hidden, ffn, layers, heads, kv_heads, head_dim, vocab, max_pos, window, pattern;
    double theta, local_theta, attn_cap, final_cap;
    int eos[2], n_eos;
} presets[] = {
    {"gemma-2-2b",
     GEMMA_2,
     2304,
     9216,
     26,
     8,
     4,
     256,
     256000,
     8192,
     4096,
     2,
     10000.0,
     10000.0,
     50.0,
     30.0,
     {1},
     1},
    {"gemma-3-1b",
     GEMMA_3,
     1152,
     6912,
     26,
     4,
     1,
     256,
     262144,
     32768,
     512,
     6,
     1e6,
     10000.0,
     0,
     0,
     {1, 106},
     2},
};
#define N_PRESETS (sizeof(presets) / sizeof(presets[0]))

int gemma_preset(const char *name, struct model_config **out)
{
    *out = NULL;
    for (size_t i = 0; i < N_PRESETS; i++) {
        const struct preset *p = &presets[i];
        if (strcmp(name, p->name) != 0)
            continue;
        int rc = arch_config_alloc(&gemma_arch, out);
        if (rc < 0)
            return rc;
        struct gemma_config *c = (struct gemma_config *)*out;
        struct model_info *in = &c->base.info;
        snprintf(in->architecture, sizeof(in->architecture), "%s",
                 p->variant == GEMMA_2 ? "Gemma2ForCausalLM" : "Gemma3ForCausalLM");
        in->hidden = p->hidden;
        in->ffn = p->ffn;
        in->n_layers = p->layers;
        in->n_heads = p->heads;
        in->n_kv_heads = p->kv_heads;
        in->head_dim = p->head_dim;
        in->vocab = p->vocab;
        in->max_pos = c->max_pos_config = p->max_pos;
        in->bos_id = 2;
        in->pad_id = 0;
        memcpy(in->eos_ids, p->eos, sizeof(p->eos));
        in->n_eos = p->n_eos;
        in->dtype = DTYPE_BF16;
        c->variant = p->variant;
        c->rms_eps = 1e-6;
        c->act = KERN_ACT_GELU_TANH;
        c->query_pre_attn_scalar = 256;
        c->attn_softcap = p->attn_cap;
        c->final_softcap = p->final_cap;
        c->sliding_window = p->window;
        c->rope_theta = p->theta;
        c->rope_local_theta = p->local_theta;
        c->rope_factor = 1;
        c->image_token = -1;
        /* every layer --layers may ask for follows the pattern */
        return layer_windows_parse(NULL, name, MODEL_MAX_LAYERS, LAYERS_PATTERN, p->pattern,
                                   &c->windows);
    }
    return ERR_NOT_FOUND;
}

int gemma_tensors(const struct model_config *mc, struct tensor_spec **out, int *n_out)
{
    const struct gemma_config *c = ARCH_CONFIG(struct gemma_config, mc);
    const struct model_info *in = &mc->info;
    int cap = 3 + in->n_layers * 20, n = 0;
    struct tensor_spec *s = calloc((size_t)cap, sizeof(*s));
    if (!s)
        return err_set(ERR_NOMEM, "out of memory");
#define ADD(nd, r, cl, init, ...) tensor_spec_set(&s[n++], nd, r, cl, init, __VA_ARGS__)
    const int H = in->hidden, F = in->ffn, hd = in->head_dim, Q = in->n_heads * hd;
    const int K = in->n_kv_heads * hd;
    ADD(2, in->vocab, H, TENSOR_NORMAL, "model.embed_tokens.weight");
    s[n - 1].zero_row = in->pad_id;
    for (int l = 0; l < in->n_layers; l++) {
        static const char *proj[] = {"q_proj", "k_proj", "v_proj"};
        for (int p = 0; p < 3; p++) {
            ADD(2, p ? K : Q, H, TENSOR_NORMAL, "model.layers.%d.self_attn.%s.weight", l, proj[p]);
            if (c->attn_bias)
                ADD(1, p ? K : Q, 0, TENSOR_ZERO, "model.layers.%d.self_attn.%s.bias", l, proj[p]);
        }
        ADD(2, H, Q, TENSOR_NORMAL, "model.layers.%d.self_attn.o_proj.weight", l);
        if (c->attn_bias)
            ADD(1, H, 0, TENSOR_ZERO, "model.layers.%d.self_attn.o_proj.bias", l);
        if (gemma_qk_norm(c)) {
            ADD(1, hd, 0, TENSOR_ZERO, "model.layers.%d.self_attn.q_norm.weight", l);
            ADD(1, hd, 0, TENSOR_ZERO, "model.layers.%d.self_attn.k_norm.weight", l);
        }
        static const char *mlp[] = {"gate_proj", "up_proj", "down_proj"};
        for (int p = 0; p < 3; p++)
            ADD(2, p < 2 ? F : H, p < 2 ? H : F, TENSOR_NORMAL, "model.layers.%d.mlp.%s.weight", l,
                mlp[p]);
        static const char *norms[] = {"input_layernorm", "post_attention_layernorm",
                                      "pre_feedforward_layernorm", "post_feedforward_layernorm"};
        for (int p = 0; p < 4; p++)
            ADD(1, H, 0, TENSOR_ZERO, "model.layers.%d.%s.weight", l, norms[p]);
    }
    ADD(1, H, 0, TENSOR_ZERO, "model.norm.weight");
#undef ADD
    *out = s;
    *n_out = n;
    return 0;
}
