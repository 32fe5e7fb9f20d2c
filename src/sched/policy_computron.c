/* The computron policy: Computron's engine.
 * Every model shares one pipeline of workers that runs one operation at a
 * time (a load, an offload, a batch), so nothing is decided while one is in
 * progress. Serve the model whose queue head is oldest; if it is not resident
 * and max_loaded models are, offload the least recently used one (or as many
 * as make room, by recency, none the others make room without) and start the
 * load in the same step (the load does not wait for the offload); the batch
 * follows once the load is done. max_loaded counts models, not bytes (bytes
 * are checked too, so memory can never overflow). */
#include "sched/sched_impl.h"

int sched_computron_decide(const struct sched_view *v, struct sched_action *out, int max)
{
    if (max < 1 || v->any_loading || v->any_running)
        return 0;
    int m = sched_oldest_head(v, any_model);
    if (m < 0)
        return 0;
    if (v->models[m].resident) {
        out[0] = (struct sched_action){.kind = SCHED_SERVE, .model = m};
        return 1;
    }
    struct sched_action a = {.kind = SCHED_LOAD, .model = m};
    struct evict_model em[SCHED_MAX_MODELS];
    struct evict_room r;
    sched_evict_view(v, em);
    sched_room_of_view(v, &r);
    for (int i = 0; i < v->n_models; i++) {
        const struct sched_model *c = &v->models[i];
        em[i].evictable = i != m && (c->resident || partial(v, c)) && !c->pinned;
        r.resident += c->resident;
    }
    uint64_t need[SCHED_MAX_DEVICES];
    need_of(v, &v->models[m], need);
    int n = evict_lru_until_fit(em, v->n_models, need, &r, false, a.victims, SCHED_MAX_VICTIMS);
    if (n < 0)
        return 0; /* nothing can go: wait */
    a.n_victims = n;
    out[0] = a;
    return 1;
}

const struct sched_policy sched_policy_computron = {
    .name = "computron",
    .help = "Computron's engine: one operation at a time, oldest queue head first, evict the "
            "least recently used of max_loaded models",
    .decide = sched_computron_decide,
    .batch_same_params_only = true,
};
