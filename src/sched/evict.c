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
    r->resident--;
}

int evict_lru_until_fit(struct evict_model *m, int n, const uint64_t *need, struct evict_room *room,
                        bool useful_only, int *out, int max_out)
{
    int taken = 0;
    while (!evict_room_fits(room, need)) {
        bool lacking[EVICT_MAX_DEVICES];
        bool by_bytes =
            useful_only && (room->max_resident <= 0 || room->resident < room->max_resident);
        for (int d = 0; by_bytes && d < room->n_devices; d++)
            lacking[d] = need[d] > room->free_bytes[d];
        int v = taken < max_out ? lru_min(m, n, by_bytes ? lacking : NULL, room->n_devices) : -1;
        if (v < 0)
            return ERR_BUSY;
        m[v].evictable = false;
        evict_room_take(room, &m[v]);
        out[taken++] = v;
    }
    return taken;
}
