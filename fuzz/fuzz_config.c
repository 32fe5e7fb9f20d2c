/* libFuzzer target: config.json text through the config dispatch and every
 * family's parser. Every accepted config must be one the model code can
 * size (positive dimensions, KV heads dividing the heads). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
    }
    model_config_free(mc);
    free(text);
    return 0;
}
