#include "swap/policy.h"

#include <stddef.h>
#include <string.h>

#include "core/error.h"

bool evict_fits(const struct evict_view *v, int incoming)
{
    const struct evict_model *in = &v->models[incoming];
    for (int d = 0; d < v->n_devices; d++)
        if (in->bytes[d] > v->free_bytes[d])
            return false;
    return true;
}

static bool evictable(const struct evict_view *v, int i, int incoming)
{
    const struct evict_model *m = &v->models[i];
    return i != incoming && m->resident && !m->busy && !m->pinned;
}

/* The least recently used evictable model; with `useful`, only one that frees
 * bytes on a device where incoming lacks room. */
static int lru_victim(const struct evict_view *v, int incoming, bool useful)
{
    int best = -1;
    for (int i = 0; i < v->n_models; i++) {
        if (!evictable(v, i, incoming))
            continue;
        if (useful) {
            bool helps = false;
            for (int d = 0; d < v->n_devices && !helps; d++)
                helps = v->models[incoming].bytes[d] > v->free_bytes[d] &&
                        v->models[i].bytes[d] > 0;
            if (!helps)
                continue;
        }
        if (best < 0 || v->models[i].last_used < v->models[best].last_used)
            best = i;
    }
    return best;
}

static int lru_bytes_pick(const struct evict_view *v, int incoming)
{
    if (evict_fits(v, incoming))
        return -1;
    int victim = lru_victim(v, incoming, true);
    return victim >= 0 ? victim : ERR_BUSY;
}

static int lru_count_pick(const struct evict_view *v, int incoming)
{
    int resident = 0;
    for (int i = 0; i < v->n_models; i++)
        resident += i != incoming && v->models[i].resident;
    if (resident >= v->max_loaded) {
        int victim = lru_victim(v, incoming, false);
        return victim >= 0 ? victim : ERR_BUSY;
    }
    return lru_bytes_pick(v, incoming);
}

static const struct evict_policy policies[] = {
    {.name = "lru-count",
     .help = "at most max_loaded models resident; evict the least recently used (Computron)",
     .pick = lru_count_pick},
    {.name = "lru-bytes",
     .help = "evict the least recently used models until the incoming one's bytes fit",
     .pick = lru_bytes_pick},
};

const struct evict_policy *evict_policy_find(const char *name)
{
    for (size_t i = 0; i < sizeof(policies) / sizeof(policies[0]); i++)
        if (strcmp(policies[i].name, name) == 0)
            return &policies[i];
    err_set(ERR_INVALID, "unknown eviction policy \"%s\" (expected %s)", name,
            evict_policy_names());
    return NULL;
}

const char *evict_policy_names(void)
{
    return "lru-count|lru-bytes";
}
