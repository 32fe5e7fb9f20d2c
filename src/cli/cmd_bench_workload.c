/* shardswap bench workload: Computron's experiments, replayed in real time
 * through the engine on generated models, one run per scheduling policy on
 * the same arrival sequence, side by side. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_cache.h"
#include "core/error.h"
#include "core/jsonout.h"
#include "core/timing.h"
#include "engine/engine.h"
#include "engine/stack.h"
#include "engine/sched.h"
#include "engine/sim.h"
#include "model/opt_random.h"
#include "workload/arrival.h"
#include "workload/computron.h"
#include "workload/report.h"
#include "workload/stats.h"

#define MAX_MODELS WORKLOAD_MAX_MODELS
#define MAX_POLICIES 4

/* "Berkeley is the number one public" through the OPT tokenizer (BOS first):
 * Computron's prompt. */
static const int32_t computron_prompt[] = {2, 26795, 42676, 16, 5, 346, 65, 285};
#define PROMPT_LEN (int)(sizeof(computron_prompt) / sizeof(computron_prompt[0]))

struct run_result {
    const char *policy;
    struct request_record *recs;
    size_t n;
    struct engine_stats st;
    double wall_s;
};

struct wl_job {
    struct request_record *rec;
    atomic_int *done;
    pthread_mutex_t *lock;
    pthread_cond_t *cond;
};

/* On the engine's thread that completes the request. */
static void wl_on_done(struct engine_req *r, void *ctx)
{
    struct wl_job *j = ctx;
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
    pthread_mutex_lock(j->lock);
    atomic_fetch_add(j->done, 1);
    pthread_cond_broadcast(j->cond);
    pthread_mutex_unlock(j->lock);
}

struct rig {
    struct stack *s;
    struct engine *e;
};

static void rig_close(struct rig *g)
{
    stack_close(g->s);
    memset(g, 0, sizeof(*g));
}

/* The stack of a workload: tp CPU devices with room for max_loaded models
 * (every model has the same shape) and the largest batch of Computron's
 * requests each, every model over all of them with TP = tp; all models start
 * in host memory, as in Computron. */
static void rig_config(struct stack_config *sc, struct stack_model_config *mc, char dirs[][512],
                       char names[][16], int n_models, int tp, int max_loaded, int max_batch,
                       const char *policy, double link_gbps)
{
    memset(sc, 0, sizeof(*sc));
    sc->device_kind = "cpu";
    sc->n_devices = tp;
    sc->link_gbps = link_gbps;
    sc->fit_models = max_loaded;
    sc->fit_prompt = PROMPT_LEN;
    sc->fit_max_tokens = 1;
    sc->engine = (struct engine_config){.policy = policy, .max_batch = max_batch,
                                        .queue_cap = 1 << 20, .max_loaded = max_loaded,
                                        .overlap_loads = link_gbps > 0};
    sc->prefetch_host = true;
    for (int i = 0; i < n_models; i++) {
        snprintf(names[i], 16, "m%d", i);
        mc[i] = (struct stack_model_config){.name = names[i], .path = dirs[i], .tp = tp, .pp = 1};
    }
    sc->models = mc;
    sc->n_models = n_models;
}

static int rig_open(struct rig *g, char dirs[][512], int n_models, int tp, int max_loaded,
                    int max_batch, const char *policy, double link_gbps)
{
    memset(g, 0, sizeof(*g));
    struct stack_config sc;
    struct stack_model_config mc[MAX_MODELS];
    char names[MAX_MODELS][16];
    rig_config(&sc, mc, dirs, names, n_models, tp, max_loaded, max_batch, policy, link_gbps);
    int rc = stack_open(&sc, &g->s);
    g->e = rc == 0 ? g->s->engine : NULL;
    return rc;
}

static void sleep_until(double t)
{
    double d = t - time_now();
    if (d <= 0)
        return;
    struct timespec ts = {.tv_sec = (time_t)d, .tv_nsec = (long)((d - (time_t)d) * 1e9)};
    nanosleep(&ts, NULL);
}

static int run_policy(char dirs[][512], const struct workload_config *c, int tp, const char *policy,
                      const struct arrival *ev, size_t n_ev, int rr_requests, double link_gbps,
                      struct run_result *out)
{
    struct rig g;
    int rc = rig_open(&g, dirs, c->n_models, tp, c->max_loaded, c->max_batch, policy, link_gbps);
    size_t n = c->round_robin ? (size_t)rr_requests : n_ev;
    struct wl_job *jobs = calloc(n, sizeof(*jobs));
    out->recs = calloc(n, sizeof(*out->recs));
    out->n = n;
    out->policy = policy;
    atomic_int done = 0;
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
    if (rc < 0 || !jobs || !out->recs) {
        if (rc == 0)
            rc = err_set(ERR_NOMEM, "out of memory");
        goto out;
    }
    double t0 = time_now();
    for (size_t i = 0; i < n; i++) {
        struct wl_job *j = &jobs[i];
        int model = c->round_robin ? (int)(i % (size_t)c->n_models) : ev[i].model;
        double at = c->round_robin ? 0 : ev[i].t;
        if (!c->round_robin)
            sleep_until(t0 + at);
        j->rec = &out->recs[i];
        *j->rec = (struct request_record){.id = i, .model = model, .n_prompt = PROMPT_LEN};
        j->done = &done;
        j->lock = &lock;
        j->cond = &cond;
        struct engine_request_params p = {
            .model = model, .prompt = computron_prompt, .n_prompt = PROMPT_LEN, .max_tokens = 1,
            .sampling = {.temperature = 0.7f, .top_k = 50, .top_p = 0.5f, .seed = i},
            .on_done = wl_on_done, .ctx = j};
        if ((rc = engine_submit(g.e, &p, NULL)) < 0) { /* wl_on_done records the times */
            j->rec->t_arrival = time_now() - t0;
            j->rec->status = rc;
            atomic_fetch_add(&done, 1);
            continue;
        }
        if (c->round_robin) { /* a blocking client: the next request waits for this one */
            pthread_mutex_lock(&lock);
            while (atomic_load(&done) < (int)(i + 1))
                pthread_cond_wait(&cond, &lock);
            pthread_mutex_unlock(&lock);
        }
    }
    engine_drain(g.e);
    out->wall_s = time_now() - t0;
    engine_get_stats(g.e, &out->st);
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
    rc = 0;
out:
    rig_close(&g);
    free(jobs);
    return rc;
}

/* Submits n greedy requests with Computron's prompt for model 0 at once and
 * waits for them; recs[i] gets each one's times. */
static int submit_greedy(struct engine *e, int n, struct wl_job *jobs, struct request_record *recs)
{
    atomic_int done = 0;
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        struct wl_job *j = &jobs[i];
        *j = (struct wl_job){.rec = &recs[i], .done = &done, .lock = &lock, .cond = &cond};
        struct engine_request_params p = {.model = 0, .prompt = computron_prompt,
                                          .n_prompt = PROMPT_LEN, .max_tokens = 1,
                                          .sampling = {.temperature = 0, .top_p = 1},
                                          .on_done = wl_on_done, .ctx = j};
        rc = engine_submit(e, &p, NULL); /* wl_on_done records the times */
    }
    engine_drain(e);
    return rc;
}

/* Warm latency of one request on a resident model: the unit of --slo-scale. */
static int warm_latency(char dirs[][512], int tp, double *secs)
{
    struct rig g;
    int rc = rig_open(&g, dirs, 1, tp, 1, 1, "swapwise", 0);
    struct wl_job j;
    struct request_record rec;
    *secs = 0;
    for (int rep = 0; rc == 0 && rep < 4; rep++) {
        if ((rc = submit_greedy(g.e, 1, &j, &rec)) < 0)
            break;
        double lat = rec.t_done - rec.t_arrival;
        if (rep > 0 && (*secs == 0 || lat < *secs)) /* the first one loads the model */
            *secs = lat;
    }
    rig_close(&g);
    return rc;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

struct summary {
    struct latency_stats all;
    double slo_attain, throughput, queue_s;
    size_t failed;
};

static void summarize(const struct run_result *r, double slo, int model, struct summary *s,
                      double **lat_out, size_t *n_out)
{
    double *lat = calloc(r->n ? r->n : 1, sizeof(double));
    size_t n = 0;
    double first = 1e300, last = 0;
    memset(s, 0, sizeof(*s));
    for (size_t i = 0; i < r->n; i++) {
        const struct request_record *q = &r->recs[i];
        if (model >= 0 && q->model != model)
            continue;
        if (q->status != 0) {
            s->failed++;
            continue;
        }
        lat[n++] = q->t_done - q->t_arrival;
        s->queue_s += q->t_start - q->t_arrival;
        first = q->t_arrival < first ? q->t_arrival : first;
        last = q->t_done > last ? q->t_done : last;
    }
    stats_latency_compute(lat, n, &s->all);
    s->slo_attain = stats_slo_attainment(lat, n, slo);
    s->throughput = n && last > first ? n / (last - first) : 0;
    if (lat_out) {
        qsort(lat, n, sizeof(double), cmp_dbl);
        *lat_out = lat;
        *n_out = n;
    } else {
        free(lat);
    }
}

/* ---- --simulate: the same policies on a simulated clock (engine/sim.h) ---- */

/* Costs of the simulation, measured on this rig: one load, and batches of
 * sizes 1, 2, 3, 4, 6, 8, 12, ... up to max_batch (best of two), linear in
 * between. */
static int measure_costs(char dirs[][512], int tp, int max_batch, double link, struct sim_config *sc)
{
    struct rig g;
    int rc = rig_open(&g, dirs, 1, tp, 1, max_batch, "swapwise", link);
    struct wl_job *jobs = calloc((size_t)max_batch, sizeof(*jobs));
    struct request_record *recs = calloc((size_t)max_batch, sizeof(*recs));
    int sizes[64], n_sizes = 0;
    for (int b = 1; b < max_batch && n_sizes < 63; b = b < 4 ? b + 1 : b + b / 2)
        sizes[n_sizes++] = b;
    sizes[n_sizes++] = max_batch;
    double t_size[64];
    if (rc == 0 && (!jobs || !recs))
        rc = err_set(ERR_NOMEM, "out of memory");
    for (int si = -1; rc == 0 && si < n_sizes; si++) {
        int b = si < 0 ? 1 : sizes[si]; /* si = -1: the cold request that loads the model */
        double best = INFINITY;
        for (int rep = 0; rc == 0 && rep < (si < 0 ? 1 : 2); rep++) {
            if ((rc = submit_greedy(g.e, b, jobs, recs)) < 0)
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
        engine_get_stats(g.e, &st);
        sc->load_s = st.swap_s;
        for (int b = 1; b <= max_batch; b++) {
            int hi = 0;
            while (sizes[hi] < b)
                hi++;
            if (sizes[hi] == b || hi == 0) {
                sc->batch_s[b] = t_size[hi];
            } else {
                double f = (double)(b - sizes[hi - 1]) / (sizes[hi] - sizes[hi - 1]);
                sc->batch_s[b] = t_size[hi - 1] + f * (t_size[hi] - t_size[hi - 1]);
            }
        }
        sc->max_batch = max_batch;
        sc->overlap_tail = 0.5; /* the layers after the embedding's blob, about half */
        sc->overlap_loads = link > 0;
    }
    rig_close(&g);
    free(jobs);
    free(recs);
    return rc;
}

struct sim_summary {
    double mean, p50, p90, p99, max, slo, swaps; /* averaged over seeds */
    double worst_p99_ratio;                     /* against the first policy, per seed */
};

/* Every policy on seeds seed..seed+seeds-1 of workload c; s[p] per policy. */
static int simulate_config(const struct workload_config *c, const struct sim_config *costs,
                           char dirs[][512], int tp, const char **policies, int n_pol,
                           uint64_t seed, int seeds, double duration, double slo,
                           struct sim_summary *s)
{
    /* each model's device bytes (weights and its largest batch) and the
     * budgets, as the real run's stack sizes them */
    struct stack_config stc;
    struct stack_model_config mc[MAX_MODELS];
    char names[MAX_MODELS][16];
    rig_config(&stc, mc, dirs, names, 1, tp, 1, c->max_batch, "swapwise", 0);
    uint64_t shard[STACK_MAX_DEVICES], budget[STACK_MAX_DEVICES], host;
    int rc = stack_size(&stc, shard, &host);
    stc.fit_models = c->max_loaded;
    if (rc < 0 || (rc = stack_size(&stc, budget, &host)) < 0)
        return rc;
    for (int d = 0; d < tp; d++)
        shard[d] -= 1u << 20; /* stack_size's slack, once per device */
    uint64_t *bytes = calloc((size_t)c->n_models * tp, sizeof(uint64_t));
    if (!bytes)
        return err_set(ERR_NOMEM, "out of memory");
    for (int i = 0; i < c->n_models; i++)
        memcpy(bytes + (size_t)i * tp, shard, sizeof(uint64_t) * (size_t)tp);
    memset(s, 0, sizeof(*s) * (size_t)n_pol);
    for (int k = 0; rc == 0 && k < seeds; k++) {
        struct arrival_spec spec = {.kind = ARRIVAL_GAMMA, .n_models = c->n_models, .cv = c->cv,
                                    .duration_s = duration, .seed = seed + (uint64_t)k};
        memcpy(spec.rates, c->rates, sizeof(double) * (size_t)c->n_models);
        struct arrival *ev = NULL;
        size_t n = 0;
        if ((rc = arrival_generate(&spec, &ev, &n)) < 0)
            break;
        struct sim_request *rq = calloc(n ? n : 1, sizeof(*rq));
        double *lat = calloc(n ? n : 1, sizeof(double)), first_p99 = 0;
        if (!rq || !lat)
            rc = err_set(ERR_NOMEM, "out of memory");
        for (int p = 0; rc == 0 && p < n_pol; p++) {
            struct sim_config sc = *costs;
            sc.policy = sched_policy_find(policies[p]);
            sc.n_models = c->n_models;
            sc.n_devices = tp;
            sc.bytes = bytes;
            sc.max_loaded = c->max_loaded;
            sc.max_batch = c->max_batch;
            for (int d = 0; d < tp; d++)
                sc.budget[d] = budget[d]; /* as rig_open */
            for (size_t i = 0; i < n; i++)
                rq[i] = (struct sim_request){.arrival = ev[i].t, .model = ev[i].model};
            struct sim_stats st;
            struct latency_stats ls;
            if ((rc = sim_run(&sc, rq, n, &st)) < 0)
                break;
            for (size_t i = 0; i < n; i++)
                lat[i] = rq[i].done - rq[i].arrival;
            if ((rc = stats_latency_compute(lat, n, &ls)) < 0 || n == 0)
                break;
            struct sim_summary *o = &s[p];
            o->mean += ls.mean / seeds;
            o->p50 += ls.p50 / seeds;
            o->p90 += ls.p90 / seeds;
            o->p99 += ls.p99 / seeds;
            o->max += ls.max / seeds;
            o->slo += stats_slo_attainment(lat, n, slo) / seeds;
            o->swaps += (double)st.loads / seeds;
            if (p == 0)
                first_p99 = ls.p99;
            else if (ls.p99 / first_p99 > o->worst_p99_ratio)
                o->worst_p99_ratio = ls.p99 / first_p99;
        }
        free(rq);
        free(lat);
        free(ev);
    }
    free(bytes);
    return rc;
}

/* One policy's averages over seeds in simulate()'s JSON. */
static json_t *sim_policy_json(const char *policy, const struct sim_summary *s,
                               const struct sim_summary *first, bool is_first)
{
    return json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "policy", policy,
                     "mean_s", jsonout_real(s->mean, 6), "p50_s", jsonout_real(s->p50, 6),
                     "p90_s", jsonout_real(s->p90, 6), "p99_s", jsonout_real(s->p99, 6), "max_s",
                     jsonout_real(s->max, 6), "slo_attainment", jsonout_real(s->slo, 4), "swaps",
                     jsonout_real(s->swaps, 1), "p99_ratio", jsonout_real(s->p99 / first->p99, 4),
                     "mean_ratio", jsonout_real(s->mean / first->mean, 4), "worst_seed_p99_ratio",
                     jsonout_real(is_first ? 1.0 : s->worst_p99_ratio, 4));
}

static int simulate(char dirs[][512], const struct workload_config *one, const char *label,
                    bool all, int tp,
                    const char **policies, int n_pol, uint64_t seed, int seeds, double duration,
                    double slo, double link, bool json)
{
    struct sim_config costs;
    memset(&costs, 0, sizeof(costs));
    int max_batch = all ? 32 : one->max_batch;
    if (max_batch > SIM_MAX_BATCH)
        return err_set(ERR_INVALID, "--simulate models batches of up to %d", SIM_MAX_BATCH);
    int rc;
    fprintf(stderr, "measuring a load and batches of 1..%d on this machine...\n", max_batch);
    if ((rc = measure_costs(dirs, tp, max_batch, link, &costs)) < 0)
        return rc;
    json_t *batch_s = NULL, *configs = NULL;
    if (json) {
        batch_s = json_array();
        configs = json_array();
        for (int b = 1; batch_s && b <= max_batch; b++)
            json_array_append_new(batch_s, jsonout_real(costs.batch_s[b], 6));
    } else {
        printf("simulated clock, costs measured here: load %.1f ms; batch of 1 %.1f ms, of %d "
               "%.1f ms; %d seeds x %g s per config; averages over seeds, ratios against %s\n",
               costs.load_s * 1e3, costs.batch_s[1] * 1e3, max_batch,
               costs.batch_s[max_batch] * 1e3, seeds, duration, policies[0]);
        printf("%-14s %-10s %8s %8s %8s %8s %8s %6s %6s %9s %10s %10s\n", "config", "policy",
               "mean ms", "p50 ms", "p90 ms", "p99 ms", "max ms", "SLO%", "swaps", "p99 ratio",
               "worst seed", "mean ratio");
    }
    for (int k = all ? 0 : -1; k < (all ? WORKLOAD_COMPUTRON_CONFIGS : 0) && rc == 0; k++) {
        struct workload_config c = *one;
        char name[64];
        if (all) {
            workload_computron(k, &c);
            snprintf(name, sizeof(name), "computron:%d", k);
        } else {
            snprintf(name, sizeof(name), "%s", label);
        }
        struct sim_summary s[MAX_POLICIES];
        if ((rc = simulate_config(&c, &costs, dirs, tp, policies, n_pol, seed, seeds, duration,
                                  slo, s)) < 0)
            break;
        json_t *pols = json ? json_array() : NULL;
        for (int p = 0; p < n_pol; p++) {
            double r99 = s[p].p99 / s[0].p99, rmean = s[p].mean / s[0].mean;
            if (json)
                json_array_append_new(pols, sim_policy_json(policies[p], &s[p], &s[0], p == 0));
            else
                printf("%-14s %-10s %8.1f %8.1f %8.1f %8.1f %8.1f %6.1f %6.1f %9.2f %10.2f "
                       "%10.2f\n", p ? "" : name, policies[p], s[p].mean * 1e3, s[p].p50 * 1e3,
                       s[p].p90 * 1e3, s[p].p99 * 1e3, s[p].max * 1e3, 100 * s[p].slo,
                       s[p].swaps, r99, p ? s[p].worst_p99_ratio : 1.0, rmean);
        }
        if (json)
            json_array_append_new(configs,
                                  json_pack("{s:s, s:o}", "config", name, "policies", pols));
    }
    if (!json || rc < 0) {
        json_decref(batch_s);
        json_decref(configs);
        return rc;
    }
    return jsonout_print(json_pack("{s:b, s:i, s:o, s:o, s:o, s:o, s:o}", "simulated", 1, "seeds",
                                   seeds, "duration_s", jsonout_real(duration, 6), "link_gb_s",
                                   jsonout_real(link, 6), "load_s", jsonout_real(costs.load_s, 6),
                                   "batch_s", batch_s, "configs", configs));
}

/* The latency fields of a summary: mean_s, p50_s, p90_s, p99_s, max_s and
 * slo_attainment (null when it counted no request). */
static int summary_json_set(json_t *o, const struct summary *s)
{
    return json_object_set_new(o, "mean_s", jsonout_real(s->all.mean, 6)) |
           json_object_set_new(o, "p50_s", jsonout_real(s->all.p50, 6)) |
           json_object_set_new(o, "p90_s", jsonout_real(s->all.p90, 6)) |
           json_object_set_new(o, "p99_s", jsonout_real(s->all.p99, 6)) |
           json_object_set_new(o, "max_s", jsonout_real(s->all.max, 6)) |
           json_object_set_new(o, "slo_attainment", jsonout_real(s->slo_attain, 4));
}

/* One JSON object for a real-time run: the workload, then per policy its
 * summary, engine counters and per-model summaries. */
static int print_json(const struct workload_config *c, const char *config_s, double link,
                      double warm, double slo, const char *plot, const char **policies,
                      int n_pol, const struct run_result *res, const struct summary *sum)
{
    json_t *rates = json_array(), *pols = json_array();
    int bad = !rates || !pols;
    for (int i = 0; !bad && i < c->n_models; i++)
        bad |= json_array_append_new(rates, jsonout_real(c->rates[i], 6));
    for (int p = 0; !bad && p < n_pol; p++) {
        const struct summary *s = &sum[p];
        json_t *per_model = json_array();
        for (int i = 0; per_model && !bad && i < c->n_models; i++) {
            struct summary m;
            summarize(&res[p], slo, i, &m, NULL, NULL);
            json_t *o = json_pack("{s:i, s:I}", "model", i, "requests", (json_int_t)m.all.n);
            bad |= !o || summary_json_set(o, &m) != 0;
            bad |= json_array_append_new(per_model, o);
        }
        json_t *o = json_pack("{s:s, s:I, s:I}", "policy", policies[p], "requests",
                              (json_int_t)s->all.n, "failed", (json_int_t)s->failed);
        bad |= !o || summary_json_set(o, s) != 0;
        bad |= json_object_set_new(o, "throughput_rps", jsonout_real(s->throughput, 3)) |
               json_object_set_new(o, "swaps", json_integer((json_int_t)res[p].st.loads)) |
               json_object_set_new(o, "swap_s", jsonout_real(res[p].st.swap_s, 4)) |
               json_object_set_new(o, "compute_s", jsonout_real(res[p].st.compute_s, 4)) |
               json_object_set_new(o, "queue_s", jsonout_real(s->queue_s, 4)) |
               json_object_set_new(o, "batches", json_integer((json_int_t)res[p].st.batches)) |
               json_object_set_new(o, "per_model", per_model);
        bad |= json_array_append_new(pols, o);
    }
    if (bad) {
        json_decref(rates);
        json_decref(pols);
        return jsonout_print(NULL); /* the out-of-memory error */
    }
    return jsonout_print(json_pack(
        "{s:s, s:i, s:i, s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "config", config_s, "models",
        c->n_models, "max_loaded", c->max_loaded, "max_batch", c->max_batch, "cv",
        jsonout_real(c->cv, 6), "rates", rates, "link_gb_s", jsonout_real(link, 6),
        "warm_latency_s", jsonout_real(warm, 6), "slo_s", jsonout_real(slo, 6), "plot",
        jsonout_string(plot), "policies", pols));
}

int bench_workload(int argc, char **argv)
{
    const char *config_s = "computron:4", *policies_s = "computron,swapwise", *rates_s = NULL;
    /* an opt-1.3b-wide model cut to 2 layers (0.41 GB in f16): on 2 cores a
     * swap (~20 ms) and a request (~30 ms) weigh about the same, and a config
     * runs in about a minute */
    const char *preset = "opt-1.3b", *dtype_s = "f16", *cache = "models", *out_dir = "bench-out";
    int layers = 2, tp = 2, n_models = 0, max_loaded = 0, max_batch = 0, rr_requests = 40;
    float cv = 0, duration = 20, alpha = -1, total_rate = 0, slo = 0, slo_scale = 5, link = 0;
    uint64_t seed = 1;
    bool json = false, simulated = false;
    int seeds = 20;
    struct flag flags[] = {
        FLAG("config", FLAG_STR, &config_s, "computron:K|round-robin|custom",
             "Computron's config K (0..18), its round-robin worst case, or custom (default computron:4)"),
        FLAG("policy", FLAG_STR, &policies_s, "A,B", "policies to compare (default computron,swapwise)"),
        FLAG("models", FLAG_INT, &n_models, "N", "custom/round-robin: number of models"),
        FLAG("rates", FLAG_STR, &rates_s, "R1,R2,...", "custom: requests/s per model"),
        FLAG("alpha", FLAG_FLOAT, &alpha, "A", "custom: power-law skew instead of --rates"),
        FLAG("total-rate", FLAG_FLOAT, &total_rate, "R", "custom: requests/s over all models with --alpha"),
        FLAG("cv", FLAG_FLOAT, &cv, "C", "custom: Gamma CV of inter-arrival times (1 = Poisson)"),
        FLAG("max-loaded", FLAG_INT, &max_loaded, "K", "models that fit the devices at once"),
        FLAG("max-batch", FLAG_INT, &max_batch, "B", "requests per batch"),
        FLAG("duration", FLAG_FLOAT, &duration, "S", "seconds of arrivals (default 20; Computron: 30)"),
        FLAG("requests", FLAG_INT, &rr_requests, "N", "round-robin: requests (default 40)"),
        FLAG("slo", FLAG_FLOAT, &slo, "S", "SLO in seconds (default: --slo-scale x warm latency)"),
        FLAG("slo-scale", FLAG_FLOAT, &slo_scale, "X", "SLO as a multiple of the warm single-request latency (default 5)"),
        FLAG("preset", FLAG_STR, &preset, "NAME", "model shape (default opt-1.3b)"),
        FLAG("layers", FLAG_INT, &layers, "N", "layers per model (default 2)"),
        FLAG("dtype", FLAG_STR, &dtype_s, "f16|bf16|f32", "model dtype (default f16)"),
        FLAG("tp", FLAG_INT, &tp, "N", "devices per model, all models on the same ones (default 2)"),
        FLAG("seed", FLAG_U64, &seed, "S", "arrival seed (default 1)"),
        FLAG("link-gbps", FLAG_FLOAT, &link, "G",
             "emulate a host link of G GB/s per device (a GPU's swap/compute ratio; default: "
             "memory speed)"),
        FLAG("cache", FLAG_STR, &cache, "DIR", "where generated models are kept (default models)"),
        FLAG("out-dir", FLAG_STR, &out_dir, "DIR", "CSV and plot go here (default bench-out)"),
        FLAG("simulate", FLAG_BOOL, &simulated, NULL,
             "replay on a simulated clock (engine/sim.h) with a load's and batches' times "
             "measured here first, over --seeds arrival seeds; --config computron:all runs all 19"),
        FLAG("seeds", FLAG_INT, &seeds, "N", "--simulate: arrival seeds per config (default 20)"),
        FLAG("json", FLAG_BOOL, &json, NULL, "print one JSON object instead of tables"),
    };
    int rc = args_parse("bench workload",
                        "Replays a workload in real time through the engine, once per policy on "
                        "the same arrival sequence, on generated models that all share the same "
                        "CPU devices (room for --max-loaded of them; every model starts in host "
                        "memory). Requests are Computron's: \"Berkeley is the number one public\" "
                        "(8 tokens), max_tokens 1, top_k 50, top_p 0.5, temperature 0.7. Prints "
                        "latency mean/p50/p90/p99/max, SLO attainment, throughput, swaps and time "
                        "spent swapping, computing and queueing, per model and overall; writes a "
                        "CSV of every request and an SVG latency CDF with one curve per policy. "
                        "With --simulate, replays on a simulated clock instead (engine/sim.h: "
                        "the same policy code, loads and batches taking the times measured here "
                        "first), averaged over --seeds arrival sequences; copies competing with "
                        "compute are not modelled, so use it with --link-gbps.",
                        argc, argv, flags, sizeof(flags) / sizeof(flags[0]));
    if (rc)
        return rc;
    struct workload_config c = {0};
    const char *policies[MAX_POLICIES];
    int n_pol = 0;
    char pol_buf[256], (*dirs)[512] = NULL;
    struct run_result res[MAX_POLICIES];
    struct arrival *ev = NULL;
    size_t n_ev = 0;
    memset(res, 0, sizeof(res));
    snprintf(pol_buf, sizeof(pol_buf), "%s", policies_s);
    for (char *tok = strtok(pol_buf, ","); tok && n_pol < MAX_POLICIES; tok = strtok(NULL, ",")) {
        if (!sched_policy_find(tok)) {
            rc = ERR_INVALID;
            goto out;
        }
        policies[n_pol++] = tok;
    }
    bool all = false;
    if (strcmp(config_s, "computron:all") == 0) {
        if (!simulated) {
            rc = err_set(ERR_INVALID, "--config computron:all needs --simulate (in real time, "
                                      "tools/bench_computron.sh runs them one by one)");
            goto out;
        }
        all = true;
        workload_computron(0, &c);
    } else if (strncmp(config_s, "computron:", 10) == 0) {
        char *end;
        long k = strtol(config_s + 10, &end, 10);
        if (*end || end == config_s + 10) {
            rc = err_set(ERR_INVALID, "--config %s: expected computron:K with K in 0..18", config_s);
            goto out;
        }
        if ((rc = workload_computron((int)k, &c)) < 0)
            goto out;
    } else if (strcmp(config_s, "round-robin") == 0) {
        c.n_models = n_models ? n_models : 2;
        c.max_loaded = 1;
        c.max_batch = 8;
        c.round_robin = true;
    } else if (strcmp(config_s, "custom") == 0) {
        c.n_models = n_models;
        c.cv = cv > 0 ? cv : 1;
        c.max_batch = 8;
        if (rates_s) {
            if ((rc = arrival_rates_parse(rates_s, c.rates, MAX_MODELS, &c.n_models)) < 0)
                goto out;
        } else if (alpha >= 0 && n_models > 0 && total_rate > 0) {
            arrival_rates_powerlaw(n_models, alpha, total_rate, c.rates);
        } else {
            rc = err_set(ERR_INVALID, "--config custom needs --rates, or --models with --alpha and "
                                      "--total-rate");
            goto out;
        }
        c.max_loaded = c.n_models > 1 ? c.n_models / 2 : 1;
    } else {
        rc = err_set(ERR_INVALID, "--config %s: expected computron:K, round-robin or custom",
                     config_s);
        goto out;
    }
    if (max_loaded > 0)
        c.max_loaded = max_loaded;
    if (max_batch > 0)
        c.max_batch = max_batch;
    if (c.n_models < 1 || c.n_models > MAX_MODELS || tp < 1 || tp > 8 || duration <= 0) {
        rc = err_set(ERR_INVALID, "need 1..%d models, --tp 1..8 and --duration > 0", MAX_MODELS);
        goto out;
    }
    if (simulated && (c.round_robin || seeds < 1)) {
        rc = err_set(ERR_INVALID, c.round_robin ? "--simulate replays open-loop arrivals; "
                                                  "round-robin is a closed loop"
                                                : "--seeds must be >= 1");
        goto out;
    }
    if (all) /* one model measures the costs; every config's models have its shape */
        c.n_models = 1;
    if (!(dirs = calloc((size_t)c.n_models, sizeof(*dirs)))) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < c.n_models; i++)
        if ((rc = model_cache_preset(cache, preset, layers, dtype_s, (uint64_t)i, dirs[i],
                                     sizeof(dirs[i]))) < 0)
            goto out;
    if (!c.round_robin && !simulated) { /* --simulate draws its own, per seed */
        struct arrival_spec spec = {.kind = ARRIVAL_GAMMA, .n_models = c.n_models, .cv = c.cv,
                                    .duration_s = duration, .seed = seed};
        memcpy(spec.rates, c.rates, sizeof(c.rates));
        if ((rc = arrival_generate(&spec, &ev, &n_ev)) < 0)
            goto out;
    }
    double warm = 0;
    if ((rc = warm_latency(dirs, tp, &warm)) < 0)
        goto out;
    if (slo <= 0)
        slo = slo_scale * (float)warm;
    if (simulated) {
        rc = simulate(dirs, &c, config_s, all, tp, policies, n_pol, seed, seeds, duration, slo, link, json);
        goto out;
    }
    for (int p = 0; p < n_pol; p++) {
        fprintf(stderr, "running %s with policy %s (%zu requests)...\n", config_s, policies[p],
                c.round_robin ? (size_t)rr_requests : n_ev);
        if ((rc = run_policy(dirs, &c, tp, policies[p], ev, n_ev, rr_requests, link, &res[p])) < 0)
            goto out;
    }
    /* files: a CSV per policy and one CDF plot */
    mkdir(out_dir, 0755);
    char tag[64], path[1024];
    snprintf(tag, sizeof(tag), "%s", config_s);
    for (char *q = tag; *q; q++)
        if (*q == ':')
            *q = '-';
    double *lat[MAX_POLICIES] = {0};
    size_t n_lat[MAX_POLICIES] = {0};
    struct summary sum[MAX_POLICIES];
    for (int p = 0; p < n_pol; p++) {
        snprintf(path, sizeof(path), "%s/%s-%s.csv", out_dir, tag, policies[p]);
        if ((rc = report_write_csv(path, res[p].recs, res[p].n)) < 0)
            goto out;
        summarize(&res[p], slo, -1, &sum[p], &lat[p], &n_lat[p]);
    }
    char plot[1024], title[256];
    snprintf(plot, sizeof(plot), "%s/%s-cdf.svg", out_dir, tag);
    snprintf(title, sizeof(title), "latency CDF, %s (%d models, max_loaded %d, batch %d)", config_s,
             c.n_models, c.max_loaded, c.max_batch);
    rc = report_write_cdf_svg(plot, title, policies, (const double *const *)lat, n_lat, n_pol);
    for (int p = 0; p < n_pol; p++)
        free(lat[p]);
    if (rc < 0)
        goto out;
    /* the table */
    if (json) {
        rc = print_json(&c, config_s, link, warm, slo, plot, policies, n_pol, res, sum);
    } else {
        printf("%s: %d models, rates", config_s, c.n_models);
        for (int i = 0; i < c.n_models && !c.round_robin; i++)
            printf("%s%g", i ? "," : " ", c.rates[i]);
        printf(", CV %g, max_loaded %d, batch %d; warm latency %.1f ms, SLO %.1f ms", c.cv,
               c.max_loaded, c.max_batch, warm * 1e3, slo * 1e3);
        if (link > 0)
            printf("; emulated link %.2f GB/s per device", (double)link);
        printf("\n");
        printf("%-10s %6s %8s %8s %8s %8s %8s %6s %7s %6s %8s %8s %8s\n", "policy", "reqs",
               "mean ms", "p50 ms", "p90 ms", "p99 ms", "max ms", "SLO%", "req/s", "swaps",
               "swap s", "comp s", "queue s");
        for (int p = 0; p < n_pol; p++) {
            const struct summary *s = &sum[p];
            printf("%-10s %6zu %8.1f %8.1f %8.1f %8.1f %8.1f %6.1f %7.2f %6llu %8.2f %8.2f %8.2f\n",
                   policies[p], s->all.n, s->all.mean * 1e3, s->all.p50 * 1e3, s->all.p90 * 1e3,
                   s->all.p99 * 1e3, s->all.max * 1e3, 100 * s->slo_attain, s->throughput,
                   (unsigned long long)res[p].st.loads, res[p].st.swap_s, res[p].st.compute_s,
                   s->queue_s);
        }
        printf("per model\n%-10s %5s %6s %8s %8s %8s %8s %8s %6s\n", "policy", "model", "reqs",
               "mean ms", "p50 ms", "p90 ms", "p99 ms", "max ms", "SLO%");
        for (int p = 0; p < n_pol; p++)
            for (int i = 0; i < c.n_models; i++) {
                struct summary m;
                summarize(&res[p], slo, i, &m, NULL, NULL);
                if (m.all.n == 0)
                    continue;
                printf("%-10s %5d %6zu %8.1f %8.1f %8.1f %8.1f %8.1f %6.1f\n", policies[p], i,
                       m.all.n, m.all.mean * 1e3, m.all.p50 * 1e3, m.all.p90 * 1e3,
                       m.all.p99 * 1e3, m.all.max * 1e3, 100 * m.slo_attain);
            }
        printf("plot %s, requests %s/%s-<policy>.csv\n", plot, out_dir, tag);
    }
out:
    for (int p = 0; p < MAX_POLICIES; p++)
        free(res[p].recs);
    free(ev);
    free(dirs);
    return rc < 0 ? cli_fail("bench workload") : 0;
}
