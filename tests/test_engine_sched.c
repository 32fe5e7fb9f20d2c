/* The engine's scheduler loop (sched_loop.c) end to end on the fixture
 * models (tests/engine_rig.h), under the policies:
 * - churn: 10k requests over 6 models with device memory for 2; every request
 *   completes exactly once with its own model's greedy continuation (the
 *   fixtures' transformers references, cut to the request's max_tokens),
 *   whatever batch, padding or join it went through;
 * - token-level preemption (swapwise-preempt): a paused batch resumes with
 *   the tokens of an unpreempted run;
 * - no starvation: a lone request for a cold model completes while two other
 *   models keep a backlog, before a bounded number of others were submitted;
 * - free device memory in pieces: the engine takes the explicit fragmentation
 *   step (swap_compact) and serves the model;
 * - submissions are taken at once while the scheduler's load must wait for a
 *   copy back (the engine lock is never held across a wait on the manager);
 * - a request blocked by pinned models fails at once without wait_for_unpin;
 * - partial residency and trimming loads (swapwise-partial): loads copy only
 *   the missing bytes, and on_move tells what the statistics count;
 * - keep_alive: an idle model is unloaded as soon as its batch has ended;
 * - the per-model controls' effects (swapwise and lru): a higher priority is
 *   loaded and served first, a request past its max_queue_wait goes before
 *   an older one of higher priority, a model within its min_resident is not
 *   the victim while another can make the room (and is when none can). */
#include <math.h>
#include <unistd.h>

#include "engine_rig.h"

/* A max_queue_wait for every model of the churn (0: none): with
 * swapwise-preempt, a model waiting past it pauses another's batch. */
static double churn_max_queue_wait;

static void test_churn(const char *policy, int n_req)
{
    struct rig g;
    rig_open(&g, policy, 2, 64, 8, 2);
    for (int m = 0; churn_max_queue_wait > 0 && m < N_MODELS; m++)
        CHECK(engine_set_priority(g.e, g.id[m], 0, churn_max_queue_wait) == 0);
    struct job *jobs = calloc((size_t)n_req, sizeof(*jobs));
    atomic_store(&wrong, 0);
    uint64_t x = 42;
    bool requested[N_MODELS] = {false};
    double t0 = time_now();
    for (int i = 0; i < n_req; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        /* skewed: model 0 gets half the traffic, bursts of the same model */
        int model = (x >> 60) < 8 ? 0 : (int)((x >> 33) % N_MODELS);
        int which = (int)((x >> 20) % 3);
        int max_tokens = 1 + (int)((x >> 40) % 12);
        requested[model] = true;
        job_init(&jobs[i], g.e, model, which, max_tokens);
        struct engine_request_params p = job_params(&jobs[i], g.id[model], x);
        CHECK_MSG(submit_retry(g.e, &p, NULL) == 0, "submit: %s", err_msg());
    }
    engine_drain(g.e);
    double dt = time_now() - t0;
    int once = 0, ok = 0, n_models = 0;
    for (int i = 0; i < n_req; i++) {
        once += atomic_load(&jobs[i].done_count) == 1;
        ok += jobs[i].status == 0;
    }
    for (int m = 0; m < N_MODELS; m++)
        n_models += requested[m];
    struct engine_stats st;
    engine_get_stats(g.e, &st);
    uint64_t pauses = 0, preempt_unloads = 0;
    for (int m = 0; m < N_MODELS; m++) {
        struct engine_model_stats ms;
        if (engine_model_stats(g.e, g.id[m], &ms) == 0) {
            pauses += ms.preemptions;
            preempt_unloads += ms.preempt_unloads;
            CHECK(ms.paused == 0);
        }
    }
    printf("churn %-9s: %d requests in %.2f s, %llu batches, %llu loads, %llu batches paused, "
           "%llu preempted unloads, %d wrong\n",
           policy, n_req, dt, (unsigned long long)st.batches, (unsigned long long)st.loads,
           (unsigned long long)pauses, (unsigned long long)preempt_unloads, atomic_load(&wrong));
    CHECK_MSG(once == n_req, "%s: %d of %d requests completed exactly once", policy, once, n_req);
    CHECK_MSG(ok == n_req, "%s: %d of %d requests completed ok", policy, ok, n_req);
    CHECK_MSG(atomic_load(&wrong) == 0, "%s: %d requests got another output", policy,
              atomic_load(&wrong));
    /* every model starts on disk: each one requested was loaded at least once */
    CHECK(st.completed == (uint64_t)n_req && st.loads >= (uint64_t)n_models);
    check_stats_add_up(&g, policy);
    struct engine_model_stats ms;
    CHECK(engine_model_stats(g.e, g.id[0], &ms) == 0 && ms.loads >= 1 &&
          ms.bytes_loaded >= ms.loads * swap_model_total_bytes(g.sm[0]) && ms.latency.n == ms.ok &&
          ms.latency.p50 <= ms.latency.p99 && ms.latency.p99 <= ms.latency.max &&
          ms.ttft.p50 <= ms.latency.max);
    /* the Prometheus histograms count the same observations, cumulatively */
    CHECK(ms.latency_hist.count == ms.ok && ms.ttft_hist.count == ms.ok &&
          ms.load_hist.count >= 1 && ms.load_hist.count <= ms.loads);
    CHECK(fabs(ms.latency_hist.sum - ms.latency.mean * (double)ms.ok) <= 1e-6 * (double)ms.ok);
    const struct engine_hist *hs[] = {&ms.latency_hist, &ms.ttft_hist, &ms.load_hist};
    for (int h = 0; h < 3; h++)
        for (int i = 0; i < ENGINE_HIST_LE; i++)
            CHECK(hs[h]->le[i] <= (i + 1 < ENGINE_HIST_LE ? hs[h]->le[i + 1] : hs[h]->count));
    rig_close(&g);
    free(jobs);
}

/* ---- token-level preemption ---- */

#define PRE_TOKENS 32 /* beyond the references' 16: compared with an unpreempted run */
#define PRE_HOLD 4    /* A's batch is held at this token until its pause is asked */

struct pjob {
    int fix, which, max_tokens;
    bool hold; /* on_token holds the runner at token PRE_HOLD until pre_asked */
    int n_tok;
    int32_t tok[PRE_TOKENS]; /* streamed */
    int status, n_out;
    int32_t out[PRE_TOKENS];
    atomic_int done_count;
};

static atomic_bool pre_asked; /* a SCHED_PREEMPT of pre_model was carried out */
static atomic_int pre_model;
static atomic_int pre_done;

static void pre_on_sched_op(void *ctx, const struct sched_carried *op)
{
    (void)ctx; /* the scheduler thread, under the engine lock: a flag and no more */
    if (op->op == SCHED_OP_PREEMPT && op->model == atomic_load(&pre_model))
        atomic_store(&pre_asked, true);
}

static void pre_on_token(struct engine_req *r, int32_t id, void *ctx)
{
    (void)r;
    struct pjob *j = ctx;
    if (j->n_tok < PRE_TOKENS)
        j->tok[j->n_tok] = id;
    j->n_tok++;
    while (j->hold && j->n_tok == PRE_HOLD && !atomic_load(&pre_asked))
        sched_yield(); /* test-only: the batch stays in flight until the pause is asked */
}

static void pre_on_done(struct engine_req *r, void *ctx)
{
    struct pjob *j = ctx;
    const int32_t *out = engine_req_output(r, &j->n_out);
    memcpy(j->out, out, sizeof(int32_t) * (size_t)(j->n_out < PRE_TOKENS ? j->n_out : PRE_TOKENS));
    j->status = engine_req_status(r);
    atomic_fetch_add(&j->done_count, 1);
    atomic_fetch_add(&pre_done, 1);
}

static void pre_submit(struct rig *g, struct pjob *j)
{
    const struct expect *x = &expects[j->fix][j->which];
    struct engine_request_params p = {.model = g->id[j->fix],
                                      .prompt = x->prompt,
                                      .n_prompt = x->n_prompt,
                                      .max_tokens = j->max_tokens,
                                      .sampling = {.temperature = 0, .top_p = 1},
                                      .on_token = pre_on_token,
                                      .on_done = pre_on_done,
                                      .ctx = j};
    CHECK_MSG(engine_submit(g->e, &p, NULL) == 0, "submit: %s", err_msg());
}

/* Two requests of model a (32 tokens each) in one batch, then, with the
 * batch held at its 4th token, one of model b, which waits past its
 * max_queue_wait for the devices (one model resident at a time): under
 * swapwise-preempt a's batch pauses at the next step boundary, its weights
 * leave (an unload for reason preempted) while its KV caches stay, b is
 * loaded and served, a is loaded again and its batch resumes. a's tokens
 * equal an unpreempted run's (and the references' first 16), b's its
 * reference; every request completes once. The order comes from the hold
 * and the scheduler's own action, never from timing. */
static void test_preempt(void)
{
    int a = 0, b = 1;
    int32_t ref[2][PRE_TOKENS];
    int ref_n[2];
    for (int run = 0; run < 2; run++) {
        struct rig g;
        rig_on_sched_op = pre_on_sched_op;
        rig_open_budget(&g, "swapwise-preempt", 1, 64, 2, 2, 0, 0);
        rig_on_sched_op = NULL;
        atomic_store(&pre_asked, false);
        atomic_store(&pre_model, g.id[a]);
        atomic_store(&pre_done, 0);
        CHECK(engine_set_priority(g.e, g.id[b], 0, 1e-3) == 0);
        struct pjob ja[2] = {{.fix = a, .which = 0, .max_tokens = PRE_TOKENS, .hold = run == 1},
                             {.fix = a, .which = 1, .max_tokens = PRE_TOKENS, .hold = run == 1}};
        struct pjob jb = {.fix = b, .which = 0, .max_tokens = 8};
        /* a's two, most often in one batch (submitted before the model is
         * loaded; the second may also join or follow it: no check on that) */
        pre_submit(&g, &ja[0]);
        pre_submit(&g, &ja[1]);
        if (run == 1) {
            while (ja[0].n_tok < 1)
                sched_yield(); /* its batch is running */
            pre_submit(&g, &jb);
        }
        engine_drain(g.e);
        if (run == 0) {
            pre_submit(&g, &jb);
            engine_drain(g.e);
        }
        for (int k = 0; k < 2; k++) {
            const struct expect *x = &expects[a][k];
            int n_ref = x->n_out < ja[k].n_out ? x->n_out : ja[k].n_out;
            CHECK_MSG(atomic_load(&ja[k].done_count) == 1 && ja[k].status == 0 &&
                          ja[k].n_tok == ja[k].n_out &&
                          memcmp(ja[k].out, x->out, sizeof(int32_t) * (size_t)n_ref) == 0,
                      "run %d: a's request %d: done %d, status %d, %d tokens", run, k,
                      atomic_load(&ja[k].done_count), ja[k].status, ja[k].n_out);
            if (run == 0) {
                ref_n[k] = ja[k].n_out;
                memcpy(ref[k], ja[k].out, sizeof(ref[k]));
            } else {
                CHECK_MSG(ja[k].n_out == ref_n[k] &&
                              memcmp(ja[k].out, ref[k], sizeof(int32_t) * (size_t)ref_n[k]) == 0,
                          "a's request %d: preempted output differs from the unpreempted one", k);
            }
        }
        CHECK_MSG(atomic_load(&jb.done_count) == 1 && jb.status == 0 && jb.n_out == 8 &&
                      memcmp(jb.out, expects[b][0].out, sizeof(int32_t) * 8) == 0,
                  "run %d: b: done %d, status %d, %d tokens", run, atomic_load(&jb.done_count),
                  jb.status, jb.n_out);
        CHECK(atomic_load(&pre_done) == 3);
        struct engine_model_stats ms;
        CHECK(engine_model_stats(g.e, g.id[a], &ms) == 0);
        if (run == 1)
            CHECK_MSG(ms.preemptions >= 1 && ms.preempt_unloads >= 1 && ms.loads >= 2 &&
                          ms.paused == 0,
                      "a: %llu pauses, %llu preempted unloads, %llu loads, %llu batches",
                      (unsigned long long)ms.preemptions, (unsigned long long)ms.preempt_unloads,
                      (unsigned long long)ms.loads, (unsigned long long)ms.batches);
        else
            CHECK(ms.preemptions == 0 && ms.preempt_unloads == 0);
        check_stats_add_up(&g, "preempt");
        rig_close(&g);
    }
}

/* Model 5's single request completes while models 0 and 1 keep a backlog:
 * the stream tops them up as requests complete (no clock involved), and the
 * lone one must be done before STREAM others were submitted. */
static void test_starvation(const char *policy)
{
    struct rig g;
    rig_open(&g, policy, 2, 100000, 8, 2);
    enum { STREAM = 20000, BACKLOG = 32 };
    struct job *jobs = calloc(STREAM, sizeof(*jobs));
    struct job lone;
    atomic_store(&wrong, 0);
    int base = atomic_load(&completed); /* the stream's completions: completed - base */
    /* warm up models 0 and 1 so they are resident and busy */
    int i = 0;
    for (; i < BACKLOG; i++) {
        job_init(&jobs[i], g.e, i % 2, i % 3, 4);
        struct engine_request_params p = job_params(&jobs[i], g.id[i % 2], (uint64_t)i);
        CHECK(submit_retry(g.e, &p, NULL) == 0);
    }
    job_init(&lone, g.e, 5, 0, 3);
    struct engine_request_params lp = job_params(&lone, g.id[5], 7);
    CHECK(submit_retry(g.e, &lp, NULL) == 0);
    while (atomic_load(&lone.done_count) == 0 && i < STREAM) {
        int seen = atomic_load(&completed);
        if (i - (seen - base) >= BACKLOG) {
            progress_wait(seen);
            continue;
        }
        job_init(&jobs[i], g.e, i % 2, i % 3, 4);
        struct engine_request_params p = job_params(&jobs[i], g.id[i % 2], (uint64_t)i);
        CHECK(submit_retry(g.e, &p, NULL) == 0);
        i++;
    }
    CHECK_MSG(atomic_load(&lone.done_count) == 1,
              "%s: the lone request starved (%d submitted "
              "around it)",
              policy, i);
    printf("starvation %-9s: lone request done after %.3f s with %d others submitted\n", policy,
           lone.t.t_done - lone.t.t_arrival, i);
    engine_drain(g.e);
    CHECK(atomic_load(&wrong) == 0 && lone.status == 0);
    rig_close(&g);
    free(jobs);
}

/* Free device memory in pieces: a load the policy starts (the free bytes
 * suffice for the model's weights and its batch) is refused as fragmented,
 * and the engine takes the explicit step (swap_compact on
 * sched_defrag_victim's choice, counted) and serves it. The test cuts the
 * free memory beside the one resident model into holes just smaller than
 * the incoming model's largest blob, with 64-byte pins between them. */
static void test_fragmentation(const char *policy)
{
    struct rig g;
    rig_open_budget(&g, policy, 0, 64, 1, 2, 4u << 20, 0);
    /* the resident model: the largest, so its memory holds the incoming
     * model's blobs once it leaves */
    const int b = g.big, w = not_big(&g, 0);
    CHECK(swap_load(g.mgr, g.sm[b], NULL) == 0 && swap_wait_loaded(g.mgr, g.sm[b]) == 0);
    size_t largest = 0;
    for (int s = 0; s < 2; s++) {
        const struct swap_shard *sh = swap_model_shard(g.sm[w], s);
        for (int k = 0; k < swap_shard_n_blobs(sh); k++)
            if (swap_shard_blob_bytes(sh, k) > largest)
                largest = swap_shard_blob_bytes(sh, k);
    }
    const size_t hole = (largest - 1) / 64 * 64;
    enum { MAX_PINS = 4096 };
    static struct dbuf *pins[2][MAX_PINS], *holes[MAX_PINS];
    int n_pins[2] = {0, 0};
    for (int d = 0; d < 2; d++) {
        int n_holes = 0;
        while (n_holes < MAX_PINS && device_alloc(g.devs[d], hole, &holes[n_holes]) == 0) {
            n_holes++;
            if (device_alloc(g.devs[d], 64, &pins[d][n_pins[d]]) < 0)
                break;
            n_pins[d]++;
        }
        for (int k = 0; k < n_holes; k++)
            device_free(holes[k]);
    }
    struct swap_room why;
    CHECK(swap_load(g.mgr, g.sm[w], &why) == ERR_BUSY);
    CHECK_MSG(why.kind == SWAP_ROOM_FRAGMENTED && why.free >= why.need,
              "%s: not the fragmentation this test needs: %s", policy, err_msg());
    struct job j;
    job_init(&j, g.e, w, 0, 1);
    struct engine_request_params p = job_params(&j, g.id[w], 1);
    CHECK(submit_retry(g.e, &p, NULL) == 0);
    double t0 = time_now();
    while (atomic_load(&j.done_count) == 0 && time_now() - t0 < 20)
        usleep(1000);
    if (atomic_load(&j.done_count) == 0) { /* it would wait forever: stop here */
        struct engine_stats st;
        struct swap_stats ss;
        engine_get_stats(g.e, &st);
        swap_get_stats(g.mgr, &ss);
        CHECK_MSG(false,
                  "%s: the engine never served the model in fragmented memory (%s; w %s, b "
                  "%s; %llu compactions, %llu loads)",
                  policy, err_msg(), residency_name(swap_residency(g.mgr, g.sm[w])),
                  residency_name(swap_residency(g.mgr, g.sm[b])),
                  (unsigned long long)ss.compactions, (unsigned long long)st.loads);
        exit(test_finish());
    }
    CHECK_MSG(j.status == 0, "%s: %s", policy, j.error);
    struct engine_stats st;
    struct swap_stats ss;
    engine_get_stats(g.e, &st);
    swap_get_stats(g.mgr, &ss);
    CHECK_MSG(ss.compactions == 1 && st.evictions == 1 && st.loads == 1,
              "%s: %llu compactions, %llu evictions, %llu loads", policy,
              (unsigned long long)ss.compactions, (unsigned long long)st.evictions,
              (unsigned long long)st.loads);
    CHECK(swap_residency(g.mgr, g.sm[b]) == RES_IN_HOST); /* the only model that could go */
    CHECK(swap_residency(g.mgr, g.sm[w]) == RES_ON_DEVICE);
    CHECK(atomic_load(&wrong) == 0);
    engine_drain(g.e);
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < n_pins[d]; k++)
            device_free(pins[d][k]);
    rig_close(&g);
}

/* The engine lock is never held across a wait on the swap manager: while
 * the scheduler's load of model 0 is refused because model 0 is still
 * copying back to the host (a slowed link: about a second), submissions are
 * taken at once, and the load happens when the copy back ends. */
static void test_no_wait_under_lock(const char *policy)
{
    const int x = 0, y = 1, z = 2;
    struct rig g;
    rig_open_budget(&g, policy, 0, 64, 0, 2, 64u << 20,
                    host_bytes(x) + host_bytes(y) + host_bytes(z) / 2);
    /* x, y, z resident; z's host copy pushed x's out: x's offload copies back */
    for (int i = 0; i < 3; i++) {
        struct swap_model *m = g.sm[i == 0 ? x : i == 1 ? y : z];
        CHECK(swap_load(g.mgr, m, NULL) == 0 && swap_wait_loaded(g.mgr, m) == 0);
    }
    for (int d = 0; d < 2; d++)
        CHECK(device_cpu_set_link(g.devs[d], 150e3) == 0);
    CHECK(swap_offload(g.mgr, g.sm[x], false) == 0);
    CHECK(swap_residency(g.mgr, g.sm[x]) == RES_OFFLOADING);
    struct job jx, jz;
    job_init(&jx, g.e, x, 0, 3);
    job_init(&jz, g.e, z, 1, 3);
    struct engine_request_params px = job_params(&jx, g.id[x], 1);
    struct engine_request_params pz = job_params(&jz, g.id[z], 2);
    CHECK(submit_retry(g.e, &px, NULL) == 0);
    usleep(50000); /* the scheduler meets the copy back */
    double t0 = time_now();
    CHECK(submit_retry(g.e, &pz, NULL) == 0);
    double dt = time_now() - t0;
    /* the submission returned while the copy back still runs: it did not
     * wait for it (the link makes that copy last about a second) */
    CHECK_MSG(swap_residency(g.mgr, g.sm[x]) == RES_OFFLOADING,
              "%s: engine_submit returned only after the copy back", policy);
    swap_wait_idle(g.mgr, g.sm[x]);
    for (int d = 0; d < 2; d++)
        CHECK(device_cpu_set_link(g.devs[d], 0) == 0);
    engine_drain(g.e);
    CHECK(atomic_load(&jx.done_count) == 1 && atomic_load(&jz.done_count) == 1);
    CHECK(jx.status == 0 && jz.status == 0 && atomic_load(&wrong) == 0);
    printf("no wait under lock %-9s: submit took %.1f ms during a copy back\n", policy, dt * 1e3);
    rig_close(&g);
}

/* Without wait_for_unpin, a request for a model that cannot be loaded
 * beside the pinned ones fails at once with ERR_BUSY saying so, instead of
 * waiting for an admin; once unpinned, the same request runs. */
static void test_pinned_block(void)
{
    struct rig g;
    rig_wait_for_unpin = false;
    rig_open(&g, "swapwise", 0, 64, 1, 1);
    rig_wait_for_unpin = true;
    atomic_store(&wrong, 0);
    atomic_store(&bad_thread, 0);
    gate_close(&g);
    int t = not_big(&g, 0);
    struct job a, b;
    struct engine_req *ha, *hb;
    job_init(&a, g.e, t, 0, 4);
    struct engine_request_params p = job_params(&a, g.id[t], 1);
    CHECK(engine_submit(g.e, &p, &ha) == 0);
    CHECK(engine_req_wait(ha) == ERR_BUSY && a.n_out == 0);
    CHECK_MSG(strstr(engine_req_error(ha), "pinned") && strstr(engine_req_error(ha), names[t]),
              "%s", engine_req_error(ha));
    engine_req_release(ha);
    gate_open(&g);
    job_init(&b, g.e, t, 0, 4);
    p = job_params(&b, g.id[t], 1);
    CHECK(engine_submit(g.e, &p, &hb) == 0);
    CHECK_MSG(engine_req_wait(hb) == 0, "%s", engine_req_error(hb));
    engine_req_release(hb);
    engine_drain(g.e);
    CHECK(atomic_load(&wrong) == 0 && atomic_load(&bad_thread) == 0);
    rig_close(&g);
}

/* A partly resident model (its last layers given up with swap_trim on one
 * device, as a trimming load's victim gives them up) through the engine:
 * its stats say "partial" with the kept blobs ready; an admin load and a
 * request's load each copy only the missing bytes (bytes_loaded) and the
 * answers are the reference's; an admin unload, and a removal, take what
 * it kept. */
static uint64_t trim_one(struct rig *g, int t, int device)
{
    uint64_t got = 0;
    engine_drain(g->e); /* its batch has ended, not only its requests: it is idle */
    CHECK_MSG(swap_trim(g->mgr, g->sm[t], device, 1, &got) == 0 && got > 0, "%s", err_msg());
    swap_wait_idle(g->mgr, g->sm[t]);
    return swap_model_missing_bytes(g->mgr, g->sm[t]);
}

static void test_partial_residency(void)
{
    struct rig g;
    rig_open(&g, "swapwise", 0, 64, 8, 2);
    const int t = 0, id = g.id[t];
    struct engine_model_stats ms;
    CHECK(engine_load_model(g.e, id) == 0 && swap_wait_loaded(g.mgr, g.sm[t]) == 0);
    const uint64_t missing = trim_one(&g, t, 1);
    CHECK(missing > 0 && missing < swap_model_total_bytes(g.sm[t]));
    CHECK(engine_model_stats(g.e, id, &ms) == 0 && ms.residency == RES_PARTIAL);
    CHECK(ms.shards[0].blobs_ready == ms.shards[0].n_blobs &&
          ms.shards[1].blobs_ready == ms.shards[1].n_blobs - 1);
    const uint64_t loaded = ms.bytes_loaded;
    /* the admin's load brings the missing layer only */
    CHECK_MSG(engine_load_model(g.e, id) == 0, "%s", err_msg());
    CHECK(swap_wait_loaded(g.mgr, g.sm[t]) == 0);
    CHECK(engine_model_stats(g.e, id, &ms) == 0 && ms.residency == RES_ON_DEVICE && ms.loads == 2 &&
          ms.bytes_loaded - loaded == missing);
    answer_one(&g, t, id, 1, 1, 12);
    /* a request's load (the policy's SCHED_LOAD): the same */
    const uint64_t missing0 = trim_one(&g, t, 0);
    CHECK(engine_model_stats(g.e, id, &ms) == 0 && ms.residency == RES_PARTIAL);
    const uint64_t loaded2 = ms.bytes_loaded;
    answer_one(&g, t, id, 2, 2, 12);
    CHECK(engine_model_stats(g.e, id, &ms) == 0 && ms.residency == RES_ON_DEVICE && ms.loads == 3 &&
          ms.bytes_loaded - loaded2 == missing0 && ms.ok == 2);
    /* the admin's unload takes what it kept */
    trim_one(&g, t, 1);
    CHECK_MSG(engine_unload_model(g.e, id) == 0, "%s", err_msg());
    swap_wait_idle(g.mgr, g.sm[t]);
    CHECK(engine_model_stats(g.e, id, &ms) == 0 && ms.residency == RES_IN_HOST && ms.unloads == 1 &&
          ms.shards[0].blobs_ready == 0 && ms.shards[1].blobs_ready == 0);
    CHECK(device_used(g.devs[0]) == 0 && device_used(g.devs[1]) == 0);
    /* and so does its removal, counted as one */
    CHECK(engine_load_model(g.e, id) == 0 && swap_wait_loaded(g.mgr, g.sm[t]) == 0);
    trim_one(&g, t, 0);
    struct engine_model_stats last;
    CHECK(engine_remove_model(g.e, id, &last) == 0 && last.removal_unloads == 1);
    CHECK(device_used(g.devs[0]) == 0 && device_used(g.devs[1]) == 0);
    CHECK(atomic_load(&wrong) == 0);
    rig_close(&g);
}

/* SCHED_OP_TRIMs the policy carried out, and their bytes (the scheduler
 * thread, under the engine lock: counters and no more). */
static atomic_int trims_seen, trims_empty;

static void trim_on_sched_op(void *ctx, const struct sched_carried *op)
{
    (void)ctx;
    if (op->op == SCHED_OP_TRIM) {
        atomic_fetch_add(&trims_seen, 1);
        atomic_fetch_add(&trims_empty, op->bytes == 0);
    }
}

/* Partial residency under swapwise-partial (its loads trim their
 * victims): two models of one size, TP=2 over two devices with room for both
 * and their batches but half a layer, alternate requests one at a time;
 * each load trims the other model (its last layer, its reserve) instead of
 * evicting it, so later loads copy less than whole models; every answer is
 * the reference's. */
/* What on_move told, by kind (under the engine lock: no lock of ours). */
static struct {
    uint64_t n[ENGINE_MOVE_UNLOADED + 1], bytes[ENGINE_MOVE_UNLOADED + 1];
    int bad; /* a move without its model, or a trim or eviction without the model it was for */
} moves;

static void record_move(void *ctx, const struct engine_move *mv)
{
    (void)ctx;
    moves.n[mv->kind]++;
    moves.bytes[mv->kind] += mv->bytes;
    bool for_other = mv->for_model && strcmp(mv->for_model, mv->model) != 0;
    moves.bad +=
        !mv->model ||
        ((mv->kind == ENGINE_MOVE_TRIMMED || mv->kind == ENGINE_MOVE_EVICTED) && !for_other) ||
        (mv->kind == ENGINE_MOVE_TRIMMED) != (mv->device >= 0);
}

static void test_trimming_loads(void)
{
    const int a = 0, b = 5, max_tokens = 6; /* pre_ln_f32, decoder_prefix_f32 */
    struct rig probe;
    rig_open(&probe, "swapwise", 0, 64, 1, 2);
    uint64_t need = 0, layer = UINT64_MAX;
    for (int d = 0; d < 2; d++) {
        uint64_t n = 0;
        for (int k = 0; k < 2; k++) {
            const int t = k ? b : a;
            int longest = 0;
            for (int w = 0; w < 3; w++)
                longest = expects[t][w].n_prompt > longest ? expects[t][w].n_prompt : longest;
            /* its weights and the engine's reserve for these requests */
            struct model_exec_shape shape = engine_batch_shape(
                swap_model_info(probe.sm[t])->max_pos, 1, longest, longest + max_tokens, true);
            n += swap_model_device_bytes(probe.sm[t], d) +
                 group_exec_bytes(probe.sm[t], probe.mgr, &shape, d);
            const struct swap_shard *sh = swap_model_shard(probe.sm[t], d);
            uint64_t last = swap_shard_blob_bytes(sh, swap_shard_n_blobs(sh) - 1);
            layer = last < layer ? last : layer;
        }
        need = n > need ? n : need;
    }
    rig_close(&probe);
    need -= layer / 2;
    atomic_store(&trims_seen, 0);
    atomic_store(&trims_empty, 0);
    rig_on_sched_op = trim_on_sched_op;
    rig_on_move = record_move;
    memset(&moves, 0, sizeof(moves));
    struct rig g;
    rig_open_budget(&g, "swapwise-partial", 0, 64, 1, 2, need, 0);
    rig_on_sched_op = NULL;
    rig_on_move = NULL;
    for (int i = 0; i < 12; i++) {
        const int t = i % 2 ? b : a;
        struct job j;
        job_init(&j, g.e, t, i % 3, max_tokens);
        struct engine_request_params p = job_params(&j, g.id[t], (uint64_t)i + 1);
        struct engine_req *h;
        CHECK_MSG(engine_submit(g.e, &p, &h) == 0, "%s", err_msg());
        CHECK_MSG(engine_req_wait(h) == 0 && j.n_out == max_tokens, "request %d (%s): %s", i,
                  names[t], j.error);
        engine_req_release(h);
    }
    struct engine_model_stats sa, sb;
    CHECK(engine_model_stats(g.e, g.id[a], &sa) == 0 && engine_model_stats(g.e, g.id[b], &sb) == 0);
    const uint64_t whole =
        sa.loads * swap_model_total_bytes(g.sm[a]) + sb.loads * swap_model_total_bytes(g.sm[b]);
    CHECK_MSG(atomic_load(&trims_seen) > 0 && atomic_load(&trims_empty) == 0 &&
                  sa.trims + sb.trims > 0 && sa.bytes_trimmed + sb.bytes_trimmed > 0,
              "%d trims carried out (%d empty), %llu + %llu counted", atomic_load(&trims_seen),
              atomic_load(&trims_empty), (unsigned long long)sa.trims,
              (unsigned long long)sb.trims);
    CHECK_MSG(sa.bytes_loaded + sb.bytes_loaded < whole,
              "%llu bytes loaded over %llu + %llu loads; whole models would be %llu",
              (unsigned long long)(sa.bytes_loaded + sb.bytes_loaded), (unsigned long long)sa.loads,
              (unsigned long long)sb.loads, (unsigned long long)whole);
    CHECK(sa.ok + sb.ok == 12 && atomic_load(&wrong) == 0);
    /* on_move told of every load, trim and eviction the statistics count,
     * with the bytes they count (the last load's end is noticed by the
     * statistics read above at the latest) */
    CHECK_MSG(moves.n[ENGINE_MOVE_LOADED] == sa.loads + sb.loads &&
                  moves.bytes[ENGINE_MOVE_LOADED] == sa.bytes_loaded + sb.bytes_loaded,
              "on_move: %llu loads of %llu bytes; counted %llu of %llu",
              (unsigned long long)moves.n[ENGINE_MOVE_LOADED],
              (unsigned long long)moves.bytes[ENGINE_MOVE_LOADED],
              (unsigned long long)(sa.loads + sb.loads),
              (unsigned long long)(sa.bytes_loaded + sb.bytes_loaded));
    CHECK_MSG(moves.n[ENGINE_MOVE_TRIMMED] == sa.trims + sb.trims &&
                  moves.bytes[ENGINE_MOVE_TRIMMED] == sa.bytes_trimmed + sb.bytes_trimmed,
              "on_move: %llu trims of %llu bytes; counted %llu of %llu",
              (unsigned long long)moves.n[ENGINE_MOVE_TRIMMED],
              (unsigned long long)moves.bytes[ENGINE_MOVE_TRIMMED],
              (unsigned long long)(sa.trims + sb.trims),
              (unsigned long long)(sa.bytes_trimmed + sb.bytes_trimmed));
    CHECK_MSG(moves.n[ENGINE_MOVE_EVICTED] == sa.evictions + sb.evictions &&
                  moves.n[ENGINE_MOVE_LOAD_FAILED] == 0 && moves.bad == 0,
              "on_move: %llu evictions (counted %llu), %llu failed loads, %d malformed",
              (unsigned long long)moves.n[ENGINE_MOVE_EVICTED],
              (unsigned long long)(sa.evictions + sb.evictions),
              (unsigned long long)moves.n[ENGINE_MOVE_LOAD_FAILED], moves.bad);
    rig_close(&g);
}

/* keep_alive: refused when negative; 0 unloads the model as soon as its
 * batch has ended (counted as an idle unload, not an eviction), however
 * often its state is read meanwhile; INFINITY keeps it. */
static void test_keep_alive(const char *policy)
{
    struct rig g;
    rig_open(&g, policy, 0, 64, 8, 2);
    int t = not_big(&g, 0), id = g.id[t];
    struct engine_model_stats ms;
    CHECK(engine_model_stats(g.e, id, &ms) == 0 && isnan(ms.keep_alive));
    CHECK(engine_set_keep_alive(g.e, id, -1) == ERR_INVALID && strstr(err_msg(), "keep_alive"));
    CHECK(engine_set_keep_alive(g.e, 9999, 1) == ERR_NOT_FOUND);
    CHECK(engine_set_keep_alive(g.e, id, 0) == 0);
    /* the order controls: checked, kept, shown */
    CHECK(engine_set_priority(g.e, id, ENGINE_PRIORITY_MAX + 1, 0) == ERR_INVALID &&
          strstr(err_msg(), "priority"));
    CHECK(engine_set_priority(g.e, id, 0, -1) == ERR_INVALID &&
          strstr(err_msg(), "max_queue_wait"));
    CHECK(engine_set_priority(g.e, id, 0, NAN) == ERR_INVALID);
    CHECK(engine_set_priority(g.e, 9999, 0, 0) == ERR_NOT_FOUND);
    CHECK(engine_set_priority(g.e, id, -3, 2.5) == 0);
    CHECK(engine_model_stats(g.e, id, &ms) == 0 && ms.priority == -3 && ms.max_queue_wait == 2.5 &&
          ms.min_resident == 0);
    CHECK(engine_set_min_resident(g.e, id, -1) == ERR_INVALID && strstr(err_msg(), "min_resident"));
    CHECK(engine_set_min_resident(g.e, id, INFINITY) == ERR_INVALID);
    CHECK(engine_set_min_resident(g.e, 9999, 1) == ERR_NOT_FOUND);
    CHECK(engine_set_min_resident(g.e, id, 4) == 0);
    CHECK(engine_model_stats(g.e, id, &ms) == 0 && ms.min_resident == 4);
    CHECK(engine_set_min_resident(g.e, id, 0) == 0);
    struct job j;
    job_init(&j, g.e, t, 1, 4);
    struct engine_request_params p = job_params(&j, id, 1);
    struct engine_req *h;
    CHECK(engine_submit(g.e, &p, &h) == 0);
    CHECK(engine_req_wait(h) == 0 && j.n_out == 4);
    engine_req_release(h);
    /* the unload follows the batch's end: read until it shows (20 s at most) */
    for (int i = 0; i < 2000; i++) {
        CHECK(engine_model_stats(g.e, id, &ms) == 0);
        if (ms.idle_unloads > 0)
            break;
        usleep(10000);
    }
    swap_wait_idle(g.mgr, g.sm[t]);
    CHECK(engine_model_stats(g.e, id, &ms) == 0);
    CHECK_MSG(ms.idle_unloads == 1 && ms.evictions == 0 && ms.unloads == 0 &&
                  ms.residency != RES_ON_DEVICE && ms.keep_alive == 0 && ms.ok == 1,
              "%s: %llu idle unloads, %llu evictions, residency %d", policy,
              (unsigned long long)ms.idle_unloads, (unsigned long long)ms.evictions,
              (int)ms.residency);
    /* forever: loaded again for the next request, and it stays */
    CHECK(engine_set_keep_alive(g.e, id, INFINITY) == 0);
    job_init(&j, g.e, t, 1, 4);
    p = job_params(&j, id, 2);
    CHECK(engine_submit(g.e, &p, &h) == 0);
    CHECK(engine_req_wait(h) == 0);
    engine_req_release(h);
    engine_drain(g.e);
    CHECK(engine_model_stats(g.e, id, &ms) == 0 && ms.loads == 2 && ms.idle_unloads == 1 &&
          ms.residency == RES_ON_DEVICE && isinf(ms.keep_alive));
    rig_close(&g);
}

/* ---- the per-model controls, on a live engine ----
 * What tests/test_sched.c checks as the policy's decisions on hand-made
 * views, here as what the engine does: the gate holds every other model's
 * requests in their queues until the test opens it, so the order in which
 * they are served is decided by the controls alone, never by timing. */

/* One request of fixture m, submitted; *h is the caller's reference. */
static void submit_one(struct rig *g, struct job *j, int m, int which, struct engine_req **h)
{
    job_init(j, g->e, m, which, 3);
    struct engine_request_params p = job_params(j, g->id[m], (uint64_t)m + 1);
    CHECK_MSG(engine_submit(g->e, &p, h) == 0, "%s", err_msg());
}

/* priority: with room for one model, held off the devices by the gate, a
 * request for lo (priority 0) and then one for hi (priority 5) wait; once
 * the gate opens hi is loaded and served first (an earlier batch), although
 * lo's request is older. */
static void test_priority(const char *policy)
{
    struct rig g;
    rig_open(&g, policy, 0, 64, 8, 1);
    atomic_store(&wrong, 0);
    const int lo = not_big(&g, 0), hi = not_big(&g, 1);
    CHECK(engine_set_priority(g.e, g.id[hi], 5, 0) == 0);
    gate_close(&g);
    struct job jl, jh;
    struct engine_req *hl, *hh;
    submit_one(&g, &jl, lo, 0, &hl);
    submit_one(&g, &jh, hi, 1, &hh);
    gate_open(&g);
    CHECK(engine_req_wait(hl) == 0 && engine_req_wait(hh) == 0);
    CHECK_MSG(jh.t.batch_id > 0 && jh.t.batch_id < jl.t.batch_id && jh.t.t_done <= jl.t.t_start,
              "%s: the priority-5 model's request ran in batch %llu (done at %.6f), the older "
              "priority-0 one's in batch %llu (started at %.6f)",
              policy, (unsigned long long)jh.t.batch_id, jh.t.t_done,
              (unsigned long long)jl.t.batch_id, jl.t.t_start);
    engine_req_release(hl);
    engine_req_release(hh);
    engine_drain(g.e);
    CHECK(atomic_load(&wrong) == 0);
    rig_close(&g);
}

/* max_queue_wait: a request of a priority-0 model that has waited past its
 * model's max_queue_wait goes before an older request of a priority-5
 * model (which has no bound): anti-starvation over both priority and age.
 * The test waits 10x the bound before opening the gate, so however slow
 * the machine the bound has passed; only the order is checked. */
static void test_max_queue_wait(const char *policy)
{
    struct rig g;
    rig_open(&g, policy, 0, 64, 8, 1);
    atomic_store(&wrong, 0);
    const int lo = not_big(&g, 0), hi = not_big(&g, 1);
    const double bound = 0.02;
    CHECK(engine_set_priority(g.e, g.id[hi], 5, 0) == 0);
    CHECK(engine_set_priority(g.e, g.id[lo], 0, bound) == 0);
    gate_close(&g);
    struct job jl, jh;
    struct engine_req *hl, *hh;
    submit_one(&g, &jh, hi, 1, &hh);
    submit_one(&g, &jl, lo, 0, &hl);
    usleep((useconds_t)(10 * bound * 1e6));
    gate_open(&g);
    CHECK(engine_req_wait(hl) == 0 && engine_req_wait(hh) == 0);
    CHECK_MSG(jl.t.batch_id > 0 && jl.t.batch_id < jh.t.batch_id && jl.t.t_done <= jh.t.t_start,
              "%s: the request past its max_queue_wait ran in batch %llu, the older priority-5 "
              "one in batch %llu",
              policy, (unsigned long long)jl.t.batch_id, (unsigned long long)jh.t.batch_id);
    CHECK(jh.t.t_arrival < jl.t.t_arrival); /* the bound, not age, put it first */
    engine_req_release(hl);
    engine_req_release(hh);
    engine_drain(g.e);
    CHECK(atomic_load(&wrong) == 0);
    rig_close(&g);
}

/* The fixtures by their device bytes, largest first. */
static void by_size(const struct rig *g, int *order)
{
    uint64_t bytes[N_MODELS];
    for (int m = 0; m < N_MODELS; m++) {
        uint64_t b0 = swap_model_device_bytes(g->sm[m], 0),
                 b1 = swap_model_device_bytes(g->sm[m], 1);
        bytes[m] = b0 > b1 ? b0 : b1;
        order[m] = m;
    }
    for (int i = 1; i < N_MODELS; i++)
        for (int k = i; k > 0 && bytes[order[k]] > bytes[order[k - 1]]; k--) {
            int t = order[k];
            order[k] = order[k - 1];
            order[k - 1] = t;
        }
}

static bool resident(struct rig *g, int m)
{
    swap_wait_idle(g->mgr, g->sm[m]);
    return swap_residency(g->mgr, g->sm[m]) == RES_ON_DEVICE;
}

/* min_resident: x (the largest fixture, loaded first, so least recently
 * used) and y (the second) are resident and idle, on devices where a
 * request for z (the third) needs one of them to go: the budget is x, y and
 * z with z's batch of one, less half of z. x, within its min_resident of an
 * hour, stays and y goes, where without it x would. Then, with every
 * resident model within its min_resident (x and z), a request for y still
 * gets its room: the last pass takes young ones too (the engine's rule: not
 * evicted for another model while younger "unless nothing else makes
 * room"), rather than leaving the request waiting. */
static void test_min_resident(const char *policy)
{
    struct rig g;
    rig_open(&g, policy, 0, 64, 1, 2); /* to measure */
    int order[N_MODELS];
    by_size(&g, order);
    const int x = order[0], y = order[1], z = order[2];
    const int n = expects[z][0].n_prompt;
    struct model_exec_shape one =
        engine_batch_shape(swap_model_info(g.sm[z])->max_pos, 1, n, n + 3, true);
    uint64_t budget = 0;
    for (int d = 0; d < 2; d++) {
        uint64_t wz = swap_model_device_bytes(g.sm[z], d);
        uint64_t need = swap_model_device_bytes(g.sm[x], d) + swap_model_device_bytes(g.sm[y], d) +
                        wz + group_exec_bytes(g.sm[z], g.mgr, &one, d) - wz / 2;
        budget = need > budget ? need : budget;
    }
    rig_close(&g);
    rig_open_budget(&g, policy, 0, 64, 1, 2, budget, 0);
    atomic_store(&wrong, 0);
    CHECK(engine_set_min_resident(g.e, g.id[x], 3600) == 0);
    CHECK_MSG(engine_load_model(g.e, g.id[x]) == 0, "%s", err_msg());
    CHECK(swap_wait_loaded(g.mgr, g.sm[x]) == 0);
    CHECK_MSG(engine_load_model(g.e, g.id[y]) == 0, "%s", err_msg());
    CHECK(swap_wait_loaded(g.mgr, g.sm[y]) == 0);
    struct job jz;
    struct engine_req *h;
    submit_one(&g, &jz, z, 0, &h);
    CHECK_MSG(engine_req_wait(h) == 0, "%s: %s", policy, jz.error);
    engine_req_release(h);
    engine_drain(g.e);
    struct engine_model_stats sx, sy, sz;
    CHECK(engine_model_stats(g.e, g.id[x], &sx) == 0 && engine_model_stats(g.e, g.id[y], &sy) == 0);
    CHECK_MSG(resident(&g, x) && !resident(&g, y) && resident(&g, z) && sx.evictions == 0 &&
                  sy.evictions == 1,
              "%s: after a request for %s, %s (min_resident 1 h, least recently used) is %s "
              "with %llu evictions, %s is %s with %llu",
              policy, names[z], names[x], residency_name(swap_residency(g.mgr, g.sm[x])),
              (unsigned long long)sx.evictions, names[y],
              residency_name(swap_residency(g.mgr, g.sm[y])), (unsigned long long)sy.evictions);
    /* nothing else makes room: young ones go */
    CHECK(engine_set_min_resident(g.e, g.id[z], 3600) == 0);
    struct job jy;
    submit_one(&g, &jy, y, 1, &h);
    /* bounded (a request left waiting would hang the test): 60 s, where it
     * takes milliseconds */
    for (double t0 = time_now(); !engine_req_done(h) && time_now() - t0 < 60;)
        usleep(1000);
    if (!engine_req_done(h)) {
        CHECK_MSG(false,
                  "%s: the request for %s still waits with every resident model within "
                  "its min_resident",
                  policy, names[y]);
        exit(test_finish());
    }
    CHECK_MSG(engine_req_wait(h) == 0, "%s: %s", policy, jy.error);
    engine_req_release(h);
    engine_drain(g.e);
    CHECK(engine_model_stats(g.e, g.id[x], &sx) == 0 && engine_model_stats(g.e, g.id[z], &sz) == 0);
    CHECK_MSG(resident(&g, y) && resident(&g, x) + resident(&g, z) <= 1 &&
                  sx.evictions + sz.evictions >= 1,
              "%s: with every resident model young, %s is %s, %s %s", policy, names[x],
              residency_name(swap_residency(g.mgr, g.sm[x])), names[z],
              residency_name(swap_residency(g.mgr, g.sm[z])));
    CHECK(atomic_load(&wrong) == 0);
    rig_close(&g);
}

/* The cases, in the order they run; `ctest -R engine_sched.pinned_block` runs one. */
TEST(pinned_block)
{
    test_pinned_block();
}

TEST(partial_residency)
{
    test_partial_residency();
}

TEST(trimming_loads)
{
    test_trimming_loads();
}

TEST(fragmentation_swapwise)
{
    test_fragmentation("swapwise");
}

TEST(fragmentation_computron)
{
    test_fragmentation("computron");
}

TEST(no_wait_under_lock_swapwise)
{
    test_no_wait_under_lock("swapwise");
}

TEST(no_wait_under_lock_computron)
{
    test_no_wait_under_lock("computron");
}

TEST(churn_swapwise)
{
    test_churn("swapwise", 10000);
}

TEST(churn_computron)
{
    test_churn("computron", 10000);
}

TEST(churn_lru)
{
    test_churn("lru", 10000);
}

TEST(preempt)
{
    test_preempt();
}

TEST(churn_preempt)
{
    churn_max_queue_wait = 1e-3; /* waiting models pause others' batches often */
    test_churn("swapwise-preempt", 3000);
    churn_max_queue_wait = 0;
}

TEST(churn_fifo)
{
    test_churn("fifo", 10000);
}

TEST(keep_alive_swapwise)
{
    test_keep_alive("swapwise");
}

TEST(keep_alive_lru)
{
    test_keep_alive("lru");
}

TEST(starvation_swapwise)
{
    test_starvation("swapwise");
}

TEST(starvation_computron)
{
    test_starvation("computron");
}

TEST(priority_swapwise)
{
    test_priority("swapwise");
}

TEST(max_queue_wait_swapwise)
{
    test_max_queue_wait("swapwise");
}

TEST(min_resident_swapwise)
{
    test_min_resident("swapwise");
}

TEST(priority_lru)
{
    test_priority("lru");
}

TEST(max_queue_wait_lru)
{
    test_max_queue_wait("lru");
}

TEST(min_resident_lru)
{
    test_min_resident("lru");
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, rig_setup);
}
