#include "backend/arena.h"

#include <assert.h>
#include <stdbool.h>
#include <stdlib.h>

#include "core/error.h"

struct arena_block {
    uint64_t off, size;
    struct arena_block *next;
};

static struct arena_block *arena_node_get(struct arena *a)
{
    assert(a->spare && a->n_spare > 0);
    struct arena_block *n = a->spare;
    a->spare = n->next;
    a->n_spare--;
    return n;
}

static void arena_node_put(struct arena *a, struct arena_block *n)
{
    n->next = a->spare;
    a->spare = n;
    a->n_spare++;
}

int arena_init(struct arena *a, uint64_t size)
{
    *a = (struct arena){.size = size & ~(uint64_t)(ARENA_ALIGN - 1)};
    if (a->size == 0)
        return ERR_OK;
    struct arena_block *n = malloc(sizeof(*n));
    if (!n)
        return err_set(ERR_NOMEM, "arena: out of host memory for bookkeeping");
    *n = (struct arena_block){.off = 0, .size = a->size, .next = NULL};
    a->free = n;
    a->n_free = 1;
    return ERR_OK;
}

void arena_destroy(struct arena *a)
{
    if (!a)
        return;
    for (struct arena_block *n = a->free, *next; n; n = next) {
        next = n->next;
        free(n);
    }
    for (struct arena_block *n = a->spare, *next; n; n = next) {
        next = n->next;
        free(n);
    }
    *a = (struct arena){0};
}

int arena_alloc(struct arena *a, uint64_t bytes, uint64_t *off)
{
    assert(bytes > 0 && bytes % ARENA_ALIGN == 0);
    struct arena_block **link = &a->free;
    while (*link && (*link)->size < bytes)
        link = &(*link)->next;
    struct arena_block *b = *link;
    if (!b)
        return ERR_NOMEM;

    /* Keep a node for this allocation's free: reuse b when it is used up,
     * otherwise malloc one now, while failing is still allowed. */
    if (b->size == bytes) {
        *off = b->off;
        *link = b->next;
        a->n_free--;
        arena_node_put(a, b);
    } else {
        struct arena_block *n = malloc(sizeof(*n));
        if (!n)
            return ERR_NOMEM;
        arena_node_put(a, n);
        *off = b->off;
        b->off += bytes;
        b->size -= bytes;
    }
    a->n_live++;
    return ERR_OK;
}

int arena_alloc_at(struct arena *a, uint64_t off, uint64_t bytes)
{
    assert(bytes > 0 && bytes % ARENA_ALIGN == 0 && off % ARENA_ALIGN == 0);
    struct arena_block **link = &a->free;
    while (*link && (*link)->off + (*link)->size <= off)
        link = &(*link)->next;
    struct arena_block *b = *link;
    if (!b || b->off > off || bytes > b->off + b->size - off)
        return ERR_NOMEM; /* some of [off, off + bytes) is in use or outside */
    bool head = b->off < off, tail = off + bytes < b->off + b->size;

    /* Nodes first, while failing is still allowed: the free's spare (b
     * itself when the block is used up) and, when the range is inside the
     * block, one for the piece after it. */
    struct arena_block *spare = head || tail ? malloc(sizeof(*spare)) : b;
    struct arena_block *after = head && tail ? malloc(sizeof(*after)) : NULL;
    if (!spare || (head && tail && !after)) {
        if (spare != b)
            free(spare);
        free(after);
        return ERR_NOMEM;
    }
    uint64_t end = b->off + b->size;
    if (!head && !tail) {
        *link = b->next;
        a->n_free--;
    } else if (!head) {
        b->off = off + bytes;
        b->size = end - b->off;
    } else {
        b->size = off - b->off;
        if (tail) {
            *after = (struct arena_block){.off = off + bytes, .size = end - off - bytes,
                                          .next = b->next};
            b->next = after;
            a->n_free++;
        }
    }
    arena_node_put(a, spare);
    a->n_live++;
    return ERR_OK;
}

void arena_free(struct arena *a, uint64_t off, uint64_t bytes)
{
    assert(bytes > 0 && bytes % ARENA_ALIGN == 0 && off % ARENA_ALIGN == 0);
    assert(off <= a->size && bytes <= a->size - off);
    assert(a->n_live > 0);

    /* prev: the last free block before off; next: the first after it. */
    struct arena_block *prev = NULL, *next = a->free;
    while (next && next->off < off) {
        prev = next;
        next = next->next;
    }
    assert(!prev || prev->off + prev->size <= off); /* overlaps free space: a double free */
    assert(!next || off + bytes <= next->off);

    bool into_prev = prev && prev->off + prev->size == off;
    bool into_next = next && off + bytes == next->off;
    if (into_prev && into_next) {
        prev->size += bytes + next->size;
        prev->next = next->next;
        a->n_free--;
        arena_node_put(a, next);
    } else if (into_prev) {
        prev->size += bytes;
    } else if (into_next) {
        next->off = off;
        next->size += bytes;
    } else {
        struct arena_block *n = arena_node_get(a);
        *n = (struct arena_block){.off = off, .size = bytes, .next = next};
        if (prev)
            prev->next = n;
        else
            a->free = n;
        a->n_free++;
    }
    a->n_live--;

    /* One spare per live allocation is all a free can need. */
    while (a->n_spare > a->n_live)
        free(arena_node_get(a));
}

uint64_t arena_largest_free(const struct arena *a)
{
    uint64_t best = 0;
    for (const struct arena_block *n = a->free; n; n = n->next)
        if (n->size > best)
            best = n->size;
    return best;
}

size_t arena_free_blocks(const struct arena *a)
{
    return a->n_free;
}
