/* Text to token ids.
 *
 * The steps Hugging Face tokenizers takes:
 *   1. added tokens ("</s>", "<|eot_id|>", ...) are cut out of the text whole,
 *      leftmost first and the longest at one position (lstrip / rstrip take
 *      the white space beside them, single_word refuses a match inside a word);
 *   2. each stretch between them is normalized (normalize.c), and the added
 *      tokens marked normalized are cut out of the result;
 *   3. what is left is split into words by the pre-tokenizer (pretokenize.c);
 *   4. each word is merged by BPE into ids (bpe_merge.c);
 *   5. with add_bos (transformers' add_special_tokens), the post-processor's
 *      ids go around the result.
 * All scratch state lives in the call, so one struct bpe serves many threads.
 */
#include "core/error.h"
#include "tokenizer/bpe_impl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct bpe_encode_ctx {
    const struct bpe *t;
    struct bpe_merge_work work;
    int32_t *ids;
    size_t n, cap;
};

/* Makes room for `more` ids. */
static int bpe_ids_reserve(struct bpe_encode_ctx *c, size_t more)
{
    if (c->cap - c->n >= more)
        return 0;
    size_t cap = c->cap ? c->cap : 64;
    while (cap - c->n < more) {
        if (cap > SIZE_MAX / 2 / sizeof(int32_t))
            return err_set(ERR_NOMEM, "bpe_encode: too many ids");
        cap *= 2;
    }
    int32_t *ids = realloc(c->ids, cap * sizeof(*ids));
    if (!ids)
        return err_set(ERR_NOMEM, "bpe_encode: out of memory for %zu ids", cap);
    c->ids = ids;
    c->cap = cap;
    return 0;
}

static int bpe_encode_word(void *ctx, const unsigned char *word, size_t n)
{
    struct bpe_encode_ctx *c = ctx;
    int got = bpe_ids_reserve(c, n); /* a word gives at most one id per byte */
    if (got < 0)
        return got;
    got = bpe_merge_word(c->t, &c->work, word, n, c->ids + c->n);
    if (got < 0)
        return got;
    c->n += (size_t)got;
    return 0;
}

/* Whether the character at s[i..n) (before: the one ending at s[..i)) is a
 * word character for single_word: alphanumeric or '_'. Outside ASCII,
 * anything that is not white space counts, which is close to, not exactly,
 * Rust's char::is_alphanumeric. */
static bool bpe_word_char(const unsigned char *s, size_t lo, size_t i, size_t n, bool before)
{
    if (before ? i == lo : i == n)
        return false;
    unsigned char b = before ? s[i - 1] : s[i];
    if (b < 0x80)
        return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') ||
               b == '_';
    return before ? utf8_space_before(s, lo, i) == 0 : utf8_space_at(s, i, n) == 0;
}

/* ---- added tokens in text ---- */

/* Bytes first, then the shorter of two where one is a prefix of the other. */
static int bpe_added_cmp(const void *pa, const void *pb)
{
    const struct bpe_added *a = pa, *b = pb;
    int c = memcmp(a->content, b->content, a->len < b->len ? a->len : b->len);
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

static void bpe_addset_index(struct bpe_addset *set)
{
    if (set->n)
        qsort(set->tok, set->n, sizeof(*set->tok), bpe_added_cmp);
    size_t k = 0;
    for (int b = 0; b < 256; b++) {
        set->from[b] = (uint32_t)k;
        while (k < set->n && (unsigned char)set->tok[k].content[0] == b)
            k++;
    }
    set->from[256] = (uint32_t)k;
}

void bpe_addset_free(struct bpe_addset *s)
{
    if (s->owns_content) {
        for (size_t i = 0; i < s->n; i++)
            free(s->tok[i].content);
    }
    free(s->tok);
    memset(s, 0, sizeof(*s));
}

int bpe_added_sort(struct bpe *t)
{
    if (t->n_added)
        qsort(t->added, t->n_added, sizeof(*t->added), bpe_added_cmp);
    /* Where there is a normalizer, normalized tokens are matched after it,
     * spelled as it spells them (Hugging Face's AddedVocabulary). */
    t->raw_set.tok = calloc(t->n_added + 1, sizeof(*t->raw_set.tok));
    t->norm_set.tok = calloc(t->n_added + 1, sizeof(*t->norm_set.tok));
    t->norm_set.owns_content = true;
    if (!t->raw_set.tok || !t->norm_set.tok)
        return err_set(ERR_NOMEM, "out of memory for %zu added tokens", t->n_added);
    for (size_t i = 0; i < t->n_added; i++) {
        const struct bpe_added *a = &t->added[i];
        if (!(t->normalizer && a->normalized)) {
            t->raw_set.tok[t->raw_set.n++] = *a;
            continue;
        }
        unsigned char *s;
        size_t n;
        int rc = norm_run(t->normalizer, (const unsigned char *)a->content, a->len, &s, &n);
        if (rc < 0)
            return rc;
        if (n == 0) {
            free(s);
            continue;
        }
        struct bpe_added *b = &t->norm_set.tok[t->norm_set.n++];
        *b = *a;
        b->content = (char *)s;
        b->len = n;
    }
    bpe_addset_index(&t->raw_set);
    bpe_addset_index(&t->norm_set);
    return 0;
}

/* The first k in [lo, hi) whose byte d is at least c; every token there is
 * longer than d bytes and they are ordered by byte d. */
static size_t bpe_added_bound(const struct bpe_addset *set, size_t lo, size_t hi, size_t d,
                              unsigned c)
{
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((unsigned char)set->tok[mid].content[d] < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The longest added token that s[0, n) starts with (n > 0): its index in
 * set->tok, or -1. The sorted tokens that share the text's first d bytes form
 * one range, in which the one exactly d bytes long, if any, comes first and
 * the rest are ordered by their byte d; narrowing the range byte by byte
 * costs O(longest token * log n_added), however many tokens there are. */
static int bpe_added_match(const struct bpe_addset *set, const unsigned char *s, size_t n)
{
    size_t lo = set->from[s[0]], hi = set->from[s[0] + 1];
    int best = -1;
    for (size_t d = 1; lo < hi; d++) {
        if (set->tok[lo].len == d)
            best = (int)lo++;
        if (d == n || lo == hi)
            break;
        lo = bpe_added_bound(set, lo, hi, d, s[d]);
        hi = bpe_added_bound(set, lo, hi, d, s[d] + 1u);
    }
    return best;
}

/* 1 when c is ASCII white space (C's isspace), else 0. */
static size_t bpe_ascii_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Finds the first added token of set in text[from, n), the longest where
 * several start at one position and single_word allows it: returns it, with
 * [*at, *end) the text it takes (its content and the white space it strips),
 * or NULL when there is none. */
static const struct bpe_added *bpe_added_next(const struct bpe_addset *set,
                                              const unsigned char *text, size_t from, size_t n,
                                              size_t *at, size_t *end)
{
    if (set->n == 0)
        return NULL;
    for (size_t i = from; i < n; i++) {
        if (set->from[text[i]] == set->from[text[i] + 1])
            continue;
        int k = bpe_added_match(set, text + i, n - i);
        if (k < 0)
            continue;
        const struct bpe_added *a = &set->tok[k];
        size_t s = i, e = i + a->len, w;
        if (a->single_word &&
            (bpe_word_char(text, from, s, n, true) || bpe_word_char(text, from, e, n, false)))
            continue;
        if (a->lstrip)
            while (s > from && (w = a->strip_ascii ? bpe_ascii_space(text[s - 1])
                                                   : utf8_space_before(text, from, s)) > 0)
                s -= w;
        if (a->rstrip)
            while (e < n &&
                   (w = a->strip_ascii ? bpe_ascii_space(text[e]) : utf8_space_at(text, e, n)) > 0)
                e += w;
        *at = s;
        *end = e;
        return a;
    }
    return NULL;
}

/* Normalized text (no raw added token in it): split on the normalized added
 * tokens, pre-tokenize and merge what lies between. */
static int bpe_encode_normalized(struct bpe_encode_ctx *c, const unsigned char *s, size_t len,
                                 bool first)
{
    const struct bpe *t = c->t;
    size_t pos = 0;
    int rc;
    while (pos < len) {
        size_t at = len, end = len;
        const struct bpe_added *a = bpe_added_next(&t->norm_set, s, pos, len, &at, &end);
        if (at > pos && (rc = pretok_split(t->pretok, s + pos, at - pos, first && pos == 0,
                                           bpe_encode_word, c)) < 0)
            return rc;
        if (a) {
            if ((rc = bpe_ids_reserve(c, 1)) < 0)
                return rc;
            c->ids[c->n++] = a->id;
        }
        pos = end;
    }
    return 0;
}

/* Text between raw added tokens: normalized, then the rest. first: it starts
 * the input. */
static int bpe_encode_plain(struct bpe_encode_ctx *c, const unsigned char *s, size_t len,
                            bool first)
{
    if (!c->t->normalizer)
        return bpe_encode_normalized(c, s, len, first);
    unsigned char *x;
    size_t n;
    int rc = norm_run(c->t->normalizer, s, len, &x, &n);
    if (rc < 0)
        return rc;
    rc = bpe_encode_normalized(c, x, n, first);
    free(x);
    return rc;
}

int bpe_encode(const struct bpe *t, const char *text, size_t len, bool add_bos, int32_t **ids,
               size_t *n_ids)
{
    if (!t || !ids || !n_ids || (!text && len > 0))
        return err_set(ERR_INVALID, "bpe_encode: NULL argument");
    *ids = NULL;
    *n_ids = 0;
    if (len > SIZE_MAX / sizeof(int32_t) / 4)
        return err_set(ERR_INVALID, "bpe_encode: text of %zu bytes is too long", len);

    struct bpe_encode_ctx c = {.t = t};
    int rc = bpe_ids_reserve(&c, len + t->n_pre + t->n_suf + 1);
    if (rc < 0)
        return rc;
    if (add_bos) {
        memcpy(c.ids, t->tpl_pre, t->n_pre * sizeof(int32_t));
        c.n = t->n_pre;
    }

    const unsigned char *s = (const unsigned char *)text;
    size_t pos = 0;
    while (pos < len) {
        /* The next added token, with the white space it swallows, and the
         * plain text before it. */
        size_t at = len, end = len;
        const struct bpe_added *a = bpe_added_next(&t->raw_set, s, pos, len, &at, &end);
        if (at > pos && (rc = bpe_encode_plain(&c, s + pos, at - pos, pos == 0)) < 0)
            goto fail;
        if (a) {
            if ((rc = bpe_ids_reserve(&c, 1)) < 0)
                goto fail;
            c.ids[c.n++] = a->id;
        }
        pos = end;
    }
    if (add_bos) {
        if ((rc = bpe_ids_reserve(&c, t->n_suf)) < 0)
            goto fail;
        memcpy(c.ids + c.n, t->tpl_suf, t->n_suf * sizeof(int32_t));
        c.n += t->n_suf;
    }
    bpe_merge_work_free(&c.work);
    *ids = c.ids;
    *n_ids = c.n;
    return 0;

fail:
    bpe_merge_work_free(&c.work);
    free(c.ids);
    return rc;
}
