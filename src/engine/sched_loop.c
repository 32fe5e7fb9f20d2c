/* The scheduler thread: the policy's snapshot (view_build), carrying out its
 * actions (the executor table sched_act calls), loads and the explicit
 * defragmentation step, admin loads and unloads, queued deadlines, pinned
 * models that block a load, and completions of requests that never ran. */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/hist.h"
#include "core/timing.h"
#include "engine/engine_impl.h"
#include "sched/sched.h"

#define MAX_ACTIONS 16

/* A first step's expected time for a batch taken from a queue of q: the
 * estimate for that size, else the nearest size measured; 0 when none is. */
static double step_estimate(const struct engine *e, int q)
{
    int b = q < e->cfg.max_batch ? q : e->cfg.max_batch;
    for (int d = 0; b > 0 && d < e->cfg.max_batch; d++) {
        if (b - d >= 1 && e->step_s[b - d] > 0)
            return e->step_s[b - d];
        if (b + d <= e->cfg.max_batch && e->step_s[b + d] > 0)
            return e->step_s[b + d];
    }
    return 0;
}

/* Notes a load that finished since the last look (lock held). */
void load_check(struct engine *e, struct engine_model *m, bool loading)
{
    if (m->was_loading && !loading) {
        m->was_loading = false;
        double load_s = swap_model_load_seconds(e->mgr, m->sm);
        if (m->base) { /* an adapter's: its own counters, not the policy's load estimate */
            e->stats.adapter_load_s += load_s;
        } else {
            e->load_s = load_s;
            e->stats.swap_s += load_s;
        }
        m->load_s += load_s;
        hist_add(&m->load, load_s);
        /* a failed load (a checkpoint truncated while served, ...) leaves the
         * devices again: the requests that waited for it fail with its
         * message rather than start another load that fails the same way.
         * A later request tries again. */
        char why[512];
        int code = swap_model_load_error(e->mgr, m->sm, why, sizeof(why));
        if (e->cfg.on_move) {
            struct engine_move mv = {.kind =
                                         code < 0 ? ENGINE_MOVE_LOAD_FAILED : ENGINE_MOVE_LOADED,
                                     .model = swap_model_name(m->sm),
                                     .device = -1,
                                     .bytes = m->load_bytes,
                                     .seconds = load_s,
                                     .why = code < 0 ? why : NULL};
            e->cfg.on_move(e->cfg.move_ctx, &mv);
        }
        if (code < 0)
            while (m->head)
                queue_fail(m, m->head, code, why);
    }
}

uint64_t model_held_bytes(struct engine *e, const struct engine_model *m)
{
    uint64_t held = 0;
    for (int d = 0; d < swap_device_count(e->mgr); d++)
        held += swap_model_resident_bytes(e->mgr, m->sm, d);
    return held;
}

void move_leave(struct engine *e, struct engine_model *m, enum engine_move_kind kind,
                const struct engine_model *for_model, bool deferred, uint64_t bytes)
{
    if (!e->cfg.on_move)
        return;
    double now = time_now();
    struct engine_move mv = {
        .kind = kind,
        .model = swap_model_name(m->sm),
        .for_model = for_model ? swap_model_name(for_model->sm) : NULL,
        .device = -1,
        .seconds = kind == ENGINE_MOVE_IDLE
                       ? now - (m->idle_since > m->loaded_at ? m->idle_since : m->loaded_at)
                       : now - m->loaded_at,
        .bytes = bytes,
        .keep_alive = m->keep_alive,
        .deferred = deferred};
    e->cfg.on_move(e->cfg.move_ctx, &mv);
}

/* What of its batches' reserve on d is held for it and not allocated. */
static uint64_t reserve_rest(const struct engine_model *m, int d)
{
    return m->reserve[d] > m->batch_bytes[d] ? m->reserve[d] - m->batch_bytes[d] : 0;
}

/* Expert-level residency: device bytes on d of the experts m lacks while
 * its batch may load them on demand (swap_experts_request), that is while
 * it is resident with requests queued, a batch in flight or one paused;
 * 0 otherwise (an idle model's absent experts are free memory). They are
 * held for it as its batch's reserve is (room_over), so no other load or
 * batch takes them and a step never finds its device short (lock held). */
static uint64_t experts_wanted(struct engine *e, const struct engine_model *m, int d)
{
    if (!swap_model_expert_residency(m->sm) ||
        (m->queue_len == 0 && !m->running && m->n_paused == 0) ||
        swap_residency(e->mgr, m->sm) != RES_ON_DEVICE)
        return 0;
    uint64_t all = swap_model_device_bytes(m->sm, d);
    uint64_t held = swap_model_resident_bytes(e->mgr, m->sm, d);
    return all > held ? all - held : 0;
}

/* What m's weights take on d in the view: all of them, but for a resident
 * model with expert residency the experts it holds and those it wants
 * (experts_wanted), so evicting an idle one frees what it holds (lock
 * held). */
static uint64_t weights_in_view(struct engine *e, const struct engine_model *m, enum residency r,
                                int d)
{
    if (r != RES_ON_DEVICE || !swap_model_expert_residency(m->sm))
        return swap_model_device_bytes(m->sm, d);
    return swap_model_resident_bytes(e->mgr, m->sm, d) + experts_wanted(e, m, d);
}

/* Per device, what is allocated plus what resident models' batches may
 * still allocate (their reserves, and the experts they load on demand:
 * experts_wanted, held for them) beyond the budget, into over (0: they
 * fit); the budget less those, into free (lock held). A reserve grows with
 * the requests a resident model takes, and a trimmed model's experts are
 * wanted again with its first request, so they can pass what its weights'
 * load left free. */
static void room_over(struct engine *e, uint64_t *over, uint64_t *free_bytes)
{
    uint64_t held[SCHED_MAX_DEVICES] = {0};
    const int n_dev = swap_device_count(e->mgr);
    for (int id = 0; id < e->n_ids; id++) {
        struct engine_model *m = e->models[id];
        enum residency r = m ? swap_residency(e->mgr, m->sm) : RES_ON_DISK;
        if (r != RES_LOADING && r != RES_ON_DEVICE)
            continue;
        for (int d = 0; d < n_dev; d++)
            held[d] += reserve_rest(m, d) + experts_wanted(e, m, d);
    }
    for (int d = 0; d < n_dev; d++) {
        struct device *dev = swap_device(e->mgr, d);
        uint64_t taken = device_used(dev) + held[d], budget = device_budget(dev);
        over[d] = taken > budget ? taken - budget : 0;
        if (free_bytes)
            free_bytes[d] = taken < budget ? budget - taken : 0;
    }
}

/* Whether m, resident, is short of room for its batch: it waits for one
 * (requests queued, no batch in flight or paused), holds an unallocated
 * reserve, or wants absent experts (experts_wanted), on a device whose
 * reserves pass the budget (over), and so could not allocate its batch or
 * load the experts its steps route to. Such a model is shown to the
 * policy as partly resident, lacking over[d] there: the policy makes that
 * room as for a load, with the victims it would choose for one (trims of
 * other idle models' cold experts first under a trimming policy); then it
 * is served in place, its experts loaded on demand (lock held). */
static bool room_short(struct engine *e, const struct engine_model *m, const uint64_t *over)
{
    if (swap_residency(e->mgr, m->sm) != RES_ON_DEVICE || m->queue_len == 0 || m->running ||
        m->n_paused > 0 || atomic_load(&m->pause))
        return false;
    for (int d = 0; d < swap_device_count(e->mgr); d++)
        if (over[d] > 0 && (reserve_rest(m, d) > 0 || experts_wanted(e, m, d) > 0))
            return true;
    return false;
}

/* Folds base m's adapters into its entry of the view, so the policy sees
 * bases only (lock held): their waiting requests are its own (those of an
 * adapter not on its devices while m is resident wait for the adapter's
 * load, not for m: not counted, unless that load found no room), its bytes
 * and resident bytes count its adapters on their devices; an adapter whose
 * load found no room (room_blocked) makes m look partly resident, short of
 * the adapter's bytes, so the policy makes that room as for a load. */
static void view_fold(struct engine *e, struct engine_model *m, enum residency r,
                      struct sched_model *s, int n_devices)
{
    bool base_in = r == RES_LOADING || r == RES_ON_DEVICE;
    /* while one of its adapters is on its devices, the room a blocked one
     * lacks comes from that one once it is idle (adapter_victim): the base
     * stays servable so that it gets there */
    bool any_on = false;
    for (struct engine_model *a = m->adapters; a && !any_on; a = a->next_adapter) {
        enum residency ar = swap_residency(e->mgr, a->sm);
        any_on = ar == RES_ON_DEVICE || ar == RES_LOADING;
    }
    /* requests held back for an adapter that waits past its bound
     * (queue_peek) do not count */
    const struct engine_model *starving =
        base_in ? adapter_starving(m, time_now(), atomic_load(&m->lora_rank)) : NULL;
    double cut = starving ? starving->head->t.t_arrival : INFINITY;
    for (struct engine_model *a = m->adapters; a; a = a->next_adapter) {
        enum residency ar = swap_residency(e->mgr, a->sm);
        bool on = ar == RES_ON_DEVICE || ar == RES_LOADING;
        bool blocked = base_in && !any_on && a->room_blocked && a->queue_len > 0;
        bool held_back = a->head && a != starving && !a->pinned && a->head->t.t_arrival > cut;
        if (a->head && !held_back && (!base_in || ar == RES_ON_DEVICE || blocked)) {
            s->queue_len += a->queue_len;
            if (!s->head_arrival || a->head->t.t_arrival < s->head_arrival)
                s->head_arrival = a->head->t.t_arrival;
        }
        if (blocked)
            s->resident = false;
        for (int d = 0; d < n_devices && (on || blocked); d++) {
            uint64_t w = swap_model_device_bytes(a->sm, d);
            s->bytes[d] += w;
            if (on && base_in)
                s->resident_bytes[d] += w;
        }
    }
}

/* The policy's snapshot of the models being served: view index i is model
 * map[i] (lock held). */
static void view_build(struct engine *e, struct engine_model **map, struct sched_model *sm,
                       struct sched_view *v)
{
    double now = time_now();
    memset(v, 0, sizeof(*v));
    v->now = now;
    v->n_devices = swap_device_count(e->mgr);
    v->models = sm;
    v->max_loaded = e->cfg.max_loaded;
    v->max_batch = e->cfg.max_batch;
    v->overlap_loads = e->cfg.overlap_loads;
    v->load_s = e->load_s;
    /* free memory: the budget, less what is allocated, less what resident
     * models' batches may still allocate (their reserves, held for them) */
    uint64_t over[SCHED_MAX_DEVICES];
    room_over(e, over, v->free_bytes);
    int n = 0;
    for (int id = 0; id < e->n_ids; id++) {
        struct engine_model *m = model_get(e, id);
        if (!m)
            continue;
        enum residency r = swap_residency(e->mgr, m->sm);
        load_check(e, m, r == RES_LOADING); /* a failed load empties the queue */
        if (m->base)
            continue; /* folded into its base (view_fold) */
        int i = n++;
        map[i] = m;
        memset(&sm[i], 0, sizeof(sm[i]));
        /* this view counts a trimmed model's reserve free already */
        memset(m->trim_credit, 0, sizeof(m->trim_credit));
        /* a paused batch's sequences wait as its queue does, from their
         * arrival */
        sm[i].queue_len = m->queue_len + m->n_paused;
        sm[i].head_arrival = m->head ? m->head->t.t_arrival : 0;
        if (m->n_paused && (!m->head || m->paused_arrival < sm[i].head_arrival))
            sm[i].head_arrival = m->paused_arrival;
        sm[i].paused = m->n_paused;
        sm[i].preempt_pending = atomic_load(&m->pause);
        sm[i].batch_start = m->batch_start;
        /* a resident model whose batch lacks room needs that room as a
         * load would (room_short) */
        bool room_lacks = room_short(e, m, over);
        sm[i].resident = (r == RES_LOADING || r == RES_ON_DEVICE) && !room_lacks;
        sm[i].loading = r == RES_LOADING;
        sm[i].load_frac = sm[i].loading ? m->load_frac : 0;
        sm[i].running = m->running;
        for (int k = 0; k < swap_model_shard_count(m->sm) && !sm[i].apart; k++)
            sm[i].apart =
                device_proc(swap_device(e->mgr, swap_shard_device(swap_model_shard(m->sm, k)))) > 0;
        sm[i].offload_pending = m->offload_pending;
        sm[i].pinned = m->pinned;
        sm[i].last_used = m->last_used;
        sm[i].loaded_at = m->loaded_at;
        sm[i].idle_since = m->idle_since > m->loaded_at ? m->idle_since : m->loaded_at;
        sm[i].next_arrival = INFINITY; /* the engine does not know the future */
        sm[i].keep_alive = m->keep_alive;
        sm[i].priority = m->priority;
        sm[i].max_queue_wait = m->max_queue_wait;
        sm[i].min_resident = m->min_resident;
        sm[i].arrivals = m->arrivals;
        sm[i].batch_s = step_estimate(e, m->queue_len);
        /* its weights and its batches' memory leave or come together; a
         * paused (or pausing) batch's memory stays where it is, so the model
         * frees, and needs again, its weights and the rest of its reserve */
        bool keeps = m->n_paused > 0 || atomic_load(&m->pause);
        for (int d = 0; d < v->n_devices; d++) {
            uint64_t rest = m->reserve[d] > m->batch_bytes[d] ? m->reserve[d] - m->batch_bytes[d]
                                                              : 0;
            sm[i].bytes[d] = weights_in_view(e, m, r, d) + rest + (keeps ? 0 : m->batch_bytes[d]);
            sm[i].batch_bytes[d] = m->batch_bytes[d];
            /* partly resident (trimmed): its kept weights only, its reserve
             * is not held (above) */
            sm[i].resident_bytes[d] =
                sm[i].resident ? sm[i].bytes[d]
                : room_lacks
                    ? sm[i].bytes[d] - (over[d] < sm[i].bytes[d] ? over[d] : sm[i].bytes[d])
                : r == RES_PARTIAL || r == RES_OFFLOADING
                    ? swap_model_resident_bytes(e->mgr, m->sm, d)
                    : 0;
        }
        view_fold(e, m, r, &sm[i], v->n_devices);
        v->any_loading |= sm[i].loading;
        v->any_running |= m->running;
    }
    v->n_models = n;
}

/* A load started by the scheduler (lock held): of bytes, those it copies
 * (swap_model_missing_bytes before it began: a loader may have finished
 * already). */
static void load_started(struct engine *e, struct engine_model *m, double now, uint64_t bytes,
                         double frac)
{
    if (m->base) { /* an adapter's load: counted apart from the models' */
        e->stats.adapter_loads++;
        e->stats.adapter_bytes_loaded += bytes;
    } else {
        e->stats.loads++;
    }
    m->loads++;
    m->bytes_loaded += bytes;
    m->load_bytes = bytes;
    m->load_frac = frac;
    m->was_loading = true;
    m->loaded_at = now;
    m->last_used = now;
}

/* Loads model, for a SCHED_LOAD whose victims have gone. The swap manager
 * never picks a victim: it refuses (ERR_BUSY) and says why. Short of bytes
 * (a victim with a batch in flight leaves at its end), or waiting for memory
 * an offload is still copying back: that end or the listener wakes us. Free
 * bytes in pieces too small for a blob: the explicit fragmentation step,
 * offloading the model sched_defrag_victim names (swap_compact, counted),
 * until the blobs find their blocks. Nothing here waits on the manager. */
static int start_load(struct engine *e, struct engine_model **map, struct sched_model *sm,
                      int model)
{
    struct swap_model *sw = map[model]->sm;
    struct swap_room why;
    int rc;
    while ((rc = swap_load(e->mgr, sw, &why)) == ERR_BUSY &&
           why.kind == SWAP_ROOM_FRAGMENTED && why.leaving == 0) {
        struct sched_view v;
        view_build(e, map, sm, &v);
        int victim = sched_defrag_victim(&v, model, why.device);
        uint64_t held = victim < 0 ? 0 : model_held_bytes(e, map[victim]);
        if (victim < 0 || swap_compact(e->mgr, why.device, map[victim]->sm) < 0)
            break;
        move_leave(e, map[victim], ENGINE_MOVE_EVICTED, map[model], false, held);
        e->stats.evictions++;
        map[victim]->evictions++;
    }
    return rc;
}

/* The batches that found their device's free memory in pieces
 * (batch_alloc: frag_device): the fragmentation step of a load, for each,
 * offloading the model sched_defrag_victim names there (swap_compact,
 * counted); its end frees the blocks and the batch is tried again. When no
 * model may leave, the model's next failure is its batch's own error.
 * Returns whether a model was offloaded (lock held). */
static bool defrag_batches(struct engine *e, struct engine_model **map, struct sched_view *v)
{
    bool moved = false;
    for (int i = 0; i < v->n_models; i++) {
        struct engine_model *m = map[i];
        int d = m->frag_device;
        if (d < 0)
            continue;
        m->frag_device = -1;
        int victim = sched_defrag_victim(v, i, d);
        uint64_t held = victim < 0 ? 0 : model_held_bytes(e, map[victim]);
        if (victim < 0 || swap_compact(e->mgr, d, map[victim]->sm) < 0) {
            m->frag_none = true;
            m->mem_wait = false;
            continue;
        }
        move_leave(e, map[victim], ENGINE_MOVE_EVICTED, m, false, held);
        e->stats.evictions++;
        map[victim]->evictions++;
        moved = true;
    }
    return moved;
}

/* ---- adapters: loads for their queued requests, room among them ---- */

/* The idle adapter on device d that leaves first to make room for another
 * adapter's load (lock held): on its devices, not pinned, no sequence in a
 * batch and none waiting, least recently used; NULL when none may leave.
 * For an adapter that waits past its bound (adapter_starving), one with
 * requests waiting may leave too when its oldest arrived after for_a's. */
static struct engine_model *adapter_victim(struct engine *e, int d, struct engine_model *for_a)
{
    struct engine_model *best = NULL;
    bool starving = for_a->head && adapter_starving(for_a->base, time_now(), INT32_MAX) == for_a;
    for (int id = 0; id < e->n_ids; id++) {
        struct engine_model *v = model_get(e, id);
        if (!v || !v->base || v == for_a || v->pinned || v->seq_uses > 0 ||
            (v->queue_len > 0 && (!starving || v->head->t.t_arrival <= for_a->head->t.t_arrival)) ||
            swap_model_device_bytes(v->sm, d) == 0 ||
            swap_residency(e->mgr, v->sm) != RES_ON_DEVICE)
            continue;
        if (!best || v->last_used < best->last_used)
            best = v;
    }
    return best;
}

/* An adapter leaves its devices (its base stays), counted as the policy's
 * eviction of a model or its idle unload (lock held). */
static bool adapter_leave(struct engine *e, struct engine_model *v,
                          const struct engine_model *for_a)
{
    uint64_t held = model_held_bytes(e, v);
    if (swap_offload(e->mgr, v->sm, false) < 0)
        return false;
    if (for_a) {
        e->stats.evictions++;
        v->evictions++;
    } else {
        v->idle_unloads++;
    }
    move_leave(e, v, for_a ? ENGINE_MOVE_EVICTED : ENGINE_MOVE_IDLE, for_a, false, held);
    return true;
}

/* Starts the load of adapter a, whose base is resident, making room among
 * the idle adapters on its devices first: room as the view counts it (the
 * budget less what is allocated and the resident models' batch reserves),
 * so an adapter never takes its base's batch memory. Sets a->room_blocked
 * when no idle adapter can make the room and nothing is leaving. Returns
 * whether it started (lock held). */
static bool adapter_load(struct engine *e, struct engine_model *a)
{
    const int n_dev = swap_device_count(e->mgr);
    uint64_t over[SCHED_MAX_DEVICES], free_bytes[SCHED_MAX_DEVICES];
    for (;;) {
        room_over(e, over, free_bytes);
        int short_on = -1;
        for (int d = 0; d < n_dev && short_on < 0; d++)
            if (swap_model_device_bytes(a->sm, d) > free_bytes[d])
                short_on = d;
        struct swap_room why = {.kind = SWAP_ROOM_OK, .device = short_on};
        uint64_t bytes = swap_model_missing_bytes(e->mgr, a->sm);
        int rc = short_on >= 0 ? ERR_BUSY : swap_load(e->mgr, a->sm, &why);
        if (rc == 0) {
            load_started(e, a, time_now(), bytes, 1);
            a->room_blocked = false;
            return true;
        }
        if (why.kind != SWAP_ROOM_OK && why.kind != SWAP_ROOM_BYTES &&
            why.kind != SWAP_ROOM_FRAGMENTED)
            return false; /* moving, the host tier, its base leaving: an end wakes us */
        if (why.leaving > 0)
            return false; /* an offload under way frees it: its end wakes us */
        struct engine_model *v = adapter_victim(e, why.device, a);
        if (!v || !adapter_leave(e, v, a)) {
            a->room_blocked = true;
            return false;
        }
    }
}

/* Adapters whose base is on its devices: those with requests waiting (or
 * pinned) are loaded; an idle one past its keep_alive leaves. Returns
 * whether a load started, an adapter left or one's load found no room
 * where it had not (room_blocked set: the view changed); lowers wake_at to the next
 * keep_alive's end (lock held). */
static bool adapters_run(struct engine *e)
{
    bool progress = false;
    double now = time_now();
    for (int id = 0; id < e->n_ids; id++) {
        struct engine_model *m = model_get(e, id);
        if (!m || m->base || !m->adapters)
            continue;
        enum residency r = swap_residency(e->mgr, m->sm);
        bool base_in = (r == RES_LOADING || r == RES_ON_DEVICE) && !m->offload_pending;
        for (struct engine_model *a = m->adapters; a; a = a->next_adapter) {
            if (a->removed)
                continue;
            enum residency ar = swap_residency(e->mgr, a->sm);
            if (!base_in) {
                a->room_blocked = false;
                continue;
            }
            if (ar == RES_ON_DISK || ar == RES_IN_HOST || ar == RES_PARTIAL) {
                /* a load that just found no room changes the view (view_fold,
                 * pinned_block): the caller looks again */
                bool was_blocked = a->room_blocked;
                if ((a->queue_len > 0 || a->pinned) &&
                    (adapter_load(e, a) || (a->room_blocked && !was_blocked)))
                    progress = true;
                continue;
            }
            /* on its devices: an idle one leaves past its keep_alive */
            double since = a->idle_since > a->loaded_at ? a->idle_since : a->loaded_at;
            if (ar != RES_ON_DEVICE || a->pinned || a->seq_uses > 0 || a->queue_len > 0 ||
                isnan(a->keep_alive) || isinf(a->keep_alive))
                continue;
            if (now - since >= a->keep_alive)
                progress |= adapter_leave(e, a, NULL);
            else if (since + a->keep_alive < e->wake_at)
                e->wake_at = since + a->keep_alive;
        }
    }
    return progress;
}

/* ---- carrying out the policy's actions (sched_act), lock held ---- */

/* The executor's context: the engine and the view's index map (view index i
 * is model map[i]); sm is the snapshot's storage, which start_load rebuilds. */
struct exec {
    struct engine *e;
    struct engine_model **map;
    struct sched_model *sm;
    bool idle; /* the action is a SCHED_UNLOAD: its offload is counted as one */
    int incoming; /* a SCHED_LOAD's model, whose room its victims make; -1: none */
};

static bool exec_running(void *ctx, int model)
{
    struct exec *x = ctx;
    return x->map[model]->running;
}

/* The runner takes its batch from the queue (runner.c's task). */
static bool exec_serve(void *ctx, int model)
{
    struct exec *x = ctx;
    struct engine_model *m = x->map[model];
    if (m->mem_wait || swap_use_begin(x->e->mgr, m->sm) < 0)
        return false;
    m->running = true;
    m->last_used = m->batch_start = time_now();
    runner_serve(m);
    return true;
}

/* The swap manager refuses what may not leave; a deferred offload is carried
 * out by the runner's swap_use_end. */
static bool exec_offload(void *ctx, int model, bool defer)
{
    struct exec *x = ctx;
    struct engine_model *v = x->map[model];
    bool preempted = !x->idle && (v->n_paused > 0 || atomic_load(&v->pause));
    uint64_t held = model_held_bytes(x->e, v);
    if (swap_offload(x->e->mgr, v->sm, defer) < 0)
        return false;
    if (x->idle) {
        v->idle_unloads++;
    } else if (preempted) {
        v->preempt_unloads++; /* its batch waits on the devices for its return */
    } else {
        x->e->stats.evictions++;
        v->evictions++;
    }
    move_leave(x->e, v,
               x->idle     ? ENGINE_MOVE_IDLE
               : preempted ? ENGINE_MOVE_PREEMPTED
                           : ENGINE_MOVE_EVICTED,
               x->incoming >= 0 ? x->map[x->incoming] : NULL, defer, held);
    v->offload_pending = defer;
    return true;
}

/* The runner pauses at its next step boundary (runner.c's batch_next_step). */
static bool exec_preempt(void *ctx, int model)
{
    struct exec *x = ctx;
    struct engine_model *m = x->map[model];
    if (!m->running || m->removed)
        return false;
    atomic_store(&m->pause, true);
    return true;
}

static bool exec_pausing(void *ctx, int model)
{
    struct exec *x = ctx;
    return x->map[model]->n_paused > 0 || atomic_load(&x->map[model]->pause);
}

/* The share of a whole load a load of m copies now: the largest share of
 * its weights missing on any of its devices (the shards load in parallel);
 * 1 for a model with nothing kept. Read before the load starts. */
static double missing_share(struct engine *e, const struct engine_model *m)
{
    double most = 0;
    for (int d = 0; d < swap_device_count(e->mgr); d++) {
        uint64_t all = swap_model_device_bytes(m->sm, d);
        uint64_t kept = swap_model_resident_bytes(e->mgr, m->sm, d);
        if (all > 0 && kept < all && (double)(all - kept) / (double)all > most)
            most = (double)(all - kept) / (double)all;
    }
    return most;
}

static bool exec_load(void *ctx, int model)
{
    struct exec *x = ctx;
    struct engine_model *m = x->map[model];
    if (swap_residency(x->e->mgr, m->sm) == RES_ON_DEVICE) {
        /* resident, short of its batch's room (room_short): nothing to copy;
         * the room is there once the victims' memory is free, else their
         * offloads' ends (the listener) or batches' ends wake us */
        uint64_t over[SCHED_MAX_DEVICES];
        room_over(x->e, over, NULL);
        if (room_short(x->e, m, over))
            return false;
        /* short of an adapter's room (view_fold): the adapter's load is
         * tried again once the victims' memory is free (adapters_run), and
         * an offload's end or a batch's wakes us; not progress by itself */
        for (struct engine_model *a = m->adapters; a; a = a->next_adapter)
            if (a->room_blocked)
                return false;
        return true;
    }
    uint64_t bytes = swap_model_missing_bytes(x->e->mgr, m->sm);
    double frac = missing_share(x->e, m);
    if (start_load(x->e, x->map, x->sm, model) < 0)
        return false;
    load_started(x->e, m, time_now(), bytes, frac);
    return true;
}

/* A victim of a trimming load gives up its last layers on device. What it
 * frees in the view's terms: the weights swap_trim released and, the first
 * time it is asked on a device since it stopped being resident, the rest of
 * its reserve there (held only for a resident model: view_build), so it is
 * asked for that much less; a resident one gives up one layer at least, as
 * its reserve goes only with its residency. A paused batch's memory stays
 * where it is, as for an offload. */
static uint64_t exec_trim(void *ctx, int model, int device, uint64_t bytes)
{
    struct exec *x = ctx;
    struct engine_model *m = x->map[model];
    if (m->running || m->removed || device < 0 || device >= swap_device_count(x->e->mgr))
        return 0;
    bool resident = swap_residency(x->e->mgr, m->sm) == RES_ON_DEVICE;
    for (int d = 0; resident && d < SCHED_MAX_DEVICES; d++)
        m->trim_credit[d] = reserve_rest(m, d);
    uint64_t credit = m->trim_credit[device], got = 0;
    uint64_t ask = bytes > credit ? bytes - credit : 1;
    if (resident && swap_model_expert_residency(m->sm)) {
        /* expert residency: when its cold experts there cover all of bytes
         * it stays resident (its reserve held), so it is asked for all of
         * it; else it gives up every expert there and a layer at least, and
         * its reserve goes with its residency */
        uint64_t xb = swap_model_expert_bytes(x->e->mgr, m->sm, device);
        ask = xb >= bytes ? bytes : ask > xb ? ask : xb + 1;
    }
    if (resident || bytes > credit) {
        int rc = swap_trim(x->e->mgr, m->sm, device, ask, &got);
        if (resident && (rc < 0 || got == 0)) { /* still resident: its reserve stays held */
            memset(m->trim_credit, 0, sizeof(m->trim_credit));
            return 0;
        }
        /* expert residency: its cold experts went, it is still resident
         * and its reserve stays held */
        if (resident && swap_residency(x->e->mgr, m->sm) == RES_ON_DEVICE) {
            memset(m->trim_credit, 0, sizeof(m->trim_credit));
            m->trims++;
            m->bytes_trimmed += got;
            x->e->stats.trims++;
            return got;
        }
    }
    m->trim_credit[device] = 0;
    if (got > 0) {
        m->trims++;
        m->bytes_trimmed += got;
        x->e->stats.trims++;
        if (x->e->cfg.on_move) {
            struct engine_move mv = {
                .kind = ENGINE_MOVE_TRIMMED,
                .model = swap_model_name(m->sm),
                .for_model = x->incoming >= 0 ? swap_model_name(x->map[x->incoming]->sm) : NULL,
                .device = device,
                .bytes = got,
                .seconds = time_now() - m->loaded_at};
            x->e->cfg.on_move(x->e->cfg.move_ctx, &mv);
        }
    }
    return got + credit;
}

static void exec_wake(void *ctx, double at)
{
    struct exec *x = ctx;
    x->e->wake_at = at < x->e->wake_at ? at : x->e->wake_at;
}

/* The config's on_sched_op, with the model's id for its view index. */
static void exec_carried(void *ctx, const struct sched_carried *c)
{
    struct exec *x = ctx;
    if (!x->e->cfg.on_sched_op)
        return;
    struct sched_carried op = *c;
    op.model = x->map[c->model]->id;
    x->e->cfg.on_sched_op(x->e->cfg.sched_op_ctx, &op);
}

static const struct sched_exec_ops exec_ops = {
    .running = exec_running,
    .serve = exec_serve,
    .offload = exec_offload,
    .load = exec_load,
    .preempt = exec_preempt,
    .pausing = exec_pausing,
    .trim = exec_trim,
    .wake = exec_wake,
    .carried = exec_carried,
};

/* For adapter a's admin load: its base on its devices first. Returns 0 when
 * the base is there (the adapter's load may start), 1 while the base's load
 * (started here) or its leaving is under way, or the error: the base's load
 * refused, or the base gone again after its load (lock held). */
static int admin_load_base(struct engine *e, struct engine_model *a)
{
    struct engine_model *b = a->base;
    enum residency br = swap_residency(e->mgr, b->sm);
    if (br == RES_ON_DEVICE && !b->offload_pending)
        return 0;
    if (br == RES_LOADING || br == RES_OFFLOADING || br == RES_ON_DEVICE)
        return 1; /* loading, or leaving (a deferred offload too): its end wakes us */
    char why[512];
    if (a->admin_base) /* its load ended without it on its devices */
        return swap_model_load_error(e->mgr, b->sm, why, sizeof(why)) < 0
                   ? err_set(ERR_BUSY, "adapter %s: its base %s did not load: %s",
                             swap_model_name(a->sm), swap_model_name(b->sm), why)
                   : err_set(ERR_BUSY,
                             "adapter %s: its base %s left its devices before the "
                             "adapter's load; load it again",
                             swap_model_name(a->sm), swap_model_name(b->sm));
    uint64_t bytes = swap_model_missing_bytes(e->mgr, b->sm);
    double frac = missing_share(e, b);
    int rc = swap_load(e->mgr, b->sm, NULL);
    if (rc < 0) {
        snprintf(why, sizeof(why), "%s", err_msg());
        return err_set(rc, "adapter %s: its base %s cannot be loaded first: %s",
                       swap_model_name(a->sm), swap_model_name(b->sm), why);
    }
    load_started(e, b, time_now(), bytes, frac);
    a->admin_base = true;
    return 1;
}

/* Carries out the admin loads and unloads asked for (lock held). */
static void admin_run(struct engine *e)
{
    bool done = false;
    for (int id = 0; id < e->n_ids; id++) {
        struct engine_model *m = model_get(e, id);
        if (!m || m->admin == ADMIN_NONE)
            continue;
        enum residency r = swap_residency(e->mgr, m->sm);
        bool resident = r == RES_LOADING || r == RES_ON_DEVICE;
        int rc = 0;
        if (r == RES_OFFLOADING) {
            continue; /* its end wakes us (a trim's copy back too) */
        } else if (m->admin == ADMIN_LOAD) {
            /* an adapter whose base is not on its devices: the base's load
             * first, then the adapter's once it is there */
            int base_rc = resident || !m->base ? 0 : admin_load_base(e, m);
            if (base_rc > 0)
                continue; /* the base's load under way: its end wakes us */
            /* a partly resident model loads what it lacks */
            struct swap_room why;
            uint64_t bytes = swap_model_missing_bytes(e->mgr, m->sm);
            double frac = missing_share(e, m);
            if ((rc = base_rc) == 0 && !resident && (rc = swap_load(e->mgr, m->sm, &why)) == 0)
                load_started(e, m, time_now(), bytes, frac);
            m->admin_base = false;
        } else if (resident || r == RES_PARTIAL) { /* a partly resident one: the rest goes */
            uint64_t held = model_held_bytes(e, m);
            /* an adapter that sequences of its base's batch hold leaves
             * with the last of them, as a model's batch defers its unload */
            if (m->running || (m->base && m->seq_uses > 0)) {
                if ((rc = swap_offload(e->mgr, m->sm, true)) == 0)
                    m->offload_pending = true;
            } else if (r == RES_LOADING) {
                continue; /* the load's end wakes us */
            } else {
                rc = swap_offload(e->mgr, m->sm, false);
            }
            m->unloads += rc == 0;
            if (rc == 0)
                move_leave(e, m, ENGINE_MOVE_UNLOADED, NULL, m->offload_pending, held);
        }
        m->admin_rc = rc;
        snprintf(m->admin_msg, sizeof(m->admin_msg), "%s", rc < 0 ? err_msg() : "");
        m->admin = ADMIN_NONE;
        done = true;
    }
    if (done)
        pthread_cond_broadcast(&e->admin);
}

/* Times out queued requests past their deadline (lock held); returns the
 * earliest deadline still ahead (INFINITY: none). */
static double queue_expire(struct engine *e, double now)
{
    double next = INFINITY;
    for (int id = 0; e->n_queued_deadlines > 0 && id < e->n_ids; id++) {
        struct engine_model *m = e->models[id];
        for (struct engine_req *r = m ? m->head : NULL, *nx; r; r = nx) {
            nx = r->next;
            if (r->deadline <= now)
                queue_fail(m, r, ERR_TIMEOUT, "its deadline passed while it waited in the queue");
            else if (r->deadline < next)
                next = r->deadline;
        }
    }
    return next;
}

/* Whether view entry i is a pinned model on its devices (lock held). */
static bool pinned_in(struct engine *e, struct engine_model **map, const struct sched_model *sm,
                      int i)
{
    enum residency r = swap_residency(e->mgr, map[i]->sm);
    return sm[i].pinned && (r == RES_LOADING || r == RES_ON_DEVICE);
}

/* The pinned models on their devices with bytes on device d, as "a and b"
 * into names (lock held). */
static void pinned_names(struct engine *e, struct engine_model **map, const struct sched_model *sm,
                         const struct sched_view *v, int d, char *names, size_t cap)
{
    int n = 0, k = 0;
    size_t len = 0;
    names[0] = '\0';
    for (int i = 0; i < v->n_models; i++)
        n += pinned_in(e, map, sm, i) && sm[i].bytes[d] > 0;
    for (int i = 0; i < v->n_models && len < cap; i++)
        if (pinned_in(e, map, sm, i) && sm[i].bytes[d] > 0)
            len += (size_t)snprintf(names + len, cap - len, "%s%s",
                                    ++k == 1 ? ""
                                    : k == n ? " and "
                                             : ", ",
                                    swap_model_name(map[i]->sm));
}

/* Whether request r of m (a model, or an adapter run by its base) can never
 * run while the pinned models hold pinned[d] of each device: the weights
 * (the base's and the adapter's) and a batch of r alone (for the adapter's
 * rank) pass a device's budget beside them. Such a request is failed
 * (ERR_BUSY, naming the device, the bytes and the pinned models) and true
 * returned (lock held). */
static bool pinned_fails(struct engine *e, struct engine_model **map, const struct sched_model *sm,
                         const struct sched_view *v, struct engine_model *m, struct engine_req *r,
                         const uint64_t *pinned)
{
    struct engine_model *base = m->base ? m->base : m;
    int rank = m->base ? swap_model_lora_rank(m->sm) : 0;
    for (int d = 0; d < v->n_devices; d++) {
        uint64_t w = swap_model_device_bytes(base->sm, d);
        if (w == 0 || pinned[d] == 0)
            continue;
        uint64_t aw = m->base ? swap_model_device_bytes(m->sm, d) : 0;
        uint64_t b = request_batch_bytes(e, base->sm, r->n_prompt, r->max_tokens, rank, d);
        uint64_t budget = device_budget(swap_device(e->mgr, d));
        if (b != UINT64_MAX && w + aw + b + pinned[d] <= budget)
            continue;
        char why[512];
        if (!m->base) {
            snprintf(why, sizeof(why),
                     "model %s cannot run this request while pinned models hold device %s: "
                     "its weights take %llu bytes and a batch of it alone %llu, pinned "
                     "models hold %llu of %llu (unpin one)",
                     swap_model_name(m->sm), device_name(swap_device(e->mgr, d)),
                     (unsigned long long)w, (unsigned long long)b, (unsigned long long)pinned[d],
                     (unsigned long long)budget);
        } else {
            char names[256];
            pinned_names(e, map, sm, v, d, names, sizeof(names));
            snprintf(why, sizeof(why),
                     "adapter %s of model %s cannot run this request while pinned models hold "
                     "device %s: its base's weights take %llu bytes, its own %llu and a batch "
                     "of it alone %llu, pinned models (%s) hold %llu of %llu (unpin one)",
                     swap_model_name(m->sm), swap_model_name(base->sm),
                     device_name(swap_device(e->mgr, d)), (unsigned long long)w,
                     (unsigned long long)aw, (unsigned long long)b, names,
                     (unsigned long long)pinned[d], (unsigned long long)budget);
        }
        queue_fail(m, r, ERR_BUSY, why);
        return true;
    }
    return false;
}

/* Fails the queued requests that cannot run while the pinned models stay
 * (lock held): one whose model's weights and a batch of that request alone
 * (its KV cache and activations: the least it runs with) pass, on some
 * device, the budget less what resident pinned models hold there (their
 * weights and batch reserves) would otherwise wait until an admin unpins,
 * unanswered. A model the view shows not resident (a resident one short of
 * its batch's room, or of an adapter's, included) is checked, with the
 * requests of its adapters (their weights and rank counted with the
 * base's). Returns whether it failed any. */
static bool pinned_block(struct engine *e, struct engine_model **map, const struct sched_model *sm,
                         const struct sched_view *v)
{
    uint64_t pinned[SCHED_MAX_DEVICES] = {0};
    bool any = false;
    for (int i = 0; i < v->n_models; i++)
        if (pinned_in(e, map, sm, i))
            for (int d = 0; d < v->n_devices; d++) {
                pinned[d] += sm[i].bytes[d];
                any |= sm[i].bytes[d] > 0;
            }
    bool failed = false;
    for (int i = 0; any && i < v->n_models; i++) {
        struct engine_model *m = map[i];
        if (sm[i].resident || sm[i].pinned)
            continue;
        /* a batch of its longest prompt and answer holds every one of its
         * requests' alone: when it fits, they all do */
        bool all_fit = true;
        for (int d = 0; all_fit && m->queue_len > 0 && d < v->n_devices; d++) {
            uint64_t w = swap_model_device_bytes(m->sm, d);
            uint64_t b = w && pinned[d] ? request_batch_bytes(e, m->sm, m->longest_prompt,
                                                              m->longest_out, 0, d)
                                        : 0;
            all_fit = b != UINT64_MAX && w + b + pinned[d] <= device_budget(swap_device(e->mgr, d));
        }
        for (struct engine_req *r = all_fit ? NULL : m->head, *nx; r; r = nx) {
            nx = r->next;
            failed |= pinned_fails(e, map, sm, v, m, r, pinned);
        }
        for (struct engine_model *a = m->adapters; a; a = a->next_adapter)
            for (struct engine_req *r = a->removed ? NULL : a->head, *nx; r; r = nx) {
                nx = r->next;
                failed |= pinned_fails(e, map, sm, v, a, r, pinned);
            }
    }
    return failed;
}

/* The snapshot's storage, the scheduler thread's own: view index i is model
 * map[i]; room for cap models. */
struct snapshot {
    struct sched_model *sm;
    struct engine_model **map;
    int cap;
};

/* Room in s for n_live models (lock held): false when out of memory. */
static bool snapshot_fit(struct snapshot *s, int n_live)
{
    if (n_live <= s->cap)
        return true;
    int c = 2 * n_live; /* models were added */
    struct sched_model *s2 = realloc(s->sm, (size_t)c * sizeof(*s->sm));
    if (!s2)
        return false;
    s->sm = s2;
    struct engine_model **m2 = realloc(s->map, (size_t)c * sizeof(*s->map));
    if (!m2)
        return false;
    s->map = m2;
    s->cap = c;
    return true;
}

/* The requests completed in their queue: on_done, outside the lock (lock
 * held on entry and on return, released between). */
static void sched_complete_finished(struct engine *e)
{
    struct engine_req *list = e->finished;
    e->finished = e->finished_tail = NULL;
    pthread_mutex_unlock(&e->lock);
    for (struct engine_req *r = list, *nx; r; r = nx) {
        nx = r->next;
        r->next = NULL;
        req_complete(e, r);
    }
    pthread_mutex_lock(&e->lock);
}

/* One decision (lock held): a fresh view, the pinned models' block, the
 * policy's actions carried out. Returns whether anything changed (a request
 * failed, an action made progress), so the caller looks again at once. */
static bool sched_decide(struct engine *e, struct snapshot *s)
{
    struct sched_action actions[MAX_ACTIONS];
    struct sched_view v;
    view_build(e, s->map, s->sm, &v);
    if (e->finished) /* a failed load failed its queue (load_check) */
        return true;
    if (!e->cfg.wait_for_unpin && pinned_block(e, s->map, s->sm, &v))
        return true;
    if (defrag_batches(e, s->map, &v))
        return true;
    int n = v.n_models ? e->policy->decide(&v, actions, MAX_ACTIONS) : 0;
    bool progress = false;
    e->wake_at = INFINITY;
    struct exec x = {.e = e, .map = s->map, .sm = s->sm};
    for (int i = 0; i < n; i++) {
        x.idle = actions[i].kind == SCHED_UNLOAD;
        x.incoming = actions[i].kind == SCHED_LOAD ? actions[i].model : -1;
        progress |= sched_act(&exec_ops, &x, &v, &actions[i]);
    }
    /* the adapters of resident bases, once the policy has moved the bases */
    progress |= adapters_run(e);
    return progress;
}

/* Waits for a wake-up, or until at (the time_now() clock) when that is
 * finite; not at all when at has passed (lock held). */
static void sched_sleep(struct engine *e, double at)
{
    if (isinf(at)) {
        pthread_cond_wait(&e->wake, &e->lock);
    } else if (at > time_now()) { /* the policy asked for a second look then, or a deadline */
        struct timespec ts = {.tv_sec = (time_t)at,
                              .tv_nsec = (long)((at - (double)(time_t)at) * 1e9)};
        pthread_cond_timedwait(&e->wake, &e->lock, &ts);
    }
}

void *sched_main(void *arg)
{
    struct engine *e = arg;
    struct snapshot s = {0};
    pthread_mutex_lock(&e->lock);
    while (!e->stop) {
        if (e->finished) {
            sched_complete_finished(e);
            continue;
        }
        double next_deadline = queue_expire(e, time_now());
        if (e->finished)
            continue;
        admin_run(e);
        /* nothing to schedule until a model is added; out of memory for
         * the snapshot: try again at the next event */
        if (e->n_live == 0 || !snapshot_fit(&s, e->n_live)) {
            pthread_cond_wait(&e->wake, &e->lock);
            continue;
        }
        if (sched_decide(e, &s))
            continue;
        sched_sleep(e, e->wake_at < next_deadline ? e->wake_at : next_deadline);
    }
    pthread_mutex_unlock(&e->lock);
    free(s.sm);
    free(s.map);
    return NULL;
}

void engine_on_swap(void *ctx)
{
    struct engine *e = ctx;
    pthread_mutex_lock(&e->lock);
    mem_wait_clear(e);
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
}
