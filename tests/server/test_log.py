#!/usr/bin/env python3
"""What `shardswap serve` says in its log, and the budgets it starts with
(ctest: server_log).

Three servers on two tiny models (harness.tiny_models):
- room for one (--device-budget): requests alternate between the models,
  so each load evicts the other. At start one line each for the device's
  budget (given), the host budget and the policy (the default); then one
  info line per load ("model m1: loaded B bytes (... MiB) in S s") and per
  eviction ("model m1: evicted for m2: B bytes (... MiB) freed after S s on
  its devices"), as many as /metrics counts, B the bytes /metrics and
  /v1/models give for the model; an admin unload says so with its bytes;
  /health and /metrics requests are not logged at info.
- no --device-budget: the budget is sized for both models at once (its
  start line says so, /metrics' budget holds both), so alternating requests
  load each model once and evict nothing; at debug, /health and /metrics
  requests are logged.
- --keep-alive 0: a model leaves when its request ends, and the log says
  after how long idle, its keep_alive and its bytes.

    test_log.py --bin build/shardswap [--work-dir DIR] [--keep]
"""

import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

MiB = 1 << 20
LOADED = re.compile(r" info  model (\S+): loaded (\d+) bytes \(([\d.]+) MiB\) in ([\d.]+) s$")
EVICTED = re.compile(r" info  model (\S+): evicted for (\S+): (\d+) bytes \(([\d.]+) MiB\) "
                     r"freed after ([\d.]+) s on its devices$")
ADMIN = re.compile(r" info  model (\S+): unloaded by an admin: (\d+) bytes \(([\d.]+) MiB\) "
                   r"freed after ([\d.]+) s on its devices$")
IDLE = re.compile(r" info  model (\S+): unloaded after ([\d.]+) s idle \(keep_alive (\S+) s\): "
                  r"(\d+) bytes \(([\d.]+) MiB\) freed$")

A = None
MODELS = {}


def mib_ok(b, text):
    """The MiB a line gives beside its bytes: the same number, to 0.1 MiB."""
    return abs(float(text) - b / MiB) <= 0.051


def model_bytes(s):
    """Each model's device bytes as /v1/models gives them."""
    st, j = s.json("GET", "/v1/models")
    check(st == 200, "GET /v1/models: %d %s" % (st, j))
    return {m["id"]: m["bytes"] for m in j["data"]}


def counters(s):
    m = harness.parse_metrics(s.metrics())
    out = {}
    for name in MODELS:
        out[name] = {k: harness.metric_sum(m, "^shardswap_%s$" % k, model=name)
                     for k in ("swaps_total", "swapped_bytes_total", "evictions_total")}
    out["budget"] = harness.metric_sum(m, "^shardswap_device_bytes_budget$")
    out["host"] = harness.metric_sum(m, "^shardswap_host_bytes_budget$")
    return out


def lines(log, regex):
    return [m for m in (regex.search(line) for line in log.splitlines()) if m]


def start_lines(log):
    """The budget and policy lines of the start, as (device line, host line, policy line)."""
    dev = re.findall(r" info  device (\S+): budget ([\d.]+) MiB \((.*)\)$", log, re.M)
    host = re.findall(r" info  host: budget ([\d.]+) MiB for the models' copies \((.*)\)$", log,
                      re.M)
    pol = re.findall(r" info  policy: (.*)$", log, re.M)
    return dev, host, pol


def alternate(s, n=4):
    names = sorted(MODELS)
    for i in range(n):
        s.complete(names[i % len(names)], "hi", max_tokens=1)


def test_room_for_one():
    budget = harness.room_for(MODELS, 1)
    s = harness.Server(A.bin, MODELS, A.work_dir, device_budget=budget)
    s.start()
    try:
        alternate(s)
        for path in ("/health", "/metrics"):
            st, _, _ = s.request("GET", path)
            check(st == 200, "GET %s: %d" % (path, st))
        nbytes = model_bytes(s)
        c = counters(s)
        st, j = s.json("POST", "/admin/models/m2/unload", key="admin")
        check(st == 200, "unload m2: %d %s" % (st, j))
    finally:
        _, log = s.stop()

    dev, host, pol = start_lines(log)
    check(len(dev) == 1 and dev[0][0] == "cpu:0" and dev[0][2] == "given" and
          mib_ok(budget, dev[0][1]), "the device's start line: %s (budget %d)" % (dev, budget))
    check(len(host) == 1 and mib_ok(c["host"], host[0][0]) and "every model" in host[0][1],
          "the host's start line: %s (budget %d)" % (host, c["host"]))
    check(pol == ["swapwise (the default)"], "the policy's start line: %s" % pol)

    loads, evictions = lines(log, LOADED), lines(log, EVICTED)
    for name in MODELS:
        mine = [m for m in loads if m.group(1) == name]
        b = nbytes[name]
        check(len(mine) == c[name]["swaps_total"] == 2,
              "%s: %d load lines, /metrics %d loads (want 2):\n%s" %
              (name, len(mine), c[name]["swaps_total"], log[-3000:]))
        check(sum(int(m.group(2)) for m in mine) == c[name]["swapped_bytes_total"],
              "%s: load lines' bytes %s, /metrics %d" %
              (name, [m.group(2) for m in mine], c[name]["swapped_bytes_total"]))
        for m in mine:
            check(int(m.group(2)) == b and mib_ok(b, m.group(3)) and float(m.group(4)) >= 0,
                  "%s: %r (its bytes: %d)" % (name, m.group(0), b))
        out = [m for m in evictions if m.group(1) == name]
        check(len(out) == c[name]["evictions_total"],
              "%s: %d eviction lines, /metrics %d" % (name, len(out), c[name]["evictions_total"]))
        for m in out:
            check(m.group(2) != name and m.group(2) in MODELS and int(m.group(3)) == b and
                  mib_ok(b, m.group(4)), "%s: %r (its bytes: %d)" % (name, m.group(0), b))
    # m1 m2 m1 m2: three loads evicted the one before
    check(len(evictions) == 3, "want 3 eviction lines:\n%s" % "\n".join(
        m.group(0) for m in evictions))
    # in the log's order, each load after the first follows its victim's line
    order = [(m.group(1), "load") if r is LOADED else (m.group(1), "evict")
             for line in log.splitlines()
             for r in (LOADED, EVICTED) for m in [r.search(line)] if m]
    want = [("m1", "load"), ("m1", "evict"), ("m2", "load"), ("m2", "evict"), ("m1", "load"),
            ("m1", "evict"), ("m2", "load")]
    check(order == want, "loads and evictions in this order: %s, want %s" % (order, want))
    adm = lines(log, ADMIN)
    check(len(adm) == 1 and adm[0].group(1) == "m2" and int(adm[0].group(2)) == nbytes["m2"],
          "admin unload lines: %s" % [m.group(0) for m in adm])
    # probes are not traffic: nothing at info for them, the completions are
    check(not re.search(r" info  \S+ GET /(health|metrics) ", log),
          "/health or /metrics logged at info:\n%s" % log[-3000:])
    check(len(re.findall(r" info  \S+ POST /v1/completions 200 ", log)) == 4,
          "the completions' lines:\n%s" % log[-3000:])


def test_default_budget():
    s = harness.Server(A.bin, MODELS, A.work_dir, device_budget=None, log_level="debug")
    s.start()
    try:
        alternate(s, 6)
        nbytes = model_bytes(s)
        c = counters(s)
    finally:
        _, log = s.stop()
    dev, _, _ = start_lines(log)
    check(len(dev) == 1 and dev[0][2] == "room for every model placed on it at once" and
          mib_ok(c["budget"], dev[0][1]),
          "the device's start line: %s (budget %d)" % (dev, c["budget"]))
    check(c["budget"] >= sum(nbytes.values()),
          "a budget of %d bytes for models of %s" % (c["budget"], nbytes))
    for name in MODELS:
        check(c[name]["swaps_total"] == 1 and c[name]["evictions_total"] == 0,
              "%s: %s (want one load and no eviction)" % (name, c[name]))
    check(not lines(log, EVICTED), "evictions with room for both:\n%s" % log[-3000:])
    check(len(lines(log, LOADED)) == 2, "want 2 load lines:\n%s" % log[-3000:])
    check(re.search(r" debug \S+ GET /metrics 200 ", log),
          "/metrics not logged at debug:\n%s" % log[-3000:])


def test_idle_unload():
    one = {"m1": MODELS["m1"]}
    s = harness.Server(A.bin, one, A.work_dir, extra=("--keep-alive", "0"))
    s.start()
    try:
        s.complete("m1", "hi", max_tokens=1)
        nbytes = model_bytes(s)
        deadline = time.time() + 60
        while time.time() < deadline and not lines(s.log_text(), IDLE):
            time.sleep(0.1)
    finally:
        _, log = s.stop()
    idle = lines(log, IDLE)
    check(len(idle) == 1 and idle[0].group(1) == "m1" and float(idle[0].group(2)) >= 0 and
          idle[0].group(3) == "0" and int(idle[0].group(4)) == nbytes["m1"] and
          mib_ok(nbytes["m1"], idle[0].group(5)),
          "idle unload lines: %s (its bytes: %d)\n%s" %
          ([m.group(0) for m in idle], nbytes["m1"], log[-3000:]))


def main():
    global A, MODELS
    p = harness.common_args(__doc__.splitlines()[0])
    A = harness.resolve_args(p.parse_args())
    MODELS = harness.tiny_models(A.bin, A.work_dir, 2)
    box = {}
    failures = harness.run_tests([test_room_for_one, test_default_budget, test_idle_unload], box)
    if not failures:
        harness.cleanup_args(A)
    print("%d failed" % failures if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
