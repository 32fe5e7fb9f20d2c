/* libFuzzer target: a compressed-tensors checkpoint, config.json (its
 * quantization_config) and model.safetensors (packed weights, scales, zero
 * points, shapes) in one input split at "\n@@@@\n", opened as a model
 * (model_open: the config checked, the tensors wrapped and repacked). A
 * hostile pair must be an error, never a crash, a hang, a read outside the
 * mapping or an allocation the files do not justify; every CT weight of an
 * opened model repacks in full and is scanned for non-finite scales. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "format/ct.h"
#include "format/safetensors.h"
#include "fuzz_util.h"
#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *st;
    size_t st_n, cfg_n = fuzz_split(data, size, &st, &st_n);
    char path[512];
    fuzz_write("config.json", data, cfg_n, path, sizeof(path));
    fuzz_write("model.safetensors", st, st_n, path, sizeof(path));
    struct model *m = NULL;
    if (model_open(fuzz_dir(), &m) == 0) {
        /* the same files through the checkpoint alone: every CT weight
         * repacks whole, 32 columns at a time */
        struct st_checkpoint *ck = NULL;
        if (st_open(fuzz_dir(), &ck) != 0)
            abort(); /* the model opened, its checkpoint must */
        for (size_t i = 0; st_get(ck, i); i++) {
            const struct st_tensor *t = st_get(ck, i);
            if (!t->ct)
                continue;
            (void)ct_find_nonfinite(t);
            if (t->ndim != 2 || t->shape[1] % 32 != 0)
                abort(); /* a CT weight is a matrix of whole blocks */
            const size_t rows = (size_t)t->shape[0], cols = (size_t)t->shape[1];
            void *buf = malloc(t->nbytes / (rows ? rows : 1) + 64);
            if (!buf)
                abort();
            for (size_t r = 0; r < rows; r++)
                ct_copy(t, r, 1, 0, cols, buf);
            free(buf);
        }
        st_close(ck);
    }
    model_close(m);
    return 0;
}
