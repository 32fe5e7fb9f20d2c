#!/usr/bin/env python3
"""Files and memory under a running `shardswap serve` (ctest: server_files;
the sanitizer build's suite runs it against the ASan+UBSan binary).

- a checkpoint truncated while served: that model's requests get an error,
  every other model keeps answering, the process lives on (seen by the
  size check before a load, or, truncated behind it, by the loader's SIGBUS
  guard);
- files of an added model that resolve outside --model-root (links), FIFOs,
  devices and oversized files as tokenizer files, malformed files whose
  bytes must not be quoted: each a 400 naming the file and its param, no
  hang, nothing of the file in the answer or the log;
- registration bounded by memory: adds past the host budget's room for the
  served models' tokenizers and tables are refused, deletes give it back;
- add/delete churn: hundreds of admin adds and deletes (some with a
  request in between, some refused) leave RSS and the mappings of the
  checkpoint flat, and nothing of a refused add behind;

    test_files.py --bin build/shardswap [--work-dir DIR] [--keep]
"""

import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

A = None
S = {}


def srv():
    return S["srv"]


TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json")


def copy_model(src, name, tokenizer=True):
    """A private copy of model directory src under the work dir: the weights
    copied (a test may truncate them), every other file hard-linked (the
    tokenizer's only when tokenizer)."""
    d = os.path.join(A.work_dir, "files", name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for f in os.listdir(src):
        if not tokenizer and f in TOKENIZER_FILES:
            continue
        if f.endswith(".safetensors"):
            shutil.copy(os.path.join(src, f), d)
        else:
            os.link(os.path.join(src, f), os.path.join(d, f))
    return d


def test_truncated_checkpoint():
    """Truncate a served model's weights before its first load: its
    completion is an error naming the model, the other model answers 200
    before and after, the server stays up (before: SIGBUS, exit 135)."""
    s = srv()
    s.complete("m1", "Hello", max_tokens=2)
    path = os.path.join(S["victim"], "model.safetensors")
    size = os.path.getsize(path)
    os.truncate(path, size // 2)
    st, j = s.json("POST", "/v1/completions", {"model": "victim", "prompt": "Hello",
                                               "max_tokens": 2})
    check(s.alive(), "the server died on a truncated checkpoint:\n%s" % s.log_text()[-2000:])
    check(st >= 400, "a completion on the truncated checkpoint: %d %s" % (st, j))
    msg = (j or {}).get("error", {}).get("message", "")
    check("victim" in msg and "truncated" in msg, "the error does not say the model's "
          "checkpoint was truncated: %d %r" % (st, msg))
    s.complete("m1", "Hello", max_tokens=2)
    # again: the load fails again, the same way
    st2, _ = s.json("POST", "/v1/completions", {"model": "victim", "prompt": "Hi", "max_tokens": 1})
    check(st2 == st and s.alive(), "a second completion on the truncated checkpoint: %d" % st2)
    s.complete("m1", "Hello", max_tokens=2)
    print("      truncated to %d of %d bytes: %d %r; m1 still 200" % (size // 2, size, st, msg[:160]))


SECRET = "root:SECRET-7f3a9:19000:0:99999:7:::"


def model_dir(name, files):
    """A model directory under the root: files maps a name to ("link",
    target), ("fifo",), ("sparse", size), ("bytes", b) or ("text", content); config.json
    and model.safetensors, when not given, link to m1's (inside the root)."""
    d = os.path.join(A.work_dir, "files", name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    base = S["churn"]
    for f in ("config.json", "model.safetensors"):
        if f not in files:
            os.symlink(os.path.join(base, f), os.path.join(d, f))
    for f, spec in files.items():
        p = os.path.join(d, f)
        if spec[0] == "link":
            os.symlink(spec[1], p)
        elif spec[0] == "fifo":
            os.mkfifo(p)
        elif spec[0] == "bytes":
            with open(p, "wb") as fh:
                fh.write(spec[1])
        elif spec[0] == "sparse":
            with open(p, "wb") as fh:
                fh.truncate(spec[1])
        else:
            with open(p, "w") as fh:
                fh.write(spec[1])
    return d


def add_refused(name, d, status, param, needles, extra=None):
    s = srv()
    body = {"name": name, "path": d}
    body.update(extra or {})
    st, j = s.json("POST", "/admin/models", body, key="admin", timeout=30)
    err = (j or {}).get("error", {})
    msg = err.get("message", "")
    check(st == status, "add %s: %d %s (want %d)" % (name, st, j, status))
    check(err.get("param") == param, "add %s: param %r (want %r): %s" %
          (name, err.get("param"), param, msg))
    for n in needles:
        check(n in msg, "add %s: %r lacks %r" % (name, msg, n))
    check("SECRET" not in msg, "add %s quotes the file: %r" % (name, msg))
    st, _ = s.json("GET", "/v1/models/" + name)
    check(st == 404, "a refused add left %s served: %d" % (name, st))
    return msg


def test_truncated_under_the_check():
    """The same with a truncation st_check cannot see: the served file is
    renamed over (its path now names a new, complete file) and the old one,
    still mapped, is truncated through another link. The loader's copy
    faults, its SIGBUS guard fails that load alone (before: exit 135)."""
    s = srv()
    path = os.path.join(S["victim2"], "model.safetensors")
    held = os.path.join(A.work_dir, "files", "victim2-held")
    if os.path.exists(held):
        os.unlink(held)
    os.link(path, held)
    shutil.copy(path, path + ".new")
    os.rename(path + ".new", path)
    os.truncate(held, os.path.getsize(held) // 2)
    st, j = s.json("POST", "/v1/completions", {"model": "victim2", "prompt": "Hello",
                                               "max_tokens": 2})
    check(s.alive(), "the server died on a truncated mapping:\n%s" % s.log_text()[-2000:])
    msg = (j or {}).get("error", {}).get("message", "")
    check(st >= 400 and "victim2" in msg and "SIGBUS" in msg,
          "a completion on the truncated mapping: %d %r" % (st, msg))
    s.complete("m1", "Hello", max_tokens=2)
    os.unlink(held)
    print("      %d %r; m1 still 200" % (st, msg[:160]))


def test_hostile_model_files():
    """Links out of the root, FIFOs, devices, oversized and malformed
    tokenizer and config files: 400s naming the file and the param, at once
    (before: accepted, or a hang on the FIFO holding the admin lock, or the
    file's first bytes in the answer or the log)."""
    outside = os.path.join(A.work_dir, "outside")
    os.makedirs(outside, exist_ok=True)
    secret = os.path.join(outside, "shadow")
    with open(secret, "w") as f:
        f.write(SECRET + "\n")
    m1 = S["churn"]
    # every file a link to a model outside the root
    out_model = os.path.join(outside, "m1")
    if not os.path.exists(out_model):
        shutil.copytree(m1, out_model, copy_function=os.link)
    d = model_dir("h-all-links", {f: ("link", os.path.join(out_model, f))
                                  for f in os.listdir(out_model)})
    add_refused("h-all-links", d, 400, "path", ["outside every model root"])
    tok = {"vocab.json": ("link", os.path.join(m1, "vocab.json")),
           "merges.txt": ("link", os.path.join(m1, "merges.txt"))}
    cases = [
        ("h-config-shadow", {"config.json": ("link", secret)}, ["config.json", "outside"]),
        ("h-merges-shadow", {"vocab.json": ("link", os.path.join(m1, "vocab.json")),
                             "merges.txt": ("link", secret)}, ["merges.txt", "outside"]),
        ("h-config-bad", {"config.json": ("text", SECRET)}, ["config.json", "invalid JSON"]),
        ("h-merges-bad", {"vocab.json": ("link", os.path.join(m1, "vocab.json")),
                          "merges.txt": ("text", SECRET + "\n")}, ["merges.txt:1: expected two symbols"]),
        ("h-vocab-bad", {"vocab.json": ("text", SECRET), "merges.txt": ("text", "")},
         ["vocab.json", "malformed JSON"]),
        ("h-vocab-fifo", {"vocab.json": ("fifo",), "merges.txt": ("link", os.path.join(m1, "merges.txt"))},
         ["vocab.json: is a FIFO"]),
        ("h-merges-fifo", {"vocab.json": ("link", os.path.join(m1, "vocab.json")),
                           "merges.txt": ("fifo",)}, ["merges.txt: is a FIFO"]),
        ("h-tokjson-fifo", {"tokenizer.json": ("fifo",)}, ["tokenizer.json: is a FIFO"]),
        ("h-tokcfg-fifo", {"vocab.json": ("link", os.path.join(m1, "vocab.json")),
                           "merges.txt": ("link", os.path.join(m1, "merges.txt")),
                           "tokenizer_config.json": ("fifo",)}, ["tokenizer_config.json: is a FIFO"]),
        ("h-vocab-zero", {"vocab.json": ("link", "/dev/zero")}, ["vocab.json"]),
        ("h-vocab-huge", {"vocab.json": ("sparse", 300 << 20)}, ["vocab.json", "more than"]),
        ("h-merges-missing", {"vocab.json": ("link", os.path.join(m1, "vocab.json"))},
         ["merges.txt"]),
        # a chat template is refused as the tokenizer files are (before: a
        # warning, and the add succeeded without chat)
        ("h-tmpl-fifo", dict(tok, **{"chat_template.jinja": ("fifo",)}), ["chat_template.jinja: is a FIFO"]),
        ("h-tmpl-zero", dict(tok, **{"chat_template.jinja": ("link", "/dev/zero")}), ["chat_template.jinja"]),
        ("h-tmpl-shadow", dict(tok, **{"chat_template.jinja": ("link", secret)}),
         ["chat_template.jinja", "outside"]),
        ("h-tmpl-dangling", dict(tok, **{"chat_template.jinja": ("link", os.path.join(outside, "none"))}),
         ["chat_template.jinja"]),
        ("h-tmpl-utf8", dict(tok, **{"chat_template.jinja": ("bytes", b"{{ messages }}\xc3(" + SECRET.encode())}),
         ["chat_template.jinja: invalid UTF-8 at byte 14"]),
    ]
    for name, files, needles in cases:
        add_refused(name, model_dir(name, files), 400, "path", needles)
    # links that stay inside the root are fine; no tokenizer files at all: token ids only
    for name, files in (("h-inside-links", {f: ("link", os.path.join(m1, f))
                                            for f in os.listdir(m1)}),
                        ("h-no-tokenizer", {})):
        st, j = srv().json("POST", "/admin/models", {"name": name, "path": model_dir(name, files)},
                           key="admin")
        check(st == 200, "add %s: %d %s" % (name, st, j))
        check(j["tokenizer"] == (name == "h-inside-links"), "%s: tokenizer %s" % (name, j["tokenizer"]))
        st, _ = srv().json("DELETE", "/admin/models/" + name, key="admin")
        check(st == 200, "delete %s: %d" % (name, st))
    # the params of other refusals
    add_refused("h-batch", m1, 400, "max_batch", ["max batch 4096", "could not be added"],
                {"max_batch": 4096})
    check("SECRET" not in srv().log_text(), "the server's log quotes a file's contents")


def test_registration_bound():
    """Registration is bounded by memory: each served model is charged its
    tables and tokenizer (1 MiB + 4x its tokenizer files) against the host
    budget (here ~105 MiB: about 16 OPT tokenizers), so adds are refused
    with a 400 naming the budget long before the count limit (before: all
    30 accepted); removing models gives the room back."""
    s = srv()
    added = []
    refusal = None
    m0 = harness.parse_metrics(s.metrics())
    for i in range(30):
        st, j = s.json("POST", "/admin/models", {"name": "r%d" % i, "path": S["churn"]},
                       key="admin")
        if st != 200:
            refusal = (st, j)
            break
        added.append("r%d" % i)
    check(refusal is not None, "30 adds of a model with a tokenizer were all accepted")
    st, j = refusal
    err = (j or {}).get("error", {})
    check(st == 400 and err.get("param") == "path" and "host budget" in err.get("message", ""),
          "the refusal: %d %s" % (st, j))
    check(len(added) >= 5, "only %d adds fit" % len(added))
    print("      %d adds accepted, then %d: %s" % (len(added), st, err.get("message", "")[:200]))
    # /metrics' host memory in use counts what the registrations are charged
    # (nothing was loaded: the host tier's part did not move) (before: only the tier's)
    m = harness.parse_metrics(s.metrics())
    used = [harness.metric_sum(x, "^shardswap_host_bytes_used$") for x in (m0, m)]
    reg = [harness.metric_sum(x, "^shardswap_host_bytes_registered$") for x in (m0, m)]
    check(reg[1] - reg[0] >= len(added) * harness.MiB and used[1] >= reg[1] and
          used[1] - used[0] >= len(added) * harness.MiB,
          "after %d adds: host bytes used %d -> %d, registered %d -> %d" %
          (len(added), used[0], used[1], reg[0], reg[1]))
    for n in added:
        st, _ = s.json("DELETE", "/admin/models/" + n, key="admin")
        check(st == 200, "delete %s: %d" % (n, st))
    add_delete(s, "r-again", S["churn"])


def maps_of(pid, path):
    """How many mappings of path the process has (/proc/PID/maps)."""
    real = os.path.realpath(path)
    with open("/proc/%d/maps" % pid) as f:
        return sum(1 for line in f if line.rstrip("\n").endswith(real) or
                   line.rstrip("\n").endswith(real + " (deleted)"))


def add_delete(s, name, path, request=False):
    st, j = s.json("POST", "/admin/models", {"name": name, "path": path}, key="admin")
    check(st == 200, "add %s: %d %s" % (name, st, j))
    if request:
        s.complete(name, "Hello", max_tokens=1)
    st, j = s.json("DELETE", "/admin/models/" + name, key="admin")
    check(st == 200, "delete %s: %d %s" % (name, st, j))


def test_churn():
    """Add + DELETE cycles: of a model without a tokenizer (cheap to add:
    A.churn of them) and of one with the OPT tokenizer (A.churn // 8, every
    4th with a completion between), and adds refused after registration:
    RSS and the mappings of the safetensors files stay flat (before: ~5.7 MB
    a cycle with the tokenizer: the removed entries were never freed), a
    refused add leaves no model behind."""
    s = srv()
    ids_only, full = S["churn_ids"], S["churn"]
    weights = [os.path.join(d, "model.safetensors") for d in (ids_only, full)]
    for i in range(10):  # warm: allocator pools, first loads
        add_delete(s, "c", full, request=i % 4 == 0)
        add_delete(s, "c", ids_only)
    rss0, maps0 = s.rss_bytes(), sum(maps_of(s.proc.pid, w) for w in weights)
    refused = 0
    for i in range(A.churn):
        add_delete(s, "c", ids_only)
        if i % 8 == 0:
            add_delete(s, "c", full, request=i % 32 == 0)
        if i % 50 == 0:  # refused after registration: max_batch beyond any batch that fits
            st, j = s.json("POST", "/admin/models", {"name": "bad", "path": full,
                                                     "max_batch": 4096}, key="admin")
            if st == 200:
                s.json("DELETE", "/admin/models/bad", key="admin")
            refused += st == 400
            st, _ = s.json("GET", "/v1/models/bad")
            check(st == 404, "a refused add left model 'bad' served: %d" % st)
    rss1, maps1 = s.rss_bytes(), sum(maps_of(s.proc.pid, w) for w in weights)
    st, j = s.json("GET", "/v1/models")
    names = [m["id"] for m in j["data"]]
    print("      %d + %d cycles, %d refused adds: RSS %.1f -> %.1f MiB, mappings of the "
          "checkpoints %d -> %d; served %s" % (A.churn, (A.churn + 7) // 8, refused,
                                                rss0 / harness.MiB, rss1 / harness.MiB, maps0,
                                                maps1, names))
    check(maps1 <= maps0, "mappings of the checkpoints grew from %d to %d" % (maps0, maps1))
    # ~5.7 MB a tokenizer cycle before; allow allocator noise
    check(rss1 - rss0 < 48 * harness.MiB, "RSS grew by %.1f MiB" % ((rss1 - rss0) / harness.MiB))
    check("c" not in names and "bad" not in names, "removed models still listed: %s" % names)


def test_pinned_at_start():
    """pinned: true loads the model as the server starts, through the
    engine's admin load (before: on its first request); a pinned model that
    leaves another no room for its weights and a batch of one is refused at
    start, naming both."""
    m1 = S["models"]["m1"]
    cfg = os.path.join(A.work_dir, "pinned.yaml")
    with open(cfg, "w") as f:
        f.write("models:\n  - {name: a, path: %s, pinned: true}\n  - {name: b, path: %s}\n" %
                (m1, m1))
    s = harness.Server(A.bin, {}, A.work_dir, device_budget=harness.room_for(S["models"], 2),
                       extra=["--config", cfg])
    s.start()
    try:
        st, a = s.json("GET", "/v1/models/a")
        st2, b = s.json("GET", "/v1/models/b")
        check(st == 200 and a["residency"] == "on_device" and a["pinned"] is True,
              "pinned a after the start: %d %s" % (st, a))
        check(st2 == 200 and b["residency"] != "on_device", "b after the start: %d %s" % (st2, b))
    finally:
        s.stop()
    tight = harness.Server(A.bin, {}, A.work_dir, device_budget=harness.room_for(S["models"], 1),
                           extra=["--config", cfg])
    r = subprocess.run(tight.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       env=tight.env, timeout=120)
    out = r.stdout.decode(errors="replace")
    check(r.returncode != 0 and "pinned model a leaves no room for model b" in out,
          "a pinned set with no room for b: exit %d\n%s" % (r.returncode, out[-2000:]))
    print("      refused: %s" % out.strip().splitlines()[-1][:200])


def main():
    global A
    p = harness.common_args(__doc__)
    p.add_argument("--churn", type=int, default=300, help="add/delete cycles (default 300)")
    p.add_argument("--only", default=None, help="run only the tests whose names contain this")
    A = harness.resolve_args(p.parse_args())
    models = harness.tiny_models(A.bin, A.work_dir, 1)
    S["victim"] = copy_model(models["m1"], "victim")
    S["victim2"] = copy_model(models["m1"], "victim2")
    S["churn"] = copy_model(models["m1"], "churn")
    S["churn_ids"] = copy_model(models["m1"], "churn-ids", tokenizer=False)
    S["models"] = models
    served = {"m1": models["m1"], "victim": S["victim"], "victim2": S["victim2"]}
    # a host budget (no prefetch at start: the victim stays on disk until
    # its first request) with room for one model's host copy
    s = harness.Server(A.bin, served, A.work_dir, device_budget=harness.room_for(models, 1),
                       host_budget=harness.model_bytes(models["m1"]) + harness.MiB,
                       model_root=os.path.join(A.work_dir, "files"),
                       # a sanitizer build's quarantine of freed memory would
                       # read as growth in test_churn: keep it small
                       env={"ASAN_OPTIONS": os.environ.get(
                           "ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1") +
                           ":quarantine_size_mb=16"})
    S["srv"] = s
    s.start()
    print("server on port %d" % s.port)
    tests = [test_truncated_checkpoint, test_truncated_under_the_check, test_hostile_model_files, test_registration_bound,
             test_pinned_at_start, test_churn]
    tests = [t for t in tests if not A.only or A.only in t.__name__]
    failures = harness.run_tests(tests, S)
    try:
        if s.alive() or not failures:
            s.stop()
    except harness.TestFailure as e:
        failures += 1
        print("FAIL  shutdown: %s" % e)
    if A.keep or failures:
        print("server log: %s" % s.log_path)
    if not failures:
        harness.cleanup_args(A)
    print("%d of %d failed" % (failures, len(tests)) if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
