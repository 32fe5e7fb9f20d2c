#!/usr/bin/env python3
"""Prints the side-by-side table of `shardswap bench workload --json` lines
(tools/bench_computron.sh writes them): per config, each policy's mean and
p99 latency, SLO attainment and swaps, and the default policy's ratios to
computron's. Given the JSON of `bench workload --simulate --config
computron:all --json`, prints the same from the averages over seeds, with the
worst single seed's p99 ratio; with more than two policies (--policy
swapwise,computron,lru,fifo,clairvoyant), every policy's p99 beside the floor.

    python3 tools/computron_table.py bench-out/results.jsonl
    ./build/shardswap bench workload --simulate --config computron:all --link-gbps 1 --json > sim.json
    python3 tools/computron_table.py sim.json
"""
import json
import sys


def simulated(r):
    print(f"simulated clock, {r['seeds']} seeds x {r['duration_s']:g} s per config; load "
          f"{r['load_s']*1e3:.0f} ms, batch of 1 {r['batch_s'][0]*1e3:.0f} ms, of "
          f"{len(r['batch_s'])} {r['batch_s'][-1]*1e3:.0f} ms (measured here)\n")
    print("| config | computron mean / p99 ms | swapwise mean / p99 ms | p99 ratio | worst seed's "
          "p99 ratio | mean ratio | SLO % (c / s) | swaps (c / s) |")
    print("|---|---|---|---|---|---|---|---|")
    worst_p99 = worst_mean = 0.0
    for cfg in r["configs"]:
        p = {x["policy"]: x for x in cfg["policies"]}
        c, s = p["computron"], p["swapwise"]
        rp99, rmean = s["p99_s"] / c["p99_s"], s["mean_s"] / c["mean_s"]
        worst_p99, worst_mean = max(worst_p99, rp99), max(worst_mean, rmean)
        print(f"| {cfg['config']} | {c['mean_s']*1e3:.0f} / {c['p99_s']*1e3:.0f} "
              f"| {s['mean_s']*1e3:.0f} / {s['p99_s']*1e3:.0f} | {rp99:.2f} "
              f"| {s['worst_seed_p99_ratio']:.2f} | {rmean:.2f} "
              f"| {c['slo_attainment']*100:.0f} / {s['slo_attainment']*100:.0f} "
              f"| {c['swaps']:.1f} / {s['swaps']:.1f} |")
    print(f"\nworst swapwise/computron ratio of the averages: p99 {worst_p99:.2f}, mean {worst_mean:.2f}")


def peers(r):
    """Every policy's p99 side by side with the floor, and swapwise's counts
    against computron and clairvoyant (when they ran)."""
    names = [x["policy"] for x in r["configs"][0]["policies"]]
    print(f"simulated clock, {r['seeds']} seeds x {r['duration_s']:g} s per config; load "
          f"{r['load_s']*1e3:.0f} ms, batch of 1 {r['batch_s'][0]*1e3:.0f} ms, of "
          f"{len(r['batch_s'])} {r['batch_s'][-1]*1e3:.0f} ms (measured here); p99 ms, "
          f"averaged over seeds\n")
    print("| config | " + " | ".join(names) + " | floor |")
    print("|---|" + "---|" * (len(names) + 1))
    le = half = near = 0
    for cfg in r["configs"]:
        p = {x["policy"]: x["p99_s"] for x in cfg["policies"]}
        print(f"| {cfg['config']} | " + " | ".join(f"{p[n]*1e3:.0f}" for n in names) +
              f" | {cfg['floor']['p99_s']*1e3:.0f} |")
        if "swapwise" in p and "computron" in p:
            le += p["swapwise"] <= p["computron"]
            half += p["swapwise"] <= 0.5 * p["computron"]
        if "swapwise" in p and "clairvoyant" in p:
            near += p["swapwise"] <= 1.3 * p["clairvoyant"]
    n = len(r["configs"])
    if "swapwise" in names and "computron" in names:
        print(f"\nswapwise p99 <= computron's on {le}/{n}, <= half of it on {half}/{n}", end="")
        if "clairvoyant" in names:
            print(f", within 1.3x of clairvoyant's on {near}/{n}", end="")
        print()


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    if len(rows) == 1 and rows[0].get("simulated"):
        if len(rows[0]["configs"][0]["policies"]) > 2:
            peers(rows[0])
        else:
            simulated(rows[0])
        return
    print("| config | rates | CV | max_loaded | batch | computron mean / p99 ms | swapwise mean / p99 ms "
          "| p99 ratio | mean ratio | SLO % (c / s) | swaps (c / s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    worst_p99 = worst_mean = 0.0
    for r in rows:
        p = {x["policy"]: x for x in r["policies"]}
        c, s = p["computron"], p["swapwise"]
        rp99 = s["p99_s"] / c["p99_s"]
        rmean = s["mean_s"] / c["mean_s"]
        worst_p99, worst_mean = max(worst_p99, rp99), max(worst_mean, rmean)
        rates = ",".join(f"{x:g}" for x in r["rates"]) if r["config"] != "round-robin" else "closed loop"
        print(f"| {r['config']} | {rates} | {r['cv']:g} | {r['max_loaded']} | {r['max_batch']} "
              f"| {c['mean_s']*1e3:.0f} / {c['p99_s']*1e3:.0f} | {s['mean_s']*1e3:.0f} / {s['p99_s']*1e3:.0f} "
              f"| {rp99:.2f} | {rmean:.2f} | {c['slo_attainment']*100:.0f} / {s['slo_attainment']*100:.0f} "
              f"| {c['swaps']} / {s['swaps']} |")
    print(f"\nworst swapwise/computron ratio: p99 {worst_p99:.2f}, mean {worst_mean:.2f}")


if __name__ == "__main__":
    main()
