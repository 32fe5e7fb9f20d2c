/* libFuzzer target: adapter_config.json text read against a tiny Llama
 * base (model_adapter_config_load: PEFT's keys, target matching with
 * regular expressions, rank and alpha patterns). Every accepted config
 * must give ranks in [1, 65536] and finite scales to what it adapts. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/error.h"
#include "fuzz_util.h"
#include "model/adapter.h"
#include "model/model.h"

static const char base_json[] =
    "{\"model_type\": \"llama\", \"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 64, "
    "\"hidden_size\": 16, \"intermediate_size\": 32, \"num_hidden_layers\": 3, "
    "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"max_position_embeddings\": 32}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct model_config *base;
    if (!base && model_config_parse(base_json, "fuzz base", &base) < 0)
        abort();
    char path[512];
    fuzz_write("adapter_config.json", data, size, path, sizeof(path));
    struct model_config *c = NULL;
    if (model_adapter_config_load(fuzz_dir(), base, NULL, &c) == 0) {
        int r = model_adapter_max_rank(c);
        if (r < 1 || r > 65536)
            abort(); /* accepted a config that adapts nothing or with a wild rank */
    }
    model_config_free(c);
    return 0;
}
