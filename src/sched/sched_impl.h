/* What the policies share (sched/policy_*.c, act.c, view.c): the view read
 * as each of them reads it, the room a load needs, the order of waiting
 * models, the victim loop, and the policies' entries for the registry
 * (policy.c). Internal to sched/; the public contract is sched.h. */
#ifndef SHARDSWAP_SCHED_SCHED_IMPL_H
#define SHARDSWAP_SCHED_SCHED_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "sched/evict.h"
#include "sched/sched.h"

_Static_assert(SCHED_MAX_DEVICES == EVICT_MAX_DEVICES, "sched_model.bytes feeds evict_model.bytes");

/* Filters for sched_oldest_head and sched_first_waiting. */
static inline bool any_model(const struct sched_model *m)
{
    (void)m;
    return true;
}

static inline bool not_resident(const struct sched_model *m)
{
    return !m->resident;
}

/* Of bytes, what c holds on each device now: a resident (or loading) model
 * all of its bytes, whatever resident_bytes says (views built by hand, or by
 * an engine without partial residency, leave it 0), else resident_bytes.
 * What an eviction of c frees. */
static inline const uint64_t *held_of(const struct sched_model *c)
{
    return c->resident ? c->bytes : c->resident_bytes;
}

/* Partly resident: not resident, and some of it still on a device. */
static inline bool partial(const struct sched_view *v, const struct sched_model *c)
{
    for (int d = 0; !c->resident && d < v->n_devices; d++)
        if (c->resident_bytes[d] > 0)
            return true;
    return false;
}

/* What a load of c needs on each device, into need: what it lacks there. */
static inline void need_of(const struct sched_view *v, const struct sched_model *c, uint64_t *need)
{
    const uint64_t *held = held_of(c);
    for (int d = 0; d < v->n_devices; d++)
        need[d] = c->bytes[d] > held[d] ? c->bytes[d] - held[d] : 0;
}

/* May be a victim: resident or partly resident (what a trim left must be
 * freed by someone), not loading, not pinned, not leaving already. */
static inline bool evictable(const struct sched_view *v, const struct sched_model *c)
{
    return (c->resident || partial(v, c)) && !c->loading && !c->pinned && !c->offload_pending;
}

/* None of c's devices is busy[] (a batch, or a load that takes compute, holds it). */
static inline bool devices_free(const struct sched_view *v, const struct sched_model *c,
                                const bool *busy)
{
    for (int d = 0; d < v->n_devices; d++)
        if (busy[d] && c->bytes[d] > 0)
            return false;
    return true;
}

/* Loaded less than its min_resident ago. */
static inline bool young(const struct sched_view *v, const struct sched_model *c)
{
    return c->min_resident > 0 && v->now - c->loaded_at < c->min_resident;
}

/* Has requests and could get a batch (not chosen to go, not running). */
static inline bool servable(const struct sched_model *c, bool chosen)
{
    return c->queue_len > 0 && c->resident && !c->running && !c->offload_pending && !chosen;
}

/* Resident, nothing queued, no batch in flight, not pinned, not leaving. */
static inline bool idle_model(const struct sched_view *v, const struct sched_model *c)
{
    return evictable(v, c) && !c->running && c->queue_len == 0;
}

/* ---- the view (view.c) ---- */

/* The waiting model with the oldest queue head among those `want` accepts;
 * -1 when none waits. */
int sched_oldest_head(const struct sched_view *v, bool (*want)(const struct sched_model *));
/* Whether i goes before j among waiting models (view.c says the order);
 * fuller_wait > 0 puts the fuller batch first until the older head has
 * waited that long. sched_goes_before: fuller_wait 0. */
bool sched_goes_before_by(const struct sched_view *v, int i, int j, double fuller_wait);
bool sched_goes_before(const struct sched_view *v, int i, int j);
/* The waiting model `want` accepts that goes first; -1 when none. */
int sched_first_waiting_by(const struct sched_view *v, bool (*want)(const struct sched_model *),
                           double fuller_wait);
int sched_first_waiting(const struct sched_view *v, bool (*want)(const struct sched_model *));
/* Appends a SCHED_WAKE at the earlier of wake and the next queue-wait
 * expiry to out[n..max) when there is one and room; returns the new n. */
int sched_add_wake(const struct sched_view *v, struct sched_action *out, int n, int max,
                   double wake);
/* Idle models past their keep-alive get a SCHED_UNLOAD each (view.c). */
int sched_keep_alive_unloads(const struct sched_view *v, double def, bool *gone,
                             struct sched_action *out, int n, int max, double *wake);

/* ---- room for a load (view.c) ---- */

/* The view as evict.h sees it: each model's held bytes and last use, none
 * evictable yet (the caller says who may go). em has v->n_models entries. */
void sched_evict_view(const struct sched_view *v, struct evict_model *em);
/* The devices' free bytes, no model counted resident, and max_loaded. */
void sched_room_of_view(const struct sched_view *v, struct evict_room *r);
/* sched_room_of_view once the models already leaving have left, the
 * resident ones counted. */
void sched_room_init(const struct sched_view *v, struct evict_room *r);
/* victim leaves: what it holds becomes free (a partly resident one never
 * counted toward max_loaded). */
void sched_room_free(const struct sched_view *v, struct evict_room *r, int victim);
/* Whether a load of m fits r (the bytes it lacks, and max_loaded). */
bool sched_room_for(const struct sched_view *v, const struct evict_room *r, int m);
/* The victim loop (evict_until_fit) for a load of m from room r, each
 * policy's pick giving its order: into a->victims and a->n_victims the
 * victims kept, every one needed (the dropped ones follow in
 * a->victims[a->n_victims..*taken), for the caller to release). Returns
 * a->n_victims, or ERR_BUSY when they do not make room (a->n_victims: all
 * taken, r counting them). */
int sched_victims(const struct sched_view *v, int m, struct evict_room *r, evict_pick_fn pick,
                  void *ctx, struct sched_action *a, int *taken);

/* ---- the policies (policy_*.c), for the registry and each other ---- */

int sched_computron_decide(const struct sched_view *v, struct sched_action *out, int max);
int sched_swapwise_decide(const struct sched_view *v, struct sched_action *out, int max);
/* swapwise's rules, with future the known next arrivals in place of the
 * forecast (clairvoyant), with trim each load trimming its victims. */
int sched_swapwise_run(const struct sched_view *v, struct sched_action *out, int max, bool future,
                       bool trim);

extern const struct sched_policy sched_policy_swapwise, sched_policy_swapwise_preempt,
    sched_policy_swapwise_partial, sched_policy_computron, sched_policy_lru, sched_policy_fifo,
    sched_policy_clairvoyant, sched_policy_clairvoyant_partial;

#endif
