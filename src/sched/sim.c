#include "sched/sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

struct sim_model {
    size_t *queue; /* request indices, FIFO */
    size_t head, tail;
    bool resident, loading, running, offload_pending;
    double load_end, batch_end, last_used, loaded_at;
    double load_frac;  /* of the load in progress, the share it moves */
    double idle_since; /* the end of its last batch, or its load's start */
    size_t upcoming;   /* its first request not yet arrived (n: none) */
    struct forecast arrivals;
    size_t *batch; /* the batch in flight (or paused): its requests' indices */
    int batch_n;
    double batch_start; /* when the batch in flight began or resumed */
    /* token-level preemption: the batch's step boundaries (absolute: its
     * prefill's end, then each decode step's), a pause asked for
     * (pause_pending: the batch ends early, at batch_end, the first boundary
     * at or after the SCHED_PREEMPT), and a paused batch: paused sequences,
     * stopped at pause_t, whose times after it move by the pause's length on
     * resume; paused_kv: the paused batch's bytes are on the devices while
     * the rest of the model is not (sim_config.kv_bytes) */
    double *step_end;
    int n_steps, cap_steps;
    bool pause_pending;
    int paused;
    double pause_t, full_end;
    bool paused_kv;
    /* partial residency: kept, not resident, its first layers are still on
     * the devices, all but trimmed[d] of its last ones (sim_config.layers)
     * given up by SCHED_LOAD trims; a load brings back what is missing */
    bool kept;
    int trimmed[SCHED_MAX_DEVICES];
    /* of its reserve, freed when it became kept, what no trim on the
     * device has counted yet (exec_trim gives it to the first one there) */
    uint64_t uncounted[SCHED_MAX_DEVICES];
    /* its batches' reserve beyond kv_bytes, per device: what the requests
     * arrived so far ask for (sim_request.batch_bytes: want), and of it
     * what is counted in used while it is resident (grow). A resident
     * model takes the growth when the device has room (reserve_settle);
     * until then it is short of its batch's room and the policy sees it
     * partly resident, lacking want - grow (as the engine's view_build
     * shows a resident model whose reserve passes the budget) */
    uint64_t want[SCHED_MAX_DEVICES], grow[SCHED_MAX_DEVICES];
    /* its adapters' bytes on the devices (resident or loading), counted
     * in used */
    uint64_t adapters_held[SCHED_MAX_DEVICES];
    struct sim_experts *x; /* expert residency (NULL: off, or a dense model) */
};

/* A model's routed experts under expert residency (sim_config.moe): which
 * are on each device while it is resident or kept (all of them otherwise:
 * a load brings them all), their hotness and its routing trace. */
struct sim_experts {
    int devices, layers, experts; /* n_devices, sparse layers, experts per layer */
    unsigned char *present;       /* (n_devices, layers, experts) */
    double *hot;                  /* (layers, experts) routed tokens, decayed: x hot_w */
    double hot_w;                 /* a routed token's weight now (1 / decay per step) */
    int *perm;                    /* (layers, experts) popularity rank -> expert */
    double *cdf;                  /* (experts) cumulative rank weights, the last 1 */
    unsigned char *mark;          /* (experts) the experts one layer of a step routes to */
    uint64_t rng, steps;
    uint64_t gone[SCHED_MAX_DEVICES]; /* bytes of the absent ones, counted out of used */
    /* of gone, the room held for them (counted in used) while they are
     * wanted (experts_wanted): what its steps' on-demand copies take */
    uint64_t held[SCHED_MAX_DEVICES];
    uint64_t credit[SCHED_MAX_DEVICES]; /* freed on d by the current load's trims elsewhere */
    int n_gone[SCHED_MAX_DEVICES];
};

/* An adapter (sim_config.n_adapters): on its base's devices (resident;
 * loading until load_end), its sequences in its base's batch in flight or
 * paused (in_use: never a victim then), its requests queued (waiting: not
 * a victim either, so that a load is not undone before its request runs) */
struct sim_adapter {
    bool resident, loading;
    bool marked; /* adapter_room's victim, chosen and not yet evicted */
    double load_end, last_used;
    int in_use, waiting;
};

struct sim {
    const struct sim_config *c;
    struct sim_request *reqs;
    size_t n;
    size_t *next_of; /* (n) the index of the next request for the same model (n: none) */
    struct sim_model *m;
    struct sim_adapter *a; /* (c->n_adapters) */
    unsigned char *joined; /* (n) with adapters: a batch's requests while it forms */
    uint64_t used[SCHED_MAX_DEVICES];
    struct sim_stats *st;
    double now;
    double wake_at; /* the earliest SCHED_WAKE asked for */
    bool experts;   /* some model's experts are units of residency */
};

/* Of sim_config.kv_bytes, model's on d (0 without). */
static uint64_t base_kv(const struct sim_config *c, int model, int d)
{
    return c->kv_bytes ? c->kv_bytes[(size_t)model * c->n_devices + d] : 0;
}

/* Its weights and its batches' reserve as counted now (kv_bytes and the
 * growth taken: sim_model.grow). */
static uint64_t bytes_of(const struct sim *s, int model, int d)
{
    return s->c->bytes[(size_t)model * s->c->n_devices + d] + s->m[model].grow[d];
}

/* Of bytes_of, what a paused batch keeps on the devices (sim_config.kv_bytes
 * and the growth taken). */
static uint64_t kv_of(const struct sim *s, int model, int d)
{
    return base_kv(s->c, model, d) + s->m[model].grow[d];
}

/* Under expert residency, the bytes on d of model's absent experts while
 * its steps may copy them on demand: while it is resident with requests
 * queued, a batch in flight or one paused (a batch never gives up an expert
 * it loaded, so over its life it may need them all); 0 otherwise (an idle
 * model's absent experts are free memory). Their room is held for it as its
 * batch's reserve is (sim_experts.held), as the engine's room_over holds
 * experts_wanted. */
static uint64_t experts_wanted(const struct sim *s, int model, int d)
{
    const struct sim_model *m = &s->m[model];
    if (!m->x || !m->resident || (m->tail == m->head && !m->running && !m->paused))
        return 0;
    return m->x->gone[d];
}

/* Of its batches' reserve, the growth its requests asked for and it has not
 * taken, and of the room its wanted experts need, what is not held: room it
 * lacks for its batch. */
static uint64_t lack_of(const struct sim *s, int model, int d)
{
    const struct sim_model *m = &s->m[model];
    uint64_t xw = experts_wanted(s, model, d), xh = m->x ? m->x->held[d] : 0;
    return m->want[d] - m->grow[d] + (xw > xh ? xw - xh : 0);
}

/* A resident model takes the growth of its reserve its requests asked for
 * when every device has room for it; true when it lacks none (then or
 * already). */
static bool reserve_settle(struct sim *s, int model)
{
    struct sim_model *m = &s->m[model];
    bool lacks = false;
    for (int d = 0; d < s->c->n_devices; d++) {
        if (lack_of(s, model, d) > s->c->budget[d] - s->used[d])
            return false;
        lacks |= lack_of(s, model, d) > 0;
    }
    if (!lacks || !m->resident)
        return !lacks;
    for (int d = 0; d < s->c->n_devices; d++) {
        s->used[d] += lack_of(s, model, d);
        if (m->x && experts_wanted(s, model, d) > m->x->held[d])
            m->x->held[d] = experts_wanted(s, model, d);
        m->grow[d] = m->want[d];
        if (s->used[d] > s->st->high_water[d])
            s->st->high_water[d] = s->used[d];
    }
    return true;
}

/* The room held for model's absent experts beyond what it wants now
 * (experts_wanted) is free again: an idle or no longer resident model
 * holds none. */
static void experts_release(struct sim *s, int model)
{
    struct sim_experts *x = s->m[model].x;
    for (int d = 0; x && d < s->c->n_devices; d++) {
        uint64_t w = experts_wanted(s, model, d);
        if (x->held[d] > w) {
            s->used[d] -= x->held[d] - w;
            x->held[d] = w;
        }
    }
}

/* Resident, waiting for a batch, and short of its batch's room. */
static bool room_short(const struct sim *s, int model)
{
    const struct sim_model *m = &s->m[model];
    if (!m->resident || m->loading || m->running || m->paused || m->pause_pending ||
        m->tail == m->head)
        return false;
    for (int d = 0; d < s->c->n_devices; d++)
        if (lack_of(s, model, d) > 0)
            return true;
    return false;
}

/* What model frees when it leaves, and needs when it comes back: its bytes,
 * less a paused (or pausing) batch's memory, which stays. */
static uint64_t moving_of(const struct sim *s, int model, int d)
{
    const struct sim_model *m = &s->m[model];
    return bytes_of(s, model, d) - (m->paused || m->pause_pending ? kv_of(s, model, d) : 0);
}

/* Of bytes_of, the weights: what a load copies (the rest, kv_of, is its
 * batches' reserve, allocated as it comes and held only while resident). */
static uint64_t weights_of(const struct sim *s, int model, int d)
{
    return bytes_of(s, model, d) - kv_of(s, model, d);
}

/* Of bytes, one of model's layers on device d (sim_config.layer_bytes, or
 * its weights split into sim_config.layers equal ones); 0 without layers. */
static uint64_t layer_of(const struct sim *s, int model, int d)
{
    const struct sim_config *c = s->c;
    if (c->layers <= 0)
        return 0;
    return c->layer_bytes ? c->layer_bytes[(size_t)model * c->n_devices + d]
                          : weights_of(s, model, d) / (uint64_t)c->layers;
}

/* m holds all of itself or nothing again: no layer given up, no reserve
 * left to count, every expert there (or to come with its next load). */
static void kept_clear(struct sim_model *m)
{
    m->kept = false;
    memset(m->trimmed, 0, sizeof(m->trimmed));
    memset(m->uncounted, 0, sizeof(m->uncounted));
    struct sim_experts *x = m->x;
    if (x) {
        memset(x->present, 1, (size_t)x->devices * (size_t)x->layers * (size_t)x->experts);
        memset(x->gone, 0, sizeof(x->gone));
        memset(x->held, 0, sizeof(x->held));
        memset(x->n_gone, 0, sizeof(x->n_gone));
    }
}

/* Of one of model's layers on d, what a layer trim frees once its experts
 * are gone: the k-th layer given up, counted from the last, is sparse for k
 * < sparse_layers (its experts already out of used), dense otherwise. */
static uint64_t layer_rest(const struct sim *s, int model, int d, int k)
{
    const struct sim_experts *x = s->m[model].x;
    uint64_t lb = layer_of(s, model, d);
    return x && k < x->layers ? lb - (uint64_t)x->experts * s->c->moe[model].expert_bytes[d] : lb;
}

/* What model holds on device d now, counted in used[d]: moving_of while
 * resident; while kept, its weights less its trimmed layers (its reserve
 * left with its residency); else nothing (a paused batch's memory aside:
 * paused_kv). Under expert residency less its absent experts, plus the
 * room held for them (sim_experts.held). */
static uint64_t held_on(const struct sim *s, int model, int d)
{
    const struct sim_model *m = &s->m[model];
    if (m->x && (m->resident || m->kept)) {
        uint64_t held = (m->resident ? moving_of(s, model, d) : weights_of(s, model, d)) -
                        m->x->gone[d] + m->x->held[d];
        for (int k = 0; !m->resident && k < m->trimmed[d]; k++)
            held -= layer_rest(s, model, d, k);
        return held;
    }
    if (m->resident)
        return moving_of(s, model, d);
    return m->kept ? weights_of(s, model, d) - (uint64_t)m->trimmed[d] * layer_of(s, model, d) : 0;
}

/* ---- expert residency (sim_config.expert_residency) ---- */

static void experts_free(struct sim_experts *x)
{
    if (!x)
        return;
    free(x->present);
    free(x->hot);
    free(x->perm);
    free(x->cdf);
    free(x->mark);
    free(x);
}

static unsigned char *present_at(struct sim_experts *x, int d, int l)
{
    return x->present + ((size_t)d * (size_t)x->layers + (size_t)l) * (size_t)x->experts;
}

/* Expert (l, e) of model leaves every device it is on (its slices on the
 * devices go together): its bytes are free there. */
static void expert_drop(struct sim *s, int model, int l, int e)
{
    struct sim_experts *x = s->m[model].x;
    for (int d = 0; d < x->devices; d++) {
        uint64_t eb = s->c->moe[model].expert_bytes[d];
        if (!present_at(x, d, l)[e])
            continue;
        present_at(x, d, l)[e] = 0;
        x->gone[d] += eb;
        x->n_gone[d]++;
        s->used[d] -= eb;
    }
    s->st->expert_trims++;
}

/* Of model's experts on d, the coldest: lowest hotness, among equals the
 * later layer, then the higher expert (the swap manager's order); its
 * hotness, unscaled, into *hot. False when none is there. */
static bool expert_coldest(const struct sim *s, int model, int d, int *lo, int *eo, double *hot)
{
    struct sim_experts *x = s->m[model].x;
    double best = INFINITY;
    bool found = false;
    for (int l = 0; l < x->layers; l++) {
        const unsigned char *p = present_at(x, d, l);
        const double *h = x->hot + (size_t)l * (size_t)x->experts;
        for (int e = 0; e < x->experts; e++)
            if (p[e] && h[e] <= best) {
                best = h[e];
                *lo = l;
                *eo = e;
                found = true;
            }
    }
    *hot = best / x->hot_w;
    return found;
}

/* A trim of model on d under expert residency: what earlier trims of the
 * same load freed on d (credit: an expert leaves every device), then its
 * coldest experts until `bytes` are free or none is left there. Returns
 * the bytes freed on d; what they freed elsewhere is credit there. */
static uint64_t experts_give(struct sim *s, int model, int d, uint64_t bytes)
{
    struct sim_experts *x = s->m[model].x;
    uint64_t gave = x->credit[d], before[SCHED_MAX_DEVICES];
    x->credit[d] = 0;
    memcpy(before, s->used, sizeof(before));
    int l, e;
    double h;
    while (gave < bytes && expert_coldest(s, model, d, &l, &e, &h)) {
        uint64_t was = s->used[d];
        expert_drop(s, model, l, e);
        gave += was - s->used[d];
    }
    for (int o = 0; o < x->devices; o++)
        if (o != d)
            x->credit[o] += before[o] - s->used[o];
    return gave;
}

/* Room on every device for one more of model's experts: free bytes, then
 * the coldest expert of the other idle models with experts (resident, no
 * batch, not loading, leaving or paused; among equals the later model),
 * never one of model's own. False when none is left to give (the expert
 * streams through: the engine's step fails there instead). */
static bool expert_room(struct sim *s, int model)
{
    const struct sim_config *c = s->c;
    for (;;) {
        int d = 0;
        while (d < c->n_devices && c->moe[model].expert_bytes[d] <= c->budget[d] - s->used[d])
            d++;
        if (d == c->n_devices)
            return true;
        int v = -1, vl = 0, ve = 0;
        double best = INFINITY;
        for (int j = 0; j < c->n_models; j++) {
            const struct sim_model *o = &s->m[j];
            int jl, je;
            double h;
            if (j == model || !o->x || !o->resident || o->running || o->loading ||
                o->offload_pending || o->paused || o->pause_pending)
                continue;
            if (expert_coldest(s, j, d, &jl, &je, &h) && h <= best) {
                best = h;
                v = j;
                vl = jl;
                ve = je;
            }
        }
        if (v < 0)
            return false;
        expert_drop(s, v, vl, ve);
    }
}

/* splitmix64: each model's routing generator. */
static uint64_t route_next(uint64_t *st)
{
    uint64_t z = (*st += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* One popularity rank of the Zipf trace (sim_moe.zipf). */
static int route_rank(struct sim_experts *x)
{
    double u = (double)(route_next(&x->rng) >> 11) * 0x1.0p-53;
    int lo = 0, hi = x->experts - 1;
    while (lo < hi) { /* the first rank whose cumulative weight passes u */
        int mid = (lo + hi) / 2;
        if (x->cdf[mid] > u)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* One step of model over `tokens` tokens under expert residency: each token
 * picks top_k distinct experts per sparse layer (rejection, then after 8
 * top_k tries the most popular rank not yet picked), each routed expert's
 * hotness grows, and the experts missing on a device are copied there
 * (expert_room, else streamed). Returns the time the step waits for them:
 * per layer with any missing, copy_latency_s plus the most bytes one
 * device copies over the link. */
static double experts_step(struct sim *s, int model, int tokens)
{
    const struct sim_config *c = s->c;
    const struct sim_moe *mo = &c->moe[model];
    struct sim_experts *x = s->m[model].x;
    double rate = c->link_bytes_per_s, wait = 0;
    if (rate <= 0) { /* a whole load's: the largest shard's weights over load_s */
        uint64_t w = 0;
        for (int d = 0; d < c->n_devices; d++)
            w = weights_of(s, model, d) > w ? weights_of(s, model, d) : w;
        rate = c->load_s > 0 ? (double)w / c->load_s : INFINITY;
    }
    x->steps++;
    s->st->steps++;
    x->hot_w *= exp2(1.0 / SIM_EXPERT_HALF_LIFE);
    if (x->hot_w > 1e200) { /* the same order, rescaled */
        for (size_t k = 0; k < (size_t)x->layers * (size_t)x->experts; k++)
            x->hot[k] /= x->hot_w;
        x->hot_w = 1;
    }
    int shift = mo->drift_steps > 0
                    ? (int)((x->steps / (uint64_t)mo->drift_steps) % (uint64_t)x->experts)
                    : 0;
    int picked[SIM_MAX_TOP_K];
    for (int l = 0; l < x->layers; l++) {
        const int *perm = x->perm + (size_t)l * (size_t)x->experts;
        double *hot = x->hot + (size_t)l * (size_t)x->experts;
        memset(x->mark, 0, (size_t)x->experts);
        for (int t = 0; t < tokens; t++)
            for (int k = 0; k < mo->top_k; k++) {
                int r = -1;
                for (int tries = 0; r < 0 && tries < 8 * mo->top_k; tries++) {
                    r = route_rank(x);
                    for (int j = 0; j < k && r >= 0; j++)
                        r = picked[j] == r ? -1 : r;
                }
                for (int q = 0; r < 0; q++) { /* the most popular rank not picked */
                    bool taken = false;
                    for (int j = 0; j < k; j++)
                        taken |= picked[j] == q;
                    r = taken ? -1 : q;
                }
                picked[k] = r;
                int e = perm[(r + shift) % x->experts];
                x->mark[e] = 1;
                hot[e] += x->hot_w;
            }
        uint64_t copied[SCHED_MAX_DEVICES] = {0}, most = 0;
        for (int e = 0; e < x->experts; e++) {
            bool missing = false;
            for (int d = 0; d < c->n_devices; d++)
                missing |= mo->expert_bytes[d] > 0 && !present_at(x, d, l)[e];
            if (!x->mark[e] || !missing)
                continue;
            /* its room held for it (experts_wanted), else the fallback:
             * expert_room, else it streams through */
            bool held = true;
            for (int d = 0; d < c->n_devices; d++)
                held &= mo->expert_bytes[d] == 0 || present_at(x, d, l)[e] ||
                        x->held[d] >= mo->expert_bytes[d];
            bool kept = held || expert_room(s, model);
            for (int d = 0; d < c->n_devices; d++) {
                unsigned char *p = present_at(x, d, l);
                uint64_t eb = mo->expert_bytes[d];
                if (eb == 0 || p[e])
                    continue;
                copied[d] += eb;
                s->st->expert_bytes_loaded += eb;
                if (!kept)
                    continue;
                p[e] = 1;
                x->gone[d] -= eb;
                x->n_gone[d]--;
                if (held) {
                    x->held[d] -= eb;
                    continue;
                }
                s->used[d] += eb;
                if (s->used[d] > s->st->high_water[d])
                    s->st->high_water[d] = s->used[d];
            }
            s->st->expert_loads++;
            s->st->expert_streamed += !kept;
        }
        for (int d = 0; d < c->n_devices; d++)
            most = copied[d] > most ? copied[d] : most;
        if (most > 0)
            wait += c->copy_latency_s + (double)most / rate;
    }
    s->st->expert_wait_s += wait;
    return wait;
}

/* ---- adapters ---- */

static uint64_t adapter_bytes_on(const struct sim *s, int k, int d)
{
    return s->c->adapter_bytes[(size_t)k * s->c->n_devices + d];
}

/* Request r may join its model's batch now: it names no adapter, or its
 * adapter is on the devices and loaded. */
static bool request_ready(const struct sim *s, size_t r)
{
    int k = s->reqs[r].adapter - 1;
    return k < 0 || (s->a[k].resident && !s->a[k].loading);
}

static void adapter_leave(struct sim *s, int k)
{
    struct sim_model *base = &s->m[s->c->adapter_base[k]];
    for (int d = 0; d < s->c->n_devices; d++) {
        s->used[d] -= adapter_bytes_on(s, k, d);
        base->adapters_held[d] -= adapter_bytes_on(s, k, d);
    }
    s->a[k].resident = s->a[k].loading = false;
    s->st->adapter_evictions++;
}

/* Every adapter of model leaves its devices (before the model does). */
static void adapters_leave(struct sim *s, int model)
{
    for (int k = 0; k < s->c->n_adapters; k++)
        if (s->c->adapter_base[k] == model && s->a[k].resident)
            adapter_leave(s, k);
}

/* The adapter of model's first queued request whose adapter is not on the
 * devices (nor loading); -1 when none. */
static int adapter_pending(const struct sim *s, int model)
{
    const struct sim_model *m = &s->m[model];
    bool any = false;
    for (int k = 0; k < s->c->n_adapters && !any; k++)
        any = s->c->adapter_base[k] == model && s->a[k].waiting > 0 && !s->a[k].resident;
    for (size_t q = m->head; any && q < m->tail; q++) {
        int k = s->reqs[m->queue[q]].adapter - 1;
        if (k >= 0 && !s->a[k].resident)
            return k;
    }
    return -1;
}

/* Room for adapter k on every device: free bytes, then idle adapters
 * (loaded, none of its sequences in a batch, no request of it waiting),
 * the least recently used first. With apply the victims leave; without,
 * it only says whether the room could be made. */
static bool adapter_room(struct sim *s, int k, bool apply)
{
    const struct sim_config *c = s->c;
    uint64_t freed[SCHED_MAX_DEVICES] = {0};
    bool ok = true;
    for (;;) {
        int short_d = -1;
        for (int d = 0; d < c->n_devices && short_d < 0; d++)
            if (adapter_bytes_on(s, k, d) > c->budget[d] - s->used[d] + freed[d])
                short_d = d;
        if (short_d < 0)
            break;
        int v = -1;
        for (int j = 0; j < c->n_adapters; j++) {
            const struct sim_adapter *a = &s->a[j];
            if (j != k && a->resident && !a->loading && !a->marked && a->in_use == 0 &&
                a->waiting == 0 && adapter_bytes_on(s, j, short_d) > 0 &&
                (v < 0 || a->last_used < s->a[v].last_used))
                v = j;
        }
        if (v < 0) {
            ok = false;
            break;
        }
        s->a[v].marked = true;
        for (int d = 0; d < c->n_devices; d++)
            freed[d] += adapter_bytes_on(s, v, d);
    }
    for (int j = 0; j < c->n_adapters; j++)
        if (s->a[j].marked) {
            s->a[j].marked = false;
            if (ok && apply)
                adapter_leave(s, j);
        }
    return ok;
}

/* Starts the loads of model's pending adapters, in its queue's order, while
 * each finds room (adapter_room): only while the model is resident (or
 * loading: then the adapter's load follows the model's) and not leaving.
 * True when one started. */
static bool adapters_load(struct sim *s, int model)
{
    const struct sim_config *c = s->c;
    struct sim_model *m = &s->m[model];
    bool started = false;
    if (!m->resident || m->offload_pending)
        return false;
    int k;
    while ((k = adapter_pending(s, model)) >= 0 && adapter_room(s, k, true)) {
        struct sim_adapter *a = &s->a[k];
        for (int d = 0; d < c->n_devices; d++) {
            uint64_t b = adapter_bytes_on(s, k, d);
            s->used[d] += b;
            m->adapters_held[d] += b;
            s->st->adapter_bytes_loaded += b;
            if (s->used[d] > s->st->high_water[d])
                s->st->high_water[d] = s->used[d];
        }
        double start = m->loading && m->load_end > s->now ? m->load_end : s->now;
        a->resident = a->loading = true;
        a->load_end = start + c->adapter_load_s[k];
        a->last_used = s->now;
        s->st->adapter_loads++;
        s->st->adapter_swap_s += c->adapter_load_s[k];
        started = true;
    }
    return started;
}

/* Some adapter of model is loading. */
static bool adapters_loading(const struct sim *s, int model)
{
    for (int k = 0; k < s->c->n_adapters; k++)
        if (s->c->adapter_base[k] == model && s->a[k].loading)
            return true;
    return false;
}

/* Some queued request of model may join a batch now. */
static bool any_ready(const struct sim *s, int model)
{
    const struct sim_model *m = &s->m[model];
    for (size_t q = m->head; q < m->tail; q++)
        if (request_ready(s, m->queue[q]))
            return true;
    return false;
}

/* When nothing of model can run (resident and idle, every queued request
 * waiting for an adapter, none loading) and its first pending adapter has
 * no room even with the idle adapters gone: that adapter, whose room the
 * policy must make as for a load (view_build shows model lacking its
 * bytes); -1 otherwise. */
static int adapter_stuck(struct sim *s, int model)
{
    const struct sim_model *m = &s->m[model];
    if (!m->resident || m->loading || m->running || m->paused || m->pause_pending ||
        m->offload_pending || m->tail == m->head)
        return -1;
    if (any_ready(s, model) || adapters_loading(s, model))
        return -1;
    int k = adapter_pending(s, model);
    return k < 0 || adapter_room(s, k, false) ? -1 : k;
}

static void view_build(struct sim *s, double now, struct sched_model *sm, struct sched_view *v)
{
    const struct sim_config *c = s->c;
    memset(v, 0, sizeof(*v));
    v->now = now;
    v->n_models = c->n_models;
    v->n_devices = c->n_devices;
    v->models = sm;
    v->max_loaded = c->max_loaded;
    v->max_batch = c->max_batch;
    v->overlap_loads = c->overlap_loads;
    v->load_s = c->load_s;
    for (int d = 0; d < c->n_devices; d++)
        v->free_bytes[d] = c->budget[d] - s->used[d];
    for (int i = 0; i < c->n_models; i++) {
        struct sim_model *m = &s->m[i];
        memset(&sm[i], 0, sizeof(sm[i]));
        sm[i].queue_len = (int)(m->tail - m->head) + m->paused;
        sm[i].head_arrival = m->tail > m->head ? s->reqs[m->queue[m->head]].arrival : 0;
        for (int k = 0; k < m->paused; k++) /* a paused batch waits as a queue does */
            if (m->tail == m->head || s->reqs[m->batch[k]].arrival < sm[i].head_arrival)
                sm[i].head_arrival = s->reqs[m->batch[k]].arrival;
        sm[i].paused = m->paused;
        sm[i].preempt_pending = m->pause_pending;
        sm[i].batch_start = m->batch_start;
        /* short of its batch's room: partly resident, lacking it */
        bool room_lacks = room_short(s, i);
        /* an adapter that needs room only the policy can make */
        int stuck = c->n_adapters ? adapter_stuck(s, i) : -1;
        sm[i].resident = m->resident && !room_lacks && stuck < 0;
        /* a model whose queued work all waits for its adapters' loads is
         * still loading (a load of a base for an adapter's request is one
         * of the base, then the adapter): not a victim meanwhile */
        sm[i].loading = m->loading || (c->n_adapters && adapters_loading(s, i) && !any_ready(s, i));
        sm[i].running = m->running;
        sm[i].offload_pending = m->offload_pending;
        sm[i].last_used = m->last_used;
        sm[i].loaded_at = m->loaded_at;
        sm[i].idle_since = m->idle_since > m->loaded_at ? m->idle_since : m->loaded_at;
        sm[i].next_arrival = m->upcoming < s->n ? s->reqs[m->upcoming].arrival : INFINITY;
        /* the controls, as the engine's view_build gives a model's */
        sm[i].keep_alive = c->keep_alive ? c->keep_alive[i] : NAN;
        sm[i].priority = c->priority ? c->priority[i] : 0;
        sm[i].max_queue_wait = c->max_queue_wait ? c->max_queue_wait[i] : 0;
        sm[i].min_resident = c->min_resident ? c->min_resident[i] : 0;
        sm[i].pinned = c->pinned && c->pinned[i];
        sm[i].arrivals = m->arrivals;
        if (m->tail > m->head) {
            size_t q = m->tail - m->head;
            sm[i].batch_s = c->batch_s[q < (size_t)c->max_batch ? q : (size_t)c->max_batch];
        }
        if (m->loading)
            sm[i].load_frac = m->load_frac;
        for (int d = 0; d < c->n_devices; d++) {
            sm[i].bytes[d] = moving_of(s, i, d) + lack_of(s, i, d) + m->adapters_held[d] +
                             (stuck >= 0 ? adapter_bytes_on(s, stuck, d) : 0);
            /* resident: what it holds and the room its wanted experts
             * lack (in lack_of); an idle one's absent experts are no
             * load's (the engine's weights_in_view) */
            if (m->x && m->resident)
                sm[i].bytes[d] -= m->x->gone[d] - m->x->held[d];
            sm[i].resident_bytes[d] = held_on(s, i, d) + m->adapters_held[d];
            sm[i].batch_bytes[d] = m->running || m->paused ? kv_of(s, i, d) : 0;
        }
        v->any_loading |= sm[i].loading;
        v->any_running |= m->running;
    }
}

/* i leaves its devices: what it holds (held_on), so a paused batch's model
 * all but the batch's memory, which stays until the model is back
 * (paused_kv). */
static void evict(struct sim *s, int i)
{
    struct sim_model *m = &s->m[i];
    adapters_leave(s, i);
    for (int d = 0; d < s->c->n_devices; d++)
        s->used[d] -= held_on(s, i, d);
    if (m->paused == 0) /* its reserve's growth left with it (a paused batch's stays) */
        memset(m->grow, 0, sizeof(m->grow));
    m->resident = false;
    kept_clear(m);
    m->offload_pending = false;
    m->paused_kv = m->paused > 0;
}

/* ---- the executor (sched_act's ops), at s->now ---- */

static bool exec_running(void *ctx, int model)
{
    struct sim *s = ctx;
    return s->m[model].running;
}

/* The compute time of batch[0..b) (b >= 1 requests): batch_s[b] alone for
 * Computron's requests; for chat requests the prefill (batch_s[b] plus
 * prefill_token_s per prompt token beyond base_prompt) and then
 * one step_s[live] per decode step while live requests still generate.
 * Each chat request's first_token and done are set relative to the batch's
 * start. */
static double batch_compute(struct sim *s, struct sim_model *m, const size_t *batch, int b)
{
    const struct sim_config *c = s->c;
    const int model = (int)(m - s->m);
    double t = c->batch_s[b];
    m->n_steps = 0;
    int steps = 0, tokens = 0;
    for (int k = 0; k < b; k++) {
        const struct sim_request *q = &s->reqs[batch[k]];
        tokens += q->n_prompt > 0 ? q->n_prompt : 1;
        if (q->n_output <= 0)
            continue;
        if (q->n_prompt > c->base_prompt)
            t += c->prefill_token_s * (q->n_prompt - c->base_prompt);
        steps = q->n_output - 1 > steps ? q->n_output - 1 : steps;
    }
    if (m->x) /* the prefill's routing: its experts first */
        t += experts_step(s, model, tokens);
    for (int k = 0; k < b; k++) {
        struct sim_request *q = &s->reqs[batch[k]];
        if (q->n_output > 0)
            q->first_token = q->done = t;
    }
    if (m->cap_steps < steps + 1) {
        double *se = realloc(m->step_end, (size_t)(steps + 1) * sizeof(double));
        if (!se)
            return -1;
        m->step_end = se;
        m->cap_steps = steps + 1;
    }
    m->step_end[m->n_steps++] = t;
    /* step j (1..steps) runs the requests with n_output > j */
    for (int j = 1; j <= steps; j++) {
        int live = 0;
        for (int k = 0; k < b; k++)
            live += s->reqs[batch[k]].n_output > j;
        t += c->step_s[live];
        if (m->x)
            t += experts_step(s, model, live);
        m->step_end[m->n_steps++] = t;
        for (int k = 0; k < b; k++) {
            struct sim_request *q = &s->reqs[batch[k]];
            if (q->n_output == j + 1)
                q->done = t;
        }
    }
    return t;
}

/* The batch takes its queue's head by the engine's rule (sched_batch_joins):
 * with batch_same_params_only, one params_class. */
/* Resumes m's paused batch at now: what was left after pause_t runs from
 * now (with overlap_loads on a loading model, ending no earlier than the
 * load's end plus overlap_tail of it), every later time moved by as much. */
static void batch_resume(struct sim *s, struct sim_model *m)
{
    const struct sim_config *c = s->c;
    double rest = m->full_end - m->pause_t, end = s->now + rest;
    if (m->loading && m->load_end + c->overlap_tail * rest > end)
        end = m->load_end + c->overlap_tail * rest;
    double shift = end - m->full_end;
    for (int k = 0; k < m->batch_n; k++) {
        struct sim_request *q = &s->reqs[m->batch[k]];
        if (q->first_token > m->pause_t)
            q->first_token += shift;
        q->done += shift;
    }
    for (int j = 0; j < m->n_steps; j++)
        if (m->step_end[j] > m->pause_t)
            m->step_end[j] += shift;
    m->paused = 0;
    m->running = true;
    m->batch_end = m->full_end = end;
    m->batch_start = m->last_used = s->now;
    s->st->compute_s += end - s->now;
}

static bool exec_serve(void *ctx, int model)
{
    struct sim *s = ctx;
    const struct sim_config *c = s->c;
    struct sim_model *m = &s->m[model];
    double now = s->now;
    if (!m->resident || (m->loading && !c->overlap_loads))
        return false;
    if (m->paused) {
        batch_resume(s, m);
        return true;
    }
    int b = 0;
    size_t at = m->head;
    bool skipped = false; /* a request waiting for its adapter stays queued */
    for (; at < m->tail; at++) {
        size_t r = m->queue[at];
        if (c->n_adapters && !request_ready(s, r)) {
            skipped = true;
            continue;
        }
        bool same = b == 0 || s->reqs[r].params_class == s->reqs[m->batch[0]].params_class;
        if (!sched_batch_joins(c->policy->batch_same_params_only, b, c->max_batch, same))
            break;
        if (c->n_adapters)
            s->joined[r] = 1;
        m->batch[b++] = r;
        s->reqs[r].start = now;
    }
    if (skipped && b == 0)
        return false; /* every request waits for its adapter */
    if (skipped) {    /* those left keep their order, behind the new head */
        size_t w = at;
        for (size_t i = at; i-- > m->head;)
            if (!s->joined[m->queue[i]])
                m->queue[--w] = m->queue[i];
        m->head = w;
    } else {
        m->head = at;
    }
    for (int k = 0; c->n_adapters && k < b; k++)
        s->joined[m->batch[k]] = 0;
    for (int k = 0; c->n_adapters && k < b; k++) {
        int ad = s->reqs[m->batch[k]].adapter - 1;
        if (ad >= 0) {
            s->a[ad].waiting--;
            s->a[ad].in_use++;
            s->a[ad].last_used = now;
        }
    }
    for (int k = 0; k < b; k++)
        s->reqs[m->batch[k]].batch_size = b;
    double compute = batch_compute(s, m, m->batch, b);
    if (compute < 0)
        return false; /* out of memory for its steps */
    double end = now + compute;
    if (m->loading && m->load_end + c->overlap_tail * compute > end)
        end = m->load_end + c->overlap_tail * compute;
    /* the batch's times so far are from its start; a late load shifts them all */
    for (int k = 0; k < b; k++) {
        struct sim_request *q = &s->reqs[m->batch[k]];
        if (q->n_output > 0) {
            q->first_token += end - compute;
            q->done += end - compute;
        } else {
            q->first_token = q->done = end;
        }
    }
    for (int j = 0; j < m->n_steps; j++)
        m->step_end[j] += end - compute;
    m->running = true;
    m->batch_n = b;
    m->batch_end = m->full_end = end;
    m->batch_start = m->last_used = now;
    s->st->batches += b > 0;
    s->st->compute_s += end - now;
    return true;
}

/* As the swap manager does: a model gone already, or loading with no batch,
 * stays; a deferred one leaves when its batch (or its load) ends. */
static bool exec_offload(void *ctx, int model, bool defer)
{
    struct sim *s = ctx;
    struct sim_model *v = &s->m[model];
    if ((!v->resident && !v->kept) || v->offload_pending || (v->loading && !v->running))
        return false;
    s->st->evictions++;
    if (defer || v->loading)
        v->offload_pending = true;
    else
        evict(s, model);
    return true;
}

/* Refused when its bytes do not fit. */
static bool exec_load(void *ctx, int model)
{
    struct sim *s = ctx;
    const struct sim_config *c = s->c;
    struct sim_model *m = &s->m[model];
    if (m->resident &&
        c->n_adapters == 0) /* short of its batch's room: the victims made it, or not yet */
        return !m->loading && reserve_settle(s, model);
    if (m->resident) { /* or of an adapter's */
        if (m->loading || !reserve_settle(s, model))
            return false;
        return adapter_pending(s, model) < 0 || adapters_load(s, model);
    }
    uint64_t need[SCHED_MAX_DEVICES];
    double frac = 0; /* of its weights, what it copies: shards load in parallel */
    for (int d = 0; d < c->n_devices; d++) {
        uint64_t w = weights_of(s, model, d), held = held_on(s, model, d);
        need[d] = moving_of(s, model, d) + lack_of(s, model, d) - held;
        if (need[d] > c->budget[d] - s->used[d])
            return false;
        if (w > 0 && (double)(w - held) / (double)w > frac)
            frac = (double)(w - held) / (double)w;
    }
    for (int d = 0; d < c->n_devices; d++) {
        s->used[d] += need[d];
        s->st->bytes_loaded += need[d];
        if (s->used[d] > s->st->high_water[d])
            s->st->high_water[d] = s->used[d];
    }
    m->resident = m->loading = true;
    memcpy(m->grow, m->want, sizeof(m->grow));
    kept_clear(m);
    m->paused_kv = false; /* a paused batch's memory is the model's own again */
    m->load_frac = frac;
    m->load_end = s->now + c->load_s * frac;
    m->loaded_at = m->last_used = s->now;
    s->st->loads++;
    s->st->swap_s += c->load_s * frac;
    return true;
}

/* A resident model becomes kept (partly resident): its batches' reserve,
 * held only while resident, leaves on every device (a paused batch's
 * memory stays, as evict leaves it), each device's share counted by the
 * first trim asked there (uncounted). */
static void keep_part(struct sim *s, int model)
{
    struct sim_model *m = &s->m[model];
    uint64_t adapters[SCHED_MAX_DEVICES];
    memcpy(adapters, m->adapters_held, sizeof(adapters));
    adapters_leave(s, model); /* their bytes are free now, counted by the trims */
    for (int e = 0; e < s->c->n_devices; e++) {
        m->uncounted[e] = moving_of(s, model, e) - weights_of(s, model, e);
        s->used[e] -= m->uncounted[e];
        m->uncounted[e] += adapters[e];
    }
    if (m->paused == 0)
        memset(m->grow, 0, sizeof(m->grow));
    m->resident = false;
    m->kept = true;
    m->paused_kv = m->paused > 0;
    experts_release(s, model); /* not counted by the trims, as the engine's */
}

/* exec_trim under expert residency: model's coldest experts on d leave
 * first (it stays resident, or kept); only once none is left there does
 * a resident model become kept (keep_part) and give up whole layers, last
 * first, each freeing what its experts had not (layer_rest). A resident
 * model whose experts on d (and what the load's trims freed there
 * already: credit) cover `bytes` gives exactly those and stays resident,
 * its reserve held and not counted; else it gives every expert there and
 * at least one layer, and its reserve counts as freed (the engine's
 * exec_trim). */
static uint64_t experts_trim(struct sim *s, int model, int d, uint64_t bytes)
{
    struct sim_model *m = &s->m[model];
    if ((!m->resident && !m->kept) || m->running || m->loading || m->offload_pending)
        return 0;
    struct sim_experts *x = m->x;
    bool resident = m->resident;
    uint64_t gave = experts_give(s, model, d, bytes);
    s->st->trims++;
    if (gave >= bytes || x->n_gone[d] < x->layers * x->experts || s->c->layers <= 0)
        return gave;
    if (resident)
        keep_part(s, model);
    gave += m->uncounted[d];
    m->uncounted[d] = 0;
    for (; (gave < bytes || (resident && m->trimmed[d] == 0)) && m->trimmed[d] < s->c->layers;
         m->trimmed[d]++) {
        uint64_t r = layer_rest(s, model, d, m->trimmed[d]);
        s->used[d] -= r;
        gave += r;
    }
    return gave;
}

/* As the swap manager gives up a shard's last layers: a resident model
 * first becomes kept (keep_part: its reserve is free, on d counted now),
 * then whole layers go, last first, until at least `bytes` are free on d or
 * none is left there; its embeddings and head stay. At once, in full: the
 * caller (sched_act) never trims a model with a batch in flight. */
static uint64_t exec_trim(void *ctx, int model, int d, uint64_t bytes)
{
    struct sim *s = ctx;
    struct sim_model *m = &s->m[model];
    uint64_t lb = layer_of(s, model, d);
    if (m->x)
        return experts_trim(s, model, d, bytes);
    if ((!m->resident && !m->kept) || m->running || m->loading || m->offload_pending ||
        s->c->layers <= 0)
        return 0;
    if (m->resident)
        keep_part(s, model);
    uint64_t gave = m->uncounted[d];
    m->uncounted[d] = 0;
    uint64_t want = bytes > gave ? bytes - gave : 0;
    uint64_t k = lb ? (want + lb - 1) / lb : 0, left = (uint64_t)(s->c->layers - m->trimmed[d]);
    k = k < left ? k : left;
    m->trimmed[d] += (int)k;
    s->used[d] -= k * lb;
    s->st->trims++;
    return gave + k * lb;
}

/* The batch pauses at its first step boundary at or after now: it runs to
 * there (batch_end), then batch_pause holds what is left. */
static bool exec_preempt(void *ctx, int model)
{
    struct sim *s = ctx;
    struct sim_model *m = &s->m[model];
    if (!m->running || m->pause_pending)
        return false;
    int j = 0;
    while (j < m->n_steps - 1 && m->step_end[j] < s->now)
        j++;
    m->pause_pending = true;
    m->batch_end = m->n_steps ? m->step_end[j] : m->full_end;
    return true;
}

static bool exec_pausing(void *ctx, int model)
{
    struct sim *s = ctx;
    return s->m[model].paused > 0 || s->m[model].pause_pending;
}

/* Only a time ahead is an event (one at now would never let the clock move). */
static void exec_wake(void *ctx, double at)
{
    struct sim *s = ctx;
    if (at > s->now && at < s->wake_at)
        s->wake_at = at;
}

static void exec_carried(void *ctx, const struct sched_carried *op)
{
    struct sim *s = ctx;
    if (s->c->on_op)
        s->c->on_op(s->c->on_op_ctx, s->now, op);
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

/* sched_act, traced: "t serve|load|unload model [-victim...] [batch b] |
 * queue and state per model" */
static bool act(struct sim *s, const struct sched_view *v, const struct sched_action *a)
{
    for (int i = 0; s->experts && i < s->c->n_models; i++)
        if (s->m[i].x) /* credit is within one load's trims */
            memset(s->m[i].x->credit, 0, sizeof(s->m[i].x->credit));
    bool ok = sched_act(&exec_ops, s, v, a);
    FILE *f = s->c->trace;
    if (!f || !ok || a->kind == SCHED_WAKE)
        return ok;
    fprintf(f, "%9.4f %s %d", s->now,
            a->kind == SCHED_SERVE     ? "serve"
            : a->kind == SCHED_LOAD    ? "load "
            : a->kind == SCHED_PREEMPT ? "pause"
                                       : "unload",
            a->model);
    for (int k = 0; k < a->n_victims; k++)
        fprintf(f, " -%d", a->victims[k]);
    if (a->kind == SCHED_SERVE)
        fprintf(f, " batch %d", s->m[a->model].batch_n);
    fprintf(f, " |");
    for (int i = 0; i < s->c->n_models; i++) {
        const struct sim_model *m = &s->m[i];
        fprintf(f, " %zu%s%s%s", m->tail - m->head,
                m->resident ? (m->loading ? "L" : "R")
                : m->kept   ? "p"
                            : "",
                m->running ? "*" : "", m->paused ? "P" : "");
    }
    fprintf(f, "\n");
    return ok;
}

/* Request r's sequence leaves its batch: its adapter is idle again (or
 * less used). */
static void adapter_release(struct sim *s, size_t r)
{
    if (s->reqs[r].adapter > 0)
        s->a[s->reqs[r].adapter - 1].in_use--;
}

/* A batch asked to pause reached its boundary (batch_end): the requests done
 * by then are done, the others are held (paused; none: the batch ended).
 * Returns how many were done. */
static size_t batch_pause(struct sim *s, struct sim_model *m)
{
    size_t n_done = 0;
    int kept = 0;
    for (int k = 0; k < m->batch_n; k++) {
        size_t r = m->batch[k];
        if (s->reqs[r].done <= m->batch_end) {
            n_done++;
            adapter_release(s, r);
        } else
            m->batch[kept++] = r;
    }
    m->pause_pending = false;
    m->running = false;
    m->batch_n = kept;
    m->paused = kept;
    m->pause_t = m->batch_start = m->batch_end;
    s->st->compute_s -= m->full_end - m->batch_end; /* counted at its start or resume */
    if (kept > 0)
        s->st->preemptions++;
    else
        m->idle_since = s->now;
    return n_done;
}

/* Model's expert state (sim_moe): every expert there, none hot, its
 * trace's rank weights and per-layer permutations from its seed. */
static int experts_init(struct sim *s, int model)
{
    const struct sim_moe *mo = &s->c->moe[model];
    struct sim_experts *x = calloc(1, sizeof(*x));
    size_t le = (size_t)mo->sparse_layers * (size_t)mo->n_experts;
    if (!x || !(x->present = malloc(le * (size_t)s->c->n_devices)) ||
        !(x->hot = calloc(le, sizeof(double))) || !(x->perm = malloc(le * sizeof(int))) ||
        !(x->cdf = malloc((size_t)mo->n_experts * sizeof(double))) ||
        !(x->mark = calloc((size_t)mo->n_experts, 1))) {
        experts_free(x);
        return err_set(ERR_NOMEM, "out of memory for model %d's experts", model);
    }
    x->devices = s->c->n_devices;
    x->layers = mo->sparse_layers;
    x->experts = mo->n_experts;
    x->hot_w = 1;
    x->rng = mo->seed;
    double sum = 0;
    for (int r = 0; r < x->experts; r++)
        sum += pow(r + 1.0, -mo->zipf);
    double acc = 0;
    for (int r = 0; r < x->experts; r++) {
        acc += pow(r + 1.0, -mo->zipf);
        x->cdf[r] = r == x->experts - 1 ? 1.0 : acc / sum;
    }
    for (int l = 0; l < x->layers; l++) { /* Fisher-Yates, from the seed */
        int *p = x->perm + (size_t)l * (size_t)x->experts;
        for (int e = 0; e < x->experts; e++)
            p[e] = e;
        for (int e = x->experts - 1; e > 0; e--) {
            int j = (int)(route_next(&x->rng) % (uint64_t)(e + 1)), t = p[e];
            p[e] = p[j];
            p[j] = t;
        }
    }
    s->m[model].x = x;
    kept_clear(&s->m[model]);
    return 0;
}

/* The shapes sim_config.moe gives, within each model's weights and layers,
 * and the link's terms. */
static int experts_check(const struct sim_config *c)
{
    if (!(c->copy_latency_s >= 0) || !isfinite(c->copy_latency_s) || !(c->link_bytes_per_s >= 0) ||
        !isfinite(c->link_bytes_per_s))
        return err_set(ERR_INVALID,
                       "simulation: copy_latency_s %g, link_bytes_per_s %g: "
                       "expected finite values >= 0",
                       c->copy_latency_s, c->link_bytes_per_s);
    for (int i = 0; c->moe && i < c->n_models; i++) {
        const struct sim_moe *mo = &c->moe[i];
        if (mo->n_experts == 0)
            continue;
        if (mo->n_experts < 1 || mo->n_experts > SIM_MAX_EXPERTS || mo->top_k < 1 ||
            mo->top_k > mo->n_experts || mo->top_k > SIM_MAX_TOP_K || mo->sparse_layers < 1 ||
            mo->sparse_layers > 65536 || !(mo->zipf >= 0) || !isfinite(mo->zipf) ||
            mo->drift_steps < 0 || (c->layers > 0 && mo->sparse_layers > c->layers))
            return err_set(ERR_INVALID,
                           "model %d: %d experts, top_k %d, %d sparse layers, zipf %g, drift "
                           "%d: expected 1..%d experts, top_k 1..min(experts, %d), 1..layers "
                           "sparse layers, zipf >= 0, drift >= 0",
                           i, mo->n_experts, mo->top_k, mo->sparse_layers, mo->zipf,
                           mo->drift_steps, SIM_MAX_EXPERTS, SIM_MAX_TOP_K);
        for (int d = 0; d < c->n_devices; d++) {
            size_t k = (size_t)i * (size_t)c->n_devices + (size_t)d;
            uint64_t w = c->bytes[k] - (c->kv_bytes ? c->kv_bytes[k] : 0);
            uint64_t per = (uint64_t)mo->n_experts * mo->expert_bytes[d];
            uint64_t lb = c->layers <= 0   ? 0
                          : c->layer_bytes ? c->layer_bytes[k]
                                           : w / (uint64_t)c->layers;
            if (mo->expert_bytes[d] > w || per / mo->n_experts != mo->expert_bytes[d] ||
                per > w / (uint64_t)mo->sparse_layers || (c->layers > 0 && per > lb))
                return err_set(ERR_INVALID,
                               "model %d: %d x %d experts of %llu bytes on device %d exceed "
                               "its weights (%llu bytes) or a layer (%llu): expected them "
                               "within both",
                               i, mo->sparse_layers, mo->n_experts,
                               (unsigned long long)mo->expert_bytes[d], d, (unsigned long long)w,
                               (unsigned long long)lb);
        }
    }
    return 0;
}

/* The controls in their ranges (the engine's: engine_set_*), and room on every device
 * for each model beside the pinned ones. */
static int controls_check(const struct sim_config *c)
{
    uint64_t pinned[SCHED_MAX_DEVICES] = {0};
    for (int i = 0; i < c->n_models; i++) {
        double ka = c->keep_alive ? c->keep_alive[i] : NAN;
        int pr = c->priority ? c->priority[i] : 0;
        double qw = c->max_queue_wait ? c->max_queue_wait[i] : 0;
        double mr = c->min_resident ? c->min_resident[i] : 0;
        if (!(isnan(ka) || ka >= 0))
            return err_set(ERR_INVALID, "model %d: keep_alive %g: expected seconds >= 0, "
                                        "INFINITY (never) or NAN (the policy's)", i, ka);
        if (pr < -SCHED_PRIORITY_MAX || pr > SCHED_PRIORITY_MAX)
            return err_set(ERR_INVALID, "model %d: priority %d: expected %d..%d", i, pr,
                           -SCHED_PRIORITY_MAX, SCHED_PRIORITY_MAX);
        if (!(qw >= 0) || !isfinite(qw))
            return err_set(ERR_INVALID, "model %d: max_queue_wait %g: expected seconds >= 0 "
                                        "(0: no bound)", i, qw);
        if (!(mr >= 0) || !isfinite(mr))
            return err_set(ERR_INVALID, "model %d: min_resident %g: expected seconds >= 0 "
                                        "(0: none)", i, mr);
        for (int d = 0; c->pinned && c->pinned[i] && d < c->n_devices; d++)
            pinned[d] += c->bytes[(size_t)i * c->n_devices + d];
    }
    for (int i = 0; i < c->n_models; i++)
        for (int d = 0; d < c->n_devices; d++) {
            uint64_t b = c->bytes[(size_t)i * c->n_devices + d];
            uint64_t beside = pinned[d] - (c->pinned && c->pinned[i] ? b : 0);
            if (b > 0 && (b > c->budget[d] || beside > c->budget[d] - b))
                return err_set(ERR_INVALID, "model %d never fits device %d beside the pinned "
                                            "models: it needs %llu bytes, they hold %llu of "
                                            "%llu (pin fewer)", i, d, (unsigned long long)b,
                               (unsigned long long)beside, (unsigned long long)c->budget[d]);
        }
    return 0;
}

/* Each request's batch (batch_bytes) beside its model's weights, and beside
 * the pinned models' bytes when it is not one of them, within every budget
 * (as the engine refuses a request that never fits at its submission, and
 * fails one that cannot run beside the pinned models at once). */
static int requests_check(const struct sim_config *c, const struct sim_request *reqs, size_t n)
{
    uint64_t pinned[SCHED_MAX_DEVICES] = {0};
    for (int i = 0; c->pinned && i < c->n_models; i++)
        for (int d = 0; c->pinned[i] && d < c->n_devices; d++)
            pinned[d] += c->bytes[(size_t)i * c->n_devices + d];
    for (size_t r = 0; r < n; r++) {
        int i = reqs[r].model;
        bool pin = c->pinned && c->pinned[i];
        for (int d = 0; reqs[r].batch_bytes > 0 && d < c->n_devices; d++) {
            uint64_t b = c->bytes[(size_t)i * c->n_devices + d], k = base_kv(c, i, d);
            if (b == 0)
                continue;
            uint64_t need = b - k + (reqs[r].batch_bytes > k ? reqs[r].batch_bytes : k);
            uint64_t beside = pin ? 0 : pinned[d];
            if (need > c->budget[d] || beside > c->budget[d] - need)
                return err_set(ERR_INVALID,
                               "simulated request %zu of model %d never fits device %d: its "
                               "weights and batch need %llu bytes, pinned models hold %llu, "
                               "of a budget of %llu",
                               r, i, d, (unsigned long long)need, (unsigned long long)beside,
                               (unsigned long long)c->budget[d]);
        }
    }
    return 0;
}

/* The adapters' registrations and the requests naming them: each over a
 * model, loading in a time >= 0, fitting every device beside its base;
 * each request's adapter one of its model's. */
static int adapters_check(const struct sim_config *c, const struct sim_request *reqs, size_t n)
{
    if (c->n_adapters < 0 ||
        (c->n_adapters > 0 && (!c->adapter_base || !c->adapter_bytes || !c->adapter_load_s)))
        return err_set(ERR_INVALID,
                       "simulation: %d adapters: expected >= 0, with their bases, "
                       "bytes and load times",
                       c->n_adapters);
    for (int k = 0; k < c->n_adapters; k++) {
        int b = c->adapter_base[k];
        if (b < 0 || b >= c->n_models || !(c->adapter_load_s[k] >= 0))
            return err_set(ERR_INVALID,
                           "adapter %d: base %d of %d models, load %g s: expected "
                           "a model and seconds >= 0",
                           k, b, c->n_models, c->adapter_load_s[k]);
        for (int d = 0; d < c->n_devices; d++) {
            uint64_t need = c->bytes[(size_t)b * c->n_devices + d] +
                            c->adapter_bytes[(size_t)k * c->n_devices + d];
            if (need > c->budget[d])
                return err_set(ERR_INVALID,
                               "adapter %d never fits device %d beside its base: "
                               "%llu bytes together, a budget of %llu",
                               k, d, (unsigned long long)need, (unsigned long long)c->budget[d]);
        }
    }
    for (size_t i = 0; i < n; i++) {
        int k = reqs[i].adapter - 1;
        if (k >= c->n_adapters || (k >= 0 && c->adapter_base[k] != reqs[i].model))
            return err_set(ERR_INVALID,
                           "simulated request %zu: adapter %d over model %d: "
                           "expected 0 (none) or one of that model's 1..%d",
                           i, reqs[i].adapter, reqs[i].model, c->n_adapters);
    }
    return 0;
}

int sim_run(const struct sim_config *c, struct sim_request *reqs, size_t n, struct sim_stats *st)
{
    if (c->n_models < 1 || c->n_models > SCHED_MAX_MODELS || c->n_devices < 1 ||
        c->n_devices > SCHED_MAX_DEVICES || c->max_batch < 1 || c->max_batch > SIM_MAX_BATCH ||
        !(c->load_s >= 0) || !(c->overlap_tail >= 0 && c->overlap_tail <= 1) || c->layers < 0)
        return err_set(ERR_INVALID,
                       "simulation needs 1..%d models, 1..%d devices, max_batch "
                       "1..%d, load_s >= 0, overlap_tail in [0, 1] and layers >= 0",
                       SCHED_MAX_MODELS, SCHED_MAX_DEVICES, SIM_MAX_BATCH);
    for (size_t k = 0; c->layer_bytes && k < (size_t)c->n_models * c->n_devices; k++)
        if (c->layer_bytes[k] * (uint64_t)c->layers >
            c->bytes[k] - (c->kv_bytes ? c->kv_bytes[k] : 0))
            return err_set(ERR_INVALID,
                           "model %zu: %d layers of %llu bytes on device %zu exceed "
                           "its %llu bytes less its batch's: expected layer_bytes x "
                           "layers <= bytes - kv_bytes",
                           k / (size_t)c->n_devices, c->layers,
                           (unsigned long long)c->layer_bytes[k], k % (size_t)c->n_devices,
                           (unsigned long long)c->bytes[k]);
    for (size_t i = 0; i < n; i++)
        if (reqs[i].model < 0 || reqs[i].model >= c->n_models ||
            (i > 0 && reqs[i].arrival < reqs[i - 1].arrival))
            return err_set(ERR_INVALID, "simulated request %zu: model %d of %d, arrivals must be "
                                        "sorted", i, reqs[i].model, c->n_models);
    int crc = adapters_check(c, reqs, n);
    if (crc < 0)
        return crc;
    if ((crc = experts_check(c)) < 0)
        return crc;
    crc = controls_check(c);
    if (crc < 0)
        return crc;
    if ((crc = requests_check(c, reqs, n)) < 0)
        return crc;
    memset(st, 0, sizeof(*st));
    struct sim s = {.c = c, .reqs = reqs, .n = n, .st = st};
    s.m = calloc((size_t)c->n_models, sizeof(*s.m));
    s.next_of = malloc((n ? n : 1) * sizeof(size_t));
    struct sched_model *sm = calloc((size_t)c->n_models, sizeof(*sm));
    if (c->n_adapters) {
        s.a = calloc((size_t)c->n_adapters, sizeof(*s.a));
        s.joined = calloc(n ? n : 1, 1);
    }
    int rc = s.m && sm && s.next_of && (!c->n_adapters || (s.a && s.joined))
                 ? 0
                 : err_set(ERR_NOMEM, "out of memory");
    /* each model's requests in order, for the policies that read the future */
    for (int i = 0; rc == 0 && i < c->n_models; i++)
        s.m[i].upcoming = n;
    for (size_t i = n; rc == 0 && i-- > 0;) {
        struct sim_model *m = &s.m[reqs[i].model];
        s.next_of[i] = m->upcoming;
        m->upcoming = i;
    }
    for (int i = 0; rc == 0 && c->expert_residency && c->moe && i < c->n_models; i++)
        if (c->moe[i].n_experts > 0 && (rc = experts_init(&s, i)) == 0)
            s.experts = true;
    for (int i = 0; rc == 0 && i < c->n_models; i++) {
        s.m[i].queue = malloc((n ? n : 1) * sizeof(size_t));
        s.m[i].batch = malloc((size_t)c->max_batch * sizeof(size_t));
        if (!s.m[i].queue || !s.m[i].batch)
            rc = err_set(ERR_NOMEM, "out of memory");
    }
    size_t next = 0, done = 0;
    double now = 0;
    while (rc == 0 && done < n) {
        /* everything that happens at `now` */
        for (; next < n && reqs[next].arrival <= now; next++) {
            struct sim_model *m = &s.m[reqs[next].model];
            for (int d = 0; d < c->n_devices; d++) {
                uint64_t b = reqs[next].batch_bytes, k = base_kv(c, reqs[next].model, d);
                if (weights_of(&s, reqs[next].model, d) > 0 && b > k + m->want[d])
                    m->want[d] = b - k;
            }
            m->queue[m->tail++] = next;
            if (reqs[next].adapter > 0)
                s.a[reqs[next].adapter - 1].waiting++;
            m->upcoming = s.next_of[next];
            forecast_add(&m->arrivals, reqs[next].arrival);
        }
        for (int i = 0; i < c->n_models; i++) {
            struct sim_model *m = &s.m[i];
            if (m->loading && m->load_end <= now) {
                m->loading = false;
                if (m->offload_pending && !m->running)
                    evict(&s, i);
            }
            if (m->running && m->batch_end <= now && m->pause_pending) {
                done += batch_pause(&s, m);
                if (m->offload_pending && !m->loading)
                    evict(&s, i);
            } else if (m->running && m->batch_end <= now) {
                /* exec_serve set each request's times */
                done += (size_t)m->batch_n;
                for (int k = 0; c->n_adapters && k < m->batch_n; k++)
                    adapter_release(&s, m->batch[k]);
                m->running = false;
                m->idle_since = now;
                if (m->offload_pending && !m->loading)
                    evict(&s, i);
            }
        }
        for (int k = 0; k < c->n_adapters; k++)
            if (s.a[k].loading && s.a[k].load_end <= now)
                s.a[k].loading = false;
        /* the scheduler, until it has nothing more to do now */
        s.now = now;
        s.wake_at = INFINITY;
        for (;;) {
            struct sched_view v;
            struct sched_action a[16];
            for (int i = 0; i < c->n_models; i++) {
                experts_release(&s, i); /* an idle model's absent experts are free */
                reserve_settle(&s, i);  /* what has room now is taken */
                if (c->n_adapters)
                    adapters_load(&s, i);
            }
            view_build(&s, now, sm, &v);
            int k = c->policy->decide(&v, a, 16);
            bool progress = false;
            for (int j = 0; j < k; j++)
                progress |= act(&s, &v, &a[j]);
            if (!progress)
                break;
        }
        /* the next event */
        double t = next < n ? reqs[next].arrival : INFINITY;
        if (s.wake_at < t)
            t = s.wake_at;
        for (int i = 0; i < c->n_models; i++) {
            if (s.m[i].loading && s.m[i].load_end < t)
                t = s.m[i].load_end;
            if (s.m[i].running && s.m[i].batch_end < t)
                t = s.m[i].batch_end;
        }
        for (int k = 0; k < c->n_adapters; k++)
            if (s.a[k].loading && s.a[k].load_end < t)
                t = s.a[k].load_end;
        if (done < n && isinf(t))
            rc = err_set(ERR_INVALID, "policy %s left %zu requests waiting with nothing in "
                                      "progress at t = %.6f s", c->policy->name, n - done, now);
        now = t;
    }
    for (int i = 0; s.m && i < c->n_models; i++) {
        free(s.m[i].queue);
        free(s.m[i].batch);
        free(s.m[i].step_end);
        experts_free(s.m[i].x);
    }
    free(s.m);
    free(s.a);
    free(s.joined);
    free(s.next_of);
    free(sm);
    return rc;
}
