/* Token ids back to UTF-8 text, whole or streamed.
 *
 * Each id stands for raw bytes, and one character's bytes may be spread over
 * several ids (an emoji is often three or four tokens). Both decoders push the
 * bytes through the same small UTF-8 state machine: complete characters go
 * out, a valid but unfinished prefix waits for more bytes, and anything that
 * cannot become a character is replaced by U+FFFD, one per maximal invalid
 * prefix -- what Python's bytes.decode("utf-8", "replace") does, and so what
 * Hugging Face's decode returns. Output is therefore always valid UTF-8, and
 * streaming a sequence yields exactly the bytes of decoding it whole.
 *
 * Ids that name no token (negative ids excepted, which are errors) decode to
 * nothing, as in Hugging Face: a model whose embedding is padded past the
 * vocabulary may sample them.
 */
#include "core/error.h"
#include "tokenizer/bpe_impl.h"

#include <stdlib.h>
#include <string.h>

static const unsigned char UTF8_REPLACEMENT[3] = {0xEF, 0xBF, 0xBD};

/* Length of the sequence lead byte b starts, 0 when b cannot start one. */
static size_t utf8_seq_len(unsigned char b)
{
    if (b < 0x80)
        return 1;
    if (b >= 0xC2 && b <= 0xDF)
        return 2;
    if (b >= 0xE0 && b <= 0xEF)
        return 3;
    if (b >= 0xF0 && b <= 0xF4)
        return 4;
    return 0;
}

/* Whether b can follow the n > 0 pending bytes of a sequence led by lead.
 * The second byte's range is narrower after some leads: that is what rules
 * out overlong forms, surrogates and code points past U+10FFFF. */
static bool utf8_cont_ok(unsigned char lead, size_t n, unsigned char b)
{
    if ((b & 0xC0) != 0x80)
        return false;
    if (n != 1)
        return true;
    switch (lead) {
    case 0xE0:
        return b >= 0xA0;
    case 0xED:
        return b <= 0x9F;
    case 0xF0:
        return b >= 0x90;
    case 0xF4:
        return b <= 0x8F;
    default:
        return true;
    }
}

/* Appends n bytes to out at *o, or only counts them when out is NULL. */
static void utf8_emit(unsigned char *out, size_t *o, const unsigned char *b, size_t n)
{
    if (out)
        memcpy(out + *o, b, n);
    *o += n;
}

/* Feeds bytes through the state machine whose held-back bytes are
 * pend[0..*n_pend); returns the number of output bytes (written to out
 * unless it is NULL). At most 3 bytes stay pending. */
static size_t utf8_feed(unsigned char *pend, size_t *n_pend, const unsigned char *in, size_t n,
                        unsigned char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = in[i];
        if (*n_pend > 0) {
            if (utf8_cont_ok(pend[0], *n_pend, b)) {
                pend[(*n_pend)++] = b;
                if (*n_pend == utf8_seq_len(pend[0])) {
                    utf8_emit(out, &o, pend, *n_pend);
                    *n_pend = 0;
                }
                continue;
            }
            /* The held prefix can never finish: replace it, then b starts afresh. */
            utf8_emit(out, &o, UTF8_REPLACEMENT, 3);
            *n_pend = 0;
        }
        size_t len = utf8_seq_len(b);
        if (len == 1)
            utf8_emit(out, &o, &b, 1);
        else if (len == 0)
            utf8_emit(out, &o, UTF8_REPLACEMENT, 3);
        else
            pend[(*n_pend)++] = b;
    }
    return o;
}

/* The bytes of id, or NULL (with *n 0) when id names no token. */
static const unsigned char *bpe_id_bytes(const struct bpe *t, int32_t id, size_t *n)
{
    if (id >= t->n_vocab || !(t->tok_flags[id] & BPE_TOK_PRESENT)) {
        *n = 0;
        return NULL;
    }
    *n = t->tok_off[id + 1] - t->tok_off[id];
    return t->tok_bytes + t->tok_off[id];
}

/* The bytes of id where it is the first token decoded (*past_first false,
 * then set once id names a token): its first-place spelling if it has one. */
static const unsigned char *bpe_id_bytes_at(const struct bpe *t, int32_t id, bool *past_first,
                                            size_t *n)
{
    const unsigned char *b = bpe_id_bytes(t, id, n);
    if (!b || *past_first)
        return b;
    *past_first = true;
    size_t lo = 0, hi = t->n_first;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t->first_id[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < t->n_first && t->first_id[lo] == id) {
        *n = t->first_off[lo + 1] - t->first_off[lo];
        return t->first_bytes + t->first_off[lo];
    }
    return b;
}

/* Runs ids through the state machine; returns the output length. */
static size_t bpe_decode_run(const struct bpe *t, const int32_t *ids, size_t n_ids,
                             bool skip_special, unsigned char *out)
{
    unsigned char pend[4];
    size_t n_pend = 0, o = 0;
    bool past_first = false;
    for (size_t i = 0; i < n_ids; i++) {
        if (skip_special && ids[i] < t->n_vocab && (t->tok_flags[ids[i]] & BPE_TOK_SPECIAL))
            continue;
        size_t n;
        const unsigned char *b = bpe_id_bytes_at(t, ids[i], &past_first, &n);
        o += utf8_feed(pend, &n_pend, b, n, out ? out + o : NULL);
    }
    if (n_pend > 0)
        utf8_emit(out, &o, UTF8_REPLACEMENT, 3);
    return o;
}

/* The decoder's whole-text Strip on a chunk of output out[0..n) (complete
 * characters): cuts leading copies of the strip character while the output
 * has not begun and fewer than strip_start are cut; returns the new length. */
static size_t bpe_strip_lead(const struct bpe *t, size_t *n_stripped, bool *begun,
                             unsigned char *out, size_t n)
{
    if (*begun)
        return n;
    size_t cut = 0, c = t->strip_char_len;
    while (*n_stripped < t->strip_start && n - cut >= c && c > 0 &&
           memcmp(out + cut, t->strip_char, c) == 0) {
        cut += c;
        (*n_stripped)++;
    }
    if (cut < n)
        *begun = true;
    memmove(out, out + cut, n - cut);
    return n - cut;
}

int bpe_decode(const struct bpe *t, const int32_t *ids, size_t n_ids, bool skip_special,
               char **text, size_t *len)
{
    if (!t || !text || !len || (!ids && n_ids > 0))
        return err_set(ERR_INVALID, "bpe_decode: NULL argument");
    *text = NULL;
    *len = 0;
    for (size_t i = 0; i < n_ids; i++) {
        if (ids[i] < 0)
            return err_set(ERR_INVALID, "bpe_decode: negative token id %d at position %zu",
                           (int)ids[i], i);
    }
    /* Count, then write: output can be up to three times the token bytes. */
    size_t n = bpe_decode_run(t, ids, n_ids, skip_special, NULL);
    unsigned char *out = malloc(n + 1);
    if (!out)
        return err_set(ERR_NOMEM, "bpe_decode: out of memory for %zu bytes", n);
    bpe_decode_run(t, ids, n_ids, skip_special, out);
    size_t n_stripped = 0;
    bool begun = false;
    n = bpe_strip_lead(t, &n_stripped, &begun, out, n);
    out[n] = '\0';
    *text = (char *)out;
    *len = n;
    return 0;
}

size_t bpe_stream_chunk_max(const struct bpe *t)
{
    /* Every byte may become U+FFFD, plus a held-back prefix failing first. */
    return 3 * (t->max_tok_len + 1);
}

void bpe_stream_init(struct bpe_stream *s, const struct bpe *t)
{
    memset(s, 0, sizeof(*s));
    s->t = t;
}

int bpe_stream_push(struct bpe_stream *s, int32_t id, char *out, size_t cap)
{
    if (!s || !s->t || (!out && cap > 0))
        return err_set(ERR_INVALID, "bpe_stream_push: NULL argument");
    if (id < 0)
        return err_set(ERR_INVALID, "bpe_stream_push: negative token id %d", (int)id);
    if (id < s->t->n_vocab && (s->t->tok_flags[id] & BPE_TOK_SPECIAL))
        return 0;
    size_t n;
    bool past_first = s->past_first;
    const unsigned char *b = bpe_id_bytes_at(s->t, id, &past_first, &n);

    /* Size on a copy of the state first, so a short buffer changes nothing. */
    unsigned char pend[sizeof(s->pending)];
    size_t n_pend = s->n_pending;
    memcpy(pend, s->pending, sizeof(pend));
    size_t need = utf8_feed(pend, &n_pend, b, n, NULL);
    if (need > cap || need > INT32_MAX)
        return err_set(ERR_INVALID,
                       "bpe_stream_push: token %d needs %zu bytes of output, the buffer has %zu",
                       (int)id, need, cap);
    s->past_first = past_first;
    size_t got = utf8_feed(s->pending, &s->n_pending, b, n, (unsigned char *)out);
    return (int)bpe_strip_lead(s->t, &s->n_stripped, &s->begun, (unsigned char *)out, got);
}

int bpe_stream_finish(struct bpe_stream *s, char *out, size_t cap)
{
    if (!s || (!out && cap > 0))
        return err_set(ERR_INVALID, "bpe_stream_finish: NULL argument");
    if (s->n_pending == 0)
        return 0;
    if (cap < 3)
        return err_set(ERR_INVALID,
                       "bpe_stream_finish: needs 3 bytes of output, the buffer has %zu", cap);
    memcpy(out, UTF8_REPLACEMENT, 3);
    s->n_pending = 0;
    s->begun = true;
    return 3;
}
