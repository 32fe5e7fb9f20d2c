#include "sched/evict.h"

#include <stddef.h>

#include "core/error.h"

/* The least recently used evictable model; with lacking (per device: need
 * lacks room there), only one that frees bytes on such a device. */
static int lru_min(const struct evict_model *m, int n, const bool *lacking, int n_devices)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (!m[i].evictable || (best >= 0 && m[i].last_used >= m[best].last_used))
            continue;
        bool helps = !lacking;
        for (int d = 0; !helps && d < n_devices; d++)
            helps = lacking[d] && m[i].bytes[d] > 0;
        if (helps)
            best = i;
    }
    return best;
}

int evict_lru(const struct evict_model *m, int n)
{
    return lru_min(m, n, NULL, 0);
}

static bool bytes_fit(const struct evict_room *r, const uint64_t *need)
{
    for (int d = 0; d < r->n_devices; d++)
        if (need[d] > r->free_bytes[d])
            return false;
    return true;
}

bool evict_room_fits(const struct evict_room *r, const uint64_t *need)
{
    return (r->max_resident <= 0 || r->resident < r->max_resident) && bytes_fit(r, need);
}

void evict_room_take(struct evict_room *r, const struct evict_model *v)
{
    for (int d = 0; v->bytes && d < r->n_devices; d++)
        r->free_bytes[d] += v->bytes[d];
    r->resident -= !v->uncounted;
}

/* Drops from out[0..n), taken in that order from room before until need
 * fit, every victim the others make room without, the last taken first;
 * the dropped ones go to out[kept..n) in their order. Returns kept; *after
 * is before with the kept victims gone. A dropped victim v is held as
 * -1 - v while the others are tested. */
static int prune(const struct evict_model *m, const struct evict_room *before, const uint64_t *need,
                 int *out, int n, struct evict_room *after)
{
    for (int k = n - 1; k >= 0; k--) {
        struct evict_room r = *before;
        int v = out[k];
        out[k] = -1 - v;
        for (int j = 0; j < n; j++)
            if (out[j] >= 0)
                evict_room_take(&r, &m[out[j]]);
        if (!evict_room_fits(&r, need))
            out[k] = v; /* the others do not make room without it */
    }
    int kept = 0;
    *after = *before;
    for (int k = 0; k < n; k++) {
        if (out[k] < 0)
            continue;
        int v = out[k]; /* to out[kept], the dropped ones between moving up one */
        for (int j = k; j > kept; j--)
            out[j] = out[j - 1];
        out[kept++] = v;
        evict_room_take(after, &m[v]);
    }
    for (int k = kept; k < n; k++)
        out[k] = -1 - out[k];
    return kept;
}

int evict_until_fit(const struct evict_model *m, const uint64_t *need, struct evict_room *room,
                    evict_pick_fn pick, void *ctx, int *out, int max_out, int *taken)
{
    struct evict_room before = *room;
    int n = 0;
    while (!evict_room_fits(room, need)) {
        int v = n < max_out ? pick(ctx, room) : -1;
        if (v < 0) {
            if (taken)
                *taken = n;
            return ERR_BUSY;
        }
        evict_room_take(room, &m[v]);
        out[n++] = v;
    }
    if (taken)
        *taken = n;
    return prune(m, &before, need, out, n, room);
}

/* evict_lru_until_fit's order. */
struct lru_pick {
    struct evict_model *m;
    int n;
    const uint64_t *need;
    bool useful_only;
};

static int lru_pick(void *ctx, const struct evict_room *room)
{
    struct lru_pick *p = ctx;
    bool lacking[EVICT_MAX_DEVICES];
    bool by_bytes =
        p->useful_only && (room->max_resident <= 0 || room->resident < room->max_resident);
    for (int d = 0; by_bytes && d < room->n_devices; d++)
        lacking[d] = p->need[d] > room->free_bytes[d];
    int v = lru_min(p->m, p->n, by_bytes ? lacking : NULL, room->n_devices);
    if (v >= 0)
        p->m[v].evictable = false;
    return v;
}

int evict_lru_until_fit(struct evict_model *m, int n, const uint64_t *need, struct evict_room *room,
                        bool useful_only, int *out, int max_out)
{
    struct lru_pick p = {.m = m, .n = n, .need = need, .useful_only = useful_only};
    int taken, kept = evict_until_fit(m, need, room, lru_pick, &p, out, max_out, &taken);
    for (int k = kept; k >= 0 && k < taken; k++)
        m[out[k]].evictable = true; /* dropped: it stays */
    return kept;
}
