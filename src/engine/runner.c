/* The batch runner: a model's batches run on the device workers (prefill,
 * then one step per token), sampling, EOS, streaming (on_token), continuous
 * batching (sequences leave at step boundaries, queued requests join their
 * slots), and token-level preemption (a batch asked to pause stops at a
 * step boundary and is held, its KV caches on their devices, until a
 * SCHED_SERVE resumes it).
 *
 * No model owns a thread: a serve posts the model's task to the engine's
 * runner pool (core/workq.h), and each step of its batch is a task of its
 * own, posted behind the others' (runner_run). The pool has one thread per
 * device and one more: a step runs on all its model's devices at once
 * through the device workers, so more runners at once than devices gain
 * nothing; the one more does a step's host work (sampling, streaming,
 * taking joiners, allocating a batch) while the devices compute others'.
 * No task waits for another runner's task: a forward waits only for steps
 * queued before it on the device workers (each sent whole, in one order:
 * workers.h) and for its own model's load, which the loaders carry out; so
 * any pool size is free of deadlock, and taking turns step by step keeps
 * every model served at once moving. A paused batch gives its thread back
 * at once; it waits in the model's runner state for its resume. Under
 * mpirun the models with shards on other processes take turns on pools of
 * their own (runners_apart), one per set of other processes they span: a
 * step of theirs may wait on a silent process until its heartbeats time
 * out, holding its thread, and so many of those at once would otherwise
 * hold up the steps of every model that has no shard on that process. */
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
#include "core/timing.h"
#include "engine/engine_impl.h"

#define MAX_JOIN 64 /* requests joining a batch at one step */

struct batch {
    struct engine_model *m;
    struct group_exec *gb;
    int slots;
    uint64_t id;
    struct engine_req **req; /* (slots) NULL where free */
    struct swap_model **adapters; /* (slots) each sequence's adapter (NULL: the base alone) */
    int32_t *ids;            /* (slots * t) */
    uint8_t *mask;
    float *logits;           /* (slots, vocab) */
    int32_t *last;           /* (slots) the last token of each sequence */
    /* for a model with experts: the router's counts of its contexts as last
     * added to the model's (group_exec_routed), and a buffer to read them
     * into, (n_layers, experts) each; NULL when the model has none, or
     * when the host memory could not be had (its steps go uncounted) */
    uint64_t *routed_seen, *routed_now;
    size_t n_routed;
};

/* A sequence leaves the batch: its slot and KV positions are free at once. */
static void batch_leave(struct batch *b, int s, int status, const char *why)
{
    struct engine_req *r = b->req[s];
    b->req[s] = NULL;
    group_exec_clear_slot(b->gb, s);
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
    for (int s = 0; s < b->slots; s++) {
        struct engine_req *r = b->req[s];
        if (!r)
            continue;
        /* the batch's model, or the sequence's adapter, is being removed */
        bool removing = atomic_load(&b->m->removing) || atomic_load(&r->m->removing);
        char why[160];
        if (atomic_load(&r->phase) == PH_CANCELLING) {
            batch_leave(b, s, atomic_load(&r->stop_ok) ? 0 : ERR_CANCELLED, "cancelled");
        } else if (removing) {
            snprintf(why, sizeof(why), "model %s was removed",
                     swap_model_name(atomic_load(&r->m->removing) ? r->m->sm : b->m->sm));
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
        group_exec_clear_slot(b->gb, s);
        for (int i = 0; i < r->n_prompt; i++) {
            b->ids[s * t + t - r->n_prompt + i] = r->prompt[i];
            b->mask[s * t + t - r->n_prompt + i] = 1;
        }
        b->req[s] = r;
    }
    if (group_exec_lora_rank(b->gb) > 0) { /* each sequence's adapter, for this step */
        for (int s = 0; s < b->slots; s++)
            b->adapters[s] = b->req[s] && b->req[s]->m->base ? b->req[s]->m->sm : NULL;
        int rc = group_exec_set_adapters(b->gb, b->adapters);
        if (rc < 0)
            return rc;
    }
    return group_forward(e->w, b->gb, b->ids, b->mask, t, false, true, b->logits);
}

/* Adds the batch's time since *mark to the time computing (before
 * completions, so a request's waiter sees its batch's time counted). */
static void batch_accrue(struct batch *b, double *mark)
{
    struct engine *e = b->m->e;
    double now = time_now();
    if (b->routed_now)
        group_exec_routed(b->gb, b->routed_now);
    pthread_mutex_lock(&e->lock);
    e->stats.compute_s += now - *mark;
    b->m->compute_s += now - *mark;
    if (b->routed_now) /* what the steps since the last accrual routed */
        for (size_t i = 0; i < b->n_routed; i++) {
            b->m->expert_tokens[i] += b->routed_now[i] - b->routed_seen[i];
            b->routed_seen[i] = b->routed_now[i];
        }
    pthread_mutex_unlock(&e->lock);
    *mark = now;
}

/* The batch's router counters, for a model with experts: its buffers and,
 * at its first such batch, the model's totals (the runner is their only
 * writer; the engine lock guards them for readers). Without the host
 * memory, the batch's steps go uncounted. */
static void batch_routed_open(struct batch *b)
{
    struct engine_model *m = b->m;
    const int experts = group_exec_routed(b->gb, NULL);
    const int layers = swap_model_info(m->sm)->n_layers;
    b->n_routed = (size_t)layers * experts;
    if (!b->n_routed)
        return;
    b->routed_seen = calloc(b->n_routed, sizeof(uint64_t));
    b->routed_now = calloc(b->n_routed, sizeof(uint64_t));
    pthread_mutex_lock(&m->e->lock);
    bool have = m->expert_tokens != NULL;
    pthread_mutex_unlock(&m->e->lock);
    uint64_t *totals = have ? NULL : calloc(b->n_routed, sizeof(uint64_t));
    pthread_mutex_lock(&m->e->lock);
    if (totals) {
        m->expert_tokens = totals;
        m->expert_layers = layers;
        m->experts = experts;
    }
    have = m->expert_tokens && m->expert_layers == layers && m->experts == experts;
    pthread_mutex_unlock(&m->e->lock);
    if (!have || !b->routed_seen || !b->routed_now) {
        free(b->routed_seen);
        free(b->routed_now);
        b->routed_seen = b->routed_now = NULL;
    }
}

/* Fails every request in the batch with a forward's error. The batch's state
 * is lost with it (group_exec_failed: its KV caches are out of step and its
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
    int n = b->slots, max_len = group_exec_room(b->gb);
    b->req = calloc((size_t)n, sizeof(*b->req));
    b->adapters = calloc((size_t)n, sizeof(*b->adapters));
    b->ids = malloc((size_t)n * max_len * sizeof(int32_t));
    b->mask = malloc((size_t)n * max_len);
    b->logits = malloc((size_t)n * c->vocab * sizeof(float));
    b->last = calloc((size_t)n, sizeof(int32_t));
    int rc = 0;
    if (!b->req || !b->adapters || !b->ids || !b->mask || !b->logits || !b->last)
        rc = err_set(ERR_NOMEM, "out of host memory for a batch of %d", n);
    batch_routed_open(b);
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
    struct engine_model *m = b->m;
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
    int room = group_exec_room(b->gb), rank = group_exec_lora_rank(b->gb);
    pthread_mutex_lock(&e->lock);
    struct engine_req *r;
    while (n_join < free_slots && n_join < MAX_JOIN && !m->offload_pending && !m->removed &&
           !atomic_load(&m->pause) && (r = queue_peek(m, rank)) != NULL) {
        int t_new = r->n_prompt > *t ? r->n_prompt : *t;
        int need_new = r->max_tokens > need ? r->max_tokens : need;
        if (t_new - 1 + need_new > room || t_new > group_exec_max_step(b->gb))
            break;
        if (queue_take_ranked(m, &join[n_join], 1, false, rank) == 0) {
            if (queue_peek(m, rank) == r)
                break; /* its adapter is leaving */
            continue;  /* it had timed out */
        }
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
    if (b->routed_now) { /* the last step's routing was counted when it ended */
        free(b->routed_seen);
        free(b->routed_now);
        b->routed_seen = b->routed_now = NULL;
    }
    batch_release(b->m, b->gb);
    free(b->req);
    free(b->adapters);
    free(b->ids);
    free(b->mask);
    free(b->logits);
    free(b->last);
    batch_accrue(b, mark);
}

/* ---- the runner: a model's batch work as tasks on the engine's pool ---- */

/* What a model's task does when a pool thread takes it. */
enum runner_next {
    RUN_START, /* take a batch from the queue, or resume the paused one */
    RUN_STEP,  /* one step boundary and one step of the batch in flight */
    RUN_DROP,  /* end the paused batch of a model removed, or of an engine stopping */
};

/* A model's runner state, allocated with the model (runner_create), so a
 * batch never waits for host memory to be served or held. Its fields are
 * the task's: a model has at most one task posted or running (m->running
 * says so, under the engine lock), which writes them before the lock that
 * ends it. */
struct runner {
    struct workq_item item; /* the pool's while posted */
    struct engine_model *m;
    struct workq *pool; /* [fixed] e->runners, or a pool of e->runners_apart (runner_create) */
    enum runner_next next;
    bool took;                  /* this serve took requests or resumed a paused batch */
    bool held;                  /* b is paused at a step boundary, its device memory kept */
    struct batch b;             /* the batch in flight or paused */
    double mark;                /* its time computing is counted up to here */
    struct engine_req *first[]; /* (the engine's max_batch) a batch's first requests */
};

/* A batch of the first n requests taken into ru->first: allocated (maybe
 * smaller: batch_alloc), opened and prefilled. Returns whether it goes on
 * (else it was closed, or never allocated). */
static bool runner_open(struct runner *ru, int n)
{
    struct engine_model *m = ru->m;
    int max_prompt;
    struct group_exec *gb = NULL;
    if ((n = batch_alloc(m, ru->first, n, &gb, &max_prompt)) == 0)
        return false;
    ru->b = (struct batch){.m = m, .slots = n, .gb = gb};
    int rc = batch_open(&ru->b, ru->first);
    if (rc < 0) {
        char why[160];
        snprintf(why, sizeof(why), "%s", err_msg());
        batch_accrue(&ru->b, &ru->mark);
        for (int i = 0; i < n; i++)
            req_finish_running(m, ru->first[i], rc, why);
    } else if (batch_prefill(&ru->b, ru->first, max_prompt, &ru->mark) == 0) {
        return true;
    }
    batch_close(&ru->b, &ru->mark);
    return false;
}

/* One step boundary and step of the batch in flight (see batch_next_step).
 * Returns whether it goes on; else it is closed, or paused and held with its
 * device memory (a later RUN_START resumes it from that boundary as if
 * never paused: its KV caches never left their devices; the weights may
 * have been offloaded and loaded again meanwhile, which a forward waits for
 * blob by blob). */
static bool runner_step(struct runner *ru)
{
    enum step st = batch_next_step(&ru->b, &ru->mark);
    if (st == STEP_MORE)
        return true;
    if (st == STEP_PAUSED) {
        ru->held = true;
        batch_accrue(&ru->b, &ru->mark);
        return false;
    }
    batch_close(&ru->b, &ru->mark);
    return false;
}

/* What the scheduler's serve starts: the paused batch resumes, or a new
 * one takes the first requests of the queue. Returns whether it goes on. */
static bool runner_start(struct runner *ru)
{
    struct engine_model *m = ru->m;
    struct engine *e = m->e;
    pthread_mutex_lock(&e->lock);
    bool resume = ru->held;
    int n = !m->removed && !resume
                ? queue_take(m, ru->first, m->max_batch, e->policy->batch_same_params_only)
                : 0;
    m->n_paused = 0; /* its sequences are in flight again */
    pthread_mutex_unlock(&e->lock);
    ru->took = n > 0 || resume;
    ru->mark = time_now();
    if (resume) {
        ru->held = false;
        return runner_step(ru);
    }
    return n > 0 && runner_open(ru, n);
}

/* The serve is over: the batch ended or paused. A paused batch keeps its
 * device memory; its weights may leave: swap_use_end carries out an offload
 * deferred to its pause. Then the model is the scheduler's again; ru and m
 * are not touched once the lock is let go (a new serve may post ru, a
 * removal free m). */
static void runner_end(struct runner *ru)
{
    struct engine_model *m = ru->m;
    struct engine *e = m->e;
    swap_use_end(e->mgr, m->sm);
    pthread_mutex_lock(&e->lock);
    m->running = false;
    atomic_store(&m->pause, false);
    if (ru->held) {
        m->paused_arrival = INFINITY;
        for (int s = 0; s < ru->b.slots; s++) {
            const struct engine_req *r = ru->b.req[s];
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
    if (ru->took && !ru->held)
        mem_wait_clear(e); /* its batch's memory is free again */
    pthread_cond_signal(&e->wake);
    pthread_cond_broadcast(&e->admin);
    pthread_cond_broadcast(&e->idle); /* engine_drain waits for the batch's end too */
    pthread_mutex_unlock(&e->lock);
}

/* The paused batch of a model removed or of an engine stopping: its
 * sequences leave (as removed, or cancelled when the engine stops with them
 * still paused) and its memory is freed; then, as runner_end, m is let go. */
static void runner_drop(struct runner *ru)
{
    struct engine_model *m = ru->m;
    struct engine *e = m->e;
    ru->held = false;
    double mark = time_now();
    batch_evict_leavers(&ru->b, mark);
    for (int s = 0; s < ru->b.slots; s++)
        if (ru->b.req[s])
            batch_leave(&ru->b, s, ERR_CANCELLED, "the engine stopped while its batch was paused");
    batch_close(&ru->b, &mark);
    pthread_mutex_lock(&e->lock);
    m->running = false;
    pthread_cond_broadcast(&e->admin);
    pthread_cond_broadcast(&e->idle);
    pthread_mutex_unlock(&e->lock);
}

/* The pool's run: one task of a model, on a pool thread, no lock. A batch
 * that goes on posts its next step behind every task posted meanwhile, so
 * the models served at once take the pool's threads in turn, a step each:
 * none waits for another's batch to end. */
static void runner_run(struct workq_item *item, void *arg)
{
    (void)arg;
    struct runner *ru = queue_data(item, struct runner, item);
    bool more = false;
    switch (ru->next) {
    case RUN_START:
        more = runner_start(ru);
        break;
    case RUN_STEP:
        more = runner_step(ru);
        break;
    case RUN_DROP:
        runner_drop(ru);
        return;
    }
    if (more) {
        ru->next = RUN_STEP;
        workq_post(ru->pool, item); /* ru is the next task's from here */
        return;
    }
    runner_end(ru);
}

static const struct workq_ops runner_ops = {.run = runner_run};

/* The set of other processes holding a shard of sm: bit p for process p
 * (mod 64); 0 when every shard is on this process's devices. */
static uint64_t model_procs(const struct engine *e, const struct swap_model *sm)
{
    uint64_t key = 0;
    for (int i = 0; i < swap_model_shard_count(sm); i++) {
        int proc = device_proc(swap_device(e->mgr, swap_shard_device(swap_model_shard(sm, i))));
        if (proc > 0)
            key |= 1ull << (proc % 64);
    }
    return key;
}

/* The pool of the models spanning the processes in key (not 0), started
 * when it is the first (lock held); NULL when its threads cannot start. */
static struct workq *pool_apart(struct engine *e, uint64_t key)
{
    int i = 0;
    while (i < e->n_runners_apart && e->runners_apart[i].key != key)
        i++;
    if (i < e->n_runners_apart)
        return &e->runners_apart[i].q;
    if (i == RUNNER_APART_POOLS) /* more sets than pools: they share the last */
        return &e->runners_apart[i - 1].q;
    struct runner_pool *p = &e->runners_apart[i];
    if (workq_init_pool(&p->q, "runner-far", runner_pool_size(e), &runner_ops, e) < 0)
        return NULL;
    p->key = key;
    e->n_runners_apart++;
    return &p->q;
}

int runner_pool_start(struct engine *e)
{
    return workq_init_pool(&e->runners, "runner", runner_pool_size(e), &runner_ops, e);
}

int runner_pool_size(const struct engine *e)
{
    return swap_device_count(e->mgr) + 1;
}

int runner_create(struct engine_model *m)
{
    size_t bytes =
        sizeof(struct runner) + (size_t)m->e->cfg.max_batch * sizeof(struct engine_req *);
    struct runner *ru = calloc(1, bytes);
    if (!ru)
        return err_set(ERR_NOMEM, "model %s: out of host memory for its runner (%zu bytes)",
                       swap_model_name(m->sm), bytes);
    ru->m = m;
    uint64_t key = model_procs(m->e, m->sm);
    ru->pool = key ? pool_apart(m->e, key) : &m->e->runners;
    if (!ru->pool) {
        free(ru);
        return err_set(ERR_NOMEM, "model %s: cannot start the runner threads of its processes",
                       swap_model_name(m->sm));
    }
    m->run = ru;
    return 0;
}

void runner_free(struct engine_model *m)
{
    if (m->run) {
        assert(!m->run->held);
        free(m->run);
        m->run = NULL;
    }
    free(m->expert_tokens);
    m->expert_tokens = NULL;
}

void runner_serve(struct engine_model *m)
{
    assert(m->running);
    m->run->next = RUN_START;
    workq_post(m->run->pool, &m->run->item);
}

bool runner_drop_held(struct engine_model *m)
{
    if (!m->run || m->running || !m->run->held) /* an adapter has no runner */
        return false;
    m->running = true;
    m->n_paused = 0;
    m->run->next = RUN_DROP;
    workq_post(m->run->pool, &m->run->item);
    return true;
}
