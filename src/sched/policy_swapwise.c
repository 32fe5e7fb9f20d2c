/* The swapwise policy: the default.
 * - Batches go in queue-head order (sched_goes_before) to resident models, one at a time per
 *   device, also while another model loads (the copy engine and the compute
 *   overlap). A model whose own load is still arriving gets its batch just in
 *   time: half its first step before the load's expected end, the other half
 *   overlapping the last layers (a SCHED_WAKE asks for that moment). Started
 *   earlier, the batch would hold its devices through the load and requests
 *   arriving meanwhile would miss it.
 * - One load at a time (loads share the links): the waiting model whose queue
 *   head is oldest, so no model starves (before it, a model past its
 *   max_queue_wait, then one of higher priority: sched_goes_before).
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
#include <math.h>
#include <stdlib.h>

#include "sched/forecast.h"
#include "sched/sched_impl.h"

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

/* demand_victims' order (the victim loop's pick). */
struct demand_pick {
    const struct sched_view *v;
    struct demand_memo *memo;
    const bool *busy;
    int load;
    bool oldest;
    bool *chosen;
};

/* The least wanted model with nothing queued (or whose queue its batch now
 * drains), sparing those within their min_resident while another will do;
 * when load holds the oldest request, then idle models with younger
 * requests, least recently used first. */
static int demand_pick(void *ctx, const struct evict_room *room)
{
    struct demand_pick *p = ctx;
    const struct sched_view *v = p->v;
    struct evict_model em[SCHED_MAX_MODELS];
    int pick = -1;
    /* models within their min_resident only when no other makes room */
    for (int pass = 0; pass < 2 && pick < 0; pass++) {
        bool spare = pass == 0;
        pick = least_wanted(v, p->memo, p->chosen, p->busy, false, spare);
        if (pick < 0 && p->oldest) { /* then idle with requests younger than ours, LRU */
            sched_evict_view(v, em);
            for (int i = 0; i < v->n_models; i++) {
                const struct sched_model *c = &v->models[i];
                em[i].evictable =
                    !p->chosen[i] && evictable(v, c) && !c->running && c->queue_len > 0 &&
                    c->head_arrival >= v->models[p->load].head_arrival && !(spare && young(v, c));
            }
            pick = evict_lru(em, v->n_models);
        }
    }
    if (pick >= 0)
        p->chosen[pick] = true;
    return pick;
}

/* Victims for a load of `load` that waits for a request; true when it fits
 * (a victim the others make room without is not one: it stays unchosen). */
static bool demand_victims(const struct sched_view *v, struct demand_memo *memo, const bool *busy,
                           int load, bool oldest, struct evict_room *r, struct sched_action *a,
                           bool *chosen)
{
    struct demand_pick p = {
        .v = v, .memo = memo, .busy = busy, .load = load, .oldest = oldest, .chosen = chosen};
    int taken, n = sched_victims(v, load, r, demand_pick, &p, a, &taken);
    for (int k = n; k >= 0 && k < taken; k++)
        chosen[a->victims[k]] = false;
    return n >= 0;
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

/* prefetch's order (the victim loop's pick): idle models with nothing
 * queued, least wanted first, while clearly less wanted than the prefetch
 * (pd, its demand). */
struct prefetch_pick {
    const struct sched_view *v;
    struct demand_memo *memo;
    bool *chosen;
    double pd;
};

static int prefetch_pick(void *ctx, const struct evict_room *room)
{
    struct prefetch_pick *p = ctx;
    int pick = least_wanted(p->v, p->memo, p->chosen, NULL, true, true);
    double dp = pick < 0 ? 0 : demand(p->v, p->memo, pick);
    if (pick < 0 || (p->memo->future ? dp >= p->pd : dp + SW_PREFETCH_MARGIN > p->pd))
        return -1;
    p->chosen[pick] = true;
    return pick;
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
    sched_room_init(v, &r);
    *a = (struct sched_action){.kind = SCHED_LOAD, .model = p};
    chosen[p] = true; /* never its own victim */
    struct prefetch_pick pp = {.v = v, .memo = memo, .chosen = chosen, .pd = pd};
    int taken, n = sched_victims(v, p, &r, prefetch_pick, &pp, a, &taken);
    for (int k = n < 0 ? 0 : n; k < taken; k++) /* dropped, or all when it failed */
        chosen[a->victims[k]] = false;
    if (n >= 0)
        return true;
    chosen[p] = false;
    return false;
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
int sched_swapwise_run(const struct sched_view *v, struct sched_action *out, int max, bool future,
                       bool trim)
{
    int n = 0;
    /* long batches: the fuller batch first, for the load and the batches,
     * until the older head has waited SW_FULLER_WAIT batches */
    double fuller_wait = SW_FULLER_WAIT * batches_long(v);
    bool fuller = fuller_wait > 0;
    int load = v->any_loading ? -1 : sched_first_waiting_by(v, not_resident, fuller_wait);
    int oldest = sched_oldest_head(v, any_model);
    bool chosen[SCHED_MAX_MODELS] = {false};
    double memo_d[SCHED_MAX_MODELS];
    struct demand_memo memo_s = {.d = memo_d, .future = future}, *memo = &memo_s;
    bool need = false; /* the load lacks room for now */
    bool busy[SCHED_MAX_DEVICES] = {false};
    for (int i = 0; i < v->n_models; i++)
        memo_d[i] = NAN;
    double wake = INFINITY;
    if ((n = sched_keep_alive_unloads(v, INFINITY, chosen, out, 0, max, &wake)) > 0)
        return n;
    /* where copies take compute, a load occupies its devices as a batch does */
    bool copy_busy = !v->overlap_loads;
    for (int i = 0; i < v->n_models; i++)
        for (int d = 0; d < v->n_devices; d++)
            if (((v->models[i].running && !v->models[i].apart) ||
                 (copy_busy && v->models[i].loading)) &&
                v->models[i].bytes[d] > 0)
                busy[d] = true;
    bool held = false; /* the load waits for its devices' batches to end */
    struct sched_action a = {.kind = SCHED_LOAD, .model = load, .trim = trim};
    if (load >= 0) {
        struct evict_room r;
        sched_room_init(v, &r);
        chosen[load] = true; /* partly resident, it would be evictable: never its own victim */
        /* a victim with a batch in flight leaves at its end: the engine
         * starts the load once the room is there */
        /* with long batches a victim gets no last batch, so one whose queue
         * fits a batch is no longer as good as one with nothing queued */
        need = !demand_victims(v, memo, fuller ? NULL : busy, load, load == oldest, &r, &a, chosen);
        if (!need && trim)
            trim_helpers(v, memo, &a, chosen);
        held = !need && copy_busy &&
               (!devices_free(v, &v->models[load], busy) || older_work_shares(v, load, chosen));
        for (int k = 0; !need && !held && k < a.n_victims; k++) {
            const struct sched_model *c = &v->models[a.victims[k]];
            /* its last batch, then it goes; with long batches it goes now
             * (its requests wait for a reload, cheaper than the batch) */
            if (c->queue_len > 0 && !c->running && !fuller && n < max) {
                out[n++] = (struct sched_action){.kind = SCHED_SERVE, .model = a.victims[k]};
                for (int d = 0; !c->apart && d < v->n_devices; d++)
                    busy[d] |= c->bytes[d] > 0;
            }
        }
        if (!need && !held && n < max) {
            out[n++] = a;
            for (int d = 0; copy_busy && d < v->n_devices; d++)
                busy[d] |= v->models[load].bytes[d] > 0;
        }
    } else if (!v->any_loading && v->overlap_loads && n < max && prefetch(v, memo, &a, chosen)) {
        a.trim = trim;
        out[n++] = a;
    }
    /* Batches for resident models, in sched_goes_before order, at most one at a
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
            if (devices_free(v, c, busy) &&
                (pick < 0 || sched_goes_before_by(v, i, pick, fuller_wait)))
                pick = i;
        }
        if (pick < 0)
            break;
        served[pick] = true;
        for (int d = 0; !v->models[pick].apart && d < v->n_devices; d++)
            busy[d] |= v->models[pick].bytes[d] > 0;
        out[n++] = (struct sched_action){.kind = SCHED_SERVE, .model = pick};
    }
    return sched_add_wake(v, out, n, max, wake);
}

int sched_swapwise_decide(const struct sched_view *v, struct sched_action *out, int max)
{
    return sched_swapwise_run(v, out, max, false, false);
}

/* ---- swapwise-partial, clairvoyant-partial: with partial residency ----
 * The same rules, each load trimming its victims (sched_action.trim): they
 * give up only the last layers the load lacks room for and keep their
 * first ones, so a victim wanted again reloads only what it lost (and with
 * overlap_loads starts computing at once). */
static int swapwise_partial_decide(const struct sched_view *v, struct sched_action *out, int max)
{
    return sched_swapwise_run(v, out, max, false, true);
}

const struct sched_policy sched_policy_swapwise = {
    .name = "swapwise",
    .help = "byte budgets; serve resident models while one loads; evict models with empty "
            "queues, least likely wanted within a load's time first (forecast); prefetch "
            "models with regular arrivals; one load at a time, oldest request first",
    .decide = sched_swapwise_decide,
    .batch_same_params_only = false,
};

const struct sched_policy sched_policy_swapwise_partial = {
    .name = "swapwise-partial",
    .help = "swapwise with partial residency: a load's victims give up only the last layers "
            "it lacks room for and keep their first ones; a victim wanted again reloads only "
            "what it lost",
    .decide = swapwise_partial_decide,
    .batch_same_params_only = false,
};
