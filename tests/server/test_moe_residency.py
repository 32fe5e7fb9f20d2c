#!/usr/bin/env python3
"""`shardswap serve` with expert-level residency under memory pressure
(ctest: server_moe_residency).

Two models with expert_residency (the committed Mixtral fixture twice) on
one device whose budget is a little short of both resident at once, under
the swapwise-partial policy: each load trims the other model, whose cold
experts go first. First a server with the default budget measures the
device bytes the two take; then the real one runs with 1 KiB less.

First, one-token answers (their batches' reserves small, so a model's
cold experts cover what the other lacks): each model, trimmed of experts
for the other, stays resident and is served in place, loading the experts
its prompts route to on demand (shardswap_expert_loads_total > 0), and no
model is evicted whole. Then whole answers, whose reserves pass what the
experts cover (layers are trimmed too). Every answer is transformers'
greedy ids, experts were evicted (shardswap_expert_evictions_total > 0)
and trims counted; the exposition stays well formed.

    test_moe_residency.py --bin build/shardswap [--work-dir DIR] [--keep]
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

FX = "mixtral_moe_f32"
NAMES = ("xr_a", "xr_b")
S = {}


def srv():
    return S["srv"]


def metric(name, model=None):
    total = 0.0
    for n, lab, v in harness.parse_metrics(srv().metrics()):
        if n == name and (model is None or lab.get("model") == model):
            total += v
    return total


def serve_all(rounds, tokens=None):
    cases = harness.fixture_expected(FX)
    for _ in range(rounds):
        for model in NAMES:
            for prompt, out in cases:
                out = out[:tokens] if tokens else out
                st, j = srv().json("POST", "/v1/completions",
                                   {"model": model, "prompt": [prompt], "max_tokens": len(out),
                                    "temperature": 0})
                check(st == 200, "%s: %d %s" % (model, st, j))
                got = j["choices"][0]["token_ids"]
                check(got == out, "%s %s: token_ids %s, transformers %s" % (model, prompt, got, out))


def test_served_in_place():
    serve_all(2, tokens=1)
    check(metric("shardswap_expert_loads_total") > 0, "no expert was loaded on demand")
    check(metric("shardswap_trims_total") > 0, "no trim")
    check(metric("shardswap_evictions_total") == 0,
          "%d whole evictions" % metric("shardswap_evictions_total"))


def test_answers_under_pressure():
    serve_all(3)
    check(metric("shardswap_expert_evictions_total") > 0, "no expert was evicted")
    check(metric("shardswap_trims_total") > 0, "no trim")


def test_summary_per_model():
    for model in NAMES:
        check(metric("shardswap_expert_hot_share", model) > 0, "%s: no hotness" % model)


def start(A, d, cfg, budget):
    s = harness.Server(A.bin, {}, A.work_dir, devices=1, max_batch=1, policy="swapwise-partial",
                       device_budget=budget, extra=["--config", cfg])
    S.update(srv=s)
    s.start()
    return s


def main():
    p = harness.common_args(__doc__)
    A = harness.resolve_args(p.parse_args())
    d = os.path.join(A.work_dir, "fixtures-moe-residency", FX)
    harness.fixture_copy(FX, d)
    cfg = os.path.join(A.work_dir, "moe-residency.yaml")
    with open(cfg, "w") as f:
        f.write("models:\n")
        for n in NAMES:
            f.write("  - name: %s\n    path: %s\n    expert_residency: true\n" % (n, json.dumps(d)))
    # both resident at once, with room: what they take
    s = start(A, d, cfg, None)
    try:
        serve_all(1)
        both = int(metric("shardswap_device_bytes_used"))
    finally:
        s.stop()
    check(both > 0, "device bytes used %d" % both)
    start(A, d, cfg, both - 1024)
    return harness.run_and_stop([test_served_in_place, test_answers_under_pressure, test_summary_per_model], S, A)


if __name__ == "__main__":
    sys.exit(main())
