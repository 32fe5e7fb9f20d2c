/* shardswap bench gemv: the CPU backend's fused GEMV (decode's linear
 * layers) per weight dtype, thread count and number of input rows, its
 * weight bytes per second set against the memory's read limit
 * (cli/read_limit.h) sampled in the same run with the same threads, and each row count's cost
 * against one row's. Several copies of the matrix are cycled through so that the weights come from
 * memory, not from the last-level cache, as a model's layers do. GGUF's block types (--types
 * q8_0,q4_k,...) run the quantized linear layer (x quantized in bf16 mode, dequantized blocks in
 * f32 mode), compressed-tensors' (--types ct_i8,ct_i4,ct_f8) theirs, their bytes counted as stored.
 * --max-m above 16 adds a prefill's row counts (64 to 512), which run the matrix product
 * (cpu_matmul). --devices cuda:G measures kern_linear on a GPU instead (cmd_bench_gemv_device.c).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/ctlinear.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/qlinear.h"
#include "cli/args.h"
#include "cli/bench_gemv.h"
#include "cli/commands.h"
#include "cli/device_model.h"
#include "cli/read_limit.h"
#include "core/cpus.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/hugemem.h"
#include "core/jsonout.h"
#include "core/qpack.h"
#include "core/timing.h"

#define BENCH_GEMV_MAX_M 512
#define BENCH_GEMV_PASSES 7

struct bench_gemv {
    int rows, cols, copies;
    double min_s; /* time each measurement at least this long */
    enum kern_compute cm;
};

/* w pointed at copy c of the weights, `bytes` apart from base. */
static const struct weight_view *bench_gemv_copy(struct weight_view *w, const char *base,
                                                 size_t bytes, int c)
{
    w->data = base + bytes * (size_t)c;
    return w;
}

/* One call: the GEMV, or the quantized linear layer for a block type. */
static int bench_gemv_call(float *y, const float *x, int m, const struct weight_view *w,
                           enum kern_compute cm)
{
    if (quant_ct_is(w->dtype))
        return cpu_ctlinear(y, x, m, w, cm);
    if (dtype_is_block(w->dtype))
        return cpu_qlinear(y, x, m, w, cm);
    return m > CPU_GEMV_MAX_M ? cpu_matmul(y, x, m, w, cm) : cpu_gemv(y, x, m, w, cm);
}

/* Seconds per call of cpu_gemv with m input rows: passes through every copy
 * of the weights (w's, then every `bytes` on; a pass is at least min_s),
 * best of BENCH_GEMV_PASSES. Short passes and the best of many keep out
 * another process's bursts on a shared machine. */
static double bench_gemv_time(const struct bench_gemv *b, struct weight_view w, size_t bytes,
                              float *y, const float *x, int m, int *rc)
{
    const char *base = w.data;
    double best = 1e30;
    for (int c = 0; c < b->copies && *rc == 0; c++) /* warm-up pass */
        *rc = bench_gemv_call(y, x, m, bench_gemv_copy(&w, base, bytes, c), b->cm);
    for (int rep = 0; rep < BENCH_GEMV_PASSES && *rc == 0; rep++) {
        long calls = 0;
        double t0 = time_now(), t;
        do {
            for (int c = 0; c < b->copies && *rc == 0; c++, calls++)
                *rc = bench_gemv_call(y, x, m, bench_gemv_copy(&w, base, bytes, c), b->cm);
        } while ((t = time_now() - t0) < b->min_s && *rc == 0);
        if (t / calls < best)
            best = t / calls;
    }
    return best;
}

char *bench_gemv_map(size_t bytes)
{
    return hugemem_map(bytes);
}

void bench_gemv_unmap(char *p, size_t bytes)
{
    if (p)
        munmap(p, bytes);
}

#define BENCH_GEMV_MAX_TYPES 8

/* "f32,q4_k,...": the types, in order; 0 or ERR_INVALID naming the bad one. */
static int bench_gemv_types(const char *list, enum dtype *out, int *n)
{
    *n = 0;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int t = 0;
        while (t < DTYPE_COUNT && strcasecmp(tok, dtype_name((enum dtype)t)) != 0)
            t++;
        if (t == DTYPE_COUNT || *n == BENCH_GEMV_MAX_TYPES)
            return err_set(ERR_INVALID,
                           "--types: \"%s\" is not one of f32, f16, bf16, q8_0, q4_0, q5_0, q5_1, "
                           "q4_k, q5_k, q6_k, ct_i8, ct_i4, ct_f8 (at most %d)",
                           tok, BENCH_GEMV_MAX_TYPES);
        out[(*n)++] = (enum dtype)t;
    }
    return *n ? 0 : err_set(ERR_INVALID, "--types: empty list");
}

int bench_gemv(int argc, char **argv)
{
    int rows = 4096, cols = 4096, footprint_mb = 1024, max_m = CPU_GEMV_MAX_M, ct_group = 128;
    const char *kernel = NULL, *compute = "f32", *type_list = "f32,f16,bf16", *qkernel = NULL,
               *ctkernel = NULL, *devices = NULL, *pack = "auto";
    bool json = false;
    char kernel_help[1024], qkernel_help[512];
    snprintf(kernel_help, sizeof kernel_help,
             "run one kernel: %s (default: each class of weights and rows takes the fastest, "
             "measured at first use; SHARDSWAP_AMX=off leaves the AMX kernels out)",
             cpu_gemv_kernel_names());
    snprintf(qkernel_help, sizeof qkernel_help,
             "run one quantized kernel: %s (default: measured per type and rows)",
             cpu_qlinear_kernel_names());
    struct flag flags[] = {
        FLAG_RANGE("rows", FLAG_INT, &rows, "N", "weight rows, outputs (default 4096)", 16, 1 << 20,
                   "16..1048576"),
        FLAG_RANGE("cols", FLAG_INT, &cols, "K", "weight columns, inputs (default 4096)", 16,
                   1 << 20, "16..1048576"),
        FLAG("kernel", FLAG_STR, &kernel, "NAME", kernel_help),
        FLAG("compute", FLAG_STR, &compute, "f32|bf16",
             "compute mode (default f32; bf16 quantizes x for the block types)"),
        FLAG("types", FLAG_STR, &type_list, "LIST",
             "weight types, comma-separated: f32, f16, bf16, q8_0, q4_0, q5_0, q5_1, q4_k, q5_k, "
             "q6_k, ct_i8, ct_i4, ct_f8 (default f32,f16,bf16)"),
        FLAG("qkernel", FLAG_STR, &qkernel, "NAME", qkernel_help),
        FLAG("pack", FLAG_STR, &pack, "auto|on|off",
             "lay out the weights of a type with a packed layout (Q4_K: 16 rows interleaved) as "
             "a model's blob on this CPU holds them (auto, default: where the calibration found "
             "the packed kernel faster), always (on) or never (off)"),
        FLAG("ctkernel", FLAG_STR, &ctkernel, "NAME",
             "run one compressed-tensors kernel: avx512bf16, avx512bf16-lut, avx512, avx2, deq or "
             "scalar (default: measured per type, mode and rows)"),
        FLAG_RANGE("ct-group", FLAG_INT, &ct_group, "N",
                   "elements of a compressed-tensors weight row sharing a scale (and zero point), "
                   "a multiple of 32 (default 128)",
                   32, 1 << 20, "32..1048576"),
        FLAG_RANGE("footprint-mb", FLAG_INT, &footprint_mb, "MB",
                   "weights cycled through per dtype, above the last-level cache (default 1024)", 1,
                   1 << 20, "1..1048576"),
        FLAG_RANGE("max-m", FLAG_INT, &max_m, "M",
                   "measure input row counts up to M of 1, 2, 4, 8, 16 (decode) and 64, 128, "
                   "256, 512 (prefill: the matrix product) (default 16)",
                   1, BENCH_GEMV_MAX_M, "1..512"),
        FLAG("devices", FLAG_STR, &devices, "cpu:0|cuda:G",
             "where to measure: cpu:0 (default; 1 and 2 threads against a read of memory) or "
             "cuda:G, GPU G (kern_linear with 1..8 rows against a device copy; needs a CUDA "
             "build)"),
        FLAG("json", FLAG_BOOL, &json, NULL, "print one JSON object instead of a table"),
    };
    int rc = args_parse("bench gemv",
                        "Measures the CPU backend's fused GEMV (y = x @ w^T for 1..16 input "
                        "rows) per weight dtype on 1 and 2 threads: ms per call, weight GB/s, "
                        "the ratio to a plain read of memory in the same run, and the cost of "
                        "m rows against one; with --devices cuda:G the GPU's (1..8 rows, "
                        "against a device-to-device copy).",
                        argc, argv, flags, sizeof(flags) / sizeof(flags[0]));
    if (rc)
        return rc;
    struct bench_gemv b = {.rows = rows, .cols = cols, .min_s = 0.05};
    if (kern_compute_parse(compute, &b.cm) < 0)
        return args_range_fail("bench gemv", "compute", compute, "f32 or bf16");
    if (kernel && cpu_gemv_force(kernel) < 0)
        return args_usage_fail("bench gemv");
    if (qkernel && cpu_qlinear_force(qkernel) < 0)
        return args_usage_fail("bench gemv");
    if (ctkernel && cpu_ctlinear_force(ctkernel) < 0)
        return args_usage_fail("bench gemv");
    if (strcmp(pack, "auto") && strcmp(pack, "on") && strcmp(pack, "off"))
        return args_range_fail("bench gemv", "pack", pack, "auto, on or off");
    if (ct_group % QUANT_CT_QK) {
        char v[16];
        snprintf(v, sizeof(v), "%d", ct_group);
        return args_range_fail("bench gemv", "ct-group", v, "a multiple of 32");
    }
    enum dtype dtypes[BENCH_GEMV_MAX_TYPES];
    int n_types = 0;
    bool any_block = false, any_ct = false;
    if (bench_gemv_types(type_list, dtypes, &n_types) < 0)
        return args_usage_fail("bench gemv");
    for (int d = 0; d < n_types; d++) {
        any_ct |= quant_ct_is(dtypes[d]);
        any_block |= dtype_is_block(dtypes[d]) && !quant_ct_is(dtypes[d]);
        char what[64];
        snprintf(what, sizeof(what), "--cols %d", cols);
        if (dtype_check_cols(dtypes[d], 0, (size_t)cols, what) < 0)
            return args_usage_fail("bench gemv");
    }
    struct cli_device_flags dev;
    if (cli_device_flags_parse(NULL, devices, &dev) < 0)
        return args_usage_fail("bench gemv");
    if (dev.gpu >= 0) {
        const struct bench_gemv_opts o = {.gpu = dev.gpu,
                                          .rows = rows,
                                          .cols = cols,
                                          .footprint_mb = footprint_mb,
                                          .max_m = max_m,
                                          .dtypes = dtypes,
                                          .n_types = n_types,
                                          .cm = b.cm,
                                          .min_s = b.min_s,
                                          .json = json};
        return bench_gemv_gpu(&o) < 0 ? cli_fail("bench gemv") : 0;
    }
    static const int ms[] = {1, 2, 4, 8, 16, 64, 128, 256, 512};
    int max_threads = cpus_usable() < 2 ? cpus_usable() : 2;
    size_t nx = (size_t)BENCH_GEMV_MAX_M * cols;
    float *x = malloc(nx * sizeof(float));
    float *y = malloc((size_t)BENCH_GEMV_MAX_M * rows * sizeof(float));
    char *wbuf = NULL;
    size_t wbytes = 0;
    json_t *results = json ? json_array() : NULL;
    if (!x || !y) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto out;
    }
    cpu_set_threads(max_threads);
    for (size_t i = 0; i < nx; i++)
        x[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    if (!json && any_block)
        printf("quantized %s\n", cpu_qlinear_kernels());
    if (!json && any_ct)
        printf("compressed-tensors %s\n", cpu_ctlinear_kernels());
    /* the read limit and how each way of reading reaches it, on each
     * thread count (cli/read_limit.h); every row below is set against a
     * sample taken right before its dtype's rows, and the JSON and the
     * last line give every sample, so the drift between them shows */
    struct read_limit lim[2];
    for (int t = 1; t <= max_threads; t++) {
        read_limit_init(&lim[t - 1], t, READ_LIMIT_BYTES_PER_THREAD, 3);
        read_limit_sample(&lim[t - 1]);
        if (!json)
            read_limit_print(&lim[t - 1], true, "");
    }
    if (!json)
        printf("gemv %s, %d x %d weights, compute %s, %d MB cycled per dtype\n"
               "%-8s %7s %3s %9s %9s %9s %8s %8s\n",
               cpu_gemv_kernels(), rows, cols, compute, footprint_mb, "dtype", "threads", "m",
               "ms/call", "GB/s", "read GB/s", "/read", "/m=1");
    for (int d = 0; d < n_types && rc == 0; d++) {
        size_t mbytes = (size_t)rows * dtype_row_bytes(dtypes[d], (size_t)cols);
        b.copies = (int)(((size_t)footprint_mb << 20) / mbytes);
        if (b.copies < 1)
            b.copies = 1;
        bench_gemv_unmap(wbuf, wbytes);
        wbytes = mbytes * b.copies;
        if (!(wbuf = bench_gemv_map(wbytes))) {
            rc = err_set(ERR_NOMEM, "out of memory for %d copies of %zu bytes", b.copies, mbytes);
            break;
        }
        /* small values of every dtype: 0x3c00-ish halves and a few floats;
         * random blocks with finite scales */
        if (quant_ct_is(dtypes[d])) {
            const size_t nb = wbytes / quant_ct_block_bytes(dtypes[d]);
            cpu_ctlinear_random_blocks(dtypes[d], wbuf, nb, 1);
            cpu_ctlinear_share_scales(dtypes[d], wbuf, nb, (size_t)ct_group / QUANT_CT_QK);
        } else if (dtype_is_block(dtypes[d]))
            cpu_qlinear_random_blocks(
                dtypes[d], wbuf,
                wbytes / dtype_row_bytes(dtypes[d], (size_t)dtype_block(dtypes[d])), 1);
        else
            for (size_t i = 0; i < mbytes * b.copies; i++)
                wbuf[i] =
                    (char)(dtypes[d] == DTYPE_F32 ? (i % 4 == 3 ? 0x3c : i) : (i % 2 ? 0x3c : i));
        struct weight_view w = {
            .dtype = dtypes[d], .data = wbuf, .rows = rows, .cols = cols, .ld = (size_t)cols};
        /* each copy packed as a CPU device's blob would hold it */
        if (qpack_takes(dtypes[d]) && rows >= QPACK_ROWS &&
            (!strcmp(pack, "on") || (!strcmp(pack, "auto") && cpu_qlinear_packs(dtypes[d])))) {
            void *tmp = malloc(QPACK_ROWS * dtype_row_bytes(dtypes[d], (size_t)cols));
            if (!tmp) {
                rc = err_set(ERR_NOMEM, "out of memory");
                break;
            }
            for (int c = 0; c < b.copies; c++)
                qpack_matrix(dtypes[d], wbuf + (size_t)c * mbytes, rows, cols, tmp);
            free(tmp);
            w.pack = WEIGHT_PACK_X16;
        }
        char name[32];
        snprintf(name, sizeof name, "%s%s", dtype_name(dtypes[d]),
                 w.pack == WEIGHT_PACK_X16 ? " x16" : "");
        for (int t = 1; t <= max_threads && rc == 0; t++) {
            /* the pool keeps the threads it started with: one thread is
             * this one computing alone */
            cpu_kernels_single_thread(t == 1);
            double read = read_limit_sample(&lim[t - 1]), one = 0;
            for (size_t im = 0; im < sizeof(ms) / sizeof(ms[0]) && ms[im] <= max_m && rc == 0;
                 im++) {
                double s = bench_gemv_time(&b, w, mbytes, y, x, ms[im], &rc);
                if (rc < 0)
                    break;
                if (ms[im] == 1)
                    one = s;
                double gbs = mbytes / s / 1e9;
                if (json)
                    json_array_append_new(results,
                                          json_pack("{s:s, s:b, s:i, s:i, s:o, s:o, s:o, s:o, s:o}",
                                                    "dtype", dtype_name(dtypes[d]), "packed",
                                                    w.pack == WEIGHT_PACK_X16, "threads", t, "m",
                                                    ms[im], "ms_per_call", jsonout_real(s * 1e3, 4),
                                                    "weight_gb_s", jsonout_real(gbs, 3),
                                                    "read_gb_s", jsonout_real(read / 1e9, 3),
                                                    "vs_read", jsonout_real(gbs * 1e9 / read, 3),
                                                    "vs_m1", jsonout_real(s / one, 3)));
                else
                    printf("%-8s %7d %3d %9.3f %9.2f %9.2f %8.2f %8.2f\n", name, t, ms[im], s * 1e3,
                           gbs, read / 1e9, gbs * 1e9 / read, s / one);
            }
        }
    }
    if (rc == 0) {
        for (int t = 1; t <= max_threads; t++)
            read_limit_sample(&lim[t - 1]); /* after: the drift over the run */
        if (!json)
            for (int t = 1; t <= max_threads; t++)
                read_limit_print(&lim[t - 1], false, "");
    }
    if (rc == 0 && json) {
        json_t *reads = json_array();
        for (int t = 1; t <= max_threads; t++)
            json_array_append_new(reads, read_limit_json(&lim[t - 1], true));
        rc = jsonout_print(json_pack(
            "{s:s, s:s, s:s, s:i, s:i, s:s, s:o, s:o}", "gemv_kernels", cpu_gemv_kernels(),
            "quantized_kernels", any_block ? cpu_qlinear_kernels() : "", "ct_kernels",
            any_ct ? cpu_ctlinear_kernels() : "", "rows", rows, "cols", cols, "compute", compute,
            "read_limits", reads, "results", results));
    } else
        json_decref(results);
out:
    bench_gemv_unmap(wbuf, wbytes);
    free(x);
    free(y);
    return rc < 0 ? cli_fail("bench gemv") : 0;
}
