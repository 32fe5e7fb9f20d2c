/* shardswap bench swap: how fast a model moves onto its devices under each
 * TP x PP layout, against a reference measured in the same run (CPU
 * devices: memcpy on as many threads; CUDA devices: the link, a plain
 * pinned copy of the same bytes onto every device of the layout at once),
 * and what a cold request costs with and without layer overlap: the flags,
 * workload/swapbench.h's measurement, its table or JSON. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_cache.h"
#include "core/copy.h"
#include "core/error.h"
#include "core/jsonout.h"
#include "engine/stack.h"
#include "model/random.h"
#include "workload/swapbench.h"

#define MAX_LAYOUTS 8
#define MAX_WORKERS SWAPBENCH_MAX_WORKERS
#define MAX_WORKERS_RANGE "1..16" /* in words, for the flags */

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

/* A layout not measured, and why (swapbench_layout.skipped) */
struct skipped {
    int tp, pp;
    char why[sizeof(((struct swapbench_layout *)0)->skipped)];
};

/* The cold request's table, the same for every kind of device. */
static void print_cold(const struct swapbench_layout *r, int n)
{
    printf("\ncold request (not resident -> first token's logits)\n");
    printf("%-7s %12s %12s %10s %14s %12s\n", "layout", "overlap ms", "serial ms", "warm ms",
           "load+warm ms", "overlap/(l+w)");
    for (int i = 0; i < n; i++)
        printf("%dx%-5d %12.1f %12.1f %10.1f %14.1f %12.2f\n", r[i].tp, r[i].pp,
               r[i].cold_overlap_s * 1e3, r[i].cold_serial_s * 1e3, r[i].warm_s * 1e3,
               (r[i].load_s + r[i].warm_s) * 1e3,
               r[i].cold_overlap_s / (r[i].load_s + r[i].warm_s));
}

/* --adapter: its swap over the resident model against the model's own. */
static void print_adapter(const char *dir, const struct swapbench_layout *r, int n)
{
    printf("\nadapter %s (the model resident), against the model's own swap-in\n", dir);
    printf("%-7s %11s %9s %9s %8s %8s %10s %12s %8s %8s\n", "layout", "adapter MB", "load ms",
           "GB/s", "off ms", "fill ms", "model MB", "model ms", "bytes/m", "time/m");
    for (int i = 0; i < n; i++)
        printf("%dx%-5d %11.2f %9.2f %9.2f %8.2f %8.1f %10.1f %12.1f %8.4f %8.4f\n", r[i].tp,
               r[i].pp, r[i].adapter_bytes / 1e6, r[i].adapter_load_s * 1e3,
               r[i].adapter_bytes / r[i].adapter_load_s / 1e9, r[i].adapter_offload_s * 1e3,
               r[i].adapter_host_fill_s * 1e3, r[i].bytes / 1e6, r[i].load_s * 1e3,
               (double)r[i].adapter_bytes / (double)r[i].bytes, r[i].adapter_load_s / r[i].load_s);
}

/* --adapter's figures of one layout, for its JSON. */
static json_t *adapter_json(const struct swapbench_layout *r)
{
    return json_pack("{s:I, s:o, s:o, s:o, s:o, s:o, s:o}", "bytes", (json_int_t)r->adapter_bytes,
                     "load_s", jsonout_real(r->adapter_load_s, 6), "load_gb_s",
                     jsonout_real(r->adapter_bytes / r->adapter_load_s / 1e9, 3), "offload_s",
                     jsonout_real(r->adapter_offload_s, 6), "host_fill_s",
                     jsonout_real(r->adapter_host_fill_s, 6), "bytes_vs_model",
                     jsonout_real((double)r->adapter_bytes / (double)r->bytes, 5),
                     "load_s_vs_model", jsonout_real(r->adapter_load_s / r->load_s, 5));
}

/* Under mpirun, below the table (whose rows give each shard's rate @ its
 * process): per layout each process's aggregate and the job's, and what
 * differs between the processes' numbers. */
static void print_procs(const struct swapbench_layout *r, int n, int procs, bool cuda,
                        const struct swapbench_report *rep)
{
    printf("\nper process (GB/s: its shards' bytes / the slowest of its shards' loads; job: all "
           "bytes / the model's load; /memcpy, /stream: against that process's own copy on one "
           "thread, measured there)\n");
    printf("%-7s %7s %-16s %9s %9s %8s %8s\n", "layout", "process", "shards", "GB", "GB/s",
           "/memcpy", "/stream");
    for (int i = 0; i < n; i++) {
        const int k = r[i].tp * r[i].pp;
        for (int p = 0; p < procs && p < MAX_WORKERS; p++) {
            if (!r[i].proc_bytes[p])
                continue;
            char shards[64] = "";
            size_t len = 0;
            for (int s = 0; s < k && len < sizeof(shards); s++)
                if (r[i].shard_proc[s] == p)
                    len += (size_t)snprintf(shards + len, sizeof(shards) - len, "%s%d",
                                            len ? "," : "", s);
            double mb = rep ? rep->proc_memcpy_bps[p] : 0, sb = rep ? rep->proc_stream_bps[p] : 0;
            printf("%dx%-5d %7d %-16s %9.3f %9.2f", r[i].tp, r[i].pp, p, shards,
                   r[i].proc_bytes[p] / 1e9, r[i].proc_gbs[p]);
            if (mb > 0 && sb > 0)
                printf(" %8.2f %8.2f\n", r[i].proc_gbs[p] * 1e9 / mb, r[i].proc_gbs[p] * 1e9 / sb);
            else
                printf(" %8s %8s\n", "-", "-");
        }
        printf("%dx%-5d %7s %-16s %9.3f %9.2f\n", r[i].tp, r[i].pp, "job", "all", r[i].bytes / 1e9,
               r[i].bytes / r[i].load_s / 1e9);
    }
    printf("under mpirun: %s fill ms are process 0's; the other processes fill their host "
           "copies at a shard's first load (from their checkpoint, inside that load's GB/s) "
           "and copy from them after, within the host budget\n",
           cuda ? "the link and" : "memcpy, streaming copy and");
}

static void print_table(const char *dir, const struct swapbench_layout *r, int n, const double *bw,
                        const double *sbw, int max_workers, int procs,
                        const struct swapbench_report *rep)
{
    printf("model %s: %.3f GB of weights", dir, r[0].bytes / 1e9);
    if (procs > 1)
        printf(", across %d processes (device d of a layout on process d %% %d)", procs, procs);
    printf("\n");
    for (int t = 1; t <= max_workers; t++)
        printf("  %s%d thread%s: memcpy %.2f GB/s, streaming copy %.2f GB/s\n",
               procs > 1 ? "process 0, " : "", t, t > 1 ? "s" : "", bw[t] / 1e9, sbw[t] / 1e9);
    const struct copy_choice *cc = copy_choose();
    if (cc->forced)
        printf("  devices copy with: %s (SHARDSWAP_COPY)\n", cc->name);
    else
        printf("  devices copy with: %s (measured at open in %.0f ms, 1 thread: memcpy %.2f GB/s, "
               "stream %.2f GB/s)\n",
               cc->name, cc->calib_s * 1e3, cc->memcpy_gb_s, cc->stream_gb_s);
    printf("%-7s %9s %9s %8s %8s %9s %8s %8s %s\n", "layout", "load ms", "GB/s", "/memcpy",
           "/stream", "speedup", "off ms", "fill ms",
           procs > 1 ? "per-shard GB/s@process" : "per-worker GB/s");
    for (int i = 0; i < n; i++) {
        int k = r[i].tp * r[i].pp;
        double gbs = r[i].bytes / r[i].load_s;
        printf("%dx%-5d %9.1f %9.2f %8.2f %8.2f %8.2fx %8.2f %8.1f", r[i].tp, r[i].pp,
               r[i].load_s * 1e3, gbs / 1e9, gbs / bw[k], gbs / sbw[k], r[0].load_s / r[i].load_s,
               r[i].offload_s * 1e3, r[i].host_fill_s * 1e3);
        for (int s = 0; s < k; s++)
            if (procs > 1)
                printf(" %.2f@%d", r[i].worker_gbs[s], r[i].shard_proc[s]);
            else
                printf(" %.2f", r[i].worker_gbs[s]);
        printf("\n");
    }
    if (procs > 1)
        print_procs(r, n, procs, false, rep);
    print_cold(r, n);
}

/* CUDA devices: the same table against the link instead of memcpy. */
static void print_table_cuda(const char *dir, const char *devices, const struct swapbench_layout *r,
                             int n, int procs)
{
    printf("model %s: %.3f GB of weights, on %s", dir, r[0].bytes / 1e9, devices);
    if (procs > 1)
        printf(", across %d processes (device d of a layout on process d %% %d; the link only "
               "where all of a layout's devices are process 0's)",
               procs, procs);
    printf("\n");
    printf("  link: pinned host memory <-> each device of the layout at once "
           "(device_copy_h2d/d2h of the same bytes)\n");
    printf("%-7s %9s %9s %9s %8s %8s %9s %9s %8s %8s %s\n", "layout", "load ms", "GB/s",
           "link GB/s", "/link", "speedup", "off ms", "off GB/s", "/link", "fill ms",
           procs > 1 ? "per-shard GB/s@process" : "per-worker GB/s");
    for (int i = 0; i < n; i++) {
        int k = r[i].tp * r[i].pp;
        double gbs = r[i].bytes / r[i].load_s, link = r[i].bytes / r[i].link_h2d_s;
        double off = r[i].bytes / r[i].offload_s, link_off = r[i].bytes / r[i].link_d2h_s;
        if (r[i].link_h2d_s > 0)
            printf("%dx%-5d %9.1f %9.2f %9.2f %8.2f %8.2fx %9.1f %9.2f %8.2f %8.1f", r[i].tp,
                   r[i].pp, r[i].load_s * 1e3, gbs / 1e9, link / 1e9, gbs / link,
                   r[0].load_s / r[i].load_s, r[i].offload_s * 1e3, off / 1e9, off / link_off,
                   r[i].host_fill_s * 1e3);
        else /* a device of another process: no link measured */
            printf("%dx%-5d %9.1f %9.2f %9s %8s %8.2fx %9.1f %9.2f %8s %8.1f", r[i].tp, r[i].pp,
                   r[i].load_s * 1e3, gbs / 1e9, "-", "-", r[0].load_s / r[i].load_s,
                   r[i].offload_s * 1e3, off / 1e9, "-", r[i].host_fill_s * 1e3);
        for (int s = 0; s < k; s++)
            if (procs > 1)
                printf(" %.2f@%d", r[i].worker_gbs[s], r[i].shard_proc[s]);
            else
                printf(" %.2f", r[i].worker_gbs[s]);
        printf("\n");
    }
    if (procs > 1)
        print_procs(r, n, procs, true, NULL);
    print_cold(r, n);
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

/* Under mpirun, a layout's placement and rates: "shards" (each shard's
 * process, bytes and GB/s), "processes" (each process holding shards: its
 * shards, bytes and aggregate GB/s) and "job_load_gb_s" (all bytes / the
 * model's load), set on l. 0, or -1 when out of memory. */
static int procs_json_set(json_t *l, const struct swapbench_layout *r, int procs,
                          const struct swapbench_report *rep)
{
    const int k = r->tp * r->pp;
    json_t *shards = json_array(), *per_proc = json_array();
    int bad = !shards || !per_proc;
    for (int s = 0; !bad && s < k; s++)
        bad |= json_array_append_new(shards, json_pack("{s:i, s:i, s:I, s:o}", "shard", s,
                                                       "process", r->shard_proc[s], "bytes",
                                                       (json_int_t)r->shard_bytes[s], "load_gb_s",
                                                       jsonout_real(r->worker_gbs[s], 3)));
    for (int p = 0; !bad && p < procs && p < MAX_WORKERS; p++) {
        if (!r->proc_bytes[p])
            continue;
        json_t *ids = json_array();
        for (int s = 0; ids && !bad && s < k; s++)
            if (r->shard_proc[s] == p)
                bad |= json_array_append_new(ids, json_integer(s));
        json_t *e = json_pack("{s:i, s:o, s:I, s:o}", "process", p, "shards", ids, "bytes",
                              (json_int_t)r->proc_bytes[p], "load_gb_s",
                              jsonout_real(r->proc_gbs[p], 3));
        /* its own copy on one thread, measured there: the reference of its rate */
        if (e && rep->proc_memcpy_bps[p] > 0)
            bad |= json_object_set_new(e, "memcpy_gb_s",
                                       jsonout_real(rep->proc_memcpy_bps[p] / 1e9, 3)) |
                   json_object_set_new(e, "stream_gb_s",
                                       jsonout_real(rep->proc_stream_bps[p] / 1e9, 3));
        bad |= !e || json_array_append_new(per_proc, e);
    }
    if (bad) {
        json_decref(shards);
        json_decref(per_proc);
        return -1;
    }
    return json_object_set_new(l, "shards", shards) |
           json_object_set_new(l, "processes", per_proc) |
           json_object_set_new(l, "job_load_gb_s", jsonout_real(r->bytes / r->load_s / 1e9, 3));
}

/* The keys of CPU devices' runs stay, null for CUDA devices' where they
 * compare with the host's memcpy; the link's keys are null for CPU
 * devices (not measured). Under mpirun (procs > 1) also each layout's
 * procs_json_set keys and, at the top, the job's processes and placement
 * (the reference and host fill being process 0's). */
static int print_json(const char *dir, const char *devices, bool cuda,
                      const struct swapbench_layout *r, int n, const double *bw, const double *sbw,
                      int max_workers, int procs, const struct swapbench_report *rep,
                      const struct skipped *skip, int n_skip)
{
    json_t *layouts = json_array(), *skipped = json_array();
    for (int i = 0; skipped && i < n_skip; i++)
        if (json_array_append_new(skipped,
                                  json_pack("{s:i, s:i, s:o}", "tp", skip[i].tp, "pp", skip[i].pp,
                                            "reason", jsonout_string(skip[i].why))) != 0) {
            json_decref(skipped);
            skipped = NULL;
        }
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
        if (l && r[i].adapter_bytes &&
            json_object_set_new(l, "adapter", adapter_json(&r[i])) != 0) {
            json_decref(l);
            l = NULL;
        }
        if ((procs > 1 && l && procs_json_set(l, &r[i], procs, rep) != 0) ||
            json_array_append_new(layouts, l) != 0) {
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
    json_t *top = json_pack(
        "{s:o, s:o, s:I, s:o, s:o, s:o, s:o, s:o}", "model", jsonout_string(dir), "devices",
        jsonout_string(devices), "weight_bytes", (json_int_t)r[0].bytes, "memcpy_gb_s",
        cuda ? json_null() : per_threads_json(bw, max_workers), "stream_copy_gb_s",
        cuda ? json_null() : per_threads_json(sbw, max_workers), "device_copy",
        cuda ? json_null() : copy, "layouts", layouts, "skipped_layouts", skipped);
    if (top && procs > 1 &&
        (json_object_set_new(top, "processes", json_integer(procs)) |
         json_object_set_new(top, "placement",
                             jsonout_string("device d on process d % processes")) |
         json_object_set_new(top, "reference_process", json_integer(0)) |
         json_object_set_new(top, "remote_host_copy_at_first_load", json_true()))) {
        json_decref(top);
        top = NULL;
    }
    return jsonout_print(top);
}

/* The layouts (--layouts, then --tp/--pp) and the devices (--devices: CPU
 * ones, a number or cpu:0,..., keep the default of one CPU device per
 * shard, at most as many as listed) into c. A usage error (ERR_INVALID with
 * its message) when the device list does not parse or lists fewer devices
 * than a layout needs; another error otherwise. */
static int config_from_flags(const char *layouts_s, int tp, int pp, const char *devices_s,
                             struct swapbench_config *c, bool *usage)
{
    int max_listed = MAX_WORKERS, rc;
    *usage = false;
    if (devices_s) {
        struct stack_config dsc = {0};
        if ((rc = stack_parse_devices("--devices", devices_s, &dsc)) < 0) {
            *usage = true;
            return rc;
        }
        c->cuda = strcmp(dsc.device_kind, "cuda") == 0;
        c->n_gpus = dsc.n_devices;
        for (int d = 0; d < dsc.n_devices; d++)
            c->gpus[d] = dsc.gpus[d];
        max_listed = dsc.n_devices;
    }
    if ((rc = parse_layouts(layouts_s, c->tp, c->pp, &c->n_layouts)) < 0)
        return rc;
    if (tp > 0 || pp > 0) {
        c->tp[c->n_layouts] = tp > 0 ? tp : 1;
        c->pp[c->n_layouts] = pp > 0 ? pp : 1;
        if (c->tp[c->n_layouts] * c->pp[c->n_layouts] > MAX_WORKERS)
            return err_set(ERR_INVALID, "--tp x --pp must be at most %d", MAX_WORKERS);
        c->n_layouts++;
    }
    for (int i = 0; devices_s && i < c->n_layouts; i++)
        if (c->tp[i] * c->pp[i] > max_listed) {
            *usage = true;
            return err_set(ERR_INVALID, "layout %dx%d needs %d devices; --devices %s lists %d",
                           c->tp[i], c->pp[i], c->tp[i] * c->pp[i], devices_s, max_listed);
        }
    return 0;
}

int bench_swap(int argc, char **argv)
{
    const char *preset = NULL, *dir_flag = NULL, *dtype_s = "f16", *layouts_s = "1x1,2x1,1x2";
    const char *cache = "models", *devices_s = NULL;
    int layers = 0, tp = 0, pp = 0;
    bool json = false;
    struct swapbench_config c = {.repeat = 3, .prompt_len = 8, .ref_bytes = (size_t)256 << 20};
    struct flag flags[] = {
        FLAG_CHOICE("preset", &preset, "NAME", "the model's shape, generated (once) into --cache",
                    model_preset_names()),
        FLAG("model", FLAG_STR, &dir_flag, "DIR", "a checkpoint directory instead of a preset"),
        FLAG("dtype", FLAG_STR, &dtype_s, "f16|bf16|f32",
             "dtype of a generated preset (default f16)"),
        FLAG_RANGE("layers", FLAG_INT, &layers, "N",
                   "layers of a generated preset (default: the preset's)", 1, 4096, "1..4096"),
        FLAG("layouts", FLAG_STR, &layouts_s, "TPxPP,...",
             "layouts to measure (default 1x1,2x1,1x2)"),
        FLAG_RANGE("tp", FLAG_INT, &tp, "N", "also measure TP=N (with --pp, default 1)", 1,
                   MAX_WORKERS, MAX_WORKERS_RANGE),
        FLAG_RANGE("pp", FLAG_INT, &pp, "N", "also measure PP=N (with --tp, default 1)", 1,
                   MAX_WORKERS, MAX_WORKERS_RANGE),
        FLAG("expert-parallel", FLAG_BOOL, &c.expert_parallel, NULL,
             "a mixture of experts' routed experts placed whole on each layout's TP ranks, "
             "not split across them"),
        FLAG_RANGE("repeat", FLAG_INT, &c.repeat, "R", "median of R runs (default 3)", 1, 1000,
                   "1..1000"),
        FLAG_RANGE("prompt-len", FLAG_INT, &c.prompt_len, "L",
                   "tokens of the cold request (default 8)", 1, SWAPBENCH_MAX_PROMPT, "1..512"),
        FLAG("cache", FLAG_STR, &cache, "DIR", "where generated presets are kept (default models)"),
        FLAG("devices", FLAG_STR, &devices_s, "LIST",
             "cuda:G,... : run the layouts on these CUDA devices, each layout on the first "
             "TPxPP of them (a GPU listed again is another partition of it); default: CPU "
             "devices, one per shard"),
        FLAG("adapter", FLAG_STR, &c.adapter, "DIR",
             "also measure this PEFT LoRA adapter of the model: its swap-in and swap-out over "
             "the resident model, against the model's own (time and bytes)"),
        FLAG("json", FLAG_BOOL, &json, NULL, "print one JSON object instead of tables"),
    };
    int rc = args_parse(
        "bench swap",
        "Registers the model on CPU devices (one per worker, budget = its shard and the cold "
        "request's KV cache and activations), or on the CUDA devices --devices lists, "
        "and measures, for each TP x PP layout: swap-in time and GB/s (host -> "
        "devices, every shard at once), per worker and in aggregate, against "
        "memcpy on as many threads in the same run (CUDA: against the link, a "
        "pinned copy of the same bytes onto every device at once); swap-out time "
        "(CUDA: and GB/s against the link back); and a cold "
        "request (not resident -> first token) with layer overlap on and off, "
        "against load + warm first-token time. Under mpirun (mpirun -n P "
        "shardswap bench swap ...) device d of every layout is process d % P's "
        "(shards on another process are loaded there from its own copy of the "
        "checkpoint, the same path on every node, into a host copy at its first "
        "load); the table and --json add each shard's process and per "
        "process its aggregate GB/s (its shards' bytes / its slowest shard's "
        "load) beside the job's (all bytes / the model's load); the reference "
        "and the host fill are process 0's. Give it --model DIR at the same "
        "path on every node (a --preset is generated by process 0 alone).",
        argc, argv, flags, sizeof(flags) / sizeof(flags[0]));
    if (rc)
        return rc;
    if (!preset == !dir_flag) {
        fprintf(stderr, "shardswap bench swap: give exactly one of --preset NAME or --model DIR\n");
        return EXIT_USAGE;
    }
    bool usage;
    char dir[4096];
    struct swapbench_report rep;
    if ((rc = config_from_flags(layouts_s, tp, pp, devices_s, &c, &usage)) < 0)
        return usage ? args_usage_fail("bench swap") : cli_fail("bench swap");
    if (dir_flag)
        snprintf(dir, sizeof(dir), "%s", dir_flag);
    else if ((rc = model_cache_preset(cache, preset, layers, dtype_s, 0, dir, sizeof(dir))) < 0)
        return cli_fail("bench swap");
    c.dir = dir;
    c.job = cli_job(); /* under mpirun: device d on process d % P */
    if ((rc = swapbench_run(&c, &rep)) < 0)
        return cli_fail("bench swap");
    /* the measured layouts first, in order (the tables compare with the
     * first); the skipped ones said after them */
    struct skipped skip[MAX_LAYOUTS];
    int n = 0, n_skip = 0;
    for (int i = 0; i < rep.n_layouts; i++) {
        if (rep.layouts[i].skipped[0]) {
            /* copied: the measured layouts move over this one below */
            skip[n_skip] = (struct skipped){rep.layouts[i].tp, rep.layouts[i].pp, ""};
            snprintf(skip[n_skip].why, sizeof(skip[n_skip].why), "%s", rep.layouts[i].skipped);
            n_skip++;
            continue;
        }
        if (n != i)
            rep.layouts[n] = rep.layouts[i];
        n++;
    }
    const char *dev_words = devices_s ? devices_s : "CPU devices, one per shard";
    if (json)
        rc = print_json(dir, dev_words, c.cuda, rep.layouts, n, rep.memcpy_bps, rep.stream_bps,
                        rep.max_workers, rep.procs, &rep, skip, n_skip);
    else {
        if (c.cuda)
            print_table_cuda(dir, dev_words, rep.layouts, n, rep.procs);
        else
            print_table(dir, rep.layouts, n, rep.memcpy_bps, rep.stream_bps, rep.max_workers,
                        rep.procs, &rep);
        if (c.adapter)
            print_adapter(c.adapter, rep.layouts, n);
        for (int i = 0; i < n_skip; i++)
            printf("layout %dx%d skipped: %s\n", skip[i].tp, skip[i].pp, skip[i].why);
    }
    return rc < 0 ? cli_fail("bench swap") : 0;
}
