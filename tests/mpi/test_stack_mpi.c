/* The serving stack across processes (issue 22; cluster/job.h): process 0
 * runs the engine, whose devices are partly the other processes' (views,
 * reached through cluster/remote), and every other process follows.
 *
 * Devices: 0 is process 0's; with 2 processes 1 and 2 are process 1's,
 * with 3 device 1 is process 1's and device 2 process 2's. Models:
 *   tp     llama_gqa_f32, TP 2 over devices 0 and 1 (a TP group spanning
 *          processes: the all-reduce over MPI)
 *   pp     pre_ln_f32, PP 2: stage 0 on device 1, stage 1 on device 0 (the
 *          activations cross processes; the logits are process 0's)
 *   pplast qwen2_bias_f32, PP 2: stage 0 on device 0, stage 1 on device 2
 *          (the logits come back in STEP_DONE)
 *   far    post_ln_proj on device 2 alone (no shard on process 0)
 * on budgets sized for one model per device, so the models swap each other
 * out of every device, on every process.
 *
 * serving: every request (three prompts of each model, all submitted at
 *   once, twice over) returns transformers' greedy reference exactly, once;
 *   loads outnumber the models (they swapped); no view's high-water mark
 *   passes its budget; each other process (STATS) loaded more bytes than it
 *   read from its checkpoints (its host tier kept them).
 * overlap: the same with batches opened while their model loads (the
 *   engine's load overlap over an emulated link), answered right.
 * host_tight: a host budget of one model and a little: the host tiers of
 *   every process drop copies for room, and every answer stays right.
 * remove: a model with remote shards, removed while resident, leaves its
 *   views empty; its name then finds nothing, and the others still serve.
 * truncated: a copy of far's checkpoint ("victim", on device 2 as far) is
 *   truncated while registered, after the host tier of device 2's process
 *   dropped its copy for far's: its next load there reads the file, which
 *   fails that load with the message naming the process, the model and
 *   both sizes; that process lives and far and tp still serve.
 * stopped: the process owning device 2 stopped (SIGSTOP) while "far" is
 *   resident there: a request to far completes (never hangs) with an error
 *   naming that process once its heartbeats stop; with 3 processes, "tp"
 *   (processes 0 and 1) still serves; continued, the job closes.
 * adapters: a LoRA adapter over tp (its shards on processes 0 and 1) is
 *   refused in one line, leaving nothing registered; tp still serves. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/device.h"
#include "cluster/job.h"
#include "comm/mpi.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/stack.h"
#include "swap/swap.h"
#include "test.h"

#include "fixture_expect.h"

enum { M_TP, M_PP, M_PPLAST, M_FAR, N_MODELS };
static const char *names[N_MODELS] = {"tp", "pp", "pplast", "far"};
static const char *fixtures[N_MODELS] = {"llama_gqa_f32", "pre_ln_f32", "qwen2_bias_f32",
                                         "post_ln_proj"};
static char paths[N_MODELS][512];
static struct expect expects[N_MODELS][3];

#define BEAT_INTERVAL 0.2
#define BEAT_TIMEOUT 3.0
#include "mpi/job_test.h"

static const int dev_tp[] = {0, 1}, dev_pp[] = {1, 0}, dev_pplast[] = {0, 2}, dev_far[] = {2};
static struct stack_model_config models[N_MODELS];
static struct stack_config cfg;

/* The same config on every process: its budgets size every device alike. */
static void config_make(void)
{
    int prompt = 0, out = 0;
    for (int m = 0; m < N_MODELS; m++) {
        snprintf(paths[m], sizeof paths[m], "%s/%s", FIXTURES, fixtures[m]);
        expect_load(fixtures[m], expects[m]);
        for (int i = 0; i < 3; i++) {
            prompt = expects[m][i].n_prompt > prompt ? expects[m][i].n_prompt : prompt;
            out = expects[m][i].n_out > out ? expects[m][i].n_out : out;
        }
    }
    const int *devs[N_MODELS] = {dev_tp, dev_pp, dev_pplast, dev_far};
    const int tp[N_MODELS] = {2, 1, 1, 1}, pp[N_MODELS] = {1, 2, 2, 1};
    for (int m = 0; m < N_MODELS; m++)
        models[m] = (struct stack_model_config){.name = names[m],
                                                .path = paths[m],
                                                .tp = tp[m],
                                                .pp = pp[m],
                                                .devices = devs[m],
                                                .compute = "f32"};
    cfg = (struct stack_config){.device_kind = "cpu",
                                .n_devices = 3,
                                .procs = {0, 1, procs > 2 ? 2 : 1},
                                .procs_set = true,
                                .n_procs = procs,
                                .fit_models = 1,
                                .fit_prompt = prompt,
                                .fit_max_tokens = out,
                                .engine = {.max_batch = 4},
                                .models = models,
                                .n_models = N_MODELS};
    /* room for the largest model placed on a device, without stack_size's
     * spare MiB (which would hold every fixture at once) */
    uint64_t sized[STACK_MAX_DEVICES], host;
    CHECK_MSG(stack_size(&cfg, sized, &host) == 0, "%s", err_msg());
    for (int d = 0; d < cfg.n_devices; d++)
        cfg.device_budget[d] = sized[d] - (1u << 20);
}

static struct engine_req *submit(struct stack *s, int m, int which)
{
    const struct expect *x = &expects[m][which];
    struct engine_request_params p = {
        .model_name = names[m], .prompt = x->prompt, .n_prompt = x->n_prompt,
        .max_tokens = x->n_out, .sampling = {.temperature = 0, .top_p = 1, .seed = 1}};
    struct engine_req *r = NULL;
    CHECK_MSG(engine_submit(s->engine, &p, &r) == 0 && r, "submit to %s: %s", names[m], err_msg());
    return r;
}

static void check_output(struct engine_req *r, int m, int which)
{
    if (!r)
        return;
    const struct expect *x = &expects[m][which];
    int st = engine_req_wait(r);
    CHECK_MSG(st == 0, "%s prompt %d: status %d (%s)", names[m], which, st, engine_req_error(r));
    int n = 0;
    const int32_t *out = engine_req_output(r, &n);
    CHECK_MSG(st != 0 || (n == x->n_out && memcmp(out, x->out, sizeof(int32_t) * (size_t)n) == 0),
              "%s (%s) prompt %d: %d tokens, not transformers' %d", names[m], fixtures[m], which,
              n, x->n_out);
    engine_req_release(r);
}

/* Every model's three prompts, all at once; each answered right, once. */
static void serve_all(struct stack *s)
{
    struct engine_req *reqs[N_MODELS][3];
    for (int i = 0; i < 3; i++)
        for (int m = 0; m < N_MODELS; m++)
            reqs[m][i] = submit(s, m, i);
    for (int i = 0; i < 3; i++)
        for (int m = 0; m < N_MODELS; m++)
            check_output(reqs[m][i], m, i);
}

static struct stack *lead_open(void)
{
    struct stack *s = NULL;
    CHECK_MSG(cluster_job_lead(job, &cfg) == 0, "%s", err_msg());
    CHECK_MSG(stack_open(&cfg, &s) == 0, "%s", err_msg());
    return s;
}

/* The weights' bytes of every shard on process p's devices. */
static uint64_t proc_weight_bytes(struct stack *s, int p)
{
    uint64_t n = 0;
    for (int m = 0; m < s->n_models; m++)
        for (int i = 0; i < swap_model_shard_count(s->models[m]); i++) {
            const struct swap_shard *sh = swap_model_shard(s->models[m], i);
            if (device_proc(s->devices[swap_shard_device(sh)]) != p)
                continue;
            for (int b = 0; b < swap_shard_n_blobs(sh); b++)
                n += swap_shard_blob_bytes(sh, b);
        }
    return n;
}

TEST(serving)
{
    struct stack *s = lead_open();
    if (!s)
        return;
    serve_all(s);
    serve_all(s);
    struct engine_stats st;
    engine_get_stats(s->engine, &st);
    CHECK_MSG(st.ok == 2 * 3 * N_MODELS && st.completed == st.ok, "%llu of %d requests ok",
              (unsigned long long)st.ok, 2 * 3 * N_MODELS);
    CHECK_MSG(st.loads > N_MODELS, "%llu loads of %d models: nothing swapped",
              (unsigned long long)st.loads, N_MODELS);
    for (int d = 0; d < s->n_devices; d++)
        CHECK_MSG(device_high_water(s->devices[d]) <= device_budget(s->devices[d]),
                  "device %s: high water %llu above its budget %llu", device_name(s->devices[d]),
                  (unsigned long long)device_high_water(s->devices[d]),
                  (unsigned long long)device_budget(s->devices[d]));
    CHECK(device_proc(s->devices[1]) == 1 && device_proc(s->devices[0]) <= 0);
    /* the other processes' host tiers: their shards swapped in again and
     * again, but each blob was read from the checkpoint once */
    for (int p = 1; p < procs; p++) {
        struct cluster_proc_stats ps;
        CHECK_MSG(cluster_job_stats(job, p, false, 0, 0, &ps) == 0, "%s", err_msg());
        double mine = (double)proc_weight_bytes(s, p);
        CHECK_MSG(ps.load_bytes > ps.disk_bytes && ps.disk_bytes == mine &&
                      ps.host_used <= ps.host_budget && ps.memcpy_bps == 0,
                  "process %d: loaded %.0f bytes, read %.0f of its shards' %.0f, host tier %.0f "
                  "of %.0f",
                  p, ps.load_bytes, ps.disk_bytes, mine, ps.host_used, ps.host_budget);
    }
    stack_close(s);
    cluster_job_release(job);
}

/* Batches opened while their model still loads (the engine's load
 * overlap, over an emulated link): a batch may reach the other processes
 * before the model's first LOAD, and its step must wait for their shards,
 * blob by blob: the other processes' steps begin while their shards load
 * (at 0.02 GB/s a fixture's 0.4 MB take 20 ms; its step leaves at once). */
TEST(overlap)
{
    cfg.engine.overlap_loads = true;
    cfg.link_gbps = 0.02;
    struct stack *s = lead_open();
    if (!s)
        return;
    serve_all(s);
    struct engine_stats st;
    engine_get_stats(s->engine, &st);
    CHECK_MSG(st.ok == 3 * N_MODELS, "%llu of %d requests ok", (unsigned long long)st.ok,
              3 * N_MODELS);
    double overlapped = 0;
    for (int p = 1; p < procs; p++) {
        struct cluster_proc_stats ps;
        CHECK_MSG(cluster_job_stats(job, p, false, 0, 0, &ps) == 0, "%s", err_msg());
        overlapped += ps.overlapped;
    }
    CHECK_MSG(overlapped > 0,
              "no step on another process began before its shard had loaded "
              "(%llu loads)",
              (unsigned long long)st.loads);
    stack_close(s);
    cluster_job_release(job);
    cfg.engine.overlap_loads = false;
    cfg.link_gbps = 0;
}

/* A host budget of one model's weights and a little: every process's host
 * tier drops copies (least recently loaded first) to make room, and every
 * answer stays right. */
TEST(host_tight)
{
    uint64_t largest = 0;
    for (int m = 0; m < N_MODELS; m++) {
        uint64_t dev[STACK_MAX_DEVICES], host = 0;
        CHECK(swap_layout_bytes(paths[m], models[m].tp ? models[m].tp : 1,
                                models[m].pp ? models[m].pp : 1, NULL, dev, &host) == 0);
        largest = host > largest ? host : largest;
    }
    cfg.host_budget = largest + (64u << 10);
    struct stack *s = lead_open();
    if (s) {
        serve_all(s);
        serve_all(s);
        struct swap_stats st;
        swap_get_stats(s->mgr, &st);
        CHECK_MSG(st.host_high_water <= cfg.host_budget, "host high water %llu above %llu",
                  (unsigned long long)st.host_high_water, (unsigned long long)cfg.host_budget);
        /* the others' tiers: within the same budget; a process whose
         * shards outgrow it read again what it dropped for room, one whose
         * shards fit read each blob once */
        for (int p = 1; p < procs; p++) {
            struct cluster_proc_stats ps;
            CHECK_MSG(cluster_job_stats(job, p, false, 0, 0, &ps) == 0, "%s", err_msg());
            double mine = (double)proc_weight_bytes(s, p);
            bool outgrown = mine > ps.host_budget;
            CHECK_MSG(ps.host_budget == (double)cfg.host_budget &&
                          ps.host_used <= ps.host_budget &&
                          (outgrown ? ps.disk_bytes > mine : ps.disk_bytes == mine),
                      "process %d: host tier %.0f of %.0f (expected %llu), its shards %.0f, "
                      "read %.0f",
                      p, ps.host_used, ps.host_budget, (unsigned long long)cfg.host_budget, mine,
                      ps.disk_bytes);
        }
        stack_close(s);
        cluster_job_release(job);
    }
    cfg.host_budget = 0;
}

/* Copies file name of directory from into directory to. */
static int copy_file(const char *from, const char *to, const char *name)
{
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/%s", from, name);
    snprintf(b, sizeof b, "%s/%s", to, name);
    FILE *in = fopen(a, "rb"), *out = fopen(b, "wb");
    int rc = in && out ? 0 : -1;
    char buf[1 << 16];
    size_t n;
    while (rc == 0 && (n = fread(buf, 1, sizeof buf, in)) > 0)
        rc = fwrite(buf, 1, n, out) == n ? 0 : -1;
    if (in)
        fclose(in);
    if (out && fclose(out) != 0)
        rc = -1;
    return rc;
}

TEST(truncated)
{
    char dir[] = "/tmp/shardswap-mpi-truncated-XXXXXX";
    if (!mkdtemp(dir))
        test_skip("mkdtemp failed");
    const char *files[] = {"config.json", "generation_config.json", "model.safetensors"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        CHECK_MSG(copy_file(paths[M_FAR], dir, files[i]) == 0, "copying %s to %s", files[i], dir);
    struct stack_model_config all[N_MODELS + 1];
    memcpy(all, models, sizeof models);
    all[N_MODELS] = models[M_FAR];
    all[N_MODELS].name = "victim";
    all[N_MODELS].path = dir;
    cfg.models = all;
    cfg.n_models = N_MODELS + 1;
    /* a host tier of one of these models: far's copy drops victim's */
    uint64_t dev[STACK_MAX_DEVICES], host = 0;
    CHECK(swap_layout_bytes(paths[M_FAR], 1, 1, NULL, dev, &host) == 0);
    cfg.host_budget = host + (64u << 10);
    struct stack *s = lead_open();
    if (s) {
        struct expect victim[3];
        memcpy(victim, expects[M_FAR], sizeof victim);
        /* victim loads (read from its file on device 2's process), then far
         * takes device 2 and that process's host tier */
        const struct expect *x = &victim[0];
        struct engine_request_params p = {.model_name = "victim",
                                          .prompt = x->prompt,
                                          .n_prompt = x->n_prompt,
                                          .max_tokens = x->n_out,
                                          .sampling = {.temperature = 0, .top_p = 1, .seed = 1}};
        struct engine_req *r = NULL;
        CHECK_MSG(engine_submit(s->engine, &p, &r) == 0, "%s", err_msg());
        if (r) {
            CHECK_MSG(engine_req_wait(r) == 0, "victim before the truncation: %s",
                      engine_req_error(r));
            engine_req_release(r);
        }
        check_output(submit(s, M_FAR, 0), M_FAR, 0);
        char st_path[1100];
        snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
        struct stat sb;
        CHECK(stat(st_path, &sb) == 0 && truncate(st_path, sb.st_size / 2) == 0);
        r = NULL;
        p.model_name = "victim";
        CHECK_MSG(engine_submit(s->engine, &p, &r) == 0, "%s", err_msg());
        if (r) {
            int st = engine_req_wait(r);
            char named[32];
            snprintf(named, sizeof named, "process %d", procs - 1);
            const char *msg = engine_req_error(r);
            CHECK_MSG(st < 0 && strstr(msg, named) && strstr(msg, "victim") &&
                          strstr(msg, "truncated while in use"),
                      "victim truncated on process %d: status %d (%s)", procs - 1, st, msg);
            engine_req_release(r);
        }
        /* that process lives: its other model and a model across processes serve */
        check_output(submit(s, M_FAR, 1), M_FAR, 1);
        check_output(submit(s, M_TP, 2), M_TP, 2);
        stack_close(s);
        cluster_job_release(job);
    }
    cfg.models = models;
    cfg.n_models = N_MODELS;
    cfg.host_budget = 0;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char f[1100];
        snprintf(f, sizeof f, "%s/%s", dir, files[i]);
        unlink(f);
    }
    rmdir(dir);
}

TEST(remove)
{
    struct stack *s = lead_open();
    if (!s)
        return;
    check_output(submit(s, M_FAR, 0), M_FAR, 0);
    int id = engine_find_model(s->engine, names[M_FAR]);
    CHECK(id >= 0);
    struct engine_model_stats last;
    CHECK_MSG(engine_remove_model(s->engine, id, &last) == 0, "%s", err_msg());
    CHECK_MSG(device_used(s->devices[2]) == 0, "device %s still holds %llu bytes",
              device_name(s->devices[2]), (unsigned long long)device_used(s->devices[2]));
    CHECK(engine_find_model(s->engine, names[M_FAR]) < 0);
    check_output(submit(s, M_TP, 1), M_TP, 1);
    check_output(submit(s, M_PPLAST, 2), M_PPLAST, 2);
    stack_close(s);
    cluster_job_release(job);
}

TEST(adapters)
{
    struct stack *s = lead_open();
    if (!s)
        return;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/lora/llama_r8_qv", SHARDSWAP_SOURCE_DIR);
    struct stack_adapter_config a = {.name = "ad", .base = names[M_TP], .path = dir};
    struct swap_model *sm = NULL;
    const char *key = NULL;
    int rc = stack_add_adapter(s, &a, &sm, &key);
    CHECK_MSG(rc < 0 && !sm, "an adapter over a model spanning processes: %d", rc);
    printf("adapter over tp: %s\n", err_msg());
    CHECK_MSG(strstr(err_msg(), "adapters of a model spanning processes are not served yet") &&
                  !strchr(err_msg(), '\n'),
              "%s", err_msg());
    CHECK(engine_find_model(s->engine, "ad") < 0);
    check_output(submit(s, M_TP, 0), M_TP, 0);
    stack_close(s);
    cluster_job_release(job);
}

TEST(stopped)
{
    struct stack *s = lead_open();
    if (!s)
        return;
    const int far_proc = procs - 1;
    check_output(submit(s, M_FAR, 0), M_FAR, 0);
    CHECK(kill(pids[far_proc], SIGSTOP) == 0);
    struct engine_req *r = submit(s, M_FAR, 1);
    if (r) {
        int st = engine_req_wait(r);
        char named[32];
        snprintf(named, sizeof named, "process %d", far_proc);
        CHECK_MSG(st < 0 && strstr(engine_req_error(r), named),
                  "far with process %d stopped: status %d (%s)", far_proc, st,
                  engine_req_error(r));
        engine_req_release(r);
    }
    if (procs > 2)
        check_output(submit(s, M_TP, 2), M_TP, 2);
    CHECK(kill(pids[far_proc], SIGCONT) == 0);
    stack_close(s);
    cluster_job_release(job);
}
