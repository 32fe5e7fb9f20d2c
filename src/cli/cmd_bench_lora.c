/* shardswap bench lora: the cost of LoRA adapters in a mixed batch on the
 * CPU backend. Per layer shape (a Llama's q/o, gate/up and down at
 * --hidden and --ffn), `--rows` rows over `--adapters` distinct adapters of
 * rank `--rank` (one segment each, as decode steps of that many sequences
 * over that many fine-tunes are), it times kern_lora against kern_linear of
 * the base layer for the same rows, on 1 and 2 threads. Like bench gemv it
 * cycles through copies of the weights (the base's and the adapters') so
 * that they come from memory, as a model's layers do. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/device.h"
#include "backend/kernels.h"
#include "cli/args.h"
#include "cli/bench_gemv.h"
#include "cli/commands.h"
#include "core/cpus.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/jsonout.h"
#include "core/timing.h"

#define BENCH_LORA_PASSES 7
#define BENCH_LORA_MAX_ADAPTERS 64

struct lora_layer {
    const char *name;
    int in, out;
};

/* One layer's operands: `copies` copies of the base weights and of the
 * adapters' pairs, cycled through. */
struct lora_bench {
    struct stream *st;
    enum kern_compute cm;
    int rows, nseg, copies;
    const int *seg;
    struct weight_view *w;   /* (copies) */
    struct lora_pair *pairs; /* (copies, nseg) */
    float *x, *y, *scratch;
    double min_s;
};

static int lora_call(const struct lora_bench *b, bool lora, int c)
{
    return lora ? kern_lora(b->st, b->y, b->x, b->rows, b->nseg, b->seg,
                            b->pairs + (size_t)c * b->nseg, b->cm, b->scratch)
                : kern_linear(b->st, b->y, b->x, b->rows, &b->w[c], NULL, b->cm);
}

/* Seconds per call, best of BENCH_LORA_PASSES passes through every copy
 * (each pass at least min_s), after a warm-up pass. */
static double lora_time(const struct lora_bench *b, bool lora, int *rc)
{
    double best = 1e30;
    for (int c = 0; c < b->copies && *rc == 0; c++)
        *rc = lora_call(b, lora, c);
    for (int rep = 0; rep < BENCH_LORA_PASSES && *rc == 0; rep++) {
        long calls = 0;
        double t0 = time_now(), t;
        do {
            for (int c = 0; c < b->copies && *rc == 0; c++, calls++)
                *rc = lora_call(b, lora, c);
        } while ((t = time_now() - t0) < b->min_s && *rc == 0);
        if (t / calls < best)
            best = t / calls;
    }
    return best;
}

/* Small values of every sign in a 16-bit or f32 type. */
static void lora_fill(enum dtype t, char *p, size_t elems, unsigned seed)
{
    for (size_t i = 0; i < elems; i++) {
        float v = (float)((int)((i * 2654435761u + seed) % 201) - 100) / 1000.0f;
        if (t == DTYPE_F32)
            ((float *)p)[i] = v;
        else
            ((uint16_t *)p)[i] = t == DTYPE_F16 ? f32_to_f16(v) : f32_to_bf16(v);
    }
}

int bench_lora(int argc, char **argv)
{
    int hidden = 2048, ffn = 8192, rank = 16, adapters = 8, rows = 8, footprint_mb = 512;
    const char *compute = "bf16", *type = "bf16", *kernel = NULL;
    bool json = false;
    struct flag flags[] = {
        FLAG_RANGE("hidden", FLAG_INT, &hidden, "N", "model width: q/o are N x N (default 2048)",
                   16, 1 << 16, "16..65536"),
        FLAG_RANGE("ffn", FLAG_INT, &ffn, "N",
                   "MLP width: gate/up N x hidden, down hidden x N (default 8192)", 16, 1 << 18,
                   "16..262144"),
        FLAG_RANGE("rank", FLAG_INT, &rank, "R", "every adapter's rank (default 16)", 1, 1024,
                   "1..1024"),
        FLAG_RANGE("adapters", FLAG_INT, &adapters, "N",
                   "distinct adapters, one segment of rows each (default 8)", 1,
                   BENCH_LORA_MAX_ADAPTERS, "1..64"),
        FLAG_RANGE("rows", FLAG_INT, &rows, "M", "input rows, spread over the adapters (default 8)",
                   1, 4096, "1..4096"),
        FLAG_CHOICE("type", &type, "T", "weight type of the base and the adapters (default bf16)",
                    "f32|f16|bf16"),
        FLAG_CHOICE("compute", &compute, "f32|bf16", "compute precision (default bf16)",
                    "f32|bf16"),
        FLAG_CHOICE("kernel", &kernel, "NAME",
                    "LoRA row kernel (default: avx512 where the CPU has it)", "avx512|scalar"),
        FLAG_RANGE("footprint-mb", FLAG_INT, &footprint_mb, "MB",
                   "weights cycled through per layer, above the last-level cache (default 512)", 1,
                   1 << 20, "1..1048576"),
        FLAG("json", FLAG_BOOL, &json, NULL, "print one JSON object instead of a table"),
    };
    int rc = args_parse("bench lora",
                        "Measures the CPU's segmented LoRA update (kern_lora) for a batch of rows "
                        "over distinct adapters against the base layer's linear product for the "
                        "same rows, per Llama layer shape, on 1 and 2 threads.",
                        argc, argv, flags, sizeof(flags) / sizeof(flags[0]));
    if (rc)
        return rc;
    enum kern_compute cm;
    enum dtype dt;
    if (kern_compute_parse(compute, &cm) < 0 || dtype_parse(type, &dt) < 0)
        return args_usage_fail("bench lora");
    if (adapters > rows) {
        char value[16], range[64];
        snprintf(value, sizeof(value), "%d", adapters);
        snprintf(range, sizeof(range), "1..%d, --rows: a segment of rows each", rows);
        return args_range_fail("bench lora", "adapters", value, range);
    }
    if (kernel && cpu_lora_force(kernel) < 0)
        return args_usage_fail("bench lora");

    const struct lora_layer layers[] = {
        {"q/o", hidden, hidden}, {"gate/up", hidden, ffn}, {"down", ffn, hidden}};
    const int n_layers = (int)(sizeof(layers) / sizeof(layers[0]));
    const size_t es = dtype_size(dt);
    int max_threads = cpus_usable() < 2 ? cpus_usable() : 2;
    int seg[BENCH_LORA_MAX_ADAPTERS + 1];
    for (int s = 0; s <= adapters; s++)
        seg[s] = (int)((long)s * rows / adapters);
    struct device *dev = NULL;
    struct stream *st = NULL;
    char *wbuf = NULL;
    size_t wbytes = 0;
    struct weight_view *w = NULL;
    struct lora_pair *pairs = NULL;
    float *x = NULL, *y = NULL, *scratch = NULL;
    json_t *results = json ? json_array() : NULL;
    if ((rc = device_open_cpu(0, (uint64_t)1 << 20, &dev)) < 0 ||
        (rc = device_stream_create(dev, &st)) < 0)
        goto out;
    device_compute_thread_init(dev);
    cpu_set_threads(max_threads);
    const int widest = hidden > ffn ? hidden : ffn;
    x = malloc((size_t)rows * widest * sizeof(float));
    y = malloc((size_t)rows * widest * sizeof(float));
    scratch = malloc(kern_lora_scratch(rows, rank) * sizeof(float));
    if (!x || !y || !scratch) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < (size_t)rows * widest; i++)
        x[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    if (!json)
        printf("lora kernel %s, gemv %s\n%d rows over %d adapters of rank %d, %s weights, compute "
               "%s, %d MB cycled per layer\n%-8s %6s %6s %7s %10s %10s %9s %9s\n",
               cpu_lora_kernel(), cpu_gemv_kernels(), rows, adapters, rank, type, compute,
               footprint_mb, "layer", "in", "out", "threads", "linear ms", "lora ms", "lora/lin",
               "(lin+lora)/lin");
    for (int l = 0; l < n_layers && rc == 0; l++) {
        const int in = layers[l].in, out = layers[l].out;
        const size_t base = (size_t)out * in * es;
        const size_t pair = ((size_t)rank * in + (size_t)out * rank) * es;
        const size_t copy = base + pair * adapters;
        int copies = (int)(((size_t)footprint_mb << 20) / copy);
        copies = copies < 1 ? 1 : copies;
        bench_gemv_unmap(wbuf, wbytes);
        free(w);
        free(pairs);
        wbytes = copy * copies;
        wbuf = bench_gemv_map(wbytes);
        w = malloc((size_t)copies * sizeof(*w));
        pairs = malloc((size_t)copies * adapters * sizeof(*pairs));
        if (!wbuf || !w || !pairs) {
            rc = err_set(ERR_NOMEM, "out of memory for %d copies of %zu bytes", copies, copy);
            break;
        }
        lora_fill(dt, wbuf, wbytes / es, (unsigned)l);
        for (int c = 0; c < copies; c++) {
            char *p = wbuf + copy * c;
            w[c] = (struct weight_view){
                .dtype = dt, .data = p, .rows = out, .cols = in, .ld = (size_t)in};
            p += base;
            for (int a = 0; a < adapters; a++, p += pair)
                pairs[(size_t)c * adapters + a] = (struct lora_pair){
                    .a = {.dtype = dt, .data = p, .rows = rank, .cols = in, .ld = (size_t)in},
                    .b = {.dtype = dt,
                          .data = p + (size_t)rank * in * es,
                          .rows = out,
                          .cols = rank,
                          .ld = (size_t)rank},
                    .scale = 2.0f,
                };
        }
        struct lora_bench b = {.st = st,
                               .cm = cm,
                               .rows = rows,
                               .nseg = adapters,
                               .copies = copies,
                               .seg = seg,
                               .w = w,
                               .pairs = pairs,
                               .x = x,
                               .y = y,
                               .scratch = scratch,
                               .min_s = 0.05};
        for (int t = 1; t <= max_threads && rc == 0; t++) {
            cpu_kernels_single_thread(t == 1); /* one thread: this one, alone */
            double lin = lora_time(&b, false, &rc);
            double lo = rc == 0 ? lora_time(&b, true, &rc) : 0;
            if (rc < 0)
                break;
            if (json)
                json_array_append_new(results,
                                      json_pack("{s:s, s:i, s:i, s:i, s:o, s:o, s:o, s:o}", "layer",
                                                layers[l].name, "in", in, "out", out, "threads", t,
                                                "linear_ms", jsonout_real(lin * 1e3, 4), "lora_ms",
                                                jsonout_real(lo * 1e3, 4), "lora_vs_linear",
                                                jsonout_real(lo / lin, 3), "adapter_bytes",
                                                json_integer((json_int_t)(pair * adapters))));
            else
                printf("%-8s %6d %6d %7d %10.3f %10.3f %9.3f %9.3f\n", layers[l].name, in, out, t,
                       lin * 1e3, lo * 1e3, lo / lin, (lin + lo) / lin);
        }
        cpu_kernels_single_thread(false);
    }
    if (rc == 0 && json)
        rc = jsonout_print(json_pack("{s:s, s:s, s:i, s:i, s:i, s:s, s:s, s:o}", "lora_kernel",
                                     cpu_lora_kernel(), "gemv_kernels", cpu_gemv_kernels(), "rows",
                                     rows, "adapters", adapters, "rank", rank, "type", type,
                                     "compute", compute, "results", results));
    else
        json_decref(results);
out:
    bench_gemv_unmap(wbuf, wbytes);
    free(w);
    free(pairs);
    free(x);
    free(y);
    free(scratch);
    device_stream_destroy(st);
    device_close(dev);
    return rc < 0 ? cli_fail("bench lora") : 0;
}
