#!/usr/bin/env python3
"""Files and memory under a running `shardswap serve` (ctest: server_files;
the sanitizer build's suite runs it against the ASan+UBSan binary).

- a checkpoint truncated while served: that model's requests get an error,
  every other model keeps answering, the process lives on;

    test_files.py --bin build/shardswap [--work-dir DIR] [--keep]
"""

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

A = None
S = {}


def srv():
    return S["srv"]


def copy_model(src, name):
    """A private copy of model directory src under the work dir: the weights
    copied (a test may truncate them), every other file hard-linked."""
    d = os.path.join(A.work_dir, "files", name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for f in os.listdir(src):
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


def main():
    global A
    p = harness.common_args(__doc__)
    A = harness.resolve_args(p.parse_args())
    models = harness.tiny_models(A.bin, A.work_dir, 1)
    S["victim"] = copy_model(models["m1"], "victim")
    served = {"m1": models["m1"], "victim": S["victim"]}
    # a host budget (no prefetch at start: the victim stays on disk until
    # its first request) with room for one model's host copy
    s = harness.Server(A.bin, served, A.work_dir, device_budget=harness.room_for(models, 1),
                       host_budget=harness.model_bytes(models["m1"]) + harness.MiB,
                       model_root=os.path.join(A.work_dir, "files"))
    S["srv"] = s
    s.start()
    print("server on port %d" % s.port)
    tests = [test_truncated_checkpoint]
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
