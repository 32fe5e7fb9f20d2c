/* Unicode normalization forms NFD, NFC, NFKD and NFKC (UAX #15).
 *
 * Decompose (the full mappings of unicode_norm_data.h, Hangul syllables by
 * arithmetic), put each run of combining marks in canonical order (a stable
 * sort by combining class), then for the C forms compose: a character joins
 * the last starter when nothing between them blocks it and the pair has a
 * primary composite. Bytes that are not UTF-8 pass through untouched and act
 * as starters that compose with nothing. Text that is all ASCII (and, for
 * NFC, all below U+0300, where every character is already NFC) is copied as
 * it is. The tables come from Python's unicodedata (tools/make_unicode_norm.py);
 * Hugging Face uses Rust's unicode-normalization, which may be a Unicode
 * version apart: characters new in between can differ.
 */
#include "core/error.h"
#include "tokenizer/bpe_impl.h"
#include "tokenizer/unicode_norm_data.h"

#include <stdlib.h>
#include <string.h>

#define UN_BYTE 0x110000u /* UN_BYTE + b: an invalid byte b, passed through */
#define SBASE 0xAC00u
#define LBASE 0x1100u
#define VBASE 0x1161u
#define TBASE 0x11A7u
#define LCOUNT 19u
#define VCOUNT 21u
#define TCOUNT 28u
#define NCOUNT (VCOUNT * TCOUNT)
#define SCOUNT (LCOUNT * NCOUNT)

static unsigned un_ccc(uint32_t cp)
{
    size_t lo = 0, hi = sizeof(UN_CCC) / sizeof(UN_CCC[0]);
    if (cp < 0x300 || cp >= UN_BYTE)
        return 0;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < UN_CCC[mid].lo)
            hi = mid;
        else if (cp > UN_CCC[mid].hi)
            lo = mid + 1;
        else
            return UN_CCC[mid].ccc;
    }
    return 0;
}

/* The full decomposition of cp for the form (compat: NFK*), or NULL. */
static const struct un_decomp *un_decomp(uint32_t cp, bool compat)
{
    size_t lo = 0, hi = sizeof(UN_DECOMP) / sizeof(UN_DECOMP[0]);
    while (lo < hi) { /* the first entry with cp */
        size_t mid = (lo + hi) / 2;
        if (UN_DECOMP[mid].cp < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    const struct un_decomp *d = NULL;
    for (size_t i = lo; i < sizeof(UN_DECOMP) / sizeof(UN_DECOMP[0]) && UN_DECOMP[i].cp == cp;
         i++) {
        if (UN_DECOMP[i].kind == 0 || compat)
            d = &UN_DECOMP[i]; /* kind 1 comes after kind 0 and wins for NFK* */
    }
    return d;
}

static uint32_t un_compose_pair(uint32_t a, uint32_t b)
{
    if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
        return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
    if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE &&
        b < TBASE + TCOUNT)
        return a + (b - TBASE);
    size_t lo = 0, hi = sizeof(UN_COMP) / sizeof(UN_COMP[0]);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const struct un_comp *c = &UN_COMP[mid];
        if (c->a < a || (c->a == a && c->b < b))
            lo = mid + 1;
        else if (c->a == a && c->b == b)
            return c->c;
        else
            hi = mid;
    }
    return 0;
}

/* Appends cp's decomposition to cps at *n (room for 18 more). */
static void un_decompose(uint32_t cp, bool compat, uint32_t *cps, size_t *n)
{
    if (cp >= SBASE && cp < SBASE + SCOUNT) {
        uint32_t s = cp - SBASE;
        cps[(*n)++] = LBASE + s / NCOUNT;
        cps[(*n)++] = VBASE + (s % NCOUNT) / TCOUNT;
        if (s % TCOUNT)
            cps[(*n)++] = TBASE + s % TCOUNT;
        return;
    }
    const struct un_decomp *d = cp < 0xA0 || cp >= UN_BYTE ? NULL : un_decomp(cp, compat);
    if (!d) {
        cps[(*n)++] = cp;
        return;
    }
    for (unsigned i = 0; i < d->len; i++)
        cps[(*n)++] = UN_POOL[d->off + i];
}

int unicode_normalize(enum unicode_form form, const unsigned char *in, size_t n,
                      unsigned char **out, size_t *out_n)
{
    bool compat = form == UN_NFKC || form == UN_NFKD;
    bool compose = form == UN_NFC || form == UN_NFKC;
    *out = NULL;
    *out_n = 0;
    /* Already normal: ASCII, or for NFC nothing at or past U+0300 (lead byte 0xCC). */
    unsigned char limit = form == UN_NFC ? 0xCC : 0x80;
    size_t i = 0;
    while (i < n && in[i] < limit)
        i++;
    if (i == n) {
        unsigned char *copy = malloc(n + 1);
        if (!copy)
            return err_set(ERR_NOMEM, "out of memory normalizing text");
        if (n > 0)
            memcpy(copy, in, n);
        *out = copy;
        *out_n = n;
        return 0;
    }
    /* The longest decomposition is 18 code points. */
    if (n > SIZE_MAX / (18 * sizeof(uint32_t)) - 1)
        return err_set(ERR_INVALID, "text of %zu bytes is too long to normalize", n);
    uint32_t *cps = malloc((n * 18 + 1) * sizeof(*cps));
    if (!cps)
        return err_set(ERR_NOMEM, "out of memory normalizing %zu bytes", n);
    size_t m = 0;
    for (i = 0; i < n;) {
        uint32_t cp;
        size_t len = utf8_decode_one(in + i, n - i, &cp);
        if (!len) {
            cps[m++] = UN_BYTE + in[i++];
            continue;
        }
        un_decompose(cp, compat, cps, &m);
        i += len;
    }
    /* Canonical order: insertion sort of each run of non-starters. */
    for (size_t k = 1; k < m; k++) {
        unsigned c = un_ccc(cps[k]);
        if (c == 0)
            continue;
        uint32_t x = cps[k];
        size_t j = k;
        while (j > 0 && un_ccc(cps[j - 1]) > c) {
            cps[j] = cps[j - 1];
            j--;
        }
        cps[j] = x;
    }
    if (compose && m > 0) {
        size_t starter = 0, w = 1;
        bool have_starter = un_ccc(cps[0]) == 0;
        unsigned last_ccc = have_starter ? 0 : 256;
        for (size_t k = 1; k < m; k++) {
            uint32_t c = cps[k];
            unsigned cc = un_ccc(c);
            uint32_t comp = 0;
            /* Not blocked: nothing between, or everything between has a lower class. */
            if (have_starter && (last_ccc < cc || (last_ccc == 0 && w == starter + 1)) &&
                cps[starter] < UN_BYTE && c < UN_BYTE)
                comp = un_compose_pair(cps[starter], c);
            if (comp) {
                cps[starter] = comp;
                continue;
            }
            if (cc == 0) {
                starter = w;
                have_starter = true;
                last_ccc = 0;
            } else {
                last_ccc = cc;
            }
            cps[w++] = c;
        }
        m = w;
    }
    unsigned char *o = malloc(m * 4 + 1);
    if (!o) {
        free(cps);
        return err_set(ERR_NOMEM, "out of memory normalizing %zu bytes", n);
    }
    size_t on = 0;
    for (size_t k = 0; k < m; k++) {
        if (cps[k] >= UN_BYTE)
            o[on++] = (unsigned char)(cps[k] - UN_BYTE);
        else
            on += utf8_encode_one(cps[k], o + on);
    }
    free(cps);
    *out = o;
    *out_n = on;
    return 0;
}
