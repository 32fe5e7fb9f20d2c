/* The batch runner: one thread per model running its batches on the device
 * workers (prefill, then one step per token), sampling, EOS, streaming
 * (on_token), continuous batching (sequences leave at step boundaries,
 * queued requests join their slots), and token-level preemption (a batch
 * asked to pause stops at a step boundary and is held, its KV caches on
 * their devices, until a SCHED_SERVE resumes it). */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/timing.h"
#include "engine/engine_impl.h"

#define MAX_JOIN 64 /* requests joining a batch at one step */

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

/* The batch's host buffers (sized for its room), its number, and its first
 * requests' timings; ERR_NOMEM when a buffer could not be had (the batch is
 * numbered and its requests stamped all the same). */
static int batch_open(struct batch *b, struct engine_req **first)
{
    struct engine *e = b->m->e;
    const struct model_info *c = swap_model_info(b->m->sm);
    int n = b->slots, max_len = group_batch_room(b->gb);
    b->req = calloc((size_t)n, sizeof(*b->req));
    b->ids = malloc((size_t)n * max_len * sizeof(int32_t));
    b->mask = malloc((size_t)n * max_len);
    b->logits = malloc((size_t)n * c->vocab * sizeof(float));
    b->last = calloc((size_t)n, sizeof(int32_t));
    int rc = 0;
    if (!b->req || !b->ids || !b->mask || !b->logits || !b->last)
        rc = err_set(ERR_NOMEM, "out of host memory for a batch of %d", n);
    pthread_mutex_lock(&e->lock);
    b->id = ++e->stats.batches;
    b->m->batches++;
    pthread_mutex_unlock(&e->lock);
    double now = time_now();
    for (int i = 0; i < n; i++) {
        first[i]->t.slot = i;
        first[i]->t.t_start = now;
        first[i]->t.batch_size = n;
        first[i]->t.batch_id = b->id;
    }
    return rc;
}

/* The first step: every first request's prompt (left-padded to max_prompt),
 * timed for the policy's estimates when no layer was still arriving; then
 * their first tokens. A failed forward fails the batch. */
static int batch_prefill(struct batch *b, struct engine_req **first, int max_prompt, double *mark)
{
    struct engine *e = b->m->e;
    bool loaded = swap_residency(e->mgr, b->m->sm) == RES_ON_DEVICE; /* no layer still arriving */
    double t_step = time_now();
    int rc = batch_step(b, first, b->slots, max_prompt);
    batch_accrue(b, mark);
    if (rc < 0) {
        batch_fail(b, rc);
        return rc;
    }
    if (loaded) {
        double dt = time_now() - t_step, *est = &e->step_s[b->slots];
        pthread_mutex_lock(&e->lock);
        *est = *est > 0 ? 0.7 * *est + 0.3 * dt : dt;
        pthread_mutex_unlock(&e->lock);
    }
    batch_sample(b, time_now());
    return 0;
}

/* Takes waiting requests of the model for up to free_slots free slots (the
 * lock taken here), while they fit: a join step is *t positions long (the
 * longest joining prompt); after it everybody must still fit their
 * remaining tokens. None with batch_same_params_only, none once the model
 * is to be offloaded or removed. Returns how many are in join[]. */
static int batch_take_joiners(struct batch *b, int free_slots, struct engine_req **join, int *t)
{
    struct emodel *m = b->m;
    struct engine *e = m->e;
    int n_join = 0;
    *t = 1;
    /* positions every running sequence still needs */
    int need = 1;
    for (int s = 0; s < b->slots; s++)
        if (b->req[s] && b->req[s]->max_tokens - b->req[s]->n_output > need)
            need = b->req[s]->max_tokens - b->req[s]->n_output;
    if (free_slots == 0 || e->policy->batch_same_params_only)
        return 0;
    int room = group_batch_room(b->gb);
    pthread_mutex_lock(&e->lock);
    while (m->head && n_join < free_slots && n_join < MAX_JOIN && !m->offload_pending &&
           !m->removed && !atomic_load(&m->pause)) {
        struct engine_req *r = m->head;
        int t_new = r->n_prompt > *t ? r->n_prompt : *t;
        int need_new = r->max_tokens > need ? r->max_tokens : need;
        if (t_new - 1 + need_new > room || t_new > group_batch_max_step(b->gb))
            break;
        if (queue_take(m, &join[n_join], 1, false) == 0)
            continue; /* it had timed out */
        n_join++;
        *t = t_new;
        need = need_new;
    }
    pthread_mutex_unlock(&e->lock);
    return n_join;
}

enum step { STEP_MORE, STEP_OVER, STEP_PAUSED };

/* A step boundary after the first step: leavers leave; a batch asked to
 * pause (SCHED_PREEMPT) with sequences left stops here, before anything
 * joins; else waiting requests join the free slots, then one step (their
 * prompts, one token for the others) and its tokens. STEP_OVER when the
 * batch is over: no sequence left, or a failed forward (which failed the
 * batch). The KV caches hold every position up to here, and b->last each
 * sequence's next input, so a paused batch resumes here as if never paused. */
static enum step batch_next_step(struct batch *b, double *mark)
{
    batch_evict_leavers(b, time_now());
    int active = 0;
    for (int s = 0; s < b->slots; s++)
        active += b->req[s] != NULL;
    if (active > 0 && atomic_load(&b->m->pause))
        return STEP_PAUSED;
    struct engine_req *join[MAX_JOIN];
    int t;
    int n_join = batch_take_joiners(b, b->slots - active, join, &t);
    if (active == 0 && n_join == 0)
        return STEP_OVER;
    int s_free = 0;
    double now = time_now();
    for (int j = 0; j < n_join; j++) {
        while (b->req[s_free])
            s_free++;
        join[j]->t.slot = s_free++;
        join[j]->t.t_start = now;
        join[j]->t.batch_size = active + n_join;
        join[j]->t.batch_id = b->id;
    }
    int rc = batch_step(b, join, n_join, t);
    batch_accrue(b, mark);
    if (rc < 0) {
        batch_fail(b, rc);
        return STEP_OVER;
    }
    batch_sample(b, time_now());
    return STEP_MORE;
}

/* Frees the batch's device memory and host buffers, then counts its last
 * time computing. */
static void batch_close(struct batch *b, double *mark)
{
    batch_release(b->m, b->gb);
    free(b->req);
    free(b->ids);
    free(b->mask);
    free(b->logits);
    free(b->last);
    batch_accrue(b, mark);
}

/* Steps the batch until it is over (then closed) or paused (then held in
 * m->held, its device memory kept: a later batch_resume goes on from the
 * step boundary where it stopped). Runner thread, no lock. */
static void batch_continue(struct batch *b, double *mark)
{
    enum step st;
    while ((st = batch_next_step(b, mark)) == STEP_MORE)
        ;
    if (st == STEP_PAUSED && (b->m->held = malloc(sizeof(*b))) != NULL) {
        *b->m->held = *b;
        batch_accrue(b, mark);
        return;
    }
    /* no host memory to hold it: it runs on instead, a pause asked for
     * again declined the same way (else every boundary would stop here) */
    while (st == STEP_PAUSED) {
        atomic_store(&b->m->pause, false);
        while ((st = batch_next_step(b, mark)) == STEP_MORE)
            ;
    }
    batch_close(b, mark);
}

/* Goes on with m's paused batch from where it stopped (runner thread, no
 * lock): its KV caches never left their devices; the weights may have been
 * offloaded and loaded again meanwhile, which a forward waits for blob by
 * blob. */
static void batch_resume(struct emodel *m)
{
    struct batch b = *m->held;
    free(m->held);
    m->held = NULL;
    double mark = time_now();
    batch_continue(&b, &mark);
}

/* The paused batch of a model removed or stopped: its sequences leave (as
 * removed, or cancelled when the engine stops with them still paused) and
 * its memory is freed (runner thread, no lock). */
static void batch_drop_held(struct emodel *m)
{
    struct batch b = *m->held;
    free(m->held);
    m->held = NULL;
    double mark = time_now();
    batch_evict_leavers(&b, mark);
    for (int s = 0; s < b.slots; s++)
        if (b.req[s])
            batch_leave(&b, s, ERR_CANCELLED, "the engine stopped while its batch was paused");
    batch_close(&b, &mark);
}

/* Runs a batch of the first n_first requests taken from m's queue to its
 * end or its pause: allocated (maybe smaller: batch_alloc), prefilled, then
 * one token per step while waiting requests join freed slots (runner
 * thread, no lock). */
static void batch_run(struct emodel *m, struct engine_req **first, int n_first)
{
    double mark = time_now(); /* time computing counted up to here */
    int max_prompt;
    struct group_batch *gb = NULL;
    if ((n_first = batch_alloc(m, first, n_first, &gb, &max_prompt)) == 0)
        return;
    struct batch b = {.m = m, .slots = n_first, .gb = gb};
    int rc = batch_open(&b, first);
    if (rc < 0) {
        char why[160];
        snprintf(why, sizeof(why), "%s", err_msg());
        batch_accrue(&b, &mark);
        for (int i = 0; i < n_first; i++)
            req_finish_running(m, first[i], rc, why);
    } else if (batch_prefill(&b, first, max_prompt, &mark) == 0) {
        batch_continue(&b, &mark);
        return;
    }
    batch_close(&b, &mark);
}

void *runner_main(void *arg)
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
        bool resume = m->held != NULL;
        int n = first && !m->removed && !resume
                    ? queue_take(m, first, m->max_batch, e->policy->batch_same_params_only)
                    : 0;
        m->n_paused = 0; /* its sequences are in flight again */
        pthread_mutex_unlock(&e->lock);
        if (resume)
            batch_resume(m);
        else if (n > 0)
            batch_run(m, first, n); /* counts its time computing as it goes */
        /* a batch held now keeps its device memory; its weights may leave:
         * swap_use_end carries out an offload deferred to its pause */
        swap_use_end(e->mgr, m->sm);
        pthread_mutex_lock(&e->lock);
        m->running = false;
        atomic_store(&m->pause, false);
        if (m->held) {
            m->paused_arrival = INFINITY;
            for (int s = 0; s < m->held->slots; s++) {
                const struct engine_req *r = m->held->req[s];
                m->n_paused += r != NULL;
                if (r && r->t.t_arrival < m->paused_arrival)
                    m->paused_arrival = r->t.t_arrival;
            }
            m->preemptions++;
            m->batch_start = time_now(); /* its sequences wait from here */
        } else {
            m->idle_since = time_now(); /* a keep-alive counts from here */
        }
        m->offload_pending = false; /* swap_use_end carried out a deferred offload */
        if ((n > 0 || resume) && !m->held)
            mem_wait_clear(e); /* its batch's memory is free again */
        pthread_cond_signal(&e->wake);
        pthread_cond_broadcast(&e->admin);
        pthread_cond_broadcast(&e->idle); /* engine_drain waits for the batch's end too */
    }
    m->n_paused = 0;
    pthread_mutex_unlock(&e->lock);
    if (m->held) /* removed (or the engine stopped) while paused */
        batch_drop_held(m);
    free(first);
    return NULL;
}
