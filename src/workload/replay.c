#include "workload/replay.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster/job.h"
#include "core/error.h"
#include "core/timing.h"
#include "swap/swap.h"

const int32_t replay_prompt[REPLAY_PROMPT_LEN] = {2, 26795, 42676, 16, 5, 346, 65, 285};

void replay_prompt_for(const struct model_info *info, int32_t out[REPLAY_PROMPT_LEN])
{
    for (int i = 0; i < REPLAY_PROMPT_LEN; i++)
        out[i] = replay_prompt[i] % info->vocab;
    if (info->bos_id >= 0)
        out[0] = info->bos_id;
}

void replay_prompt_fill(const struct model_info *info, int32_t *out, int n)
{
    int32_t base[REPLAY_PROMPT_LEN];
    replay_prompt_for(info, base);
    for (int i = 0; i < n; i++)
        out[i] = i < REPLAY_PROMPT_LEN ? base[i] : base[1 + (i - 1) % (REPLAY_PROMPT_LEN - 1)];
}

/* What the requests of one replay share: a count of completions the
 * submitting thread can wait on. */
struct replay_sync {
    atomic_int done;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int failed;       /* requests that failed (under lock) */
    char first[512];  /* the first one's error (under lock) */
};

struct replay_job {
    struct request_record *rec;
    struct replay_sync *sync;
};

static void replay_sync_init(struct replay_sync *y)
{
    memset(y, 0, sizeof(*y)); /* failed and first: on the stack, they began as garbage */
    atomic_init(&y->done, 0);
    pthread_mutex_init(&y->lock, NULL);
    pthread_cond_init(&y->cond, NULL);
}

static void replay_sync_destroy(struct replay_sync *y)
{
    pthread_mutex_destroy(&y->lock);
    pthread_cond_destroy(&y->cond);
}

/* Until n requests have completed. Never on an engine thread. */
static void replay_sync_wait(struct replay_sync *y, int n)
{
    pthread_mutex_lock(&y->lock);
    while (atomic_load(&y->done) < n)
        pthread_cond_wait(&y->cond, &y->lock);
    pthread_mutex_unlock(&y->lock);
}

/* on_done, on the engine thread that completes the request: copies its
 * times, output length, batch size and status into its record, then counts
 * it (the lock is held only for the broadcast). */
static void replay_on_done(struct engine_req *r, void *ctx)
{
    struct replay_job *j = ctx;
    struct request_record *rec = j->rec;
    struct engine_req_timings t;
    engine_req_timings(r, &t);
    rec->t_arrival = t.t_arrival;
    rec->t_start = t.t_start;
    rec->t_first_token = t.t_first_token;
    rec->t_done = t.t_done;
    engine_req_output(r, &rec->n_output);
    rec->batch_size = t.batch_size;
    rec->status = engine_req_status(r);
    pthread_mutex_lock(&j->sync->lock);
    if (rec->status < 0 && j->sync->failed++ == 0) /* the first failure's reason, for stderr */
        snprintf(j->sync->first, sizeof j->sync->first, "%s", engine_req_error(r));
    atomic_fetch_add(&j->sync->done, 1);
    pthread_cond_broadcast(&j->sync->cond);
    pthread_mutex_unlock(&j->sync->lock);
}

/* The process of the rig's device d: as listed, else d % P under mpirun. */
static int rig_proc(const struct replay_rig *rig, int d)
{
    if (!rig->job)
        return 0;
    return rig->procs ? rig->procs[d] : d % cluster_job_procs(rig->job);
}

/* Whether the engine runs a model's batch while its load is arriving: with
 * copies that take no compute (a GPU's copy engines, an emulated link), on
 * every process (a follower's step waits blob by blob too). */
bool replay_overlap_loads(const struct replay_rig *rig)
{
    const bool cuda = rig->device_kind && strcmp(rig->device_kind, "cuda") == 0;
    return cuda || rig->link_gbps > 0;
}

void replay_stack_config(const struct replay_rig *rig, int n_models, int max_loaded,
                         int max_batch, const char *policy, struct stack_config *sc,
                         struct stack_model_config *mc, char (*names)[16])
{
    memset(sc, 0, sizeof(*sc));
    const bool cuda = rig->device_kind && strcmp(rig->device_kind, "cuda") == 0;
    sc->device_kind = cuda ? "cuda" : "cpu";
    sc->n_devices = rig->tp;
    sc->gpus_set = cuda && rig->gpus;
    for (int d = 0; sc->gpus_set && d < rig->tp && d < STACK_MAX_DEVICES; d++)
        sc->gpus[d] = rig->gpus[d];
    sc->link_gbps = rig->link_gbps;
    sc->fit_models = max_loaded;
    sc->fit_prompt = rig->fit_prompt > 0 ? rig->fit_prompt : REPLAY_PROMPT_LEN;
    sc->fit_max_tokens = rig->fit_max_tokens > 0 ? rig->fit_max_tokens : 1;
    sc->engine = (struct engine_config){.policy = policy,
                                        .max_batch = max_batch,
                                        .queue_cap = 1 << 20,
                                        .max_loaded = max_loaded,
                                        .overlap_loads = replay_overlap_loads(rig)};
    sc->prefetch_host = true;
    sc->compute = rig->compute;
    for (int i = 0; i < n_models; i++) {
        snprintf(names[i], 16, "m%d", i);
        mc[i] = (struct stack_model_config){
            .name = names[i], .path = rig->paths[i], .tp = rig->tp, .pp = 1};
    }
    sc->models = mc;
    sc->n_models = n_models;
    if (rig->job) {
        sc->procs_set = true;
        sc->n_procs = cluster_job_procs(rig->job);
        for (int d = 0; d < rig->tp && d < STACK_MAX_DEVICES; d++)
            sc->procs[d] = rig_proc(rig, d);
    }
}

/* A stack of rig's first n_models models, as replay_stack_config makes it
 * with link (the rig's, or 0 for memory speed); with adapters, of model 0
 * and rig's adapters over it ("a0", "a1", ...) on the devices the n_models
 * would be given; under mpirun led, the other processes opening their
 * devices first. Closed by replay_stack_close. */
static int replay_stack_open(const struct replay_rig *rig, int n_models, int max_loaded,
                             int max_batch, const char *policy, double link, bool adapters,
                             struct stack **out)
{
    struct stack_config sc;
    struct stack_model_config mc[WORKLOAD_MAX_MODELS];
    struct stack_adapter_config ac[WORKLOAD_MAX_MODELS];
    char names[WORKLOAD_MAX_MODELS][16], ad_names[WORKLOAD_MAX_MODELS][16];
    struct replay_rig r = *rig;
    r.link_gbps = link;
    *out = NULL;
    replay_stack_config(&r, n_models, max_loaded, max_batch, policy, &sc, mc, names);
    if (adapters) { /* the same devices: the models' sizing, then model 0 and the adapters */
        uint64_t dev[STACK_MAX_DEVICES] = {0}, host = 0;
        int rc = stack_size(&sc, dev, &host);
        if (rc < 0)
            return rc;
        replay_stack_config(&r, 1, max_loaded, max_batch, policy, &sc, mc, names);
        memcpy(sc.device_budget, dev, sizeof(dev));
        for (int k = 0; k < rig->n_adapters; k++) {
            snprintf(ad_names[k], sizeof(ad_names[k]), "a%d", k);
            ac[k] = (struct stack_adapter_config){
                .name = ad_names[k], .base = names[0], .path = rig->adapters[k]};
        }
        sc.adapters = ac;
        sc.n_adapters = rig->n_adapters;
    }
    int rc = cluster_job_lead(rig->job, &sc);
    if (rc == 0 && (rc = stack_open(&sc, out)) < 0)
        cluster_job_release(rig->job);
    return rc;
}

/* Closes what replay_stack_open opened (s NULL-safe); the other processes
 * close theirs after it (nothing when none was led). */
static void replay_stack_close(const struct replay_rig *rig, struct stack *s)
{
    stack_close(s);
    cluster_job_release(rig->job);
}

int replay_arrivals(const struct workload_config *c, double duration, uint64_t seed,
                    struct arrival **ev, size_t *n)
{
    struct arrival_spec spec = {.kind = ARRIVAL_GAMMA, .n_models = c->n_models, .cv = c->cv,
                                .duration_s = duration, .seed = seed};
    memcpy(spec.rates, c->rates, sizeof(double) * (size_t)c->n_models);
    return arrival_generate(&spec, ev, n);
}

static void sleep_until(double t)
{
    double d = t - time_now();
    if (d <= 0)
        return;
    struct timespec ts = {.tv_sec = (time_t)d, .tv_nsec = (long)((d - (time_t)d) * 1e9)};
    nanosleep(&ts, NULL);
}

void replay_result_free(struct replay_result *out)
{
    if (!out)
        return;
    free(out->recs);
    memset(out, 0, sizeof(*out));
}

/* replay_run, and with lens (chat) each request's prompt length and
 * max_tokens from lens[i] instead of Computron's. */
static int run_lens(const struct replay_rig *rig, const struct workload_config *c,
                    const char *policy, const struct arrival *ev, size_t n_ev, int rr_requests,
                    const struct chat_request *lens, struct replay_result *out)
{
    assert(c->n_models >= 1 && c->n_models <= rig->n_models);
    struct stack *s = NULL;
    size_t n = c->round_robin ? (size_t)rr_requests : n_ev;
    memset(out, 0, sizeof(*out));
    out->policy = policy;
    out->n = n;
    const bool ad = rig->n_adapters > 0;
    assert(!ad || (rig->n_adapters == c->n_models && rig->adapters));
    int rc = replay_stack_open(rig, c->n_models, c->max_loaded, c->max_batch, policy,
                               rig->link_gbps, ad, &s);
    struct replay_job *jobs = calloc(n ? n : 1, sizeof(*jobs));
    out->recs = calloc(n ? n : 1, sizeof(*out->recs));
    struct replay_sync sync;
    replay_sync_init(&sync);
    int32_t *chat_prompts = NULL;
    if (rc < 0 || !jobs || !out->recs) {
        if (rc == 0)
            rc = err_set(ERR_NOMEM, "out of memory for %zu requests", n);
        goto out;
    }
    int32_t prompts[WORKLOAD_MAX_MODELS][REPLAY_PROMPT_LEN];
    for (int m = 0; m < c->n_models; m++) /* an adapter takes its base's prompt */
        replay_prompt_for(swap_model_info(s->models[ad ? 0 : m]), prompts[m]);
    /* chat: each model's longest prompt, (n_models, max) */
    int max_prompt = lens ? c->lengths.prompt.max : 0;
    if (lens && !(chat_prompts = malloc(sizeof(int32_t) * (size_t)c->n_models *
                                        (size_t)max_prompt))) {
        rc = err_set(ERR_NOMEM, "out of memory for %d prompts", c->n_models);
        goto out;
    }
    for (int m = 0; lens && m < c->n_models; m++)
        replay_prompt_fill(swap_model_info(s->models[ad ? 0 : m]),
                           chat_prompts + (size_t)m * (size_t)max_prompt, max_prompt);
    double t0 = time_now();
    for (size_t i = 0; i < n; i++) {
        struct replay_job *j = &jobs[i];
        int model = c->round_robin ? (int)(i % (size_t)c->n_models) : ev[i].model;
        if (!c->round_robin)
            sleep_until(t0 + ev[i].t);
        *j = (struct replay_job){.rec = &out->recs[i], .sync = &sync};
        int n_prompt = lens ? lens[i].n_prompt : REPLAY_PROMPT_LEN;
        *j->rec = (struct request_record){.id = i, .model = model, .n_prompt = n_prompt};
        struct engine_request_params p = {
            .model = ad ? s->adapter_ids[model] : s->ids[model],
            .prompt = lens ? chat_prompts + (size_t)model * (size_t)max_prompt : prompts[model],
            .n_prompt = n_prompt,
            .max_tokens = lens ? lens[i].n_output : REPLAY_MAX_TOKENS,
            .sampling = {.temperature = REPLAY_TEMPERATURE,
                         .top_k = REPLAY_TOP_K,
                         .top_p = REPLAY_TOP_P,
                         .seed = i},
            .on_done = replay_on_done,
            .ctx = j};
        int st = engine_submit(s->engine, &p, NULL); /* replay_on_done records the times */
        if (st < 0) {
            j->rec->t_arrival = time_now() - t0;
            j->rec->status = st;
            atomic_fetch_add(&sync.done, 1);
            continue;
        }
        if (c->round_robin) /* a blocking client: the next request waits for this one */
            replay_sync_wait(&sync, (int)(i + 1));
    }
    engine_drain(s->engine);
    out->wall_s = time_now() - t0;
    if (sync.failed > 0) /* the records keep each one's status; why is only here */
        fprintf(stderr, "%s: %d of %zu requests failed; the first: %s\n", policy, sync.failed, n,
                sync.first);
    engine_get_stats(s->engine, &out->st);
    for (int i = 0; i < s->n_models + s->n_adapters; i++) {
        struct engine_model_stats ms;
        int id = i < s->n_models ? s->ids[i] : s->adapter_ids[i - s->n_models];
        if (engine_model_stats(s->engine, id, &ms) == 0)
            out->bytes_loaded += ms.bytes_loaded;
    }
    /* times relative to the start of the run */
    for (size_t i = 0; i < n; i++) {
        struct request_record *r = &out->recs[i];
        if (r->status == 0 && r->t_done > 0) {
            r->t_arrival -= t0;
            r->t_start -= t0;
            r->t_first_token -= t0;
            r->t_done -= t0;
        }
    }
out:
    replay_stack_close(rig, s);
    replay_sync_destroy(&sync);
    free(jobs);
    free(chat_prompts);
    return rc;
}

int replay_run(const struct replay_rig *rig, const struct workload_config *c, const char *policy,
               const struct arrival *ev, size_t n_ev, int rr_requests, struct replay_result *out)
{
    return run_lens(rig, c, policy, ev, n_ev, rr_requests, NULL, out);
}

int replay_run_chat(const struct replay_rig *rig, const struct workload_config *c,
                    const char *policy, const struct arrival *ev, size_t n_ev,
                    const struct chat_request *lens, struct replay_result *out)
{
    assert(c->chat && !c->round_robin);
    return run_lens(rig, c, policy, ev, n_ev, 0, lens, out);
}

/* Submits n greedy requests with Computron's prompt for model 0 of s at once
 * and waits for them; recs[i] gets each one's times. A request that fails
 * is an error naming it. */
static int submit_greedy_len(struct stack *s, int n, int n_prompt, int max_tokens,
                             struct replay_job *jobs, struct request_record *recs)
{
    struct replay_sync sync;
    replay_sync_init(&sync);
    int rc = 0;
    int32_t prompt[REPLAY_CHAT_PROBE > REPLAY_PROMPT_LEN ? REPLAY_CHAT_PROBE : REPLAY_PROMPT_LEN];
    assert(n_prompt >= 1 && n_prompt <= (int)(sizeof(prompt) / sizeof(prompt[0])));
    replay_prompt_fill(swap_model_info(s->models[0]), prompt, n_prompt);
    for (int i = 0; i < n && rc == 0; i++) {
        struct replay_job *j = &jobs[i];
        *j = (struct replay_job){.rec = &recs[i], .sync = &sync};
        recs[i] = (struct request_record){.id = (uint64_t)i, .n_prompt = n_prompt};
        struct engine_request_params p = {.model = s->ids[0], .prompt = prompt,
                                          .n_prompt = n_prompt, .max_tokens = max_tokens,
                                          .sampling = {.temperature = 0, .top_p = 1},
                                          .on_done = replay_on_done, .ctx = j};
        rc = engine_submit(s->engine, &p, NULL); /* replay_on_done records the times */
    }
    engine_drain(s->engine);
    replay_sync_destroy(&sync);
    for (int i = 0; i < n && rc == 0; i++)
        if (recs[i].status < 0)
            rc = err_set(recs[i].status, "measuring request %d of a batch of %d failed: %s", i, n,
                         err_name(recs[i].status));
    return rc;
}

static int submit_greedy(struct stack *s, int n, struct replay_job *jobs,
                         struct request_record *recs)
{
    return submit_greedy_len(s, n, REPLAY_PROMPT_LEN, 1, jobs, recs);
}

int replay_warm_latency(const struct replay_rig *rig, double *secs)
{
    struct stack *s = NULL;
    int rc = replay_stack_open(rig, 1, 1, 1, "swapwise", 0, false, &s);
    struct replay_job j;
    struct request_record rec;
    *secs = 0;
    for (int rep = 0; rc == 0 && rep < 4; rep++) {
        if ((rc = submit_greedy(s, 1, &j, &rec)) < 0)
            break;
        double lat = rec.t_done - rec.t_arrival;
        if (rep > 0 && (*secs == 0 || lat < *secs)) /* the first one loads the model */
            *secs = lat;
    }
    replay_stack_close(rig, s);
    return rc;
}

/* out[1..max_batch] from t[k], the time of a batch of sizes[k] (ascending,
 * the last max_batch): exact at the sizes, linear in between. */
static void sizes_interpolate(const int *sizes, const double *t, int max_batch, double *out)
{
    for (int b = 1; b <= max_batch; b++) {
        int hi = 0;
        while (sizes[hi] < b)
            hi++;
        if (sizes[hi] == b || hi == 0) {
            out[b] = t[hi];
        } else {
            double f = (double)(b - sizes[hi - 1]) / (sizes[hi] - sizes[hi - 1]);
            out[b] = t[hi - 1] + f * (t[hi] - t[hi - 1]);
        }
    }
}

/* The batch sizes a cost measurement times: 1..4, then growing by half,
 * and max_batch (at most 64 of them); their count. */
static int probe_sizes(int max_batch, int sizes[64])
{
    int n = 0;
    for (int b = 1; b < max_batch && n < 63; b = b < 4 ? b + 1 : b + b / 2)
        sizes[n++] = b;
    sizes[n++] = max_batch;
    return n;
}

int replay_measure_costs(const struct replay_rig *rig, int max_batch, struct sim_config *sc)
{
    assert(max_batch >= 1 && max_batch <= SIM_MAX_BATCH);
    struct stack *s = NULL;
    int rc = replay_stack_open(rig, 1, 1, max_batch, "swapwise", rig->link_gbps, false, &s);
    struct replay_job *jobs = calloc((size_t)max_batch, sizeof(*jobs));
    struct request_record *recs = calloc((size_t)max_batch, sizeof(*recs));
    int sizes[64], n_sizes = probe_sizes(max_batch, sizes);
    double t_size[64];
    if (rc == 0 && (!jobs || !recs))
        rc = err_set(ERR_NOMEM, "out of memory for batches of %d", max_batch);
    for (int si = -1; rc == 0 && si < n_sizes; si++) {
        int b = si < 0 ? 1 : sizes[si]; /* si = -1: the cold request that loads the model */
        double best = INFINITY;
        for (int rep = 0; rc == 0 && rep < (si < 0 ? 1 : 2); rep++) {
            if ((rc = submit_greedy(s, b, jobs, recs)) < 0)
                break;
            double t0 = INFINITY, t1 = 0;
            for (int i = 0; i < b; i++) {
                t0 = recs[i].t_start < t0 ? recs[i].t_start : t0;
                t1 = recs[i].t_done > t1 ? recs[i].t_done : t1;
            }
            best = t1 - t0 < best ? t1 - t0 : best;
        }
        if (si >= 0)
            t_size[si] = best;
    }
    if (rc == 0) {
        struct engine_stats st;
        engine_get_stats(s->engine, &st);
        sc->load_s = st.swap_s;
        sizes_interpolate(sizes, t_size, max_batch, sc->batch_s);
        sc->max_batch = max_batch;
        sc->overlap_tail = 0.5; /* the layers after the embedding's blob, about half */
        sc->overlap_loads = replay_overlap_loads(rig); /* as the engine measured runs */
    }
    replay_stack_close(rig, s);
    free(jobs);
    free(recs);
    return rc;
}

int replay_measure_chat_costs(const struct replay_rig *rig, int max_batch, struct sim_config *sc)
{
    assert(max_batch >= 1 && max_batch <= SIM_MAX_BATCH);
    struct stack *s = NULL;
    int rc = replay_stack_open(rig, 1, 1, max_batch, "swapwise", rig->link_gbps, false, &s);
    struct replay_job *jobs = calloc((size_t)max_batch, sizeof(*jobs));
    struct request_record *recs = calloc((size_t)max_batch, sizeof(*recs));
    int sizes[64], n_sizes = probe_sizes(max_batch, sizes);
    double t_size[64], t_short = INFINITY, t_long = INFINITY;
    if (rc == 0 && (!jobs || !recs))
        rc = err_set(ERR_NOMEM, "out of memory for batches of %d", max_batch);
    /* the cold request that loads the model, then the prefill probes */
    if (rc == 0)
        rc = submit_greedy_len(s, 1, REPLAY_PROMPT_LEN, 1, jobs, recs);
    for (int rep = 0; rc == 0 && rep < 2; rep++) {
        if ((rc = submit_greedy_len(s, 1, REPLAY_PROMPT_LEN, 1, jobs, recs)) < 0)
            break;
        double t = recs[0].t_first_token - recs[0].t_start;
        t_short = t < t_short ? t : t_short;
        if ((rc = submit_greedy_len(s, 1, REPLAY_CHAT_PROBE, 1, jobs, recs)) < 0)
            break;
        t = recs[0].t_first_token - recs[0].t_start;
        t_long = t < t_long ? t : t_long;
    }
    for (int si = 0; rc == 0 && si < n_sizes; si++) {
        int b = sizes[si];
        double best = INFINITY;
        for (int rep = 0; rc == 0 && rep < 2; rep++) {
            if ((rc = submit_greedy_len(s, b, REPLAY_PROMPT_LEN, REPLAY_CHAT_STEPS + 1, jobs,
                                        recs)) < 0)
                break;
            double worst = 0;
            for (int i = 0; i < b; i++)
                if (recs[i].n_output > 1) {
                    double t = (recs[i].t_done - recs[i].t_first_token) / (recs[i].n_output - 1);
                    worst = t > worst ? t : worst;
                }
            best = worst < best ? worst : best;
        }
        t_size[si] = best;
    }
    if (rc == 0) {
        sc->base_prompt = REPLAY_PROMPT_LEN;
        sc->prefill_token_s = t_long > t_short
                                  ? (t_long - t_short) / (REPLAY_CHAT_PROBE - REPLAY_PROMPT_LEN)
                                  : 0;
        sizes_interpolate(sizes, t_size, max_batch, sc->step_s);
    }
    replay_stack_close(rig, s);
    free(jobs);
    free(recs);
    return rc;
}
