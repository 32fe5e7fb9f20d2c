/* swap_load_lru: room by least recent use, for callers without an engine.
 * The manager itself never picks a model to leave (swap.h); this is one
 * caller that does, with the shared victim choice of sched/evict.h, through the
 * same steps the engine takes: offload victims, swap_compact when free
 * memory is in pieces, load. */
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "swap/swap_impl.h"

/* The snapshot sched/evict.h chooses from: idle resident (or partly resident)
 * models other than model that are not pinned may go, each freeing the
 * bytes it holds (held: (n_models, n_devices), filled here); on_device >= 0
 * keeps those with bytes there. */
static void lru_snapshot(struct swap_manager *mgr, const struct swap_model *model, int on_device,
                         uint64_t *held)
{
    for (int i = 0; i < mgr->n_models; i++) {
        const struct swap_model *m = mgr->models[i];
        uint64_t *bytes = held + (size_t)i * mgr->n_devices;
        for (int d = 0; d < mgr->n_devices; d++)
            bytes[d] = swap_model_held_locked(m, d);
        mgr->lru[i] = (struct evict_model){
            .evictable = m != model && (swap_model_resident(m) || swap_model_partial(m)) &&
                         swap_model_idle(m) && !m->pinned && !m->offload_pending &&
                         (on_device < 0 || bytes[on_device] > 0),
            .last_used = (double)m->last_used,
            .bytes = bytes};
    }
}

/* Offloads the victims that make model's missing bytes fit; ERR_BUSY,
 * taking none, when even every model that may go would not make them fit. */
static int make_room(struct swap_manager *mgr, struct swap_model *model, uint64_t *held)
{
    struct evict_room room = {.n_devices = mgr->n_devices};
    uint64_t need[EVICT_MAX_DEVICES];
    for (int d = 0; d < mgr->n_devices; d++) {
        struct device *dev = mgr->devices[d];
        room.free_bytes[d] = device_budget(dev) - device_used(dev);
        need[d] =
            mgr->bytes[(size_t)model->id * mgr->n_devices + d] - swap_model_held_locked(model, d);
    }
    int *victims = malloc((size_t)mgr->n_models * sizeof(*victims));
    if (!victims)
        return err_set(ERR_NOMEM, "out of memory");
    lru_snapshot(mgr, model, -1, held);
    int n = evict_lru_until_fit(mgr->lru, mgr->n_models, need, &room, true, victims, mgr->n_models);
    for (int k = 0; k < n; k++) {
        mgr->stats.evictions++;
        swap_offload_locked(mgr, mgr->models[victims[k]]);
    }
    free(victims);
    return n > 0 ? 0 : ERR_BUSY;
}

int swap_load_lru(struct swap_manager *mgr, struct swap_model *model)
{
    pthread_mutex_lock(&mgr->lock);
    int rc;
    for (;;) {
        struct swap_room why;
        char refusal[256];
        if ((rc = swap_load_locked(mgr, model, &why)) == 0 || rc != ERR_BUSY ||
            why.kind == SWAP_ROOM_HOST)
            break;
        if (why.kind == SWAP_ROOM_MOVING || why.leaving > 0) { /* room is on its way */
            pthread_cond_wait(&mgr->changed, &mgr->lock);
            continue;
        }
        snprintf(refusal, sizeof(refusal), "%s", err_msg());
        uint64_t *held = malloc((size_t)mgr->n_models * mgr->n_devices * sizeof(*held));
        if (!held) {
            rc = err_set(ERR_NOMEM, "out of memory");
            break;
        }
        if (why.kind == SWAP_ROOM_FRAGMENTED) {
            lru_snapshot(mgr, model, why.device, held);
            int v = evict_lru(mgr->lru, mgr->n_models);
            rc = v >= 0 ? swap_compact_locked(mgr, why.device, mgr->models[v]) : ERR_BUSY;
        } else {
            rc = make_room(mgr, model, held);
        }
        free(held);
        if (rc == 0)
            continue;
        if (rc == ERR_NOMEM)
            break;
        rc = err_set(ERR_BUSY,
                     "no model may leave to make room (the others have work in flight, "
                     "are in transition or pinned): %s",
                     refusal);
        break;
    }
    pthread_mutex_unlock(&mgr->lock);
    return rc;
}
