/* The engine's batches (reserve.c, runner.c) end to end on the fixture
 * models (tests/engine_rig.h):
 * - in device memory for a batch of two, requests run in batches halved
 *   until they fit, within the budgets' high-water marks, and a request
 *   that can never fit is refused at submit;
 * - a batch's prompts are left-padded to the longest, and the batch is
 *   sized for that. */
#include "engine_rig.h"

/* Device memory for one model and a batch of two of its requests: eight
 * requests submitted at once run in batches halved until they fit (at most
 * two sequences), all with the right output, and the devices' high-water
 * marks (weights, KV caches, activations) stay within their budgets; a
 * request whose batch of one can never fit is refused at submit, naming the
 * bytes. */
static void test_batch_memory(void)
{
    struct rig g;
    rig_open(&g, "swapwise", 0, 64, 8, 2); /* to measure */
    const int t = g.big, max_tokens = 4;   /* the largest: every model registers */
    const int n = expects[t][0].n_prompt;
    struct model_exec_shape two = {.batch = 2, .max_len = n + max_tokens + 64, .max_tokens = 2 * n};
    uint64_t budget = 0;
    for (int d = 0; d < 2; d++) {
        uint64_t need =
            swap_model_device_bytes(g.sm[t], d) + group_exec_bytes(g.sm[t], g.mgr, &two, d);
        budget = need > budget ? need : budget;
    }
    int max_pos = swap_model_info(g.sm[t])->max_pos;
    struct model_exec_shape short1 = {.batch = 1, .max_len = n + 1, .max_tokens = n};
    uint64_t tight = 0;
    for (int d = 0; d < 2; d++) {
        uint64_t need =
            swap_model_device_bytes(g.sm[t], d) + group_exec_bytes(g.sm[t], g.mgr, &short1, d);
        tight = need > tight ? need : tight;
    }
    rig_close(&g);
    rig_open_budget(&g, "swapwise", 0, 64, 8, 1, budget + 64, 0);
    atomic_store(&wrong, 0);
    struct job jobs[8];
    for (int i = 0; i < 8; i++) {
        job_init(&jobs[i], g.e, t, 0, max_tokens);
        struct engine_request_params p = job_params(&jobs[i], g.id[t], (uint64_t)i);
        CHECK_MSG(engine_submit(g.e, &p, NULL) == 0, "%s", err_msg());
    }
    engine_drain(g.e);
    int biggest = 0;
    for (int i = 0; i < 8; i++) {
        CHECK_MSG(jobs[i].status == 0, "request %d: %s", i, jobs[i].error);
        biggest = jobs[i].t.batch_size > biggest ? jobs[i].t.batch_size : biggest;
    }
    CHECK_MSG(biggest >= 1 && biggest <= 2, "a batch of %d ran in memory for 2", biggest);
    CHECK(atomic_load(&wrong) == 0);
    printf("batch memory: 8 requests in batches of at most %d, in memory for 2\n", biggest);
    rig_close(&g);
    /* memory for one short request: a request of the model's every position
     * can never fit, and is refused */
    rig_open_budget(&g, "swapwise", 0, 64, 8, 1, tight + 64, 0);
    struct job one, all;
    job_init(&one, g.e, t, 0, 1);
    struct engine_request_params p = job_params(&one, g.id[t], 1);
    CHECK_MSG(engine_submit(g.e, &p, NULL) == 0, "%s", err_msg());
    job_init(&all, g.e, t, 0, max_pos - n);
    p = job_params(&all, g.id[t], 1);
    CHECK(engine_submit(g.e, &p, NULL) == ERR_INVALID);
    CHECK_MSG(strstr(err_msg(), "cannot run a request") && strstr(err_msg(), "budget"), "%s",
              err_msg());
    engine_drain(g.e);
    CHECK_MSG(one.status == 0, "%s", one.error);
    CHECK(atomic_load(&wrong) == 0);
    rig_close(&g);
}

struct padded {
    int status, n_out, batch_size;
    char error[256];
};

/* on_done of a request with a prompt of its own (the rig's on_done checks
 * fixture prompts' references) */
static void padded_done(struct engine_req *r, void *ctx)
{
    struct padded *p = ctx;
    struct engine_req_timings t;
    engine_req_timings(r, &t);
    engine_req_output(r, &p->n_out);
    p->status = engine_req_status(r);
    p->batch_size = t.batch_size;
    snprintf(p->error, sizeof p->error, "%s", engine_req_error(r));
}

/* Every prompt of a batch is left-padded to its longest, so a short prompt's
 * long answer starts after the longest prompt: a batch of a 40-token prompt
 * (2 tokens out) and a 5-token one (40 out) needs 79 positions, past the
 * fixture's 64 although each request fits alone. computron joins nothing
 * into a running batch, and the first request's batch is held (on_token)
 * until both are queued, so they are taken together; both must complete
 * (the batch was sized for the longest prompt + answer of a request, 45 +
 * 64 capped at 64, and the second failed with "exceeds the KV cache
 * capacity"). */
static void test_padded_batch(void)
{
    struct rig g;
    rig_open(&g, "computron", 0, 64, 8, 2);
    const int t = g.big;
    int32_t long_prompt[40], short_prompt[5];
    for (int i = 0; i < 40; i++)
        long_prompt[i] = 3 + i % 200;
    for (int i = 0; i < 5; i++)
        short_prompt[i] = 7 + i;
    struct job hold;
    job_init(&hold, g.e, t, 0, 2);
    struct engine_request_params p = job_params(&hold, g.id[t], 1);
    hold.hold_until = time_now() + 0.5;
    CHECK_MSG(engine_submit(g.e, &p, NULL) == 0, "%s", err_msg());
    while (!atomic_load(&hold.first_token))
        sched_yield();
    struct padded a = {0}, b = {0};
    struct engine_request_params pa = {.model = g.id[t],
                                       .prompt = long_prompt,
                                       .n_prompt = 40,
                                       .max_tokens = 2,
                                       .sampling = {.temperature = 0, .top_p = 1, .seed = 1},
                                       .on_done = padded_done,
                                       .ctx = &a};
    struct engine_request_params pb = pa;
    pb.prompt = short_prompt, pb.n_prompt = 5, pb.max_tokens = 40, pb.ctx = &b;
    CHECK_MSG(engine_submit(g.e, &pa, NULL) == 0, "%s", err_msg());
    CHECK_MSG(engine_submit(g.e, &pb, NULL) == 0, "%s", err_msg());
    engine_drain(g.e);
    CHECK_MSG(a.status == 0 && b.status == 0, "40 + 2: %d %s; 5 + 40: %d %s", a.status, a.error,
              b.status, b.error);
    CHECK(hold.status == 0);
    printf("padded batch: 40 + 2 and 5 + 40 tokens, batched %d and %d, %d and %d tokens out\n",
           a.batch_size, b.batch_size, a.n_out, b.n_out);
    rig_close(&g);
}

/* The cases, in the order they run; `ctest -R engine_batches.batch_memory` runs one. */
TEST(batch_memory)
{
    test_batch_memory();
}

TEST(padded_batch)
{
    test_padded_batch();
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, rig_setup);
}
