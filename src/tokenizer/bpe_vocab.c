/* The vocabulary: reading it, and turning it into the token table.
 *
 * vocab.json (OpenAI's name: encoder.json; tokenizer.json: "model"."vocab"):
 *   one JSON object {"<symbol>": <id>, ...} and nothing else. A byte-level
 *   symbol spells the token's bytes in the byte-level alphabet (byte_level.c),
 *   e.g. "Ġthe" is " the"; a SentencePiece-style one is text, e.g. "▁the",
 *   which the decoder turns into " the"; JSON escapes (\uXXXX, surrogate
 *   pairs, \n, ...) are allowed.
 *   Ids are integers in [0, BPE_MAX_ID); they need not be dense, but no
 *   two symbols may share one (decoding it would be ambiguous), and no
 *   symbol may appear twice (the JSON reader refuses duplicate keys).
 *   For a byte-level vocabulary every one of the 256 single-byte symbols must
 *   be present, or some input could not be encoded; a SentencePiece-style
 *   one may have <0x00>..<0xFF> for byte fallback. A symbol may be "":
 *   Hugging Face loads it, and as BPE never produces an empty token, it only
 *   ever decodes, to nothing.
 *
 * This flat shape gets its own parser rather than a general JSON library:
 * OPT's 50265 entries load in a few milliseconds instead of tens, which
 * matters when models are swapped in on demand.
 */
#include "core/error.h"
#include "tokenizer/bpe_impl.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Writes s[0..n) into buf as a printable, quoted, possibly shortened string
 * for error messages; returns buf. */
const char *bpe_quote(const char *s, size_t n, char *buf, size_t cap)
{
    size_t o = 0;
    buf[o++] = '\'';
    for (size_t i = 0; i < n && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7F || c == '\'')
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        else
            buf[o++] = (char)c;
        if (i + 1 < n && o + 8 >= cap) {
            memcpy(buf + o, "...", 3);
            o += 3;
        }
    }
    buf[o++] = '\'';
    buf[o] = '\0';
    return buf;
}

/* ---- symbol table ---- */

uint32_t bpe_hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
    return (uint32_t)(h ^ (h >> 32));
}

void bpe_symtab_free(struct bpe_symtab *st)
{
    free(st->slots);
    free(st->by_id);
    free(st->text);
    memset(st, 0, sizeof(*st));
}

static size_t bpe_id_hash(int32_t id)
{
    return (size_t)(((uint64_t)(uint32_t)id * 0x9E3779B97F4A7C15ULL) >> 32);
}

/* The by_id slot of id: the one that holds it, or the free one where it would go. */
static uint32_t *bpe_symtab_id_slot(const struct bpe_symtab *st, int32_t id)
{
    for (size_t k = bpe_id_hash(id) & st->mask;; k = (k + 1) & st->mask) {
        uint32_t e = st->by_id[k];
        if (!e || st->slots[e - 1].id == id)
            return &st->by_id[k];
    }
}

static int bpe_symtab_grow(struct bpe_symtab *st, size_t cap)
{
    struct bpe_symtab_slot *slots = malloc(cap * sizeof(*slots));
    uint32_t *by_id = calloc(cap, sizeof(*by_id));
    if (!slots || !by_id) {
        free(slots);
        free(by_id);
        return err_set(ERR_NOMEM, "out of memory for a vocabulary of %zu symbols", st->n);
    }
    for (size_t i = 0; i < cap; i++)
        slots[i] = (struct bpe_symtab_slot){.id = -1};
    for (size_t i = 0; st->slots && i <= st->mask; i++) {
        if (st->slots[i].id < 0)
            continue;
        size_t k = st->slots[i].hash & (cap - 1);
        while (slots[k].id >= 0)
            k = (k + 1) & (cap - 1);
        slots[k] = st->slots[i];
    }
    free(st->slots);
    free(st->by_id);
    st->slots = slots;
    st->by_id = by_id;
    st->mask = cap - 1;
    for (size_t i = 0; i < cap; i++) {
        if (slots[i].id >= 0)
            *bpe_symtab_id_slot(st, slots[i].id) = (uint32_t)i + 1;
    }
    return 0;
}

/* Finds the slot of s, or the free slot where it would go. */
static struct bpe_symtab_slot *bpe_symtab_find(const struct bpe_symtab *st, const char *s, size_t n,
                                               uint32_t h)
{
    size_t k = h & st->mask;
    for (;;) {
        struct bpe_symtab_slot *sl = &st->slots[k];
        if (sl->id < 0 || (sl->hash == h && sl->len == n && memcmp(st->text + sl->off, s, n) == 0))
            return sl;
        k = (k + 1) & st->mask;
    }
}

int32_t bpe_symtab_get(const struct bpe_symtab *st, const char *s, size_t n)
{
    if (!st->slots)
        return -1;
    return bpe_symtab_find(st, s, n, bpe_hash_bytes(s, n))->id;
}

/* The symbol that has id, as a slot, or NULL. */
static const struct bpe_symtab_slot *bpe_symtab_by_id(const struct bpe_symtab *st, int32_t id)
{
    uint32_t e = st->slots ? *bpe_symtab_id_slot(st, id) : 0;
    return e ? &st->slots[e - 1] : NULL;
}

/* Adds s -> id; neither s nor id may be there already (ERR_FORMAT, naming
 * both symbols, with path). */
static int bpe_symtab_put(struct bpe_symtab *st, const char *s, size_t n, int32_t id,
                          const char *path)
{
    const struct bpe_symtab_slot *same = bpe_symtab_by_id(st, id);
    if (same) {
        char q1[96], q2[96];
        return err_set(ERR_FORMAT,
                       "%s: symbols %s and %s both have id %d; expected one symbol per id", path,
                       bpe_quote(st->text + same->off, same->len, q1, sizeof(q1)),
                       bpe_quote(s, n, q2, sizeof(q2)), id);
    }
    if ((st->n + 1) * 2 > (st->slots ? st->mask + 1 : 0)) {
        int rc = bpe_symtab_grow(st, st->slots ? 2 * (st->mask + 1) : 1024);
        if (rc < 0)
            return rc;
    }
    uint32_t h = bpe_hash_bytes(s, n);
    struct bpe_symtab_slot *sl = bpe_symtab_find(st, s, n, h);
    if (sl->id >= 0) {
        char q[96];
        return err_set(ERR_FORMAT, "%s: symbol %s appears twice; expected each once", path,
                       bpe_quote(s, n, q, sizeof(q)));
    }
    /* Allocated even for an empty first symbol: text is never NULL once
     * a symbol is in, so memcpy and memcmp never see a null pointer. */
    if (!st->text || st->text_cap - st->text_len < n) {
        size_t cap = st->text_cap ? st->text_cap : 1 << 16;
        while (cap - st->text_len < n)
            cap *= 2;
        if (cap > UINT32_MAX)
            return err_set(ERR_FORMAT, "the vocabulary spells more than 4 GiB of symbols");
        char *text = realloc(st->text, cap);
        if (!text)
            return err_set(ERR_NOMEM, "out of memory for the vocabulary's symbols");
        st->text = text;
        st->text_cap = cap;
    }
    memcpy(st->text + st->text_len, s, n);
    *sl = (struct bpe_symtab_slot){.off = (uint32_t)st->text_len, .len = (uint32_t)n, .hash = h};
    st->text_len += n;
    st->n++;
    sl->id = id;
    *bpe_symtab_id_slot(st, id) = (uint32_t)(sl - st->slots) + 1;
    if (id >= st->n_ids)
        st->n_ids = id + 1;
    return 0;
}

/* ---- vocab.json: {"symbol": id, ...}, parsed by Jansson ---- */

int bpe_symtab_load_file(struct bpe_symtab *st, const char *path)
{
    json_t *vocab = NULL;
    int rc = bpe_json_load(path, false, &vocab);
    if (rc < 0)
        return rc;
    rc = bpe_symtab_from_json(st, vocab, path);
    json_decref(vocab);
    return rc;
}

int bpe_symtab_from_json(struct bpe_symtab *st, json_t *vocab, const char *path)
{
    if (!json_is_object(vocab))
        return err_set(ERR_FORMAT, "%s: the vocabulary is not a JSON object of symbol -> id", path);
    if (json_object_size(vocab) == 0)
        return err_set(ERR_FORMAT, "%s: the vocabulary is empty", path);
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val)
    {
        json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
        if (id < 0 || id >= BPE_MAX_ID) {
            char q[96];
            return err_set(ERR_FORMAT, "%s: symbol %s: expected an integer id in [0, %d)", path,
                           bpe_quote(key, strlen(key), q, sizeof(q)), BPE_MAX_ID);
        }
        int rc = bpe_symtab_put(st, key, strlen(key), (int32_t)id, path);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- token table ---- */

/* Records id's first-place bytes when they differ from its bytes b[0..n)
 * (a Metaspace decoder); *cap is the room in t->first_id and t->first_off,
 * *bcap in t->first_bytes. */
static int bpe_first_add(struct bpe *t, const struct bpe_decoder *dec, struct bpe_dec_scratch *sc,
                         int32_t id, const char *sym, size_t sn, const unsigned char *b, size_t n,
                         size_t *cap, size_t *bcap)
{
    unsigned char *f = NULL;
    size_t fl = 0, fc = 0;
    int rc = bpe_decoder_token(dec, sc, true, sym, sn, &f, &fl, &fc);
    if (rc < 0 || (fl == n && (n == 0 || memcmp(f, b, n) == 0))) {
        free(f);
        return rc;
    }
    if (t->n_first + 2 > *cap) {
        size_t c = *cap ? 2 * *cap : 1024;
        int32_t *ids = realloc(t->first_id, c * sizeof(*ids));
        if (ids)
            t->first_id = ids;
        uint32_t *off = realloc(t->first_off, (c + 1) * sizeof(*off));
        if (off)
            t->first_off = off;
        if (!ids || !off) {
            free(f);
            return err_set(ERR_NOMEM, "out of memory for the decoder's table");
        }
        if (*cap == 0)
            t->first_off[0] = 0;
        *cap = c;
    }
    uint32_t at = t->first_off[t->n_first];
    if (at + fl + 1 > *bcap) {
        size_t c = *bcap ? *bcap : 4096;
        while (c < at + fl + 1)
            c *= 2;
        unsigned char *fb = realloc(t->first_bytes, c);
        if (!fb) {
            free(f);
            return err_set(ERR_NOMEM, "out of memory for the decoder's table");
        }
        t->first_bytes = fb;
        *bcap = c;
    }
    if (fl)
        memcpy(t->first_bytes + at, f, fl);
    free(f);
    t->first_id[t->n_first] = id;
    t->first_off[++t->n_first] = at + (uint32_t)fl;
    return 0;
}

int bpe_vocab_build(struct bpe *t, const struct bpe_symtab *vocab, int32_t n_ids,
                    const struct bpe_decoder *dec, const char *vocab_name)
{
    int rc = 0;
    uint32_t *added_of = NULL; /* (n_ids) id -> index in t->added + 1; 0: not added */
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0;
    struct bpe_dec_scratch sc = {0};
    size_t first_cap = 0, first_bcap = 0;

    t->n_vocab = n_ids;
    t->tok_off = calloc((size_t)n_ids + 1, sizeof(*t->tok_off));
    t->tok_flags = calloc((size_t)n_ids, sizeof(*t->tok_flags));
    added_of = calloc((size_t)n_ids, sizeof(*added_of));
    if (!t->tok_off || !t->tok_flags || !added_of)
        goto nomem;
    for (size_t i = 0; i < t->n_added; i++) {
        assert(!added_of[t->added[i].id]); /* bpe_special_load refuses a shared id */
        added_of[t->added[i].id] = (uint32_t)i + 1;
    }

    /* Each id's bytes: what the decoder makes of its symbol (an added
     * token's content, which wins over a vocabulary entry of the same id). */
    for (int32_t id = 0; id < n_ids; id++) {
        t->tok_off[id] = (uint32_t)len;
        const char *sym;
        size_t n;
        unsigned char *normed = NULL;
        if (added_of[id]) {
            const struct bpe_added *a = &t->added[added_of[id] - 1];
            sym = a->content;
            n = a->len;
            t->tok_flags[id] = BPE_TOK_PRESENT | (a->special ? BPE_TOK_SPECIAL : 0);
            /* A normalized token is its normalized content (Hugging Face
             * keeps it so, and decodes that). */
            if (a->normalized && t->normalizer) {
                if ((rc = norm_run(t->normalizer, (const unsigned char *)sym, n, &normed, &n)) < 0)
                    goto out;
                sym = (const char *)normed;
            }
        } else {
            const struct bpe_symtab_slot *sl = bpe_symtab_by_id(vocab, id);
            if (!sl)
                continue;
            sym = vocab->text + sl->off;
            n = sl->len;
            t->tok_flags[id] = BPE_TOK_PRESENT;
        }
        rc = bpe_decoder_token(dec, &sc, false, sym, n, &buf, &len, &cap);
        if (rc == 0 && dec->first_differs)
            rc = bpe_first_add(t, dec, &sc, id, sym, n, buf + t->tok_off[id], len - t->tok_off[id],
                               &first_cap, &first_bcap);
        free(normed);
        if (rc < 0)
            goto out;
        if (len > UINT32_MAX) {
            rc = err_set(ERR_FORMAT, "%s: the vocabulary spells more than 4 GiB of symbols",
                         vocab_name);
            goto out;
        }
        size_t tl = len - t->tok_off[id];
        t->max_tok_len = tl > t->max_tok_len ? tl : t->max_tok_len;
    }
    t->tok_off[n_ids] = (uint32_t)len;
    t->tok_bytes = buf ? buf : malloc(1);
    buf = NULL;
    if (!t->tok_bytes)
        goto nomem;

    if (t->byte_level) {
        /* The single-byte tokens every word starts from. */
        for (int b = 0; b < 256; b++) {
            unsigned char sym[4];
            size_t sl = utf8_encode_one(byte_level_cp((unsigned char)b), sym);
            t->byte_id[b] = bpe_symtab_get(vocab, (const char *)sym, sl);
            if (t->byte_id[b] < 0) {
                rc = err_set(ERR_FORMAT,
                             "%s: byte-level symbol '%.*s' (byte 0x%02x) is missing; not a GPT-2 "
                             "byte-level vocabulary",
                             vocab_name, (int)sl, (const char *)sym, b);
                goto out;
            }
        }
    } else {
        /* Byte fallback's <0xNN> tokens, as Hugging Face spells them. */
        for (int b = 0; b < 256; b++) {
            char sym[8];
            snprintf(sym, sizeof(sym), "<0x%02X>", b);
            t->fallback_id[b] = bpe_symtab_get(vocab, sym, 6);
        }
    }
    goto out;

nomem:
    rc = err_set(ERR_NOMEM, "%s: out of memory for a vocabulary of %d ids", vocab_name, n_ids);
out:
    bpe_dec_scratch_free(&sc);
    free(buf);
    free(added_of);
    return rc;
}
