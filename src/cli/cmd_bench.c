/* shardswap bench forward: prefill and decode throughput of one checkpoint,
 * with decode's weight streaming rate set against this machine's memcpy
 * bandwidth measured in the same run. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/cpu.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/device_model.h"
#include "core/blas_core.h"
#include "core/cpus.h"
#include "core/error.h"
#include "core/jsonout.h"
#include "core/membw.h"
#include "core/timing.h"
#include "model/model.h"

struct bench_result {
    double prefill_s, decode_s;
};

/* One prefill of (batch, prompt_len) then gen greedy decode steps, on the
 * model's device (model_exec_open). Each step returns its logits to the host
 * (kern_to_host, a sync point), so a GPU's queued work is inside the
 * times. */
static int bench_once(struct model *m, int batch, int prompt_len, int gen,
                      struct bench_result *r)
{
    const int V = m->info->vocab;
    struct model_exec *ex = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;
    /* the context checks the shape against the model before anything is
     * sized by it */
    int rc = model_exec_open(m, &(struct model_exec_shape){.batch = batch, .max_len = prompt_len + gen},
                           &ex);
    if (rc < 0)
        goto out;
    ids = malloc((size_t)batch * prompt_len * sizeof(int32_t));
    logits = malloc((size_t)batch * V * sizeof(float));
    if (!ids || !logits) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto out;
    }
    uint64_t x = 12345;
    for (int i = 0; i < batch * prompt_len; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = 4 + (int32_t)((x >> 33) % (uint64_t)(V - 4));
    }
    double t0 = time_now();
    if ((rc = model_forward(m, ex, ids, NULL, prompt_len, false, logits)) < 0)
        goto out;
    r->prefill_s = time_now() - t0;
    t0 = time_now();
    for (int s = 0; s < gen; s++) {
        for (int b = 0; b < batch; b++) {
            const float *l = logits + (size_t)b * V;
            int best = 0;
            for (int v = 1; v < V; v++)
                if (l[v] > l[best])
                    best = v;
            ids[b] = best;
        }
        if ((rc = model_forward(m, ex, ids, NULL, 1, false, logits)) < 0)
            goto out;
    }
    r->decode_s = time_now() - t0;
out:
    model_exec_free(ex);
    free(ids);
    free(logits);
    return rc;
}

/* The machine's matmul ceilings beside the model's prefill: cpu_matmul on
 * 128 x 2048 by 2048 x 2048 in both modes, on the bench's threads. */
struct bench_ceilings {
    struct cpu_matmul_ceiling f32, bf16;
    char impl[160];
};

static int bench_ceilings(int threads, struct bench_ceilings *c)
{
    int rc = cpu_matmul_ceiling(128, 2048, 2048, KERN_COMPUTE_F32, threads, &c->f32);
    if (rc == 0)
        rc = cpu_matmul_ceiling(128, 2048, 2048, KERN_COMPUTE_BF16, threads, &c->bf16);
    snprintf(c->impl, sizeof(c->impl), "f32 %s, bf16 %s", c->f32.impl[0] ? c->f32.impl : "openblas",
             c->bf16.impl[0] ? c->bf16.impl : "openblas");
    return rc;
}

/* One row of the table: "n/a" for what was not measured (NaN). */
static void metric_row(const char *name, double v, int decimals)
{
    if (isnan(v))
        printf("%-28s %12s\n", name, "n/a");
    else
        printf("%-28s %12.*f\n", name, decimals, v);
}

static int bench_forward(int argc, char **argv)
{
    const char *dir = NULL;
    const char *compute = NULL, *devices = NULL;
    int batch = 1, prompt_len = 128, gen = 32, threads = 0, repeat = 3;
    bool json = false;
    struct flag flags[] = {
        MODEL_FLAG(&dir),
        FLAG_RANGE("batch", FLAG_INT, &batch, "B", "sequences per batch (default 1)", 1, 4096,
                   "1..4096"),
        FLAG_RANGE("prompt-len", FLAG_INT, &prompt_len, "L",
                   "prompt tokens per sequence (default 128)", 1, 1 << 20, "1..1048576"),
        FLAG_RANGE("gen", FLAG_INT, &gen, "N", "decode steps (default 32)", 1, 1 << 20,
                   "1..1048576"),
        FLAG("threads", FLAG_INT, &threads, "T",
             "threads, at most the CPUs this process may use (default 0: all of them)"),
        FLAG_RANGE("repeat", FLAG_INT, &repeat, "R", "best of R runs (default 3)", 1, 1000,
                   "1..1000"),
        COMPUTE_FLAG(&compute),
        DEVICE_FLAG(&devices),
        FLAG("json", FLAG_BOOL, &json, NULL, "print one JSON object instead of a table"),
    };
    int rc = args_parse("bench forward",
                        "Measures prefill and decode tokens/s of one checkpoint (random prompt "
                        "ids, no padding, greedy decode through the KV cache) on one device, and "
                        "on a CPU decode's weight bytes streamed per second against memcpy "
                        "bandwidth measured in the same run with the same thread count, and the "
                        "matmul ceilings (on a GPU those columns are n/a, null in --json).",
                        argc, argv, flags, sizeof(flags) / sizeof(flags[0]));
    if (rc)
        return rc;
    /* the bandwidth probe takes 256 MiB a thread: threads are bounded by
     * the machine, not by what was typed */
    int cpus = cpus_usable();
    if (threads < 0 || threads > cpus) {
        char v[16], range[96];
        snprintf(v, sizeof(v), "%d", threads);
        snprintf(range, sizeof(range), "0..%d, the CPUs this process may use; 0 = all", cpus);
        return args_range_fail("bench forward", "threads", v, range);
    }
    enum kern_compute cm;
    bool cm_set;
    int gpu;
    if (cli_compute(compute, &cm_set, &cm) < 0 || cli_device_parse(devices, &gpu) < 0)
        return args_usage_fail("bench forward");
    const bool on_cpu = gpu < 0;
    cpu_set_threads(threads);
    threads = cpu_threads();
    struct cli_model cmod = {0};
    struct model_exec_shape shape = {.batch = batch, .max_len = prompt_len + gen};
    if ((rc = cli_model_open(gpu, dir, &shape, &cmod)) < 0)
        return cli_fail("bench forward");
    struct model *m = cmod.m;
    if (cm_set)
        m->compute = cm;
    if (prompt_len + gen > m->info->max_pos) {
        err_set(ERR_INVALID, "--prompt-len + --gen = %d exceeds the model's %d positions",
                prompt_len + gen, m->info->max_pos);
        cli_model_close(&cmod);
        return cli_fail("bench forward");
    }
    char device[32];
    if (on_cpu)
        snprintf(device, sizeof(device), "cpu:0");
    else
        snprintf(device, sizeof(device), "%s", device_name(cmod.dev));
    /* warm-up: page the mapped weights in, let BLAS spin up its threads */
    struct bench_result best = {1e30, 1e30}, r;
    if ((rc = bench_once(m, batch, prompt_len < 8 ? prompt_len : 8, 2, &r)) < 0)
        goto out;
    for (int i = 0; i < repeat; i++) {
        if ((rc = bench_once(m, batch, prompt_len, gen, &r)) < 0)
            goto out;
        if (r.prefill_s < best.prefill_s)
            best.prefill_s = r.prefill_s;
        if (r.decode_s < best.decode_s)
            best.decode_s = r.decode_s;
    }
    /* the host's memory and matmul figures mean something next to a CPU
     * device only: NaN (n/a, null in JSON) on a GPU */
    /* STREAM's count: a copy reads and writes each byte; decode only reads */
    double bw = on_cpu ? 2 * membw_memcpy(threads, (size_t)256 << 20, 5) : NAN;
    /* decode only reads its weights: read bandwidth is its ceiling */
    double rbw = on_cpu ? membw_read(threads, (size_t)256 << 20, 5) : NAN;
    double wbytes = (double)model_weight_bytes(m);
    double prefill_tps = batch * prompt_len / best.prefill_s;
    double decode_tps = batch * gen / best.decode_s;
    double stream = wbytes * gen / best.decode_s;
    /* every token through the layers, each sequence's last through the head */
    double prefill_gflops =
        2 * (m->macs_token * prompt_len + m->macs_row) * batch / best.prefill_s / 1e9;
    struct bench_ceilings ceil = {.f32.gflops = NAN, .bf16.gflops = NAN, .impl = "n/a"};
    if (on_cpu && (rc = bench_ceilings(threads, &ceil)) < 0)
        goto out;
    const char *isa = on_cpu ? cpu_gemv_isa() : NULL, *blas = on_cpu ? blas_core_name() : NULL;
    if (json) {
        json_t *j = json_pack(
            "{s:s, s:o, s:o, s:o, s:o, s:i, s:i, s:i, s:i, s:s, s:I, s:o, s:o, s:o, s:o, s:o, s:o, "
            "s:o, s:o, s:o, s:o, s:s, s:o, s:o, s:o, s:o}",
            "impl", "shardswap", "device", jsonout_string(device), "model", jsonout_string(dir),
            "blas_core", jsonout_string(blas), "gemv_isa", jsonout_string(isa), "threads",
            threads, "batch", batch, "prompt_len", prompt_len, "gen", gen, "weight_dtype",
            dtype_name(m->weight_dtype), "weight_bytes", (json_int_t)wbytes, "prefill_s",
            jsonout_real(best.prefill_s, 6), "prefill_tok_s", jsonout_real(prefill_tps, 2),
            "decode_s", jsonout_real(best.decode_s, 6), "decode_tok_s",
            jsonout_real(decode_tps, 2), "decode_ms_per_step",
            jsonout_real(1e3 * best.decode_s / gen, 3), "decode_weight_gb_s",
            jsonout_real(stream / 1e9, 3), "memcpy_gb_s", jsonout_real(bw / 1e9, 3),
            "decode_vs_memcpy", jsonout_real(stream / bw, 3), "read_gb_s",
            jsonout_real(rbw / 1e9, 3), "decode_vs_read",
            jsonout_real(rbw > 0 ? stream / rbw : on_cpu ? 0 : NAN, 3), "compute",
            kern_compute_name(m->compute), "prefill_gflops", jsonout_real(prefill_gflops, 2),
            "matmul_f32_gflops", jsonout_real(ceil.f32.gflops, 2), "matmul_bf16_gflops",
            jsonout_real(ceil.bf16.gflops, 2), "matmul_impl",
            jsonout_string(on_cpu ? ceil.impl : NULL));
        rc = jsonout_print(j);
    } else {
        printf("model %s on %s: %.1f MB of weights (%s), compute %s, %d threads, batch %d, "
               "prompt %d, gen %d, best of %d, openblas core %s, gemv isa %s, matmul %s\n",
               dir, device, wbytes / 1e6, dtype_name(m->weight_dtype),
               kern_compute_name(m->compute), threads, batch, prompt_len, gen, repeat,
               blas ? blas : "n/a", isa ? isa : "n/a", ceil.impl);
        printf("%-28s %12s\n", "metric", "value");
        metric_row("prefill tokens/s", prefill_tps, 1);
        metric_row("prefill GFLOP/s (linear)", prefill_gflops, 1);
        metric_row("matmul f32 GFLOP/s", ceil.f32.gflops, 1);
        metric_row("matmul bf16 GFLOP/s", ceil.bf16.gflops, 1);
        metric_row("decode tokens/s", decode_tps, 1);
        metric_row("decode ms/step", 1e3 * best.decode_s / gen, 2);
        metric_row("decode weight GB/s", stream / 1e9, 2);
        metric_row("memcpy GB/s (STREAM count)", bw / 1e9, 2);
        metric_row("decode / memcpy", stream / bw, 2);
        metric_row("read GB/s", rbw / 1e9, 2);
        metric_row("decode / read", rbw > 0 ? stream / rbw : on_cpu ? 0 : NAN, 2);
    }
out:
    cli_model_close(&cmod);
    return rc < 0 ? cli_fail("bench forward") : 0;
}

int cmd_bench(int argc, char **argv)
{
    if (argc >= 1 && strcmp(argv[0], "forward") == 0)
        return bench_forward(argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "swap") == 0)
        return bench_swap(argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "workload") == 0)
        return bench_workload(argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "serve") == 0)
        return bench_serve(argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "comm") == 0)
        return bench_comm(argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "gemv") == 0)
        return bench_gemv(argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "tokenize") == 0)
        return bench_tokenize(argc - 1, argv + 1);
    if (argc >= 1 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
        printf("usage: shardswap bench forward|swap|workload|serve|comm|gemv|tokenize [flags]   (see shardswap bench NAME "
               "--help)\n"
               "  forward   prefill and decode throughput of one checkpoint\n"
               "  swap      model-parallel swap-in/out and cold-request latency per TP x PP layout\n"
               "  workload  Computron's multi-model experiments through the engine, per policy\n"
               "  serve     the same workloads against a running server over HTTP\n"
               "  comm      all-reduce and pipeline channel latency against memcpy\n"
               "  gemv      the CPU's fused GEMV (decode's linear layers) against memory read speed\n"
               "  tokenize  one tokenizer's encode and decode speed (tools/bench_tokenizer.py: against HF)\n");
        return 0;
    }
    fprintf(stderr, "shardswap bench: expected a benchmark name: forward, swap, workload, serve, comm, gemv or tokenize (see "
                    "shardswap bench --help)\n");
    return EXIT_USAGE;
}
