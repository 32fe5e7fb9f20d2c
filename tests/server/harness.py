"""Starts and stops `shardswap serve` for the server tests (stdlib only).

    models = harness.tiny_models(binary, work_dir, 3)   # gen-model, cached
    srv = harness.Server(binary, models, device_budget=harness.room_for(models, 1))
    srv.start()                       # free port (--port 0 --port-file), /health 200
    status, headers, body = srv.request("POST", "/v1/completions", {...})
    srv.stop()                        # SIGTERM: exit code 0, no sanitizer report

The binary comes from the command line (--bin, what ctest passes: the Release
or the ASan+UBSan build's) or $SHARDSWAP_BINARY. Models are made once per
work directory with `shardswap gen-model` (opt-125m's shapes, 2 layers, the
committed OPT tokenizer) under a lock, so tests running in parallel share
them. Only 127.0.0.1 is ever contacted.
"""

import argparse
import fcntl
import glob
import http.client
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(SOURCE_DIR, "tests", "fixtures", "models")
MiB = 1 << 20

# What a sanitizer or a crash prints on stderr.
SANITIZER_PATTERNS = [
    r"ERROR: AddressSanitizer",
    r"ERROR: LeakSanitizer",
    r"runtime error:",  # UBSan
    r"WARNING: ThreadSanitizer",
    r"ERROR: UndefinedBehaviorSanitizer",
    r"AddressSanitizer:DEADLYSIGNAL",
    r"SUMMARY: (Address|UndefinedBehavior|Leak)Sanitizer",
]


class TestFailure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise TestFailure(msg)


def common_args(description):
    """The flags every server test takes; returns the parser."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--bin", default=os.environ.get("SHARDSWAP_BINARY"),
                   help="the shardswap binary (default $SHARDSWAP_BINARY)")
    p.add_argument("--work-dir", default=None,
                   help="where models are generated and cached (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the server's log")
    p.add_argument("--mpirun", default=None,
                   help="serve under this launcher (one string, e.g. 'mpirun -n 2'): the "
                        "server runs as a job across processes")
    p.add_argument("--devices", default=None,
                   help="the --devices of the server (default: the test's own count), e.g. "
                        "cpu:0,1/cpu:0 for a device on each of two processes")
    return p


def resolve_args(args):
    if not args.bin:
        sys.exit("FAIL: no server binary: pass --bin PATH or set SHARDSWAP_BINARY")
    args.bin = os.path.abspath(args.bin)
    # every Server of the run starts under the launcher, on these devices
    Server.launcher = shlex.split(args.mpirun) if args.mpirun else []
    Server.devices_override = args.devices
    if not os.access(args.bin, os.X_OK):
        sys.exit("FAIL: %s is not an executable" % args.bin)
    if args.work_dir is None:
        args.work_dir = tempfile.mkdtemp(prefix="shardswap-stest-")
        args._tmp_work = True
    else:
        os.makedirs(args.work_dir, exist_ok=True)
        args._tmp_work = False
    return args


def cleanup_args(args):
    if getattr(args, "_tmp_work", False):
        shutil.rmtree(args.work_dir, ignore_errors=True)


# ---------------------------------------------------------------- models


def _locked(work_dir):
    os.makedirs(work_dir, exist_ok=True)
    f = open(os.path.join(work_dir, ".lock"), "w")
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


def tiny_models(binary, work_dir, n):
    """n random-weight models (opt-125m shapes, 2 layers, seeds 1..n, the
    committed OPT tokenizer) under work_dir/models: {name: dir}, names m1..mn.
    Made once; later calls reuse them."""
    root = os.path.join(work_dir, "models")
    os.makedirs(root, exist_ok=True)
    out = {}
    lock = _locked(work_dir)
    try:
        for i in range(1, n + 1):
            d = os.path.join(root, "m%d" % i)
            if not os.path.exists(os.path.join(d, "config.json")):
                shutil.rmtree(d, ignore_errors=True)
                r = subprocess.run(
                    [binary, "gen-model", "--preset", "opt-125m", "--layers", "2", "--seed",
                     str(i), "--out", d, "--tokenizer-from",
                     os.path.join(SOURCE_DIR, "data", "tokenizer", "opt")],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
                check(r.returncode == 0, "gen-model failed: %s" % r.stdout.decode(errors="replace"))
            out["m%d" % i] = d
    finally:
        lock.close()
    return out


def model_bytes(d):
    """The weights' bytes of a checkpoint directory (its safetensors files)."""
    return sum(os.path.getsize(f) for f in glob.glob(os.path.join(d, "*.safetensors")))


# Device memory besides the weights a tiny model needs for small batches
# (KV cache and activations of a few short sequences, rounded up): enough
# for one resident model, far from enough for a second one (~104 MiB).
BATCH_ROOM = 24 * MiB


def room_for(models, k):
    """A device budget with room for k of the largest of models at once."""
    return k * max(model_bytes(d) for d in models.values()) + BATCH_ROOM


def import_openai():
    """The official `openai` client, or exit 1 saying how to install it."""
    try:
        import openai
    except ImportError:
        print("FAIL: the `openai` Python package is needed (tools/test.sh installs it into "
              ".venv: python3 -m venv .venv && .venv/bin/pip install 'openai>=1,<4'); running "
              "under %s" % sys.executable)
        sys.exit(1)
    return openai


def fixture_copy(name, dst):
    """The committed fixture model `name` (its config, generation config and
    weights, no tokenizer) copied afresh into dst."""
    src = os.path.join(FIXTURES, name)
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    for f in ("config.json", "generation_config.json", "model.safetensors"):
        if os.path.exists(os.path.join(src, f)):
            shutil.copy(os.path.join(src, f), dst)
    return dst


def fixture_with_id_tokenizer(work_dir, name):
    """A copy of the committed fixture model `name` (tests/fixtures/models)
    with a tokenizer that makes ids readable, so completions give the
    generated ids back and prompts of ids can be written as text:
    id 2 is "</s>" (OPT's BOS and EOS, as in the fixtures' configs), every
    other id i < vocab_size is the word " XY" (X = 'A' + i // 26,
    Y = 'A' + i % 26; see id_word), and beyond the model's vocabulary come
    the 256 byte symbols and " X" for each letter, with the merges
    "Ġ X" and then "ĠX Y" that build each word in one piece."""
    src = os.path.join(FIXTURES, name)
    dst = os.path.join(work_dir, "fixtures", name)
    lock = _locked(work_dir)
    try:
        if not os.path.exists(os.path.join(dst, "merges.txt")):
            fixture_copy(name, dst)
            with open(os.path.join(src, "config.json")) as f:
                vocab_size = json.load(f)["vocab_size"]
            G = "\u0120"  # the byte-level symbol of ' '
            vocab = {}
            merges = []
            for i in range(vocab_size):
                vocab["</s>" if i == 2 else G + id_word(i)[1:]] = i
            for sym in _byte_symbols():
                vocab[sym] = len(vocab)
            letters = sorted({id_word(i)[1] for i in range(vocab_size) if i != 2})
            for x in letters:
                vocab[G + x] = len(vocab)
                merges.append(G + " " + x)
            for i in range(vocab_size):
                if i != 2:
                    merges.append(G + id_word(i)[1] + " " + id_word(i)[2])
            with open(os.path.join(dst, "vocab.json"), "w", encoding="utf-8") as f:
                json.dump(vocab, f, ensure_ascii=False)
            with open(os.path.join(dst, "merges.txt"), "w", encoding="utf-8") as f:
                f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
    finally:
        lock.close()
    return dst


def id_word(i):
    """The text of id i (not 2) in a fixture_with_id_tokenizer model."""
    return " " + chr(ord("A") + i // 26) + chr(ord("A") + i % 26)


def ids_text(ids):
    """The text of ids (each not 2) in a fixture_with_id_tokenizer model."""
    return "".join(id_word(i) for i in ids)


def ids_of_text(text):
    """The ids a completion of a fixture_with_id_tokenizer model names."""
    check(re.fullmatch(r"( [A-Z]{2})*", text) is not None,
          "unexpected text in an id completion: %r" % text)
    return [(ord(w[0]) - 65) * 26 + ord(w[1]) - 65 for w in re.findall(r" ([A-Z]{2})", text)]


def fixture_expected(name, bf16=None):
    """transformers' greedy references of a fixture: [(prompt ids, output
    ids)], in the precision the server runs it in by default (bf16 for a
    bf16 checkpoint: transformers in bf16, each output cut before the first
    tie of its bf16 logits, as tests/test_opt.c compares it)."""
    if bf16 is None:
        with open(os.path.join(FIXTURES, name, "config.json")) as f:
            cfg = json.load(f)
        bf16 = (cfg.get("dtype") or cfg.get("torch_dtype")) == "bfloat16"
    with open(os.path.join(FIXTURES, name, "expected_bf16.json" if bf16 else "expected.json")) as f:
        j = json.load(f)
    if "same_as" in j:
        return fixture_expected(j["same_as"], bf16)
    out = []
    for g in j["greedy"]:
        margins = g.get("margins", [])
        n = next((i for i, m in enumerate(margins) if m < j.get("margin_min", 0)), len(g["output"]))
        if n > 0:
            out.append((g["prompt"], g["output"][:n]))
    return out


def _byte_symbols():
    """GPT-2's byte-level alphabet: byte b's symbol, for b = 0..255."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    sym = dict(zip(bs, cs))
    return [chr(sym[b]) for b in range(256)]


# ---------------------------------------------------------------- server


def parse_metrics(text):
    """Prometheus text -> list of (name, {label: value}, float value)."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\d+)?$', line)
        if not m:
            continue
        labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        try:
            v = float(m.group(4))
        except ValueError:
            continue
        out.append((m.group(1), labels, v))
    return out


def metric_sum(samples, name_re, **labels):
    """Sum of the samples whose name matches name_re (re.search) and whose
    labels include labels."""
    total = 0.0
    for name, lab, v in samples:
        if re.search(name_re, name) and all(lab.get(k) == val for k, val in labels.items()):
            total += v
    return total


def rank_pid(launcher_pid, rank):
    """The pid of process `rank` of the job a launcher (mpirun) started: a
    descendant of it whose environment says OMPI_COMM_WORLD_RANK=rank."""
    def parent(pid):
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    want = b"OMPI_COMM_WORLD_RANK=%d" % rank
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % d, "rb") as f:
                if want not in f.read().split(b"\0"):
                    continue
            p = parent(int(d))
            while p > 1 and p != launcher_pid:  # the launcher's, not another job's
                p = parent(p)
        except OSError:
            continue
        if p == launcher_pid:
            return int(d)
    raise TestFailure("no process of rank %d under pid %d" % (rank, launcher_pid))


class Server:
    """One `shardswap serve` process on 127.0.0.1 and a free port (under
    --mpirun: the launcher running the job, whose process 0 serves)."""

    launcher = []
    devices_override = None

    def __init__(self, binary, models, work_dir, device_budget=None, host_budget=None,
                 devices=1, api_key="sk-test", admin_key="sk-admin", model_root=None,
                 max_batch=4, queue_cap=None, policy=None, timeout=None,
                 max_connections=None, max_body=None, grace=10, log_level="info",
                 extra=(), env=None):
        self.binary = binary
        self.models = dict(models)
        self.work_dir = work_dir
        self.api_key = api_key
        self.admin_key = admin_key
        self.grace = grace
        self.proc = None
        self.port = None
        os.makedirs(work_dir, exist_ok=True)
        fd, self.log_path = tempfile.mkstemp(prefix="serve-", suffix=".log", dir=work_dir)
        os.close(fd)
        self.port_file = self.log_path[:-4] + ".port"
        a = list(self.launcher) + [binary, "serve"]
        if self.devices_override:
            devices = self.devices_override
        for name, d in self.models.items():
            a += ["--model", "%s=%s" % (name, d)]
        a += ["--devices", str(devices), "--port", "0", "--port-file", self.port_file,
              "--max-batch", str(max_batch), "--log-level", log_level, "--grace", str(grace)]
        if device_budget is not None:
            a += ["--device-budget", str(device_budget)]
        if host_budget is not None:
            a += ["--host-budget", str(host_budget)]
        if api_key:
            a += ["--api-key", api_key]
        if admin_key:
            a += ["--admin-key", admin_key]
        if model_root:
            a += ["--model-root", model_root]
        if queue_cap is not None:
            a += ["--queue-cap", str(queue_cap)]
        if policy:
            a += ["--policy", policy]
        if timeout is not None:
            a += ["--timeout", str(timeout)]
        if max_connections is not None:
            a += ["--max-connections", str(max_connections)]
        if max_body is not None:
            a += ["--max-body", str(max_body)]
        a += list(extra)
        self.argv = a
        self.env = dict(os.environ)
        # What tools/test.sh sets for the sanitizer build; harmless otherwise.
        self.env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1")
        self.env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
        if env:
            self.env.update(env)

    # -- lifecycle

    def start(self, timeout=120):
        if os.path.exists(self.port_file):
            os.unlink(self.port_file)
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, env=self.env)
        deadline = time.time() + timeout
        while time.time() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                raise TestFailure("server exited with %d while starting:\n%s\ncommand: %s" %
                                  (rc, self.log_text()[-4000:], " ".join(self.argv)))
            if self.port is None:
                try:
                    with open(self.port_file) as f:
                        txt = f.read().strip()
                    if txt:
                        self.port = int(txt)
                except (OSError, ValueError):
                    pass
            if self.port is not None:
                try:
                    st, _, _ = self.request("GET", "/health", timeout=5)
                    if st == 200:
                        return self
                except OSError:
                    pass
            time.sleep(0.1)
        self.kill()
        raise TestFailure("server not healthy within %d s:\n%s" % (timeout, self.log_text()[-4000:]))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def sanitizer_report(self):
        """The first sanitizer line on the server's stderr, or None."""
        for line in self.log_text().splitlines():
            for p in SANITIZER_PATTERNS:
                if re.search(p, line):
                    return line
        return None

    def stop(self, sig=signal.SIGTERM, send=True):
        """Sends sig (unless send is false: it was sent) and waits; returns
        (exit code, the log). Fails the test when the exit code is not 0 or
        stderr holds a sanitizer report."""
        check(self.proc is not None, "server never started")
        if send and self.proc.poll() is None:
            # under a launcher the signal goes to process 0, which stops
            # the job; mpirun passes a signal of its own on, but then
            # exits 1 however the job ended
            if self.launcher:
                os.kill(rank_pid(self.proc.pid, 0), sig)
            else:
                self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=self.grace + 60)
        except subprocess.TimeoutExpired:
            self.kill()
            raise TestFailure("server did not exit within %g s of %s:\n%s" %
                              (self.grace + 60, signal.Signals(sig).name, self.log_text()[-4000:]))
        self.log.close()
        log = self.log_text()
        rep = self.sanitizer_report()
        check(rep is None, "sanitizer report on the server's stderr: %s\n%s" % (rep, log[-8000:]))
        check(rc == 0, "server exited with %d after %s (want 0):\n%s" %
              (rc, signal.Signals(sig).name, log[-4000:]))
        return rc, log

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    # -- HTTP

    def conn(self, timeout=120):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, key="api", timeout=120):
        """One request on a new connection: (status, headers dict with
        lower-case names, body bytes). body: dict/list (sent as JSON), str or
        bytes. key: "api", "admin", None or an explicit bearer key."""
        h = {}
        k = {"api": self.api_key, "admin": self.admin_key}.get(key, key)
        if k:
            h["Authorization"] = "Bearer " + k
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            h["Content-Type"] = "application/json"
        if isinstance(body, str):
            body = body.encode()
        if headers:
            h.update(headers)
        c = self.conn(timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            c.close()

    def json(self, method, path, body=None, key="api", timeout=120):
        st, h, data = self.request(method, path, body, key=key, timeout=timeout)
        try:
            return st, json.loads(data) if data else None
        except ValueError:
            raise TestFailure("%s %s: %d with a body that is not JSON: %r" %
                              (method, path, st, data[:300]))

    def complete(self, model, prompt, **kw):
        """POST /v1/completions; returns the parsed 200 response."""
        body = {"model": model, "prompt": prompt}
        body.update(kw)
        st, j = self.json("POST", "/v1/completions", body)
        check(st == 200, "completion of %r on %s: %d %s" % (prompt, model, st, j))
        return j

    def metrics(self):
        st, _, data = self.request("GET", "/metrics")
        check(st == 200, "/metrics: %d" % st)
        return data.decode()

    def rss_bytes(self):
        """The server's resident set (VmRSS of /proc/PID/status)."""
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0


def run_tests(tests, server_box):
    """Runs each test function in order; a failure is printed and the rest
    still run. Returns the number of failures."""
    failures = 0
    for t in tests:
        t0 = time.time()
        try:
            t()
            print("ok    %-40s %.1f s" % (t.__name__, time.time() - t0), flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported
            failures += 1
            print("FAIL  %-40s %s: %s" % (t.__name__, type(e).__name__, e), flush=True)
            srv = server_box.get("srv")
            if srv is not None and not srv.alive() and not server_box.get("stopped"):
                print("      the server died:\n%s" % srv.log_text()[-4000:], flush=True)
                break
    return failures


def run_and_stop(tests, server_box, args):
    """The end of a server test's main: run_tests, then the server stopped
    with SIGINT (it must exit 0 without a sanitizer report), the log's path
    when asked or on a failure, the work directory cleaned when all passed.
    Returns the exit status."""
    srv = server_box["srv"]
    failures = run_tests(tests, server_box)
    try:
        srv.stop(signal.SIGINT)
        print("ok    server exits 0 on SIGINT, no sanitizer report")
    except TestFailure as e:
        failures += 1
        print("FAIL  shutdown: %s" % e)
    if args.keep or failures:
        print("server log: %s" % srv.log_path)
    if not failures:
        cleanup_args(args)
    print("%d of %d failed" % (failures, len(tests) + 1) if failures else "all passed")
    return 1 if failures else 0


def main():
    """By hand: start a server on two tiny models, print where it is, stop
    it on Enter (or at once with --smoke) and check its exit."""
    p = common_args("Start shardswap serve on tiny models (a smoke test of the harness).")
    p.add_argument("--smoke", action="store_true", help="stop at once")
    a = resolve_args(p.parse_args())
    models = tiny_models(a.bin, a.work_dir, 2)
    s = Server(a.bin, models, a.work_dir, device_budget=room_for(models, 1))
    s.start()
    print("serving %s on http://127.0.0.1:%d (API key %s, admin key %s); log %s" %
          (", ".join(models), s.port, s.api_key, s.admin_key, s.log_path), flush=True)
    if not a.smoke:
        input("Enter stops it: ")
    s.stop()
    print("exited 0, no sanitizer report")
    cleanup_args(a)


if __name__ == "__main__":
    main()
