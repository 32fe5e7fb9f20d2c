#!/usr/bin/env python3
"""Write random PEFT LoRA adapters for a base checkpoint's shape, for benchmarks.

    python3 tools/make_random_lora.py BASE_DIR OUT_DIR [--count 8] [--rank 16]
        [--alpha 32] [--dtype bf16] [--targets q_proj,k_proj,...] [--seed 0]

BASE_DIR holds a Llama-family config.json (e.g. one written by `shardswap gen-model --preset
llama-3.2-1b`); OUT_DIR/adapter_0 .. OUT_DIR/adapter_{count-1} each get adapter_config.json
and adapter_model.safetensors with PEFT's tensor names
(base_model.model.model.layers.L.{self_attn,mlp}.X.lora_{A,B}.weight), A of (rank, in) and
B of (out, rank), random values of the size PEFT's trained adapters have. Only numpy and
safetensors are needed (no peft, no torch); the outputs are not references of anything,
only shapes and bytes: use tools/make_lora_fixtures.py for fidelity fixtures.
"""

import argparse
import json
import os

import numpy as np
from safetensors.numpy import save_file

ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


def shapes(cfg):
    """(in, out) of every Llama projection."""
    h = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads", heads)
    hd = cfg.get("head_dim") or h // heads
    f = cfg["intermediate_size"]
    return {
        "q_proj": (h, heads * hd),
        "k_proj": (h, kv * hd),
        "v_proj": (h, kv * hd),
        "o_proj": (heads * hd, h),
        "gate_proj": (h, f),
        "up_proj": (h, f),
        "down_proj": (f, h),
    }


def to_dtype(a, dtype):
    if dtype == "f32":
        return a.astype(np.float32)
    if dtype == "f16":
        return a.astype(np.float16)
    # bf16: safetensors.numpy has no bfloat16; store the top halves of f32 as BF16 below
    return a.astype(np.float32)


def save_bf16(tensors, path):
    """safetensors with BF16 tensors from f32 arrays (round to nearest even), by hand."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype=np.float32)
        u = a.view(np.uint32)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        b = u.tobytes()
        header[name] = {"dtype": "BF16", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("base")
    p.add_argument("out")
    p.add_argument("--count", type=int, default=8)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--alpha", type=float, default=32)
    p.add_argument("--dtype", choices=("f32", "f16", "bf16"), default="bf16")
    p.add_argument("--targets", default=",".join(ATTN + MLP))
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    with open(os.path.join(a.base, "config.json")) as f:
        cfg = json.load(f)
    targets = [t for t in a.targets.split(",") if t]
    sh = shapes(cfg)
    for t in targets:
        if t not in sh:
            raise SystemExit(f"--targets {t}: expected some of {','.join(ATTN + MLP)}")
    layers = cfg["num_hidden_layers"]
    rng = np.random.default_rng(a.seed)
    for n in range(a.count):
        d = os.path.join(a.out, f"adapter_{n}")
        os.makedirs(d, exist_ok=True)
        tensors = {}
        for layer in range(layers):
            for t in targets:
                i, o = sh[t]
                blk = "self_attn" if t in ATTN else "mlp"
                pre = f"base_model.model.model.layers.{layer}.{blk}.{t}"
                # A as PEFT initialises it (kaiming-uniform scale), B small
                tensors[pre + ".lora_A.weight"] = to_dtype(
                    rng.uniform(-1, 1, (a.rank, i)) / np.sqrt(i), a.dtype)
                tensors[pre + ".lora_B.weight"] = to_dtype(
                    rng.standard_normal((o, a.rank)) * 1e-3, a.dtype)
        conf = {
            "base_model_name_or_path": None,
            "bias": "none",
            "fan_in_fan_out": False,
            "inference_mode": True,
            "lora_alpha": a.alpha,
            "lora_dropout": 0.0,
            "modules_to_save": None,
            "peft_type": "LORA",
            "r": a.rank,
            "target_modules": targets,
            "task_type": "CAUSAL_LM",
            "use_dora": False,
            "use_rslora": False,
        }
        with open(os.path.join(d, "adapter_config.json"), "w") as f:
            json.dump(conf, f, indent=2)
        path = os.path.join(d, "adapter_model.safetensors")
        if a.dtype == "bf16":
            save_bf16(tensors, path)
        else:
            save_file(tensors, path)
        print(f"wrote {d}: rank {a.rank}, {layers} layers, {len(targets)} targets, "
              f"{os.path.getsize(path) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
