/* llama.cpp's own logits of a GGUF model, for fixtures (tools/make_quant_gguf_fixtures.py
 * builds it against the static libraries of tools/llamacpp.sh's build; never part of
 * shardswap's build).
 *
 *     llamacpp_logits MODEL.gguf IDS...      IDS: a prompt's token ids, "1,17,42"
 *
 * Prints one JSON array: per prompt, per position, the vocabulary's logits (one context per
 * prompt, one thread, every position's logits from one batch; f32 KV cache, no flash
 * attention, no repacked weights). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *user)
{
    (void)level;
    (void)text;
    (void)user;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: llamacpp_logits MODEL.gguf IDS...\n");
        return 2;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    /* the CPU backend's own kernels, not its extra buffer types: those
     * repack the weights per machine (AVX2 repacked Q4_0 / Q4_K; AMX tiles
     * where the CPU has AMX, which crashed in ggml_backend_amx_mul_mat on
     * the Xeon of 2026-12-05), so the reference would depend on where it
     * was made */
    struct llama_model_params mp = llama_model_default_params();
    mp.use_extra_bufts = false;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "llamacpp_logits: %s does not load\n", argv[1]);
        return 1;
    }
    const int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
    printf("[");
    for (int a = 2; a < argc; a++) {
        struct llama_context_params cp = llama_context_default_params();
        cp.n_ctx = cp.n_batch = cp.n_ubatch = 64;
        cp.n_threads = cp.n_threads_batch = 1;
        /* f32 keys and values and no flash attention (its f16 products): the
         * matmuls' quantized x is then the only rounding llama.cpp adds */
        cp.type_k = cp.type_v = GGML_TYPE_F32;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
        struct llama_context *ctx = llama_init_from_model(model, cp);
        llama_token ids[64];
        int n = 0;
        for (char *s = strtok(argv[a], ","); s && n < 64; s = strtok(NULL, ","))
            ids[n++] = atoi(s);
        struct llama_batch b = llama_batch_init(n, 0, 1);
        for (int i = 0; i < n; i++) {
            b.token[i] = ids[i];
            b.pos[i] = i;
            b.n_seq_id[i] = 1;
            b.seq_id[i][0] = 0;
            b.logits[i] = 1;
        }
        b.n_tokens = n;
        if (!ctx || llama_decode(ctx, b) != 0) {
            fprintf(stderr, "llamacpp_logits: %s: decode failed\n", argv[1]);
            return 1;
        }
        printf("%s[", a > 2 ? "," : "");
        for (int i = 0; i < n; i++) {
            const float *lg = llama_get_logits_ith(ctx, i);
            printf("%s[", i ? "," : "");
            for (int v = 0; v < nv; v++)
                printf("%s%.9g", v ? "," : "", lg[v]);
            printf("]");
        }
        printf("]");
        llama_batch_free(b);
        llama_free(ctx);
    }
    printf("]\n");
    llama_model_free(model);
    return 0;
}
