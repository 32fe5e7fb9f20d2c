#!/usr/bin/env python3
"""`bench swap` and `bench workload` as the processes of one mpirun job on a
tiny model (llama-2-tiny, 8 MB), device d on process d % P: each run must
exit 0, and its --json must say the job's processes and, for bench swap,
each shard's process and rate and each process's aggregate, every rate
positive and the bytes adding up. The same commands without mpirun must
have none of those keys (their output is unchanged). No check depends on
a timing's value; every command has a time limit.

    bench_across.py --bin SHARDSWAP --work-dir DIR -- MPIRUN_ARGS... -n P
"""
import json
import math
import os
import shutil
import subprocess
import sys

LIMIT_S = 240  # one command; a job whose process is lost ends within seconds
PRESET = "llama-2-tiny"


def run(cmd):
    """cmd's stdout, or None after printing why it failed."""
    print("$ " + " ".join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        print(f"FAIL: still running after {LIMIT_S} s")
        return None
    err = p.stderr.decode(errors="replace")
    if p.returncode != 0:
        print(err[-4000:])
        print(f"FAIL: exit {p.returncode}")
        return None
    return p.stdout.decode(errors="replace")


def positive(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


class Checks:
    def __init__(self):
        self.failed = 0

    def check(self, ok, what):
        if not ok:
            print("FAIL: " + what)
            self.failed += 1
        return ok


def check_swap(c, j, procs):
    """bench swap's JSON: one process (procs 1: no per-process keys) or procs."""
    if procs == 1:
        c.check("processes" not in j, "without mpirun: a \"processes\" key")
        for lay in j["layouts"]:
            c.check("shards" not in lay and "processes" not in lay,
                    "without mpirun: per-process keys in a layout")
        return
    c.check(j.get("processes") == procs, f"processes {j.get('processes')}, expected {procs}")
    c.check(j.get("reference_process") == 0, "reference_process is not 0")
    for lay in j["layouts"]:
        name = f"{lay['tp']}x{lay['pp']}"
        k = lay["tp"] * lay["pp"]
        shards = lay.get("shards", [])
        c.check(len(shards) == k, f"{name}: {len(shards)} shards listed, expected {k}")
        for s in shards:
            c.check(s["process"] == s["shard"] % procs,
                    f"{name}: shard {s['shard']} on process {s['process']}, expected "
                    f"{s['shard'] % procs} (device d on d % P)")
            c.check(positive(s["load_gb_s"]) and positive(s["bytes"]),
                    f"{name}: shard {s['shard']}: {s}")
        per = lay.get("processes", [])
        want = sorted({s % procs for s in range(k)})
        c.check([p["process"] for p in per] == want,
                f"{name}: processes {[p['process'] for p in per]}, expected {want}")
        for p in per:
            c.check(positive(p["load_gb_s"]) and positive(p["bytes"]),
                    f"{name}: process {p['process']}: {p}")
            c.check(sorted(p["shards"]) == [s for s in range(k) if s % procs == p["process"]],
                    f"{name}: process {p['process']} holds shards {p['shards']}")
        c.check(sum(p["bytes"] for p in per) == lay["bytes"],
                f"{name}: the processes' bytes do not add up to the layout's {lay['bytes']}")
        c.check(sum(s["bytes"] for s in shards) == lay["bytes"],
                f"{name}: the shards' bytes do not add up to the layout's {lay['bytes']}")
        c.check(positive(lay.get("job_load_gb_s")),
                f"{name}: job_load_gb_s {lay.get('job_load_gb_s')}")
        c.check(lay.get("job_load_gb_s") == lay["load_gb_s"],
                f"{name}: job_load_gb_s is not load_gb_s (all bytes / the model's load)")


def check_workload(c, j, procs):
    if procs == 1:
        c.check("processes" not in j and "device_procs" not in j,
                "without mpirun: per-process keys")
    else:
        c.check(j.get("processes") == procs, f"processes {j.get('processes')}, expected {procs}")
        c.check(j.get("device_procs") == [d % procs for d in range(j["devices"])],
                f"device_procs {j.get('device_procs')}")
    c.check(positive(j["warm_latency_s"]), f"warm_latency_s {j['warm_latency_s']}")
    for p in j["policies"]:
        c.check(p["requests"] > 0 and p["failed"] == 0,
                f"policy {p['policy']}: {p['requests']} requests, {p['failed']} failed")
        c.check(positive(p["mean_s"]) and positive(p["throughput_rps"]),
                f"policy {p['policy']}: mean {p['mean_s']}, throughput {p['throughput_rps']}")


def main():
    argv = sys.argv[1:]
    sep = argv.index("--")
    opts, mpirun = argv[:sep], argv[sep + 1:]
    exe = opts[opts.index("--bin") + 1]
    work = opts[opts.index("--work-dir") + 1]
    procs = int(mpirun[mpirun.index("-n") + 1])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model = os.path.join(work, "model")
    cache = os.path.join(work, "cache")
    c = Checks()
    if run([exe, "gen-model", "--preset", PRESET, "--out", model]) is None:
        return 1
    swap = ["bench", "swap", "--model", model, "--layouts", "2x1,1x2,4x1", "--repeat", "2",
            "--prompt-len", "4"]
    # the models of bench workload generated into the cache first, by the run
    # without mpirun: under mpirun every process reads them from there
    workload = ["bench", "workload", "--config", "round-robin", "--models", "2", "--requests",
                "6", "--max-loaded", "1", "--preset", PRESET, "--layers", "2", "--cache", cache,
                "--out-dir", os.path.join(work, "out")]
    for n, prefix in ((1, []), (procs, mpirun)):
        out = run(prefix + [exe] + swap + ["--json"])
        if out is None or not c.check(out.count("\n") == 1, "bench swap: not one JSON line"):
            return 1
        check_swap(c, json.loads(out), n)
        out = run(prefix + [exe] + workload + ["--json"])
        if out is None or not c.check(out.count("\n") == 1, "bench workload: not one JSON line"):
            return 1
        check_workload(c, json.loads(out), n)
    # the tables say it ran across the processes
    out = run(mpirun + [exe] + swap)
    if out is None:
        return 1
    print(out)
    c.check(f"across {procs} processes" in out and "per process" in out,
            "bench swap's table does not say it ran across the processes")
    out = run(mpirun + [exe] + workload)
    if out is None:
        return 1
    print(out)
    c.check(f"across {procs} processes" in out,
            "bench workload's table does not say it ran across the processes")
    if c.failed:
        print(f"{c.failed} checks failed")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
