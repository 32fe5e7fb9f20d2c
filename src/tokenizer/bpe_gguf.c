/* A tokenizer from a GGUF file's metadata, read as llama.cpp reads it.
 *
 * Keys (llama.cpp's names; format/gguf.h reads and bounds-checks the file):
 *   tokenizer.ggml.model         string    "gpt2": byte-level BPE; "llama": SentencePiece-style
 *   tokenizer.ggml.pre           string    gpt2: the pre-tokenizer, by llama.cpp's name for it
 *                                          (PRE_TABLE below); absent: "default"
 *   tokenizer.ggml.tokens        [string]  (n) every token as the vocabulary spells it (gpt2:
 *                                          GPT-2's byte-level alphabet; control and user-defined
 *                                          tokens as their text)
 *   tokenizer.ggml.token_type    [i32]     (n, optional) 0 undefined and 1 normal: vocabulary;
 *                                          2 unknown and 3 control: special tokens matched whole;
 *                                          4 user-defined: matched whole, decoded; 5 unused;
 *                                          6 byte (<0xNN>)
 *   tokenizer.ggml.scores        [f32|i32] (n) llama: a merge's priority is the score of the
 *                                          token it makes (SentencePiece's BPE)
 *   tokenizer.ggml.merges        [string]  gpt2: "A B", the first applies first
 *   tokenizer.ggml.{bos,eos,eot,unknown,padding}_token_id  integer ids (llama defaults: bos 1,
 *                                          eos 2, unknown 0)
 *   tokenizer.ggml.add_bos_token, add_eos_token   bool (defaults: llama true/false; gpt2 as
 *                                          llama.cpp sets them per pre-tokenizer)
 *   tokenizer.ggml.add_space_prefix  bool  llama: a "▁" before the text (default true)
 *   general.name                 string    llama.cpp's one name rule: a Phi-3 model's special
 *                                          tokens swallow the white space after them
 *
 * One tokenizer: the metadata becomes what tokenizer.json would say for that
 * model (vocabulary, merges, added tokens, normalizer, pre-tokenizer,
 * decoder, post-processor) and goes through the same loader. SentencePiece's
 * merge-by-score becomes the pair table directly: every split of a token into
 * two tokens is a merge ranked by the token's score (equal scores share a
 * rank, so the leftmost merges first, as in llama.cpp's queue), which is the
 * merge order SentencePiece's BPE and llama.cpp apply. Every count, id and
 * string is checked first; a bad one is a one-line error naming the key and
 * the index.
 */
#include "core/error.h"
#include "core/utf8.h"
#include "format/gguf.h"
#include "tokenizer/bpe_impl.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    TT_UNDEFINED = 0,
    TT_NORMAL = 1,
    TT_UNKNOWN = 2,
    TT_CONTROL = 3,
    TT_USER_DEFINED = 4,
    TT_UNUSED = 5,
    TT_BYTE = 6,
};

/* ---- pre-tokenizers, by llama.cpp's names (src/llama-vocab.cpp) ---- */

/* Each regex splits the pieces the previous ones made, matches and the text
 * between them both kept (Hugging Face's Split with "Isolated"), then the
 * bytes are mapped to GPT-2's alphabet. Where llama.cpp rewrote a Hugging
 * Face regex for its engine ((?i:...) spelled out), the original is used:
 * the tokenizer.json loader translates it. */
#define R_CONTRACTIONS "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
#define R_LLAMA3                                                                                   \
    R_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"    \
                   "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_QWEN2                                                                                    \
    R_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"         \
                   "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_QWEN35                                                                                   \
    R_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+"     \
                   "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define R_UPPER "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define R_LOWER "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
#define R_GPT4O                                                                                    \
    "[^\\r\\n\\p{L}\\p{N}]?" R_UPPER "*" R_LOWER "+" R_CONTRACTIONS                                \
    "?|[^\\r\\n\\p{L}\\p{N}]?" R_UPPER "+" R_LOWER "*" R_CONTRACTIONS                              \
    "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"                                               \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_TEKKEN                                                                                   \
    "[^\\r\\n\\p{L}\\p{N}]?" R_UPPER "*" R_LOWER "+|[^\\r\\n\\p{L}\\p{N}]?" R_UPPER "+" R_LOWER    \
    "*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_PORO " ?[^(\\s|.,!?…。，、।۔،)]+"

static const char *const RX_DEFAULT[] = {"[\\p{P}\\$\\+<=>\\^~\\|]+", R_GPT2, "\\p{N}+",
                                         "[0-9][0-9][0-9]", NULL};
static const char *const RX_LLAMA3[] = {R_LLAMA3, NULL};
static const char *const RX_QWEN2[] = {R_QWEN2, NULL};
static const char *const RX_QWEN35[] = {R_QWEN35, NULL};
static const char *const RX_GPT2[] = {NULL}; /* ByteLevel's own regex (GPT-2's) */
static const char *const RX_STARCODER[] = {"\\p{N}", R_GPT2, NULL};
static const char *const RX_FALCON[] = {"[\\p{P}\\$\\+<=>\\^~\\|`]+",
                                        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| "
                                        "?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
                                        "[0-9][0-9][0-9]", NULL};
/* the character classes are llama.cpp's bytes, kept as they are */
/* clang-format off */
static const char *const RX_DEEPSEEK_LLM[] = {
    "[\r\n]",
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-"
    "ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-"
    "ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-"
    "𑣟𞤀-𞥃]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}+",
    NULL};
static const char *const RX_DEEPSEEK_CODER[] = {
    "[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}", NULL};
static const char *const RX_DEEPSEEK3[] = {
    "\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./"
    ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    NULL};
/* clang-format on */
static const char *const RX_GPT4O[] = {R_GPT4O, NULL};
static const char *const RX_TEKKEN[] = {R_TEKKEN, NULL};
static const char *const RX_PORO[] = {R_PORO, NULL};
static const char *const RX_VIKING[] = {R_PORO, "\\p{N}", NULL};

/* names: NUL-separated, ending in an empty name. add_bos: llama.cpp's
 * default when the file has no add_bos_token. */
static const struct gguf_pre {
    const char *names;
    const char *const *regex;
    bool ignore_merges, add_bos;
} PRE_TABLE[] = {
    {"default\0", RX_DEFAULT, false, false},
    {"llama3\0llama-v3\0llama-bpe\0falcon3\0falcon-h1\0pixtral\0midm-2.0\0lfm2\0jina-v5-nano\0",
     RX_LLAMA3, true, true},
    {"dbrx\0smaug-bpe\0", RX_LLAMA3, false, false},
    {"qwen2\0deepseek-r1-qwen\0kormo\0f2llmv2\0stablelm2\0hunyuan\0megrez\0solar-open\0", RX_QWEN2,
     false, false},
    {"qwen35\0", RX_QWEN35, false, false},
    {"gpt-2\0phi-2\0mpt\0olmo\0jais\0exaone4\0jina-es\0jina-de\0jina-v2-es\0jina-v2-de\0gigachat\0"
     "a.x-4.0\0mellum\0modern-bert\0trillion\0granite-docling\0",
     RX_GPT2, false, false},
    {"starcoder\0refact\0command-r\0smollm\0codeshell\0exaone\0minerva-7b\0mellum2\0", RX_STARCODER,
     false, false},
    {"falcon\0", RX_FALCON, false, false},
    {"deepseek-llm\0", RX_DEEPSEEK_LLM, false, false},
    {"deepseek-coder\0", RX_DEEPSEEK_CODER, false, false},
    {"deepseek-v3\0", RX_DEEPSEEK3, false, false},
    {"gpt-4o\0llama4\0kanana2\0talkie\0minimax-m2\0", RX_GPT4O, false, false},
    {"tekken\0", RX_TEKKEN, true, true},
    {"poro-chat\0bloom\0gpt3-finnish\0", RX_PORO, false, false},
    {"viking\0", RX_VIKING, false, false},
};

static const struct gguf_pre *gguf_pre_find(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof(PRE_TABLE) / sizeof(PRE_TABLE[0]); i++) {
        for (const char *s = PRE_TABLE[i].names; *s; s += strlen(s) + 1) {
            if (strlen(s) == n && memcmp(s, name, n) == 0)
                return &PRE_TABLE[i];
        }
    }
    return NULL;
}

/* The Sequence of Splits and the ByteLevel step for pre. */
static json_t *gguf_pretok_json(const struct gguf_pre *pre)
{
    json_t *bl = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0,
                           "trim_offsets", 1, "use_regex", pre->regex[0] == NULL);
    if (!bl || !pre->regex[0])
        return bl;
    json_t *steps = json_array();
    for (size_t i = 0; steps && pre->regex[i]; i++) {
        json_t *sp = json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "Regex",
                               pre->regex[i], "behavior", "Isolated", "invert", 0);
        if (!sp || json_array_append_new(steps, sp) < 0) {
            json_decref(steps);
            steps = NULL;
        }
    }
    if (!steps || json_array_append_new(steps, bl) < 0) {
        json_decref(steps);
        return NULL;
    }
    return json_pack("{s:s, s:o}", "type", "Sequence", "pretokenizers", steps);
}

/* ---- reading the metadata ---- */

struct gguf_tok {
    const struct gguf_file *g;
    const char *name; /* the file, for errors */
    const struct gguf_kv *tokens, *types, *scores, *merges;
    uint64_t n;
    bool spm;
};

static int gguf_tok_type(const struct gguf_tok *k, uint64_t i)
{
    return k->types ? (int)gguf_arr_int(k->types, i) : TT_NORMAL;
}

/* The array at key: required or absent (NULL), of n_want entries when
 * n_want > 0, elements of one of the types in want (up to 3). */
static int gguf_tok_array(const struct gguf_tok *k, const char *key, bool required, uint64_t n_want,
                          const enum gguf_vtype *want, size_t n_types, const char *what,
                          const struct gguf_kv **out)
{
    *out = gguf_find(k->g, key);
    if (!*out) {
        if (required)
            return err_set(ERR_FORMAT, "%s: no %s (the tokenizer needs it)", k->name, key);
        return 0;
    }
    bool ok = gguf_kv_type(*out) == GGUF_ARR;
    bool type_ok = false;
    for (size_t i = 0; ok && i < n_types; i++)
        type_ok |= gguf_kv_arr_type(*out) == want[i];
    if (!ok || !type_ok)
        return err_set(ERR_FORMAT, "%s: %s is not an array of %s", k->name, key, what);
    uint64_t n = gguf_kv_arr_len(*out);
    if (n_want > 0 && n != n_want)
        return err_set(ERR_FORMAT,
                       "%s: %s has %llu entries; expected %llu (one per token of "
                       "tokenizer.ggml.tokens)",
                       k->name, key, (unsigned long long)n, (unsigned long long)n_want);
    return 0;
}

/* Checks every token (non-empty UTF-8 without NUL bytes, each spelled once)
 * and type, and builds the vocabulary object (symbol -> id). */
static int gguf_tok_vocab(const struct gguf_tok *k, json_t **out)
{
    *out = NULL;
    json_t *vocab = json_object();
    if (!vocab)
        return err_set(ERR_NOMEM, "out of memory for a vocabulary");
    for (uint64_t i = 0; i < k->n; i++) {
        struct gguf_str s = gguf_arr_str(k->tokens, i);
        const unsigned char *p = (const unsigned char *)s.p;
        bool utf8 = s.n > 0 && !memchr(s.p, '\0', s.n);
        for (size_t at = 0; utf8 && at < s.n;) {
            uint32_t cp;
            size_t l = utf8_decode_one(p + at, s.n - at, &cp);
            utf8 = l > 0;
            at += l;
        }
        if (!utf8) {
            json_decref(vocab);
            return err_set(ERR_FORMAT,
                           "%s: tokenizer.ggml.tokens[%llu] is %s; expected a non-empty UTF-8 "
                           "string without NUL bytes",
                           k->name, (unsigned long long)i, s.n == 0 ? "empty" : "not UTF-8 text");
        }
        int type = gguf_tok_type(k, i);
        if (type < TT_UNDEFINED || type > TT_BYTE) {
            json_decref(vocab);
            return err_set(ERR_FORMAT,
                           "%s: tokenizer.ggml.token_type[%llu] is %d; expected 0 to 6 (undefined, "
                           "normal, unknown, control, user-defined, unused, byte)",
                           k->name, (unsigned long long)i, type);
        }
        json_t *old = json_object_getn(vocab, s.p, s.n);
        if (old) {
            char q[96];
            long long first = (long long)json_integer_value(old);
            json_decref(vocab);
            return err_set(ERR_FORMAT,
                           "%s: tokenizer.ggml.tokens[%llu] %s repeats tokens[%lld]; expected each "
                           "token once",
                           k->name, (unsigned long long)i, bpe_quote(s.p, s.n, q, sizeof(q)),
                           first);
        }
        if (json_object_setn_new_nocheck(vocab, s.p, s.n, json_integer((json_int_t)i)) < 0) {
            json_decref(vocab);
            return err_set(ERR_NOMEM, "out of memory for a vocabulary");
        }
    }
    *out = vocab;
    return 0;
}

/* Added tokens from the token types: unknown and control tokens are special,
 * user-defined ones are not; all are matched whole in the text as given.
 * phi3: llama.cpp's rule for Phi-3 (its special tokens swallow the ASCII
 * white space on their right, except <unk>, <s> and <|endoftext|>). */
static int gguf_tok_added(const struct gguf_tok *k, bool phi3, json_t **out)
{
    json_t *list = json_array();
    if (!list)
        return err_set(ERR_NOMEM, "out of memory for added tokens");
    for (uint64_t i = 0; i < k->n; i++) {
        int type = gguf_tok_type(k, i);
        if (type != TT_UNKNOWN && type != TT_CONTROL && type != TT_USER_DEFINED)
            continue;
        struct gguf_str s = gguf_arr_str(k->tokens, i);
        bool rstrip = false;
        if (phi3) {
            static const char *const KEEP[] = {"<unk>", "<s>", "<|endoftext|>"};
            rstrip = true;
            for (size_t j = 0; j < 3; j++)
                rstrip &= !(s.n == strlen(KEEP[j]) && memcmp(s.p, KEEP[j], s.n) == 0);
        }
        json_t *tok = json_pack("{s:I, s:s%, s:b, s:b, s:b, s:b, s:b}", "id", (json_int_t)i,
                                "content", s.p, s.n, "special", type != TT_USER_DEFINED, "lstrip",
                                0, "rstrip", rstrip, "single_word", 0, "normalized", 0);
        if (!tok || json_array_append_new(list, tok) < 0) {
            json_decref(list);
            return err_set(ERR_NOMEM, "out of memory for added tokens");
        }
    }
    *out = list;
    return 0;
}

/* ---- SentencePiece's merges from scores ---- */

struct gguf_score {
    float score;
    int32_t id;
};

static int gguf_score_cmp(const void *a, const void *b)
{
    const struct gguf_score *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Fills t->pairs: each token that is two tokens joined is the merge of the
 * two, ranked by its score (higher first; equal scores one rank). */
static int gguf_spm_merges(struct bpe *t, const struct bpe_symtab *vocab, void *ctx)
{
    const struct gguf_tok *k = ctx;
    struct gguf_score *order = malloc(k->n * sizeof(*order));
    int32_t *rank = malloc(k->n * sizeof(*rank));
    int rc = 0;
    if (!order || !rank) {
        rc = err_set(ERR_NOMEM, "out of memory for %llu scores", (unsigned long long)k->n);
        goto out;
    }
    for (uint64_t i = 0; i < k->n; i++) {
        double s = gguf_arr_num(k->scores, i);
        if (!isfinite(s) || fabs(s) > 3.0e38) {
            rc = err_set(ERR_FORMAT, "%s: tokenizer.ggml.scores[%llu] is not a finite number",
                         k->name, (unsigned long long)i);
            goto out;
        }
        order[i] = (struct gguf_score){.score = (float)s, .id = (int32_t)i};
    }
    qsort(order, k->n, sizeof(*order), gguf_score_cmp);
    int32_t r = 0;
    for (uint64_t i = 0; i < k->n; i++) {
        if (i > 0 && order[i].score != order[i - 1].score)
            r++;
        rank[order[i].id] = r;
    }
    /* Two passes: count the merges to size the table, then put them. */
    size_t n_merges = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && (rc = bpe_pairs_init(&t->pairs, n_merges)) < 0)
            goto out;
        for (uint64_t i = 0; i < k->n; i++) {
            struct gguf_str s = gguf_arr_str(k->tokens, i);
            for (size_t at = 1; at < s.n; at++) {
                if (((unsigned char)s.p[at] & 0xC0) == 0x80)
                    continue; /* inside a character */
                int32_t a = bpe_symtab_get(vocab, s.p, at);
                int32_t b = a >= 0 ? bpe_symtab_get(vocab, s.p + at, s.n - at) : -1;
                if (b < 0)
                    continue;
                if (pass == 0)
                    n_merges++;
                else
                    bpe_pairs_put(&t->pairs, a, b, rank[i], (int32_t)i);
            }
        }
    }
out:
    free(order);
    free(rank);
    return rc;
}

static int gguf_gpt2_merges(struct bpe *t, const struct bpe_symtab *vocab, void *ctx)
{
    const struct gguf_tok *k = ctx;
    uint64_t n = gguf_kv_arr_len(k->merges);
    json_t *list = json_array();
    for (uint64_t i = 0; list && i < n; i++) {
        struct gguf_str s = gguf_arr_str(k->merges, i);
        json_t *v = json_stringn_nocheck(s.p, s.n);
        if (!v || json_array_append_new(list, v) < 0) {
            json_decref(list);
            list = NULL;
        }
    }
    if (!list)
        return err_set(ERR_NOMEM, "out of memory for %llu merges", (unsigned long long)n);
    int rc = bpe_merges_load_list(t, vocab, list, k->name, "tokenizer.ggml.merges");
    json_decref(list);
    return rc;
}

/* ---- putting it together ---- */

/* The role key's id: the file's (in range), else dflt when in range, else -1. */
static int gguf_tok_role(const struct gguf_tok *k, const char *key, int64_t dflt, int32_t *out)
{
    int64_t v;
    int rc = gguf_get_int(k->g, key, false, -1, 0, (int64_t)k->n - 1, &v);
    if (rc < 0)
        return rc;
    if (v < 0 && dflt >= 0 && dflt < (int64_t)k->n)
        v = dflt;
    *out = (int32_t)v;
    return 0;
}

static bool gguf_name_has(struct gguf_str s, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; s.p && i + n <= s.n; i++) {
        size_t j = 0;
        while (j < n && tolower((unsigned char)s.p[i + j]) == needle[j])
            j++;
        if (j == n)
            return true;
    }
    return false;
}

int bpe_open_gguf(const struct gguf_file *g, struct bpe **out)
{
    *out = NULL;
    struct gguf_tok k = {.g = g, .name = gguf_path(g)};
    json_t *tj = NULL, *vocab = NULL, *added = NULL, *pretok = NULL;
    int rc;

    struct gguf_str model, pre_name, gname;
    if ((rc = gguf_get_str(g, "tokenizer.ggml.model", &model)) < 0 ||
        (rc = gguf_get_str(g, "tokenizer.ggml.pre", &pre_name)) < 0 ||
        (rc = gguf_get_str(g, "general.name", &gname)) < 0)
        return rc;
    if (!model.p)
        return err_set(ERR_NOT_FOUND, "%s: no tokenizer.ggml.model (the file has no tokenizer)",
                       k.name);
    k.spm = model.n == 5 && memcmp(model.p, "llama", 5) == 0;
    if (!k.spm && !(model.n == 4 && memcmp(model.p, "gpt2", 4) == 0))
        return err_set(ERR_UNSUPPORTED,
                       "%s: tokenizer.ggml.model \"%.*s\" is not supported (supported: gpt2, "
                       "llama)",
                       k.name, (int)(model.n < 40 ? model.n : 40), model.p);
    const struct gguf_pre *pre = NULL;
    if (!k.spm) {
        if (!pre_name.p)
            pre_name = (struct gguf_str){.p = "default", .n = 7};
        if (!(pre = gguf_pre_find(pre_name.p, pre_name.n)))
            return err_set(ERR_UNSUPPORTED,
                           "%s: tokenizer.ggml.pre \"%.*s\" is not a pre-tokenizer this "
                           "tokenizer knows (llama-bpe, qwen2, default, gpt-2, deepseek-llm, "
                           "gpt-4o, tekken, ...: llama.cpp's names)",
                           k.name, (int)(pre_name.n < 40 ? pre_name.n : 40), pre_name.p);
    }

    /* The arrays, their types and lengths. */
    static const enum gguf_vtype STR[] = {GGUF_STR}, INT[] = {GGUF_I32, GGUF_U32},
                                 NUM[] = {GGUF_F32, GGUF_I32, GGUF_F64};
    if ((rc = gguf_tok_array(&k, "tokenizer.ggml.tokens", true, 0, STR, 1, "strings", &k.tokens)) <
        0)
        return rc;
    k.n = gguf_kv_arr_len(k.tokens);
    if (k.n == 0 || k.n >= BPE_MAX_ID)
        return err_set(ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries; expected 1 to %d",
                       k.name, (unsigned long long)k.n, BPE_MAX_ID - 1);
    if ((rc = gguf_tok_array(&k, "tokenizer.ggml.token_type", false, k.n, INT, 2, "i32",
                             &k.types)) < 0 ||
        (rc = gguf_tok_array(&k, "tokenizer.ggml.scores", k.spm, k.n, NUM, 3, "numbers",
                             &k.scores)) < 0 ||
        (rc = gguf_tok_array(&k, "tokenizer.ggml.merges", !k.spm, 0, STR, 1, "strings",
                             &k.merges)) < 0)
        return rc;

    /* The roles and flags, llama.cpp's defaults where the file has none. */
    int32_t bos, eos, eot, unk, pad;
    bool add_bos, add_eos, add_space;
    if ((rc = gguf_tok_role(&k, "tokenizer.ggml.bos_token_id", k.spm ? 1 : -1, &bos)) < 0 ||
        (rc = gguf_tok_role(&k, "tokenizer.ggml.eos_token_id", k.spm ? 2 : -1, &eos)) < 0 ||
        (rc = gguf_tok_role(&k, "tokenizer.ggml.eot_token_id", -1, &eot)) < 0 ||
        (rc = gguf_tok_role(&k, "tokenizer.ggml.unknown_token_id", k.spm ? 0 : -1, &unk)) < 0 ||
        (rc = gguf_tok_role(&k, "tokenizer.ggml.padding_token_id", -1, &pad)) < 0 ||
        (rc = gguf_get_bool(g, "tokenizer.ggml.add_bos_token", k.spm || pre->add_bos, &add_bos)) <
            0 ||
        (rc = gguf_get_bool(g, "tokenizer.ggml.add_eos_token", false, &add_eos)) < 0 ||
        (rc = gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", k.spm, &add_space)) < 0)
        return rc;

    /* What tokenizer.json would say. */
    bool phi3 = k.spm && (gguf_name_has(gname, "phi-3") || gguf_name_has(gname, "phi3"));
    if ((rc = gguf_tok_vocab(&k, &vocab)) < 0 || (rc = gguf_tok_added(&k, phi3, &added)) < 0)
        goto out;
    json_t *m = json_pack("{s:s, s:O, s:[], s:b, s:b, s:b}", "type", "BPE", "vocab", vocab,
                          "merges", "byte_fallback", k.spm, "fuse_unk", k.spm, "ignore_merges",
                          pre && pre->ignore_merges);
    if (m && k.spm && unk >= 0) {
        struct gguf_str u = gguf_arr_str(k.tokens, (uint64_t)unk);
        json_object_set_new(m, "unk_token", json_stringn_nocheck(u.p, u.n));
    }
    json_t *pp =
        json_pack("{s:s, s:[], s:{}}", "type", "TemplateProcessing", "single", "special_tokens");
    json_t *single = json_object_get(pp, "single");
    int32_t around[2] = {add_bos ? bos : -1, add_eos ? eos : -1};
    for (int side = 0; pp && side < 3; side++) {
        if (side == 1) {
            json_array_append_new(single, json_pack("{s:{s:s}}", "Sequence", "id", "A"));
            continue;
        }
        int32_t id = around[side / 2];
        if (id < 0)
            continue;
        char nm[32];
        snprintf(nm, sizeof(nm), "gguf-%d", id);
        json_array_append_new(single, json_pack("{s:{s:s}}", "SpecialToken", "id", nm));
        json_object_set_new(
            json_object_get(pp, "special_tokens"), nm,
            json_pack("{s:s, s:[I], s:[s]}", "id", nm, "ids", (json_int_t)id, "tokens", nm));
    }
    if (k.spm) {
        /* llama.cpp's SentencePiece: a "▁" before the text and after each
         * special token (when add_space_prefix), spaces as "▁", bytes for
         * characters without a token; decoding undoes it. */
        json_t *norm =
            json_pack("{s:s, s:[{s:s, s:{s:s}, s:s}]}", "type", "Sequence", "normalizers", "type",
                      "Replace", "pattern", "String", " ", "content", "\xe2\x96\x81");
        if (norm && add_space)
            json_array_insert_new(
                json_object_get(norm, "normalizers"), 0,
                json_pack("{s:s, s:s}", "type", "Prepend", "prepend", "\xe2\x96\x81"));
        json_t *dec = json_pack("{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}]}", "type", "Sequence",
                                "decoders", "type", "Replace", "pattern", "String", "\xe2\x96\x81",
                                "content", " ", "type", "ByteFallback", "type", "Fuse");
        if (dec && add_space)
            json_array_append_new(json_object_get(dec, "decoders"),
                                  json_pack("{s:s, s:s, s:i, s:i}", "type", "Strip", "content", " ",
                                            "start", 1, "stop", 0));
        tj =
            json_pack("{s:o*, s:o*, s:n, s:o*, s:O, s:o*}", "model", m, "normalizer", norm,
                      "pre_tokenizer", "decoder", dec, "added_tokens", added, "post_processor", pp);
    } else {
        pretok = gguf_pretok_json(pre);
        tj = json_pack("{s:o*, s:n, s:o*, s:{s:s, s:b, s:b, s:b}, s:O, s:o*}", "model", m,
                       "normalizer", "pre_tokenizer", pretok, "decoder", "type", "ByteLevel",
                       "add_prefix_space", 1, "trim_offsets", 1, "use_regex", 1, "added_tokens",
                       added, "post_processor", pp);
    }
    if (!tj) {
        rc = err_set(ERR_NOMEM, "out of memory for a tokenizer");
        goto out;
    }

    /* Roles are set by id below, so that none takes a layout's default. */
    json_t *cfg =
        json_pack("{s:n, s:n, s:n, s:n}", "bos_token", "eos_token", "unk_token", "pad_token");
    const struct bpe_special_src special = {
        .dir = k.name, .tokjson_name = k.name, .cfg = cfg, .cfg_name = k.name, .map_name = k.name};
    struct bpe *t = NULL;
    rc = cfg ? bpe_open_parsed(tj, k.name, &special, k.spm ? gguf_spm_merges : gguf_gpt2_merges, &k,
                               &t)
             : err_set(ERR_NOMEM, "out of memory for a tokenizer");
    json_decref(cfg);
    if (rc < 0)
        goto out;
    t->bos = bos;
    t->eos = eos;
    t->eot = eot;
    t->unk = unk;
    t->pad = pad;
    t->add_bos = t->n_pre > 0 && t->tpl_pre[0] == bos;
    if (phi3) {
        /* llama.cpp's strip takes ASCII white space only (isspace) */
        struct bpe_addset *sets[] = {&t->raw_set, &t->norm_set};
        for (size_t i = 0; i < t->n_added; i++)
            t->added[i].strip_ascii = true;
        for (size_t s = 0; s < 2; s++)
            for (size_t i = 0; i < sets[s]->n; i++)
                sets[s]->tok[i].strip_ascii = true;
    }
    *out = t;
out:
    json_decref(tj);
    json_decref(vocab);
    json_decref(added);
    return rc;
}

int bpe_open_gguf_path(const char *path, struct bpe **out)
{
    *out = NULL;
    struct gguf_file *g = NULL;
    int rc = gguf_open(path, &g);
    if (rc < 0)
        return rc;
    rc = bpe_open_gguf(g, out);
    gguf_close(g);
    return rc;
}
