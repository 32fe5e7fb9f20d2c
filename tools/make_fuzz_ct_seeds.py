"""Seeds for fuzz_ct (fuzz/corpus/ct): tiny compressed-tensors checkpoints,
config.json and model.safetensors in one file split at "\n@@@@\n" (the
fuzz target's input). A one-layer Llama (hidden 32, one head, vocab 16) in
each format the reader knows: int4 pack-quantized by group with packed
zero points, int8 int-quantized by channel, FP8 float-quantized by block
and by tensor. The values are random; only their layout matters.
    /work/pyenv/bin/python tools/make_fuzz_ct_seeds.py
"""
import json
import os

import numpy as np
import torch
from safetensors.torch import save

H, F, V = 32, 32, 16
OUT = os.path.join(os.path.dirname(__file__), "..", "fuzz", "corpus", "ct")
rng = np.random.default_rng(0)


def config(weights, fmt):
    return {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": H,
        "intermediate_size": F, "num_hidden_layers": 1, "num_attention_heads": 1,
        "num_key_value_heads": 1, "vocab_size": V, "max_position_embeddings": 32,
        "tie_word_embeddings": True,
        "quantization_config": {
            "quant_method": "compressed-tensors", "format": fmt,
            "config_groups": {"group_0": {"format": fmt, "targets": ["Linear"],
                                          "weights": weights}},
            "ignore": ["lm_head"]}}


def modules():
    for m, (r, c) in {"self_attn.q_proj": (H, H), "self_attn.k_proj": (H, H),
                      "self_attn.v_proj": (H, H), "self_attn.o_proj": (H, H),
                      "mlp.gate_proj": (F, H), "mlp.up_proj": (F, H),
                      "mlp.down_proj": (H, F)}.items():
        yield "model.layers.0." + m, r, c


def dense():
    return {"model.embed_tokens.weight": torch.randn(V, H),
            "model.norm.weight": torch.ones(H),
            "model.layers.0.input_layernorm.weight": torch.ones(H),
            "model.layers.0.post_attention_layernorm.weight": torch.ones(H)}


def pack(q, bits):  # q: int rows x cols in [-2^(bits-1), 2^(bits-1)), packed along columns
    u = (q + (1 << (bits - 1))).astype(np.uint64)
    per = 32 // bits
    rows, cols = u.shape
    words = np.zeros((rows, (cols + per - 1) // per), dtype=np.uint64)
    for c in range(cols):
        words[:, c // per] |= u[:, c] << np.uint64(bits * (c % per))
    return torch.from_numpy(words.astype(np.uint32).view(np.int32))


def w4_group():
    t, g = dense(), 32
    for m, r, c in modules():
        t[m + ".weight_packed"] = pack(rng.integers(-8, 8, (r, c)), 4)
        t[m + ".weight_shape"] = torch.tensor([r, c], dtype=torch.int64)
        t[m + ".weight_scale"] = torch.rand(r, c // g) / 8
        zp = rng.integers(-8, 8, (r, c // g))
        t[m + ".weight_zero_point"] = pack(zp.T, 4).T.contiguous()
    w = {"num_bits": 4, "type": "int", "symmetric": False, "strategy": "group", "group_size": g,
         "dynamic": False}
    return config(w, "pack-quantized"), t


def w8_channel():
    t = dense()
    for m, r, c in modules():
        t[m + ".weight"] = torch.from_numpy(rng.integers(-128, 128, (r, c)).astype(np.int8))
        t[m + ".weight_scale"] = torch.rand(r, 1) / 64
    w = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel", "dynamic": False}
    return config(w, "int-quantized"), t


def fp8(strategy):
    t = dense()
    for m, r, c in modules():
        t[m + ".weight"] = (torch.randn(r, c) * 8).to(torch.float8_e4m3fn)
        shape = (1,) if strategy == "tensor" else ((r + 15) // 16, (c + 31) // 32)
        t[m + ".weight_scale"] = (torch.rand(*shape) / 16).to(torch.bfloat16)
    w = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": strategy,
         "dynamic": False}
    if strategy == "block":
        w["block_structure"] = [16, 32]
    return config(w, "float-quantized"), t


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, (cfg, t) in {"w4_group_asym": w4_group(), "w8_channel": w8_channel(),
                           "fp8_block": fp8("block"), "fp8_tensor": fp8("tensor")}.items():
        with open(os.path.join(OUT, name + ".bin"), "wb") as f:
            f.write(json.dumps(cfg).encode() + b"\n@@@@\n" + save(t))


if __name__ == "__main__":
    main()
