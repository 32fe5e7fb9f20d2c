/* The registry of models served (add, find, list, remove), the admin calls
 * (max batch, pin, load, unload: the scheduler thread carries out loads and
 * unloads, admin_run) and the statistics. */
#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/hist.h"
#include "engine/engine_impl.h"

/* Prometheus's bounds for the latency, TTFT and load histograms (hist.h
 * counts against them as observations arrive). */
_Static_assert(ENGINE_HIST_LE <= HIST_MAX_LE, "core/hist.h counts at most HIST_MAX_LE bounds");
const double engine_hist_le[ENGINE_HIST_LE] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                               1,     2.5,  5,     10,   30,  60,   120};

/* The served model id (lock held); NULL when unknown or being removed. */
struct engine_model *model_get(struct engine *e, int id)
{
    if (id < 0 || id >= e->n_ids || !e->models[id] || e->models[id]->removed)
        return NULL;
    return e->models[id];
}

/* Lets go of m, which the caller pinned (users++) to read it outside the
 * lock (lock held): the last one lets engine_remove_model go on. */
void model_unuse(struct engine_model *m)
{
    if (--m->users == 0)
        pthread_cond_broadcast(&m->e->admin);
}

static void stats_fill(struct engine *e, struct engine_model *m, struct engine_model_stats *out);

static struct engine_model *model_by_name(struct engine *e, const char *name)
{
    for (int i = 0; i < e->n_ids; i++)
        if (e->models[i] && !e->models[i]->removed &&
            strcmp(swap_model_name(e->models[i]->sm), name) == 0)
            return e->models[i];
    return NULL;
}

/* The model a request names (lock held). */
struct engine_model *model_named(struct engine *e, const struct engine_request_params *p)
{
    struct engine_model *m =
        p->model_name ? model_by_name(e, p->model_name) : model_get(e, p->model);
    if (!m) {
        if (p->model_name)
            err_set(ERR_NOT_FOUND, "no model named '%s' is served", p->model_name);
        else
            err_set(ERR_NOT_FOUND, "no model with id %d is served (removed, or never added)",
                    p->model);
    }
    return m;
}

/* The served model whose registration is sm, not an adapter (lock held). */
static struct engine_model *model_of(struct engine *e, const struct swap_model *sm)
{
    for (int i = 0; i < e->n_ids; i++)
        if (e->models[i] && !e->models[i]->removed && e->models[i]->sm == sm && !e->models[i]->base)
            return e->models[i];
    return NULL;
}

/* Serves model, an adapter over base when base is not NULL (no runner: its
 * requests run in the base's batches). */
static int model_add(struct engine *e, struct swap_model *model, struct engine_model *base);

int engine_add_model(struct engine *e, struct swap_model *model)
{
    if (swap_model_base(model))
        return err_set(ERR_INVALID, "%s is an adapter: engine_add_adapter serves it",
                       swap_model_name(model));
    pthread_mutex_lock(&e->lock);
    int rc = model_add(e, model, NULL);
    pthread_mutex_unlock(&e->lock);
    return rc;
}

int engine_add_adapter(struct engine *e, struct swap_model *adapter)
{
    const struct swap_model *bsm = swap_model_base(adapter);
    if (!bsm)
        return err_set(ERR_INVALID, "%s is not an adapter (swap_register_adapter)",
                       swap_model_name(adapter));
    pthread_mutex_lock(&e->lock);
    struct engine_model *base = model_of(e, bsm);
    int rc = base ? model_add(e, adapter, base)
                  : err_set(ERR_INVALID, "adapter %s: its base %s is not served by this engine",
                            swap_model_name(adapter), swap_model_name(bsm));
    pthread_mutex_unlock(&e->lock);
    return rc;
}

int engine_model_base(struct engine *e, int id)
{
    pthread_mutex_lock(&e->lock);
    struct engine_model *m = model_get(e, id);
    int rc = !m        ? err_set(ERR_NOT_FOUND, "no model with id %d is served", id)
             : m->base ? m->base->id
                       : -1;
    pthread_mutex_unlock(&e->lock);
    return rc;
}

struct swap_model *engine_model_swap(struct engine *e, int id)
{
    pthread_mutex_lock(&e->lock);
    struct engine_model *m = model_get(e, id);
    struct swap_model *sm = m ? m->sm : NULL;
    pthread_mutex_unlock(&e->lock);
    return sm;
}

static int model_add(struct engine *e, struct swap_model *model, struct engine_model *base)
{
    int rc = 0;
    struct engine_model *m = NULL;
    struct engine_model *same = model_by_name(e, swap_model_name(model));
    if (same) {
        rc = err_set(ERR_INVALID, "a model named %s is served already (id %d)",
                     swap_model_name(model), same->id);
        goto out;
    }
    if (e->n_live == SCHED_MAX_MODELS) {
        rc = err_set(ERR_INVALID, "an engine serves at most %d models", SCHED_MAX_MODELS);
        goto out;
    }
    if (e->n_ids == e->cap) {
        int cap = e->cap ? 2 * e->cap : 8;
        struct engine_model **ms = realloc(e->models, (size_t)cap * sizeof(*ms));
        if (!ms) {
            rc = err_set(ERR_NOMEM, "out of memory");
            goto out;
        }
        e->models = ms;
        e->cap = cap;
    }
    if (!(m = calloc(1, sizeof(*m)))) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto out;
    }
    m->e = e;
    m->id = e->n_ids;
    m->sm = model;
    m->pinned = swap_model_pinned(model);
    m->keep_alive = NAN;
    m->frag_device = -1;
    m->max_batch = e->cfg.max_batch;
    hist_init(&m->latency, engine_hist_le, ENGINE_HIST_LE);
    hist_init(&m->ttft, engine_hist_le, ENGINE_HIST_LE);
    hist_init(&m->load, engine_hist_le, ENGINE_HIST_LE);
    atomic_init(&m->removing, false);
    atomic_init(&m->lora_rank, 0);
    m->base = base;
    if (!base && (rc = runner_create(m)) < 0) {
        free(m);
        goto out;
    }
    if (base) {
        m->next_adapter = base->adapters;
        base->adapters = m;
        int rank = swap_model_lora_rank(model);
        if (rank > atomic_load(&base->lora_rank)) {
            /* the base's next batches are sized for it (a batch in flight
             * keeps its size: this adapter's requests wait for the next) */
            atomic_store(&base->lora_rank, rank);
            reserves_refit(e);
        }
    }
    e->models[e->n_ids++] = m;
    e->n_live++;
    rc = m->id;
    pthread_cond_signal(&e->wake);
out:
    return rc;
}

int engine_find_model(struct engine *e, const char *name)
{
    pthread_mutex_lock(&e->lock);
    struct engine_model *m = model_by_name(e, name);
    int rc = m ? m->id : err_set(ERR_NOT_FOUND, "no model named '%s' is served", name);
    pthread_mutex_unlock(&e->lock);
    return rc;
}

int engine_list_models(struct engine *e, int *ids, int max)
{
    pthread_mutex_lock(&e->lock);
    int n = 0;
    for (int id = 0; id < e->n_ids; id++)
        if (model_get(e, id)) {
            if (n < max)
                ids[n] = id;
            n++;
        }
    pthread_mutex_unlock(&e->lock);
    return n;
}

int engine_remove_model(struct engine *e, int id, struct engine_model_stats *last)
{
    pthread_mutex_lock(&e->lock);
    struct engine_model *m = model_get(e, id);
    if (!m) {
        pthread_mutex_unlock(&e->lock);
        return err_set(ERR_NOT_FOUND, "no model with id %d is served", id);
    }
    if (m->adapters) {
        int rc = err_set(ERR_BUSY,
                         "model %s cannot be removed while adapters are served over it "
                         "(%s, ...): remove them first",
                         swap_model_name(m->sm), swap_model_name(m->adapters->sm));
        pthread_mutex_unlock(&e->lock);
        return rc;
    }
    /* from here no submission, action or admin request reaches it */
    m->removed = true;
    atomic_store(&m->removing, true);
    char why[160];
    snprintf(why, sizeof(why), "model %s was removed", swap_model_name(m->sm));
    while (m->head)
        queue_fail(m, m->head, ERR_NOT_FOUND, why);
    if (m->admin != ADMIN_NONE) {
        m->admin = ADMIN_NONE;
        m->admin_rc = ERR_NOT_FOUND;
        snprintf(m->admin_msg, sizeof(m->admin_msg), "%s", why);
    }
    pthread_cond_broadcast(&e->admin);
    /* its batch in flight ends at the next step boundary; admin callers let
     * go; then a paused batch is dropped on the runner pool */
    /* an adapter's sequences leave its base's batch at the next boundary,
     * each letting go of it (seq_uses) */
    while (m->running || m->users > 0 || m->seq_uses > 0 || (m->base && m->n_running > 0) ||
           runner_drop_held(m))
        pthread_cond_wait(&e->admin, &e->lock);
    if (m->base) /* out of its base's batches' choice */
        for (struct engine_model **p = &m->base->adapters; *p; p = &(*p)->next_adapter)
            if (*p == m) {
                *p = m->next_adapter;
                break;
            }
    pthread_mutex_unlock(&e->lock);
    /* off its devices: after a load in progress, with no lock of ours held,
     * while the scheduler still counts its memory (a copy back it starts is
     * memory leaving, not free) */
    struct swap_model *sm = m->sm;
    swap_wait_idle(e->mgr, sm);
    /* resident or loading when the removal began (a load in progress has
     * ended by now): the removal is what takes it off its devices */
    enum residency was = swap_residency(e->mgr, sm);
    swap_offload(e->mgr, sm, false);
    swap_wait_idle(e->mgr, sm);
    /* no thread of ours reads sm from here: its runner has no task (nor a
     * batch), no submission or admin call holds it (users), and the
     * scheduler's snapshots and batch_alloc skip an empty slot */
    pthread_mutex_lock(&e->lock);
    if (last) {
        stats_fill(e, m, last);
        last->removal_unloads = was == RES_ON_DEVICE || was == RES_LOADING || was == RES_PARTIAL;
    }
    e->models[id] = NULL;
    e->n_live--;
    pthread_cond_signal(&e->wake); /* its memory is free */
    pthread_mutex_unlock(&e->lock);
    runner_free(m);
    free(m);
    /* its host copy and checkpoint mapping go too (idle: nothing refuses) */
    int rc = swap_unregister(e->mgr, sm);
    assert(rc == 0 && "a removed model is in use by a caller other than the engine");
    (void)rc;
    return 0;
}

int engine_set_max_batch(struct engine *e, int id, int max_batch)
{
    pthread_mutex_lock(&e->lock);
    struct engine_model *m = model_get(e, id);
    int rc = 0;
    if (!m) {
        rc = err_set(ERR_NOT_FOUND, "no model with id %d is served", id);
    } else if (max_batch < 1 || max_batch > e->cfg.max_batch) {
        rc = err_set(ERR_INVALID, "model %s: max batch %d is outside 1..%d (the engine's)",
                     swap_model_name(m->sm), max_batch, e->cfg.max_batch);
    } else {
        m->max_batch = max_batch;
        int p = m->longest_prompt, out = m->longest_out;
        bool decodes = m->decodes;
        m->longest_prompt = m->longest_out = 0; /* recomputed for the new size */
        m->decodes = false;
        if (out > 0)
            reserve_grow(e, m, p, decodes && out < 2 ? 2 : out);
        pthread_cond_signal(&e->wake);
    }
    pthread_mutex_unlock(&e->lock);
    return rc;
}

int engine_set_keep_alive(struct engine *e, int id, double seconds)
{
    if (!(isnan(seconds) || seconds >= 0))
        return err_set(ERR_INVALID, "keep_alive %g: expected seconds >= 0, INFINITY (never) or "
                                    "NAN (the policy's own)", seconds);
    pthread_mutex_lock(&e->lock);
    struct engine_model *m = model_get(e, id);
    if (m) {
        m->keep_alive = seconds;
        pthread_cond_signal(&e->wake); /* its timer may have run out already */
    }
    pthread_mutex_unlock(&e->lock);
    return m ? 0 : err_set(ERR_NOT_FOUND, "no model with id %d is served", id);
}

int engine_set_priority(struct engine *e, int id, int priority, double max_queue_wait)
{
    if (priority < -ENGINE_PRIORITY_MAX || priority > ENGINE_PRIORITY_MAX ||
        !(max_queue_wait >= 0) || !isfinite(max_queue_wait))
        return err_set(ERR_INVALID, "priority %d, max_queue_wait %g: expected a priority from %d to "
                                    "%d and seconds >= 0 (0: no bound)",
                       priority, max_queue_wait, -ENGINE_PRIORITY_MAX, ENGINE_PRIORITY_MAX);
    pthread_mutex_lock(&e->lock);
    struct engine_model *m = model_get(e, id);
    if (m) {
        m->priority = priority;
        m->max_queue_wait = max_queue_wait;
        pthread_cond_signal(&e->wake);
    }
    pthread_mutex_unlock(&e->lock);
    return m ? 0 : err_set(ERR_NOT_FOUND, "no model with id %d is served", id);
}

int engine_set_min_resident(struct engine *e, int id, double seconds)
{
    if (!(seconds >= 0) || !isfinite(seconds))
        return err_set(ERR_INVALID, "min_resident %g: expected seconds >= 0 (0: none)", seconds);
    pthread_mutex_lock(&e->lock);
    struct engine_model *m = model_get(e, id);
    if (m)
        m->min_resident = seconds;
    pthread_mutex_unlock(&e->lock);
    return m ? 0 : err_set(ERR_NOT_FOUND, "no model with id %d is served", id);
}

int engine_pin_model(struct engine *e, int id, bool pinned)
{
    pthread_mutex_lock(&e->lock);
    struct engine_model *m = model_get(e, id);
    if (m) {
        m->pinned = pinned;
        reserves_refit(e); /* the others' reserves fit beside the pinned ones */
        if (!pinned)
            mem_wait_clear(e); /* its memory may go to a batch that waited for it */
        pthread_cond_signal(&e->wake);
    }
    pthread_mutex_unlock(&e->lock);
    return m ? 0 : err_set(ERR_NOT_FOUND, "no model with id %d is served", id);
}

/* Hands an admin request to the scheduler thread and waits for it, the lock
 * released while waiting. */
static int admin_call(struct engine *e, int id, enum admin what)
{
    pthread_mutex_lock(&e->lock);
    struct engine_model *m = model_get(e, id);
    if (!m) {
        pthread_mutex_unlock(&e->lock);
        return err_set(ERR_NOT_FOUND, "no model with id %d is served", id);
    }
    if (what == ADMIN_UNLOAD && m->pinned) {
        pthread_mutex_unlock(&e->lock);
        return err_set(ERR_BUSY, "model %s is pinned: unpin it before unloading it",
                       swap_model_name(m->sm));
    }
    m->users++;
    while (m->admin != ADMIN_NONE && !m->removed) /* one admin request at a time */
        pthread_cond_wait(&e->admin, &e->lock);
    int rc = 0;
    if (m->removed) {
        rc = err_set(ERR_NOT_FOUND, "model %s was removed", swap_model_name(m->sm));
    } else {
        m->admin = what;
        pthread_cond_signal(&e->wake);
        while (m->admin != ADMIN_NONE)
            pthread_cond_wait(&e->admin, &e->lock);
        rc = m->admin_rc;
        if (rc < 0)
            err_set(rc, "%s", m->admin_msg);
    }
    model_unuse(m);
    pthread_mutex_unlock(&e->lock);
    return rc;
}

int engine_load_model(struct engine *e, int id)
{
    return admin_call(e, id, ADMIN_LOAD);
}

int engine_unload_model(struct engine *e, int id)
{
    return admin_call(e, id, ADMIN_UNLOAD);
}

static void latency_of(const struct hist *h, struct engine_latency *out)
{
    struct hist_summary s;
    hist_summarize(h, &s);
    *out = (struct engine_latency){
        .n = s.n, .mean = s.mean, .p50 = s.p50, .p90 = s.p90, .p99 = s.p99, .max = s.max};
}

/* The Prometheus histogram: h's counts on engine_hist_le, with its exact count and sum. */
static void prom_of(const struct hist *h, struct engine_hist *out)
{
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < ENGINE_HIST_LE; i++)
        out->le[i] = h->le_count[i];
    out->count = h->n;
    out->sum = h->sum;
}

/* *out for m, whose swap model is still registered (lock held). */
static void stats_fill(struct engine *e, struct engine_model *m, struct engine_model_stats *out)
{
    memset(out, 0, sizeof(*out));
    const struct swap_model *sm = m->sm;
    out->id = m->id;
    out->base = m->base ? m->base->id : -1;
    snprintf(out->name, sizeof(out->name), "%s", swap_model_name(sm));
    out->pinned = m->pinned;
    out->queue_len = m->queue_len;
    out->running = m->n_running;
    out->loads = m->loads;
    out->evictions = m->evictions;
    out->unloads = m->unloads;
    out->idle_unloads = m->idle_unloads;
    out->preempt_unloads = m->preempt_unloads;
    out->preemptions = m->preemptions;
    out->paused = m->n_paused;
    out->keep_alive = m->keep_alive;
    out->priority = m->priority;
    out->max_queue_wait = m->max_queue_wait;
    out->min_resident = m->min_resident;
    out->bytes_loaded = m->bytes_loaded;
    out->trims = m->trims;
    out->bytes_trimmed = m->bytes_trimmed;
    out->load_s = m->load_s;
    out->compute_s = m->compute_s;
    out->batches = m->batches;
    out->submitted = m->submitted;
    out->ok = m->ok;
    out->failed = m->failed;
    out->cancelled = m->cancelled;
    out->timed_out = m->timed_out;
    out->rejected = m->rejected;
    latency_of(&m->latency, &out->latency);
    latency_of(&m->ttft, &out->ttft);
    prom_of(&m->latency, &out->latency_hist);
    prom_of(&m->ttft, &out->ttft_hist);
    prom_of(&m->load, &out->load_hist);
    /* residency: the swap manager's word for the model, and per shard the
     * blobs whose readiness events are set; under the lock, which keeps
     * engine_remove_model (and its swap_unregister) off sm */
    out->residency = swap_residency(e->mgr, sm);
    out->n_shards = swap_model_shard_count(sm);
    for (int s = 0; s < out->n_shards && s < ENGINE_MAX_SHARDS; s++) {
        const struct swap_shard *sh = swap_model_shard(sm, s);
        out->shards[s].device = swap_shard_device(sh);
        out->shards[s].bytes = swap_shard_device_bytes(sh);
        out->shards[s].n_blobs = swap_shard_n_blobs(sh);
        for (int b = 0; b < swap_shard_n_blobs(sh); b++)
            out->shards[s].blobs_ready += device_event_done(swap_shard_blob_ready(sh, b));
    }
}

int engine_model_stats(struct engine *e, int id, struct engine_model_stats *out)
{
    pthread_mutex_lock(&e->lock);
    struct engine_model *m = model_get(e, id);
    if (!m) {
        pthread_mutex_unlock(&e->lock);
        memset(out, 0, sizeof(*out));
        return err_set(ERR_NOT_FOUND, "no model with id %d is served", id);
    }
    load_check(e, m, swap_residency(e->mgr, m->sm) == RES_LOADING);
    stats_fill(e, m, out);
    pthread_mutex_unlock(&e->lock);
    return 0;
}

int engine_model_expert_tokens(struct engine *e, int id, uint64_t *out, size_t cap, int *layers,
                               int *experts)
{
    pthread_mutex_lock(&e->lock);
    struct engine_model *m = model_get(e, id);
    *layers = m && m->expert_tokens ? m->expert_layers : 0;
    *experts = m && m->expert_tokens ? m->experts : 0;
    const size_t n = (size_t)*layers * *experts;
    if (n && out && cap >= n)
        memcpy(out, m->expert_tokens, n * sizeof(*out));
    pthread_mutex_unlock(&e->lock);
    return m ? 0 : err_set(ERR_NOT_FOUND, "no model with id %d is served", id);
}

void engine_get_stats(struct engine *e, struct engine_stats *st)
{
    pthread_mutex_lock(&e->lock);
    *st = e->stats;
    pthread_mutex_unlock(&e->lock);
}
