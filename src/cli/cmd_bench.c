/* shardswap bench forward: prefill and decode throughput of one checkpoint,
 * with decode's weight streaming rate set against this machine's memcpy
 * bandwidth measured in the same run. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/pool.h"
#include "backend/profile.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/device_model.h"
#include "cli/read_limit.h"
#include "core/blas_core.h"
#include "core/cpus.h"
#include "core/error.h"
#include "core/jsonout.h"
#include "core/membw.h"
#include "core/timing.h"
#include "format/safetensors.h"
#include "model/generate.h"
#include "model/model.h"
#include "model/sampler.h"
#include "workload/stats.h"

struct bench_result {
    double prefill_s, decode_s;
    /* a model with experts: the (token, expert) pairs the prefill routed
     * (each real token to its top-k in each sparse layer), the (layer,
     * expert) pairs the decode steps read (per step, each expert of each
     * layer that some token of the step routed to: its matrices are read
     * once for all of them), and the layers whose router ran */
    uint64_t prefill_routed, decode_reads;
    int sparse_layers, experts;
    double pick_s; /* the decode steps' greedy picks over the logits (sampling) */
};

/* bench_once's step: the prefill's end timed, then greedy ids for every
 * sequence, gen steps through the model. */
struct greedy {
    int batch, vocab, gen;
    double prefill_end;
    struct device *profile_dev; /* profiled from the prefill's end to the last step, or NULL */
    /* a model with experts: the context's router counts as of the last
     * step (NULL: none), and bench_result's routing figures */
    const struct model_exec *ex;
    uint64_t *seen;
    int layers, experts;
    struct bench_result *r;
    struct sampler *samplers; /* each sequence's, with --temperature; NULL: greedy */
};

/* What the step that just ran routed: its counts less the last step's. */
static void greedy_routed(struct greedy *g, int step)
{
    int experts;
    const uint64_t *c = model_exec_routed(g->ex, &experts);
    for (int l = 0; l < g->layers; l++) {
        uint64_t row = 0;
        for (int x = 0; x < g->experts; x++) {
            const size_t i = (size_t)l * g->experts + x;
            const uint64_t d = c[i] - g->seen[i];
            g->seen[i] = c[i];
            row += d;
            if (step > 0 && d)
                g->r->decode_reads++;
        }
        if (step == 0) {
            g->r->prefill_routed += row;
            g->r->sparse_layers += row > 0;
        }
    }
    g->r->experts = g->experts;
}

static int greedy_step(void *ctx, int step, float *logits, int32_t *next)
{
    struct greedy *g = ctx;
    if (step == 0 && g->profile_dev) {
        int rc = kern_profile_start(g->profile_dev);
        if (rc < 0)
            return rc;
        pool_timing(true);
    }
    if (step == 0)
        g->prefill_end = time_now();
    if (g->seen)
        greedy_routed(g, step);
    if (step == g->gen)
        return 1;
    const double t0 = time_now();
    for (int b = 0; b < g->batch; b++) {
        float *row = logits + (size_t)b * g->vocab;
        bool finite;
        next[b] = g->samplers ? sampler_pick(&g->samplers[b], row, g->vocab)
                              : logits_argmax(row, g->vocab, &finite);
    }
    g->r->pick_s += time_now() - t0;
    return 0;
}

/* One prefill of (batch, prompt_len) then gen greedy decode steps, on the
 * model's device (model_exec_open), through model_generate_steps, with cm's
 * adapters over the sequences (lora) or on the base alone. Each step
 * returns its logits to the host (kern_to_host, a sync point), so a GPU's
 * queued work is inside the times. */
static int bench_once(const struct cli_model *cm, bool lora, int batch, int prompt_len, int gen,
                      const struct sampler_params *sp, struct bench_result *r,
                      struct device *profile_dev,
                      struct kern_profile *profile, struct pool_stats *pool)
{
    struct model *m = cm->m;
    const int V = model_info(m)->vocab;
    struct model_exec *ex = NULL;
    int32_t *ids = NULL, *next = NULL;
    float *logits = NULL;
    uint64_t *seen = NULL;
    struct sampler *samplers = NULL;
    int n_samplers = 0;
    *r = (struct bench_result){0};
    /* the context checks the shape against the model before anything is
     * sized by it */
    const struct model_exec_shape shape = {.batch = batch, .max_len = prompt_len + gen};
    int rc = lora ? cli_model_exec_open(cm, &shape, &ex) : model_exec_open(m, &shape, &ex);
    if (rc < 0)
        goto out;
    ids = malloc((size_t)batch * prompt_len * sizeof(int32_t));
    next = malloc((size_t)batch * sizeof(int32_t));
    logits = malloc((size_t)batch * V * sizeof(float));
    int experts = 0;
    model_exec_routed(ex, &experts);
    const int layers = model_info(m)->n_layers;
    if (experts)
        seen = calloc((size_t)layers * experts, sizeof(*seen));
    if (sp->temperature > 0)
        samplers = calloc((size_t)batch, sizeof(*samplers));
    if (!ids || !next || !logits || (experts && !seen) || (sp->temperature > 0 && !samplers)) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto out;
    }
    /* sequence b draws with seed b: the same tokens every run */
    for (; n_samplers < (samplers ? batch : 0); n_samplers++) {
        struct sampler_params p = *sp;
        p.seed = (uint64_t)n_samplers;
        if ((rc = sampler_init(&samplers[n_samplers], &p)) < 0)
            goto out;
    }
    uint64_t x = 12345;
    for (int i = 0; i < batch * prompt_len; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = 4 + (int32_t)((x >> 33) % (uint64_t)(V - 4));
    }
    struct greedy g = {.batch = batch,
                       .vocab = V,
                       .gen = gen,
                       .profile_dev = profile_dev,
                       .ex = ex,
                       .seen = seen,
                       .layers = layers,
                       .experts = experts,
                       .r = r,
                       .samplers = samplers};
    double t0 = time_now();
    rc = model_generate_steps(m, ex, ids, prompt_len, logits, next, greedy_step, &g);
    double t1 = time_now();
    if (profile_dev) {
        kern_profile_stop(profile_dev, profile);
        struct pool_stats ps;
        pool_stats_get(&ps);
        pool_timing(false);
        pool->jobs += ps.jobs;
        pool->wait_s += ps.wait_s;
        pool->wake_s += ps.wake_s;
    }
    if (rc < 0)
        goto out;
    r->prefill_s = g.prefill_end - t0;
    r->decode_s = t1 - g.prefill_end;
out:
    model_exec_free(ex);
    for (int b = 0; b < n_samplers; b++)
        sampler_free(&samplers[b]);
    free(samplers);
    free(seen);
    free(ids);
    free(next);
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

/* What bench forward measures, and on what. */
struct forward_run {
    const char *dir;
    int batch, prompt_len, gen, repeat;
    int step_batch;           /* --step-batch: 0, or a second batch timed beside batch */
    struct sampler_params sp; /* the decode's picks: temperature 0 is greedy */
    struct cli_device_flags dev;
    /* results: */
    char device[32];
    int threads;
    struct bench_result best;      /* the best of repeat runs, each phase on its own */
    /* adapters (dev.adapters): sequence b runs adapters[b mod n]; best is
     * then the batch with them, base the same batch on the base alone,
     * the two interleaved (a repetition of each, in turn) */
    struct bench_result base;
    /* --step-batch: its runs' best decode time, and its step time over
     * batch's per repetition (the two in one process, in turn): p50, min, max */
    double step_decode_s;
    struct latency_stats step_ratio;
    double wbytes;                 /* the weights' bytes every step reads (all but routed experts) */
    double macs_token, macs_row;   /* the model's linear MACs per token, per head row (the same) */
    /* the routed experts (0 without): all their bytes, and one (layer,
     * expert)'s bytes and MACs per token; the routing of the timed runs
     * (each alike: the same ids, greedy) */
    double expert_bytes, pair_bytes, pair_macs;
    uint64_t prefill_routed, decode_reads;
    enum dtype weight_dtype;       /* the type of most of the matrices' bytes */
    char weight_mix[160];          /* every type's share: "Q5_0 49%, Q4_K 38%, Q6_K 13%" */
    enum kern_compute compute;
    double bw, rbw;                /* memcpy (STREAM count), read bytes/s; NaN on a GPU */
    struct read_limit lim;         /* rbw's samples: before each timed run and after the last */
    /* each run's decode bytes/s over the better of the read samples just
     * before and just after it (CPU only): p50, min, max. Beside the best
     * run over the best sample, a figure the read rate's drift between
     * runs does not move */
    struct latency_stats paired;
    struct bench_ceilings ceil;
    const char *gemv, *matmul, *blas; /* CPU only, else NULL */
    bool profile;                     /* --profile: */
    struct kern_profile prof;         /* the timed runs' decode steps, kernel by kernel */
    double prof_decode_s;             /* and their decode time, all runs together */
    double prof_pick_s;               /* of which the greedy picks (sampling) */
    struct pool_stats pool;           /* the kernel pool's jobs meanwhile */
    int vocab;                        /* the head's rows */
    const char *qdot;                 /* CPU with quantized weights only, else NULL */
};

/* The checkpoint's matrices by type, most bytes first, into r (a GGUF's
 * quantization mixes types per tensor: the shard knows only the last it
 * planned). Keeps model_weight_dtype where the file cannot be read again. */
static void weight_mix(struct forward_run *r)
{
    struct st_checkpoint *ck = NULL;
    double bytes[DTYPE_COUNT] = {0}, total = 0;
    r->weight_mix[0] = 0;
    if (st_open(r->dir, &ck) < 0)
        return;
    for (size_t i = 0; i < st_count(ck); i++) {
        const struct st_tensor *t = st_get(ck, i);
        if (t->ndim == 2) {
            bytes[t->dtype] += (double)t->nbytes;
            total += (double)t->nbytes;
        }
    }
    st_close(ck);
    size_t used = 0;
    for (int n = 0; total > 0 && used < sizeof(r->weight_mix); n++) {
        int most = 0;
        for (int d = 1; d < DTYPE_COUNT; d++)
            if (bytes[d] > bytes[most])
                most = d;
        if (bytes[most] <= 0)
            break;
        if (n == 0)
            r->weight_dtype = (enum dtype)most;
        used += (size_t)snprintf(r->weight_mix + used, sizeof(r->weight_mix) - used, "%s%s %.0f%%",
                                 n ? ", " : "", dtype_name((enum dtype)most),
                                 100 * bytes[most] / total);
        bytes[most] = 0;
    }
}

/* One run of r's batch on the base alone, into r->base's best. */
static int base_once(const struct cli_model *cm, struct forward_run *r)
{
    struct bench_result b;
    int rc = bench_once(cm, false, r->batch, r->prompt_len, r->gen, &r->sp, &b, NULL, NULL, NULL);
    r->base.prefill_s = fmin(r->base.prefill_s, b.prefill_s);
    r->base.decode_s = fmin(r->base.decode_s, b.decode_s);
    return rc;
}

/* One run of the --step-batch batch: its decode time, the best kept */
static int step_once(const struct cli_model *cm, struct forward_run *r, double *decode_s)
{
    struct bench_result b;
    int rc =
        bench_once(cm, false, r->step_batch, r->prompt_len, r->gen, &r->sp, &b, NULL, NULL, NULL);
    r->step_decode_s = fmin(r->step_decode_s, b.decode_s);
    *decode_s = b.decode_s;
    return rc;
}

/* The weight bytes a decode step of r's runs read, on average: every
 * weight but the routed experts, and of those the experts its tokens
 * routed to, once each (counted in the run). */
static double forward_step_bytes(const struct forward_run *r)
{
    return r->wbytes + (double)r->decode_reads / r->gen * r->pair_bytes;
}

/* Opens the model on r->dev, times it (a warm-up, then the best of repeat)
 * and, on a CPU, the host's bandwidth and matmul ceilings beside it. */
static int forward_measure(struct forward_run *r)
{
    const bool on_cpu = r->dev.gpu < 0;
    struct cli_model cmod = {0};
    /* the device's budget holds the larger of the two batches' contexts */
    struct model_exec_shape shape = {.batch = r->batch > r->step_batch ? r->batch : r->step_batch,
                                     .max_len = r->prompt_len + r->gen};
    double *ratios = NULL; /* --step-batch's per repetition */
    int rc = cli_model_open(&r->dev, r->dir, &shape, &cmod);
    if (rc < 0)
        return rc;
    /* each run's decode seconds (then its decode / read, paired), and the
     * read samples around the runs */
    double *per_run = malloc((size_t)r->repeat * sizeof(double));
    double *reads = malloc(((size_t)r->repeat + 1) * sizeof(double));
    if (!per_run || !reads ||
        (r->step_batch && !(ratios = malloc((size_t)r->repeat * sizeof(double))))) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto out;
    }
    struct model *m = cmod.m;
    if (r->prompt_len + r->gen > model_info(m)->max_pos) {
        rc = err_set(ERR_INVALID, "--prompt-len + --gen = %d exceeds the model's %d positions",
                     r->prompt_len + r->gen, model_info(m)->max_pos);
        goto out;
    }
    snprintf(r->device, sizeof(r->device), "%s", on_cpu ? "cpu:0" : device_name(cmod.dev));
    /* warm-up: the calibrations, the pool's threads started */
    struct bench_result one;
    const bool lora = cmod.n_adapters > 0;
    r->best = (struct bench_result){.prefill_s = 1e30, .decode_s = 1e30};
    r->base = r->best;
    r->step_decode_s = 1e30;
    for (int pass = 0; pass <= lora; pass++)
        if ((rc = bench_once(&cmod, pass == 0 && lora, r->batch,
                             r->prompt_len < 8 ? r->prompt_len : 8, 2, &r->sp, &one, NULL, NULL,
                             NULL)) < 0)
            goto out;
    /* and the step batch's calibrations (a bucket of rows of its own) */
    if (r->step_batch &&
        (rc = bench_once(&cmod, false, r->step_batch, r->prompt_len < 8 ? r->prompt_len : 8, 2,
                         &r->sp, &one, NULL, NULL, NULL)) < 0)
        goto out;
    double pairs = 0; /* (layer, expert) pairs: sparse layers x experts */
    read_limit_init(&r->lim, r->threads, READ_LIMIT_BYTES_PER_THREAD, 1);
    for (int i = 0; i < r->repeat; i++) {
        /* the read limit between the runs it judges, so that the machine's
         * drift meets both */
        if (on_cpu)
            reads[i] = read_limit_sample(&r->lim);
        /* with adapters, the base's run beside each, before it and after
         * it in turn, so that neither takes the machine's better moments */
        const bool base_first = lora && (i & 1) == 0;
        if (base_first && (rc = base_once(&cmod, r)) < 0)
            goto out;
        /* the step batch likewise before the batch's run and after it in turn */
        const bool step_first = r->step_batch && (i & 1) == 1;
        double step_s = 0;
        if (step_first && (rc = step_once(&cmod, r, &step_s)) < 0)
            goto out;
        if ((rc = bench_once(&cmod, lora, r->batch, r->prompt_len, r->gen, &r->sp, &one,
                             r->profile ? cmod.dev : NULL, &r->prof, &r->pool)) < 0)
            goto out;
        r->prof_pick_s += one.pick_s;
        if (lora && !base_first && (rc = base_once(&cmod, r)) < 0)
            goto out;
        if (r->step_batch && !step_first && (rc = step_once(&cmod, r, &step_s)) < 0)
            goto out;
        if (r->step_batch)
            ratios[i] = step_s / one.decode_s;
        per_run[i] = one.decode_s;
        r->prof_decode_s += one.decode_s;
        r->prefill_routed = one.prefill_routed;
        r->decode_reads = one.decode_reads;
        pairs = (double)one.sparse_layers * one.experts;
        if (one.prefill_s < r->best.prefill_s)
            r->best.prefill_s = one.prefill_s;
        if (one.decode_s < r->best.decode_s)
            r->best.decode_s = one.decode_s;
    }
    r->wbytes = (double)model_weight_bytes(m);
    r->vocab = model_info(m)->vocab;
    model_macs(m, &r->macs_token, &r->macs_row);
    size_t expert_bytes;
    double expert_macs;
    model_expert_cost(m, &expert_bytes, &expert_macs);
    r->expert_bytes = (double)expert_bytes;
    r->pair_bytes = pairs > 0 ? r->expert_bytes / pairs : 0;
    r->pair_macs = pairs > 0 ? expert_macs / pairs : 0;
    r->weight_dtype = model_weight_dtype(m);
    const bool quantized = dtype_is_block(r->weight_dtype);
    weight_mix(r);
    r->compute = model_compute(m);
    /* the host's memory and matmul figures mean something next to a CPU
     * device only: NaN (n/a, null in JSON) on a GPU */
    /* STREAM's count: a copy reads and writes each byte; decode only reads */
    r->bw = on_cpu ? 2 * membw_memcpy(r->threads, (size_t)256 << 20, 5) : NAN;
    /* decode only reads its weights: read bandwidth is its ceiling, the
     * best sample of those around the runs */
    if (on_cpu)
        reads[r->repeat] = read_limit_sample(&r->lim);
    r->rbw = on_cpu ? read_limit_bps(&r->lim) : NAN;
    r->ceil = (struct bench_ceilings){.f32.gflops = NAN, .bf16.gflops = NAN, .impl = "n/a"};
    if (on_cpu && (rc = bench_ceilings(r->threads, &r->ceil)) < 0)
        goto out;
    r->gemv = on_cpu ? cpu_gemv_kernels() : NULL;
    r->qdot = on_cpu && quantized ? cpu_qlinear_kernels() : NULL;
    r->matmul = on_cpu ? cpu_matmul_paths() : NULL;
    r->blas = on_cpu ? blas_core_name() : NULL;
    if (on_cpu) {
        const double step_bytes = forward_step_bytes(r);
        for (int i = 0; i < r->repeat; i++) {
            const double around = reads[i] > reads[i + 1] ? reads[i] : reads[i + 1];
            per_run[i] = around > 0 ? step_bytes * r->gen / per_run[i] / around : 0;
        }
        if ((rc = stats_latency_compute(per_run, (size_t)r->repeat, &r->paired)) < 0)
            goto out;
    }
    if (r->step_batch)
        rc = stats_latency_compute(ratios, (size_t)r->repeat, &r->step_ratio);
out:
    free(ratios);
    free(per_run);
    free(reads);
    cli_model_close(&cmod);
    return rc;
}

/* The figures both outputs show, from r's times. */
struct forward_figures {
    double prefill_tps, decode_tps, stream, prefill_gflops, decode_vs_read;
    double step_bytes;   /* weight bytes a decode step read, on average */
    double expert_reads; /* of which (layer, expert) pairs read, on average */
};

static struct forward_figures forward_figures(const struct forward_run *r)
{
    struct forward_figures f;
    f.prefill_tps = r->batch * r->prompt_len / r->best.prefill_s;
    f.decode_tps = r->batch * r->gen / r->best.decode_s;
    f.expert_reads = (double)r->decode_reads / r->gen;
    f.step_bytes = forward_step_bytes(r);
    f.stream = f.step_bytes * r->gen / r->best.decode_s;
    /* every token through the layers (and its top-k experts), each
     * sequence's last through the head */
    f.prefill_gflops = 2 *
                       ((r->macs_token * r->prompt_len + r->macs_row) * r->batch +
                        (double)r->prefill_routed * r->pair_macs) /
                       r->best.prefill_s / 1e9;
    f.decode_vs_read = r->rbw > 0 ? f.stream / r->rbw : r->dev.gpu < 0 ? 0 : NAN;
    return f;
}

/* The named parts of a decode step that --profile sums it into, besides
 * the layers' GEMVs and the head (split out of the linear calls by shape):
 * each kernel slot's part. */
enum step_part {
    PART_GEMV,  /* the layers' linear calls */
    PART_GROUP, /* their grouped calls (q/k/v, gate/up, a mixture's experts) */
    PART_HEAD,  /* the linear calls with the vocabulary's rows */
    PART_ATTENTION,
    PART_KV,
    PART_NORMS,
    PART_ROPE,
    PART_ACT,
    PART_ADD,
    PART_COPIES,
    PART_LORA,
    PART_TRANSFER,
    PART_SAMPLING,
    PART_OWN,
    PART_COUNT
};

static const char *const PART_NAMES[PART_COUNT] = {
    [PART_GEMV] = "GEMVs (layers)",
    [PART_HEAD] = "the head",
    [PART_GROUP] = "grouped GEMVs (layers)",
    [PART_ATTENTION] = "attention over the cache",
    [PART_KV] = "kv append",
    [PART_NORMS] = "norms",
    [PART_ROPE] = "rope",
    [PART_ACT] = "activations",
    [PART_ADD] = "adds and scales",
    [PART_COPIES] = "embed, gathers, copies",
    [PART_LORA] = "adapters (lora)",
    [PART_TRANSFER] = "to host, to device",
    [PART_SAMPLING] = "sampling (the picks)",
    [PART_OWN] = "the step's own code",
};

static enum step_part slot_part(int slot)
{
    switch (slot) {
    case KERN_OP_LINEAR:
    case KERN_OP_LINEAR_BIAS:
        return PART_GEMV;
    case KERN_PROFILE_LINEAR_GROUP:
        return PART_GROUP;
    case KERN_OP_ATTENTION:
    case KERN_OP_ATTENTION_WINDOW:
    case KERN_OP_ATTENTION_SOFTCAP:
        return PART_ATTENTION;
    case KERN_OP_KV_APPEND:
        return PART_KV;
    case KERN_OP_LAYERNORM:
    case KERN_OP_RMSNORM:
        return PART_NORMS;
    case KERN_OP_ROPE:
        return PART_ROPE;
    case KERN_OP_RELU:
    case KERN_OP_GELU:
    case KERN_OP_GELU_TANH:
    case KERN_OP_SILU:
    case KERN_OP_REGLU:
    case KERN_OP_GEGLU:
    case KERN_OP_GEGLU_TANH:
    case KERN_OP_SWIGLU:
        return PART_ACT;
    case KERN_OP_LORA:
        return PART_LORA;
    case KERN_PROFILE_TO_HOST:
    case KERN_PROFILE_TO_DEVICE:
        return PART_TRANSFER;
    case KERN_OP_ADD:
    case KERN_OP_SCALE:
    case KERN_OP_SOFTCAP:
    case KERN_OP_COMBINE_ROWS:
        return PART_ADD;
    default:
        return PART_COPIES;
    }
}

/* --profile: the decode steps of the timed runs per step, as named parts
 * that add up to the step: the layers' GEMVs, the head (the linear calls
 * with the vocabulary's rows), every other kernel by kind, the greedy pick
 * over the logits (sampling) and the step's own code (what no kernel
 * accounts for: its bookkeeping, the model's host-side work); then the
 * linear calls by weight shape, and what the kernel pool's jobs cost the
 * calling thread (inside the kernels' times). The remainder is the step
 * less the layers' GEMVs. JSON, or a table on stdout when json is false. */
static json_t *profile_report(const struct forward_run *r, bool json)
{
    const struct kern_profile *p = &r->prof;
    const double steps = (double)r->gen * r->repeat, step_s = r->prof_decode_s / steps;
    double in_kernels = 0, linear_s = p->seconds[KERN_OP_LINEAR] + p->seconds[KERN_OP_LINEAR_BIAS] +
                                      p->seconds[KERN_PROFILE_LINEAR_GROUP];
    double part_s[PART_COUNT] = {0}, part_calls[PART_COUNT] = {0};
    json_t *kernels = json ? json_array() : NULL;
    for (int i = 0; i < KERN_PROFILE_SLOTS; i++) {
        if (!p->calls[i])
            continue;
        in_kernels += p->seconds[i];
        part_s[slot_part(i)] += p->seconds[i];
        part_calls[slot_part(i)] += (double)p->calls[i];
        if (json)
            json_array_append_new(
                kernels, json_pack("{s:s, s:o, s:o, s:o}", "kernel", kern_profile_name(i),
                                   "calls_per_step", jsonout_real(p->calls[i] / steps, 2),
                                   "ms_per_step", jsonout_real(1e3 * p->seconds[i] / steps, 4),
                                   "share", jsonout_real(p->seconds[i] / r->prof_decode_s, 4)));
    }
    for (int i = 0; i < p->n_shapes; i++)
        if (p->shape[i].rows == r->vocab && r->vocab > 0) {
            part_s[PART_GEMV] -= p->shape[i].seconds;
            part_calls[PART_GEMV] -= (double)p->shape[i].calls;
            part_s[PART_HEAD] += p->shape[i].seconds;
            part_calls[PART_HEAD] += (double)p->shape[i].calls;
        }
    const double other = r->prof_decode_s - in_kernels;
    part_s[PART_SAMPLING] = r->prof_pick_s;
    part_calls[PART_SAMPLING] = steps;
    part_s[PART_OWN] = other - r->prof_pick_s;
    const double remainder = r->prof_decode_s - part_s[PART_GEMV] - part_s[PART_GROUP];
    double lin_gbs = linear_s > 0 ? p->linear_bytes / linear_s / 1e9 : 0;
    const double grp_s = p->seconds[KERN_PROFILE_LINEAR_GROUP];
    const double grp_gbs = grp_s > 0 ? p->group_bytes / grp_s / 1e9 : 0;
    const double jobs = r->pool.jobs / steps, wait_ms = 1e3 * r->pool.wait_s / steps;
    const double wake_us = r->pool.jobs > 0 ? 1e6 * r->pool.wake_s / r->pool.jobs : 0;
    if (!json) {
        printf("\ndecode step, part by part (%.0f steps of %d runs, batch %d; %.3f ms a step)\n"
               "%-28s %10s %10s %8s\n",
               steps, r->repeat, r->batch, 1e3 * step_s, "part", "calls/step", "ms/step",
               "share");
        for (int k = 0; k < PART_COUNT; k++)
            if (part_calls[k] > 0 || k == PART_OWN)
                printf("%-28s %10.1f %10.3f %7.1f%%\n", PART_NAMES[k], part_calls[k] / steps,
                       1e3 * part_s[k] / steps, 100 * part_s[k] / r->prof_decode_s);
        printf("remainder (all but the layers' GEMVs, grouped or not): %.3f ms a step, %.1f%% "
               "of it\n",
               1e3 * remainder / steps, 100 * remainder / r->prof_decode_s);
        printf("kernel pool (inside the kernels above): %.1f jobs a step; the caller waited "
               "%.3f ms a step (%.1f%%) for the last task, a worker took the first task "
               "%.1f us after submission on average\n",
               jobs, wait_ms, 100 * r->pool.wait_s / r->prof_decode_s, wake_us);
        printf("\nlinear products by weight shape (a grouped call's time shared by bytes)\n%-24s %10s %10s %8s %8s\n", "rows x cols type",
               "calls/step", "ms/step", "share", "GB/s");
        for (int i = 0; i < p->n_shapes; i++) {
            const struct kern_profile_shape *sh = &p->shape[i];
            char name[48];
            if (sh->rows == 0)
                snprintf(name, sizeof name, "(other shapes)");
            else
                snprintf(name, sizeof name, "%d x %d %s%s", sh->rows, sh->cols,
                         dtype_name(sh->dtype), sh->rows == r->vocab ? " head" : "");
            printf("%-24s %10.1f %10.3f %7.1f%% %8.2f\n", name, sh->calls / steps,
                   1e3 * sh->seconds / steps, 100 * sh->seconds / r->prof_decode_s,
                   sh->seconds > 0 ? sh->bytes / sh->seconds / 1e9 : 0);
        }
        printf("linear layers alone stream %.2f GB/s (%.2f of the read limit)\n", lin_gbs,
               r->rbw > 0 ? lin_gbs * 1e9 / r->rbw : 0);
        if (grp_s > 0)
            printf("grouped linears (a mixture's experts) alone stream %.2f GB/s (%.2f of the "
                   "read limit)\n",
                   grp_gbs, r->rbw > 0 ? grp_gbs * 1e9 / r->rbw : 0);
        return NULL;
    }
    json_t *parts = json_array(), *shapes = json_array();
    for (int k = 0; k < PART_COUNT; k++)
        if (part_calls[k] > 0 || k == PART_OWN)
            json_array_append_new(
                parts, json_pack("{s:s, s:o, s:o, s:o}", "part", PART_NAMES[k], "calls_per_step",
                                 jsonout_real(part_calls[k] / steps, 2), "ms_per_step",
                                 jsonout_real(1e3 * part_s[k] / steps, 4), "share",
                                 jsonout_real(part_s[k] / r->prof_decode_s, 4)));
    for (int i = 0; i < p->n_shapes; i++) {
        const struct kern_profile_shape *sh = &p->shape[i];
        json_array_append_new(
            shapes,
            json_pack("{s:i, s:i, s:s, s:b, s:o, s:o, s:o}", "rows", sh->rows, "cols", sh->cols,
                      "dtype", dtype_name(sh->dtype), "head", sh->rows == r->vocab,
                      "calls_per_step", jsonout_real(sh->calls / steps, 2), "ms_per_step",
                      jsonout_real(1e3 * sh->seconds / steps, 4), "gb_s",
                      jsonout_real(sh->seconds > 0 ? sh->bytes / sh->seconds / 1e9 : 0, 3)));
    }
    json_t *j = json_pack("{s:o, s:o, s:o, s:o, s:o, s:o}", "steps",
                          json_integer((json_int_t)steps), "ms_per_step",
                          jsonout_real(1e3 * step_s, 4), "kernels", kernels,
                          "outside_kernels_ms_per_step", jsonout_real(1e3 * other / steps, 4),
                          "linear_weight_gb_s", jsonout_real(lin_gbs, 3), "grouped_linear_gb_s",
                          jsonout_real(grp_gbs, 3));
    if (j) {
        json_object_set_new(j, "parts", parts);
        json_object_set_new(j, "shapes", shapes);
        json_object_set_new(j, "remainder_ms_per_step", jsonout_real(1e3 * remainder / steps, 4));
        json_object_set_new(j, "remainder_share", jsonout_real(remainder / r->prof_decode_s, 4));
        json_object_set_new(j, "pool",
                            json_pack("{s:o, s:o, s:o}", "jobs_per_step", jsonout_real(jobs, 2),
                                      "wait_ms_per_step", jsonout_real(wait_ms, 4), "wake_us",
                                      jsonout_real(wake_us, 2)));
    } else {
        json_decref(parts);
        json_decref(shapes);
    }
    return j;
}

/* With adapters: the base alone's figures and the adapters' cost (their
 * batch's time over the base's). */
static json_t *lora_json(const struct forward_run *r)
{
    json_t *dirs = json_array();
    for (int a = 0; a < r->dev.n_adapters; a++)
        json_array_append_new(dirs, json_string(r->dev.adapters[a]));
    return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "adapters", dirs, "base_prefill_s",
                     jsonout_real(r->base.prefill_s, 6), "base_prefill_tok_s",
                     jsonout_real(r->batch * r->prompt_len / r->base.prefill_s, 2), "base_decode_s",
                     jsonout_real(r->base.decode_s, 6), "base_decode_tok_s",
                     jsonout_real(r->batch * r->gen / r->base.decode_s, 2), "prefill_ratio",
                     jsonout_real(r->best.prefill_s / r->base.prefill_s, 4), "decode_ratio",
                     jsonout_real(r->best.decode_s / r->base.decode_s, 4));
}

/* How the decode picks its tokens: "greedy", or the sampling parameters. */
static void picks_describe(const struct sampler_params *sp, char *out, size_t n)
{
    if (sp->temperature > 0)
        snprintf(out, n, "sampled: temperature %g, top-k %d, top-p %g", (double)sp->temperature,
                 sp->top_k, (double)sp->top_p);
    else
        snprintf(out, n, "greedy");
}

static int forward_print_json(const struct forward_run *r)
{
    const bool on_cpu = r->dev.gpu < 0;
    struct forward_figures f = forward_figures(r);
    json_t *j = json_pack(
        "{s:s, s:o, s:o, s:o, s:o, s:o, s:i, s:i, s:i, s:i, s:s, s:I, s:o, s:o, s:o, s:o, s:o, "
        "s:o, s:o, s:o, s:o, s:o, s:s, s:o, s:o, s:o, s:o}",
        "impl", "shardswap", "device", jsonout_string(r->device), "model", jsonout_string(r->dir),
        "blas_core", jsonout_string(r->blas), "gemv_kernels", jsonout_string(r->gemv), "matmul_paths",
        jsonout_string(r->matmul), "threads",
        r->threads, "batch", r->batch, "prompt_len", r->prompt_len, "gen", r->gen, "weight_dtype",
        dtype_name(r->weight_dtype), "weight_bytes", (json_int_t)(r->wbytes + r->expert_bytes), "prefill_s",
        jsonout_real(r->best.prefill_s, 6), "prefill_tok_s", jsonout_real(f.prefill_tps, 2),
        "decode_s", jsonout_real(r->best.decode_s, 6), "decode_tok_s",
        jsonout_real(f.decode_tps, 2), "decode_ms_per_step",
        jsonout_real(1e3 * r->best.decode_s / r->gen, 3), "decode_weight_gb_s",
        jsonout_real(f.stream / 1e9, 3), "memcpy_gb_s", jsonout_real(r->bw / 1e9, 3),
        "decode_vs_memcpy", jsonout_real(f.stream / r->bw, 3), "read_gb_s",
        jsonout_real(r->rbw / 1e9, 3), "decode_vs_read", jsonout_real(f.decode_vs_read, 3),
        "compute", kern_compute_name(r->compute), "prefill_gflops",
        jsonout_real(f.prefill_gflops, 2), "matmul_f32_gflops",
        jsonout_real(r->ceil.f32.gflops, 2), "matmul_bf16_gflops",
        jsonout_real(r->ceil.bf16.gflops, 2), "matmul_impl",
        jsonout_string(on_cpu ? r->ceil.impl : NULL));
    if (j && (json_object_set_new(j, "weight_dtypes", jsonout_string(r->weight_mix)) |
              json_object_set_new(j, "qdot_kernels", jsonout_string(r->qdot)))) {
        json_decref(j);
        j = NULL;
    }
    if (j) {
        json_object_set_new(j, "adapter",
                            jsonout_string(r->dev.n_adapters ? r->dev.adapters[0] : NULL));
        if (r->dev.n_adapters)
            json_object_set_new(j, "lora", lora_json(r));
        char picks[96];
        picks_describe(&r->sp, picks, sizeof(picks));
        json_object_set_new(j, "picks", jsonout_string(picks));
        json_object_set_new(j, "decode_weight_bytes_per_step", jsonout_real(f.step_bytes, 0));
        if (r->step_batch) {
            json_object_set_new(j, "step_batch", json_integer(r->step_batch));
            json_object_set_new(j, "step_decode_ms_per_step",
                                jsonout_real(1e3 * r->step_decode_s / r->gen, 3));
            json_object_set_new(j, "step_ratio", jsonout_real(r->step_ratio.p50, 3));
            json_object_set_new(j, "step_ratio_min", jsonout_real(r->step_ratio.min, 3));
            json_object_set_new(j, "step_ratio_max", jsonout_real(r->step_ratio.max, 3));
        }
        json_object_set_new(j, "expert_bytes", json_integer((json_int_t)r->expert_bytes));
        json_object_set_new(j, "expert_reads_per_step", jsonout_real(f.expert_reads, 3));
        json_object_set_new(j, "read_limit",
                            on_cpu ? read_limit_json(&r->lim, false) : json_null());
        json_object_set_new(j, "read_min_gb_s",
                            jsonout_real(on_cpu ? read_limit_min_bps(&r->lim) / 1e9 : NAN, 3));
        json_object_set_new(j, "decode_vs_read_paired",
                            jsonout_real(on_cpu ? r->paired.p50 : NAN, 3));
        json_object_set_new(j, "decode_vs_read_paired_min",
                            jsonout_real(on_cpu ? r->paired.min : NAN, 3));
        json_object_set_new(j, "decode_vs_read_paired_max",
                            jsonout_real(on_cpu ? r->paired.max : NAN, 3));
        if (r->expert_bytes > 0) {
            /* a mixture: what a step touches (every weight but the experts,
             * and the experts its tokens routed to), not the checkpoint */
            json_object_set_new(j, "decode_expert_bytes_per_step",
                                jsonout_real(f.expert_reads * r->pair_bytes, 0));
            json_object_set_new(j, "decode_touched_gb_s", jsonout_real(f.stream / 1e9, 3));
            json_object_set_new(j, "touched_vs_read", jsonout_real(f.decode_vs_read, 3));
        }
    }
    if (j && r->profile)
        json_object_set_new(j, "profile", profile_report(r, true));
    return jsonout_print(j);
}

static void forward_print_table(const struct forward_run *r)
{
    struct forward_figures f = forward_figures(r);
    char with[64] = "";
    if (r->dev.n_adapters > 1)
        snprintf(with, sizeof(with), " with %d adapters, the first ", r->dev.n_adapters);
    else if (r->dev.n_adapters)
        snprintf(with, sizeof(with), " with adapter ");
    char picks[96];
    picks_describe(&r->sp, picks, sizeof(picks));
    printf("model %s%s%s on %s: %.1f MB of weights (%s), compute %s, %d threads, batch %d, "
           "prompt %d, gen %d (%s), best of %d, openblas core %s, gemv %s, matmul paths %s, "
           "ceiling matmul %s\n",
           r->dir, with, r->dev.n_adapters ? r->dev.adapters[0] : "", r->device,
           (r->wbytes + r->expert_bytes) / 1e6,
           r->weight_mix[0] ? r->weight_mix : dtype_name(r->weight_dtype),
           kern_compute_name(r->compute), r->threads, r->batch, r->prompt_len, r->gen, picks,
           r->repeat,
           r->blas ? r->blas : "n/a", r->gemv ? r->gemv : "n/a", r->matmul ? r->matmul : "n/a",
           r->ceil.impl);
    if (r->qdot)
        printf("quantized kernels: %s\n", r->qdot);
    printf("%-28s %12s\n", "metric", "value");
    metric_row("prefill tokens/s", f.prefill_tps, 1);
    metric_row("prefill GFLOP/s (linear)", f.prefill_gflops, 1);
    metric_row("matmul f32 GFLOP/s", r->ceil.f32.gflops, 1);
    metric_row("matmul bf16 GFLOP/s", r->ceil.bf16.gflops, 1);
    metric_row("decode tokens/s", f.decode_tps, 1);
    metric_row("decode ms/step", 1e3 * r->best.decode_s / r->gen, 2);
    metric_row("decode weight MB/step", f.step_bytes / 1e6, 3);
    if (r->expert_bytes > 0) {
        metric_row("experts read/step", f.expert_reads, 2);
        metric_row("of which experts MB/step", f.expert_reads * r->pair_bytes / 1e6, 3);
    }
    metric_row("decode weight GB/s", f.stream / 1e9, 2);
    metric_row("memcpy GB/s (STREAM count)", r->bw / 1e9, 2);
    metric_row("decode / memcpy", f.stream / r->bw, 2);
    metric_row("read GB/s", r->rbw / 1e9, 2);
    metric_row("read GB/s, slowest sample",
               r->dev.gpu < 0 ? read_limit_min_bps(&r->lim) / 1e9 : NAN, 2);
    metric_row("decode / read", f.decode_vs_read, 2);
    if (r->dev.gpu < 0) {
        printf("%-28s %12.2f (runs %.2f-%.2f)\n", "decode / read, paired", r->paired.p50,
               r->paired.min, r->paired.max);
        read_limit_print(&r->lim, false, "");
    }
    if (r->expert_bytes > 0) {
        /* the same figures under the names a mixture is judged by: the
         * bytes a step touches, not the whole checkpoint's */
        metric_row("touched GB/s", f.stream / 1e9, 2);
        metric_row("touched / read limit", f.decode_vs_read, 2);
    }
    if (r->dev.n_adapters) {
        printf("\nthe same batch over %d adapters (sequence b: adapter b mod %d) against the base "
               "alone, interleaved\n",
               r->dev.n_adapters, r->dev.n_adapters);
        printf("%-28s %12s %12s %8s\n", "metric", "adapters", "base", "ratio");
        printf("%-28s %12.1f %12.1f %8.3f\n", "prefill tokens/s", f.prefill_tps,
               r->batch * r->prompt_len / r->base.prefill_s, r->best.prefill_s / r->base.prefill_s);
        printf("%-28s %12.1f %12.1f %8.3f\n", "decode tokens/s", f.decode_tps,
               r->batch * r->gen / r->base.decode_s, r->best.decode_s / r->base.decode_s);
        printf("%-28s %12.2f %12.2f %8.3f\n", "decode ms/step", 1e3 * r->best.decode_s / r->gen,
               1e3 * r->base.decode_s / r->gen, r->best.decode_s / r->base.decode_s);
        printf("(ratio: the adapters' time over the base's)\n");
    }
    if (r->step_batch) {
        printf("\nbatch %d beside batch %d in this process, a run of each in turn\n", r->step_batch,
               r->batch);
        printf("%-28s %12.2f\n", "decode ms/step", 1e3 * r->step_decode_s / r->gen);
        printf("%-28s %12.3f (runs %.3f-%.3f)\n", "step / batch's step", r->step_ratio.p50,
               r->step_ratio.min, r->step_ratio.max);
        printf("(the median of the runs' ratios: each the step time of batch %d over that of "
               "batch %d run next to it)\n",
               r->step_batch, r->batch);
    }
    if (r->profile)
        profile_report(r, false);
}

static int bench_forward(int argc, char **argv)
{
    const char *compute = NULL, *devices = NULL, *adapters_csv = NULL;
    const char *adapter_dirs[CLI_MAX_ADAPTERS];
    struct flag_strs adapter_list = {.v = adapter_dirs, .cap = CLI_MAX_ADAPTERS};
    char *csv = NULL;
    struct forward_run r = {
        .batch = 1, .prompt_len = 128, .gen = 32, .repeat = 3, .sp = {.top_p = 1}};
    bool json = false;
    struct flag flags[] = {
        MODEL_FLAG(&r.dir),
        FLAG_RANGE("batch", FLAG_INT, &r.batch, "B", "sequences per batch (default 1)", 1, 4096,
                   "1..4096"),
        FLAG_RANGE("prompt-len", FLAG_INT, &r.prompt_len, "L",
                   "prompt tokens per sequence (default 128)", 1, 1 << 20, "1..1048576"),
        FLAG_RANGE("gen", FLAG_INT, &r.gen, "N", "decode steps (default 32)", 1, 1 << 20,
                   "1..1048576"),
        FLAG("threads", FLAG_INT, &r.threads, "T",
             "threads, at most the CPUs this process may use (default 0: all of them)"),
        FLAG_RANGE("repeat", FLAG_INT, &r.repeat, "R", "best of R runs (default 3)", 1, 1000,
                   "1..1000"),
        FLAG_RANGE("temperature", FLAG_FLOAT, &r.sp.temperature, "T",
                   "the decode's picks: 0 = greedy (default 0), else sampled as serve samples, "
                   "sequence b with seed b",
                   0, FLT_MAX, "a finite T >= 0"),
        FLAG_RANGE("top-k", FLAG_INT, &r.sp.top_k, "K",
                   "with --temperature, sample among the K most likely (default 0 = off)", 0,
                   INT_MAX, "K >= 0"),
        FLAG_RANGE("top-p", FLAG_FLOAT, &r.sp.top_p, "P",
                   "with --temperature, nucleus sampling mass (default 1 = off)", FLT_TRUE_MIN, 1,
                   "0 < P <= 1"),
        COMPUTE_FLAG(&compute),
        DEVICE_FLAG(&devices),
        FLAG("adapter", FLAG_STRS, &adapter_list, "DIR",
             "a PEFT LoRA adapter of the model; may be repeated: sequence b of the batch gets "
             "adapter b mod N, and the same batch also runs on the base alone (interleaved), "
             "both printed with their ratio"),
        FLAG("adapters", FLAG_STR, &adapters_csv, "DIR,DIR,...",
             "adapters as --adapter, comma-separated (after any --adapter)"),
        FLAG_RANGE("step-batch", FLAG_INT, &r.step_batch, "B",
                   "also decode at batch B in the same process, a run of it before and after "
                   "each run of --batch in turn, and print the step time of B over --batch's "
                   "(the median of the runs' ratios): a comparison the machine's drift "
                   "between processes does not move (default 0 = off)",
                   0, 4096, "0..4096"),
        FLAG("profile", FLAG_BOOL, &r.profile, NULL,
             "also time the decode steps part by part (CPU only): the layers' GEMVs, the head, "
             "attention, norms, rope, activations, adds, copies, sampling and the step's own "
             "code, summing to the step, with the remainder's share; the linear calls by "
             "weight shape with their GB/s; and the kernel pool's jobs, wake and wait"),
        FLAG("json", FLAG_BOOL, &json, NULL, "print one JSON object instead of a table"),
    };
    int rc = args_parse("bench forward",
                        "Measures prefill and decode tokens/s of one checkpoint (random prompt "
                        "ids, no padding, greedy decode through the KV cache unless --temperature) on one device, the "
                        "weights copied onto it as serve runs them (on the CPU too), and "
                        "on a CPU decode's weight bytes streamed per second against the "
                        "memory's read limit (the best of several ways of reading) and memcpy "
                        "bandwidth, both measured in the same run with the same thread count, "
                        "and the matmul ceilings (on a GPU those columns are n/a, null in "
                        "--json).",
                        argc, argv, flags, sizeof(flags) / sizeof(flags[0]));
    if (rc)
        return rc;
    /* the bandwidth probe takes 256 MiB a thread: threads are bounded by
     * the machine, not by what was typed */
    int cpus = cpus_usable();
    if (r.threads < 0 || r.threads > cpus) {
        char v[16], range[96];
        snprintf(v, sizeof(v), "%d", r.threads);
        snprintf(range, sizeof(range), "0..%d, the CPUs this process may use; 0 = all", cpus);
        return args_range_fail("bench forward", "threads", v, range);
    }
    if (cli_device_flags_parse(compute, devices, &r.dev) < 0)
        return args_usage_fail("bench forward");
    if (r.profile && r.dev.gpu >= 0) {
        err_set(ERR_INVALID,
                "--profile times CPU kernels (their calls are synchronous); not "
                "with --devices cuda:%d",
                r.dev.gpu);
        return args_usage_fail("bench forward");
    }
    if (r.step_batch && (adapter_list.n || adapters_csv)) {
        err_set(ERR_INVALID, "--step-batch times the base model; not with --adapter/--adapters");
        return args_usage_fail("bench forward");
    }
    /* --adapters' list after --adapter's, in adapter_dirs */
    if (adapters_csv && !(csv = strdup(adapters_csv)))
        return cli_fail("bench forward");
    for (char *save = NULL, *d = csv ? strtok_r(csv, ",", &save) : NULL; d;
         d = strtok_r(NULL, ",", &save)) {
        if (adapter_list.n == CLI_MAX_ADAPTERS) {
            err_set(ERR_INVALID, "--adapter/--adapters: more than %d adapters", CLI_MAX_ADAPTERS);
            free(csv);
            return args_usage_fail("bench forward");
        }
        adapter_dirs[adapter_list.n++] = d;
    }
    r.dev.adapters = adapter_dirs;
    r.dev.n_adapters = adapter_list.n;
    cpu_set_threads(r.threads);
    r.threads = cpu_threads();
    if (forward_measure(&r) < 0) {
        free(csv);
        return cli_fail("bench forward");
    }
    if (json)
        rc = forward_print_json(&r);
    else
        forward_print_table(&r);
    free(csv);
    return rc < 0 ? cli_fail("bench forward") : 0;
}

const struct cli_command bench_commands[] = {
    {"forward", bench_forward, "prefill and decode throughput of one checkpoint"},
    {"swap", bench_swap, "model-parallel swap-in/out and cold-request latency per TP x PP layout"},
    {"workload", bench_workload,
     "Computron's multi-model experiments through the engine, per policy"},
    {"serve", bench_serve, "the same workloads against a running server over HTTP"},
    {"comm", bench_comm, "all-reduce and pipeline channel latency against memcpy"},
    {"gemv", bench_gemv, "the CPU's fused GEMV (decode's linear layers) against memory read speed"},
    {"lora", bench_lora, "the CPU's mixed-adapter LoRA update against the base layer's product"},
    {"read", bench_read,
     "the memory's read limit: every way of reading, its spread, the machine's state"},
    {"tokenize", bench_tokenize,
     "one tokenizer's encode and decode speed (tools/bench_tokenizer.py: against HF)"},
};
const int bench_n_commands = (int)(sizeof(bench_commands) / sizeof(bench_commands[0]));

/* "forward, swap, ... or tokenize" into buf. */
static void bench_names(char *buf, size_t cap, const char *sep, const char *last)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < bench_n_commands && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s",
                              i == 0                      ? ""
                              : i == bench_n_commands - 1 ? last
                                                          : sep,
                              bench_commands[i].name);
}

int cmd_bench(int argc, char **argv)
{
    for (int i = 0; argc >= 1 && i < bench_n_commands; i++)
        if (strcmp(argv[0], bench_commands[i].name) == 0)
            return bench_commands[i].run(argc - 1, argv + 1);
    char names[256];
    if (argc >= 1 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
        bench_names(names, sizeof names, "|", "|");
        printf("usage: shardswap bench %s [flags]   (see shardswap bench NAME --help)\n", names);
        for (int i = 0; i < bench_n_commands; i++)
            printf("  %-9s %s\n", bench_commands[i].name, bench_commands[i].help);
        return 0;
    }
    bench_names(names, sizeof names, ", ", " or ");
    fprintf(stderr, "shardswap bench: expected a benchmark name: %s (see shardswap bench --help)\n",
            names);
    return EXIT_USAGE;
}
