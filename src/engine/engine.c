/* The engine's lifecycle: create (the runner pool, the scheduler thread, the
 * swap manager's listener), drain, destroy (every thread joined). The rest
 * of engine.h is implemented by role: request.c (request handles), queue.c
 * (queues and the batch rule), reserve.c (memory reserves and batch
 * shapes), runner.c (the batch runner), sched_loop.c (the scheduler
 * thread), registry.c (the registry, admin calls, statistics);
 * engine_impl.h holds their shared state and says what the engine lock
 * guards. */
#include "engine/engine.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "core/error.h"
#include "engine/engine_impl.h"
#include "sched/sched.h"

_Static_assert(ENGINE_PRIORITY_MAX == SCHED_PRIORITY_MAX,
               "the engine's priorities are the policies'");

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
    if (!e->step_s) {
        engine_destroy(e);
        return err_set(ERR_NOMEM, "out of memory");
    }
    int rc = runner_pool_start(e);
    if (rc == 0 && pthread_create(&e->sched_tid, NULL, sched_main, e) != 0)
        rc = err_set(ERR_NOMEM, "cannot start the scheduler thread");
    if (rc < 0) {
        engine_destroy(e);
        return rc;
    }
    e->sched_started = true;
    swap_set_listener(mgr, engine_on_swap, e);
    *out = e;
    return 0;
}

/* A model's runner holds a batch (lock held). */
static bool any_running(const struct engine *e)
{
    for (int id = 0; id < e->n_ids; id++)
        if (e->models[id] && e->models[id]->running)
            return true;
    return false;
}

void engine_drain(struct engine *e)
{
    pthread_mutex_lock(&e->lock);
    while (e->outstanding > 0 || any_running(e))
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
    pthread_mutex_unlock(&e->lock);
    if (e->sched_started)
        pthread_join(e->sched_tid, NULL);
    /* no serve is posted from here; paused batches are dropped, then every
     * runner task has run before any model is freed: one still ending its
     * last batch touches the others' flags (mem_wait_clear) */
    pthread_mutex_lock(&e->lock);
    for (int i = 0; i < e->n_ids; i++)
        if (e->models[i])
            runner_drop_held(e->models[i]);
    pthread_mutex_unlock(&e->lock);
    workq_free(&e->runners);
    for (int i = 0; i < e->n_runners_apart; i++)
        workq_free(&e->runners_apart[i].q);
    for (int i = 0; i < e->n_ids; i++) {
        struct engine_model *m = e->models[i];
        if (!m)
            continue;
        runner_free(m);
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
