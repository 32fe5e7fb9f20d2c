#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizers/<family>.json: ids and decodes from Hugging Face.

For each tokenizer committed in data/tokenizer/{llama3,qwen2,llama2,phi3}
(data/tokenizer/README.md), a few thousand seeded random strings (text in
many scripts, runs of white space including \\r\\n, \\t, U+00A0 and U+3000,
digit runs, code, the families' special tokens written inside text, emoji
with joiners and modifiers, combining marks, control characters, case
tricks for (?i:'s) such as U+017F and U+212A) with what Hugging Face gives:

    {"family": "llama3", "tokenizers": "0.23.3", "transformers": "5.24.0",
     "cases": [{"t": text,
                "ids": Tokenizer.from_file(...).encode(t, add_special_tokens=False).ids,
                "sp": AutoTokenizer(dir)(t)["input_ids"]        (every 4th case only),
                "dec": AutoTokenizer(dir).decode(ids, skip_special_tokens=True)
                                                              (only when it is not t),
                "dk": AutoTokenizer(dir).decode(ids, skip_special_tokens=False)
                                                              (every 4th case only)}]}

A case without "dec" round-trips losslessly in Hugging Face: decode(encode(t))
== t. tests/test_tokenizer_families.c checks every case exactly. The script
stops with an error when the `tokenizers` library and transformers'
AutoTokenizer decode differently. Where AutoTokenizer's ids without special
tokens differ from the file's (transformers' Qwen2Tokenizer class adds an NFC
normalizer that the committed qwen2 tokenizer.json does not name), the case
has no "sp" and the count is printed: the reference is the file.

It also writes tests/fixtures/tokenizers/variants.json: small BPEs trained
here (byte-level, and SentencePiece-style with <0xNN> byte tokens), each
with one pre-tokenizer, normalizer, model option, post-processor or
added-token setting, 100 cases each, in the same case format ("sp" from
AutoTokenizer where a post-processor or tokenizer_config.json is given,
else from tokenizers). Two have a tokenizer_config.json with add_bos_token /
add_eos_token: transformers 5.24 drops those flags when a tokenizer.json is
present, so the ids show that the file's post-processor alone decides.

Regenerate (transformers 5 and tokenizers, no network):

    python3 tools/make_tokenizer_families_corpus.py [--n 3000] [--seed 19]
"""

import argparse
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FAMILIES = ["llama3", "qwen2", "llama2", "phi3"]

# (first, last) code points of blocks to draw letters from.
SCRIPTS = [
    (0x41, 0x5A), (0x61, 0x7A), (0xC0, 0xFF), (0x100, 0x17F), (0x180, 0x24F),
    (0x370, 0x3FF), (0x400, 0x4FF), (0x531, 0x587), (0x5D0, 0x5EA), (0x620, 0x64A),
    (0x660, 0x669), (0x900, 0x97F), (0x980, 0x9FF), (0xB80, 0xBFF), (0xE00, 0xE5B),
    (0x10A0, 0x10FF), (0x1100, 0x11FF), (0x1E00, 0x1EFF), (0x2000, 0x206F),
    (0x2100, 0x214F), (0x2190, 0x21FF), (0x2200, 0x22FF), (0x2460, 0x24FF),
    (0x3040, 0x309F), (0x30A0, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
    (0xFF01, 0xFF5E), (0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F900, 0x1F9FF),
    (0x20000, 0x2A6DF), (0x1D400, 0x1D7FF), (0xE000, 0xE0FF),
]
COMBINING = [chr(c) for c in range(0x300, 0x370)] + ["\u0951", "\u093c", "\u0e31", "\u20e3"]
SPACES = [" ", " ", " ", "  ", "\t", "\n", "\n\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2028",
          "\u0085", "\u180e", "\x0b", "\x0c", "\x1c", "\u2003", "\u200b", "\ufeff", "\u202f"]
DIGITS = "0123456789"
OTHER_DIGITS = ["\u0660\u0661\u0662", "\uff11\uff12\uff13", "\u00b2\u00b3", "\u00bd", "\u2167",
                "\u0967\u0968", "\U0001d7ce\U0001d7cf"]
WORDS = ["the", "The", "THE", "hello", "world", "Hello", "don't", "I'm", "we'll", "you've",
         "they're", "he'd", "it's", "IT'S", "O'Neil", "rock'n'roll", "naïve", "café", "Äpfel",
         "straße", "İstanbul", "ﬁne", "Ⅻ", "ſ's", "'ſ", "'K", "'\u212a", "été", "ñandú",
         "привет", "мир", "Γειά", "σου", "שלום", "مرحبا", "नमस्ते", "こんにちは", "世界", "你好",
         "안녕하세요", "ไทย", "ქართული", "Ελληνικά", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "ǅemal", "ﬀ", "Ǆ",
         "supercalifragilisticexpialidocious", "antidisestablishmentarianism", "a", "I"]
CODE = [
    "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}",
    "if (a && b || !c) { return -1; }", "#include <stdio.h>\n", "x = [1, 2, 3]\nprint(x)",
    "SELECT * FROM t WHERE id = 42;", "<div class=\"a\">&nbsp;</div>", "fn main() -> i32 { 0 }",
    "{\"key\": [1, 2.5e-3, null, true]}", "    \n\t\t  \n", "a+=b; c-=d; e*=f;", "$x = @_;",
    "```python\nimport os\n```", "0x1F 0b1010 1e10 3.14159", "http://example.com/a?b=c&d=e",
    "// comment\n/* block */", "λx.x", "i++ --j", "===", "!==", "...", "--", "__init__",
]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "❤️", "🏳️‍🌈", "✋🏿", "1️⃣", "🦀", "🤖", "🧑‍💻", "☺"]
CONTROLS = ["\x00", "\x01", "\x07", "\x1b", "\x7f", "\x1f", "\u200d", "\u200c", "\ufffd",
            "\U0010ffff", "\ue000"]
# Special tokens of every family, so that each tokenizer also sees the others'.
SPECIALS = ["<|eot_id|>", "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|reserved_special_token_5|>", "<|im_start|>", "<|im_end|>",
            "<|endoftext|>", "<s>", "</s>", "<unk>", "<|user|>", "<|assistant|>", "<|end|>",
            "<|system|>", "[PAD151650]", "<|im_", "<s", "</s", "<|eot_id|", "<|placeholder1|>"]


def rand_chars(rng, n):
    out = []
    for _ in range(n):
        lo, hi = rng.choice(SCRIPTS)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def piece(rng):
    k = rng.randrange(14)
    if k == 0:
        return rand_chars(rng, rng.randint(1, 12))
    if k == 1:
        return rng.choice(WORDS) + rng.choice(COMBINING) * rng.randint(1, 3)
    if k == 2:
        return "".join(rng.choice(SPACES) for _ in range(rng.randint(1, 6)))
    if k == 3:
        return "".join(rng.choice(DIGITS) for _ in range(rng.randint(1, 14)))
    if k == 4:
        return rng.choice(OTHER_DIGITS)
    if k == 5:
        return rng.choice(CODE)
    if k == 6:
        sp = rng.choice(SPECIALS)
        return rng.choice(["", " ", "\n", "x"]) + sp + rng.choice(["", " ", "\n", "y", "  "])
    if k == 7:
        return "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 3)))
    if k == 8:
        return rng.choice(CONTROLS)
    if k == 9:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
    if k == 10:
        return rng.choice(WORDS).upper() + rng.choice(["'S", "'T", "'RE", "'LL", "'D", "'M", "'VE"])
    if k == 11:
        return rng.choice(" \t\n") * rng.randint(1, 40)
    if k == 12:
        return rng.choice(["!", "?", ".", ",", ";", ":", "-", "(", ")", "\"", "'", "«", "»", "—",
                           "…", "¿", "¡", "、", "。", "・"]) * rng.randint(1, 4)
    return rng.choice(WORDS)


def texts(rng, n):
    fixed = ["", " ", "  ", "\n", "\r\n", "\t", "a", "<s>", "</s>", "<|eot_id|>", "<|im_start|>",
             " <s> ", "<s><s>", "Hello world", " Hello world", "\u00a0", "\u3000",
             "1234567890", "\u00e9", "e\u0301", "ſ", "'s", "'S", "'\u017f", "K", "\U0001f600"]
    out = list(fixed)
    while len(out) < n:
        out.append("".join(piece(rng) for _ in range(rng.randint(1, 8))))
    return out[:n]


# ---- small tokenizers, one setting each (variants.json) ----

LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
BL_DEC = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
SP_DEC = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
    {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
SP_NORM = {"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": "\u2581"},
    {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}


def bl(add_prefix_space=False, use_regex=False):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": True,
            "use_regex": use_regex}


def split(pattern, behavior, invert=False, literal=False):
    return {"type": "Split", "pattern": {"String" if literal else "Regex": pattern},
            "behavior": behavior, "invert": invert}


def seq(*steps):
    return {"type": "Sequence", "pretokenizers": list(steps)}


def added(i, content, special=True, lstrip=False, rstrip=False, single_word=False,
          normalized=False):
    return {"id": i, "content": content, "single_word": single_word, "lstrip": lstrip,
            "rstrip": rstrip, "normalized": normalized, "special": special}


def train(kind, texts):
    """A small BPE trained on texts: byte-level, or SentencePiece-style with
    <0xNN> byte tokens. Returns tokenizer.json as a dict."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    specials = ["<unk>", "<s>", "</s>"]
    if kind == "byte":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tr = trainers.BpeTrainer(vocab_size=700, special_tokens=specials, show_progress=False,
                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    else:
        tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tr = trainers.BpeTrainer(vocab_size=700, special_tokens=specials, show_progress=False,
                                 limit_alphabet=150)
    tok.train_from_iterator(texts, tr)
    j = json.loads(tok.to_str())
    if kind != "byte":
        vocab = j["model"]["vocab"]
        for b in range(256):
            vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    j["pre_tokenizer"] = None
    j["normalizer"] = None
    j["post_processor"] = None
    j["decoder"] = BL_DEC if kind == "byte" else SP_DEC
    return j


def variant_specs():
    """(name, kind, changes to tokenizer.json, tokenizer_config.json or None)."""
    iso = "Isolated"
    v = []
    v.append(("split-llama3-regex", "byte", {"pre_tokenizer": seq(split(LLAMA3_RE, iso), bl())}))
    v.append(("bytelevel-gpt2-prefix", "byte", {"pre_tokenizer": bl(True, True)}))
    v.append(("bytelevel-gpt2", "byte", {"pre_tokenizer": bl(False, True)}))
    v.append(("split-then-bytelevel-prefix", "byte",
              {"pre_tokenizer": seq(split(LLAMA3_RE, iso), bl(True, False))}))
    v.append(("split-then-bytelevel-prefix-regex", "byte",
              {"pre_tokenizer": seq(split(r"\n", "Removed"), bl(True, True))}))
    v.append(("bytelevel-no-regex", "byte", {"pre_tokenizer": bl(False, False)}))
    for beh in ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]:
        for inv in [False, True]:
            v.append((f"split-string-{beh}-{'inv' if inv else 'plain'}", "byte",
                      {"pre_tokenizer": seq(split(" ", beh, inv, literal=True), bl())}))
    v.append(("split-regex-digits-invert", "byte",
              {"pre_tokenizer": seq(split(r"\d+", "MergedWithNext", True), bl())}))
    v.append(("split-regex-case", "byte",
              {"pre_tokenizer": seq(split(r"(?i:ab|'s)|\s+(?!\S)|\p{Lu}\p{Ll}*", iso), bl())}))
    v.append(("digits-individual", "byte",
              {"pre_tokenizer": seq({"type": "Digits", "individual_digits": True}, bl(False, True))}))
    v.append(("digits-runs", "byte",
              {"pre_tokenizer": seq({"type": "Digits", "individual_digits": False}, bl())}))
    v.append(("whitespace", "byte", {"pre_tokenizer": seq({"type": "Whitespace"}, bl())}))
    v.append(("whitespace-split", "byte",
              {"pre_tokenizer": seq({"type": "WhitespaceSplit"}, bl())}))
    v.append(("punctuation", "byte",
              {"pre_tokenizer": seq({"type": "Punctuation", "behavior": "Isolated"}, bl())}))
    v.append(("ignore-merges", "byte",
              {"pre_tokenizer": seq(split(LLAMA3_RE, iso), bl()), "model.ignore_merges": True}))
    v.append(("template-bos-eos", "byte",
              {"pre_tokenizer": seq(split(LLAMA3_RE, iso), bl()),
               "post_processor": {"type": "TemplateProcessing",
                                  "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                             {"Sequence": {"id": "A", "type_id": 0}},
                                             {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                                  "pair": [], "special_tokens": {
                                      "<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                                      "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}}}))
    v.append(("config-add-bos-eos", "byte",
              {"pre_tokenizer": seq(split(LLAMA3_RE, iso), bl())},
              {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True,
               "add_eos_token": True, "tokenizer_class": "PreTrainedTokenizerFast"}))
    v.append(("config-add-eos-only", "byte",
              {"pre_tokenizer": seq(split(LLAMA3_RE, iso), bl())},
              {"bos_token": "<s>", "eos_token": "</s>", "add_eos_token": True,
               "tokenizer_class": "PreTrainedTokenizerFast"}))
    v.append(("added-flags-bytelevel", "byte",
              {"pre_tokenizer": seq(split(LLAMA3_RE, iso), bl()),
               "added_tokens+": [added(None, "<|L|>", lstrip=True), added(None, "<|R|>", rstrip=True),
                                 added(None, "word", special=False, single_word=True),
                                 added(None, "<|plain|>", special=False, normalized=True)]}))
    v.append(("sp-metaspace-first", "sp",
              {"pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581",
                                 "prepend_scheme": "first", "split": True}}))
    v.append(("sp-metaspace-always-nosplit", "sp",
              {"pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581",
                                 "prepend_scheme": "always", "split": False}}))
    v.append(("sp-metaspace-never", "sp",
              {"pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581",
                                 "prepend_scheme": "never", "split": True}}))
    v.append(("sp-normalizer-llama2", "sp", {"normalizer": SP_NORM}))
    v.append(("sp-no-byte-fallback-fuse-unk", "sp",
              {"normalizer": SP_NORM, "model.byte_fallback": False, "model.fuse_unk": True}))
    v.append(("sp-no-byte-fallback-no-fuse", "sp",
              {"normalizer": SP_NORM, "model.byte_fallback": False, "model.fuse_unk": False}))
    v.append(("sp-replace-regex", "sp",
              {"normalizer": {"type": "Sequence", "normalizers": [
                  {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "},
                  {"type": "Prepend", "prepend": "\u2581"},
                  {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}}))
    v.append(("sp-added-normalized", "sp",
              {"normalizer": SP_NORM,
               "added_tokens+": [added(None, "<|plain|>", special=False, normalized=True),
                                 added(None, "<|R|>", rstrip=True), added(None, "<|L|>", lstrip=True)]}))
    for form in ["NFC", "NFD", "NFKC", "NFKD"]:
        v.append((f"normalizer-{form.lower()}", "byte",
                  {"normalizer": {"type": form},
                   "pre_tokenizer": seq(split(LLAMA3_RE, iso), bl())}))
    v.append(("normalizer-strip-nfkc", "byte",
              {"normalizer": {"type": "Sequence", "normalizers": [
                  {"type": "Strip", "strip_left": True, "strip_right": True}, {"type": "NFKC"}]},
               "pre_tokenizer": seq(split(LLAMA3_RE, iso), bl())}))
    v.append(("sp-nfkc-llama2", "sp",
              {"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}] +
                              SP_NORM["normalizers"]}}))
    for scheme in ["first", "always", "never"]:
        ms = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": True}
        v.append((f"sp-metaspace-decoder-{scheme}", "sp",
                  {"pre_tokenizer": ms,
                   "decoder": {"type": "Sequence", "decoders": [
                       ms, {"type": "ByteFallback"}, {"type": "Fuse"}]}}))
    v.append(("sp-metaspace-decoder-alone", "sp",
              {"pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581",
                                 "prepend_scheme": "first", "split": False},
               "decoder": {"type": "Metaspace", "replacement": "\u2581",
                           "prepend_scheme": "first", "split": False}}))
    # Gemma 2 and 3: spaces become U+2581 in the normalizer with no dummy prefix, no
    # pre-tokenizer, byte fallback, a decoder without Strip, <bos> from the post-processor
    v.append(("sp-gemma", "sp",
              {"normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
               "decoder": {"type": "Sequence", "decoders": SP_DEC["decoders"][:3]},
               "post_processor": {"type": "TemplateProcessing",
                                  "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                             {"Sequence": {"id": "A", "type_id": 0}}],
                                  "pair": [], "special_tokens": {
                                      "<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}},
              {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
               "add_bos_token": True, "tokenizer_class": "GemmaTokenizerFast"}))
    v.append(("sp-digits-then-metaspace", "sp",
              {"pre_tokenizer": seq({"type": "Digits", "individual_digits": True},
                                    {"type": "Metaspace", "replacement": "\u2581",
                                     "prepend_scheme": "always", "split": True})}))
    return v


def apply_changes(j, changes):
    j = json.loads(json.dumps(j))
    for k, val in changes.items():
        if k.startswith("model."):
            j["model"][k[6:]] = val
        elif k == "added_tokens+":
            nxt = max(max(j["model"]["vocab"].values()), max(a["id"] for a in j["added_tokens"])) + 1
            for a in val:
                a = dict(a)
                a["id"] = nxt
                nxt += 1
                j["added_tokens"].append(a)
        else:
            j[k] = val
    return j


def make_variants(seed):
    import tempfile
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    rng = random.Random(f"{seed}-variants")
    train_texts = texts(rng, 3000)
    base = {"byte": train("byte", train_texts), "sp": train("sp", train_texts)}
    extra = ["<|L|>", " <|L|>x", "x  <|R|>  y", "word", "a word b", "swordfish", "word_x",
             "<|plain|>", " <|plain|> ", "x<|plain|>y", "12345", "a  b   c", " lead", "trail ",
             "\u2581x", "ab AB aB 's 'S", "\U0001f600\U0001f600", "\u00e9\u00e8", "\x00\x01",
             "e\u0301", "\u1e0b\u0323", "q\u0307\u0323", "\uac00\u11a8", "\u1100\u1161\u11a8",
             "\ufb01", "\u2460", "\u00bd", "\u212b", "\u0344", "\u0f73", "\u1e9b\u0323",
             "A\u030a\u0301", "a\u0328\u0301\u0323", "\u0300a", "\ufdfa", "\u3300",
             "\uff21\uff22", "\u00c5\u0316", "\u0b47\u0b3e", "  strip me  "]
    out = []
    for spec in variant_specs():
        name, kind, changes = spec[:3]
        cfg = spec[3] if len(spec) > 3 else None
        j = apply_changes(base[kind], changes)
        raw = Tokenizer.from_str(json.dumps(j))
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "tokenizer.json"), "w") as f:
                json.dump(j, f)
            if cfg:
                with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                    json.dump(cfg, f)
            auto = AutoTokenizer.from_pretrained(d) if cfg or j.get("post_processor") else None
            cases = []
            vr = random.Random(f"{seed}-{name}")
            for i, t in enumerate(extra + [short_text(vr) for _ in range(60)]):
                ids = raw.encode(t, add_special_tokens=False).ids
                case = {"t": t, "ids": ids}
                if i % 3 == 0:
                    case["sp"] = (auto(t)["input_ids"] if auto else
                                  raw.encode(t, add_special_tokens=True).ids)
                if i % 3 == 0:
                    case["dk"] = raw.decode(ids, skip_special_tokens=False)
                dec = raw.decode(ids, skip_special_tokens=True)
                if dec != t:
                    case["dec"] = dec
                cases.append(case)
        entry = {"name": name, "tokenizer": j, "cases": cases}
        if cfg:
            entry["config"] = cfg
        out.append(entry)
    return out


def short_text(rng):
    return "".join(piece(rng) for _ in range(rng.randint(1, 4)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3000, help="strings per family")
    ap.add_argument("--seed", type=int, default=19)
    ap.add_argument("--families", nargs="*", default=FAMILIES)
    ap.add_argument("--no-variants", dest="variants", action="store_false",
                    help="skip variants.json (small tokenizers, one setting each)")
    args = ap.parse_args()

    import tokenizers
    import transformers
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    out_dir = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
    os.makedirs(out_dir, exist_ok=True)
    for fam in args.families:
        d = os.path.join(ROOT, "data", "tokenizer", fam)
        raw = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        auto = AutoTokenizer.from_pretrained(d)
        rng = random.Random(f"{args.seed}-{fam}")
        cases = []
        n_sp = n_lossy = n_auto = 0
        for i, t in enumerate(texts(rng, args.n)):
            ids = raw.encode(t, add_special_tokens=False).ids
            case = {"t": t, "ids": ids}
            if auto(t, add_special_tokens=False)["input_ids"] != ids:
                n_auto += 1  # the class adds what the file lacks (Qwen2Tokenizer: NFC)
            elif i % 4 == 0:
                case["sp"] = auto(t)["input_ids"]
                n_sp += 1
            if i % 4 == 0:
                case["dk"] = auto.decode(ids, skip_special_tokens=False)
                if case["dk"] != raw.decode(ids, skip_special_tokens=False):
                    sys.exit(f"{fam}: tokenizers and AutoTokenizer decode {t!r} differently")
            dec = auto.decode(ids, skip_special_tokens=True)
            if dec != raw.decode(ids, skip_special_tokens=True):
                sys.exit(f"{fam}: tokenizers and AutoTokenizer decode {t!r} differently")
            if dec != t:
                case["dec"] = dec
                n_lossy += 1
            cases.append(case)
        doc = {"family": fam, "tokenizers": tokenizers.__version__,
               "transformers": transformers.__version__, "seed": args.seed, "cases": cases}
        path = os.path.join(out_dir, f"{fam}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
            f.write("\n")
        print(f"{fam}: {len(cases)} cases ({n_sp} with special tokens, {n_lossy} not lossless, "
              f"{n_auto} where AutoTokenizer differs from the file), "
              f"{os.path.getsize(path)} bytes -> {os.path.relpath(path, ROOT)}")
    if args.variants:
        var = make_variants(args.seed)
        path = os.path.join(out_dir, "variants.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"tokenizers": tokenizers.__version__, "seed": args.seed, "variants": var},
                      f, ensure_ascii=False, separators=(",", ":"))
            f.write("\n")
        print(f"variants: {len(var)} small tokenizers, {sum(len(v['cases']) for v in var)} cases, "
              f"{os.path.getsize(path)} bytes -> {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
