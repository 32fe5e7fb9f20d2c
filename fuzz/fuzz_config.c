/* libFuzzer target: config.json text through the OPT config parser. Every
 * accepted config must be one the model code can size (positive dimensions,
 * heads dividing the hidden size). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/opt_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    struct opt_config c;
    if (opt_config_parse(text, "fuzz/config.json", &c) == 0) {
        if (c.hidden < 1 || c.n_heads < 1 || c.hidden % c.n_heads != 0 || c.n_layers < 1 ||
            c.vocab < 1 || c.ffn < 1 || c.max_pos < 1 || c.embed_dim < 1)
            abort(); /* accepted a config the model cannot size */
    }
    free(text);
    return 0;
}
