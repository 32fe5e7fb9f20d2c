#!/usr/bin/env python3
"""Build the quantized GGUF fixtures under tests/fixtures/gguf/llama_quant/.

Regenerate (from the repository root, CPU only; llama.cpp built by tools/llamacpp.sh, whose
build/bin/llama-quantize this calls):

    LLAMACPP_PYTHON=python3 python3 tools/make_quant_gguf_fixtures.py

(any interpreter with torch, transformers, safetensors, sentencepiece and gguf will do).
Options: --out DIR (default tests/fixtures/gguf/llama_quant), --quantize PATH (llama-quantize).

The model: a random Llama (seed 0) whose dimensions are whole 256-element blocks, as the
K-quants need them (hidden 256, intermediate 256, 2 layers, 4 heads of 64, 2 KV heads,
vocabulary 256, tied head), written in F32 by transformers, converted to GGUF F32 by
llama.cpp's convert_hf_to_gguf.py (tools/llamacpp.sh convert; its tokenizer is the
SentencePiece model of tools/make_gguf_fixtures.py) and quantized by llama-quantize to Q8_0,
Q4_0 and Q4_K_M (a mix of Q4_K and Q6_K). The F32 GGUF is not committed.

References: every tensor of each quantized file dequantized by the gguf package
(gguf.quants.dequantize) into an F32 model in transformers' layout (llama.cpp's q/k row
permutation undone), and transformers' logits of that model for PROMPTS at every position.
Beside them, llama.cpp's own logits of each file (its CPU backend: x quantized per block;
f32 KV cache and no flash attention, so that x's quantization is its only rounding),
from tools/llamacpp_logits.c compiled here against the static libraries of the llama.cpp
build (c++ and OpenMP needed; nothing of llama.cpp is rebuilt).

Files:
  model-q8_0.gguf, model-q4_0.gguf, model-q4_k_m.gguf    the quantized models
  expected.json    per file: the tensors' types, the prompts and the logits (float32 values
                   as lists, [prompt][position][vocab]): "logits" transformers' of the
                   dequantized weights, "llamacpp_logits" llama.cpp's of the file
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_gguf_fixtures as mgf  # noqa: E402

TYPES = ["Q8_0", "Q4_0", "Q4_K_M"]
PROMPTS = [[1, 17, 42, 99, 200, 5, 63, 128], [1, 250, 3, 77]]


def make_hf(out_dir, tok):
    import shutil

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=256, intermediate_size=256,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=64, max_position_embeddings=128, rms_norm_eps=1e-5,
                      rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=1,
                      eos_token_id=2, torch_dtype="float32")
    model = LlamaForCausalLM(cfg).float()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.05 * torch.randn_like(p))
    model.save_pretrained(out_dir, safe_serialization=True)
    shutil.copy(tok, out_dir)
    return cfg


def unpermute(w, n_head):
    """llama.cpp's LlamaModel.permute undone: rows (heads, 2, hd/2) back to (heads, hd/2, 2)
    order reversed, i.e. transformers' rotate_half layout."""
    rows = w.shape[0]
    return (w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def dequantized_state(path, cfg):
    import gguf

    r = gguf.GGUFReader(path)
    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    per = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
           "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
           "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
           "ffn_norm": "post_attention_layernorm"}
    state, types = {}, {}
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape)]
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
        parts = t.name.split(".")
        if t.name in names:
            hf = names[t.name]
        elif parts[0] == "blk" and parts[2] in per:
            hf = f"model.layers.{parts[1]}.{per[parts[2]]}.weight"
            if parts[2] == "attn_q":
                w = unpermute(w, cfg.num_attention_heads)
            elif parts[2] == "attn_k":
                w = unpermute(w, cfg.num_key_value_heads)
        else:
            raise SystemExit(f"{path}: unexpected tensor {t.name}")
        state[hf] = w
        types[hf] = t.tensor_type.name
    return state, types


def reference_logits(state, cfg):
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM(cfg).float().eval()
    sd = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()}
    if "lm_head.weight" not in sd:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [m for m in missing if "rotary" not in m]
    assert not missing and not unexpected, (missing, unexpected)
    out = []
    with torch.no_grad():
        for p in PROMPTS:
            out.append(model(torch.tensor([p])).logits[0].float().numpy())
    return out


def build_llamacpp_logits(quantize, tmp):
    """tools/llamacpp_logits.c linked against the llama.cpp build holding `quantize`."""
    build = os.path.dirname(os.path.dirname(quantize))
    src = os.path.join(os.path.dirname(build), "src", "vendor", "llama.cpp")
    exe = os.path.join(tmp, "llamacpp_logits")
    libs = [os.path.join(build, p) for p in (
        "src/libllama.a", "ggml/src/libggml.a", "ggml/src/libggml-cpu.a", "ggml/src/libggml-base.a")]
    subprocess.run(["c++", "-O1", "-x", "c", os.path.join(ROOT, "tools", "llamacpp_logits.c"),
                    "-x", "none", "-I", os.path.join(src, "include"), "-I",
                    os.path.join(src, "ggml", "include"), *libs, "-fopenmp", "-lpthread", "-lm",
                    "-ldl", "-o", exe], check=True)
    return exe


def llamacpp_logits(exe, path):
    out = subprocess.run([exe, path, *[",".join(map(str, p)) for p in PROMPTS]], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return [np.array(p, dtype=np.float32) for p in json.loads(out)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "gguf", "llama_quant"))
    ap.add_argument("--quantize", default=os.path.expanduser(
        "~/.cache/shardswap/llamacpp/0.3.36/build/bin/llama-quantize"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    expected = {"prompts": PROMPTS, "files": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tok = mgf.train_tokenizer(tmp)
        exe = build_llamacpp_logits(args.quantize, tmp)
        hf = os.path.join(tmp, "hf")
        os.makedirs(hf)
        cfg = make_hf(hf, tok)
        f32 = os.path.join(tmp, "model-f32.gguf")
        mgf.llamacpp("convert", hf, "f32", f32)
        for qt in TYPES:
            name = f"model-{qt.lower()}.gguf"
            path = os.path.join(args.out, name)
            subprocess.run([args.quantize, f32, path, qt], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            state, types = dequantized_state(path, cfg)
            logits = reference_logits(state, cfg)
            theirs = llamacpp_logits(exe, path)
            expected["files"][name] = {
                "types": types,
                "logits": [np.round(lg.astype(np.float64), 7).tolist() for lg in logits],
                "llamacpp_logits": [np.round(lg.astype(np.float64), 7).tolist() for lg in theirs],
            }
    with open(os.path.join(args.out, "expected.json"), "w") as f:
        json.dump(expected, f)
    for f in sorted(os.listdir(args.out)):
        print(f, os.path.getsize(os.path.join(args.out, f)))


if __name__ == "__main__":
    sys.exit(main())
