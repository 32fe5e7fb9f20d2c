/* Applying BPE merges to one pre-tokenized word.
 *
 * A word starts as one symbol per byte (byte-level) or per character
 * (SentencePiece-style, with byte fallback and unk). The adjacent pair with the lowest
 * merge rank is merged, the leftmost first on a tie, until no adjacent pair
 * has a merge: GPT-2's rule. Symbols form a linked list over an array and
 * candidate pairs sit in a min-heap keyed by (rank, position), so a word of n
 * bytes costs O(n log n) rather than a rescan per merge. A candidate is stale
 * when either of its symbols has changed since it was pushed; stale ones are
 * dropped when popped.
 */
#include "core/error.h"
#include "tokenizer/bpe_impl.h"

#include <stdlib.h>
#include <string.h>

struct bpe_merge_sym {
    int32_t id;   /* -1 once merged into its left neighbour */
    int32_t prev; /* index of the previous live symbol, -1 at the start */
    int32_t next; /* index of the next live symbol, -1 at the end */
};

struct bpe_merge_cand {
    int32_t rank;
    int32_t pos;  /* index of the left symbol */
    int32_t a, b; /* ids the pair had when pushed */
    int32_t merged;
};

/* ---- pair table ---- */

static size_t bpe_pairs_hash(uint64_t key, size_t mask)
{
    key ^= key >> 29;
    key *= 0x9E3779B97F4A7C15ULL;
    key ^= key >> 32;
    return (size_t)key & mask;
}

int bpe_pairs_init(struct bpe_pairs *p, size_t expected)
{
    size_t cap = 16;
    while (cap < expected * 2)
        cap *= 2;
    p->slots = malloc(cap * sizeof(*p->slots));
    if (!p->slots)
        return err_set(ERR_NOMEM, "out of memory for a merge table of %zu pairs", expected);
    for (size_t i = 0; i < cap; i++)
        p->slots[i].key = BPE_PAIR_EMPTY;
    p->mask = cap - 1;
    p->n = 0;
    return 0;
}

void bpe_pairs_free(struct bpe_pairs *p)
{
    free(p->slots);
    p->slots = NULL;
    p->mask = p->n = 0;
}

void bpe_pairs_put(struct bpe_pairs *p, int32_t a, int32_t b, int32_t rank, int32_t merged)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t i = bpe_pairs_hash(key, p->mask);
    while (p->slots[i].key != BPE_PAIR_EMPTY && p->slots[i].key != key)
        i = (i + 1) & p->mask;
    if (p->slots[i].key == BPE_PAIR_EMPTY)
        p->n++;
    /* A repeated pair keeps its last rank, as both GPT-2 and Hugging Face do. */
    p->slots[i] = (struct bpe_pair){.key = key, .rank = rank, .merged = merged};
}

const struct bpe_pair *bpe_pairs_get(const struct bpe_pairs *p, int32_t a, int32_t b)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t i = bpe_pairs_hash(key, p->mask);
    for (;;) {
        const struct bpe_pair *s = &p->slots[i];
        if (s->key == key)
            return s;
        if (s->key == BPE_PAIR_EMPTY)
            return NULL;
        i = (i + 1) & p->mask;
    }
}

/* ---- candidate heap ---- */

static bool bpe_cand_less(const struct bpe_merge_cand *x, const struct bpe_merge_cand *y)
{
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static void bpe_heap_push(struct bpe_merge_cand *h, size_t *n, struct bpe_merge_cand c)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bpe_cand_less(&c, &h[parent]))
            break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = c;
}

static struct bpe_merge_cand bpe_heap_pop(struct bpe_merge_cand *h, size_t *n)
{
    struct bpe_merge_cand top = h[0];
    struct bpe_merge_cand last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= *n)
            break;
        if (child + 1 < *n && bpe_cand_less(&h[child + 1], &h[child]))
            child++;
        if (!bpe_cand_less(&h[child], &last))
            break;
        h[i] = h[child];
        i = child;
    }
    if (*n > 0)
        h[i] = last;
    return top;
}

/* Pushes the pair starting at symbol pos when it has a merge. */
static void bpe_cand_push(const struct bpe *t, struct bpe_merge_work *w, size_t *n_heap,
                          int32_t pos)
{
    int32_t next = w->sym[pos].next;
    if (next < 0)
        return;
    int32_t a = w->sym[pos].id, b = w->sym[next].id;
    const struct bpe_pair *pr = bpe_pairs_get(&t->pairs, a, b);
    if (pr)
        bpe_heap_push(w->heap, n_heap,
                      (struct bpe_merge_cand){
                          .rank = pr->rank, .pos = pos, .a = a, .b = b, .merged = pr->merged});
}

void bpe_merge_work_free(struct bpe_merge_work *w)
{
    free(w->sym);
    free(w->heap);
    free(w->key);
    w->sym = NULL;
    w->heap = NULL;
    w->key = NULL;
    w->sym_cap = w->heap_cap = w->key_cap = 0;
}

/* Grows the scratch arrays for a word of n bytes. Every merge pushes at most
 * two candidates and removes a symbol, so 3n candidates always fit. */
static int bpe_merge_work_reserve(struct bpe_merge_work *w, size_t n)
{
    if (n > INT32_MAX / 4)
        return err_set(ERR_INVALID, "a single word of %zu bytes is too long to encode", n);
    if (w->sym_cap < n) {
        struct bpe_merge_sym *s = realloc(w->sym, n * sizeof(*s));
        if (!s)
            return err_set(ERR_NOMEM, "out of memory merging a word of %zu bytes", n);
        w->sym = s;
        w->sym_cap = n;
    }
    if (w->heap_cap < 3 * n) {
        struct bpe_merge_cand *h = realloc(w->heap, 3 * n * sizeof(*h));
        if (!h)
            return err_set(ERR_NOMEM, "out of memory merging a word of %zu bytes", n);
        w->heap = h;
        w->heap_cap = 3 * n;
    }
    return 0;
}

/* The id of the whole word when ignore_merges says a word that is a symbol
 * stays one token; -1 otherwise. */
static int32_t bpe_whole_word(const struct bpe *t, struct bpe_merge_work *w,
                              const unsigned char *word, size_t n)
{
    if (!t->byte_level)
        return bpe_symtab_get(t->syms, (const char *)word, n);
    if (w->key_cap < 2 * n) { /* each byte's symbol is at most U+0143: two bytes */
        char *k = realloc(w->key, 2 * n);
        if (!k)
            return -1; /* merging gives the same ids, only slower */
        w->key = k;
        w->key_cap = 2 * n;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        o += utf8_encode_one(byte_level_cp(word[i]), (unsigned char *)w->key + o);
    return bpe_symtab_get(t->syms, w->key, o);
}

/* Fills sym[] with the word's first symbols, SentencePiece-style: one per
 * character that has a symbol; else its <0xNN> bytes (byte_fallback); else
 * the unk token, one for a run of them with fuse_unk; else nothing, as
 * Hugging Face drops it. Returns the number of symbols. */
static size_t bpe_char_symbols(const struct bpe *t, struct bpe_merge_sym *sym,
                               const unsigned char *word, size_t n)
{
    size_t m = 0;
    bool prev_unk = false;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = utf8_decode_one(word + i, n - i, &cp);
        len = len ? len : 1; /* a byte that is not UTF-8 goes alone */
        int32_t id = bpe_symtab_get(t->syms, (const char *)word + i, len);
        if (id >= 0) {
            sym[m++].id = id;
            prev_unk = false;
        } else {
            bool fell_back = t->byte_fallback;
            for (size_t k = 0; fell_back && k < len; k++)
                fell_back = t->fallback_id[word[i + k]] >= 0;
            if (fell_back) {
                for (size_t k = 0; k < len; k++)
                    sym[m++].id = t->fallback_id[word[i + k]];
                prev_unk = false;
            } else if (t->model_unk >= 0) {
                if (!(t->fuse_unk && prev_unk))
                    sym[m++].id = t->model_unk;
                prev_unk = true;
            }
        }
        i += len;
    }
    return m;
}

/* Merges one piece of a word (n > 0 bytes) into out; returns the count. */
static int bpe_merge_piece(const struct bpe *t, struct bpe_merge_work *w, const unsigned char *word,
                           size_t n, int32_t *out)
{
    int rc = bpe_merge_work_reserve(w, n);
    if (rc < 0)
        return rc;

    /* The first symbols, linked, and the candidate merges between them. */
    struct bpe_merge_sym *sym = w->sym;
    size_t m = n;
    if (t->byte_level) {
        for (size_t i = 0; i < n; i++)
            sym[i].id = t->byte_id[word[i]];
    } else {
        m = bpe_char_symbols(t, sym, word, n);
        if (m == 0)
            return 0;
    }
    for (size_t i = 0; i < m; i++) {
        sym[i].prev = (int32_t)i - 1;
        sym[i].next = i + 1 < m ? (int32_t)i + 1 : -1;
    }
    size_t n_heap = 0;
    for (size_t i = 0; i + 1 < m; i++)
        bpe_cand_push(t, w, &n_heap, (int32_t)i);

    /* Merge the best live candidate until none is left. */
    while (n_heap > 0) {
        struct bpe_merge_cand c = bpe_heap_pop(w->heap, &n_heap);
        struct bpe_merge_sym *left = &sym[c.pos];
        if (left->id != c.a || left->next < 0 || sym[left->next].id != c.b)
            continue; /* stale */
        int32_t gone = left->next;
        left->id = c.merged;
        left->next = sym[gone].next;
        if (left->next >= 0)
            sym[left->next].prev = c.pos;
        sym[gone].id = -1;
        if (left->prev >= 0)
            bpe_cand_push(t, w, &n_heap, left->prev);
        bpe_cand_push(t, w, &n_heap, c.pos);
    }

    int n_out = 0;
    for (int32_t i = 0; i >= 0; i = sym[i].next)
        out[n_out++] = sym[i].id;
    return n_out;
}

int bpe_merge_word(const struct bpe *t, struct bpe_merge_work *w, const unsigned char *word,
                   size_t n, int32_t *out)
{
    if (t->byte_level && n == 1) {
        out[0] = t->byte_id[word[0]];
        return 1;
    }
    if (t->ignore_merges) {
        int32_t id = bpe_whole_word(t, w, word, n);
        if (id >= 0) {
            out[0] = id;
            return 1;
        }
    }
    size_t c = t->split_len;
    if (c == 0)
        return bpe_merge_piece(t, w, word, n, out);
    /* No symbol has the split character after another one (bpe_split_check),
     * so no merge crosses a point where it follows another character: the
     * pieces between such points merge alone, each with a small heap. */
    int total = 0;
    size_t start = 0;
    for (size_t i = 1; i + c <= n; i++) {
        if (memcmp(word + i, t->split_char, c) != 0 ||
            (i >= c && memcmp(word + i - c, t->split_char, c) == 0))
            continue;
        int got = bpe_merge_piece(t, w, word + start, i - start, out + total);
        if (got < 0)
            return got;
        total += got;
        start = i;
    }
    int got = bpe_merge_piece(t, w, word + start, n - start, out + total);
    return got < 0 ? got : total + got;
}

void bpe_split_check(struct bpe *t, const char *c, size_t n)
{
    t->split_len = 0;
    if (!c || n == 0 || n > 4 || t->byte_level || bpe_symtab_get(t->syms, c, n) < 0)
        return;
    const struct bpe_symtab *st = t->syms;
    for (size_t i = 0; i <= st->mask; i++) {
        const struct bpe_symtab_slot *sl = &st->slots[i];
        if (sl->id < 0)
            continue;
        const char *sym = st->text + sl->off;
        size_t k = 0;
        while (k + n <= sl->len && memcmp(sym + k, c, n) == 0)
            k += n; /* a leading run of c is fine */
        for (; k + n <= sl->len; k++) {
            if (memcmp(sym + k, c, n) == 0)
                return; /* c after another character: no splitting */
        }
    }
    memcpy(t->split_char, c, n);
    t->split_len = n;
}
