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
#include "core/timing.h"
#include "engine/sched.h"

#define MAX_ACTIONS 16
#define JOIN_ROOM 64 /* KV positions a batch keeps for requests joining later */

/* ---- latency histograms ---- */

#define HIST_PER_OCTAVE 8
#define HIST_BUCKETS 256 /* bucket 0: <= 1 us; bucket k: (1 us 2^((k-1)/8), 1 us 2^(k/8)] */
#define HIST_BASE 1e-6

struct hist {
    uint64_t n;
    double sum, max;
    uint32_t count[HIST_BUCKETS];
    struct engine_hist prom; /* the same observations on Prometheus's bounds */
};

const double engine_hist_le[ENGINE_HIST_LE] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                               1,     2.5,  5,     10,   30,  60,   120};

static void hist_add(struct hist *h, double x)
{
    int b = 0;
    if (x > HIST_BASE) {
        b = (int)ceil(log2(x / HIST_BASE) * HIST_PER_OCTAVE);
        b = b < 1 ? 1 : b >= HIST_BUCKETS ? HIST_BUCKETS - 1 : b;
    }
    h->count[b]++;
    h->n++;
    h->sum += x;
    h->max = x > h->max ? x : h->max;
    for (int i = 0; i < ENGINE_HIST_LE; i++)
        h->prom.le[i] += x <= engine_hist_le[i];
    h->prom.count++;
    h->prom.sum += x;
}

/* The upper edge of the bucket holding the q-quantile, capped at the max. */
static double hist_quantile(const struct hist *h, double q)
{
    uint64_t rank = (uint64_t)ceil(q * (double)h->n), seen = 0;
    rank = rank < 1 ? 1 : rank;
    for (int b = 0; b < HIST_BUCKETS; b++) {
        seen += h->count[b];
        if (seen >= rank) {
            double edge = HIST_BASE * exp2((double)b / HIST_PER_OCTAVE);
            return edge < h->max ? edge : h->max;
        }
    }
    return h->max;
}

static void hist_summary(const struct hist *h, struct engine_latency *out)
{
    memset(out, 0, sizeof(*out));
    out->n = h->n;
    if (h->n == 0)
        return;
    out->mean = h->sum / (double)h->n;
    out->p50 = hist_quantile(h, 0.50);
    out->p90 = hist_quantile(h, 0.90);
    out->p99 = hist_quantile(h, 0.99);
    out->max = h->max;
}

/* ---- state ---- */

/* A request's phase. QUEUED -> RUNNING only under the engine lock (when a
 * runner takes it), QUEUED -> DONE only under the engine lock (cancelled,
 * expired or removed in its queue); RUNNING -> CANCELLING (engine_cancel)
 * and RUNNING/CANCELLING -> DONE (its runner) by compare-and-swap. */
enum phase { PH_QUEUED, PH_RUNNING, PH_CANCELLING, PH_DONE };

struct engine_req {
    atomic_int refs;  /* the engine's (until on_done returned) + the caller's */
    atomic_int phase;
    atomic_bool stop_ok; /* PH_CANCELLING by engine_stop: it completes ok */
    struct event done; /* set once the results are final */
    struct engine *e;
    int model_id;
    struct emodel *m; /* while queued or running */
    int n_prompt, max_tokens;
    struct sampler_params sampling;
    struct sampler sampler;
    double deadline; /* INFINITY: none */
    void (*on_token)(struct engine_req *r, int32_t token, void *ctx);
    void (*on_done)(struct engine_req *r, void *ctx);
    void *ctx;
    /* results: written by the thread that completes it, before done is set */
    int n_output;
    int status;
    char error[160];
    struct engine_req_timings t;
    /* a model's queue (engine lock), then the engine's finished list */
    struct engine_req *prev, *next;
    int32_t *prompt; /* (n_prompt) into ids */
    int32_t *output; /* (max_tokens) into ids */
    int32_t ids[];   /* prompt, then output: one allocation */
};

enum admin { ADMIN_NONE, ADMIN_LOAD, ADMIN_UNLOAD };

struct emodel {
    struct engine *e;
    int id;
    struct swap_model *sm;
    struct engine_req *head, *tail; /* its queue */
    int queue_len;
    int n_running;        /* sequences in its batch */
    bool running;         /* the runner has a batch */
    bool go;              /* the scheduler dispatched a batch */
    bool offload_pending; /* chosen as a victim, or unloaded, while running */
    bool was_loading;
    bool pinned;
    bool removed;         /* engine_remove_model began: no submission, no action */
    bool stop;            /* its runner exits */
    atomic_bool removing; /* its batch's sequences leave at the next boundary */
    int users;            /* admin callers waiting on it, submissions validating against its
                           * swap_model outside the lock: neither is freed under them */
    enum admin admin;     /* an admin request for the scheduler thread */
    int admin_rc;
    char admin_msg[160];
    double last_used, loaded_at;
    struct forecast arrivals;
    /* device memory for its batches: the largest batch it may run (max_batch
     * sequences of the longest prompt and answer submitted so far), held
     * free for it while it is resident; what its batch in flight has
     * allocated of it (engine lock) */
    int max_batch; /* sequences per batch: the engine's, or less */
    int longest_prompt, longest_seq;
    bool decodes; /* some request asked for more than one token */
    bool warned_nonfinite; /* its logits were NaN or Inf once (runner thread only) */
    uint64_t reserve[SCHED_MAX_DEVICES], batch_bytes[SCHED_MAX_DEVICES];
    bool mem_wait; /* its batch did not fit at all: not served until memory is freed */
    pthread_t tid;
    bool started;
    pthread_cond_t go_cond;
    /* statistics (engine lock) */
    uint64_t loads, evictions, unloads, bytes_loaded, batches;
    uint64_t submitted, ok, failed, cancelled, timed_out, rejected;
    double load_s, compute_s;
    struct hist latency, ttft, load;
};

struct engine {
    /* every field here and in the emodels; never held across a copy or a
     * wait on the swap manager (under it, only the manager's non-waiting
     * calls: swap_load, swap_offload, swap_compact, swap_use_begin, queries);
     * engine.h says what else is never done under it */
    pthread_mutex_t lock;
    pthread_cond_t wake;   /* the scheduler's: something changed */
    pthread_cond_t idle;   /* every request completed */
    pthread_cond_t admin;  /* an admin request was carried out; a runner stopped */
    struct swap_manager *mgr;
    struct workers *w;
    const struct sched_policy *policy;
    struct engine_config cfg;
    struct emodel **models; /* (cap) by id; NULL once removed */
    int n_ids, cap, n_live;
    pthread_t sched_tid;
    bool sched_started, stop;
    uint64_t outstanding;     /* accepted requests whose on_done has not returned */
    int n_queued_deadlines;   /* queued requests with a deadline */
    struct engine_req *finished, *finished_tail; /* completed in a queue: on_done pending */
    struct engine_stats stats;
    double load_s; /* the latest load's time, for the policy's forecasts */
    double *step_s; /* [b]: a first step's time for b requests (moving average; 0: none yet) */
    double wake_at; /* a policy's SCHED_WAKE, on the time_now() clock */
    int batches_running; /* runners holding a batch's device memory */
};

/* ---- requests ---- */

static void req_unref(struct engine_req *r)
{
    if (atomic_fetch_sub(&r->refs, 1) == 1) {
        sampler_free(&r->sampler);
        event_destroy(&r->done);
        free(r);
    }
}

/* Records r's outcome in the statistics (lock held). */
static void req_account(struct engine *e, struct emodel *m, struct engine_req *r)
{
    uint64_t *by_model = NULL, *total = NULL;
    switch (r->status) {
    case 0: by_model = &m->ok, total = &e->stats.ok; break;
    case ERR_CANCELLED: by_model = &m->cancelled, total = &e->stats.cancelled; break;
    case ERR_TIMEOUT: by_model = &m->timed_out, total = &e->stats.timed_out; break;
    default: by_model = &m->failed, total = &e->stats.failed; break;
    }
    (*by_model)++;
    (*total)++;
    e->stats.completed++;
    if (r->status == 0) {
        hist_add(&m->latency, r->t.t_done - r->t.t_arrival);
        hist_add(&m->ttft, r->t.t_first_token - r->t.t_arrival);
    }
}

static void req_set_status(struct engine_req *r, int status, const char *why)
{
    r->status = status;
    if (status < 0)
        snprintf(r->error, sizeof(r->error), "%s", why);
    r->t.t_done = time_now();
}

/* The last part of a completion, on an engine thread without the lock:
 * on_done runs, then r is done for waiters (who see what on_done did), then
 * the engine lets go of it. */
static void req_complete(struct engine *e, struct engine_req *r)
{
    if (r->on_done)
        r->on_done(r, r->ctx);
    event_set(&r->done, r->status);
    pthread_mutex_lock(&e->lock);
    if (--e->outstanding == 0)
        pthread_cond_broadcast(&e->idle);
    pthread_mutex_unlock(&e->lock);
    req_unref(r);
}

/* Completes a request that ran (runner thread, no lock): a cancel that
 * raced with the completion wins. */
static void req_finish_running(struct emodel *m, struct engine_req *r, int status, const char *why)
{
    struct engine *e = m->e;
    int expect = PH_RUNNING;
    if (!atomic_compare_exchange_strong(&r->phase, &expect, PH_DONE)) {
        atomic_store(&r->phase, PH_DONE); /* it was PH_CANCELLING */
        bool ok = atomic_load(&r->stop_ok) && (status == 0 || status == ERR_CANCELLED);
        status = ok ? 0 : ERR_CANCELLED;
        why = ok ? "" : "cancelled";
    }
    req_set_status(r, status, why);
    pthread_mutex_lock(&e->lock);
    req_account(e, m, r);
    m->n_running--;
    pthread_mutex_unlock(&e->lock);
    req_complete(e, r);
}

static void queue_push(struct emodel *m, struct engine_req *r)
{
    r->prev = m->tail;
    r->next = NULL;
    if (m->tail)
        m->tail->next = r;
    else
        m->head = r;
    m->tail = r;
    m->queue_len++;
    m->e->n_queued_deadlines += !isinf(r->deadline);
}

static void queue_unlink(struct emodel *m, struct engine_req *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        m->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        m->tail = r->prev;
    r->prev = r->next = NULL;
    m->queue_len--;
    m->e->n_queued_deadlines -= !isinf(r->deadline);
}

/* Takes a queued request out of its queue with a final status and hands it
 * to the scheduler thread, which calls on_done (lock held). */
static void queue_fail(struct emodel *m, struct engine_req *r, int status, const char *why)
{
    struct engine *e = m->e;
    queue_unlink(m, r);
    atomic_store(&r->phase, PH_DONE);
    req_set_status(r, status, why);
    req_account(e, m, r);
    r->m = NULL;
    if (e->finished_tail)
        e->finished_tail->next = r;
    else
        e->finished = r;
    e->finished_tail = r;
    pthread_cond_signal(&e->wake);
}

/* The served model id (lock held); NULL when unknown or being removed. */
static struct emodel *model_get(struct engine *e, int id)
{
    if (id < 0 || id >= e->n_ids || !e->models[id] || e->models[id]->removed)
        return NULL;
    return e->models[id];
}

/* Lets go of m, which the caller pinned (users++) to read it outside the
 * lock (lock held): the last one lets engine_remove_model go on. */
static void model_unuse(struct emodel *m)
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
static struct emodel *model_named(struct engine *e, const struct engine_request_params *p)
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

/* The shape of a batch of n sequences whose longest prompt is max_prompt
 * and longest prompt + answer is seq: room for the longest sequence, plus
 * late joiners when sequences decode for more than one step; one step takes
 * at most the longest prompt per sequence. */
struct model_exec_shape engine_batch_shape(int max_pos, int n, int max_prompt, int seq,
                                         bool decodes)
{
    int max_len = seq + (decodes ? JOIN_ROOM : 0);
    if (max_len > max_pos)
        max_len = max_pos;
    return (struct model_exec_shape){.batch = n, .max_len = max_len,
                                   .max_tokens = n * max_prompt};
}

static struct model_exec_shape batch_shape(const struct swap_model *sm, int n, int max_prompt,
                                         int seq, bool decodes)
{
    return engine_batch_shape(swap_model_info(sm)->max_pos, n, max_prompt, seq, decodes);
}

/* Grows m's batch reserve for a request of n_prompt + max_tokens (lock
 * held). */
static void reserve_grow(struct engine *e, struct emodel *m, int n_prompt, int max_tokens)
{
    if (n_prompt <= m->longest_prompt && n_prompt + max_tokens <= m->longest_seq &&
        (max_tokens == 1 || m->decodes))
        return;
    m->decodes |= max_tokens > 1;
    m->longest_prompt = n_prompt > m->longest_prompt ? n_prompt : m->longest_prompt;
    if (n_prompt + max_tokens > m->longest_seq)
        m->longest_seq = n_prompt + max_tokens;
    /* the largest batch that fits beside the weights on every device of the
     * model (a batch of one, at least: capped to the room there is, so the
     * model can always be loaded and a batch that cannot fit fails with the
     * allocation's error instead of never being tried) */
    const int n_dev = swap_device_count(e->mgr);
    for (int n = m->max_batch; n >= 1; n--) {
        struct model_exec_shape shape = batch_shape(m->sm, n, m->longest_prompt, m->longest_seq,
                                                  m->decodes);
        bool fits = true;
        for (int d = 0; d < n_dev; d++) {
            uint64_t w = swap_model_device_bytes(m->sm, d),
                     budget = device_budget(swap_device(e->mgr, d));
            uint64_t b = w ? group_batch_bytes(m->sm, e->mgr, &shape, d) : 0;
            fits &= b != UINT64_MAX && w + b <= budget;
            m->reserve[d] = b == UINT64_MAX || w + b > budget ? (budget > w ? budget - w : 0) : b;
        }
        if (fits)
            break;
    }
}

/* ERR_INVALID, naming the device and the bytes, when the model's weights and
 * a batch of this one request can never fit a device of the model. */
static int request_fits_ever(struct engine *e, struct swap_model *sm, int n_prompt,
                             int max_tokens)
{
    struct model_exec_shape one = batch_shape(sm, 1, n_prompt, n_prompt + max_tokens,
                                            max_tokens > 1);
    for (int d = 0; d < swap_device_count(e->mgr); d++) {
        uint64_t w = swap_model_device_bytes(sm, d);
        if (w == 0)
            continue;
        uint64_t b = group_batch_bytes(sm, e->mgr, &one, d), budget =
                                                                  device_budget(swap_device(e->mgr, d));
        if (b == UINT64_MAX || w + b > budget)
            return err_set(ERR_INVALID, "model %s cannot run a request of %d + %d tokens on "
                                        "device %s: its weights take %llu bytes and the "
                                        "request's KV cache and activations %llu, over the "
                                        "budget of %llu",
                           swap_model_name(sm), n_prompt, max_tokens,
                           device_name(swap_device(e->mgr, d)), (unsigned long long)w,
                           (unsigned long long)b, (unsigned long long)budget);
    }
    return 0;
}

int engine_submit(struct engine *e, const struct engine_request_params *p,
                  struct engine_req **out)
{
    if (out)
        *out = NULL;
    /* validate against the model's shape outside the lock: users keeps
     * engine_remove_model (and so swap_unregister) off its swap_model
     * meanwhile */
    pthread_mutex_lock(&e->lock);
    struct emodel *m = model_named(e, p);
    struct swap_model *sm = m ? m->sm : NULL;
    if (m)
        m->users++;
    pthread_mutex_unlock(&e->lock);
    if (!sm)
        return ERR_NOT_FOUND;
    const struct model_info *c = swap_model_info(sm);
    struct engine_req *r = NULL;
    int rc = 0;
    if (p->n_prompt < 1 || p->max_tokens < 1 || !p->prompt) {
        rc = err_set(ERR_INVALID, "a request needs at least one prompt token and "
                                  "max_tokens >= 1");
        goto refuse;
    }
    if (p->n_prompt > c->max_pos || p->max_tokens > c->max_pos - p->n_prompt) {
        rc = err_set(ERR_INVALID, "prompt of %d tokens + max_tokens %d exceeds model %s's %d "
                                  "positions", p->n_prompt, p->max_tokens, swap_model_name(sm),
                     c->max_pos);
        goto refuse;
    }
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= c->vocab) {
            rc = err_set(ERR_INVALID, "prompt token %d is outside model %s's vocabulary (%d)",
                         p->prompt[i], swap_model_name(sm), c->vocab);
            goto refuse;
        }
    if ((rc = request_fits_ever(e, sm, p->n_prompt, p->max_tokens)) < 0)
        goto refuse;
    r = calloc(1, sizeof(*r) + sizeof(int32_t) * ((size_t)p->n_prompt + (size_t)p->max_tokens));
    if (!r) {
        rc = err_set(ERR_NOMEM, "out of memory for a request of %d + %d tokens", p->n_prompt,
                     p->max_tokens);
        goto refuse;
    }
    if ((rc = sampler_init(&r->sampler, &p->sampling)) < 0) {
        free(r);
        r = NULL;
        goto refuse;
    }
    event_init(&r->done);
    atomic_init(&r->refs, out ? 2 : 1);
    atomic_init(&r->phase, PH_QUEUED);
    r->e = e;
    r->n_prompt = p->n_prompt;
    r->max_tokens = p->max_tokens;
    r->sampling = p->sampling;
    r->on_token = p->on_token;
    r->on_done = p->on_done;
    r->ctx = p->ctx;
    r->prompt = r->ids;
    r->output = r->ids + p->n_prompt;
    memcpy(r->prompt, p->prompt, sizeof(int32_t) * (size_t)p->n_prompt);
    r->t.t_arrival = time_now();
    r->deadline = INFINITY;
    if (p->deadline > 0)
        r->deadline = p->deadline;
    if (p->timeout_s > 0 && r->t.t_arrival + p->timeout_s < r->deadline)
        r->deadline = r->t.t_arrival + p->timeout_s;

    pthread_mutex_lock(&e->lock);
    model_unuse(m);
    if (m->removed) { /* removal began meanwhile */
        rc = err_set(ERR_NOT_FOUND, "model %s was removed", swap_model_name(sm));
        goto fail;
    }
    if (m->queue_len >= e->cfg.queue_cap) {
        e->stats.rejected++;
        m->rejected++;
        rc = err_set(ERR_BUSY, "model %s has %d requests waiting, its queue's limit",
                     swap_model_name(sm), e->cfg.queue_cap);
        goto fail;
    }
    r->model_id = m->id;
    r->m = m;
    queue_push(m, r);
    reserve_grow(e, m, r->n_prompt, r->max_tokens);
    forecast_add(&m->arrivals, r->t.t_arrival);
    e->outstanding++;
    e->stats.submitted++;
    m->submitted++;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
    if (out)
        *out = r;
    return 0;
fail:
    pthread_mutex_unlock(&e->lock);
    sampler_free(&r->sampler);
    event_destroy(&r->done);
    free(r);
    return rc;
refuse:
    pthread_mutex_lock(&e->lock);
    model_unuse(m);
    pthread_mutex_unlock(&e->lock);
    return rc;
}

/* engine_cancel, and engine_stop when ok. */
static int req_end(struct engine *e, struct engine_req *r, bool ok)
{
    pthread_mutex_lock(&e->lock);
    int rc = 0;
    int ph = atomic_load(&r->phase);
    if (ph == PH_QUEUED) {
        queue_fail(r->m, r, ERR_CANCELLED, "cancelled");
    } else {
        if (ok && ph == PH_RUNNING)
            atomic_store(&r->stop_ok, true);
        int expect = PH_RUNNING;
        if (!atomic_compare_exchange_strong(&r->phase, &expect, PH_CANCELLING) &&
            expect != PH_CANCELLING)
            rc = err_set(ERR_INVALID, "the request has completed already; nothing to cancel");
    }
    pthread_mutex_unlock(&e->lock);
    return rc;
}

int engine_cancel(struct engine *e, struct engine_req *r)
{
    return req_end(e, r, false);
}

int engine_stop(struct engine *e, struct engine_req *r)
{
    return req_end(e, r, true);
}

void engine_req_release(struct engine_req *r)
{
    if (r)
        req_unref(r);
}

bool engine_req_done(const struct engine_req *r)
{
    return event_is_set(&r->done);
}

int engine_req_wait(struct engine_req *r)
{
    return event_wait(&r->done);
}

int engine_req_status(const struct engine_req *r)
{
    return r->status;
}

const char *engine_req_error(const struct engine_req *r)
{
    return r->error;
}

const int32_t *engine_req_output(const struct engine_req *r, int *n)
{
    *n = r->n_output;
    return r->output;
}

void *engine_req_ctx(const struct engine_req *r)
{
    return r->ctx;
}

int engine_req_model(const struct engine_req *r)
{
    return r->model_id;
}

void engine_req_timings(const struct engine_req *r, struct engine_req_timings *t)
{
    *t = r->t;
}

/* Same temperature, top-k and top-p (the seed is per request, not a batch
 * property). */
static bool same_sampling(const struct sampler_params *a, const struct sampler_params *b)
{
    return a->temperature == b->temperature && a->top_k == b->top_k && a->top_p == b->top_p;
}

/* Takes up to n requests from m's queue for its runner (lock held), by the
 * batch rule (sched_batch_joins): with same_params, stops at the first whose
 * sampling differs from the first one's (Computron). Requests already past
 * their deadline time out instead. */
static int queue_take(struct emodel *m, struct engine_req **out, int n, bool same_params)
{
    double now = time_now();
    int k = 0;
    while (m->head && k < n) {
        struct engine_req *r = m->head;
        if (r->deadline <= now) {
            queue_fail(m, r, ERR_TIMEOUT, "its deadline passed while it waited in the queue");
            continue;
        }
        if (!sched_batch_joins(same_params, k, n,
                               k == 0 || same_sampling(&r->sampling, &out[0]->sampling)))
            break;
        queue_unlink(m, r);
        atomic_store(&r->phase, PH_RUNNING);
        m->n_running++;
        out[k++] = r;
    }
    return k;
}

/* ---- a batch, on the model's runner thread ---- */

struct batch {
    struct emodel *m;
    struct group_batch *gb;
    int slots;
    uint64_t id;
    struct engine_req **req; /* (slots) NULL where free */
    int32_t *ids;            /* (slots * t) */
    uint8_t *mask;
    float *logits;           /* (slots, vocab) */
    int32_t *last;           /* (slots) the last token of each sequence */
};

/* A sequence leaves the batch: its slot and KV positions are free at once. */
static void batch_leave(struct batch *b, int s, int status, const char *why)
{
    struct engine_req *r = b->req[s];
    b->req[s] = NULL;
    group_batch_clear_slot(b->gb, s);
    req_finish_running(b->m, r, status, why);
}

/* Samples the next token of every sequence in the batch, streams it;
 * finishes those done. */
static void batch_sample(struct batch *b, double now)
{
    const struct model_info *c = swap_model_info(b->m->sm);
    for (int s = 0; s < b->slots; s++) {
        struct engine_req *r = b->req[s];
        if (!r)
            continue;
        int32_t id = sampler_pick(&r->sampler, b->logits + (size_t)s * c->vocab, c->vocab);
        if (sampler_nonfinite(&r->sampler) && !b->m->warned_nonfinite) {
            b->m->warned_nonfinite = true; /* once per model: a broken checkpoint says so */
            fprintf(stderr, "shardswap: warning: model %s produced NaN or Inf logits (batch %llu, "
                            "a sequence's token %d); its weights or activations are not finite\n",
                    swap_model_name(b->m->sm), (unsigned long long)b->id, r->n_output + 1);
        }
        if (r->n_output == 0)
            r->t.t_first_token = now;
        bool eos = model_info_is_eos(c, id);
        if (!eos) {
            r->output[r->n_output++] = id;
            if (r->on_token)
                r->on_token(r, id, r->ctx);
        }
        b->last[s] = id;
        if (eos || r->n_output >= r->max_tokens)
            batch_leave(b, s, 0, NULL);
    }
}

/* At a step boundary: cancelled sequences, those past their deadline and
 * all of a removed model's leave. */
static void batch_evict_leavers(struct batch *b, double now)
{
    bool removing = atomic_load(&b->m->removing);
    for (int s = 0; s < b->slots; s++) {
        struct engine_req *r = b->req[s];
        if (!r)
            continue;
        char why[160];
        if (atomic_load(&r->phase) == PH_CANCELLING) {
            batch_leave(b, s, atomic_load(&r->stop_ok) ? 0 : ERR_CANCELLED, "cancelled");
        } else if (removing) {
            snprintf(why, sizeof(why), "model %s was removed", swap_model_name(b->m->sm));
            batch_leave(b, s, ERR_NOT_FOUND, why);
        } else if (r->deadline <= now) {
            snprintf(why, sizeof(why), "its deadline passed after %d of %d tokens", r->n_output,
                     r->max_tokens);
            batch_leave(b, s, ERR_TIMEOUT, why);
        }
    }
}

/* One forward of the batch: new requests' prompts (left-padded to t), one
 * token for running sequences, nothing for free slots. */
static int batch_step(struct batch *b, struct engine_req **joining, int n_join, int t)
{
    struct engine *e = b->m->e;
    memset(b->mask, 0, (size_t)b->slots * t);
    for (int i = 0; i < b->slots * t; i++)
        b->ids[i] = swap_model_info(b->m->sm)->pad_id >= 0 ? swap_model_info(b->m->sm)->pad_id : 0;
    for (int s = 0; s < b->slots; s++)
        if (b->req[s]) {
            b->ids[s * t + t - 1] = b->last[s];
            b->mask[s * t + t - 1] = 1;
        }
    for (int j = 0; j < n_join; j++) {
        struct engine_req *r = joining[j];
        int s = r->t.slot;
        group_batch_clear_slot(b->gb, s);
        for (int i = 0; i < r->n_prompt; i++) {
            b->ids[s * t + t - r->n_prompt + i] = r->prompt[i];
            b->mask[s * t + t - r->n_prompt + i] = 1;
        }
        b->req[s] = r;
    }
    return group_forward(e->w, b->gb, b->ids, b->mask, t, false, true, b->logits);
}

/* Adds the batch's time since *mark to the time computing (before
 * completions, so a request's waiter sees its batch's time counted). */
static void batch_accrue(struct batch *b, double *mark)
{
    struct engine *e = b->m->e;
    double now = time_now();
    pthread_mutex_lock(&e->lock);
    e->stats.compute_s += now - *mark;
    b->m->compute_s += now - *mark;
    pthread_mutex_unlock(&e->lock);
    *mark = now;
}

/* Fails every request in the batch with a forward's error. The batch's state
 * is lost with it (group_batch_failed: its KV caches are out of step and its
 * groups and channels aborted), so the caller ends the batch. err_msg() is
 * this runner's own: group_forward raises a failed shard's message again on
 * its caller's thread. */
static void batch_fail(struct batch *b, int rc)
{
    char why[160];
    snprintf(why, sizeof(why), "%s", err_msg());
    for (int s = 0; s < b->slots; s++)
        if (b->req[s])
            batch_leave(b, s, rc, why);
}

/* Device memory may have been freed: models waiting for it may try again
 * (lock held). */
static void mem_wait_clear(struct engine *e)
{
    for (int id = 0; id < e->n_ids; id++)
        if (e->models[id])
            e->models[id]->mem_wait = false;
}

/* Hands requests a runner took back to the head of m's queue, in their
 * order (lock held): they keep their place. One cancelled meanwhile is not
 * queued again: it goes to *cancelled, for the caller to finish. */
static void queue_give_back(struct emodel *m, struct engine_req **r, int n,
                            struct engine_req **cancelled, int *n_cancelled)
{
    for (int i = n - 1; i >= 0; i--) {
        int expect = PH_RUNNING;
        if (!atomic_compare_exchange_strong(&r[i]->phase, &expect, PH_QUEUED)) {
            cancelled[(*n_cancelled)++] = r[i];
            continue;
        }
        m->n_running--;
        r[i]->prev = NULL;
        r[i]->next = m->head;
        if (m->head)
            m->head->prev = r[i];
        else
            m->tail = r[i];
        m->head = r[i];
        m->queue_len++;
        m->e->n_queued_deadlines += !isinf(r[i]->deadline);
    }
}

/* The device memory of a batch of the first n requests, made smaller until
 * it fits: a batch that does not fit is halved, the later half going back
 * to the head of the queue. Allocated under the lock, so the scheduler's
 * view of free memory and the held reserves change together (an allocation
 * is no copy and no wait). A single request that does not fit waits for
 * memory to be freed (given back, the model not served until a batch ends
 * or a swap completes) when anything is running or moving; when nothing is,
 * nothing would free it, and it fails with the allocation's error.
 * Returns the size of the batch (0: nothing to run). */
static int batch_alloc(struct emodel *m, struct engine_req **first, int n,
                       struct group_batch **gb, int *max_prompt)
{
    struct engine *e = m->e;
    struct engine_req *cancelled[n];
    int n_cancelled = 0, rc = 0;
    char why[160] = "";
    for (;;) {
        int seq = 0;
        bool decodes = false;
        *max_prompt = 0;
        for (int i = 0; i < n; i++) {
            *max_prompt = first[i]->n_prompt > *max_prompt ? first[i]->n_prompt : *max_prompt;
            if (first[i]->n_prompt + first[i]->max_tokens > seq)
                seq = first[i]->n_prompt + first[i]->max_tokens;
            decodes |= first[i]->max_tokens > 1;
        }
        struct model_exec_shape shape = batch_shape(m->sm, n, *max_prompt, seq, decodes);
        pthread_mutex_lock(&e->lock);
        rc = group_batch_create(e->mgr, m->sm, &shape, gb);
        if (rc == 0) {
            for (int d = 0; d < swap_device_count(e->mgr); d++)
                m->batch_bytes[d] = group_batch_bytes(m->sm, e->mgr, &shape, d);
            e->batches_running++;
            pthread_mutex_unlock(&e->lock);
            break;
        }
        snprintf(why, sizeof(why), "%s", err_msg());
        bool others = e->batches_running > 0;
        for (int id = 0; !others && id < e->n_ids; id++) {
            enum residency r = e->models[id] ? swap_residency(e->mgr, e->models[id]->sm)
                                             : RES_ON_DISK;
            others = r == RES_LOADING || r == RES_OFFLOADING;
        }
        /* halve and try again; a single request waits when something
         * running or moving may free memory, else fails */
        bool retry = false;
        if (rc == ERR_NOMEM && n > 1) {
            queue_give_back(m, first + n / 2, n - n / 2, cancelled, &n_cancelled);
            n /= 2;
            retry = true;
        } else if (rc == ERR_NOMEM && others) {
            queue_give_back(m, first, n, cancelled, &n_cancelled);
            m->mem_wait = true;
            n = 0;
        }
        pthread_mutex_unlock(&e->lock);
        if (!retry)
            break;
    }
    for (int i = 0; i < n_cancelled; i++)
        req_finish_running(m, cancelled[i], ERR_CANCELLED, "cancelled");
    if (rc < 0 && n > 0) {
        for (int i = 0; i < n; i++)
            req_finish_running(m, first[i], rc, why);
        n = 0;
    }
    return n;
}

/* Frees the batch's device memory (see batch_alloc for the lock). */
static void batch_release(struct emodel *m, struct group_batch *gb)
{
    struct engine *e = m->e;
    if (!gb)
        return;
    pthread_mutex_lock(&e->lock);
    group_batch_free(gb);
    memset(m->batch_bytes, 0, sizeof(m->batch_bytes));
    e->batches_running--;
    pthread_mutex_unlock(&e->lock);
}

static void batch_run(struct emodel *m, struct engine_req **first, int n_first)
{
    struct engine *e = m->e;
    const struct model_info *c = swap_model_info(m->sm);
    double mark = time_now(); /* time computing counted up to here */
    int max_prompt;
    struct group_batch *gb = NULL;
    if ((n_first = batch_alloc(m, first, n_first, &gb, &max_prompt)) == 0)
        return;
    struct batch b = {.m = m, .slots = n_first, .gb = gb};
    int max_len = group_batch_room(gb);
    b.req = calloc((size_t)n_first, sizeof(*b.req));
    b.ids = malloc((size_t)n_first * max_len * sizeof(int32_t));
    b.mask = malloc((size_t)n_first * max_len);
    b.logits = malloc((size_t)n_first * c->vocab * sizeof(float));
    b.last = calloc((size_t)n_first, sizeof(int32_t));
    int rc = 0;
    if (!b.req || !b.ids || !b.mask || !b.logits || !b.last)
        rc = err_set(ERR_NOMEM, "out of host memory for a batch of %d", n_first);
    pthread_mutex_lock(&e->lock);
    b.id = ++e->stats.batches;
    m->batches++;
    pthread_mutex_unlock(&e->lock);
    double now = time_now();
    for (int i = 0; i < n_first; i++) {
        first[i]->t.slot = i;
        first[i]->t.t_start = now;
        first[i]->t.batch_size = n_first;
        first[i]->t.batch_id = b.id;
    }
    if (rc < 0) {
        char why[160];
        snprintf(why, sizeof(why), "%s", err_msg());
        batch_accrue(&b, &mark);
        for (int i = 0; i < n_first; i++)
            req_finish_running(m, first[i], rc, why);
        goto out;
    }
    /* prefill, then one token per step; waiting requests join freed slots */
    bool loaded = swap_residency(e->mgr, m->sm) == RES_ON_DEVICE; /* no layer still arriving */
    double t_step = time_now();
    rc = batch_step(&b, first, n_first, max_prompt);
    batch_accrue(&b, &mark);
    if (rc < 0) {
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
        batch_evict_leavers(&b, time_now());
        int active = 0, free_slots = 0;
        for (int s = 0; s < b.slots; s++)
            active += b.req[s] != NULL;
        free_slots = b.slots - active;
        struct engine_req *join[64];
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
            while (m->head && n_join < free_slots && n_join < 64 && !m->offload_pending &&
                   !m->removed) {
                struct engine_req *r = m->head;
                int t_new = r->n_prompt > t ? r->n_prompt : t;
                int need_new = r->max_tokens > need ? r->max_tokens : need;
                if (t_new - 1 + need_new > room || t_new > group_batch_max_step(b.gb))
                    break;
                if (queue_take(m, &join[n_join], 1, false) == 0)
                    continue; /* it had timed out */
                n_join++;
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
            join[j]->t.slot = s_free++;
            join[j]->t.t_start = now;
            join[j]->t.batch_size = active + n_join;
            join[j]->t.batch_id = b.id;
        }
        rc = batch_step(&b, join, n_join, t);
        batch_accrue(&b, &mark);
        if (rc < 0) {
            batch_fail(&b, rc);
            break;
        }
        batch_sample(&b, time_now());
    }
out:
    batch_release(m, b.gb);
    free(b.req);
    free(b.ids);
    free(b.mask);
    free(b.logits);
    free(b.last);
    batch_accrue(&b, &mark);
}

static void *runner_main(void *arg)
{
    struct emodel *m = arg;
    struct engine *e = m->e;
    struct engine_req **first = malloc((size_t)e->cfg.max_batch * sizeof(*first));
    pthread_mutex_lock(&e->lock);
    for (;;) {
        while (!m->go && !m->stop && !e->stop)
            pthread_cond_wait(&m->go_cond, &e->lock);
        if (!m->go)
            break;
        m->go = false;
        int n = first && !m->removed
                    ? queue_take(m, first, m->max_batch, e->policy->batch_same_params_only)
                    : 0;
        pthread_mutex_unlock(&e->lock);
        if (n > 0)
            batch_run(m, first, n); /* counts its time computing as it goes */
        swap_use_end(e->mgr, m->sm);
        pthread_mutex_lock(&e->lock);
        m->running = false;
        m->offload_pending = false; /* swap_use_end carried out a deferred offload */
        if (n > 0)
            mem_wait_clear(e); /* its batch's memory is free again */
        pthread_cond_signal(&e->wake);
        pthread_cond_broadcast(&e->admin);
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

/* Notes a load that finished since the last look (lock held). */
static void load_check(struct engine *e, struct emodel *m, bool loading)
{
    if (m->was_loading && !loading) {
        m->was_loading = false;
        e->load_s = swap_model_load_seconds(e->mgr, m->sm);
        e->stats.swap_s += e->load_s;
        m->load_s += e->load_s;
        hist_add(&m->load, e->load_s);
        /* a failed load (a checkpoint truncated while served, ...) leaves the
         * devices again: the requests that waited for it fail with its
         * message rather than start another load that fails the same way.
         * A later request tries again. */
        char why[320];
        int code = swap_model_load_error(e->mgr, m->sm, why, sizeof(why));
        if (code < 0)
            while (m->head)
                queue_fail(m, m->head, code, why);
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
        load_check(e, m, r == RES_LOADING); /* a failed load empties the queue */
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
            sm[i].bytes[d] =
                swap_model_device_bytes(m->sm, d) +
                (m->reserve[d] > m->batch_bytes[d] ? m->reserve[d] : m->batch_bytes[d]);
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
        if (e->finished) /* a failed load failed its queue (load_check) */
            continue;
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
    hist_summary(&m->latency, &out->latency);
    hist_summary(&m->ttft, &out->ttft);
    out->latency_hist = m->latency.prom;
    out->ttft_hist = m->ttft.prom;
    out->load_hist = m->load.prom;
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
