#!/usr/bin/env python3
"""Runs the same benchmarks with two shardswap binaries, interleaved in one
run (A, B, A, B, ...), and prints one markdown table of after/before ratios
of each benchmark's headline numbers (best of --repeat per binary).

    python3 tools/bench_before_after.py --before OLD/build/shardswap --after build/shardswap \
        [--model DIR] [--cache DIR] [--repeat 3] [--prompt-len 128] [--gen 32] [--threads 2] \
        [--swap-preset opt-1.3b] [--swap-layers 4] [--sim-config computron:all] [--sim-seeds 5] \
        [--before-src DIR] [--after-src DIR] [--benchmarks forward,swap,simulate,fixed] \
        [--json] [--json-out FILE]

Benchmarks: `bench forward` on --model (prefill and decode tokens/s; batch 1,
--prompt-len, --gen, --threads), `bench swap` on --swap-preset with
--swap-layers layers in its default layouts (swap-in GB/s, cold-request
latency, and the bytes each layout moves, which must be equal), and
`bench workload --simulate` on --sim-config (the costs each binary measures
first, then the mean over configs of the p99 and mean latency per policy:
close, not equal, since the costs are measured).

Then the simulation on fixed costs: tools/sim_fixed_costs.c is compiled
against each side's headers and libshardswap_lib.a (the source tree is the
binary's folder's parent unless --before-src/--after-src say otherwise; the
link line is its build's CMakeFiles/shardswap.dir/link.txt) and run on the
cached 2-layer opt-1.3b; its outputs (every latency statistic of Computron's
19 configs, both policies, 17 digits) must be byte for byte identical, and
the report says whether they are. The machine is shared: run both binaries
in the same invocation and read the ratios, not the absolutes.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def forward(binary, a):
    r = run_json([binary, "bench", "forward", "--model", a.model, "--threads", str(a.threads),
                  "--prompt-len", str(a.prompt_len), "--gen", str(a.gen), "--repeat", "3", "--json"])
    return {"forward prefill tok/s": r["prefill_tok_s"],
            "forward decode tok/s": r["decode_tok_s"]}


def swap(binary, a):
    r = run_json([binary, "bench", "swap", "--preset", a.swap_preset, "--layers",
                  str(a.swap_layers), "--repeat", "3", "--cache", a.cache, "--json"])
    out = {}
    for lay in r["layouts"]:
        name = f'{lay["tp"]}x{lay["pp"]}'
        out[f"swap {name} load GB/s"] = lay["load_gb_s"]
        out[f"swap {name} cold request s (lower is better)"] = lay["cold_overlap_s"]
        out[f"swap {name} bytes (equal)"] = lay["bytes"]
    return out


def simulate(binary, a):
    r = run_json([binary, "bench", "workload", "--simulate", "--seeds", str(a.sim_seeds),
                  "--config", a.sim_config, "--cache", a.cache, "--json"])
    out = {"simulate measured load s (lower is better)": r["load_s"],
           "simulate measured batch of 1 s (lower is better)": r["batch_s"][0],
           f"simulate measured batch of {len(r['batch_s'])} s (lower is better)": r["batch_s"][-1]}
    acc = {}
    for cfg in r["configs"]:
        for p in cfg["policies"]:
            acc.setdefault(p["policy"], {"p99": [], "mean": []})
            acc[p["policy"]]["p99"].append(p["p99_s"])
            acc[p["policy"]]["mean"].append(p["mean_s"])
    for pol, v in acc.items():
        out[f"simulate {pol} mean p99 s (lower is better)"] = statistics.mean(v["p99"])
        out[f"simulate {pol} mean latency s (lower is better)"] = statistics.mean(v["mean"])
    return out


def best(runs):
    res = {}
    for k in runs[0].keys():
        vals = [r[k] for r in runs if k in r]
        res[k] = min(vals) if "lower is better" in k else max(vals)
    return res


def src_of(binary, given):
    """The source tree of a binary in SRC/BUILD/shardswap, unless given."""
    src = given or os.path.dirname(os.path.dirname(os.path.abspath(binary)))
    if not os.path.isfile(os.path.join(src, "src", "workload", "simulate.h")):
        sys.exit(f"{src}: no src/workload/simulate.h (say --before-src/--after-src)")
    return src


def fixed_costs(binary, src, model, seeds, tmp, tag):
    """sim_fixed_costs.c built against the binary's library and run: its output."""
    build = os.path.dirname(os.path.abspath(binary))
    with open(os.path.join(build, "CMakeFiles", "shardswap.dir", "link.txt")) as fh:
        words = shlex.split(fh.read())
    libs = words[words.index("-o") + 2:]  # after "-o shardswap": rpath, the libraries
    # CMake puts long link lines (a CUDA build's) in response files
    # (@CMakeFiles/.../linkLibs.rsp), relative to the build directory
    expanded = []
    for w in libs:
        if w.startswith("@"):
            with open(os.path.join(build, w[1:])) as fh:
                expanded += shlex.split(fh.read())
        else:
            expanded.append(w)
    libs = [os.path.join(build, w) if w.endswith(".a") and not os.path.isabs(w) else w
            for w in expanded] + ["-lstdc++"]  # the CUDA objects' C++ runtime
    exe = os.path.join(tmp, f"sim_fixed_costs_{tag}")
    subprocess.run(["cc", "-O2", "-std=c11", "-I", os.path.join(src, "src"),
                    os.path.join(HERE, "sim_fixed_costs.c"), "-o", exe] + libs, check=True)
    return subprocess.run([exe, model, str(seeds)], check=True, capture_output=True,
                          text=True).stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--before-src")
    ap.add_argument("--after-src")
    ap.add_argument("--model", help="checkpoint for bench forward (skipped when absent)")
    ap.add_argument("--cache", default="models")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--swap-preset", default="opt-1.3b")
    ap.add_argument("--swap-layers", type=int, default=4)
    ap.add_argument("--sim-config", default="computron:all")
    ap.add_argument("--sim-seeds", type=int, default=5)
    ap.add_argument("--benchmarks", default="forward,swap,simulate,fixed",
                    help="which to run (fixed: the simulation on fixed costs)")
    ap.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    ap.add_argument("--json-out", help="also write the JSON to this file")
    a = ap.parse_args()
    srcs = {"before": src_of(a.before, a.before_src), "after": src_of(a.after, a.after_src)}
    which = set(a.benchmarks.split(","))
    runs = {"before": [], "after": []}
    for i in range(a.repeat):
        # A B, then B A: neither side always runs after the other
        sides = (("before", a.before), ("after", a.after))
        for side, binary in sides if i % 2 == 0 else sides[::-1]:
            r = {}
            if a.model and "forward" in which:
                r.update(forward(binary, a))
            if "swap" in which:
                r.update(swap(binary, a))
            if "simulate" in which:
                r.update(simulate(binary, a))
            runs[side].append(r)
    b, f = best(runs["before"]), best(runs["after"])
    rows = [(k, b[k], f[k], f[k] / b[k] if b[k] else float("nan")) for k in b if k in f]

    # the simulation on fixed costs, on the model bench workload cached (2 layers, seed 0)
    sim_model = os.path.join(a.cache, "opt-1.3b-l2-F16-s0")
    outs = {"before": "", "after": ""}
    if "fixed" in which:
        if not os.path.isdir(sim_model):  # bench workload caches it
            subprocess.run([a.after, "bench", "workload", "--simulate", "--seeds", "1", "--config",
                            "computron:0", "--cache", a.cache, "--json"], check=True,
                           capture_output=True)
        with tempfile.TemporaryDirectory() as tmp:
            outs = {side: fixed_costs(binary, srcs[side], sim_model, a.sim_seeds, tmp, side)
                    for side, binary in (("before", a.before), ("after", a.after))}
    lines = [x.splitlines() for x in outs.values()]
    differ = [i for i, (x, y) in enumerate(zip(*lines)) if x != y]
    identical = outs["before"] == outs["after"] and len(lines[0]) > 0
    fixed = None if "fixed" not in which else {"lines": len(lines[0]), "identical": identical,
             "first_difference": None if identical else
             {"before": lines[0][differ[0]] if differ else None,
              "after": lines[1][differ[0]] if differ else None}}
    doc = {"metrics": [{"metric": k, "before": x, "after": y, "after_over_before": q}
                       for k, x, y, q in rows],
           "simulate_fixed_costs": fixed}
    if a.json_out:
        with open(a.json_out, "w") as fh:
            json.dump(doc, fh, indent=1)
    if a.json:
        json.dump(doc, sys.stdout, indent=1)
        print()
        return
    print(f"| metric (best of {a.repeat}, interleaved) | before | after | after/before |")
    print("|---|---:|---:|---:|")
    for k, x, y, q in rows:
        print(f"| {k} | {x:.4g} | {y:.4g} | {q:.3f} |")
    if "fixed" in which:
        print(f"\nsimulation on fixed costs (tools/sim_fixed_costs.c, 19 Computron configs x 2 policies, "
              f"{a.sim_seeds} seeds, {fixed['lines']} lines of 17-digit statistics): "
              + ("IDENTICAL" if identical else f"DIFFERENT, first at: {fixed['first_difference']}"))


if __name__ == "__main__":
    main()
