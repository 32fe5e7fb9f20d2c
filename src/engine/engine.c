#include "engine/engine.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/event.h"
#include "core/hist.h"
#include "core/timing.h"
#include "engine/engine_impl.h"
#include "engine/sched.h"

#define MAX_ACTIONS 16

/* Prometheus's bounds for the latency, TTFT and load histograms (hist.h
 * counts against them as observations arrive). */
_Static_assert(ENGINE_HIST_LE <= HIST_MAX_LE, "core/hist.h counts at most HIST_MAX_LE bounds");
const double engine_hist_le[ENGINE_HIST_LE] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                               1,     2.5,  5,     10,   30,  60,   120};

/* ---- requests ---- */

/* The served model id (lock held); NULL when unknown or being removed. */
static struct emodel *model_get(struct engine *e, int id)
{
    if (id < 0 || id >= e->n_ids || !e->models[id] || e->models[id]->removed)
        return NULL;
    return e->models[id];
}

/* Lets go of m, which the caller pinned (users++) to read it outside the
 * lock (lock held): the last one lets engine_remove_model go on. */
void model_unuse(struct emodel *m)
{
    if (--m->users == 0)
        pthread_cond_broadcast(&m->e->admin);
}

static struct emodel *model_by_name(struct engine *e, const char *name)
{
    for (int i = 0; i < e->n_ids; i++)
        if (e->models[i] && !e->models[i]->removed &&
            strcmp(swap_model_name(e->models[i]->sm), name) == 0)
            return e->models[i];
    return NULL;
}

/* The model a request names (lock held). */
struct emodel *model_named(struct engine *e, const struct engine_request_params *p)
{
    struct emodel *m = p->model_name ? model_by_name(e, p->model_name) : model_get(e, p->model);
    if (!m) {
        if (p->model_name)
            err_set(ERR_NOT_FOUND, "no model named '%s' is served", p->model_name);
        else
            err_set(ERR_NOT_FOUND, "no model with id %d is served (removed, or never added)",
                    p->model);
    }
    return m;
}

/* ---- the scheduler ---- */

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
static void load_check(struct engine *e, struct emodel *m, bool loading)
{
    if (m->was_loading && !loading) {
        m->was_loading = false;
        e->load_s = swap_model_load_seconds(e->mgr, m->sm);
        e->stats.swap_s += e->load_s;
        m->load_s += e->load_s;
        hist_add(&m->load, e->load_s);
    }
}

/* The policy's snapshot of the models being served: view index i is model
 * map[i] (lock held). */
static void view_build(struct engine *e, struct emodel **map, struct sched_model *sm,
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
    uint64_t held[SCHED_MAX_DEVICES] = {0};
    for (int id = 0; id < e->n_ids; id++) {
        struct emodel *m = e->models[id];
        enum residency r = m ? swap_residency(e->mgr, m->sm) : RES_ON_DISK;
        if (r != RES_LOADING && r != RES_ON_DEVICE)
            continue;
        for (int d = 0; d < v->n_devices; d++)
            if (m->reserve[d] > m->batch_bytes[d])
                held[d] += m->reserve[d] - m->batch_bytes[d];
    }
    for (int d = 0; d < v->n_devices; d++) {
        struct device *dev = swap_device(e->mgr, d);
        uint64_t taken = device_used(dev) + held[d];
        v->free_bytes[d] = taken < device_budget(dev) ? device_budget(dev) - taken : 0;
    }
    int n = 0;
    for (int id = 0; id < e->n_ids; id++) {
        struct emodel *m = model_get(e, id);
        if (!m)
            continue;
        int i = n++;
        map[i] = m;
        enum residency r = swap_residency(e->mgr, m->sm);
        memset(&sm[i], 0, sizeof(sm[i]));
        sm[i].queue_len = m->queue_len;
        sm[i].head_arrival = m->head ? m->head->t.t_arrival : 0;
        sm[i].resident = r == RES_LOADING || r == RES_ON_DEVICE;
        sm[i].loading = r == RES_LOADING;
        sm[i].running = m->running;
        sm[i].offload_pending = m->offload_pending;
        sm[i].pinned = m->pinned;
        sm[i].last_used = m->last_used;
        sm[i].loaded_at = m->loaded_at;
        sm[i].arrivals = m->arrivals;
        sm[i].batch_s = step_estimate(e, m->queue_len);
        /* its weights and its batches' memory leave or come together */
        for (int d = 0; d < v->n_devices; d++)
            sm[i].bytes[d] = swap_model_device_bytes(m->sm, d) +
                             (m->reserve[d] > m->batch_bytes[d] ? m->reserve[d]
                                                                 : m->batch_bytes[d]);
        load_check(e, m, sm[i].loading);
        v->any_loading |= sm[i].loading;
        v->any_running |= m->running;
    }
    v->n_models = n;
}

/* A load started by the scheduler (lock held). */
static void load_started(struct engine *e, struct emodel *m, double now)
{
    e->stats.loads++;
    m->loads++;
    m->bytes_loaded += swap_model_total_bytes(m->sm);
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
static int start_load(struct engine *e, struct emodel **map, struct sched_model *sm, int model)
{
    struct swap_model *sw = map[model]->sm;
    struct swap_room why;
    int rc;
    while ((rc = swap_load(e->mgr, sw, &why)) == ERR_BUSY &&
           why.kind == SWAP_ROOM_FRAGMENTED && why.leaving == 0) {
        struct sched_view v;
        view_build(e, map, sm, &v);
        int victim = sched_defrag_victim(&v, model, why.device);
        if (victim < 0 || swap_compact(e->mgr, why.device, map[victim]->sm) < 0)
            break;
        e->stats.evictions++;
        map[victim]->evictions++;
    }
    return rc;
}

/* ---- carrying out the policy's actions (sched_act), lock held ---- */

/* The executor's context: the engine and the view's index map (view index i
 * is model map[i]); sm is the snapshot's storage, which start_load rebuilds. */
struct exec {
    struct engine *e;
    struct emodel **map;
    struct sched_model *sm;
};

static bool exec_running(void *ctx, int model)
{
    struct exec *x = ctx;
    return x->map[model]->running;
}

/* The runner takes its batch from the queue (runner_main). */
static bool exec_serve(void *ctx, int model)
{
    struct exec *x = ctx;
    struct emodel *m = x->map[model];
    if (m->mem_wait || swap_use_begin(x->e->mgr, m->sm) < 0)
        return false;
    m->running = true;
    m->go = true;
    m->last_used = time_now();
    pthread_cond_signal(&m->go_cond);
    return true;
}

/* The swap manager refuses what may not leave; a deferred offload is carried
 * out by the runner's swap_use_end. */
static void exec_offload(void *ctx, int model, bool defer)
{
    struct exec *x = ctx;
    struct emodel *v = x->map[model];
    if (swap_offload(x->e->mgr, v->sm, defer) == 0) {
        x->e->stats.evictions++;
        v->evictions++;
        v->offload_pending = defer;
    }
}

static bool exec_load(void *ctx, int model)
{
    struct exec *x = ctx;
    if (start_load(x->e, x->map, x->sm, model) < 0)
        return false;
    load_started(x->e, x->map[model], time_now());
    return true;
}

static void exec_wake(void *ctx, double at)
{
    struct exec *x = ctx;
    x->e->wake_at = at < x->e->wake_at ? at : x->e->wake_at;
}

static const struct sched_exec_ops exec_ops = {
    .running = exec_running,
    .serve = exec_serve,
    .offload = exec_offload,
    .load = exec_load,
    .wake = exec_wake,
};

/* Carries out the admin loads and unloads asked for (lock held). */
static void admin_run(struct engine *e)
{
    bool done = false;
    for (int id = 0; id < e->n_ids; id++) {
        struct emodel *m = model_get(e, id);
        if (!m || m->admin == ADMIN_NONE)
            continue;
        enum residency r = swap_residency(e->mgr, m->sm);
        bool resident = r == RES_LOADING || r == RES_ON_DEVICE;
        int rc = 0;
        if (r == RES_OFFLOADING) {
            continue; /* its end wakes us */
        } else if (m->admin == ADMIN_LOAD) {
            struct swap_room why;
            if (!resident && (rc = swap_load(e->mgr, m->sm, &why)) == 0)
                load_started(e, m, time_now());
        } else if (resident) {
            if (m->running) {
                if ((rc = swap_offload(e->mgr, m->sm, true)) == 0)
                    m->offload_pending = true;
            } else if (r == RES_LOADING) {
                continue; /* the load's end wakes us */
            } else {
                rc = swap_offload(e->mgr, m->sm, false);
            }
            m->unloads += rc == 0;
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
        struct emodel *m = e->models[id];
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

/* Fails the queued requests of models that cannot be loaded while the
 * pinned models stay (lock held): a model whose weights on some device
 * exceed that device's budget less what resident pinned models hold there
 * (their weights and batch reserves) would otherwise wait until an admin
 * unpins, unanswered. Returns whether it failed any. */
static bool pinned_block(struct engine *e, struct emodel **map, const struct sched_model *sm,
                         const struct sched_view *v)
{
    uint64_t pinned[SCHED_MAX_DEVICES] = {0};
    for (int i = 0; i < v->n_models; i++)
        if (sm[i].pinned && sm[i].resident)
            for (int d = 0; d < v->n_devices; d++)
                pinned[d] += sm[i].bytes[d];
    bool failed = false;
    for (int i = 0; i < v->n_models; i++) {
        struct emodel *m = map[i];
        if (sm[i].resident || m->queue_len == 0)
            continue;
        for (int d = 0; d < v->n_devices; d++) {
            uint64_t need = swap_model_device_bytes(m->sm, d);
            uint64_t budget = device_budget(swap_device(e->mgr, d));
            if (need == 0 || need + pinned[d] <= budget)
                continue;
            char why[256];
            snprintf(why, sizeof(why),
                     "model %s cannot be loaded while pinned models hold device %d: it needs "
                     "%llu bytes there, pinned models hold %llu of its %llu (unpin one)",
                     swap_model_name(m->sm), d, (unsigned long long)need,
                     (unsigned long long)pinned[d], (unsigned long long)budget);
            while (m->head)
                queue_fail(m, m->head, ERR_BUSY, why);
            failed = true;
            break;
        }
    }
    return failed;
}

static void *sched_main(void *arg)
{
    struct engine *e = arg;
    struct sched_model *sm = NULL;
    struct emodel **map = NULL;
    int cap = 0;
    struct sched_action actions[MAX_ACTIONS];
    pthread_mutex_lock(&e->lock);
    while (!e->stop) {
        /* requests completed in their queue: on_done, outside the lock */
        if (e->finished) {
            struct engine_req *list = e->finished;
            e->finished = e->finished_tail = NULL;
            pthread_mutex_unlock(&e->lock);
            for (struct engine_req *r = list, *nx; r; r = nx) {
                nx = r->next;
                r->next = NULL;
                req_complete(e, r);
            }
            pthread_mutex_lock(&e->lock);
            continue;
        }
        double next_deadline = queue_expire(e, time_now());
        if (e->finished)
            continue;
        admin_run(e);
        if (e->n_live == 0) { /* nothing to schedule until a model is added */
            pthread_cond_wait(&e->wake, &e->lock);
            continue;
        }
        if (e->n_live > cap) { /* models were added */
            int c = 2 * e->n_live;
            struct sched_model *s2 = realloc(sm, (size_t)c * sizeof(*sm));
            struct emodel **m2 = s2 ? realloc(map, (size_t)c * sizeof(*map)) : NULL;
            sm = s2 ? s2 : sm;
            map = m2 ? m2 : map;
            if (!s2 || !m2) { /* out of memory: try again at the next event */
                pthread_cond_wait(&e->wake, &e->lock);
                continue;
            }
            cap = c;
        }
        struct sched_view v;
        view_build(e, map, sm, &v);
        if (!e->cfg.wait_for_unpin && pinned_block(e, map, sm, &v))
            continue;
        int n = v.n_models ? e->policy->decide(&v, actions, MAX_ACTIONS) : 0;
        bool progress = false;
        e->wake_at = INFINITY;
        struct exec x = {.e = e, .map = map, .sm = sm};
        for (int i = 0; i < n; i++)
            progress |= sched_act(&exec_ops, &x, &v, &actions[i]);
        if (progress)
            continue;
        double at = e->wake_at < next_deadline ? e->wake_at : next_deadline;
        if (isinf(at)) {
            pthread_cond_wait(&e->wake, &e->lock);
        } else if (at > time_now()) { /* the policy asked for a second look then, or a deadline */
            struct timespec ts = {.tv_sec = (time_t)at,
                                  .tv_nsec = (long)((at - (double)(time_t)at) * 1e9)};
            pthread_cond_timedwait(&e->wake, &e->lock, &ts);
        }
    }
    pthread_mutex_unlock(&e->lock);
    free(sm);
    free(map);
    return NULL;
}

static void engine_on_swap(void *ctx)
{
    struct engine *e = ctx;
    pthread_mutex_lock(&e->lock);
    mem_wait_clear(e);
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
}

/* ---- the registry ---- */

int engine_add_model(struct engine *e, struct swap_model *model)
{
    pthread_mutex_lock(&e->lock);
    int rc = 0;
    struct emodel *m = NULL;
    struct emodel *same = model_by_name(e, swap_model_name(model));
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
        struct emodel **ms = realloc(e->models, (size_t)cap * sizeof(*ms));
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
    m->max_batch = e->cfg.max_batch;
    hist_init(&m->latency, engine_hist_le, ENGINE_HIST_LE);
    hist_init(&m->ttft, engine_hist_le, ENGINE_HIST_LE);
    hist_init(&m->load, engine_hist_le, ENGINE_HIST_LE);
    atomic_init(&m->removing, false);
    pthread_cond_init(&m->go_cond, NULL);
    if (pthread_create(&m->tid, NULL, runner_main, m) != 0) {
        pthread_cond_destroy(&m->go_cond);
        free(m);
        rc = err_set(ERR_NOMEM, "cannot start the runner thread of model %s",
                     swap_model_name(model));
        goto out;
    }
    m->started = true;
    e->models[e->n_ids++] = m;
    e->n_live++;
    rc = m->id;
    pthread_cond_signal(&e->wake);
out:
    pthread_mutex_unlock(&e->lock);
    return rc;
}

int engine_find_model(struct engine *e, const char *name)
{
    pthread_mutex_lock(&e->lock);
    struct emodel *m = model_by_name(e, name);
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

int engine_remove_model(struct engine *e, int id)
{
    pthread_mutex_lock(&e->lock);
    struct emodel *m = model_get(e, id);
    if (!m) {
        pthread_mutex_unlock(&e->lock);
        return err_set(ERR_NOT_FOUND, "no model with id %d is served", id);
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
    m->stop = true;
    pthread_cond_signal(&m->go_cond);
    pthread_cond_broadcast(&e->admin);
    /* its batch in flight ends at the next step boundary; admin callers let go */
    while (m->running || m->users > 0)
        pthread_cond_wait(&e->admin, &e->lock);
    pthread_mutex_unlock(&e->lock);
    pthread_join(m->tid, NULL);
    /* off its devices: after a load in progress, with no lock of ours held,
     * while the scheduler still counts its memory (a copy back it starts is
     * memory leaving, not free) */
    struct swap_model *sm = m->sm;
    swap_wait_idle(e->mgr, sm);
    swap_offload(e->mgr, sm, false);
    swap_wait_idle(e->mgr, sm);
    /* no thread of ours reads sm from here: its runner is gone (with its
     * batches), no submission or admin call holds it (users), and the
     * scheduler's snapshots and batch_alloc skip an empty slot */
    pthread_mutex_lock(&e->lock);
    e->models[id] = NULL;
    e->n_live--;
    pthread_cond_signal(&e->wake); /* its memory is free */
    pthread_mutex_unlock(&e->lock);
    pthread_cond_destroy(&m->go_cond);
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
    struct emodel *m = model_get(e, id);
    int rc = 0;
    if (!m) {
        rc = err_set(ERR_NOT_FOUND, "no model with id %d is served", id);
    } else if (max_batch < 1 || max_batch > e->cfg.max_batch) {
        rc = err_set(ERR_INVALID, "model %s: max batch %d is outside 1..%d (the engine's)",
                     swap_model_name(m->sm), max_batch, e->cfg.max_batch);
    } else {
        m->max_batch = max_batch;
        int p = m->longest_prompt, seq = m->longest_seq;
        bool decodes = m->decodes;
        m->longest_prompt = m->longest_seq = 0; /* recomputed for the new size */
        m->decodes = false;
        if (seq > 0)
            reserve_grow(e, m, p, decodes && seq - p < 2 ? 2 : seq - p);
        pthread_cond_signal(&e->wake);
    }
    pthread_mutex_unlock(&e->lock);
    return rc;
}

int engine_pin_model(struct engine *e, int id, bool pinned)
{
    pthread_mutex_lock(&e->lock);
    struct emodel *m = model_get(e, id);
    if (m) {
        m->pinned = pinned;
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
    struct emodel *m = model_get(e, id);
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
    *out = (struct engine_latency){.n = s.n, .mean = s.mean, .p50 = s.p50, .p90 = s.p90,
                                   .p99 = s.p99, .max = s.max};
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

int engine_model_stats(struct engine *e, int id, struct engine_model_stats *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&e->lock);
    struct emodel *m = model_get(e, id);
    if (!m) {
        pthread_mutex_unlock(&e->lock);
        return err_set(ERR_NOT_FOUND, "no model with id %d is served", id);
    }
    const struct swap_model *sm = m->sm;
    load_check(e, m, swap_residency(e->mgr, sm) == RES_LOADING);
    out->id = m->id;
    snprintf(out->name, sizeof(out->name), "%s", swap_model_name(sm));
    out->pinned = m->pinned;
    out->queue_len = m->queue_len;
    out->running = m->n_running;
    out->loads = m->loads;
    out->evictions = m->evictions;
    out->unloads = m->unloads;
    out->bytes_loaded = m->bytes_loaded;
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
    pthread_mutex_unlock(&e->lock);
    return 0;
}

/* ---- lifecycle ---- */

int engine_create(struct swap_manager *mgr, struct workers *w, const struct engine_config *cfg,
                  struct engine **out)
{
    *out = NULL;
    const struct sched_policy *p = sched_policy_find(cfg->policy ? cfg->policy
                                                                 : sched_policy_default());
    if (!p)
        return ERR_INVALID;
    if (cfg->max_batch < 0 || cfg->queue_cap < 0 || cfg->max_loaded < 0)
        return err_set(ERR_INVALID, "max_batch, queue_cap and max_loaded must be >= 0");
    struct engine *e = calloc(1, sizeof(*e));
    if (!e)
        return err_set(ERR_NOMEM, "out of memory");
    pthread_mutex_init(&e->lock, NULL);
    pthread_condattr_t ca; /* timed waits on time_now()'s clock */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&e->idle, NULL);
    pthread_cond_init(&e->admin, NULL);
    e->mgr = mgr;
    e->w = w;
    e->policy = p;
    e->cfg = *cfg;
    e->cfg.max_batch = cfg->max_batch ? cfg->max_batch : 8;
    e->cfg.queue_cap = cfg->queue_cap ? cfg->queue_cap : 1024;
    e->step_s = calloc((size_t)e->cfg.max_batch + 1, sizeof(double));
    if (!e->step_s || pthread_create(&e->sched_tid, NULL, sched_main, e) != 0) {
        int rc = e->step_s ? err_set(ERR_NOMEM, "cannot start the scheduler thread")
                           : err_set(ERR_NOMEM, "out of memory");
        engine_destroy(e);
        return rc;
    }
    e->sched_started = true;
    swap_set_listener(mgr, engine_on_swap, e);
    *out = e;
    return 0;
}

void engine_drain(struct engine *e)
{
    pthread_mutex_lock(&e->lock);
    while (e->outstanding > 0)
        pthread_cond_wait(&e->idle, &e->lock);
    pthread_mutex_unlock(&e->lock);
}

void engine_destroy(struct engine *e)
{
    if (!e)
        return;
    engine_drain(e);
    if (e->sched_started)
        swap_set_listener(e->mgr, NULL, NULL);
    pthread_mutex_lock(&e->lock);
    e->stop = true;
    pthread_cond_broadcast(&e->wake);
    for (int i = 0; i < e->n_ids; i++)
        if (e->models[i])
            pthread_cond_signal(&e->models[i]->go_cond);
    pthread_mutex_unlock(&e->lock);
    if (e->sched_started)
        pthread_join(e->sched_tid, NULL);
    /* every runner first: one still ending its last batch touches the
     * others' flags (mem_wait_clear) */
    for (int i = 0; i < e->n_ids; i++)
        if (e->models[i] && e->models[i]->started)
            pthread_join(e->models[i]->tid, NULL);
    for (int i = 0; i < e->n_ids; i++) {
        struct emodel *m = e->models[i];
        if (!m)
            continue;
        pthread_cond_destroy(&m->go_cond);
        free(m);
    }
    free(e->models);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->wake);
    pthread_cond_destroy(&e->idle);
    pthread_cond_destroy(&e->admin);
    free(e->step_s);
    free(e);
}

void engine_get_stats(struct engine *e, struct engine_stats *st)
{
    pthread_mutex_lock(&e->lock);
    *st = e->stats;
    pthread_mutex_unlock(&e->lock);
}
