/* libFuzzer target: one GGUF file, opened and every metadata entry and tensor
 * read back. A hostile file must be an error, never a crash, a hang, a huge
 * allocation or a read outside the mapping. */
#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    fuzz_write("model.gguf", data, size, path, sizeof(path));
    struct gguf_file *g = NULL;
    if (gguf_open(path, &g) == 0) {
        volatile double sink = 0;
        for (size_t i = 0; i < gguf_kv_count(g); i++) {
            const struct gguf_kv *kv = gguf_kv_get(g, i);
            struct gguf_str key = gguf_kv_key(kv);
            sink += key.p[0] + key.p[key.n - 1];
            if (gguf_kv_type(kv) == GGUF_STR && gguf_kv_str(kv).n)
                sink += gguf_kv_str(kv).p[gguf_kv_str(kv).n - 1];
            if (gguf_kv_type(kv) != GGUF_ARR)
                continue;
            uint64_t n = gguf_kv_arr_len(kv);
            enum gguf_vtype t = gguf_kv_arr_type(kv);
            for (uint64_t j = 0; j < n; j++) {
                if (t == GGUF_STR) {
                    struct gguf_str s = gguf_arr_str(kv, j);
                    sink += s.n ? s.p[s.n - 1] : 0;
                } else {
                    sink += gguf_arr_num(kv, j);
                }
            }
        }
        for (size_t i = 0; i < gguf_tensor_count(g); i++) {
            const struct gguf_tensor *t = gguf_tensor_get(g, i);
            if (t->nbytes)
                sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
            (void)gguf_tensor_find(g, t->name);
        }
        int64_t v;
        double d;
        struct gguf_str s;
        bool b;
        (void)gguf_get_int(g, "llama.block_count", false, 0, 0, 100, &v);
        (void)gguf_get_num(g, "llama.rope.freq_base", false, 0, 0, 1e9, &d);
        (void)gguf_get_str(g, "general.architecture", &s);
        (void)gguf_get_bool(g, "tokenizer.ggml.add_bos_token", false, &b);
        (void)sink;
    }
    gguf_close(g);
    return 0;
}
