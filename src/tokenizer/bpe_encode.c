/* Text to token ids.
 *
 * Three steps, as Hugging Face tokenizers does them:
 *   1. added tokens ("</s>", "<pad>", ...) are cut out of the text whole,
 *      leftmost first and the longest at one position;
 *   2. each stretch of text between them is split into words by GPT-2's regex;
 *   3. each word's bytes are merged by BPE into ids.
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
    size_t n;
};

static int bpe_encode_word(void *ctx, const unsigned char *word, size_t n)
{
    struct bpe_encode_ctx *c = ctx;
    int got = bpe_merge_word(c->t, &c->work, word, n, c->ids + c->n);
    if (got < 0)
        return got;
    c->n += (size_t)got;
    return 0;
}

static bool bpe_is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* ---- added tokens in text ---- */

/* Bytes first, then the shorter of two where one is a prefix of the other. */
static int bpe_added_cmp(const void *pa, const void *pb)
{
    const struct bpe_added *a = pa, *b = pb;
    int c = memcmp(a->content, b->content, a->len < b->len ? a->len : b->len);
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

void bpe_added_sort(struct bpe *t)
{
    if (t->n_added)
        qsort(t->added, t->n_added, sizeof(*t->added), bpe_added_cmp);
    size_t k = 0;
    for (int b = 0; b < 256; b++) {
        t->added_from[b] = (uint32_t)k;
        while (k < t->n_added && (unsigned char)t->added[k].content[0] == b)
            k++;
    }
    t->added_from[256] = (uint32_t)k;
}

/* The first k in [lo, hi) whose byte d is at least c; every token there is
 * longer than d bytes and they are ordered by byte d. */
static size_t bpe_added_bound(const struct bpe *t, size_t lo, size_t hi, size_t d, unsigned c)
{
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((unsigned char)t->added[mid].content[d] < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The longest added token that s[0, n) starts with (n > 0): its index in
 * t->added, or -1. The sorted tokens that share the text's first d bytes form
 * one range, in which the one exactly d bytes long, if any, comes first and
 * the rest are ordered by their byte d; narrowing the range byte by byte
 * costs O(longest token * log n_added), however many tokens there are. */
static int bpe_added_match(const struct bpe *t, const unsigned char *s, size_t n)
{
    size_t lo = t->added_from[s[0]], hi = t->added_from[s[0] + 1];
    int best = -1;
    for (size_t d = 1; lo < hi; d++) {
        if (t->added[lo].len == d)
            best = (int)lo++;
        if (d == n || lo == hi)
            break;
        lo = bpe_added_bound(t, lo, hi, d, s[d]);
        hi = bpe_added_bound(t, lo, hi, d, s[d] + 1u);
    }
    return best;
}

/* Finds the first added token in text[from, n), the longest where several
 * start at one position: returns its index in t->added with *at its start,
 * or -1 when there is none. */
static int bpe_added_next(const struct bpe *t, const unsigned char *text, size_t from, size_t n,
                          size_t *at)
{
    if (t->n_added == 0)
        return -1;
    for (size_t i = from; i < n; i++) {
        if (t->added_from[text[i]] == t->added_from[text[i] + 1])
            continue;
        int k = bpe_added_match(t, text + i, n - i);
        if (k >= 0) {
            *at = i;
            return k;
        }
    }
    return -1;
}

int bpe_encode(const struct bpe *t, const char *text, size_t len, bool add_bos, int32_t **ids,
               size_t *n_ids)
{
    if (!t || !ids || !n_ids || (!text && len > 0))
        return err_set(ERR_INVALID, "bpe_encode: NULL argument");
    *ids = NULL;
    *n_ids = 0;
    if (len > SIZE_MAX / sizeof(int32_t) - 2)
        return err_set(ERR_INVALID, "bpe_encode: text of %zu bytes is too long", len);

    /* Every id covers at least one byte, so len + 1 ids (with BOS) always fit. */
    struct bpe_encode_ctx c = {.t = t, .ids = malloc((len + 1) * sizeof(int32_t))};
    if (!c.ids)
        return err_set(ERR_NOMEM, "bpe_encode: out of memory for %zu bytes of text", len);
    if (add_bos && t->add_bos)
        c.ids[c.n++] = t->bos;

    const unsigned char *s = (const unsigned char *)text;
    size_t pos = 0;
    int rc = 0;
    while (pos < len) {
        /* The next added token, with the whitespace it swallows. */
        size_t at = len, end = len;
        int k = bpe_added_next(t, s, pos, len, &at);
        if (k >= 0) {
            const struct bpe_added *a = &t->added[k];
            end = at + a->len;
            if (a->lstrip)
                while (at > pos && bpe_is_space(s[at - 1]))
                    at--;
            if (a->rstrip)
                while (end < len && bpe_is_space(s[end]))
                    end++;
        }
        /* The plain text before it, word by word. */
        if (at > pos && (rc = pretok_split(t->pretok, s + pos, at - pos, bpe_encode_word, &c)) < 0)
            goto fail;
        if (k >= 0)
            c.ids[c.n++] = t->added[k].id;
        pos = end;
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
