/* LoRA adapters served as models over a resident base (swap/, engine/,
 * stack): registration over a base and its refusals, residency that needs
 * the base's, a thousand tiny adapters costing host memory only once
 * loaded, requests over a base and its adapters served together through
 * the engine (greedy ids equal to PEFT's references: the fixtures'
 * expected.json under tests/fixtures/lora), adapter churn with room for
 * few, removal, and a TP 2 base; beside pinned models (refused at once,
 * at start and at an admin's add), admin loads and unloads of an adapter,
 * and an adapter waiting for room past its bound while another's requests
 * keep coming. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "backend/device.h"
#include "core/error.h"
#include "core/timing.h"
#include "engine/stack.h"
#include "model/adapter.h"
#include "swap/swap.h"
#include "test.h"

#include "fixture_expect.h"

#define LORA SHARDSWAP_SOURCE_DIR "/tests/fixtures/lora"
#define BASE "llama_gqa_f32"
#define N_AD 4
/* the adapters of llama_gqa_f32 among the fixtures */
static const char *adapters[N_AD] = {"llama_r8_qv", "llama_r16_all_rslora", "llama_r32_mlp_layer1",
                                     "llama_r4_regex_patterns"};

static char base_path[1024];

static void adapter_path(const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", LORA, name);
}

/* ---- swap manager ---- */

struct mgr_rig {
    struct device *devs[2];
    struct swap_manager *mgr;
    struct swap_model *base;
};

static void mgr_open(struct mgr_rig *g, uint64_t host_budget)
{
    memset(g, 0, sizeof(*g));
    for (int i = 0; i < 2; i++)
        CHECK(device_open_cpu(i, 64u << 20, &g->devs[i]) == 0);
    struct swap_config cfg = {.host_budget = host_budget};
    CHECK(swap_manager_create(g->devs, 2, &cfg, &g->mgr) == 0);
    int dev0 = 0;
    struct placement pl = {.tp = 1, .pp = 1, .devices = &dev0};
    CHECK_MSG(swap_register(g->mgr, "base", base_path, &pl, false, &g->base) == 0, "%s", err_msg());
}

static void mgr_close(struct mgr_rig *g)
{
    swap_manager_destroy(g->mgr);
    for (int i = 0; i < 2; i++) {
        CHECK(device_used(g->devs[i]) == 0);
        device_close(g->devs[i]);
    }
}

/* An adapter is a model over its base: loaded only while the base is,
 * leaving with it; a base with adapters is not unregistered. */
TEST(register)
{
    struct mgr_rig g;
    mgr_open(&g, 256u << 20);
    char dir[1024];
    adapter_path(adapters[0], dir, sizeof(dir));
    struct swap_model *a = NULL, *bad = NULL;
    CHECK_MSG(swap_register_adapter(g.mgr, "a0", dir, g.base, &a) == 0, "%s", err_msg());
    CHECK(swap_model_base(a) == g.base && swap_model_base(g.base) == NULL);
    CHECK(swap_model_lora_rank(a) == 8 && swap_model_lora_rank(g.base) == 0);
    CHECK(swap_model_shard_count(a) == 1 && swap_shard_device(swap_model_shard(a, 0)) ==
                                                swap_shard_device(swap_model_shard(g.base, 0)));
    CHECK(swap_residency(g.mgr, a) == RES_ON_DISK);
    /* an adapter over an adapter, a base of another family */
    CHECK(swap_register_adapter(g.mgr, "aa", dir, a, &bad) == ERR_INVALID && !bad);
    adapter_path("opt_r8_all", dir, sizeof(dir));
    CHECK(swap_register_adapter(g.mgr, "opt", dir, g.base, &bad) < 0 && !bad);
    printf("wrong base: %s\n", err_msg());

    struct swap_room why;
    CHECK(swap_load(g.mgr, a, &why) == ERR_BUSY && why.kind == SWAP_ROOM_BASE);
    CHECK(strstr(err_msg(), "base") != NULL);
    CHECK(swap_load(g.mgr, g.base, NULL) == 0 && swap_wait_loaded(g.mgr, g.base) == 0);
    CHECK(swap_load(g.mgr, a, NULL) == 0 && swap_wait_loaded(g.mgr, a) == 0);
    CHECK(swap_residency(g.mgr, a) == RES_ON_DEVICE);
    uint64_t both = device_used(g.devs[0]);
    CHECK(both == swap_model_total_bytes(g.base) + swap_model_total_bytes(a));
    /* the base's offload takes its adapter off first */
    CHECK(swap_offload(g.mgr, g.base, false) == 0);
    swap_wait_idle(g.mgr, a);
    swap_wait_idle(g.mgr, g.base);
    CHECK(swap_residency(g.mgr, a) != RES_ON_DEVICE && device_used(g.devs[0]) == 0);
    /* a base with adapters stays registered */
    CHECK(swap_unregister(g.mgr, g.base) == ERR_BUSY && strstr(err_msg(), "a0"));
    CHECK(swap_unregister(g.mgr, a) == 0);
    CHECK(swap_unregister(g.mgr, g.base) == 0);
    mgr_close(&g);
}

/* A thousand tiny adapters over one base: registering costs no host tier;
 * only those loaded (then kept in the host tier) are charged. */
TEST(thousand)
{
    enum { N = 1000 };
    static char scratch[512]; /* test_scratch_dir keeps it until exit */
    char dir[1024], target[1024];
    test_scratch_dir(scratch, sizeof(scratch), "adapters");
    adapter_path(adapters[0], target, sizeof(target));
    struct mgr_rig g;
    mgr_open(&g, 256u << 20);
    struct swap_stats st0, st;
    swap_get_stats(g.mgr, &st0);
    struct swap_model **ads = calloc(N, sizeof(*ads));
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(dir, sizeof(dir), "%s/a%04d", scratch, i);
        snprintf(name, sizeof(name), "a%04d", i);
        CHECK(symlink(target, dir) == 0);
        CHECK_MSG(swap_register_adapter(g.mgr, name, dir, g.base, &ads[i]) == 0, "%s", err_msg());
    }
    swap_get_stats(g.mgr, &st);
    CHECK(st.host_used == st0.host_used);
    CHECK(swap_load(g.mgr, g.base, NULL) == 0 && swap_wait_loaded(g.mgr, g.base) == 0);
    swap_get_stats(g.mgr, &st0); /* the base's host copy */
    for (int i = 0; i < 3; i++)
        CHECK(swap_load(g.mgr, ads[i * 300], NULL) == 0 &&
              swap_wait_loaded(g.mgr, ads[i * 300]) == 0);
    swap_get_stats(g.mgr, &st);
    uint64_t one = swap_model_total_bytes(ads[0]);
    printf("%d adapters registered; host tier %llu bytes over the base's after loading 3 of "
           "%llu device bytes each\n",
           N, (unsigned long long)(st.host_used - st0.host_used), (unsigned long long)one);
    CHECK(st.host_used > st0.host_used && st.host_used - st0.host_used <= 3 * one);
    CHECK(swap_unregister(g.mgr, g.base) == ERR_BUSY);
    for (int i = 0; i < 3; i++) {
        CHECK(swap_offload(g.mgr, ads[i * 300], false) == 0);
        swap_wait_idle(g.mgr, ads[i * 300]);
    }
    for (int i = 0; i < N; i++)
        CHECK(swap_unregister(g.mgr, ads[i]) == 0);
    swap_get_stats(g.mgr, &st);
    CHECK(st.host_used == st0.host_used);
    free(ads);
    mgr_close(&g);
}

/* ---- the engine, through the stack ---- */

/* References: fixture k's greedy case i (k = N_AD: the base alone). */
struct ref {
    int n_prompt, n_out;
    int32_t prompt[16], out[16];
};
static struct ref refs[N_AD + 1][3];

static void refs_load(void)
{
    for (int k = 0; k <= N_AD; k++) {
        char path[2048];
        if (k < N_AD)
            snprintf(path, sizeof(path), "%s/%s/expected.json", LORA, adapters[k]);
        else
            snprintf(path, sizeof(path), "%s/expected.json", base_path);
        json_t *j = json_load_file(path, 0, NULL);
        CHECK_MSG(j != NULL, "%s", path);
        json_t *g = json_object_get(j, "greedy");
        for (int i = 0; i < 3; i++) {
            json_t *c = json_array_get(g, (size_t)i);
            int32_t *p = json_ids(json_object_get(c, "prompt"), &refs[k][i].n_prompt);
            int32_t *o = json_ids(json_object_get(c, "output"), &refs[k][i].n_out);
            CHECK(refs[k][i].n_prompt <= 16 && refs[k][i].n_out <= 16);
            memcpy(refs[k][i].prompt, p, sizeof(int32_t) * (size_t)refs[k][i].n_prompt);
            memcpy(refs[k][i].out, o, sizeof(int32_t) * (size_t)refs[k][i].n_out);
            free(p);
            free(o);
        }
        json_decref(j);
    }
}

/* One request: model id, against refs[k][i]. */
struct ask {
    int id, k, i;
    struct engine_req *r;
};

static atomic_int answered;

static void ask_done(struct engine_req *r, void *ctx)
{
    (void)r;
    (void)ctx;
    atomic_fetch_add(&answered, 1);
}

static void ask_submit(struct engine *e, struct ask *q)
{
    const struct ref *x = &refs[q->k][q->i];
    struct engine_request_params p = {.model = q->id,
                                      .prompt = x->prompt,
                                      .n_prompt = x->n_prompt,
                                      .max_tokens = x->n_out,
                                      .sampling = {.temperature = 0, .top_p = 1},
                                      .on_done = ask_done};
    int rc = engine_submit(e, &p, &q->r);
    CHECK_MSG(rc == 0, "submit: %s", err_msg());
}

/* Waits for q and checks its greedy ids; returns its status (a failure
 * other than allowed is a failed check). */
static int ask_check(struct ask *q, int allowed)
{
    int rc = engine_req_wait(q->r);
    const struct ref *x = &refs[q->k][q->i];
    int n;
    const int32_t *out = engine_req_output(q->r, &n);
    if (rc == 0) {
        bool same = n == x->n_out && memcmp(out, x->out, sizeof(int32_t) * (size_t)n) == 0;
        CHECK_MSG(same, "model id %d (%s) prompt %d: greedy ids differ from the reference", q->id,
                  q->k < N_AD ? adapters[q->k] : BASE, q->i);
    } else {
        CHECK_MSG(rc == allowed && allowed != 0, "model id %d: status %d (%s)", q->id, rc,
                  engine_req_error(q->r));
    }
    engine_req_release(q->r);
    q->r = NULL;
    return rc;
}

/* A stack of n_dev CPU devices with budget bytes each, the base over tp of
 * them, and adapter copies: copy c is adapters[c % N_AD] named "a<c>". */
static struct stack *stack_with(int n_dev, uint64_t budget, int tp, int copies, const char *dir)
{
    static char paths[64][1100];
    static char names[64][16];
    struct stack_adapter_config ac[64];
    CHECK(copies <= 64);
    for (int c = 0; c < copies; c++) {
        snprintf(names[c], sizeof(names[c]), "a%d", c);
        if (c < N_AD)
            adapter_path(adapters[c], paths[c], sizeof(paths[c]));
        else {
            char target[512];
            adapter_path(adapters[c % N_AD], target, sizeof(target));
            snprintf(paths[c], sizeof(paths[c]), "%s/copy%d", dir, c);
            CHECK(symlink(target, paths[c]) == 0);
        }
        ac[c] = (struct stack_adapter_config){.name = names[c], .base = "base", .path = paths[c]};
    }
    struct stack_model_config mc = {.name = "base", .path = base_path, .tp = tp};
    struct stack_config cfg = {.n_devices = n_dev,
                               .host_budget = 256u << 20,
                               .engine = {.max_batch = 8},
                               .models = &mc,
                               .n_models = 1,
                               .adapters = ac,
                               .n_adapters = copies};
    for (int d = 0; d < n_dev; d++)
        cfg.device_budget[d] = budget;
    struct stack *s = NULL;
    CHECK_MSG(stack_open(&cfg, &s) == 0, "stack_open: %s", err_msg());
    return s;
}

/* Requests over the base and N_AD adapters at once: one batch per base,
 * each sequence's greedy ids equal to its reference (PEFT's, computed
 * alone). */
static void mixed(int n_dev, int tp, uint64_t budget)
{
    struct stack *s = stack_with(n_dev, budget, tp, N_AD, NULL);
    if (!s)
        return;
    struct ask q[2 * (N_AD + 1) * 3];
    int n = 0;
    for (int round = 0; round < 2; round++)
        for (int k = 0; k <= N_AD; k++)
            for (int i = 0; i < 3; i++)
                q[n++] =
                    (struct ask){.id = k < N_AD ? s->adapter_ids[k] : s->ids[0], .k = k, .i = i};
    for (int j = 0; j < n; j++)
        ask_submit(s->engine, &q[j]);
    for (int j = 0; j < n; j++)
        ask_check(&q[j], 0);
    struct engine_stats st;
    engine_get_stats(s->engine, &st);
    struct engine_model_stats ms;
    CHECK(engine_model_stats(s->engine, s->adapter_ids[0], &ms) == 0);
    CHECK(ms.base == s->ids[0] && ms.ok == 6 && ms.loads >= 1);
    CHECK(engine_model_stats(s->engine, s->ids[0], &ms) == 0 && ms.base == -1);
    CHECK(st.adapter_loads >= N_AD && st.adapter_bytes_loaded > 0);
    printf("tp %d: %d requests over the base and %d adapters: %llu batches, %llu adapter loads\n",
           tp, n, N_AD, (unsigned long long)st.batches, (unsigned long long)st.adapter_loads);
    stack_close(s);
}

TEST(mixed)
{
    mixed(1, 1, 64u << 20);
}

TEST(mixed_tp2)
{
    mixed(2, 2, 64u << 20);
}

/* Budgets left 0 are sized with room for the adapters beside their base
 * (and its batches for their largest rank). */
TEST(mixed_sized)
{
    mixed(1, 1, 0);
}

/* Room on the device for the base, its batch and about two adapters;
 * hundreds of requests over a dozen adapters (copies of the fixtures):
 * each answered once, right, adapters loaded and evicted among
 * themselves. */
TEST(churn)
{
    enum { COPIES = 12, ROUNDS = 25 };
    static char dir[512]; /* test_scratch_dir keeps it until exit */
    test_scratch_dir(dir, sizeof(dir), "adapters_churn");
    /* the device bytes of the base and a batch of 8 of the longest request
     * at the largest rank, and of the largest adapter */
    struct model_exec_shape shape = engine_batch_shape(64, 8, 9, 9 + 12, true);
    shape.max_lora_rank = 32;
    uint64_t dev, host, amax = 0;
    CHECK(swap_layout_bytes(base_path, 1, 1, &shape, &dev, &host) == 0);
    struct mgr_rig g; /* the adapters' device bytes as the manager places them */
    mgr_open(&g, 256u << 20);
    for (int k = 0; k < N_AD; k++) {
        char p[1024];
        struct swap_model *a;
        adapter_path(adapters[k], p, sizeof(p));
        CHECK(swap_register_adapter(g.mgr, adapters[k], p, g.base, &a) == 0);
        amax = swap_model_total_bytes(a) > amax ? swap_model_total_bytes(a) : amax;
    }
    mgr_close(&g);
    struct stack *s = stack_with(1, dev + 5 * amax / 2, 1, COPIES, dir);
    if (!s)
        return;
    atomic_store(&answered, 0);
    struct ask *q = calloc(COPIES * ROUNDS, sizeof(*q));
    int n = 0;
    for (int wave = 0; wave < 5; wave++) { /* each wave needs every adapter again */
        int first = n;
        for (int r = wave * ROUNDS / 5; r < (wave + 1) * ROUNDS / 5; r++)
            for (int c = 0; c < COPIES; c++) {
                int a = (c * 7 + r * 5) % COPIES; /* spread, not in order */
                q[n] = (struct ask){.id = s->adapter_ids[a], .k = a % N_AD, .i = (r + c) % 3};
                ask_submit(s->engine, &q[n++]);
            }
        for (int j = first; j < n; j++)
            ask_check(&q[j], 0);
    }
    engine_drain(s->engine);
    CHECK(atomic_load(&answered) == n);
    struct engine_stats st;
    engine_get_stats(s->engine, &st);
    printf("%d requests over %d adapters, device budget %llu (base and batch %llu, adapter <= "
           "%llu): %llu adapter loads, %llu evictions\n",
           n, COPIES, (unsigned long long)(dev + 5 * amax / 2), (unsigned long long)dev,
           (unsigned long long)amax, (unsigned long long)st.adapter_loads,
           (unsigned long long)st.evictions);
    CHECK(st.adapter_loads > COPIES && st.evictions > 0);
    free(q);
    stack_close(s);
}

/* A base with adapters is not removed; an adapter is, while requests for it
 * wait: each of those answered once, right or "was removed". */
TEST(remove)
{
    struct stack *s = stack_with(1, 64u << 20, 1, N_AD, NULL);
    if (!s)
        return;
    CHECK(engine_remove_model(s->engine, s->ids[0], NULL) == ERR_BUSY);
    CHECK(strstr(err_msg(), "adapters") != NULL);
    atomic_store(&answered, 0);
    enum { N = 40 };
    struct ask q[N];
    for (int j = 0; j < N; j++) {
        int k = j % 2;
        q[j] = (struct ask){.id = s->adapter_ids[k], .k = k, .i = j % 3};
        ask_submit(s->engine, &q[j]);
    }
    struct engine_model_stats last;
    CHECK(engine_remove_model(s->engine, s->adapter_ids[0], &last) == 0);
    int removed = 0;
    for (int j = 0; j < N; j++)
        removed += ask_check(&q[j], q[j].k == 0 ? ERR_NOT_FOUND : 0) != 0;
    engine_drain(s->engine);
    CHECK(atomic_load(&answered) == N);
    printf("adapter removed with %d requests waiting or running: %d of them failed as removed\n",
           N / 2, removed);
    CHECK(engine_find_model(s->engine, "a0") == ERR_NOT_FOUND);
    /* the others still serve; then, without adapters, the base goes */
    struct ask again = {.id = s->adapter_ids[1], .k = 1, .i = 0};
    ask_submit(s->engine, &again);
    ask_check(&again, 0);
    for (int k = 1; k < N_AD; k++)
        CHECK(engine_remove_model(s->engine, s->adapter_ids[k], NULL) == 0);
    CHECK_MSG(engine_remove_model(s->engine, s->ids[0], NULL) == 0, "%s", err_msg());
    stack_close(s);
}

/* stack_add_adapter's checks name the key; an adapter past its keep_alive
 * leaves its devices while its base stays; one added at runtime serves. */
TEST(stack_add)
{
    struct stack *s = stack_with(1, 64u << 20, 1, 1, NULL);
    if (!s)
        return;
    char dir[1024];
    adapter_path(adapters[1], dir, sizeof(dir));
    struct swap_model *sm;
    const char *key;
    struct stack_adapter_config a = {.name = "late", .base = "nope", .path = dir};
    CHECK(stack_add_adapter(s, &a, &sm, &key) == ERR_INVALID && strcmp(key, "base") == 0);
    a.base = "a0";
    CHECK(stack_add_adapter(s, &a, &sm, &key) == ERR_INVALID && strcmp(key, "base") == 0);
    a.base = "base";
    a.name = "a0";
    CHECK(stack_add_adapter(s, &a, &sm, &key) == ERR_INVALID && strcmp(key, "name") == 0);
    a.name = "late";
    a.path = base_path; /* a model's directory, not an adapter's */
    CHECK(stack_add_adapter(s, &a, &sm, &key) < 0 && strcmp(key, "path") == 0);
    printf("not an adapter: %s\n", err_msg());
    a.path = dir;
    a.keep_alive_set = true;
    a.keep_alive = 0;
    int id = stack_add_adapter(s, &a, &sm, &key);
    CHECK_MSG(id >= 0 && sm, "%s", err_msg());
    CHECK(engine_model_base(s->engine, id) == s->ids[0] && engine_model_swap(s->engine, id) == sm);
    struct ask q = {.id = id, .k = 1, .i = 2};
    ask_submit(s->engine, &q);
    ask_check(&q, 0);
    engine_drain(s->engine);
    /* it leaves at once once idle; the base stays (a wake-up, not a time,
     * decides: the wait is bounded only against a hang) */
    double until = time_now() + 60;
    while (swap_residency(s->mgr, sm) != RES_ON_DISK && swap_residency(s->mgr, sm) != RES_IN_HOST &&
           time_now() < until)
        usleep(1000);
    CHECK(swap_residency(s->mgr, sm) == RES_IN_HOST || swap_residency(s->mgr, sm) == RES_ON_DISK);
    CHECK(swap_residency(s->mgr, s->models[0]) == RES_ON_DEVICE);
    struct engine_model_stats ms;
    CHECK(engine_model_stats(s->engine, id, &ms) == 0 && ms.idle_unloads == 1 && ms.loads == 1);
    stack_close(s);
}

/* The device bytes of the largest fixture adapter (its index into *k, its
 * rank into *rank), as the manager places them. */
static uint64_t largest_adapter(int *k, int *rank)
{
    struct mgr_rig g;
    uint64_t amax = 0;
    mgr_open(&g, 256u << 20);
    for (int j = 0; j < N_AD; j++) {
        char p[1024];
        struct swap_model *a;
        adapter_path(adapters[j], p, sizeof(p));
        CHECK(swap_register_adapter(g.mgr, adapters[j], p, g.base, &a) == 0);
        if (swap_model_total_bytes(a) > amax) {
            amax = swap_model_total_bytes(a);
            *k = j;
            *rank = swap_model_lora_rank(a);
        }
    }
    mgr_close(&g);
    return amax;
}

/* Beside a pinned model: one device with room for the pinned model, the
 * base and a batch of one of its requests, and half the largest adapter.
 * The base's request runs; the adapter's fails at once (ERR_BUSY, naming
 * the adapter, its base and the pinned model) instead of waiting; an
 * admin's add of it is refused (engine_check_pinned_room); configured, the
 * start's check refuses it (stack_load_pinned). */
TEST(pinned)
{
    int k = 0, rank = 0;
    uint64_t amax = largest_adapter(&k, &rank);
    const struct ref *x = &refs[N_AD][0];
    struct model_exec_shape shape =
        engine_batch_shape(64, 1, x->n_prompt, x->n_prompt + x->n_out, x->n_out > 1);
    shape.max_lora_rank = rank;
    uint64_t base_dev, pin_dev, host;
    char pin_path[1024], dir[1024];
    snprintf(pin_path, sizeof(pin_path), "%s/pre_ln_f32", FIXTURES);
    CHECK(swap_layout_bytes(base_path, 1, 1, &shape, &base_dev, &host) == 0);
    CHECK(swap_layout_bytes(pin_path, 1, 1, NULL, &pin_dev, &host) == 0);
    adapter_path(adapters[k], dir, sizeof(dir));
    struct stack_model_config mc[2] = {{.name = "base", .path = base_path},
                                       {.name = "pin", .path = pin_path, .pinned = true}};
    struct stack_adapter_config ac = {.name = "ad", .base = "base", .path = dir};
    struct stack_config cfg = {.n_devices = 1,
                               .host_budget = 256u << 20,
                               .engine = {.max_batch = 1},
                               .models = mc,
                               .n_models = 2,
                               .adapters = &ac,
                               .n_adapters = 1};
    cfg.device_budget[0] = pin_dev + base_dev + amax / 2;
    struct stack *s = NULL;
    CHECK_MSG(stack_open(&cfg, &s) == 0, "stack_open: %s", err_msg());
    if (!s)
        return;
    /* configured: the start refuses the pinned set */
    CHECK(stack_load_pinned(s) == ERR_NOMEM);
    printf("at start: %s\n", err_msg());
    CHECK(strstr(err_msg(), "adapter ad of model base") && strstr(err_msg(), "pin"));
    stack_close(s);
    /* added at runtime to a stack whose pinned model is on its device */
    cfg.n_adapters = 0;
    CHECK_MSG(stack_open(&cfg, &s) == 0, "stack_open: %s", err_msg());
    if (!s)
        return;
    CHECK_MSG(stack_load_pinned(s) == 0, "%s", err_msg());
    struct swap_model *sm;
    int id = stack_add_adapter(s, &ac, &sm, NULL);
    CHECK_MSG(id >= 0, "%s", err_msg());
    CHECK(engine_check_pinned_room(s->engine, id) == ERR_NOMEM);
    printf("admin add: %s\n", err_msg());
    CHECK(strstr(err_msg(), "adapter ad of model base") && strstr(err_msg(), "pin"));
    struct ask base_q = {.id = s->ids[0], .k = N_AD, .i = 0};
    ask_submit(s->engine, &base_q);
    ask_check(&base_q, 0);
    struct ask ad_q = {.id = id, .k = k, .i = 0};
    ask_submit(s->engine, &ad_q);
    /* failed by the scheduler's next look, not by a time: the bound only
     * stops a hang from blocking the suite */
    double until = time_now() + 60;
    while (!engine_req_done(ad_q.r) && time_now() < until)
        usleep(1000);
    CHECK_MSG(engine_req_done(ad_q.r),
              "the adapter's request still waits beside the pinned model (base %d, adapter %d)",
              (int)swap_residency(s->mgr, s->models[0]), (int)swap_residency(s->mgr, sm));
    if (engine_req_done(ad_q.r)) {
        const char *why = engine_req_error(ad_q.r);
        printf("request: %s\n", why);
        CHECK(strstr(why, "adapter ad of model base") && strstr(why, "(pin)"));
        ask_check(&ad_q, ERR_BUSY);
    } else {
        engine_cancel(s->engine, ad_q.r);
        engine_req_wait(ad_q.r);
        engine_req_release(ad_q.r);
    }
    stack_close(s);
}

/* A gate in on_token: the first token of a request given gate_token holds
 * its batch (and so its adapter in use) until the test opens it. */
static atomic_int gate; /* 0: armed, 1: a batch waits in it, 2: open */

static void gate_token(struct engine_req *r, int32_t token, void *ctx)
{
    (void)r;
    (void)token;
    (void)ctx;
    int armed = 0;
    if (atomic_compare_exchange_strong(&gate, &armed, 1))
        while (atomic_load(&gate) != 2)
            usleep(100);
}

static void gate_wait(void)
{
    while (atomic_load(&gate) != 1)
        usleep(100);
}

/* Submits refs[k][i] to model id with on_token and on_done set. */
static void submit_with(struct engine *e, struct ask *q,
                        void (*on_token)(struct engine_req *, int32_t, void *),
                        void (*on_done)(struct engine_req *, void *))
{
    const struct ref *x = &refs[q->k][q->i];
    struct engine_request_params p = {.model = q->id,
                                      .prompt = x->prompt,
                                      .n_prompt = x->n_prompt,
                                      .max_tokens = x->n_out,
                                      .sampling = {.temperature = 0, .top_p = 1},
                                      .on_token = on_token,
                                      .on_done = on_done};
    CHECK_MSG(engine_submit(e, &p, &q->r) == 0, "submit: %s", err_msg());
}

/* Admin calls on an adapter: its load while its base is on disk loads the
 * base first; its unload while a sequence of the base's batch holds it is
 * deferred to that sequence's end (a request for it that arrives meanwhile
 * waits, then loads it again), each answered right. */
TEST(admin)
{
    struct stack *s = stack_with(1, 64u << 20, 1, N_AD, NULL);
    if (!s)
        return;
    int id = s->adapter_ids[1];
    struct swap_model *sm = s->adapters[1];
    CHECK(swap_residency(s->mgr, s->models[0]) != RES_ON_DEVICE);
    CHECK_MSG(engine_load_model(s->engine, id) == 0, "load with its base on disk: %s", err_msg());
    CHECK(swap_wait_loaded(s->mgr, sm) == 0);
    CHECK(swap_residency(s->mgr, s->models[0]) == RES_ON_DEVICE &&
          swap_residency(s->mgr, sm) == RES_ON_DEVICE);
    atomic_store(&gate, 0);
    struct ask q = {.id = id, .k = 1, .i = 0}, late = {.id = id, .k = 1, .i = 1};
    submit_with(s->engine, &q, gate_token, NULL);
    gate_wait(); /* its sequence holds the adapter */
    int rc = engine_unload_model(s->engine, id);
    CHECK_MSG(rc == 0, "unload in use: %d (%s)", rc, err_msg());
    CHECK(swap_residency(s->mgr, sm) == RES_ON_DEVICE);
    ask_submit(s->engine, &late);
    atomic_store(&gate, 2);
    ask_check(&q, 0);
    ask_check(&late, 0);
    engine_drain(s->engine);
    struct engine_model_stats ms;
    CHECK(engine_model_stats(s->engine, id, &ms) == 0);
    printf("adapter unloaded in use: %llu unloads, %llu loads\n", (unsigned long long)ms.unloads,
           (unsigned long long)ms.loads);
    CHECK(ms.unloads == 1 && ms.loads == 2 && ms.ok == 2);
    stack_close(s);
}

/* An adapter waiting for room past its max_queue_wait while a higher
 * priority adapter's requests keep coming: the device has room for one of
 * the largest adapters, the other's, whose batch is held (gate) while the
 * waiting one's request and then N_LATE more of the other's arrive. The
 * waiting one's request is answered before any of those later arrivals:
 * counted, not timed. */
enum { N_OPEN = 12, N_LATE = 36 };
static atomic_int stream_done, stream_at_c;

static void stream_on_done(struct engine_req *r, void *ctx)
{
    (void)r;
    (void)ctx;
    atomic_fetch_add(&stream_done, 1);
}

static void stream_c_done(struct engine_req *r, void *ctx)
{
    (void)r;
    (void)ctx;
    atomic_store(&stream_at_c, atomic_load(&stream_done));
}

TEST(starve)
{
    enum { COPIES = 2 * N_AD };
    static char dir[512]; /* test_scratch_dir keeps it until exit */
    test_scratch_dir(dir, sizeof(dir), "adapters_starve");
    int k = 0, rank = 0;
    uint64_t amax = largest_adapter(&k, &rank);
    struct model_exec_shape shape = engine_batch_shape(64, 8, 9, 9 + 12, true);
    shape.max_lora_rank = 32;
    uint64_t dev, host;
    CHECK(swap_layout_bytes(base_path, 1, 1, &shape, &dev, &host) == 0);
    struct stack *s = stack_with(1, dev + 3 * amax / 2, 1, COPIES, dir);
    if (!s)
        return;
    int a = s->adapter_ids[k], c = s->adapter_ids[k + N_AD]; /* c: a copy of a's adapter */
    CHECK(engine_set_priority(s->engine, a, 10, 0) == 0);
    CHECK(engine_set_priority(s->engine, c, 0, 1e-6) == 0);
    atomic_store(&stream_done, 0);
    atomic_store(&stream_at_c, -1);
    atomic_store(&gate, 0);
    struct ask *q = calloc(N_OPEN + N_LATE, sizeof(*q));
    for (int j = 0; j < N_OPEN + N_LATE; j++)
        q[j] = (struct ask){.id = a, .k = k, .i = j % 3};
    struct ask cq = {.id = c, .k = k, .i = 0};
    for (int j = 0; j < N_OPEN; j++)
        submit_with(s->engine, &q[j], j == 0 ? gate_token : NULL, stream_on_done);
    gate_wait(); /* a's batch runs, a in use */
    submit_with(s->engine, &cq, NULL, stream_c_done);
    usleep(1000); /* past c's bound of a microsecond */
    for (int j = N_OPEN; j < N_OPEN + N_LATE; j++)
        submit_with(s->engine, &q[j], NULL, stream_on_done);
    atomic_store(&gate, 2);
    ask_check(&cq, 0);
    for (int j = 0; j < N_OPEN + N_LATE; j++)
        ask_check(&q[j], 0);
    engine_drain(s->engine);
    int at_c = atomic_load(&stream_at_c);
    printf("adapter waiting past its bound answered after %d of the other's %d requests (%d "
           "arrived before it)\n",
           at_c, N_OPEN + N_LATE, N_OPEN);
    CHECK_MSG(at_c >= 0 && at_c <= N_OPEN, "answered after %d of the other's", at_c);
    free(q);
    stack_close(s);
}

static void setup(void)
{
    snprintf(base_path, sizeof(base_path), "%s/%s", FIXTURES, BASE);
    refs_load();
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
