/* libFuzzer target: encode and decode with the real tokenizers committed in
 * data/tokenizer: the input's first byte picks OPT, Llama 3, Qwen2, Llama 2
 * or Phi-3, the rest is the text. With the byte-level ones (OPT, Llama 3,
 * Qwen2) valid UTF-8 must round-trip: decode(encode(s)) == s; with every one
 * the streaming decoder's output must equal the whole decode (special
 * tokens skipped) for any input. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/bpe.h"

#define N_TOKENIZERS 5

static const struct bpe *tok(unsigned k)
{
    static const char *const DIRS[N_TOKENIZERS] = {"opt", "llama3", "qwen2", "llama2", "phi3"};
    static struct bpe *t[N_TOKENIZERS];
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/data/tokenizer/%s", SHARDSWAP_SOURCE_DIR, DIRS[k]);
    if (!t[k] && bpe_open(dir, &t[k]) < 0)
        abort();
    return t[k];
}

/* RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF. */
static bool utf8_valid(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (k == 0 || i + k > n)
            return false;
        uint32_t cp = k == 1 ? c : k == 2 ? c & 0x1f : k == 3 ? c & 0x0f : c & 0x07;
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if ((k == 2 && cp < 0x80) || (k == 3 && cp < 0x800) || (k == 4 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += k;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    unsigned which = data[0] % N_TOKENIZERS;
    const struct bpe *t = tok(which);
    data++;
    size--;
    int32_t *ids = NULL;
    size_t n = 0;
    if (bpe_encode(t, (const char *)data, size, false, &ids, &n) < 0)
        return 0;
    char *text = NULL;
    size_t len = 0;
    if (which < 3 && utf8_valid(data, size)) {
        if (bpe_decode(t, ids, n, false, &text, &len) < 0 || len != size ||
            memcmp(text, data, size) != 0)
            abort(); /* valid UTF-8 did not round-trip */
        free(text);
        text = NULL;
    }
    /* streaming == whole, special tokens skipped */
    if (bpe_decode(t, ids, n, true, &text, &len) == 0) {
        size_t cap = bpe_stream_chunk_max(t), got = 0;
        size_t room = len + cap;
        char *chunk = malloc(cap), *all = malloc(room);
        struct bpe_stream s;
        bpe_stream_init(&s, t);
        for (size_t i = 0; i < n && chunk && all; i++) {
            int k = bpe_stream_push(&s, ids[i], chunk, cap);
            if (k < 0 || got + (size_t)k > room)
                abort(); /* an error, or more bytes than the whole decode */
            memcpy(all + got, chunk, (size_t)k);
            got += (size_t)k;
        }
        int k = chunk && all ? bpe_stream_finish(&s, chunk, cap) : -1;
        if (k >= 0) {
            if (got + (size_t)k > room)
                abort();
            memcpy(all + got, chunk, (size_t)k);
            got += (size_t)k;
            if (got != len || memcmp(all, text, len) != 0)
                abort(); /* the streaming decoder disagrees with the whole decode */
        }
        free(chunk);
        free(all);
        free(text);
    }
    free(ids);
    return 0;
}
