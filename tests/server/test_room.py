#!/usr/bin/env python3
"""A batch's working memory (its KV cache and activations) and the HTTP
statuses it gives (ctest: server_room).

On two tiny models (harness.tiny_models: opt-125m's shapes, 2 layers, 2,048
positions), a 1,000-token prompt of token ids, 4 tokens, greedy:
- room for both models' weights and short batches: with both resident, the
  long prompt to m1 answers 200 (m2, idle, is evicted to make its batch's
  room, as for a load) with the ids the same request gets on a server of m1
  alone; never a 500 for lack of room.
- m2 pinned, room beside it for m1's weights and a short batch but not the
  long one: the long request answers 503 model_unavailable at once, naming
  the pin (never a wait until an unpin); a short one to m1 answers 200.
- room for one model's weights and a short batch: the long request can
  never fit and is refused at submission, 400 naming the bytes.
- the same room with m2 pinned: adding m1 at run time (POST /admin/models)
  is refused at once, 409 no_room_beside_pinned naming both models (as the
  config check at start refuses such a set); m1 is not served, m2 serves.

    test_room.py --bin build/shardswap [--work-dir DIR] [--keep]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

MiB = 1 << 20
LONG = [3 + (i * 7919) % 50000 for i in range(1000)]
SHORT = [3, 14, 25, 36, 47, 58, 69, 80]
SMALL_ROOM = 8 * MiB  # beside the weights: a short batch fits, the long one does not

A = None
MODELS = {}


def body(model, prompt):
    return {"model": model, "prompt": prompt, "max_tokens": 4, "temperature": 0}


def ask(s, model, prompt, timeout=120):
    """POST /v1/completions: (status, parsed body); a request that gets no
    answer within timeout fails the test (it waits for room nothing makes)."""
    try:
        return s.json("POST", "/v1/completions", body(model, prompt), timeout=timeout)
    except OSError as e:
        raise harness.TestFailure("no answer within %d s (%s): the request waits" % (timeout, e))


def residency(s, model):
    st, j = s.json("GET", "/v1/models/" + model)
    check(st == 200, "GET /v1/models/%s: %d %s" % (model, st, j))
    return j["residency"]


def test_long_prompt_evicts():
    ref_srv = harness.Server(A.bin, {"m1": MODELS["m1"]}, A.work_dir,
                             device_budget=harness.room_for(MODELS, 1) + 256 * MiB)
    ref_srv.start()
    try:
        st, ref = ask(ref_srv, "m1", LONG)
        check(st == 200, "the long prompt alone: %d %s" % (st, ref))
    finally:
        ref_srv.stop()
    s = harness.Server(A.bin, MODELS, A.work_dir, device_budget=harness.room_for(MODELS, 2))
    s.start()
    try:
        for m in ("m1", "m2"):
            st, j = ask(s, m, SHORT)
            check(st == 200, "a short prompt to %s: %d %s" % (m, st, j))
        check(residency(s, "m1") == "on_device" and residency(s, "m2") == "on_device",
              "both models resident before the long prompt")
        st, j = ask(s, "m1", LONG)
        check(st == 200, "the long prompt beside an idle model: %d %s" % (st, j))
        check(j["choices"][0]["text"] == ref["choices"][0]["text"] and
              j["usage"] == ref["usage"],
              "the long prompt's answer %r, alone %r" % (j["choices"][0], ref["choices"][0]))
        check(residency(s, "m2") != "on_device", "m2 stayed whole on the device")
        st, j = ask(s, "m2", SHORT)
        check(st == 200, "m2 again: %d %s" % (st, j))
    finally:
        s.stop()


def test_pinned_starves_batch():
    cfg = os.path.join(A.work_dir, "room-pinned.yaml")
    with open(cfg, "w") as f:
        f.write("models:\n  - {name: m1, path: %s}\n  - {name: m2, path: %s, pinned: true}\n" %
                (MODELS["m1"], MODELS["m2"]))
    budget = 2 * max(harness.model_bytes(d) for d in MODELS.values()) + SMALL_ROOM
    s = harness.Server(A.bin, {}, A.work_dir, device_budget=budget, extra=["--config", cfg])
    s.start()
    try:
        st, j = ask(s, "m1", LONG, timeout=60)
        err = (j or {}).get("error", {})
        check(st == 503 and err.get("code") == "model_unavailable" and
              "pinned" in err.get("message", "") and "m1" in err.get("message", ""),
              "a long prompt beside a pinned model: %d %s" % (st, j))
        print("      503: %s" % err.get("message", "")[:200])
        st, j = ask(s, "m1", SHORT, timeout=60)
        check(st == 200, "a short prompt beside a pinned model: %d %s" % (st, j))
    finally:
        s.stop()


def test_never_fits():
    budget = max(harness.model_bytes(d) for d in MODELS.values()) + SMALL_ROOM
    s = harness.Server(A.bin, {"m1": MODELS["m1"]}, A.work_dir, device_budget=budget)
    s.start()
    try:
        st, j = ask(s, "m1", LONG, timeout=60)
        msg = (j or {}).get("error", {}).get("message", "")
        check(st == 400 and "cannot run a request of 1000 + 4 tokens" in msg and "budget" in msg,
              "a long prompt that never fits: %d %s" % (st, j))
        print("      400: %s" % msg[:200])
        st, j = ask(s, "m1", SHORT)
        check(st == 200, "a short prompt: %d %s" % (st, j))
    finally:
        s.stop()


def test_admin_add_beside_pins():
    cfg = os.path.join(A.work_dir, "room-pins-add.yaml")
    with open(cfg, "w") as f:
        f.write("models:\n  - {name: m2, path: %s, pinned: true}\n" % MODELS["m2"])
    budget = max(harness.model_bytes(d) for d in MODELS.values()) + SMALL_ROOM
    s = harness.Server(A.bin, {}, A.work_dir, device_budget=budget, extra=["--config", cfg],
                       model_root=os.path.dirname(MODELS["m1"]))
    s.start()
    try:
        st, j = s.json("POST", "/admin/models", {"name": "m1", "path": MODELS["m1"]},
                       key="admin", timeout=60)
        err = (j or {}).get("error", {})
        msg = err.get("message", "")
        check(st == 409 and err.get("code") == "no_room_beside_pinned" and
              "pinned model m2" in msg and "model m1" in msg and "\n" not in msg,
              "adding a model that never fits beside the pinned one: %d %s" % (st, j))
        print("      409: %s" % msg[:240])
        st, j = s.json("GET", "/v1/models/m1")
        check(st == 404, "the refused model is not served: %d %s" % (st, j))
        st, j = ask(s, "m2", SHORT, timeout=60)
        check(st == 200, "the pinned model after the refusal: %d %s" % (st, j))
    finally:
        s.stop()


def main():
    global A, MODELS
    p = harness.common_args(__doc__.splitlines()[0])
    A = harness.resolve_args(p.parse_args())
    MODELS = harness.tiny_models(A.bin, A.work_dir, 2)
    failures = harness.run_tests([test_long_prompt_evicts, test_pinned_starves_batch,
                                  test_never_fits, test_admin_add_beside_pins], {})
    if not failures:
        harness.cleanup_args(A)
    print("%d failed" % failures if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
