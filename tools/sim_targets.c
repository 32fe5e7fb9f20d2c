/* The policy targets of issue 23 item 4 on fixed costs, for before/after
 * checks of a policy change.
 *
 *     sim_targets MODEL_DIR [SEEDS [computron|chat|all [POLICY [BOUND]]]]
 *
 * POLICY (default swapwise) is measured in swapwise's place and BOUND
 * (default clairvoyant) in clairvoyant's: swapwise-partial with
 * clairvoyant-partial, say. The models' layers (what partial residency
 * trims) are MODEL_DIR's own, as bench workload --simulate takes them.
 *
 * bench workload --simulate measures a load's and batches' times first, and
 * on a shared machine those move by a third between runs, so two builds of a
 * policy never simulate on the same costs. This program runs the same
 * simulation (workload/simulate.h) on costs fixed here, of the order bench
 * workload --simulate --link-gbps 1 measures on a 2-layer opt-1.3b over two
 * CPU devices (load 220 ms; a batch of 1 27 ms, of 8 93 ms, of 32 257 ms; a
 * chat prefill 0.8 ms per prompt token beyond 8 and a decode step of 1
 * 17 ms, of 8 32 ms), over Computron's 19 configs and a set of chat configs,
 * every policy on the same arrivals, and prints per config each policy's p99
 * (and for chat its token SLO attainment and goodput), then the counts the
 * targets name: swapwise's p99 against computron's (<= it, <= half of it,
 * the worst seed's ratio) and within 1.3x of clairvoyant's, and for chat
 * swapwise's attainment against every peer's and its goodput against lru's.
 * Not part of the build: it links the library's internals (build it as
 * tools/bench_before_after.py builds sim_fixed_costs.c, against a build's
 * libshardswap_lib.a). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "workload/computron.h"
#include "workload/replay.h"
#include "workload/simulate.h"

#include "sim_costs.h"

#define N_POL 5
static const char *policies[N_POL] = {"computron", "swapwise", "lru", "fifo", "clairvoyant"};
enum { COMPUTRON, SWAPWISE, LRU, FIFO, CLAIRVOYANT };

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 6) {
        fprintf(stderr, "usage: sim_targets MODEL_DIR [SEEDS [computron|chat|all [POLICY "
                        "[BOUND]]]]\n");
        return 2;
    }
    int seeds = argc >= 3 ? atoi(argv[2]) : 10;
    const char *only = argc >= 4 ? argv[3] : "all";
    if (argc >= 5) /* the policy measured in swapwise's place, and its bound */
        policies[SWAPWISE] = argv[4];
    if (argc >= 6)
        policies[CLAIRVOYANT] = argv[5];
    const char *paths[1] = {argv[1]};
    struct replay_rig rig = {
        .paths = paths, .n_models = 1, .tp = 2, .device_kind = "cpu", .link_gbps = 1};
    if (strcmp(only, "chat") != 0) {
        struct sim_config costs;
        costs_fixed(&costs, false);
        int le = 0, half = 0, near = 0;
        double worst = 0;
        printf("%-14s %9s %9s %9s %9s %9s %9s %7s\n", "config", "swapwise", "computron", "lru",
               "fifo", "clairv", "s/c", "worst");
        for (int k = 0; k < WORKLOAD_COMPUTRON_CONFIGS; k++) {
            struct workload_config c;
            workload_computron(k, &c);
            struct simulate_summary s[N_POL];
            if (simulate_workload(&rig, &c, &costs, policies, N_POL, 1, seeds, 20, 0.25, s) < 0) {
                fprintf(stderr, "sim_targets: computron:%d: %s\n", k, err_msg());
                return 1;
            }
            double r = s[SWAPWISE].p99 / s[COMPUTRON].p99;
            le += r <= 1;
            half += r <= 0.5;
            near += s[SWAPWISE].p99 <= 1.3 * s[CLAIRVOYANT].p99;
            worst = s[SWAPWISE].worst_p99_ratio > worst ? s[SWAPWISE].worst_p99_ratio : worst;
            printf("computron:%-4d %9.0f %9.0f %9.0f %9.0f %9.0f %9.2f %7.2f\n", k,
                   s[SWAPWISE].p99 * 1e3, s[COMPUTRON].p99 * 1e3, s[LRU].p99 * 1e3,
                   s[FIFO].p99 * 1e3, s[CLAIRVOYANT].p99 * 1e3, r, s[SWAPWISE].worst_p99_ratio);
        }
        printf("computron: swapwise p99 <= computron's on %d/19, <= half on %d/19, within 1.3x "
               "of clairvoyant's on %d/19; worst seed's swapwise/computron p99 %.2f\n",
               le, half, near, worst);
    }
    if (strcmp(only, "computron") == 0)
        return 0;
    static const char *const chats[] = {"chat:20:0.2", "chat:20:0.35",     "chat:20:0.5",
                                        "chat:20:1",   "chat:20:0.5:4",    "chat:8:0.3",
                                        "chat:50:0.5", "chat:20:0.5:1:1.5"};
    int n_chat = (int)(sizeof(chats) / sizeof(chats[0])), atleast = 0, near = 0;
    struct sim_config costs;
    costs_fixed(&costs, true);
    printf("%-18s %-11s %9s %8s %8s\n", "config", "policy", "p99 ms", "tokSLO%", "good r/s");
    for (int k = 0; k < n_chat; k++) {
        char cfg[64];
        snprintf(cfg, sizeof(cfg), "%s", chats[k]);
        struct workload_flags f = {.config = cfg, .alpha = -1};
        struct workload_config c;
        if (workload_config_from_flags(&f, &c) < 0) {
            fprintf(stderr, "sim_targets: %s: %s\n", cfg, err_msg());
            return 1;
        }
        rig.fit_prompt = c.lengths.prompt.max;
        rig.fit_max_tokens = c.lengths.output.max;
        struct simulate_summary s[N_POL];
        if (simulate_workload(&rig, &c, &costs, policies, N_POL, 1, seeds, 120, 1, s) < 0) {
            fprintf(stderr, "sim_targets: %s: %s\n", cfg, err_msg());
            return 1;
        }
        bool ok = true;
        for (int p = 0; p < N_POL; p++) {
            if (p != SWAPWISE && p != CLAIRVOYANT && s[p].token_slo > s[SWAPWISE].token_slo)
                ok = false;
            printf("%-18s %-11s %9.0f %8.1f %8.3f\n", p ? "" : cfg, policies[p], s[p].p99 * 1e3,
                   s[p].token_slo * 100, s[p].goodput);
        }
        atleast += ok;
        near += s[SWAPWISE].p99 <= 1.3 * s[CLAIRVOYANT].p99;
        printf("%-18s swapwise attainment >= every peer's: %s; goodput / lru's %.2f\n", "",
               ok ? "yes" : "NO", s[SWAPWISE].goodput / s[LRU].goodput);
    }
    printf("chat: swapwise attainment >= every peer's on %d/%d, p99 within 1.3x of "
           "clairvoyant's on %d/%d\n",
           atleast, n_chat, near, n_chat);
    return 0;
}
