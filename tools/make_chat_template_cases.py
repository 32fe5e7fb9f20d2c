#!/usr/bin/env python3
"""Writes the chat-template differential corpus: tests/fixtures/chat_templates/cases.json
(and CONSTRUCTS.md, an inventory of the Jinja constructs the templates use).

Every template in tests/fixtures/chat_templates/templates/*.jinja is rendered
with every conversation below and add_generation_prompt false and true, by
transformers' own renderer: transformers.utils.chat_template_utils.
render_jinja_template, the function apply_chat_template calls, which compiles
with _compile_jinja_template (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, the `generation` extension, jinja2.ext.loopcontrols, its
`tojson` filter, and the globals raise_exception, strftime_now, dict,
namespace). shardswap's C Jinja engine (src/template) must give the same text,
or fail where transformers fails.

What the template sees (exactly what render_jinja_template passes when called
as apply_chat_template(conversation, tokenize=False, add_generation_prompt=X)
with no tools and no documents, except that only bos_token and eos_token are
passed of the tokenizer's special tokens):

    messages              the conversation: a list of {"role", "content"} dicts,
                          content always a string
    add_generation_prompt false / true
    tools                 None (defined, and none: `tools is defined` is true,
                          `tools is none` true, `tools` falsy)
    documents             None (likewise)
    bos_token, eos_token  strings, per template (TOKENS below; "<s>"/"</s>"
                          where nothing better is known)

plus the environment's globals (raise_exception, strftime_now, dict,
namespace, and Jinja's own range, lipsum, cycler, joiner). Nothing else: no
enable_thinking, reasoning_effort, date_string, builtin_tools,
custom_tools, ... (undefined). render_jinja_template's own message
preprocessing (_plain_template_data, _alias_reasoning_fields) is a no-op on
these messages (no None values, no reasoning fields).

strftime_now is pinned: `datetime` in chat_template_utils is replaced by a
subclass whose now() is NOW (unix seconds, below), and the script runs with
TZ=UTC, so strftime_now(fmt) == time.strftime(fmt, time.gmtime(NOW)).

Every case is checked against the public API too: the script stops unless
PreTrainedTokenizerFast.apply_chat_template(messages, chat_template=...,
tokenize=False, add_generation_prompt=...) of an in-memory tokenizer whose
only special tokens are bos_token and eos_token gives the same text (or
fails too, with the same message for raise_exception).

cases.json also says, per template, whether rendering with `tools` and
`documents` not passed at all (undefined instead of None) would give a
different result for any case ("tools_undefined_differs"), for an engine that
passes NULL tools as undefined.

Regenerate (no network; transformers 5.24.0 and jinja2 3.1.6 produced the
committed file; the versions are written into cases.json):

    # only if the templates change: copy them verbatim
    /root/hf/bin/python3 tools/make_chat_template_cases.py --import-templates DIR
    /root/hf/bin/python3 tools/make_chat_template_cases.py [--check]

--check regenerates in memory and exits 1 if cases.json or CONSTRUCTS.md
would change.
"""

import os
import time

os.environ["TZ"] = "UTC"
time.tzset()

import argparse  # noqa: E402
import calendar  # noqa: E402
import collections  # noqa: E402
import datetime as _dt  # noqa: E402
import glob  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402

import jinja2  # noqa: E402
import jinja2.meta  # noqa: E402
import jinja2.nodes as N  # noqa: E402
import transformers  # noqa: E402
from transformers.utils import chat_template_utils as ctu  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIX = os.path.join(ROOT, "tests", "fixtures", "chat_templates")
TEMPLATES = os.path.join(FIX, "templates")
OUT = os.path.join(FIX, "cases.json")
CONSTRUCTS = os.path.join(FIX, "CONSTRUCTS.md")

# 2026-03-05 08:09:07 UTC: day, hour, minute and second all below 10, so a
# missing zero pad (%d, %H, ...) shows.
NOW = calendar.timegm((2026, 3, 5, 8, 9, 7))


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        if tz is None:
            return _dt.datetime.fromtimestamp(NOW)  # local time, and TZ=UTC
        return _dt.datetime.fromtimestamp(NOW, tz)

    @classmethod
    def today(cls):
        return cls.now()

    @classmethod
    def utcnow(cls):
        return _dt.datetime.fromtimestamp(NOW, _dt.timezone.utc).replace(tzinfo=None)


ctu.datetime = _FixedDatetime  # strftime_now calls datetime.now() through this global

DEFAULT_TOKENS = ("<s>", "</s>")
LLAMA3 = ("<|begin_of_text|>", "<|eot_id|>")
DEEPSEEK = ("<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>")
COHERE = ("<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>")
QWEN = ("<|endoftext|>", "<|im_end|>")
GEMMA = ("<bos>", "<eos>")
LFM = ("<|startoftext|>", "<|im_end|>")
# bos_token/eos_token per template, inferred from the model family (the
# tokenizers' special tokens as published); templates that set their own
# (ByteDance-Seed-OSS, MiniMax-M3, tencent-Hy3) or do not read them get the
# family's pair or the default.
TOKENS = {
    "Cohere2MoE": COHERE,
    "CohereForAI-c4ai-command-r-plus-tool_use": COHERE,
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": COHERE,
    "LFM2-8B-A1B": LFM,
    "LFM2.5-8B-A1B": LFM,
    "LFM2.5-Instruct": LFM,
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": ("<|begin_of_text|>", "<|im_end|>"),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": ("<|begin_of_text|>", "<|im_end|>"),
    "fireworks-ai-llama-3-firefunction-v2": LLAMA3,
    "meetkai-functionary-medium-v3.1": LLAMA3,
    "meetkai-functionary-medium-v3.2": LLAMA3,
    "meta-llama-Llama-3.1-8B-Instruct": LLAMA3,
    "meta-llama-Llama-3.2-3B-Instruct": LLAMA3,
    "meta-llama-Llama-3.3-70B-Instruct": LLAMA3,
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": DEEPSEEK,
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": DEEPSEEK,
    "deepseek-ai-DeepSeek-V3.1": DEEPSEEK,
    "deepseek-ai-DeepSeek-V3.2": DEEPSEEK,
    "deepseek-ai-DeepSeek-V4": DEEPSEEK,
    "deepseek-ai-DeepSeek-V4-Flash-0731": DEEPSEEK,
    "llama-cpp-deepseek-r1": DEEPSEEK,
    "google-gemma-2-2b-it": GEMMA,
    "google-gemma-4-31B-it": GEMMA,
    "google-gemma-4-31B-it-interleaved": GEMMA,
    "microsoft-Phi-3.5-mini-instruct": ("<s>", "<|endoftext|>"),
    "Qwen-QwQ-32B": QWEN,
    "Qwen-Qwen2.5-7B-Instruct": QWEN,
    "Qwen-Qwen3-0.6B": QWEN,
    "Qwen3-Coder": QWEN,
    "Qwen3.5-4B": QWEN,
    "ByteDance-Seed-OSS": ("<seed:bos>", "<seed:eos>"),
    "MiniMax-M3": ("]~b]", "[e~["),
    "openai-gpt-oss-120b": ("<|startoftext|>", "<|return|>"),
}

S = "You are a helpful assistant."
CONVERSATIONS = [
    ("user_only", [("user", "Hello!")]),
    ("system_user", [("system", S), ("user", "What is the capital of France?")]),
    ("multi_turn", [
        ("system", S),
        ("user", "What is 2 + 2?"),
        ("assistant", "2 + 2 = 4."),
        ("user", "And times 3?"),
    ]),
    ("long_multi_turn", [
        ("user", "Name a prime number."),
        ("assistant", "7 is prime."),
        ("user", "Another one, larger than 7?"),
        ("assistant", "11."),
        ("user", "Now the sum of both."),
    ]),
    ("unicode", [
        ("system", "Réponds en français, s'il te plaît. Ça va ? Naïve café, Ångström, Straße."),
        ("user", "你好，世界！こんにちは。안녕하세요. Emoji: 😀👍🏽👩\u200d💻🇫🇷 — مرحبا بالعالم — שלום עולם — Привет"),
        ("assistant", "Bonjour ! 👋 中文也可以。 \u202eRTL override\u202c end"),
        ("user", "Ελληνικά: αβγ; math: ∑ x² ≤ ∞; NBSP:\u00a0; ZWSP:\u200b."),
    ]),
    ("quotes_backslashes", [
        ("system", "Quote 'single' and \"double\" and `back` ticks."),
        ("user", "Path C:\\Users\\me\\new and a literal \\n and \\\\ and \\\" plus JSON {\"a\": \"b\\\"c\"}"),
        ("assistant", "It's \"fine\": '\\t' is a tab escape;\ta real tab."),
        ("user", "End with a backslash \\"),
    ]),
    ("jinja_like", [
        ("system", "Braces {} {{}} and {%%} literally."),
        ("user", "Render {{ x }} and {% if true %}yes{% endif %} and {# c #} and {{ messages[0] }} }}{{ %}{%"),
        ("assistant", "{{ raise_exception('no') }} {% for i in range(3) %}{{ i }}{% endfor %}"),
        ("user", "{%- raw -%}{{ '{{' }}{% endraw %} <|im_end|> </s>"),
    ]),
    ("whitespace", [
        ("system", "\n\t  You are terse.  \n\n"),
        ("user", "   leading and trailing spaces   "),
        ("assistant", "\n\nSure.\n \n"),
        ("user", "\nline one\n\n  line two\t\n"),
    ]),
    ("empty_content", [
        ("system", ""),
        ("user", ""),
        ("assistant", ""),
        ("user", ""),
    ]),
    ("assistant_last", [
        ("system", S),
        ("user", "Write a haiku about rain."),
        ("assistant", "Soft rain on the roof"),
    ]),
]


def conversations():
    return [{"name": n, "messages": [{"role": r, "content": c} for r, c in msgs]} for n, msgs in CONVERSATIONS]


def template_names():
    return sorted(os.path.basename(p)[: -len(".jinja")] for p in glob.glob(os.path.join(TEMPLATES, "*.jinja")))


def read_template(name):
    with open(os.path.join(TEMPLATES, name + ".jinja"), encoding="utf-8", newline="") as f:
        return f.read()


def _template_line(tb):
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _is_raise_exception(e):
    tb = e.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "raise_exception" and code.co_filename == ctu.__file__:
            return True
        tb = tb.tb_next
    return False


def render(src, msgs, agp, bos, eos, tools_undefined=False):
    """("text", str) or ("error", kind, message, line)."""
    msgs = json.loads(json.dumps(msgs))  # a fresh copy
    try:
        if tools_undefined:
            out = ctu._compile_jinja_template(src).render(
                messages=msgs, add_generation_prompt=agp, bos_token=bos, eos_token=eos)
        else:
            rendered, _ = ctu.render_jinja_template(
                conversations=[msgs], chat_template=src, add_generation_prompt=agp,
                bos_token=bos, eos_token=eos)
            out = rendered[0]
        return ("text", out)
    except Exception as e:  # noqa: BLE001 - any failure is a case
        if _is_raise_exception(e):
            return ("error", "raise_exception", str(e), _template_line(e.__traceback__))
        return ("error", "jinja", f"{type(e).__name__}: {e}", _template_line(e.__traceback__))


_TOKENIZERS = {}


def via_apply_chat_template(src, msgs, agp, bos, eos):
    """The same case through the public API: PreTrainedTokenizerFast.apply_chat_template
    (tokenize=False) of an in-memory tokenizer whose only special tokens are bos and eos."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    if (bos, eos) not in _TOKENIZERS:
        tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({bos: 0, eos: 1}, unk_token=None)),
                                      bos_token=bos, eos_token=eos)
        assert tok.special_tokens_map == {"bos_token": bos, "eos_token": eos}, tok.special_tokens_map
        _TOKENIZERS[(bos, eos)] = tok
    try:
        return ("text", _TOKENIZERS[(bos, eos)].apply_chat_template(
            json.loads(json.dumps(msgs)), chat_template=src, tokenize=False, add_generation_prompt=agp))
    except Exception as e:  # noqa: BLE001
        return ("error", type(e).__name__, str(e))


def compile_error(src):
    try:
        ctu._compile_jinja_template(src)
        return None
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}", getattr(e, "lineno", None)


def build():
    convs = conversations()
    tmpl_info = {}
    cases = []
    summary = []
    for name in template_names():
        src = read_template(name)
        bos, eos = TOKENS.get(name, DEFAULT_TOKENS)
        info = {"bos_token": bos, "eos_token": eos,
                "sha256": hashlib.sha256(src.encode("utf-8")).hexdigest()}
        ce = compile_error(src)
        n_ok = n_raise = n_err = 0
        differs = False
        if ce is not None:
            info["compile_error"] = ce[0]
            if ce[1] is not None:
                info["compile_error_line"] = ce[1]
        for conv in convs:
            for agp in (False, True):
                c = {"template": name, "conversation": conv["name"], "add_generation_prompt": agp}
                if ce is not None:
                    c.update({"error": ce[0], "error_kind": "compile"})
                    if ce[1] is not None:
                        c["line"] = ce[1]
                    cases.append(c)
                    continue
                r = render(src, conv["messages"], agp, bos, eos)
                if r[0] == "text":
                    c["text"] = r[1]
                    n_ok += 1
                else:
                    c.update({"error": r[2], "error_kind": r[1]})
                    if r[3] is not None:
                        c["line"] = r[3]
                    if r[1] == "raise_exception":
                        n_raise += 1
                    else:
                        n_err += 1
                if render(src, conv["messages"], agp, bos, eos, tools_undefined=True)[:2] != r[:2]:
                    differs = True
                v = via_apply_chat_template(src, conv["messages"], agp, bos, eos)
                if (v[0] == "text") != (r[0] == "text") or (v[0] == "text" and v[1] != r[1]) \
                        or (r[0] == "error" and r[1] == "raise_exception" and v[2] != r[2]):
                    sys.exit(f"self-check: {name} / {conv['name']} / agp={agp}: render_jinja_template "
                             f"gave {r!r:.300}, apply_chat_template {v!r:.300}")
                cases.append(c)
        info["tools_undefined_differs"] = differs
        tmpl_info[name] = info
        summary.append((name, n_ok, n_raise, n_err, ce is not None, differs))
    doc = {
        "generator": "tools/make_chat_template_cases.py",
        "versions": {"transformers": transformers.__version__, "jinja2": jinja2.__version__,
                     "python": "%d.%d.%d" % sys.version_info[:3]},
        "now": NOW,
        "now_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW)),
        "tz": "UTC",
        "globals": {
            "messages": "the conversation's messages",
            "add_generation_prompt": "the case's bool",
            "bos_token": "templates[name].bos_token",
            "eos_token": "templates[name].eos_token",
            "tools": None,
            "documents": None,
            "environment": ["raise_exception", "strftime_now", "dict", "namespace",
                            "range", "lipsum", "cycler", "joiner"],
        },
        "self_check": "every case is also rendered by PreTrainedTokenizerFast.apply_chat_template(messages, "
                      "chat_template=..., tokenize=False, add_generation_prompt=...) of a tokenizer whose only "
                      "special tokens are the template's bos_token and eos_token: same text, or an error too "
                      "(the same message for raise_exception)",
        "default_tokens": {"bos_token": DEFAULT_TOKENS[0], "eos_token": DEFAULT_TOKENS[1]},
        "templates": tmpl_info,
        "conversations": convs,
        "cases": cases,
    }
    return doc, summary


def dump(doc):
    j = lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":"))  # noqa: E731
    lines = ["{"]
    for k in ("generator", "versions", "now", "now_utc", "tz", "globals", "self_check", "default_tokens"):
        lines.append(f"{j(k)}:{j(doc[k])},")
    lines.append('"templates":{')
    items = list(doc["templates"].items())
    for i, (k, v) in enumerate(items):
        lines.append(f"{j(k)}:{j(v)}" + ("," if i + 1 < len(items) else ""))
    lines.append("},")
    lines.append('"conversations":[')
    for i, c in enumerate(doc["conversations"]):
        lines.append(j(c) + ("," if i + 1 < len(doc["conversations"]) else ""))
    lines.append("],")
    lines.append('"cases":[')
    for i, c in enumerate(doc["cases"]):
        lines.append(j(c) + ("," if i + 1 < len(doc["cases"]) else ""))
    lines.append("]")
    lines.append("}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- constructs

GLOBAL_FUNCS = {"raise_exception", "strftime_now", "namespace", "dict", "range", "lipsum", "cycler", "joiner"}
BINOPS = {N.Add: "+", N.Sub: "-", N.Mul: "*", N.Div: "/", N.FloorDiv: "//", N.Mod: "%", N.Pow: "**",
          N.And: "and", N.Or: "or", N.Concat: "~"}
CMP = {"eq": "==", "ne": "!=", "lt": "<", "lteq": "<=", "gt": ">", "gteq": ">=", "in": "in", "notin": "not in"}


def constructs_of(src):
    """A set of (category, item) a template uses."""
    env = ctu._compile_jinja_template(src).environment
    ast = env.parse(src)
    feats = set()
    add = lambda cat, item: feats.add((cat, item))  # noqa: E731
    macros = {m.name for m in ast.find_all(N.Macro)}
    assigned = {n.name for n in ast.find_all(N.Name) if n.ctx in ("store", "param")}
    assigned |= macros
    if src.endswith("\n"):
        add("lexical", "template text ends with a newline (Jinja drops one trailing newline: keep_trailing_newline is off)")
    for _, kind, value in env.lex(src):
        if kind == "string":
            for esc in re.findall(r"\\(u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|U[0-9a-fA-F]{8}|N\{[^}]*\}|.)", value, re.S):
                e = esc[0] if esc[0] in "uxUN" else esc
                add("lexical", "escape in a string literal: `\\" + {"u": "uXXXX", "x": "xXX", "U": "UXXXXXXXX", "N": "N{...}", "\n": "<newline>"}.get(e, e) + "`")
    # lexical
    for tok, label in (("{%-", "`{%-`"), ("-%}", "`-%}`"), ("{{-", "`{{-`"), ("-}}", "`-}}`"),
                       ("{%+", "`{%+`"), ("+%}", "`+%}`"), ("{#", "comment `{# #}`"),
                       ("{#-", "`{#-`"), ("-#}", "`-#}`")):
        if tok in src:
            add("lexical", label)
    if re.search(r"\{%-?\s*raw\s*-?%\}", src):
        add("lexical", "`{% raw %}`")
    for node in ast.find_all(N.Node):
        t = type(node)
        if t is N.For:
            add("statement", "for")
            if node.else_:
                add("statement", "for ... else")
            if node.test is not None:
                add("statement", "for ... if COND (loop filter)")
            if node.recursive:
                add("statement", "for ... recursive")
            if isinstance(node.target, N.Tuple):
                add("statement", "for a, b in ... (unpacking)")
        elif t is N.If:
            add("statement", "if")
            if node.elif_:
                add("statement", "elif")
            if node.else_:
                add("statement", "else")
        elif t is N.Macro:
            add("statement", "macro")
            if node.defaults:
                add("statement", "macro with default arguments")
        elif t is N.CallBlock:
            if isinstance(node.call, N.Call) and isinstance(node.call.node, N.ExtensionAttribute):
                add("statement", "{% generation %} (transformers extension)")
            else:
                add("statement", "call block")
        elif t is N.FilterBlock:
            add("statement", "filter block")
        elif t is N.Assign:
            add("statement", "set")
            if isinstance(node.target, N.NSRef):
                add("statement", "set ns.attr = (namespace assignment)")
            if isinstance(node.target, N.Tuple):
                add("statement", "set a, b = (unpacking)")
        elif t is N.AssignBlock:
            add("statement", "set block ({% set x %}...{% endset %})")
            if node.filter is not None:
                add("statement", "set block with filter")
        elif t is N.With:
            add("statement", "with")
        elif t in (N.Include, N.Import, N.FromImport, N.Extends, N.Block):
            add("statement", t.__name__.lower())
        elif t is N.Break:
            add("statement", "break")
        elif t is N.Continue:
            add("statement", "continue")
        elif t is N.ExprStmt:
            add("statement", "do")
        elif t is N.Filter:
            add("filter", node.name)
            if node.name not in env.filters:
                add("unknown", f"filter `{node.name}` (line {node.lineno})")
            if node.args:
                add("filter", f"{node.name}({len(node.args)} positional arg{'s' if len(node.args) > 1 else ''})")
            if node.kwargs:
                add("filter", f"{node.name}(keyword args: {', '.join(sorted(k.key for k in node.kwargs))})")
            if node.name in ("select", "reject", "selectattr", "rejectattr"):
                i = 1 if node.name.endswith("attr") else 0
                if len(node.args) > i and isinstance(node.args[i], N.Const):
                    add("test", f"{node.args[i].value} (named in {node.name})")
        elif t is N.Test:
            add("test", node.name)
            if node.name not in env.tests:
                add("unknown", f"test `{node.name}` (line {node.lineno})")
            if node.args:
                add("test", f"{node.name}(with an argument)")
        elif t is N.Call:
            f = node.node
            if isinstance(f, N.Name):
                if f.name in macros:
                    add("call", "macro call")
                elif f.name in GLOBAL_FUNCS:
                    add("call", f"{f.name}()")
                else:
                    add("call", f"{f.name}() (other name)")
            elif isinstance(f, N.Getattr):
                if isinstance(f.node, N.Name) and f.node.name == "loop":
                    add("loop", f"loop.{f.attr}()")
                else:
                    add("method", f".{f.attr}()")
                    add("method", f".{f.attr}() with {len(node.args)} positional arg{'' if len(node.args) == 1 else 's'}")
                    if isinstance(f.node, N.Const) and isinstance(f.node.value, str):
                        add("method", f"'literal'.{f.attr}()")
            elif isinstance(f, N.ExtensionAttribute):
                pass  # the {% generation %} block's own call
            else:
                add("call", "call of an expression")
            if node.kwargs:
                add("call", "call with keyword args")
            if node.dyn_args is not None or node.dyn_kwargs is not None:
                add("call", "call with *args/**kwargs")
        elif t is N.Getattr:
            if isinstance(node.node, N.Name) and node.node.name == "loop":
                add("loop", f"loop.{node.attr}")
            elif isinstance(node.node, N.Name) and node.node.name == "caller":
                add("call", "caller")
        elif t is N.Getitem:
            if isinstance(node.arg, N.Slice):
                s = node.arg
                desc = "[" + ("a" if s.start else "") + ":" + ("b" if s.stop else "") + (":c" if s.step else "") + "]"
                add("expression", f"slice {desc}")
                for part in (s.start, s.stop, s.step):
                    if isinstance(part, N.Neg) or (isinstance(part, N.Const) and isinstance(part.value, int) and part.value < 0):
                        add("expression", "slice with negative bound")
            else:
                add("expression", "subscript x[i] / x['k']")
                if isinstance(node.arg, N.Neg) or (isinstance(node.arg, N.Const) and isinstance(node.arg.value, int) and node.arg.value < 0):
                    add("expression", "negative index x[-1]")
        elif t is N.CondExpr:
            add("expression", "inline if (a if c else b)" if node.expr2 is not None else "inline if without else")
        elif t in BINOPS:
            add("operator", BINOPS[t])
            if t is N.Add and (isinstance(node.left, N.List) or isinstance(node.right, N.List)):
                add("operator", "list + list (concatenation)")
            if t is N.Mul and any(isinstance(x, N.Const) and isinstance(x.value, str) for x in (node.left, node.right)):
                add("operator", "'str' * n (repetition)")
            if t is N.Mod and isinstance(node.left, N.Const) and isinstance(node.left.value, str):
                add("operator", "'fmt' % args (string formatting)")
        elif t is N.Not:
            add("operator", "not")
        elif t is N.Neg:
            add("operator", "unary -")
        elif t is N.Pos:
            add("operator", "unary +")
        elif t is N.Compare:
            for op in node.ops:
                add("operator", CMP.get(op.op, op.op))
            if len(node.ops) > 1:
                add("operator", "chained comparison a < b < c")
        elif t is N.List:
            add("literal", "list [..]")
        elif t is N.Tuple and node.ctx == "load":
            add("literal", "tuple (..)")
        elif t is N.Dict:
            add("literal", "dict {..}")
        elif t is N.Const:
            v = node.value
            if v is None:
                add("literal", "none / None")
            elif isinstance(v, bool):
                add("literal", "true / false")
            elif isinstance(v, int):
                add("literal", "integer")
            elif isinstance(v, float):
                add("literal", "float")
        elif t is N.TemplateData:
            pass
    # Inputs: read before being set (jinja2.meta), and either never set, or a
    # name the caller passes, or one the template probes (`is defined`,
    # `| default`) before setting it itself.
    probed = {n.node.name for n in ast.find_all(N.Test)
              if n.name in ("defined", "undefined") and isinstance(n.node, N.Name)}
    probed |= {n.node.name for n in ast.find_all(N.Filter)
               if n.name in ("default", "d") and isinstance(n.node, N.Name)}
    passed = {"messages", "add_generation_prompt", "bos_token", "eos_token", "tools", "documents"}
    for v in jinja2.meta.find_undeclared_variables(ast):
        if v not in assigned or v in passed or v in probed:
            add("variable", v)
    return feats


CATS = [("statement", "Statements"), ("lexical", "Whitespace control and lexical"),
        ("filter", "Filters"), ("test", "Tests (`is ...`)"), ("method", "Methods (Python methods on values)"),
        ("loop", "`loop` attributes"), ("call", "Calls"), ("operator", "Operators"),
        ("expression", "Expressions"), ("literal", "Literals"),
        ("unknown", "Filters and tests transformers' environment does not have (inside a conditional, Jinja "
                    "compiles them and fails only when reached: TemplateRuntimeError \"No filter named 'NAME' found.\"; "
                    "none is reached by the plain conversations here)"),
        ("variable", "Variables read that the template never sets (its inputs; in cases.json all but messages, add_generation_prompt, bos_token, eos_token, tools, documents and the environment's globals are undefined)")]


NOTES = """## Semantics that the rendered cases depend on (transformers' environment)

- `ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
  extensions=[generation, loopcontrols])`: autoescape off (`| safe` is a no-op),
  `keep_trailing_newline` off (one final newline of the template is dropped),
  default `Undefined` (not strict: printing it gives "", iterating it gives nothing,
  `is defined` false; an attribute of it, or calling it, is UndefinedError).
- Printing a non-string is Python's `str()`: `None`, `True`, `1.0`, lists and dicts
  as Python reprs (`{'k': 'v'}`, `[1, 'a', None]`); `| string` is the same.
- `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)` is
  `json.dumps` with those arguments: separators `", "` and `": "` (`","` and `": "`
  with an indent), non-ASCII kept, not HTML-escaped, key order kept.
- `raise_exception(msg)` raises `TemplateError(msg)`; cases.json has msg verbatim.
- `strftime_now(fmt)` is `datetime.now().strftime(fmt)`, pinned to cases.json's `now` in UTC.
- `namespace(...)` rejects attribute names starting with `_`; `dict(...)` is Python's.
- The sandbox refuses methods that mutate (`list.append`, `list.pop`, `dict.update`,
  ...): SecurityError "access to attribute 'append' of 'list' object is unsafe."
  (Kimi-K2-Instruct and Kimi-K2-Thinking use them, on tool messages only). `str.format`
  is the sandbox's safe format.
- `tools` and `documents` are passed as None by render_jinja_template (so `tools is
  defined` is true, `tools is none` true). With them undefined instead, only the
  templates marked in the last column below render differently.
- String literals are Python-style: `\\n`, `\\'`, `\\"`, `\\uXXXX` escapes
  (unicode-escape decoding of the literal).
- Conditional `x if c` without `else` gives Undefined (prints "") when c is false.

""".split("\n")


def constructs_md(names, summary):
    per = {}
    errs = {}
    for name in names:
        src = read_template(name)
        try:
            per[name] = constructs_of(src)
        except Exception as e:  # noqa: BLE001
            errs[name] = f"{type(e).__name__}: {e}"
    count = collections.defaultdict(list)
    for name, feats in per.items():
        for f in feats:
            count[f].append(name)
    out = ["# Jinja constructs used by the chat templates", "",
           "Generated by `tools/make_chat_template_cases.py` from the jinja2 AST of each",
           f"template in `templates/` (parsed by transformers' own environment: jinja2 {jinja2.__version__},",
           f"transformers {transformers.__version__}); do not edit. {len(names)} templates; each row counts",
           "the templates that use the construct at least once (names listed when 12 or fewer).",
           "`x.y` and `x['y']` are both Getattr/Getitem in Jinja and both look up an attribute",
           "then an item (or the reverse); a method is `x.name(...)` on a value (a Python str,",
           "list or dict method in transformers, allowed by the sandbox).", ""]
    out += NOTES
    if errs:
        out += ["Templates that did not parse:", ""] + [f"- {k}: {v}" for k, v in sorted(errs.items())] + [""]
    for cat, title in CATS:
        rows = sorted(((item, ns) for (c, item), ns in count.items() if c == cat), key=lambda r: (-len(r[1]), r[0]))
        if not rows:
            continue
        out += [f"## {title}", "", "| construct | templates | which |", "|---|---:|---|"]
        for item, ns in rows:
            which = ", ".join(sorted(ns)) if len(ns) <= 12 else ""
            out.append(f"| {item.replace('|', chr(92) + '|')} | {len(ns)} | {which} |")
        out.append("")
    out += ["## Per template: cases rendered / raised (raise_exception) / other errors", "",
            "| template | rendered | raise_exception | other error | compile error | tools undefined differs |",
            "|---|---:|---:|---:|---|---|"]
    for name, ok, rz, er, ce, diff in summary:
        out.append(f"| {name} | {ok} | {rz} | {er} | {'yes' if ce else ''} | {'yes' if diff else ''} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--import-templates", metavar="DIR",
                    help="first copy DIR/*.jinja verbatim into templates/ (replacing what is there)")
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 on any difference")
    a = ap.parse_args()
    if a.import_templates:
        for p in glob.glob(os.path.join(TEMPLATES, "*.jinja")):
            os.remove(p)
        for p in sorted(glob.glob(os.path.join(a.import_templates, "*.jinja"))):
            shutil.copyfile(p, os.path.join(TEMPLATES, os.path.basename(p)))
    doc, summary = build()
    text = dump(doc)
    md = constructs_md(template_names(), summary)
    w = max(len(s[0]) for s in summary)
    print(f"{'template':<{w}}  rendered  raised  error  compile  tools-undef-differs")
    for name, ok, rz, er, ce, diff in summary:
        print(f"{name:<{w}}  {ok:8d}  {rz:6d}  {er:5d}  {'FAIL' if ce else '':7s}  {'yes' if diff else ''}")
    tot = [sum(s[i] for s in summary) for i in (1, 2, 3)]
    print(f"{'total':<{w}}  {tot[0]:8d}  {tot[1]:6d}  {tot[2]:5d}  {sum(s[4] for s in summary):7d}"
          f"  {sum(s[5] for s in summary)}")
    print(f"{len(doc['cases'])} cases, {len(text.encode('utf-8'))} bytes, now={NOW} ({doc['now_utc']})")
    if a.check:
        same = True
        for path, new in ((OUT, text), (CONSTRUCTS, md)):
            with open(path, encoding="utf-8") as f:
                if f.read() != new:
                    print(f"DIFFERS: {path}")
                    same = False
        sys.exit(0 if same else 1)
    with open(OUT, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    with open(CONSTRUCTS, "w", encoding="utf-8", newline="\n") as f:
        f.write(md)


if __name__ == "__main__":
    main()
