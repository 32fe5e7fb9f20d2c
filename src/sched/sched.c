#include "sched/sched.h"

#include <assert.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "sched/evict.h"

_Static_assert(SCHED_MAX_DEVICES == EVICT_MAX_DEVICES, "sched_model.bytes feeds evict_model.bytes");

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

/* The requests a batch of c takes now: its queue, at most max_batch. */
static int batch_take(const struct sched_view *v, const struct sched_model *c)
{
    return v->max_batch > 0 && c->queue_len > v->max_batch ? v->max_batch : c->queue_len;
}

/* Whether i goes before j among waiting models: past its max_queue_wait
 * first, then the higher priority, then, with fuller_wait > 0, the one whose
 * batch takes more requests unless the older head has waited fuller_wait,
 * then the older queue head. */
static bool goes_before_by(const struct sched_view *v, int i, int j, double fuller_wait)
{
    const struct sched_model *a = &v->models[i], *b = &v->models[j];
    bool sa = a->max_queue_wait > 0 && v->now - a->head_arrival > a->max_queue_wait;
    bool sb = b->max_queue_wait > 0 && v->now - b->head_arrival > b->max_queue_wait;
    if (sa != sb)
        return sa;
    if (a->priority != b->priority)
        return a->priority > b->priority;
    double older = a->head_arrival < b->head_arrival ? a->head_arrival : b->head_arrival;
    if (fuller_wait > 0 && batch_take(v, a) != batch_take(v, b) &&
        v->now - older <= fuller_wait)
        return batch_take(v, a) > batch_take(v, b);
    return a->head_arrival < b->head_arrival;
}

static bool goes_before(const struct sched_view *v, int i, int j)
{
    return goes_before_by(v, i, j, 0);
}

/* The waiting model `want` accepts that goes first (goes_before_by). */
static int first_waiting_by(const struct sched_view *v, bool (*want)(const struct sched_model *),
                            double fuller_wait)
{
    int best = -1;
    for (int i = 0; i < v->n_models; i++)
        if (v->models[i].queue_len > 0 && want(&v->models[i]) &&
            (best < 0 || goes_before_by(v, i, best, fuller_wait)))
            best = i;
    return best;
}

static int first_waiting(const struct sched_view *v, bool (*want)(const struct sched_model *))
{
    return first_waiting_by(v, want, 0);
}

/* The earliest moment ahead at which a waiting model's head passes its
 * max_queue_wait (the order changes then), or INFINITY. */
static double queue_wait_expiry(const struct sched_view *v)
{
    double at = INFINITY;
    for (int i = 0; i < v->n_models; i++) {
        const struct sched_model *c = &v->models[i];
        double t = c->head_arrival + c->max_queue_wait;
        if (c->queue_len > 0 && c->max_queue_wait > 0 && t > v->now && t < at)
            at = t;
    }
    return at;
}

/* Appends to out's n actions a wake-up at the earlier of `wake` and the
 * next queue-wait expiry (the order changes then), when there is one and
 * room; returns the new count. */
static int add_wake(const struct sched_view *v, struct sched_action *out, int n, int max,
                    double wake)
{
    double order = queue_wait_expiry(v);
    wake = order < wake ? order : wake;
    if (wake < INFINITY && n < max)
        out[n++] = (struct sched_action){.kind = SCHED_WAKE, .at = wake};
    return n;
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

/* Of bytes, what c holds on each device now: a resident (or loading) model
 * all of its bytes, whatever resident_bytes says (views built by hand, or by
 * an engine without partial residency, leave it 0), else resident_bytes.
 * What an eviction of c frees. */
static const uint64_t *held_of(const struct sched_model *c)
{
    return c->resident ? c->bytes : c->resident_bytes;
}

/* Partly resident: not resident, and some of it still on a device. */
static bool partial(const struct sched_view *v, const struct sched_model *c)
{
    for (int d = 0; !c->resident && d < v->n_devices; d++)
        if (c->resident_bytes[d] > 0)
            return true;
    return false;
}

/* What a load of c needs on each device, into need: what it lacks there. */
static void need_of(const struct sched_view *v, const struct sched_model *c, uint64_t *need)
{
    const uint64_t *held = held_of(c);
    for (int d = 0; d < v->n_devices; d++)
        need[d] = c->bytes[d] > held[d] ? c->bytes[d] - held[d] : 0;
}

/* The view as the shared victim choice (sched/evict.h) sees it: every model
 * with what it holds and its last use, none evictable yet; the caller says
 * who may go. */
static void evict_view(const struct sched_view *v, struct evict_model *em)
{
    for (int i = 0; i < v->n_models; i++)
        em[i] = (struct evict_model){.last_used = v->models[i].last_used,
                                     .bytes = held_of(&v->models[i])};
}

/* victim leaves: what it holds becomes free; only a resident one stops
 * counting toward max_loaded (a partly resident one never counted). */
static void room_free(const struct sched_view *v, struct evict_room *r, int victim)
{
    const struct sched_model *c = &v->models[victim];
    evict_room_take(r, &(struct evict_model){.bytes = held_of(c)});
    r->resident += !c->resident; /* evict_room_take uncounted it */
}

/* Whether a load of m fits room r (bytes it lacks, and max_loaded). */
static bool room_for(const struct sched_view *v, const struct evict_room *r, int m)
{
    uint64_t need[SCHED_MAX_DEVICES];
    need_of(v, &v->models[m], need);
    return evict_room_fits(r, need);
}

/* Takes em's least recently used evictable models into out (at most max)
 * until a load of m fits r: evict_lru_until_fit's loop (useful_only
 * false), counting a partly resident victim's room by room_free. Returns
 * how many, or -1 when nothing more may go or max is reached first. */
static int lru_until_fit(const struct sched_view *v, struct evict_model *em, int m,
                         struct evict_room *r, int *out, int max)
{
    int n = 0;
    while (!room_for(v, r, m)) {
        int pick = n < max ? evict_lru(em, v->n_models) : -1;
        if (pick < 0)
            return -1;
        em[pick].evictable = false;
        room_free(v, r, pick);
        out[n++] = pick;
    }
    return n;
}

/* The devices' free bytes, the resident count and max_loaded. */
static void room_of_view(const struct sched_view *v, struct evict_room *r)
{
    r->n_devices = v->n_devices;
    memcpy(r->free_bytes, v->free_bytes, sizeof(r->free_bytes));
    r->resident = 0;
    r->max_resident = v->max_loaded;
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
    struct evict_model em[SCHED_MAX_MODELS];
    struct evict_room r;
    evict_view(v, em);
    room_of_view(v, &r);
    for (int i = 0; i < v->n_models; i++) {
        const struct sched_model *c = &v->models[i];
        em[i].evictable = i != m && (c->resident || partial(v, c)) && !c->pinned;
        r.resident += c->resident;
    }
    int n = lru_until_fit(v, em, m, &r, a.victims, SCHED_MAX_VICTIMS);
    if (n < 0)
        return 0; /* nothing can go: wait */
    a.n_victims = n;
    out[0] = a;
    return 1;
}

/* ---- swapwise: the default ----
 * - Batches go in queue-head order (goes_before) to resident models, one at a time per
 *   device, also while another model loads (the copy engine and the compute
 *   overlap). A model whose own load is still arriving gets its batch just in
 *   time: half its first step before the load's expected end, the other half
 *   overlapping the last layers (a SCHED_WAKE asks for that moment). Started
 *   earlier, the batch would hold its devices through the load and requests
 *   arriving meanwhile would miss it.
 * - One load at a time (loads share the links): the waiting model whose queue
 *   head is oldest, so no model starves (before it, a model past its
 *   max_queue_wait, then one of higher priority: goes_before).
 * - Room is made by byte budgets, taking victims in this order: models with
 *   nothing queued, or whose whole queue fits the one batch they get now, the
 *   least likely to be wanted within a load's time first (forecast.h),
 *   waiting for one to finish its batch rather than evicting a busier one;
 *   then, only when the model to load holds the oldest request of all, idle
 *   models with younger requests, least recently used first, each after one
 *   last batch. A model with a batch in flight is never evicted under it
 *   (its offload waits for the batch's end, and the load for the room), and a
 *   model chosen to go gets no further batch.
 * - Prefetch: when the links are idle, nothing waits for a load and copies
 *   take no compute, a model with regular arrivals that is likely wanted soon
 *   comes in for resident idle models clearly less likely wanted.
 * - Long batches (batches_long: the batches seen ran longer than a load, as
 *   chat requests' prefill and decode steps do): the load and the batches go
 *   to the model whose batch takes the most requests (after max_queue_wait
 *   and priority; the older head among equals), since a batch's time grows
 *   far slower than its size (its longest request, a slightly slower step)
 *   and under load the fuller batch clears more requests per second of the
 *   devices, until the older head has waited SW_FULLER_WAIT batches' time
 *   (no model starves); a victim with requests queued leaves without its
 *   last batch (a reload costs less than the batch the oldest request would
 *   wait for), so the first victims are only models with nothing queued. */
#define SW_PREFETCH_MIN 0.2    /* likelihood of a request within a load's time */
#define SW_PREFETCH_MARGIN 0.2 /* over every model it displaces */
/* Only models whose arrivals are regular are prefetched: for them the
 * forecast says when the next request is due. For Poisson or bursty ones it
 * says little beyond the rate, and prefetching them was measured to trade
 * places back and forth (bench workload --simulate, configs with CV 4). */
#define SW_PREFETCH_MAX_CV 0.8
#ifndef SW_FULLER_WAIT
#define SW_FULLER_WAIT 16 /* batches' time the older head waits at most for fuller ones */
#endif

/* How much each model is wanted soon, computed on first use; d starts as
 * NaN. future: clairvoyant's, from the known next arrival. */
struct demand_memo {
    double *d;
    bool future;
};

/* The chance of a request for model i within the time of a load (an
 * incomplete gamma function per model: only the models a decision weighs pay
 * for it). With the future known, a number that falls as its next request
 * is farther away: 1 with requests queued, load / (load + wait) for a next
 * one due after wait, 0 with none to come (so the farthest next use leaves
 * first, as Belady's rule has it). */
static double demand(const struct sched_view *v, struct demand_memo *memo, int i)
{
    double load_s = v->load_s > 0 ? v->load_s : 0.1;
    if (!isnan(memo->d[i]))
        return memo->d[i];
    const struct sched_model *c = &v->models[i];
    if (!memo->future)
        memo->d[i] = forecast_within(&c->arrivals, v->now, load_s);
    else if (c->queue_len > 0 || c->next_arrival <= v->now)
        memo->d[i] = 1;
    else
        memo->d[i] = isinf(c->next_arrival) ? 0 : load_s / (load_s + c->next_arrival - v->now);
    return memo->d[i];
}

/* Room on the devices once the models already leaving have left. */
static void room_init(const struct sched_view *v, struct evict_room *r)
{
    room_of_view(v, r);
    for (int i = 0; i < v->n_models; i++) {
        const struct sched_model *c = &v->models[i];
        if (c->resident && c->offload_pending)
            for (int d = 0; d < v->n_devices; d++)
                r->free_bytes[d] += c->bytes[d];
        r->resident += c->resident && !c->offload_pending;
    }
}

static void room_take(const struct sched_view *v, struct evict_room *r, struct sched_action *a,
                      bool *chosen, int victim)
{
    chosen[victim] = true;
    a->victims[a->n_victims++] = victim;
    room_free(v, r, victim);
}

/* May be a victim: resident or partly resident (what a trim left must be
 * freed by someone), not loading, not pinned, not leaving already. */
static bool evictable(const struct sched_view *v, const struct sched_model *c)
{
    return (c->resident || partial(v, c)) && !c->loading && !c->pinned && !c->offload_pending;
}

static bool devices_free(const struct sched_view *v, const struct sched_model *c, const bool *busy)
{
    for (int d = 0; d < v->n_devices; d++)
        if (busy[d] && c->bytes[d] > 0)
            return false;
    return true;
}

/* Loaded less than its min_resident ago. */
static bool young(const struct sched_view *v, const struct sched_model *c)
{
    return c->min_resident > 0 && v->now - c->loaded_at < c->min_resident;
}

/* The evictable model least likely wanted within a load's time (least
 * recently used among equals) that has nothing queued, or, when busy is
 * given, whose whole queue fits the batch it can get now; idle_only leaves
 * out models with a batch in flight, spare_young those within their
 * min_resident. -1 when none. */
static int least_wanted(const struct sched_view *v, struct demand_memo *memo, const bool *chosen,
                        const bool *busy, bool idle_only, bool spare_young)
{
    int pick = -1;
    double pick_d = 0;
    for (int i = 0; i < v->n_models; i++) {
        const struct sched_model *c = &v->models[i];
        bool drains = busy && c->resident && c->queue_len > 0 && c->queue_len <= v->max_batch &&
                      !c->running && devices_free(v, c, busy);
        if (chosen[i] || !evictable(v, c) || (c->queue_len > 0 && !drains) ||
            (idle_only && c->running) || (spare_young && young(v, c)))
            continue;
        double d = demand(v, memo, i);
        if (pick < 0 || d < pick_d || (d == pick_d && c->last_used < v->models[pick].last_used))
            pick = i, pick_d = d;
    }
    return pick;
}

/* Victims for a load of `load` that waits for a request; true when it fits. */
static bool demand_victims(const struct sched_view *v, struct demand_memo *memo, const bool *busy,
                           int load, bool oldest, struct evict_room *r, struct sched_action *a,
                           bool *chosen)
{
    struct evict_model em[SCHED_MAX_MODELS];
    while (!room_for(v, r, load) && a->n_victims < SCHED_MAX_VICTIMS) {
        int pick = -1;
        /* models within their min_resident only when no other makes room */
        for (int pass = 0; pass < 2 && pick < 0; pass++) {
            bool spare = pass == 0;
            pick = least_wanted(v, memo, chosen, busy, false, spare);
            if (pick < 0 && oldest) { /* then idle with requests younger than ours, LRU */
                evict_view(v, em);
                for (int i = 0; i < v->n_models; i++) {
                    const struct sched_model *c = &v->models[i];
                    em[i].evictable =
                        !chosen[i] && evictable(v, c) && !c->running && c->queue_len > 0 &&
                        c->head_arrival >= v->models[load].head_arrival && !(spare && young(v, c));
                }
                pick = evict_lru(em, v->n_models);
            }
        }
        if (pick < 0)
            return false;
        room_take(v, r, a, chosen, pick);
    }
    return room_for(v, r, load);
}

/* Trims spread (act_trim_victims): a victim's layers may not make the room
 * its whole bytes would (its embeddings and head stay), and a next victim
 * could give the rest instead of the first leaving whole. Up to this many
 * idle models with nothing queued, least wanted first, follow the victims
 * that make room whole; sched_act touches them only as far as the load
 * lacks. 0: measured best (tools/sim_targets.c, 10 seeds, every config,
 * 2- and 8-layer opt-1.3b: 1 helper moved 6% and 4% more bytes in 28% and
 * 30% more loads, for no target gained: each helper it trims can no longer
 * serve and needs a load of its own, and loads go one at a time). */
#ifndef SW_TRIM_HELPERS
#define SW_TRIM_HELPERS 0
#endif

static void trim_helpers(const struct sched_view *v, struct demand_memo *memo,
                         struct sched_action *a, bool *chosen)
{
    for (int k = 0; k < SW_TRIM_HELPERS && a->n_victims > 0 && a->n_victims < SCHED_MAX_VICTIMS;
         k++) {
        int pick = least_wanted(v, memo, chosen, NULL, true, true);
        if (pick < 0)
            return;
        chosen[pick] = true;
        a->victims[a->n_victims++] = pick;
    }
}

/* A prefetch: the non-resident model likeliest wanted soon, for idle models
 * with nothing queued that are clearly less likely wanted; true when found. */
static bool prefetch(const struct sched_view *v, struct demand_memo *memo, struct sched_action *a,
                     bool *chosen)
{
    int p = -1;
    double pd = 0;
    for (int i = 0; i < v->n_models; i++) {
        const struct sched_model *c = &v->models[i];
        if (c->resident || (!memo->future && forecast_cv(&c->arrivals) >= SW_PREFETCH_MAX_CV))
            continue;
        double d = demand(v, memo, i);
        if (p < 0 || d > pd)
            p = i, pd = d;
    }
    /* knowing the future: the soonest wanted comes in for models wanted later */
    if (p < 0 || (memo->future ? pd == 0 : pd < SW_PREFETCH_MIN))
        return false;
    struct evict_room r;
    room_init(v, &r);
    *a = (struct sched_action){.kind = SCHED_LOAD, .model = p};
    chosen[p] = true; /* never its own victim */
    while (!room_for(v, &r, p) && a->n_victims < SCHED_MAX_VICTIMS) {
        int pick = least_wanted(v, memo, chosen, NULL, true, true);
        double dp = pick < 0 ? 0 : demand(v, memo, pick);
        if (pick < 0 || (memo->future ? dp >= pd : dp + SW_PREFETCH_MARGIN > pd))
            break;
        room_take(v, &r, a, chosen, pick);
    }
    if (room_for(v, &r, p))
        return true;
    for (int k = 0; k < a->n_victims; k++)
        chosen[a->victims[k]] = false;
    chosen[p] = false;
    return false;
}

/* Has requests and could get a batch (not chosen to go, not running). */
static bool servable(const struct sched_model *c, bool chosen)
{
    return c->queue_len > 0 && c->resident && !c->running && !c->offload_pending && !chosen;
}

/* A loaded model with requests older than load's, on a device load uses. */

static bool older_work_shares(const struct sched_view *v, int load, const bool *chosen)
{
    const struct sched_model *l = &v->models[load];
    for (int i = 0; i < v->n_models; i++) {
        const struct sched_model *c = &v->models[i];
        if (!servable(c, chosen[i]) || c->loading || c->head_arrival >= l->head_arrival)
            continue;
        for (int d = 0; d < v->n_devices; d++)
            if (c->bytes[d] > 0 && l->bytes[d] > 0)
                return true;
    }
    return false;
}

/* Resident, nothing queued, no batch in flight, not pinned, not leaving. */
static bool idle_model(const struct sched_view *v, const struct sched_model *c)
{
    return evictable(v, c) && !c->running && c->queue_len == 0;
}

/* Idle models past their keep-alive (keep_alive, def where the model says
 * NAN), counted from idle_since: a SCHED_UNLOAD each, into out[n..max),
 * gone[] marked; *wake is lowered to the next expiry still ahead. Returns
 * the new n. */
static int keep_alive_unloads(const struct sched_view *v, double def, bool *gone,
                              struct sched_action *out, int n, int max, double *wake)
{
    for (int i = 0; i < v->n_models && n < max; i++) {
        const struct sched_model *c = &v->models[i];
        double ka = isnan(c->keep_alive) ? def : c->keep_alive;
        if (!idle_model(v, c) || isinf(ka))
            continue;
        double expiry = c->idle_since + ka;
        if (v->now >= expiry) {
            gone[i] = true;
            out[n++] = (struct sched_action){.kind = SCHED_UNLOAD, .model = i};
        } else if (expiry < *wake) {
            *wake = expiry;
        }
    }
    return n;
}

/* How long batches run here, when longer than a load: the mean over the
 * models whose last batch ended since their load (it ran from last_used,
 * its dispatch, to idle_since, its end: the engine and the simulator both
 * set them so) when it is above load_s, else 0 (and 0 until a load's time
 * and a batch are known). Chat requests (a prefill, then a decode step per
 * token, seconds in all) make them long; Computron's one-token requests
 * keep them below a load. */
static double batches_long(const struct sched_view *v)
{
    double sum = 0;
    int n = 0;
    for (int i = 0; i < v->n_models; i++) {
        const struct sched_model *c = &v->models[i];
        if (!c->running && c->last_used > 0 && c->last_used >= c->loaded_at &&
            c->idle_since > c->last_used) {
            sum += c->idle_since - c->last_used;
            n++;
        }
    }
    return v->load_s > 0 && n > 0 && sum / n > v->load_s ? sum / n : 0;
}

/* swapwise, or with future clairvoyant: the same rules, with the known next
 * arrivals in place of the forecast (demand). Models past a keep-alive they
 * were given leave first, alone in the answer (the next decision sees the
 * room they free). */
static int swapwise_run(const struct sched_view *v, struct sched_action *out, int max, bool future,
                        bool trim)
{
    int n = 0;
    /* long batches: the fuller batch first, for the load and the batches,
     * until the older head has waited SW_FULLER_WAIT batches */
    double fuller_wait = SW_FULLER_WAIT * batches_long(v);
    bool fuller = fuller_wait > 0;
    int load = v->any_loading ? -1 : first_waiting_by(v, not_resident, fuller_wait);
    int oldest = oldest_head(v, any_model);
    bool chosen[SCHED_MAX_MODELS] = {false};
    double memo_d[SCHED_MAX_MODELS];
    struct demand_memo memo_s = {.d = memo_d, .future = future}, *memo = &memo_s;
    bool need = false; /* the load lacks room for now */
    bool busy[SCHED_MAX_DEVICES] = {false};
    for (int i = 0; i < v->n_models; i++)
        memo_d[i] = NAN;
    double wake = INFINITY;
    if ((n = keep_alive_unloads(v, INFINITY, chosen, out, 0, max, &wake)) > 0)
        return n;
    /* where copies take compute, a load occupies its devices as a batch does */
    bool copy_busy = !v->overlap_loads;
    for (int i = 0; i < v->n_models; i++)
        for (int d = 0; d < v->n_devices; d++)
            if ((v->models[i].running || (copy_busy && v->models[i].loading)) &&
                v->models[i].bytes[d] > 0)
                busy[d] = true;
    bool held = false; /* the load waits for its devices' batches to end */
    struct sched_action a = {.kind = SCHED_LOAD, .model = load, .trim = trim};
    if (load >= 0) {
        struct evict_room r;
        room_init(v, &r);
        chosen[load] = true; /* partly resident, it would be evictable: never its own victim */
        /* a victim with a batch in flight leaves at its end: the engine
         * starts the load once the room is there */
        /* with long batches a victim gets no last batch, so one whose queue
         * fits a batch is no longer as good as one with nothing queued */
        need = !demand_victims(v, memo, fuller ? NULL : busy, load, load == oldest, &r, &a,
                               chosen);
        if (!need && trim)
            trim_helpers(v, memo, &a, chosen);
        held = !need && copy_busy && (!devices_free(v, &v->models[load], busy) ||
                                      older_work_shares(v, load, chosen));
        for (int k = 0; !need && !held && k < a.n_victims; k++) {
            const struct sched_model *c = &v->models[a.victims[k]];
            /* its last batch, then it goes; with long batches it goes now
             * (its requests wait for a reload, cheaper than the batch) */
            if (c->queue_len > 0 && !c->running && !fuller && n < max) {
                out[n++] = (struct sched_action){.kind = SCHED_SERVE, .model = a.victims[k]};
                for (int d = 0; d < v->n_devices; d++)
                    busy[d] |= c->bytes[d] > 0;
            }
        }
        if (!need && !held && n < max) {
            out[n++] = a;
            for (int d = 0; copy_busy && d < v->n_devices; d++)
                busy[d] |= v->models[load].bytes[d] > 0;
        }
    } else if (!v->any_loading && v->overlap_loads && n < max &&
               prefetch(v, memo, &a, chosen)) {
        a.trim = trim;
        out[n++] = a;
    }
    /* Batches for resident models, in goes_before order, at most one at a
     * time on any device: two batches sharing devices only slow each other
     * (processor sharing), while in queue order the oldest request finishes
     * first. When the load still lacks room and holds the oldest request,
     * models that could make room for it get no new batch: they go idle and
     * are evicted next. */
    bool served[SCHED_MAX_MODELS] = {false}, held_devs[SCHED_MAX_DEVICES] = {false};
    for (int d = 0; held && d < v->n_devices; d++)
        held_devs[d] = v->models[load].bytes[d] > 0;
    while (n < max) {
        int pick = -1;
        for (int i = 0; i < v->n_models; i++) {
            const struct sched_model *c = &v->models[i];
            if (served[i] || !servable(c, chosen[i]) || (c->loading && !v->overlap_loads))
                continue;
            if (c->loading) { /* just in time: half its first step overlaps the last layers */
                double frac = c->load_frac > 0 ? c->load_frac : 1;
                double start = c->loaded_at + v->load_s * frac - c->batch_s / 2;
                if (v->now < start) {
                    wake = start < wake ? start : wake;
                    continue;
                }
            }
            if (need && load == oldest && !c->pinned && !c->loading &&
                c->head_arrival > v->models[load].head_arrival)
                continue;
            if (held && c->head_arrival > v->models[load].head_arrival &&
                !devices_free(v, c, held_devs))
                continue; /* younger than the held load: it goes after it */
            if (devices_free(v, c, busy) && (pick < 0 || goes_before_by(v, i, pick, fuller_wait)))
                pick = i;
        }
        if (pick < 0)
            break;
        served[pick] = true;
        for (int d = 0; d < v->n_devices; d++)
            busy[d] |= v->models[pick].bytes[d] > 0;
        out[n++] = (struct sched_action){.kind = SCHED_SERVE, .model = pick};
    }
    return add_wake(v, out, n, max, wake);
}

static int swapwise_decide(const struct sched_view *v, struct sched_action *out, int max)
{
    return swapwise_run(v, out, max, false, false);
}

/* ---- clairvoyant: an offline reference, simulator only ----
 * swapwise's rules knowing each model's next arrival (next_arrival): the
 * victim is the model whose next request is farthest away (Belady), and when
 * the links are idle the model whose next request comes soonest is loaded for
 * models wanted later. Not a proven optimum: a bound no policy can beat is
 * the simulator's floor (workload/simulate.h). */
static int clairvoyant_decide(const struct sched_view *v, struct sched_action *out, int max)
{
    return swapwise_run(v, out, max, true, false);
}

/* ---- swapwise-partial, clairvoyant-partial: with partial residency ----
 * The same rules, each load trimming its victims (sched_action.trim): they
 * give up only the last layers the load lacks room for and keep their
 * first ones, so a victim wanted again reloads only what it lost (and with
 * overlap_loads starts computing at once). */
static int swapwise_partial_decide(const struct sched_view *v, struct sched_action *out, int max)
{
    return swapwise_run(v, out, max, false, true);
}

static int clairvoyant_partial_decide(const struct sched_view *v, struct sched_action *out, int max)
{
    return swapwise_run(v, out, max, true, true);
}

/* Batches for resident models with requests (not loading, not leaving, no
 * batch in flight), in goes_before order, one at a time on any device
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
            if (pick < 0 || goes_before(v, i, pick))
                pick = i;
        }
        if (pick < 0)
            break;
        served[pick] = true;
        for (int d = 0; d < v->n_devices; d++)
            busy[d] |= v->models[pick].bytes[d] > 0;
        out[n + added++] = (struct sched_action){.kind = SCHED_SERVE, .model = pick};
    }
    return added;
}

/* ---- lru: an on-demand loader with a keep-alive (Ollama, ServerlessLLM) ----
 * A model is loaded when a request for it waits and it is not resident, one
 * load at a time, oldest request first (goes_before), evicting idle models (resident, no
 * batch in flight, nothing queued, not pinned) least recently used first
 * until it fits, then, as Ollama does when none is idle, busy ones least
 * recently used first: one with a batch in flight leaves at its end (the load
 * waits for the room), its queued requests wait for its next load. A resident
 * model with nothing queued and no batch leaves once idle for its keep_alive
 * (SCHED_LRU_KEEP_ALIVE_S unless it has one) from the end of its last batch
 * (idle_since), at that moment and not before (a SCHED_WAKE asks for it). Resident models are
 * served as swapwise does: in goes_before order, one batch per device. */

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

static int lru_decide(const struct sched_view *v, struct sched_action *out, int max)
{
    int n = 0;
    double wake = INFINITY;
    bool gone[SCHED_MAX_MODELS] = {false};
    n = keep_alive_unloads(v, SCHED_LRU_KEEP_ALIVE_S, gone, out, n, max, &wake);
    /* batches first: a model served now is used now, the last to go */
    bool busy[SCHED_MAX_DEVICES] = {false}, served[SCHED_MAX_MODELS] = {false};
    for (int i = 0; i < v->n_models; i++)
        for (int d = 0; d < v->n_devices; d++)
            if ((v->models[i].running || (!v->overlap_loads && v->models[i].loading)) &&
                v->models[i].bytes[d] > 0)
                busy[d] = true;
    int first = n;
    n += serve_resident(v, busy, gone, out, n, max);
    for (int k = first; k < n; k++)
        served[out[k].model] = true;
    int load = v->any_loading ? -1 : first_waiting(v, not_resident);
    if (load >= 0 && n < max) {
        struct sched_action a = {.kind = SCHED_LOAD, .model = load};
        struct evict_model idle[SCHED_MAX_MODELS], any[SCHED_MAX_MODELS];
        struct evict_room r;
        room_init(v, &r);
        for (int i = 0; i < v->n_models; i++)
            if (gone[i]) /* unloaded above */
                room_free(v, &r, i);
        evict_view(v, idle);
        evict_view(v, any);
        for (int i = 0; i < v->n_models; i++) {
            idle[i].evictable = !gone[i] && !served[i] && idle_model(v, &v->models[i]);
            any[i].evictable = i != load && !gone[i] && evictable(v, &v->models[i]);
            if (served[i])
                any[i].last_used = v->now;
        }
        while (!room_for(v, &r, load) && a.n_victims < SCHED_MAX_VICTIMS) {
            /* idle, then busy; models within their min_resident last */
            int pick = -1;
            for (int pass = 0; pass < 4 && pick < 0; pass++)
                pick = lru_among(v, pass % 2 ? any : idle, pass < 2);
            if (pick < 0)
                break;
            idle[pick].evictable = any[pick].evictable = false;
            a.victims[a.n_victims++] = pick;
            room_free(v, &r, pick);
        }
        if (room_for(v, &r, load)) /* else pinned or loading models hold the room: wait */
            out[n++] = a;
    }
    return add_wake(v, out, n, max, wake);
}

/* ---- fifo: llama-swap's swapping ----
 * Requests in their global order of arrival: the model of the oldest waiting
 * request gets the next batch, and nothing else runs meanwhile; when it is not
 * resident it is swapped in, evicting least recently used models (any not
 * pinned) until it fits. No look-ahead, no keep-alive: a model stays until
 * another needs its room. These are Computron's decisions (computron_decide:
 * with nothing loading or running no offload is pending either); the policy
 * differs in its batches, which mix sampling parameters. */

/* ---- swapwise-preempt: swapwise with token-level preemption ----
 * swapwise's decisions, and one more: when a model w waits past its bound
 * (its max_queue_wait when set, else SCHED_PREEMPT_WAIT_S) for a batch
 * running on its devices (w resident: the batch of another model holds the
 * device) or for room (w not resident, nothing loading, and no room without
 * a model whose batch runs), the batch r that has run longest, at least the
 * bound since its start or resume (no ping-pong faster than that), not
 * pinned, pauses (SCHED_PREEMPT); when w needs room, the same answer loads w
 * with r as the victim (r's weights leave at its pause, its batch's memory
 * stays: room is counted without it). Then swapwise decides on a view where a
 * paused model's requests wait from their pause, so w, waiting from before,
 * goes first and the paused batch resumes after it. */
static double preempt_bound(const struct sched_model *w)
{
    return w->max_queue_wait > 0 ? w->max_queue_wait : SCHED_PREEMPT_WAIT_S;
}

/* Whether models i and j share a device. */
static bool share_device(const struct sched_view *v, int i, int j)
{
    for (int d = 0; d < v->n_devices; d++)
        if (v->models[i].bytes[d] > 0 && v->models[j].bytes[d] > 0)
            return true;
    return false;
}

/* The batch to pause for w (see above), or -1. */
static int preempt_victim(const struct sched_view *v, int w)
{
    const struct sched_model *c = &v->models[w];
    double bound = preempt_bound(c);
    int best = -1;
    for (int r = 0; r < v->n_models; r++) {
        const struct sched_model *x = &v->models[r];
        if (r == w || !x->running || x->preempt_pending || x->loading || x->pinned ||
            x->offload_pending || v->now < x->batch_start + bound || !share_device(v, w, r))
            continue;
        bool fits = true;
        uint64_t need[SCHED_MAX_DEVICES];
        need_of(v, c, need);
        for (int d = 0; !c->resident && d < v->n_devices; d++)
            fits &= need[d] <= v->free_bytes[d] + x->bytes[d] - x->batch_bytes[d];
        if (fits && (best < 0 || x->batch_start < v->models[best].batch_start))
            best = r;
    }
    return best;
}

static int swapwise_preempt_decide(const struct sched_view *v, struct sched_action *out, int max)
{
    /* the model waiting longest past its bound, without a batch of its own */
    int w = -1;
    for (int i = 0; i < v->n_models; i++) {
        const struct sched_model *c = &v->models[i];
        if (c->queue_len == 0 || c->running || c->paused || c->offload_pending ||
            (!c->resident && v->any_loading) ||
            v->now < c->head_arrival + preempt_bound(c)) /* the wake's own sum */
            continue;
        if (!c->resident) { /* only when no room is to be had without a running batch */
            int n_resident = 0;
            for (int k = 0; k < v->n_models; k++)
                n_resident += v->models[k].resident;
            bool fits = v->max_loaded == 0 || n_resident < v->max_loaded;
            uint64_t need[SCHED_MAX_DEVICES];
            need_of(v, c, need);
            for (int d = 0; d < v->n_devices; d++)
                fits &= need[d] <= v->free_bytes[d];
            if (fits)
                continue;
        }
        if (w < 0 || c->head_arrival < v->models[w].head_arrival)
            w = i;
    }
    /* one paused batch at a time: each keeps its memory on the devices,
     * and several could leave room for neither their own models nor the
     * waiting one (churn_preempt stalled so, under load) */
    bool any_paused = false, pausing = false;
    for (int i = 0; i < v->n_models; i++) {
        any_paused |= v->models[i].paused > 0;
        pausing |= v->models[i].preempt_pending;
    }
    int r = w >= 0 && max >= 2 && !any_paused && !pausing ? preempt_victim(v, w) : -1;
    if (r >= 0) {
        out[0] = (struct sched_action){.kind = SCHED_PREEMPT, .model = r};
        if (v->models[w].resident)
            return 1; /* swapwise serves w once r has paused */
        out[1] = (struct sched_action){.kind = SCHED_LOAD, .model = w, .n_victims = 1,
                                       .victims = {r}};
        return 2;
    }
    /* out of memory for the copy: swapwise on the view as it is */
    struct sched_model *m = any_paused ? malloc((size_t)v->n_models * sizeof(*m)) : NULL;
    struct sched_view pv = *v;
    if (m) {
        memcpy(m, v->models, (size_t)v->n_models * sizeof(*m));
        for (int i = 0; i < v->n_models; i++)
            if (m[i].paused && m[i].batch_start > m[i].head_arrival)
                m[i].head_arrival = m[i].batch_start; /* its requests wait from their pause */
        pv.models = m;
    }
    int n = swapwise_decide(&pv, out, max);
    free(m);
    /* a wake-up for the next model to pass its bound (swapwise asks for its own) */
    double at = INFINITY;
    for (int i = 0; i < v->n_models; i++)
        if (v->models[i].queue_len > 0 && !v->models[i].running && !v->models[i].paused) {
            double t = v->models[i].head_arrival + preempt_bound(&v->models[i]);
            at = t > v->now && t < at ? t : at;
        }
    if (at < INFINITY && n < max)
        out[n++] = (struct sched_action){.kind = SCHED_WAKE, .at = at};
    return n;
}

bool sched_batch_joins(bool same_params_only, int taken, int max, bool same_as_first)
{
    return taken < max && (!same_params_only || taken == 0 || same_as_first);
}

/* ops->offload of model, told to ops->carried when it succeeds (reason
 * preempted when its batch is paused or pausing, a SCHED_PREEMPT of the same
 * answer included). */
static bool act_offload(const struct sched_exec_ops *ops, void *ctx, int model, bool idle)
{
    bool defer = ops->running(ctx, model);
    bool preempted = !idle && ops->pausing(ctx, model);
    bool ok = ops->offload(ctx, model, defer);
    if (ok && ops->carried)
        ops->carried(ctx, &(struct sched_carried){.op = SCHED_OP_OFFLOAD, .model = model,
                                                  .idle = idle, .preempted = preempted,
                                                  .deferred = defer});
    return ok;
}

/* What the load of a->model still lacks on each device, into lack, when
 * freed[d] more than the view's free bytes are (or will be) free there;
 * true when it lacks something somewhere. */
static bool load_lacks(const struct sched_view *v, const struct sched_action *a,
                       const uint64_t *freed, uint64_t *lack)
{
    uint64_t need[SCHED_MAX_DEVICES];
    bool any = false;
    need_of(v, &v->models[a->model], need);
    for (int d = 0; d < v->n_devices; d++) {
        uint64_t room = v->free_bytes[d] + freed[d];
        lack[d] = need[d] > room ? need[d] - room : 0;
        any |= lack[d] > 0;
    }
    return any;
}

/* Victim x of a trimming load, with no batch in flight: gives up its last
 * layers on each device where the load lacks room (ops->trim, told to
 * ops->carried), adding what it gave to freed and to gave. False when it
 * would keep nothing where it is asked (all it holds there would not do):
 * it then leaves whole, and nothing is trimmed. */
static bool act_trim_one(const struct sched_exec_ops *ops, void *ctx, const struct sched_view *v,
                         int x, const uint64_t *lack, uint64_t *freed, uint64_t *gave)
{
    const uint64_t *held = held_of(&v->models[x]);
    for (int d = 0; d < v->n_devices; d++)
        if (lack[d] > 0 && held[d] > 0 && lack[d] >= held[d])
            return false;
    for (int d = 0; d < v->n_devices; d++) {
        if (lack[d] == 0 || held[d] == 0)
            continue;
        uint64_t g = ops->trim(ctx, x, d, lack[d]);
        if (g > 0 && ops->carried)
            ops->carried(ctx, &(struct sched_carried){
                                  .op = SCHED_OP_TRIM, .model = x, .device = d, .bytes = g});
        gave[d] += g;
        freed[d] += g;
    }
    return true;
}

/* Victim x leaves whole (what it has left of what the view says it held,
 * less gave, joins freed; nothing where an executor that moved on since
 * the view gave more). */
static void act_trim_whole(const struct sched_exec_ops *ops, void *ctx, const struct sched_view *v,
                           int x, const uint64_t *gave, uint64_t *freed)
{
    const uint64_t *held = held_of(&v->models[x]);
    if (act_offload(ops, ctx, x, false))
        for (int d = 0; d < v->n_devices; d++)
            freed[d] += held[d] > gave[d] ? held[d] - gave[d] : 0;
}

/* SCHED_LOAD with trim (sched_action.trim): each victim, in order, only as
 * far as the load still lacks room after the free bytes and what the
 * victims before it gave: untouched when it lacks none; whole when it has a
 * batch in flight (deferred: its bytes count as freed, the load waits for
 * them) or would keep nothing; else trimmed, and a victim whose layers were
 * not enough keeps the rest (its embeddings, say) while the next ones are
 * asked: the trims spread. When all of them together still leave the load
 * short, the trimmed ones leave whole, in order, until it fits. */
static void act_trim_victims(const struct sched_exec_ops *ops, void *ctx,
                             const struct sched_view *v, const struct sched_action *a)
{
    uint64_t freed[SCHED_MAX_DEVICES] = {0}, lack[SCHED_MAX_DEVICES];
    uint64_t gave[SCHED_MAX_VICTIMS][SCHED_MAX_DEVICES] = {{0}};
    bool trimmed[SCHED_MAX_VICTIMS] = {false};
    for (int k = 0; k < a->n_victims && load_lacks(v, a, freed, lack); k++) {
        int x = a->victims[k];
        assert(x >= 0 && x < v->n_models && x != a->model);
        trimmed[k] = !ops->running(ctx, x) && act_trim_one(ops, ctx, v, x, lack, freed, gave[k]);
        if (!trimmed[k])
            act_trim_whole(ops, ctx, v, x, gave[k], freed);
    }
    for (int k = 0; k < a->n_victims && load_lacks(v, a, freed, lack); k++)
        if (trimmed[k])
            act_trim_whole(ops, ctx, v, a->victims[k], gave[k], freed);
}

bool sched_act(const struct sched_exec_ops *ops, void *ctx, const struct sched_view *v,
               const struct sched_action *a)
{
    if (a->kind == SCHED_WAKE) {
        ops->wake(ctx, a->at);
        return false;
    }
    assert(a->model >= 0 && a->model < v->n_models);
    bool ok;
    if (a->kind == SCHED_SERVE) {
        ok = !ops->running(ctx, a->model) && ops->serve(ctx, a->model);
    } else if (a->kind == SCHED_UNLOAD) {
        return act_offload(ops, ctx, a->model, true);
    } else if (a->kind == SCHED_PREEMPT) {
        ok = ops->running(ctx, a->model) && !ops->pausing(ctx, a->model) &&
             ops->preempt(ctx, a->model);
    } else {
        assert(a->kind == SCHED_LOAD && a->n_victims >= 0 && a->n_victims <= SCHED_MAX_VICTIMS);
        if (a->trim && ops->trim)
            act_trim_victims(ops, ctx, v, a);
        else
            for (int k = 0; k < a->n_victims; k++) {
                assert(a->victims[k] >= 0 && a->victims[k] < v->n_models);
                act_offload(ops, ctx, a->victims[k], false);
            }
        ok = ops->load(ctx, a->model);
    }
    if (ok && ops->carried)
        ops->carried(ctx, &(struct sched_carried){
                              .op = a->kind == SCHED_SERVE     ? SCHED_OP_SERVE
                                    : a->kind == SCHED_PREEMPT ? SCHED_OP_PREEMPT
                                                               : SCHED_OP_LOAD,
                              .model = a->model});
    return ok;
}

int sched_defrag_victim(const struct sched_view *v, int incoming, int device)
{
    struct evict_model em[SCHED_MAX_MODELS];
    evict_view(v, em);
    for (int i = 0; i < v->n_models; i++) {
        const struct sched_model *c = &v->models[i];
        em[i].evictable = i != incoming && evictable(v, c) && !c->running && held_of(c)[device] > 0;
    }
    return evict_lru(em, v->n_models);
}

static const struct sched_policy policies[] = {
    {.name = "swapwise",
     .help = "byte budgets; serve resident models while one loads; evict models with empty "
             "queues, least likely wanted within a load's time first (forecast); prefetch "
             "models with regular arrivals; one load at a time, oldest request first",
     .decide = swapwise_decide,
     .batch_same_params_only = false},
    {.name = "swapwise-preempt",
     .help = "swapwise, and a model waiting past its max_queue_wait (or 0.5 s) pauses a batch "
             "of another model that has run at least as long, at a step boundary (its KV cache "
             "stays on the devices), to run first; the paused batch resumes after it",
     .decide = swapwise_preempt_decide,
     .batch_same_params_only = false},
    {.name = "swapwise-partial",
     .help = "swapwise with partial residency: a load's victims give up only the last layers "
             "it lacks room for and keep their first ones; a victim wanted again reloads only "
             "what it lost",
     .decide = swapwise_partial_decide,
     .batch_same_params_only = false},
    {.name = "computron",
     .help = "Computron's engine: one operation at a time, oldest queue head first, evict the "
             "least recently used of max_loaded models",
     .decide = computron_decide,
     .batch_same_params_only = true},
    {.name = "lru",
     .help = "on-demand loader (Ollama, ServerlessLLM): load on a request, evict idle models "
             "least recently used first, unload one idle for 300 s (keep-alive)",
     .decide = lru_decide,
     .batch_same_params_only = false},
    {.name = "fifo",
     .help = "llama-swap's swapping: requests in arrival order, one at a time, the oldest "
             "one's model swapped in evicting least recently used ones",
     .decide = computron_decide,
     .batch_same_params_only = false},
    {.name = "clairvoyant",
     .help = "simulator only: swapwise knowing the future arrivals, evicting the model wanted "
             "farthest ahead (Belady) and prefetching the one wanted soonest",
     .decide = clairvoyant_decide,
     .batch_same_params_only = false,
     .needs_future = true},
    {.name = "clairvoyant-partial",
     .help = "simulator only: clairvoyant with swapwise-partial's trims (its bound)",
     .decide = clairvoyant_partial_decide,
     .batch_same_params_only = false,
     .needs_future = true},
};

static const struct sched_policy *policy_lookup(const char *name)
{
    for (size_t i = 0; i < sizeof(policies) / sizeof(policies[0]); i++)
        if (strcmp(policies[i].name, name) == 0)
            return &policies[i];
    return NULL;
}

const struct sched_policy *sched_policy_find(const char *name)
{
    const struct sched_policy *p = policy_lookup(name);
    if (p && p->needs_future) {
        err_set(ERR_INVALID, "scheduling policy \"%s\" needs the future arrivals, which only "
                             "the simulator has (bench workload --simulate); expected %s",
                name, sched_policy_names());
        return NULL;
    }
    if (!p)
        err_set(ERR_INVALID, "unknown scheduling policy \"%s\" (expected %s)", name,
                sched_policy_names());
    return p;
}

const struct sched_policy *sched_policy_find_sim(const char *name)
{
    const struct sched_policy *p = policy_lookup(name);
    if (!p)
        err_set(ERR_INVALID, "unknown scheduling policy \"%s\" (expected %s)", name,
                sched_policy_names_sim());
    return p;
}

const char *sched_policy_names(void)
{
    return "swapwise|swapwise-preempt|computron|lru|fifo|swapwise-partial";
}

const char *sched_policy_names_sim(void)
{
    return "swapwise|swapwise-preempt|computron|lru|fifo|clairvoyant|swapwise-partial|"
           "clairvoyant-partial";
}

const char *sched_policy_default(void)
{
    return "swapwise";
}
