/* shardswap bench workload: Computron's experiments, replayed in real time
 * through the engine on generated models, one run per scheduling policy on
 * the same arrival sequence, side by side. The flags, and the tables and
 * JSON; the replay, the measurements and the summaries are workload/'s. */
#include <errno.h>
#include <float.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/bench_experts.h"
#include "cli/commands.h"
#include "cli/model_cache.h"
#include "cli/sim_controls.h"
#include "cluster/job.h"
#include "core/error.h"
#include "core/jsonout.h"
#include "model/adapter.h"
#include "model/random.h"
#include "sched/sched.h"
#include "sched/sim.h"
#include "workload/arrival.h"
#include "workload/chat.h"
#include "workload/computron.h"
#include "workload/replay.h"
#include "workload/report.h"
#include "workload/sim_costs.h"
#include "workload/simulate.h"
#include "workload/summary.h"

#define MAX_MODELS WORKLOAD_MAX_MODELS
#define MAX_POLICIES 5

/* Under mpirun, the rest of a header line: which process each device is
 * on (nothing without a job). */
static void print_procs(const struct replay_rig *rig)
{
    int procs = cluster_job_procs(rig->job);
    if (!rig->job)
        return;
    if (!rig->procs) {
        printf("; across %d processes (device d on process d %% %d)", procs, procs);
        return;
    }
    printf("; across %d processes (device d on process", procs);
    for (int d = 0; d < rig->tp; d++)
        printf("%s%d", d ? "," : " ", rig->procs[d]);
    printf(")");
}

/* Under mpirun, the job's processes and each device's ("processes",
 * "device_procs") set on o; nothing without a job. 0, or nonzero when out
 * of memory. */
static int procs_json_set(json_t *o, const struct replay_rig *rig)
{
    if (!rig->job)
        return 0;
    int procs = cluster_job_procs(rig->job);
    json_t *dev = json_array();
    int bad = !dev;
    for (int d = 0; !bad && d < rig->tp; d++)
        bad |= json_array_append_new(dev, json_integer(rig->procs ? rig->procs[d] : d % procs));
    if (bad) {
        json_decref(dev);
        return -1;
    }
    return json_object_set_new(o, "processes", json_integer(procs)) |
           json_object_set_new(o, "device_procs", dev);
}

/* One policy's averages over seeds in simulate()'s JSON. */
static json_t *sim_policy_json(const char *policy, const struct simulate_summary *s,
                               const struct simulate_summary *first, bool is_first, bool chat)
{
    json_t *o = json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "policy", policy,
                     "mean_s", jsonout_real(s->mean, 6), "p50_s", jsonout_real(s->p50, 6),
                     "p90_s", jsonout_real(s->p90, 6), "p99_s", jsonout_real(s->p99, 6), "max_s",
                     jsonout_real(s->max, 6), "slo_attainment", jsonout_real(s->slo, 4), "swaps",
                     jsonout_real(s->swaps, 1), "p99_ratio", jsonout_real(s->p99 / first->p99, 4),
                     "mean_ratio", jsonout_real(s->mean / first->mean, 4), "worst_seed_p99_ratio",
                     jsonout_real(is_first ? 1.0 : s->worst_p99_ratio, 4));
    if (o && chat && (json_object_set_new(o, "ttft_p50_s", jsonout_real(s->ttft_p50, 6)) |
                      json_object_set_new(o, "ttft_p99_s", jsonout_real(s->ttft_p99, 6)) |
                      json_object_set_new(o, "tpot_p50_s", jsonout_real(s->tpot_p50, 6)) |
                      json_object_set_new(o, "tpot_p99_s", jsonout_real(s->tpot_p99, 6)) |
                      json_object_set_new(o, "token_slo_attainment",
                                          jsonout_real(s->token_slo, 4)) |
                      json_object_set_new(o, "goodput_rps", jsonout_real(s->goodput, 3)))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* --adapters: the same fine-tunes served as full models (full) and as
 * adapters of one base (ad), per policy, simulated: a table, or JSON. */
static json_t *adapters_compare(const struct replay_rig *rig, const struct workload_config *c,
                                const char *const *policies, int n_pol,
                                const struct simulate_summary *full,
                                const struct simulate_summary *ad, int rank, bool json)
{
    uint64_t ab[STACK_MAX_DEVICES] = {0};
    double total = 0;
    if (simulate_adapter_bytes(rig->paths[0], rig->tp, rank, ab) == 0)
        for (int d = 0; d < rig->tp; d++)
            total += (double)ab[d];
    if (!json) {
        printf("\n%d fine-tunes as full models against adapters of rank %d over one base "
               "(%.2f MB each over %d devices), the same arrivals, devices and costs\n",
               c->n_models, rank, total / 1e6, rig->tp);
        printf("%-11s %-9s %8s %8s %8s %8s %6s %8s %8s %9s", "policy", "served as", "mean ms",
               "p50 ms", "p99 ms", "max ms", "SLO%", "loads", "adapter", "GB moved");
        if (c->chat)
            printf(" %9s %9s %7s %8s", "ttft99 ms", "tpot99 ms", "tokSLO%", "good r/s");
        printf("\n");
    }
    json_t *rows = json ? json_array() : NULL;
    for (int p = 0; p < n_pol; p++)
        for (int k = 0; k < 2; k++) {
            const struct simulate_summary *x = k ? &ad[p] : &full[p];
            const char *as = k ? "adapters" : "models";
            if (json) {
                json_t *o = sim_policy_json(policies[p], x, &full[p], k == 0, c->chat);
                if (o &&
                    (json_object_set_new(o, "served_as", json_string(as)) |
                     json_object_set_new(o, "adapter_loads", jsonout_real(x->adapter_loads, 1)) |
                     json_object_set_new(o, "bytes_moved", jsonout_real(x->bytes, 0)))) {
                    json_decref(o);
                    o = NULL;
                }
                json_array_append_new(rows, o);
                continue;
            }
            printf("%-11s %-9s %8.1f %8.1f %8.1f %8.1f %6.1f %8.1f %8.1f %9.3f",
                   k ? "" : policies[p], as, x->mean * 1e3, x->p50 * 1e3, x->p99 * 1e3,
                   x->max * 1e3, 100 * x->slo, x->swaps, x->adapter_loads, x->bytes / 1e9);
            if (c->chat)
                printf(" %9.1f %9.2f %7.1f %8.2f", x->ttft_p99 * 1e3, x->tpot_p99 * 1e3,
                       100 * x->token_slo, x->goodput);
            printf("\n");
        }
    if (!json)
        return NULL;
    json_t *per = json_array();
    for (int d = 0; per && d < rig->tp; d++)
        json_array_append_new(per, json_integer((json_int_t)ab[d]));
    return json_pack("{s:i, s:i, s:o, s:o}", "fine_tunes", c->n_models, "rank", rank,
                     "adapter_bytes_per_device", per, "rows", rows);
}

/* The per-model controls given (sim_controls.h), as the flags said them:
 * one header line, nothing when none is given. */
static void controls_print(const struct sim_controls_flags *f)
{
    if (!sim_controls_any(f))
        return;
    const char *v[5] = {f->keep_alive, f->priority, f->max_queue_wait, f->min_resident, f->pinned};
    const char *k[5] = {"keep_alive", "priority", "max_queue_wait", "min_resident", "pinned"};
    printf("per-model controls (one value: every model's):");
    for (int i = 0; i < 5; i++)
        if (v[i])
            printf(" %s %s", k[i], v[i]);
    printf("\n");
}

/* The same as a JSON object of the flags' texts (null when not given). */
static json_t *controls_json(const struct sim_controls_flags *f)
{
    return json_pack("{s:o, s:o, s:o, s:o, s:o}", "keep_alive", jsonout_string(f->keep_alive),
                     "priority", jsonout_string(f->priority), "max_queue_wait",
                     jsonout_string(f->max_queue_wait), "min_resident",
                     jsonout_string(f->min_resident), "pinned", jsonout_string(f->pinned));
}

/* Where --simulate's costs come from: a costs file, cost flags, both, or
 * none (all measured); the header says it. */
struct costs_given {
    struct sim_costs c; /* the file's, then the flags' over it */
    const char *file;   /* --costs, or NULL */
    bool flags;         /* --load-s-per-gb or --batch-cost */
    const char *out;    /* --costs-out, or NULL */
};

/* The costs --simulate runs on, into *costs: what g gives, the rest
 * measured on rig (a load and batches together, then the chat terms), and
 * *warm the SLO unit: given, else a batch of 1 when the batches were given,
 * else measured. *load_bytes: what a load copies to its busiest device,
 * *load_s_per_gb the load's time per GB of it (load_s is that times
 * load_bytes); *measured: whether anything was measured. */
static int costs_resolve(const struct replay_rig *rig, const struct costs_given *g, bool chat,
                         int max_batch, struct sim_config *costs, double *warm,
                         uint64_t *load_bytes, double *load_s_per_gb, bool *measured)
{
    const struct sim_costs *c = &g->c;
    int rc = simulate_load_bytes(rig, load_bytes);
    if (rc < 0)
        return rc;
    if (c->batch_max > 0 && c->batch_max < max_batch)
        return err_set(ERR_INVALID,
                       "the batch costs given (batch_s) reach batches of %d; this run's reach %d",
                       c->batch_max, max_batch);
    if (chat && c->step_max > 0 && c->step_max < max_batch)
        return err_set(ERR_INVALID,
                       "the decode step costs given (step_s) reach batches of %d; this run's "
                       "reach %d",
                       c->step_max, max_batch);
    *measured = c->load_s_per_gb <= 0 || c->batch_max == 0;
    if (*measured) {
        fprintf(stderr, "measuring a load and batches of 1..%d on this machine...\n", max_batch);
        if ((rc = replay_measure_costs(rig, max_batch, costs)) < 0)
            return rc;
    } else { /* as replay_measure_costs sets them */
        costs->max_batch = max_batch;
        costs->overlap_tail = 0.5;
        costs->overlap_loads = replay_overlap_loads(rig);
    }
    /* a measured load as its time per GB too: load_s is then what a costs
     * file of that number gives, and --costs-out reproduces this run */
    double gb = (double)*load_bytes / 1e9;
    *load_s_per_gb = c->load_s_per_gb > 0 ? c->load_s_per_gb : costs->load_s / gb;
    costs->load_s = *load_s_per_gb * gb;
    for (int b = 1; c->batch_max > 0 && b <= max_batch; b++)
        costs->batch_s[b] = c->batch_s[b];
    if (c->overlap_tail >= 0)
        costs->overlap_tail = c->overlap_tail;
    if (chat) {
        if (c->base_prompt < 1 || c->prefill_token_s < 0 || c->step_max == 0) {
            fprintf(stderr, "measuring prefill per token and decode steps of 1..%d...\n",
                    max_batch);
            if ((rc = replay_measure_chat_costs(rig, max_batch, costs)) < 0)
                return rc;
            *measured = true;
        }
        if (c->base_prompt >= 1)
            costs->base_prompt = c->base_prompt;
        if (c->prefill_token_s >= 0)
            costs->prefill_token_s = c->prefill_token_s;
        for (int b = 1; c->step_max > 0 && b <= max_batch; b++)
            costs->step_s[b] = c->step_s[b];
    }
    if (c->warm_latency_s > 0)
        *warm = c->warm_latency_s;
    else if (c->batch_max > 0)
        *warm = costs->batch_s[1];
    else if ((rc = replay_warm_latency(rig, warm)) < 0)
        return rc;
    return 0;
}

/* The costs a run used, as a costs file holds them. */
static void costs_used(const struct sim_config *costs, bool chat, double warm, double load_s_per_gb,
                       struct sim_costs *u)
{
    sim_costs_init(u);
    u->load_s_per_gb = load_s_per_gb;
    u->batch_max = costs->max_batch;
    memcpy(u->batch_s, costs->batch_s, sizeof(u->batch_s));
    u->overlap_tail = costs->overlap_tail;
    u->warm_latency_s = warm;
    if (chat) {
        u->base_prompt = costs->base_prompt;
        u->prefill_token_s = costs->prefill_token_s;
        u->step_max = costs->max_batch;
        memcpy(u->step_s, costs->step_s, sizeof(u->step_s));
    }
}

/* Where the costs came from, for the header: "measured here", "from FILE",
 * "from flags", "from FILE and flags", and ", the rest measured here". */
static void costs_from(const struct costs_given *g, bool measured, char *buf, size_t cap)
{
    if (!g->file && !g->flags) {
        snprintf(buf, cap, "measured here");
        return;
    }
    snprintf(buf, cap, "from %s%s%s%s", g->file ? g->file : "", g->file && g->flags ? " and " : "",
             g->flags ? "flags" : "", measured ? ", the rest measured here" : "");
}

/* --simulate: the policies on a simulated clock (workload/simulate.h), with
 * the costs given (g) or measured on rig first; one config (one, named
 * label) or, with all, Computron's 19, each of whose models has the shape of
 * rig's model 0. slo <= 0: slo_scale x the warm latency. */
static int simulate(const struct replay_rig *rig, const struct workload_config *one,
                    const char *label, bool all, const char **policies, int n_pol, uint64_t seed,
                    int seeds, double duration, float slo, float slo_scale,
                    const struct costs_given *g, const struct sim_controls_flags *cf,
                    const struct sim_controls *ctl, int adapter_rank, bool json)
{
    double link = rig->link_gbps;
    struct sim_config costs;
    memset(&costs, 0, sizeof(costs));
    sim_controls_apply(ctl, &costs); /* every config's simulation copies costs */
    int max_batch = all ? 32 : one->max_batch;
    if (max_batch > SIM_MAX_BATCH)
        return err_set(ERR_INVALID, "--simulate models batches of up to %d", SIM_MAX_BATCH);
    double warm = 0;
    uint64_t load_bytes = 0;
    double load_s_per_gb = 0;
    bool measured = false;
    int rc = costs_resolve(rig, g, one->chat, max_batch, &costs, &warm, &load_bytes, &load_s_per_gb,
                           &measured);
    if (rc < 0)
        return rc;
    if (slo <= 0)
        slo = slo_scale * (float)warm;
    struct sim_costs used;
    costs_used(&costs, one->chat, warm, load_s_per_gb, &used);
    if (g->out && (rc = sim_costs_write(g->out, &used)) < 0)
        return rc;
    char from[600];
    costs_from(g, measured, from, sizeof(from));
    json_t *batch_s = NULL, *configs = NULL, *adapters_json = NULL;
    if (json) {
        batch_s = json_array();
        configs = json_array();
        for (int b = 1; batch_s && b <= max_batch; b++)
            json_array_append_new(batch_s, jsonout_real(costs.batch_s[b], 6));
    } else {
        printf("simulated clock, costs %s: load %.1f ms (%.6g s/GB x %.3f GB); batch of 1 %.1f "
               "ms, of %d %.1f ms; SLO %.1f ms; %d seeds x %g s per config; averages over "
               "seeds, ratios against %s",
               from, costs.load_s * 1e3, used.load_s_per_gb, (double)load_bytes / 1e9,
               costs.batch_s[1] * 1e3, max_batch, costs.batch_s[max_batch] * 1e3, slo * 1e3, seeds,
               duration, policies[0]);
        print_procs(rig);
        printf("\nbatch costs (requests: ms):");
        for (int b = 1; b <= max_batch; b = b < max_batch && 2 * b > max_batch ? max_batch : 2 * b)
            printf(" %d: %.3f", b, costs.batch_s[b] * 1e3);
        printf("; overlap tail %g\n", costs.overlap_tail);
        controls_print(cf);
        if (one->chat)
            printf("chat: prefill %.3f ms per prompt token beyond %d, decode step of 1 %.1f ms, "
                   "of %d %.1f ms; token SLO TTFT <= %g s, TPOT <= %g s\n",
                   costs.prefill_token_s * 1e3, costs.base_prompt, costs.step_s[1] * 1e3,
                   max_batch, costs.step_s[max_batch] * 1e3, one->slo_ttft_s, one->slo_tpot_s);
        printf("%-14s %-11s %8s %8s %8s %8s %8s %6s %6s %9s %10s %10s", "config", "policy",
               "mean ms", "p50 ms", "p90 ms", "p99 ms", "max ms", "SLO%", "swaps", "p99 ratio",
               "worst seed", "mean ratio");
        if (one->chat)
            printf(" %9s %9s %9s %9s %7s %8s", "ttft50 ms", "ttft99 ms", "tpot50 ms",
                   "tpot99 ms", "tokSLO%", "good r/s");
        printf("\n");
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
        struct simulate_summary s[MAX_POLICIES + 1]; /* [n_pol]: the floor */
        if ((rc = simulate_workload_floor(rig, &c, &costs, policies, n_pol, seed, seeds, duration,
                                          slo, s, &s[n_pol])) < 0)
            break;
        json_t *pols = json ? json_array() : NULL;
        json_t *floor = NULL;
        for (int p = 0; p <= n_pol; p++) {
            double r99 = s[p].p99 / s[0].p99, rmean = s[p].mean / s[0].mean;
            const char *pname = p < n_pol ? policies[p] : "floor";
            if (json && p < n_pol) {
                json_array_append_new(pols, sim_policy_json(pname, &s[p], &s[0], p == 0, c.chat));
                continue;
            }
            if (json) { /* a bound, not a policy: beside them */
                if ((floor = sim_policy_json(pname, &s[p], &s[0], false, false)))
                    json_object_del(floor, "policy");
                continue;
            }
            printf("%-14s %-11s %8.1f %8.1f %8.1f %8.1f %8.1f %6.1f %6.1f %9.2f %10.2f %10.2f",
                   p ? "" : name, pname, s[p].mean * 1e3, s[p].p50 * 1e3, s[p].p90 * 1e3,
                   s[p].p99 * 1e3, s[p].max * 1e3, 100 * s[p].slo, s[p].swaps, r99,
                   p ? s[p].worst_p99_ratio : 1.0, rmean);
            if (c.chat && p == n_pol) /* the floor bounds latencies only */
                printf(" %9s %9s %9s %9s %7s %8s", "-", "-", "-", "-", "-", "-");
            else if (c.chat) /* TTFT in ms, TPOT in ms per token, goodput in req/s */
                printf(" %9.1f %9.1f %9.2f %9.2f %7.1f %8.2f", s[p].ttft_p50 * 1e3,
                       s[p].ttft_p99 * 1e3, s[p].tpot_p50 * 1e3, s[p].tpot_p99 * 1e3,
                       100 * s[p].token_slo, s[p].goodput);
            printf("\n");
        }
        if (json)
            json_array_append_new(configs, json_pack("{s:s, s:o, s:o*}", "config", name,
                                                     "policies", pols, "floor", floor));
        if (adapter_rank > 0) { /* the same fine-tunes as adapters of one base */
            struct simulate_summary ad[MAX_POLICIES];
            if ((rc = simulate_workload_adapters(rig, &c, &costs, policies, n_pol, seed, seeds,
                                                 duration, slo, adapter_rank, ad)) < 0)
                break;
            adapters_json = adapters_compare(rig, &c, policies, n_pol, s, ad, adapter_rank, json);
        }
    }
    if (!json || rc < 0) {
        json_decref(batch_s);
        json_decref(configs);
        json_decref(adapters_json);
        return rc;
    }
    json_t *top = json_pack(
        "{s:b, s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:s, s:I, s:o, s:o}", "simulated", 1,
        "seeds", seeds, "duration_s", jsonout_real(duration, 6), "link_gb_s", jsonout_real(link, 6),
        "load_s", jsonout_real(costs.load_s, 6), "batch_s", batch_s, "configs", configs, "controls",
        controls_json(cf), "costs", sim_costs_json(&used), "costs_from", from, "load_bytes",
        (json_int_t)load_bytes, "overlap_loads", json_boolean(costs.overlap_loads), "slo_s",
        jsonout_real(slo, 6));
    if (top && adapters_json && json_object_set_new(top, "adapters", adapters_json) != 0) {
        json_decref(top);
        top = NULL;
    }
    if (top && procs_json_set(top, rig) != 0) {
        json_decref(top);
        top = NULL;
    }
    if (top && one->chat) {
        json_t *step_s = json_array();
        for (int b = 1; step_s && b <= max_batch; b++)
            json_array_append_new(step_s, jsonout_real(costs.step_s[b], 6));
        if (json_object_set_new(top, "prefill_token_s", jsonout_real(costs.prefill_token_s, 9)) |
            json_object_set_new(top, "step_s", step_s) |
            json_object_set_new(top, "slo_ttft_s", jsonout_real(one->slo_ttft_s, 6)) |
            json_object_set_new(top, "slo_tpot_s", jsonout_real(one->slo_tpot_s, 6))) {
            json_decref(top);
            top = NULL;
        }
    }
    return jsonout_print(top);
}

/* The latency fields of a summary: mean_s, p50_s, p90_s, p99_s, max_s and
 * slo_attainment (null when it counted no request). */
static int summary_json_set(json_t *o, const struct summary *s);

/* --adapters in real time: per policy the fine-tunes as full models (full)
 * and as adapters of one base (ad), the same arrivals: a table, or (json)
 * the "adapters" object of the JSON. rank: the adapters' (0: read from
 * dir). */
static json_t *adapters_realtime(const struct workload_config *c, const char *const *policies,
                                 int n_pol, const struct replay_result *full,
                                 const struct replay_result *ad, double slo, const char *dir,
                                 int rank, bool json, int *rc)
{
    json_t *rows = json ? json_array() : NULL;
    *rc = 0;
    if (!json) {
        printf("\n%d fine-tunes as full models against LoRA adapters of rank %d over one base "
               "(%s), the same arrivals and devices\n",
               c->n_models, rank, dir);
        printf("%-10s %-9s %6s %6s %8s %8s %8s %8s %6s %6s %8s %9s", "policy", "served as", "reqs",
               "failed", "mean ms", "p50 ms", "p99 ms", "max ms", "SLO%", "loads", "adapter",
               "GB moved");
        if (c->chat)
            printf(" %9s %9s %7s %8s", "ttft99 ms", "tpot99 ms", "tokSLO%", "good r/s");
        printf("\n");
    }
    for (int p = 0; p < n_pol && *rc == 0; p++)
        for (int k = 0; k < 2 && *rc == 0; k++) {
            const struct replay_result *r = k ? &ad[p] : &full[p];
            const char *as = k ? "adapters" : "models";
            struct summary m;
            struct token_summary t = {0};
            if ((*rc = summary_compute(r->recs, r->n, -1, slo, &m, NULL, NULL)) < 0 ||
                (c->chat &&
                 (*rc = summary_tokens(r->recs, r->n, -1, c->slo_ttft_s, c->slo_tpot_s, &t)) < 0))
                break;
            uint64_t model_loads = r->st.loads; /* the adapters' are counted apart */
            if (json) {
                json_t *o =
                    json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:o}", "policy", policies[p],
                              "served_as", as, "requests", (json_int_t)m.all.n, "failed",
                              (json_int_t)m.failed, "model_loads", (json_int_t)model_loads,
                              "adapter_loads", (json_int_t)r->st.adapter_loads, "bytes_moved",
                              (json_int_t)r->bytes_loaded, "swap_s", jsonout_real(r->st.swap_s, 4));
                if (o &&
                    (summary_json_set(o, &m) != 0 ||
                     (c->chat &&
                      (json_object_set_new(o, "ttft_p99_s", jsonout_real(t.ttft.p99, 6)) |
                       json_object_set_new(o, "tpot_p99_s", jsonout_real(t.tpot.p99, 6)) |
                       json_object_set_new(o, "token_slo_attainment", jsonout_real(t.attain, 4)) |
                       json_object_set_new(o, "goodput_rps", jsonout_real(t.goodput, 3)))))) {
                    json_decref(o);
                    o = NULL;
                }
                json_array_append_new(rows, o);
                continue;
            }
            printf("%-10s %-9s %6zu %6zu %8.1f %8.1f %8.1f %8.1f %6.1f %6llu %8llu %9.3f",
                   k ? "" : policies[p], as, m.all.n, m.failed, m.all.mean * 1e3, m.all.p50 * 1e3,
                   m.all.p99 * 1e3, m.all.max * 1e3, 100 * m.slo_attain,
                   (unsigned long long)model_loads, (unsigned long long)r->st.adapter_loads,
                   (double)r->bytes_loaded / 1e9);
            if (c->chat)
                printf(" %9.1f %9.2f %7.1f %8.2f", t.ttft.p99 * 1e3, t.tpot.p99 * 1e3,
                       100 * t.attain, t.goodput);
            printf("\n");
        }
    if (!json || *rc < 0) {
        json_decref(rows);
        return NULL;
    }
    return json_pack("{s:i, s:i, s:s, s:o}", "fine_tunes", c->n_models, "rank", rank, "dir", dir,
                     "rows", rows);
}

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
 * summary, engine counters, per-model summaries and its CSV (csv_prefix-POLICY.csv). */
static int print_json(const struct workload_config *c, const char *config_s,
                      const struct replay_rig *rig, double warm, double slo, const char *plot,
                      const char *csv_prefix, const char **policies, int n_pol,
                      const struct replay_result *res, const struct summary *sum,
                      const struct token_summary *tok, json_t *adapters)
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
            if (summary_compute(res[p].recs, res[p].n, i, slo, &m, NULL, NULL) < 0) {
                bad = 1;
                break;
            }
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
        if (c->chat) /* the token SLOs (summary_tokens) */
            bad |= json_object_set_new(o, "ttft_p50_s", jsonout_real(tok[p].ttft.p50, 6)) |
                   json_object_set_new(o, "ttft_p99_s", jsonout_real(tok[p].ttft.p99, 6)) |
                   json_object_set_new(o, "tpot_p50_s", jsonout_real(tok[p].tpot.p50, 6)) |
                   json_object_set_new(o, "tpot_p99_s", jsonout_real(tok[p].tpot.p99, 6)) |
                   json_object_set_new(o, "token_slo_attainment",
                                       jsonout_real(tok[p].attain, 4)) |
                   json_object_set_new(o, "goodput_rps", jsonout_real(tok[p].goodput, 3));
        char csv[1100];
        snprintf(csv, sizeof(csv), "%s-%s.csv", csv_prefix, policies[p]);
        bad |= json_object_set_new(o, "csv", jsonout_string(csv));
        bad |= json_array_append_new(pols, o);
    }
    if (bad) {
        json_decref(rates);
        json_decref(pols);
        json_decref(adapters);
        return jsonout_print(NULL); /* the out-of-memory error */
    }
    /* the rig's budgets, so a server can be given the same (bench serve's comparisons) */
    struct stack_config sc;
    struct stack_model_config mc[MAX_MODELS];
    char names[MAX_MODELS][16];
    uint64_t dev[STACK_MAX_DEVICES] = {0}, host = 0;
    replay_stack_config(rig, c->n_models, c->max_loaded, c->max_batch, policies[0], &sc, mc,
                        names);
    bool sized = stack_size(&sc, dev, &host) == 0;
    json_t *top = json_pack(
        "{s:s, s:s, s:i, s:i, s:i, s:o, s:o, s:i, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
        "config",
        config_s, "compute", rig->compute ? rig->compute : "auto", "models", c->n_models, "max_loaded", c->max_loaded, "max_batch", c->max_batch,
        "cv", jsonout_real(c->cv, 6), "rates", rates, "devices", rig->tp, "device_kind",
        rig->device_kind ? rig->device_kind : "cpu", "device_budget_bytes",
        sized ? json_integer((json_int_t)dev[0]) : json_null(), "host_budget_bytes",
        sized ? json_integer((json_int_t)host) : json_null(), "link_gb_s",
        jsonout_real(rig->link_gbps, 6),
        "warm_latency_s", jsonout_real(warm, 6), "slo_s", jsonout_real(slo, 6), "plot",
        jsonout_string(plot), "policies", pols);
    if (top && adapters && json_object_set_new(top, "adapters", adapters) != 0) {
        json_decref(top);
        top = NULL;
    } else if (!top) {
        json_decref(adapters);
    }
    if (top && procs_json_set(top, rig) != 0) {
        json_decref(top);
        top = NULL;
    }
    if (top && c->chat &&
        (json_object_set_new(top, "slo_ttft_s", jsonout_real(c->slo_ttft_s, 6)) |
         json_object_set_new(top, "slo_tpot_s", jsonout_real(c->slo_tpot_s, 6)) |
         json_object_set_new(top, "zipf", jsonout_real(c->zipf, 6)))) {
        json_decref(top);
        top = NULL;
    }
    return jsonout_print(top);
}

int bench_workload(int argc, char **argv)
{
    bool usage = false; /* a bad --config: exit with the usage code */
    const char *config_s = "computron:4", *policies_s = "computron,swapwise", *rates_s = NULL;
    /* an opt-1.3b-wide model cut to 2 layers (0.41 GB in f16): on 2 cores a
     * swap (~20 ms) and a request (~30 ms) weigh about the same, and a config
     * runs in about a minute */
    const char *preset = "opt-1.3b", *dtype_s = "f16", *cache = "models", *out_dir = "bench-out";
    const char *compute_s = NULL;
    const char *devices_s = NULL;
    int layers = 0 /* 2, or with --expert-residency the preset's */,
        tp = 0 /* 2, or --devices' count */, n_models = 0, max_loaded = 0, max_batch = 0,
        rr_requests = 40;
    float cv = 0, duration = 20, alpha = -1, total_rate = 0, slo = 0, slo_scale = 5, link = 0;
    float slo_ttft = CHAT_SLO_TTFT_S, slo_tpot = CHAT_SLO_TPOT_S;
    uint64_t seed = 1;
    bool json = false, simulated = false;
    int seeds = 20, n_adapters = 0, adapter_rank = 16;
    struct sim_controls_flags cf = {0};
    const char *costs_file = NULL, *costs_out = NULL, *batch_cost = NULL;
    const char *adapter_dir = NULL;
    float load_per_gb = 0;
    struct bench_experts_flags ef = {0};
    struct flag flags[] = {
        FLAG("config", FLAG_STR, &config_s, "computron:K|chat:M:R[:CV[:ZIPF]]|round-robin|custom",
             "Computron's config K (0..18), chat traffic (M models with Zipf(ZIPF, default 1) "
             "rates summing to R req/s, Gamma CV (default 1); per request a prompt of "
             "log-normal length, median 200 tokens, sigma 1.0, clipped to [1, 1536], and "
             "max_tokens log-normal, median 100, sigma 0.8, clipped to [1, 512]; max_loaded "
             "M/4, batch 8), Computron's round-robin worst case, or custom (default "
             "computron:4)"),
        FLAG("policy", FLAG_STR, &policies_s, "A,B",
             "up to 5 policies to compare, the first the ratios' reference (default "
             "computron,swapwise): swapwise, swapwise-preempt, swapwise-partial (victims "
             "give up only the last layers a load lacks room for), computron, lru, fifo, and "
             "with --simulate clairvoyant (it knows the future arrivals) and "
             "clairvoyant-partial; --simulate adds a floor row, a lower bound no policy beats "
             "(the models' --layers are what partial residency trims)"),
        FLAG_RANGE("models", FLAG_INT, &n_models, "N", "custom/round-robin: number of models", 1,
                   MAX_MODELS, "1..256"),
        FLAG("rates", FLAG_STR, &rates_s, "R1,R2,...", "custom: requests/s per model"),
        FLAG_RANGE("alpha", FLAG_FLOAT, &alpha, "A", "custom: power-law skew instead of --rates", 0,
                   100, "0..100"),
        FLAG_RANGE("total-rate", FLAG_FLOAT, &total_rate, "R",
                   "custom: requests/s over all models with --alpha", FLT_TRUE_MIN, 1e6,
                   "0 < R <= 1000000"),
        FLAG_RANGE("cv", FLAG_FLOAT, &cv, "C",
                   "custom: Gamma CV of inter-arrival times (1 = Poisson)", FLT_TRUE_MIN, 100,
                   "0 < C <= 100"),
        FLAG_RANGE("max-loaded", FLAG_INT, &max_loaded, "K", "models that fit the devices at once",
                   1, MAX_MODELS, "1..256"),
        FLAG_RANGE("max-batch", FLAG_INT, &max_batch, "B", "requests per batch", 1, SIM_MAX_BATCH,
                   "1..256"),
        FLAG_RANGE("duration", FLAG_FLOAT, &duration, "S",
                   "seconds of arrivals (default 20; Computron: 30)", FLT_TRUE_MIN, 86400,
                   "0 < S <= 86400"),
        FLAG_RANGE("requests", FLAG_INT, &rr_requests, "N", "round-robin: requests (default 40)", 1,
                   1000000, "1..1000000"),
        FLAG_RANGE("slo", FLAG_FLOAT, &slo, "S",
                   "SLO in seconds (default: --slo-scale x warm latency)", FLT_TRUE_MIN, 86400,
                   "0 < S <= 86400"),
        FLAG_RANGE("slo-ttft", FLAG_FLOAT, &slo_ttft, "S",
                   "chat: SLO on time to first token, seconds (default 5)", FLT_TRUE_MIN, 86400,
                   "0 < S <= 86400"),
        FLAG_RANGE("slo-tpot", FLAG_FLOAT, &slo_tpot, "S",
                   "chat: SLO on time per output token after the first, seconds (default 0.2)",
                   FLT_TRUE_MIN, 86400, "0 < S <= 86400"),
        FLAG_RANGE("slo-scale", FLAG_FLOAT, &slo_scale, "X",
                   "SLO as a multiple of the warm single-request latency (default 5)", FLT_TRUE_MIN,
                   1e6, "0 < X <= 1000000"),
        FLAG_CHOICE("preset", &preset, "NAME", "model shape (default opt-1.3b)",
                    model_preset_names()),
        FLAG_RANGE("layers", FLAG_INT, &layers, "N",
                   "layers per model (default 2; --expert-residency: the preset's)", 1, 4096,
                   "1..4096"),
        FLAG("dtype", FLAG_STR, &dtype_s, "f16|bf16|f32", "model dtype (default f16)"),
        COMPUTE_FLAG(&compute_s),
        FLAG_RANGE("tp", FLAG_INT, &tp, "N",
                   "devices per model, all models on the same ones (default 2, or --devices' "
                   "count)",
                   1, 8, "1..8"),
        FLAG("devices", FLAG_STR, &devices_s, "N|LIST",
             "the devices every model spans: N CPU devices, cpu:0,cpu:1,..., or cuda:G,... "
             "(a GPU listed again is another partition of it; needs a CUDA build), an item "
             "of process P under mpirun as P/cpu:0 (default: --tp CPU devices, under mpirun "
             "device d on process d % P)"),
        FLAG("seed", FLAG_U64, &seed, "S", "arrival seed (default 1)"),
        FLAG_RANGE("link-gbps", FLAG_FLOAT, &link, "G",
                   "CPU devices only: emulate a host link of G GB/s per device (a GPU's "
                   "swap/compute ratio; default: memory speed)",
                   0.001, 10000, "0.001..10000 GB/s"),
        FLAG("cache", FLAG_STR, &cache, "DIR", "where generated models are kept (default models)"),
        FLAG("out-dir", FLAG_STR, &out_dir, "DIR", "CSV and plot go here (default bench-out)"),
        FLAG("simulate", FLAG_BOOL, &simulated, NULL,
             "replay on a simulated clock (sched/sim.h) with a load's and batches' times "
             "measured here first (or given: --costs, --load-s-per-gb, --batch-cost), over "
             "--seeds arrival seeds; --config computron:all runs all 19"),
        FLAG_RANGE("seeds", FLAG_INT, &seeds, "N",
                   "--simulate: arrival seeds per config (default 20)", 1, 10000, "1..10000"),
        FLAG("costs", FLAG_STR, &costs_file, "FILE",
             "--simulate: simulate on the costs in FILE (JSON: load_s_per_gb, batch_s as "
             "[[size, seconds], ...], overlap_tail, warm_latency_s, and for chat configs "
             "base_prompt, prefill_token_s, step_s; what it leaves out is measured), so tables "
             "reproduce from run to run"),
        FLAG("costs-out", FLAG_STR, &costs_out, "FILE",
             "--simulate: write the costs used (measured or given) to FILE, for --costs"),
        FLAG_RANGE("load-s-per-gb", FLAG_FLOAT, &load_per_gb, "S",
                   "--simulate: a load takes S seconds per GB of its largest shard's weights "
                   "(over --costs and the measured one)",
                   FLT_TRUE_MIN, 1e6, "0 < S <= 1000000"),
        FLAG("batch-cost", FLAG_STR, &batch_cost, "B:S,...",
             "--simulate: a batch of B requests computes in S seconds, sizes rising from 1, "
             "linear in between, up to the largest batch (over --costs and the measured ones; "
             "e.g. 1:0.027,8:0.093,32:0.257)"),
        FLAG("keep-alive", FLAG_STR, &cf.keep_alive, "S|S1,S2,...",
             "--simulate: seconds a model stays on its devices once idle, from the end of its "
             "last batch (0: it leaves at once; -1: forever); one value for every model or one "
             "per model (default: the policy's own, lru 300 s, the others forever; computron "
             "and fifo never unload)"),
        FLAG("priority", FLAG_STR, &cf.priority, "P|P1,P2,...",
             "--simulate: when several models wait, the higher one's load and batches go first "
             "(-1000..1000, default 0; swapwise, lru and clairvoyant)"),
        FLAG("max-queue-wait", FLAG_STR, &cf.max_queue_wait, "S|S1,S2,...",
             "--simulate: seconds after which a model's oldest waiting request puts it before "
             "every model whose requests have not waited that long (0: no bound, the default; "
             "swapwise, lru and clairvoyant)"),
        FLAG("min-resident", FLAG_STR, &cf.min_resident, "S|S1,S2,...",
             "--simulate: seconds after a load during which the model is a victim only when no "
             "other model can make the room (0: none, the default; swapwise, lru and "
             "clairvoyant)"),
        FLAG("pinned", FLAG_STR, &cf.pinned, "true|false|B1,B2,...",
             "--simulate: a pinned model is loaded on demand and never a victim (default "
             "false)"),
        FLAG_RANGE("adapters", FLAG_INT, &n_adapters, "N",
                   "the workload's N models are fine-tunes: also serve them as LoRA adapters "
                   "of model 0 (adapter k takes model k's requests) on the same devices, and "
                   "print both per policy (the workload must have N models); in real time the "
                   "adapters are --adapter-dir's or generated beside model 0 in --cache",
                   1, MAX_MODELS, "1..256"),
        FLAG_RANGE("adapter-rank", FLAG_INT, &adapter_rank, "R",
                   "--adapters: every adapter's rank, over all of the family's projections "
                   "(default 16; generated ones in real time)",
                   1, 1024, "1..1024"),
        FLAG("adapter-dir", FLAG_STR, &adapter_dir, "DIR",
             "--adapters in real time: DIR/adapter_0 .. DIR/adapter_{N-1}, PEFT adapters of "
             "model 0's shape (e.g. tools/make_random_lora.py's; default: generated, random, "
             "rank --adapter-rank)"),
        FLAG("expert-residency", FLAG_STR, &ef.mode, "on|off|both",
             "--simulate, --preset mixtral-8x7b or qwen3-30b-a3b: the models are mixtures of "
             "experts of the preset's shape (no weights: every cost must be given), served "
             "without expert-level residency (off), with it (on: the victims of a trimming "
             "policy's load, swapwise-partial's or clairvoyant-partial's, give up their "
             "coldest experts first and stay resident, other policies' leave whole; a model "
             "with work holds room for its absent experts, made by the policy before its "
             "batch, and a step waits for the experts its routing picks that are not on the "
             "devices), or both "
             "side by side (default both, once any expert flag is given), per --routing-skew"),
        FLAG("routing-skew", FLAG_STR, &ef.skews, "S1,S2,...",
             "--expert-residency: Zipf exponents of the routing trace, each token of each step "
             "picking top_k experts per layer, expert of popularity rank r with weight "
             "1/(r+1)^S (0: uniform; default 0,0.6,1.2,2; at most 8)"),
        FLAG_RANGE("routing-drift", FLAG_INT, &ef.drift, "N",
                   "--expert-residency: the popularity ranking rotates by one expert every N "
                   "steps of a model (default: never)",
                   1, 100000000, "1..100000000"),
        FLAG_RANGE("room", FLAG_FLOAT, &ef.room, "X",
                   "--expert-residency: each device's memory, in models' shards (weights and "
                   "batch reserve; default --max-loaded + 0.5)",
                   1, 1e6, "1..1000000"),
        FLAG_RANGE("copy-latency-s", FLAG_FLOAT, &ef.copy_latency_s, "S",
                   "--expert-residency: the fixed cost of one layer's on-demand expert copies, "
                   "on top of their bytes at the load's rate (default 0.00005)",
                   FLT_TRUE_MIN, 10, "0 < S <= 10"),
        FLAG("json", FLAG_BOOL, &json, NULL, "print one JSON object instead of tables"),
    };
    int rc = args_parse("bench workload",
                        "Replays a workload in real time through the engine, once per policy on "
                        "the same arrival sequence, on generated models that all share the same "
                        "devices (--devices, CPU or CUDA; room for --max-loaded of them; every "
                        "model starts in host "
                        "memory). Requests are Computron's: \"Berkeley is the number one public\" "
                        "(8 tokens), max_tokens 1, top_k 50, top_p 0.5, temperature 0.7; a chat "
                        "config draws each request's prompt length and max_tokens instead (see "
                        "--config). Prints "
                        "latency mean/p50/p90/p99/max, SLO attainment, throughput, swaps and time "
                        "spent swapping, computing and queueing, per model and overall; for chat "
                        "traffic also TTFT and TPOT (p50, p99), token SLO attainment (TTFT <= "
                        "--slo-ttft and TPOT <= --slo-tpot; a failed request misses) and goodput "
                        "(requests/s meeting it); writes a "
                        "CSV of every request and an SVG latency CDF with one curve per policy. "
                        "With --simulate, replays on a simulated clock instead (sched/sim.h: "
                        "the same policy code, loads and batches taking the times measured here "
                        "first, or those --costs and the cost flags give; the header prints "
                        "the costs used and --costs-out saves them), averaged over --seeds arrival "
                        "sequences; copies competing with compute are not modelled, so use it with --link-gbps. The simulated "
                        "models take the server's per-model controls (models[].keep_alive, "
                        "priority, max_queue_wait, min_resident, pinned in its YAML) as "
                        "--keep-alive, --priority, --max-queue-wait, --min-resident and "
                        "--pinned, each one value for every model or a comma list of one per "
                        "model (model 0 first; computron:all takes one value). Under mpirun "
                        "(mpirun -n P shardswap bench workload ...) the devices are spread over "
                        "the processes: device d on process d % P, or as --devices lists them "
                        "(P/cpu:0); each process reads the models from the same --cache path "
                        "(process 0 generates them there: on several nodes, use a shared "
                        "filesystem or run the same command once on each node first).",
                        argc, argv, flags, sizeof(flags) / sizeof(flags[0]));
    if (rc)
        return rc;
    const int moe_layers = layers; /* 0: the preset's */
    if (layers == 0)
        layers = 2;
    struct workload_config c = {0};
    const char *policies[MAX_POLICIES];
    int n_pol = 0;
    char pol_buf[256], (*dirs)[512] = NULL, (*ad_bufs)[1100] = NULL;
    const char *paths[MAX_MODELS];
    struct replay_rig rig = {.paths = paths, .tp = tp, .link_gbps = link, .compute = compute_s};
    bool compute_set;
    enum kern_compute compute;
    if (cli_compute(compute_s, &compute_set, &compute) < 0)
        return args_usage_fail("bench workload");
    struct stack_config dev_sc = {0};
    if (devices_s) {
        if (stack_parse_devices("--devices", devices_s, &dev_sc) < 0)
            return args_usage_fail("bench workload");
        if (tp > 0 && tp != dev_sc.n_devices) {
            fprintf(stderr,
                    "shardswap bench workload: --devices %s names %d devices but --tp is %d "
                    "(every model spans all of them)\n",
                    devices_s, dev_sc.n_devices, tp);
            return EXIT_USAGE;
        }
        if (dev_sc.n_devices > 8) {
            fprintf(stderr, "shardswap bench workload: --devices %s: %d devices, at most 8\n",
                    devices_s, dev_sc.n_devices);
            return EXIT_USAGE;
        }
        if (strcmp(dev_sc.device_kind, "cuda") == 0 && link > 0) {
            fprintf(stderr, "shardswap bench workload: --link-gbps is for CPU devices only; "
                            "--devices %s copies over the GPU's own link\n",
                    devices_s);
            return EXIT_USAGE;
        }
        tp = dev_sc.n_devices;
        rig.device_kind = dev_sc.device_kind;
        rig.gpus = dev_sc.gpus_set ? dev_sc.gpus : NULL;
        rig.procs = dev_sc.procs_set ? dev_sc.procs : NULL; /* "P/cpu:0": as listed */
    }
    if (tp == 0)
        tp = 2;
    rig.tp = tp;
    rig.job = cli_job(); /* under mpirun: device d on process d % P unless listed */
    struct replay_result res[MAX_POLICIES], res_ad[MAX_POLICIES];
    json_t *ad_json = NULL;
    double *lat[MAX_POLICIES] = {0}; /* each policy's latencies, for the plot */
    size_t n_lat[MAX_POLICIES] = {0};
    struct arrival *ev = NULL;
    struct chat_request *lens = NULL; /* chat: (n_ev) each request's lengths */
    size_t n_ev = 0;
    memset(res, 0, sizeof(res));
    memset(res_ad, 0, sizeof(res_ad));
    snprintf(pol_buf, sizeof(pol_buf), "%s", policies_s);
    /* every flag is checked here, before a model is generated or run */
    for (char *tok = strtok(pol_buf, ","); tok; tok = strtok(NULL, ",")) {
        if (n_pol == MAX_POLICIES) {
            fprintf(stderr, "shardswap bench workload: --policy %s: at most %d policies\n",
                    policies_s, MAX_POLICIES);
            return EXIT_USAGE;
        }
        if (!(simulated ? sched_policy_find_sim(tok) : sched_policy_find(tok)))
            return args_usage_fail("bench workload");
        policies[n_pol++] = tok;
    }
    if (n_pol == 0) {
        fprintf(stderr, "shardswap bench workload: --policy \"%s\" names no policy (expected "
                        "1..%d comma-separated names, e.g. computron,swapwise)\n",
                policies_s, MAX_POLICIES);
        return EXIT_USAGE;
    }
    bool all = false;
    if (strcmp(config_s, "computron:all") == 0) {
        if (!simulated) {
            rc = err_set(ERR_INVALID, "--config computron:all needs --simulate (in real time, "
                                      "tools/bench_computron.sh runs them one by one)");
            goto bad_flag;
        }
        all = true;
        workload_computron(0, &c);
    } else {
        struct workload_flags wf = {.config = config_s, .rates = rates_s, .n_models = n_models,
                                    .alpha = alpha, .total_rate = total_rate, .cv = cv};
        if ((rc = workload_config_from_flags(&wf, &c)) < 0)
            goto bad_flag;
    }
    if (c.chat) {
        c.slo_ttft_s = slo_ttft;
        c.slo_tpot_s = slo_tpot;
        rig.fit_prompt = c.lengths.prompt.max; /* the stack sizes for the longest request */
        rig.fit_max_tokens = c.lengths.output.max;
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
    if (adapter_dir && (n_adapters == 0 || simulated)) {
        rc = err_set(ERR_INVALID, "--adapter-dir needs --adapters, in real time (--simulate "
                                  "sizes adapters from --adapter-rank)");
        goto bad_flag;
    }
    if (n_adapters > 0 && !simulated && (c.round_robin || rig.job)) {
        rc = err_set(ERR_INVALID, c.round_robin ? "--adapters replays open-loop arrivals; "
                                                  "round-robin is a closed loop"
                                                : "--adapters in real time runs in one process "
                                                  "(adapters of a model spanning processes are "
                                                  "not served yet)");
        goto bad_flag;
    }
    if (n_adapters > 0 && (all || n_adapters != c.n_models)) {
        rc = err_set(ERR_INVALID,
                     "--adapters %d: the workload has %d models; expected one per fine-tune, "
                     "in one config (e.g. --config chat:%d:R or --models %d)",
                     n_adapters, c.n_models, n_adapters, n_adapters);
        goto bad_flag;
    }
    struct sim_controls ctl;
    if (sim_controls_any(&cf) && !simulated) {
        rc = err_set(ERR_INVALID, "--keep-alive, --priority, --max-queue-wait, --min-resident "
                                  "and --pinned need --simulate (a server takes them in its "
                                  "YAML)");
        goto bad_flag;
    }
    if ((rc = sim_controls_parse(&cf, c.n_models, !all, &ctl)) < 0)
        goto bad_flag;
    struct costs_given given = {.file = costs_file, .out = costs_out,
                                .flags = load_per_gb > 0 || batch_cost};
    if ((given.file || given.flags || given.out) && !simulated) {
        rc = err_set(ERR_INVALID, "--costs, --costs-out, --load-s-per-gb and --batch-cost need "
                                  "--simulate");
        goto bad_flag;
    }
    sim_costs_init(&given.c);
    if (costs_file && (rc = sim_costs_read(costs_file, &given.c)) < 0)
        goto out;
    if (load_per_gb > 0)
        given.c.load_s_per_gb = load_per_gb;
    if (batch_cost && (rc = sim_costs_parse_curve("--batch-cost", batch_cost, given.c.batch_s,
                                                  &given.c.batch_max)) < 0)
        goto bad_flag;
    if (bench_experts_any(&ef)) { /* shapes, not models: nothing is generated */
        struct bench_experts_plan plan;
        char from[600];
        if (!simulated || all || n_adapters > 0) {
            rc = err_set(ERR_INVALID, "--expert-residency, --routing-skew, --routing-drift, "
                                      "--room and --copy-latency-s need --simulate and one "
                                      "config, without --adapters");
            goto bad_flag;
        }
        if ((rc = bench_experts_parse(&ef, &plan)) < 0 ||
            (rc = simulate_moe_shape(preset, 0, &(struct simulate_moe_shape){0})) < 0)
            goto bad_flag;
        if (given.out) {
            rc = err_set(ERR_INVALID, "--costs-out: --expert-residency measures nothing; its "
                                      "costs are the ones given");
            goto bad_flag;
        }
        costs_from(&given, false, from, sizeof(from));
        rc = bench_experts_run(&ef, &plan, &c, config_s, preset, moe_layers, tp, &given.c, from,
                               &ctl, policies, n_pol, seed, seeds, duration, slo, slo_scale, json);
        usage = rc == ERR_INVALID;
        goto out;
    }
    if (all) /* one model measures the costs; every config's models have its shape */
        c.n_models = 1;
    /* --simulate measures on model 0 only: every simulated model has its shape */
    int n_gen = simulated ? 1 : c.n_models;
    /* where the results go, and room for the models, before any is made */
    if (!simulated && (rc = cli_check_out_dir(out_dir)) < 0)
        goto out;
    if ((rc = model_cache_check(cache, preset, layers, dtype_s, n_gen)) < 0)
        goto out;
    if (!(dirs = calloc((size_t)n_gen, sizeof(*dirs)))) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < n_gen; i++) {
        if ((rc = model_cache_preset(cache, preset, layers, dtype_s, (uint64_t)i, dirs[i],
                                     sizeof(dirs[i]))) < 0)
            goto out;
        paths[i] = dirs[i];
    }
    rig.n_models = n_gen;
    /* --adapters in real time: the fine-tunes as adapters of model 0 too */
    char ad_dir[1024];
    const char *ad_paths[MAX_MODELS];
    if (n_adapters > 0 && !simulated) {
        if (adapter_dir)
            snprintf(ad_dir, sizeof(ad_dir), "%s", adapter_dir);
        else if ((rc = model_cache_adapters(paths[0], n_adapters, adapter_rank, dtype_s, ad_dir,
                                            sizeof(ad_dir))) < 0)
            goto out;
        if (!(ad_bufs = calloc((size_t)n_adapters, sizeof(*ad_bufs)))) {
            rc = err_set(ERR_NOMEM, "out of memory");
            goto out;
        }
        for (int k = 0; k < n_adapters; k++) {
            struct stat st;
            snprintf(ad_bufs[k], sizeof(ad_bufs[k]), "%s/adapter_%d", ad_dir, k);
            if (stat(ad_bufs[k], &st) != 0 || !S_ISDIR(st.st_mode)) {
                rc = err_set(ERR_NOT_FOUND,
                             "--adapter-dir %s: no directory adapter_%d (expected adapter_0 .. "
                             "adapter_%d, one PEFT adapter per fine-tune)",
                             ad_dir, k, n_adapters - 1);
                goto out;
            }
            ad_paths[k] = ad_bufs[k];
        }
    }
    /* --simulate draws its own, per seed */
    if (!c.round_robin && !simulated && (rc = replay_arrivals(&c, duration, seed, &ev, &n_ev)) < 0)
        goto out;
    if (c.chat && !simulated) { /* each request's lengths, from the same seed */
        if (!(lens = calloc(n_ev ? n_ev : 1, sizeof(*lens)))) {
            rc = err_set(ERR_NOMEM, "out of memory for %zu requests", n_ev);
            goto out;
        }
        chat_requests_make(&c.lengths, seed, ev, n_ev, lens);
    }
    if (simulated) { /* the SLO's unit comes with the costs */
        rc = simulate(&rig, &c, config_s, all, policies, n_pol, seed, seeds, duration, slo,
                      slo_scale, &given, &cf, &ctl, n_adapters ? adapter_rank : 0, json);
        goto out;
    }
    double warm = 0;
    if ((rc = replay_warm_latency(&rig, &warm)) < 0)
        goto out;
    if (slo <= 0)
        slo = slo_scale * (float)warm;
    for (int p = 0; p < n_pol; p++) {
        fprintf(stderr, "running %s with policy %s (%zu requests)...\n", config_s, policies[p],
                c.round_robin ? (size_t)rr_requests : n_ev);
        if ((rc = lens ? replay_run_chat(&rig, &c, policies[p], ev, n_ev, lens, &res[p])
                       : replay_run(&rig, &c, policies[p], ev, n_ev, rr_requests, &res[p])) < 0)
            goto out;
        if (n_adapters == 0)
            continue;
        struct replay_rig ar = rig; /* the same arrivals, to adapters of model 0 */
        ar.adapters = ad_paths;
        ar.n_adapters = n_adapters;
        fprintf(stderr, "running %s with policy %s, the fine-tunes as adapters...\n", config_s,
                policies[p]);
        if ((rc = lens ? replay_run_chat(&ar, &c, policies[p], ev, n_ev, lens, &res_ad[p])
                       : replay_run(&ar, &c, policies[p], ev, n_ev, 0, &res_ad[p])) < 0)
            goto out;
    }
    /* files: a CSV per policy and one CDF plot, in out_dir (checked above) */
    char tag[64], path[1024];
    snprintf(tag, sizeof(tag), "%s", config_s);
    for (char *q = tag; *q; q++)
        if (*q == ':')
            *q = '-';
    struct summary sum[MAX_POLICIES];
    struct token_summary tok[MAX_POLICIES];
    memset(tok, 0, sizeof(tok));
    for (int p = 0; p < n_pol; p++) {
        if (c.chat && (rc = summary_tokens(res[p].recs, res[p].n, -1, c.slo_ttft_s,
                                           c.slo_tpot_s, &tok[p])) < 0)
            goto out;
        snprintf(path, sizeof(path), "%s/%s-%s.csv", out_dir, tag, policies[p]);
        if (n_adapters > 0) {
            char ap[1100];
            snprintf(ap, sizeof(ap), "%s/%s-%s-adapters.csv", out_dir, tag, policies[p]);
            if ((rc = report_write_csv(ap, res_ad[p].recs, res_ad[p].n)) < 0)
                goto out;
        }
        if ((rc = report_write_csv(path, res[p].recs, res[p].n)) < 0 ||
            (rc = summary_compute(res[p].recs, res[p].n, -1, slo, &sum[p], &lat[p],
                                  &n_lat[p])) < 0)
            goto out;
    }
    char plot[1024], title[256];
    snprintf(plot, sizeof(plot), "%s/%s-cdf.svg", out_dir, tag);
    snprintf(title, sizeof(title), "latency CDF, %s (%d models, max_loaded %d, batch %d)", config_s,
             c.n_models, c.max_loaded, c.max_batch);
    if ((rc = report_write_cdf_svg(plot, title, policies, (const double *const *)lat, n_lat,
                                   n_pol)) < 0)
        goto out;
    /* the table */
    int ad_rank = adapter_rank; /* --adapter-dir's: adapter 0's */
    if (n_adapters > 0 && adapter_dir) {
        struct model_config *bc = NULL;
        uint64_t b;
        ad_rank = 0;
        if (model_config_load(paths[0], &bc) == 0 &&
            model_adapter_bytes(ad_paths[0], bc, paths[0], &b, &ad_rank) < 0)
            ad_rank = 0;
        model_config_free(bc);
    }
    if (json && n_adapters > 0 &&
        !(ad_json = adapters_realtime(&c, policies, n_pol, res, res_ad, slo, ad_dir, ad_rank, true,
                                      &rc)) &&
        rc < 0)
        goto out;
    if (json) {
        char csv_prefix[1024];
        snprintf(csv_prefix, sizeof(csv_prefix), "%s/%s", out_dir, tag);
        rc = print_json(&c, config_s, &rig, warm, slo, plot, csv_prefix, policies, n_pol, res, sum,
                        tok, ad_json);
        ad_json = NULL; /* print_json's */
    } else {
        printf("%s: %d models, rates", config_s, c.n_models);
        for (int i = 0; i < c.n_models && !c.round_robin; i++)
            printf("%s%g", i ? "," : " ", c.rates[i]);
        printf(", CV %g, max_loaded %d, batch %d; warm latency %.1f ms, SLO %.1f ms", c.cv,
               c.max_loaded, c.max_batch, warm * 1e3, slo * 1e3);
        if (link > 0)
            printf("; emulated link %.2f GB/s per device", (double)link);
        print_procs(&rig);
        printf("\n");
        if (c.chat)
            printf("chat: token SLO TTFT <= %g s, TPOT <= %g s\n", c.slo_ttft_s, c.slo_tpot_s);
        printf("%-10s %6s %8s %8s %8s %8s %8s %6s %7s %6s %8s %8s %8s", "policy", "reqs",
               "mean ms", "p50 ms", "p90 ms", "p99 ms", "max ms", "SLO%", "req/s", "swaps",
               "swap s", "comp s", "queue s");
        if (c.chat)
            printf(" %9s %9s %9s %9s %7s %8s", "ttft50 ms", "ttft99 ms", "tpot50 ms",
                   "tpot99 ms", "tokSLO%", "good r/s");
        printf("\n");
        for (int p = 0; p < n_pol; p++) {
            const struct summary *s = &sum[p];
            printf("%-10s %6zu %8.1f %8.1f %8.1f %8.1f %8.1f %6.1f %7.2f %6llu %8.2f %8.2f %8.2f",
                   policies[p], s->all.n, s->all.mean * 1e3, s->all.p50 * 1e3, s->all.p90 * 1e3,
                   s->all.p99 * 1e3, s->all.max * 1e3, 100 * s->slo_attain, s->throughput,
                   (unsigned long long)res[p].st.loads, res[p].st.swap_s, res[p].st.compute_s,
                   s->queue_s);
            if (c.chat)
                printf(" %9.1f %9.1f %9.2f %9.2f %7.1f %8.2f", tok[p].ttft.p50 * 1e3,
                       tok[p].ttft.p99 * 1e3, tok[p].tpot.p50 * 1e3, tok[p].tpot.p99 * 1e3,
                       100 * tok[p].attain, tok[p].goodput);
            printf("\n");
        }
        printf("per model\n%-10s %5s %6s %8s %8s %8s %8s %8s %6s\n", "policy", "model", "reqs",
               "mean ms", "p50 ms", "p90 ms", "p99 ms", "max ms", "SLO%");
        for (int p = 0; p < n_pol; p++)
            for (int i = 0; i < c.n_models; i++) {
                struct summary m;
                if ((rc = summary_compute(res[p].recs, res[p].n, i, slo, &m, NULL, NULL)) < 0)
                    goto out;
                if (m.all.n == 0)
                    continue;
                printf("%-10s %5d %6zu %8.1f %8.1f %8.1f %8.1f %8.1f %6.1f\n", policies[p], i,
                       m.all.n, m.all.mean * 1e3, m.all.p50 * 1e3, m.all.p90 * 1e3,
                       m.all.p99 * 1e3, m.all.max * 1e3, 100 * m.slo_attain);
            }
        if (n_adapters > 0 &&
            (adapters_realtime(&c, policies, n_pol, res, res_ad, slo, ad_dir, ad_rank, false, &rc),
             rc < 0))
            goto out;
        printf("plot %s, requests %s/%s-<policy>.csv%s\n", plot, out_dir, tag,
               n_adapters > 0 ? " (-<policy>-adapters.csv: as adapters)" : "");
    }
out:
    json_decref(ad_json);
    free(ad_bufs);
    for (int p = 0; p < MAX_POLICIES; p++) {
        replay_result_free(&res_ad[p]);
        replay_result_free(&res[p]);
        free(lat[p]);
    }
    free(ev);
    free(lens);
    free(dirs);
    if (usage) {
        fprintf(stderr, "shardswap bench workload: %s\n", err_msg());
        return EXIT_USAGE;
    }
    return rc < 0 ? cli_fail("bench workload") : 0;
bad_flag: /* a --config that names no workload: a usage error */
    usage = true;
    goto out;
}
