#!/usr/bin/env python3
"""`shardswap serve` on models of two families at once (ctest:
server_integration_families).

One server serves an OPT fixture (with harness.fixture_with_id_tokenizer's
tokenizer, so it answers in text) and two Llama-family fixtures without a
tokenizer (llama_gqa_f32: LlamaForCausalLM, qwen2_bias_f32:
Qwen2ForCausalLM; copied from tests/fixtures/models), with device room for
one of the three at a time, so requests that alternate between them swap
models of different families in and out. Checked against transformers'
greedy ids (expected.json): the Llama-family models take token-id prompts
and answer "text": "" with the ids in "token_ids" (streamed: each chunk its
new ones); a text prompt, stop or echo there is a 400 naming the model;
/v1/models shows each model's family and architecture; `bench serve
--prompt-ids` replays against them.

    test_families.py --bin build/shardswap [--work-dir DIR] [--keep]
"""

import concurrent.futures as cf
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

openai = harness.import_openai()

OPT = "fx_opt"
LLAMA = {"fx_llama": "llama_gqa_f32", "fx_qwen2": "qwen2_bias_f32"}
WANT = {OPT: ("opt", "OPTForCausalLM", True), "fx_llama": ("llama", "LlamaForCausalLM", False),
        "fx_qwen2": ("llama", "Qwen2ForCausalLM", False)}

A = None
S = {}


def srv():
    return S["srv"]


def client():
    return S["client"]


def llama_copy(work_dir, name):
    """The committed fixture `name` copied as it is (no tokenizer)."""
    dst = os.path.join(work_dir, "fixtures-llama", name)
    if not os.path.exists(os.path.join(dst, "model.safetensors")):
        harness.fixture_copy(name, dst)
    return dst


def on_device():
    st, j = srv().json("GET", "/v1/models")
    check(st == 200, "GET /v1/models: %d %s" % (st, j))
    return [m["id"] for m in j["data"] if m["residency"] == "on_device"]


def token_ids(choice):
    """The token_ids extension of an openai client's choice."""
    ids = (choice.model_extra or {}).get("token_ids")
    check(isinstance(ids, list), "no token_ids list in the choice: %s" % choice)
    return ids


def check_no_tokenizer_error(st, j, model, param, what):
    check(st == 400, "%s: status %d, want 400 (%s)" % (what, st, j))
    e = (j or {}).get("error") or {}
    check(e.get("code") == "no_tokenizer" and e.get("param") == param,
          "%s: code %r param %r: %s" % (what, e.get("code"), e.get("param"), e))
    msg = e.get("message", "")
    check(model in msg and "no tokenizer" in msg and "\n" not in msg,
          "%s: the message does not name %s and its missing tokenizer in one line: %r" % (what, model, msg))


# ---------------------------------------------------------------- tests


def test_models_show_families():
    st, j = srv().json("GET", "/v1/models")
    check(st == 200, "GET /v1/models: %d %s" % (st, j))
    got = {m["id"]: (m.get("family"), m.get("architecture"), m.get("tokenizer")) for m in j["data"]}
    check(got == WANT, "families: %s, want %s" % (got, WANT))
    # the checkpoint's format and its bytes by tensor type (safetensors fixtures: plain types)
    for m in j["data"]:
        types = m.get("weight_types") or {}
        check(m.get("format") == "safetensors" and types and
              set(types) <= {"F32", "F16", "BF16"} and all(b > 0 for b in types.values()),
              "%s: format %s, weight_types %s" % (m["id"], m.get("format"), types))
    for name, want in WANT.items():
        st, m = srv().json("GET", "/v1/models/" + name)
        check(st == 200 and (m.get("family"), m.get("architecture"), m.get("tokenizer")) == want,
              "GET /v1/models/%s: %d %s" % (name, st, m))
    # the openai client's list keeps the extra fields
    listed = {m.id: (m.model_extra or {}).get("family") for m in client().models.list().data}
    check(listed == {k: v[0] for k, v in WANT.items()}, "models.list families: %s" % listed)


def test_alternating_families_swap():
    """Requests alternate OPT, Llama, Qwen2 (room for one): every answer is
    transformers' greedy continuation, and the models swap each time."""
    before = harness.parse_metrics(srv().metrics())
    n = 0
    for rnd in range(2):
        for i in range(3):
            prompt, out = harness.fixture_expected("pre_ln_f32")[i]
            c = client().completions.create(model=OPT, prompt=prompt, max_tokens=len(out), temperature=0)
            got = harness.ids_of_text(c.choices[0].text)
            check(got == out, "OPT %s: %s, transformers %s" % (prompt, got, out))
            check((c.choices[0].model_extra or {}).get("token_ids") is None,
                  "an OPT model with a tokenizer answers token_ids: %s" % c.choices[0])
            n += 1
            check(len(on_device()) <= 1, "room for one, yet on device: %s" % on_device())
            for name, fx in LLAMA.items():
                prompt, out = harness.fixture_expected(fx)[i]
                c = client().completions.create(model=name, prompt=prompt, max_tokens=len(out),
                                                temperature=0)
                ch = c.choices[0]
                check(ch.text == "", "%s: text %r, want \"\"" % (name, ch.text))
                check(token_ids(ch) == out, "%s %s: token_ids %s, transformers %s" %
                      (name, prompt, token_ids(ch), out))
                check(ch.finish_reason == "length" and c.usage.prompt_tokens == len(prompt) and
                      c.usage.completion_tokens == len(out), "%s: finish %r usage %s" %
                      (name, ch.finish_reason, c.usage))
                n += 1
                on = on_device()
                check(len(on) <= 1, "room for one, yet on device: %s" % on)
    after = harness.parse_metrics(srv().metrics())
    swaps = harness.metric_sum(after, r"(^|_)swaps_total$") - harness.metric_sum(before, r"(^|_)swaps_total$")
    check(swaps >= n - 1, "%d requests alternating between 3 models with room for one: %g swaps" % (n, swaps))


def test_raw_response_format():
    """The wire format: choices[0] = {"index", "text": "", "logprobs",
    "finish_reason", "token_ids": [...]}."""
    prompt, out = harness.fixture_expected("llama_gqa_f32")[0]
    st, j = srv().json("POST", "/v1/completions",
                       {"model": "fx_llama", "prompt": [prompt], "max_tokens": len(out), "temperature": 0})
    check(st == 200, "[[ids]]: %d %s" % (st, j))
    ch = j["choices"][0]
    check(set(ch) == {"index", "text", "logprobs", "finish_reason", "token_ids"},
          "choice keys %s" % sorted(ch))
    check(ch["text"] == "" and ch["token_ids"] == out, "choice %s, want token_ids %s" % (ch, out))


def test_stream_token_ids():
    for name, fx in LLAMA.items():
        prompt, out = harness.fixture_expected(fx)[1]
        chunks = list(client().completions.create(model=name, prompt=prompt, max_tokens=len(out), temperature=0,
                                                  stream=True, stream_options={"include_usage": True}))
        with_choice = [ch for ch in chunks if ch.choices]
        ids = [i for ch in with_choice for i in token_ids(ch.choices[0])]
        check(ids == out, "%s streamed token_ids %s, transformers %s" % (name, ids, out))
        check(all(ch.choices[0].text == "" for ch in with_choice), "%s: a chunk with text" % name)
        per = [len(token_ids(ch.choices[0])) for ch in with_choice if not ch.choices[0].finish_reason]
        check(per == [1] * len(out), "%s: ids per chunk %s, want one each" % (name, per))
        fin = [ch.choices[0].finish_reason for ch in with_choice if ch.choices[0].finish_reason]
        check(fin == ["length"], "%s: finish reasons %s" % (name, fin))
        last = chunks[-1]
        check(not last.choices and last.usage.completion_tokens == len(out),
              "%s: the last chunk is not the usage chunk: %s" % (name, last))


def test_batched_llama_requests():
    """Every prompt of both Llama fixtures at once, twice (batched, padded):
    transformers' ids each."""
    jobs = [(name, p, o) for name, fx in LLAMA.items() for p, o in harness.fixture_expected(fx)] * 2

    def run(job):
        c = client().completions.create(model=job[0], prompt=job[1], max_tokens=len(job[2]), temperature=0)
        return token_ids(c.choices[0])

    with cf.ThreadPoolExecutor(8) as ex:
        got = list(ex.map(run, jobs))
    bad = ["%s %s: %s, transformers %s" % (j[0], j[1], g, j[2]) for j, g in zip(jobs, got) if g != j[2]]
    check(not bad, "%d of %d batched completions differ:\n  %s" % (len(bad), len(jobs), "\n  ".join(bad[:6])))


def test_text_needs_a_tokenizer():
    for name in LLAMA:
        st, j = srv().json("POST", "/v1/completions", {"model": name, "prompt": "Hello", "max_tokens": 2})
        check_no_tokenizer_error(st, j, name, "prompt", "%s text prompt" % name)
        st, j = srv().json("POST", "/v1/completions", {"model": name, "prompt": ["Hello"], "max_tokens": 2})
        check_no_tokenizer_error(st, j, name, "prompt", "%s [text] prompt" % name)
        st, j = srv().json("POST", "/v1/completions",
                           {"model": name, "prompt": [1, 5], "max_tokens": 2, "stop": ["x"]})
        check_no_tokenizer_error(st, j, name, "stop", "%s stop" % name)
        st, j = srv().json("POST", "/v1/completions",
                           {"model": name, "prompt": [1, 5], "max_tokens": 2, "echo": True})
        check_no_tokenizer_error(st, j, name, "echo", "%s echo" % name)
        try:
            client().completions.create(model=name, prompt="Hello", max_tokens=2)
            check(False, "a text prompt to %s did not raise" % name)
        except openai.BadRequestError:
            pass
        st, j = srv().json("POST", "/v1/completions", {"model": name, "prompt": [1, 4096], "max_tokens": 1})
        check(st == 400 and j["error"]["code"] == "invalid_token", "%s: id 4096: %d %s" % (name, st, j))
    # the OPT model with its tokenizer still takes text, stop and echo
    c = client().completions.create(model=OPT, prompt=harness.ids_text([5, 6]), max_tokens=3, temperature=0,
                                    echo=True)
    check(c.choices[0].text.startswith(harness.ids_text([5, 6])), "OPT echo: %r" % c.choices[0].text)


def test_bench_serve_prompt_ids():
    """bench serve --prompt-ids against the three models round-robin (its
    default prompt, OPT's ids of Computron's text, lies outside these
    fixtures' 256-token vocabularies): every request answered 200."""
    import json
    import subprocess
    out = os.path.join(A.work_dir, "bench-families")
    for stream in (False, True):
        a = [A.bin, "bench", "serve", "--url", "http://127.0.0.1:%d" % srv().port, "--api-key", srv().api_key,
             "--config", "round-robin", "--n-models", "3", "--requests", "9", "--warm-requests", "2",
             "--prompt-ids", "1,5,9", "--out-dir", out, "--json"] + (["--stream"] if stream else [])
        r = subprocess.run(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        check(r.returncode == 0, "bench serve: %d %s" % (r.returncode, r.stderr.decode(errors="replace")))
        pol = json.loads(r.stdout)["policies"][0]
        check(pol["http"]["ok"] == 9 and pol["failed"] == 0, "bench serve --prompt-ids (stream %s): %s" %
              (stream, pol["http"]))


def main():
    global A
    p = harness.common_args(__doc__)
    A = harness.resolve_args(p.parse_args())
    served = {OPT: harness.fixture_with_id_tokenizer(A.work_dir, "pre_ln_f32")}
    for name, fx in LLAMA.items():
        served[name] = llama_copy(A.work_dir, fx)
    sizes = [harness.model_bytes(d) for d in served.values()]
    # the largest and its batches, but never two of them (the fixtures are
    # 0.35-0.43 MB; a batch of four 64-position sequences takes far less
    # than the rest)
    budget = max(sizes) + min(sizes) * 3 // 4
    s = harness.Server(A.bin, served, A.work_dir, device_budget=budget, max_batch=4)
    S.update(srv=s)
    t0 = time.time()
    s.start()
    print("server on port %d (device budget %d bytes), up in %.1f s" % (s.port, budget, time.time() - t0))
    S["client"] = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % s.port, api_key=s.api_key,
                                max_retries=0, timeout=300)
    tests = [test_models_show_families, test_alternating_families_swap, test_raw_response_format,
             test_stream_token_ids, test_batched_llama_requests, test_text_needs_a_tokenizer,
             test_bench_serve_prompt_ids]
    return harness.run_and_stop(tests, S, A)


if __name__ == "__main__":
    sys.exit(main())
