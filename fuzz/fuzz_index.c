/* libFuzzer target: a sharded checkpoint: model.safetensors.index.json
 * (the input up to a "\n@@@@\n" line) and the shard file it may name,
 * shard.safetensors (the rest). Opened and every tensor listed. */
#include <stddef.h>
#include <stdint.h>

#include "format/safetensors.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *rest;
    size_t rest_n, n = fuzz_split(data, size, &rest, &rest_n);
    char path[512], shard[512];
    fuzz_write("shard.safetensors", rest, rest_n, shard, sizeof(shard));
    fuzz_write("model.safetensors.index.json", data, n, path, sizeof(path));
    struct st_checkpoint *ck = NULL;
    if (st_open(path, &ck) == 0)
        for (size_t i = 0; st_get(ck, i); i++)
            (void)st_find(ck, st_get(ck, i)->name);
    st_close(ck);
    return 0;
}
