/* Tokenizer tests.
 *
 * A minimal tokenizer (the 4 OPT specials + 256 byte symbols, no merges, as
 * `shardswap gen-model` writes it) and small variants of it written to a temp
 * dir, covering round trips, invalid UTF-8, the streaming decoder,
 * tokenizer.json, the config files and bad files.
 * The real files committed under data/tokenizer: OPT's published vectors and
 * a 300-string corpus whose ids come from Hugging Face
 * (tools/make_tokenizer_corpus.py), round trips and streaming over it, the
 * same through tokenizer.json, concurrent encoding, and GPT-2's original
 * files mapped to OPT's ids through fairseq's dict.txt.
 */
#include "core/error.h"
#include "test.h"
#include "tokenizer/bpe.h"

#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ---- */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* GPT-2's byte -> code point table, written out independently of the library. */
static unsigned byte_cp(unsigned b)
{
    unsigned n = 0;
    for (unsigned i = 0; i < 256; i++) {
        bool self = (i >= 0x21 && i <= 0x7E) || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE;
        if (i == b)
            return self ? i : 256 + n;
        n += !self;
    }
    return 0;
}

static void utf8_put(unsigned cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3F)), out[2] = 0;
    }
}

/* Whether s[0..n) is valid UTF-8 (no overlongs, surrogates or > U+10FFFF). */
static bool utf8_valid(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i], len, cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            len = 2, cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3, cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4, cp = c & 0x07;
        } else {
            return false;
        }
        if (i + len > n)
            return false;
        for (unsigned k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += len;
    }
    return true;
}

static char tmp_dir[256];

static void write_file(const char *name, const char *content)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", tmp_dir, name);
    test_write_text(path, content);
}

static void remove_file(const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", tmp_dir, name);
    unlink(path);
}

static void remove_all(void)
{
    static const char *const names[] = {"vocab.json",
                                        "merges.txt",
                                        "tokenizer.json",
                                        "tokenizer_config.json",
                                        "special_tokens_map.json",
                                        "encoder.json",
                                        "vocab.bpe"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        remove_file(names[i]);
}

/* The minimal vocabulary: <s> <pad> </s> <unk>, then the 256 byte symbols in
 * byte order (ids 4..259), plus any extra (symbol, id) pairs. New reference. */
static json_t *minimal_vocab(void)
{
    json_t *v = json_object();
    json_object_set_new(v, "<s>", json_integer(0));
    json_object_set_new(v, "<pad>", json_integer(1));
    json_object_set_new(v, "</s>", json_integer(2));
    json_object_set_new(v, "<unk>", json_integer(3));
    for (unsigned b = 0; b < 256; b++) {
        char sym[4];
        utf8_put(byte_cp(b), sym);
        json_object_set_new(v, sym, json_integer(4 + b));
    }
    return v;
}

static void write_json_flags(const char *name, json_t *j, size_t flags)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", tmp_dir, name);
    if (json_dump_file(j, path, flags) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
}

static void write_json(const char *name, json_t *j)
{
    write_json_flags(name, j, JSON_COMPACT);
}

static void write_minimal(void)
{
    remove_all();
    json_t *v = minimal_vocab();
    write_json("vocab.json", v);
    json_decref(v);
    write_file("merges.txt", "#version: 0.2\n");
}

static bool ids_equal(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof(*a)) == 0);
}

static void ids_print(const char *label, const int32_t *ids, size_t n)
{
    fprintf(stderr, "  %s:", label);
    for (size_t i = 0; i < n && i < 40; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

/* Encodes text and compares with the expected ids (BOS included when add_bos). */
static void check_encode(const struct bpe *t, const char *text, size_t len, bool add_bos,
                         const int32_t *want, size_t n_want)
{
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = bpe_encode(t, text, len, add_bos, &ids, &n);
    CHECK_MSG(rc == 0, "encode failed: %s", err_msg());
    bool ok = rc == 0 && ids_equal(ids, n, want, n_want);
    CHECK_MSG(ok, "ids differ for \"%.*s\"", (int)(len > 60 ? 60 : len), text);
    if (!ok) {
        ids_print("got ", ids, n);
        ids_print("want", want, n_want);
    }
    free(ids);
}

/* Decodes ids and compares with want[0..n_want). */
static void check_decode(const struct bpe *t, const int32_t *ids, size_t n, bool skip_special,
                         const char *want, size_t n_want)
{
    char *text = NULL;
    size_t len = 0;
    int rc = bpe_decode(t, ids, n, skip_special, &text, &len);
    CHECK_MSG(rc == 0, "decode failed: %s", err_msg());
    CHECK_MSG(rc == 0 && len == n_want && memcmp(text, want, len) == 0 && text[len] == '\0',
              "decode gave \"%s\" (%zu bytes), want \"%.*s\" (%zu bytes)", text ? text : "", len,
              (int)n_want, want, n_want);
    free(text);
}

/* Streams ids one at a time: every chunk must be valid UTF-8 and the whole
 * must equal bpe_decode with skip_special. */
static void check_stream(const struct bpe *t, const int32_t *ids, size_t n, const char *what)
{
    char *full = NULL;
    size_t full_len = 0;
    if (bpe_decode(t, ids, n, true, &full, &full_len) != 0) {
        CHECK_MSG(false, "decode failed: %s", err_msg());
        return;
    }
    size_t cap = bpe_stream_chunk_max(t);
    char *chunk = malloc(cap);
    char *got = malloc(full_len + cap + 1);
    size_t got_len = 0;
    bool chunks_valid = true, ok = true;
    struct bpe_stream s;
    bpe_stream_init(&s, t);
    for (size_t i = 0; i <= n && ok; i++) {
        int w = i < n ? bpe_stream_push(&s, ids[i], chunk, cap) : bpe_stream_finish(&s, chunk, cap);
        if (w < 0 || got_len + (size_t)w > full_len) {
            ok = false;
            break;
        }
        chunks_valid &= utf8_valid(chunk, (size_t)w);
        memcpy(got + got_len, chunk, (size_t)w);
        got_len += (size_t)w;
    }
    CHECK_MSG(ok && got_len == full_len && memcmp(got, full, full_len) == 0,
              "stream differs from decode for %s", what);
    CHECK_MSG(chunks_valid, "stream emitted a partial UTF-8 character for %s", what);
    free(full);
    free(chunk);
    free(got);
}

/* Opening dir must fail with a message that mentions needle. */
static void check_open_fails(const char *dir, const char *needle, const char *what)
{
    struct bpe *t = (struct bpe *)1;
    err_set(0, "%s", "");
    int rc = bpe_open(dir, &t);
    CHECK_MSG(rc < 0 && t == NULL, "%s: bpe_open should fail (rc %d)", what, rc);
    const char *msg = err_msg();
    CHECK_MSG(msg[0] != '\0' && strchr(msg, '\n') == NULL, "%s: want a one-line message", what);
    CHECK_MSG(strstr(msg, needle) != NULL, "%s: message \"%s\" should mention \"%s\"", what, msg,
              needle);
    if (rc == 0)
        bpe_close(t);
}

/* ---- tests on generated tokenizers ---- */

TEST(minimal)
{
    write_minimal();
    struct bpe *t = NULL;
    int rc = bpe_open(tmp_dir, &t);
    CHECK_MSG(rc == 0, "minimal tokenizer: %s", err_msg());
    if (rc != 0)
        return;
    CHECK(bpe_vocab_size(t) == 260);
    CHECK(bpe_bos_id(t) == 2 && bpe_eos_id(t) == 2 && bpe_pad_id(t) == 1 && bpe_adds_bos(t));
    CHECK(bpe_is_special(t, 2) && bpe_is_special(t, 1) && !bpe_is_special(t, 0) &&
          !bpe_is_special(t, 4));

    /* No merges: one id per byte, 4 + byte. */
    static const char *const texts[] = {
        "hello world",
        "",
        ("caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80 "
         "\xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7"),
        "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 family",
        "tabs\tand\nnewlines\r\n  trailing   ",
        "it's DON'T 123456789 \xe2\x80\x94 e\xcc\x81",
    };
    for (size_t k = 0; k < sizeof(texts) / sizeof(texts[0]); k++) {
        const char *s = texts[k];
        size_t len = strlen(s);
        int32_t want[128];
        want[0] = 2;
        for (size_t i = 0; i < len; i++)
            want[i + 1] = 4 + (unsigned char)s[i];
        check_encode(t, s, len, true, want, len + 1);
        check_encode(t, s, len, false, want + 1, len);
        check_decode(t, want + 1, len, false, s, len);
        check_decode(t, want, len + 1, true, s, len);
        check_stream(t, want, len + 1, s);
    }

    /* Random valid UTF-8 (code points from every plane) round-trips and streams. */
    srand(12345);
    for (int round = 0; round < 50; round++) {
        char s[400];
        size_t len = 0;
        while (len < 360) {
            unsigned cp;
            do {
                unsigned plane = (unsigned)rand() % 4;
                cp = plane == 0   ? (unsigned)rand() % 0x80
                     : plane == 1 ? (unsigned)rand() % 0x800
                     : plane == 2 ? (unsigned)rand() % 0x10000
                                  : 0x10000 + (unsigned)rand() % 0x100000;
            } while (cp >= 0xD800 && cp <= 0xDFFF);
            unsigned char *o = (unsigned char *)s + len;
            if (cp < 0x80) {
                o[0] = (unsigned char)cp, len += 1;
            } else if (cp < 0x800) {
                o[0] = (unsigned char)(0xC0 | cp >> 6), o[1] = (unsigned char)(0x80 | (cp & 0x3F));
                len += 2;
            } else if (cp < 0x10000) {
                o[0] = (unsigned char)(0xE0 | cp >> 12);
                o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
                o[2] = (unsigned char)(0x80 | (cp & 0x3F));
                len += 3;
            } else {
                o[0] = (unsigned char)(0xF0 | cp >> 18);
                o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
                o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
                o[3] = (unsigned char)(0x80 | (cp & 0x3F));
                len += 4;
            }
        }
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK(bpe_encode(t, s, len, false, &ids, &n) == 0);
        bool bytes_ok = n == len;
        for (size_t i = 0; bytes_ok && i < n; i++)
            bytes_ok = ids[i] == 4 + (unsigned char)s[i];
        CHECK_MSG(bytes_ok, "random text %d: ids are not the bytes", round);
        check_decode(t, ids, n, false, s, len);
        check_stream(t, ids, n, "random text");
        free(ids);
    }

    /* Special tokens inside text are single ids; "<s>" and "<unk>" are not special to OPT. */
    {
        const char *s = "a</s>b<pad>";
        int32_t want[] = {4 + 'a', 2, 4 + 'b', 1};
        check_encode(t, s, strlen(s), false, want, 4);
        check_decode(t, want, 4, false, s, strlen(s));
        check_decode(t, want, 4, true, "ab", 2);
        const char *u = "<s>";
        int32_t want_u[] = {4 + '<', 4 + 's', 4 + '>'};
        check_encode(t, u, 3, false, want_u, 3);
        int32_t plain[] = {0, 3};
        check_decode(t, plain, 2, true, "<s><unk>", 8);
    }

    /* Invalid UTF-8 input encodes byte by byte; decode replaces what cannot
     * be UTF-8 with U+FFFD the way Python's errors="replace" does. */
    {
        static const struct {
            const char *in, *out;
        } cases[] = {
            {"\xff", "\xef\xbf\xbd"},
            {"a\xc3(", "a\xef\xbf\xbd("},
            {"\xe2\x82", "\xef\xbf\xbd"}, /* truncated: one U+FFFD */
            {"\xe2\x82x\xe2\x82\xac", "\xef\xbf\xbdx\xe2\x82\xac"},
            {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* surrogate */
            {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},                 /* overlong */
            {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
            {"\xf0\x9f\x98", "\xef\xbf\xbd"},
            {"\x80\x80 ok", "\xef\xbf\xbd\xef\xbf\xbd ok"},
        };
        for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
            const char *s = cases[k].in;
            size_t len = strlen(s);
            int32_t *ids = NULL;
            size_t n = 0;
            CHECK_MSG(bpe_encode(t, s, len, true, &ids, &n) == 0 && n == len + 1,
                      "invalid UTF-8 case %zu", k);
            check_decode(t, ids, n, true, cases[k].out, strlen(cases[k].out));
            check_stream(t, ids, n, "invalid UTF-8");
            free(ids);
        }
    }

    /* Ids past the vocabulary decode to nothing; negative ids are errors. */
    {
        int32_t ids[] = {4 + 'o', 260, 50000, 4 + 'k'};
        check_decode(t, ids, 4, false, "ok", 2);
        int32_t neg[] = {4, -1};
        char *text = NULL;
        size_t len;
        CHECK(bpe_decode(t, neg, 2, false, &text, &len) == ERR_INVALID && text == NULL);
        struct bpe_stream s;
        bpe_stream_init(&s, t);
        char buf[16];
        CHECK(bpe_stream_push(&s, -5, buf, sizeof(buf)) == ERR_INVALID);
    }

    /* A short stream buffer is an error that leaves the stream as it was. */
    {
        struct bpe_stream s;
        bpe_stream_init(&s, t);
        char buf[8];
        CHECK(bpe_stream_push(&s, 4 + 0xE2, buf, sizeof(buf)) == 0); /* held back */
        CHECK(bpe_stream_push(&s, 4 + 0x82, buf, sizeof(buf)) == 0);
        CHECK(bpe_stream_push(&s, 4 + 0xAC, buf, 2) == ERR_INVALID); /* needs 3 */
        CHECK(bpe_stream_push(&s, 4 + 0xAC, buf, sizeof(buf)) == 3 &&
              memcmp(buf, "\xe2\x82\xac", 3) == 0);
        CHECK(bpe_stream_finish(&s, buf, sizeof(buf)) == 0);
        CHECK(bpe_stream_push(&s, 4 + 0xF0, buf, sizeof(buf)) == 0);
        CHECK(bpe_stream_push(&s, 2, buf, sizeof(buf)) == 0); /* special: nothing */
        CHECK(bpe_stream_finish(&s, buf, sizeof(buf)) == 3 && memcmp(buf, "\xef\xbf\xbd", 3) == 0);
    }

    /* Long runs go through the merge heap and the regex without trouble. */
    {
        size_t len = 200000;
        char *s = malloc(len);
        memset(s, ' ', len);
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK(bpe_encode(t, s, len, false, &ids, &n) == 0 && n == len);
        free(ids);
        free(s);
    }
    /* NULL text is fine when empty. */
    {
        int32_t *ids = NULL;
        size_t n = 9;
        CHECK(bpe_encode(t, NULL, 0, true, &ids, &n) == 0 && n == 1 && ids[0] == 2);
        free(ids);
        CHECK(bpe_encode(t, NULL, 3, true, &ids, &n) == ERR_INVALID);
    }
    bpe_close(t);
    bpe_close(NULL);
}

/* Merges, tokenizer.json in both merge spellings, added tokens and config files. */
TEST(formats)
{
    /* merges.txt with a few merges. "l l" ranks first, so "hello" goes
     * h e l l o -> h e ll o -> he ll o -> hell o; " world" only merges "Ġw". */
    write_minimal();
    json_t *v = minimal_vocab();
    json_object_set_new(v, "he", json_integer(260));
    json_object_set_new(v, "ll", json_integer(261));
    json_object_set_new(v, "hell", json_integer(262));
    json_object_set_new(v, "Ġw", json_integer(263));
    write_json("vocab.json", v);
    write_file("merges.txt", "#version: 0.2\nl l\nh e\nhe ll\n\xc4\xa0 w\n");
    struct bpe *t = NULL;
    int rc = bpe_open(tmp_dir, &t);
    CHECK_MSG(rc == 0, "merges: %s", err_msg());
    int32_t want[] = {2, 262, 4 + 'o', 263, 4 + 'o', 4 + 'r', 4 + 'l', 4 + 'd'};
    if (rc == 0)
        check_encode(t, "hello world", 11, true, want, 8);
    bpe_close(t);

    /* vocab.json spelled with \\u escapes (surrogate pairs too) and spaces. */
    json_t *ve = minimal_vocab();
    json_object_set_new(ve, "\xf0\x9f\x98\x80", json_integer(260)); /* outside the alphabet */
    json_object_set_new(ve, "he", json_integer(300));
    write_json_flags("vocab.json", ve, JSON_ENSURE_ASCII | JSON_INDENT(2));
    json_decref(ve);
    write_file("merges.txt", "#version: 0.2\r\nh e\r\n\r\n");
    rc = bpe_open(tmp_dir, &t);
    CHECK_MSG(rc == 0, "escaped vocab.json: %s", err_msg());
    if (rc == 0) {
        CHECK(bpe_vocab_size(t) == 301);
        int32_t w4[] = {300, 4 + '"', 4 + '\\'};
        check_encode(t, "he\"\\", 4, false, w4, 3);
        int32_t emoji[] = {260, 299};
        check_decode(t, emoji, 2, false, "\xf0\x9f\x98\x80", 4); /* 299 is a hole: nothing */
    }
    bpe_close(t);

    /* The same as tokenizer.json, merges as [a, b] pairs, with an added token
     * past the vocabulary and a template that prepends "<s>". */
    remove_all();
    json_t *tj = json_pack(
        "{s:o, s:n, s:{s:s, s:b, s:b}, s:{s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}]},"
        " s:{s:s, s:O, s:[[s,s], s, s, [s,s]]},"
        " s:[{s:i, s:s, s:b, s:b, s:b}, {s:i, s:s, s:b, s:b, s:b}]}",
        "version", json_string("1.0"), "normalizer", "pre_tokenizer", "type", "ByteLevel",
        "add_prefix_space", 0, "use_regex", 1, "post_processor", "type", "TemplateProcessing",
        "single", "SpecialToken", "id", "<s>", "type_id", 0, "Sequence", "id", "A", "type_id", 0,
        "model", "type", "BPE", "vocab", v, "merges", "l", "l", "h e", "he ll", "\xc4\xa0", "w",
        "added_tokens", "id", 0, "content", "<s>", "special", 1, "lstrip", 0, "rstrip", 0, "id",
        264, "content", "<|user|>", "special", 0, "lstrip", 0, "rstrip", 1);
    CHECK(tj != NULL);
    write_json("tokenizer.json", tj);
    json_decref(tj);
    rc = bpe_open(tmp_dir, &t);
    CHECK_MSG(rc == 0, "tokenizer.json: %s", err_msg());
    if (rc == 0) {
        CHECK(bpe_vocab_size(t) == 265 && bpe_bos_id(t) == 0 && bpe_adds_bos(t));
        /* "<|user|>" swallows the spaces after it (rstrip) and is not special. */
        const char *s = "hello<|user|>  world</s>";
        int32_t w2[] = {0, 262, 4 + 'o', 264, 4 + 'w', 4 + 'o', 4 + 'r', 4 + 'l', 4 + 'd', 2};
        check_encode(t, s, strlen(s), true, w2, 10);
        check_decode(t, w2, 10, true, "hello<|user|>world", 18);
        CHECK(!bpe_is_special(t, 264) && bpe_is_special(t, 0));
    }
    bpe_close(t);

    /* tokenizer_config.json: add_bos_token false, bos as an object; the map wins for eos. */
    write_minimal();
    write_file("tokenizer_config.json",
               "{\"add_bos_token\": false, \"bos_token\": {\"content\": \"<s>\"},"
               " \"eos_token\": \"<s>\", \"pad_token\": null, \"unk_token\": \"<unk>\"}");
    write_file("special_tokens_map.json", "{\"eos_token\": \"</s>\", \"additional_special_tokens\":"
                                          " [\"<|im_end|>\"]}");
    rc = bpe_open(tmp_dir, &t);
    CHECK_MSG(rc == 0, "config: %s", err_msg());
    if (rc == 0) {
        CHECK(bpe_bos_id(t) == 0 && !bpe_adds_bos(t) && bpe_eos_id(t) == 2 && bpe_pad_id(t) == -1 &&
              bpe_unk_id(t) == 3);
        CHECK(bpe_vocab_size(t) == 261); /* "<|im_end|>" got a new id */
        const char *s = "<unk>x<|im_end|><pad>";
        int32_t w3[] = {3, 4 + 'x', 260, 4 + '<', 4 + 'p', 4 + 'a', 4 + 'd', 4 + '>'};
        check_encode(t, s, strlen(s), true, w3, 8);
        check_decode(t, w3, 8, false, s, strlen(s));
    }
    bpe_close(t);
    json_decref(v);
    remove_all();
}

TEST(errors)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/no-such-dir", tmp_dir);
    check_open_fails(path, "no-such-dir", "missing dir");
    remove_all();
    check_open_fails(tmp_dir, "no tokenizer files", "empty dir");
    check_open_fails(NULL, "directory", "NULL dir");

    write_minimal();
    remove_file("merges.txt");
    check_open_fails(tmp_dir, "merges.txt", "missing merges.txt");

    write_minimal();
    write_file("vocab.json", "{\"<s>\": 0, \"a\": }");
    check_open_fails(tmp_dir, "vocab.json", "malformed vocab.json");
    write_file("vocab.json", "[1, 2]");
    check_open_fails(tmp_dir, "vocab.json", "vocab.json not an object");
    write_file("vocab.json", "{\"<s>\": \"zero\"}");
    check_open_fails(tmp_dir, "vocab.json", "vocab.json string id");
    write_file("vocab.json", "{\"<s>\": -3}");
    check_open_fails(tmp_dir, "vocab.json", "vocab.json negative id");
    write_file("vocab.json", "{\"<s>\": 0, \"a\": 1}");
    check_open_fails(tmp_dir, "byte-level symbol", "vocab.json without byte symbols");
    write_file("vocab.json", "{\"<s>\": 0, \"a\": 1.5}");
    check_open_fails(tmp_dir, "integer id", "vocab.json fractional id");
    write_file("vocab.json", "{\"<s>\": 0, \"a\": 99999999999}");
    check_open_fails(tmp_dir, "integer id", "vocab.json huge id");
    write_file("vocab.json", "{\"<s>\": 0, \"a\": 1} x");
    check_open_fails(tmp_dir, "line 1 column 20", "vocab.json trailing text");
    write_file("vocab.json", "{\n\"<s>\": 0,\n\"a\" 1}");
    check_open_fails(tmp_dir, "line 3 column 5: ':' expected", "vocab.json missing colon");
    write_file("vocab.json", "{\"\\ud800\": 0}");
    check_open_fails(tmp_dir, "invalid Unicode", "vocab.json lone surrogate");
    write_file("vocab.json", "{\"\\q\": 0}");
    check_open_fails(tmp_dir, "escape", "vocab.json bad escape");
    write_file("vocab.json", "{\"abc");
    check_open_fails(tmp_dir, "premature end of input", "vocab.json unterminated string");
    write_file("vocab.json", "{\"\xff\": 0}");
    check_open_fails(tmp_dir, "unable to decode byte 0xff", "vocab.json invalid UTF-8");
    write_file("vocab.json", "{}");
    check_open_fails(tmp_dir, "empty", "vocab.json empty");
    write_file("vocab.json", "");
    check_open_fails(tmp_dir, "vocab.json", "vocab.json empty file");

    write_minimal();
    write_file("merges.txt", "#version: 0.2\nq zzz\n");
    check_open_fails(tmp_dir, "merges.txt:2", "merge with an unknown symbol");
    check_open_fails(tmp_dir, "zzz", "merge with an unknown symbol");
    write_file("merges.txt", "h e\n");
    check_open_fails(tmp_dir, "merged symbol", "merge whose result is not in the vocab");
    write_file("merges.txt", "#version: 0.2\nabc\n");
    check_open_fails(tmp_dir, "merges.txt:2", "merge line with one symbol");
    write_file("merges.txt", "a b c\n");
    check_open_fails(tmp_dir, "merges.txt:1", "merge line with three symbols");

    write_minimal();
    write_file("tokenizer_config.json", "{\"add_bos_token\": tru");
    check_open_fails(tmp_dir, "tokenizer_config.json", "malformed tokenizer_config.json");
    write_file("tokenizer_config.json", "{\"bos_token\": 5}");
    check_open_fails(tmp_dir, "bos_token", "bos_token a number");
    write_file("tokenizer_config.json", "{\"add_bos_token\": \"yes\"}");
    check_open_fails(tmp_dir, "add_bos_token", "add_bos_token a string");

    remove_all();
    write_file("tokenizer.json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}");
    check_open_fails(tmp_dir, "WordPiece", "tokenizer.json WordPiece");
    write_file("tokenizer.json",
               "{\"normalizer\": {\"type\": \"Lowercase\"}, \"model\": {\"type\": "
               "\"BPE\", \"vocab\": {}, \"merges\": []}}");
    check_open_fails(tmp_dir, "normalizer", "tokenizer.json with a normalizer");
    json_t *tj = json_pack("{s:{s:s}, s:{s:s, s:o, s:[s, i]}}", "pre_tokenizer", "type",
                           "ByteLevel", "model", "type", "BPE", "vocab", minimal_vocab(), "merges",
                           "\xc4\xa0 \xc4\xa0", 7);
    write_json("tokenizer.json", tj);
    json_decref(tj);
    check_open_fails(tmp_dir, "model.merges[0]: merged symbol",
                     "tokenizer.json, merge result unknown");
    tj = json_pack("{s:{s:s}, s:{s:s, s:o, s:[i]}}", "pre_tokenizer", "type", "ByteLevel", "model",
                   "type", "BPE", "vocab", minimal_vocab(), "merges", 7);
    write_json("tokenizer.json", tj);
    json_decref(tj);
    check_open_fails(tmp_dir, "model.merges[0]: expected", "tokenizer.json with a bad merge");
    write_file("tokenizer.json", "{\"model\": ");
    check_open_fails(tmp_dir, "tokenizer.json", "truncated tokenizer.json");
    remove_all();
}

/* ---- consistency of the token tables ---- */

/* vocab.json may spell a symbol as "" (Hugging Face loads it; BPE can never
 * produce it, so it only ever decodes, to nothing). As the first key it once
 * handed memcpy a null pointer (UBSan). */
TEST(empty_symbol)
{
    write_minimal();
    json_t *v = json_object();
    json_object_set_new(v, "", json_integer(260));
    json_object_update_new(v, minimal_vocab());
    write_json("vocab.json", v);
    json_decref(v);
    struct bpe *t = NULL;
    int rc = bpe_open(tmp_dir, &t);
    CHECK_MSG(rc == 0, "vocab.json with \"\" first: %s", err_msg());
    if (rc == 0) {
        CHECK(bpe_vocab_size(t) == 261);
        int32_t want[] = {2, 4 + 'h', 4 + 'i'};
        check_encode(t, "hi", 2, true, want, 3);
        int32_t ids[] = {4 + 'h', 260, 4 + 'i', 260};
        check_decode(t, ids, 4, false, "hi", 2);
        check_stream(t, ids, 4, "the empty symbol");
    }
    bpe_close(t);
    remove_all();
}

/* An id that two symbols or two added tokens share would decode to only one
 * of them: refused, naming the id and both. */
TEST(shared_ids)
{
    /* Two vocab.json symbols. */
    write_minimal();
    json_t *v = minimal_vocab();
    json_object_set_new(v, "xy", json_integer(300));
    json_object_set_new(v, "zw", json_integer(300));
    write_json("vocab.json", v);
    json_decref(v);
    check_open_fails(tmp_dir, "vocab.json: symbols 'xy' and 'zw' both have id 300",
                     "vocab.json, two symbols with one id");
    /* A symbol and a byte symbol ("a" is 4 + 'a'). */
    v = minimal_vocab();
    json_object_set_new(v, "<mask>", json_integer(4 + 'a'));
    write_json("vocab.json", v);
    json_decref(v);
    check_open_fails(tmp_dir, "symbols 'a' and '<mask>' both have id 101",
                     "vocab.json, a symbol with a byte symbol's id");

    /* Two added tokens in tokenizer.json, then the same spread over
     * tokenizer.json and tokenizer_config.json. */
    remove_all();
    json_t *tj = json_pack("{s:{s:s}, s:{s:s, s:o, s:[]}, s:[{s:i, s:s}, {s:i, s:s}, {s:i, s:s}]}",
                           "pre_tokenizer", "type", "ByteLevel", "model", "type", "BPE", "vocab",
                           minimal_vocab(), "merges", "added_tokens", "id", 50000, "content", "<a>",
                           "id", 50001, "content", "<b>", "id", 50000, "content", "<c>");
    write_json("tokenizer.json", tj);
    json_decref(tj);
    check_open_fails(tmp_dir, "tokenizer.json: added tokens '<a>' and '<c>' both have id 50000",
                     "tokenizer.json, two added tokens with one id");
    tj = json_pack("{s:{s:s}, s:{s:s, s:o, s:[]}, s:[{s:i, s:s}]}", "pre_tokenizer", "type",
                   "ByteLevel", "model", "type", "BPE", "vocab", minimal_vocab(), "merges",
                   "added_tokens", "id", 50003, "content", "<|user|>");
    write_json("tokenizer.json", tj);
    json_decref(tj);
    write_file("tokenizer_config.json",
               "{\"added_tokens_decoder\": {\"50003\": {\"content\": \"<|bot|>\"}}}");
    check_open_fails(tmp_dir, "added tokens '<|user|>' and '<|bot|>' both have id 50003",
                     "tokenizer.json and tokenizer_config.json, one id");
    check_open_fails(tmp_dir, "tokenizer_config.json", "the file of the second token");
    /* The same content with the same id is one token, not a clash. */
    write_file("tokenizer_config.json",
               "{\"added_tokens_decoder\": {\"50003\": {\"content\": \"<|user|>\"}}}");
    struct bpe *t = NULL;
    int rc = bpe_open(tmp_dir, &t);
    CHECK_MSG(rc == 0, "one added token named twice: %s", err_msg());
    bpe_close(t);

    /* A role whose vocab id an added token already has. */
    write_minimal();
    write_file("tokenizer_config.json", "{\"added_tokens_decoder\": {\"0\": {\"content\": "
                                        "\"<x>\"}}, \"bos_token\": \"<s>\"}");
    check_open_fails(tmp_dir, "added tokens '<x>' and '<s>' both have id 0",
                     "bos_token with an added token's id");
    remove_all();
}

/* 50k added tokens (added_tokens_decoder, with ids) and 1k more without ids
 * (additional_special_tokens, given new ids in order) load and keep their
 * ids. Each used to cost a scan of all the tokens before it, and encoding
 * one a scan of all of them: 50k took seconds to load. */
TEST(many_added)
{
    enum { N_DEC = 50000, N_NEW = 1000, FIRST = 50000 };
    write_minimal();
    json_t *dec = json_object(), *extra = json_array();
    char key[32], content[32];
    for (int i = 0; i < N_DEC; i++) {
        snprintf(key, sizeof(key), "%d", FIRST + i);
        snprintf(content, sizeof(content), "<tok%d>", i);
        json_object_set_new(dec, key, json_pack("{s:s, s:b}", "content", content, "special", 0));
    }
    for (int i = 0; i < N_NEW; i++) {
        snprintf(content, sizeof(content), "<new%d>", i);
        json_array_append_new(extra, json_string(content));
    }
    json_t *cfg =
        json_pack("{s:o, s:o}", "added_tokens_decoder", dec, "additional_special_tokens", extra);
    write_json("tokenizer_config.json", cfg);
    json_decref(cfg);
    struct bpe *t = NULL;
    int rc = bpe_open(tmp_dir, &t);
    CHECK_MSG(rc == 0, "%d added tokens: %s", N_DEC + N_NEW, err_msg());
    if (rc != 0)
        return;
    CHECK(bpe_vocab_size(t) == FIRST + N_DEC + N_NEW);
    int bad = 0;
    for (int i = 0; i < N_DEC + N_NEW; i++) {
        if (i < N_DEC)
            snprintf(content, sizeof(content), "<tok%d>", i);
        else
            snprintf(content, sizeof(content), "<new%d>", i - N_DEC);
        int32_t *ids = NULL, id = FIRST + i;
        size_t n = 0;
        char *text = NULL;
        size_t len = 0;
        bad +=
            bpe_encode(t, content, strlen(content), false, &ids, &n) != 0 || n != 1 || ids[0] != id;
        bad += bpe_decode(t, &id, 1, false, &text, &len) != 0 || len != strlen(content) ||
               memcmp(text, content, len) != 0;
        bad += bpe_is_special(t, id) != (i >= N_DEC);
        free(ids);
        free(text);
    }
    CHECK_MSG(bad == 0, "%d of %d added tokens encode, decode or flag wrongly", bad, N_DEC + N_NEW);
    const char *s = "a<tok49999><tok0>x<new999>";
    int32_t want[] = {4 + 'a', FIRST + N_DEC - 1, FIRST, 4 + 'x', FIRST + N_DEC + N_NEW - 1};
    check_encode(t, s, strlen(s), false, want, 5);
    bpe_close(t);
    remove_all();
}

/* 100 KB of '<' with 10k added tokens that start with '<': every position
 * used to be tried against every token (seconds); now it costs a few steps.
 * Two tokens sit in the text, one after a '<' that must stay plain. */
TEST(many_added_in_text)
{
    enum { N_ADDED = 10000, FIRST = 50000, RUN = 50000 };
    write_minimal();
    json_t *dec = json_object();
    char key[32], content[32];
    for (int i = 0; i < N_ADDED; i++) {
        snprintf(key, sizeof(key), "%d", FIRST + i);
        snprintf(content, sizeof(content), "<tok%d>", i);
        json_object_set_new(dec, key, json_pack("{s:s}", "content", content));
    }
    json_t *cfg = json_pack("{s:o}", "added_tokens_decoder", dec);
    write_json("tokenizer_config.json", cfg);
    json_decref(cfg);
    struct bpe *t = NULL;
    int rc = bpe_open(tmp_dir, &t);
    CHECK_MSG(rc == 0, "%d added tokens: %s", N_ADDED, err_msg());
    if (rc != 0)
        return;
    static const char *const tail[2] = {"<tok123>", "<tok9999>"};
    size_t len = 0;
    char *text = malloc(2 * RUN + 32);
    int32_t *want = malloc((2 * RUN + 2) * sizeof(*want));
    size_t n_want = 0;
    for (int part = 0; part < 2; part++) {
        memset(text + len, '<', RUN);
        len += RUN;
        for (int i = 0; i < RUN; i++)
            want[n_want++] = 4 + '<';
        memcpy(text + len, tail[part], strlen(tail[part]));
        len += strlen(tail[part]);
        want[n_want++] = part ? FIRST + 9999 : FIRST + 123;
    }
    check_encode(t, text, len, false, want, n_want);
    free(text);
    free(want);
    bpe_close(t);
    remove_all();
}

/* Added tokens over a three-letter alphabet, many of them prefixes of each
 * other, against a brute-force leftmost-longest match on random text. */
TEST(added_matching)
{
    enum { N_TOK = 400, TEXT = 4000, FIRST = 300 };
    static const char ALPHA[] = "<a>";
    write_minimal();
    json_t *dec = json_object();
    char tok[N_TOK][8], key[32];
    int n_tok = 0;
    unsigned seed = 12345;
    while (n_tok < N_TOK) {
        seed = seed * 1103515245u + 12345u;
        int len = 1 + (int)((seed >> 16) % 7);
        char s[8];
        for (int i = 0; i < len; i++) {
            seed = seed * 1103515245u + 12345u;
            s[i] = ALPHA[(seed >> 16) % 3];
        }
        s[len] = '\0';
        bool dup = false;
        for (int k = 0; k < n_tok && !dup; k++)
            dup = strcmp(tok[k], s) == 0;
        if (dup)
            continue;
        memcpy(tok[n_tok], s, (size_t)len + 1);
        snprintf(key, sizeof(key), "%d", FIRST + n_tok);
        json_object_set_new(dec, key, json_pack("{s:s}", "content", s));
        n_tok++;
    }
    json_t *cfg = json_pack("{s:o}", "added_tokens_decoder", dec);
    write_json("tokenizer_config.json", cfg);
    json_decref(cfg);
    struct bpe *t = NULL;
    int rc = bpe_open(tmp_dir, &t);
    CHECK_MSG(rc == 0, "random added tokens: %s", err_msg());
    if (rc != 0)
        return;
    char text[TEXT];
    for (int i = 0; i < TEXT; i++) {
        seed = seed * 1103515245u + 12345u;
        text[i] = (seed >> 16) % 16 == 0 ? 'b' : ALPHA[(seed >> 16) % 3];
    }
    int32_t *want = malloc(TEXT * sizeof(*want));
    size_t n_want = 0;
    for (size_t i = 0; i < TEXT;) {
        int best = -1;
        size_t best_len = 0;
        for (int k = 0; k < N_TOK; k++) {
            size_t l = strlen(tok[k]);
            if (l > best_len && l <= TEXT - i && memcmp(text + i, tok[k], l) == 0) {
                best = k;
                best_len = l;
            }
        }
        want[n_want++] = best >= 0 ? FIRST + best : 4 + (unsigned char)text[i];
        i += best >= 0 ? best_len : 1;
    }
    check_encode(t, text, TEXT, false, want, n_want);
    free(want);
    bpe_close(t);
    remove_all();
}

/* ---- tests on the real OPT and GPT-2 files (data/tokenizer) ---- */

struct corpus {
    json_t *root;
    size_t n;
};

static const char *corpus_text(const struct corpus *c, size_t i, size_t *len)
{
    json_t *s = json_object_get(json_array_get(c->root, i), "text");
    *len = json_string_length(s);
    return json_string_value(s);
}

/* The expected ids of entry i, BOS included; malloc'd. */
static int32_t *corpus_ids(const struct corpus *c, size_t i, size_t *n)
{
    json_t *a = json_object_get(json_array_get(c->root, i), "ids");
    *n = json_array_size(a);
    int32_t *ids = malloc((*n + 1) * sizeof(*ids));
    for (size_t k = 0; k < *n; k++)
        ids[k] = (int32_t)json_integer_value(json_array_get(a, k));
    return ids;
}

/* Drops every occurrence of the special tokens' text, as skip_special does. */
static size_t strip_specials(const char *s, size_t len, char *out)
{
    static const char *const specials[] = {"</s>", "<pad>"};
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        bool hit = false;
        for (size_t k = 0; k < 2 && !hit; k++) {
            size_t n = strlen(specials[k]);
            if (n <= len - i && memcmp(s + i, specials[k], n) == 0) {
                i += n;
                hit = true;
            }
        }
        if (!hit)
            out[o++] = s[i++];
    }
    return o;
}

static void test_opt_corpus(const struct bpe *t, const struct corpus *c, const char *label)
{
    size_t fails_before = (size_t)test_failures;
    for (size_t i = 0; i < c->n; i++) {
        size_t len, n;
        const char *text = corpus_text(c, i, &len);
        int32_t *want = corpus_ids(c, i, &n);
        check_encode(t, text, len, true, want, n);
        /* Without the BOS, decode gives the text back exactly: special
         * tokens decode to their own text. With skip_special they vanish. */
        check_decode(t, want + 1, n - 1, false, text, len);
        char *stripped = malloc(len + 1);
        size_t n_stripped = strip_specials(text, len, stripped);
        check_decode(t, want, n, true, stripped, n_stripped);
        check_stream(t, want, n, text);
        free(stripped);
        free(want);
    }
    printf("%s: %zu corpus strings, %s\n", label, c->n,
           (size_t)test_failures == fails_before ? "all match Hugging Face" : "MISMATCHES");
}

struct thread_arg {
    const struct bpe *t;
    const struct corpus *c;
    int bad;
};

static void *encode_thread(void *p)
{
    struct thread_arg *a = p;
    for (int rep = 0; rep < 3; rep++) {
        for (size_t i = 0; i < a->c->n; i++) {
            size_t len, n, n_got;
            const char *text = corpus_text(a->c, i, &len);
            int32_t *want = corpus_ids(a->c, i, &n), *got = NULL;
            if (bpe_encode(a->t, text, len, true, &got, &n_got) != 0 ||
                !ids_equal(got, n_got, want, n))
                a->bad++;
            free(got);
            free(want);
        }
    }
    return NULL;
}

/* Writes tokenizer.json for the real OPT files: vocab as is, merges as
 * [a, b] pairs, "</s>" and "<pad>" as special added tokens, a template that
 * puts "</s>" first. */
static int write_opt_tokenizer_json(const char *opt_dir)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/vocab.json", opt_dir);
    json_t *vocab = json_load_file(path, 0, NULL);
    snprintf(path, sizeof(path), "%s/merges.txt", opt_dir);
    FILE *f = fopen(path, "r");
    if (!vocab || !f) {
        json_decref(vocab);
        if (f)
            fclose(f);
        return -1;
    }
    json_t *merges = json_array();
    char line[1024];
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        char *sp = strchr(line, ' ');
        if (strncmp(line, "#version", 8) == 0 || !sp)
            continue;
        *sp = '\0';
        json_array_append_new(merges, json_pack("[s,s]", line, sp + 1));
    }
    fclose(f);
    json_t *tj =
        json_pack("{s:n, s:{s:s}, s:{s:s, s:o, s:o},"
                  " s:[{s:i, s:s, s:b}, {s:i, s:s, s:b}]}",
                  "normalizer", "pre_tokenizer", "type", "ByteLevel", "model", "type", "BPE",
                  "vocab", vocab, "merges", merges, "added_tokens", "id", 1, "content", "<pad>",
                  "special", 1, "id", 2, "content", "</s>", "special", 1);
    /* With tokenizer.json the post-processor alone puts "</s>" first. */
    json_object_set_new(tj, "post_processor",
                        json_pack("{s:s, s:[{s:{s:s}}, {s:{s:s}}]}", "type", "TemplateProcessing",
                                  "single", "SpecialToken", "id", "</s>", "Sequence", "id", "A"));
    remove_all();
    write_json("tokenizer.json", tj);
    json_decref(tj);
    return 0;
}

/* GPT-2's ids map to OPT's through fairseq's dict.txt: OPT id = 4 + the line
 * that holds the GPT-2 id. Returns the table (indexed by GPT-2 id) or NULL. */
static int32_t *load_fairseq_map(const char *gpt2_dir, int32_t n_gpt2)
{
    char path[512], line[128];
    snprintf(path, sizeof(path), "%s/dict.txt", gpt2_dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    int32_t *map = malloc((size_t)n_gpt2 * sizeof(*map));
    for (int32_t i = 0; i < n_gpt2; i++)
        map[i] = -1;
    int32_t row = 0;
    while (fgets(line, sizeof(line), f)) {
        char *end;
        long id = strtol(line, &end, 10);
        if (end != line && id >= 0 && id < n_gpt2) /* not the "madeupword" rows */
            map[id] = 4 + row;
        row++;
    }
    fclose(f);
    return map;
}

static void test_gpt2(const char *gpt2_dir, const struct corpus *c)
{
    struct bpe *t = NULL;
    int rc = bpe_open(gpt2_dir, &t);
    CHECK_MSG(rc == 0, "GPT-2 files: %s", err_msg());
    if (rc != 0)
        return;
    CHECK(bpe_vocab_size(t) == 50257 && bpe_eos_id(t) == 50256 && !bpe_adds_bos(t));
    int32_t w1[] = {31373, 995}, w2[] = {25645}, w3[] = {8269, 10535, 830};
    check_encode(t, "hello world", 11, true, w1, 2);
    check_encode(t, "0000000000000000", 16, true, w2, 1);
    check_encode(t, "00000000000000000", 17, true, w3, 3);

    /* Same merges, different ids: every corpus string without OPT's special
     * text must give OPT's ids through dict.txt. */
    int32_t *map = load_fairseq_map(gpt2_dir, bpe_vocab_size(t));
    size_t compared = 0, bad = 0;
    for (size_t i = 0; map && i < c->n; i++) {
        size_t len, n, n_got;
        const char *text = corpus_text(c, i, &len);
        if (strstr(text, "</s>") || strstr(text, "<pad>") || strstr(text, "<|endoftext|>"))
            continue;
        int32_t *want = corpus_ids(c, i, &n), *got = NULL;
        if (bpe_encode(t, text, len, false, &got, &n_got) == 0 && n_got == n - 1) {
            for (size_t k = 0; k < n_got; k++)
                got[k] = map[got[k]];
            bad += !ids_equal(got, n_got, want + 1, n - 1);
        } else {
            bad++;
        }
        compared++;
        free(got);
        free(want);
    }
    CHECK_MSG(map && bad == 0, "GPT-2 ids mapped through dict.txt differ from OPT's for %zu of %zu",
              bad, compared);
    printf("GPT-2 (encoder.json + vocab.bpe): %zu corpus strings agree with OPT through dict.txt\n",
           compared);
    free(map);
    bpe_close(t);
}

static void test_real_files(const char *opt_dir, const char *gpt2_dir)
{
    double t0 = now_ms();
    struct bpe *t = NULL;
    int rc = bpe_open(opt_dir, &t);
    double open_ms = now_ms() - t0;
    CHECK_MSG(rc == 0, "OPT files: %s", err_msg());
    if (rc != 0)
        return;
    printf("OPT vocab.json + merges.txt opened in %.1f ms\n", open_ms);
    CHECK(bpe_vocab_size(t) == 50265 && bpe_bos_id(t) == 2 && bpe_eos_id(t) == 2 &&
          bpe_pad_id(t) == 1 && bpe_adds_bos(t));

    /* Published vectors. */
    int32_t w1[] = {2, 250, 1345, 9, 10, 4758}, w2[] = {2, 713, 16, 10, 1296};
    check_encode(t, "A photo of a cat", 16, true, w1, 6);
    check_encode(t, "This is a test", 14, true, w2, 5);

    char path[512];
    snprintf(path, sizeof(path), "%s/tests/fixtures/tokenizer_corpus.json", SHARDSWAP_SOURCE_DIR);
    json_error_t je;
    struct corpus c = {.root = json_load_file(path, JSON_ALLOW_NUL, &je)};
    CHECK_MSG(json_is_array(c.root), "%s: %s", path, je.text);
    c.n = json_array_size(c.root);
    CHECK_MSG(c.n >= 200, "corpus has %zu strings, want at least 200", c.n);
    test_opt_corpus(t, &c, "OPT vocab.json + merges.txt");

    /* Concurrent encoding on one shared tokenizer. */
    enum { N_THREADS = 4 };
    pthread_t th[N_THREADS];
    struct thread_arg args[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        args[i] = (struct thread_arg){.t = t, .c = &c};
        pthread_create(&th[i], NULL, encode_thread, &args[i]);
    }
    int bad = 0;
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(th[i], NULL);
        bad += args[i].bad;
    }
    CHECK_MSG(bad == 0, "%d wrong encodings from concurrent threads", bad);
    bpe_close(t);

    /* The same vocabulary as tokenizer.json. */
    CHECK_MSG(write_opt_tokenizer_json(opt_dir) == 0, "cannot read %s to write tokenizer.json",
              opt_dir);
    t0 = now_ms();
    rc = bpe_open(tmp_dir, &t);
    CHECK_MSG(rc == 0, "OPT tokenizer.json: %s", err_msg());
    if (rc == 0) {
        printf("OPT tokenizer.json opened in %.1f ms\n", now_ms() - t0);
        test_opt_corpus(t, &c, "OPT tokenizer.json");
        bpe_close(t);
    }
    remove_all();

    test_gpt2(gpt2_dir, &c);
    json_decref(c.root);
}

TEST(real_files)
{
    test_real_files(SHARDSWAP_SOURCE_DIR "/data/tokenizer/opt",
                    SHARDSWAP_SOURCE_DIR "/data/tokenizer/gpt2");
}

static void setup(void)
{
    test_scratch_dir(tmp_dir, sizeof(tmp_dir), "tokenizer");
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
