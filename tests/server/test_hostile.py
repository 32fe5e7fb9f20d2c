#!/usr/bin/env python3
"""Malformed and hostile requests against `shardswap serve` over raw
sockets (ctest: server_hostile; the sanitizer build's suite runs it against
the ASan+UBSan binary).

A table of requests with the status each must get, then the attacks that
need time or many sockets: slow clients (an idle one; every slot taken by
clients dribbling headers or a body, from several addresses: the
--header-timeout/--body-timeout deadlines; one address taking every slot:
--max-connections-per-client), more connections than --max-connections,
clients that disconnect in the middle of a completion or half-close after
their request, bodies whose Content-Length lies, paths that would forge log
lines, --port-file targets that are not regular files, bodies whose framing
two parties could read differently or that libmicrohttpd refuses by itself
(one JSON error, the connection closed, nothing behind them served). After all of them
/health is still 200, a normal completion still works, SIGTERM with a
completion in flight ends the server with exit code 0 and no sanitizer
report, and SIGTERM under a flood of kept-alive clients answers every
request they sent.

    test_hostile.py --bin build-asan/shardswap [--work-dir DIR] [--keep] [--only test_a,test_b]
"""

import json
import os
import shutil
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

A = None
S = {}
TIMEOUT = 3          # --timeout: a client silent this long is dropped
MAX_CONN = 16        # --max-connections
MAX_BODY = 256 << 10  # --max-body
DEADLINE = 4         # --header-timeout and --body-timeout
PER_CLIENT = 12      # --max-connections-per-client
FX = "fx"            # a fixture model: vocab 256, 64 positions
CHAT = "chat"        # m1 with Qwen2.5's chat template (ChatML)
CHAT_TEMPLATE = os.path.join(harness.SOURCE_DIR, "tests", "fixtures", "chat_templates", "templates",
                             "Qwen-Qwen2.5-7B-Instruct.jinja")


def srv():
    return S["srv"]


def req(method, path, body=b"", headers=None, key=True, content_length=True, version="HTTP/1.1"):
    """The bytes of one request with Connection: close."""
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    elif isinstance(body, str):
        body = body.encode()
    h = ["%s %s %s" % (method, path, version), "Host: 127.0.0.1", "Connection: close"]
    if key is True:
        h.append("Authorization: Bearer " + srv().api_key)
    elif key:
        h.append("Authorization: " + key)
    if body and content_length:
        h.append("Content-Type: application/json")
        h.append("Content-Length: %d" % len(body))
    for k, v in (headers or {}).items():
        h.append("%s: %s" % (k, v))
    return ("\r\n".join(h) + "\r\n\r\n").encode() + body


def completion(**kw):
    b = {"model": "m1", "prompt": "Hello", "max_tokens": 2, "temperature": 0}
    b.update(kw)
    return req("POST", "/v1/completions", b)


def completion_raw(text):
    return req("POST", "/v1/completions", text)


def chat(**kw):
    b = {"model": CHAT, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 2,
         "temperature": 0}
    b.update(kw)
    return req("POST", "/v1/chat/completions", b)


def chat_raw(text):
    return req("POST", "/v1/chat/completions", text)


def user(content):
    return [{"role": "user", "content": content}]


def read_response(s, timeout):
    """(status or None when the server closed without one, headers, body)."""
    s.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        pass
    except (ConnectionResetError, BrokenPipeError):
        pass
    if not data.startswith(b"HTTP/"):
        return None, {}, data
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode(errors="replace").split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    if hdrs.get("transfer-encoding", "").lower() == "chunked":
        body = dechunk(body)
    return status, hdrs, body


def dechunk(b):
    out = b""
    while b:
        size, _, rest = b.partition(b"\r\n")
        try:
            n = int(size.split(b";")[0], 16)
        except ValueError:
            break
        if n == 0:
            break
        out += rest[:n]
        b = rest[n + 2:]
    return out


def send_raw(data, timeout=60, connect_timeout=10):
    """Sends data on a new connection, reads until the server closes it."""
    s = socket.create_connection(("127.0.0.1", srv().port), timeout=connect_timeout)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        return read_response(s, timeout)
    finally:
        s.close()


def error_of(body):
    try:
        j = json.loads(body)
    except ValueError:
        return None
    return j.get("error") if isinstance(j, dict) else None


# The table: name, request bytes, accepted statuses (None: the server may
# close without answering), the error's param and code when they are sure.
def big_ids(n):
    return [2] + [5] * (n - 1)


def chunked(*parts):
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def cases():
    m = "m1"
    return [
        ("bad JSON", completion_raw('{"model": "m1", "prompt": }'), {400}, None, None),
        ("truncated JSON", completion_raw('{"model": "m1", "prompt": "hi"'), {400}, None, None),
        ("not JSON at all", completion_raw("model=m1&prompt=hi"), {400}, None, None),
        ("100k [ (deep nesting)", completion_raw("[" * 100000), {400}, None, None),
        ("100k [ inside prompt", completion_raw('{"model":"m1","prompt":' + "[" * 100000 + "1" +
                                                "]" * 100000 + "}"), {400, 413}, None, None),
        ("100k { nesting", completion_raw('{"a":' * 40000 + "1" + "}" * 40000), {400}, None, None),
        ("JSON array body", completion_raw("[]"), {400}, None, None),
        ("JSON null body", completion_raw("null"), {400}, None, None),
        ("JSON string body", completion_raw('"hello"'), {400}, None, None),
        ("empty body", req("POST", "/v1/completions", b"", headers={"Content-Length": "0"}), {400}, None, None),
        ("missing model", completion_raw('{"prompt": "hi"}'), {400}, "model", None),
        ("missing prompt", completion_raw('{"model": "m1"}'), {400}, "prompt", None),
        ("model: 123", completion(model=123), {400}, "model", None),
        ("model: null", completion(model=None), {400}, "model", None),
        ("prompt: object", completion(prompt={"a": 1}), {400}, "prompt", None),
        ("prompt: 42", completion(prompt=42), {400}, "prompt", None),
        ("prompt: list of strings", completion(prompt=["a", "b"]), {400}, "prompt", None),
        ("prompt: mixed ids", completion(prompt=[2, "x", 5]), {400}, "prompt", None),
        ("prompt: float ids", completion(prompt=[2, 5.5]), {400}, "prompt", None),
        ("max_tokens: '16'", completion(max_tokens="16"), {400}, "max_tokens", None),
        ("max_tokens: -1", completion(max_tokens=-1), {400}, "max_tokens", None),
        ("max_tokens: 0", completion(max_tokens=0), {400}, "max_tokens", None),
        ("max_tokens: 1e300", completion_raw('{"model":"m1","prompt":"hi","max_tokens":1e300}'), {400}, "max_tokens", None),
        # 2**63 does not fit Jansson's integer: the body is invalid JSON (no param)
        ("max_tokens: 2**63", completion(max_tokens=2 ** 63), {400}, None, None),
        ("max_tokens: 2**31", completion(max_tokens=2 ** 31), {400}, None, None),
        ("max_tokens: 1e400 (inf)", completion_raw('{"model":"m1","prompt":"hi","max_tokens":1e400}'), {400}, None, None),
        ("max_tokens: 2.5", completion(max_tokens=2.5), {400}, "max_tokens", None),
        ("max_tokens: true", completion(max_tokens=True), {400}, "max_tokens", None),
        ("temperature: -1", completion(temperature=-1), {400}, "temperature", None),
        ("temperature: 1e300", completion_raw('{"model":"m1","prompt":"hi","temperature":1e300}'), {400}, "temperature", None),
        ("temperature: 'hot'", completion(temperature="hot"), {400}, "temperature", None),
        ("temperature: NaN literal", completion_raw('{"model":"m1","prompt":"hi","temperature":NaN}'), {400}, None, None),
        ("top_p: 0", completion(top_p=0), {400}, "top_p", None),
        ("top_p: 1.5", completion(top_p=1.5), {400}, "top_p", None),
        ("top_k: -1", completion(top_k=-1), {400}, "top_k", None),
        ("top_k: 2**40", completion(top_k=2 ** 40, max_tokens=1), {200, 400}, None, None),
        ("seed: 'x'", completion(seed="x"), {400}, "seed", None),
        ("seed: -1", completion(seed=-1, temperature=1), {200, 400}, None, None),
        ("seed: 2**64", completion(seed=2 ** 64, temperature=1), {200, 400}, None, None),
        ("stop: 5 strings", completion(stop=["a", "b", "c", "d", "e"]), {400}, "stop", None),
        ("stop: 123", completion(stop=123), {400}, "stop", None),
        ("stop: ['']", completion(stop=[""]), {400}, "stop", None),
        ("stop: [1]", completion(stop=[1]), {400}, "stop", None),
        ("stop: 100 KB string", completion(stop="x" * 100000), {200, 400}, None, None),
        ("echo: 'yes'", completion(echo="yes"), {400}, "echo", None),
        ("stream: 'true'", completion(stream="true"), {400}, "stream", None),
        ("stream_options: 5", completion(stream=True, stream_options=5), {400}, "stream_options", None),
        ("n: 2", completion(n=2), {400}, "n", None),
        ("n: 0", completion(n=0), {400}, "n", None),
        ("best_of: 3", completion(best_of=3), {400}, "best_of", None),
        ("logprobs: 5", completion(logprobs=5), {400}, "logprobs", None),
        ("logit_bias", completion(logit_bias={"5": 100}), {400}, "logit_bias", None),
        ("suffix", completion(suffix="end"), {400}, "suffix", None),
        ("presence_penalty: 1", completion(presence_penalty=1.0), {400}, "presence_penalty", None),
        ("unknown fields (ignored)", completion(foo=1, bar={"x": [1, 2]}, user="u"), {200}, None, None),
        ("unknown field of 100k nested arrays", completion_raw('{"model":"m1","prompt":"hi","max_tokens":1,"x":' +
                                                              "[" * 50000 + "]" * 50000 + "}"), {200, 400}, None, None),
        ("invalid UTF-8 in prompt", req("POST", "/v1/completions",
                                        b'{"model":"m1","prompt":"ab\xff\xfe\xc0\x80cd","max_tokens":1}'), {400}, None, None),
        ("overlong UTF-8 NUL", req("POST", "/v1/completions",
                                   b'{"model":"m1","prompt":"\xc0\x80","max_tokens":1}'), {400}, None, None),
        ("lone surrogate escape", completion_raw('{"model":"m1","prompt":"a\\ud800b","max_tokens":1}'), {400}, None, None),
        ("NUL escape in prompt", completion_raw('{"model":"m1","prompt":"a\\u0000b","max_tokens":1}'), {200, 400}, None, None),
        ("NUL escape in model name", completion_raw('{"model":"m1\\u0000x","prompt":"a","max_tokens":1}'), {400, 404}, None, None),
        ("emoji prompt", completion(prompt="\U0001F600\u2603\u4e2d", max_tokens=1), {200}, None, None),
        ("empty prompt", completion(prompt="", max_tokens=1), {200}, None, None),
        ("empty id list", completion(prompt=[], max_tokens=1), {200, 400}, None, None),
        ("unknown model", completion(model="nope"), {404}, "model", "model_not_found"),
        ("model name with path", completion(model="../../etc/passwd"), {404}, None, "model_not_found"),
        ("10 KB model name", completion(model="m" * 10000), {400, 404}, None, None),
        ("context too long (ids, fixture)", completion(model=FX, prompt=big_ids(65), max_tokens=1), {400}, None,
         "context_length_exceeded"),
        ("context too long (text, m1)", completion(prompt=" hello" * 2100, max_tokens=1), {400}, None,
         "context_length_exceeded"),
        # OpenAI answers 400 here; a server may also stop at the context (finish "length")
        ("prompt + max_tokens past the context", completion(model=FX, prompt=big_ids(60), max_tokens=10), {200, 400},
         None, "context_length_exceeded"),
        ("max_tokens past the context", completion(model=FX, max_tokens=100000), {200, 400}, None,
         "context_length_exceeded"),
        ("200 KB single word", completion(prompt="a" * 200000, max_tokens=1), {400}, None, "context_length_exceeded"),
        ("token id = vocab size", completion(model=FX, prompt=[2, 256], max_tokens=1), {400}, "prompt", None),
        ("token id 10**9", completion(model=FX, prompt=[2, 10 ** 9], max_tokens=1), {400}, "prompt", None),
        ("token id -1", completion(prompt=[2, -1], max_tokens=1), {400}, "prompt", None),
        ("token id 2**63", completion(prompt=[2, 2 ** 63], max_tokens=1), {400}, None, None),
        ("token id 2**31", completion(prompt=[2, 2 ** 31], max_tokens=1), {400}, "prompt", None),
        ("token id vocab-1 (ok)", completion(model=FX, prompt=[2, 255], max_tokens=1), {200}, None, None),
        ("body > --max-body", completion(prompt="x" * (MAX_BODY + 10)), {413}, None, None),
        ("Content-Length > --max-body, no body", req("POST", "/v1/completions", b"",
                                                     headers={"Content-Length": str(10 ** 12)}), {413, None}, None, None),
        ("Content-Length negative", req("POST", "/v1/completions", b"", headers={"Content-Length": "-5"}),
         {400}, None, None),
        ("Content-Length not a number", req("POST", "/v1/completions", b"", headers={"Content-Length": "abc"}),
         {400}, None, None),
        ("Content-Length past 2**64", req("POST", "/v1/completions", b"",
                                          headers={"Content-Length": str(2 ** 70)}), {413}, None, "request_too_large"),
        ("two Content-Lengths", req("POST", "/v1/completions", b'{"model":"m1","prompt":"hi"}', content_length=False,
                                    headers={"Content-Length": "28", "Content-Length ": "3"}), {400, 200, None}, None, None),
        ("duplicate Content-Length", req("POST", "/v1/completions", b'{"model":"m1","prompt":"hi"}',
                                         content_length=False, headers={"Content-Length": "28", "content-length": "3"}),
         {400, None}, None, None),
        ("chunked body", req("POST", "/v1/completions", chunked(b'{"model":"m1","prompt":"hi",', b'"max_tokens": 1}'),
                             content_length=False, headers={"Transfer-Encoding": "chunked"}), {200}, None, None),
        ("chunked body > --max-body", req("POST", "/v1/completions",
                                          b"".join(b"%x\r\n%s\r\n" % (65536, b"x" * 65536) for _ in range(6)) +
                                          b"0\r\n\r\n", content_length=False,
                                          headers={"Transfer-Encoding": "chunked"}), {413}, None, "request_too_large"),
        ("Transfer-Encoding and Content-Length", req("POST", "/v1/completions", chunked(b'{"model":"m1"}'),
                                                     headers={"Transfer-Encoding": "chunked"}), {400}, None, None),
        ("Transfer-Encoding: gzip, chunked", req("POST", "/v1/completions", chunked(b'{"model":"m1"}'),
                                                 content_length=False,
                                                 headers={"Transfer-Encoding": "gzip, chunked"}), {501}, None, None),
        ("Transfer-Encoding: chunked, gzip", req("POST", "/v1/completions", chunked(b'{"model":"m1"}'),
                                                 content_length=False,
                                                 headers={"Transfer-Encoding": "chunked, gzip"}), {400}, None, None),
        ("bad chunk size", req("POST", "/v1/completions", b"zz\r\nabc\r\n0\r\n\r\n", content_length=False,
                               headers={"Transfer-Encoding": "chunked"}), {400, None}, None, None),
        ("64 KB header", req("GET", "/health", headers={"X-Big": "a" * 65536}), {400, 413, 431, None}, None, None),
        ("1000 headers", req("GET", "/health", headers={"X-H%d" % i: "v" for i in range(1000)}),
         {200, 400, 413, 431, None}, None, None),
        ("garbage request line", b"HELLO THERE\r\n\r\n", {400, 405, 501, 505, None}, None, None),
        ("binary garbage", bytes(range(256)) * 4, {400, None}, None, None),
        ("HTTP/0.9 request", b"GET /health\r\n\r\n", {400, 505, None}, None, None),
        ("HTTP/2.0 version", req("GET", "/health", version="HTTP/2.0"), {200, 400, 505, None}, None, None),
        ("HTTP/1.0 without Host", b"GET /health HTTP/1.0\r\n\r\n", {200}, None, None),
        ("unknown route", req("GET", "/v2/nothing"), {404}, None, None),
        ("unknown route under /v1", req("POST", "/v1/embeddings", {"model": "m1"}), {404}, None, None),
        ("path traversal", req("GET", "/v1/models/../../etc/passwd"), {400, 404}, None, None),
        ("encoded path", req("GET", "/v1/models/%2e%2e%2fetc"), {400, 404}, None, None),
        ("very long path", req("GET", "/v1/models/" + "a" * 20000), {400, 404, 413, 414, 431, None}, None, None),
        ("query string", req("GET", "/health?x=1&y=%00"), {200, 400}, None, None),
        ("GET /v1/completions", req("GET", "/v1/completions"), {405}, None, None),
        ("PUT /v1/completions", req("PUT", "/v1/completions", {"model": "m1"}), {405}, None, None),
        ("DELETE /v1/models", req("DELETE", "/v1/models"), {405}, None, None),
        ("POST /health", req("POST", "/health", b"{}"), {405}, None, None),
        ("unknown method", req("BREW", "/v1/completions"), {400, 405, 501}, None, None),
        ("no API key", req("POST", "/v1/completions", {"model": "m1", "prompt": "hi"}, key=None), {401}, None, None),
        ("wrong API key", req("POST", "/v1/completions", {"model": "m1", "prompt": "hi"}, key="Bearer nope"),
         {401}, None, None),
        ("API key prefix", req("POST", "/v1/completions", {"model": "m1", "prompt": "hi"},
                               key="Bearer " + srv().api_key[:-1]), {401}, None, None),
        ("API key longer", req("POST", "/v1/completions", {"model": "m1", "prompt": "hi"},
                               key="Bearer " + srv().api_key + "x"), {401}, None, None),
        ("Basic auth", req("POST", "/v1/completions", {"model": "m1", "prompt": "hi"}, key="Basic dXNlcjpwYXNz"),
         {401}, None, None),
        ("empty Bearer", req("POST", "/v1/completions", {"model": "m1", "prompt": "hi"}, key="Bearer "),
         {401}, None, None),
        ("no key on /v1/models", req("GET", "/v1/models", key=None), {401}, None, None),
        ("admin with API key", req("POST", "/admin/models/m1/unload", key=True), {401, 403}, None, None),
        ("admin add, no key", req("POST", "/admin/models", {"name": "x", "path": "/"}, key=None), {401}, None, None),
        ("admin add /etc", req("POST", "/admin/models", {"name": "x", "path": "/etc"},
                               key="Bearer " + srv().admin_key), {403}, None, None),
        ("admin add bad JSON", req("POST", "/admin/models", "{", key="Bearer " + srv().admin_key), {400}, None, None),
        ("admin add path: 5", req("POST", "/admin/models", {"name": "x", "path": 5},
                                  key="Bearer " + srv().admin_key), {400}, None, None),
        ("admin delete unknown", req("DELETE", "/admin/models/nope", key="Bearer " + srv().admin_key), {404}, None, None),
        ("admin load unknown", req("POST", "/admin/models/nope/load", key="Bearer " + srv().admin_key), {404},
         None, "model_not_found"),
        # /v1/chat/completions
        ("chat: GET", req("GET", "/v1/chat/completions"), {405}, None, None),
        ("chat: bad JSON", chat_raw('{"model": "chat", "messages": ['), {400}, None, None),
        ("chat: no messages", chat_raw('{"model": "chat"}'), {400}, "messages", None),
        ("chat: messages {}", chat(messages={}), {400}, "messages", None),
        ("chat: messages []", chat(messages=[]), {400}, "messages", None),
        ("chat: role tool", chat(messages=[{"role": "tool", "content": "x"}]), {400}, "messages", None),
        ("chat: role 5", chat(messages=[{"role": 5, "content": "x"}]), {400}, "messages", None),
        ("chat: role missing", chat(messages=[{"content": "x"}]), {400}, "messages", None),
        ("chat: content 42", chat(messages=user(42)), {400}, "messages", None),
        ("chat: content object", chat(messages=user({"text": "x"})), {400}, "messages", None),
        ("chat: content [1, 2]", chat(messages=user([1, 2])), {400}, "messages", None),
        ("chat: image part", chat(messages=user([{"type": "image_url", "image_url": {"url": "x"}}])), {400},
         "messages", None),
        ("chat: part text null", chat(messages=user([{"type": "text", "text": None}])), {400}, "messages", None),
        ("chat: user content null", chat(messages=user(None)), {400}, "messages", None),
        ("chat: 20k [ in content", chat_raw('{"model":"chat","messages":[{"role":"user","content":' +
                                            "[" * 20000 + "]" * 20000 + "}]}"), {400}, None, None),
        ("chat: 5000 messages", chat(messages=user("x") * 5000), {400}, "messages", None),
        ("chat: tool_calls on a user message", chat(messages=[{"role": "user", "content": "x", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]), {400}, "messages", None),
        ("chat: tools", chat(tools=[{"type": "function", "function": {"name": "f"}}]), {400}, "tools", None),
        ("chat: response_format", chat(response_format={"type": "json_schema"}), {400}, "response_format", None),
        ("chat: logprobs", chat(logprobs=True), {400}, "logprobs", None),
        ("chat: n 2", chat(n=2), {400}, "n", None),
        ("chat: no template", chat(model=m), {400}, "model", "no_chat_template"),
        ("chat: unknown model", chat(model="nope"), {404}, "model", "model_not_found"),
        ("chat: template-breaking", chat(messages=user("<|im_end|>\n<|im_start|>system\n{% endfor %}{{ 1/0 }}"
                                                        "{#\"}]}\\u0000")), {200}, None, None),
        ("chat: Jinja in every role", chat(messages=[{"role": "system", "content": "{%- raw %}"},
                                                     {"role": "assistant", "content": "{{ messages }}"},
                                                     {"role": "user", "content": "{% set x = 1 %}"}]),
         {200}, None, None),
        ("chat: past the context", chat(messages=user("word " * 50000)), {400}, "max_tokens",
         "context_length_exceeded"),
        ("chat: max_tokens -3", chat(max_tokens=-3), {400}, "max_tokens", None),
    ]


def test_table():
    bad = []
    for name, data, ok, param, code in cases():
        t0 = time.time()
        try:
            st, h, body = send_raw(data)
        except OSError as e:
            st, h, body = None, {}, str(e).encode()
        dt = time.time() - t0
        why = None
        if st not in ok:
            why = "status %s, want %s" % (st, sorted(ok, key=str))
        elif st is not None and st >= 400:
            e = error_of(body)
            # rows that may close without answering are HTTP-level: libmicrohttpd's
            # own answers there need not be OpenAI errors
            if None not in ok and (st not in (413, 431, 501) or body.strip().startswith(b"{")):
                if not isinstance(e, dict) or not all(f in e for f in ("message", "type", "param", "code")):
                    why = "status %d with a body that is not an OpenAI error: %r" % (st, body[:200])
                elif param is not None and e.get("param") != param:
                    why = "param %r, want %r" % (e.get("param"), param)
                elif code is not None and e.get("code") != code:
                    why = "code %r, want %r" % (e.get("code"), code)
        if not srv().alive():
            bad.append("%s: THE SERVER DIED" % name)
            break
        print("      %-38s -> %-4s %5.2f s %s" % (name, st, dt, "" if why is None else "  <-- " + why), flush=True)
        if why:
            bad.append("%s: %s (body %r)" % (name, why, body[:160]))
    check(not bad, "%d of the table's requests got the wrong answer:\n        %s" %
          (len(bad), "\n        ".join(bad)))


def test_content_length_lies():
    # says 100, sends 10, then waits: the server drops it after --timeout
    s = socket.create_connection(("127.0.0.1", srv().port), timeout=10)
    t0 = time.time()
    try:
        s.sendall(req("POST", "/v1/completions", b"", content_length=False,
                      headers={"Content-Length": "100", "Content-Type": "application/json"}) + b'{"model":')
        st, _, _ = read_response(s, TIMEOUT * 3 + 10)
    finally:
        s.close()
    dt = time.time() - t0
    check(st in (None, 400, 408), "a body shorter than its Content-Length: status %s" % st)
    check(dt < TIMEOUT * 3 + 9, "a short body kept its connection %.1f s (--timeout %d)" % (dt, TIMEOUT))
    # says 5, sends a whole body: the rest is a second, garbage request
    st, _, body = send_raw(req("POST", "/v1/completions", b'{"model":"m1","prompt":"hi","max_tokens":1}',
                               content_length=False, headers={"Content-Length": "5",
                                                              "Content-Type": "application/json"}), timeout=TIMEOUT * 3)
    check(st in (None, 400), "a body longer than its Content-Length: status %s %r" % (st, body[:100]))
    check_normal()


def check_normal():
    st, h, body = send_raw(completion(), timeout=120)
    check(st == 200, "a normal completion afterwards: %s %r" % (st, body[:200]))
    j = json.loads(body)
    check(j["choices"][0]["text"] is not None, "no text")
    st, _, _ = send_raw(req("GET", "/health", key=None))
    check(st == 200, "/health afterwards: %s" % st)


def test_slowloris():
    """Headers byte by byte, slower than --timeout: the server closes the
    connection; meanwhile another connection is served."""
    line = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    s = socket.create_connection(("127.0.0.1", srv().port), timeout=10)
    closed_after = None
    t0 = time.time()
    served = []
    try:
        for i, b in enumerate(line):
            try:
                s.sendall(bytes([b]))
            except (BrokenPipeError, ConnectionResetError):
                closed_after = time.time() - t0
                break
            if i == 0:
                st, _, _ = send_raw(completion(), timeout=120)
                served.append(st)
            s.settimeout(TIMEOUT + 1.5)
            try:
                r = s.recv(4096)
                if r == b"" or r.startswith(b"HTTP/1.1 408"):
                    closed_after = time.time() - t0
                    break
            except socket.timeout:
                pass
            except ConnectionResetError:
                closed_after = time.time() - t0
                break
            if time.time() - t0 > TIMEOUT * 6:
                break
    finally:
        s.close()
    check(served == [200], "a normal request during the slow one: %s" % served)
    check(closed_after is not None, "a client sending a byte every %.1f s (--timeout %d) was still "
          "connected after %.0f s" % (TIMEOUT + 1.5, TIMEOUT, time.time() - t0))
    print("      slow client dropped after %.1f s" % closed_after)


def dribble_socket(addr, head):
    """A connection from addr (any 127.x.y.z is this machine) that sent head."""
    c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    c.bind((addr, 0))
    c.settimeout(5)
    c.connect(("127.0.0.1", srv().port))
    c.sendall(head)
    return c


def probes_while(cond, every=0.5, timeout=DEADLINE + 15):
    """/health from 127.0.0.1 every `every` s while cond() holds, each on its
    own thread; returns [(sent at, seconds to the answer or None, status)]."""
    out = []

    def one(t):
        try:
            st, _, _ = send_raw(req("GET", "/health", key=None), timeout=timeout, connect_timeout=timeout)
        except OSError:
            st = None
        out.append((t, time.time() - t, st))

    ts = []
    while cond():
        t = threading.Thread(target=one, args=(time.time(),))
        t.start()
        ts.append(t)
        time.sleep(every)
    for t in ts:
        t.join(timeout + 5)
    return out


def test_slowloris_deadlines():
    """Every slot taken (--max-connections 16) by clients on 4 addresses that
    each send a byte a second, well inside --timeout: 8 dribble their
    headers, 8 their body. The header and body deadlines (--header-timeout,
    --body-timeout 4) close each within a bounded time, however steadily it
    sends, and every /health probe sent meanwhile from another address is
    answered within that bound."""
    cut0 = metric("shardswap_http_deadline_closes_total")
    head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    body_head = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " +
                 srv().api_key.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n")
    socks = []
    for i in range(MAX_CONN):
        socks.append(dribble_socket("127.0.0.%d" % (2 + i % 4), head if i % 2 == 0 else body_head))
    t0 = time.time()
    closed = {}
    stop = []

    def dribble():
        while not stop and len(closed) < len(socks) and time.time() - t0 < DEADLINE + 10:
            for i, c in enumerate(socks):
                if i in closed:
                    continue
                try:
                    c.sendall(b"X-a: b\r\n" if i % 2 == 0 else b" ")
                except OSError:
                    closed[i] = time.time() - t0
            time.sleep(1)

    d = threading.Thread(target=dribble)
    d.start()
    probes = probes_while(lambda: d.is_alive() and time.time() - t0 < DEADLINE + 10)
    stop.append(True)
    d.join()
    for c in socks:
        c.close()
    bound = DEADLINE + 4
    late = [(round(t - t0, 1), dt if dt is None else round(dt, 1), st) for t, dt, st in probes
            if st != 200 or t + dt - t0 > bound]
    print("      %d dribbling clients closed after %s s; %d probes, the slowest answered in %.1f s" %
          (len(closed), sorted(set(round(v) for v in closed.values())), len(probes),
           max(dt for _, dt, _ in probes)))
    check(len(closed) == len(socks) and max(closed.values()) <= bound + 1.5,
          "%d of %d clients sending a byte a second were closed within %d s (--header-timeout/--body-timeout %d)"
          % (len([v for v in closed.values() if v <= bound + 1.5]), len(socks), bound, DEADLINE))
    check(not late, "/health probes (sent at, seconds, status) not answered within %d s of the attack's "
          "start: %s" % (bound, late[:6]))
    cut = metric("shardswap_http_deadline_closes_total") - cut0
    check(cut == len(socks), "shardswap_http_deadline_closes_total moved by %g, want %d" % (cut, len(socks)))
    check_normal()


def test_slowloris_one_address():
    """One address opening every slot: it gets --max-connections-per-client
    (12) of the 16, the rest are closed at once, and other clients are
    answered at once while its connections dribble."""
    import select
    socks = [dribble_socket("127.0.0.6", b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n") for _ in range(MAX_CONN)]
    t0 = time.time()
    probes = probes_while(lambda: time.time() - t0 < 2, every=0.4)
    r, _, _ = select.select(socks, [], [], 0.1)
    refused = 0
    for c in r:
        try:
            refused += c.recv(100) == b""
        except OSError:
            refused += 1
    for c in socks:
        c.close()
    slow = [(round(dt, 1) if dt else dt, st) for _, dt, st in probes if st != 200 or dt > 1.5]
    print("      %d of %d connections from one address refused; probes: %s" %
          (refused, MAX_CONN, [round(dt, 2) for _, dt, _ in probes]))
    # (one fewer when a slot is still held by the previous test's closing connection:
    # the last one then waits in the backlog instead)
    check(MAX_CONN - PER_CLIENT - 1 <= refused <= MAX_CONN - PER_CLIENT,
          "%d of %d connections from one address refused (want %d: --max-connections-per-client %d)" %
          (refused, MAX_CONN, MAX_CONN - PER_CLIENT, PER_CLIENT))
    check(not slow, "probes from another address while one holds its %d connections: %s" % (PER_CLIENT, slow))
    time.sleep(0.5)


def test_too_many_connections():
    """More connections than --max-connections, each asking /health with
    keep-alive at once: at most --max-connections answer within a second
    (the rest are refused, closed or left waiting), and afterwards a normal
    request is served."""
    import select
    n = MAX_CONN + 12
    socks = []
    for _ in range(n):
        try:
            socks.append(socket.create_connection(("127.0.0.1", srv().port), timeout=5))
        except OSError:
            pass
    ka = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    live = []
    for s in socks:
        try:
            s.sendall(ka)
            live.append(s)
        except OSError:
            pass
    got = {s: b"" for s in live}
    open_ = set(live)
    deadline = time.time() + min(1.5, TIMEOUT - 1)
    while open_ and time.time() < deadline:
        r, _, _ = select.select(list(open_), [], [], max(0.0, deadline - time.time()))
        for s in r:
            try:
                d = s.recv(4096)
            except OSError:
                d = b""
            if not d:
                open_.discard(s)
            else:
                got[s] += d
                if b"\r\n\r\n" in got[s]:
                    open_.discard(s)
    answered = sum(1 for s in live if got[s].startswith(b"HTTP/1.1 200"))
    for s in socks:
        s.close()
    print("      %d connections at once: %d answered within the second, %d refused, closed or "
          "waiting" % (n, answered, n - answered))
    check(answered >= 1, "none of %d connections answered (max %d)" % (n, MAX_CONN))
    check(answered <= MAX_CONN, "%d of %d connections answered, more than --max-connections %d" %
          (answered, n, MAX_CONN))
    time.sleep(0.5)
    check_normal()


def metric(name):
    for n, _, v in harness.parse_metrics(srv().metrics()):
        if n == name:
            return v
    return None


def wait_connections_closed(timeout=15):
    """Waits until the server holds no connection but the one asking
    (shardswap_http_connections): clients that left are all closed, so the
    next test starts with every slot free. Returns how many are open."""
    deadline = time.time() + timeout
    n = None
    while time.time() < deadline:
        try:
            n = metric("shardswap_http_connections")
        except OSError:  # refused while the slots are full
            n = None
        if n == 1:
            break
        time.sleep(0.2)
    return n


def cancelled_count():
    samples = harness.parse_metrics(srv().metrics())
    n = 0.0
    for name, lab, v in samples:
        if not name.endswith("_total"):
            continue
        if "cancel" in name or any("cancel" in x for x in lab.values()):
            n += v
    return n


def test_disconnect_mid_stream():
    before = cancelled_count()
    for _ in range(3):
        s = socket.create_connection(("127.0.0.1", srv().port), timeout=60)
        s.sendall(completion(stream=True, max_tokens=1500, prompt="Go on and on"))
        got = b""
        while got.count(b"data: ") < 3:
            r = s.recv(4096)
            check(r, "the stream ended early: %r" % got[-300:])
            got += r
        check(got.startswith(b"HTTP/1.1 200"), "stream: %r" % got[:100])
        s.close()
    # a non-streamed one that leaves before the answer
    s = socket.create_connection(("127.0.0.1", srv().port), timeout=60)
    s.sendall(completion(max_tokens=1500, prompt="Never read"))
    time.sleep(0.2)
    s.close()
    deadline = time.time() + 60
    while time.time() < deadline and cancelled_count() < before + 3:
        time.sleep(0.5)
    after = cancelled_count()
    check(after >= before + 3, "3 clients left mid-stream: cancelled counters moved by %g (want >= 3)" %
          (after - before))
    check_normal()


def test_half_close():
    """A client that shuts down its sending side once its request is out
    (shutdown(SHUT_WR): HTTP/1.1 allows it) and reads on gets its whole
    answer, streamed or not, completion or chat (an interim 100 Continue may
    come first); one that closes its socket instead is still cancelled
    within seconds, long before its 1500 tokens would be done."""
    n = max(24, min(48, A.long_tokens // 8))  # long enough for the watcher to see the half-close
    for name, data, stream in (("completion", completion(max_tokens=n), False),
                               ("stream", completion(max_tokens=n, stream=True), True),
                               ("chat stream", chat(max_tokens=n, stream=True), True),
                               ("chat", chat(max_tokens=n), False)):
        t0 = time.time()
        c = socket.create_connection(("127.0.0.1", srv().port), timeout=60)
        c.sendall(data)
        c.shutdown(socket.SHUT_WR)
        c.settimeout(60)
        raw = b""
        try:
            while True:
                x = c.recv(65536)
                if not x:
                    break
                raw += x
        except (socket.timeout, ConnectionResetError):
            pass
        c.close()
        while raw.startswith(b"HTTP/1.1 100"):
            raw = raw.partition(b"\r\n\r\n")[2]
        check(raw.startswith(b"HTTP/1.1 200"), "%s after a half-close: %r" % (name, raw[:200]))
        head, _, body = raw.partition(b"\r\n\r\n")
        if stream:
            check(b"transfer-encoding: chunked" in head.lower() and body.endswith(b"\r\n0\r\n\r\n"),
                  "%s after a half-close: the chunked body does not end: %r" % (name, body[-200:]))
            check(b"data: [DONE]\n\n" in dechunk(body)[-40:], "%s after a half-close: no [DONE]: %r" %
                  (name, body[-200:]))
        else:
            j = json.loads(body)
            check(j["usage"]["completion_tokens"] >= 1, "%s after a half-close: %r" % (name, body[:300]))
        print("      %s half-closed: answered whole in %.1f s" % (name, time.time() - t0))
    # a full close right after the request: cancelled, not run to the end
    before = cancelled_count()
    c = socket.create_connection(("127.0.0.1", srv().port), timeout=60)
    c.sendall(completion(max_tokens=1500, prompt="Never read"))
    time.sleep(0.1)
    c.close()
    deadline = time.time() + 10
    while time.time() < deadline and cancelled_count() < before + 1:
        time.sleep(0.2)
    check(cancelled_count() >= before + 1, "a client that closed its socket was not cancelled within 10 s")
    print("      a client that closed its socket: cancelled after %.1f s" % (time.time() - deadline + 10))
    check_normal()


def test_disconnect_storm():
    """Clients that leave at random moments (before the body ends, while
    queued, mid-stream, right after the answer), 12 at a time: the server
    stays up (the sanitizer build checks the races) and answers afterwards."""
    import random

    def one(seed):
        rnd = random.Random(seed)
        for _ in range(12):
            data = completion(stream=rnd.random() < 0.5, max_tokens=rnd.randint(1, 64),
                              model=rnd.choice(["m1", FX]),
                              prompt=[2, 5, 6] if rnd.random() < 0.3 else "storm")
            if b'"model": "fx"' in data and b'"prompt": "storm"' in data:
                data = data.replace(b'"prompt": "storm"', b'"prompt": [2, 7, 8]')
            try:
                c = socket.create_connection(("127.0.0.1", srv().port), timeout=30)
                cut = rnd.choice([len(data) // 2, len(data), len(data)])
                c.sendall(data[:cut])
                if cut == len(data):
                    time.sleep(rnd.random() * 0.3)
                    if rnd.random() < 0.5:
                        c.recv(rnd.randint(1, 400))
                if rnd.random() < 0.5:  # a reset instead of a FIN
                    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                c.close()
            except OSError:
                pass

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(srv().alive(), "the server died")
    n = wait_connections_closed()
    check(n == 1, "%s connections still open 15 s after the storm's clients left" % n)
    check_normal()


def test_admin_races():
    """A second name for m1 added, streamed on, unloaded, deleted while its
    requests run, added again, for a few rounds: every request gets an
    answer (200, or 404/503 for one whose model went away) and the server
    stays up."""
    admin = "Bearer " + srv().admin_key
    path = os.path.join(A.work_dir, "models", "m1")
    results = []

    def ask(i):
        st, _, body = send_raw(completion(model="mb", stream=i % 2 == 0, max_tokens=40), timeout=120)
        results.append(st)

    for rnd in range(3):
        st, _, body = send_raw(req("POST", "/admin/models", {"name": "mb", "path": path}, key=admin))
        check(st in (200, 201), "round %d: add mb: %s %r" % (rnd, st, body[:200]))
        ts = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
        for t in ts:
            t.start()
        time.sleep(0.1 * rnd)
        send_raw(req("POST", "/admin/models/mb/unload", b"", key=admin))
        st, _, body = send_raw(req("DELETE", "/admin/models/mb", key=admin))
        check(st in (200, 204), "round %d: delete mb: %s %r" % (rnd, st, body[:200]))
        for t in ts:
            t.join(150)
        check(srv().alive(), "the server died")
    bad = [st for st in results if st not in (200, 404, 409, 503)]
    check(len(results) == 18 and not bad, "requests on a model deleted under them: %s" % results)
    print("      answers: %s" % {st: results.count(st) for st in set(results)})
    check_normal()


def test_long_request_beyond_timeout():
    """--timeout is for idle or slow clients: a completion that computes
    longer than it (--long-tokens tokens) is still answered, streamed or not."""
    n = A.long_tokens
    for stream in (False, True):
        t0 = time.time()
        st, _, body = send_raw(completion(max_tokens=n, prompt="Long", stream=stream), timeout=300)
        dt = time.time() - t0
        check(st == 200, "a %.1f s completion (--timeout %d, stream %s): %s %r" % (dt, TIMEOUT, stream, st, body[-200:]))
        if stream:
            check(b"data: [DONE]" in body[-40:], "the %.1f s stream did not end with [DONE]: %r" % (dt, body[-200:]))
        else:
            check(json.loads(body)["usage"]["completion_tokens"] == n, "usage: %r" % body[-200:])
        print("      stream %s: %d tokens in %.1f s%s" % (stream, n, dt, "" if dt > TIMEOUT else
                                                          " (faster than --timeout: not a test of it)"))


def test_no_smuggling():
    """A request refused before its body is read (401, 413) has its
    connection closed: the unread body, itself a request, is never run."""
    inner = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + srv().api_key.encode() + b"\r\n\r\n"
    for name, key, body in (("401", None, inner), ("413", True, inner + b" " * (MAX_BODY + 10))):
        c = socket.create_connection(("127.0.0.1", srv().port), timeout=10)
        data = req("POST", "/v1/completions", body, key=key).replace(b"Connection: close\r\n", b"")
        try:
            c.sendall(data)
        except OSError:
            pass
        got = b""
        c.settimeout(TIMEOUT + 5)
        try:
            while True:
                x = c.recv(65536)
                if not x:
                    break
                got += x
        except (socket.timeout, ConnectionResetError):
            pass
        c.close()
        check(got.startswith(b"HTTP/1.1 " + name.encode()), "%s: %r" % (name, got[:100]))
        check(got.count(b"HTTP/1.1 ") == 1 and b'"object":"list"' not in got,
              "the body of a refused request (%s) was run as a request: %r" % (name, got[:600]))


def read_all(c, timeout):
    """What the server sends on c until it closes it: (bytes, closed: whether
    it closed within timeout)."""
    got = b""
    c.settimeout(timeout)
    try:
        while True:
            x = c.recv(65536)
            if not x:
                return got, True
            got += x
    except socket.timeout:
        return got, False
    except ConnectionResetError:
        return got, True


def test_framing():
    """Requests whose body framing two parties could read differently, or
    that libmicrohttpd refuses by itself, get one JSON error in the server's
    format and the connection closed (RFC 9112 6.1, 6.3): a request
    smuggled behind them is never served (before: Transfer-Encoding with
    Content-Length was read as chunked and the rest served as a second
    request; a Content-Length of -1 got libmicrohttpd's status line and
    headers twice and an HTML page); a chunked body past --max-body is a
    413 as soon as it passes it (before: a chunk of 2^64-1 bytes was read
    until --body-timeout closed the connection without an answer); a chunk
    size past 2^64, which libmicrohttpd refuses mid-body, is the server's
    JSON 413 (before: libmicrohttpd's HTML page)."""
    key = srv().api_key.encode()
    inner = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key + b"\r\n\r\n"
    body = b'{"model":"m1","prompt":"hi","max_tokens":1}'
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + key +
            b"\r\nContent-Type: application/json\r\n")
    big = b"x" * (MAX_BODY + 1)
    cases = [
        # name, request (keep-alive, a request behind it), status, code
        ("TE and CL", head + b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n" % len(chunked(body)) +
         chunked(body) + inner, 400, None),
        ("CL and TE", head + b"Transfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n" + chunked(body) + inner,
         400, None),
        ("two TE", head + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(body) +
         inner, 400, None),
        ("TE identity", head + b"Transfer-Encoding: identity\r\n\r\n" + body + inner, 400, None),
        ("CL -1", head + b"Content-Length: -1\r\n\r\n" + inner, 400, None),
        ("CL +5", head + b"Content-Length: +5\r\n\r\nhello" + inner, 400, None),
        ("CL 1e3", head + b"Content-Length: 1e3\r\n\r\n" + inner, 400, None),
        ("CL 0x10", head + b"Content-Length: 0x10\r\n\r\n" + inner, 400, None),
        ("CL 2**70", head + b"Content-Length: %d\r\n\r\n" % 2 ** 70 + inner, 413, "request_too_large"),
        ("chunk of 2**64-1 past --max-body", head + b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n" + big,
         413, "request_too_large"),
        ("chunk size past 2**64", head + b"Transfer-Encoding: chunked\r\n\r\n1ffffffffffffffff\r\n" + body +
         b"\r\n0\r\n\r\n" + inner, 413, "request_too_large"),
    ]
    bad = []
    for name, data, want, code in cases:
        c = socket.create_connection(("127.0.0.1", srv().port), timeout=10)
        try:
            try:
                c.sendall(data)
            except OSError:
                pass
            got, closed = read_all(c, DEADLINE + TIMEOUT + 5)
        finally:
            c.close()
        head_, _, rest = got.partition(b"\r\n\r\n")
        n_status = got.count(b"HTTP/1.1 ")
        status = int(head_.split()[1]) if got.startswith(b"HTTP/1.1 ") else None
        e = error_of(rest)
        why = None
        if status != want:
            why = "status %s, want %d" % (status, want)
        elif n_status != 1 or b'"object":"list"' in got:
            why = "%d status lines, want one (and the request behind it not served)" % n_status
        elif not isinstance(e, dict) or not all(f in e for f in ("message", "type", "param", "code")):
            why = "the body is not one error in the server's format"
        elif code is not None and e.get("code") != code:
            why = "code %r, want %r" % (e.get("code"), code)
        elif not closed:
            why = "the connection stayed open"
        elif b"connection: close" not in head_.lower():
            why = "no Connection: close"
        print("      %-34s -> %s %s" % (name, status, "" if why is None else "  <-- " + why), flush=True)
        if why:
            bad.append("%s: %s: %r" % (name, why, got[:400]))
    check(not bad, "%d framing cases got the wrong answer:\n        %s" % (len(bad), "\n        ".join(bad)))
    check(srv().alive(), "the server died")
    check_normal()


def test_chunk_declared_huge():
    """A chunk that declares 2^64-1 (or 2^63) bytes and sends a few, then
    nothing: libmicrohttpd keeps a chunk's declared size to itself (no
    callback or option gives it to the server), so the deadlines are the
    bound: the connection is closed within --body-timeout (or --timeout, a
    silent client's, when shorter; plus the watcher's sweep and the
    machine's noise), the request is never served,
    and another client is answered at once meanwhile."""
    key = srv().api_key.encode()
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + key +
            b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    bound = DEADLINE + 2.5
    for size in (b"ffffffffffffffff", b"8000000000000000", b"ffffffffffffffff;ext=1"):
        c = socket.create_connection(("127.0.0.1", srv().port), timeout=10)
        try:
            t0 = time.time()
            c.sendall(head + size + b'\r\n{"model":"m1","prompt":"hi"')
            t1 = time.time()
            st, _, _ = send_raw(req("GET", "/health", key=None), timeout=10)
            health_s = time.time() - t1
            got, closed = read_all(c, bound + 5)
            took = time.time() - t0
        finally:
            c.close()
        print("      chunk size %-24s closed after %.1f s (bound %.1f s); /health meanwhile %s in %.2f s"
              % (size.decode(), took, bound, st, health_s), flush=True)
        check(st == 200 and health_s < 2, "/health while a chunk of %s waits: %s in %.2f s"
              % (size.decode(), st, health_s))
        check(closed and took <= bound, "a chunk of %s bytes with a few sent: closed %s after %.1f s, "
              "want within --body-timeout %d s + 2.5 s" % (size.decode(), closed, took, DEADLINE))
        check(b"200 OK" not in got and b'"choices"' not in got, "the request was served: %r" % got[:200])
    check_normal()


def test_log_injection():
    """Request fields that reach the log (the %-decoded path, a model name)
    with a newline, CR, ESC and U+0085 in them: each stays one line, the
    control bytes written as \\xNN, so no line can be forged."""
    forged = "1999-01-01T00:00:00.000Z info  admin: removed model m0"
    enc = forged.replace(" ", "%20")
    paths = ["/v1/models/x%0a" + enc, "/v1/models/x%0d%0a" + enc, "/v1/models/x%1b[2J%c2%85" + enc,
             "/nowhere%0a" + enc]
    for p in paths:
        st, _, _ = send_raw(req("GET", p))
        check(st in (400, 404), "GET %s: %s" % (p, st))
    # a model name from a body, through an admin add that names it in the log
    send_raw(req("POST", "/admin/models", {"name": "x\n" + forged, "path": "/nope"},
                 key="Bearer " + srv().admin_key))
    time.sleep(0.3)
    lines = srv().log_text().split("\n")
    bad = [ln for ln in lines if ln.startswith("1999-") or "\r" in ln or "\x1b" in ln or "\u0085" in ln]
    check(not bad, "forged log lines: %r" % bad[:3])
    check(any("\\x0a1999-01-01" in ln for ln in lines), "the escaped path is not in the log")
    check(any("\\x1b[2J\\xc2\\x85" in ln for ln in lines), "ESC and U+0085 are not escaped in the log")


def test_port_file():
    """--port-file: a target that is not a regular file (a FIFO, a device, a
    directory, a symbolic link) is refused at start with one line and left
    as it was; a link planted where the old code wrote its temporary
    (PATH.tmp) is not followed; the file holds the port while serving and is
    removed at a clean exit, with no temporary left beside it."""
    import stat
    import subprocess
    d = os.path.join(A.work_dir, "port-file")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    victim = os.path.join(d, "victim")
    with open(victim, "w") as f:
        f.write("precious\n")
    fifo = os.path.join(d, "fifo")
    os.mkfifo(fifo)
    link = os.path.join(d, "link")
    os.symlink(victim, link)
    m1 = os.path.join(A.work_dir, "models", "m1")
    for target in (fifo, "/dev/null", d, link):
        try:
            p = subprocess.run([A.bin, "serve", "--model", "m1=" + m1, "--port", "0", "--port-file", target],
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
        except subprocess.TimeoutExpired:
            raise harness.TestFailure("--port-file %s: still serving after 20 s (killed)" % target)
        err = p.stderr.decode(errors="replace").strip()
        check(p.returncode != 0 and "--port-file " + target in err and "regular file" in err and
              len(err.splitlines()) == 1, "--port-file %s: exit %d, stderr %r" % (target, p.returncode, err))
    check(stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.path.islink(link),
          "a refused --port-file target was replaced")
    # a link planted at PATH.tmp, where the port used to be written first
    s = harness.Server(A.bin, {"m1": m1}, d, log_level="warn")
    os.symlink(victim, s.port_file + ".tmp")
    s.start()
    try:
        with open(s.port_file) as f:
            txt = f.read()
        check(txt == "%d\n" % s.port and not os.path.islink(s.port_file), "the port file holds %r" % txt)
        with open(victim) as f:
            check(f.read() == "precious\n", "the file behind the planted PATH.tmp link was overwritten")
    finally:
        s.stop()
    check(not os.path.exists(s.port_file), "the port file is left after a clean exit")
    base = os.path.basename(s.port_file)
    left = [n for n in os.listdir(d) if base in n and n != base + ".tmp"]
    check(not left, "temporaries left beside the port file: %s" % left)


def random_request(rnd):
    """A request whose every field is valid, drawn at random: model, text
    or id prompt, max_tokens, sampling, stop strings, echo, stream, usage."""
    b = {"model": rnd.choice(["m1", FX, CHAT])}
    if b["model"] == CHAT:
        pieces = ["a", " the", "\u00e9", "\u4e2d", "\U0001F600", "\n", "{{", "%}", "<|im_end|>", '"', ""]
        b["messages"] = [{"role": rnd.choice(["system", "user", "assistant"]) if i else "user",
                          "content": "".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 10)))}
                         for i in range(rnd.randint(1, 5))]
    elif b["model"] == FX or rnd.random() < 0.2:
        b["prompt"] = [2] + [rnd.randrange(0, 256) for _ in range(rnd.randint(0, 20))]
    else:
        b["prompt"] = "".join(rnd.choice(["a", " the", "\u00e9", "\u4e2d", "\U0001F600", "\n", "1", "!", ""])
                              for _ in range(rnd.randint(0, 12)))
    b["max_tokens"] = rnd.randint(1, 24)
    if rnd.random() < 0.5:
        b["temperature"] = rnd.choice([0, 0.0, 1e-6, 0.7, 1, 2])
    if rnd.random() < 0.3:
        b["top_p"] = rnd.choice([1e-6, 0.5, 1])
    if rnd.random() < 0.3:
        b["top_k"] = rnd.choice([0, 1, 5, 100000])
    if rnd.random() < 0.5:
        b["seed"] = rnd.randrange(0, 2 ** 63)
    if rnd.random() < 0.3:
        st = ["".join(rnd.choice("ab \u00e9[]AZ") for _ in range(rnd.randint(1, 3))) for _ in range(rnd.randint(1, 4))]
        b["stop"] = st if rnd.random() < 0.7 else st[0]
    for f in ("echo", "stream"):
        if rnd.random() < 0.3 and not (f == "echo" and "messages" in b):
            b[f] = rnd.random() < 0.7
    if b.get("stream") and rnd.random() < 0.5:
        b["stream_options"] = {"include_usage": rnd.random() < 0.7}
    return b


def test_random_valid_requests():
    """--random-requests valid requests drawn at random, 8 at a time: every
    one is a 200 (a stream ending in data: [DONE]), never an error or a
    crash. Then the deterministic ones (greedy, seeded, top_k 1), each sent
    again with nothing else in flight and once more with stream flipped,
    give the same text and finish reason both ways. Not under the
    concurrent load: there a sequence's rows go through products with
    whatever other rows share its step (the GEMV up to 16 rows, the matrix
    product past them), whose rounding differs, and a seeded draw from
    random weights' near-flat distribution can turn on the last bit
    (docs/serving.md, "seed")."""
    import random
    rnd = random.Random(2026)
    reqs = [random_request(rnd) for _ in range(A.random_requests)]
    bad = []

    def outcome(b, body):
        """(text, finish_reason) of a 200's body, streamed or not."""
        if not b.get("stream"):
            c = json.loads(body)["choices"][0]
            return c["message"]["content"] if "messages" in b else c["text"], c["finish_reason"]
        text, fin = "", None
        for e in body.decode().split("\n\n"):
            if e.startswith("data: {"):
                for c in json.loads(e[6:]).get("choices", []):
                    text += c["delta"].get("content", "") if "messages" in b else c["text"]
                    fin = c["finish_reason"] or fin
        return text, fin

    def path(b):
        return "/v1/chat/completions" if "messages" in b else "/v1/completions"

    def worker(k):
        for b in reqs[k::8]:
            st, _, body = send_raw(req("POST", path(b), b), timeout=120)
            ok = st == 200 and (b"data: [DONE]" in body[-40:] if b.get("stream") else body.startswith(b"{"))
            if not ok:
                bad.append("%s -> %s %r" % (json.dumps(b)[:300], st, body[-300:]))

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    # the deterministic ones alone, then alone again with stream flipped:
    # the same text and finish
    det = [b for b in reqs if b.get("temperature", 1) == 0 or "seed" in b or b.get("top_k") == 1]
    for b in det:
        twin = dict(b, stream=not b.get("stream"))
        twin.pop("stream_options", None)
        st, _, body = send_raw(req("POST", path(b), b), timeout=120)
        st2, _, body2 = send_raw(req("POST", path(twin), twin), timeout=120)
        if st != 200 or st2 != 200 or outcome(b, body) != outcome(twin, body2):
            bad.append("%s: %s %r, with stream %s: %s %r" % (
                json.dumps(b)[:300], st, outcome(b, body) if st == 200 else body[-200:], twin["stream"],
                st2, outcome(twin, body2) if st2 == 200 else body2[-200:]))
    check(not bad, "%d of %d valid requests failed:\n        %s" %
          (len(bad), len(reqs), "\n        ".join(bad[:5])))


def test_survives():
    check_normal()


def test_sigterm_in_flight():
    """SIGTERM while a long stream runs (1200 tokens, longer than the test
    waits): /health and new completions answer 503; a second SIGTERM ends
    the grace period (--grace 60), the stream ends with an error event and
    data: [DONE], and the server exits 0."""
    s = socket.create_connection(("127.0.0.1", srv().port), timeout=60)
    s.sendall(completion(stream=True, max_tokens=1200, prompt="Long"))
    got = b""
    while got.count(b"data: ") < 2:
        r = s.recv(4096)
        check(r, "the stream ended early: %r" % got[-300:])
        got += r
    result = {}

    def drain():
        try:
            st, _, body = read_response(s, srv().grace + 60)
            result["body"] = body
        except OSError as e:
            result["err"] = e

    t = threading.Thread(target=drain)
    t.start()
    t0 = time.time()
    S["stopped"] = True
    srv().proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    # during the grace period: new work is refused (503, or the listener is closed)
    try:
        st, _, body = send_raw(completion(), timeout=30)
    except OSError:
        st, body = None, b""
    st_health = None
    try:
        st_health, _, _ = send_raw(req("GET", "/health", key=None), timeout=30)
    except OSError:
        pass
    t1 = time.time()
    srv().proc.send_signal(signal.SIGTERM)  # the second ends the grace period
    srv().stop(send=False)
    dt = time.time() - t0
    dt2 = time.time() - t1
    t.join(30)
    s.close()
    print("      exited 0 %.1f s after the first SIGTERM, %.1f s after the second, with a stream in "
          "flight; meanwhile a new completion got %s, /health %s" % (dt, dt2, st, st_health))
    check(dt2 < 15, "exit took %.1f s after the second SIGTERM (--grace %g)" % (dt2, srv().grace))
    check(st in (None, 503), "a completion during the grace period: %s %r" % (st, body[:200]))
    check(st_health in (None, 503), "/health during the grace period: %s" % st_health)
    tail = result.get("body", b"")
    check(b"data: [DONE]\n\n" in tail[-60:], "the stream cut by the shutdown does not end "
          "with data: [DONE]: %r" % tail[-300:])


def read_one(c, buf):
    """One response from a kept-alive connection: (status, headers, body,
    the bytes after it) or None when the connection ended before a whole
    one came (buf: bytes already read). A 1xx is skipped."""
    def more():
        x = c.recv(65536)
        if not x:
            raise EOFError
        return x
    try:
        while True:
            while b"\r\n\r\n" not in buf:
                buf += more()
            head, _, buf = buf.partition(b"\r\n\r\n")
            lines = head.decode(errors="replace").split("\r\n")
            st = int(lines[0].split()[1])
            if st >= 200:
                break
        h = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            h[k.strip().lower()] = v.strip()
        if "content-length" in h:
            n = int(h["content-length"])
            while len(buf) < n:
                buf += more()
            return st, h, buf[:n], buf[n:]
        body = b""
        while True:  # chunked
            while b"\r\n" not in buf:
                buf += more()
            size, _, buf = buf.partition(b"\r\n")
            n = int(size.split(b";")[0], 16)
            while len(buf) < n + 2:
                buf += more()
            body += buf[:n]
            buf = buf[n + 2:]
            if n == 0:
                return st, h, body, buf
    except (EOFError, OSError, ValueError, IndexError):
        return None


def test_sigterm_flood():
    """SIGTERM (--grace 1) while 96 kept-alive connections send mixed
    streamed and non-streamed requests back to back (each until an answer
    says Connection: close): every request sent is answered whole (200 with its JSON or a stream ending in data: [DONE],
    or 503: an error body, or an error event and [DONE] on a stream), none
    is met by a closed connection; the server exits 0."""
    import random
    import select
    m1 = os.path.join(A.work_dir, "models", "m1")
    fx = harness.fixture_with_id_tokenizer(A.work_dir, "pre_ln_f32")
    s = harness.Server(A.bin, {"m1": m1, FX: fx}, A.work_dir, grace=1, max_connections=512, queue_cap=4096,
                       extra=["--max-connections-per-client", "512"])
    s.start()
    S["srv"], main_srv = s, S["srv"]
    n_conn = 96
    results, lost, started = [], [], []
    lock = threading.Lock()

    def client(k):
        rnd = random.Random(k)
        try:
            c = socket.create_connection(("127.0.0.1", s.port), timeout=120)
        except OSError:
            return
        buf = b""
        for _ in range(1000):
            stream = rnd.random() < 0.5
            data = completion(stream=stream, max_tokens=rnd.randint(1, 32),
                              model=rnd.choice(["m1", FX]), prompt=[2, 5, 6]).replace(b"Connection: close\r\n", b"")
            # a connection the server closed while it was idle is not a request lost
            r, _, _ = select.select([c], [], [], 0)
            if r and not buf:
                try:
                    if c.recv(1, socket.MSG_PEEK) == b"":
                        break
                except OSError:
                    break
            try:
                c.sendall(data)
            except OSError:
                break
            with lock:
                started.append(1)
            got = read_one(c, buf)
            if got is None:
                with lock:
                    lost.append("stream" if stream else "plain")
                break
            st, h, body, buf = got
            ok = st == 503 or (st == 200 and (body.endswith(b"data: [DONE]\n\n") if stream
                                              else body.startswith(b"{")))
            if stream and st == 200 and b'"error"' in body:
                ok = body.endswith(b"data: [DONE]\n\n")
            with lock:
                results.append((st, ok, stream))
            # a kept-alive client goes on until the server says close
            if h.get("connection", "").lower() == "close":
                break
            time.sleep(rnd.random() * 0.03)  # the client's own work before its next request
        c.close()

    try:
        ts = [threading.Thread(target=client, args=(k,)) for k in range(n_conn)]
        for t in ts:
            t.start()
        t0 = time.time()
        while time.time() - t0 < 3 and len(results) < 40:
            time.sleep(0.05)
        t1 = time.time()
        s.proc.send_signal(signal.SIGTERM)
        for t in ts:
            t.join(120)
        t2 = time.time()
        s.stop(send=False)
        print("      flood %.1f s before SIGTERM, clients done %.1f s after, exit %.1f s after" %
              (t1 - t0, t2 - t1, time.time() - t1))
    finally:
        S["srv"] = main_srv
        s.kill()
    bad = [r for r in results if not r[1]]
    codes = {}
    for st, _, stream in results:
        codes[(st, stream)] = codes.get((st, stream), 0) + 1
    print("      %d requests sent, %d answered: %s; lost: %d" %
          (len(started), len(results), sorted(codes.items(), key=str), len(lost)))
    check(not lost, "%d of %d requests met a closed connection without an answer during SIGTERM (%s)" %
          (len(lost), len(started), lost[:10]))
    check(not bad, "%d answers were not whole: %s" % (len(bad), bad[:5]))
    check(any(st == 503 for st, _, _ in results), "no request got the shutdown's 503: not a test of it")


def chat_copy(src):
    """src's files (hard links) and a chat template: m1 that takes chat requests."""
    d = os.path.join(A.work_dir, "hostile-chat")
    if not os.path.exists(os.path.join(d, "chat_template.jinja")):
        if os.path.exists(d):
            shutil.rmtree(d)
        shutil.copytree(src, d + ".tmp", copy_function=os.link)
        shutil.copy(CHAT_TEMPLATE, os.path.join(d + ".tmp", "chat_template.jinja"))
        os.rename(d + ".tmp", d)
    return d


def main():
    global A
    p = harness.common_args(__doc__)
    p.add_argument("--long-tokens", type=int, default=400,
                   help="tokens of the completion that computes longer than --timeout (default 400)")
    p.add_argument("--random-requests", type=int, default=200,
                   help="valid requests drawn at random (default 200)")
    p.add_argument("--only", default=None,
                   help="run only these tests (comma-separated names, e.g. test_slowloris)")
    A = harness.resolve_args(p.parse_args())
    models = harness.tiny_models(A.bin, A.work_dir, 1)
    served = dict(models)
    served[FX] = harness.fixture_with_id_tokenizer(A.work_dir, "pre_ln_f32")
    served[CHAT] = chat_copy(list(models.values())[0])
    s = harness.Server(A.bin, served, A.work_dir, device_budget=harness.room_for(models, 1),
                       timeout=TIMEOUT, max_connections=MAX_CONN, max_body=MAX_BODY, grace=60,
                       model_root=os.path.join(A.work_dir, "models"),
                       extra=["--header-timeout", str(DEADLINE), "--body-timeout", str(DEADLINE),
                              "--max-connections-per-client", str(PER_CLIENT)])
    S["srv"] = s
    s.start()
    print("server on port %d" % s.port)
    tests = [test_table, test_content_length_lies, test_slowloris, test_slowloris_deadlines,
             test_slowloris_one_address, test_too_many_connections,
             test_disconnect_mid_stream, test_half_close, test_disconnect_storm, test_admin_races, test_long_request_beyond_timeout,
             test_no_smuggling, test_framing, test_chunk_declared_huge, test_log_injection, test_port_file, test_random_valid_requests, test_survives,
             test_sigterm_in_flight, test_sigterm_flood]
    if A.only:
        want = set(A.only.split(","))
        unknown = want - {t.__name__ for t in tests}
        if unknown:
            sys.exit("FAIL: --only: no test %s" % ", ".join(sorted(unknown)))
        tests = [t for t in tests if t.__name__ in want]
    failures = harness.run_tests(tests, S)
    if not S.get("stopped"):
        try:
            s.stop()
        except harness.TestFailure as e:
            failures += 1
            print("FAIL  shutdown: %s" % e)
    elif s.sanitizer_report():
        failures += 1
        print("FAIL  sanitizer report: %s" % s.sanitizer_report())
    if A.keep or failures:
        print("server log: %s" % s.log_path)
    if not failures:
        harness.cleanup_args(A)
    print("%d of %d failed" % (failures, len(tests)) if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
