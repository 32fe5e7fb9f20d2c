/* bench swap's measurement (swapbench.h): one stack per layout, medians of
 * repeat runs. */
#include "workload/swapbench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/device.h"
#include "cluster/job.h"
#include "core/error.h"
#include "core/membw.h"
#include "core/timing.h"
#include "engine/workers.h"
#include "format/safetensors.h"
#include "model/adapter.h"
#include "model/model.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void make_prompt(const struct swap_model *model, int32_t *ids, int n)
{
    const struct model_info *c = swap_model_info(model);
    ids[0] = c->bos_id >= 0 ? c->bos_id : 0;
    for (int i = 1; i < n; i++)
        ids[i] = 4 + (int32_t)((i * 7919u) % (unsigned)(c->vocab - 4));
}

/* One request from nothing resident to its first token's logits (under
 * mpirun, group_forward waits for other processes' shards to be loaded
 * before the step: their owners answer a load once, when it is all there). */
static int cold_request(struct swap_manager *mgr, struct workers *w, struct swap_model *model,
                        bool overlap, int prompt_len, double *secs)
{
    int32_t ids[SWAPBENCH_MAX_PROMPT];
    make_prompt(model, ids, prompt_len);
    float *logits = malloc((size_t)swap_model_info(model)->vocab * sizeof(float));
    struct group_exec *gb = NULL;
    struct model_exec_shape shape = {.batch = 1, .max_len = prompt_len + 1};
    int rc = group_exec_create(mgr, model, &shape, &gb);
    if (rc < 0 || !logits)
        goto out;
    double t0 = time_now();
    if ((rc = swap_load_lru(mgr, model)) < 0 || (rc = swap_use_begin(mgr, model)) < 0)
        goto out;
    rc = group_forward(w, gb, ids, NULL, prompt_len, false, overlap, logits);
    *secs = time_now() - t0;
    swap_use_end(mgr, model);
    swap_wait_loaded(mgr, model);
out:
    group_exec_free(gb);
    free(logits);
    return rc;
}

/* The link of CUDA devices: the bytes of each shard copied from pinned host
 * memory (device_host_alloc) into one device buffer on every device of the
 * layout at once (device_copy_h2d, then device_sync on each: exactly a
 * cudaMemcpyAsync from pinned memory on each copy stream), and back
 * (device_copy_d2h); medians of repeat runs into r->link_h2d_s and
 * r->link_d2h_s. Runs while the model is not resident, in the room its
 * weights take. */
static int bench_link(struct stack *st, const struct swap_model *model, int repeat,
                      struct swapbench_layout *r)
{
    const int k = r->tp * r->pp;
    struct dbuf *buf[SWAPBENCH_MAX_WORKERS] = {0};
    void *host[SWAPBENCH_MAX_WORKERS] = {0};
    struct device *dev[SWAPBENCH_MAX_WORKERS] = {0};
    size_t bytes[SWAPBENCH_MAX_WORKERS] = {0};
    double *h2d = calloc((size_t)repeat, sizeof(double)),
           *d2h = calloc((size_t)repeat, sizeof(double));
    int rc = 0;
    if (!h2d || !d2h) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int s = 0; s < k; s++) {
        const struct swap_shard *sh = swap_model_shard(model, s);
        dev[s] = st->devices[swap_shard_device(sh)];
        bytes[s] = (size_t)swap_shard_device_bytes(sh);
        if (bytes[s] == 0)
            continue;
        if ((rc = device_alloc(dev[s], bytes[s], &buf[s])) < 0 ||
            (rc = device_host_alloc(dev[s], bytes[s], &host[s])) < 0) {
            err_wrap(rc, "the link's copy of shard %d", s);
            goto out;
        }
        memset(host[s], 0x5a, bytes[s]); /* touched: no page faults in the copy */
    }
    for (int i = 0; i < repeat; i++) {
        for (int dir = 0; dir < 2; dir++) {
            double t0 = time_now();
            for (int s = 0; s < k && rc == 0; s++)
                if (bytes[s])
                    rc = dir == 0 ? device_copy_h2d(dev[s], buf[s], 0, host[s], bytes[s], NULL)
                                  : device_copy_d2h(dev[s], host[s], buf[s], 0, bytes[s], NULL);
            for (int s = 0; s < k; s++)
                device_sync(dev[s]); /* also after a failed submission: nothing in flight */
            if (rc < 0)
                goto out;
            (dir == 0 ? h2d : d2h)[i] = time_now() - t0;
        }
    }
    r->link_h2d_s = median(h2d, repeat);
    r->link_d2h_s = median(d2h, repeat);
out:
    for (int s = 0; s < k; s++) {
        device_free(buf[s]);
        if (host[s])
            device_host_free(dev[s], host[s], bytes[s]);
    }
    free(h2d);
    free(d2h);
    return rc;
}

/* The medians' samples: repeat of each. */
struct samples {
    double *load, *off, *wk /* (shard, repeat) */, *pk /* (process, repeat) */, *c_on, *c_off,
        *warm;
};

static int samples_alloc(struct samples *s, int repeat)
{
    size_t n = (size_t)repeat;
    s->load = calloc(n, sizeof(double));
    s->off = calloc(n, sizeof(double));
    s->wk = calloc(n * SWAPBENCH_MAX_WORKERS, sizeof(double));
    s->pk = calloc(n * SWAPBENCH_MAX_WORKERS, sizeof(double));
    s->c_on = calloc(n, sizeof(double));
    s->c_off = calloc(n, sizeof(double));
    s->warm = calloc(n, sizeof(double));
    if (!s->load || !s->off || !s->wk || !s->pk || !s->c_on || !s->c_off || !s->warm)
        return err_set(ERR_NOMEM, "out of memory");
    return 0;
}

static void samples_free(struct samples *s)
{
    free(s->load);
    free(s->off);
    free(s->wk);
    free(s->pk);
    free(s->c_on);
    free(s->c_off);
    free(s->warm);
}

/* swap-in and swap-out, host <-> devices, repeat times; per run each
 * shard's rate and each process's (its bytes over its slowest shard's
 * load: r->shard_proc and r->proc_bytes say which are whose) */
static int bench_load_offload(struct swap_manager *mgr, struct swap_model *model, int repeat,
                              struct samples *sm, struct swapbench_layout *r)
{
    const int k = r->tp * r->pp;
    for (int i = 0; i < repeat; i++) {
        int rc;
        if ((rc = swap_load_lru(mgr, model)) < 0 || (rc = swap_wait_loaded(mgr, model)) < 0)
            return rc;
        sm->load[i] = swap_model_load_seconds(mgr, model);
        double slowest[SWAPBENCH_MAX_WORKERS] = {0}; /* per process */
        for (int s = 0; s < k; s++) {
            const struct swap_shard *sh = swap_model_shard(model, s);
            double secs = swap_shard_load_seconds(mgr, sh);
            sm->wk[s * repeat + i] = swap_shard_device_bytes(sh) / secs / 1e9;
            if (secs > slowest[r->shard_proc[s]])
                slowest[r->shard_proc[s]] = secs;
        }
        for (int p = 0; p < SWAPBENCH_MAX_WORKERS; p++)
            sm->pk[p * repeat + i] = r->proc_bytes[p] ? r->proc_bytes[p] / slowest[p] / 1e9 : 0;
        double t0 = time_now();
        if ((rc = swap_offload(mgr, model, false)) < 0)
            return rc;
        swap_wait_idle(mgr, model);
        sm->off[i] = time_now() - t0;
    }
    r->load_s = median(sm->load, repeat);
    r->offload_s = median(sm->off, repeat);
    for (int s = 0; s < k; s++)
        r->worker_gbs[s] = median(sm->wk + s * repeat, repeat);
    for (int p = 0; p < SWAPBENCH_MAX_WORKERS; p++)
        r->proc_gbs[p] = median(sm->pk + p * repeat, repeat);
    return 0;
}

/* a cold request, with and without layer overlap; then warm */
static int bench_cold(struct swap_manager *mgr, struct workers *w, struct swap_model *model,
                      int repeat, int prompt_len, struct samples *sm, struct swapbench_layout *r)
{
    for (int i = 0; i < repeat; i++) {
        int rc;
        if ((rc = cold_request(mgr, w, model, true, prompt_len, &sm->c_on[i])) < 0 ||
            (rc = swap_offload(mgr, model, false)) < 0)
            return rc;
        swap_wait_idle(mgr, model);
        if ((rc = cold_request(mgr, w, model, false, prompt_len, &sm->c_off[i])) < 0)
            return rc;
        /* resident now: the same request warm */
        if ((rc = cold_request(mgr, w, model, true, prompt_len, &sm->warm[i])) < 0 ||
            (rc = swap_offload(mgr, model, false)) < 0)
            return rc;
        swap_wait_idle(mgr, model);
    }
    r->cold_overlap_s = median(sm->c_on, repeat);
    r->cold_serial_s = median(sm->c_off, repeat);
    r->warm_s = median(sm->warm, repeat);
    return 0;
}

/* config.adapter over the model: registered, the model loaded, the
 * adapter's host copy filled, then its swap-in and swap-out repeat times
 * (the model staying resident); both leave the devices after. */
static int bench_adapter(struct swap_manager *mgr, const char *dir, struct swap_model *model,
                         int repeat, struct samples *sm, struct swapbench_layout *r)
{
    struct swap_model *ad = NULL;
    int rc = swap_register_adapter(mgr, "bench-adapter", dir, model, &ad);
    if (rc < 0)
        return err_wrap(rc, "adapter %s", dir);
    r->adapter_bytes = 0;
    for (int s = 0; s < r->tp * r->pp; s++)
        r->adapter_bytes += swap_shard_device_bytes(swap_model_shard(ad, s));
    if ((rc = swap_load_lru(mgr, model)) < 0 || (rc = swap_wait_loaded(mgr, model)) < 0)
        goto out;
    double t0 = time_now();
    if ((rc = swap_prefetch_host(mgr, ad)) < 0)
        goto out;
    r->adapter_host_fill_s = time_now() - t0;
    for (int i = 0; i < repeat; i++) {
        if ((rc = swap_load_lru(mgr, ad)) < 0 || (rc = swap_wait_loaded(mgr, ad)) < 0)
            goto out;
        sm->load[i] = swap_model_load_seconds(mgr, ad);
        t0 = time_now();
        if ((rc = swap_offload(mgr, ad, false)) < 0)
            goto out;
        swap_wait_idle(mgr, ad);
        sm->off[i] = time_now() - t0;
    }
    r->adapter_load_s = median(sm->load, repeat);
    r->adapter_offload_s = median(sm->off, repeat);
    if ((rc = swap_offload(mgr, model, false)) < 0)
        goto out;
    swap_wait_idle(mgr, model);
out:
    swap_wait_idle(mgr, ad);
    int urc = swap_unregister(mgr, ad);
    return rc < 0 ? rc : urc;
}

/* The stack of one layout: tp x pp devices (CPU ones of the given budgets,
 * or the first tp x pp CUDA devices listed, sized by the stack for the cold
 * request), the model placed on them in order; under mpirun device d on
 * process d % P. mc is the model's entry. */
static void layout_stack_config(const struct swapbench_config *c, const uint64_t *budgets,
                                uint64_t host_budget, const struct swapbench_layout *r,
                                struct stack_model_config *mc, struct stack_config *sc)
{
    *mc = (struct stack_model_config){.name = "bench",
                                      .path = c->dir,
                                      .tp = r->tp,
                                      .pp = r->pp,
                                      .expert_parallel = c->expert_parallel};
    *sc = (struct stack_config){.device_kind = "cpu",
                                .n_devices = r->tp * r->pp,
                                .host_budget = host_budget,
                                .models = mc,
                                .n_models = 1};
    if (c->cuda) {
        /* budgets left 0: the stack sizes each device for its shard and one
         * batch of the cold request (with a GPU's attention scratch) */
        sc->device_kind = "cuda";
        sc->gpus_set = true;
        for (int d = 0; d < sc->n_devices; d++)
            sc->gpus[d] = c->gpus[d];
        sc->fit_prompt = c->prompt_len;
        sc->fit_max_tokens = 1;
        sc->engine.max_batch = 1;
    } else {
        for (int d = 0; d < sc->n_devices; d++)
            sc->device_budget[d] = budgets[d];
    }
    if (c->job) {
        sc->procs_set = true;
        sc->n_procs = cluster_job_procs(c->job);
        for (int d = 0; d < sc->n_devices; d++)
            sc->procs[d] = d % sc->n_procs;
    }
}

/* One layout on a stack of its own, closed before this returns. */
static int bench_layout(const struct swapbench_config *c, const uint64_t *budgets,
                        uint64_t host_budget, uint64_t adapter, struct swapbench_layout *r)
{
    struct stack_model_config mc;
    struct stack_config sc;
    layout_stack_config(c, budgets, host_budget, r, &mc, &sc);
    struct stack *st = NULL;
    struct samples sm = {0};
    int rc;
    if (c->cuda && adapter) { /* the stack's sizes, and room for the adapter beside them */
        uint64_t sized[STACK_MAX_DEVICES], host;
        if ((rc = stack_size(&sc, sized, &host)) < 0)
            return rc;
        for (int d = 0; d < sc.n_devices; d++)
            sc.device_budget[d] = sized[d] + adapter;
    }
    /* under mpirun the other processes open their devices of the stack first */
    if ((rc = samples_alloc(&sm, c->repeat)) < 0 || (rc = cluster_job_lead(c->job, &sc)) < 0 ||
        (rc = stack_open(&sc, &st)) < 0)
        goto out;
    struct swap_model *model = st->models[0];
    r->bytes = 0;
    for (int i = 0; i < r->tp * r->pp; i++) {
        const struct swap_shard *sh = swap_model_shard(model, i);
        int d = swap_shard_device(sh);
        r->shard_bytes[i] = swap_shard_device_bytes(sh);
        r->shard_proc[i] = sc.procs_set ? sc.procs[d] : 0;
        r->proc_bytes[r->shard_proc[i]] += r->shard_bytes[i];
        r->bytes += r->shard_bytes[i];
    }
    double t0 = time_now();
    if ((rc = swap_prefetch_host(st->mgr, model)) < 0)
        goto out;
    r->host_fill_s = time_now() - t0;
    /* the link is copies this process makes: not measured on another's devices */
    bool all_here = true;
    for (int i = 0; i < r->tp * r->pp; i++)
        all_here &= r->shard_proc[i] == 0;
    if ((c->cuda && all_here && (rc = bench_link(st, model, c->repeat, r)) < 0) ||
        (rc = bench_load_offload(st->mgr, model, c->repeat, &sm, r)) < 0 ||
        (rc = bench_cold(st->mgr, st->workers, model, c->repeat, c->prompt_len, &sm, r)) < 0 ||
        (c->adapter && (rc = bench_adapter(st->mgr, c->adapter, model, c->repeat, &sm, r)) < 0))
        goto out;
    swap_get_stats(st->mgr, &r->stats);
out:
    stack_close(st);
    cluster_job_release(c->job); /* the others close theirs (nothing when not led) */
    samples_free(&sm);
    return rc;
}

/* Checks each layout against the model; the bytes of the whole checkpoint
 * and of its embeddings. */
static int check_layouts(const struct swapbench_config *c, uint64_t *total, uint64_t *embed)
{
    struct model_config *cfg = NULL;
    struct st_checkpoint *ck = NULL;
    int rc;
    *total = *embed = 0;
    if ((rc = model_config_load(c->dir, &cfg)) < 0 || (rc = st_open(c->dir, &ck)) < 0)
        goto out;
    for (size_t i = 0; i < st_count(ck); i++) {
        const struct st_tensor *t = st_get(ck, i);
        *total += t->nbytes;
        if (strstr(t->name, "embed_tokens"))
            *embed = t->nbytes;
    }
    for (int i = 0; i < c->n_layouts; i++) {
        struct model_shard s = {.tp_rank = 0,
                                .tp_size = c->tp[i],
                                .layer_begin = 0,
                                .layer_end = 1,
                                .expert_parallel = c->expert_parallel};
        if ((rc = model_shard_check(cfg, &s)) < 0)
            goto out;
        if (c->pp[i] > cfg->info.n_layers) {
            rc = err_set(ERR_INVALID, "layout %dx%d: PP %d exceeds the model's %d layers", c->tp[i],
                         c->pp[i], c->pp[i], cfg->info.n_layers);
            goto out;
        }
    }
out:
    st_close(ck);
    model_config_free(cfg);
    return rc;
}

/* Each CPU device's budget: the most any layout puts on it (the arenas are
 * real memory, touched at open), and the host tier's: any layout's copy. */
static int size_budgets(const struct swapbench_config *c, uint64_t adapter,
                        struct swapbench_layout *lay, uint64_t *need, uint64_t *host_budget,
                        int *max_workers)
{
    uint64_t total, embed;
    int rc = check_layouts(c, &total, &embed);
    if (rc < 0)
        return rc;
    *max_workers = 1;
    int skipped = 0;
    memset(need, 0, SWAPBENCH_MAX_WORKERS * sizeof(*need));
    for (int i = 0; i < c->n_layouts; i++) {
        const int k = c->tp[i] * c->pp[i];
        uint64_t shard[SWAPBENCH_MAX_WORKERS], host;
        /* the weights and the cold request's batch (KV cache, activations) */
        struct model_exec_shape cold = {.batch = 1, .max_len = c->prompt_len + 1};
        rc = swap_layout_bytes_ep(c->dir, c->tp[i], c->pp[i], c->expert_parallel, false, &cold,
                                  shard, &host);
        if (rc == ERR_INVALID) { /* the tensors cannot be cut so (heads and layers were checked) */
            snprintf(lay[i].skipped, sizeof(lay[i].skipped), "%s", err_msg());
            if (++skipped == c->n_layouts)
                return rc;
            continue;
        }
        if (rc < 0)
            return rc;
        for (int d = 0; d < k; d++)
            need[d] = shard[d] > need[d] ? shard[d] : need[d];
        if (k > *max_workers)
            *max_workers = k;
    }
    /* room for the adapter beside the model: all of it on every device
     * (a bound: each holds a shard of it) */
    *host_budget = total + embed + adapter + (16u << 20);
    for (int d = 0; d < *max_workers; d++)
        need[d] += adapter + (1u << 20);
    return 0;
}

/* The bytes of the whole of config.adapter on a device (0 without one). */
static int adapter_room(const struct swapbench_config *c, uint64_t *bytes)
{
    struct model_config *cfg = NULL;
    int rank, rc = 0;
    *bytes = 0;
    if (c->adapter && (rc = model_config_load(c->dir, &cfg)) == 0)
        rc = model_adapter_bytes(c->adapter, cfg, c->dir, bytes, &rank);
    model_config_free(cfg);
    return rc;
}

int swapbench_run(const struct swapbench_config *c, struct swapbench_report *out)
{
    memset(out, 0, sizeof(*out));
    out->procs = cluster_job_procs(c->job);
    if (c->n_layouts < 1 || c->n_layouts > SWAPBENCH_MAX_LAYOUTS || c->repeat < 1 ||
        c->prompt_len < 1 || c->prompt_len > SWAPBENCH_MAX_PROMPT)
        return err_set(ERR_INVALID,
                       "bench swap: %d layouts, repeat %d, prompt %d (expected "
                       "1..%d, >= 1, 1..%d)",
                       c->n_layouts, c->repeat, c->prompt_len, SWAPBENCH_MAX_LAYOUTS,
                       SWAPBENCH_MAX_PROMPT);
    for (int i = 0; i < c->n_layouts; i++)
        if (c->tp[i] < 1 || c->pp[i] < 1 || c->tp[i] * c->pp[i] > SWAPBENCH_MAX_WORKERS ||
            (c->cuda && c->tp[i] * c->pp[i] > c->n_gpus))
            return err_set(ERR_INVALID, "layout %dx%d: needs 1..%d devices%s", c->tp[i], c->pp[i],
                           c->cuda ? c->n_gpus : SWAPBENCH_MAX_WORKERS,
                           c->cuda ? " (the CUDA devices listed)" : "");
    for (int i = 0; i < c->n_layouts; i++) {
        out->layouts[i].tp = c->tp[i];
        out->layouts[i].pp = c->pp[i];
    }
    uint64_t need[SWAPBENCH_MAX_WORKERS], host_budget, adapter = 0;
    int rc = adapter_room(c, &adapter);
    if (rc < 0 ||
        (rc = size_budgets(c, adapter, out->layouts, need, &host_budget, &out->max_workers)) < 0)
        return rc;
    for (int i = 0; i < c->n_layouts; i++) {
        struct swapbench_layout *r = &out->layouts[i];
        out->n_layouts = i + 1;
        if (!r->skipped[0] && (rc = bench_layout(c, need, host_budget, adapter, r)) < 0)
            return rc;
    }
    /* the host's copy speed: the reference of CPU devices only */
    for (int t = 1; !c->cuda && c->ref_bytes && t <= out->max_workers; t++) {
        out->memcpy_bps[t] = membw_memcpy(t, c->ref_bytes, 5);
        out->stream_bps[t] = membw_stream(t, c->ref_bytes, 5);
    }
    /* and each other process's, measured there (one at a time: on one
     * machine they would share its memory) */
    out->proc_memcpy_bps[0] = out->memcpy_bps[1];
    out->proc_stream_bps[0] = out->stream_bps[1];
    for (int p = 1; !c->cuda && c->ref_bytes && p < out->procs && p < SWAPBENCH_MAX_WORKERS; p++) {
        struct cluster_proc_stats ps;
        if ((rc = cluster_job_stats(c->job, p, true, 1, c->ref_bytes, &ps)) < 0)
            return err_wrap(rc, "process %d's copy speed", p);
        out->proc_memcpy_bps[p] = ps.memcpy_bps;
        out->proc_stream_bps[p] = ps.stream_bps;
    }
    return 0;
}
