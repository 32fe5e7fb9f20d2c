#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer_corpus.json: OPT token ids from Hugging Face.

The fixture is a JSON list of {"text": str, "ids": [int, ...]}; ids start with
OPT's BOS ("</s>", id 2). tests/test_tokenizer.c checks that shardswap's BPE
gives exactly these ids.

The reference is the tokenizer transformers' AutoTokenizer builds for
facebook/opt-125m: the vocab.json and merges.txt committed in data/tokenizer/opt
(data/tokenizer/README.md) next to the hub's
tokenizer_config.json, special_tokens_map.json and config.json (model_type
"opt"), whose contents are written below (bos = eos = unk = "</s>",
pad = "<pad>", add_bos_token true). With transformers >= 5 that is
GPT2Tokenizer on the `tokenizers` backend; there is no slow tokenizer any
more, so the independent second opinion is a small pure-Python GPT-2 BPE in
this script (OpenAI's algorithm: the GPT-2 regex through the `regex` module,
lowest-rank merge first). With transformers 4 the slow GPT2Tokenizer is run as
well. The script stops with an error unless every reference agrees on every
string; the last run (transformers 5.24.0, tokenizers 0.23.3) reported that
the fast tokenizer and the pure-Python BPE agree on all strings.

Regenerate (needs `pip install transformers tokenizers regex`, no network):

    python3 tools/make_tokenizer_corpus.py [--data data/tokenizer/opt]
"""

import argparse
import json
import os
import random
import sys
import tempfile

import regex

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_DATA = os.path.join(ROOT, "data", "tokenizer", "opt")
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer_corpus.json")


def added(content):
    return {"content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": True}


# facebook/opt-125m's tokenizer files on the hub, minus the vocabulary.
OPT_TOKENIZER_CONFIG = {
    "errors": "replace", "unk_token": added("</s>"), "bos_token": added("</s>"),
    "eos_token": added("</s>"), "pad_token": added("<pad>"), "add_prefix_space": False,
    "add_bos_token": True, "special_tokens_map_file": None,
}
OPT_SPECIAL_TOKENS_MAP = {
    "bos_token": added("</s>"), "eos_token": added("</s>"), "unk_token": added("</s>"),
    "pad_token": added("<pad>"),
}
OPT_CONFIG = {"model_type": "opt", "vocab_size": 50272, "architectures": ["OPTForCausalLM"]}


def corpus():
    """At least 200 strings covering what a tokenizer gets wrong."""
    s = [
        # published vectors and plain English
        "A photo of a cat", "This is a test", "", "a", "A", " ", "Hello world",
        "Hello, world!", "The quick brown fox jumps over the lazy dog.",
        "I love New York.", "lower UPPER MiXeD cAsE", "supercalifragilisticexpialidocious",
        "Antidisestablishmentarianism is long.", "pneumonoultramicroscopicsilicovolcanoconiosis",
        "Mr. Smith went to Washington, D.C., on Jan. 5th.",
        # whitespace
        "  leading spaces", "trailing spaces   ", "   ", "\t", "\n", "\n\n\n", "a\tb",
        "a\t\tb", "tab\tseparated\tvalues\t", "line one\nline two\n", "windows\r\nline\r\nends\r\n",
        "\r\n", "a  b   c    d", "x\r\n  y   ", " \t \n ", "mixed \t\n whitespace \n\t end",
        "nbsp\u00a0here", "ideographic\u3000space", "thin\u2009space", "zero\u200bwidth",
        "next\u0085line", "line\u2028separator", "para\u2029sep", "en\u2002quad\u2003em",
        "\u00a0\u00a0leading nbsp", "ends with newline\n", "  \n  \n", "\v\f",
        # contractions
        "don't", "I'm here", "we've been", "they'll go", "she'd know", "it's", "IT'S", "DON'T",
        "'s", "'S", "''s", "'ll've", "rock'n'roll", "y'all", "o'clock", "'twas", "can't",
        "won't", "you're", "YOU'RE", "Bob's dog", "the dogs' bones", "' s", "it\u2019s curly",
        "'re'd'm", "I'M", "We'Ve", "x's'y", "' ll", "'d've",
        # numbers
        "0", "12", "123", "1234", "12345678901234567890", "3.14159", "1,000,000", "-42",
        "1e10", "0x1F", "\u0663\u0664\u0665", "x\u00b2 + y\u00b3", "\u00bd cup", "\u216b o'clock",
        "\u0967\u0968\u0969", "12abc", "abc123", "version 2.0.1-rc3", "2024-01-15T10:30:00Z",
        "$1,234.56", "50%", "phone: +1 (555) 123-4567", "0" * 16, "0" * 17, "9" * 40,
        # scripts
        "\u4f60\u597d\uff0c\u4e16\u754c\uff01", "\u6211\u7231\u5317\u4eac\u5929\u5b89\u95e8",
        "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002",
        "\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a",
        "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4", "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4.",
        "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
        "\u0627\u0644\u0644\u063a\u0629 \u0627\u0644\u0639\u0631\u0628\u064a\u0629\u064f",
        "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd", "\u05e2\u05b4\u05d1\u05b0\u05e8\u05b4\u05d9\u05ea",
        "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
        "\u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e",
        "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!", "\u0421\u044a\u0435\u0448\u044c \u0436\u0435 \u0435\u0449\u0451",
        "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5",
        "\u03a9\u03bc\u03ad\u03b3\u03b1 \u03b1\u03b2\u03b3",
        "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01",
        "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
        "\u09ac\u09be\u0982\u09b2\u09be", "\u0ba4\u0bae\u0bbf\u0bb4\u0bcd", "\u10e5\u10d0\u10e0\u10d7\u10e3\u10da\u10d8",
        "\u0540\u0561\u0575\u0565\u0580\u0565\u0576", "\u12a0\u121b\u122d\u129b",
        "Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u", "Tie\u0302\u0301ng Vie\u0323\u0302t",
        "\u0130stanbul \u0131\u015f\u0131k", "Stra\u00dfe und Gr\u00fc\u00dfe", "\u00c5ngstr\u00f6m caf\u00e9 na\u00efve",
        "\u0141\u00f3d\u017a \u017c\u00f3\u0142\u0107", "\u00bfQu\u00e9 tal? \u00a1Bien!",
        "English \u4e2d\u6587 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0939\u093f\u0902\u0926\u0940 mixed",
        "\U00020000\U0002a6d6 rare CJK", "\U0001d400\U0001d401 math bold", "\u2603\u2764\u2605",
        # emoji
        "\U0001f600", "\U0001f44d\U0001f3fd", "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
        "\U0001f3f3\ufe0f\u200d\U0001f308", "\U0001f1fa\U0001f1f8\U0001f1ef\U0001f1f5", "\u2764\ufe0f",
        "#\ufe0f\u20e3", "\U0001f9d1\U0001f3ff\u200d\U0001f4bb", "I \u2764\ufe0f NY \U0001f5fd",
        "emoji\U0001f600in\U0001f601the\U0001f602middle", "\U0001f600 \U0001f600  \U0001f600",
        "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",
        "\U0001f469\u200d\u2764\ufe0f\u200d\U0001f48b\u200d\U0001f468", "\U0001f600" * 5,
        # combining marks
        "e\u0301", "a\u0308\u0304", "n\u0303o", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319a\u0324l\u0354g\u0318o",
        "\u0301 leading combining", "x\u20d7 vector", "q\u0307\u0323",
        # code
        "def f(x):\n    return x ** 2\n", "int main(void) { return 0; }",
        "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}",
        "const x = () => { console.log(`hi ${name}`); };", "#!/bin/bash\necho \"$HOME\" | grep -v '^#'",
        "<div class=\"main\"><p>Hello</p></div>", "SELECT * FROM users WHERE id = 42;",
        "^[a-z0-9_\\-]+@[a-z]+\\.[a-z]{2,}$", "fn main() { println!(\"{}\", 1 + 1); }",
        "x = {'a': [1, 2, 3], \"b\": None}", "if (a && b || !c) return -1;",
        "    indented    code    ", "/* comment */ // line comment", "a->b->c; *p++ = *q--;",
        "@decorator\nclass Foo(Bar):\n    pass", "```python\nprint('hi')\n```",
        # URLs, paths, email
        "https://www.example.com/path?q=1&r=two#frag", "http://localhost:8080/v1/completions",
        "ftp://user:pass@host.org/file.tar.gz", "mailto:someone@example.com",
        "/usr/local/lib/libfoo.so.1", "C:\\Users\\Name\\Documents\\file.txt",
        "see https://en.wikipedia.org/wiki/Byte_pair_encoding for more",
        # JSON
        '{"key": "value", "n": 1, "list": [true, false, null]}', '[{"a":1},{"b":2}]',
        '{"nested": {"deep": {"er": "\\u00e9"}}}', '{"emoji": "\U0001f600", "text": "line\\nbreak"}',
        # special tokens inside text
        "</s>", "a</s>b", "</s></s>", " </s> ", "Hello</s>", "</s>Hello", "end of text </s>",
        "<pad>", "a<pad>b", "<s>", "<unk>", "<s>hi</s>", "<|endoftext|>", "</s", "<</s>>",
        "</s>\n", "text with </s> in the middle", "</S> is not special", "<pad></s><pad>",
        "\U0001f600</s>\U0001f600", "</s>\u4f60\u597d",
        # punctuation and symbols
        "!!!", "...", "???!!!", "\u2014", "a\u2013b", "wait\u2026", "\u00abquoted\u00bb",
        "\u201cfancy quotes\u201d", "'single' \"double\"", "(parens) [brackets] {braces}",
        "@#$%^&*", "~`|\\", "\u00a9 \u00ae \u2122", "\u20ac100 \u00a350 \u00a51000", "\u2192 \u21d2 \u2200x \u2203y",
        "a.b.c", "...and so on...", "--flag=value", "key=value;other=thing",
        # control characters
        "\x00", "\x07bell", "\x1b[31mred\x1b[0m", "del\x7f", "soft\u00adhyphen", "\ufeffBOM",
        "\ufffd replacement", "a\x00b\x01c",
        # long strings
        "a" * 100, "ab" * 60, " " * 100, "\n" * 40, "-" * 80, "=" * 33, "\U0001f600" * 20,
        "The tokenizer splits text into words with a regular expression, and then merges the "
        "bytes of each word by rank. " * 3,
    ]
    # Seeded random mixes of fragments, for combinations nobody thought of.
    rng = random.Random(20240611)
    pieces = [
        "the", " the", "The", "cat", " sat", " ", "  ", "\n", "\t", "'s", "'S", "'ll", "123",
        "4567", ".", ",", "!", "?", "\u4f60\u597d", "\u0645\u0631\u062d\u0628\u0627",
        "\u05e9\u05dc\u05d5\u05dd", "\u0928\u092e\u0938\u094d\u0924\u0947", "\u041f\u0440\u0438",
        "\u0393\u03b5\u03b9\u03ac", "\u0e2a\u0e27\u0e31", "\uc548\ub155", "\U0001f600",
        "\U0001f44d\U0001f3fd", "\U0001f1fa\U0001f1f8", "e\u0301", "</s>", "<pad>", "{", "}",
        "\"", "https://x.y/z", "\r\n", "\u00a0", "\u3000", "--", "_", "0", "ABC", "\u00e9",
    ]
    seen = set(s)
    for _ in range(80):
        mix = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        if mix not in seen:
            seen.add(mix)
            s.append(mix)
    return s


def bytes_to_unicode():
    """GPT-2's byte-level alphabet: byte -> printable character."""
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1))
            + list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


class ReferenceBpe:
    """GPT-2 BPE in plain Python, independent of transformers and tokenizers."""

    PATTERN = regex.compile(
        r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")

    def __init__(self, data_dir, specials, bos):
        with open(os.path.join(data_dir, "vocab.json"), encoding="utf-8") as f:
            self.vocab = json.load(f)
        with open(os.path.join(data_dir, "merges.txt"), encoding="utf-8") as f:
            lines = [ln for ln in f.read().split("\n") if ln and not ln.startswith("#version")]
        self.ranks = {tuple(ln.split(" ")): i for i, ln in enumerate(lines)}
        self.byte_char = bytes_to_unicode()
        self.specials = sorted(specials, key=len, reverse=True)  # longest first at a position
        self.bos = bos

    def merge(self, word):
        parts = list(word)
        while len(parts) > 1:
            pairs = [(self.ranks.get(p, float("inf")), i)
                     for i, p in enumerate(zip(parts, parts[1:]))]
            rank, _ = min(pairs)
            if rank == float("inf"):
                break
            best = next(p for p in zip(parts, parts[1:]) if self.ranks.get(p) == rank)
            out, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and (parts[i], parts[i + 1]) == best:
                    out.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            parts = out
        return parts

    def encode(self, text):
        ids = [self.bos]
        pattern = "(" + "|".join(regex.escape(s) for s in self.specials) + ")"
        for chunk in regex.split(pattern, text):
            if chunk in self.specials:
                ids.append(self.vocab[chunk])
                continue
            for word in self.PATTERN.findall(chunk):
                mapped = "".join(self.byte_char[b] for b in word.encode("utf-8"))
                ids.extend(self.vocab[p] for p in self.merge(mapped))
        return ids


def load_hf(data_dir, work, use_fast):
    from transformers import AutoTokenizer
    for name in ("vocab.json", "merges.txt"):
        dst = os.path.join(work, name)
        if not os.path.exists(dst):
            os.symlink(os.path.abspath(os.path.join(data_dir, name)), dst)
    for name, obj in (("tokenizer_config.json", OPT_TOKENIZER_CONFIG),
                      ("special_tokens_map.json", OPT_SPECIAL_TOKENS_MAP),
                      ("config.json", OPT_CONFIG)):
        with open(os.path.join(work, name), "w", encoding="utf-8") as f:
            json.dump(obj, f)
    return AutoTokenizer.from_pretrained(work, use_fast=use_fast)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=DEFAULT_DATA, help="directory with OPT's vocab.json, merges.txt")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()

    import tokenizers
    import transformers

    texts = corpus()
    dups = {t for t in texts if texts.count(t) > 1}
    assert not dups, f"duplicate corpus strings: {dups}"
    with tempfile.TemporaryDirectory() as work:
        fast = load_hf(args.data, work, use_fast=True)
        slow = load_hf(args.data, work, use_fast=False)
        refs = {type(fast).__name__ + " (AutoTokenizer)": fast}
        if type(slow) is not type(fast):
            refs[type(slow).__name__ + " (AutoTokenizer, use_fast=False)"] = slow
        specials = [t for t in fast.all_special_tokens]
        python_bpe = ReferenceBpe(args.data, specials, fast.bos_token_id)

        entries = []
        for text in texts:
            results = {name: tok(text)["input_ids"] for name, tok in refs.items()}
            results["pure-Python GPT-2 BPE"] = python_bpe.encode(text)
            first = next(iter(results.values()))
            if any(r != first for r in results.values()):
                sys.exit(f"references disagree on {text!r}: {results}")
            if first[0] != 2:
                sys.exit(f"no BOS on {text!r}: {first}")
            entries.append({"text": text, "ids": first})

    with open(args.out, "w", encoding="utf-8") as f:
        # One entry a line: small, and a changed string shows as one changed line.
        f.write("[\n")
        f.write(",\n".join(json.dumps(e, ensure_ascii=False) for e in entries))
        f.write("\n]\n")
    print(f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}; "
          f"specials {specials}")
    print(f"{len(entries)} strings; all agree: {', '.join(refs)} and the pure-Python GPT-2 BPE")
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)")


if __name__ == "__main__":
    main()
