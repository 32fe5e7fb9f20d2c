/* libFuzzer target: one safetensors file (header and data), opened as a
 * checkpoint and every tensor listed. A hostile file must be an error,
 * never a crash, a hang or a read outside the mapping. */
#include <stddef.h>
#include <stdint.h>

#include "format/safetensors.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    fuzz_write("model.safetensors", data, size, path, sizeof(path));
    struct st_checkpoint *ck = NULL;
    if (st_open(path, &ck) == 0) {
        volatile uint8_t sink = 0;
        for (size_t i = 0; st_get(ck, i); i++) {
            const struct st_tensor *t = st_get(ck, i);
            if (t->nbytes) /* the first and last bytes are inside the mapping */
                sink ^= ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->nbytes - 1];
            (void)st_find(ck, t->name);
        }
        (void)sink;
    }
    st_close(ck);
    return 0;
}
