/* The swapwise-preempt policy: swapwise with token-level preemption.
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
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched/sched_impl.h"

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
        out[1] =
            (struct sched_action){.kind = SCHED_LOAD, .model = w, .n_victims = 1, .victims = {r}};
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
    int n = sched_swapwise_decide(&pv, out, max);
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

const struct sched_policy sched_policy_swapwise_preempt = {
    .name = "swapwise-preempt",
    .help = "swapwise, and a model waiting past its max_queue_wait (or 0.5 s) pauses a batch "
            "of another model that has run at least as long, at a step boundary (its KV cache "
            "stays on the devices), to run first; the paused batch resumes after it",
    .decide = swapwise_preempt_decide,
    .batch_same_params_only = false,
};
