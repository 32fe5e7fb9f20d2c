#include "workload/simulate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/stack.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "swap/swap.h"
#include "workload/arrival.h"
#include "workload/stats.h"
#include "workload/summary.h"

/* Adds one seed's latencies lat[0..n) (n >= 1) and loads into *o, each
 * weighed 1/seeds; *p99 gets the seed's p99. */
static int summary_add_seed(struct simulate_summary *o, const double *lat, size_t n, double slo,
                            const struct sim_stats *st, int seeds, double *p99)
{
    struct latency_stats ls;
    int rc = stats_latency_compute(lat, n, &ls);
    if (rc < 0)
        return rc;
    o->mean += ls.mean / seeds;
    o->p50 += ls.p50 / seeds;
    o->p90 += ls.p90 / seeds;
    o->p99 += ls.p99 / seeds;
    o->max += ls.max / seeds;
    o->slo += stats_slo_attainment(lat, n, slo) / seeds;
    if (st) {
        o->swaps += (double)st->loads / seeds;
        o->adapter_loads += (double)st->adapter_loads / seeds;
        o->bytes +=
            (double)(st->bytes_loaded + st->adapter_bytes_loaded + st->expert_bytes_loaded) / seeds;
        o->expert_wait_s += st->expert_wait_s / seeds;
        if (st->steps > 0) {
            o->expert_loads_per_step += (double)st->expert_loads / (double)st->steps / seeds;
            o->expert_streamed_per_step += (double)st->expert_streamed / (double)st->steps / seeds;
        }
    }
    *p99 = ls.p99;
    return 0;
}

/* Adds one seed's token summary of rq[0..n) against c's SLOs into *o. */
static int tokens_add_seed(struct simulate_summary *o, const struct workload_config *c,
                           const struct sim_request *rq, size_t n, int seeds)
{
    struct request_record *recs = calloc(n, sizeof(*recs));
    if (!recs)
        return err_set(ERR_NOMEM, "out of memory for %zu simulated requests", n);
    for (size_t i = 0; i < n; i++)
        recs[i] = (struct request_record){.id = i, .model = rq[i].model,
                                          .t_arrival = rq[i].arrival, .t_start = rq[i].start,
                                          .t_first_token = rq[i].first_token,
                                          .t_done = rq[i].done, .n_prompt = rq[i].n_prompt,
                                          .n_output = rq[i].n_output,
                                          .batch_size = rq[i].batch_size};
    struct token_summary ts;
    int rc = summary_tokens(recs, n, -1, c->slo_ttft_s, c->slo_tpot_s, &ts);
    free(recs);
    if (rc < 0)
        return rc;
    o->ttft_p50 += ts.ttft.p50 / seeds;
    o->ttft_p99 += ts.ttft.p99 / seeds;
    o->tpot_p50 += ts.tpot.p50 / seeds;
    o->tpot_p99 += ts.tpot.p99 / seeds;
    o->token_slo += ts.attain / seeds;
    o->goodput += ts.goodput / seeds;
    return 0;
}

/* One seed of one policy: run the requests on sc, then add their latencies
 * (and tokens, for chat traffic) to o; *p99 is this seed's, *last the last
 * request's end. */
static int run_seed(const struct sim_config *sc, struct sim_request *rq, size_t n, double *lat,
                    const struct workload_config *c, bool chat, double slo, int seeds,
                    struct simulate_summary *o, double *p99, double *last)
{
    struct sim_stats st;
    int rc = sim_run(sc, rq, n, &st);
    if (rc < 0)
        return rc;
    *last = 0;
    for (size_t i = 0; i < n; i++) {
        lat[i] = rq[i].done - rq[i].arrival;
        *last = rq[i].done > *last ? rq[i].done : *last;
    }
    if ((rc = summary_add_seed(o, lat, n, slo, &st, seeds, p99)) < 0)
        return rc;
    return chat ? tokens_add_seed(o, c, rq, n, seeds) : 0;
}

/* Each request's floor (simulate.h): its own compute at the cheapest batch
 * size, and no earlier than the first moment any load can end. */
static void floor_latencies(const struct sim_config *sc, const struct sim_request *rq, size_t n,
                            double *lat)
{
    double min_batch = INFINITY, min_step = INFINITY;
    for (int b = 1; b <= sc->max_batch; b++) {
        min_batch = sc->batch_s[b] < min_batch ? sc->batch_s[b] : min_batch;
        min_step = sc->step_s[b] < min_step ? sc->step_s[b] : min_step;
    }
    for (size_t i = 0; i < n; i++) {
        const struct sim_request *q = &rq[i];
        double svc = min_batch, done;
        if (q->n_output > 0)
            svc += sc->prefill_token_s * (q->n_prompt > sc->base_prompt
                                              ? q->n_prompt - sc->base_prompt : 0) +
                   (q->n_output - 1) * min_step;
        done = q->arrival + svc;
        /* its model became resident by a load that began at 0 or later; with
         * overlap a one-token batch ends overlap_tail of its compute after
         * the load (a chat request's own steps may end sooner: not counted) */
        double after_load = !sc->overlap_loads ? sc->load_s + svc
                            : q->n_output <= 0 ? sc->load_s + sc->overlap_tail * svc
                                               : 0;
        lat[i] = (done > after_load ? done : after_load) - q->arrival;
    }
}

/* The layer structure partial residency trims by (sim_config.layers and
 * layer_bytes): dir's layer count and, per device of a tp-way split, one
 * layer's blob as the swap manager allocates it (rounded up to 64 bytes);
 * the layers of a model are alike. */
static int layers_of(const char *dir, int tp, int *n_layers, uint64_t *layer)
{
    struct model_config *cfg = NULL;
    struct st_checkpoint *ck = NULL;
    int rc = model_config_load(dir, &cfg);
    if (rc == 0)
        rc = st_open(dir, &ck);
    for (int d = 0; rc == 0 && d < tp; d++) {
        struct model_shard sh = {
            .tp_rank = d, .tp_size = tp, .layer_begin = 0, .layer_end = cfg->info.n_layers};
        struct model *m = NULL;
        struct model_layout lay;
        if ((rc = model_shard_open(cfg, ck, &sh, &m, &lay)) < 0)
            break;
        layer[d] = lay.n_blobs > 1 ? (lay.blob_bytes[1] + 63) / 64 * 64 : 0;
        model_layout_free(&lay);
        model_close(m);
    }
    if (rc == 0)
        *n_layers = cfg->info.n_layers;
    st_close(ck);
    model_config_free(cfg);
    return rc;
}

int simulate_load_bytes(const struct replay_rig *rig, uint64_t *bytes)
{
    uint64_t weights[STACK_MAX_DEVICES] = {0}, host = 0;
    int rc = swap_layout_bytes(rig->paths[0], rig->tp, 1, NULL, weights, &host);
    *bytes = 0;
    for (int d = 0; rc == 0 && d < rig->tp; d++)
        *bytes = weights[d] > *bytes ? weights[d] : *bytes;
    return rc;
}

int simulate_adapter_bytes(const char *dir, int tp, int rank, uint64_t *bytes)
{
    struct model_config *cfg = NULL;
    int rc = model_config_load(dir, &cfg);
    if (rc < 0)
        return rc;
    const struct model_info *in = &cfg->info;
    const int q = in->n_heads * in->head_dim, kv = in->n_kv_heads * in->head_dim;
    const bool opt = strcmp(in->family, "opt") == 0;
    /* (in, out, row-parallel) of each projection a layer adapts */
    const struct {
        int in, out;
        bool row;
    } proj[] = {{in->hidden, q, false},       {in->hidden, kv, false},
                {in->hidden, kv, false},      {q, in->hidden, true},
                {in->hidden, in->ffn, false}, {in->ffn, in->hidden, true},
                {in->hidden, in->ffn, false}};
    const int n_proj = opt ? 6 : 7; /* OPT: fc1, fc2; the Llama family: gate, down, up */
    const size_t es = dtype_size(in->dtype);
    for (int d = 0; d < tp; d++) {
        uint64_t layer = 0;
        for (int j = 0; j < n_proj; j++) {
            /* column-parallel: A whole, B by output rows; row-parallel: A
             * by input columns, B whole */
            uint64_t a =
                (uint64_t)rank * (proj[j].row ? (uint64_t)proj[j].in / tp : (uint64_t)proj[j].in);
            uint64_t b =
                (uint64_t)rank * (proj[j].row ? (uint64_t)proj[j].out : (uint64_t)proj[j].out / tp);
            layer += (a + b) * es;
        }
        bytes[d] = (layer + 63) / 64 * 64 * (uint64_t)in->n_layers;
    }
    model_config_free(cfg);
    return 0;
}

int simulate_workload(const struct replay_rig *rig, const struct workload_config *c,
                      const struct sim_config *costs, const char *const *policies, int n_pol,
                      uint64_t seed, int seeds, double duration, double slo,
                      struct simulate_summary *s)
{
    return simulate_workload_floor(rig, c, costs, policies, n_pol, seed, seeds, duration, slo, s,
                                   NULL);
}

/* simulate_workload_floor's body; with adapter_rank > 0, c's models are
 * adapters of that rank over one base (simulate_workload_adapters). */
static int simulate_run(const struct replay_rig *rig, const struct workload_config *c,
                        const struct sim_config *costs, const char *const *policies, int n_pol,
                        uint64_t seed, int seeds, double duration, double slo, int adapter_rank,
                        struct simulate_summary *s, struct simulate_summary *floor);

int simulate_workload_floor(const struct replay_rig *rig, const struct workload_config *c,
                            const struct sim_config *costs, const char *const *policies,
                            int n_pol, uint64_t seed, int seeds, double duration, double slo,
                            struct simulate_summary *s, struct simulate_summary *floor)
{
    return simulate_run(rig, c, costs, policies, n_pol, seed, seeds, duration, slo, 0, s, floor);
}

int simulate_workload_adapters(const struct replay_rig *rig, const struct workload_config *c,
                               const struct sim_config *costs, const char *const *policies,
                               int n_pol, uint64_t seed, int seeds, double duration, double slo,
                               int rank, struct simulate_summary *s)
{
    if (rank < 1)
        return err_set(ERR_INVALID, "adapter rank %d: expected >= 1", rank);
    return simulate_run(rig, c, costs, policies, n_pol, seed, seeds, duration, slo, rank, s, NULL);
}

static int simulate_run(const struct replay_rig *rig, const struct workload_config *c,
                        const struct sim_config *costs, const char *const *policies, int n_pol,
                        uint64_t seed, int seeds, double duration, double slo, int adapter_rank,
                        struct simulate_summary *s, struct simulate_summary *floor)
{
    /* each model's device bytes (weights and its largest batch) and the
     * budgets, as the real run's stack sizes them */
    int tp = rig->tp;
    struct stack_config stc;
    struct stack_model_config mc[1];
    char names[1][16];
    replay_stack_config(rig, 1, 1, c->max_batch, "swapwise", &stc, mc, names);
    uint64_t shard[STACK_MAX_DEVICES], budget[STACK_MAX_DEVICES], host;
    int rc = stack_size(&stc, shard, &host);
    stc.fit_models = c->max_loaded;
    if (rc < 0 || (rc = stack_size(&stc, budget, &host)) < 0)
        return rc;
    for (int d = 0; d < tp; d++)
        shard[d] -= 1u << 20; /* stack_size's slack, once per device */
    /* of those, the batch's memory (its KV caches and activations): what a
     * batch paused by a SCHED_PREEMPT keeps on the devices while the weights
     * leave, as the engine keeps it (sim_config.kv_bytes); left out, the
     * simulator would count it free and favour preemption. The largest
     * batch's, as the budgets are sized: a bound on what the engine's holds. */
    uint64_t weights[STACK_MAX_DEVICES] = {0}, wh = 0;
    if ((rc = swap_layout_bytes(mc[0].path, tp, 1, NULL, weights, &wh)) < 0)
        return rc;
    /* and of the weights, one layer's per device: what a trim gives up */
    uint64_t layer[STACK_MAX_DEVICES] = {0};
    int n_layers = 0;
    if ((rc = layers_of(mc[0].path, tp, &n_layers, layer)) < 0)
        return rc;
    /* with adapters: one base, c's models its adapters, each loading its
     * largest shard over the link at the rate a model's load moves its
     * weights (load_s for the largest shard's weights) */
    const int n_sim = adapter_rank > 0 ? 1 : c->n_models, n_ad = adapter_rank > 0 ? c->n_models : 0;
    uint64_t ad_shard[STACK_MAX_DEVICES] = {0}, ad_max = 0, w_max = 0;
    if (n_ad && (rc = simulate_adapter_bytes(mc[0].path, tp, adapter_rank, ad_shard)) < 0)
        return rc;
    for (int d = 0; d < tp; d++) {
        ad_max = ad_shard[d] > ad_max ? ad_shard[d] : ad_max;
        w_max = weights[d] > w_max ? weights[d] : w_max;
    }
    const double ad_load_s = w_max ? costs->load_s * (double)ad_max / (double)w_max : 0;
    uint64_t *bytes = calloc((size_t)n_sim * tp * 3 + (size_t)n_ad * tp, sizeof(uint64_t));
    int *ad_base = n_ad ? calloc((size_t)n_ad, sizeof(int)) : NULL;
    double *ad_load = n_ad ? calloc((size_t)n_ad, sizeof(double)) : NULL;
    if (!bytes || (n_ad && (!ad_base || !ad_load))) {
        free(bytes);
        free(ad_base);
        free(ad_load);
        return err_set(ERR_NOMEM, "out of memory for %d models' sizes", c->n_models);
    }
    uint64_t *ad_bytes = bytes + (size_t)n_sim * tp * 3;
    for (int k = 0; k < n_ad; k++) {
        memcpy(ad_bytes + (size_t)k * tp, ad_shard, sizeof(uint64_t) * (size_t)tp);
        ad_load[k] = ad_load_s;
    }
    uint64_t *kv = bytes + (size_t)n_sim * tp, *lb = kv + (size_t)n_sim * tp;
    for (int i = 0; i < n_sim; i++) {
        memcpy(bytes + (size_t)i * tp, shard, sizeof(uint64_t) * (size_t)tp);
        memcpy(lb + (size_t)i * tp, layer, sizeof(uint64_t) * (size_t)tp);
        for (int d = 0; d < tp; d++)
            kv[(size_t)i * tp + d] = shard[d] > weights[d] ? shard[d] - weights[d] : 0;
    }
    memset(s, 0, sizeof(*s) * (size_t)n_pol);
    if (floor)
        memset(floor, 0, sizeof(*floor));
    for (int k = 0; rc == 0 && k < seeds; k++) {
        struct arrival *ev = NULL;
        size_t n = 0;
        if ((rc = replay_arrivals(c, duration, seed + (uint64_t)k, &ev, &n)) < 0)
            break;
        struct sim_request *rq = calloc(n ? n : 1, sizeof(*rq));
        double *lat = calloc(n ? n : 1, sizeof(double)), first_p99 = 0;
        struct chat_request *cr = c->chat ? calloc(n ? n : 1, sizeof(*cr)) : NULL;
        if (!rq || !lat || (c->chat && !cr))
            rc = err_set(ERR_NOMEM, "out of memory for %zu simulated requests", n);
        if (rc == 0 && cr)
            chat_requests_make(&c->lengths, seed + (uint64_t)k, ev, n, cr);
        for (int p = 0; rc == 0 && n > 0 && p < n_pol; p++) {
            struct sim_config sc = *costs;
            if (!(sc.policy = sched_policy_find_sim(policies[p]))) {
                rc = ERR_INVALID; /* sched_policy_find_sim says which */
                break;
            }
            sc.n_models = n_sim;
            sc.n_adapters = n_ad;
            sc.adapter_base = ad_base;
            sc.adapter_bytes = ad_bytes;
            sc.adapter_load_s = ad_load;
            sc.n_devices = tp;
            sc.bytes = bytes;
            sc.kv_bytes = kv;
            sc.layers = n_layers;
            sc.layer_bytes = lb;
            sc.max_loaded = c->max_loaded;
            sc.max_batch = c->max_batch;
            for (int d = 0; d < tp; d++)
                sc.budget[d] = budget[d]; /* as replay_run's stack */
            for (size_t i = 0; i < n; i++)
                rq[i] = (struct sim_request){.arrival = ev[i].t,
                                             .model = n_ad ? 0 : ev[i].model,
                                             .adapter = n_ad ? ev[i].model + 1 : 0,
                                             .n_prompt = cr ? cr[i].n_prompt : 0,
                                             .n_output = cr ? cr[i].n_output : 0};
            double p99, last;
            rc = run_seed(&sc, rq, n, lat, c, cr != NULL, slo, seeds, &s[p], &p99, &last);
            if (rc < 0)
                break;
            if (p == 0)
                first_p99 = p99;
            else if (p99 / first_p99 > s[p].worst_p99_ratio)
                s[p].worst_p99_ratio = p99 / first_p99;
            if (p == 0 && floor) { /* the same requests and costs */
                double fp99;
                floor_latencies(&sc, rq, n, lat);
                if ((rc = summary_add_seed(floor, lat, n, slo, NULL, seeds, &fp99)) < 0)
                    break;
                if (fp99 / first_p99 > floor->worst_p99_ratio)
                    floor->worst_p99_ratio = fp99 / first_p99;
            }
        }
        free(rq);
        free(lat);
        free(cr);
        free(ev);
    }
    free(bytes);
    free(ad_base);
    free(ad_load);
    return rc;
}

/* The mixtures of experts gen-model makes (model/llama/llama_random.c's
 * presets), as published: widths, attention heads, vocabulary, experts. */
static const struct moe_preset {
    const char *name;
    int hidden, layers, heads, kv_heads, head_dim, vocab, experts, top_k, ffn;
    bool qk_norm; /* a per-head norm of queries and keys (Qwen3) */
} moe_presets[] = {
    {"mixtral-8x7b", 4096, 32, 32, 8, 128, 32000, 8, 2, 14336, false},
    {"qwen3-30b-a3b", 2048, 48, 32, 4, 128, 151936, 128, 8, 768, true},
};

int simulate_moe_shape(const char *preset, int layers, struct simulate_moe_shape *sh)
{
    const struct moe_preset *p = NULL;
    for (size_t i = 0; i < sizeof(moe_presets) / sizeof(moe_presets[0]); i++)
        if (strcmp(preset, moe_presets[i].name) == 0)
            p = &moe_presets[i];
    if (!p)
        return err_set(ERR_INVALID,
                       "preset %s has no routed experts: expected mixtral-8x7b or "
                       "qwen3-30b-a3b",
                       preset);
    const uint64_t h = (uint64_t)p->hidden, q = (uint64_t)p->heads * (uint64_t)p->head_dim,
                   kv = (uint64_t)p->kv_heads * (uint64_t)p->head_dim, bf16 = 2;
    sh->layers = layers > 0 ? layers : p->layers;
    sh->n_experts = p->experts;
    sh->top_k = p->top_k;
    sh->expert = 3 * h * (uint64_t)p->ffn * bf16;
    /* q, k, v, o; two norms (and q/k norms); the router; the experts */
    sh->layer = (h * q + 2 * h * kv + q * h + 2 * h + (p->qk_norm ? 2 * (uint64_t)p->head_dim : 0) +
                 (uint64_t)p->experts * h) *
                    bf16 +
                (uint64_t)p->experts * sh->expert;
    /* the embeddings, the untied head and the final norm */
    sh->weights = (2 * (uint64_t)p->vocab * h + h) * bf16 + (uint64_t)sh->layers * sh->layer;
    sh->kv_per_token = 2 * (uint64_t)sh->layers * kv * bf16;
    return 0;
}

void simulate_moe_shard(const struct simulate_moe_shape *sh, int tp,
                        const struct workload_config *c, uint64_t *weights, uint64_t *kv)
{
    uint64_t tokens = c->chat ? (uint64_t)(c->lengths.prompt.max + c->lengths.output.max) : 16;
    *weights = (sh->weights + (uint64_t)tp - 1) / (uint64_t)tp;
    *kv = ((uint64_t)c->max_batch * tokens * sh->kv_per_token + (uint64_t)tp - 1) / (uint64_t)tp;
}

int simulate_workload_experts(const struct workload_config *c, const struct sim_config *costs,
                              const char *const *policies, int n_pol, uint64_t seed, int seeds,
                              double duration, double slo, const struct simulate_moe *m,
                              struct simulate_summary *s)
{
    const int tp = m->tp, n_models = c->n_models;
    if (tp < 1 || tp > SCHED_MAX_DEVICES || !(m->room >= 1))
        return err_set(ERR_INVALID,
                       "%d devices, room for %g models: expected 1..%d devices and "
                       "room for at least one model",
                       tp, m->room, SCHED_MAX_DEVICES);
    uint64_t w, kv;
    simulate_moe_shard(&m->shape, tp, c, &w, &kv);
    uint64_t *bytes = calloc((size_t)n_models * (size_t)tp * 3, sizeof(uint64_t));
    struct sim_moe *moe = calloc((size_t)n_models, sizeof(*moe));
    if (!bytes || !moe) {
        free(bytes);
        free(moe);
        return err_set(ERR_NOMEM, "out of memory for %d models' sizes", n_models);
    }
    uint64_t *kvb = bytes + (size_t)n_models * tp, *lb = kvb + (size_t)n_models * tp;
    for (size_t k = 0; k < (size_t)n_models * (size_t)tp; k++) {
        bytes[k] = w + kv;
        kvb[k] = kv;
        lb[k] = m->shape.layer / (uint64_t)tp;
    }
    memset(s, 0, sizeof(*s) * (size_t)n_pol);
    int rc = 0;
    for (int k = 0; rc == 0 && k < seeds; k++) {
        struct arrival *ev = NULL;
        size_t n = 0;
        if ((rc = replay_arrivals(c, duration, seed + (uint64_t)k, &ev, &n)) < 0)
            break;
        struct sim_request *rq = calloc(n ? n : 1, sizeof(*rq));
        double *lat = calloc(n ? n : 1, sizeof(double));
        struct chat_request *cr = c->chat ? calloc(n ? n : 1, sizeof(*cr)) : NULL;
        if (!rq || !lat || (c->chat && !cr))
            rc = err_set(ERR_NOMEM, "out of memory for %zu simulated requests", n);
        if (rc == 0 && cr)
            chat_requests_make(&c->lengths, seed + (uint64_t)k, ev, n, cr);
        for (int i = 0; i < n_models; i++) {
            moe[i] = (struct sim_moe){.sparse_layers = m->shape.layers,
                                      .n_experts = m->shape.n_experts,
                                      .top_k = m->shape.top_k,
                                      .zipf = m->zipf,
                                      .seed = (seed + (uint64_t)k) * 1000 + (uint64_t)i,
                                      .drift_steps = m->drift_steps};
            for (int d = 0; d < tp; d++)
                moe[i].expert_bytes[d] = m->shape.expert / (uint64_t)tp;
        }
        for (int p = 0; rc == 0 && n > 0 && p < n_pol; p++) {
            struct sim_config sc = *costs;
            if (!(sc.policy = sched_policy_find_sim(policies[p]))) {
                rc = ERR_INVALID; /* sched_policy_find_sim says which */
                break;
            }
            sc.n_models = n_models;
            sc.n_devices = tp;
            sc.bytes = bytes;
            sc.kv_bytes = kvb;
            sc.layers = m->shape.layers;
            sc.layer_bytes = lb;
            sc.max_loaded = 0;
            sc.max_batch = c->max_batch;
            sc.moe = moe;
            sc.expert_residency = m->residency;
            sc.copy_latency_s = m->copy_latency_s;
            for (int d = 0; d < tp; d++)
                sc.budget[d] = (uint64_t)(m->room * (double)(w + kv));
            for (size_t i = 0; i < n; i++)
                rq[i] = (struct sim_request){.arrival = ev[i].t,
                                             .model = ev[i].model,
                                             .n_prompt = cr ? cr[i].n_prompt : 0,
                                             .n_output = cr ? cr[i].n_output : 0};
            double p99, last;
            rc = run_seed(&sc, rq, n, lat, c, cr != NULL, slo, seeds, &s[p], &p99, &last);
            if (rc < 0)
                break;
            if (last > rq[0].arrival)
                s[p].throughput += (double)n / (last - rq[0].arrival) / seeds;
        }
        free(rq);
        free(lat);
        free(cr);
        free(ev);
    }
    free(bytes);
    free(moe);
    return rc;
}
