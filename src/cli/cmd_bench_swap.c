/* shardswap bench swap: how fast a model moves onto its devices under each
 * TP x PP layout, against a reference measured in the same run (CPU
 * devices: memcpy on as many threads; CUDA devices: the link, a plain
 * pinned copy of the same bytes onto every device of the layout at once),
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
#include "model/random.h"
#include "swap/swap.h"

#define MAX_LAYOUTS 8
#define MAX_WORKERS 16
#define MAX_WORKERS_RANGE "1..16" /* in words, for the flags */

struct layout_result {
    int tp, pp;
    double load_s, offload_s, host_fill_s;
    /* CUDA devices: the link, bytes of the layout's shards copied H2D and
     * D2H on all its devices at once (0: not measured, CPU devices) */
    double link_h2d_s, link_d2h_s;
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
    const struct model_info *c = swap_model_info(model);
    ids[0] = c->bos_id >= 0 ? c->bos_id : 0;
    for (int i = 1; i < n; i++)
        ids[i] = 4 + (int32_t)((i * 7919u) % (unsigned)(c->vocab - 4));
    return n;
}

/* One request from nothing resident to its first token's logits. */
static int cold_request(struct swap_manager *mgr, struct workers *w, struct swap_model *model,
                        bool overlap, int prompt_len, double *secs)
{
    int32_t ids[512];
    make_prompt(model, ids, prompt_len);
    float *logits = malloc((size_t)swap_model_info(model)->vocab * sizeof(float));
    struct group_batch *gb = NULL;
    struct model_exec_shape shape = {.batch = 1, .max_len = prompt_len + 1};
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

/* The link of CUDA devices: the bytes of each shard copied from pinned host
 * memory (device_host_alloc) into one device buffer on every device of the
 * layout at once (device_copy_h2d, then device_sync on each: exactly a
 * cudaMemcpyAsync from pinned memory on each copy stream), and back
 * (device_copy_d2h); medians of repeat runs into r->link_h2d_s and
 * r->link_d2h_s. Runs while the model is not resident, in the room its
 * weights take. */
static int bench_link(struct stack *st, const struct swap_model *model, int repeat,
                      struct layout_result *r)
{
    const int k = r->tp * r->pp;
    struct dbuf *buf[MAX_WORKERS] = {0};
    void *host[MAX_WORKERS] = {0};
    struct device *dev[MAX_WORKERS] = {0};
    size_t bytes[MAX_WORKERS] = {0};
    double *h2d = calloc((size_t)repeat, sizeof(double)), *d2h = calloc((size_t)repeat, sizeof(double));
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

/* The devices the layouts run on: CPU devices (one per shard, opened for
 * each layout) unless --devices lists CUDA ones; a layout's shards then go
 * on the first tp x pp of them in order. */
struct bench_devices {
    bool cuda;
    int n;                      /* listed (cuda) */
    int gpus[STACK_MAX_DEVICES]; /* cuda: the GPU of each */
};

/* One layout on a stack of its own: tp x pp devices (CPU ones of the given
 * budgets, or the first tp x pp CUDA devices listed, sized by the stack for
 * the cold request), the model placed on them in order. */
static int bench_layout(const struct bench_devices *bd, const uint64_t *budgets, const char *dir,
                        uint64_t host_budget, int repeat, int prompt_len, struct layout_result *r)
{
    struct stack_model_config mc = {.name = "bench", .path = dir, .tp = r->tp, .pp = r->pp};
    struct stack_config sc = {.device_kind = "cpu", .n_devices = r->tp * r->pp,
                              .host_budget = host_budget, .models = &mc, .n_models = 1};
    if (bd->cuda) {
        /* budgets left 0: the stack sizes each device for its shard and one
         * batch of the cold request (with a GPU's attention scratch) */
        sc.device_kind = "cuda";
        sc.gpus_set = true;
        for (int d = 0; d < sc.n_devices; d++)
            sc.gpus[d] = bd->gpus[d];
        sc.fit_prompt = prompt_len;
        sc.fit_max_tokens = 1;
        sc.engine.max_batch = 1;
    } else {
        for (int d = 0; d < sc.n_devices; d++)
            sc.device_budget[d] = budgets[d];
    }
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
        r->bytes += swap_shard_device_bytes(swap_model_shard(model, i));
    double t0 = time_now();
    if ((rc = swap_prefetch_host(mgr, model)) < 0)
        goto out;
    r->host_fill_s = time_now() - t0;
    if (bd->cuda && (rc = bench_link(st, model, repeat, r)) < 0)
        goto out;
    /* swap-in and swap-out, host <-> devices */
    for (int i = 0; i < repeat; i++) {
        if ((rc = swap_load_lru(mgr, model)) < 0 || (rc = swap_wait_loaded(mgr, model)) < 0)
            goto out;
        load[i] = swap_model_load_seconds(mgr, model);
        for (int s = 0; s < r->tp * r->pp; s++) {
            const struct swap_shard *sh = swap_model_shard(model, s);
            wk[s * repeat + i] =
                swap_shard_device_bytes(sh) / swap_shard_load_seconds(mgr, sh) / 1e9;
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

/* CUDA devices: the same table against the link instead of memcpy. */
static void print_table_cuda(const char *dir, const char *devices,
                             const struct layout_result *r, int n)
{
    printf("model %s: %.3f GB of weights, on %s\n", dir, r[0].bytes / 1e9, devices);
    printf("  link: pinned host memory <-> each device of the layout at once "
           "(device_copy_h2d/d2h of the same bytes)\n");
    printf("%-7s %9s %9s %9s %8s %8s %9s %9s %8s %8s %s\n", "layout", "load ms", "GB/s",
           "link GB/s", "/link", "speedup", "off ms", "off GB/s", "/link", "fill ms",
           "per-worker GB/s");
    for (int i = 0; i < n; i++) {
        int k = r[i].tp * r[i].pp;
        double gbs = r[i].bytes / r[i].load_s, link = r[i].bytes / r[i].link_h2d_s;
        double off = r[i].bytes / r[i].offload_s, link_off = r[i].bytes / r[i].link_d2h_s;
        printf("%dx%-5d %9.1f %9.2f %9.2f %8.2f %8.2fx %9.1f %9.2f %8.2f %8.1f", r[i].tp,
               r[i].pp, r[i].load_s * 1e3, gbs / 1e9, link / 1e9, gbs / link,
               r[0].load_s / r[i].load_s, r[i].offload_s * 1e3, off / 1e9, off / link_off,
               r[i].host_fill_s * 1e3);
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

/* bytes / secs in GB/s, or null when secs is 0 (not measured) */
static json_t *gb_s(double bytes, double secs)
{
    return secs > 0 ? jsonout_real(bytes / secs / 1e9, 3) : json_null();
}

/* a / b, or null when either was not measured */
static json_t *ratio(double a, double b)
{
    return a > 0 && b > 0 ? jsonout_real(a / b, 3) : json_null();
}

/* The keys of CPU devices' runs stay, null for CUDA devices' where they
 * compare with the host's memcpy; the link's keys are null for CPU
 * devices (not measured). */
static int print_json(const char *dir, const char *devices, bool cuda,
                      const struct layout_result *r, int n, const double *bw, const double *sbw,
                      int max_workers)
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
        double link = r[i].link_h2d_s > 0 ? r[i].bytes / r[i].link_h2d_s : 0;
        double link_off = r[i].link_d2h_s > 0 ? r[i].bytes / r[i].link_d2h_s : 0;
        double off = r[i].bytes / r[i].offload_s;
        json_t *l = json_pack(
            "{s:i, s:i, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, "
            "s:o, s:o, s:o, s:o}",
            "tp", r[i].tp, "pp", r[i].pp, "bytes", (json_int_t)r[i].bytes, "load_s",
            jsonout_real(r[i].load_s, 6), "load_gb_s", jsonout_real(gbs / 1e9, 3),
            "load_vs_memcpy", cuda ? json_null() : jsonout_real(gbs / bw[k], 3),
            "load_vs_stream_copy", cuda ? json_null() : jsonout_real(gbs / sbw[k], 3),
            "speedup_vs_1x1", jsonout_real(r[0].load_s / r[i].load_s, 3), "offload_s",
            jsonout_real(r[i].offload_s, 6), "host_fill_s", jsonout_real(r[i].host_fill_s, 6),
            "worker_gb_s", workers, "cold_overlap_s", jsonout_real(r[i].cold_overlap_s, 6),
            "cold_serial_s", jsonout_real(r[i].cold_serial_s, 6), "warm_s",
            jsonout_real(r[i].warm_s, 6), "cold_overlap_vs_load_plus_warm",
            jsonout_real(r[i].cold_overlap_s / (r[i].load_s + r[i].warm_s), 3),
            "offload_gb_s", jsonout_real(off / 1e9, 3), "link_h2d_gb_s",
            gb_s((double)r[i].bytes, r[i].link_h2d_s), "link_d2h_gb_s",
            gb_s((double)r[i].bytes, r[i].link_d2h_s), "load_vs_link", ratio(gbs, link),
            "offload_vs_link", ratio(off, link_off));
        if (json_array_append_new(layouts, l) != 0) {
            json_decref(layouts);
            layouts = NULL;
        }
    }
    json_t *copy = NULL;
    if (!cuda) {
        const struct copy_choice *cc = copy_choose();
        copy = json_pack("{s:o, s:b, s:o, s:o, s:o}", "method", jsonout_string(cc->name),
                         "forced", cc->forced, "memcpy_gb_s", jsonout_real(cc->memcpy_gb_s, 3),
                         "stream_gb_s", jsonout_real(cc->stream_gb_s, 3), "calib_s",
                         jsonout_real(cc->calib_s, 6));
    }
    return jsonout_print(json_pack(
        "{s:o, s:o, s:I, s:o, s:o, s:o, s:o}", "model", jsonout_string(dir), "devices",
        jsonout_string(devices), "weight_bytes", (json_int_t)r[0].bytes, "memcpy_gb_s",
        cuda ? json_null() : per_threads_json(bw, max_workers), "stream_copy_gb_s",
        cuda ? json_null() : per_threads_json(sbw, max_workers), "device_copy",
        cuda ? json_null() : copy, "layouts", layouts));
}

int bench_swap(int argc, char **argv)
{
    const char *preset = NULL, *dir_flag = NULL, *dtype_s = "f16", *layouts_s = "1x1,2x1,1x2";
    const char *cache = "models", *devices_s = NULL;
    int layers = 0, tp = 0, pp = 0, repeat = 3, prompt_len = 8;
    bool json = false;
    struct flag flags[] = {
        FLAG("preset", FLAG_STR, &preset, "NAME", model_preset_names()),
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
        FLAG("devices", FLAG_STR, &devices_s, "LIST",
             "cuda:G,... : run the layouts on these CUDA devices, each layout on the first "
             "TPxPP of them (a GPU listed again is another partition of it); default: CPU "
             "devices, one per shard"),
        FLAG("json", FLAG_BOOL, &json, NULL, "print one JSON object instead of tables"),
    };
    int rc = args_parse("bench swap",
                        "Registers the model on CPU devices (one per worker, budget = its shard and the cold "
                        "request's KV cache and activations), or on the CUDA devices --devices lists, "
                        "and measures, for each TP x PP layout: swap-in time and GB/s (host -> "
                        "devices, every shard at once), per worker and in aggregate, against "
                        "memcpy on as many threads in the same run (CUDA: against the link, a "
                        "pinned copy of the same bytes onto every device at once); swap-out time "
                        "(CUDA: and GB/s against the link back); and a cold "
                        "request (not resident -> first token) with layer overlap on and off, "
                        "against load + warm first-token time.",
                        argc, argv, flags, sizeof(flags) / sizeof(flags[0]));
    if (rc)
        return rc;
    if (!preset == !dir_flag) {
        fprintf(stderr, "shardswap bench swap: give exactly one of --preset NAME or --model DIR\n");
        return EXIT_USAGE;
    }
    /* the device list: CPU ones (a number or cpu:0,...) keep the default of
     * one CPU device per shard, at most as many as listed */
    struct bench_devices bd = {0};
    int max_listed = MAX_WORKERS;
    if (devices_s) {
        struct stack_config dsc = {0};
        if (stack_parse_devices("--devices", devices_s, &dsc) < 0)
            return args_usage_fail("bench swap");
        bd.cuda = strcmp(dsc.device_kind, "cuda") == 0;
        bd.n = dsc.n_devices;
        for (int d = 0; d < dsc.n_devices; d++)
            bd.gpus[d] = dsc.gpus[d];
        max_listed = dsc.n_devices;
    }
    struct layout_result res[MAX_LAYOUTS + 1];
    int tps[MAX_LAYOUTS + 1], pps[MAX_LAYOUTS + 1], n = 0;
    char dir[4096];
    int max_workers = 1;
    double bw[MAX_WORKERS + 1] = {0}, sbw[MAX_WORKERS + 1] = {0};
    struct model_config *cfg = NULL;
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
    for (int i = 0; devices_s && i < n; i++)
        if (tps[i] * pps[i] > max_listed) {
            rc = err_set(ERR_INVALID, "layout %dx%d needs %d devices; --devices %s lists %d",
                         tps[i], pps[i], tps[i] * pps[i], devices_s, max_listed);
            goto bad_flag;
        }
    if (dir_flag)
        snprintf(dir, sizeof(dir), "%s", dir_flag);
    else if ((rc = model_cache_preset(cache, preset, layers, dtype_s, 0, dir, sizeof(dir))) < 0)
        goto out;
    if ((rc = model_config_load(dir, &cfg)) < 0 || (rc = st_open(dir, &ck)) < 0)
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
        struct model_shard s = {.tp_rank = 0, .tp_size = tps[i], .layer_begin = 0, .layer_end = 1};
        if ((rc = model_shard_check(cfg, &s)) < 0)
            goto out;
        if (pps[i] > cfg->info.n_layers) {
            rc = err_set(ERR_INVALID, "layout %dx%d: PP %d exceeds the model's %d layers", tps[i],
                         pps[i], pps[i], cfg->info.n_layers);
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
        struct model_exec_shape cold = {.batch = 1, .max_len = prompt_len + 1};
        if ((rc = swap_layout_bytes(dir, tps[i], pps[i], &cold, shard, &host)) < 0)
            goto out;
        for (int d = 0; d < tps[i] * pps[i]; d++)
            need[d] = shard[d] > need[d] ? shard[d] : need[d];
    }
    uint64_t budget = total + embed + (16u << 20); /* host tier: any layout's copy */
    for (int d = 0; d < max_workers; d++)
        need[d] += 1u << 20;
    /* the host's copy speed: the reference of CPU devices only */
    for (int t = 1; !bd.cuda && t <= max_workers; t++) {
        bw[t] = membw_memcpy(t, (size_t)256 << 20, 5);
        sbw[t] = membw_stream(t, (size_t)256 << 20, 5);
    }
    for (int i = 0; i < n; i++)
        if ((rc = bench_layout(&bd, need, dir, budget, repeat, prompt_len, &res[i])) < 0)
            goto out;
    const char *dev_words = devices_s ? devices_s : "CPU devices, one per shard";
    if (json)
        rc = print_json(dir, dev_words, bd.cuda, res, n, bw, sbw, max_workers);
    else if (bd.cuda)
        print_table_cuda(dir, dev_words, res, n);
    else
        print_table(dir, res, n, bw, sbw, max_workers);
out:
    st_close(ck);
    model_config_free(cfg);
    return rc < 0 ? cli_fail("bench swap") : 0;
bad_flag:
    return args_usage_fail("bench swap");
}
