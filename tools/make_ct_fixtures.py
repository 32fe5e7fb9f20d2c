#!/usr/bin/env python3
"""Build the compressed-tensors fixtures under tests/fixtures/ctensors/.

Regenerate (from the repository root, CPU only):
    python3 tools/make_ct_fixtures.py [--out DIR]

A benchmark checkpoint of a real shape instead (random weights, no references; not committed):
    python3 tools/make_ct_fixtures.py --bench qwen2.5-0.5b --out DIR
writes a Qwen2.5-0.5B-shaped Qwen2 in bf16 with its Linear layers int4, group 128, symmetric
(pack-quantized, llm-compressor's W4A16 scheme), for `shardswap bench forward --model DIR`.
(any interpreter with torch, transformers, safetensors and compressed-tensors will do).

Each fixture is a tiny random Llama or Qwen2 (seeded; hidden 64, intermediate 128, 2 layers,
2 heads of 32, 2 KV heads, vocabulary 128, tied embedding; Qwen2 with its q/k/v biases)
whose Linear layers are quantized and compressed by the compressed-tensors package as
published checkpoints hold them: the scheme applied with apply_quantization_config, each
weight's scale (and zero point) computed by the package's calculate_qparams from the
weight's min and max over the strategy's groups (what llm-compressor's min-max observer
gives), then ModelCompressor.compress_model, the state dict written as model.safetensors
and config.json's quantization_config written by ModelCompressor.update_config. lm_head is
in the ignore list (tied here, so the embedding stays in the model's dtype).

  llama_w8_channel     int-quantized: int8, channel, symmetric; dynamic per-token int8 x
  llama_w4_group       pack-quantized: int4, group 64, symmetric
  qwen2_w4_group_asym  pack-quantized: int4, group 64, asymmetric (packed zero points)
  llama_fp8_tensor     float-quantized: FP8 e4m3, tensor; dynamic per-token FP8 x
  llama_fp8_channel    float-quantized: FP8 e4m3, channel; dynamic per-token FP8 x
  llama_fp8_block      float-quantized: FP8 e4m3, 128x128 blocks (64-column
                       matrices: one partial block); dynamic group-128 FP8 x;
                       bf16 model (scales in bf16)

References (expected.json in each): the package's own decompression
(ModelCompressor.decompress_model) of the compressed model, loaded into a fresh
transformers model in f32, and its logits at every position of PROMPTS (no activation
quantization: the dynamic schemes quantize x only in int8/FP8 kernels); greedy ids of the
first prompt; and, as raw little-endian f32 in dequant.f32, the decompressed weight of
model.layers.0.mlp.down_proj as the package computes it (in the scale's dtype, widened).
"""
import argparse
import json
import os
import shutil

import numpy as np
import torch
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = [[1, 17, 42, 99, 120, 5, 63, 100], [1, 110, 3, 77]]
GREEDY = 6
DEQ_TENSOR = "model.layers.0.mlp.down_proj"


def scheme(kind):
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    if kind == "w8_channel":
        w = QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="channel")
        x = QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="token",
                             dynamic=True)
        return QuantizationScheme(targets=["Linear"], weights=w, input_activations=x), \
            "int-quantized"
    if kind in ("w4_group", "w4_group_asym"):
        w = QuantizationArgs(num_bits=4, type="int", symmetric=kind == "w4_group",
                             strategy="group", group_size=64)
        return QuantizationScheme(targets=["Linear"], weights=w), "pack-quantized"
    fp8 = dict(num_bits=8, type="float", symmetric=True)
    if kind == "fp8_block":
        w = QuantizationArgs(**fp8, strategy="block", block_structure=[128, 128])
        x = QuantizationArgs(**fp8, strategy="group", group_size=128, dynamic=True)
    else:
        w = QuantizationArgs(**fp8, strategy=kind.split("_")[1])
        x = QuantizationArgs(**fp8, strategy="token", dynamic=True)
    return QuantizationScheme(targets=["Linear"], weights=w, input_activations=x), \
        "float-quantized"


def minmax(w, args):
    """The weight's min and max over the strategy's groups, shaped as the scale."""
    s = args.strategy.value if hasattr(args.strategy, "value") else args.strategy
    if s == "tensor":
        return w.amin().reshape(1), w.amax().reshape(1)
    if s == "channel":
        return w.amin(1, keepdim=True), w.amax(1, keepdim=True)
    if s == "group":
        g = w.unflatten(-1, (w.shape[1] // args.group_size, args.group_size))
        return g.amin(-1), g.amax(-1)
    from compressed_tensors.quantization.utils import maybe_pad_tensor_for_block_quant
    bh, bw = args.block_structure
    w = maybe_pad_tensor_for_block_quant(w, (bh, bw))  # zeros: 0 is in every range anyway
    r, c = w.shape
    b = w.reshape(r // bh, bh, c // bw, bw).transpose(1, 2)
    return b.amin((-1, -2)), b.amax((-1, -2))


def make_model(family, dtype):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    common = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
                  rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True,
                  bos_token_id=1, eos_token_id=2)
    if family == "llama":
        cfg = LlamaConfig(head_dim=32, **common)
        model = LlamaForCausalLM(cfg)
    else:
        cfg = Qwen2Config(**common)
        model = Qwen2ForCausalLM(cfg)
    model = model.float()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.05 * torch.randn_like(p))
    return cfg, model.to(dtype)


BENCH_SHAPES = {
    "qwen2.5-0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                         num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                         max_position_embeddings=32768, rms_norm_eps=1e-6,
                         rope_theta=1000000.0, tie_word_embeddings=True),
}


def build_bench(shape, out):
    """A random model of a real shape, int4 group 128 symmetric, written to out."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (QuantizationArgs, QuantizationConfig,
                                                 QuantizationScheme, apply_quantization_config)
    from compressed_tensors.quantization.utils import calculate_qparams
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    cfg = Qwen2Config(bos_token_id=1, eos_token_id=2, **BENCH_SHAPES[shape])
    model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(1.0 + 0.1 * torch.randn_like(p) if "norm" in n else 0.02 * torch.randn_like(p))
    w = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group",
                         group_size=128)
    sch = QuantizationScheme(targets=["Linear"], weights=w)
    apply_quantization_config(model, QuantizationConfig(config_groups={"group_0": sch},
                                                        ignore=["lm_head"]))
    with torch.no_grad():
        for _, m in model.named_modules():
            if getattr(m, "quantization_scheme", None) is None:
                continue
            lo, hi = minmax(m.weight.float(), w)
            s, _ = calculate_qparams(lo.to(torch.bfloat16), hi.to(torch.bfloat16), w)
            m.weight_scale.data.copy_(s.reshape(m.weight_scale.shape))
    comp = ModelCompressor.from_pretrained_model(model, quantization_format="pack-quantized")
    comp.compress_model(model)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    sd = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    cfg.torch_dtype = torch.bfloat16
    cfg.save_pretrained(out)
    comp.update_config(out)
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"{shape} int4 group 128: {out}, {size} bytes")


def build(name, family, kind, dtype, out_root):
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (QuantizationConfig, apply_quantization_config)
    from compressed_tensors.quantization.utils import calculate_qparams
    cfg, model = make_model(family, dtype)
    sch, fmt = scheme(kind)
    qcfg = QuantizationConfig(config_groups={"group_0": sch}, ignore=["lm_head"])
    apply_quantization_config(model, qcfg)
    with torch.no_grad():
        for _, m in model.named_modules():
            if getattr(m, "quantization_scheme", None) is None:
                continue
            lo, hi = minmax(m.weight.float(), sch.weights)
            s, z = calculate_qparams(lo.to(dtype), hi.to(dtype), sch.weights)
            m.weight_scale.data.copy_(s.reshape(m.weight_scale.shape))
            if hasattr(m, "weight_zero_point"):
                m.weight_zero_point.data.copy_(z.reshape(m.weight_zero_point.shape))
    comp = ModelCompressor.from_pretrained_model(model, quantization_format=fmt)
    comp.compress_model(model)
    out = os.path.join(out_root, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    sd = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    cfg.torch_dtype = dtype
    cfg.save_pretrained(out)
    comp.update_config(out)
    # the package's decompression, into a fresh model in f32
    comp.decompress_model(model)
    deq = {k: v.float() for k, v in model.state_dict().items()
           if not any(s in k for s in ("_scale", "_zero_point", "_shape", "_packed"))}
    ref = type(model)(cfg).float().eval()
    deq["lm_head.weight"] = deq["model.embed_tokens.weight"]
    missing, unexpected = ref.load_state_dict(deq, strict=False)
    assert not [m for m in missing if "rotary" not in m] and not unexpected, (missing, unexpected)
    with torch.no_grad():
        logits = [ref(torch.tensor([p])).logits[0].numpy() for p in PROMPTS]
        ids = list(PROMPTS[0])
        for _ in range(GREEDY):
            ids.append(int(ref(torch.tensor([ids])).logits[0, -1].argmax()))
    for lg in logits:
        assert np.all(np.isfinite(lg)) and 1 < np.abs(lg).max() < 60
    deq[f"{DEQ_TENSOR}.weight"].numpy().astype("<f4").tofile(os.path.join(out, "dequant.f32"))
    exp = {"prompts": PROMPTS, "format": fmt, "dequant_tensor": f"{DEQ_TENSOR}.weight",
           "logits": [np.round(lg.astype(np.float64), 7).tolist() for lg in logits],
           "greedy": ids[len(PROMPTS[0]):]}
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(exp, f)
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"{name}: {fmt}, {size} bytes")


FIXTURES = [
    ("llama_w8_channel", "llama", "w8_channel", torch.float32),
    ("llama_w4_group", "llama", "w4_group", torch.float32),
    ("qwen2_w4_group_asym", "qwen2", "w4_group_asym", torch.float32),
    ("llama_fp8_tensor", "llama", "fp8_tensor", torch.float32),
    ("llama_fp8_channel", "llama", "fp8_channel", torch.float32),
    ("llama_fp8_block", "llama", "fp8_block", torch.bfloat16),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "ctensors"))
    ap.add_argument("--bench", choices=sorted(BENCH_SHAPES),
                    help="write one benchmark checkpoint of this shape to --out instead")
    args = ap.parse_args()
    if args.bench:
        build_bench(args.bench, args.out)
        return
    for f in FIXTURES:
        build(*f, args.out)


if __name__ == "__main__":
    main()
