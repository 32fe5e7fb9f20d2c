#!/usr/bin/env python3
"""LoRA adapters served over a model (ctest: server_adapters).

The base is the committed Llama fixture llama_gqa_f32 with
harness.fixture_with_id_tokenizer's tokenizer (ids read back from text) and
a chat template that writes the messages' contents as they are; the
adapters are the committed PEFT fixtures of tests/fixtures/lora made on that
base (rank 8 on q/v, rank 16 rsLoRA on every projection, rank 32 on layer
1's MLP, rank 4 by regular expression), whose expected.json holds
PeftModel's greedy ids. Checked:

  - /v1/models lists each adapter with "parent" (and "base") its base's
    name; the base's object has neither;
  - /v1/completions on each adapter (token-id prompts) gives PeftModel's
    greedy ids, the base still its own references;
  - the `openai` client's chat on an adapter (plain and streamed): the
    rendered prompt is the fixture's prompt and the answer its greedy ids;
    an adapter directory with its own chat_template.jinja renders with it,
    one with its own tokenizer files reads and writes with them;
  - /metrics: shardswap_adapter_loads_total, _load_bytes_total and
    _load_seconds_total with labels model and base, and the adapter's
    request counters as a model's;
  - POST /admin/models with "base" adds one below --model-root (its
    completions right), DELETE of its base is a 409 naming it, DELETE of it
    removes it (then 404); bad admin bodies each a one-line 4xx naming the
    param; bad --adapter flags and YAML each exit 2 with one line naming the
    key, an adapter made for another base exits with one line naming it;
  - churn: a device budget with room for the base and about two adapters,
    hundreds of requests at once over a dozen adapters, each answered once
    with its adapter's greedy ids, adapters loaded again and again;
  - 1,000 adapters registered from YAML (each a directory of links to one
    fixture's files): listed, one of them answers right, and the server's
    RSS grows by less than ADAPTER_RSS_MAX per adapter registered.

    test_adapters.py --bin build/shardswap [--work-dir DIR] [--keep]
"""

import concurrent.futures as cf
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

openai = harness.import_openai()

LORA = os.path.join(harness.SOURCE_DIR, "tests", "fixtures", "lora")
BASE_FIXTURE = "llama_gqa_f32"
BASE = "llama"
# served name -> fixture adapter of BASE_FIXTURE
ADAPTERS = {"qv": "llama_r8_qv", "rs": "llama_r16_all_rslora", "mlp": "llama_r32_mlp_layer1",
            "re": "llama_r4_regex_patterns"}
OWN = "own"  # llama_r8_qv's copy with its own chat template
OWN_TOK = "owntok"  # llama_r8_qv's copy with its own tokenizer (lower-case words)
# the base's chat template: the messages' contents, as they are (the first
# prompt id is written by the client); the adapter OWN's writes id 1 first
BASE_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
OWN_TEMPLATE = " AB{% for m in messages %}{{ m['content'] }}{% endfor %}"
N_MANY = 1000
# bytes of RSS one registered adapter may add: its server entry, swap model
# (config, tensor table, the mapping of its file), engine entry and runner
# state, 85 to 105 KiB measured; never its weights, which stay on disk until
# used
ADAPTER_RSS_MAX = 160 << 10

A = None
S = {}


def srv():
    return S["srv"]


def client():
    return S["client"]


def expected(fixture):
    """PeftModel's greedy references of an adapter fixture: [(prompt, output)]."""
    with open(os.path.join(LORA, fixture, "expected.json")) as f:
        j = json.load(f)
    check(j["base"] == BASE_FIXTURE, "%s: made on %s, not %s" % (fixture, j["base"], BASE_FIXTURE))
    return [(g["prompt"], g["output"]) for g in j["greedy"]]


def base_dir():
    """The base: the fixture with the id tokenizer and BASE_TEMPLATE."""
    d = os.path.join(A.work_dir, "adapters", BASE)
    if not os.path.exists(os.path.join(d, "chat_template.jinja")):
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(harness.fixture_with_id_tokenizer(A.work_dir, BASE_FIXTURE), d)
        with open(os.path.join(d, "chat_template.jinja"), "w") as f:
            f.write(BASE_TEMPLATE)
    return d


def adapter_copy(fixture, dst, template=None):
    """The adapter fixture's two files copied into dst (and a chat template)."""
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    for f in ("adapter_config.json", "adapter_model.safetensors"):
        shutil.copy(os.path.join(LORA, fixture, f), dst)
    if template is not None:
        with open(os.path.join(dst, "chat_template.jinja"), "w") as f:
            f.write(template)
    return dst


def lower_tokenizer(src, dst):
    """src's id tokenizer (vocab.json, merges.txt) with every word in lower
    case (id i is " xy" where src has " XY"), written into dst."""
    low = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
    G = "\u0120"
    with open(os.path.join(src, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    vocab = {(k.translate(low) if len(k) > 1 and k[0] == G else k): v for k, v in vocab.items()}
    with open(os.path.join(dst, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(src, "merges.txt"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    with open(os.path.join(dst, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join([lines[0]] + [l.translate(low) for l in lines[1:]]))


def complete_ids(model, prompt, n, s=None):
    """The greedy ids of a token-id completion on model."""
    st, j = (s or srv()).json("POST", "/v1/completions",
                              {"model": model, "prompt": prompt, "max_tokens": n, "temperature": 0})
    check(st == 200, "completion on %s: %d %s" % (model, st, j))
    return harness.ids_of_text(j["choices"][0]["text"])


def check_error(st, j, status, param, needle, what):
    check(st == status, "%s: status %d, want %d: %s" % (what, st, status, j))
    e = (j or {}).get("error") or {}
    msg = e.get("message", "")
    check(param is None or e.get("param") == param, "%s: param %r, want %r: %s" % (what, e.get("param"), param, e))
    check(needle in msg and "\n" not in msg, "%s: %r lacks %r or is not one line" % (what, msg, needle))


def run_serve(args, timeout=120):
    """shardswap serve with args that must not start: (exit code, stderr)."""
    r = subprocess.run([A.bin, "serve", "--port", "0"] + args, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return r.returncode, r.stderr.decode(errors="replace")


def sanitized():
    """Whether the binary is the ASan+UBSan build's (its allocations carry
    redzones: twice the bytes)."""
    with open(A.bin, "rb") as f:
        return b"__asan_init" in f.read()


# a sanitizer build's quarantine of freed memory would read as growth: small
ASAN_ENV = {"ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1") +
            ":quarantine_size_mb=16"}


def rss_after_start(models, extra):
    """The RSS of a server started with models and extra flags, then stopped."""
    s = harness.Server(A.bin, models, A.work_dir, extra=extra, env=ASAN_ENV)
    s.start(timeout=300)
    try:
        complete_ids(BASE, [1, 5], 1, s)  # the base's runner has run once
        rss = s.rss_bytes()
        st, j = s.json("GET", "/v1/models")
        check(st == 200, "/v1/models: %d" % st)
        listed = len(j["data"])
    finally:
        s.stop()
    return rss, listed, s


# ---------------------------------------------------------------- tests


def test_models_list_parent():
    st, j = srv().json("GET", "/v1/models")
    check(st == 200, "/v1/models: %d %s" % (st, j))
    by = {m["id"]: m for m in j["data"]}
    check(BASE in by and "parent" not in by[BASE] and "base" not in by[BASE],
          "the base's object: %s" % by.get(BASE))
    for name in list(ADAPTERS) + [OWN, OWN_TOK]:
        m = by.get(name)
        check(m is not None, "/v1/models lacks adapter %s" % name)
        check(m["parent"] == BASE and m["base"] == BASE, "%s: parent %r base %r" %
              (name, m.get("parent"), m.get("base")))
        check(m["object"] == "model", "%s: object %r" % (name, m["object"]))
    st, m = srv().json("GET", "/v1/models/qv")
    check(st == 200 and m["parent"] == BASE, "GET /v1/models/qv: %d %s" % (st, m))


def test_completions_on_adapters():
    with open(os.path.join(harness.FIXTURES, BASE_FIXTURE, "expected.json")) as f:
        base_ref = [(g["prompt"], g["output"]) for g in json.load(f)["greedy"]]
    for name, fixture in ADAPTERS.items():
        for prompt, out in expected(fixture):
            got = complete_ids(name, prompt, len(out))
            check(got == out, "%s on %s: got %s, PeftModel %s" % (name, prompt, got, out))
    for prompt, out in base_ref:
        got = complete_ids(BASE, prompt, len(out))
        check(got == out, "the base on %s: got %s, transformers %s" % (prompt, got, out))


def test_chat_on_adapter():
    for prompt, out in expected(ADAPTERS["qv"]):
        msgs = [{"role": "user", "content": harness.ids_text(prompt)}]
        c = client().chat.completions.create(model="qv", messages=msgs, max_tokens=len(out),
                                             temperature=0)
        got = harness.ids_of_text(c.choices[0].message.content)
        check(got == out, "chat on qv: got %s, PeftModel %s" % (got, out))
        check(c.usage.prompt_tokens == len(prompt), "chat on qv: %d prompt tokens, want %d" %
              (c.usage.prompt_tokens, len(prompt)))
        text = ""
        for ch in client().chat.completions.create(model="qv", messages=msgs, max_tokens=len(out),
                                                   temperature=0, stream=True):
            if ch.choices and ch.choices[0].delta.content:
                text += ch.choices[0].delta.content
        check(harness.ids_of_text(text) == out, "streamed chat on qv: %r" % text)
    # OWN renders with its own template (id 1 first), whatever the base's says
    prompt, out = expected(ADAPTERS["qv"])[0]
    c = client().chat.completions.create(
        model=OWN, messages=[{"role": "user", "content": harness.ids_text(prompt[1:])}],
        max_tokens=len(out), temperature=0)
    check(harness.ids_of_text(c.choices[0].message.content) == out and
          c.usage.prompt_tokens == len(prompt), "chat on %s: %r, %d prompt tokens" %
          (OWN, c.choices[0].message.content, c.usage.prompt_tokens))
    c = client().chat.completions.create(
        model=OWN, messages=[{"role": "user", "content": harness.ids_text(prompt)}], max_tokens=1,
        temperature=0)
    check(c.usage.prompt_tokens == len(prompt) + 1, "%s's template: %d prompt tokens, want %d" %
          (OWN, c.usage.prompt_tokens, len(prompt) + 1))
    # OWN_TOK reads and writes with its own tokenizer (lower-case words),
    # under its base's template
    c = client().chat.completions.create(
        model=OWN_TOK, messages=[{"role": "user", "content": harness.ids_text(prompt).lower()}],
        max_tokens=len(out), temperature=0)
    text = c.choices[0].message.content
    check(text == text.lower() and harness.ids_of_text(text.upper()) == out and
          c.usage.prompt_tokens == len(prompt), "chat on %s: %r, %d prompt tokens" %
          (OWN_TOK, text, c.usage.prompt_tokens))


def test_metrics():
    text = srv().metrics()
    samples = harness.parse_metrics(text)
    for fam in ("shardswap_adapter_loads_total", "shardswap_adapter_load_bytes_total",
                "shardswap_adapter_load_seconds_total"):
        check("# TYPE %s counter" % fam in text, "/metrics lacks the family %s" % fam)
        for name in ADAPTERS:
            v = [x for n, lab, x in samples if n == fam and lab.get("model") == name]
            check(len(v) == 1, "%s{model=%s}: %d samples" % (fam, name, len(v)))
            check(v[0] > 0, "%s{model=%s} = %g after its requests" % (fam, name, v[0]))
            check(harness.metric_sum(samples, "^%s$" % fam, model=name, base=BASE) == v[0],
                  "%s{model=%s}: no base=%s label" % (fam, name, BASE))
        check(harness.metric_sum(samples, "^%s$" % fam, model=BASE) == 0 and
              not any(n == fam and lab.get("model") == BASE for n, lab, _ in samples),
              "%s has a sample of the base" % fam)
    n_ok = harness.metric_sum(samples, "^shardswap_requests_total$", model="qv", outcome="ok")
    n_chat = harness.metric_sum(samples, "^shardswap_api_requests_total$", model="qv", route="chat")
    check(n_ok >= 3 + 6 and n_chat == 6, "qv's requests: ok %g, chat %g" % (n_ok, n_chat))
    # promtool, when there is one, accepts the exposition
    if shutil.which("promtool"):
        r = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        check(r.returncode == 0, "promtool check metrics:\n%s" % r.stdout.decode(errors="replace"))


def test_admin_add_delete():
    root = os.path.join(A.work_dir, "adapters-root")
    d = adapter_copy(ADAPTERS["rs"], os.path.join(root, "rs2"))
    st, j = srv().json("POST", "/admin/models", {"name": "rs2", "base": BASE, "path": d,
                                                 "keep_alive": "1m", "priority": 2}, key="admin")
    check(st == 200 and j["parent"] == BASE and j["base"] == BASE and j["priority"] == 2,
          "POST /admin/models (adapter): %d %s" % (st, j))
    for prompt, out in expected(ADAPTERS["rs"]):
        got = complete_ids("rs2", prompt, len(out))
        check(got == out, "rs2 on %s: got %s, want %s" % (prompt, got, out))
    st, j = srv().json("GET", "/v1/models")
    check(any(m["id"] == "rs2" and m.get("parent") == BASE for m in j["data"]), "rs2 not listed")
    # the base goes only after its adapters
    st, j = srv().json("DELETE", "/admin/models/" + BASE, key="admin")
    check_error(st, j, 409, None, "adapter", "DELETE of a base with adapters")
    st, j = srv().json("DELETE", "/admin/models/rs2", key="admin")
    check(st == 200 and j["residency"] == "removed", "DELETE rs2: %d %s" % (st, j))
    st, j = srv().json("POST", "/v1/completions", {"model": "rs2", "prompt": [1, 5], "max_tokens": 1})
    check(st == 404, "a removed adapter's completion: %d %s" % (st, j))
    # added again under its name: its counters go on
    st, j = srv().json("POST", "/admin/models", {"name": "rs2", "base": BASE, "path": d}, key="admin")
    check(st == 200, "POST rs2 again: %d %s" % (st, j))
    st, j = srv().json("DELETE", "/admin/models/rs2", key="admin")
    check(st == 200, "DELETE rs2 again: %d %s" % (st, j))


def test_admin_refusals():
    root = os.path.join(A.work_dir, "adapters-root")
    good = adapter_copy(ADAPTERS["qv"], os.path.join(root, "qv3"))
    other = adapter_copy("opt_r8_all", os.path.join(root, "opt-adapter"))
    cases = [
        ({"name": "x", "base": "nosuch", "path": good}, 400, "base", "no model named 'nosuch'"),
        ({"name": "x", "base": "qv", "path": good}, 400, "base", "'qv' is an adapter"),
        ({"name": "qv", "base": BASE, "path": good}, 409, "name", "'qv' is served already"),
        ({"name": BASE, "base": BASE, "path": good}, 409, "name", "is served already"),
        ({"name": "x", "base": BASE}, 400, "path", "path: expected a non-empty string"),
        ({"name": "x", "base": BASE, "path": good, "tp": 2}, 400, "tp", "unknown key"),
        ({"name": "x", "base": BASE, "path": good, "priority": 5000}, 400, "priority",
         "expected an integer from -1000 to 1000"),
        ({"name": "x/../y", "base": BASE, "path": good}, 400, "name", "expected 1 to 63 bytes"),
        ({"name": "x", "base": None, "path": good}, 400, "base", "got none"),
        ({"name": "x", "base": BASE, "path": os.path.join(LORA, "llama_r8_qv")}, 403, "path",
         "under a --model-root"),
        ({"name": "x", "base": BASE, "path": other}, 400, None, "Adapter 'x' could not be added"),
    ]
    for body, status, param, needle in cases:
        st, j = srv().json("POST", "/admin/models", body, key="admin")
        check_error(st, j, status, param, needle, "POST /admin/models %s" % body)
    st, j = srv().json("GET", "/v1/models")
    check(not any(m["id"] == "x" for m in j["data"]), "a refused adapter is listed")


def test_bad_flags_and_yaml():
    base = base_dir()
    qv = os.path.join(LORA, "llama_r8_qv")
    m = ["--model", "%s=%s" % (BASE, base)]
    cases = [
        (m + ["--adapter", "x"], "--adapter 'x': expected NAME=BASE:DIR"),
        (m + ["--adapter", "x=nosuch:" + qv], "adapters[0].base 'nosuch': no model of that name"),
        (m + ["--adapter", "a=%s:%s" % (BASE, qv), "--adapter", "b=a:" + qv],
         "adapters[1].base 'a': an adapter"),
        (m + ["--adapter", "a=%s:%s" % (BASE, qv), "--adapter", "a=%s:%s" % (BASE, qv)],
         "adapters[1].name 'a': also the name of adapters[0]"),
        (m + ["--adapter", "%s=%s:%s" % (BASE, BASE, qv)], "adapters[0].name 'llama': also the name"),
    ]
    yaml_cases = [
        ("adapters:\n  - {name: a, base: %s}\n" % BASE, "key 'adapters[0]': expected a mapping with"),
        ("adapters:\n  - {name: a, base: %s, path: %s, tp: 2}\n" % (BASE, qv),
         "key 'adapters[0].tp': unknown key"),
        ("adapters:\n  - {name: a, base: %s, path: %s, keep_alive: soon}\n" % (BASE, qv),
         "key 'adapters[0].keep_alive': expected a duration"),
    ]
    for i, (text, needle) in enumerate(yaml_cases):
        p = os.path.join(A.work_dir, "adapters", "bad%d.yaml" % i)
        with open(p, "w") as f:
            f.write(text)
        cases.append((m + ["--config", p], needle))
    for args, needle in cases:
        rc, err = run_serve(args)
        lines = err.strip().splitlines()
        check(rc == 2 and len(lines) == 1 and needle in lines[0],
              "serve %s: exit %d, want 2 with one line holding %r: %r" % (args[2:], rc, needle, err))
    # an adapter made for another base: the start fails in one line naming it
    rc, err = run_serve(m + ["--adapter", "o=%s:%s" % (BASE, os.path.join(LORA, "opt_r8_all"))])
    last = err.strip().splitlines()[-1] if err.strip() else ""
    check(rc != 0 and last.startswith("shardswap serve: ") and "opt_r8_all" in last and
          err.count("shardswap serve: ") == 1, "serve with an OPT adapter over Llama: exit %d: %r" % (rc, err))


def test_churn():
    """Room for the base and about two adapters; a dozen adapters (each
    fixture under three names) and hundreds of requests at once."""
    base = base_dir()
    names = {}
    for k in range(3):
        for name, fx in ADAPTERS.items():
            names["%s-%d" % (name, k)] = fx
    adapter_bytes = max(os.path.getsize(os.path.join(LORA, fx, "adapter_model.safetensors"))
                        for fx in ADAPTERS.values())
    # the base, a batch of four 64-position sequences (far less than the
    # base: see test_families.py), about two adapters
    budget = harness.model_bytes(base) * 7 // 4 + 2 * adapter_bytes
    extra = []
    for name, fx in names.items():
        extra += ["--adapter", "%s=%s:%s" % (name, BASE, os.path.join(LORA, fx))]
    s = harness.Server(A.bin, {BASE: base}, A.work_dir, device_budget=budget, max_batch=4,
                       extra=extra)
    s.start()
    try:
        refs = {n: expected(fx) for n, fx in names.items()}
        jobs = []
        for r in range(20):
            for n in names:
                prompt, out = refs[n][(r + len(n)) % len(refs[n])]
                jobs.append((n, prompt, out))
        jobs = jobs[len(jobs) // 2:] + jobs[:len(jobs) // 2]

        def one(job):
            n, prompt, out = job
            return job, complete_ids(n, prompt, len(out), s)

        with cf.ThreadPoolExecutor(max_workers=24) as ex:
            results = list(ex.map(one, jobs))
        check(len(results) == len(jobs), "%d answers to %d requests" % (len(results), len(jobs)))
        wrong = [(j[0], j[1], got, j[2]) for j, got in results if got != j[2]]
        check(not wrong, "%d of %d answers wrong, first: %s" % (len(wrong), len(jobs), wrong[:1]))
        samples = harness.parse_metrics(s.metrics())
        loads = harness.metric_sum(samples, "^shardswap_adapter_loads_total$")
        ok = sum(harness.metric_sum(samples, "^shardswap_requests_total$", model=n, outcome="ok")
                 for n in names)
        check(ok == len(jobs), "%g requests ok in /metrics, %d sent" % (ok, len(jobs)))
        check(loads > len(names), "%g adapter loads for %d adapters: no churn (budget %d)" %
              (loads, len(names), budget))
        print("      churn: %d requests over %d adapters, %d adapter loads, budget %d bytes" %
              (len(jobs), len(names), loads, budget))
    finally:
        s.stop()


def test_thousand_adapters():
    """N_MANY adapters from YAML, each a directory of links to one fixture's
    files: RSS per adapter bounded, listed, one answers right."""
    base = base_dir()
    fx = ADAPTERS["qv"]
    root = os.path.join(A.work_dir, "adapters-many")
    if not os.path.exists(os.path.join(root, "a%04d" % (N_MANY - 1), "adapter_model.safetensors")):
        shutil.rmtree(root, ignore_errors=True)
        for i in range(N_MANY):
            d = os.path.join(root, "a%04d" % i)
            os.makedirs(d)
            for f in ("adapter_config.json", "adapter_model.safetensors"):
                os.symlink(os.path.join(LORA, fx, f), os.path.join(d, f))
    cfg = os.path.join(A.work_dir, "adapters", "many.yaml")
    with open(cfg, "w") as f:
        f.write("adapters:\n")
        for i in range(N_MANY):
            f.write("  - {name: a%04d, base: %s, path: %s}\n" % (i, BASE, os.path.join(root, "a%04d" % i)))
    rss0, n0, _ = rss_after_start({BASE: base}, [])
    t0 = time.time()
    s = harness.Server(A.bin, {BASE: base}, A.work_dir, extra=["--config", cfg], env=ASAN_ENV)
    s.start(timeout=300)
    up = time.time() - t0
    try:
        prompt, out = expected(fx)[0]
        got = complete_ids("a%04d" % (N_MANY - 1), prompt, len(out), s)
        check(got == out, "a%04d: got %s, want %s" % (N_MANY - 1, got, out))
        complete_ids(BASE, [1, 5], 1, s)
        rss1 = s.rss_bytes()
        st, j = s.json("GET", "/v1/models")
        check(st == 200 and len(j["data"]) == n0 + N_MANY, "/v1/models: %d entries, want %d" %
              (len(j["data"]), n0 + N_MANY))
        check(all(m.get("parent") == BASE for m in j["data"] if m["id"] != BASE), "an adapter without parent")
    finally:
        s.stop()
    per = (rss1 - rss0) / N_MANY
    print("      %d adapters: up in %.1f s, RSS %.1f -> %.1f MiB (%.1f KiB per adapter)" %
          (N_MANY, up, rss0 / 2**20, rss1 / 2**20, per / 1024))
    bound = ADAPTER_RSS_MAX * (2 if sanitized() else 1)
    check(per < bound, "RSS grew %.1f KiB per adapter registered (at most %d KiB)" %
          (per / 1024, bound >> 10))


def main():
    global A
    p = harness.common_args(__doc__)
    A = harness.resolve_args(p.parse_args())
    os.makedirs(os.path.join(A.work_dir, "adapters"), exist_ok=True)
    root = os.path.join(A.work_dir, "adapters-root")
    os.makedirs(root, exist_ok=True)
    own = adapter_copy(ADAPTERS["qv"], os.path.join(A.work_dir, "adapters", OWN), OWN_TEMPLATE)
    own_tok = adapter_copy(ADAPTERS["qv"], os.path.join(A.work_dir, "adapters", OWN_TOK))
    lower_tokenizer(base_dir(), own_tok)
    extra = ["--model-root", root, "--adapter", "%s=%s:%s" % (OWN, BASE, own),
             "--adapter", "%s=%s:%s" % (OWN_TOK, BASE, own_tok)]
    for name, fx in ADAPTERS.items():
        extra += ["--adapter", "%s=%s:%s" % (name, BASE, os.path.join(LORA, fx))]
    s = harness.Server(A.bin, {BASE: base_dir()}, A.work_dir, max_batch=4, extra=extra)
    S.update(srv=s)
    t0 = time.time()
    s.start()
    print("server on port %d, up in %.1f s" % (s.port, time.time() - t0))
    S["client"] = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % s.port, api_key=s.api_key,
                                max_retries=0, timeout=300)
    tests = [test_models_list_parent, test_completions_on_adapters, test_chat_on_adapter,
             test_metrics, test_admin_add_delete, test_admin_refusals, test_bad_flags_and_yaml,
             test_churn, test_thousand_adapters]
    return harness.run_and_stop(tests, S, A)


if __name__ == "__main__":
    sys.exit(main())
