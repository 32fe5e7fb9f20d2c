#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/bytes.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/quant_ct.h"
#include "format/ct.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "model/model.h"

/* Layer index of a tensor name ("...layers.N.x"), or -1. */
static int layer_of(const char *name)
{
    const char *p = strstr(name, "layers.");
    return p ? atoi(p + 7) : -1;
}

int cmd_inspect(int argc, char **argv)
{
    const char *dir = NULL;
    struct flag flags[] = {
        MODEL_FLAG(&dir),
    };
    int rc = args_parse("inspect", "Describes a checkpoint: its config, tensors and bytes, and checks its "
                        "tensors against config.json as the model loader does.",
                        argc, argv, flags, 1);
    if (rc)
        return rc;
    struct model_config *mc = NULL;
    struct st_checkpoint *ck = NULL;
    uint64_t *per_layer = NULL;
    if ((rc = model_config_load(dir, &mc)) < 0 || (rc = st_open(dir, &ck)) < 0)
        goto out;
    const struct model_info *c = &mc->info;
    char eos[96] = "", fam[512];
    for (int i = 0; i < c->n_eos; i++)
        snprintf(eos + strlen(eos), sizeof(eos) - strlen(eos), "%s%d", i ? ", " : "",
                 c->eos_ids[i]);
    model_config_describe(mc, fam, sizeof(fam));
    printf("model            %s\n", dir);
    const struct gguf_file *gg = st_gguf(ck);
    if (gg)
        printf("format           gguf (version %u, alignment %zu, %zu file%s)\n", gguf_version(gg),
               gguf_alignment(gg), gguf_file_count(gg), gguf_file_count(gg) == 1 ? "" : "s");
    else if (st_ct_format(ck))
        printf("format           compressed-tensors (%s)\n", st_ct_format(ck));
    else
        printf("format           safetensors\n");
    printf("family           %s\narchitecture     %s\n", c->family, c->architecture);
    printf("hidden_size      %d\nffn              %d\nlayers           %d\n", c->hidden, c->ffn,
           c->n_layers);
    printf("heads            %d\nkv_heads         %d\nhead_dim         %d\n", c->n_heads,
           c->n_kv_heads, c->head_dim);
    printf("vocab_size       %d\nmax_positions    %d\n", c->vocab, c->max_pos);
    printf("bos / eos / pad  %d / %s / %d\n", c->bos_id, c->n_eos ? eos : "none", c->pad_id);
    printf("family config    %s\n", fam);
    printf("tied_head        %s\n", st_find(ck, "lm_head.weight") ? "no" : "yes");
    printf("torch_dtype      %s\nfiles            %zu\ntensors          %zu\n",
           dtype_name(c->dtype), st_file_count(ck), st_count(ck));
    uint64_t by_dtype[DTYPE_COUNT] = {0}, other = 0, total = 0;
    per_layer = calloc((size_t)c->n_layers, sizeof(uint64_t));
    if (!per_layer) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < st_count(ck); i++) {
        const struct st_tensor *t = st_get(ck, i);
        by_dtype[t->dtype] += t->nbytes;
        total += t->nbytes;
        int l = layer_of(t->name);
        if (l >= 0 && l < c->n_layers)
            per_layer[l] += t->nbytes;
        else
            other += t->nbytes;
    }
    char h[32];
    printf("bytes            %llu (%s)\n", (unsigned long long)total,
           bytes_format(h, sizeof(h), total, BYTES_DECIMAL));
    for (int d = 0; d < DTYPE_COUNT; d++)
        if (by_dtype[d])
            printf("  %-14s %llu (%s)\n", dtype_name((enum dtype)d),
                   (unsigned long long)by_dtype[d],
                   bytes_format(h, sizeof(h), by_dtype[d], BYTES_DECIMAL));
    printf("bytes per layer\n");
    for (int l = 0; l < c->n_layers; l++)
        printf("  layer %-8d %llu (%s)\n", l, (unsigned long long)per_layer[l],
               bytes_format(h, sizeof(h), per_layer[l], BYTES_DECIMAL));
    printf("  %-14s %llu (%s)\n", "outside layers", (unsigned long long)other,
           bytes_format(h, sizeof(h), other, BYTES_DECIMAL));
    /* the loader's own checks (every tensor present with the shape and dtype config.json
     * implies), so that inspect accepts exactly what forward and generate load */
    struct model *m = NULL;
    struct model_layout layout;
    struct model_shard whole = {.tp_size = 1, .layer_end = c->n_layers};
    if ((rc = model_shard_open(mc, ck, &whole, &m, &layout)) < 0) {
        err_wrap(rc, "%s", dir);
        goto out;
    }
    enum kern_compute auto_compute = model_compute(m);
    const enum dtype wdt = model_weight_dtype(m);
    bool quantized = dtype_is_block(wdt);
    const char *how = quant_ct_is(wdt)
                          ? " (quantized weights: dequantized and rounded to bf16, as is x; "
                            "--compute f32 for exact)"
                          : " (quantized weights: x quantized per block; --compute f32 for exact)";
    model_layout_free(&layout);
    model_close(m);
    printf("weights          match config.json\n");
    /* --compute auto's choice (quantized matrices: x quantized per block, as llama.cpp) */
    printf("compute (auto)   %s%s\n", kern_compute_name(auto_compute), quantized ? how : "");
    /* NaN or Inf in a weight: said here, and named (the first one) */
    const struct st_tensor *bad = NULL;
    size_t at = 0;
    for (size_t i = 0; !bad && st_get(ck, i); i++) {
        const struct st_tensor *t = st_get(ck, i);
        at = t->ct ? ct_find_nonfinite(t) : dtype_find_nonfinite(t->dtype, t->data, t->numel);
        if (at < t->numel)
            bad = t;
    }
    if (bad) {
        printf("finite           no: %s holds NaN or Inf (element %zu)\n", bad->name, at);
        fprintf(stderr, "shardswap inspect: warning: tensor %s holds NaN or Inf (element %zu)\n",
                bad->name, at);
    } else {
        printf("finite           yes\n");
    }
out:
    free(per_layer);
    st_close(ck);
    model_config_free(mc);
    return rc < 0 ? cli_fail("inspect") : 0;
}
