/* Pre-tokenizers: cutting a normalized stretch of text into words before BPE.
 *
 * tokenizer.json's "pre_tokenizer" is one of these, or a "Sequence" of them
 * ("pretokenizers": [...]), each applied to every piece the previous one left:
 *   Split       {"pattern": {"Regex": "..."} | {"String": "..."},
 *                "behavior": "Isolated" | "Removed" | "MergedWithPrevious" |
 *                            "MergedWithNext" | "Contiguous", "invert": bool}
 *   ByteLevel   {"add_prefix_space": bool, "use_regex": bool}: a space before
 *               each piece that lacks one, then GPT-2's regex, Isolated
 *   Digits      {"individual_digits": bool}: \p{N} (or runs of it), Isolated
 *   Whitespace  \w+|[^\w\s]+ kept, the rest removed
 *   WhitespaceSplit   white space removed
 *   Punctuation {"behavior": ...}: each punctuation character
 *   Metaspace   {"replacement": "▁", "prepend_scheme": "always" | "first" |
 *                "never", "split": bool}: spaces become the replacement, which
 *               is prepended (always, or to the piece at the start of the
 *               input only), then pieces split before each replacement
 * Every step becomes a regex split, possibly after a rewrite of the piece
 * (a prefix space, Metaspace's replacement); splits never copy text.
 *
 * Regexes go through PCRE2 in UTF + UCP mode, with the JIT when available.
 * Hugging Face runs them through Oniguruma; the two agree on the classes
 * these patterns use (\p{L}, \p{N}, \s, (?i:...), lookahead), which the
 * differential corpus checks (tests/test_tokenizer_families.c). With
 * PCRE2_MATCH_INVALID_UTF, bytes that are not valid UTF-8 never match, so
 * they land in the pieces between matches. Each call makes its own match
 * data, so concurrent calls on one pre-tokenizer are safe.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "core/error.h"
#include "tokenizer/bpe_impl.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* Rust's char::is_whitespace (Unicode White_Space), which is not PCRE2's \s
 * (that one takes U+180E as well). */
#define WS_CLASS                                                                                   \
    "\\t-\\r "                                                                                     \
    "\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
/* Rust regex's Unicode \w: Alphabetic, marks, decimal digits, connector
 * punctuation and the two joiners. */
#define RUST_WORD "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}"
/* Hugging Face's is_punctuation: ASCII punctuation or Unicode P*. */
#define PUNCT_CLASS "\\p{P}!-/:-@\\[-`{-~"

enum pretok_behavior {
    BEH_REMOVED,
    BEH_ISOLATED,
    BEH_MERGED_PREV,
    BEH_MERGED_NEXT,
    BEH_CONTIGUOUS
};
enum pretok_rewrite { RW_NONE, RW_PREFIX_SPACE, RW_METASPACE };
enum { SCHEME_ALWAYS, SCHEME_FIRST, SCHEME_NEVER };

struct pretok_step {
    enum pretok_rewrite rewrite;
    char repl[8]; /* Metaspace's replacement, NUL-terminated UTF-8 */
    size_t repl_len;
    int scheme;
    pcre2_code *re; /* NULL: no split (a rewrite alone) */
    enum pretok_behavior behavior;
    bool invert;
};

#define PRETOK_MAX_STEPS 16

struct pretok {
    struct pretok_step steps[PRETOK_MAX_STEPS];
    size_t n;
};

void pretok_close(struct pretok *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        pcre2_code_free(p->steps[i].re);
    free(p);
}

/* Rewrites a Hugging Face (Oniguruma) regex for PCRE2 into out (room for
 * 64 bytes per input byte). The one difference these patterns meet: \s is
 * Unicode White_Space in Oniguruma, while PCRE2's also takes U+180E. So \s
 * becomes the explicit class, inside a class or out, and \S outside one its
 * complement (a \S inside a class stays PCRE2's). Every other escape, class
 * and group is copied as it is. */
void bpe_regex_translate(const char *in, char *out)
{
    size_t o = 0;
    bool in_class = false;
    for (size_t i = 0; in[i];) {
        if (in[i] == '\\' && in[i + 1]) {
            char e = in[i + 1];
            const char *rep = NULL;
            if (e == 's')
                rep = in_class ? WS_CLASS : "[" WS_CLASS "]";
            else if (e == 'S' && !in_class)
                rep = "[^" WS_CLASS "]";
            if (rep) {
                memcpy(out + o, rep, strlen(rep));
                o += strlen(rep);
            } else {
                out[o++] = in[i];
                out[o++] = e;
            }
            i += 2;
            continue;
        }
        if (!in_class && in[i] == '[') {
            in_class = true;
            out[o++] = in[i++];
            if (in[i] == '^')
                out[o++] = in[i++];
            if (in[i] == ']') /* a ']' first in a class is itself */
                out[o++] = in[i++];
            continue;
        }
        if (in_class && in[i] == '[' && in[i + 1] == ':') { /* [:alpha:] */
            const char *end = strstr(in + i + 2, ":]");
            if (end) {
                size_t n = (size_t)(end + 2 - (in + i));
                memcpy(out + o, in + i, n);
                o += n;
                i += n;
                continue;
            }
        }
        if (in_class && in[i] == ']')
            in_class = false;
        out[o++] = in[i++];
    }
    out[o] = '\0';
}

/* Compiles pattern (NUL-terminated; a literal when literal) into *re. */
static int pretok_compile(const char *pattern, bool literal, const char *what, pcre2_code **re)
{
    int errcode;
    PCRE2_SIZE erroff;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
    char *translated = malloc(strlen(pattern) * 64 + 8);
    if (!translated)
        return err_set(ERR_NOMEM, "%s: out of memory for the regex", what);
    if (literal) {
        /* PCRE2_LITERAL refuses PCRE2_MATCH_INVALID_UTF: quote it instead,
         * each \E in it closing the quote, written as \\E, and reopening. */
        size_t o = 0;
        translated[o++] = '\\';
        translated[o++] = 'Q';
        for (const char *c = pattern; *c; c++) {
            if (c[0] == '\\' && c[1] == 'E') {
                memcpy(translated + o, "\\E\\\\E\\Q", 8);
                o += 8;
                c++;
            } else {
                translated[o++] = *c;
            }
        }
        memcpy(translated + o, "\\E", 3);
        translated[o + 2] = '\0';
    } else {
        bpe_regex_translate(pattern, translated);
    }
    pattern = translated;
    *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &errcode, &erroff, NULL);
    free(translated);
    if (!*re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errcode, msg, sizeof(msg));
        return err_set(ERR_FORMAT, "%s: the regex does not compile at offset %zu: %s", what,
                       (size_t)erroff, (const char *)msg);
    }
    /* Without the JIT the interpreter gives the same matches, only slower. */
    (void)pcre2_jit_compile(*re, PCRE2_JIT_COMPLETE);
    return 0;
}

static int pretok_add(struct pretok *p, const char *what, struct pretok_step **out)
{
    if (p->n == PRETOK_MAX_STEPS)
        return err_set(ERR_UNSUPPORTED, "%s: more than %d pre-tokenizer steps", what,
                       PRETOK_MAX_STEPS);
    *out = &p->steps[p->n++];
    memset(*out, 0, sizeof(**out));
    (*out)->behavior = BEH_ISOLATED;
    return 0;
}

static int pretok_add_regex(struct pretok *p, const char *what, const char *pattern, bool literal,
                            enum pretok_behavior beh, bool invert)
{
    struct pretok_step *s = NULL;
    int rc = pretok_add(p, what, &s);
    if (rc < 0)
        return rc;
    s->behavior = beh;
    s->invert = invert;
    return pretok_compile(pattern, literal, what, &s->re);
}

int pretok_open_gpt2(struct pretok **out)
{
    *out = NULL;
    struct pretok *p = calloc(1, sizeof(*p));
    if (!p)
        return err_set(ERR_NOMEM, "out of memory for the pre-tokenizer");
    int rc = pretok_add_regex(p, "GPT-2 pre-tokenizer", GPT2_PATTERN, false, BEH_ISOLATED, false);
    if (rc < 0) {
        pretok_close(p);
        return rc;
    }
    *out = p;
    return 0;
}

static const char *json_str(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* Reads an optional boolean field: 0 with *out set (def when absent or null),
 * or an error naming it. */
static int json_bool_field(json_t *obj, const char *key, bool def, const char *what, bool *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v))
        return err_set(ERR_FORMAT, "%s: \"%s\" is not true or false", what, key);
    *out = json_is_true(v);
    return 0;
}

static int pretok_behavior_parse(json_t *obj, const char *what, enum pretok_behavior *out)
{
    static const char *const NAMES[] = {"Removed", "Isolated", "MergedWithPrevious",
                                        "MergedWithNext", "Contiguous"};
    const char *b = json_str(obj, "behavior");
    for (int i = 0; b && i < 5; i++) {
        if (strcmp(b, NAMES[i]) == 0) {
            *out = (enum pretok_behavior)i;
            return 0;
        }
    }
    return err_set(ERR_FORMAT,
                   "%s: \"behavior\" must be Removed, Isolated, MergedWithPrevious, "
                   "MergedWithNext or Contiguous",
                   what);
}

static int pretok_parse_one(struct pretok *p, json_t *pt, const char *path, int depth,
                            bool *byte_level)
{
    char what[256];
    snprintf(what, sizeof(what), "%s: pre_tokenizer", path);
    if (!json_is_object(pt))
        return err_set(ERR_FORMAT, "%s: expected an object with a \"type\"", what);
    const char *type = json_str(pt, "type");
    if (!type)
        return err_set(ERR_FORMAT, "%s: no \"type\" string", what);
    snprintf(what, sizeof(what), "%s: pre_tokenizer %s", path, type);
    int rc;
    bool b1 = false, b2 = false;
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(pt, "pretokenizers");
        if (!json_is_array(list))
            return err_set(ERR_FORMAT, "%s: \"pretokenizers\" is not an array", what);
        if (depth > 4)
            return err_set(ERR_UNSUPPORTED, "%s: Sequences nested too deep", what);
        size_t i;
        json_t *sub;
        json_array_foreach(list, i, sub)
        {
            if ((rc = pretok_parse_one(p, sub, path, depth + 1, byte_level)) < 0)
                return rc;
        }
        return 0;
    }
    if (strcmp(type, "Split") == 0) {
        json_t *pat = json_object_get(pt, "pattern");
        const char *re = json_str(pat, "Regex"), *lit = json_str(pat, "String");
        enum pretok_behavior beh;
        if (!re && !lit)
            return err_set(ERR_FORMAT,
                           "%s: \"pattern\" must be {\"Regex\": ...} or {\"String\": ...}", what);
        if (strlen(re ? re : lit) > 65536)
            return err_set(ERR_UNSUPPORTED, "%s: a pattern of more than 64 KiB", what);
        if (lit && !*lit)
            return err_set(ERR_FORMAT, "%s: an empty String pattern", what);
        if ((rc = pretok_behavior_parse(pt, what, &beh)) < 0 ||
            (rc = json_bool_field(pt, "invert", false, what, &b1)) < 0)
            return rc;
        return pretok_add_regex(p, what, re ? re : lit, !re, beh, b1);
    }
    if (strcmp(type, "ByteLevel") == 0) {
        if ((rc = json_bool_field(pt, "add_prefix_space", false, what, &b1)) < 0 ||
            (rc = json_bool_field(pt, "use_regex", true, what, &b2)) < 0)
            return rc;
        *byte_level = true;
        if (b1) {
            struct pretok_step *s = NULL;
            if ((rc = pretok_add(p, what, &s)) < 0)
                return rc;
            s->rewrite = RW_PREFIX_SPACE;
        }
        return b2 ? pretok_add_regex(p, what, GPT2_PATTERN, false, BEH_ISOLATED, false) : 0;
    }
    if (strcmp(type, "Digits") == 0) {
        if ((rc = json_bool_field(pt, "individual_digits", false, what, &b1)) < 0)
            return rc;
        return pretok_add_regex(p, what, b1 ? "\\p{N}" : "\\p{N}+", false, BEH_ISOLATED, false);
    }
    if (strcmp(type, "Whitespace") == 0) /* with Rust regex's \\w and \\s, as HF has it */
        return pretok_add_regex(p, what, "[" RUST_WORD "]+|[^" RUST_WORD WS_CLASS "]+", false,
                                BEH_REMOVED, true);
    if (strcmp(type, "WhitespaceSplit") == 0)
        return pretok_add_regex(p, what, "[" WS_CLASS "]", false, BEH_REMOVED, false);
    if (strcmp(type, "Punctuation") == 0) {
        enum pretok_behavior beh = BEH_ISOLATED;
        if (json_object_get(pt, "behavior") && (rc = pretok_behavior_parse(pt, what, &beh)) < 0)
            return rc;
        return pretok_add_regex(p, what, "[" PUNCT_CLASS "]", false, beh, false);
    }
    if (strcmp(type, "Metaspace") == 0) {
        const char *repl = json_str(pt, "replacement");
        const char *scheme = json_str(pt, "prepend_scheme");
        uint32_t cp;
        if (!repl || !*repl || strlen(repl) > 4 ||
            utf8_decode_one((const unsigned char *)repl, strlen(repl), &cp) != strlen(repl))
            return err_set(ERR_FORMAT, "%s: \"replacement\" must be one character", what);
        struct pretok_step *s = NULL;
        if ((rc = json_bool_field(pt, "split", true, what, &b1)) < 0 ||
            (rc = pretok_add(p, what, &s)) < 0)
            return rc;
        s->rewrite = RW_METASPACE;
        memcpy(s->repl, repl, strlen(repl) + 1);
        s->repl_len = strlen(repl);
        if (!scheme) { /* older files: "add_prefix_space" */
            bool aps = true;
            if ((rc = json_bool_field(pt, "add_prefix_space", true, what, &aps)) < 0)
                return rc;
            s->scheme = aps ? SCHEME_ALWAYS : SCHEME_NEVER;
        } else if (strcmp(scheme, "always") == 0) {
            s->scheme = SCHEME_ALWAYS;
        } else if (strcmp(scheme, "first") == 0) {
            s->scheme = SCHEME_FIRST;
        } else if (strcmp(scheme, "never") == 0) {
            s->scheme = SCHEME_NEVER;
        } else {
            return err_set(ERR_FORMAT, "%s: \"prepend_scheme\" must be always, first or never",
                           what);
        }
        if (b1) {
            s->behavior = BEH_MERGED_NEXT;
            return pretok_compile(repl, true, what, &s->re);
        }
        return 0;
    }
    return err_set(ERR_UNSUPPORTED,
                   "%s: pre_tokenizer type \"%.40s\" is not supported (supported: Split, "
                   "ByteLevel, Digits, Whitespace, WhitespaceSplit, Punctuation, Metaspace, "
                   "Sequence)",
                   path, type);
}

int pretok_open_json(json_t *pt, const char *path, struct pretok **out, bool *byte_level)
{
    *out = NULL;
    *byte_level = false;
    struct pretok *p = calloc(1, sizeof(*p));
    if (!p)
        return err_set(ERR_NOMEM, "out of memory for the pre-tokenizer");
    int rc = pt && !json_is_null(pt) ? pretok_parse_one(p, pt, path, 0, byte_level) : 0;
    if (rc < 0) {
        pretok_close(p);
        return rc;
    }
    *out = p;
    return 0;
}

const char *pretok_space_replacement(const struct pretok *p, size_t *n)
{
    for (size_t i = 0; i < p->n; i++) {
        if (p->steps[i].rewrite == RW_METASPACE) {
            *n = p->steps[i].repl_len;
            return p->steps[i].repl;
        }
    }
    return NULL;
}

/* ---- running the steps ---- */

struct pretok_run {
    const struct pretok *p;
    pcre2_match_data *md[PRETOK_MAX_STEPS];
    pretok_word_fn fn;
    void *ctx;
};

static int pretok_step(struct pretok_run *r, size_t i, const unsigned char *s, size_t n,
                       bool first);

/* What a split emits, merged as the behaviour says: pending is the last
 * piece not yet passed on. */
struct pretok_emit {
    struct pretok_run *r;
    size_t next_step;
    const unsigned char *s;
    bool first; /* whether the piece at offset 0 of s is at the start of the input */
    enum pretok_behavior beh;
    size_t p_start, p_end;
    bool p_match, have;
};

static int pretok_pass(struct pretok_emit *e, size_t start, size_t end)
{
    if (end == start)
        return 0;
    return pretok_step(e->r, e->next_step, e->s + start, end - start, e->first && start == 0);
}

static int pretok_flush(struct pretok_emit *e)
{
    if (!e->have)
        return 0;
    e->have = false;
    return pretok_pass(e, e->p_start, e->p_end);
}

/* One piece of the split, a match (as invert says) or the text between. */
static int pretok_piece(struct pretok_emit *e, size_t start, size_t end, bool is_match)
{
    int rc;
    switch (e->beh) {
    case BEH_REMOVED:
        return is_match ? 0 : pretok_pass(e, start, end);
    case BEH_ISOLATED:
        return pretok_pass(e, start, end);
    case BEH_MERGED_PREV:
        if (is_match && e->have && !e->p_match) {
            e->p_end = end;
            e->p_match = true;
            return 0;
        }
        break;
    case BEH_MERGED_NEXT:
        if (!is_match && e->have && e->p_match) {
            e->p_end = end;
            e->p_match = false;
            return pretok_flush(e);
        }
        break;
    case BEH_CONTIGUOUS:
        if (e->have && is_match == e->p_match) {
            e->p_end = end;
            return 0;
        }
        break;
    }
    if ((rc = pretok_flush(e)) < 0)
        return rc;
    e->p_start = start;
    e->p_end = end;
    e->p_match = is_match;
    e->have = true;
    return 0;
}

static size_t utf8_step(const unsigned char *s, size_t n)
{
    size_t k = 1;
    while (k < n && (s[k] & 0xC0) == 0x80)
        k++;
    return k;
}

/* Splits s[0..n) by step st's regex and passes the pieces on to step i + 1. */
static int pretok_split_re(struct pretok_run *r, size_t i, const unsigned char *s, size_t n,
                           bool first)
{
    const struct pretok_step *st = &r->p->steps[i];
    struct pretok_emit e = {
        .r = r, .next_step = i + 1, .s = s, .first = first, .beh = st->behavior};
    pcre2_match_data *md = r->md[i];
    size_t pos = 0, prev = 0;
    uint32_t opts = 0;
    int rc;
    while (pos < n) {
        int m = pcre2_match(st->re, s, n, pos, opts, md, NULL);
        if (m == PCRE2_ERROR_JIT_STACKLIMIT && !(opts & PCRE2_NO_JIT)) {
            opts |= PCRE2_NO_JIT; /* a pathological word: let the interpreter's heap take it */
            continue;
        }
        if (m == PCRE2_ERROR_NOMATCH)
            break;
        if (m < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(m, msg, sizeof(msg));
            return err_set(ERR_INVALID, "pre-tokenizer regex failed at byte %zu: %s", pos,
                           (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t start = ov[0], end = ov[1];
        if (end <= start) { /* an empty match splits nothing; try one character on */
            pos = (start > pos ? start : pos) + utf8_step(s + pos, n - pos);
            continue;
        }
        if (start > prev && (rc = pretok_piece(&e, prev, start, st->invert)) < 0)
            return rc;
        if ((rc = pretok_piece(&e, start, end, !st->invert)) < 0)
            return rc;
        prev = pos = end;
    }
    if (n > prev && (rc = pretok_piece(&e, prev, n, st->invert)) < 0)
        return rc;
    return pretok_flush(&e);
}

/* Applies step i (and those after it) to the piece s[0..n). */
static int pretok_step(struct pretok_run *r, size_t i, const unsigned char *s, size_t n, bool first)
{
    if (n == 0)
        return 0;
    if (i == r->p->n)
        return r->fn(r->ctx, s, n);
    const struct pretok_step *st = &r->p->steps[i];
    if (st->rewrite == RW_NONE)
        return pretok_split_re(r, i, s, n, first);

    /* Rewrite into a copy: a prefix space, or Metaspace's replacement. */
    size_t cap = st->rewrite == RW_PREFIX_SPACE ? n + 1 : (n + 1) * (st->repl_len + 1);
    unsigned char *buf = malloc(cap), *o = buf;
    if (!buf)
        return err_set(ERR_NOMEM, "out of memory pre-tokenizing %zu bytes", n);
    if (st->rewrite == RW_PREFIX_SPACE) {
        if (s[0] != ' ')
            *o++ = ' ';
        memcpy(o, s, n);
        o += n;
    } else {
        bool starts = false;
        if (s[0] == ' ')
            starts = true;
        else if (n >= st->repl_len && memcmp(s, st->repl, st->repl_len) == 0)
            starts = true;
        if (!starts && (st->scheme == SCHEME_ALWAYS || (st->scheme == SCHEME_FIRST && first))) {
            memcpy(o, st->repl, st->repl_len);
            o += st->repl_len;
        }
        for (size_t k = 0; k < n; k++) {
            if (s[k] == ' ') {
                memcpy(o, st->repl, st->repl_len);
                o += st->repl_len;
            } else {
                *o++ = s[k];
            }
        }
    }
    size_t m = (size_t)(o - buf);
    int rc = st->re ? pretok_split_re(r, i, buf, m, first) : pretok_step(r, i + 1, buf, m, first);
    free(buf);
    return rc;
}

int pretok_split(const struct pretok *p, const unsigned char *text, size_t n, bool first,
                 pretok_word_fn fn, void *ctx)
{
    if (n == 0)
        return 0;
    struct pretok_run r = {.p = p, .fn = fn, .ctx = ctx};
    int rc = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (p->steps[i].re &&
            !(r.md[i] = pcre2_match_data_create_from_pattern(p->steps[i].re, NULL))) {
            rc = err_set(ERR_NOMEM, "out of memory for pre-tokenizer match data");
            goto done;
        }
    }
    rc = pretok_step(&r, 0, text, n, first);
done:
    for (size_t i = 0; i < p->n; i++)
        pcre2_match_data_free(r.md[i]);
    return rc < 0 ? rc : 0;
}
