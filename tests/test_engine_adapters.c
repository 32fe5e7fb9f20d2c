/* LoRA adapters served as models over a resident base (swap/, engine/,
 * stack): registration over a base and its refusals, residency that needs
 * the base's, a thousand tiny adapters costing host memory only once
 * loaded, requests over a base and its adapters served together through
 * the engine (greedy ids equal to PEFT's references: the fixtures'
 * expected.json under tests/fixtures/lora), adapter churn with room for
 * few, removal, and a TP 2 base. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "backend/device.h"
#include "core/error.h"
#include "engine/stack.h"
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
    char scratch[512], dir[1024], target[1024];
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

static void setup(void)
{
    snprintf(base_path, sizeof(base_path), "%s/%s", FIXTURES, BASE);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
