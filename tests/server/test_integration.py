#!/usr/bin/env python3
"""`shardswap serve` end to end through the official `openai` client, curl
and promtool (ctest: server_integration).

One server serves two tiny random-weight models (m1, m2; room on the device
for one of them, so alternating requests swap) and the committed fixture
models (tests/fixtures/models, with a tokenizer whose ids read back from the
text: harness.fixture_with_id_tokenizer). Checked against references:
greedy completions equal `shardswap generate --temperature 0` for the same
prompt, and on the fixtures transformers' greedy ids (expected.json).

    test_integration.py --bin build/shardswap [--work-dir DIR] [--keep]
"""

import hashlib
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

RESIDENCY = {"on_device", "in_host", "on_disk", "loading", "offloading", "partial"}
FIXTURE_NAMES = ["pre_ln_f32", "pre_ln_f16", "bf16_nobias_untied", "no_final_ln", "post_ln_proj",
                 "decoder_prefix_f32"]
PROMPTS = ["Hello world", "The quick brown fox", "Once upon a time, in a land far away,",
           "\u00e9t\u00e9 \u2603 \U0001F600 \u4e2d\u6587", ""]

A = None  # the parsed arguments
S = {}    # the server ("srv"), the client ("client"), the models ("models")


def srv():
    return S["srv"]


def client():
    return S["client"]


def generate_cli(model_dir, prompt, max_tokens, temperature=0, seed=None):
    """What `shardswap generate` prints for the prompt (without the newline).
    A greedy or seeded output is kept in the work directory, keyed by the
    binary, the model's files and the arguments (generate_ref_path): the
    suite's second run in a build (server_integration_mpi2) reads what the
    first one's `generate` printed instead of decoding the same tokens again."""
    a = [A.bin, "generate", "--model", model_dir, "--prompt", prompt, "--max-tokens",
         str(max_tokens), "--temperature", str(temperature)]
    if seed is not None:
        a += ["--seed", str(seed)]
    path = generate_ref_path(a, model_dir) if temperature == 0 or seed is not None else None
    if path and os.path.exists(path):
        with open(path, encoding="utf-8", newline="") as f:
            return f.read()
    r = subprocess.run(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    check(r.returncode == 0, "shardswap generate failed: %s" % r.stderr.decode(errors="replace"))
    out = r.stdout.decode()
    check(out.endswith("\n"), "generate's output does not end in a newline")
    if path:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(out[:-1])
        os.replace(tmp, path)
    return out[:-1]


def generate_ref_path(argv, model_dir):
    """Where generate_cli keeps the output of argv: a hash of argv, the
    binary's size and modification time and those of every file of the
    model, so a rebuilt binary or a remade model never reads an old one."""
    def stamp(p):
        st = os.stat(p)
        return [p, st.st_size, st.st_mtime_ns]
    files = sorted(os.path.join(model_dir, f) for f in os.listdir(model_dir))
    key = json.dumps([argv, stamp(A.bin)] + [stamp(f) for f in files if os.path.isfile(f)])
    return os.path.join(A.work_dir, "generate-refs", hashlib.sha256(key.encode()).hexdigest() + ".txt")


def n_tokens(model_dir, text):
    """The prompt's token count with BOS (`shardswap tokenize`)."""
    r = subprocess.run([A.bin, "tokenize", "--model", model_dir], input=text.encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    check(r.returncode == 0, "shardswap tokenize failed: %s" % r.stderr.decode(errors="replace"))
    return len(r.stdout.split())


def curl(method, path, data=None, key="admin"):
    """(status, parsed JSON or None, raw body) of curl's request."""
    k = {"api": srv().api_key, "admin": srv().admin_key}.get(key, key)
    a = ["curl", "-sS", "-X", method, "-o", "-", "-w", "\n%{http_code}",
         "http://127.0.0.1:%d%s" % (srv().port, path)]
    if k:
        a += ["-H", "Authorization: Bearer " + k]
    if data is not None:
        a += ["-H", "Content-Type: application/json", "--data-binary", json.dumps(data)]
    r = subprocess.run(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    check(r.returncode == 0, "curl %s %s failed: %s" % (method, path, r.stderr.decode()))
    body, _, code = r.stdout.decode().rpartition("\n")
    try:
        j = json.loads(body) if body.strip() else None
    except ValueError:
        j = None
    return int(code), j, body


def model_info(name):
    st, j = srv().json("GET", "/v1/models/" + name)
    check(st == 200, "GET /v1/models/%s: %d %s" % (name, st, j))
    return j


def wait_residency(name, want, timeout=60):
    """Polls until model name's residency is in want (a load or unload may
    answer before it is done); returns the last residency seen."""
    deadline = time.time() + timeout
    r = model_info(name)["residency"]
    while r not in want and time.time() < deadline:
        time.sleep(0.05)
        r = model_info(name)["residency"]
    return r


def metrics():
    return harness.parse_metrics(srv().metrics())


def check_error(st, j, status, code=None, what=""):
    check(st == status, "%s: status %d, want %d (%s)" % (what, st, status, j))
    check(isinstance(j, dict) and isinstance(j.get("error"), dict),
          "%s: the body is not {\"error\": {...}}: %s" % (what, j))
    e = j["error"]
    for f in ("message", "type", "param", "code"):
        check(f in e, "%s: the error has no %r: %s" % (what, f, e))
    check(isinstance(e["message"], str) and e["message"], "%s: empty message" % what)
    if code is not None:
        check(e["code"] == code, "%s: code %r, want %r" % (what, e["code"], code))


# ---------------------------------------------------------------- tests


def test_health():
    code, j, body = curl("GET", "/health", key=None)
    check(code == 200, "/health: %d %s" % (code, body))


def test_models_list():
    names = sorted(m.id for m in client().models.list().data)
    check(names == sorted(S["models"]), "models.list: %s, want %s" % (names, sorted(S["models"])))
    st, j = srv().json("GET", "/v1/models")
    check(st == 200 and j.get("object") == "list", "GET /v1/models: %d %s" % (st, j))
    for m in j["data"]:
        check(m.get("object") == "model", "model object: %s" % m)
        check(m.get("residency") in RESIDENCY, "%s: residency %r" % (m.get("id"), m.get("residency")))
        check(isinstance(m.get("pinned"), bool), "%s: pinned %r" % (m["id"], m.get("pinned")))
        for f in ("tp", "pp", "max_model_len"):
            check(isinstance(m.get(f), int) and m[f] >= 1, "%s: %s = %r" % (m["id"], f, m.get(f)))
        sh = m.get("shards")
        check(isinstance(sh, list) and len(sh) == m["tp"] * m["pp"] and
              all(isinstance(x.get("device"), str) and x.get("bytes", 0) > 0 for x in sh),
              "%s: shards %r" % (m["id"], sh))
        check(sum(x["bytes"] for x in sh) == m["bytes"], "%s: shards' bytes do not add up to %d" %
              (m["id"], m["bytes"]))
        check(isinstance(m.get("bytes"), int) and m["bytes"] > 0, "%s: bytes %r" % (m["id"], m.get("bytes")))
    one = model_info("m1")
    check(one["id"] == "m1" and one["max_model_len"] == 2048, "GET /v1/models/m1: %s" % one)
    check(one["bytes"] >= harness.model_bytes(S["models"]["m1"]) * 0.9,
          "m1's bytes %d, its safetensors hold %d" % (one["bytes"], harness.model_bytes(S["models"]["m1"])))
    st, j = srv().json("GET", "/v1/models/no-such-model")
    check_error(st, j, 404, "model_not_found", "GET /v1/models/no-such-model")
    try:
        client().models.retrieve("no-such-model")
        check(False, "models.retrieve of an unknown model did not raise")
    except openai.NotFoundError:
        pass


def test_completion_fields():
    c = client().completions.create(model="m1", prompt="Hello world", max_tokens=8, temperature=0)
    check(c.object == "text_completion", "object %r" % c.object)
    check(c.model == "m1", "model %r" % c.model)
    check(isinstance(c.id, str) and c.id, "id %r" % c.id)
    check(len(c.choices) == 1 and c.choices[0].index == 0, "choices %s" % c.choices)
    ch = c.choices[0]
    n_prompt = n_tokens(S["models"]["m1"], "Hello world")
    check(c.usage.prompt_tokens == n_prompt, "usage.prompt_tokens %d, tokenize says %d" %
          (c.usage.prompt_tokens, n_prompt))
    check(c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens,
          "usage doesn't add up: %s" % c.usage)
    if ch.finish_reason == "length":
        check(c.usage.completion_tokens == 8, "finish length after %d tokens" % c.usage.completion_tokens)
    else:
        check(ch.finish_reason == "stop" and c.usage.completion_tokens <= 8,
              "finish_reason %r, %d tokens" % (ch.finish_reason, c.usage.completion_tokens))
    # the default max_tokens is 16
    d = client().completions.create(model="m1", prompt="Hello world", temperature=0)
    check(d.usage.completion_tokens == 16 or d.choices[0].finish_reason == "stop",
          "default max_tokens: %d tokens, finish %r" % (d.usage.completion_tokens, d.choices[0].finish_reason))
    check(d.choices[0].text.startswith(ch.text), "16 greedy tokens %r do not extend 8 %r" %
          (d.choices[0].text, ch.text))


def test_greedy_equals_generate_cli():
    for model in ("m1", "m2"):
        for p in PROMPTS:
            want = generate_cli(S["models"][model], p, 12)
            c = client().completions.create(model=model, prompt=p, max_tokens=12, temperature=0)
            check(c.choices[0].text == want, "%s %r: HTTP %r, shardswap generate %r" %
                  (model, p, c.choices[0].text, want))


def test_stream_equals_nonstream():
    for model, p in (("m1", "Hello world"), ("m2", PROMPTS[2]), ("m1", PROMPTS[3])):
        full = client().completions.create(model=model, prompt=p, max_tokens=10, temperature=0)
        chunks = list(client().completions.create(model=model, prompt=p, max_tokens=10, temperature=0,
                                                  stream=True, stream_options={"include_usage": True}))
        check(len(chunks) >= 2, "%d chunks" % len(chunks))
        text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
        check(text == full.choices[0].text, "%s %r: streamed %r, non-streamed %r" %
              (model, p, text, full.choices[0].text))
        finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
        check(finishes == [full.choices[0].finish_reason], "stream finish reasons %s, want [%r]" %
              (finishes, full.choices[0].finish_reason))
        # the usage chunk: last, no choices, the same usage as non-streamed
        last = chunks[-1]
        check(last.usage is not None and not last.choices, "the last chunk is not the usage chunk: %s" % last)
        check((last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) ==
              (full.usage.prompt_tokens, full.usage.completion_tokens, full.usage.total_tokens),
              "stream usage %s, non-streamed %s" % (last.usage, full.usage))
        for ch in chunks[:-1]:
            check(ch.usage is None, "a chunk before the last carries usage: %s" % ch)
        check(all(ch.id == chunks[0].id for ch in chunks), "chunk ids differ")
    # without include_usage no chunk carries usage
    chunks = list(client().completions.create(model="m1", prompt="Hi", max_tokens=4, temperature=0, stream=True))
    check(all(ch.usage is None for ch in chunks), "usage without include_usage")
    check(all(ch.choices for ch in chunks), "a chunk without choices without include_usage")


def test_stream_wire_format():
    """The raw SSE: data: lines, blank-line separated, ending with data: [DONE]."""
    st, h, body = srv().request("POST", "/v1/completions",
                                {"model": "m1", "prompt": "Hi", "max_tokens": 3, "stream": True})
    check(st == 200, "stream: %d %s" % (st, body[:200]))
    check(h.get("content-type", "").startswith("text/event-stream"),
          "content-type %r" % h.get("content-type"))
    events = [e for e in body.decode().split("\n\n") if e.strip()]
    check(events and events[-1].strip() == "data: [DONE]", "no data: [DONE] at the end: %r" % body[-100:])
    for e in events[:-1]:
        check(e.startswith("data: "), "an event that is not data: %r" % e)
        json.loads(e[len("data: "):])


def test_fixtures_equal_transformers():
    for name in FIXTURE_NAMES:
        model = "fx_" + name
        for prompt, out in harness.fixture_expected(name):
            # token ids as given (BOS included)
            c = client().completions.create(model=model, prompt=prompt, max_tokens=len(out), temperature=0)
            got = harness.ids_of_text(c.choices[0].text)
            check(got == out, "%s ids %s: HTTP %s, transformers %s" % (name, prompt, got, out))
            check(c.usage.prompt_tokens == len(prompt) and c.usage.completion_tokens == len(out),
                  "%s: usage %s" % (name, c.usage))
            check(c.choices[0].finish_reason == "length", "%s: finish %r" % (name, c.choices[0].finish_reason))
            # the same prompt as text (the server adds BOS, as generate does)
            c = client().completions.create(model=model, prompt=harness.ids_text(prompt[1:]),
                                            max_tokens=len(out), temperature=0)
            got = harness.ids_of_text(c.choices[0].text)
            check(got == out, "%s text %r: HTTP %s, transformers %s" %
                  (name, harness.ids_text(prompt[1:]), got, out))
            # and shardswap generate agrees with both
            gen = harness.ids_of_text(generate_cli(S["models"][model], harness.ids_text(prompt[1:]), len(out)))
            check(gen == out, "%s: shardswap generate %s, transformers %s" % (name, gen, out))


def test_alternating_models_swap():
    before = metrics()
    want = {}
    for m in ("m1", "m2"):
        want[m] = generate_cli(S["models"][m], "Swap me", 6)
    for i in range(8):
        m = ("m1", "m2")[i % 2]
        c = client().completions.create(model=m, prompt="Swap me", max_tokens=6, temperature=0)
        check(c.choices[0].text == want[m], "request %d on %s: %r, want %r" % (i, m, c.choices[0].text, want[m]))
        on = [n for n in ("m1", "m2") if model_info(n)["residency"] == "on_device"]
        check(len(on) <= 1, "room for one, yet on device: %s" % on)
        check(model_info(m)["residency"] in ("on_device", "offloading"),
              "%s right after its request: %s" % (m, model_info(m)["residency"]))
    after = metrics()
    loads = harness.metric_sum(after, r"(^|_)swaps_total$") - harness.metric_sum(before, r"(^|_)swaps_total$")
    check(loads >= 7, "8 alternating requests with room for one: swap/load counters moved by %g "
          "(want >= 7); swap metrics: %s" % (loads, [s for s in after if "swap" in s[0] or "load" in s[0]][:20]))


def test_stop_strings():
    p = PROMPTS[2]
    full = client().completions.create(model="m1", prompt=p, max_tokens=16, temperature=0).choices[0].text
    check(len(full) >= 6, "greedy text too short to cut: %r" % full)
    for stop in (full[3:6], [full[4:5], "\u2603never"], full[-2:]):
        stops = stop if isinstance(stop, list) else [stop]
        cut = min((full.find(s) for s in stops if full.find(s) >= 0))
        want = full[:cut]
        c = client().completions.create(model="m1", prompt=p, max_tokens=16, temperature=0, stop=stop)
        check(c.choices[0].text == want, "stop %r: %r, want %r (full %r)" % (stop, c.choices[0].text, want, full))
        check(c.choices[0].finish_reason == "stop", "stop %r: finish %r" % (stop, c.choices[0].finish_reason))
        chunks = list(client().completions.create(model="m1", prompt=p, max_tokens=16, temperature=0,
                                                  stop=stop, stream=True))
        text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
        check(text == want, "streamed, stop %r: %r, want %r" % (stop, text, want))
    # a stop string that never occurs changes nothing
    c = client().completions.create(model="m1", prompt=p, max_tokens=16, temperature=0, stop="\u2603\u2603")
    check(c.choices[0].text == full and c.choices[0].finish_reason == "length",
          "absent stop: %r %r" % (c.choices[0].text, c.choices[0].finish_reason))


def test_fixtures_batched():
    """The fixtures' references again, all at once (prompts of 5, 9 and 1
    ids batched together, as text and as ids, every fixture model): batching
    and padding change no id."""
    import concurrent.futures as cf
    jobs = []
    for name in FIXTURE_NAMES:
        for prompt, out in harness.fixture_expected(name):
            jobs.append((name, prompt, out, True))
            jobs.append((name, prompt, out, False))
    jobs = jobs * 2

    def run(job):
        name, prompt, out, as_ids = job
        c = client().completions.create(model="fx_" + name, prompt=prompt if as_ids else harness.ids_text(prompt[1:]),
                                        max_tokens=len(out), temperature=0)
        return harness.ids_of_text(c.choices[0].text)

    with cf.ThreadPoolExecutor(12) as ex:
        got = list(ex.map(run, jobs))
    bad = ["%s %s (%s): %s, transformers %s" % (j[0], j[1], "ids" if j[3] else "text", g, j[2])
           for j, g in zip(jobs, got) if g != j[2]]
    check(not bad, "%d of %d batched fixture completions differ:\n  %s" % (len(bad), len(jobs), "\n  ".join(bad[:8])))


def test_context_boundary():
    """prompt + max_tokens == the context (64 on the fixtures) is served to
    the last position, as shardswap generate does; one more is a 400."""
    name = "pre_ln_f32"
    ids = [2] + [(7 * i) % 250 + 4 for i in range(59)]  # 60 ids, none 2
    c = client().completions.create(model="fx_" + name, prompt=ids, max_tokens=4, temperature=0)
    got = harness.ids_of_text(c.choices[0].text)
    check(c.usage.completion_tokens == 4 and len(got) == 4, "60 + 4 on a 64-position model: %s %s" % (got, c.usage))
    want = harness.ids_of_text(generate_cli(S["models"]["fx_" + name], harness.ids_text(ids[1:]), 4))
    check(got == want, "60 + 4: HTTP %s, shardswap generate %s" % (got, want))
    st, j = srv().json("POST", "/v1/completions", {"model": "fx_" + name, "prompt": ids, "max_tokens": 5})
    check_error(st, j, 400, "context_length_exceeded", "60 + 5 on a 64-position model")
    st, j = srv().json("POST", "/v1/completions", {"model": "fx_" + name, "prompt": ids + [5] * 4, "max_tokens": 1})
    check_error(st, j, 400, "context_length_exceeded", "64 + 1 on a 64-position model")


def test_stop_strings_random():
    """Stop strings cut anywhere in greedy completions (1 to 6 characters,
    multi-byte ones included), streamed and not: the text is the greedy
    text up to the stop string's first occurrence."""
    import random
    rnd = random.Random(5)
    for model, p in (("m1", PROMPTS[0]), ("m2", PROMPTS[3]), ("m1", PROMPTS[1])):
        full = client().completions.create(model=model, prompt=p, max_tokens=20, temperature=0).choices[0].text
        for _ in range(4):
            if len(full) < 2:
                break
            a = rnd.randrange(0, len(full) - 1)
            stop = full[a:a + rnd.randint(1, 6)]
            want = full[:full.find(stop)]
            for stream in (False, True):
                if stream:
                    chunks = list(client().completions.create(model=model, prompt=p, max_tokens=20, temperature=0,
                                                              stop=[stop], stream=True))
                    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
                    fin = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
                else:
                    c = client().completions.create(model=model, prompt=p, max_tokens=20, temperature=0, stop=[stop])
                    text, fin = c.choices[0].text, [c.choices[0].finish_reason]
                check(text == want and fin == ["stop"], "%s %r stop %r (stream %s): %r %s, want %r (full %r)" %
                      (model, p, stop, stream, text, fin, want, full))


def test_tp_pp_models():
    """m3 added again with tensor parallelism 2 and pipeline parallelism 2
    over the two devices: its shards on both, and greedy completions equal
    shardswap generate's (one device)."""
    for name, tp, pp in (("m3_tp2", 2, 1), ("m3_pp2", 1, 2)):
        code, j, body = curl("POST", "/admin/models", {"name": name, "path": A.root_model, "tp": tp, "pp": pp})
        check(code in (200, 201), "add %s: %d %s" % (name, code, body))
        info = model_info(name)
        check(info["tp"] == tp and info["pp"] == pp and len(info["shards"]) == 2 and
              len({x["device"] for x in info["shards"]}) == 2, "%s: %s" % (name, info))
        for p in PROMPTS[:3]:
            want = generate_cli(A.root_model, p, 10)
            c = client().completions.create(model=name, prompt=p, max_tokens=10, temperature=0)
            check(c.choices[0].text == want, "%s %r: %r, shardswap generate %r" % (name, p, c.choices[0].text, want))
        code, j, body = curl("DELETE", "/admin/models/" + name)
        check(code in (200, 204), "delete %s: %d %s" % (name, code, body))


def test_echo():
    p = "Echo this"
    plain = client().completions.create(model="m2", prompt=p, max_tokens=5, temperature=0).choices[0].text
    c = client().completions.create(model="m2", prompt=p, max_tokens=5, temperature=0, echo=True)
    check(c.choices[0].text == p + plain, "echo: %r, want %r" % (c.choices[0].text, p + plain))


def test_seed_reproducible():
    kw = dict(model="m1", prompt="Random words:", max_tokens=12, temperature=1.0)
    a = client().completions.create(seed=42, **kw).choices[0].text
    b = client().completions.create(seed=42, **kw).choices[0].text
    check(a == b, "seed 42 twice: %r vs %r" % (a, b))
    c = client().completions.create(seed=43, **kw).choices[0].text
    check(c != a, "seeds 42 and 43 gave the same 12 sampled tokens %r (a random-weight model "
          "samples from a nearly flat distribution)" % a)
    # with other requests running beside it, too (a batch of several)
    import concurrent.futures as cf
    with cf.ThreadPoolExecutor(4) as ex:
        outs = list(ex.map(lambda s: client().completions.create(seed=s, **kw).choices[0].text,
                           [42, 7, 42, 9]))
    check(outs[0] == a and outs[2] == a, "seed 42 inside a batch: %r, %r, want %r" % (outs[0], outs[2], a))
    # top_k 1 is greedy whatever the temperature
    g = client().completions.create(model="m1", prompt="Random words:", max_tokens=12, temperature=0).choices[0].text
    k = client().completions.create(extra_body={"top_k": 1}, seed=5, **kw).choices[0].text
    check(k == g, "top_k 1: %r, greedy %r" % (k, g))


def test_admin_routes():
    # an API key that is not the admin key
    code, j, _ = curl("POST", "/admin/models/m2/load", key="api")
    check(code in (401, 403), "admin route with the API key: %d" % code)
    code, j, _ = curl("POST", "/admin/models/m2/load", key=None)
    check(code == 401, "admin route without a key: %d" % code)
    # room for one: with another model on the device a load is refused
    # (409) or makes room (200); with the device empty it loads
    code, j, body = curl("POST", "/admin/models/m2/load")
    check(code in (200, 409), "load m2 beside another model: %d %s" % (code, body))
    for m in client().models.list().data:
        if m.id != "m2" and model_info(m.id)["residency"] == "on_device":
            code, j, body = curl("POST", "/admin/models/%s/unload" % m.id)
            check(code == 200, "unload %s: %d %s" % (m.id, code, body))
            wait_residency(m.id, ("in_host", "on_disk"))
    code, j, body = curl("POST", "/admin/models/m2/load")
    check(code == 200, "load m2: %d %s" % (code, body))
    r = wait_residency("m2", ("on_device",))
    check(r == "on_device", "m2 60 s after its load: %s" % r)
    code, j, body = curl("POST", "/admin/models/m2/pin")
    check(code == 200 and model_info("m2")["pinned"] is True, "pin m2: %d %s %s" % (code, body, model_info("m2")))
    code, j, body = curl("POST", "/admin/models/m2/unload")
    check_error(code, j, 409, None, "unload of a pinned model")
    check(model_info("m2")["residency"] == "on_device", "pinned m2 after a refused unload: %s" %
          model_info("m2")["residency"])
    code, j, body = curl("POST", "/admin/models/m2/unpin")
    check(code == 200 and model_info("m2")["pinned"] is False, "unpin m2: %d %s" % (code, body))
    code, j, body = curl("POST", "/admin/models/m2/unload")
    check(code == 200, "unload m2: %d %s" % (code, body))
    r = wait_residency("m2", ("in_host", "on_disk"))
    check(r in ("in_host", "on_disk"), "m2 60 s after its unload: %s" % r)
    code, j, body = curl("POST", "/admin/models/nope/load")
    check_error(code, j, 404, "model_not_found", "load of an unknown model")
    code, j, body = curl("POST", "/admin/models/m2/explode")
    check(code in (404, 405), "unknown admin action: %d" % code)
    code, j, body = curl("GET", "/admin/models/m2/load")
    check(code == 405, "GET on a POST admin route: %d" % code)
    # add a model inside --model-root; use it; delete it
    code, j, body = curl("POST", "/admin/models", {"name": "m3", "path": A.root_model})
    check(code in (200, 201), "add m3 inside the root: %d %s" % (code, body))
    check("m3" in [m.id for m in client().models.list().data], "m3 not listed after adding it")
    want = generate_cli(A.root_model, "New model", 5)
    c = client().completions.create(model="m3", prompt="New model", max_tokens=5, temperature=0)
    check(c.choices[0].text == want, "m3: %r, want %r" % (c.choices[0].text, want))
    code, j, body = curl("POST", "/admin/models", {"name": "m3", "path": A.root_model})
    check(code in (400, 409), "adding m3 twice: %d %s" % (code, body))
    code, j, body = curl("DELETE", "/admin/models/m3")
    check(code in (200, 204), "delete m3: %d %s" % (code, body))
    st, j = srv().json("GET", "/v1/models/m3")
    check_error(st, j, 404, "model_not_found", "m3 after delete")
    st, j = srv().json("POST", "/v1/completions", {"model": "m3", "prompt": "x", "max_tokens": 1})
    check_error(st, j, 404, "model_not_found", "completion on a deleted model")
    # outside the root, directly or through .. or a symbolic link
    outside = S["models"]["fx_pre_ln_f32"]
    link = os.path.join(A.model_root, "escape")
    if not os.path.lexists(link):
        os.symlink(outside, link)
    for path in (outside, os.path.join(A.model_root, "..", "fixtures", "pre_ln_f32"), link):
        code, j, body = curl("POST", "/admin/models", {"name": "evil", "path": path})
        check_error(code, j, 403, None, "add a model at %s (outside the root)" % path)
    check("evil" not in [m.id for m in client().models.list().data], "a refused model is listed")
    code, j, body = curl("POST", "/admin/models", {"name": "m4", "path": os.path.join(A.model_root, "absent")})
    # 403 too: a server may not tell what exists outside its roots
    check(code in (400, 403, 404), "add a model whose directory is absent: %d %s" % (code, body))
    code, j, body = curl("DELETE", "/admin/models/nope")
    check(code == 404, "delete an unknown model: %d" % code)


def test_keep_alive():
    """keep_alive on POST /admin/models and in /v1/models: 0 unloads a model
    as soon as it is idle (reading /v1/models meanwhile is not use), counted
    as shardswap_unloads_total{reason="idle"}; -1 is forever; bad values are
    refused naming the field."""
    check(model_info("m1")["keep_alive"] is None, "m1's keep_alive: %r (expected null: the "
          "policy's own)" % model_info("m1")["keep_alive"])
    for bad in (-5, -0.5, "soon", True):
        code, j, body = curl("POST", "/admin/models", {"name": "m5", "path": A.root_model,
                                                       "keep_alive": bad})
        check_error(code, j, 400, None, "keep_alive %r" % (bad,))
        check(j["error"]["param"] == "keep_alive", "keep_alive %r: param %r" % (bad, j["error"]))
    code, j, body = curl("POST", "/admin/models", {"name": "m5", "path": A.root_model,
                                                   "keep_alive": 0})
    check(code == 200 and j["keep_alive"] == 0, "add m5 with keep_alive 0: %d %s" % (code, body))
    c = client().completions.create(model="m5", prompt="Idle", max_tokens=2, temperature=0)
    check(len(c.choices[0].text) > 0, "m5 answered nothing")
    r = wait_residency("m5", ("in_host", "on_disk"))
    check(r in ("in_host", "on_disk"), "m5 (keep_alive 0) 60 s after its request: %s" % r)
    m = metrics()
    idle = harness.metric_sum(m, r"^shardswap_unloads_total$", model="m5", reason="idle")
    ev = harness.metric_sum(m, r"^shardswap_unloads_total$", model="m5", reason="evicted")
    check(idle == 1 and ev == 0, "m5: %g idle unloads, %g evictions" % (idle, ev))
    code, j, body = curl("DELETE", "/admin/models/m5")
    check(code in (200, 204), "delete m5: %d %s" % (code, body))
    code, j, body = curl("POST", "/admin/models", {"name": "m5", "path": A.root_model,
                                                   "keep_alive": -1, "priority": 5,
                                                   "max_queue_wait": 2.5, "min_resident": 3})
    check(code == 200 and j["keep_alive"] == -1, "add m5 with keep_alive -1: %d %s" % (code, body))
    info = model_info("m5")
    check(info["keep_alive"] == -1 and info["priority"] == 5 and info["max_queue_wait"] == 2.5
          and info["min_resident"] == 3,
          "m5 listed with %r" % info)
    check(model_info("m1")["priority"] == 0 and model_info("m1")["max_queue_wait"] == 0,
          "m1's order controls: %r" % model_info("m1"))
    for field, bad in (("priority", 1001), ("priority", 1.5), ("max_queue_wait", -1),
                       ("max_queue_wait", "x"), ("min_resident", -0.5), ("min_resident", False)):
        code, j, body = curl("POST", "/admin/models", {"name": "m6", "path": A.root_model,
                                                       field: bad})
        check_error(code, j, 400, None, "%s %r" % (field, bad))
        check(j["error"]["param"] == field, "%s %r: param %r" % (field, bad, j["error"]))
    code, j, body = curl("DELETE", "/admin/models/m5")
    check(code in (200, 204), "delete m5: %d %s" % (code, body))


def test_admin_body_keys():
    """POST /admin/models reads its body through the config file's key
    table: an unknown key is a 400 naming it (before: "pined": true was a 200
    that pinned nothing), a value out of range has the file's words, and
    keep_alive takes durations; chat_template works as in the file: the
    chat, rendered with it, answers what a completion of the same text
    answers."""
    code, j, body = curl("POST", "/admin/models", {"name": "m8", "path": A.root_model,
                                                   "pined": True})
    check_error(code, j, 400, None, "an unknown key")
    check(j["error"]["param"] == "pined" and "'pined': unknown key" in j["error"]["message"],
          "an unknown key: %r" % j["error"])
    code, j, body = curl("POST", "/admin/models", {"name": "m8", "path": A.root_model,
                                                   "max_batch": 5000})
    check_error(code, j, 400, None, "max_batch 5000")
    check(j["error"]["param"] == "max_batch" and j["error"]["message"] ==
          "max_batch: expected an integer from 0 to 4096, got 5000", "max_batch: %r" % j["error"])
    st, _ = srv().json("GET", "/v1/models/m8")
    check(st == 404, "a refused add left m8 served: %d" % st)
    code, j, body = curl("POST", "/admin/models", {"name": "m8", "path": A.root_model,
                                                   "keep_alive": "5m"})
    check(code == 200 and j["keep_alive"] == 300, "keep_alive 5m: %d %s" % (code, body))
    code, j, body = curl("DELETE", "/admin/models/m8")
    check(code == 200, "delete m8: %d %s" % (code, body))
    # a chat template from a file below the root
    tpl = os.path.join(A.model_root, "plain.jinja")
    with open(tpl, "w") as f:
        f.write("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    code, j, body = curl("POST", "/admin/models", {"name": "m8", "path": A.root_model,
                                                   "chat_template": os.path.join(A.model_root,
                                                                                 "absent.jinja")})
    check_error(code, j, 400, None, "a chat template that is not there")
    check(j["error"]["param"] == "chat_template", "absent chat template: %r" % j["error"])
    code, j, body = curl("POST", "/admin/models", {"name": "m8", "path": A.root_model,
                                                   "chat_template": tpl})
    check(code == 200 and j["chat_template"] is True, "add m8 with a chat template: %d %s" %
          (code, body))
    chat = client().chat.completions.create(model="m8", max_tokens=5, temperature=0,
                                            messages=[{"role": "user", "content": "Hello there"}])
    # a chat prompt is encoded as rendered (no BOS added): the same ids
    r = subprocess.run([A.bin, "tokenize", "--model", A.root_model, "--no-bos"],
                       input=b"Hello there", stdout=subprocess.PIPE, timeout=60)
    ids = [int(t) for t in r.stdout.split()]
    want = client().completions.create(model="m8", prompt=ids, max_tokens=5,
                                       temperature=0).choices[0].text
    check(chat.choices[0].message.content == want, "m8's chat: %r, its completion %r" %
          (chat.choices[0].message.content, want))
    code, j, body = curl("DELETE", "/admin/models/m8")
    check(code == 200, "delete m8: %d %s" % (code, body))


def test_aliases():
    """A model added with aliases answers to each of them: one registered
    model (one host copy, one residency: the alias's entry in /v1/models
    shows the model's residency), listed under every name with alias_of,
    completions by an alias equal the model's and name the alias; an alias
    already served is a 409."""
    code, j, body = curl("POST", "/admin/models", {"name": "m9", "path": A.root_model,
                                                   "aliases": ["m9-chat", "m9/b"]})
    check(code == 200 and j["aliases"] == ["m9-chat", "m9/b"], "add m9 with aliases: %d %s" %
          (code, body))
    listed = {m["id"]: m for m in srv().json("GET", "/v1/models")[1]["data"]}
    check(listed.get("m9-chat", {}).get("alias_of") == "m9" and
          listed.get("m9/b", {}).get("alias_of") == "m9" and "alias_of" not in listed["m9"],
          "aliases listed: %r" % {k: v.get("alias_of") for k, v in listed.items()})
    want = client().completions.create(model="m9", prompt="Alias", max_tokens=4, temperature=0)
    got = client().completions.create(model="m9-chat", prompt="Alias", max_tokens=4,
                                      temperature=0)
    check(got.choices[0].text == want.choices[0].text and got.model == "m9-chat",
          "by its alias: %r (%s), by its name %r" % (got.choices[0].text, got.model,
                                                     want.choices[0].text))
    a, m = model_info("m9-chat"), model_info("m9")
    check(a["residency"] == m["residency"] and a["bytes"] == m["bytes"],
          "alias and model: %s %s" % (a["residency"], m["residency"]))
    code, j, body = curl("POST", "/admin/models", {"name": "m10", "path": A.root_model,
                                                   "aliases": ["m9-chat"]})
    check_error(code, j, 409, "model_exists", "an alias already served")
    check(j["error"]["param"] == "aliases", "alias taken: %r" % j["error"])
    code, j, body = curl("POST", "/admin/models", {"name": "m9/b", "path": A.root_model})
    check_error(code, j, 409, "model_exists", "a name that is an alias")
    code, j, body = curl("DELETE", "/admin/models/m9")
    check(code == 200, "delete m9: %d %s" % (code, body))
    st, _ = srv().json("GET", "/v1/models/m9-chat")
    check(st == 404, "m9-chat after m9's delete: %d" % st)


def counters_of(samples, model):
    """{(name, labels without model): value} of model's counter series:
    every _total, and the histograms' _bucket, _count and _sum; each shown
    once."""
    out = {}
    for name, lab, v in samples:
        if lab.get("model") == model and name.endswith(("_total", "_bucket", "_count", "_sum")):
            key = (name, tuple(sorted((k, x) for k, x in lab.items() if k != "model")))
            check(key not in out, "%s's %s is shown twice: %g and %g" % (model, key, out.get(key, 0), v))
            out[key] = v
    return out


def test_removed_counters():
    """A model deleted while resident left its devices for reason "removed"
    (shardswap_unloads_total); its counter series stay in /metrics after the
    delete, its gauges go; added again under the same name, every counter
    goes on from where it was (never lower), and a second delete while
    resident counts a second removal."""
    code, j, body = curl("POST", "/admin/models", {"name": "m7", "path": A.root_model,
                                                   "keep_alive": -1})
    check(code == 200, "add m7: %d %s" % (code, body))
    c = client().completions.create(model="m7", prompt="Gone soon", max_tokens=3, temperature=0)
    check(len(c.choices[0].text) > 0, "m7 answered nothing")
    r = wait_residency("m7", ("on_device",))
    check(r == "on_device", "m7 after its request: %s (expected on_device: keep_alive -1)" % r)
    served = counters_of(metrics(), "m7")
    check(served.get(("shardswap_unloads_total", (("reason", "removed"),))) == 0,
          "m7 served: unloads_total{reason=removed} %s" %
          served.get(("shardswap_unloads_total", (("reason", "removed"),))))
    code, j, body = curl("DELETE", "/admin/models/m7")
    check(code in (200, 204), "delete m7: %d %s" % (code, body))
    samples = metrics()
    gone = counters_of(samples, "m7")
    check(harness.metric_sum(samples, r"^shardswap_unloads_total$", model="m7", reason="removed")
          == 1, "m7 deleted while resident: unloads_total{reason=removed} %g, want 1" %
          harness.metric_sum(samples, r"^shardswap_unloads_total$", model="m7", reason="removed"))
    check(harness.metric_sum(samples, r"^shardswap_requests_total$", model="m7", outcome="ok")
          >= 1 and harness.metric_sum(samples, r"^shardswap_swaps_total$", model="m7") >= 1,
          "m7's requests and swaps after its delete: %s" % gone)
    check(set(served) == set(gone), "m7's counter series that its delete changed: %s" %
          sorted(set(served) ^ set(gone)))
    for k, v in served.items():
        check(gone[k] >= v, "m7's %s went back at its delete: %g -> %g" % (k, v, gone[k]))
    gauges = [(n, lab) for n, lab, v in samples if lab.get("model") == "m7" and
              n in ("shardswap_queue_depth", "shardswap_running", "shardswap_model_resident")]
    check(not gauges, "a deleted model's gauges are still shown: %s" % gauges)
    # added again: the same series, never lower, then moving on from there
    code, j, body = curl("POST", "/admin/models", {"name": "m7", "path": A.root_model,
                                                   "keep_alive": -1})
    check(code == 200, "add m7 again: %d %s" % (code, body))
    again = counters_of(metrics(), "m7")
    for k, v in gone.items():
        check(again.get(k, -1) >= v, "m7's %s added again: %s, was %g" % (k, again.get(k), v))
    client().completions.create(model="m7", prompt="Back again", max_tokens=3, temperature=0)
    check(wait_residency("m7", ("on_device",)) == "on_device", "m7 added again: not resident")
    code, j, body = curl("DELETE", "/admin/models/m7")
    check(code in (200, 204), "delete m7 again: %d %s" % (code, body))
    samples = metrics()
    n_rm = harness.metric_sum(samples, r"^shardswap_unloads_total$", model="m7", reason="removed")
    n_ok = harness.metric_sum(samples, r"^shardswap_requests_total$", model="m7", outcome="ok")
    check(n_rm == 2 and n_ok == gone[("shardswap_requests_total", (("outcome", "ok"),))] + 1,
          "m7 deleted twice while resident: %g removals, %g ok requests" % (n_rm, n_ok))
    check(len([1 for n, lab, v in samples if n == "shardswap_unloads_total" and
               lab == {"model": "m7", "reason": "removed"}]) == 1, "m7's removals shown twice")


def test_metrics_promtool():
    promtool = shutil.which("promtool")
    check(promtool is not None, "promtool not found: install Debian's prometheus package "
          "(tools/setup.sh does)")
    text = srv().metrics()
    r = subprocess.run([promtool, "check", "metrics"], input=text.encode(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    check(r.returncode == 0, "promtool check metrics:\n%s" % r.stdout.decode(errors="replace"))
    st, h, _ = srv().request("GET", "/metrics")
    check(h.get("content-type", "").startswith("text/plain"), "metrics content-type %r" % h.get("content-type"))


def test_metrics_residency_agrees():
    """shardswap_model_resident says what /v1/models says (the server is
    idle here, so nothing moves between the two reads), and the device and
    host bytes in use are within their budgets."""
    j = srv().json("GET", "/v1/models")[1]
    samples = metrics()
    for m in j["data"]:
        ones = [lab["residency"] for name, lab, v in samples
                if name == "shardswap_model_resident" and lab.get("model") == m["id"] and v == 1]
        check(ones == [m["residency"]], "%s: /v1/models says %s, shardswap_model_resident says %s" %
              (m["id"], m["residency"], ones))
    for kind in ("device", "host"):
        used = {tuple(sorted(lab.items())): v for name, lab, v in samples if name == "shardswap_%s_bytes_used" % kind}
        budget = {tuple(sorted(lab.items())): v for name, lab, v in samples
                  if name == "shardswap_%s_bytes_budget" % kind}
        check(used and used.keys() == budget.keys(), "%s bytes: used %s, budget %s" % (kind, used, budget))
        for k in used:
            check(0 <= used[k] <= budget[k], "%s %s: %d bytes used of %d" % (kind, k, used[k], budget[k]))


def test_metrics_histograms_consistent():
    """Every histogram's buckets are cumulative (non-decreasing in le), its
    +Inf bucket equals its _count, its _sum is >= 0, and the request
    histograms counted the requests this test sent."""
    samples = metrics()
    series = {}
    for name, lab, v in samples:
        if name.endswith("_bucket"):
            key = (name[:-len("_bucket")], tuple(sorted((k, x) for k, x in lab.items() if k != "le")))
            series.setdefault(key, []).append((float(lab["le"]), v))
    check(series, "no histogram in /metrics")
    counts = {(n[:-len("_count")], tuple(sorted(l.items()))): v for n, l, v in samples if n.endswith("_count")}
    sums = {(n[:-len("_sum")], tuple(sorted(l.items()))): v for n, l, v in samples if n.endswith("_sum")}
    for key, b in series.items():
        b.sort()
        vals = [v for _, v in b]
        check(all(x <= y for x, y in zip(vals, vals[1:])), "%s: buckets not cumulative: %s" % (key, b))
        check(b[-1][0] == float("inf") and b[-1][1] == counts.get(key), "%s: +Inf %s, _count %s" %
              (key, b[-1], counts.get(key)))
        check(sums.get(key, -1) >= 0, "%s: _sum %s" % (key, sums.get(key)))
    n_ok = harness.metric_sum(samples, r"^shardswap_requests_total$", model="m1", outcome="ok")
    n_hist = harness.metric_sum(samples, r"^shardswap_request_duration_seconds_count$", model="m1")
    check(n_ok >= 10 and n_hist >= 10, "m1: %g ok requests, %g in the duration histogram" % (n_ok, n_hist))


def test_metrics_counters_move():
    before = metrics()
    n = 5
    for _ in range(n):
        client().completions.create(model="m1", prompt="count", max_tokens=2, temperature=0)
    after = metrics()
    d = harness.metric_sum(after, r"requests_total$") - harness.metric_sum(before, r"requests_total$")
    check(d >= n, "requests_total moved by %g after %d requests" % (d, n))
    d1 = harness.metric_sum(after, r"requests_total$", model="m1") - \
        harness.metric_sum(before, r"requests_total$", model="m1")
    check(d1 >= n or harness.metric_sum(after, r"requests_total$", model="m1") == 0,
          "requests_total{model=\"m1\"} moved by %g after %d requests" % (d1, n))
    # a 404 counts too (an error outcome or code), and nothing moves backwards
    srv().json("POST", "/v1/completions", {"model": "nope", "prompt": "x"})
    again = metrics()
    for name, lab, v in before:
        if name.endswith("_total"):
            v2 = [x for nm, lb, x in again if nm == name and lb == lab]
            check(not v2 or v2[0] >= v, "counter %s%s went back: %g -> %s" % (name, lab, v, v2))


def test_pinned_device_full_answers():
    """With room for one model and that one pinned, a request for another
    model is answered at once: 503 model_unavailable naming the pinned
    models (it used to sit in its queue unanswered until an unpin)."""
    code, j, body = curl("POST", "/admin/models/m1/load")
    wait_residency("m1", ("on_device",))
    code, j, body = curl("POST", "/admin/models/m1/pin")
    check(code == 200, "pin m1: %d %s" % (code, body))
    try:
        st, h, data = srv().request("POST", "/v1/completions", {"model": "m2", "prompt": "x", "max_tokens": 1},
                                    timeout=30)
    except OSError as e:
        st, data = None, str(e)
    finally:
        curl("POST", "/admin/models/m1/unpin")
    check(st is not None, "a request for m2 while pinned m1 fills the device: no answer in 30 s (%s)" % data)
    check(st == 503, "a request for m2 while pinned m1 fills the device: %s %s" % (st, data[:300]))
    err = json.loads(data)["error"]
    check(err["code"] == "model_unavailable" and "pinned" in err["message"], "error: %s" % err)
    # unpinned, the same request is served
    st, h, data = srv().request("POST", "/v1/completions", {"model": "m2", "prompt": "x", "max_tokens": 1},
                                timeout=60)
    check(st == 200, "m2 after the unpin: %s %s" % (st, data[:300]))


def test_request_timeout():
    """--request-timeout: a completion still running when it passes ends
    with 504 request_timeout (the engine drops it at its next step); one
    that finishes in time is a 200."""
    m = {"m1": S["models"]["m1"]}
    t = harness.Server(A.bin, m, A.work_dir, log_level="warn", extra=("--request-timeout", "1"))
    t.start()
    try:
        st, _, body = t.request("POST", "/v1/completions",
                                {"model": "m1", "prompt": "hi", "max_tokens": 1500, "temperature": 0},
                                timeout=120)
        check(st == 504, "a 1500-token completion under a 1 s timeout: %s %s" % (st, body[:300]))
        err = json.loads(body)["error"]
        check(err["code"] == "request_timeout" and "(1 s)" in err["message"], "error: %s" % err)
        # the dropped batch ends at its next step: wait for the model to be
        # idle, so the next request's second is its own (a loaded sanitizer
        # machine can take longer than that to finish the step)
        for _ in range(600):
            samples = harness.parse_metrics(t.metrics())
            if harness.metric_sum(samples, r"^shardswap_running$") == 0:
                break
            time.sleep(0.05)
        st, _, body = t.request("POST", "/v1/completions",
                                {"model": "m1", "prompt": "hi", "max_tokens": 1, "temperature": 0},
                                timeout=120)
        check(st == 200, "a one-token completion: %s %s" % (st, body[:300]))
    finally:
        t.stop()


def test_tight_memory_concurrent_requests():
    """With device room for the weights and 6 MiB (one 200-token sequence
    fits, two do not), 4 requests of 200 tokens 0.2 s apart: each alone
    fits, so each gets a 200 (they may wait their turn). The engine halves
    a batch that does not fit; a half of one request used to fail on the
    larger attempt's error (500) when nothing else ran."""
    import threading
    m = {"m1": S["models"]["m1"]}
    t = harness.Server(A.bin, m, A.work_dir, device_budget=harness.model_bytes(m["m1"]) + 6 * harness.MiB,
                       log_level="warn")
    t.start()
    res = []

    def go():
        st, _, body = t.request("POST", "/v1/completions", {"model": "m1", "prompt": "hi", "max_tokens": 200},
                                timeout=300)
        res.append((st, body[-300:]))

    try:
        ts = [threading.Thread(target=go) for _ in range(4)]
        for th in ts:
            th.start()
            time.sleep(0.2)
        for th in ts:
            th.join()
    finally:
        t.stop()
    bad = [r for r in res if r[0] != 200]
    check(not bad, "%d of 4 requests that each fit failed: %s" % (len(bad), bad[:1]))


def test_preempted_unload():
    """swapwise-preempt on one device with room for one model: a long
    answer of m1 is paused for m2's request at a step boundary, m1's weights
    leave (shardswap_unloads_total{model="m1",reason="preempted"} 1), m2 is
    answered while m1 waits, and m1 then resumes: both texts equal
    `shardswap generate`'s, which ran without a pause."""
    import threading
    m = {"m1": S["models"]["m1"], "m2": S["models"]["m2"]}
    t = harness.Server(A.bin, m, A.work_dir, device_budget=harness.room_for(m, 1),
                       policy="swapwise-preempt", log_level="warn")
    long_n, short_n = 600, 4
    want1 = generate_cli(m["m1"], "A long answer", long_n)
    want2 = generate_cli(m["m2"], "Short", short_n)
    t.start()
    res = {}

    def go(name, prompt, n):
        st, _, body = t.request("POST", "/v1/completions",
                                {"model": name, "prompt": prompt, "max_tokens": n,
                                 "temperature": 0}, timeout=300)
        res[name] = (st, body, time.time())

    try:
        th1 = threading.Thread(target=go, args=("m1", "A long answer", long_n))
        th1.start()
        # m1's batch is running before m2's request comes (its load included)
        for _ in range(600):
            if harness.metric_sum(harness.parse_metrics(t.metrics()), r"^shardswap_running$") > 0:
                break
            time.sleep(0.05)
        th2 = threading.Thread(target=go, args=("m2", "Short", short_n))
        th2.start()
        th1.join()
        th2.join()
        samples = harness.parse_metrics(t.metrics())
    finally:
        t.stop()
    for name, want in (("m1", want1), ("m2", want2)):
        st, body, _ = res[name]
        check(st == 200, "%s: %s %s" % (name, st, body[:300]))
        text = json.loads(body)["choices"][0]["text"]
        check(text == want, "%s: %d chars, differing from generate's %d at %d" %
              (name, len(text), len(want),
               next((i for i, (a, b) in enumerate(zip(text, want)) if a != b),
                    min(len(text), len(want)))))
    pre = harness.metric_sum(samples, r"^shardswap_unloads_total$", model="m1", reason="preempted")
    ev = harness.metric_sum(samples, r"^shardswap_unloads_total$", model="m1", reason="evicted")
    check(pre == 1 and ev == 0, "m1: %g preempted unloads, %g evictions (want 1 and 0)" % (pre, ev))
    check(res["m2"][2] < res["m1"][2], "m2's 4 tokens were answered after m1's 600")


def main():
    global A
    p = harness.common_args(__doc__)
    A = harness.resolve_args(p.parse_args())
    models = harness.tiny_models(A.bin, A.work_dir, 3)
    A.model_root = os.path.join(A.work_dir, "models")
    A.root_model = models.pop("m3")
    served = dict(models)
    for name in FIXTURE_NAMES:
        served["fx_" + name] = harness.fixture_with_id_tokenizer(A.work_dir, name)
    budget = harness.room_for(models, 1)
    # two devices: m1, m2 and the fixtures on the first (room for one of m1
    # and m2), tensor- and pipeline-parallel models across both
    s = harness.Server(A.bin, served, A.work_dir, device_budget=budget, model_root=A.model_root,
                       max_batch=4, devices=2)
    S.update(srv=s, models=served)
    t0 = time.time()
    s.start()
    print("server on port %d (device budget %d MiB), up in %.1f s" % (s.port, budget >> 20, time.time() - t0))
    S["client"] = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % s.port, api_key=s.api_key,
                                max_retries=0, timeout=300)
    tests = [test_health, test_models_list, test_completion_fields, test_greedy_equals_generate_cli,
             test_stream_equals_nonstream, test_stream_wire_format, test_fixtures_equal_transformers,
             test_fixtures_batched, test_context_boundary, test_stop_strings_random,
             test_alternating_models_swap, test_stop_strings, test_echo, test_seed_reproducible,
             test_admin_routes, test_admin_body_keys, test_aliases, test_tp_pp_models, test_keep_alive, test_removed_counters,
             test_metrics_promtool, test_metrics_residency_agrees, test_metrics_histograms_consistent,
             test_metrics_counters_move, test_pinned_device_full_answers,
             test_tight_memory_concurrent_requests, test_request_timeout,
             test_preempted_unload]
    return harness.run_and_stop(tests, S, A)


if __name__ == "__main__":
    sys.exit(main())
