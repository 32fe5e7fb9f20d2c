/* A sub-allocator over a range of offsets [0, size): first fit over an
 * address-ordered free list, neighbours coalesced on free.
 *
 * It hands out offsets, not memory, and keeps its bookkeeping in malloc'd
 * nodes outside the managed range, so a stray write into device memory
 * cannot corrupt it, and the same allocator can carve up a device's memory
 * that the host cannot address. Costs are O(free blocks) per call, fine for
 * the few hundred allocations (one per layer shard) a device holds.
 *
 * Every offset and size is a multiple of ARENA_ALIGN. Not thread-safe: the
 * owner locks (the device lock does).
 */
#ifndef SHARDSWAP_BACKEND_ARENA_H
#define SHARDSWAP_BACKEND_ARENA_H

#include <stddef.h>
#include <stdint.h>

#define ARENA_ALIGN 64

struct arena_block; /* a free block */

struct arena {
    uint64_t size;            /* managed bytes, a multiple of ARENA_ALIGN */
    struct arena_block *free; /* free blocks by offset, never adjacent */
    size_t n_free;
    /* Nodes kept for arena_free, which must not fail: alloc makes sure there
     * is one per live allocation. */
    struct arena_block *spare;
    size_t n_spare;
    size_t n_live; /* live allocations */
};

/* Manages [0, size rounded down to ARENA_ALIGN). ERR_NOMEM (with a message)
 * when the first node cannot be allocated. */
int arena_init(struct arena *a, uint64_t size);
void arena_destroy(struct arena *a); /* frees the bookkeeping; NULL-safe */

/* bytes: a non-zero multiple of ARENA_ALIGN. Sets *off to the lowest offset
 * of the first free block that fits. ERR_NOMEM without a message when none
 * does (the caller knows what to say) or when a node cannot be malloc'd. */
int arena_alloc(struct arena *a, uint64_t bytes, uint64_t *off);
/* Allocates exactly [off, off + bytes) (multiples of ARENA_ALIGN): for a
 * process that carries out placements another process's arena chose (a
 * remote device's, backend/view). ERR_NOMEM without a message when some of
 * the range is not free, or a node cannot be malloc'd. */
int arena_alloc_at(struct arena *a, uint64_t off, uint64_t bytes);
/* Returns [off, off + bytes), exactly as allocated. Never fails; a double
 * free or a range that overlaps free space asserts. */
void arena_free(struct arena *a, uint64_t off, uint64_t bytes);

uint64_t arena_largest_free(const struct arena *a);
size_t arena_free_blocks(const struct arena *a);

#endif
