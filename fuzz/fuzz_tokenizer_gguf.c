/* libFuzzer target: one GGUF file as a tokenizer and a chat template
 * (tokenizer.ggml.*, tokenizer.chat_template). Hostile metadata must be an
 * error, never a crash; what opens must encode and decode. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "template/chat.h"
#include "tokenizer/bpe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    fuzz_write("model.gguf", data, size, path, sizeof(path));
    struct bpe *t = NULL;
    if (bpe_open(path, &t) == 0) {
        static const char text[] = " Hello  world\n<|end|>ab é 😀 <s>\t12345";
        int32_t *ids = NULL;
        size_t n = 0;
        if (bpe_encode(t, text, sizeof(text) - 1, true, &ids, &n) == 0) {
            char *out = NULL;
            size_t len = 0;
            if (bpe_decode(t, ids, n, false, &out, &len) == 0)
                free(out);
        }
        free(ids);
        bpe_close(t);
    }
    struct chat_template *ct = NULL;
    if (chat_template_load(path, NULL, &ct) == 0)
        chat_template_free(ct);
    return 0;
}
