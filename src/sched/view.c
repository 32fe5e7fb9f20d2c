/* The view as the policies read it: which waiting model goes first, the
 * wake-ups they ask for, keep-alive expiries, and the room a load needs
 * counted as evict.h counts it. */
#include <math.h>
#include <string.h>

#include "sched/sched_impl.h"

/* The waiting model with the oldest queue head among those `want` accepts. */
int sched_oldest_head(const struct sched_view *v, bool (*want)(const struct sched_model *))
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
bool sched_goes_before_by(const struct sched_view *v, int i, int j, double fuller_wait)
{
    const struct sched_model *a = &v->models[i], *b = &v->models[j];
    bool sa = a->max_queue_wait > 0 && v->now - a->head_arrival > a->max_queue_wait;
    bool sb = b->max_queue_wait > 0 && v->now - b->head_arrival > b->max_queue_wait;
    if (sa != sb)
        return sa;
    if (a->priority != b->priority)
        return a->priority > b->priority;
    double older = a->head_arrival < b->head_arrival ? a->head_arrival : b->head_arrival;
    if (fuller_wait > 0 && batch_take(v, a) != batch_take(v, b) && v->now - older <= fuller_wait)
        return batch_take(v, a) > batch_take(v, b);
    return a->head_arrival < b->head_arrival;
}

bool sched_goes_before(const struct sched_view *v, int i, int j)
{
    return sched_goes_before_by(v, i, j, 0);
}

/* The waiting model `want` accepts that goes first (sched_goes_before_by). */
int sched_first_waiting_by(const struct sched_view *v, bool (*want)(const struct sched_model *),
                           double fuller_wait)
{
    int best = -1;
    for (int i = 0; i < v->n_models; i++)
        if (v->models[i].queue_len > 0 && want(&v->models[i]) &&
            (best < 0 || sched_goes_before_by(v, i, best, fuller_wait)))
            best = i;
    return best;
}

int sched_first_waiting(const struct sched_view *v, bool (*want)(const struct sched_model *))
{
    return sched_first_waiting_by(v, want, 0);
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
int sched_add_wake(const struct sched_view *v, struct sched_action *out, int n, int max,
                   double wake)
{
    double order = queue_wait_expiry(v);
    wake = order < wake ? order : wake;
    if (wake < INFINITY && n < max)
        out[n++] = (struct sched_action){.kind = SCHED_WAKE, .at = wake};
    return n;
}

/* The view as the shared victim choice (sched/evict.h) sees it: every model
 * with what it holds and its last use, none evictable yet; the caller says
 * who may go. */
void sched_evict_view(const struct sched_view *v, struct evict_model *em)
{
    for (int i = 0; i < v->n_models; i++)
        em[i] = (struct evict_model){.last_used = v->models[i].last_used,
                                     .bytes = held_of(&v->models[i]),
                                     .uncounted = !v->models[i].resident};
}

/* victim leaves: what it holds becomes free; only a resident one stops
 * counting toward max_loaded (a partly resident one never counted). */
void sched_room_free(const struct sched_view *v, struct evict_room *r, int victim)
{
    const struct sched_model *c = &v->models[victim];
    evict_room_take(r, &(struct evict_model){.bytes = held_of(c), .uncounted = !c->resident});
}

/* Whether a load of m fits room r (bytes it lacks, and max_loaded). */
bool sched_room_for(const struct sched_view *v, const struct evict_room *r, int m)
{
    uint64_t need[SCHED_MAX_DEVICES];
    need_of(v, &v->models[m], need);
    return evict_room_fits(r, need);
}

/* The devices' free bytes, the resident count and max_loaded. */
void sched_room_of_view(const struct sched_view *v, struct evict_room *r)
{
    r->n_devices = v->n_devices;
    memcpy(r->free_bytes, v->free_bytes, sizeof(r->free_bytes));
    r->resident = 0;
    r->max_resident = v->max_loaded;
}

/* Room on the devices once the models already leaving have left. */
void sched_room_init(const struct sched_view *v, struct evict_room *r)
{
    sched_room_of_view(v, r);
    for (int i = 0; i < v->n_models; i++) {
        const struct sched_model *c = &v->models[i];
        if (c->resident && c->offload_pending)
            for (int d = 0; d < v->n_devices; d++)
                r->free_bytes[d] += c->bytes[d];
        r->resident += c->resident && !c->offload_pending;
    }
}

/* Idle models past their keep-alive (keep_alive, def where the model says
 * NAN), counted from idle_since: a SCHED_UNLOAD each, into out[n..max),
 * gone[] marked; *wake is lowered to the next expiry still ahead. Returns
 * the new n. */
int sched_keep_alive_unloads(const struct sched_view *v, double def, bool *gone,
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

int sched_victims(const struct sched_view *v, int m, struct evict_room *r, evict_pick_fn pick,
                  void *ctx, struct sched_action *a, int *taken)
{
    struct evict_model em[SCHED_MAX_MODELS];
    uint64_t need[SCHED_MAX_DEVICES];
    sched_evict_view(v, em);
    need_of(v, &v->models[m], need);
    int n = evict_until_fit(em, need, r, pick, ctx, a->victims, SCHED_MAX_VICTIMS, taken);
    a->n_victims = n >= 0 ? n : *taken;
    return n;
}
