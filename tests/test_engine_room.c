/* A batch's working memory (its KV cache and activations) as room the
 * policy makes, as for a load: two generated OPT-shaped models (hidden 128,
 * 2 layers, 2,048 positions) whose weights and short batches fill the
 * devices, and a 1,000-token prompt to one of them. Its batch does not fit
 * beside both models' weights, only beside its own: the idle model is
 * evicted (or trimmed) and the answer is the one the same prompt gets alone
 * on a roomy engine (greedy, f32, the same kernels: equal ids). Under every
 * engine policy, and the simulator, given the engine's bytes, reserves and
 * budget and the long request's batch, carries out the same operations. Then the pinned case: a
 * pinned model that leaves another room for its weights but not for a request's batch fails that
 * request at once with ERR_BUSY naming the pin (a shorter one to the same model runs), never a
 * wait; and a request that can never fit beside its own weights is refused at submission, with the
 * bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "engine_rig.h"
#include "model/random.h"
#include "sched/sim.h"
#include "swap/swap.h"
#include "tiny_opt.h"

#define LONG 1000   /* the long prompt's tokens */
#define SHORT 8     /* a short prompt's */
#define OUT 4       /* tokens each request asks for */
#define VOCAB 32768 /* weights large beside a long batch's memory */
#define MAX_POS 2048
#define SLACK (64u << 10) /* the arena's alignment, a few blocks */

static char scratch[512];
static char dirs[2][600];
static int32_t long_prompt[LONG], short_prompt[SHORT];

static void make_models(void)
{
    test_scratch_dir(scratch, sizeof(scratch), "engine_room");
    struct model_config *c = tiny_opt_config(2, VOCAB);
    c->info.max_pos = MAX_POS;
    for (int i = 0; i < 2; i++) {
        snprintf(dirs[i], sizeof(dirs[i]), "%s/m%d", scratch, i);
        CHECK(mkdir(dirs[i], 0755) == 0);
        struct model_random_opts o = {.dtype = DTYPE_F32, .seed = 500 + (uint64_t)i};
        CHECK_MSG(model_random_write(c, dirs[i], &o) == 0, "%s", err_msg());
    }
    model_config_free(c);
    for (int i = 0; i < LONG; i++)
        long_prompt[i] = 3 + (int32_t)(((uint32_t)i * 7919u) % (VOCAB - 3));
    for (int i = 0; i < SHORT; i++)
        short_prompt[i] = 3 + 11 * i;
}

/* Of device d, model i's weights (batch NULL) or weights and a batch of
 * n_prompt + OUT as the engine shapes one request alone, TP=2. */
static uint64_t bytes_of(int i, int n_prompt, int d)
{
    uint64_t dev[2], host;
    struct model_exec_shape s = engine_batch_shape(MAX_POS, 1, n_prompt, n_prompt + OUT, true);
    CHECK(swap_layout_bytes(dirs[i], 2, 1, n_prompt ? &s : NULL, dev, &host) == 0);
    return dev[d];
}

static int add_model(struct rig *g, int i, struct swap_model **out)
{
    static const int both[2] = {0, 1};
    struct placement pl = {.tp = 2, .pp = 1, .devices = both};
    CHECK(swap_register(g->mgr, i ? "b" : "a", dirs[i], &pl, false, out) == 0);
    swap_model_set_compute(*out, KERN_COMPUTE_F32);
    int id = engine_add_model(g->e, *out);
    CHECK(id >= 0);
    return id;
}

/* One request, waited for: its status, its ids into out (OUT), its message
 * into why. A request that does not end within a minute (it waits for
 * room nothing will make) is cancelled and reported as ERR_TIMEOUT. */
static int ask(struct rig *g, int id, const int32_t *prompt, int n, int32_t *out, int *n_out,
               char *why, size_t why_cap)
{
    struct engine_request_params p = {.model = id,
                                      .prompt = prompt,
                                      .n_prompt = n,
                                      .max_tokens = OUT,
                                      .sampling = {.temperature = 0, .top_p = 1}};
    struct engine_req *h;
    int rc = engine_submit(g->e, &p, &h);
    if (rc < 0) {
        snprintf(why, why_cap, "%s", err_msg());
        return rc;
    }
    double until = time_now() + 60;
    while (!engine_req_done(h) && time_now() < until)
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    bool hung = !engine_req_done(h);
    if (hung)
        engine_cancel(g->e, h);
    rc = engine_req_wait(h);
    snprintf(why, why_cap, "%s", hung ? "still waiting after a minute" : engine_req_error(h));
    const int32_t *o = engine_req_output(h, n_out);
    if (out)
        memcpy(out, o, sizeof(int32_t) * (size_t)(*n_out < OUT ? *n_out : OUT));
    engine_req_release(h);
    return hung ? ERR_TIMEOUT : rc;
}

/* The long prompt alone on a roomy engine: the reference ids. */
static int reference(int32_t *ref)
{
    struct rig g;
    rig_open_budget(&g, "swapwise", 0, 64, 1, 0, 256u << 20, 0);
    struct swap_model *sm;
    int id = add_model(&g, 0, &sm), n = 0;
    char why[512];
    CHECK_MSG(ask(&g, id, long_prompt, LONG, ref, &n, why, sizeof(why)) == 0, "%s", why);
    engine_drain(g.e);
    rig_close(&g);
    return n;
}

/* Room for both models' weights and short batches, not for the long one
 * beside both; the long one fits beside its own model's weights. */
static uint64_t budget_both(void)
{
    uint64_t budget = 0;
    for (int d = 0; d < 2; d++) {
        uint64_t w0 = bytes_of(0, 0, d), w1 = bytes_of(1, 0, d);
        uint64_t s0 = bytes_of(0, SHORT, d) - w0, s1 = bytes_of(1, SHORT, d) - w1;
        uint64_t l0 = bytes_of(0, LONG, d) - w0;
        uint64_t b = w0 + w1 + s0 + s1 + SLACK;
        CHECK_MSG(w0 + w1 + l0 > b && w0 + l0 + SLACK <= b,
                  "device %d: weights %llu + %llu, short batches %llu + %llu, long %llu", d,
                  (unsigned long long)w0, (unsigned long long)w1, (unsigned long long)s0,
                  (unsigned long long)s1, (unsigned long long)l0);
        budget = b > budget ? b : budget;
    }
    return budget;
}

/* The operations the engine carried out (rig_on_sched_op: the scheduler
 * thread, under the engine lock), as "l0 s0 e1 ..." for a (0) and b (1),
 * the rig's fixtures coming first (their ids below first_id). */
static char eng_ops[256];
static int first_id;

static void op_text(char *buf, size_t cap, int model, const struct sched_carried *op)
{
    size_t len = strlen(buf);
    const char *k = op->op == SCHED_OP_SERVE  ? "s"
                    : op->op == SCHED_OP_LOAD ? "l"
                    : op->op == SCHED_OP_TRIM ? "t"
                                              : "e";
    if (len + 8 < cap)
        snprintf(buf + len, cap - len, "%s%s%d", len ? " " : "", k, model);
}

static void engine_op(void *ctx, const struct sched_carried *op)
{
    (void)ctx;
    op_text(eng_ops, sizeof(eng_ops), op->model - first_id, op);
}

static void sim_op(void *ctx, double now, const struct sched_carried *op)
{
    (void)now;
    op_text(ctx, 256, op->model, op);
}

/* The engine's trace through the simulator: a and b with the engine's
 * weights and short batches' reserve as their bytes (kv_bytes the reserve,
 * the layers its last layer blobs),
 * the engine's budget, the long request's batch_bytes its reserve for it;
 * the requests each alone (a, b, a's long one, b). The simulator must carry
 * out the engine's operations. */
static void sim_same(struct rig *g, struct swap_model **sm, const char *policy)
{
    uint64_t bytes[4], kv[4], layer[4], long_b = 0;
    int layers = 0;
    for (int i = 0; i < 2; i++) {
        const struct model_info *in = swap_model_info(sm[i]);
        struct model_exec_shape s = engine_batch_shape(in->max_pos, 1, SHORT, SHORT + OUT, true),
                                l = engine_batch_shape(in->max_pos, 1, LONG, LONG + OUT, true);
        for (int d = 0; d < 2; d++) {
            kv[i * 2 + d] = group_exec_bytes(sm[i], g->mgr, &s, d);
            bytes[i * 2 + d] = swap_model_device_bytes(sm[i], d) + kv[i * 2 + d];
            const struct swap_shard *sh = swap_model_shard(sm[i], d);
            layer[i * 2 + d] = swap_shard_blob_bytes(sh, swap_shard_n_blobs(sh) - 1);
            layers = swap_shard_n_blobs(sh) - 1;
            uint64_t lb = group_exec_bytes(sm[i], g->mgr, &l, d);
            long_b = i == 0 && lb > long_b ? lb : long_b;
        }
    }
    struct sim_config c;
    memset(&c, 0, sizeof(c));
    c.policy = sched_policy_find_sim(policy);
    c.n_models = c.n_devices = 2;
    c.bytes = bytes;
    c.kv_bytes = kv;
    c.layer_bytes = layer; /* a trim gives up the engine's layer blobs */
    c.layers = layers;
    c.budget[0] = device_budget(g->devs[0]);
    c.budget[1] = device_budget(g->devs[1]);
    c.max_batch = 1;
    c.load_s = 1;
    for (int b = 1; b <= SIM_MAX_BATCH; b++)
        c.batch_s[b] = 0.1;
    char ops[256] = "";
    c.on_op = sim_op;
    c.on_op_ctx = ops;
    struct sim_request r[4] = {{.arrival = 0, .model = 0},
                               {.arrival = 10, .model = 1},
                               {.arrival = 20, .model = 0, .batch_bytes = long_b},
                               {.arrival = 30, .model = 1}};
    struct sim_stats st;
    CHECK_MSG(sim_run(&c, r, 4, &st) == 0, "%s: %s", policy, err_msg());
    CHECK_MSG(strcmp(ops, eng_ops) == 0, "%s:\nsimulator: %s\nengine:    %s", policy, ops, eng_ops);
}

static void long_prompt_makes_room(const char *policy)
{
    static int32_t ref[OUT];
    static int n_ref = -1;
    if (n_ref < 0)
        n_ref = reference(ref);
    struct rig g;
    eng_ops[0] = '\0';
    first_id = N_MODELS;
    rig_on_sched_op = engine_op;
    rig_open_budget(&g, policy, 0, 64, 1, 0, budget_both(), 0);
    rig_on_sched_op = NULL;
    struct swap_model *a, *b;
    int ia = add_model(&g, 0, &a), ib = add_model(&g, 1, &b), n;
    CHECK(ia == first_id && ib == first_id + 1);
    int32_t out[OUT];
    char why[512];
    /* both resident, their short batches' reserves held */
    CHECK_MSG(ask(&g, ia, short_prompt, SHORT, NULL, &n, why, sizeof(why)) == 0, "%s", why);
    CHECK_MSG(ask(&g, ib, short_prompt, SHORT, NULL, &n, why, sizeof(why)) == 0, "%s", why);
    engine_drain(g.e);
    CHECK_MSG(swap_residency(g.mgr, a) == RES_ON_DEVICE &&
                  swap_residency(g.mgr, b) == RES_ON_DEVICE,
              "%s: both models resident before the long prompt", policy);
    /* the long prompt: b, idle, makes its batch's room */
    int rc = ask(&g, ia, long_prompt, LONG, out, &n, why, sizeof(why));
    CHECK_MSG(rc == 0, "%s: %d tokens of prompt: %s (%s)", policy, LONG, err_name(rc), why);
    CHECK_MSG(rc != 0 || (n == n_ref && memcmp(out, ref, sizeof(int32_t) * (size_t)n) == 0),
              "%s: the answer differs from the prompt's alone", policy);
    CHECK_MSG(swap_residency(g.mgr, b) != RES_ON_DEVICE, "%s: the idle model stayed whole", policy);
    /* and b answers again, a's long batch's room given back in turn */
    CHECK_MSG(ask(&g, ib, short_prompt, SHORT, NULL, &n, why, sizeof(why)) == 0, "%s", why);
    engine_drain(g.e);
    struct swap_model *both[2] = {a, b};
    sim_same(&g, both, policy);
    printf("%-16s %d-token prompt: ok, the idle model made room: %s\n", policy, LONG, eng_ops);
    rig_close(&g);
}

TEST(long_prompt_swapwise)
{
    long_prompt_makes_room("swapwise");
}

TEST(long_prompt_swapwise_partial)
{
    long_prompt_makes_room("swapwise-partial");
}

TEST(long_prompt_lru)
{
    long_prompt_makes_room("lru");
}

TEST(long_prompt_computron)
{
    long_prompt_makes_room("computron");
}

TEST(long_prompt_fifo)
{
    long_prompt_makes_room("fifo");
}

/* Without wait_for_unpin: b pinned leaves a room for its weights and a short
 * batch, not a long one: the long request fails at once (ERR_BUSY, naming
 * the pin and a), the short one runs. */
TEST(pinned_starves_batch)
{
    uint64_t budget = 0;
    for (int d = 0; d < 2; d++) {
        uint64_t w0 = bytes_of(0, 0, d), w1 = bytes_of(1, 0, d);
        uint64_t b = w0 + w1 + (bytes_of(0, SHORT, d) - w0) + SLACK;
        budget = b > budget ? b : budget;
    }
    struct rig g;
    rig_wait_for_unpin = false;
    rig_open_budget(&g, "swapwise", 0, 64, 1, 0, budget, 0);
    rig_wait_for_unpin = true;
    struct swap_model *a, *b;
    int ia = add_model(&g, 0, &a), ib = add_model(&g, 1, &b), n;
    CHECK(engine_pin_model(g.e, ib, true) == 0);
    CHECK_MSG(engine_load_model(g.e, ib) == 0, "%s", err_msg());
    CHECK(swap_wait_loaded(g.mgr, b) == 0);
    char why[512];
    int rc = ask(&g, ia, long_prompt, LONG, NULL, &n, why, sizeof(why));
    CHECK_MSG(rc == ERR_BUSY && strstr(why, "pinned") && strstr(why, "model a "),
              "a long request beside a pinned model: %s (%s)", err_name(rc), why);
    rc = ask(&g, ia, short_prompt, SHORT, NULL, &n, why, sizeof(why));
    CHECK_MSG(rc == 0 && n == OUT, "a short request beside a pinned model: %s (%s)", err_name(rc),
              why);
    engine_drain(g.e);
    rig_close(&g);
}

/* A request whose batch alone passes the budget beside its model's weights
 * is refused by engine_submit, naming the model, the request and the bytes. */
TEST(never_fits_refused)
{
    uint64_t budget = 0;
    for (int d = 0; d < 2; d++) {
        uint64_t b = bytes_of(0, SHORT, d) + SLACK;
        budget = b > budget ? b : budget;
    }
    struct rig g;
    rig_open_budget(&g, "swapwise", 0, 64, 1, 0, budget, 0);
    struct swap_model *a;
    int ia = add_model(&g, 0, &a), n;
    char why[512];
    int rc = ask(&g, ia, long_prompt, LONG, NULL, &n, why, sizeof(why));
    CHECK_MSG(rc == ERR_INVALID && strstr(why, "model a cannot run a request of 1000 + 4 tokens") &&
                  strstr(why, "budget"),
              "%s (%s)", err_name(rc), why);
    CHECK_MSG(ask(&g, ia, short_prompt, SHORT, NULL, &n, why, sizeof(why)) == 0, "%s", why);
    engine_drain(g.e);
    rig_close(&g);
}

/* Free bytes enough for a batch but in pieces: a, b (the rig's small
 * fixture model pre_ln_f32) and c (a's checkpoint again) loaded in that
 * order, then b offloaded, leave a hole of b's weights between a and c and
 * a tail after c, each smaller than the long request's batch, together
 * larger. The batch does not fail for the pieces (before: "cannot
 * allocate"): the scheduler offloads the idle model beside the hole
 * (swap_compact, as for a load), the blocks join and the answer equals the
 * reference. */
TEST(fragmented_batch)
{
    int32_t ref[OUT];
    int n_ref = reference(ref);
    struct rig g;
    rig_open_budget(&g, "swapwise", 0, 64, 1, 0, 256u << 20, 0); /* the hole's bytes */
    uint64_t hole[2] = {swap_model_device_bytes(g.sm[0], 0), swap_model_device_bytes(g.sm[0], 1)};
    engine_drain(g.e);
    rig_close(&g);
    uint64_t budget = 0;
    for (int d = 0; d < 2; d++) {
        uint64_t w = bytes_of(0, 0, d), k = bytes_of(0, LONG, d) - w;
        /* the tail: below the batch, and with the hole at least the batch */
        uint64_t t = k - hole[d] / 2 / SLACK * SLACK;
        CHECK_MSG(hole[d] >= 2 * SLACK && t < k && t + hole[d] >= k,
                  "device %d: a hole of %llu bytes and a tail of %llu for a batch of %llu", d,
                  (unsigned long long)hole[d], (unsigned long long)t, (unsigned long long)k);
        budget = 2 * w + hole[d] + t > budget ? 2 * w + hole[d] + t : budget;
    }
    rig_open_budget(&g, "swapwise", 0, 64, 1, 0, budget, 0);
    static const int both[2] = {0, 1};
    struct placement pl = {.tp = 2, .pp = 1, .devices = both};
    struct swap_model *a, *c;
    CHECK(swap_register(g.mgr, "a", dirs[0], &pl, false, &a) == 0);
    CHECK(swap_register(g.mgr, "c", dirs[0], &pl, false, &c) == 0);
    swap_model_set_compute(a, KERN_COMPUTE_F32);
    swap_model_set_compute(c, KERN_COMPUTE_F32);
    int ia = engine_add_model(g.e, a), ic = engine_add_model(g.e, c);
    CHECK(ia >= 0 && ic >= 0);
    struct swap_model *sm[3] = {a, g.sm[0], c};
    int id[3] = {ia, g.id[0], ic};
    for (int i = 0; i < 3; i++) {
        CHECK_MSG(engine_load_model(g.e, id[i]) == 0, "%s", err_msg());
        CHECK(swap_wait_loaded(g.mgr, sm[i]) == 0);
    }
    CHECK_MSG(engine_unload_model(g.e, id[1]) == 0, "%s", err_msg());
    double until = time_now() + 30;
    while (swap_residency(g.mgr, sm[1]) != RES_ON_DISK && time_now() < until)
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    for (int d = 0; d < 2; d++) { /* the pieces: each too small, together enough */
        const struct device *dev = swap_device(g.mgr, d);
        uint64_t k = bytes_of(0, LONG, d) - bytes_of(0, 0, d),
                 free_bytes = device_budget(dev) - device_used(dev);
        CHECK_MSG(device_largest_free(dev) < k && free_bytes >= k,
                  "device %d: largest free block %llu, free %llu, the batch %llu", d,
                  (unsigned long long)device_largest_free(dev), (unsigned long long)free_bytes,
                  (unsigned long long)k);
    }
    int32_t out[OUT];
    int n = 0;
    char why[512];
    int rc = ask(&g, ia, long_prompt, LONG, out, &n, why, sizeof(why));
    CHECK_MSG(rc == 0, "the long request with the free memory in pieces: %s (%s)", err_name(rc),
              why);
    CHECK_MSG(rc != 0 || (n == n_ref && memcmp(out, ref, sizeof(int32_t) * (size_t)n) == 0),
              "the long request's ids differ from the same request alone");
    CHECK_MSG(swap_residency(g.mgr, c) != RES_ON_DEVICE, "c stayed on its devices");
    engine_drain(g.e);
    rig_close(&g);
}

static void setup(void)
{
    rig_setup();
    make_models();
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
