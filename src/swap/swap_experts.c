/* Expert-level residency (placement.expert_residency): each routed expert
 * of a shard is a blob of its own (model_shard.expert_blobs), after the
 * layer blobs, and may leave the device while its model stays resident.
 *
 * Hotness: per model and (layer, expert), the router's real tokens
 * decayed by HOT_DECAY at every step of that layer (a half-life of
 * HOT_HALF_LIFE steps), reported by each stage's TP rank 0 (every rank
 * routes alike). Deterministic: no clock.
 *
 * Leaving: a trim of an idle model (swap_trim) gives up its coldest
 * experts on the device before any layer; a step that lacks room for an
 * expert it needs evicts the coldest experts of other idle models there.
 * An expert leaves every shard holding it at once (its TP slices
 * together) and is never copied back: a host copy stays in the host tier,
 * else the expert is read from the checkpoint when next needed.
 *
 * Coming back: a step's sparse layer asks for every expert of its routing
 * the shard lacks (swap_experts_request); each is placed on every shard
 * holding it and copied in on the device's loader thread, beside the
 * shard's other job (xjob), with its readiness event; the step waits on
 * those events (engine/step.c) as it does on layer blobs. A whole load
 * brings back every missing expert (swap.c: blob_arriving). */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/error.h"
#include "swap/swap_impl.h"

#define HOT_HALF_LIFE 64
/* 2^(-1 / HOT_HALF_LIFE) */
#define HOT_DECAY 0.98922949f

int swap_expert_blob(const struct swap_shard *sh, int l, int e)
{
    const struct model_layout *lay = &sh->st.layout;
    const int li = l - sh->layer_begin;
    if (!lay->expert_blob || li < 0 || li >= lay->n_dense - 1 || e < 0 || e >= lay->n_experts)
        return -1;
    return lay->expert_blob[(size_t)li * lay->n_experts + e];
}

uint64_t swap_experts_missing(const struct swap_shard *sh)
{
    uint64_t n = 0;
    for (int b = sh->st.layout.n_dense; !sh->remote && b < sh->kept; b++)
        n += sh->st.dev[b] ? 0 : sh->st.layout.blob_bytes[b];
    return n;
}

/* Frees expert (l, e) of model on every shard holding it; the device
 * bytes freed on device d, and on all of them into *all. */
static uint64_t unit_release(struct swap_model *model, int l, int e, int d, uint64_t *all)
{
    uint64_t here = 0;
    for (int s = 0; s < model->tp * model->pp; s++) {
        struct swap_shard *sh = &model->shards[s];
        const int b = swap_expert_blob(sh, l, e);
        if (b < 0 || !sh->st.dev[b])
            continue;
        const uint64_t n = swap_blob_device_bytes(sh, b);
        device_free(sh->st.dev[b]);
        sh->st.dev[b] = NULL;
        device_event_reset(sh->st.ready[b]);
        *all += n;
        here += sh->device == d ? n : 0;
    }
    return here;
}

/* An expert on a device that may leave, and how hot it is. */
struct cold {
    struct swap_model *model;
    int l, e;
    float hot;
};

/* The coldest first; ties: the later layer, then the higher expert, then
 * the later model. */
static int cold_cmp(const void *pa, const void *pb)
{
    const struct cold *a = pa, *b = pb;
    if (a->hot != b->hot)
        return a->hot < b->hot ? -1 : 1;
    if (a->l != b->l)
        return a->l > b->l ? -1 : 1;
    if (a->e != b->e)
        return a->e > b->e ? -1 : 1;
    return a->model->id > b->model->id ? -1 : a->model->id < b->model->id;
}

/* Appends model's experts present on device d to *list (grown); their
 * count added to *n. */
static int cold_add(struct swap_model *model, int d, struct cold **list, int *n, int *cap)
{
    for (int s = 0; s < model->tp * model->pp; s++) {
        const struct swap_shard *sh = &model->shards[s];
        const struct model_layout *lay = &sh->st.layout;
        if (sh->device != d || !lay->expert_blob)
            continue;
        for (int li = 0; li < lay->n_dense - 1; li++)
            for (int e = 0; e < lay->n_experts; e++) {
                const int b = lay->expert_blob[(size_t)li * lay->n_experts + e];
                if (b < 0 || !sh->st.dev[b])
                    continue;
                if (*n == *cap) {
                    int c = *cap ? 2 * *cap : 256;
                    struct cold *p = realloc(*list, (size_t)c * sizeof(*p));
                    if (!p)
                        return err_set(ERR_NOMEM, "out of memory");
                    *list = p, *cap = c;
                }
                const int l = sh->layer_begin + li;
                (*list)[(*n)++] =
                    (struct cold){model, l, e, model->hot[(size_t)l * model->hot_experts + e]};
            }
    }
    return 0;
}

uint64_t swap_experts_trim_locked(struct swap_manager *mgr, struct swap_model *model, int device,
                                  uint64_t bytes, uint64_t *all)
{
    (void)mgr;
    struct cold *list = NULL;
    int n = 0, cap = 0;
    uint64_t got = 0;
    *all = 0;
    if (cold_add(model, device, &list, &n, &cap) < 0) {
        free(list);
        return 0; /* nothing freed: the layers are trimmed instead */
    }
    if (n > 1)
        qsort(list, (size_t)n, sizeof(*list), cold_cmp);
    for (int i = 0; i < n && got < bytes; i++) {
        got += unit_release(model, list[i].l, list[i].e, device, all);
        mgr->stats.experts_evicted++;
    }
    free(list);
    return got;
}

/* Places blob b of sh on its device, making room when it lacks it by
 * evicting the coldest experts of idle models there (never model's, whose
 * step is in flight). ERR_BUSY, naming the device and bytes, when they
 * cannot make it. */
static int place_blob(struct swap_manager *mgr, struct swap_shard *sh, int b)
{
    struct device *dev = mgr->devices[sh->device];
    const size_t n = sh->st.layout.blob_bytes[b];
    if (device_alloc(dev, n, &sh->st.dev[b]) == 0)
        return 0;
    struct cold *list = NULL;
    int count = 0, cap = 0, rc = 0;
    for (int i = 0; rc == 0 && i < mgr->n_models; i++) {
        struct swap_model *m = mgr->models[i];
        if (m != sh->model && m->expert_residency && swap_model_idle(m) &&
            (swap_model_resident(m) || swap_model_partial(m)))
            rc = cold_add(m, sh->device, &list, &count, &cap);
    }
    if (count > 1)
        qsort(list, (size_t)count, sizeof(*list), cold_cmp);
    rc = ERR_NOMEM;
    for (int i = 0; i < count && rc < 0; i++) {
        uint64_t all = 0;
        unit_release(list[i].model, list[i].l, list[i].e, sh->device, &all);
        mgr->stats.experts_evicted++;
        rc = device_alloc(dev, n, &sh->st.dev[b]);
    }
    free(list);
    if (rc == 0)
        return 0;
    sh->st.dev[b] = NULL;
    char need[32], free_s[32];
    bytes_format(need, sizeof(need), n, BYTES_BINARY);
    bytes_format(free_s, sizeof(free_s), device_budget(dev) - device_used(dev), BYTES_BINARY);
    return err_set(ERR_BUSY,
                   "model %s: no room on device %s for an expert its step needs (%s, %s free) "
                   "and no idle model's expert there to evict",
                   sh->model->name, device_name(dev), need, free_s);
}

/* Brings expert (l, e) of model in on every shard holding it that lacks
 * it: placed, armed, and its shard's expert job posted (or told to run
 * again) by the caller's mask. On failure what it placed is freed. */
static int unit_bring(struct swap_manager *mgr, struct swap_model *model, int l, int e, bool *post)
{
    int placed[EVICT_MAX_DEVICES], n = 0, rc = 0;
    for (int s = 0; rc == 0 && s < model->tp * model->pp; s++) {
        struct swap_shard *sh = &model->shards[s];
        const int b = swap_expert_blob(sh, l, e);
        if (b < 0 || sh->st.dev[b] || !sh->st.layout.blob_bytes[b])
            continue;
        if ((rc = place_blob(mgr, sh, b)) == 0)
            placed[n++] = s;
    }
    for (int i = 0; i < n; i++) {
        struct swap_shard *sh = &model->shards[placed[i]];
        const int b = swap_expert_blob(sh, l, e);
        if (rc < 0) {
            device_free(sh->st.dev[b]);
            sh->st.dev[b] = NULL;
            continue;
        }
        store_blob_arm(&sh->st, b);
        post[placed[i]] = true;
    }
    return rc;
}

int swap_experts_request(struct swap_manager *mgr, const struct swap_shard *shard, int layer,
                         const int *rows, const int *real, int n_experts, uint8_t *ok)
{
    struct swap_model *model = shard->model;
    if (!model->expert_residency)
        return 0;
    const int l = shard->layer_begin + layer;
    const int E = n_experts < model->hot_experts ? n_experts : model->hot_experts;
    bool post[EVICT_MAX_DEVICES] = {false};
    int rc = 0;
    pthread_mutex_lock(&mgr->lock);
    if (shard->rank == 0) { /* every rank routes alike: one report per step */
        float *hot = model->hot + (size_t)l * model->hot_experts;
        for (int e = 0; e < E; e++)
            hot[e] = hot[e] * HOT_DECAY + (float)real[e];
    }
    for (int e = 0; e < E; e++) {
        const int b = swap_expert_blob(shard, l, e);
        if (rows[e] == 0 || b < 0 || shard->st.dev[b])
            continue; /* not needed, not this shard's, or there (or arriving) */
        int r = unit_bring(mgr, model, l, e, post);
        if (r < 0) {
            ok[e] = 0;
            rc = rc < 0 ? rc : r;
            continue;
        }
        mgr->stats.experts_loaded++;
    }
    for (int s = 0; s < model->tp * model->pp; s++) {
        struct swap_shard *sh = &model->shards[s];
        if (!post[s] || sh->xjob_state == XJOB_QUEUED)
            continue; /* a queued job takes every blob armed before it runs */
        if (sh->xjob_state == XJOB_RUNNING) {
            sh->xjob_again = true;
            continue;
        }
        sh->xjob_state = XJOB_QUEUED;
        model->shards_busy++;
        loader_submit(&mgr->loaders[sh->device], sh, LOADER_EXPERTS);
    }
    pthread_mutex_unlock(&mgr->lock);
    return rc;
}

int swap_model_expert_hot(struct swap_manager *mgr, const struct swap_model *model, float *out,
                          size_t cap, int *layers, int *experts)
{
    *layers = model->expert_residency ? model->info->n_layers : 0;
    *experts = model->expert_residency ? model->hot_experts : 0;
    const size_t n = (size_t)*layers * *experts;
    if (!out || n == 0)
        return 0;
    if (n > cap)
        return err_set(ERR_INVALID, "a table of %zu experts' hotness does not fit %zu", n, cap);
    pthread_mutex_lock(&mgr->lock);
    memcpy(out, model->hot, n * sizeof(*out));
    pthread_mutex_unlock(&mgr->lock);
    return 0;
}

uint64_t swap_model_experts_resident(struct swap_manager *mgr, const struct swap_model *model)
{
    uint64_t n = 0;
    pthread_mutex_lock(&mgr->lock);
    for (int s = 0; s < model->tp * model->pp; s++) {
        const struct swap_shard *sh = &model->shards[s];
        for (int b = sh->st.layout.n_dense; b < sh->st.layout.n_blobs; b++)
            n += sh->st.dev[b] != NULL && (b < sh->kept || sh->state == RES_LOADING);
    }
    pthread_mutex_unlock(&mgr->lock);
    return n;
}

uint64_t swap_model_expert_bytes(struct swap_manager *mgr, const struct swap_model *model, int d)
{
    uint64_t n = 0;
    pthread_mutex_lock(&mgr->lock);
    for (int s = 0; model->expert_residency && s < model->tp * model->pp; s++) {
        const struct swap_shard *sh = &model->shards[s];
        for (int b = sh->st.layout.n_dense; sh->device == d && b < sh->st.layout.n_blobs; b++)
            n += sh->st.dev[b] ? swap_blob_device_bytes(sh, b) : 0;
    }
    pthread_mutex_unlock(&mgr->lock);
    return n;
}
