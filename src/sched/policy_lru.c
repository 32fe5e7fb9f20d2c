/* The lru policy: an on-demand loader with a keep-alive (Ollama, ServerlessLLM).
 * A model is loaded when a request for it waits and it is not resident, one
 * load at a time, oldest request first (sched_goes_before), evicting idle models (resident, no
 * batch in flight, nothing queued, not pinned) least recently used first
 * until it fits, then, as Ollama does when none is idle, busy ones least
 * recently used first: one with a batch in flight leaves at its end (the load
 * waits for the room), its queued requests wait for its next load. A resident
 * model with nothing queued and no batch leaves once idle for its keep_alive
 * (SCHED_LRU_KEEP_ALIVE_S unless it has one) from the end of its last batch
 * (idle_since), at that moment and not before (a SCHED_WAKE asks for it). Resident models are
 * served as swapwise does: in sched_goes_before order, one batch per device. */
#include <math.h>

#include "sched/sched_impl.h"

/* Batches for resident models with requests (not loading, not leaving, no
 * batch in flight), in sched_goes_before order, one at a time on any device
 * (busy: devices taken already, updated), with skip[i] left out. Returns how
 * many actions it added to out[n..max). */
static int serve_resident(const struct sched_view *v, bool *busy, const bool *skip,
                          struct sched_action *out, int n, int max)
{
    bool served[SCHED_MAX_MODELS] = {false};
    int added = 0;
    while (n + added < max) {
        int pick = -1;
        for (int i = 0; i < v->n_models; i++) {
            const struct sched_model *c = &v->models[i];
            if (served[i] || (skip && skip[i]) || !servable(c, false) || c->loading ||
                !devices_free(v, c, busy))
                continue;
            if (pick < 0 || sched_goes_before(v, i, pick))
                pick = i;
        }
        if (pick < 0)
            break;
        served[pick] = true;
        for (int d = 0; !v->models[pick].apart && d < v->n_devices; d++)
            busy[d] |= v->models[pick].bytes[d] > 0;
        out[n + added++] = (struct sched_action){.kind = SCHED_SERVE, .model = pick};
    }
    return added;
}

/* The least recently used of m's evictable models, spare_young leaving out
 * those within their min_resident; -1 when none. */
static int lru_among(const struct sched_view *v, const struct evict_model *m, bool spare_young)
{
    int pick = -1;
    for (int i = 0; i < v->n_models; i++)
        if (m[i].evictable && !(spare_young && young(v, &v->models[i])) &&
            (pick < 0 || m[i].last_used < m[pick].last_used))
            pick = i;
    return pick;
}

/* lru's order (the victim loop's pick): idle models, then busy ones,
 * least recently used first, models within their min_resident last. */
struct lru_pick {
    const struct sched_view *v;
    struct evict_model *idle, *any;
};

static int lru_pick(void *ctx, const struct evict_room *room)
{
    struct lru_pick *p = ctx;
    int pick = -1;
    for (int pass = 0; pass < 4 && pick < 0; pass++)
        pick = lru_among(p->v, pass % 2 ? p->any : p->idle, pass < 2);
    if (pick >= 0)
        p->idle[pick].evictable = p->any[pick].evictable = false;
    return pick;
}

static int lru_decide(const struct sched_view *v, struct sched_action *out, int max)
{
    int n = 0;
    double wake = INFINITY;
    bool gone[SCHED_MAX_MODELS] = {false};
    n = sched_keep_alive_unloads(v, SCHED_LRU_KEEP_ALIVE_S, gone, out, n, max, &wake);
    /* batches first: a model served now is used now, the last to go */
    bool busy[SCHED_MAX_DEVICES] = {false}, served[SCHED_MAX_MODELS] = {false};
    for (int i = 0; i < v->n_models; i++)
        for (int d = 0; d < v->n_devices; d++)
            if (((v->models[i].running && !v->models[i].apart) ||
                 (!v->overlap_loads && v->models[i].loading)) &&
                v->models[i].bytes[d] > 0)
                busy[d] = true;
    int first = n;
    n += serve_resident(v, busy, gone, out, n, max);
    for (int k = first; k < n; k++)
        served[out[k].model] = true;
    int load = v->any_loading ? -1 : sched_first_waiting(v, not_resident);
    if (load >= 0 && n < max) {
        struct sched_action a = {.kind = SCHED_LOAD, .model = load};
        struct evict_model idle[SCHED_MAX_MODELS], any[SCHED_MAX_MODELS];
        struct evict_room r;
        sched_room_init(v, &r);
        for (int i = 0; i < v->n_models; i++)
            if (gone[i]) /* unloaded above */
                sched_room_free(v, &r, i);
        sched_evict_view(v, idle);
        sched_evict_view(v, any);
        for (int i = 0; i < v->n_models; i++) {
            idle[i].evictable = !gone[i] && !served[i] && idle_model(v, &v->models[i]);
            any[i].evictable = i != load && !gone[i] && evictable(v, &v->models[i]);
            if (served[i])
                any[i].last_used = v->now;
        }
        struct lru_pick p = {.v = v, .idle = idle, .any = any};
        int taken; /* else pinned or loading models hold the room: wait */
        if (sched_victims(v, load, &r, lru_pick, &p, &a, &taken) >= 0)
            out[n++] = a;
    }
    return sched_add_wake(v, out, n, max, wake);
}

const struct sched_policy sched_policy_lru = {
    .name = "lru",
    .help = "on-demand loader (Ollama, ServerlessLLM): load on a request, evict idle models "
            "least recently used first, unload one idle for 300 s (keep-alive)",
    .decide = lru_decide,
    .batch_same_params_only = false,
};
