/* Request handles: submission (validation, the handle, its queue), the
 * reference count and phase changes, completion, cancel and stop, and the
 * accessors. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/event.h"
#include "core/timing.h"
#include "engine/engine_impl.h"

static void req_unref(struct engine_req *r)
{
    if (atomic_fetch_sub(&r->refs, 1) == 1) {
        sampler_free(&r->sampler);
        event_destroy(&r->done);
        free(r);
    }
}

/* Records r's outcome in the statistics (lock held). */
void req_account(struct engine *e, struct engine_model *m, struct engine_req *r)
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

void req_set_status(struct engine_req *r, int status, const char *why)
{
    r->status = status;
    if (status < 0)
        snprintf(r->error, sizeof(r->error), "%s", why);
    r->t.t_done = time_now();
}

/* The last part of a completion, on an engine thread without the lock:
 * on_done runs, then r is done for waiters (who see what on_done did), then
 * the engine lets go of it. */
void req_complete(struct engine *e, struct engine_req *r)
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
void req_finish_running(struct engine_model *m, struct engine_req *r, int status, const char *why)
{
    struct engine *e = m->e;
    /* its own model's (an adapter's, running in its base m's batch): set
     * when it was queued, and fixed while it runs */
    m = r->m;
    adapter_unuse(m);
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

/* The request's checks against its model's shape (no lock: the caller
 * holds the model in use). */
static int submit_check(struct engine *e, struct swap_model *sm,
                        const struct engine_request_params *p)
{
    const struct model_info *c = swap_model_info(sm);
    if (p->n_prompt < 1 || p->max_tokens < 1 || !p->prompt)
        return err_set(ERR_INVALID, "a request needs at least one prompt token and "
                                    "max_tokens >= 1");
    if (p->n_prompt > c->max_pos || p->max_tokens > c->max_pos - p->n_prompt)
        return err_set(ERR_INVALID, "prompt of %d tokens + max_tokens %d exceeds model %s's %d "
                                    "positions", p->n_prompt, p->max_tokens, swap_model_name(sm),
                       c->max_pos);
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= c->vocab)
            return err_set(ERR_INVALID, "prompt token %d is outside model %s's vocabulary (%d)",
                           p->prompt[i], swap_model_name(sm), c->vocab);
    return request_fits_ever(e, sm, p->n_prompt, p->max_tokens);
}

/* A new handle for p with refs references: its prompt copied, its deadline
 * set, PH_QUEUED, in no queue yet (no lock). */
static int req_new(struct engine *e, const struct engine_request_params *p, int refs,
                   struct engine_req **out)
{
    struct engine_req *r =
        calloc(1, sizeof(*r) + sizeof(int32_t) * ((size_t)p->n_prompt + (size_t)p->max_tokens));
    if (!r)
        return err_set(ERR_NOMEM, "out of memory for a request of %d + %d tokens", p->n_prompt,
                       p->max_tokens);
    int rc = sampler_init(&r->sampler, &p->sampling);
    if (rc < 0) {
        free(r);
        return rc;
    }
    event_init(&r->done);
    atomic_init(&r->refs, refs);
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
    *out = r;
    return 0;
}

/* Frees a handle req_new made that was never queued. */
static void req_free_unqueued(struct engine_req *r)
{
    sampler_free(&r->sampler);
    event_destroy(&r->done);
    free(r);
}

/* Queues r on m, dropping the caller's users++ on m (lock held): refused
 * when m was removed meanwhile or its queue is full. */
static int submit_enqueue(struct engine *e, struct engine_model *m, struct engine_req *r)
{
    model_unuse(m);
    if (m->removed) /* removal began meanwhile */
        return err_set(ERR_NOT_FOUND, "model %s was removed", swap_model_name(m->sm));
    if (m->queue_len >= e->cfg.queue_cap) {
        e->stats.rejected++;
        m->rejected++;
        return err_set(ERR_BUSY, "model %s has %d requests waiting, its queue's limit",
                       swap_model_name(m->sm), e->cfg.queue_cap);
    }
    r->model_id = m->id;
    r->m = m;
    queue_push(m, r);
    reserve_grow(e, m->base ? m->base : m, r->n_prompt, r->max_tokens);
    forecast_add(&m->arrivals, r->t.t_arrival);
    e->outstanding++;
    e->stats.submitted++;
    m->submitted++;
    pthread_cond_signal(&e->wake);
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
    struct engine_model *m = model_named(e, p);
    /* an adapter's request runs in its base's batch: checked against it */
    struct swap_model *sm = m ? (m->base ? m->base->sm : m->sm) : NULL;
    if (m)
        m->users++;
    pthread_mutex_unlock(&e->lock);
    if (!sm)
        return ERR_NOT_FOUND;
    struct engine_req *r = NULL;
    int rc = submit_check(e, sm, p);
    if (rc == 0)
        rc = req_new(e, p, out ? 2 : 1, &r);
    if (rc < 0) {
        pthread_mutex_lock(&e->lock);
        model_unuse(m);
        pthread_mutex_unlock(&e->lock);
        return rc;
    }
    pthread_mutex_lock(&e->lock);
    rc = submit_enqueue(e, m, r);
    pthread_mutex_unlock(&e->lock);
    if (rc < 0) {
        req_free_unqueued(r);
        return rc;
    }
    if (out)
        *out = r;
    return 0;
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
