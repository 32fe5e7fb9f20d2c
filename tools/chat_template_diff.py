#!/usr/bin/env python3
"""Differential check of `shardswap chat-template` against transformers.

Renders every template in a directory with conversations richer than
tests/fixtures/chat_templates/cases.json's (tool calls, tools, reasoning,
content lists, null content, chat_template_kwargs) through transformers' render_jinja_template and
through the binary, and prints each case whose output (or failure) differs.
Needs transformers and jinja2 (the /root/hf venv); not part of the test suite.

  python3 tools/chat_template_diff.py BIN TEMPLATE_DIR [NAME...]
"""
import json, os, subprocess, sys, tempfile

from transformers.utils.chat_template_utils import render_jinja_template, _normalize_chat_messages

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City"},
                         "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
KWARGS = {"enable_thinking": False, "reasoning_effort": "low", "thinking": True}
CONVS = {
    "tool_call": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": None, "tool_calls": [CALL]},
                  {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 21}"},
                  {"role": "assistant", "content": "It is 21C."}, {"role": "user", "content": "Thanks"}],
    "reasoning": [{"role": "user", "content": "2+2?"},
                  {"role": "assistant", "content": "4", "reasoning_content": "Add them."},
                  {"role": "user", "content": "3+3?"}],
    "content_list": [{"role": "user", "content": [{"type": "text", "text": "Look: "}, {"type": "text", "text": "hi"}]}],
    "numbers": [{"role": "user", "content": "x", "extra": 1.5, "n": 3, "flag": True}],
    "two_calls": [{"role": "user", "content": "Weather in Paris and Rome?"},
                  {"role": "assistant", "content": "", "tool_calls": [
                      {"id": "a1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                      {"id": "a2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome", "unit": "c"}}}]},
                  {"role": "tool", "tool_call_id": "a1", "content": "21"},
                  {"role": "tool", "tool_call_id": "a2", "content": "25"},
                  {"role": "user", "content": "And London?"}],
    "multimodal": [{"role": "system", "content": [{"type": "text", "text": "Sys"}]},
                   {"role": "user", "content": [{"type": "image", "url": "http://x/y.png"},
                                                {"type": "text", "text": "What is this?"}]},
                   {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]}],
    "thinking": [{"role": "user", "content": "Hi"},
                 {"role": "assistant", "content": "<think>hmm</think>Hello", "thinking": "hmm"},
                 {"role": "user", "content": "Again"}],
}


def main():
    binary, tdir = sys.argv[1], sys.argv[2]
    names = sys.argv[3:] or sorted(f[:-6] for f in os.listdir(tdir) if f.endswith(".jinja"))
    os.environ["TZ"] = "UTC"
    bad = total = 0
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump({"bos_token": "<s>", "eos_token": "</s>"}, f)
        for name in names:
            src = open(os.path.join(tdir, name + ".jinja")).read()
            for cname, msgs in CONVS.items():
                for tools, kwargs in ((None, {}), (TOOLS, {}), (None, KWARGS)):
                    for agp in (False, True):
                        total += 1
                        try:
                            want = render_jinja_template([_normalize_chat_messages(msgs)], tools=tools,
                                                         chat_template=src, add_generation_prompt=agp,
                                                         bos_token="<s>", eos_token="</s>", **kwargs)[0][0]
                        except Exception as e:  # noqa: BLE001
                            want = None
                            werr = f"{type(e).__name__}: {e}"
                        body = {"messages": msgs, "add_generation_prompt": agp}
                        if tools:
                            body["tools"] = tools
                        if kwargs:
                            body["chat_template_kwargs"] = kwargs
                        p = subprocess.run([binary, "chat-template", "--model", d, "--template",
                                            os.path.join(tdir, name + ".jinja")],
                                           input=json.dumps(body).encode(), capture_output=True)
                        got = p.stdout.decode() if p.returncode == 0 else None
                        if want == got or (want is None and got is None):
                            continue
                        bad += 1
                        print(f"== {name} {cname} tools={bool(tools)} kwargs={kwargs} agp={agp}")
                        if want is None:
                            print(f"   transformers failed: {werr[:200]}\n   shardswap rendered {got[:200]!r}")
                        elif got is None:
                            print(f"   shardswap failed: {p.stderr.decode().strip()[:300]}")
                        else:
                            i = next((k for k in range(min(len(want), len(got))) if want[k] != got[k]),
                                     min(len(want), len(got)))
                            print(f"   differ at {i}:\n   want {want[max(0, i - 80):i + 80]!r}\n   got  {got[max(0, i - 80):i + 80]!r}")
    print(f"{bad} of {total} cases differ")


main()
