/* The engine's requests (request.c, queue.c) end to end on the fixture
 * models (tests/engine_rig.h):
 * - a full queue rejects; bad requests are refused;
 * - streaming: tokens arrive in order on an engine thread and equal the
 *   output and the reference;
 * - cancel: a queued request leaves its queue, a running one its batch at
 *   the next step, and a waiting request joins the freed slot; a request
 *   stopped at its first token ends ok with it;
 * - deadlines: a queued request and a running one time out. */
#include "engine_rig.h"

/* A full queue is an immediate rejection, and bad requests are refused. */
static void test_rejections(void)
{
    struct rig g;
    rig_open(&g, "swapwise", 0, 4, 8, 1);
    /* the engine cannot run a policy that reads the future */
    struct engine *none = NULL;
    CHECK(engine_create(g.mgr, g.w, &(struct engine_config){.policy = "clairvoyant"}, &none) ==
              ERR_INVALID &&
          none == NULL && strstr(err_msg(), "future arrivals"));
    gate_close(&g);
    int t = not_big(&g, 0);
    struct job jobs[6];
    for (int i = 0; i < 6; i++) {
        job_init(&jobs[i], g.e, t, 0, 12);
        struct engine_request_params p = job_params(&jobs[i], g.id[t], 1);
        int rc = engine_submit(g.e, &p, NULL);
        CHECK_MSG(rc == (i < 4 ? 0 : ERR_BUSY), "request %d: %d (%s)", i, rc, err_msg());
    }
    struct engine_model_stats ms;
    CHECK(engine_model_stats(g.e, g.id[t], &ms) == 0 && ms.queue_len == 4 && ms.rejected == 2 &&
          ms.submitted == 4 && ms.residency != RES_ON_DEVICE);
    struct job bad;
    struct engine_request_params p;
    job_init(&bad, g.e, 0, 0, 1);
    p = job_params(&bad, 99, 1); /* only 6 models */
    CHECK(engine_submit(g.e, &p, NULL) == ERR_NOT_FOUND && strstr(err_msg(), "99"));
    p.model_name = "nonesuch";
    CHECK(engine_submit(g.e, &p, NULL) == ERR_NOT_FOUND && strstr(err_msg(), "nonesuch"));
    p = job_params(&bad, 0, 1);
    p.max_tokens = 0;
    CHECK(engine_submit(g.e, &p, NULL) == ERR_INVALID);
    p = job_params(&bad, 0, 1);
    p.sampling.top_p = 2;
    CHECK(engine_submit(g.e, &p, NULL) == ERR_INVALID);
    p = job_params(&bad, 0, 1);
    p.max_tokens = 64;
    CHECK(engine_submit(g.e, &p, NULL) == ERR_INVALID && strstr(err_msg(), "positions"));
    p.max_tokens = 0x7fffffff; /* refused before anything is allocated for it */
    CHECK(engine_submit(g.e, &p, NULL) == ERR_INVALID && strstr(err_msg(), "positions"));
    int32_t big = 1 << 20;
    p = job_params(&bad, 0, 1);
    p.prompt = &big;
    p.n_prompt = 1;
    CHECK(engine_submit(g.e, &p, NULL) == ERR_INVALID && strstr(err_msg(), "vocabulary"));
    CHECK(engine_unload_model(g.e, g.id[g.big]) == ERR_BUSY && strstr(err_msg(), "pinned"));
    gate_open(&g);
    engine_drain(g.e);
    for (int i = 0; i < 4; i++)
        CHECK(atomic_load(&jobs[i].done_count) == 1 && jobs[i].status == 0);
    for (int i = 4; i < 6; i++)
        CHECK(atomic_load(&jobs[i].done_count) == 0);
    check_stats_add_up(&g, "rejections");
    rig_close(&g);
}

/* Streamed tokens arrive in order on an engine thread and are the output;
 * a streamed request and a plain one give the reference. */
static void test_streaming(void)
{
    struct rig g;
    rig_open(&g, "swapwise", 0, 64, 8, 2);
    atomic_store(&wrong, 0);
    atomic_store(&bad_thread, 0);
    struct job jobs[N_MODELS][3][2];
    struct engine_req *h[N_MODELS][3][2];
    for (int m = 0; m < N_MODELS; m++)
        for (int w = 0; w < 3; w++)
            for (int s = 0; s < 2; s++) {
                job_init(&jobs[m][w][s], g.e, m, w, 12);
                struct engine_request_params p = job_params(&jobs[m][w][s], g.id[m], 5);
                p.model = -1;
                p.model_name = names[m];
                if (!s) { /* the plain one: nothing streamed */
                    p.on_token = NULL;
                    jobs[m][w][s].plain = true;
                }
                CHECK(submit_retry(g.e, &p, &h[m][w][s]) == 0);
            }
    for (int m = 0; m < N_MODELS; m++)
        for (int w = 0; w < 3; w++)
            for (int s = 0; s < 2; s++) {
                struct engine_req *r = h[m][w][s];
                CHECK(engine_req_wait(r) == 0 && engine_req_done(r));
                int n;
                const int32_t *out = engine_req_output(r, &n);
                CHECK(n == 12 && memcmp(out, expects[m][w].out, sizeof(int32_t) * 12) == 0);
                CHECK(engine_req_model(r) == g.id[m] && engine_req_ctx(r) == &jobs[m][w][s]);
                CHECK(jobs[m][w][s].n_streamed == (s ? 12 : 0));
                struct engine_req_timings tm;
                engine_req_timings(r, &tm);
                CHECK(tm.t_arrival > 0 && tm.t_arrival <= tm.t_start &&
                      tm.t_start <= tm.t_first_token && tm.t_first_token <= tm.t_done &&
                      tm.batch_id >= 1 && tm.batch_size >= 1 && tm.slot < tm.batch_size &&
                      engine_req_status(r) == 0 && engine_req_error(r)[0] == '\0');
                engine_req_release(r);
            }
    engine_req_release(NULL);
    engine_drain(g.e);
    CHECK(atomic_load(&wrong) == 0 && atomic_load(&bad_thread) == 0);
    rig_close(&g);
}

/* A queued request cancelled leaves its queue; a running one, cancelled at
 * its first token, leaves its batch at the next step, and the request
 * waiting behind it (batches of one) joins its slot in the same batch. */
static void test_cancel(void)
{
    struct rig g;
    rig_open(&g, "swapwise", 0, 64, 1, 1);
    atomic_store(&wrong, 0);
    atomic_store(&bad_thread, 0);
    gate_close(&g);
    int t = not_big(&g, 0);
    struct job q, a, b;
    struct engine_req *hq, *ha, *hb;
    job_init(&q, g.e, t, 1, 12);
    struct engine_request_params p = job_params(&q, g.id[t], 1);
    CHECK(engine_submit(g.e, &p, &hq) == 0);
    CHECK(engine_cancel(g.e, hq) == 0);
    CHECK(engine_req_wait(hq) == ERR_CANCELLED && q.n_out == 0 && q.t.t_start == 0);
    CHECK(engine_cancel(g.e, hq) == ERR_INVALID);
    engine_req_release(hq);
    job_init(&a, g.e, t, 0, 12);
    a.cancel_at_first = true;
    p = job_params(&a, g.id[t], 2);
    CHECK(engine_submit(g.e, &p, &ha) == 0);
    job_init(&b, g.e, t, 2, 12);
    p = job_params(&b, g.id[t], 3);
    CHECK(engine_submit(g.e, &p, &hb) == 0);
    /* c ends itself at its first token (a stop string): ok, with that token */
    struct job c;
    struct engine_req *hc;
    job_init(&c, g.e, t, 1, 12);
    c.stop_at_first = true;
    p = job_params(&c, g.id[t], 4);
    CHECK(engine_submit(g.e, &p, &hc) == 0);
    gate_open(&g);
    CHECK(engine_req_wait(ha) == ERR_CANCELLED);
    CHECK(engine_req_wait(hb) == 0);
    CHECK_MSG(engine_req_wait(hc) == 0 && c.cancel_rc == 0 && c.n_out == 1 && c.status == 0 &&
                  engine_req_error(hc)[0] == '\0',
              "stop: status %d, %d tokens", c.status, c.n_out);
    engine_req_release(hc);
    CHECK_MSG(a.cancel_rc == 0 && a.n_out == 1 && a.n_streamed == 1, "cancel %d, %d tokens",
              a.cancel_rc, a.n_out);
    CHECK_MSG(b.t.batch_id == a.t.batch_id && b.t.slot == a.t.slot && b.n_out == 12,
              "b in batch %llu slot %d, a in batch %llu slot %d", (unsigned long long)b.t.batch_id,
              b.t.slot, (unsigned long long)a.t.batch_id, a.t.slot);
    engine_req_release(ha);
    engine_req_release(hb);
    engine_drain(g.e);
    struct engine_model_stats ms;
    CHECK(engine_model_stats(g.e, g.id[t], &ms) == 0);
    CHECK_MSG(ms.cancelled == 2 && ms.ok == 2 && ms.batches <= 2 && ms.latency_hist.count == 2,
              "cancelled %llu ok %llu batches %llu", (unsigned long long)ms.cancelled,
              (unsigned long long)ms.ok, (unsigned long long)ms.batches);
    CHECK(atomic_load(&wrong) == 0 && atomic_load(&bad_thread) == 0);
    check_stats_add_up(&g, "cancel");
    rig_close(&g);
}

/* Queued requests time out behind the gate (one with a deadline already
 * past); a running one whose deadline passes during its first token leaves
 * at the next step with that token. */
static void test_deadlines(void)
{
    struct rig g;
    rig_open(&g, "swapwise", 0, 64, 8, 1);
    atomic_store(&wrong, 0);
    gate_close(&g);
    int t = not_big(&g, 0);
    struct job q1, q2, a;
    struct engine_req *h1, *h2, *ha;
    job_init(&q1, g.e, t, 0, 12);
    struct engine_request_params p = job_params(&q1, g.id[t], 1);
    p.timeout_s = 0.05;
    CHECK(engine_submit(g.e, &p, &h1) == 0);
    job_init(&q2, g.e, t, 1, 12);
    p = job_params(&q2, g.id[t], 1);
    p.deadline = time_now() - 1;
    CHECK(engine_submit(g.e, &p, &h2) == 0);
    CHECK(engine_req_wait(h1) == ERR_TIMEOUT && q1.n_out == 0 && strstr(q1.error, "queue"));
    CHECK(engine_req_wait(h2) == ERR_TIMEOUT && q2.n_out == 0);
    /* the gate makes way for t, loaded before the request comes */
    gate_open(&g);
    CHECK(engine_unload_model(g.e, g.id[g.big]) == 0);
    swap_wait_idle(g.mgr, g.sm[g.big]);
    CHECK_MSG(engine_load_model(g.e, g.id[t]) == 0, "%s", err_msg());
    CHECK(swap_wait_loaded(g.mgr, g.sm[t]) == 0);
    /* on_token holds the runner until the deadline has passed, so the
     * request leaves at the next step with one token; should the deadline
     * pass before it even started, it is tried again with a later one (so
     * the machine's speed decides how many tries, never the outcome) */
    double timeout = 0.05;
    for (;;) {
        job_init(&a, g.e, t, 2, 12);
        p = job_params(&a, g.id[t], 1);
        p.deadline = a.hold_until = time_now() + timeout;
        CHECK(engine_submit(g.e, &p, &ha) == 0);
        int rc = engine_req_wait(ha);
        if (rc != ERR_TIMEOUT || a.n_out > 0 || !strstr(a.error, "queue"))
            break;
        engine_req_release(ha);
        timeout *= 2;
    }
    CHECK_MSG(a.status == ERR_TIMEOUT && a.n_out == 1 && a.n_streamed == 1 &&
                  strstr(a.error, "after 1 of 12 tokens"),
              "status %d (%s), %d tokens", a.status, a.error, a.n_out);
    engine_req_release(h1);
    engine_req_release(h2);
    engine_req_release(ha);
    engine_drain(g.e);
    struct engine_model_stats ms;
    CHECK(engine_model_stats(g.e, g.id[t], &ms) == 0 && ms.timed_out >= 3 && ms.ok == 0 &&
          ms.timed_out == ms.submitted);
    CHECK(atomic_load(&wrong) == 0);
    check_stats_add_up(&g, "deadlines");
    rig_close(&g);
}

/* The cases, in the order they run; `ctest -R engine_requests.rejections` runs one. */
TEST(rejections)
{
    test_rejections();
}

TEST(streaming)
{
    test_streaming();
}

TEST(cancel)
{
    test_cancel();
}

TEST(deadlines)
{
    test_deadlines();
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, rig_setup);
}
