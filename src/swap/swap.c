/* The swap manager: registration, residency transitions, budgets. The data
 * movement itself runs on the per-device loader threads (loader.c). */
#include "swap/swap.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/error.h"
#include "core/timing.h"
#include "model/adapter.h"
#include "swap/swap_impl.h"

#define BLOB_ROUND 64

const char *residency_name(enum residency r)
{
    switch (r) {
    case RES_ON_DISK: return "on-disk";
    case RES_IN_HOST: return "in-host";
    case RES_LOADING: return "loading";
    case RES_ON_DEVICE: return "on-device";
    case RES_OFFLOADING: return "offloading";
    case RES_PARTIAL: return "partial";
    }
    return "?";
}

static uint64_t round_blob(uint64_t n)
{
    return (n + BLOB_ROUND - 1) / BLOB_ROUND * BLOB_ROUND;
}

int swap_manager_create(struct device **devices, int n_devices, const struct swap_config *cfg,
                        struct swap_manager **out)
{
    *out = NULL;
    if (n_devices < 1 || n_devices > EVICT_MAX_DEVICES)
        return err_set(ERR_INVALID, "a swap manager needs 1..%d devices (got %d)",
                       EVICT_MAX_DEVICES, n_devices);
    struct swap_manager *mgr = calloc(1, sizeof(*mgr));
    if (!mgr)
        return err_set(ERR_NOMEM, "out of memory");
    pthread_mutex_init(&mgr->lock, NULL);
    pthread_cond_init(&mgr->changed, NULL);
    mgr->n_devices = n_devices;
    memcpy(mgr->devices, devices, (size_t)n_devices * sizeof(*devices));
    store_tier_init(&mgr->tier, &mgr->lock, cfg->host_budget);
    for (int d = 0; d < n_devices; d++) {
        int rc = loader_start(&mgr->loaders[d], mgr, d);
        if (rc < 0) {
            mgr->n_devices = d; /* only the started ones get stopped */
            swap_manager_destroy(mgr);
            return rc;
        }
    }
    *out = mgr;
    return 0;
}

static bool model_in_transition(const struct swap_model *model);

/* Device bytes blob b takes while on the device: what device_used counts
 * for it (0 for an empty blob, which is never allocated). */
static uint64_t blob_device_bytes(const struct swap_shard *sh, int b)
{
    return round_blob(sh->st.layout.blob_bytes[b]);
}

uint64_t swap_blob_device_bytes(const struct swap_shard *sh, int b)
{
    return blob_device_bytes(sh, b);
}

/* Device bytes of the shard's blobs [from, n_blobs) on its device now. */
static uint64_t shard_bytes_from(const struct swap_shard *sh, int from)
{
    uint64_t n = 0;
    for (int b = from; b < sh->st.layout.n_blobs; b++)
        n += sh->st.dev[b] ? blob_device_bytes(sh, b) : 0;
    return n;
}

/* Host bytes of the shard's blobs [from, n_blobs) on its device that the
 * host tier lacks: what leaving the device without a loss copies back. */
static uint64_t shard_device_only(const struct swap_shard *sh, int from)
{
    uint64_t n = 0;
    for (int b = from; !sh->remote && b < sh->st.layout.n_blobs; b++)
        n += sh->st.dev[b] && !sh->st.host[b] ? sh->st.layout.blob_bytes[b] : 0;
    return n;
}

/* Frees the shard's device copies of blobs [from, n_blobs) (their views
 * then point nowhere until the next load binds them), resets their events
 * and keeps the rest: kept becomes from (mgr->lock held). */
static void shard_release(struct swap_shard *sh, int from)
{
    store_blobs_release(&sh->st, from);
    sh->kept = from;
}

/* Frees what shard_init made: events, layout, the shard's model. Its copies
 * are gone already (model_detach_locked) or were never made. */
static void shard_free(struct swap_shard *sh)
{
    for (int b = 0; sh->st.dev && b < sh->st.layout.n_blobs; b++)
        assert(!sh->st.dev[b] && !sh->st.host[b]);
    store_shard_free(&sh->st);
}

/* Frees a model the manager no longer sees (detached, or never listed):
 * no lock, no other thread can reach it. Closes its checkpoint, which
 * unmaps its files. NULL-safe. */
static void model_free(struct swap_model *model)
{
    if (!model)
        return;
    for (int i = 0; model->shards && i < model->tp * model->pp; i++)
        shard_free(&model->shards[i]);
    free(model->shards);
    free(model->hot);
    st_close(model->ck);
    model_config_free(model->cfg);
    free(model->dir);
    free(model);
}

static bool model_has_remote(const struct swap_model *model)
{
    for (int i = 0; model->shards && i < model->tp * model->pp; i++)
        if (model->shards[i].remote)
            return true;
    return false;
}

/* Takes a model out of the manager (mgr->lock held; nothing of it in
 * transition): off its devices without a copy back, its host copies freed,
 * out of the model list (the ids after it move down one, keeping the
 * registration order the LRU ties go by) and so out of every victim choice
 * and host room made from then on. */
static void model_detach_locked(struct swap_manager *mgr, struct swap_model *model)
{
    assert(!model_in_transition(model));
    if (swap_model_resident(model) || swap_model_partial(model))
        mgr->stats.offloads++;
    for (int s = 0; s < model->tp * model->pp; s++) {
        struct swap_shard *sh = &model->shards[s];
        shard_release(sh, 0);
        store_host_drop(&sh->st);
        sh->state = RES_ON_DISK;
        sh->failed = false;
    }
    const int id = model->id, nd = mgr->n_devices, after = mgr->n_models - id - 1;
    assert(id >= 0 && id < mgr->n_models && mgr->models[id] == model);
    memmove(&mgr->models[id], &mgr->models[id + 1], (size_t)after * sizeof(*mgr->models));
    memmove(&mgr->bytes[(size_t)id * nd], &mgr->bytes[(size_t)(id + 1) * nd],
            (size_t)after * nd * sizeof(*mgr->bytes));
    mgr->n_models--;
    for (int i = id; i < mgr->n_models; i++)
        mgr->models[i]->id = i;
    model->id = -1;
    pthread_cond_broadcast(&mgr->changed); /* its device memory is free */
}

void swap_manager_destroy(struct swap_manager *mgr)
{
    if (!mgr)
        return;
    pthread_mutex_lock(&mgr->lock);
    for (int i = 0; i < mgr->n_models; i++)
        while (mgr->models[i]->shards_busy > 0)
            pthread_cond_wait(&mgr->changed, &mgr->lock);
    pthread_mutex_unlock(&mgr->lock);
    for (int d = 0; d < mgr->n_devices; d++)
        loader_stop(&mgr->loaders[d]);
    /* each model as swap_unregister gives it back (work a caller still has
     * in flight is that caller's bug: the memory goes all the same) */
    while (mgr->n_models > 0) {
        struct swap_model *model = mgr->models[mgr->n_models - 1];
        if (model_has_remote(model)) /* the owners first: their memory holds the placements */
            mgr->remote->forget(mgr->remote->ctx, model);
        pthread_mutex_lock(&mgr->lock);
        model_detach_locked(mgr, model);
        pthread_mutex_unlock(&mgr->lock);
        model_free(model);
    }
    free(mgr->models);
    free(mgr->lru);
    free(mgr->bytes);
    pthread_mutex_destroy(&mgr->lock);
    pthread_cond_destroy(&mgr->changed);
    free(mgr);
}

/* What a model in transition is doing, for refusals (mgr->lock held). */
static const char *transition_name(const struct swap_model *model)
{
    for (int s = 0; s < model->tp * model->pp; s++)
        if (model->shards[s].xjob_state != XJOB_IDLE)
            return "an expert a step needed is still being copied in";
    for (int s = 0; s < model->tp * model->pp; s++) {
        if (model->shards[s].state == RES_LOADING)
            return "it is still loading";
        if (model->shards[s].state == RES_OFFLOADING)
            return "it is still offloading (copying back to host memory)";
    }
    return "it is being staged into host memory";
}

int swap_unregister(struct swap_manager *mgr, struct swap_model *model)
{
    pthread_mutex_lock(&mgr->lock);
    if (!swap_model_idle(model)) {
        int rc = err_set(ERR_BUSY, "model %s cannot be unregistered now: %s", model->name,
                         model->in_flight ? "it has work in flight" : transition_name(model));
        pthread_mutex_unlock(&mgr->lock);
        return rc;
    }
    if (model->n_adapters > 0) {
        const char *one = "";
        for (int i = 0; i < mgr->n_models; i++)
            if (mgr->models[i]->base == model) {
                one = mgr->models[i]->name;
                break;
            }
        int rc = err_set(ERR_BUSY,
                         "model %s cannot be unregistered now: %d adapters are registered over "
                         "it (%s, ...): unregister them first",
                         model->name, model->n_adapters, one);
        pthread_mutex_unlock(&mgr->lock);
        return rc;
    }
    if (model->base)
        model->base->n_adapters--;
    if (model_has_remote(model)) {
        /* the owners let go first, so no placement of it is reused on a view
         * before its owner has freed it; meanwhile it is in transition, out
         * of every load, victim choice and unregister */
        model->shards_busy++;
        pthread_mutex_unlock(&mgr->lock);
        mgr->remote->forget(mgr->remote->ctx, model);
        pthread_mutex_lock(&mgr->lock);
        model->shards_busy--;
    }
    model_detach_locked(mgr, model);
    pthread_mutex_unlock(&mgr->lock);
    model_free(model); /* events, layouts, shard models, the mapping: outside the lock */
    return 0;
}

void swap_set_peers(struct swap_manager *mgr, const struct swap_peers *r)
{
    pthread_mutex_lock(&mgr->lock);
    assert(mgr->n_models == 0);
    mgr->remote = r;
    pthread_mutex_unlock(&mgr->lock);
}

const struct swap_peers *swap_peers_of(const struct swap_manager *mgr)
{
    return mgr->remote;
}

/* ---- what a model is made of: fixed from register to unregister, no lock ---- */

const char *swap_model_name(const struct swap_model *model)
{
    return model->name;
}

const char *swap_model_path(const struct swap_model *model)
{
    return model->dir;
}

const struct model_info *swap_model_info(const struct swap_model *model)
{
    return model->info;
}

const struct st_checkpoint *swap_model_checkpoint(const struct swap_model *model)
{
    return model->ck;
}

int swap_model_tp(const struct swap_model *model)
{
    return model->tp;
}

bool swap_model_expert_residency(const struct swap_model *model)
{
    return model->expert_residency;
}

bool swap_model_expert_parallel(const struct swap_model *model)
{
    return model->expert_parallel;
}

int swap_model_pp(const struct swap_model *model)
{
    return model->pp;
}

bool swap_model_pinned(const struct swap_model *model)
{
    return model->pinned;
}

int swap_model_shard_count(const struct swap_model *model)
{
    return model->tp * model->pp;
}

const struct swap_shard *swap_model_shard(const struct swap_model *model, int i)
{
    assert(i >= 0 && i < model->tp * model->pp);
    return &model->shards[i];
}

int swap_shard_device(const struct swap_shard *sh)
{
    return sh->device;
}

int swap_shard_stage(const struct swap_shard *sh)
{
    return sh->stage;
}

int swap_shard_rank(const struct swap_shard *sh)
{
    return sh->rank;
}

const struct model *swap_shard_model(const struct swap_shard *sh)
{
    return sh->st.m;
}

uint64_t swap_shard_device_bytes(const struct swap_shard *sh)
{
    return sh->device_bytes;
}

int swap_shard_n_blobs(const struct swap_shard *sh)
{
    return sh->st.layout.n_blobs;
}

int swap_shard_n_dense_blobs(const struct swap_shard *sh)
{
    return sh->st.layout.n_dense;
}

uint64_t swap_shard_blob_bytes(const struct swap_shard *sh, int b)
{
    assert(b >= 0 && b < sh->st.layout.n_blobs);
    return sh->st.layout.blob_bytes[b];
}

struct device_event *swap_shard_blob_ready(const struct swap_shard *sh, int b)
{
    assert(b >= 0 && b < sh->st.layout.n_blobs);
    return sh->st.ready[b];
}

const char *swap_shard_load_error(const struct swap_shard *sh)
{
    return sh->st.load_error;
}

const struct store_shard *swap_shard_store(const struct swap_shard *sh)
{
    return &sh->st;
}

int swap_model_load_error(struct swap_manager *mgr, const struct swap_model *model, char *msg,
                          size_t cap)
{
    pthread_mutex_lock(&mgr->lock);
    int rc = model->load_status;
    const char *why = "";
    for (int s = 0; rc < 0 && s < model->tp * model->pp && !why[0]; s++)
        why = model->shards[s].st.load_error;
    snprintf(msg, cap, "%s", rc < 0 && why[0] ? why : rc < 0 ? err_name(rc) : "");
    pthread_mutex_unlock(&mgr->lock);
    return rc;
}

/* ---- timings, under the lock (the loaders write them) ---- */

static double elapsed(double t0, double t1)
{
    return t1 > t0 ? t1 - t0 : 0; /* 0: none yet, or one under way */
}

double swap_model_load_seconds(struct swap_manager *mgr, const struct swap_model *model)
{
    pthread_mutex_lock(&mgr->lock);
    double s = elapsed(model->load_t0, model->load_t1);
    pthread_mutex_unlock(&mgr->lock);
    return s;
}

double swap_shard_load_seconds(struct swap_manager *mgr, const struct swap_shard *sh)
{
    pthread_mutex_lock(&mgr->lock);
    double s = elapsed(sh->load_t0, sh->load_t1);
    pthread_mutex_unlock(&mgr->lock);
    return s;
}

uint64_t swap_model_device_bytes(const struct swap_model *model, int d)
{
    uint64_t n = 0;
    for (int i = 0; i < model->tp * model->pp; i++)
        if (model->shards[i].device == d)
            n += model->shards[i].device_bytes;
    return n;
}

uint64_t swap_model_total_bytes(const struct swap_model *model)
{
    uint64_t n = 0;
    for (int i = 0; i < model->tp * model->pp; i++)
        n += model->shards[i].host_bytes;
    return n;
}

uint64_t swap_model_resident_bytes(struct swap_manager *mgr, const struct swap_model *model, int d)
{
    pthread_mutex_lock(&mgr->lock);
    bool resident = swap_model_resident(model);
    uint64_t n = 0;
    for (int i = 0; i < model->tp * model->pp; i++) {
        const struct swap_shard *sh = &model->shards[i];
        if (sh->device == d) /* (a resident model's expert holes are not held) */
            n += resident ? shard_bytes_from(sh, 0)
                          : shard_bytes_from(sh, 0) - shard_bytes_from(sh, sh->kept);
    }
    pthread_mutex_unlock(&mgr->lock);
    return n;
}

uint64_t swap_model_missing_bytes(struct swap_manager *mgr, const struct swap_model *model)
{
    pthread_mutex_lock(&mgr->lock);
    uint64_t n = 0;
    for (int i = 0; i < model->tp * model->pp; i++) {
        const struct swap_shard *sh = &model->shards[i];
        for (int b = sh->kept; !sh->remote && b < sh->st.layout.n_blobs; b++)
            n += sh->st.layout.blob_bytes[b];
        n += swap_experts_missing(sh);
    }
    pthread_mutex_unlock(&mgr->lock);
    return n;
}

enum kern_compute swap_model_compute(const struct swap_model *model)
{
    return model_compute(model->shards[0].st.m);
}

void swap_model_set_compute(struct swap_model *model, enum kern_compute c)
{
    for (int i = 0; i < model->tp * model->pp; i++) {
        struct swap_shard *sh = &model->shards[i];
        for (int b = 0; b < sh->st.layout.n_blobs; b++)
            assert(!sh->st.host[b]); /* the blobs' dtype is fixed once filled */
        model_layout_set_compute(sh->st.m, &sh->st.layout, c);
    }
}

/* Layers of stage s when n layers are split into pp contiguous stages. */
static void stage_range(int n, int pp, int s, int *begin, int *end)
{
    *begin = (int)((long)n * s / pp);
    *end = (int)((long)n * (s + 1) / pp);
}

int swap_layout_bytes(const char *dir, int tp, int pp, const struct model_exec_shape *batch,
                      uint64_t *device_bytes, uint64_t *host_bytes)
{
    return swap_layout_bytes_ep(dir, tp, pp, false, false, batch, device_bytes, host_bytes);
}

int swap_layout_bytes_ep(const char *dir, int tp, int pp, bool expert_parallel, bool expert_blobs,
                         const struct model_exec_shape *batch, uint64_t *device_bytes,
                         uint64_t *host_bytes)
{
    struct model_config *cfg = NULL;
    struct st_checkpoint *ck = NULL;
    int rc;
    *host_bytes = 0;
    if ((rc = model_config_load(dir, &cfg)) < 0)
        return rc;
    if ((rc = st_open(dir, &ck)) < 0) {
        model_config_free(cfg);
        return rc;
    }
    const int n_layers = cfg->info.n_layers;
    if (tp < 1 || pp < 1 || pp > n_layers)
        rc = err_set(ERR_INVALID, "%s: a %dx%d layout does not fit its %d layers", dir, tp, pp,
                     n_layers);
    for (int i = 0; rc == 0 && i < tp * pp; i++) {
        struct model_shard s = {.tp_rank = i % tp,
                                .tp_size = tp,
                                .expert_parallel = expert_parallel,
                                .expert_blobs = expert_blobs};
        stage_range(n_layers, pp, i / tp, &s.layer_begin, &s.layer_end);
        struct model *m = NULL;
        struct model_layout lay;
        if ((rc = model_shard_open(cfg, ck, &s, &m, &lay)) < 0)
            break;
        device_bytes[i] = 0;
        if (batch) {
            size_t eb = model_exec_bytes(m, NULL, batch);
            if (eb == 0)
                rc = err_set(ERR_INVALID, "%s: a batch of %d x %d positions fits no device", dir,
                             batch->batch, batch->max_len);
            device_bytes[i] = round_blob(eb);
        }
        for (int b = 0; b < lay.n_blobs; b++) {
            device_bytes[i] += round_blob(lay.blob_bytes[b]);
            *host_bytes += lay.blob_bytes[b];
        }
        model_layout_free(&lay);
        model_close(m);
    }
    st_close(ck);
    model_config_free(cfg);
    return rc;
}

static int shard_init(struct swap_manager *mgr, struct swap_model *model, struct swap_shard *sh,
                      int stage, int rank, int device)
{
    sh->model = model;
    sh->stage = stage;
    sh->rank = rank;
    sh->device = device;
    sh->remote = device_proc(mgr->devices[device]) > 0;
    sh->state = RES_ON_DISK;
    struct model_shard spec = {.tp_rank = rank,
                               .tp_size = model->tp,
                               .expert_parallel = model->expert_parallel,
                               .expert_blobs = model->expert_residency};
    stage_range(model->info->n_layers, model->pp, stage, &spec.layer_begin, &spec.layer_end);
    sh->layer_begin = spec.layer_begin;
    int rc = store_shard_init(&sh->st, &mgr->tier, mgr->devices[device], model, model->name,
                              model->cfg, model->ck, &spec);
    if (rc < 0)
        return rc;
    for (int b = 0; b < sh->st.layout.n_blobs; b++) {
        sh->device_bytes += round_blob(sh->st.layout.blob_bytes[b]);
        sh->host_bytes += sh->remote ? 0 : sh->st.layout.blob_bytes[b];
    }
    return 0;
}

/* Refuses a model that can never fit the budgets, else lists it with the
 * manager (its id, its bytes per device): from then on loads, victim
 * choices and the host tier see it. */
static int model_publish(struct swap_manager *mgr, struct swap_model *model)
{
    int rc;
    /* a model that can never fit is refused now, not at its first request */
    for (int d = 0; d < mgr->n_devices; d++) {
        uint64_t need = swap_model_device_bytes(model, d), have = device_budget(mgr->devices[d]);
        if (need > have) {
            rc = err_set(ERR_NOMEM, "model %s needs %llu bytes on device %s, whose budget is %llu",
                         model->name, (unsigned long long)need, device_name(mgr->devices[d]),
                         (unsigned long long)have);
            return rc;
        }
    }
    if (swap_model_total_bytes(model) > mgr->tier.budget) {
        rc = err_set(ERR_NOMEM, "model %s needs %llu bytes of host memory, the host budget is %llu",
                     model->name, (unsigned long long)swap_model_total_bytes(model),
                     (unsigned long long)mgr->tier.budget);
        return rc;
    }
    pthread_mutex_lock(&mgr->lock);
    if (mgr->n_models == mgr->cap) {
        int cap = mgr->cap ? 2 * mgr->cap : 8;
        struct swap_model **m = realloc(mgr->models, (size_t)cap * sizeof(*m));
        if (m)
            mgr->models = m;
        struct evict_model *lru = m ? realloc(mgr->lru, (size_t)cap * sizeof(*lru)) : NULL;
        if (lru)
            mgr->lru = lru;
        uint64_t *bytes =
            lru ? realloc(mgr->bytes, (size_t)cap * mgr->n_devices * sizeof(*bytes)) : NULL;
        if (!bytes) {
            pthread_mutex_unlock(&mgr->lock);
            rc = err_set(ERR_NOMEM, "out of memory");
            return rc;
        }
        mgr->bytes = bytes;
        mgr->cap = cap;
    }
    model->id = mgr->n_models;
    for (int d = 0; d < mgr->n_devices; d++)
        mgr->bytes[(size_t)model->id * mgr->n_devices + d] = swap_model_device_bytes(model, d);
    mgr->models[mgr->n_models++] = model;
    if (model->base)
        model->base->n_adapters++;
    pthread_mutex_unlock(&mgr->lock);
    return 0;
}

/* Expert-level residency's checks and hotness table: routed experts on
 * its shards, none on another process's device. */
static int experts_init(struct swap_model *model)
{
    int experts = 0;
    for (int i = 0; i < model->tp * model->pp; i++) {
        const struct swap_shard *sh = &model->shards[i];
        if (sh->remote)
            return err_set(ERR_UNSUPPORTED,
                           "model %s: expert residency is not served for a model spanning "
                           "processes (a shard is on another process's device)",
                           model->name);
        if (sh->st.layout.n_experts > experts)
            experts = sh->st.layout.n_experts;
    }
    if (experts == 0)
        return err_set(ERR_INVALID, "model %s: expert residency needs routed experts; it has none",
                       model->name);
    model->hot_experts = experts;
    model->hot = calloc((size_t)model->info->n_layers * experts, sizeof(float));
    return model->hot ? 0 : err_set(ERR_NOMEM, "out of memory");
}

int swap_register(struct swap_manager *mgr, const char *name, const char *dir,
                  const struct placement *pl, bool pinned, struct swap_model **out)
{
    *out = NULL;
    if (pl->tp < 1 || pl->pp < 1)
        return err_set(ERR_INVALID, "model %s: tp and pp must be >= 1 (got %d, %d)", name, pl->tp,
                       pl->pp);
    for (int i = 0; i < pl->tp * pl->pp; i++) {
        if (pl->devices[i] < 0 || pl->devices[i] >= mgr->n_devices)
            return err_set(ERR_INVALID, "model %s: device index %d is out of range (0..%d)",
                           name, pl->devices[i], mgr->n_devices - 1);
        /* each device runs one shard of a model at a time: two shards of one
         * model on one device would wait on each other's collectives */
        for (int j = 0; j < i; j++)
            if (pl->devices[j] == pl->devices[i])
                return err_set(ERR_INVALID, "model %s: device %d holds two of its shards "
                                            "(each shard of a model needs its own device)",
                               name, pl->devices[i]);
        if (device_proc(mgr->devices[pl->devices[i]]) > 0 && !mgr->remote)
            return err_set(ERR_INVALID,
                           "model %s: device %s is process %d's, and this manager reaches no "
                           "other process (swap_set_peers)",
                           name, device_name(mgr->devices[pl->devices[i]]),
                           device_proc(mgr->devices[pl->devices[i]]));
    }
    struct swap_model *model = calloc(1, sizeof(*model));
    if (!model)
        return err_set(ERR_NOMEM, "out of memory");
    snprintf(model->name, sizeof(model->name), "%s", name);
    model->tp = pl->tp;
    model->pp = pl->pp;
    model->expert_parallel = pl->expert_parallel;
    model->expert_residency = pl->expert_residency;
    model->pinned = pinned;
    int rc;
    if (!(model->dir = strdup(dir))) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((rc = model_config_load(dir, &model->cfg)) < 0 || (rc = st_open(dir, &model->ck)) < 0)
        goto fail;
    model->info = &model->cfg->info;
    if (pl->pp > model->info->n_layers) {
        rc = err_set(ERR_INVALID, "model %s: pp %d exceeds its %d layers", name, pl->pp,
                     model->info->n_layers);
        goto fail;
    }
    /* every device of the placement runs every kernel the model calls */
    for (int i = 0; i < pl->tp * pl->pp; i++)
        if ((rc = model_check_device(model->cfg, mgr->devices[pl->devices[i]])) < 0) {
            err_wrap(rc, "model %s", name);
            goto fail;
        }
    model->shards = calloc((size_t)(pl->tp * pl->pp), sizeof(*model->shards));
    if (!model->shards) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int s = 0; s < pl->pp; s++)
        for (int r = 0; r < pl->tp; r++)
            if ((rc = shard_init(mgr, model, &model->shards[s * pl->tp + r], s, r,
                                 pl->devices[s * pl->tp + r])) < 0)
                goto fail;
    if (model->expert_residency && (rc = experts_init(model)) < 0)
        goto fail;
    if ((rc = model_publish(mgr, model)) < 0)
        goto fail;
    *out = model;
    return 0;
fail:
    err_wrap(rc, "%s", dir);
    model_free(model);
    return rc;
}

int swap_register_adapter(struct swap_manager *mgr, const char *name, const char *dir,
                          struct swap_model *base, struct swap_model **out)
{
    *out = NULL;
    if (base->base)
        return err_set(ERR_INVALID, "adapter %s: its base %s is an adapter itself", name,
                       base->name);
    if (model_has_remote(base))
        return err_set(ERR_UNSUPPORTED,
                       "adapter %s: adapters of a model spanning processes are not served yet "
                       "(%s has shards on other processes)",
                       name, base->name);
    struct swap_model *model = calloc(1, sizeof(*model));
    if (!model)
        return err_set(ERR_NOMEM, "out of memory");
    snprintf(model->name, sizeof(model->name), "%s", name);
    model->tp = base->tp;
    model->pp = base->pp;
    model->base = base;
    int rc;
    if (!(model->dir = strdup(dir))) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((rc = model_adapter_config_load(dir, base->cfg, base->dir, &model->cfg)) < 0 ||
        (rc = model_adapter_checkpoint_open(dir, &model->ck)) < 0 ||
        (rc = model_adapter_check_tensors(model->cfg, model->ck)) < 0)
        goto fail;
    model->info = &model->cfg->info;
    for (int i = 0; i < base->tp * base->pp; i++)
        if ((rc = model_check_device(model->cfg, mgr->devices[base->shards[i].device])) < 0)
            goto fail;
    model->shards = calloc((size_t)(base->tp * base->pp), sizeof(*model->shards));
    if (!model->shards) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto fail;
    }
    /* each shard planned with its base shard's spec: the same device, TP
     * rank and layers (A and B split as the base's projections are) */
    for (int i = 0; i < base->tp * base->pp; i++) {
        const struct swap_shard *bs = &base->shards[i];
        if ((rc = shard_init(mgr, model, &model->shards[i], bs->stage, bs->rank, bs->device)) < 0)
            goto fail;
    }
    if ((rc = model_publish(mgr, model)) < 0)
        goto fail;
    *out = model;
    return 0;
fail:
    err_wrap(rc, "adapter %s", name);
    model_free(model);
    return rc;
}

struct swap_model *swap_model_base(const struct swap_model *model)
{
    return model->base;
}

int swap_model_lora_rank(const struct swap_model *model)
{
    return model->base ? model_adapter_max_rank(model->cfg) : 0;
}

/* ---- residency, under mgr->lock ---- */

bool swap_model_resident(const struct swap_model *model)
{
    enum residency r = model->shards[0].state;
    return r == RES_LOADING || r == RES_ON_DEVICE;
}

static bool model_in_transition(const struct swap_model *model)
{
    return model->shards_busy > 0;
}

bool swap_model_in_transition(const struct swap_model *model)
{
    return model_in_transition(model);
}

bool swap_model_partial(const struct swap_model *model)
{
    for (int s = 0; s < model->tp * model->pp; s++) {
        const struct swap_shard *sh = &model->shards[s];
        if (sh->state == RES_PARTIAL || (sh->state == RES_OFFLOADING && sh->kept > 0))
            return true;
    }
    return false;
}

uint64_t swap_model_held_locked(const struct swap_model *model, int d)
{
    uint64_t n = 0;
    for (int s = 0; s < model->tp * model->pp; s++)
        if (model->shards[s].device == d)
            n += shard_bytes_from(&model->shards[s], 0);
    return n;
}

/* Device bytes on d a load of the model still needs: its blobs there that
 * are not there (all of them unless it is partly resident). */
static uint64_t model_missing_on(const struct swap_manager *mgr, const struct swap_model *model,
                                 int d)
{
    return mgr->bytes[(size_t)model->id * mgr->n_devices + d] - swap_model_held_locked(model, d);
}

bool swap_model_idle(const struct swap_model *model)
{
    return model->in_flight == 0 && !model_in_transition(model);
}

/* The host tier may drop the copies of idle models but keep (tier_room's
 * arg), and a shard whose copies went is on disk (mgr->lock held). */
bool swap_tier_droppable(void *arg, const struct store_shard *st)
{
    const struct tier_room *r = arg;
    const struct swap_model *m = st->owner;
    return m != r->keep && !model_in_transition(m);
}

void swap_tier_dropped(void *arg, struct store_shard *st)
{
    (void)arg;
    struct swap_shard *sh = queue_data(st, struct swap_shard, st);
    if (sh->state == RES_IN_HOST)
        sh->state = RES_ON_DISK;
}

/* Drops host copies of other idle models, least recently used first, until
 * need more bytes fit the host budget. The host tier is the manager's cache:
 * a dropped copy costs a read from disk, never a model's place on a device. */
static int host_make_room(struct swap_manager *mgr, const struct swap_model *keep, uint64_t need)
{
    struct tier_room r = {.mgr = mgr, .keep = keep};
    struct store_drop how = {
        .droppable = swap_tier_droppable, .dropped = swap_tier_dropped, .arg = &r};
    return store_tier_make_room(&mgr->tier, need, &how);
}

/* A use of the model now: its place in the LRU orders of the victim
 * choice and of the host tier (mgr->lock held). */
static void model_touch(struct swap_manager *mgr, struct swap_model *model)
{
    model->last_used = ++mgr->clock;
    for (int s = 0; s < model->tp * model->pp; s++)
        model->shards[s].st.stamp = model->last_used;
}

/* Host bytes the model lacks among each shard's blobs [kept, n_blobs) (all
 * of them with from_kept false): what a load (a prefetch) stages. Its
 * remote shards have no host copy here. */
static uint64_t host_missing(const struct swap_model *model, bool from_kept)
{
    uint64_t n = 0;
    for (int s = 0; s < model->tp * model->pp; s++) {
        const struct swap_shard *sh = &model->shards[s];
        n += sh->remote ? 0 : store_host_missing(&sh->st, from_kept ? sh->kept : 0);
        /* a load's holes among the kept expert blobs (placed, not there:
         * their events are reset) */
        for (int b = sh->st.layout.n_dense; from_kept && b < sh->kept; b++)
            if (!sh->st.host[b] && !device_event_done(sh->st.ready[b]))
                n += sh->st.layout.blob_bytes[b];
    }
    return n;
}

/* A base leaves (an offload, a trim): its adapters on its devices leave
 * first, at once when idle, else as soon as their load or use ends: an
 * adapter is never resident without its base (mgr->lock held). */
static void adapters_leave_locked(struct swap_manager *mgr, struct swap_model *base)
{
    for (int i = 0; base->n_adapters > 0 && i < mgr->n_models; i++) {
        struct swap_model *a = mgr->models[i];
        if (a->base != base || (!swap_model_resident(a) && !swap_model_partial(a)))
            continue;
        if (swap_model_idle(a))
            swap_offload_locked(mgr, a);
        else
            a->offload_pending = true;
    }
}

/* Offloads an idle resident or partly resident model: every blob on its
 * devices leaves (kept drops to 0). Shards whose blobs there the host holds
 * just release their device memory; the others copy back on their loader
 * thread when the host budget has room, else drop to disk. A remote shard's
 * owner is told on its loader thread, and its view's memory is freed when
 * the owner has let go (so it cannot be placed again before). */
void swap_offload_locked(struct swap_manager *mgr, struct swap_model *model)
{
    adapters_leave_locked(mgr, model);
    uint64_t missing = 0;
    for (int s = 0; s < model->tp * model->pp; s++)
        missing += shard_device_only(&model->shards[s], 0);
    bool copy_back = missing > 0 && host_make_room(mgr, model, missing) == 0;
    mgr->stats.offloads++;
    for (int s = 0; s < model->tp * model->pp; s++) {
        struct swap_shard *sh = &model->shards[s];
        sh->kept = 0;
        if (sh->remote) {
            sh->state = RES_OFFLOADING;
            model->shards_busy++;
            loader_submit(&mgr->loaders[sh->device], sh, LOADER_OFFLOAD);
            continue;
        }
        uint64_t copy = shard_device_only(sh, 0);
        if (copy == 0 || !copy_back || sh->failed) {
            shard_release(sh, 0);
            sh->state = store_host_complete(&sh->st) ? RES_IN_HOST : RES_ON_DISK;
            sh->failed = false;
            continue;
        }
        store_tier_reserve(&mgr->tier, copy); /* the loader fills it */
        sh->state = RES_OFFLOADING;
        model->shards_busy++;
        loader_submit(&mgr->loaders[sh->device], sh, LOADER_OFFLOAD);
    }
    model->offload_pending = false;
    pthread_cond_broadcast(&mgr->changed);
}

/* Whether a load of sh brings blob b: one of [kept, n_blobs), or a hole
 * among the kept expert blobs (absent, its event reset; once placed for
 * the load, still reset until it lands). */
static bool blob_arriving(const struct swap_shard *sh, int b)
{
    return b >= sh->kept || (b >= sh->st.layout.n_dense && !device_event_done(sh->st.ready[b]));
}

/* Frees the device blobs a load allocated: each shard's arriving ones,
 * never the blobs a partly resident model kept. */
static void device_free_arriving(struct swap_model *model)
{
    for (int s = 0; s < model->tp * model->pp; s++) {
        struct swap_shard *sh = &model->shards[s];
        for (int b = 0; b < sh->st.layout.n_blobs; b++) {
            if (!blob_arriving(sh, b))
                continue;
            device_free(sh->st.dev[b]);
            sh->st.dev[b] = NULL;
        }
    }
}

/* Allocates every device blob the model lacks (each shard's [kept,
 * n_blobs)); on failure frees what it took and says where: the device and
 * the blob's bytes. */
static int device_alloc_all(struct swap_manager *mgr, struct swap_model *model, int *failed_dev,
                            uint64_t *failed_blob)
{
    for (int s = 0; s < model->tp * model->pp; s++) {
        struct swap_shard *sh = &model->shards[s];
        for (int b = 0; b < sh->st.layout.n_blobs; b++) {
            if (!sh->st.layout.blob_bytes[b] || !blob_arriving(sh, b))
                continue;
            assert(!sh->st.dev[b]);
            int rc =
                device_alloc(mgr->devices[sh->device], sh->st.layout.blob_bytes[b], &sh->st.dev[b]);
            if (rc < 0) {
                *failed_dev = sh->device;
                *failed_blob = sh->st.layout.blob_bytes[b];
                device_free_arriving(model);
                return rc;
            }
        }
    }
    return 0;
}

/* Device bytes on d that offloads under way free without anyone's help:
 * copies back to the host (of an offload, or of a trim: its leaving blobs
 * only), offloads waiting for a load's end (not those waiting for a batch:
 * that end is the caller's). */
static uint64_t leaving_bytes(const struct swap_manager *mgr, int d)
{
    uint64_t n = 0;
    for (int i = 0; i < mgr->n_models; i++) {
        const struct swap_model *m = mgr->models[i];
        bool deferred = m->offload_pending && swap_model_resident(m) && m->in_flight == 0;
        for (int s = 0; s < m->tp * m->pp; s++) {
            const struct swap_shard *sh = &m->shards[s];
            if (sh->device == d && (deferred || sh->state == RES_OFFLOADING))
                n += shard_bytes_from(sh, deferred ? 0 : sh->kept);
        }
    }
    return n;
}

/* Fills why for device d and sets the message; returns ERR_BUSY. */
static int refuse(struct swap_manager *mgr, const struct swap_model *model, enum swap_room_kind kind,
                  int d, uint64_t blob, struct swap_room *why)
{
    struct device *dev = mgr->devices[d];
    *why = (struct swap_room){.kind = kind,
                              .device = d,
                              .need = model_missing_on(mgr, model, d),
                              .free = device_budget(dev) - device_used(dev),
                              .largest = device_largest_free(dev),
                              .blob = blob,
                              .leaving = leaving_bytes(mgr, d)};
    char need[32], free_s[32], largest[32], blob_s[32];
    bytes_format(need, sizeof(need), why->need, BYTES_BINARY);
    bytes_format(free_s, sizeof(free_s), why->free, BYTES_BINARY);
    bytes_format(largest, sizeof(largest), why->largest, BYTES_BINARY);
    if (kind == SWAP_ROOM_BYTES)
        return err_set(ERR_BUSY, "model %s does not fit device %s now: it needs %s there, %s "
                                 "are free (largest free block %s); offload a model from %s first",
                       model->name, device_name(dev), need, free_s, largest, device_name(dev));
    return err_set(ERR_BUSY, "model %s does not fit device %s now: it needs %s there and %s are "
                             "free, but no free block holds its %s blob (largest %s): the free "
                             "memory is fragmented; offload a model from %s (swap_compact)",
                   model->name, device_name(dev), need, free_s,
                   bytes_format(blob_s, sizeof(blob_s), blob, BYTES_BINARY), largest,
                   device_name(dev));
}

/* Allocates the model's missing blobs if they fit now: first by the
 * devices' free bytes, then by the blocks they find. */
static int device_take_room(struct swap_manager *mgr, struct swap_model *model,
                            struct swap_room *why)
{
    for (int d = 0; d < mgr->n_devices; d++) {
        struct device *dev = mgr->devices[d];
        if (model_missing_on(mgr, model, d) > device_budget(dev) - device_used(dev))
            return refuse(mgr, model, SWAP_ROOM_BYTES, d, 0, why);
    }
    int failed = 0;
    uint64_t blob = 0;
    if (device_alloc_all(mgr, model, &failed, &blob) < 0)
        return refuse(mgr, model, SWAP_ROOM_FRAGMENTED, failed, blob, why);
    return 0;
}

int swap_load_locked(struct swap_manager *mgr, struct swap_model *model, struct swap_room *why)
{
    struct swap_room ignored = {.device = -1};
    why = why ? why : &ignored;
    *why = (struct swap_room){.kind = SWAP_ROOM_OK, .device = -1};
    if (swap_model_resident(model)) {
        model_touch(mgr, model);
        return 0;
    }
    if (model->base && (!swap_model_resident(model->base) || model->base->offload_pending)) {
        why->kind = SWAP_ROOM_BASE;
        return err_set(ERR_BUSY,
                       "adapter %s cannot be loaded now: its base %s is not on its "
                       "devices (it is %s); load the base first",
                       model->name, model->base->name,
                       residency_name(model->base->shards[0].state));
    }
    if (model_in_transition(model)) {
        why->kind = SWAP_ROOM_MOVING;
        bool offloading = false;
        for (int s = 0; s < model->tp * model->pp; s++)
            offloading |= model->shards[s].state == RES_OFFLOADING;
        return err_set(ERR_BUSY, "model %s is still %s; load it once that ends", model->name,
                       offloading ? "offloading (copying back to host memory)"
                                  : "being staged into host memory");
    }
    int rc = device_take_room(mgr, model, why);
    if (rc < 0)
        return rc;
    uint64_t missing = host_missing(model, true);
    if ((rc = host_make_room(mgr, model, missing)) < 0) {
        device_free_arriving(model);
        why->kind = SWAP_ROOM_HOST;
        return rc;
    }
    model_touch(mgr, model);
    store_tier_reserve(&mgr->tier, missing); /* the loaders fill it */
    mgr->stats.loads++;
    model->load_status = 0;
    model->load_t0 = time_now();
    for (int s = 0; s < model->tp * model->pp; s++) {
        struct swap_shard *sh = &model->shards[s];
        /* the kept blobs stay bound and complete: a forward starts on them */
        for (int b = 0; b < sh->st.layout.n_blobs; b++)
            if (blob_arriving(sh, b))
                store_blob_arm(&sh->st, b);
        sh->state = RES_LOADING;
        sh->st.load_error[0] = '\0'; /* no loader holds it yet: this load's own */
        sh->load_t0 = model->load_t0;
        model->shards_busy++;
    }
    for (int s = 0; s < model->tp * model->pp; s++)
        loader_submit(&mgr->loaders[model->shards[s].device], &model->shards[s], LOADER_LOAD);
    pthread_cond_broadcast(&mgr->changed);
    return 0;
}

int swap_load(struct swap_manager *mgr, struct swap_model *model, struct swap_room *why)
{
    pthread_mutex_lock(&mgr->lock);
    int rc = swap_load_locked(mgr, model, why);
    pthread_mutex_unlock(&mgr->lock);
    return rc;
}

static int offload_refusal(const struct swap_model *model)
{
    return err_set(ERR_BUSY, "model %s cannot be offloaded now: %s", model->name,
                   model->in_flight ? "it has work in flight" : transition_name(model));
}

int swap_compact_locked(struct swap_manager *mgr, int device, struct swap_model *victim)
{
    if (device < 0 || device >= mgr->n_devices ||
        mgr->bytes[(size_t)victim->id * mgr->n_devices + device] == 0)
        return err_set(ERR_INVALID, "model %s has no shard on device %d to make room there",
                       victim->name, device);
    if (!swap_model_resident(victim) && !swap_model_partial(victim))
        return err_set(ERR_INVALID, "model %s is not on its devices (it is %s)", victim->name,
                       residency_name(victim->shards[0].state));
    if (!swap_model_idle(victim))
        return offload_refusal(victim);
    mgr->stats.compactions++;
    swap_offload_locked(mgr, victim);
    return 0;
}

int swap_compact(struct swap_manager *mgr, int device, struct swap_model *victim)
{
    pthread_mutex_lock(&mgr->lock);
    int rc = swap_compact_locked(mgr, device, victim);
    pthread_mutex_unlock(&mgr->lock);
    return rc;
}

int swap_prefetch_host(struct swap_manager *mgr, struct swap_model *model)
{
    pthread_mutex_lock(&mgr->lock);
    while (model_in_transition(model))
        pthread_cond_wait(&mgr->changed, &mgr->lock);
    uint64_t missing = host_missing(model, false);
    int rc = missing ? host_make_room(mgr, model, missing) : 0;
    if (rc == 0 && missing) {
        store_tier_reserve(&mgr->tier, missing);
        for (int s = 0; s < model->tp * model->pp; s++) {
            model->shards_busy++;
            loader_submit(&mgr->loaders[model->shards[s].device], &model->shards[s],
                          LOADER_PREFETCH);
        }
    }
    while (rc == 0 && model_in_transition(model))
        pthread_cond_wait(&mgr->changed, &mgr->lock);
    pthread_mutex_unlock(&mgr->lock);
    return rc;
}

int swap_wait_loaded(struct swap_manager *mgr, struct swap_model *model)
{
    pthread_mutex_lock(&mgr->lock);
    while (model->shards[0].state == RES_LOADING || (model_in_transition(model) &&
                                                     swap_model_resident(model)))
        pthread_cond_wait(&mgr->changed, &mgr->lock);
    int rc = model->load_status;
    pthread_mutex_unlock(&mgr->lock);
    return rc;
}

void swap_wait_idle(struct swap_manager *mgr, struct swap_model *model)
{
    pthread_mutex_lock(&mgr->lock);
    while (model_in_transition(model))
        pthread_cond_wait(&mgr->changed, &mgr->lock);
    pthread_mutex_unlock(&mgr->lock);
}

int swap_offload(struct swap_manager *mgr, struct swap_model *model, bool defer)
{
    int rc = 0;
    pthread_mutex_lock(&mgr->lock);
    if (!swap_model_resident(model) && !swap_model_partial(model)) {
        rc = 0; /* nothing on the devices, or all of it leaving */
    } else if (model->in_flight > 0 || model_in_transition(model)) {
        if (defer)
            model->offload_pending = true;
        else
            rc = offload_refusal(model);
    } else {
        swap_offload_locked(mgr, model);
    }
    pthread_mutex_unlock(&mgr->lock);
    return rc;
}

/* The model's shard on device d, or NULL (a model has at most one there). */
static struct swap_shard *shard_on(struct swap_model *model, int d)
{
    for (int s = 0; s < model->tp * model->pp; s++)
        if (model->shards[s].device == d)
            return &model->shards[s];
    return NULL;
}

/* Why a trim cannot happen now (its error), or 0 (mgr->lock held). */
static int trim_refusal(const struct swap_manager *mgr, struct swap_model *model, int device)
{
    struct swap_shard *sh = device >= 0 && device < mgr->n_devices ? shard_on(model, device) : NULL;
    if (!sh)
        return err_set(ERR_INVALID, "model %s has no shard on device %d to trim", model->name,
                       device);
    if (sh->remote)
        return err_set(ERR_UNSUPPORTED,
                       "model %s: its shard on device %s is another process's, which moves "
                       "whole shards only (offload it instead of trimming)",
                       model->name, device_name(mgr->devices[device]));
    if (!swap_model_idle(model))
        return err_set(ERR_BUSY, "model %s cannot be trimmed now: %s", model->name,
                       model->in_flight ? "it has work in flight" : transition_name(model));
    if (!swap_model_resident(model) && !swap_model_partial(model))
        return err_set(ERR_INVALID, "model %s is not on its devices (it is %s): nothing to trim",
                       model->name, residency_name(model->shards[0].state));
    return 0;
}

/* Takes blobs [keep, kept) of sh off its device (mgr->lock held; the model
 * is PARTIAL already): at once when the host holds them or has no room for
 * them (they drop to disk), else after its loader copied them back. */
static void shard_trim(struct swap_manager *mgr, struct swap_shard *sh, int keep)
{
    uint64_t copy = shard_device_only(sh, keep);
    bool copy_back = copy > 0 && host_make_room(mgr, sh->model, copy) == 0;
    sh->kept = keep; /* what stays; [keep, n_blobs) leaves */
    if (!copy_back) {
        shard_release(sh, keep);
        return;
    }
    store_tier_reserve(&mgr->tier, copy); /* the loader fills it */
    sh->state = RES_OFFLOADING;
    sh->model->shards_busy++;
    loader_submit(&mgr->loaders[sh->device], sh, LOADER_OFFLOAD);
}

int swap_trim(struct swap_manager *mgr, struct swap_model *model, int device, uint64_t bytes,
              uint64_t *released)
{
    *released = 0;
    pthread_mutex_lock(&mgr->lock);
    int rc = trim_refusal(mgr, model, device);
    if (rc < 0) {
        pthread_mutex_unlock(&mgr->lock);
        return rc;
    }
    /* with expert residency its coldest experts first (it stays resident:
     * they come back on demand), then the last layers, never blob 0
     * (embeddings and head) */
    struct swap_shard *sh = shard_on(model, device);
    uint64_t got = 0, all = 0;
    if (model->expert_residency) {
        got = swap_experts_trim_locked(mgr, model, device, bytes, &all);
        if (all > 0) {
            mgr->stats.trims++;
            mgr->stats.bytes_trimmed += all;
            pthread_cond_broadcast(&mgr->changed);
        }
    }
    uint64_t experts_got = got;
    int keep = sh->kept;
    while (keep > 1 && got < bytes) { /* (a hole frees nothing) */
        keep--;
        got += sh->st.dev[keep] ? blob_device_bytes(sh, keep) : 0;
    }
    if (got > experts_got) {
        adapters_leave_locked(mgr, model); /* a base that is not resident keeps none */
        /* not servable from here: every shard is PARTIAL, the untouched
         * ones keeping all of their blobs */
        for (int s = 0; s < model->tp * model->pp; s++)
            if (model->shards[s].state == RES_ON_DEVICE)
                model->shards[s].state = RES_PARTIAL;
        shard_trim(mgr, sh, keep);
        mgr->stats.trims += experts_got == 0;
        mgr->stats.bytes_trimmed += got - experts_got;
        pthread_cond_broadcast(&mgr->changed);
    }
    *released = got;
    pthread_mutex_unlock(&mgr->lock);
    return 0;
}

int swap_use_begin(struct swap_manager *mgr, struct swap_model *model)
{
    pthread_mutex_lock(&mgr->lock);
    int rc = 0;
    if (!swap_model_resident(model))
        rc = err_set(ERR_INVALID, "model %s is not loaded (it is %s)", model->name,
                     residency_name(model->shards[0].state));
    else {
        model->in_flight++;
        model_touch(mgr, model);
    }
    pthread_mutex_unlock(&mgr->lock);
    return rc;
}

void swap_use_end(struct swap_manager *mgr, struct swap_model *model)
{
    pthread_mutex_lock(&mgr->lock);
    if (--model->in_flight == 0 && model->offload_pending && !model_in_transition(model))
        swap_offload_locked(mgr, model);
    pthread_cond_broadcast(&mgr->changed);
    pthread_mutex_unlock(&mgr->lock);
}

enum residency swap_residency(struct swap_manager *mgr, const struct swap_model *model)
{
    pthread_mutex_lock(&mgr->lock);
    enum residency r = model->shards[0].state;
    for (int s = 1; s < model->tp * model->pp; s++)
        if (model->shards[s].state != r) {
            /* shards in different states: report the transition in progress */
            enum residency x = model->shards[s].state;
            if (x == RES_LOADING || x == RES_OFFLOADING)
                r = x;
        }
    pthread_mutex_unlock(&mgr->lock);
    return r;
}

struct device *swap_device(struct swap_manager *mgr, int index)
{
    return index >= 0 && index < mgr->n_devices ? mgr->devices[index] : NULL;
}

int swap_device_count(const struct swap_manager *mgr)
{
    return mgr->n_devices;
}

void swap_set_listener(struct swap_manager *mgr, void (*fn)(void *ctx), void *ctx)
{
    pthread_mutex_lock(&mgr->lock);
    /* once this returns, the old listener is not running and never will */
    while (mgr->listener_calls > 0)
        pthread_cond_wait(&mgr->changed, &mgr->lock);
    mgr->listener = fn;
    mgr->listener_ctx = ctx;
    pthread_mutex_unlock(&mgr->lock);
}

void swap_get_stats(struct swap_manager *mgr, struct swap_stats *st)
{
    pthread_mutex_lock(&mgr->lock);
    *st = mgr->stats;
    st->host_used = mgr->tier.used;
    st->host_high_water = mgr->tier.high_water;
    st->host_budget = mgr->tier.budget;
    pthread_mutex_unlock(&mgr->lock);
}

/* Called by a loader thread when a shard's job is done (takes the lock). */
void swap_shard_done(struct swap_manager *mgr, struct swap_shard *sh, enum loader_kind kind,
                     int status)
{
    struct swap_model *model = sh->model;
    pthread_mutex_lock(&mgr->lock);
    switch (kind) {
    case LOADER_LOAD:
        /* a failed shard keeps its device memory (a forward may be reading it,
         * garbage but mapped) until the model is offloaded below */
        sh->load_t1 = time_now();
        sh->state = RES_ON_DEVICE;
        sh->kept = sh->st.layout.n_blobs;
        if (status < 0) {
            model->load_status = status;
            sh->failed = true;
        }
        break;
    case LOADER_OFFLOAD: /* an offload (kept 0), or a trim keeping its first blobs */
        shard_release(sh, sh->kept);
        sh->state = sh->kept > 0                   ? RES_PARTIAL
                    : store_host_complete(&sh->st) ? RES_IN_HOST
                                                   : RES_ON_DISK;
        sh->failed = false; /* a remote shard's failed load leaves this way too */
        break;
    case LOADER_PREFETCH:
        if (sh->state == RES_ON_DISK && store_host_complete(&sh->st))
            sh->state = RES_IN_HOST;
        break;
    case LOADER_EXPERTS:
        /* a failed expert (its memory garbage, a step may still read it)
         * leaves with the model once idle, as a failed load does */
        sh->xjob_state = XJOB_IDLE;
        if (status < 0) {
            model->load_status = status;
            model->offload_pending = true;
        }
        if (sh->xjob_again) { /* blobs armed while it ran, which it may have passed */
            sh->xjob_again = false;
            sh->xjob_state = XJOB_QUEUED;
            model->shards_busy++;
            loader_submit(&mgr->loaders[sh->device], sh, LOADER_EXPERTS);
        }
        break;
    }
    if (--model->shards_busy == 0) {
        if (kind == LOADER_LOAD) {
            model->load_t1 = time_now();
            if (model->load_status < 0)
                model->offload_pending = true; /* a failed load leaves the devices */
        }
        if (model->offload_pending && model->in_flight == 0 &&
            (swap_model_resident(model) || swap_model_partial(model)))
            swap_offload_locked(mgr, model);
    }
    void (*listener)(void *) = mgr->listener;
    void *listener_ctx = mgr->listener_ctx;
    mgr->listener_calls += listener != NULL;
    pthread_cond_broadcast(&mgr->changed);
    pthread_mutex_unlock(&mgr->lock);
    if (listener) {
        listener(listener_ctx);
        pthread_mutex_lock(&mgr->lock);
        mgr->listener_calls--;
        pthread_cond_broadcast(&mgr->changed);
        pthread_mutex_unlock(&mgr->lock);
    }
}

void swap_count_bytes(struct swap_manager *mgr, uint64_t disk, uint64_t h2d, uint64_t d2h)
{
    pthread_mutex_lock(&mgr->lock);
    mgr->stats.bytes_disk += disk;
    mgr->stats.bytes_h2d += h2d;
    mgr->stats.bytes_d2h += d2h;
    pthread_mutex_unlock(&mgr->lock);
}
