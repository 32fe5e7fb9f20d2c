#include "engine/engine.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/timing.h"
#include "engine/sched.h"

#define MAX_ACTIONS 16
#define JOIN_ROOM 64 /* KV positions a batch keeps for requests joining later */

struct emodel {
    struct engine *e;
    int index;
    struct swap_model *sm;
    struct engine_request *head, *tail;
    int queue_len;
    bool running;         /* the runner has a batch */
    bool go;              /* the scheduler dispatched a batch */
    bool offload_pending; /* chosen as a victim while running */
    bool was_loading;
    double last_used, loaded_at;
    struct forecast arrivals;
    pthread_t tid;
    bool started;
    pthread_cond_t go_cond;
};

struct engine {
    /* every field here and in the emodels; never held across a copy or a
     * wait on the swap manager (under it, only the manager's non-waiting
     * calls: swap_load, swap_offload, swap_compact, swap_use_begin, queries) */
    pthread_mutex_t lock;
    pthread_cond_t wake;  /* the scheduler's: something changed */
    pthread_cond_t idle;  /* every request completed */
    struct swap_manager *mgr;
    struct workers *w;
    const struct sched_policy *policy;
    struct engine_config cfg;
    struct emodel **models;
    int n_models, cap;
    pthread_t sched_tid;
    bool sched_started, stop;
    uint64_t outstanding;
    struct engine_stats stats;
    double load_s; /* the latest load's time, for the policy's forecasts */
    double *step_s; /* [b]: a first step's time for b requests (moving average; 0: none yet) */
    double wake_at; /* a policy's SCHED_WAKE, on the time_now() clock */
};

static int engine_start(struct engine *e);

/* ---- requests ---- */

static void request_finish(struct engine *e, struct engine_request *r, int status, const char *why)
{
    r->status = status;
    if (status < 0)
        snprintf(r->error, sizeof(r->error), "%s", why);
    r->t_done = time_now();
    sampler_free(&r->sampler);
    if (r->on_done)
        r->on_done(r);
    pthread_mutex_lock(&e->lock);
    e->stats.completed++;
    if (--e->outstanding == 0)
        pthread_cond_broadcast(&e->idle);
    pthread_mutex_unlock(&e->lock);
}

int engine_submit(struct engine *e, struct engine_request *r)
{
    if (r->model < 0 || r->model >= e->n_models)
        return err_set(ERR_INVALID, "request names model %d, but %d models are registered",
                       r->model, e->n_models);
    struct emodel *m = e->models[r->model];
    const struct opt_config *c = &m->sm->cfg;
    if (r->n_prompt < 1 || r->max_tokens < 1 || !r->output)
        return err_set(ERR_INVALID, "a request needs at least one prompt token, max_tokens >= 1 "
                                    "and an output buffer");
    if (r->n_prompt + r->max_tokens > c->max_pos)
        return err_set(ERR_INVALID, "prompt of %d tokens + max_tokens %d exceeds model %s's %d "
                                    "positions", r->n_prompt, r->max_tokens, m->sm->name,
                       c->max_pos);
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= c->vocab)
            return err_set(ERR_INVALID, "prompt token %d is outside model %s's vocabulary (%d)",
                           r->prompt[i], m->sm->name, c->vocab);
    int rc = sampler_init(&r->sampler, &r->sampling);
    if (rc < 0)
        return rc;
    r->n_output = 0;
    r->status = 0;
    r->error[0] = '\0';
    r->next = NULL;
    r->t_arrival = time_now();
    pthread_mutex_lock(&e->lock);
    if ((rc = engine_start(e)) < 0) {
        pthread_mutex_unlock(&e->lock);
        sampler_free(&r->sampler);
        return rc;
    }
    if (m->queue_len >= e->cfg.queue_cap) {
        e->stats.rejected++;
        pthread_mutex_unlock(&e->lock);
        sampler_free(&r->sampler);
        return err_set(ERR_BUSY, "model %s has %d requests waiting, its queue's limit", m->sm->name,
                       e->cfg.queue_cap);
    }
    if (m->tail)
        m->tail->next = r;
    else
        m->head = r;
    m->tail = r;
    m->queue_len++;
    forecast_add(&m->arrivals, r->t_arrival);
    e->outstanding++;
    e->stats.submitted++;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
    return 0;
}

/* Same temperature, top-k and top-p (the seed is per request, not a batch
 * property). */
static bool same_sampling(const struct sampler_params *a, const struct sampler_params *b)
{
    return a->temperature == b->temperature && a->top_k == b->top_k && a->top_p == b->top_p;
}

/* Takes up to n requests from m's queue (lock held); with same_params, stops
 * at the first whose sampling differs from the first one's (Computron). */
static int queue_take(struct emodel *m, struct engine_request **out, int n, bool same_params)
{
    int k = 0;
    while (m->head && k < n) {
        struct engine_request *r = m->head;
        if (same_params && k > 0 && !same_sampling(&r->sampling, &out[0]->sampling))
            break;
        m->head = r->next;
        if (!m->head)
            m->tail = NULL;
        m->queue_len--;
        r->next = NULL;
        out[k++] = r;
    }
    return k;
}

/* ---- a batch, on the model's runner thread ---- */

struct batch {
    struct emodel *m;
    struct group_batch *gb;
    int slots;
    struct engine_request **req; /* (slots) NULL where free */
    int32_t *ids;                /* (slots * t) */
    uint8_t *mask;
    float *logits;               /* (slots, vocab) */
    int32_t *last;               /* (slots) the last token of each sequence */
};

/* Samples the next token of every sequence in the batch; finishes those done. */
static void batch_sample(struct batch *b, double now)
{
    struct engine *e = b->m->e;
    const struct opt_config *c = &b->m->sm->cfg;
    for (int s = 0; s < b->slots; s++) {
        struct engine_request *r = b->req[s];
        if (!r)
            continue;
        int32_t id = sampler_pick(&r->sampler, b->logits + (size_t)s * c->vocab, c->vocab);
        if (r->n_output == 0)
            r->t_first_token = now;
        bool eos = id == c->eos_id;
        if (!eos)
            r->output[r->n_output++] = id;
        b->last[s] = id;
        if (eos || r->n_output >= r->max_tokens) {
            b->req[s] = NULL;
            request_finish(e, r, 0, NULL);
        }
    }
}

/* One forward of the batch: new requests' prompts (left-padded to t), one
 * token for running sequences, nothing for free slots. */
static int batch_step(struct batch *b, struct engine_request **joining, int n_join, int t)
{
    struct engine *e = b->m->e;
    memset(b->mask, 0, (size_t)b->slots * t);
    for (int i = 0; i < b->slots * t; i++)
        b->ids[i] = b->m->sm->cfg.pad_id;
    for (int s = 0; s < b->slots; s++)
        if (b->req[s]) {
            b->ids[s * t + t - 1] = b->last[s];
            b->mask[s * t + t - 1] = 1;
        }
    for (int j = 0; j < n_join; j++) {
        struct engine_request *r = joining[j];
        int s = r->slot;
        group_batch_clear_slot(b->gb, s);
        for (int i = 0; i < r->n_prompt; i++) {
            b->ids[s * t + t - r->n_prompt + i] = r->prompt[i];
            b->mask[s * t + t - r->n_prompt + i] = 1;
        }
        b->req[s] = r;
    }
    return group_forward(e->w, b->gb, b->ids, b->mask, t, false, true, b->logits);
}

static void batch_fail(struct batch *b, int rc)
{
    char why[160];
    snprintf(why, sizeof(why), "%s", err_msg());
    for (int s = 0; s < b->slots; s++)
        if (b->req[s]) {
            struct engine_request *r = b->req[s];
            b->req[s] = NULL;
            request_finish(b->m->e, r, rc, why);
        }
}

static void batch_run(struct emodel *m, struct engine_request **first, int n_first)
{
    struct engine *e = m->e;
    const struct opt_config *c = &m->sm->cfg;
    struct batch b = {.m = m, .slots = n_first};
    int max_prompt = 0, max_tokens = 0;
    for (int i = 0; i < n_first; i++) {
        max_prompt = first[i]->n_prompt > max_prompt ? first[i]->n_prompt : max_prompt;
        max_tokens = first[i]->max_tokens > max_tokens ? first[i]->max_tokens : max_tokens;
    }
    /* room for the longest prompt and answer, plus late joiners when
     * sequences decode for more than one step */
    int max_len = max_prompt + max_tokens + (max_tokens > 1 ? JOIN_ROOM : 0);
    if (max_len > c->max_pos)
        max_len = c->max_pos;
    b.req = calloc((size_t)n_first, sizeof(*b.req));
    b.ids = malloc((size_t)n_first * max_len * sizeof(int32_t));
    b.mask = malloc((size_t)n_first * max_len);
    b.logits = malloc((size_t)n_first * c->vocab * sizeof(float));
    b.last = calloc((size_t)n_first, sizeof(int32_t));
    int rc = group_batch_create(m->sm, n_first, max_len, &b.gb);
    if (rc == 0 && (!b.req || !b.ids || !b.mask || !b.logits || !b.last))
        rc = err_set(ERR_NOMEM, "out of memory for a batch of %d", n_first);
    double now = time_now();
    for (int i = 0; i < n_first; i++) {
        first[i]->slot = i;
        first[i]->t_start = now;
        first[i]->batch_size = n_first;
    }
    if (rc < 0) {
        for (int i = 0; i < n_first; i++)
            b.req[i] = NULL;
        for (int i = 0; i < n_first; i++)
            request_finish(e, first[i], rc, err_msg());
        goto out;
    }
    /* prefill, then one token per step; waiting requests join freed slots */
    bool loaded = swap_residency(e->mgr, m->sm) == RES_ON_DEVICE; /* no layer still arriving */
    double t_step = time_now();
    if ((rc = batch_step(&b, first, n_first, max_prompt)) < 0) {
        batch_fail(&b, rc);
        goto out;
    }
    if (loaded) {
        double dt = time_now() - t_step, *est = &e->step_s[n_first];
        pthread_mutex_lock(&e->lock);
        *est = *est > 0 ? 0.7 * *est + 0.3 * dt : dt;
        pthread_mutex_unlock(&e->lock);
    }
    batch_sample(&b, time_now());
    for (;;) {
        int active = 0, free_slots = 0;
        for (int s = 0; s < b.slots; s++)
            active += b.req[s] != NULL;
        free_slots = b.slots - active;
        struct engine_request *join[64];
        int n_join = 0, t = 1;
        /* positions every running sequence still needs */
        int need = 1;
        for (int s = 0; s < b.slots; s++)
            if (b.req[s] && b.req[s]->max_tokens - b.req[s]->n_output > need)
                need = b.req[s]->max_tokens - b.req[s]->n_output;
        if (free_slots > 0 && !e->policy->batch_same_params_only) {
            /* a join step is t positions long (the longest joining prompt);
             * after it everybody must still fit their remaining tokens */
            int room = group_batch_room(b.gb);
            pthread_mutex_lock(&e->lock);
            while (m->head && n_join < free_slots && n_join < 64 && !m->offload_pending) {
                struct engine_request *r = m->head;
                int t_new = r->n_prompt > t ? r->n_prompt : t;
                int need_new = r->max_tokens > need ? r->max_tokens : need;
                if (t_new - 1 + need_new > room)
                    break;
                queue_take(m, &join[n_join++], 1, false);
                t = t_new;
                need = need_new;
            }
            pthread_mutex_unlock(&e->lock);
        }
        if (active == 0 && n_join == 0)
            break;
        int s_free = 0;
        now = time_now();
        for (int j = 0; j < n_join; j++) {
            while (b.req[s_free])
                s_free++;
            join[j]->slot = s_free++;
            join[j]->t_start = now;
            join[j]->batch_size = active + n_join;
        }
        if ((rc = batch_step(&b, join, n_join, t)) < 0) {
            batch_fail(&b, rc);
            break;
        }
        batch_sample(&b, time_now());
    }
out:
    group_batch_free(b.gb);
    free(b.req);
    free(b.ids);
    free(b.mask);
    free(b.logits);
    free(b.last);
}

static void *runner_main(void *arg)
{
    struct emodel *m = arg;
    struct engine *e = m->e;
    struct engine_request **first = malloc((size_t)e->cfg.max_batch * sizeof(*first));
    pthread_mutex_lock(&e->lock);
    for (;;) {
        while (!m->go && !e->stop)
            pthread_cond_wait(&m->go_cond, &e->lock);
        if (!m->go)
            break;
        m->go = false;
        int n = first ? queue_take(m, first, e->cfg.max_batch, e->policy->batch_same_params_only)
                      : 0;
        pthread_mutex_unlock(&e->lock);
        double t0 = time_now();
        if (n > 0)
            batch_run(m, first, n);
        double dt = time_now() - t0;
        swap_use_end(e->mgr, m->sm);
        pthread_mutex_lock(&e->lock);
        e->stats.compute_s += dt;
        e->stats.batches += n > 0;
        m->running = false;
        m->offload_pending = false; /* swap_use_end carried out a deferred offload */
        pthread_cond_signal(&e->wake);
    }
    pthread_mutex_unlock(&e->lock);
    free(first);
    return NULL;
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

static void view_build(struct engine *e, struct sched_model *sm, struct sched_view *v)
{
    double now = time_now();
    memset(v, 0, sizeof(*v));
    v->now = now;
    v->n_models = e->n_models;
    v->n_devices = swap_device_count(e->mgr);
    v->models = sm;
    v->max_loaded = e->cfg.max_loaded;
    v->max_batch = e->cfg.max_batch;
    v->overlap_loads = e->cfg.overlap_loads;
    v->load_s = e->load_s;
    for (int d = 0; d < v->n_devices; d++) {
        struct device *dev = swap_device(e->mgr, d);
        v->free_bytes[d] = device_budget(dev) - device_used(dev);
    }
    for (int i = 0; i < e->n_models; i++) {
        struct emodel *m = e->models[i];
        enum residency r = swap_residency(e->mgr, m->sm);
        memset(&sm[i], 0, sizeof(sm[i]));
        sm[i].queue_len = m->queue_len;
        sm[i].head_arrival = m->head ? m->head->t_arrival : 0;
        sm[i].resident = r == RES_LOADING || r == RES_ON_DEVICE;
        sm[i].loading = r == RES_LOADING;
        sm[i].running = m->running;
        sm[i].offload_pending = m->offload_pending;
        sm[i].pinned = m->sm->pinned;
        sm[i].last_used = m->last_used;
        sm[i].loaded_at = m->loaded_at;
        sm[i].arrivals = m->arrivals;
        sm[i].batch_s = step_estimate(e, m->queue_len);
        for (int d = 0; d < v->n_devices; d++)
            sm[i].bytes[d] = swap_model_device_bytes(m->sm, d);
        if (m->was_loading && !sm[i].loading) { /* a load finished since last time */
            m->was_loading = false;
            e->load_s = m->sm->load_t1 - m->sm->load_t0;
            e->stats.swap_s += e->load_s;
        }
        v->any_loading |= sm[i].loading;
        v->any_running |= m->running;
    }
}

/* Loads model, for a SCHED_LOAD whose victims have gone. The swap manager
 * never picks a victim: it refuses (ERR_BUSY) and says why. Short of bytes
 * (a victim with a batch in flight leaves at its end), or waiting for memory
 * an offload is still copying back: that end or the listener wakes us. Free
 * bytes in pieces too small for a blob: the explicit fragmentation step,
 * offloading the model sched_defrag_victim names (swap_compact, counted),
 * until the blobs find their blocks. Nothing here waits on the manager. */
static int start_load(struct engine *e, struct sched_model *sm, int model)
{
    struct swap_model *sw = e->models[model]->sm;
    struct swap_room why;
    int rc;
    while ((rc = swap_load(e->mgr, sw, &why)) == ERR_BUSY &&
           why.kind == SWAP_ROOM_FRAGMENTED && why.leaving == 0) {
        struct sched_view v;
        view_build(e, sm, &v);
        int victim = sched_defrag_victim(&v, model, why.device);
        if (victim < 0 || swap_compact(e->mgr, why.device, e->models[victim]->sm) < 0)
            break;
        e->stats.evictions++;
    }
    return rc;
}

/* Carries out one action (lock held); false when it could not happen now. */
static bool act(struct engine *e, struct sched_model *sm, const struct sched_action *a)
{
    if (a->kind == SCHED_WAKE) {
        e->wake_at = a->at < e->wake_at ? a->at : e->wake_at;
        return false;
    }
    struct emodel *m = e->models[a->model];
    double now = time_now();
    if (a->kind == SCHED_SERVE) {
        if (m->running || swap_use_begin(e->mgr, m->sm) < 0)
            return false;
        m->running = true;
        m->go = true;
        m->last_used = now;
        pthread_cond_signal(&m->go_cond);
        return true;
    }
    for (int i = 0; i < a->n_victims; i++) {
        struct emodel *v = e->models[a->victims[i]];
        if (swap_offload(e->mgr, v->sm, v->running) == 0) {
            e->stats.evictions++;
            v->offload_pending = v->running;
        }
    }
    if (start_load(e, sm, a->model) < 0)
        return false;
    e->stats.loads++;
    m->was_loading = true;
    m->loaded_at = now;
    m->last_used = now;
    return true;
}

static void *sched_main(void *arg)
{
    struct engine *e = arg;
    struct sched_model *sm = calloc((size_t)e->n_models, sizeof(*sm));
    struct sched_action actions[MAX_ACTIONS];
    pthread_mutex_lock(&e->lock);
    while (!e->stop && sm) {
        struct sched_view v;
        view_build(e, sm, &v);
        int n = e->policy->decide(&v, actions, MAX_ACTIONS);
        bool progress = false;
        e->wake_at = INFINITY;
        for (int i = 0; i < n; i++)
            progress |= act(e, sm, &actions[i]);
        if (progress)
            continue;
        if (isinf(e->wake_at)) {
            pthread_cond_wait(&e->wake, &e->lock);
        } else if (e->wake_at > time_now()) { /* the policy asked for a second look then */
            double at = e->wake_at;
            struct timespec ts = {.tv_sec = (time_t)at,
                                  .tv_nsec = (long)((at - (double)(time_t)at) * 1e9)};
            pthread_cond_timedwait(&e->wake, &e->lock, &ts);
        }
    }
    pthread_mutex_unlock(&e->lock);
    free(sm);
    return NULL;
}

static void engine_on_swap(void *ctx)
{
    struct engine *e = ctx;
    pthread_mutex_lock(&e->lock);
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
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
    e->mgr = mgr;
    e->w = w;
    e->policy = p;
    e->cfg = *cfg;
    e->cfg.max_batch = cfg->max_batch ? cfg->max_batch : 8;
    e->cfg.queue_cap = cfg->queue_cap ? cfg->queue_cap : 1024;
    if (!(e->step_s = calloc((size_t)e->cfg.max_batch + 1, sizeof(double)))) {
        pthread_mutex_destroy(&e->lock);
        pthread_cond_destroy(&e->wake);
        pthread_cond_destroy(&e->idle);
        free(e);
        return err_set(ERR_NOMEM, "out of memory");
    }
    swap_set_listener(mgr, engine_on_swap, e);
    *out = e;
    return 0;
}

int engine_add_model(struct engine *e, struct swap_model *model)
{
    if (e->sched_started)
        return err_set(ERR_INVALID, "models are added before the first request");
    if (e->n_models == SCHED_MAX_MODELS)
        return err_set(ERR_INVALID, "an engine serves at most %d models", SCHED_MAX_MODELS);
    if (e->n_models == e->cap) {
        int cap = e->cap ? 2 * e->cap : 8;
        struct emodel **m = realloc(e->models, (size_t)cap * sizeof(*m));
        if (!m)
            return err_set(ERR_NOMEM, "out of memory");
        e->models = m;
        e->cap = cap;
    }
    struct emodel *m = calloc(1, sizeof(*m));
    if (!m)
        return err_set(ERR_NOMEM, "out of memory");
    m->e = e;
    m->index = e->n_models;
    m->sm = model;
    pthread_cond_init(&m->go_cond, NULL);
    if (pthread_create(&m->tid, NULL, runner_main, m) != 0) {
        pthread_cond_destroy(&m->go_cond);
        free(m);
        return err_set(ERR_NOMEM, "cannot start the runner thread of model %s", model->name);
    }
    m->started = true;
    e->models[e->n_models++] = m;
    return m->index;
}

static int engine_start(struct engine *e)
{
    if (e->sched_started)
        return 0;
    if (pthread_create(&e->sched_tid, NULL, sched_main, e) != 0)
        return err_set(ERR_NOMEM, "cannot start the scheduler thread");
    e->sched_started = true;
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
    swap_set_listener(e->mgr, NULL, NULL);
    pthread_mutex_lock(&e->lock);
    e->stop = true;
    pthread_cond_broadcast(&e->wake);
    for (int i = 0; i < e->n_models; i++)
        pthread_cond_signal(&e->models[i]->go_cond);
    pthread_mutex_unlock(&e->lock);
    if (e->sched_started)
        pthread_join(e->sched_tid, NULL);
    for (int i = 0; i < e->n_models; i++) {
        struct emodel *m = e->models[i];
        if (m->started)
            pthread_join(m->tid, NULL);
        pthread_cond_destroy(&m->go_cond);
        free(m);
    }
    free(e->models);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->wake);
    pthread_cond_destroy(&e->idle);
    free(e->step_s);
    free(e);
}

void engine_get_stats(struct engine *e, struct engine_stats *st)
{
    pthread_mutex_lock(&e->lock);
    *st = e->stats;
    pthread_mutex_unlock(&e->lock);
}
