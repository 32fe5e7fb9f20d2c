/* Tokenizers of today's model families against Hugging Face.
 *
 * For each tokenizer.json committed in data/tokenizer/{llama3,qwen2,llama2,phi3}:
 *   - llama.cpp's 47 reference cases (tests/fixtures/tokenizers/<f>_reference.json,
 *     ids without special tokens) exactly;
 *   - the differential corpus (tests/fixtures/tokenizers/<f>.json, from
 *     tools/make_tokenizer_families_corpus.py): ids without special tokens,
 *     ids with them (transformers' AutoTokenizer) where recorded, HF's decode
 *     with skip_special_tokens, decode(encode(x)) == x where HF's round trip
 *     is lossless, and the streaming decoder equal to the whole decode;
 *   - the special ids, BOS rule and bpe_token_id.
 * Then the small tokenizers of tests/fixtures/tokenizers/variants.json (one
 * pre-tokenizer, normalizer, decoder or added-token setting each, with HF's
 * ids), and tokenizer.json files that must be refused with a one-line error.
 */
#include "core/error.h"
#include "test.h"
#include "tokenizer/bpe.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static json_t *load_json(const char *path)
{
    json_error_t je;
    json_t *j = json_load_file(path, JSON_ALLOW_NUL, &je);
    CHECK_MSG(j != NULL, "%s: %s", path, je.text);
    return j;
}

/* The ids of a JSON array; malloc'd. */
static int32_t *json_ids(json_t *arr, size_t *n)
{
    *n = json_array_size(arr);
    int32_t *ids = malloc((*n + 1) * sizeof(*ids));
    for (size_t i = 0; i < *n; i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    return ids;
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

static bool utf8_valid(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i], len;
        if (c < 0x80)
            len = 1;
        else if (c >= 0xC2 && c <= 0xDF)
            len = 2;
        else if (c >= 0xE0 && c <= 0xEF)
            len = 3;
        else if (c >= 0xF0 && c <= 0xF4)
            len = 4;
        else
            return false;
        if (i + len > n)
            return false;
        for (unsigned k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
        }
        i += len;
    }
    return true;
}

/* Encodes text and compares; prints the first few failures of a label. */
static bool encode_matches(const struct bpe *t, const char *text, size_t len, bool add_bos,
                           const int32_t *want, size_t n_want, int *shown, const char *label)
{
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = bpe_encode(t, text, len, add_bos, &ids, &n);
    bool ok = rc == 0 && ids_equal(ids, n, want, n_want);
    if (!ok && (*shown)++ < 5) {
        fprintf(stderr, "%s: ids differ (add_bos %d) for \"%.*s\"%s\n", label, add_bos,
                (int)(len > 80 ? 80 : len), text, rc ? err_msg() : "");
        ids_print("got ", ids, n);
        ids_print("want", want, n_want);
    }
    free(ids);
    return ok;
}

/* Streams ids; true when every chunk is whole UTF-8 and the concatenation is
 * want[0..n_want). */
static bool stream_matches(const struct bpe *t, const int32_t *ids, size_t n, const char *want,
                           size_t n_want)
{
    size_t cap = bpe_stream_chunk_max(t);
    char *chunk = malloc(cap), *got = malloc(n_want + cap + 1);
    size_t got_len = 0;
    bool ok = true;
    struct bpe_stream s;
    bpe_stream_init(&s, t);
    for (size_t i = 0; i <= n && ok; i++) {
        int w = i < n ? bpe_stream_push(&s, ids[i], chunk, cap) : bpe_stream_finish(&s, chunk, cap);
        if (w < 0 || got_len + (size_t)w > n_want || !utf8_valid(chunk, (size_t)w)) {
            ok = false;
            break;
        }
        memcpy(got + got_len, chunk, (size_t)w);
        got_len += (size_t)w;
    }
    ok = ok && got_len == n_want && memcmp(got, want, n_want) == 0;
    free(chunk);
    free(got);
    return ok;
}

struct tally {
    size_t cases, ids, sp, dec, rt, stream, dk;
    size_t bad_ids, bad_sp, bad_dec, bad_rt, bad_stream, bad_dk;
};

/* One corpus case {"t", "ids", "sp"?, "dec"?}. */
static void check_case(const struct bpe *t, json_t *c, struct tally *y, int *shown,
                       const char *label)
{
    json_t *jt = json_object_get(c, "t");
    const char *text = json_string_value(jt);
    size_t len = json_string_length(jt), n_want, n_sp;
    int32_t *want = json_ids(json_object_get(c, "ids"), &n_want);
    y->cases++;
    y->ids++;
    y->bad_ids += !encode_matches(t, text, len, false, want, n_want, shown, label);
    json_t *sp = json_object_get(c, "sp");
    if (sp) {
        int32_t *wsp = json_ids(sp, &n_sp);
        y->sp++;
        y->bad_sp += !encode_matches(t, text, len, true, wsp, n_sp, shown, label);
        free(wsp);
    }
    /* Decoding HF's ids: HF's decode, or the text itself when lossless. */
    json_t *dec = json_object_get(c, "dec");
    const char *wd = dec ? json_string_value(dec) : text;
    size_t wd_len = dec ? json_string_length(dec) : len;
    char *got = NULL;
    size_t got_len = 0;
    int rc = bpe_decode(t, want, n_want, true, &got, &got_len);
    bool ok = rc == 0 && got_len == wd_len && memcmp(got, wd, wd_len) == 0;
    if (dec) {
        y->dec++;
        y->bad_dec += !ok;
    } else {
        y->rt++;
        y->bad_rt += !ok;
    }
    if (!ok && (*shown)++ < 5)
        fprintf(stderr, "%s: decode of \"%.*s\" gave \"%.*s\", want \"%.*s\"\n", label,
                (int)(len > 60 ? 60 : len), text, (int)(got_len > 60 ? 60 : got_len),
                got ? got : "", (int)(wd_len > 60 ? 60 : wd_len), wd);
    json_t *dk = json_object_get(c, "dk");
    if (dk) { /* special tokens kept: their content, through the decoder */
        char *full = NULL;
        size_t full_len = 0;
        int rk = bpe_decode(t, want, n_want, false, &full, &full_len);
        bool okk = rk == 0 && full_len == json_string_length(dk) &&
                   memcmp(full, json_string_value(dk), full_len) == 0;
        y->dk++;
        y->bad_dk += !okk;
        if (!okk && (*shown)++ < 5)
            fprintf(stderr,
                    "%s: decode with special tokens of \"%.*s\" gave \"%.*s\", want \"%s\"\n",
                    label, (int)(len > 60 ? 60 : len), text, (int)(full_len > 60 ? 60 : full_len),
                    full ? full : "", json_string_value(dk));
        free(full);
    }
    y->stream++;
    if (rc == 0 && !stream_matches(t, want, n_want, got, got_len)) {
        y->bad_stream++;
        if ((*shown)++ < 5)
            fprintf(stderr, "%s: stream differs from decode for \"%.*s\"\n", label,
                    (int)(len > 60 ? 60 : len), text);
    }
    free(got);
    free(want);
}

static void check_family(const char *fam, int32_t bos, bool adds_bos, const char *eot,
                         int32_t eot_id)
{
    char dir[512], path[600], label[64];
    snprintf(dir, sizeof(dir), "%s/data/tokenizer/%s", SHARDSWAP_SOURCE_DIR, fam);
    double t0 = now_ms();
    struct bpe *t = NULL;
    int rc = bpe_open(dir, &t);
    CHECK_MSG(rc == 0, "%s: %s", fam, err_msg());
    if (rc != 0)
        return;
    printf("%s: opened in %.0f ms, %d ids\n", fam, now_ms() - t0, bpe_vocab_size(t));
    CHECK_MSG(bpe_bos_id(t) == bos && bpe_adds_bos(t) == adds_bos, "%s: bos %d adds %d", fam,
              bpe_bos_id(t), bpe_adds_bos(t));
    CHECK_MSG(bpe_token_id(t, eot, strlen(eot)) == eot_id, "%s: bpe_token_id(%s) = %d, want %d",
              fam, eot, bpe_token_id(t, eot, strlen(eot)), eot_id);
    CHECK(bpe_is_special(t, eot_id));
    CHECK(bpe_token_id(t, "no such token \x01", 15) == -1);
    /* A vocabulary entry by the bytes it decodes to: " the" is one token in every family. */
    int32_t *the = NULL;
    size_t n_the = 0;
    CHECK(bpe_encode(t, "the the", 7, false, &the, &n_the) == 0 && n_the == 2);
    if (n_the == 2)
        CHECK_MSG(bpe_token_id(t, " the", 4) == the[1], "%s: bpe_token_id(\" the\") = %d, want %d",
                  fam, bpe_token_id(t, " the", 4), the[1]);
    free(the);

    /* llama.cpp's reference cases. */
    snprintf(path, sizeof(path), "%s/tests/fixtures/tokenizers/%s_reference.json",
             SHARDSWAP_SOURCE_DIR, fam);
    json_t *ref = load_json(path);
    size_t i, good = 0;
    json_t *c;
    int shown = 0;
    snprintf(label, sizeof(label), "%s reference", fam);
    json_array_foreach(ref, i, c)
    {
        size_t n;
        int32_t *want = json_ids(json_object_get(c, "ids"), &n);
        json_t *jt = json_object_get(c, "text");
        good += encode_matches(t, json_string_value(jt), json_string_length(jt), false, want, n,
                               &shown, label);
        free(want);
    }
    CHECK_MSG(good == json_array_size(ref) && good == 47, "%s: %zu of %zu reference cases", fam,
              good, json_array_size(ref));
    printf("%s: %zu/%zu llama.cpp reference cases match\n", fam, good, json_array_size(ref));
    json_decref(ref);

    /* The differential corpus. */
    snprintf(path, sizeof(path), "%s/tests/fixtures/tokenizers/%s.json", SHARDSWAP_SOURCE_DIR, fam);
    json_t *doc = load_json(path);
    struct tally y = {0};
    snprintf(label, sizeof(label), "%s corpus", fam);
    t0 = now_ms();
    json_array_foreach(json_object_get(doc, "cases"), i, c) check_case(t, c, &y, &shown, label);
    CHECK_MSG(y.cases >= 1000, "%s: only %zu corpus cases", fam, y.cases);
    CHECK_MSG(y.bad_ids + y.bad_sp + y.bad_dec + y.bad_rt + y.bad_stream + y.bad_dk == 0,
              "%s: corpus mismatches: ids %zu, with special tokens %zu, decode %zu, round trip "
              "%zu, stream %zu, decode keeping special tokens %zu",
              fam, y.bad_ids, y.bad_sp, y.bad_dec, y.bad_rt, y.bad_stream, y.bad_dk);
    printf("%s: %zu corpus cases (tokenizers %s): ids %zu/%zu, with special tokens %zu/%zu, HF "
           "decode %zu/%zu, lossless round trip %zu/%zu, stream = decode %zu/%zu, decode keeping "
           "special tokens %zu/%zu (%.0f ms)\n",
           fam, y.cases, json_string_value(json_object_get(doc, "tokenizers")), y.ids - y.bad_ids,
           y.ids, y.sp - y.bad_sp, y.sp, y.dec - y.bad_dec, y.dec, y.rt - y.bad_rt, y.rt,
           y.stream - y.bad_stream, y.stream, y.dk - y.bad_dk, y.dk, now_ms() - t0);
    json_decref(doc);
    bpe_close(t);
}

/* ---- small tokenizers, one setting each ---- */

static char tmp_dir[256];

static void write_text(const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", tmp_dir, name);
    test_write_text(path, text);
}

static void remove_text(const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", tmp_dir, name);
    unlink(path);
}

TEST(variants)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/tests/fixtures/tokenizers/variants.json",
             SHARDSWAP_SOURCE_DIR);
    json_t *doc = load_json(path);
    size_t i, n_var = 0, total = 0;
    json_t *v;
    json_array_foreach(json_object_get(doc, "variants"), i, v)
    {
        const char *name = json_string_value(json_object_get(v, "name"));
        char *tj = json_dumps(json_object_get(v, "tokenizer"), JSON_COMPACT);
        json_t *cfg = json_object_get(v, "config");
        write_text("tokenizer.json", tj);
        free(tj);
        if (cfg) {
            char *cs = json_dumps(cfg, JSON_COMPACT);
            write_text("tokenizer_config.json", cs);
            free(cs);
        } else {
            remove_text("tokenizer_config.json");
        }
        struct bpe *t = NULL;
        int rc = bpe_open(tmp_dir, &t);
        CHECK_MSG(rc == 0, "variant %s: %s", name, err_msg());
        if (rc != 0)
            continue;
        struct tally y = {0};
        int shown = 0;
        size_t k;
        json_t *c;
        json_array_foreach(json_object_get(v, "cases"), k, c) check_case(t, c, &y, &shown, name);
        CHECK_MSG(y.bad_ids + y.bad_sp + y.bad_dec + y.bad_rt + y.bad_stream + y.bad_dk == 0,
                  "variant %s: mismatches: ids %zu, special %zu, decode %zu, round trip %zu, "
                  "stream %zu, decode keeping special tokens %zu",
                  name, y.bad_ids, y.bad_sp, y.bad_dec, y.bad_rt, y.bad_stream, y.bad_dk);
        n_var++;
        total += y.cases;
        bpe_close(t);
    }
    remove_text("tokenizer.json");
    remove_text("tokenizer_config.json");
    printf("variants: %zu small tokenizers, %zu cases checked against Hugging Face\n", n_var,
           total);
    json_decref(doc);
}

/* tokenizer.json files that must be refused with a one-line message naming the problem. */
TEST(refused)
{
    static const char VOCAB[] = "\"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]";
    static const struct {
        const char *pre, *model_extra, *rest, *needle;
    } BAD[] = {
        {"{\"type\": \"BertPreTokenizer\"}", "", "", "pre_tokenizer type \"BertPreTokenizer\""},
        {"{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}", "",
         "", "does not compile"},
        {"{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Sideways\"}", "",
         "", "behavior"},
        {"{\"type\": \"Split\", \"pattern\": 7, \"behavior\": \"Isolated\"}", "", "", "pattern"},
        {"{\"type\": \"Sequence\", \"pretokenizers\": 3}", "", "", "pretokenizers"},
        {"{\"type\": \"ByteLevel\", \"add_prefix_space\": \"yes\"}", "", "", "add_prefix_space"},
        {"[1, 2]", "", "", "pre_tokenizer"},
        {"null", "", ", \"normalizer\": {\"type\": \"Precompiled\"}",
         "normalizer type \"Precompiled\""},
        {"null", "", ", \"normalizer\": {\"type\": \"Lowercase\"}",
         "normalizer type \"Lowercase\""},
        {"null", "", ", \"decoder\": {\"type\": \"WordPiece\"}", "decoder type \"WordPiece\""},
        {"null", "", ", \"decoder\": {\"type\": \"CTC\"}", "decoder type \"CTC\""},
        {"null", "", ", \"decoder\": null", "null decoder"},
        {"null", "", ", \"post_processor\": {\"type\": \"Weird\"}",
         "post_processor type \"Weird\""},
        {"null", ", \"dropout\": 0.1", "", "dropout"},
        {"null", ", \"byte_fallback\": 3", "", "byte_fallback"},
    };
    for (size_t i = 0; i < sizeof(BAD) / sizeof(BAD[0]); i++) {
        char tj[1024];
        snprintf(tj, sizeof(tj),
                 "{\"pre_tokenizer\": %s, \"model\": {\"type\": \"BPE\", %s%s}%s%s}", BAD[i].pre,
                 VOCAB, BAD[i].model_extra,
                 strstr(BAD[i].rest, "decoder") ? "" : ", \"decoder\": {\"type\": \"Fuse\"}",
                 BAD[i].rest);
        write_text("tokenizer.json", tj);
        struct bpe *t = (struct bpe *)1;
        err_set(0, "%s", "");
        int rc = bpe_open(tmp_dir, &t);
        const char *msg = err_msg();
        CHECK_MSG(rc < 0 && t == NULL, "refused[%zu]: bpe_open should fail", i);
        CHECK_MSG(strchr(msg, '\n') == NULL && strstr(msg, BAD[i].needle) != NULL,
                  "refused[%zu]: message \"%s\" should name \"%s\"", i, msg, BAD[i].needle);
        if (rc == 0)
            bpe_close(t);
    }
    static const char *const MODELS[] = {"WordPiece", "Unigram", "WordLevel"};
    for (size_t i = 0; i < 3; i++) {
        char tj[256];
        snprintf(tj, sizeof(tj), "{\"model\": {\"type\": \"%s\", \"vocab\": {}}}", MODELS[i]);
        write_text("tokenizer.json", tj);
        struct bpe *t = NULL;
        int rc = bpe_open(tmp_dir, &t);
        CHECK_MSG(rc < 0 && strstr(err_msg(), MODELS[i]) && strstr(err_msg(), "not supported"),
                  "model %s: \"%s\"", MODELS[i], err_msg());
        if (rc == 0)
            bpe_close(t);
    }
    /* A huge regex is refused at load, not matched slowly. */
    size_t big = 70000;
    char *tj = malloc(big + 512);
    int o = snprintf(tj, 512,
                     "{\"pre_tokenizer\": {\"type\": \"Split\", \"behavior\": "
                     "\"Isolated\", \"pattern\": {\"Regex\": \"");
    memset(tj + o, 'a', big);
    snprintf(tj + o + big, 512, "\"}}, \"model\": {\"type\": \"BPE\", %s}}", VOCAB);
    write_text("tokenizer.json", tj);
    free(tj);
    struct bpe *t = NULL;
    int rc = bpe_open(tmp_dir, &t);
    CHECK_MSG(rc < 0 && strstr(err_msg(), "64 KiB"), "huge regex: \"%s\"", err_msg());
    if (rc == 0)
        bpe_close(t);
    remove_text("tokenizer.json");
    printf("refused: %zu bad tokenizer.json files, each with a one-line message\n",
           sizeof(BAD) / sizeof(BAD[0]) + 4);
}

/* The committed files: Qwen2's post-processor adds nothing, Llama 3's puts
 * <|begin_of_text|> first, Llama 2's and Phi-3's <s>. */
TEST(llama3)
{
    check_family("llama3", 128000, true, "<|eot_id|>", 128009);
}

TEST(qwen2)
{
    check_family("qwen2", 151643, false, "<|im_end|>", 151645);
}

TEST(llama2)
{
    check_family("llama2", 1, true, "</s>", 2);
}

TEST(phi3)
{
    check_family("phi3", 1, true, "<|end|>", 32007);
}

static void setup(void)
{
    test_scratch_dir(tmp_dir, sizeof(tmp_dir), "tokfam");
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
