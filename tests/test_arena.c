/* The arena: first fit and coalescing against a reference bitmap of
 * 64-byte units under random allocations and frees, and arena_alloc_at, the
 * placement a process makes for another process's arena (backend/view):
 * exact ranges inside, at either end of and filling a free block; refused
 * over used or outside space; and a replica fed every placement of a
 * first-fit arena at its offsets stays identical to it (largest free block,
 * free blocks) through a random history. */
#include <stdint.h>
#include <string.h>

#include "backend/arena.h"
#include "core/error.h"
#include "test.h"

#define U ARENA_ALIGN
#define UNITS 512

TEST(alloc_at_ranges)
{
    struct arena a;
    CHECK(arena_init(&a, UNITS * U) == 0);
    CHECK(arena_alloc_at(&a, 10 * U, 5 * U) == 0); /* inside: two pieces around it */
    CHECK(arena_free_blocks(&a) == 2);
    CHECK(arena_largest_free(&a) == (UNITS - 15) * U);
    CHECK(arena_alloc_at(&a, 12 * U, U) == ERR_NOMEM);              /* in use */
    CHECK(arena_alloc_at(&a, 8 * U, 3 * U) == ERR_NOMEM);           /* overlaps its start */
    CHECK(arena_alloc_at(&a, 14 * U, 2 * U) == ERR_NOMEM);          /* overlaps its end */
    CHECK(arena_alloc_at(&a, (UNITS - 1) * U, 2 * U) == ERR_NOMEM); /* past the end */
    CHECK(arena_alloc_at(&a, 0, 10 * U) == 0);                      /* a whole free block */
    CHECK(arena_free_blocks(&a) == 1);
    CHECK(arena_alloc_at(&a, 15 * U, U) == 0);          /* at a block's start */
    CHECK(arena_alloc_at(&a, (UNITS - 1) * U, U) == 0); /* at its end */
    CHECK(arena_largest_free(&a) == (UNITS - 17) * U);
    uint64_t off = 0;
    CHECK(arena_alloc(&a, 2 * U, &off) == 0 && off == 16 * U); /* first fit goes on */
    arena_free(&a, 10 * U, 5 * U);
    arena_free(&a, 0, 10 * U);
    arena_free(&a, 15 * U, U);
    arena_free(&a, 16 * U, 2 * U);
    arena_free(&a, (UNITS - 1) * U, U);
    CHECK(arena_free_blocks(&a) == 1 && arena_largest_free(&a) == UNITS * U); /* all coalesced */
    arena_destroy(&a);
}

/* The reference: which units are used; largest free run and runs. */
static void bitmap_stats(const uint8_t *used, uint64_t *largest, size_t *runs)
{
    *largest = 0;
    *runs = 0;
    for (int i = 0; i < UNITS;) {
        if (used[i]) {
            i++;
            continue;
        }
        int j = i;
        while (j < UNITS && !used[j])
            j++;
        (*runs)++;
        if ((uint64_t)(j - i) * U > *largest)
            *largest = (uint64_t)(j - i) * U;
        i = j;
    }
}

TEST(random_history_and_replica)
{
    struct arena a, replica;
    CHECK(arena_init(&a, UNITS * U) == 0);
    CHECK(arena_init(&replica, UNITS * U) == 0);
    uint8_t used[UNITS] = {0};
    struct {
        uint64_t off, units;
    } live[UNITS];
    int n_live = 0, bad = 0;
    uint32_t x = 12345;
    for (int step = 0; step < 20000; step++) {
        x = x * 1664525u + 1013904223u;
        if (n_live > 0 && (x >> 28) < 7) { /* free a random live block on both */
            int k = (int)((x >> 8) % (uint32_t)n_live);
            arena_free(&a, live[k].off, live[k].units * U);
            arena_free(&replica, live[k].off, live[k].units * U);
            memset(used + live[k].off / U, 0, live[k].units);
            live[k] = live[--n_live];
        } else {
            uint64_t units = 1 + (x >> 8) % 24, off;
            int rc = arena_alloc(&a, units * U, &off);
            if (rc == 0) {
                for (uint64_t u = 0; u < units; u++)
                    bad += used[off / U + u]; /* handed out twice */
                memset(used + off / U, 1, units);
                bad += arena_alloc_at(&replica, off, units * U) != 0;
                live[n_live].off = off;
                live[n_live++].units = units;
            }
        }
        uint64_t largest;
        size_t runs;
        bitmap_stats(used, &largest, &runs);
        bad += arena_largest_free(&a) != largest || arena_free_blocks(&a) != runs;
        bad += arena_largest_free(&replica) != largest || arena_free_blocks(&replica) != runs;
    }
    CHECK_MSG(bad == 0, "%d steps where an arena and the bitmap disagree", bad);
    while (n_live > 0) {
        n_live--;
        arena_free(&a, live[n_live].off, live[n_live].units * U);
        arena_free(&replica, live[n_live].off, live[n_live].units * U);
    }
    CHECK(arena_free_blocks(&replica) == 1 && arena_largest_free(&replica) == UNITS * U);
    arena_destroy(&a);
    arena_destroy(&replica);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
