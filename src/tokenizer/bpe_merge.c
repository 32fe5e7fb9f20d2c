/* Applying BPE merges to one pre-tokenized word.
 *
 * A word starts as one symbol per byte. The adjacent pair with the lowest
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
    w->sym = NULL;
    w->heap = NULL;
    w->sym_cap = w->heap_cap = 0;
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

int bpe_merge_word(const struct bpe *t, struct bpe_merge_work *w, const unsigned char *word,
                   size_t n, int32_t *out)
{
    if (n == 1) {
        out[0] = t->byte_id[word[0]];
        return 1;
    }
    int rc = bpe_merge_work_reserve(w, n);
    if (rc < 0)
        return rc;

    /* One symbol per byte, and the candidate merges between them. */
    struct bpe_merge_sym *sym = w->sym;
    for (size_t i = 0; i < n; i++) {
        sym[i].id = t->byte_id[word[i]];
        sym[i].prev = (int32_t)i - 1;
        sym[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    size_t n_heap = 0;
    for (size_t i = 0; i + 1 < n; i++)
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
