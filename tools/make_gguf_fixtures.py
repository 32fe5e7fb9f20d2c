#!/usr/bin/env python3
"""Build the committed GGUF fixtures under tests/fixtures/gguf/ from the safetensors ones.

Regenerate (from the repository root, CPU only, no network once llama.cpp's converter is
unpacked; see tools/llamacpp.sh):

    LLAMACPP_PYTHON=python3 python3 tools/make_gguf_fixtures.py

(any interpreter with sentencepiece and the packages of tools/requirements.txt will do as
LLAMACPP_PYTHON; this script itself needs sentencepiece). Options: --out DIR (default
tests/fixtures/gguf).

The weights are those of tests/fixtures/models/llama_gqa_f32 (Llama, grouped-query
attention, llama3 rope scaling, separate head) and qwen2_bias_f32 (Qwen2, q/k/v biases, tied
head), so the C tests compare a GGUF model with the safetensors model of the same weights
(rounded to the GGUF's type where it is F16 or BF16: matrices only, as the converter keeps
1-d tensors in F32). llama.cpp's own convert_hf_to_gguf.py (tools/llamacpp.sh convert) writes
them, with its Q/K row permutation on the Llama one and its rope_freqs tensor for the llama3
rope.

The Llama one also carries a chat template: the converter copies tokenizer_config.json's
chat_template (CHAT_TEMPLATE below, Zephyr's, which writes the file's own EOS piece after
every turn) into tokenizer.chat_template; the Qwen2 ones have none.

GGUF carries a vocabulary, so the converter needs a tokenizer: a SentencePiece BPE model of
256 pieces (the fixtures' vocab_size) trained (single-threaded, unshuffled: the same pieces
every run) on the ASCII texts of tests/fixtures/tokenizer_corpus.json, written beside the copy
of the checkpoint as tokenizer.model; its pieces are in every GGUF's tokenizer.ggml.*
metadata.

Files, per fixture directory NAME (llama_gqa, qwen2_bias):
  model-f32.gguf, model-f16.gguf, model-bf16.gguf   one file each (llama_gqa: all three;
                                                    qwen2_bias: f16 and bf16)
  split/model-f16-0000i-of-0000N.gguf               qwen2_bias only: the F16 model split by
                                                    the converter's --split-max-tensors
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = [
    ("llama_gqa", "llama_gqa_f32", ["f32", "f16", "bf16"]),
    ("qwen2_bias", "qwen2_bias_f32", ["f16", "bf16"]),
]
# HuggingFaceH4/zephyr-7b-beta's chat template, given to llama_gqa.
CHAT_TEMPLATE = (
    "{% for message in messages %}\n"
    "{% if message['role'] == 'user' %}\n"
    "{{ '<|user|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'system' %}\n"
    "{{ '<|system|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'assistant' %}\n"
    "{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n"
    "{% endif %}\n"
    "{% if loop.last and add_generation_prompt %}\n"
    "{{ '<|assistant|>' }}\n"
    "{% endif %}\n"
    "{% endfor %}")


def train_tokenizer(out_dir):
    import sentencepiece as spm

    text = os.path.join(out_dir, "corpus.txt")
    with open(os.path.join(ROOT, "tests", "fixtures", "tokenizer_corpus.json")) as f:
        texts = [d["text"].replace("\n", " ") for d in json.load(f)]
    with open(text, "w") as f:
        f.write("\n".join(t for t in texts if t.strip() and t.isascii()) + "\n")
    spm.SentencePieceTrainer.train(
        input=text, model_prefix=os.path.join(out_dir, "tokenizer"), vocab_size=256,
        model_type="bpe", character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0, pad_id=-1,
        num_threads=1, minloglevel=2, input_sentence_size=0, shuffle_input_sentence=False)
    return os.path.join(out_dir, "tokenizer.model")


def llamacpp(*args):
    return subprocess.run(["bash", os.path.join(ROOT, "tools", "llamacpp.sh"), *args],
                          check=True, stdout=subprocess.PIPE, text=True).stdout.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "gguf"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tok = train_tokenizer(tmp)
        for name, src, types in FIXTURES:
            hf = os.path.join(tmp, name)
            os.makedirs(hf)
            for f in ("config.json", "generation_config.json", "model.safetensors"):
                shutil.copy(os.path.join(ROOT, "tests", "fixtures", "models", src, f), hf)
            shutil.copy(tok, hf)
            if name == "llama_gqa":
                with open(os.path.join(hf, "tokenizer_config.json"), "w") as f:
                    json.dump({"chat_template": CHAT_TEMPLATE}, f)
            out = os.path.join(args.out, name)
            shutil.rmtree(out, ignore_errors=True)
            os.makedirs(out)
            for t in types:
                llamacpp("convert", hf, t, os.path.join(out, f"model-{t}.gguf"))
            if name == "qwen2_bias":
                py = llamacpp("venv")
                ll = os.path.dirname(py).rsplit("/venv", 1)[0] + "/src/vendor/llama.cpp"
                os.makedirs(os.path.join(out, "split"))
                env = dict(os.environ, PYTHONPATH=os.path.join(ll, "gguf-py"))
                subprocess.run([py, os.path.join(ll, "convert_hf_to_gguf.py"), hf, "--outtype",
                                "f16", "--split-max-tensors", "12", "--outfile",
                                os.path.join(out, "split", "model-f16.gguf")],
                               check=True, env=env, stdout=subprocess.DEVNULL)
    total = 0
    for dirpath, _, files in os.walk(args.out):
        for f in files:
            total += os.path.getsize(os.path.join(dirpath, f))
            print(os.path.relpath(os.path.join(dirpath, f), args.out),
                  os.path.getsize(os.path.join(dirpath, f)))
    print(f"total {total} bytes")


if __name__ == "__main__":
    sys.exit(main())
