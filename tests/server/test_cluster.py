#!/usr/bin/env python3
"""`shardswap serve` as a job of two processes under mpirun, and what it does
when one of them fails (ctest: server_cluster).

Device 0 is process 0's and device 1 process 1's (--devices
cpu:0,1/cpu:0). Three tiny models: near on device 0, far on device 1 (no
shard on process 0), tp with tensor parallelism 2 over both.

- serving: /health lists both processes ok; greedy completions of every
  model equal `shardswap generate`'s (one process, one device).
- stopped: process 1 stopped (SIGSTOP): a request to far answers 503
  process_unavailable naming process 1 once its heartbeats stop (3 s here,
  SHARDSWAP_HEARTBEAT_TIMEOUT), never hangs; near still answers 200;
  /health says degraded and names process 1 as lost. Continued (SIGCONT),
  the job stops on SIGINT and exits 0.
- killed: process 1 killed (SIGKILL) while serving: the job ends within
  60 s, exits non-zero, and mpirun's message names rank 1 (OpenMPI's
  default: a dead process aborts the job).

    test_cluster.py --bin build/shardswap --mpirun "mpirun -n 2 ..." [--work-dir DIR]
"""

import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

A = None
BEAT_TIMEOUT = 3.0
PROMPT = "The quick brown fox"


def generate_cli(model_dir, prompt, max_tokens):
    r = subprocess.run([A.bin, "generate", "--model", model_dir, "--prompt", prompt,
                        "--max-tokens", str(max_tokens), "--temperature", "0"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    check(r.returncode == 0, "shardswap generate: %s" % r.stderr.decode(errors="replace"))
    return r.stdout.decode()[:-1]


def write_config(models):
    path = os.path.join(A.work_dir, "cluster.yaml")
    with open(path, "w") as f:
        f.write("models:\n")
        f.write("  - {name: near, path: %s, devices: [0]}\n" % models["m1"])
        f.write("  - {name: far, path: %s, devices: [1]}\n" % models["m2"])
        f.write("  - {name: tp, path: %s, tp: 2, devices: [0, 1]}\n" % models["m3"])
    return path


def server(models, config):
    env = {"SHARDSWAP_HEARTBEAT_TIMEOUT": str(BEAT_TIMEOUT)}
    return harness.Server(A.bin, {}, A.work_dir, device_budget=harness.room_for(models, 2),
                          extra=("--config", config), env=env, log_level="info")


def test_serving_and_stopped(models, config):
    s = server(models, config).start()
    try:
        st, h = s.json("GET", "/health")
        check(st == 200 and h["status"] == "ok" and
              [p["status"] for p in h.get("processes", [])] == ["ok", "ok"], "/health: %s" % h)
        for name, m in (("near", "m1"), ("far", "m2"), ("tp", "m3")):
            want = generate_cli(models[m], PROMPT, 8)
            got = s.complete(name, PROMPT, max_tokens=8, temperature=0)["choices"][0]["text"]
            check(got == want, "%s: %r, shardswap generate %r" % (name, got, want))
        print("ok    serving: near, far and tp equal shardswap generate", flush=True)

        pid1 = harness.rank_pid(s.proc.pid, 1)
        os.kill(pid1, signal.SIGSTOP)
        try:
            t0 = time.time()
            st, j = s.json("POST", "/v1/completions",
                           {"model": "far", "prompt": PROMPT, "max_tokens": 4}, timeout=120)
            took = time.time() - t0
            msg = (j or {}).get("error", {}).get("message", "")
            check(st == 503 and j["error"].get("code") == "process_unavailable" and
                  "process 1" in msg, "far with process 1 stopped: %d %s" % (st, j))
            c = s.complete("near", PROMPT, max_tokens=4, temperature=0)
            check(c["choices"][0]["text"] == generate_cli(models["m1"], PROMPT, 4),
                  "near with process 1 stopped: %s" % c)
            st, h = s.json("GET", "/health")
            procs = h.get("processes", [])
            check(st == 200 and h["status"] == "degraded" and len(procs) == 2 and
                  procs[1]["status"] == "lost" and "process 1" in procs[1].get("reason", ""),
                  "/health with process 1 stopped: %d %s" % (st, h))
            print("ok    stopped: far 503 naming process 1 after %.1f s, near 200, /health "
                  "degraded" % took, flush=True)
        finally:
            os.kill(pid1, signal.SIGCONT)
        s.stop(signal.SIGINT)
        print("ok    continued, the job exits 0 on SIGINT", flush=True)
    finally:
        s.kill()


def test_killed(models, config):
    s = server(models, config).start()
    try:
        s.complete("far", PROMPT, max_tokens=2)
        os.kill(harness.rank_pid(s.proc.pid, 1), signal.SIGKILL)
        t0 = time.time()
        try:
            rc = s.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise harness.TestFailure("the job still runs 60 s after process 1 was killed")
        log = s.log_text()
        check(rc != 0, "the job exited 0 after process 1 was killed")
        check(re.search(r"rank 1\b", log) is not None,
              "nothing names rank 1 after it was killed:\n%s" % log[-3000:])
        print("ok    killed: the job ended in %.1f s with exit %d, naming rank 1" %
              (time.time() - t0, rc), flush=True)
    finally:
        s.kill()


def main():
    global A
    p = harness.common_args(__doc__)
    A = harness.resolve_args(p.parse_args())
    check(A.mpirun, "test_cluster.py needs --mpirun (the launcher of a 2-process job)")
    harness.Server.devices_override = A.devices or "cpu:0,1/cpu:0"
    models = harness.tiny_models(A.bin, A.work_dir, 3)
    config = write_config(models)
    failures = 0
    for t in (test_serving_and_stopped, test_killed):
        try:
            t(models, config)
        except Exception as e:  # noqa: BLE001 - every failure is reported
            failures += 1
            print("FAIL  %s: %s: %s" % (t.__name__, type(e).__name__, e), flush=True)
    if not failures:
        harness.cleanup_args(A)
    print("%d failed" % failures if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
