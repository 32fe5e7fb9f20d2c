/* Decoders: what each token's symbol turns into when ids become text.
 *
 * tokenizer.json's "decoder" is one of these or a "Sequence" ("decoders": [...]):
 *   ByteLevel    a symbol whose characters are all in GPT-2's alphabet is the
 *                bytes they stand for; any other symbol is its own UTF-8
 *   Replace      {"pattern": {"String": "▁"}, "content": " "} in each token
 *   ByteFallback a token spelled "<0xNN>" is the byte NN
 *   Fuse         joins the tokens: what follows applies to the whole text
 *   Strip        {"content": " ", "start": 1, "stop": 0}: cuts up to start
 *                (stop) copies of content at the start (end) of each token,
 *                or of the whole text after a Fuse
 *   Metaspace    {"replacement": "▁", "prepend_scheme": ...}: the replacement
 *                becomes a space, except in the first token, which loses
 *                every one of them (unless the scheme is "never"), as
 *                Hugging Face has it; tokens with a replacement get a second,
 *                first-place spelling in the table
 * Everything before a Fuse acts on one token at a time, so it is done once at
 * load: the token table holds each token's decoded bytes. A Strip after Fuse
 * is the one whole-text step; its start count is applied as the output
 * begins (bpe_decode.c), and a stop count is refused (a stream could not
 * know where the end is). Hugging Face turns a run of <0xNN> tokens that is
 * not valid UTF-8 into one U+FFFD per token; here the bytes go through the
 * same UTF-8 repair as byte-level output (one U+FFFD per maximal invalid
 * sequence), which differs only for such invalid runs.
 */
#include "core/error.h"
#include "tokenizer/bpe_impl.h"

#include <stdlib.h>
#include <string.h>

void bpe_decoder_free(struct bpe_decoder *d)
{
    for (size_t i = 0; i < d->n; i++) {
        free(d->steps[i].pattern);
        free(d->steps[i].content);
    }
    memset(d, 0, sizeof(*d));
}

static int dec_str(json_t *v, char **out, size_t *len)
{
    *len = json_string_length(v);
    *out = malloc(*len + 1);
    if (!*out)
        return err_set(ERR_NOMEM, "out of memory for the decoder");
    memcpy(*out, json_string_value(v), *len + 1);
    return 0;
}

static int dec_count(json_t *j, const char *key, const char *path, size_t *out)
{
    json_t *v = json_object_get(j, key);
    if (!v || json_is_null(v)) {
        *out = 0;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1024)
        return err_set(ERR_FORMAT, "%s: decoder Strip: \"%s\" is not a count in [0, 1024]", path,
                       key);
    *out = (size_t)json_integer_value(v);
    return 0;
}

static int dec_parse_one(struct bpe_decoder *d, json_t *j, bool *fused, bool byte_level,
                         const char *path, int depth)
{
    if (!json_is_object(j) || !json_is_string(json_object_get(j, "type")))
        return err_set(ERR_FORMAT, "%s: decoder: expected an object with a \"type\" string", path);
    const char *type = json_string_value(json_object_get(j, "type"));
    int rc;
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(j, "decoders");
        if (!json_is_array(list))
            return err_set(ERR_FORMAT, "%s: decoder Sequence: \"decoders\" is not an array", path);
        if (depth > 4)
            return err_set(ERR_UNSUPPORTED, "%s: decoder Sequences nested too deep", path);
        size_t i;
        json_t *sub;
        json_array_foreach(list, i, sub)
        {
            if ((rc = dec_parse_one(d, sub, fused, byte_level, path, depth + 1)) < 0)
                return rc;
        }
        return 0;
    }
    if (strcmp(type, "Fuse") == 0) {
        *fused = true;
        return 0;
    }
    enum bpe_dec_kind kind;
    if (strcmp(type, "ByteLevel") == 0)
        kind = DEC_BYTE_LEVEL;
    else if (strcmp(type, "Replace") == 0)
        kind = DEC_REPLACE;
    else if (strcmp(type, "ByteFallback") == 0)
        kind = DEC_BYTE_FALLBACK;
    else if (strcmp(type, "Strip") == 0)
        kind = DEC_STRIP;
    else if (strcmp(type, "Metaspace") == 0)
        kind = DEC_METASPACE;
    else
        return err_set(ERR_UNSUPPORTED,
                       "%s: decoder type \"%.40s\" is not supported (supported: ByteLevel, "
                       "Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence)",
                       path, type);
    if (kind == DEC_BYTE_LEVEL && !byte_level)
        return err_set(ERR_UNSUPPORTED,
                       "%s: a ByteLevel decoder without a ByteLevel pre_tokenizer is not supported",
                       path);
    if (*fused && kind != DEC_STRIP)
        return err_set(ERR_UNSUPPORTED, "%s: decoder %s after Fuse is not supported", path, type);
    if (kind == DEC_STRIP) {
        json_t *c = json_object_get(j, "content");
        size_t start, stop;
        uint32_t cp;
        if (!json_is_string(c) || json_string_length(c) == 0 || json_string_length(c) > 4 ||
            utf8_decode_one((const unsigned char *)json_string_value(c), json_string_length(c),
                            &cp) != json_string_length(c))
            return err_set(ERR_FORMAT, "%s: decoder Strip: \"content\" must be one character",
                           path);
        if ((rc = dec_count(j, "start", path, &start)) < 0 ||
            (rc = dec_count(j, "stop", path, &stop)) < 0)
            return rc;
        if (*fused) {
            if (stop > 0)
                return err_set(ERR_UNSUPPORTED,
                               "%s: decoder Strip with \"stop\" after Fuse is not supported", path);
            if (d->strip_start > 0 && strcmp(d->strip_char, json_string_value(c)) != 0)
                return err_set(ERR_UNSUPPORTED, "%s: two whole-text Strips of different characters",
                               path);
            memcpy(d->strip_char, json_string_value(c), json_string_length(c) + 1);
            d->strip_char_len = json_string_length(c);
            d->strip_start += start;
            return 0;
        }
    }
    if (d->n == BPE_DEC_MAX_STEPS)
        return err_set(ERR_UNSUPPORTED, "%s: more than %d decoder steps", path, BPE_DEC_MAX_STEPS);
    struct bpe_dec_step *s = &d->steps[d->n++];
    memset(s, 0, sizeof(*s));
    s->kind = kind;
    if (kind == DEC_STRIP) {
        if ((rc = dec_str(json_object_get(j, "content"), &s->content, &s->content_len)) < 0 ||
            (rc = dec_count(j, "start", path, &s->start)) < 0 ||
            (rc = dec_count(j, "stop", path, &s->stop)) < 0)
            return rc;
    } else if (kind == DEC_METASPACE) {
        json_t *repl = json_object_get(j, "replacement");
        json_t *scheme = json_object_get(j, "prepend_scheme");
        uint32_t cp;
        if (!json_is_string(repl) || json_string_length(repl) == 0 ||
            json_string_length(repl) > 4 ||
            utf8_decode_one((const unsigned char *)json_string_value(repl),
                            json_string_length(repl), &cp) != json_string_length(repl))
            return err_set(ERR_FORMAT,
                           "%s: decoder Metaspace: \"replacement\" must be one character", path);
        if (scheme && !json_is_string(scheme))
            return err_set(ERR_FORMAT, "%s: decoder Metaspace: \"prepend_scheme\" is not a string",
                           path);
        if ((rc = dec_str(repl, &s->pattern, &s->pattern_len)) < 0 || !(s->content = malloc(2)))
            return rc < 0 ? rc : err_set(ERR_NOMEM, "out of memory for the decoder");
        memcpy(s->content, " ", 2);
        s->content_len = 1;
        if (scheme)
            s->drop_first = strcmp(json_string_value(scheme), "never") != 0;
        else /* older files: "add_prefix_space" */
            s->drop_first = !json_is_false(json_object_get(j, "add_prefix_space"));
        d->first_differs |= s->drop_first;
    } else if (kind == DEC_REPLACE) {
        json_t *pat = json_object_get(j, "pattern"), *content = json_object_get(j, "content");
        json_t *str = json_object_get(pat, "String");
        if (json_is_string(json_object_get(pat, "Regex")))
            return err_set(ERR_UNSUPPORTED,
                           "%s: decoder Replace with a Regex pattern is not supported", path);
        if (!json_is_string(str) || json_string_length(str) == 0 || !json_is_string(content))
            return err_set(ERR_FORMAT,
                           "%s: decoder Replace: expected \"pattern\" {\"String\": ...} and a "
                           "\"content\" string",
                           path);
        if ((rc = dec_str(str, &s->pattern, &s->pattern_len)) < 0 ||
            (rc = dec_str(content, &s->content, &s->content_len)) < 0)
            return rc;
    }
    return 0;
}

int bpe_decoder_parse(struct bpe_decoder *d, json_t *j, bool byte_level, const char *path)
{
    memset(d, 0, sizeof(*d));
    if (!j || json_is_null(j)) {
        if (!byte_level)
            return err_set(ERR_UNSUPPORTED,
                           "%s: a null decoder (tokens joined by spaces) is not supported for a "
                           "tokenizer without ByteLevel",
                           path);
        d->steps[0].kind = DEC_BYTE_LEVEL; /* GPT-2's files, which name no decoder */
        d->n = 1;
        return 0;
    }
    bool fused = false;
    int rc = dec_parse_one(d, j, &fused, byte_level, path, 0);
    if (rc < 0)
        bpe_decoder_free(d);
    return rc;
}

/* ---- one token ---- */

static int buf_reserve(unsigned char **buf, size_t *cap, size_t need)
{
    if (*cap >= need)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    unsigned char *p = realloc(*buf, c);
    if (!p)
        return err_set(ERR_NOMEM, "out of memory decoding the vocabulary");
    *buf = p;
    *cap = c;
    return 0;
}

/* One step on s[0..n) into out (room for the result is reserved here). */
static int dec_step(const struct bpe_dec_step *st, bool first, const unsigned char *s, size_t n,
                    unsigned char **out, size_t *out_n, size_t *out_cap)
{
    size_t o = 0;
    int rc;
    switch (st->kind) {
    case DEC_BYTE_LEVEL: {
        if ((rc = buf_reserve(out, out_cap, n + 1)) < 0)
            return rc;
        bool all = true;
        for (size_t i = 0; i < n && all;) {
            uint32_t cp;
            size_t len = utf8_decode_one(s + i, n - i, &cp);
            int b = len ? byte_level_byte(cp) : -1;
            if (b < 0)
                all = false;
            else
                (*out)[o++] = (unsigned char)b;
            i += len ? len : 1;
        }
        if (!all) {
            memcpy(*out, s, n);
            o = n;
        }
        break;
    }
    case DEC_BYTE_FALLBACK: {
        if ((rc = buf_reserve(out, out_cap, n + 1)) < 0)
            return rc;
        static const char HEX[] = "0123456789ABCDEFabcdef";
        if (n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && s[3] && s[4] &&
            strchr(HEX, s[3]) && strchr(HEX, s[4])) {
            char h[3] = {(char)s[3], (char)s[4], 0};
            (*out)[o++] = (unsigned char)strtoul(h, NULL, 16);
        } else {
            memcpy(*out, s, n);
            o = n;
        }
        break;
    }
    case DEC_METASPACE:
    case DEC_REPLACE: {
        bool drop = st->kind == DEC_METASPACE && first && st->drop_first;
        /* At most n / pattern_len replacements. */
        size_t grow = st->content_len > st->pattern_len ? st->content_len - st->pattern_len : 0;
        if ((rc = buf_reserve(out, out_cap, n + (n / st->pattern_len) * grow + 1)) < 0)
            return rc;
        for (size_t i = 0; i < n;) {
            if (n - i >= st->pattern_len && memcmp(s + i, st->pattern, st->pattern_len) == 0) {
                if (!drop) {
                    memcpy(*out + o, st->content, st->content_len);
                    o += st->content_len;
                }
                i += st->pattern_len;
            } else {
                (*out)[o++] = s[i++];
            }
        }
        break;
    }
    case DEC_STRIP: {
        if ((rc = buf_reserve(out, out_cap, n + 1)) < 0)
            return rc;
        size_t a = 0, b = n, c = st->content_len;
        for (size_t k = 0; k < st->start && b - a >= c && memcmp(s + a, st->content, c) == 0; k++)
            a += c;
        for (size_t k = 0; k < st->stop && b - a >= c && memcmp(s + b - c, st->content, c) == 0;
             k++)
            b -= c;
        memcpy(*out, s + a, b - a);
        o = b - a;
        break;
    }
    }
    *out_n = o;
    return 0;
}

void bpe_dec_scratch_free(struct bpe_dec_scratch *sc)
{
    free(sc->a);
    free(sc->b);
    memset(sc, 0, sizeof(*sc));
}

int bpe_decoder_token(const struct bpe_decoder *d, struct bpe_dec_scratch *sc, bool first,
                      const char *sym, size_t n, unsigned char **buf, size_t *len, size_t *cap)
{
    /* The steps ping-pong between the two scratch buffers. */
    int rc;
    if ((rc = buf_reserve(&sc->a, &sc->a_cap, n + 1)) < 0)
        return rc;
    memcpy(sc->a, sym, n);
    size_t an = n;
    for (size_t i = 0; i < d->n; i++) {
        size_t bn;
        if ((rc = dec_step(&d->steps[i], first, sc->a, an, &sc->b, &bn, &sc->b_cap)) < 0)
            return rc;
        struct bpe_dec_scratch t = *sc;
        sc->a = t.b;
        sc->a_cap = t.b_cap;
        sc->b = t.a;
        sc->b_cap = t.a_cap;
        an = bn;
    }
    if ((rc = buf_reserve(buf, cap, *len + an + 1)) < 0)
        return rc;
    memcpy(*buf + *len, sc->a, an);
    *len += an;
    return 0;
}
