#include "cli/bench_experts.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/jsonout.h"
#include "sched/sim.h"
#include "workload/simulate.h"

#define MAX_POLICIES 5

bool bench_experts_any(const struct bench_experts_flags *f)
{
    return f->mode || f->skews || f->drift > 0 || f->room > 0 || f->copy_latency_s > 0;
}

int bench_experts_parse(const struct bench_experts_flags *f, struct bench_experts_plan *p)
{
    memset(p, 0, sizeof(*p));
    const char *mode = f->mode ? f->mode : "both";
    p->off = strcmp(mode, "off") == 0 || strcmp(mode, "both") == 0;
    p->on = strcmp(mode, "on") == 0 || strcmp(mode, "both") == 0;
    if (!p->off && !p->on)
        return err_set(ERR_INVALID, "--expert-residency %s: expected on, off or both", mode);
    const char *text = f->skews ? f->skews : "0,0.6,1.2,2";
    const char *at = text;
    for (;;) {
        char *end;
        errno = 0;
        double v = strtod(at, &end);
        if (end == at || errno || !(v >= 0 && v <= 10) || (*end && *end != ',') ||
            p->n_skews == BENCH_EXPERTS_MAX_SKEWS)
            return err_set(ERR_INVALID,
                           "--routing-skew %s: expected 1..%d comma-separated Zipf exponents "
                           "in 0..10 (0: uniform routing)",
                           text, BENCH_EXPERTS_MAX_SKEWS);
        p->skews[p->n_skews++] = v;
        if (!*end)
            break;
        at = end + 1;
    }
    return 0;
}

/* The costs the simulation runs on, all from given: a whole shard's load
 * (load_s_per_gb x its GB), the batches, and for chat the prefill and
 * decode terms; overlap_loads as GPUs copy (beside compute). */
static int costs_take(const struct sim_costs *g, const struct workload_config *c,
                      uint64_t shard_weights, struct sim_config *sc)
{
    const int b = c->max_batch;
    if (g->load_s_per_gb <= 0 || g->batch_max < b ||
        (c->chat && (g->base_prompt < 1 || g->prefill_token_s < 0 || g->step_max < b)))
        return err_set(ERR_INVALID,
                       "--expert-residency simulates shapes without weights, so it measures "
                       "nothing: give every cost (--costs FILE with load_s_per_gb, batch_s up "
                       "to %d%s, or --load-s-per-gb and --batch-cost)",
                       b, c->chat ? ", base_prompt, prefill_token_s and step_s" : "");
    memset(sc, 0, sizeof(*sc));
    sc->max_batch = b;
    sc->load_s = g->load_s_per_gb * (double)shard_weights / 1e9;
    memcpy(sc->batch_s, g->batch_s, sizeof(sc->batch_s));
    sc->overlap_tail = g->overlap_tail >= 0 ? g->overlap_tail : 0.5;
    sc->overlap_loads = true;
    if (c->chat) {
        sc->base_prompt = g->base_prompt;
        sc->prefill_token_s = g->prefill_token_s;
        memcpy(sc->step_s, g->step_s, sizeof(sc->step_s));
    }
    return 0;
}

static json_t *row_json(double skew, const char *policy, bool on, const struct simulate_summary *x,
                        bool chat)
{
    json_t *o =
        json_pack("{s:o, s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
                  "routing_skew", jsonout_real(skew, 4), "policy", policy, "experts",
                  on ? "resident" : "whole", "mean_s", jsonout_real(x->mean, 6), "p50_s",
                  jsonout_real(x->p50, 6), "p99_s", jsonout_real(x->p99, 6), "slo_attainment",
                  jsonout_real(x->slo, 4), "throughput_rps", jsonout_real(x->throughput, 4),
                  "loads", jsonout_real(x->swaps, 2), "bytes_moved", jsonout_real(x->bytes, 0),
                  "expert_loads_per_step", jsonout_real(x->expert_loads_per_step, 3),
                  "expert_wait_s", jsonout_real(x->expert_wait_s, 4), "expert_streamed_per_step",
                  jsonout_real(x->expert_streamed_per_step, 3));
    if (o && chat &&
        (json_object_set_new(o, "ttft_p50_s", jsonout_real(x->ttft_p50, 6)) |
         json_object_set_new(o, "ttft_p99_s", jsonout_real(x->ttft_p99, 6)) |
         json_object_set_new(o, "tpot_p50_s", jsonout_real(x->tpot_p50, 6)) |
         json_object_set_new(o, "tpot_p99_s", jsonout_real(x->tpot_p99, 6)) |
         json_object_set_new(o, "token_slo_attainment", jsonout_real(x->token_slo, 4)))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int bench_experts_run(const struct bench_experts_flags *f, const struct bench_experts_plan *plan,
                      const struct workload_config *c, const char *label, const char *preset,
                      int layers, int tp, const struct sim_costs *given, const char *costs_from,
                      const struct sim_controls *ctl, const char *const *policies, int n_pol,
                      uint64_t seed, int seeds, double duration, double slo, double slo_scale,
                      bool json)
{
    struct simulate_moe m = {.tp = tp,
                             .drift_steps = f->drift,
                             .room = f->room > 0 ? f->room : c->max_loaded + 0.5,
                             .copy_latency_s = f->copy_latency_s > 0 ? f->copy_latency_s : 5e-5};
    int rc = simulate_moe_shape(preset, layers, &m.shape);
    if (rc < 0)
        return rc;
    uint64_t w, kv;
    simulate_moe_shard(&m.shape, tp, c, &w, &kv);
    struct sim_config costs;
    if ((rc = costs_take(given, c, w, &costs)) < 0)
        return rc;
    sim_controls_apply(ctl, &costs);
    if (slo <= 0)
        slo = slo_scale * costs.batch_s[1];
    json_t *rows = json ? json_array() : NULL;
    if (!json) {
        printf("%s: %d models of %s's shape (%d layers of %d experts, top %d; %.2f GB of "
               "weights in bf16, %.1f%% of them routed experts) over %d devices, each with "
               "room for %.2f models' shards (%.2f GB: weights %.2f, batch reserve %.2f)\n",
               label, c->n_models, preset, m.shape.layers, m.shape.n_experts, m.shape.top_k,
               (double)m.shape.weights / 1e9,
               100.0 * (double)m.shape.expert * m.shape.n_experts * m.shape.layers /
                   (double)m.shape.weights,
               tp, m.room, m.room * (double)(w + kv) / 1e9, (double)w / 1e9, (double)kv / 1e9);
        printf("simulated clock, costs %s: a shard's load %.1f ms (%.6g s/GB), on-demand "
               "experts at its rate plus %.0f us per layer's copies; batch of 1 %.1f ms; "
               "routing drift %s; %d seeds x %g s; averages over seeds\n",
               costs_from, costs.load_s * 1e3, given->load_s_per_gb, m.copy_latency_s * 1e6,
               costs.batch_s[1] * 1e3, f->drift > 0 ? "on" : "none", seeds, duration);
        if (f->drift > 0)
            printf("routing drift: the popularity ranking rotates by one every %d steps\n",
                   f->drift);
        printf("%-5s %-16s %-8s %8s %8s", "skew", "policy", "experts", "p50 ms", "p99 ms");
        if (c->chat)
            printf(" %9s %9s %9s", "ttft50 ms", "ttft99 ms", "tpot99 ms");
        printf(" %7s %6s %8s %9s %9s %8s\n", "req/s", "loads", "GB moved", "exp/step", "streamed",
               "wait s");
    }
    for (int k = 0; k < plan->n_skews && rc == 0; k++) {
        m.zipf = plan->skews[k];
        struct simulate_summary s[2][MAX_POLICIES];
        for (int on = 0; on < 2 && rc == 0; on++) {
            if (!(on ? plan->on : plan->off))
                continue;
            m.residency = on;
            rc = simulate_workload_experts(c, &costs, policies, n_pol, seed, seeds, duration, slo,
                                           &m, s[on]);
        }
        for (int p = 0; p < n_pol && rc == 0; p++)
            for (int on = 0; on < 2; on++) {
                const struct simulate_summary *x = &s[on][p];
                if (!(on ? plan->on : plan->off))
                    continue;
                if (json) {
                    json_array_append_new(rows, row_json(m.zipf, policies[p], on, x, c->chat));
                    continue;
                }
                printf("%-5g %-16s %-8s %8.1f %8.1f", m.zipf, policies[p],
                       on ? "resident" : "whole", x->p50 * 1e3, x->p99 * 1e3);
                if (c->chat)
                    printf(" %9.1f %9.1f %9.2f", x->ttft_p50 * 1e3, x->ttft_p99 * 1e3,
                           x->tpot_p99 * 1e3);
                printf(" %7.3f %6.1f %8.1f %9.2f %9.2f %8.2f\n", x->throughput, x->swaps,
                       x->bytes / 1e9, x->expert_loads_per_step, x->expert_streamed_per_step,
                       x->expert_wait_s);
            }
    }
    if (!json || rc < 0) {
        json_decref(rows);
        return rc;
    }
    json_t *top = json_pack(
        "{s:b, s:s, s:s, s:i, s:i, s:i, s:i, s:I, s:I, s:I, s:o, s:i, s:o, s:o, s:s, s:i, s:o, "
        "s:o, s:o}",
        "simulated", 1, "config", label, "preset", preset, "models", c->n_models, "layers",
        m.shape.layers, "experts", m.shape.n_experts, "top_k", m.shape.top_k, "weights_bytes",
        (json_int_t)m.shape.weights, "shard_weights_bytes", (json_int_t)w, "shard_reserve_bytes",
        (json_int_t)kv, "room_models", jsonout_real(m.room, 4), "devices", tp, "load_s",
        jsonout_real(costs.load_s, 6), "copy_latency_s", jsonout_real(m.copy_latency_s, 9),
        "costs_from", costs_from, "routing_drift_steps", f->drift, "slo_s", jsonout_real(slo, 6),
        "costs", sim_costs_json(given), "rows", rows);
    return jsonout_print(top);
}
