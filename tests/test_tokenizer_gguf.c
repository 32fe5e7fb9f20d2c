/* Tokenizers and chat templates from GGUF files (tokenizer.ggml.*) against
 * llama.cpp and Hugging Face.
 *
 * The files (tests/fixtures/gguf_tokenizers, tools/make_gguf_tokenizer_fixtures.py):
 * llama2.gguf and phi3.gguf are llama.cpp's own vocabulary-only files; the
 * llama3 and qwen2 ones (7.8 and 5.9 MB from llama.cpp's converter) are
 * written here from data/tokenizer/<family>/tokenizer.json and the
 * converter's scalar keys, with every array's FNV-1a 64 checked against the
 * converter's, so the file read is the converter's, byte for byte in its
 * tokenizer keys. For each family:
 *   - llama.cpp's ids (llama-tokenize, special tokens parsed) without and
 *     with BOS, exactly;
 *   - Hugging Face's: the 47 reference cases and the 3000-case corpus of
 *     tests/fixtures/tokenizers, ids without special tokens, except where the
 *     corpus's tokenizer.json is not the GGUF's (stated per family below);
 *   - decode equal to the tokenizer.json tokenizer's on the same ids;
 *   - the chat template from the file equal to the template file it was made
 *     from, rendering as that template in a tokenizer_config.json does.
 * Then hostile metadata, each a one-line error naming the key.
 */
#include "core/error.h"
#include "core/utf8.h"
#include "format/gguf.h"
#include "template/chat.h"
#include "test.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char scratch[1024];

static json_t *load_json(const char *path)
{
    json_error_t je;
    json_t *j = json_load_file(path, JSON_ALLOW_NUL, &je);
    CHECK_MSG(j != NULL, "%s: %s", path, je.text);
    return j;
}

static void src_path(char *buf, size_t cap, const char *rel)
{
    snprintf(buf, cap, "%s/%s", SHARDSWAP_SOURCE_DIR, rel);
}

/* ---- a GGUF writer for the tests: version 3, metadata only ---- */

enum { GW_U32 = 4, GW_I32 = 5, GW_F32 = 6, GW_BOOL = 7, GW_STR = 8, GW_ARR = 9 };

struct gw {
    unsigned char *b;
    size_t n, cap;
    uint64_t n_kv;
    uint64_t fnv; /* of the bytes since gw_hash_start */
    size_t hash_from;
};

static void gw_put(struct gw *w, const void *p, size_t n)
{
    if (w->n + n > w->cap) {
        w->cap = (w->n + n) * 2 + 4096;
        w->b = realloc(w->b, w->cap);
        if (!w->b)
            abort();
    }
    memcpy(w->b + w->n, p, n);
    w->n += n;
}
static void gw_u32(struct gw *w, uint32_t v)
{
    gw_put(w, &v, 4); /* little-endian hosts only, as the project */
}
static void gw_u64(struct gw *w, uint64_t v)
{
    gw_put(w, &v, 8);
}
static void gw_str(struct gw *w, const char *s, size_t n)
{
    gw_u64(w, n);
    gw_put(w, s, n);
}
static void gw_key(struct gw *w, const char *key, uint32_t type)
{
    gw_str(w, key, strlen(key));
    gw_u32(w, type);
    w->n_kv++;
}
static void gw_kv_str(struct gw *w, const char *key, const char *s, size_t n)
{
    gw_key(w, key, GW_STR);
    gw_str(w, s, n);
}
static void gw_kv_u32(struct gw *w, const char *key, uint32_t type, uint32_t v)
{
    gw_key(w, key, type);
    if (type == GW_BOOL)
        gw_put(w, &(uint8_t){(uint8_t)v}, 1);
    else
        gw_u32(w, v);
}
/* An array header; the elements follow (hashed from here). */
static void gw_arr(struct gw *w, const char *key, uint32_t elem, uint64_t n)
{
    gw_key(w, key, GW_ARR);
    gw_u32(w, elem);
    gw_u64(w, n);
    w->hash_from = w->n;
}
static uint64_t gw_arr_hash(const struct gw *w)
{
    uint64_t h = 0xCBF29CE484222325ULL;
    for (size_t i = w->hash_from; i < w->n; i++)
        h = (h ^ w->b[i]) * 0x100000001B3ULL;
    return h;
}
/* Writes the file: header, the metadata, padding to 32 bytes. */
static void gw_write(struct gw *w, const char *path)
{
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    if (!f)
        return;
    uint32_t head[2] = {0x46554747u, 3}; /* "GGUF", version 3 */
    uint64_t counts[2] = {0, w->n_kv};
    static const unsigned char zero[32];
    size_t total = sizeof(head) + sizeof(counts) + w->n;
    CHECK(fwrite(head, sizeof(head), 1, f) == 1 && fwrite(counts, sizeof(counts), 1, f) == 1 &&
          fwrite(w->b, 1, w->n, f) == w->n &&
          fwrite(zero, 1, (32 - total % 32) % 32, f) == (32 - total % 32) % 32);
    fclose(f);
    free(w->b);
    *w = (struct gw){0};
}

/* ---- the converter's file, written from tokenizer.json ---- */

/* llama.cpp's converter's test for an added token that is special in all
 * but name (does_token_look_special). */
static bool looks_special(const char *s)
{
    size_t n = strlen(s);
    return (n >= 4 && strncmp(s, "<|", 2) == 0 && strcmp(s + n - 2, "|>") == 0) ||
           strcmp(s, "<pad>") == 0 || strcmp(s, "<mask>") == 0 || strcmp(s, "<unk>") == 0 ||
           strcmp(s, "<s>") == 0 || strcmp(s, "</s>") == 0;
}

static void check_hash(const struct gw *w, json_t *fix, const char *key)
{
    json_t *a = json_object_get(json_object_get(fix, "arrays"), key);
    char got[17];
    snprintf(got, sizeof(got), "%016llx", (unsigned long long)gw_arr_hash(w));
    CHECK_MSG(a && strcmp(got, json_string_value(json_object_get(a, "fnv1a64"))) == 0,
              "%s: written %s, converter's %s", key, got,
              a ? json_string_value(json_object_get(a, "fnv1a64")) : "(none)");
}

/* Writes what tools/make_gguf_tokenizer_fixtures.py's converter run wrote
 * for fix (a written family) to path. */
static void write_family_gguf(json_t *fix, const char *path)
{
    char p[4096];
    src_path(p, sizeof(p), json_string_value(json_object_get(fix, "source")));
    json_t *tj = load_json(p);
    json_t *model = json_object_get(tj, "model");
    json_t *vocab = json_object_get(model, "vocab");
    json_t *arrays = json_object_get(fix, "arrays");
    size_t n = (size_t)json_integer_value(
        json_object_get(json_object_get(arrays, "tokenizer.ggml.tokens"), "n"));
    const char **tok = calloc(n, sizeof(*tok));
    int32_t *type = calloc(n, sizeof(*type));
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v)
    {
        json_int_t id = json_integer_value(v);
        if (id >= 0 && (size_t)id < n) {
            tok[id] = key;
            type[id] = 1;
        }
    }
    size_t i;
    json_array_foreach(json_object_get(tj, "added_tokens"), i, v)
    {
        json_int_t id = json_integer_value(json_object_get(v, "id"));
        if (id < 0 || (size_t)id >= n)
            continue;
        tok[id] = json_string_value(json_object_get(v, "content"));
        type[id] = json_is_true(json_object_get(v, "special")) || looks_special(tok[id]) ? 3 : 4;
    }
    char(*pads)[32] = calloc(n, sizeof(*pads));
    for (size_t k = 0; k < n; k++) {
        if (!tok[k]) {
            snprintf(pads[k], sizeof(pads[k]), "[PAD%zu]", k);
            tok[k] = pads[k];
            type[k] = 4;
        }
    }

    struct gw w = {0};
    json_array_foreach(json_object_get(fix, "kv"), i, v)
    {
        const char *k = json_string_value(json_array_get(v, 0));
        const char *ty = json_string_value(json_array_get(v, 1));
        json_t *val = json_array_get(v, 2);
        if (strcmp(k, "tokenizer.chat_template") == 0) {
            char tp[4096], *text = NULL;
            size_t len = 0;
            src_path(tp, sizeof(tp), json_string_value(json_object_get(fix, "chat_template")));
            CHECK_MSG(fs_read_regular(tp, 1 << 20, &text, &len) == 0, "%s", err_msg());
            gw_kv_str(&w, k, text ? text : "", len);
            w.hash_from = w.n - len;
            char got[17];
            snprintf(got, sizeof(got), "%016llx", (unsigned long long)gw_arr_hash(&w));
            CHECK_MSG(
                strcmp(got, json_string_value(json_object_get(fix, "chat_template_fnv1a64"))) == 0,
                "%s differs from the converter's tokenizer.chat_template", tp);
            free(text);
        } else if (strcmp(ty, "str") == 0) {
            gw_kv_str(&w, k, json_string_value(val), json_string_length(val));
        } else {
            uint32_t t = strcmp(ty, "bool") == 0  ? GW_BOOL
                         : strcmp(ty, "i32") == 0 ? GW_I32
                                                  : GW_U32;
            gw_kv_u32(
                &w, k, t,
                (uint32_t)(json_is_boolean(val) ? json_is_true(val) : json_integer_value(val)));
        }
    }
    gw_arr(&w, "tokenizer.ggml.tokens", GW_STR, n);
    for (size_t k = 0; k < n; k++)
        gw_str(&w, tok[k], strlen(tok[k]));
    check_hash(&w, fix, "tokenizer.ggml.tokens");
    gw_arr(&w, "tokenizer.ggml.token_type", GW_I32, n);
    gw_put(&w, type, n * sizeof(*type));
    check_hash(&w, fix, "tokenizer.ggml.token_type");
    json_t *merges = json_object_get(model, "merges");
    gw_arr(&w, "tokenizer.ggml.merges", GW_STR, json_array_size(merges));
    json_array_foreach(merges, i, v)
    {
        char m[1024];
        int len = json_is_array(v)
                      ? snprintf(m, sizeof(m), "%s %s", json_string_value(json_array_get(v, 0)),
                                 json_string_value(json_array_get(v, 1)))
                      : snprintf(m, sizeof(m), "%s", json_string_value(v));
        gw_str(&w, m, (size_t)len);
    }
    check_hash(&w, fix, "tokenizer.ggml.merges");
    gw_write(&w, path);
    free(pads);
    free(tok);
    free(type);
    json_decref(tj);
}

/* ---- comparisons ---- */

static bool ids_match(const struct bpe *t, json_t *text, bool bos, json_t *want)
{
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = bpe_encode(t, json_string_value(text), json_string_length(text), bos, &ids, &n);
    bool ok = rc == 0 && n == json_array_size(want);
    for (size_t i = 0; ok && i < n; i++)
        ok = ids[i] == json_integer_value(json_array_get(want, i));
    if (!ok) {
        fprintf(stderr, "  text %.80s\n  want", json_string_value(text));
        for (size_t i = 0; i < json_array_size(want) && i < 40; i++)
            fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(want, i)));
        fprintf(stderr, "\n  got ");
        for (size_t i = 0; i < n && i < 40; i++)
            fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    free(ids);
    return ok;
}

/* Whether text puts white space right after one of the special tokens that
 * llama.cpp's Phi-3 rule makes swallow it (every special token of the file
 * but <unk>, <s> and <|endoftext|>): Hugging Face's Phi-3 tokenizer does the
 * same (rstrip), the corpus's tokenizer.json, rebuilt from the GGUF file, does
 * not. */
static bool phi3_rstrip_case(const char *s, size_t n)
{
    static const char *const toks[] = {"</s>",
                                       "<|assistant|>",
                                       "<|placeholder1|>",
                                       "<|placeholder2|>",
                                       "<|placeholder3|>",
                                       "<|placeholder4|>",
                                       "<|system|>",
                                       "<|end|>",
                                       "<|placeholder5|>",
                                       "<|placeholder6|>",
                                       "<|user|>",
                                       "[PAD"};
    for (size_t i = 0; i < sizeof(toks) / sizeof(toks[0]); i++) {
        size_t tl = strlen(toks[i]);
        for (const char *p = memmem(s, n, toks[i], tl); p;
             p = memmem(p + 1, n - (size_t)(p + 1 - s), toks[i], tl)) {
            const char *end = memchr(p, i == 11 ? ']' : '>', n - (size_t)(p - s));
            if (end && end + 1 < s + n && strchr(" \t\n\r\f\v", end[1]) && end[1])
                return true;
        }
    }
    return false;
}

static void check_family(const char *family)
{
    char p[4096], gguf[4096];
    snprintf(p, sizeof(p), "%s/tests/fixtures/gguf_tokenizers/%s.json", SHARDSWAP_SOURCE_DIR,
             family);
    json_t *fix = load_json(p);
    if (!fix)
        return;
    json_t *committed = json_object_get(fix, "gguf");
    if (committed) {
        snprintf(gguf, sizeof(gguf), "%s/tests/fixtures/gguf_tokenizers/%s", SHARDSWAP_SOURCE_DIR,
                 json_string_value(committed));
    } else {
        snprintf(gguf, sizeof(gguf), "%s/%s.gguf", scratch, family);
        write_family_gguf(fix, gguf);
    }
    struct bpe *t = NULL, *hf = NULL;
    CHECK_MSG(bpe_open(gguf, &t) == 0, "%s: %s", gguf, err_msg());
    snprintf(p, sizeof(p), "%s/data/tokenizer/%s", SHARDSWAP_SOURCE_DIR, family);
    CHECK_MSG(bpe_open(p, &hf) == 0, "%s: %s", p, err_msg());
    if (!t || !hf) {
        bpe_close(t);
        bpe_close(hf);
        json_decref(fix);
        return;
    }

    /* llama.cpp's ids */
    size_t i, bad = 0, n_sp = 0;
    json_t *c;
    json_t *cases = json_object_get(fix, "cases");
    json_array_foreach(cases, i, c)
    {
        bool ok = ids_match(t, json_object_get(c, "t"), false, json_object_get(c, "ids"));
        if (json_object_get(c, "sp")) {
            ok &= ids_match(t, json_object_get(c, "t"), true, json_object_get(c, "sp"));
            n_sp++;
        }
        bad += !ok;
    }
    CHECK_MSG(bad == 0, "%s: %zu of %zu cases differ from llama.cpp's ids", family, bad,
              json_array_size(cases));
    printf("  %s: llama.cpp: %zu cases (%zu with BOS) equal\n", family, json_array_size(cases),
           n_sp);

    /* Hugging Face's ids: the reference cases, then the corpus */
    snprintf(p, sizeof(p), "%s/tests/fixtures/tokenizers/%s_reference.json", SHARDSWAP_SOURCE_DIR,
             family);
    json_t *ref = load_json(p);
    size_t n_ref = json_array_size(ref);
    bad = 0;
    json_array_foreach(ref, i, c) bad +=
        !ids_match(t, json_object_get(c, "text"), false, json_object_get(c, "ids"));
    CHECK_MSG(bad == 0, "%s: %zu of %zu reference cases differ from Hugging Face's", family, bad,
              json_array_size(ref));
    json_decref(ref);
    snprintf(p, sizeof(p), "%s/tests/fixtures/tokenizers/%s.json", SHARDSWAP_SOURCE_DIR, family);
    json_t *corpus = load_json(p);
    size_t skipped = 0, n_dec = 0;
    bad = 0;
    json_array_foreach(json_object_get(corpus, "cases"), i, c)
    {
        json_t *text = json_object_get(c, "t");
        const char *s = json_string_value(text);
        if (strcmp(family, "phi3") == 0 && phi3_rstrip_case(s, json_string_length(text))) {
            skipped++;
            continue;
        }
        bool ok = ids_match(t, text, false, json_object_get(c, "ids"));
        bad += !ok;
        if (!ok)
            continue;
        /* decode: as the tokenizer.json tokenizer decodes the same ids */
        int32_t *ids = NULL;
        size_t n = 0;
        if (bpe_encode(t, s, json_string_length(text), true, &ids, &n) != 0)
            continue;
        for (int skip = 0; skip < 2; skip++) {
            char *a = NULL, *b = NULL;
            size_t la = 0, lb = 0;
            int ra = bpe_decode(t, ids, n, skip, &a, &la);
            int rb = bpe_decode(hf, ids, n, skip, &b, &lb);
            CHECK_MSG(ra == 0 && rb == 0 && la == lb && memcmp(a, b, la) == 0,
                      "%s: decode of case %zu differs from the tokenizer.json one's", family, i);
            if (skip && lb == json_string_length(text) && memcmp(b, s, lb) == 0)
                CHECK_MSG(la == lb && memcmp(a, s, la) == 0, "%s: case %zu does not round-trip",
                          family, i);
            free(a);
            free(b);
        }
        n_dec++;
        free(ids);
    }
    CHECK_MSG(bad == 0, "%s: %zu corpus cases differ from Hugging Face's", family, bad);
    printf("  %s: Hugging Face: %zu reference + %zu corpus cases equal (%zu left out: the corpus's "
           "tokenizer.json is not the file's there), %zu decodes equal\n",
           family, n_ref, json_array_size(json_object_get(corpus, "cases")) - skipped - bad,
           skipped, n_dec);
    json_decref(corpus);

    /* roles */
    CHECK(bpe_bos_id(t) == bpe_bos_id(hf));
    CHECK(bpe_eos_id(t) >= 0 && bpe_is_special(t, bpe_eos_id(t)));
    CHECK(bpe_adds_bos(t) == (strcmp(family, "qwen2") != 0));
    bpe_close(t);
    bpe_close(hf);
    json_decref(fix);
}

TEST(llama2)
{
    check_family("llama2");
}
TEST(phi3)
{
    check_family("phi3");
}
TEST(llama3)
{
    check_family("llama3");
}
TEST(qwen2)
{
    check_family("qwen2");
}

/* The template in the file is the template file it was made from, and
 * renders as that file does from a tokenizer_config.json. */
TEST(chat_template)
{
    static const char *const families[] = {"llama3", "qwen2"};
    static const char *const convs[] = {
        "[{\"role\": \"user\", \"content\": \"Hello\"}]",
        "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": "
        "\"2+2?\"}, {\"role\": \"assistant\", \"content\": \"4\"}, {\"role\": \"user\", "
        "\"content\": \"and 3+3?\"}]",
    };
    for (size_t f = 0; f < 2; f++) {
        char p[4096], gguf[2048], dir[2048];
        snprintf(p, sizeof(p), "%s/tests/fixtures/gguf_tokenizers/%s.json", SHARDSWAP_SOURCE_DIR,
                 families[f]);
        json_t *fix = load_json(p);
        if (!fix)
            continue;
        snprintf(gguf, sizeof(gguf), "%s/%s_t.gguf", scratch, families[f]);
        write_family_gguf(fix, gguf);
        /* the same template from a checkpoint directory */
        char tp[4096], *text = NULL;
        size_t len = 0;
        src_path(tp, sizeof(tp), json_string_value(json_object_get(fix, "chat_template")));
        CHECK(fs_read_regular(tp, 1 << 20, &text, &len) == 0);
        struct gguf_file *g = NULL;
        CHECK_MSG(gguf_open(gguf, &g) == 0, "%s", err_msg());
        struct gguf_str s = {0};
        CHECK(g && gguf_get_str(g, "tokenizer.chat_template", &s) == 0 && s.n == len &&
              memcmp(s.p, text, len) == 0);
        struct bpe *t = NULL;
        CHECK(g && bpe_open_gguf(g, &t) == 0);
        char bos[64] = "", eos[64] = "";
        const struct gguf_kv *toks = g ? gguf_find(g, "tokenizer.ggml.tokens") : NULL;
        if (toks && t) {
            struct gguf_str b = gguf_arr_str(toks, (uint64_t)bpe_bos_id(t));
            struct gguf_str e = gguf_arr_str(toks, (uint64_t)bpe_eos_id(t));
            snprintf(bos, sizeof(bos), "%.*s", (int)b.n, b.p);
            snprintf(eos, sizeof(eos), "%.*s", (int)e.n, e.p);
        }
        bpe_close(t);
        gguf_close(g);
        json_t *cfg = json_pack("{s:s%, s:s, s:s}", "chat_template", text ? text : "", len,
                                "bos_token", bos, "eos_token", eos);
        snprintf(dir, sizeof(dir), "%s/%s_cfg", scratch, families[f]);
        snprintf(p, sizeof(p), "%s/x", dir);
        CHECK(fs_mkdir_parents(p) == 0);
        snprintf(p, sizeof(p), "%s/tokenizer_config.json", dir);
        CHECK(json_dump_file(cfg, p, 0) == 0);
        json_decref(cfg);
        free(text);

        struct chat_template *a = NULL, *b = NULL;
        CHECK_MSG(chat_template_load(gguf, NULL, &a) == 0 && a, "%s: %s", gguf, err_msg());
        CHECK_MSG(chat_template_load(dir, NULL, &b) == 0 && b, "%s: %s", dir, err_msg());
        if (a && b) {
            CHECK(strcmp(chat_template_bos(a), bos) == 0 && strcmp(chat_template_eos(a), eos) == 0);
            for (size_t k = 0; k < 2; k++) {
                for (int agp = 0; agp < 2; agp++) {
                    json_t *msgs = json_loads(convs[k], 0, NULL);
                    struct chat_render_opts o = {.add_generation_prompt = agp, .now = 1700000000};
                    char *ra = NULL, *rb = NULL;
                    size_t la = 0, lb = 0;
                    CHECK(chat_template_render(a, msgs, &o, &ra, &la) == 0);
                    CHECK(chat_template_render(b, msgs, &o, &rb, &lb) == 0);
                    CHECK_MSG(ra && rb && la == lb && memcmp(ra, rb, la) == 0,
                              "%s: conversation %zu renders differently", families[f], k);
                    free(ra);
                    free(rb);
                    json_decref(msgs);
                }
            }
        }
        chat_template_free(a);
        chat_template_free(b);
        json_decref(fix);
    }
}

/* ---- hostile metadata ---- */

/* A small byte-level vocabulary: the 256 byte symbols, "ab", merges "a b". */
struct hostile {
    const char *what, *expect; /* the error must name expect */
    int pre;                   /* 0: "qwen2"; 1: "no-such-pre" */
    int64_t bos;               /* id given as bos (-1: none) */
    int types_short;           /* token_type one short */
    int bad_merge;             /* a merge naming an unknown symbol */
    int bad_utf8;              /* token 300 is not UTF-8 */
    int dup;                   /* token 300 repeats token 0 */
    int bad_type;              /* token_type 7 */
    int spm_no_scores;         /* model "llama" without scores */
};

static void write_hostile(const struct hostile *h, const char *path)
{
    struct gw w = {0};
    gw_kv_str(&w, "tokenizer.ggml.model", h->spm_no_scores ? "llama" : "gpt2",
              h->spm_no_scores ? 5 : 4);
    const char *pre = h->pre ? "no-such-pre" : "qwen2";
    gw_kv_str(&w, "tokenizer.ggml.pre", pre, strlen(pre));
    uint64_t n = 258;
    gw_arr(&w, "tokenizer.ggml.tokens", GW_STR, n);
    for (unsigned b = 0; b < 256; b++) {
        unsigned char u[4];
        gw_str(&w, (const char *)u, utf8_encode_one(byte_level_cp((unsigned char)b), u));
    }
    if (h->bad_utf8)
        gw_str(&w, "a\xff", 2);
    else if (h->dup)
        gw_str(&w, "a", 1);
    else
        gw_str(&w, "ab", 2);
    gw_str(&w, "<|end|>", 7);
    uint64_t nt = h->types_short ? n - 1 : n;
    gw_arr(&w, "tokenizer.ggml.token_type", GW_I32, nt);
    for (uint64_t i = 0; i < nt; i++) {
        int32_t ty = i == 257 ? 3 : 1;
        if (h->bad_type && i == 5)
            ty = 7;
        gw_put(&w, &ty, 4);
    }
    gw_arr(&w, "tokenizer.ggml.merges", GW_STR, 1);
    gw_str(&w, h->bad_merge ? "a zz" : "a b", h->bad_merge ? 4 : 3);
    if (h->bos >= 0)
        gw_kv_u32(&w, "tokenizer.ggml.bos_token_id", GW_U32, (uint32_t)h->bos);
    gw_write(&w, path);
}

TEST(hostile)
{
    const struct hostile cases[] = {
        {.what = "good", .bos = 257},
        {.what = "bos out of range", .expect = "tokenizer.ggml.bos_token_id", .bos = 258},
        {.what = "unknown pre", .expect = "no-such-pre", .pre = 1, .bos = -1},
        {.what = "token_type short",
         .expect = "tokenizer.ggml.token_type",
         .bos = -1,
         .types_short = 1},
        {.what = "merge of an unknown symbol",
         .expect = "tokenizer.ggml.merges[0]",
         .bos = -1,
         .bad_merge = 1},
        {.what = "token not UTF-8",
         .expect = "tokenizer.ggml.tokens[256]",
         .bos = -1,
         .bad_utf8 = 1},
        {.what = "token repeated", .expect = "tokenizer.ggml.tokens[256]", .bos = -1, .dup = 1},
        {.what = "token type 7",
         .expect = "tokenizer.ggml.token_type[5]",
         .bos = -1,
         .bad_type = 1},
        {.what = "llama without scores",
         .expect = "tokenizer.ggml.scores",
         .bos = -1,
         .spm_no_scores = 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/hostile%zu.gguf", scratch, i);
        write_hostile(&cases[i], path);
        struct bpe *t = NULL;
        int rc = bpe_open(path, &t);
        if (!cases[i].expect) {
            CHECK_MSG(rc == 0 && t, "%s: %s", cases[i].what, err_msg());
            if (t) {
                int32_t *ids = NULL;
                size_t n = 0;
                CHECK(bpe_encode(t, "ab<|end|>", 9, true, &ids, &n) == 0 && n == 2 &&
                      ids[0] == 256 && ids[1] == 257);
                free(ids);
                CHECK(bpe_bos_id(t) == 257 && bpe_is_special(t, 257));
            }
            bpe_close(t);
            continue;
        }
        const char *msg = err_msg();
        printf("  %s: %s\n", cases[i].what, msg);
        CHECK_MSG(rc < 0 && !t && strstr(msg, cases[i].expect) && !strchr(msg, '\n'),
                  "%s: rc %d, message \"%s\" should name %s on one line", cases[i].what, rc, msg,
                  cases[i].expect);
        bpe_close(t);
    }
}

/* tokenizer.chat_template with a NUL byte, or bytes that are not UTF-8: a
 * one-line error naming the key, never a read past the copy. */
TEST(template_hostile)
{
    static const struct {
        const char *what, *text, *expect;
        size_t len;
    } cases[] = {
        {"NUL inside", "{{ x }}\0{{ y }}", "holds a NUL byte", 15},
        {"NUL first", "\0abcdefgh", "holds a NUL byte", 10},
        {"not UTF-8", "ab\xff\xfe", "invalid UTF-8 at byte 2", 4},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/template%zu.gguf", scratch, i);
        struct gw w = {0};
        gw_kv_str(&w, "tokenizer.chat_template", cases[i].text, cases[i].len);
        gw_write(&w, path);
        struct chat_template *ct = NULL;
        int rc = chat_template_load(path, NULL, &ct);
        const char *msg = err_msg();
        printf("  %s: %s\n", cases[i].what, msg);
        CHECK_MSG(rc < 0 && !ct && strstr(msg, "tokenizer.chat_template") &&
                      strstr(msg, cases[i].expect) && !strchr(msg, '\n'),
                  "%s: rc %d, message \"%s\"", cases[i].what, rc, msg);
        chat_template_free(ct);
    }
}

static void setup(void)
{
    test_scratch_dir(scratch, sizeof(scratch), "tokenizer_gguf");
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
