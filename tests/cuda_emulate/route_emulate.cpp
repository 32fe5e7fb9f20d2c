/* route.cuh's kernels run on the CPU (run.sh says how and why), a host
 * thread per CUDA thread with real barriers for __syncthreads, __syncwarp
 * and the shuffles (cuda_common.cuh here), launched as route.cu launches
 * them, against the CPU backend's cpu_route_topk: with the same expf on
 * both sides every output must be bit-equal. Cases: Mixtral's and
 * Qwen3-MoE's shapes, a shared expert under a range of experts, 256
 * experts at top 16, one token, a prefill of many blocks, a padding mask,
 * experts missing (kern_route.have);
 * logits on a grid with many equal values, so ties are common. What this
 * cannot see: the GPU's expf (a few ulps from the CPU's) and the launch. */
#include <stdio.h>
#include <stdlib.h>

#include "route.cuh"
extern "C" {
#include "backend/kernels.h"
int cpu_route_topk(const float *logits, const struct kern_route *r,
                   const struct kern_route_out *out);
int cpu_route_group(const struct kern_route *r, const struct kern_route_out *out);
}
static_assert(CUDA_ROUTE_MAX_EXPERTS == KERN_ROUTE_MAX_EXPERTS &&
                  CUDA_ROUTE_MAX_K == KERN_ROUTE_MAX_K,
              "the stub's limits are the kernels'");

static uint64_t rs = 0x2545f4914f6cdd1dull;
static uint64_t rnd()
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

struct outs {
    std::vector<int32_t> choice, rows, slots, counts;
    std::vector<float> choice_w, slot_w;
    outs(int n, int E, int k, int K)
        : choice((size_t)n * k), rows((size_t)n * k), slots((size_t)n * K), counts(2 * (size_t)E),
          choice_w((size_t)n * k), slot_w((size_t)n * K)
    {
    }
};

static int failures;

static void route_case(const char *what, int n, int E, int k, bool norm, int eb, int ee,
                       bool shared, bool masked, bool holes)
{
    const int K = k + shared, group = 3, stride = 11;
    std::vector<float> logits((size_t)n * E), gate(n);
    std::vector<uint8_t> real((size_t)(n / group + 1) * stride), have(E);
    for (auto &l : logits)
        l = 0.05f * (float)(rnd() % (uint64_t)(E / 2 + 1)) - 2.0f;
    for (auto &g : gate)
        g = (float)(rnd() % 1000) / 200.0f - 2.5f;
    for (auto &b : real)
        b = rnd() % 4 != 0;
    for (auto &b : have)
        b = rnd() % 5 != 0;
    struct kern_route r = {};
    r.n = n;
    r.n_experts = E;
    r.top_k = k;
    r.norm = norm;
    r.expert_begin = eb;
    r.expert_end = ee;
    r.slot_stride = K;
    r.shared_gate = shared ? gate.data() : NULL;
    r.real = masked ? real.data() : NULL;
    r.real_group = group;
    r.real_stride = stride;
    r.have = holes ? have.data() : NULL;
    outs c(n, E, k, K), g(n, E, k, K);
    struct kern_route_out o = {c.choice.data(), c.choice_w.data(), c.counts.data(),
                               c.rows.data(),   c.slots.data(),    c.slot_w.data()};
    cpu_route_topk(logits.data(), &r, &o);
    cpu_route_group(&r, &o);

    /* as cuda_launch_route_topk and cuda_launch_route_group launch them */
    emu_launch((unsigned)((n + ROUTE_WARPS - 1) / ROUTE_WARPS), 32 * ROUTE_WARPS, [&] {
        route_choose_kernel(g.choice.data(), g.choice_w.data(), logits.data(), n, E, k, norm);
    });
    emu_launch(1, CUDA_ROUTE_MAX_EXPERTS, [&] {
        route_count_kernel(g.counts.data(), g.choice.data(), n, E, k, r.real, group, stride);
    });
    struct route_group_args a = {
        g.choice.data(), g.counts.data(), g.choice_w.data(), r.shared_gate, n, E, k, K, {0},
        g.rows.data(),   g.slots.data(),  g.slot_w.data()};
    for (int e = eb; e < ee; e++)
        if (!r.have || r.have[e])
            a.has[e / 32] |= 1u << (e % 32);
    emu_launch(1, CUDA_ROUTE_MAX_EXPERTS, [&] { route_group_kernel(a); });

    int bad = 0;
    bad += c.choice != g.choice;
    bad += c.rows != g.rows;
    bad += c.slots != g.slots;
    bad += c.counts != g.counts;
    bad += memcmp(c.choice_w.data(), g.choice_w.data(), c.choice_w.size() * 4) != 0;
    bad += memcmp(c.slot_w.data(), g.slot_w.data(), c.slot_w.size() * 4) != 0;
    printf("route %-28s n %3d, %3d experts, top %2d: %s\n", what, n, E, k,
           bad ? "DIFFERS from cpu_route_topk" : "bit-equal to cpu_route_topk");
    failures += bad != 0;
}

int main()
{
    route_case("mixtral", 5, 8, 2, true, 0, 8, false, false, false);
    route_case("qwen3-moe, padding mask", 7, 128, 8, false, 0, 128, false, true, false);
    route_case("shared, experts 15-29", 9, 60, 4, false, 15, 30, true, true, false);
    route_case("256 experts, top 16", 3, 256, 16, true, 0, 256, false, false, false);
    route_case("one token", 1, 64, 6, true, 0, 64, false, false, false);
    route_case("a prefill over many blocks", 301, 128, 8, true, 40, 90, true, true, false);
    route_case("every expert of 4 taken", 6, 4, 4, false, 0, 4, false, false, false);
    route_case("experts missing", 50, 64, 6, true, 10, 60, true, true, true);
    if (failures) {
        printf("%d route case(s) differ\n", failures);
        return 1;
    }
    return 0;
}
