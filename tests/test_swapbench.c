/* bench swap's measurement (workload/swapbench.h) on a tiny random OPT model
 * and CPU devices: the counts must add up exactly (every load moves each
 * shard's blobs once, the host tier is filled from disk once, offloads copy
 * nothing back), every number is positive and finite, and a layout the
 * model cannot take is refused naming it. No check depends on a timing's
 * value. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "model/adapter.h"
#include "swap/swap.h"
#include "test.h"
#include "tiny_opt.h"
#include "workload/swapbench.h"

static char tmp[] = "/tmp/shardswap_swapbench_XXXXXX";
static char dir[128];

static void setup(void)
{
    CHECK(mkdtemp(tmp) != NULL);
    snprintf(dir, sizeof(dir), "%s/m", tmp);
    mkdir(dir, 0755);
    struct model_config *c = tiny_opt_config(4, 1000);
    struct model_random_opts o = {.dtype = DTYPE_F16, .seed = 21};
    CHECK(model_random_write(c, dir, &o) == 0);
    model_config_free(c);
}

static bool positive(double x)
{
    return isfinite(x) && x > 0;
}

static struct swapbench_config config(int n, const int *tp, const int *pp, int repeat)
{
    struct swapbench_config c = {
        .dir = dir, .n_layouts = n, .repeat = repeat, .prompt_len = 4, .ref_bytes = 1 << 20};
    for (int i = 0; i < n; i++) {
        c.tp[i] = tp[i];
        c.pp[i] = pp[i];
    }
    return c;
}

/* One layout's results against what its shards are (swap_layout_bytes). */
static void check_layout(const struct swapbench_layout *r, int repeat)
{
    const int k = r->tp * r->pp;
    uint64_t shard[SWAPBENCH_MAX_WORKERS], host = 0, device = 0;
    CHECK(swap_layout_bytes(dir, r->tp, r->pp, NULL, shard, &host) == 0);
    for (int s = 0; s < k; s++)
        device += shard[s];
    CHECK_MSG(r->bytes == device, "%dx%d: %llu device bytes, shards have %llu", r->tp, r->pp,
              (unsigned long long)r->bytes, (unsigned long long)device);
    /* repeat swap-ins, then per round a cold request with overlap, one
     * without (the warm one finds the model resident) */
    const uint64_t loads = 3 * (uint64_t)repeat;
    CHECK_MSG(r->stats.loads == loads, "%dx%d: %llu loads, expected %llu", r->tp, r->pp,
              (unsigned long long)r->stats.loads, (unsigned long long)loads);
    CHECK(r->stats.offloads == loads);
    CHECK_MSG(r->stats.bytes_h2d == loads * host,
              "%dx%d: %llu bytes host -> device, expected "
              "%llu x %llu",
              r->tp, r->pp, (unsigned long long)r->stats.bytes_h2d, (unsigned long long)loads,
              (unsigned long long)host);
    CHECK(r->stats.bytes_disk == host); /* the host tier filled once */
    CHECK(r->stats.bytes_d2h == 0);     /* the host kept every byte: nothing copied back */
    CHECK(r->stats.evictions == 0 && r->stats.compactions == 0);
    CHECK(positive(r->load_s) && positive(r->offload_s) && positive(r->host_fill_s));
    CHECK(positive(r->cold_overlap_s) && positive(r->cold_serial_s) && positive(r->warm_s));
    for (int s = 0; s < SWAPBENCH_MAX_WORKERS; s++)
        CHECK_MSG(s < k ? positive(r->worker_gbs[s]) : r->worker_gbs[s] == 0,
                  "%dx%d: worker %d: %g GB/s", r->tp, r->pp, s, r->worker_gbs[s]);
    CHECK(r->link_h2d_s == 0 && r->link_d2h_s == 0); /* CPU devices: no link */
}

TEST(layouts)
{
    const int tp[] = {1, 2, 1, 2}, pp[] = {1, 1, 2, 2}, repeat = 2;
    struct swapbench_config c = config(4, tp, pp, repeat);
    struct swapbench_report rep;
    int rc = swapbench_run(&c, &rep);
    CHECK_MSG(rc == 0, "%s", err_msg());
    CHECK(rep.n_layouts == 4 && rep.max_workers == 4);
    for (int i = 0; i < rep.n_layouts; i++) {
        CHECK(rep.layouts[i].tp == tp[i] && rep.layouts[i].pp == pp[i]);
        check_layout(&rep.layouts[i], repeat);
    }
    for (int t = 1; t <= rep.max_workers; t++)
        CHECK(positive(rep.memcpy_bps[t]) && positive(rep.stream_bps[t]));
    CHECK(rep.memcpy_bps[0] == 0 && rep.memcpy_bps[rep.max_workers + 1] == 0);
}

/* ref_bytes 0: the reference is not measured */
TEST(no_reference)
{
    struct swapbench_config c = config(1, (int[]){1}, (int[]){1}, 1);
    c.ref_bytes = 0;
    struct swapbench_report rep;
    CHECK(swapbench_run(&c, &rep) == 0);
    CHECK(rep.n_layouts == 1 && rep.memcpy_bps[1] == 0 && rep.stream_bps[1] == 0);
    check_layout(&rep.layouts[0], 1);
}

TEST(refusals)
{
    struct swapbench_report rep;
    /* PP beyond the model's 4 layers, named */
    struct swapbench_config c = config(2, (int[]){1, 1}, (int[]){1, 5}, 1);
    CHECK(swapbench_run(&c, &rep) == ERR_INVALID);
    CHECK_MSG(strstr(err_msg(), "1x5") && strstr(err_msg(), "4 layers"), "%s", err_msg());
    CHECK(rep.n_layouts == 0); /* refused before any layout ran */
    /* TP that does not divide the 4 heads */
    c = config(1, (int[]){3}, (int[]){1}, 1);
    CHECK(swapbench_run(&c, &rep) == ERR_INVALID);
    /* more devices than a layout may have, and a cold request too long */
    c = config(1, (int[]){4}, (int[]){8}, 1);
    CHECK(swapbench_run(&c, &rep) == ERR_INVALID);
    c = config(1, (int[]){1}, (int[]){1}, 1);
    c.prompt_len = SWAPBENCH_MAX_PROMPT + 1;
    CHECK(swapbench_run(&c, &rep) == ERR_INVALID);
    c.prompt_len = 4;
    c.repeat = 0;
    CHECK(swapbench_run(&c, &rep) == ERR_INVALID);
    /* CUDA devices fewer than a layout needs */
    c = config(1, (int[]){2}, (int[]){1}, 1);
    c.cuda = true;
    c.n_gpus = 1;
    CHECK(swapbench_run(&c, &rep) == ERR_INVALID);
    CHECK_MSG(strstr(err_msg(), "2x1"), "%s", err_msg());
    /* no checkpoint there */
    c = config(1, (int[]){1}, (int[]){1}, 1);
    c.dir = "/nonexistent/shardswap";
    CHECK(swapbench_run(&c, &rep) < 0);
}

/* A layout the checkpoint's quantized tensors cannot be split for (Q4_K's
 * 256-element blocks across TP 2) is skipped with its reason; the others
 * are measured; every layout skipped is the error itself. */
TEST(quantized_skip)
{
    struct swapbench_report rep;
    struct swapbench_config c = config(3, (int[]){1, 2, 1}, (int[]){1, 1, 2}, 1);
    c.dir = SHARDSWAP_SOURCE_DIR "/tests/fixtures/gguf/llama_quant/model-q4_k_m.gguf";
    int rc = swapbench_run(&c, &rep);
    CHECK_MSG(rc == 0, "%s", err_msg());
    CHECK(rep.n_layouts == 3);
    CHECK_MSG(strstr(rep.layouts[1].skipped, "block boundaries"), "2x1: \"%s\"",
              rep.layouts[1].skipped);
    CHECK(rep.layouts[1].load_s == 0 && rep.layouts[1].bytes == 0);
    for (int i = 0; i < 3; i += 2) {
        CHECK_MSG(!rep.layouts[i].skipped[0], "%dx%d: %s", rep.layouts[i].tp, rep.layouts[i].pp,
                  rep.layouts[i].skipped);
        CHECK(positive(rep.layouts[i].load_s) && rep.layouts[i].bytes > 0);
    }
    c = config(1, (int[]){2}, (int[]){1}, 1);
    c.dir = SHARDSWAP_SOURCE_DIR "/tests/fixtures/gguf/llama_quant/model-q4_k_m.gguf";
    CHECK(swapbench_run(&c, &rep) == ERR_INVALID);
    CHECK_MSG(strstr(err_msg(), "block boundaries"), "%s", err_msg());
}

/* --adapter: a PEFT adapter of a Llama fixture measured over it, TP 1 and
 * 2: on one device its bytes are model_adapter_bytes' (the whole adapter),
 * split two ways each shard holds its part (the column-parallel A whole on
 * both), less than the model's; its load, offload and fill were timed. */
TEST(adapter)
{
    const char *base = SHARDSWAP_SOURCE_DIR "/tests/fixtures/models/llama_gqa_f32";
    const char *lora = SHARDSWAP_SOURCE_DIR "/tests/fixtures/lora/llama_r16_all_rslora";
    struct swapbench_config c = {.dir = base,
                                 .n_layouts = 2,
                                 .tp = {1, 2},
                                 .pp = {1, 1},
                                 .repeat = 2,
                                 .prompt_len = 4,
                                 .adapter = lora};
    struct swapbench_report rep;
    CHECK_MSG(swapbench_run(&c, &rep) == 0, "%s", err_msg());
    struct model_config *cfg = NULL;
    uint64_t whole = 0;
    int rank = 0;
    CHECK(model_config_load(base, &cfg) == 0 &&
          model_adapter_bytes(lora, cfg, base, &whole, &rank) == 0);
    model_config_free(cfg);
    const struct swapbench_layout *r = rep.layouts;
    CHECK_MSG(r[0].adapter_bytes == whole, "1x1: %llu adapter bytes, model_adapter_bytes %llu",
              (unsigned long long)r[0].adapter_bytes, (unsigned long long)whole);
    CHECK_MSG(r[1].adapter_bytes > whole / 2 && r[1].adapter_bytes < r[1].bytes,
              "2x1: %llu adapter bytes of %llu whole, the model %llu",
              (unsigned long long)r[1].adapter_bytes, (unsigned long long)whole,
              (unsigned long long)r[1].bytes);
    for (int i = 0; i < 2; i++)
        CHECK_MSG(positive(r[i].adapter_load_s) && positive(r[i].adapter_offload_s) &&
                      positive(r[i].adapter_host_fill_s) && positive(r[i].load_s),
                  "%dx%d: adapter load %g, offload %g, fill %g", r[i].tp, r[i].pp,
                  r[i].adapter_load_s, r[i].adapter_offload_s, r[i].adapter_host_fill_s);
}

int main(int argc, char **argv)
{
    int rc = test_main(argc, argv, setup);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return rc;
}
