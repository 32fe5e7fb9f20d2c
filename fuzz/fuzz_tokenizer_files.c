/* libFuzzer target: tokenizer files. The input is vocab.json, a "\n@@@@\n"
 * line, then merges.txt; when it starts with '{' and has no separator it is
 * also tried as tokenizer.json. A table that loads must encode and decode a
 * fixed text without crashing. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "tokenizer/bpe.h"

static void try_dir(void)
{
    struct bpe *t = NULL;
    if (bpe_open(fuzz_dir(), &t) == 0) {
        static const char text[] = "Hello <s> world </s> \xc3\xa9t\xc3\xa9 12345 \xf0\x9f\x99\x82";
        int32_t *ids = NULL;
        size_t n = 0;
        if (bpe_encode(t, text, sizeof(text) - 1, true, &ids, &n) == 0) {
            char *s = NULL;
            size_t len = 0;
            if (bpe_decode(t, ids, n, false, &s, &len) == 0)
                free(s);
            free(ids);
        }
    }
    bpe_close(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *rest;
    size_t rest_n, n = fuzz_split(data, size, &rest, &rest_n);
    char path[512];
    snprintf(path, sizeof(path), "%s/tokenizer.json", fuzz_dir());
    unlink(path);
    fuzz_write("vocab.json", data, n, path, sizeof(path));
    fuzz_write("merges.txt", rest, rest_n, path, sizeof(path));
    try_dir();
    if (rest_n == 0 && n > 0 && data[0] == '{') {
        snprintf(path, sizeof(path), "%s/vocab.json", fuzz_dir());
        unlink(path);
        snprintf(path, sizeof(path), "%s/merges.txt", fuzz_dir());
        unlink(path);
        fuzz_write("tokenizer.json", data, size, path, sizeof(path));
        try_dir();
        unlink(path);
    }
    return 0;
}
