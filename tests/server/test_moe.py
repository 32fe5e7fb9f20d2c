#!/usr/bin/env python3
"""`shardswap serve` on a mixture-of-experts model: the router's counts
in /metrics (ctest: server_moe).

One server serves the committed Mixtral fixture (mixtral_moe_f32, no
tokenizer: token-id prompts) twice: whole on one device, and over two
devices with its experts placed whole on the TP ranks (expert_parallel,
from a config file), whose counts still cover every expert, and a third
time with expert-level residency (expert_residency, the same file), which
answers alike and shows its experts' hotness summary and residency. Before any request no
shardswap_expert_tokens_total sample is shown; after requests alone and
then at once (left-padded in one batch), each layer's samples sum to
top-k x the real tokens the model ran (each prompt's tokens and every
generated token but the last, which is returned, never fed back), padding
never counted; every (layer, expert) is labelled; promtool accepts the
exposition; answers stay transformers' greedy ids.

    test_moe.py --bin build/shardswap [--work-dir DIR] [--keep]
"""

import concurrent.futures as cf
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

FX = "mixtral_moe_f32"
NAMES = ("fx_moe", "fx_moe_ep", "fx_moe_xr")  # whole; tp 2 with expert_parallel; expert residency
A = None
S = {}
RAN = {n: 0 for n in NAMES}  # real tokens each model ran so far


def srv():
    return S["srv"]


def config():
    with open(os.path.join(harness.FIXTURES, FX, "config.json")) as f:
        return json.load(f)


def expert_samples(model):
    """{(layer, expert): value} of model's shardswap_expert_tokens_total."""
    out = {}
    for name, lab, v in harness.parse_metrics(srv().metrics()):
        if name == "shardswap_expert_tokens_total":
            check(set(lab) == {"model", "layer", "expert"} and lab["model"] in NAMES,
                  "labels %s" % lab)
            if lab["model"] == model:
                out[(int(lab["layer"]), int(lab["expert"]))] = v
    return out


def complete(model, prompt, out):
    st, j = srv().json("POST", "/v1/completions",
                       {"model": model, "prompt": [prompt], "max_tokens": len(out), "temperature": 0})
    check(st == 200, "completion: %d %s" % (st, j))
    got = j["choices"][0]["token_ids"]
    check(got == out, "%s %s: token_ids %s, transformers %s" % (model, prompt, got, out))
    n = j["usage"]["prompt_tokens"] + j["usage"]["completion_tokens"] - 1
    return n


def check_counts(what):
    cfg = config()
    layers, experts, k = cfg["num_hidden_layers"], cfg["num_local_experts"], cfg["num_experts_per_tok"]
    for model in NAMES:
        c = expert_samples(model)
        check(set(c) == {(l, x) for l in range(layers) for x in range(experts)},
              "%s %s: samples for %s" % (model, what, sorted(c)))
        for l in range(layers):
            got = sum(c[(l, x)] for x in range(experts))
            check(got == k * RAN[model], "%s %s: layer %d counts %g tokens routed, want top-k %d "
                  "x %d real tokens" % (model, what, l, got, k, RAN[model]))


def test_none_before_requests():
    text = srv().metrics()
    check("shardswap_expert_tokens_total" not in text, "expert counts before any batch ran")


def test_counts_alone():
    for model in NAMES:
        for prompt, out in harness.fixture_expected(FX):
            RAN[model] += complete(model, prompt, out)
    check_counts("one request at a time")


def test_counts_batched():
    """Prompts of different lengths at once: left-padded in a batch, the
    padding never counted."""
    cases = harness.fixture_expected(FX)
    check(len({len(p) for p, _ in cases}) > 1, "the fixture's prompts are all one length")
    for model in NAMES:
        with cf.ThreadPoolExecutor(len(cases)) as ex:
            for n in ex.map(lambda c: complete(model, *c), cases * 2):
                RAN[model] += n
    check_counts("requests at once")


def test_expert_residency_metrics():
    """Only the model with expert residency has the hotness summary: three
    shares in [0, 1], growing with the fraction, the top quarter's > 0 after
    requests; every expert blob resident (nothing trimmed), none missing."""
    hot, resident, missing = {}, {}, {}
    for name, lab, v in harness.parse_metrics(srv().metrics()):
        if name == "shardswap_expert_hot_share":
            hot.setdefault(lab["model"], {})[lab["top"]] = v
        elif name == "shardswap_experts_resident":
            resident[lab["model"]] = v
        elif name == "shardswap_expert_missing_bytes":
            missing[lab["model"]] = v
    check(set(hot) == {"fx_moe_xr"} and set(resident) == {"fx_moe_xr"}, "models %s" % hot)
    h = hot["fx_moe_xr"]
    check(set(h) == {"0.01", "0.1", "0.25"}, "tops %s" % h)
    check(0 < h["0.01"] <= h["0.1"] <= h["0.25"] <= 1, "shares %s" % h)
    cfg = config()
    check(resident["fx_moe_xr"] == cfg["num_hidden_layers"] * cfg["num_local_experts"],
          "resident %s" % resident)
    check(missing["fx_moe_xr"] == 0, "missing %s" % missing)


def test_metrics_promtool():
    promtool = shutil.which("promtool")
    if promtool is None:
        print("      promtool not found: exposition not checked by it")
        return
    r = subprocess.run([promtool, "check", "metrics"], input=srv().metrics().encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    check(r.returncode == 0, "promtool check metrics:\n%s" % r.stdout.decode(errors="replace"))


def main():
    global A
    p = harness.common_args(__doc__)
    A = harness.resolve_args(p.parse_args())
    d = os.path.join(A.work_dir, "fixtures-moe", FX)
    harness.fixture_copy(FX, d)
    cfg = os.path.join(A.work_dir, "moe-ep.yaml")
    with open(cfg, "w") as f:
        f.write("models:\n  - name: %s\n    path: %s\n    tp: 2\n    devices: [0, 1]\n"
                "    expert_parallel: true\n"
                "  - name: %s\n    path: %s\n    expert_residency: true\n"
                % (NAMES[1], json.dumps(d), NAMES[2], json.dumps(d)))
    s = harness.Server(A.bin, {NAMES[0]: d}, A.work_dir, devices=2, max_batch=4,
                       extra=["--config", cfg])
    S.update(srv=s)
    s.start()
    tests = [test_none_before_requests, test_counts_alone, test_counts_batched,
             test_expert_residency_metrics, test_metrics_promtool]
    return harness.run_and_stop(tests, S, A)


if __name__ == "__main__":
    sys.exit(main())
