/* libFuzzer target: config.json text through the config dispatch and every
 * family's parser. Every accepted config must be one the model code can
 * size (positive dimensions, KV heads dividing the heads); a mixture of
 * experts routes to between 1 and all of its experts, each at least one
 * wide; a sliding window is never negative. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/gemma/gemma.h"
#include "model/llama/llama.h"
#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    struct model_config *mc = NULL;
    if (model_config_parse(text, "fuzz/config.json", &mc) == 0) {
        const struct model_info *c = &mc->info;
        if (c->hidden < 1 || c->n_heads < 1 || c->n_kv_heads < 1 || c->head_dim < 1 ||
            c->n_heads % c->n_kv_heads != 0 || c->n_layers < 1 || c->vocab < 1 || c->ffn < 1 ||
            c->max_pos < 1)
            abort(); /* accepted a config the model cannot size */
        if (strcmp(c->family, "llama") == 0) {
            const struct llama_config *l = ARCH_CONFIG(struct llama_config, mc);
            if (l->sliding_window < 0 ||
                (l->n_experts &&
                 (l->n_experts < 1 || l->top_k < 1 || l->top_k > l->n_experts || l->moe_ffn < 1)))
                abort(); /* a router the model cannot run */
        } else if (strcmp(c->family, "gemma") == 0 &&
                   ARCH_CONFIG(struct gemma_config, mc)->sliding_window < 0) {
            abort();
        }
    }
    model_config_free(mc);
    free(text);
    return 0;
}
