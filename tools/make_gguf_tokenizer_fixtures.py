#!/usr/bin/env python3
"""GGUF tokenizer fixtures: llama.cpp's vocabulary-only GGUF files of the four
families the project's tokenizer tests use, and llama.cpp's own ids for them.

    LLAMACPP_PYTHON=python3 tools/make_gguf_tokenizer_fixtures.py

Writes tests/fixtures/gguf_tokenizers/:

  llama2.gguf, phi3.gguf   llama.cpp's own vocabulary-only files
                           (models/ggml-vocab-llama-spm.gguf, ggml-vocab-phi-3.gguf of the
                           vendored llama.cpp), byte for byte: made by its converter from the
                           models' tokenizer.model, so they carry SentencePiece's scores (its
                           converter given only a tokenizer.json writes -1000 for every score).
                           data/tokenizer/{llama2,phi3} were rebuilt from these files.
  <family>.json            for every family: llama.cpp's ids (llama-tokenize, special tokens
                           parsed) for llama.cpp's reference texts and a sample of the
                           tokenizer corpus (tests/fixtures/tokenizers/<family>.json), without
                           and (every 4th) with BOS, for every 10th (llama2, phi3) or 60th (llama3, qwen2) case. For llama3 and qwen2, whose GGUF files are
                           7.8 and 5.9 MB, also what the test needs to write the same file
                           itself from data/tokenizer/<family>/tokenizer.json: the converter's
                           scalar tokenizer keys in file order, a chat template file, and an
                           FNV-1a 64 of each array's bytes as GGUF stores them, so that the
                           test proves its file equals the converter's.

llama3 is converted from data/tokenizer/llama3 with Meta's post-processor (BOS first) and
without the stray <|endoftext|> at id 128256, which is Meta's published file (the converter
then names its pre-tokenizer "llama-bpe", as for every Llama 3 GGUF); qwen2 from
data/tokenizer/qwen2 as it is. Both with a config.json the converter needs and the chat
template of a model of the family (tests/fixtures/chat_templates/templates/).

Needs tools/llamacpp.sh build (llama-tokenize) and its converter's venv.

With --fuzz-seed it writes only fuzz/corpus/tokenizer_gguf/: two small GGUF tokenizers
(byte-level BPE with a pre-tokenizer, merges and a chat template; SentencePiece with scores and
byte tokens) for fuzz/fuzz_tokenizer_gguf.c to start from.
"""
import concurrent.futures
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests/fixtures/gguf_tokenizers")
SH = os.path.join(ROOT, "tools/llamacpp.sh")
CACHE = os.environ.get("LLAMACPP_CACHE") or os.path.expanduser("~/.cache/shardswap/llamacpp/0.3.36")
MODELS = os.path.join(CACHE, "src/vendor/llama.cpp/models")
sys.path.insert(0, os.path.join(CACHE, "src/vendor/llama.cpp/gguf-py"))
import gguf  # noqa: E402  (the vendored gguf-py, as the converter uses)

TEMPLATES = "tests/fixtures/chat_templates/templates"
WRITTEN = {
    "llama3": ("LlamaForCausalLM", "llama", "meta-llama-Llama-3.1-8B-Instruct.jinja"),
    "qwen2": ("Qwen2ForCausalLM", "qwen2", "Qwen-Qwen2.5-7B-Instruct.jinja"),
}
COPIED = {"llama2": "ggml-vocab-llama-spm.gguf", "phi3": "ggml-vocab-phi-3.gguf"}
META_POST = {
    "type": "Sequence",
    "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                  {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                  {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [128000],
                                                  "tokens": ["<|begin_of_text|>"]}}},
    ],
}
SCALAR_TYPES = {
    gguf.GGUFValueType.UINT32: "u32", gguf.GGUFValueType.INT32: "i32",
    gguf.GGUFValueType.BOOL: "bool", gguf.GGUFValueType.STRING: "str",
}


def fnv64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def array_bytes(field):
    """An array's elements as GGUF stores them (a string: u64 length, bytes)."""
    t = field.types[1]
    out = bytearray()
    for i in field.data:
        p = field.parts[i]
        if t == gguf.GGUFValueType.STRING:
            out += struct.pack("<Q", len(p)) + bytes(p)
        else:
            out += p.tobytes()
    return bytes(out)


def hf_dir(family, tmp):
    arch, model_type, template = WRITTEN[family]
    d = os.path.join(tmp, family)
    os.makedirs(d)
    tj = json.load(open(os.path.join(ROOT, "data/tokenizer", family, "tokenizer.json")))
    if family == "llama3":
        tj["added_tokens"] = [t for t in tj["added_tokens"] if t["id"] < 128256]
        tj["post_processor"] = META_POST
    json.dump(tj, open(os.path.join(d, "tokenizer.json"), "w"), ensure_ascii=False)
    cfg = json.load(open(os.path.join(ROOT, "data/tokenizer", family, "tokenizer_config.json")))
    cfg["chat_template"] = open(os.path.join(ROOT, TEMPLATES, template), encoding="utf-8").read()
    json.dump(cfg, open(os.path.join(d, "tokenizer_config.json"), "w"), ensure_ascii=False)
    n = max(max(tj["model"]["vocab"].values()), max(t["id"] for t in tj["added_tokens"])) + 1
    config = {"architectures": [arch], "model_type": model_type, "vocab_size": n,
              "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
              "num_attention_heads": 4, "num_key_value_heads": 4,
              "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0}
    json.dump(config, open(os.path.join(d, "config.json"), "w"))
    return d


def llama_tokenize(path, text, bos):
    with tempfile.NamedTemporaryFile("wb", delete=False) as f:
        f.write(text.encode("utf-8"))
    try:
        args = ["bash", SH, "tokenize", path, f.name] + ([] if bos else ["--no-bos"])
        out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])
    finally:
        os.unlink(f.name)


def texts(family, every):
    ref = json.load(open(os.path.join(ROOT, "tests/fixtures/tokenizers", family + "_reference.json")))
    corpus = json.load(open(os.path.join(ROOT, "tests/fixtures/tokenizers", family + ".json")))
    out = [c["text"] for c in ref] + [c["t"] for i, c in enumerate(corpus["cases"]) if i % every == 0]
    # llama-tokenize reads a file: no empty prompt, no NUL byte
    return [t for t in out if t and "\0" not in t]


def fuzz_seed():
    out = os.path.join(ROOT, "fuzz/corpus/tokenizer_gguf")
    os.makedirs(out, exist_ok=True)
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    alphabet, k = {}, 0
    for b in range(256):
        if b in bs:
            alphabet[b] = chr(b)
        else:
            alphabet[b] = chr(256 + k)
            k += 1
    w = gguf.GGUFWriter(os.path.join(out, "bpe.gguf"), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    tokens = [alphabet[b] for b in range(256)] + ["ab", "<|end|>"]
    w.add_token_list(tokens)
    w.add_token_types([1] * 257 + [3])
    w.add_token_merges(["a b"])
    w.add_bos_token_id(257)
    w.add_eos_token_id(257)
    w.add_chat_template("{% for m in messages %}{{ m['content'] }}{{ eos_token }}{% endfor %}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    w = gguf.GGUFWriter(os.path.join(out, "spm.gguf"), "llama")
    w.add_tokenizer_model("llama")
    pieces = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + [
        "\u2581", "a", "b", "\u2581a", "ab", "\u2581ab"]
    w.add_token_list(pieces)
    w.add_token_scores([0.0] * 259 + [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0])
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * 6)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()


def main():
    if sys.argv[1:] == ["--fuzz-seed"]:
        return fuzz_seed()
    os.makedirs(OUT, exist_ok=True)
    commit = json.loads(subprocess.run(["bash", SH, "version"], check=True, capture_output=True,
                                       text=True).stdout)["llama_cpp_commit"]
    with tempfile.TemporaryDirectory() as tmp:
        for family in ["llama2", "phi3", "llama3", "qwen2"]:
            fix = {"family": family, "llama_cpp": commit}
            if family in COPIED:
                path = os.path.join(OUT, family + ".gguf")
                shutil.copyfile(os.path.join(MODELS, COPIED[family]), path)
                fix["gguf"] = family + ".gguf"
                fix["origin"] = "llama.cpp models/" + COPIED[family]
                every = 10
            else:
                path = os.path.join(tmp, family + ".gguf")
                subprocess.run(["bash", SH, "vocab", hf_dir(family, tmp), path], check=True,
                               stdout=subprocess.DEVNULL)
                r = gguf.GGUFReader(path)
                kv, arrays = [], {}
                for k, f in r.fields.items():
                    if not k.startswith("tokenizer.") and k != "general.name":
                        continue
                    if f.types[0] == gguf.GGUFValueType.ARRAY:
                        arrays[k] = {"n": len(f.data), "fnv1a64": fnv64(array_bytes(f))}
                    elif k == "tokenizer.chat_template":
                        text = bytes(f.parts[-1])
                        fix["chat_template"] = os.path.join(TEMPLATES, WRITTEN[family][2])
                        fix["chat_template_fnv1a64"] = fnv64(text)
                        kv.append([k, "str", None])  # the template file's text goes here
                    else:
                        ty = SCALAR_TYPES[f.types[0]]
                        v = bytes(f.parts[-1]).decode() if ty == "str" else f.parts[-1].tolist()[0]
                        kv.append([k, ty, v])
                fix["source"] = "data/tokenizer/%s/tokenizer.json" % family
                fix["kv"], fix["arrays"] = kv, arrays
                every = 60
            cases = texts(family, every)

            def one(i):
                c = {"t": cases[i], "ids": llama_tokenize(path, cases[i], False)}
                if i % 4 == 0:
                    c["sp"] = llama_tokenize(path, cases[i], True)
                return c

            print("%s: %d texts through llama-tokenize" % (family, len(cases)), file=sys.stderr)
            with concurrent.futures.ThreadPoolExecutor(2) as ex:
                fix["cases"] = list(ex.map(one, range(len(cases))))
            with open(os.path.join(OUT, family + ".json"), "w", encoding="utf-8") as f:
                json.dump(fix, f, ensure_ascii=False, separators=(",", ":"))
                f.write("\n")
            print("%s: %d cases" % (family, len(cases)), file=sys.stderr)


if __name__ == "__main__":
    main()
