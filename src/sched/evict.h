/* Victim choice by least recent use: the one loop that picks which resident
 * model leaves, for every caller that picks that way (the engine's policies
 * where they evict by recency, swap_load_lru for callers without an engine,
 * the host tier dropping host copies). Pure functions of a snapshot the
 * caller builds; nothing here moves memory.
 *
 * The caller states who may go (evictable: resident, idle, not pinned, not
 * already chosen: its rules); these functions only order by last use and
 * count room. Ties go to the lower index, so a choice is reproducible.
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
/* Victim v leaves: its bytes become free, it no longer counts as resident. */
void evict_room_take(struct evict_room *r, const struct evict_model *v);

/* Takes least recently used evictable models until need fits room: writes
 * their indices to out (at most max_out), marks each one not evictable in m
 * and updates room. With useful_only, while the count fits but the bytes do
 * not, only a model that frees bytes on a device where need lacks room is
 * taken. Returns how many were taken (0: it fits already), or ERR_BUSY when
 * nothing more may go or max_out is reached before it fits; m, room and out
 * then hold the victims taken so far. */
int evict_lru_until_fit(struct evict_model *m, int n, const uint64_t *need, struct evict_room *room,
                        bool useful_only, int *out, int max_out);

#endif
