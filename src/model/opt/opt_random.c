/* Random-weight OPT checkpoints: the shapes of the published OPT models,
 * and their tensors as transformers initialises OPT (normal std 0.02, zero
 * biases, unit LayerNorms, a zero padding row). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/opt/opt.h"

static const struct {
    const char *name;
    int hidden, ffn, layers, heads, embed_dim;
    int pre_ln;
} presets[] = {
    {"opt-125m", 768, 3072, 12, 12, 768, 1},
    {"opt-350m", 1024, 4096, 24, 16, 512, 0},
    {"opt-1.3b", 2048, 8192, 24, 32, 2048, 1},
    {"opt-2.7b", 2560, 10240, 32, 32, 2560, 1},
    {"opt-6.7b", 4096, 16384, 32, 32, 4096, 1},
    {"opt-13b", 5120, 20480, 40, 40, 5120, 1},
    {"opt-30b", 7168, 28672, 48, 56, 7168, 1},
};
#define N_PRESETS (sizeof(presets) / sizeof(presets[0]))

extern const struct arch_ops opt_arch;

int opt_preset(const char *name, struct model_config **out)
{
    *out = NULL;
    for (size_t i = 0; i < N_PRESETS; i++) {
        if (strcmp(name, presets[i].name) != 0)
            continue;
        int rc = arch_config_alloc(&opt_arch, out);
        if (rc < 0)
            return rc;
        struct opt_config *c = (struct opt_config *)*out;
        struct model_info *in = &c->base.info;
        in->hidden = presets[i].hidden;
        in->ffn = presets[i].ffn;
        in->n_layers = presets[i].layers;
        in->n_heads = in->n_kv_heads = presets[i].heads;
        in->head_dim = in->hidden / in->n_heads;
        in->vocab = 50272;
        in->max_pos = 2048;
        in->pad_id = 1;
        in->bos_id = 2;
        in->eos_ids[0] = 2;
        in->n_eos = 1;
        in->dtype = DTYPE_F16;
        snprintf(in->architecture, sizeof(in->architecture), "OPTForCausalLM");
        c->embed_dim = presets[i].embed_dim;
        c->pre_ln = presets[i].pre_ln;
        c->final_ln = presets[i].pre_ln;
        c->bias = true;
        c->ln_affine = true;
        c->tie_embeddings = true;
        c->act = OPT_ACT_RELU;
        return 0;
    }
    return ERR_NOT_FOUND;
}

int opt_tensors(const struct model_config *mc, struct tensor_spec **out, int *n_out)
{
    const struct opt_config *c = ARCH_CONFIG(struct opt_config, mc);
    const struct model_info *in = &mc->info;
    int cap = 8 + in->n_layers * 16, n = 0;
    struct tensor_spec *s = calloc((size_t)cap, sizeof(*s));
    if (!s)
        return err_set(ERR_NOMEM, "out of memory");
#define ADD(nd, r, cl, init, ...) tensor_spec_set(&s[n++], nd, r, cl, init, __VA_ARGS__)
    const int H = in->hidden;
    ADD(2, in->vocab, c->embed_dim, TENSOR_NORMAL, "model.decoder.embed_tokens.weight");
    s[n - 1].zero_row = in->pad_id;
    ADD(2, in->max_pos + 2, H, TENSOR_NORMAL, "model.decoder.embed_positions.weight");
    if (c->final_ln && c->ln_affine) {
        ADD(1, H, 0, TENSOR_ONE, "model.decoder.final_layer_norm.weight");
        ADD(1, H, 0, TENSOR_ZERO, "model.decoder.final_layer_norm.bias");
    }
    if (c->embed_dim != H) {
        ADD(2, c->embed_dim, H, TENSOR_NORMAL, "model.decoder.project_out.weight");
        ADD(2, H, c->embed_dim, TENSOR_NORMAL, "model.decoder.project_in.weight");
    }
    for (int l = 0; l < in->n_layers; l++) {
        static const char *proj[] = {"k_proj", "v_proj", "q_proj", "out_proj"};
        for (int p = 0; p < 4; p++) {
            ADD(2, H, H, TENSOR_NORMAL, "model.decoder.layers.%d.self_attn.%s.weight", l, proj[p]);
            if (c->bias)
                ADD(1, H, 0, TENSOR_ZERO, "model.decoder.layers.%d.self_attn.%s.bias", l, proj[p]);
        }
        if (c->ln_affine) {
            ADD(1, H, 0, TENSOR_ONE, "model.decoder.layers.%d.self_attn_layer_norm.weight", l);
            ADD(1, H, 0, TENSOR_ZERO, "model.decoder.layers.%d.self_attn_layer_norm.bias", l);
        }
        ADD(2, in->ffn, H, TENSOR_NORMAL, "model.decoder.layers.%d.fc1.weight", l);
        if (c->bias)
            ADD(1, in->ffn, 0, TENSOR_ZERO, "model.decoder.layers.%d.fc1.bias", l);
        ADD(2, H, in->ffn, TENSOR_NORMAL, "model.decoder.layers.%d.fc2.weight", l);
        if (c->bias)
            ADD(1, H, 0, TENSOR_ZERO, "model.decoder.layers.%d.fc2.bias", l);
        if (c->ln_affine) {
            ADD(1, H, 0, TENSOR_ONE, "model.decoder.layers.%d.final_layer_norm.weight", l);
            ADD(1, H, 0, TENSOR_ZERO, "model.decoder.layers.%d.final_layer_norm.bias", l);
        }
    }
    if (!c->tie_embeddings)
        ADD(2, in->vocab, c->embed_dim, TENSOR_NORMAL, "lm_head.weight");
#undef ADD
    *out = s;
    *n_out = n;
    return 0;
}

