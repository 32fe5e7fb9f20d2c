#!/usr/bin/env python3
"""Load test of `shardswap serve`: many keep-alive connections for a while
across three models with device room for fewer of them, so the server swaps
all the time (ctest: server_load, shortened; by hand it runs 30 s with 64
connections).

Pass/fail is correctness and bounds only, never speed:
  * every request sent is answered (no connection drops, no timeouts);
  * every answer is 200, or 429 with a Retry-After header; no 5xx, no other;
  * every greedy answer equals `shardswap generate --temperature 0` for the
    same model and prompt (batching and swapping change nothing);
  * the server's RSS is flat: the largest sample of the last window is at
    most the largest of the first window * (1 + --rss-tolerance) +
    --rss-slack-mib (windows: 10 s, or a third of the run when shorter);
  * the device and host memory the server reports in /metrics (sampled
    every 0.5 s) never exceed their budgets;
  * /metrics' ok, rejected and 429 counters moved as the clients saw;
  * admin load/unload/pin/unpin calls beside the load (every 0.2 s) answer
    200 or 409.
It prints requests/s, p50/p99 latency, the 429 share, RSS at start and end
and the swaps, as a table or (--json) one JSON object.

    load_test.py --bin build/shardswap [--duration 30] [--connections 64]
                 [--room 2] [--queue-cap 8] [--json]
"""

import http.client
import json
import os
import random
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

PROMPTS = ["Hello world", "The meaning of life is", "Tell me a story about a cat",
           "1, 2, 3, 4,"]
GREEDY_TOKENS = 8


def generate_cli(binary, model_dir, prompt):
    r = subprocess.run([binary, "generate", "--model", model_dir, "--prompt", prompt,
                        "--max-tokens", str(GREEDY_TOKENS), "--temperature", "0"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    if r.returncode != 0:
        sys.exit("FAIL: shardswap generate: %s" % r.stderr.decode(errors="replace"))
    return r.stdout.decode()[:-1]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.sent = 0
        self.answered = 0
        self.status = {}
        self.latency = []        # seconds, of 200s
        self.problems = []       # what failed, first ones
        self.n_problems = 0
        self.no_retry_after = 0
        self.mismatch = 0

    def problem(self, msg):
        with self.lock:
            self.n_problems += 1
            if len(self.problems) < 20:
                self.problems.append(msg)


def client(a, srv, stats, refs, deadline, seed):
    rnd = random.Random(seed)
    conn = None
    models = sorted(refs)
    while time.time() < deadline:
        if conn is None:
            conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=a.request_timeout)
        model = rnd.choice(models)
        greedy = rnd.random() < 0.5
        prompt = rnd.choice(PROMPTS)
        stream = rnd.random() < 0.25
        body = {"model": model, "prompt": prompt}
        if greedy:
            body.update(max_tokens=GREEDY_TOKENS, temperature=0)
        else:
            body.update(max_tokens=rnd.randint(1, GREEDY_TOKENS), temperature=1.0,
                        seed=rnd.randint(0, 1 << 30))
        if stream:
            body.update(stream=True)
        with stats.lock:
            stats.sent += 1
        t0 = time.time()
        try:
            conn.request("POST", "/v1/completions", json.dumps(body),
                         {"Authorization": "Bearer " + srv.api_key, "Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            status = r.status
            retry_after = r.getheader("Retry-After")
            closes = (r.getheader("Connection") or "").lower() == "close"
        except (OSError, http.client.HTTPException) as e:
            stats.problem("%s on %s: no answer (%s: %s)" % (
                "stream" if stream else "request", model, type(e).__name__, e))
            conn.close()
            conn = None
            continue
        dt = time.time() - t0
        with stats.lock:
            stats.answered += 1
            stats.status[status] = stats.status.get(status, 0) + 1
            if status == 200:
                stats.latency.append(dt)
        if status == 200:
            text = None
            try:
                if stream:
                    events = [e for e in data.decode().split("\n\n") if e.strip()]
                    if not events or events[-1].strip() != "data: [DONE]":
                        raise ValueError("no data: [DONE] at the end")
                    text = "".join(c["text"] for e in events[:-1]
                                   for c in json.loads(e[len("data: "):])["choices"])
                else:
                    text = json.loads(data)["choices"][0]["text"]
            except (ValueError, KeyError, IndexError) as e:
                stats.problem("%s on %s: a 200 that does not parse (%s): %r" % (
                    "stream" if stream else "request", model, e, data[:200]))
            if greedy and text is not None and text != refs[model][prompt]:
                with stats.lock:
                    stats.mismatch += 1
                stats.problem("greedy %s %r (stream %s): %r, shardswap generate %r" % (
                    model, prompt, stream, text, refs[model][prompt]))
        elif status == 429:
            if not retry_after:
                with stats.lock:
                    stats.no_retry_after += 1
            # honour it, capped so the queues stay under pressure
            try:
                wait = float(retry_after or 0)
            except ValueError:
                wait = 0
            time.sleep(min(max(wait, 0.01), 0.2) * rnd.random())
        else:
            stats.problem("%s on %s: status %d %r" % ("stream" if stream else "request", model,
                                                      status, data[:200]))
        if closes:
            conn.close()
            conn = None
    if conn is not None:
        conn.close()


def admin_churn(srv, models, stop, seed, counts, problems):
    """Admin calls in a loop beside the load: load, unload, and pin then
    unpin one model (never two pinned: room is for fewer than all).
    Each must answer 200, or 409 when the model does not fit or is pinned."""
    rnd = random.Random(seed)
    names = sorted(models)
    while not stop.wait(0.2):
        m = rnd.choice(names)
        action = rnd.choice(["load", "unload", "pin"])
        seq = [action] if action != "pin" else ["pin", "unpin"]
        for act in seq:
            try:
                st, _, body = srv.request("POST", "/admin/models/%s/%s" % (m, act), key="admin", timeout=60)
            except OSError as e:
                problems.append("admin %s %s: %s" % (act, m, e))
                continue
            counts[st] = counts.get(st, 0) + 1
            if st not in (200, 409):
                problems.append("admin %s %s: %d %r" % (act, m, st, body[:200]))
            if act == "pin":
                stop.wait(0.2)


def memory_gauges(samples):
    """{(kind, labels): (used, budget)} from the server's metrics: gauges
    whose names say device or host, bytes, and used/resident/allocated vs
    budget/capacity/limit, matched by their other labels."""
    used, budget = {}, {}
    for name, lab, v in samples:
        if "bytes" not in name or name.endswith(("_total", "_count", "_sum", "_bucket")):
            continue
        kind = "device" if "device" in name else "host" if "host" in name else None
        if kind is None:
            continue
        key = (kind, tuple(sorted((k, x) for k, x in lab.items() if k not in ("model",))))
        if re.search(r"budget|capacity|limit", name):
            budget[key] = v
        elif re.search(r"used|resident|allocated|in_use|reserved", name) and "model" not in lab:
            used[key] = max(used.get(key, 0), v)
        elif re.search(r"high_water|peak|max", name):
            used[key] = max(used.get(key, 0), v)
    return {k: (u, budget.get(k)) for k, u in used.items()}


def sampler(srv, stop, rss, mem, t_start, errors):
    while not stop.is_set():
        try:
            rss.append((time.time() - t_start, srv.rss_bytes()))
        except OSError:
            pass
        try:
            st, _, data = srv.request("GET", "/metrics", timeout=30)
            if st == 200:
                for k, (u, b) in memory_gauges(harness.parse_metrics(data.decode())).items():
                    hw, bud = mem.get(k, (0, b))
                    mem[k] = (max(hw, u), b if b is not None else bud)
            else:
                errors.append("/metrics: %d" % st)
        except OSError as e:
            errors.append("/metrics: %s" % e)
        stop.wait(0.5)


def swaps_of(before, after):
    """How far the swap and load counters moved."""
    return harness.metric_sum(after, r"(^|_)swaps_total$") - harness.metric_sum(before, r"(^|_)swaps_total$")


def swaps_needed(models, room):
    return room < len(models)


def pct(xs, p):
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def main():
    p = harness.common_args(__doc__)
    p.add_argument("--duration", type=float, default=30, help="seconds of load (default 30)")
    p.add_argument("--connections", type=int, default=64, help="concurrent connections (default 64)")
    p.add_argument("--room", type=int, default=2, choices=(1, 2),
                   help="device room for this many of the 3 models (default 2)")
    p.add_argument("--queue-cap", type=int, default=8, help="server's --queue-cap (default 8: some 429s)")
    p.add_argument("--max-batch", type=int, default=4)
    p.add_argument("--request-timeout", type=float, default=120)
    p.add_argument("--rss-tolerance", type=float, default=0.10)
    p.add_argument("--rss-slack-mib", type=float, default=8)
    p.add_argument("--policy", default=None, help="the server's scheduling policy (default: its default)")
    p.add_argument("--parallel", choices=("none", "tp", "pp"), default="none",
                   help="serve every model split over two devices (tensor or pipeline parallel)")
    p.add_argument("--no-admin-churn", dest="admin_churn", action="store_false",
                   help="no load/unload/pin/unpin calls beside the load")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    a = harness.resolve_args(p.parse_args())
    models = harness.tiny_models(a.bin, a.work_dir, 3)
    refs = {m: {pr: generate_cli(a.bin, d, pr) for pr in PROMPTS} for m, d in models.items()}
    budget = harness.room_for(models, a.room)
    host_budget = 3 * max(harness.model_bytes(d) for d in models.values()) + 64 * harness.MiB
    served, extra, devices = models, [], 1
    if a.parallel != "none":
        # every model split over two devices (TP 2 or PP 2): half of it on each
        devices = 2
        budget = a.room * max(harness.model_bytes(d) for d in models.values()) // 2 + harness.BATCH_ROOM
        cfg = os.path.join(a.work_dir, "load-%s.yaml" % a.parallel)
        with open(cfg, "w") as f:
            f.write("models:\n")
            for name, d in sorted(models.items()):
                f.write("  - name: %s\n    path: %s\n    %s: 2\n" % (name, d, a.parallel))
        served, extra = {}, ["--config", cfg]
    # every connection comes from 127.0.0.1: the per-client limit (by default
    # half of --max-connections) must let them all in
    extra = list(extra) + ["--max-connections-per-client", str(a.connections + 16)]
    srv = harness.Server(a.bin, served, a.work_dir, device_budget=budget, host_budget=host_budget,
                         devices=devices, extra=extra, policy=a.policy,
                         max_batch=a.max_batch, queue_cap=a.queue_cap, log_level="warn",
                         max_connections=a.connections + 16, grace=10,
                         # ASan keeps 256 MiB of freed memory in quarantine by default: RSS
                         # would grow for that reason alone
                         env={"ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1")
                              + ":quarantine_size_mb=16"})
    srv.start()
    # warm-up, not measured: every model loaded once (its host copy staged,
    # its batch memory sized), so the RSS windows compare steady states
    for _ in range(2):
        for m in sorted(models):
            st, j = srv.json("POST", "/v1/completions", {"model": m, "prompt": PROMPTS[0],
                                                         "max_tokens": GREEDY_TOKENS, "temperature": 0})
            if st != 200 or j["choices"][0]["text"] != refs[m][PROMPTS[0]]:
                srv.kill()
                sys.exit("FAIL: warm-up request on %s: %d %s (shardswap generate: %r)" %
                         (m, st, j, refs[m][PROMPTS[0]]))
    metrics0 = harness.parse_metrics(srv.metrics())
    stats = Stats()
    stop = threading.Event()
    rss, mem, sampler_errors = [], {}, []
    t_start = time.time()
    deadline = t_start + a.duration
    sam = threading.Thread(target=sampler, args=(srv, stop, rss, mem, t_start, sampler_errors))
    sam.start()
    admin_counts, admin_problems = {}, []
    churn = threading.Thread(target=admin_churn, args=(srv, models, stop, 99, admin_counts, admin_problems))
    if a.admin_churn:
        churn.start()
    threads = [threading.Thread(target=client, args=(a, srv, stats, refs, deadline, i))
               for i in range(a.connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - t_start
    stop.set()
    sam.join()
    if a.admin_churn:
        churn.join()
    metrics1 = harness.parse_metrics(srv.metrics())
    failures = []
    try:
        srv.stop()
    except harness.TestFailure as e:
        failures.append("shutdown: %s" % e)

    # the verdicts
    if stats.sent != stats.answered:
        failures.append("%d requests sent, %d answered" % (stats.sent, stats.answered))
    bad = {s: n for s, n in stats.status.items() if s not in (200, 429)}
    if bad:
        failures.append("statuses other than 200 and 429: %s" % bad)
    if stats.no_retry_after:
        failures.append("%d answers 429 without Retry-After" % stats.no_retry_after)
    if stats.mismatch:
        failures.append("%d greedy answers differ from shardswap generate" % stats.mismatch)
    if stats.n_problems:
        failures.append("%d problems, the first: %s" % (stats.n_problems, "\n    ".join(stats.problems)))
    if not stats.status.get(200):
        failures.append("no request succeeded")
    win = min(10.0, elapsed / 3)
    first = [b for t, b in rss if t <= win]
    last = [b for t, b in rss if t >= elapsed - win]
    rss_first = max(first) if first else 0
    rss_last = max(last) if last else 0
    bound = rss_first * (1 + a.rss_tolerance) + a.rss_slack_mib * harness.MiB
    if not first or not last:
        failures.append("no RSS samples")
    elif rss_last > bound:
        failures.append("RSS grew: %.1f MiB in the first %.0f s, %.1f MiB in the last (bound %.1f)" %
                        (rss_first / harness.MiB, win, rss_last / harness.MiB, bound / harness.MiB))
    dev = {k: v for k, v in mem.items() if k[0] == "device"}
    host = {k: v for k, v in mem.items() if k[0] == "host"}
    if not dev:
        failures.append("/metrics shows no device memory gauge (bytes used and budget)")
    for k, (hw, b) in mem.items():
        want = b if b is not None else (budget if k[0] == "device" else host_budget)
        if hw > want:
            failures.append("%s memory %s: high-water %d bytes over the budget %d" % (k[0], dict(k[1]), hw, want))
    if swaps_needed(models, a.room) and not swaps_of(metrics0, metrics1):
        failures.append("3 models with device room for %d, yet /metrics counted no swap or load" % a.room)
    # the counters agree with what the clients saw
    def moved(name_re, **lab):
        return harness.metric_sum(metrics1, name_re, **lab) - harness.metric_sum(metrics0, name_re, **lab)
    for what, got, want in (
            ("requests_total{outcome=ok}", moved(r"^shardswap_requests_total$", outcome="ok"), stats.status.get(200, 0)),
            ("requests_total{outcome=rejected}", moved(r"^shardswap_requests_total$", outcome="rejected"),
             stats.status.get(429, 0)),
            ("http_responses_total{code=429}", moved(r"^shardswap_http_responses_total$", code="429"),
             stats.status.get(429, 0))):
        if got != want:
            failures.append("/metrics %s moved by %g during the run; the clients got %d" % (what, got, want))
    if admin_problems:
        failures.append("admin calls during the load: %s" % admin_problems[:5])
    if sampler_errors:
        failures.append("sampling /metrics during the run: %s" % sampler_errors[:3])
    swaps = swaps_of(metrics0, metrics1)

    n200 = stats.status.get(200, 0)
    summary = {
        "duration_s": round(elapsed, 2), "connections": a.connections, "models": len(models),
        "device_room_models": a.room, "parallel": a.parallel, "policy": a.policy, "device_budget_bytes": budget, "queue_cap": a.queue_cap,
        "requests": stats.sent, "answered": stats.answered, "status": {str(k): v for k, v in sorted(stats.status.items())},
        "requests_per_s": round(stats.answered / elapsed, 2), "ok_per_s": round(n200 / elapsed, 2),
        "latency_p50_s": round(pct(stats.latency, 50), 4), "latency_p99_s": round(pct(stats.latency, 99), 4),
        "share_429": round(stats.status.get(429, 0) / max(1, stats.answered), 4),
        "rss_first_mib": round(rss_first / harness.MiB, 1), "rss_last_mib": round(rss_last / harness.MiB, 1),
        "rss_bound_mib": round(bound / harness.MiB, 1),
        "device_high_water": {str(dict(k[1])): {"bytes": hw, "budget": b} for k, (hw, b) in dev.items()},
        "host_high_water": {str(dict(k[1])): {"bytes": hw, "budget": b} for k, (hw, b) in host.items()},
        "swaps": swaps, "greedy_mismatches": stats.mismatch,
        "admin_calls": {str(k): v for k, v in sorted(admin_counts.items())}, "failures": failures,
    }
    if a.json:
        print(json.dumps(summary, indent=1))
    else:
        print("load: %d connections, %.0f s, 3 models%s, device room for %d, queue cap %d" %
              (a.connections, elapsed, "" if a.parallel == "none" else " (%s 2 over 2 devices)" % a.parallel.upper(),
               a.room, a.queue_cap))
        print("  %-22s %s" % ("requests sent/answered", "%d / %d" % (stats.sent, stats.answered)))
        print("  %-22s %s" % ("statuses", summary["status"]))
        print("  %-22s %.1f (200s: %.1f)" % ("requests/s", summary["requests_per_s"], summary["ok_per_s"]))
        print("  %-22s %.1f / %.1f ms" % ("latency p50 / p99", summary["latency_p50_s"] * 1e3,
                                           summary["latency_p99_s"] * 1e3))
        print("  %-22s %.1f %%" % ("429 share", summary["share_429"] * 100))
        print("  %-22s %.1f -> %.1f MiB (bound %.1f)" % ("RSS first/last window", summary["rss_first_mib"],
                                                         summary["rss_last_mib"], summary["rss_bound_mib"]))
        for k, (hw, b) in sorted(mem.items()):
            print("  %-22s %.1f MiB of %s" % ("%s %s high-water" % (k[0], ",".join("%s=%s" % x for x in k[1])),
                                             hw / harness.MiB, "%.1f MiB" % (b / harness.MiB) if b else "?"))
        print("  %-22s %g" % ("swaps (metrics)", swaps))
        print("  %-22s %s" % ("admin calls beside", summary["admin_calls"]))
        for f in failures:
            print("FAIL  " + f)
        print("server log: %s" % srv.log_path if failures or a.keep else "all passed")
    if not failures:
        harness.cleanup_args(a)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
