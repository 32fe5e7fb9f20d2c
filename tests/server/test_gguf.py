#!/usr/bin/env python3
"""A GGUF file served as it is (ctest: server_gguf).

`shardswap serve --model m=FILE.gguf` on the committed fixture
tests/fixtures/gguf/llama_gqa/model-f16.gguf (tools/make_gguf_fixtures.py:
a tiny Llama converted by llama.cpp's convert_hf_to_gguf.py, its 256-piece
SentencePiece vocabulary in tokenizer.ggml.* and Zephyr's chat template in
tokenizer.chat_template). Checked:

  - /v1/models lists the GGUF models, each with a tokenizer and a chat template;
  - `shardswap chat-template --model FILE.gguf` renders Zephyr's prompt
    with the file's EOS piece "</s>" (written out here), and `tokenize
    --model FILE.gguf` reads each "</s>" as the file's EOS id;
  - a two-message /v1/chat/completions (greedy) answers the same text and
    number of tokens as /v1/completions on the ids of that rendered prompt,
    and its usage counts those ids (streamed: the same text): the template
    and the tokenizer served are the file's;
  - a text completion's usage counts the ids `tokenize` gives (with the
    file's BOS), and its text is `generate --prompt` on the file;
  - a copy of the file truncated after the server started: its requests
    are an error naming the model, the other model keeps answering.

    test_gguf.py --bin build/shardswap [--work-dir DIR] [--keep]
"""

import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

GGUF = os.path.join(harness.SOURCE_DIR, "tests", "fixtures", "gguf", "llama_gqa", "model-f16.gguf")
BOS_ID, EOS_ID = 1, 2  # tokenizer.ggml.bos_token_id / eos_token_id of the fixture

A = None
S = {}

CONVERSATION = [
    {"role": "system", "content": "Be terse."},
    {"role": "user", "content": "Hi cat."},
]
# Zephyr's template on CONVERSATION with the generation prompt
RENDERED = "<|system|>\nBe terse.</s>\n<|user|>\nHi cat.</s>\n<|assistant|>\n"


def srv():
    return S["srv"]


def run(argv, stdin=None):
    r = subprocess.run(argv, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    check(r.returncode == 0, "%s: exit %d: %s" % (" ".join(argv[:3]), r.returncode,
                                                   r.stderr.decode(errors="replace")))
    return r.stdout.decode()


def rendered(body):
    return run([A.bin, "chat-template", "--model", GGUF], json.dumps(body).encode())


def tokenize(text, bos=True):
    return [int(x) for x in run([A.bin, "tokenize", "--model", GGUF] + ([] if bos else ["--no-bos"]),
                                text.encode()).split()]


# ---------------------------------------------------------------- tests


def test_models_listed():
    st, j = srv().json("GET", "/v1/models")
    check(st == 200, "/v1/models: %d %s" % (st, j))
    ids = sorted(m["id"] for m in j["data"])
    check(ids == ["m", "victim"], "/v1/models lists %s, want m and victim" % ids)
    for m in j["data"]:
        check(m["family"] == "llama" and m["tokenizer"] is True and m["chat_template"] is True,
              "/v1/models: %s (want a llama with the file's tokenizer and chat template)" % m)


def test_template_and_tokenizer_from_file():
    prompt = rendered({"messages": CONVERSATION, "add_generation_prompt": True})
    check(prompt == RENDERED, "chat-template rendered %r, want Zephyr's %r" % (prompt, RENDERED))
    ids = tokenize(prompt, bos=False)
    check(ids.count(EOS_ID) == 2 and BOS_ID not in ids,
          "tokenize --no-bos of the rendered prompt: %s (want the EOS id %d twice, no BOS)" %
          (ids, EOS_ID))
    S["ids"] = ids


def test_chat_equals_completion_on_rendered_ids():
    ids = S.get("ids") or tokenize(rendered({"messages": CONVERSATION, "add_generation_prompt": True}),
                                   bos=False)
    n = 8
    st, chat = srv().json("POST", "/v1/chat/completions",
                          {"model": "m", "messages": CONVERSATION, "max_tokens": n, "temperature": 0})
    check(st == 200, "chat: %d %s" % (st, chat))
    st, comp = srv().json("POST", "/v1/completions",
                          {"model": "m", "prompt": ids, "max_tokens": n, "temperature": 0})
    check(st == 200, "completion on the rendered ids: %d %s" % (st, comp))
    got, want = chat["choices"][0]["message"]["content"], comp["choices"][0]["text"]
    check(chat["usage"]["prompt_tokens"] == len(ids),
          "chat prompt_tokens %d, the rendered prompt is %d ids" % (chat["usage"]["prompt_tokens"], len(ids)))
    # the chat route ends at the template's end of turn (the file's EOS)
    # where the completion may go on: compare up to the chat's end
    nc = chat["usage"]["completion_tokens"]
    check(nc > 0, "chat answered no token: %s" % chat)
    if chat["choices"][0]["finish_reason"] == "length":
        check(nc == n and comp["usage"]["completion_tokens"] == n and got == want,
              "chat %r (%d tokens), completion %r (%d tokens)" %
              (got, nc, want, comp["usage"]["completion_tokens"]))
    else:
        st, part = srv().json("POST", "/v1/completions",
                              {"model": "m", "prompt": ids, "max_tokens": nc - 1, "temperature": 0})
        check(st == 200 and part["choices"][0]["text"] == got,
              "chat stopped after %d tokens with %r; the completion's first %d: %s" % (nc, got, nc - 1, part))
    # streamed: the same text, then [DONE]
    st, _, body = srv().request("POST", "/v1/chat/completions",
                                {"model": "m", "messages": CONVERSATION, "max_tokens": n,
                                 "temperature": 0, "stream": True})
    events = [e[len("data: "):] for e in body.decode().split("\n\n") if e.startswith("data: ")]
    check(st == 200 and events and events[-1] == "[DONE]", "streamed chat: %d %r" % (st, body[-200:]))
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content") or "" for e in events[:-1]
                   if json.loads(e).get("choices"))
    check(text == got, "streamed chat %r, plain %r" % (text, got))
    print("      %d prompt ids, chat %r (%s)" % (len(ids), got, chat["choices"][0]["finish_reason"]))


def test_text_completion_uses_file_tokenizer():
    prompt = "The cat sat on the mat"
    ids = tokenize(prompt)
    check(ids[0] == BOS_ID, "tokenize: %s does not start with the file's BOS %d" % (ids, BOS_ID))
    want = run([A.bin, "generate", "--model", GGUF, "--prompt", prompt, "--max-tokens", "6"])
    want = want[:-1] if want.endswith("\n") else want
    j = srv().complete("m", prompt, max_tokens=6, temperature=0)
    check(j["usage"]["prompt_tokens"] == len(ids), "prompt_tokens %d, tokenize %d ids" %
          (j["usage"]["prompt_tokens"], len(ids)))
    check(j["choices"][0]["text"] == want, "completion %r, generate %r" % (j["choices"][0]["text"], want))
    j2 = srv().complete("m", ids, max_tokens=6, temperature=0)
    check(j2["choices"][0]["text"] == want, "the same prompt as ids: %r, as text %r" %
          (j2["choices"][0]["text"], want))


def test_truncated_gguf():
    """Truncate the other model's file before its first load: its requests
    are an error naming it, m answers before and after, the server lives."""
    s = srv()
    s.complete("m", "Hello", max_tokens=2)
    size = os.path.getsize(S["victim"])
    os.truncate(S["victim"], size // 2)
    for body in ({"model": "victim", "prompt": "Hello", "max_tokens": 2},
                 {"model": "victim", "messages": CONVERSATION, "max_tokens": 2}):
        route = "/v1/chat/completions" if "messages" in body else "/v1/completions"
        st, j = s.json("POST", route, body)
        check(s.alive(), "the server died on a truncated GGUF:\n%s" % s.log_text()[-2000:])
        msg = ((j or {}).get("error") or {}).get("message", "")
        check(st >= 400 and "victim" in msg and "truncated" in msg and "\n" not in msg,
              "%s on the truncated GGUF: %d %s (want one line naming the model and the truncation)" % (route, st, j))
        s.complete("m", "Hello", max_tokens=2)
    print("      truncated to %d of %d bytes: %d %r" % (size // 2, size, st, msg[:160]))


def main():
    global A
    p = harness.common_args(__doc__)
    A = harness.resolve_args(p.parse_args())
    d = os.path.join(A.work_dir, "gguf")
    os.makedirs(d, exist_ok=True)
    victim = os.path.join(d, "victim.gguf")
    shutil.copy(GGUF, victim)
    S["victim"] = victim
    # host room for the two tokenizers (1 MiB each) and one copy of the weights: the
    # victim is read from its file when it loads
    s = harness.Server(A.bin, {"m": GGUF, "victim": victim}, A.work_dir, max_batch=4,
                       host_budget=2 * harness.MiB + os.path.getsize(GGUF) + (64 << 10))
    S.update(srv=s)
    t0 = time.time()
    s.start()
    print("server on port %d, up in %.1f s" % (s.port, time.time() - t0))
    tests = [test_models_listed, test_template_and_tokenizer_from_file,
             test_chat_equals_completion_on_rendered_ids, test_text_completion_uses_file_tokenizer,
             test_truncated_gguf]
    return harness.run_and_stop(tests, S, A)


if __name__ == "__main__":
    sys.exit(main())
