/* Victim choice: the one loop that picks which resident models leave to make
 * room, for every caller (the scheduling policies, each in its own order;
 * swap_load_lru for callers without an engine, and the host tier dropping
 * host copies, by least recent use). Pure functions of a snapshot the caller
 * builds; nothing here moves memory.
 *
 * The caller states who may go (evictable: resident, idle, not pinned, not
 * already chosen: its rules) and in which order (a pick function, or least
 * recent use); the loop counts room, and once the victims make it, drops
 * every victim the others make room without, so that no model leaves when
 * the rest already make room. Ties go to the lower index, so a choice is
 * reproducible.
 */
#ifndef SHARDSWAP_SCHED_EVICT_H
#define SHARDSWAP_SCHED_EVICT_H

#include <stdbool.h>
#include <stdint.h>

#define EVICT_MAX_DEVICES 64

/* One model of the snapshot. */
struct evict_model {
    bool evictable;        /* may leave now, by the caller's rules */
    double last_used;      /* any clock; lower = older */
    const uint64_t *bytes; /* (n_devices) device bytes it holds; NULL when room is not counted */
    /* holds bytes but does not count toward max_resident (a partly
     * resident model): leaving frees its bytes, not a place */
    bool uncounted;
};

/* Room on the devices, updated as victims are taken. */
struct evict_room {
    int n_devices;
    uint64_t free_bytes[EVICT_MAX_DEVICES]; /* budget - used, per device */
    int resident;                           /* models resident */
    int max_resident;                       /* at most this many (0 = no count limit) */
};

/* The least recently used evictable model; -1 when none is. */
int evict_lru(const struct evict_model *m, int n);

/* True when need (n_devices bytes) fits the free bytes of every device and
 * one more model stays within max_resident. */
bool evict_room_fits(const struct evict_room *r, const uint64_t *need);
/* Victim v leaves: its bytes become free, it no longer counts as resident
 * (unless uncounted). */
void evict_room_take(struct evict_room *r, const struct evict_model *v);

/* The caller's next victim for evict_until_fit, in its own order: an index
 * of the snapshot not given before, or -1 when no other may go. room is as
 * the victims given so far leave it. */
typedef int (*evict_pick_fn)(void *ctx, const struct evict_room *room);

/* The victim loop. Takes the victims pick gives, in its order, until need
 * fits room (at most max_out), then drops every victim the others make
 * room without, testing the last taken first (the policy's earlier choices
 * are kept where either would do). On success out[0..n) are the victims
 * kept, in the order taken, out[n..*taken) the ones dropped (taken may be
 * NULL), room counts the kept ones gone, and n is returned (0: it fit
 * already). ERR_BUSY when pick gives -1 or max_out is reached before need
 * fits: out[0..*taken) are the victims taken, room counts them all. m: each
 * model's bytes and whether it counts toward max_resident. */
int evict_until_fit(const struct evict_model *m, const uint64_t *need, struct evict_room *room,
                    evict_pick_fn pick, void *ctx, int *out, int max_out, int *taken);

/* evict_until_fit by least recent use among m's evictable models: each
 * victim kept is marked not evictable in m. With useful_only, while the
 * count fits but the bytes do not, only a model that frees bytes on a
 * device where need lacks room is taken. Returns how many victims (0: it
 * fits already), or ERR_BUSY when nothing more may go or max_out is reached
 * before it fits; m, room and out then hold the victims taken so far. */
int evict_lru_until_fit(struct evict_model *m, int n, const uint64_t *need, struct evict_room *room,
                        bool useful_only, int *out, int max_out);

#endif
