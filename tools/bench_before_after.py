#!/usr/bin/env python3
"""Runs the same benchmarks with two shardswap binaries, interleaved in one
run (A, B, A, B, ...), and prints one markdown table of after/before ratios
of each benchmark's headline numbers (best of --repeat per binary).

    python3 tools/bench_before_after.py --before OLD/shardswap --after build/shardswap \
        [--model DIR] [--cache DIR] [--repeat 3] [--json]

Benchmarks: `bench forward` on --model (prefill and decode tokens/s),
`bench swap` on a 2-layer opt-1.3b (swap-in GB/s per layout, cold-request
latency), and `bench workload --simulate --config computron:all` (the mean of
the 19 configs' p99 and mean latency per policy, which depends on the batch
and load costs each binary measures first). The machine is shared: run both
binaries in the same invocation and read the ratios, not the absolutes.
"""
import argparse
import json
import statistics
import subprocess
import sys


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def forward(binary, model):
    r = run_json([binary, "bench", "forward", "--model", model, "--threads", "2",
                  "--repeat", "3", "--json"])
    return {"forward prefill tok/s": r["prefill_tok_s"],
            "forward decode tok/s": r["decode_tok_s"]}


def swap(binary, cache):
    r = run_json([binary, "bench", "swap", "--preset", "opt-1.3b", "--layers", "2",
                  "--repeat", "3", "--cache", cache, "--json"])
    out = {}
    for lay in r["layouts"]:
        name = f'{lay["tp"]}x{lay["pp"]}'
        out[f"swap {name} load GB/s"] = lay["load_gb_s"]
        out[f"swap {name} cold request s (lower is better)"] = lay["cold_overlap_s"]
    return out


def simulate(binary, cache):
    r = run_json([binary, "bench", "workload", "--simulate", "--seeds", "5",
                  "--config", "computron:all", "--cache", cache, "--json"])
    acc = {}
    for cfg in r["configs"]:
        for p in cfg["policies"]:
            acc.setdefault(p["policy"], {"p99": [], "mean": []})
            acc[p["policy"]]["p99"].append(p["p99_s"])
            acc[p["policy"]]["mean"].append(p["mean_s"])
    out = {}
    for pol, v in acc.items():
        out[f"simulate {pol} mean p99 s (lower is better)"] = statistics.mean(v["p99"])
        out[f"simulate {pol} mean latency s (lower is better)"] = statistics.mean(v["mean"])
    return out


def best(runs):
    keys = runs[0].keys()
    res = {}
    for k in keys:
        vals = [r[k] for r in runs if k in r]
        res[k] = min(vals) if "lower is better" in k else max(vals)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--model", help="checkpoint for bench forward (skipped when absent)")
    ap.add_argument("--cache", default="models")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    runs = {"before": [], "after": []}
    for _ in range(a.repeat):
        for side, binary in (("before", a.before), ("after", a.after)):
            r = {}
            if a.model:
                r.update(forward(binary, a.model))
            r.update(swap(binary, a.cache))
            r.update(simulate(binary, a.cache))
            runs[side].append(r)
    b, f = best(runs["before"]), best(runs["after"])
    rows = [(k, b[k], f[k], f[k] / b[k] if b[k] else float("nan")) for k in b if k in f]
    if a.json:
        json.dump([{"metric": k, "before": x, "after": y, "after_over_before": q}
                   for k, x, y, q in rows], sys.stdout, indent=1)
        print()
        return
    print(f"| metric (best of {a.repeat}, interleaved) | before | after | after/before |")
    print("|---|---:|---:|---:|")
    for k, x, y, q in rows:
        print(f"| {k} | {x:.4g} | {y:.4g} | {q:.3f} |")


if __name__ == "__main__":
    main()
