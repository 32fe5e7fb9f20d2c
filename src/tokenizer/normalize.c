/* Normalizers: rewriting each stretch of text between added tokens before it
 * is pre-tokenized.
 *
 * tokenizer.json's "normalizer" is null, one of these, or a "Sequence" of them
 * ("normalizers": [...]), applied in order:
 *   Prepend  {"prepend": "▁"}: put in front of a non-empty stretch
 *   Replace  {"pattern": {"String": " "} | {"Regex": "..."}, "content": "▁"}:
 *            every non-overlapping match, leftmost first
 *   NFC, NFD, NFKC, NFKD   Unicode normalization (unicode_norm.c)
 *   Strip    {"strip_left": bool, "strip_right": bool}: white space at the ends
 * Lowercase, BertNormalizer, Precompiled (SentencePiece's charsmap) and the
 * rest are refused at load, naming the type.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "core/error.h"
#include "tokenizer/bpe_impl.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

enum norm_kind { NORM_PREPEND, NORM_REPLACE, NORM_UNICODE, NORM_STRIP };

struct norm_step {
    enum norm_kind kind;
    enum unicode_form form; /* NORM_UNICODE */
    bool left, right;       /* NORM_STRIP: which ends lose their white space */
    char *text;             /* Prepend's text, or Replace's String pattern */
    size_t text_len;
    char *content; /* Replace's replacement */
    size_t content_len;
    pcre2_code *re; /* Replace's Regex pattern, else NULL */
};

#define NORM_MAX_STEPS 16

struct norm {
    struct norm_step steps[NORM_MAX_STEPS];
    size_t n;
};

void norm_close(struct norm *nm)
{
    if (!nm)
        return;
    for (size_t i = 0; i < nm->n; i++) {
        free(nm->steps[i].text);
        free(nm->steps[i].content);
        pcre2_code_free(nm->steps[i].re);
    }
    free(nm);
}

static char *dup_json_str(json_t *v, size_t *len)
{
    *len = json_string_length(v);
    char *s = malloc(*len + 1);
    if (s)
        memcpy(s, json_string_value(v), *len + 1);
    return s;
}

static int norm_parse_one(struct norm *nm, json_t *j, const char *path, int depth)
{
    if (!json_is_object(j) || !json_is_string(json_object_get(j, "type")))
        return err_set(ERR_FORMAT, "%s: normalizer: expected an object with a \"type\" string",
                       path);
    const char *type = json_string_value(json_object_get(j, "type"));
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(j, "normalizers");
        if (!json_is_array(list))
            return err_set(ERR_FORMAT, "%s: normalizer Sequence: \"normalizers\" is not an array",
                           path);
        if (depth > 4)
            return err_set(ERR_UNSUPPORTED, "%s: normalizer Sequences nested too deep", path);
        size_t i;
        json_t *sub;
        json_array_foreach(list, i, sub)
        {
            int rc = norm_parse_one(nm, sub, path, depth + 1);
            if (rc < 0)
                return rc;
        }
        return 0;
    }
    static const char *const FORMS[] = {"NFC", "NFD", "NFKC", "NFKD"};
    int form = -1;
    for (int i = 0; i < 4; i++)
        form = strcmp(type, FORMS[i]) == 0 ? i : form;
    bool prepend = strcmp(type, "Prepend") == 0, replace = strcmp(type, "Replace") == 0;
    bool strip = strcmp(type, "Strip") == 0;
    if (!prepend && !replace && !strip && form < 0)
        return err_set(ERR_UNSUPPORTED,
                       "%s: normalizer type \"%.40s\" is not supported (supported: Prepend, "
                       "Replace, NFC, NFD, NFKC, NFKD, Strip, Sequence)",
                       path, type);
    if (nm->n == NORM_MAX_STEPS)
        return err_set(ERR_UNSUPPORTED, "%s: more than %d normalizer steps", path, NORM_MAX_STEPS);
    struct norm_step *s = &nm->steps[nm->n];
    memset(s, 0, sizeof(*s));
    nm->n++; /* counted now so that norm_close frees what is filled in */
    if (form >= 0) {
        s->kind = NORM_UNICODE;
        s->form = (enum unicode_form)form;
        return 0;
    }
    if (strip) {
        json_t *l = json_object_get(j, "strip_left"), *r = json_object_get(j, "strip_right");
        if ((l && !json_is_boolean(l)) || (r && !json_is_boolean(r)))
            return err_set(ERR_FORMAT,
                           "%s: normalizer Strip: strip_left and strip_right must be true or false",
                           path);
        s->kind = NORM_STRIP;
        s->left = !l || json_is_true(l);
        s->right = !r || json_is_true(r);
        return 0;
    }
    if (prepend) {
        json_t *v = json_object_get(j, "prepend");
        if (!json_is_string(v))
            return err_set(ERR_FORMAT, "%s: normalizer Prepend: \"prepend\" is not a string", path);
        s->kind = NORM_PREPEND;
        if (!(s->text = dup_json_str(v, &s->text_len)))
            return err_set(ERR_NOMEM, "out of memory for the normalizer");
        return 0;
    }
    s->kind = NORM_REPLACE;
    json_t *pat = json_object_get(j, "pattern"), *content = json_object_get(j, "content");
    json_t *str = json_object_get(pat, "String"), *re = json_object_get(pat, "Regex");
    if (!json_is_string(content) || (!json_is_string(str) && !json_is_string(re)))
        return err_set(ERR_FORMAT,
                       "%s: normalizer Replace: expected \"pattern\" {\"String\": ...} or "
                       "{\"Regex\": ...} and a \"content\" string",
                       path);
    if (!(s->content = dup_json_str(content, &s->content_len)))
        return err_set(ERR_NOMEM, "out of memory for the normalizer");
    if (json_is_string(str)) {
        if (json_string_length(str) == 0)
            return err_set(ERR_FORMAT, "%s: normalizer Replace: an empty String pattern", path);
        if (!(s->text = dup_json_str(str, &s->text_len)))
            return err_set(ERR_NOMEM, "out of memory for the normalizer");
        return 0;
    }
    int errcode;
    PCRE2_SIZE erroff;
    if (json_string_length(re) > 65536)
        return err_set(ERR_UNSUPPORTED, "%s: normalizer Replace: a pattern of more than 64 KiB",
                       path);
    char *translated = malloc(json_string_length(re) * 64 + 1);
    if (!translated)
        return err_set(ERR_NOMEM, "out of memory for the normalizer");
    bpe_regex_translate(json_string_value(re), translated);
    s->re = pcre2_compile((PCRE2_SPTR)translated, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &errcode, &erroff, NULL);
    free(translated);
    if (!s->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errcode, msg, sizeof(msg));
        return err_set(ERR_FORMAT,
                       "%s: normalizer Replace: the regex does not compile at offset %zu: %s", path,
                       (size_t)erroff, (const char *)msg);
    }
    (void)pcre2_jit_compile(s->re, PCRE2_JIT_COMPLETE);
    return 0;
}

int norm_open_json(json_t *j, const char *path, struct norm **out)
{
    *out = NULL;
    if (!j || json_is_null(j))
        return 0;
    struct norm *nm = calloc(1, sizeof(*nm));
    if (!nm)
        return err_set(ERR_NOMEM, "out of memory for the normalizer");
    int rc = norm_parse_one(nm, j, path, 0);
    if (rc < 0) {
        norm_close(nm);
        return rc;
    }
    *out = nm;
    return 0;
}

/* A growable byte buffer. */
struct nbuf {
    unsigned char *p;
    size_t n, cap;
};

static int nbuf_put(struct nbuf *b, const void *s, size_t n)
{
    if (b->cap - b->n < n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n < n)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p)
            return err_set(ERR_NOMEM, "out of memory normalizing text");
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

/* The first occurrence of pat[0..m) (m > 0) in s[0..n), or NULL. */
static const unsigned char *bytes_find(const unsigned char *s, size_t n, const char *pat, size_t m)
{
    const unsigned char *end = s + n;
    while ((size_t)(end - s) >= m) {
        const unsigned char *c = memchr(s, (unsigned char)pat[0], (size_t)(end - s) - m + 1);
        if (!c)
            return NULL;
        if (memcmp(c + 1, pat + 1, m - 1) == 0)
            return c;
        s = c + 1;
    }
    return NULL;
}

/* Applies one step to in[0..n) into out (emptied first). */
static int norm_apply(const struct norm_step *s, const unsigned char *in, size_t n,
                      struct nbuf *out)
{
    out->n = 0;
    int rc = 0;
    if (s->kind == NORM_UNICODE) {
        unsigned char *u;
        size_t un;
        if ((rc = unicode_normalize(s->form, in, n, &u, &un)) < 0)
            return rc;
        rc = nbuf_put(out, u, un);
        free(u);
        return rc;
    }
    if (s->kind == NORM_STRIP) {
        size_t a = 0, b = n;
        while (s->left && a < b && utf8_space_at(in, a, b))
            a += utf8_space_at(in, a, b);
        while (s->right && b > a && utf8_space_before(in, a, b))
            b -= utf8_space_before(in, a, b);
        return nbuf_put(out, in + a, b - a);
    }
    if (s->kind == NORM_PREPEND) {
        if (n > 0 && (rc = nbuf_put(out, s->text, s->text_len)) < 0)
            return rc;
        return nbuf_put(out, in, n);
    }
    if (!s->re) {
        size_t pos = 0;
        while (pos < n) {
            const unsigned char *hit = NULL;
            if (n - pos >= s->text_len) {
                hit = bytes_find(in + pos, n - pos, s->text, s->text_len);
            }
            size_t at = hit ? (size_t)(hit - in) : n;
            if ((rc = nbuf_put(out, in + pos, at - pos)) < 0)
                return rc;
            if (!hit)
                break;
            if ((rc = nbuf_put(out, s->content, s->content_len)) < 0)
                return rc;
            pos = at + s->text_len;
        }
        return 0;
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(s->re, NULL);
    if (!md)
        return err_set(ERR_NOMEM, "out of memory for normalizer match data");
    size_t pos = 0, prev = 0;
    while (pos < n) {
        int m = pcre2_match(s->re, in, n, pos, 0, md, NULL);
        if (m == PCRE2_ERROR_NOMATCH)
            break;
        if (m < 0) {
            rc = err_set(ERR_INVALID, "normalizer regex failed at byte %zu", pos);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] <= ov[0]) { /* empty: no replacement, one character on */
            pos = ov[0] + 1;
            while (pos < n && (in[pos] & 0xC0) == 0x80)
                pos++;
            continue;
        }
        if ((rc = nbuf_put(out, in + prev, ov[0] - prev)) < 0 ||
            (rc = nbuf_put(out, s->content, s->content_len)) < 0)
            break;
        prev = pos = ov[1];
    }
    pcre2_match_data_free(md);
    return rc < 0 ? rc : nbuf_put(out, in + prev, n - prev);
}

int norm_run(const struct norm *nm, const unsigned char *in, size_t n, unsigned char **out,
             size_t *out_n)
{
    *out = NULL;
    *out_n = 0;
    struct nbuf a = {0}, b = {0};
    int rc = nbuf_put(&a, in, n);
    for (size_t i = 0; rc >= 0 && i < nm->n; i++) {
        rc = norm_apply(&nm->steps[i], a.p, a.n, &b);
        struct nbuf t = a;
        a = b;
        b = t;
    }
    free(b.p);
    if (rc < 0) {
        free(a.p);
        return rc;
    }
    *out = a.p;
    *out_n = a.n;
    return 0;
}

const char *norm_space_replacement(const struct norm *nm, size_t *n)
{
    const char *r = NULL;
    for (size_t i = 0; nm && i < nm->n; i++) {
        const struct norm_step *s = &nm->steps[i];
        if (s->kind == NORM_REPLACE && !s->re && s->text_len == 1 && s->text[0] == ' ') {
            r = s->content;
            *n = s->content_len;
        }
    }
    return r;
}
