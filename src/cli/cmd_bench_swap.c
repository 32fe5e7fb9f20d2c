/* shardswap bench swap: how fast a model moves onto its devices under each
 * TP x PP layout, against memcpy on as many threads measured in the same run,
 * and what a cold request costs with and without layer overlap. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_cache.h"
#include "core/error.h"
#include "core/jsonout.h"
#include "core/copy.h"
#include "core/membw.h"
#include "core/timing.h"
#include "engine/stack.h"
#include "engine/workers.h"
#include "model/opt_random.h"
#include "swap/swap.h"

#define MAX_LAYOUTS 8
#define MAX_WORKERS 16
#define MAX_WORKERS_RANGE "1..16" /* in words, for the flags */

struct layout_result {
    int tp, pp;
    double load_s, offload_s, host_fill_s;
    double worker_gbs[MAX_WORKERS];
    uint64_t bytes;
    double cold_overlap_s, cold_serial_s, warm_s;
};

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

/* "1x1,2x1,1x2" -> pairs; ERR_INVALID naming the bad item. */
static int parse_layouts(const char *s, int *tp, int *pp, int *n)
{
    *n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long t = strtol(p, &end, 10);
        if (end == p || *end != 'x')
            return err_set(ERR_INVALID, "--layouts: \"%s\" is not a list like 1x1,2x1,1x2", s);
        long q = strtol(end + 1, &end, 10);
        if (t < 1 || q < 1 || t * q > MAX_WORKERS || (*end != ',' && *end != '\0'))
            return err_set(ERR_INVALID, "--layouts: \"%s\": each TPxPP needs 1 <= TP*PP <= %d",
                           s, MAX_WORKERS);
        if (*n == MAX_LAYOUTS)
            return err_set(ERR_INVALID, "--layouts: at most %d layouts", MAX_LAYOUTS);
        tp[*n] = (int)t;
        pp[*n] = (int)q;
        (*n)++;
        p = *end ? end + 1 : end;
    }
    return *n ? 0 : err_set(ERR_INVALID, "--layouts is empty");
}

static int make_prompt(const struct swap_model *model, int32_t *ids, int n)
{
    ids[0] = model->cfg.bos_id;
    for (int i = 1; i < n; i++)
        ids[i] = 4 + (int32_t)((i * 7919u) % (unsigned)(model->cfg.vocab - 4));
    return n;
}

/* One request from nothing resident to its first token's logits. */
static int cold_request(struct swap_manager *mgr, struct workers *w, struct swap_model *model,
                        bool overlap, int prompt_len, double *secs)
{
    int32_t ids[512];
    make_prompt(model, ids, prompt_len);
    float *logits = malloc((size_t)model->cfg.vocab * sizeof(float));
    struct group_batch *gb = NULL;
    struct opt_exec_shape shape = {.batch = 1, .max_len = prompt_len + 1};
    int rc = group_batch_create(mgr, model, &shape, &gb);
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
    group_batch_free(gb);
    free(logits);
    return rc;
}

/* One layout on a stack of its own: tp x pp CPU devices of the given
 * budgets, the model placed on them in order. */
static int bench_layout(const uint64_t *budgets, const char *dir, uint64_t host_budget, int repeat,
                        int prompt_len, struct layout_result *r)
{
    struct stack_model_config mc = {.name = "bench", .path = dir, .tp = r->tp, .pp = r->pp};
    struct stack_config sc = {.device_kind = "cpu", .n_devices = r->tp * r->pp,
                              .host_budget = host_budget, .models = &mc, .n_models = 1};
    for (int d = 0; d < sc.n_devices; d++)
        sc.device_budget[d] = budgets[d];
    struct stack *st = NULL;
    struct swap_manager *mgr = NULL;
    struct workers *w = NULL;
    struct swap_model *model = NULL;
    double *load = calloc((size_t)repeat, sizeof(double)), *off = calloc((size_t)repeat, sizeof(double));
    double *wk = calloc((size_t)repeat * MAX_WORKERS, sizeof(double));
    double *c_on = calloc((size_t)repeat, sizeof(double)), *c_off = calloc((size_t)repeat, sizeof(double));
    double *warm = calloc((size_t)repeat, sizeof(double));
    int rc;
    if (!load || !off || !wk || !c_on || !c_off || !warm) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((rc = stack_open(&sc, &st)) < 0)
        goto out;
    mgr = st->mgr;
    w = st->workers;
    model = st->models[0];
    r->bytes = 0;
    for (int i = 0; i < r->tp * r->pp; i++)
        r->bytes += model->shards[i].device_bytes;
    double t0 = time_now();
    if ((rc = swap_prefetch_host(mgr, model)) < 0)
        goto out;
    r->host_fill_s = time_now() - t0;
    /* swap-in and swap-out, host <-> devices */
    for (int i = 0; i < repeat; i++) {
        if ((rc = swap_load_lru(mgr, model)) < 0 || (rc = swap_wait_loaded(mgr, model)) < 0)
            goto out;
        load[i] = model->load_t1 - model->load_t0;
        for (int s = 0; s < r->tp * r->pp; s++) {
            const struct swap_shard *sh = &model->shards[s];
            wk[s * repeat + i] = sh->device_bytes / (sh->load_t1 - sh->load_t0) / 1e9;
        }
        t0 = time_now();
        if ((rc = swap_offload(mgr, model, false)) < 0)
            goto out;
        swap_wait_idle(mgr, model);
        off[i] = time_now() - t0;
    }
    r->load_s = median(load, repeat);
    r->offload_s = median(off, repeat);
    for (int s = 0; s < r->tp * r->pp; s++)
        r->worker_gbs[s] = median(wk + s * repeat, repeat);
    /* a cold request, with and without layer overlap; then warm */
    for (int i = 0; i < repeat; i++) {
        if ((rc = cold_request(mgr, w, model, true, prompt_len, &c_on[i])) < 0 ||
            (rc = swap_offload(mgr, model, false)) < 0)
            goto out;
        swap_wait_idle(mgr, model);
        if ((rc = cold_request(mgr, w, model, false, prompt_len, &c_off[i])) < 0)
            goto out;
        /* resident now: the same request warm */
        if ((rc = cold_request(mgr, w, model, true, prompt_len, &warm[i])) < 0 ||
            (rc = swap_offload(mgr, model, false)) < 0)
            goto out;
        swap_wait_idle(mgr, model);
    }
    r->cold_overlap_s = median(c_on, repeat);
    r->cold_serial_s = median(c_off, repeat);
    r->warm_s = median(warm, repeat);
out:
    stack_close(st);
    free(load);
    free(off);
    free(wk);
    free(c_on);
    free(c_off);
    free(warm);
    return rc;
}

static void print_table(const char *dir, const struct layout_result *r, int n, const double *bw,
                        const double *sbw, int max_workers)
{
    printf("model %s: %.3f GB of weights\n", dir, r[0].bytes / 1e9);
    for (int t = 1; t <= max_workers; t++)
        printf("  %d thread%s: memcpy %.2f GB/s, streaming copy %.2f GB/s\n", t, t > 1 ? "s" : "",
               bw[t] / 1e9, sbw[t] / 1e9);
    const struct copy_choice *cc = copy_choose();
    if (cc->forced)
        printf("  devices copy with: %s (SHARDSWAP_COPY)\n", cc->name);
    else
        printf("  devices copy with: %s (measured at open in %.0f ms, 1 thread: memcpy %.2f GB/s, "
               "stream %.2f GB/s)\n",
               cc->name, cc->calib_s * 1e3, cc->memcpy_gb_s, cc->stream_gb_s);
    printf("%-7s %9s %9s %8s %8s %9s %8s %8s %s\n", "layout", "load ms", "GB/s", "/memcpy",
           "/stream", "speedup", "off ms", "fill ms", "per-worker GB/s");
    for (int i = 0; i < n; i++) {
        int k = r[i].tp * r[i].pp;
        double gbs = r[i].bytes / r[i].load_s;
        printf("%dx%-5d %9.1f %9.2f %8.2f %8.2f %8.2fx %8.2f %8.1f", r[i].tp, r[i].pp,
               r[i].load_s * 1e3, gbs / 1e9, gbs / bw[k], gbs / sbw[k], r[0].load_s / r[i].load_s,
               r[i].offload_s * 1e3, r[i].host_fill_s * 1e3);
        for (int s = 0; s < k; s++)
            printf(" %.2f", r[i].worker_gbs[s]);
        printf("\n");
    }
    printf("\ncold request (not resident -> first token's logits)\n");
    printf("%-7s %12s %12s %10s %14s %12s\n", "layout", "overlap ms", "serial ms", "warm ms",
           "load+warm ms", "overlap/(l+w)");
    for (int i = 0; i < n; i++)
        printf("%dx%-5d %12.1f %12.1f %10.1f %14.1f %12.2f\n", r[i].tp, r[i].pp,
               r[i].cold_overlap_s * 1e3, r[i].cold_serial_s * 1e3, r[i].warm_s * 1e3,
               (r[i].load_s + r[i].warm_s) * 1e3,
               r[i].cold_overlap_s / (r[i].load_s + r[i].warm_s));
}

/* GB/s per thread count 1..max_workers, keyed "1", "2", ... */
static json_t *per_threads_json(const double *bw, int max_workers)
{
    json_t *o = json_object();
    for (int t = 1; o && t <= max_workers; t++) {
        char key[16];
        snprintf(key, sizeof(key), "%d", t);
        if (json_object_set_new(o, key, jsonout_real(bw[t] / 1e9, 3)) != 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

static int print_json(const char *dir, const struct layout_result *r, int n, const double *bw,
                      const double *sbw, int max_workers)
{
    json_t *layouts = json_array();
    for (int i = 0; layouts && i < n; i++) {
        int k = r[i].tp * r[i].pp;
        double gbs = r[i].bytes / r[i].load_s;
        json_t *workers = json_array();
        for (int s = 0; workers && s < k; s++)
            if (json_array_append_new(workers, jsonout_real(r[i].worker_gbs[s], 3)) != 0) {
                json_decref(workers);
                workers = NULL;
            }
        json_t *l = json_pack(
            "{s:i, s:i, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "tp",
            r[i].tp, "pp", r[i].pp, "bytes", (json_int_t)r[i].bytes, "load_s",
            jsonout_real(r[i].load_s, 6), "load_gb_s", jsonout_real(gbs / 1e9, 3),
            "load_vs_memcpy", jsonout_real(gbs / bw[k], 3), "load_vs_stream_copy",
            jsonout_real(gbs / sbw[k], 3), "speedup_vs_1x1",
            jsonout_real(r[0].load_s / r[i].load_s, 3), "offload_s",
            jsonout_real(r[i].offload_s, 6), "host_fill_s", jsonout_real(r[i].host_fill_s, 6),
            "worker_gb_s", workers, "cold_overlap_s", jsonout_real(r[i].cold_overlap_s, 6),
            "cold_serial_s", jsonout_real(r[i].cold_serial_s, 6), "warm_s",
            jsonout_real(r[i].warm_s, 6), "cold_overlap_vs_load_plus_warm",
            jsonout_real(r[i].cold_overlap_s / (r[i].load_s + r[i].warm_s), 3));
        if (json_array_append_new(layouts, l) != 0) {
            json_decref(layouts);
            layouts = NULL;
        }
    }
    const struct copy_choice *cc = copy_choose();
    json_t *copy = json_pack("{s:o, s:b, s:o, s:o, s:o}", "method", jsonout_string(cc->name),
                             "forced", cc->forced, "memcpy_gb_s", jsonout_real(cc->memcpy_gb_s, 3),
                             "stream_gb_s", jsonout_real(cc->stream_gb_s, 3), "calib_s",
                             jsonout_real(cc->calib_s, 6));
    return jsonout_print(json_pack("{s:o, s:I, s:o, s:o, s:o, s:o}", "model", jsonout_string(dir),
                                   "weight_bytes", (json_int_t)r[0].bytes, "memcpy_gb_s",
                                   per_threads_json(bw, max_workers), "stream_copy_gb_s",
                                   per_threads_json(sbw, max_workers), "device_copy", copy,
                                   "layouts", layouts));
}

int bench_swap(int argc, char **argv)
{
    const char *preset = NULL, *dir_flag = NULL, *dtype_s = "f16", *layouts_s = "1x1,2x1,1x2";
    const char *cache = "models";
    int layers = 0, tp = 0, pp = 0, repeat = 3, prompt_len = 8;
    bool json = false;
    struct flag flags[] = {
        FLAG("preset", FLAG_STR, &preset, "NAME", opt_preset_names()),
        FLAG("model", FLAG_STR, &dir_flag, "DIR", "a checkpoint directory instead of a preset"),
        FLAG("dtype", FLAG_STR, &dtype_s, "f16|bf16|f32", "dtype of a generated preset (default f16)"),
        FLAG_RANGE("layers", FLAG_INT, &layers, "N",
                   "layers of a generated preset (default: the preset's)", 1, 4096,
                   "1..4096"),
        FLAG("layouts", FLAG_STR, &layouts_s, "TPxPP,...", "layouts to measure (default 1x1,2x1,1x2)"),
        FLAG_RANGE("tp", FLAG_INT, &tp, "N", "also measure TP=N (with --pp, default 1)", 1,
                   MAX_WORKERS, MAX_WORKERS_RANGE),
        FLAG_RANGE("pp", FLAG_INT, &pp, "N", "also measure PP=N (with --tp, default 1)", 1,
                   MAX_WORKERS, MAX_WORKERS_RANGE),
        FLAG_RANGE("repeat", FLAG_INT, &repeat, "R", "median of R runs (default 3)", 1, 1000,
                   "1..1000"),
        FLAG_RANGE("prompt-len", FLAG_INT, &prompt_len, "L",
                   "tokens of the cold request (default 8)", 1, 512, "1..512"),
        FLAG("cache", FLAG_STR, &cache, "DIR", "where generated presets are kept (default models)"),
        FLAG("json", FLAG_BOOL, &json, NULL, "print one JSON object instead of tables"),
    };
    int rc = args_parse("bench swap",
                        "Registers the model on CPU devices (one per worker, budget = its shard and the cold "
                        "request's KV cache and activations) "
                        "and measures, for each TP x PP layout: swap-in time and GB/s (host -> "
                        "devices, every shard at once), per worker and in aggregate, against "
                        "memcpy on as many threads in the same run; swap-out time; and a cold "
                        "request (not resident -> first token) with layer overlap on and off, "
                        "against load + warm first-token time.",
                        argc, argv, flags, sizeof(flags) / sizeof(flags[0]));
    if (rc)
        return rc;
    if (!preset == !dir_flag) {
        fprintf(stderr, "shardswap bench swap: give exactly one of --preset NAME or --model DIR\n");
        return EXIT_USAGE;
    }
    struct layout_result res[MAX_LAYOUTS + 1];
    int tps[MAX_LAYOUTS + 1], pps[MAX_LAYOUTS + 1], n = 0;
    char dir[4096];
    int max_workers = 1;
    double bw[MAX_WORKERS + 1] = {0}, sbw[MAX_WORKERS + 1] = {0};
    struct opt_config cfg;
    struct st_checkpoint *ck = NULL;
    memset(res, 0, sizeof(res));
    if ((rc = parse_layouts(layouts_s, tps, pps, &n)) < 0)
        goto out;
    if (tp > 0 || pp > 0) {
        tps[n] = tp > 0 ? tp : 1;
        pps[n] = pp > 0 ? pp : 1;
        if (tps[n] * pps[n] > MAX_WORKERS) {
            rc = err_set(ERR_INVALID, "--tp x --pp must be at most %d", MAX_WORKERS);
            goto out;
        }
        n++;
    }
    if (dir_flag)
        snprintf(dir, sizeof(dir), "%s", dir_flag);
    else if ((rc = model_cache_preset(cache, preset, layers, dtype_s, 0, dir, sizeof(dir))) < 0)
        goto out;
    if ((rc = opt_config_load(dir, &cfg)) < 0 || (rc = st_open(dir, &ck)) < 0)
        goto out;
    uint64_t total = 0, embed = 0;
    for (size_t i = 0; i < st_count(ck); i++) {
        const struct st_tensor *t = st_get(ck, i);
        total += t->nbytes;
        if (strstr(t->name, "embed_tokens"))
            embed = t->nbytes;
    }
    st_close(ck);
    ck = NULL;
    for (int i = 0; i < n; i++) {
        struct opt_shard s = {.tp_rank = 0, .tp_size = tps[i], .layer_begin = 0, .layer_end = 1};
        if ((rc = opt_shard_check(&cfg, &s)) < 0)
            goto out;
        if (pps[i] > cfg.n_layers) {
            rc = err_set(ERR_INVALID, "layout %dx%d: PP %d exceeds the model's %d layers", tps[i],
                         pps[i], pps[i], cfg.n_layers);
            goto out;
        }
        if (tps[i] * pps[i] > max_workers)
            max_workers = tps[i] * pps[i];
        res[i].tp = tps[i];
        res[i].pp = pps[i];
    }
    /* each device's budget: the most any layout puts on it (the arenas are
     * real memory, touched at open) */
    uint64_t need[MAX_WORKERS] = {0};
    for (int i = 0; i < n; i++) {
        uint64_t shard[MAX_WORKERS], host;
        /* the weights and the cold request's batch (KV cache, activations) */
        struct opt_exec_shape cold = {.batch = 1, .max_len = prompt_len + 1};
        if ((rc = swap_layout_bytes(dir, tps[i], pps[i], &cold, shard, &host)) < 0)
            goto out;
        for (int d = 0; d < tps[i] * pps[i]; d++)
            need[d] = shard[d] > need[d] ? shard[d] : need[d];
    }
    uint64_t budget = total + embed + (16u << 20); /* host tier: any layout's copy */
    for (int d = 0; d < max_workers; d++)
        need[d] += 1u << 20;
    for (int t = 1; t <= max_workers; t++) {
        bw[t] = membw_memcpy(t, (size_t)256 << 20, 5);
        sbw[t] = membw_stream(t, (size_t)256 << 20, 5);
    }
    for (int i = 0; i < n; i++)
        if ((rc = bench_layout(need, dir, budget, repeat, prompt_len, &res[i])) < 0)
            goto out;
    if (json)
        rc = print_json(dir, res, n, bw, sbw, max_workers);
    else
        print_table(dir, res, n, bw, sbw, max_workers);
out:
    st_close(ck);
    return rc < 0 ? cli_fail("bench swap") : 0;
}
