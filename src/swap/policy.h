/* Eviction policies: which resident model leaves to make room for one that
 * must load. A policy sees a snapshot of the residency state and answers one
 * victim at a time; the swap manager offloads it, updates the snapshot and
 * asks again until the incoming model fits.
 *
 * Rules every policy obeys (the manager also enforces them): a model with
 * work in flight, a model being loaded or offloaded, and a pinned model are
 * never chosen.
 */
#ifndef SHARDSWAP_SWAP_POLICY_H
#define SHARDSWAP_SWAP_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#define EVICT_MAX_DEVICES 64

struct evict_model {
    bool resident;       /* on its devices, or loading there */
    bool busy;           /* work in flight, loading or offloading: untouchable */
    bool pinned;         /* never evicted */
    uint64_t last_used;  /* logical clock of the last use; lower = older */
    uint64_t bytes[EVICT_MAX_DEVICES]; /* device bytes it holds (resident) or needs */
};

struct evict_view {
    int n_models, n_devices;
    struct evict_model *models;
    uint64_t free_bytes[EVICT_MAX_DEVICES]; /* budget - used, per device */
    int max_loaded;                         /* lru-count's limit */
};

struct evict_policy {
    const char *name;
    const char *help;
    /* The next victim for `incoming`: a model index, -1 when it fits already,
     * or ERR_BUSY when it does not fit and nothing may be evicted. */
    int (*pick)(const struct evict_view *v, int incoming);
};

/* "lru-count" (Computron: at most max_loaded models resident, evict the least
 * recently used; bytes are checked too, since memory is finite) or
 * "lru-bytes" (evict least recently used models only until the incoming
 * model's bytes fit on each of its devices). NULL and a message when unknown. */
const struct evict_policy *evict_policy_find(const char *name);
const char *evict_policy_names(void); /* "lru-count|lru-bytes" */

/* True when incoming's bytes fit in the free bytes of every device. */
bool evict_fits(const struct evict_view *v, int incoming);

#endif
