/* Carrying out the policies' actions (sched_act), one rule for the engine
 * and the simulator: the batch rule, offloads and trims of a load's
 * victims, the load; and the fragmentation step's victim. */
#include <assert.h>
#include <stddef.h>

#include "sched/sched.h"
#include "sched/sched_impl.h"

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
        ops->carried(ctx, &(struct sched_carried){.op = SCHED_OP_OFFLOAD,
                                                  .model = model,
                                                  .idle = idle,
                                                  .preempted = preempted,
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
        ops->carried(ctx,
                     &(struct sched_carried){.op = a->kind == SCHED_SERVE     ? SCHED_OP_SERVE
                                                   : a->kind == SCHED_PREEMPT ? SCHED_OP_PREEMPT
                                                                              : SCHED_OP_LOAD,
                                             .model = a->model});
    return ok;
}

int sched_defrag_victim(const struct sched_view *v, int incoming, int device)
{
    struct evict_model em[SCHED_MAX_MODELS];
    sched_evict_view(v, em);
    for (int i = 0; i < v->n_models; i++) {
        const struct sched_model *c = &v->models[i];
        em[i].evictable = i != incoming && evictable(v, c) && !c->running && held_of(c)[device] > 0;
    }
    return evict_lru(em, v->n_models);
}
