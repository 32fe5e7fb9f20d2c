#include "engine/sched.h"

#include <stddef.h>
#include <string.h>

#include "core/error.h"

/* The waiting model with the oldest queue head among those `want` accepts. */
static int oldest_head(const struct sched_view *v, bool (*want)(const struct sched_model *))
{
    int best = -1;
    for (int i = 0; i < v->n_models; i++) {
        const struct sched_model *m = &v->models[i];
        if (m->queue_len > 0 && want(m) &&
            (best < 0 || m->head_arrival < v->models[best].head_arrival))
            best = i;
    }
    return best;
}

static bool any_model(const struct sched_model *m)
{
    (void)m;
    return true;
}

static bool not_resident(const struct sched_model *m)
{
    return !m->resident;
}

/* Frees the victim's bytes in a scratch copy of the free bytes. */
static void free_victim(const struct sched_view *v, int victim, uint64_t *free_bytes)
{
    for (int d = 0; d < v->n_devices; d++)
        free_bytes[d] += v->models[victim].bytes[d];
}

static bool fits_in(const struct sched_view *v, int m, const uint64_t *free_bytes)
{
    for (int d = 0; d < v->n_devices; d++)
        if (v->models[m].bytes[d] > free_bytes[d])
            return false;
    return true;
}

/* ---- computron: Computron's engine ----
 * Every model shares one pipeline of workers that runs one operation at a
 * time (a load, an offload, a batch), so nothing is decided while one is in
 * progress. Serve the model whose queue head is oldest; if it is not resident
 * and max_loaded models are, offload the least recently used one and start the
 * load in the same step (the load does not wait for the offload); the batch
 * follows once the load is done. max_loaded counts models, not bytes (bytes
 * are checked too, so memory can never overflow). */
static int computron_decide(const struct sched_view *v, struct sched_action *out, int max)
{
    if (max < 1 || v->any_loading || v->any_running)
        return 0;
    int m = oldest_head(v, any_model);
    if (m < 0)
        return 0;
    if (v->models[m].resident) {
        out[0] = (struct sched_action){.kind = SCHED_SERVE, .model = m};
        return 1;
    }
    struct sched_action a = {.kind = SCHED_LOAD, .model = m};
    uint64_t free_bytes[SCHED_MAX_DEVICES];
    memcpy(free_bytes, v->free_bytes, sizeof(free_bytes));
    int resident = 0;
    for (int i = 0; i < v->n_models; i++)
        resident += v->models[i].resident;
    bool chosen[SCHED_MAX_MODELS] = {false};
    while ((v->max_loaded > 0 && resident >= v->max_loaded) || !fits_in(v, m, free_bytes)) {
        int lru = -1;
        for (int i = 0; i < v->n_models; i++) {
            const struct sched_model *c = &v->models[i];
            if (c->resident && !c->pinned && !chosen[i] &&
                (lru < 0 || c->last_used < v->models[lru].last_used))
                lru = i;
        }
        if (lru < 0 || a.n_victims == SCHED_MAX_VICTIMS)
            return 0; /* nothing can go: wait */
        chosen[lru] = true;
        a.victims[a.n_victims++] = lru;
        free_victim(v, lru, free_bytes);
        resident--;
    }
    out[0] = a;
    return 1;
}

/* ---- swapwise: the default ----
 * - Batches go in queue-head order to resident models, one at a time per
 *   device, also while another model loads (the copy engine and the compute
 *   overlap) and while the model's own load is still arriving (layers
 *   overlap): Computron instead stops everything for a load.
 * - One load at a time (loads share the memory links): the waiting model
 *   whose queue head is oldest, so no model starves.
 * - Room is made by byte budgets, taking victims in this order: idle models
 *   with nothing queued (least recently used first); then, only when the
 *   model to load holds the oldest request of all, idle models with younger
 *   requests. A model with a batch in flight is never evicted, and a model
 *   chosen to go gets no new batch, so it becomes idle at its batch's end. */
static bool victim_ok(const struct sched_model *c)
{
    return c->resident && !c->loading && !c->running && !c->pinned && !c->offload_pending;
}

static int swapwise_decide(const struct sched_view *v, struct sched_action *out, int max)
{
    int n = 0;
    int load = v->any_loading ? -1 : oldest_head(v, not_resident);
    int oldest = oldest_head(v, any_model);
    struct sched_action a = {.kind = SCHED_LOAD, .model = load};
    bool chosen[SCHED_MAX_MODELS] = {false};
    bool need = false;
    if (load >= 0) {
        uint64_t free_bytes[SCHED_MAX_DEVICES];
        memcpy(free_bytes, v->free_bytes, sizeof(free_bytes));
        int resident = 0;
        for (int i = 0; i < v->n_models; i++)
            resident += v->models[i].resident;
        for (int pass = 0; pass < 2; pass++) {
            /* pass 0: idle with an empty queue; pass 1: idle with requests younger than ours */
            if (pass == 1 && load != oldest)
                break;
            while ((v->max_loaded > 0 && resident >= v->max_loaded) ||
                   !fits_in(v, load, free_bytes)) {
                int pick = -1;
                for (int i = 0; i < v->n_models; i++) {
                    const struct sched_model *c = &v->models[i];
                    if (chosen[i] || !victim_ok(c) || (pass == 0 && c->queue_len > 0))
                        continue;
                    if (pass == 1 && c->head_arrival < v->models[load].head_arrival)
                        continue;
                    if (pick < 0 || c->last_used < v->models[pick].last_used)
                        pick = i;
                }
                if (pick < 0 || a.n_victims == SCHED_MAX_VICTIMS)
                    break;
                chosen[pick] = true;
                a.victims[a.n_victims++] = pick;
                free_victim(v, pick, free_bytes);
                resident--;
            }
        }
        need = (v->max_loaded > 0 && resident >= v->max_loaded) || !fits_in(v, load, free_bytes);
        if (!need && n < max)
            out[n++] = a;
    }
    /* Batches for resident models, oldest queue head first, at most one at a
     * time on any device: two batches sharing devices only slow each other
     * (processor sharing), while in queue order the oldest request finishes
     * first. A loading model qualifies: its layers overlap the load. When the
     * load still lacks room and holds the oldest request, models that could
     * make room for it get no new batch: they go idle and are evicted next. */
    bool busy[SCHED_MAX_DEVICES] = {false};
    for (int i = 0; i < v->n_models; i++)
        for (int d = 0; d < v->n_devices; d++)
            if (v->models[i].running && v->models[i].bytes[d] > 0)
                busy[d] = true;
    bool served[SCHED_MAX_MODELS] = {false};
    while (n < max) {
        int pick = -1;
        for (int i = 0; i < v->n_models; i++) {
            const struct sched_model *c = &v->models[i];
            if (served[i] || c->queue_len == 0 || !c->resident || c->running ||
                c->offload_pending || chosen[i] || (c->loading && !v->overlap_loads))
                continue;
            if (need && load == oldest && !c->pinned && !c->loading &&
                c->head_arrival > v->models[load].head_arrival)
                continue;
            bool free_devs = true;
            for (int d = 0; d < v->n_devices && free_devs; d++)
                free_devs = !(busy[d] && c->bytes[d] > 0);
            if (free_devs && (pick < 0 || c->head_arrival < v->models[pick].head_arrival))
                pick = i;
        }
        if (pick < 0)
            break;
        served[pick] = true;
        for (int d = 0; d < v->n_devices; d++)
            busy[d] |= v->models[pick].bytes[d] > 0;
        out[n++] = (struct sched_action){.kind = SCHED_SERVE, .model = pick};
    }
    return n;
}

static const struct sched_policy policies[] = {
    {.name = "swapwise",
     .help = "byte budgets; serve resident models while one loads; evict idle models with "
             "empty queues first; one load at a time, oldest request first",
     .decide = swapwise_decide,
     .batch_same_params_only = false},
    {.name = "computron",
     .help = "Computron's engine: one operation at a time, oldest queue head first, evict the "
             "least recently used of max_loaded models",
     .decide = computron_decide,
     .batch_same_params_only = true},
};

const struct sched_policy *sched_policy_find(const char *name)
{
    for (size_t i = 0; i < sizeof(policies) / sizeof(policies[0]); i++)
        if (strcmp(policies[i].name, name) == 0)
            return &policies[i];
    err_set(ERR_INVALID, "unknown scheduling policy \"%s\" (expected %s)", name,
            sched_policy_names());
    return NULL;
}

const char *sched_policy_names(void)
{
    return "swapwise|computron";
}

const char *sched_policy_default(void)
{
    return "swapwise";
}
