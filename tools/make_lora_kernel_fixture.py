#!/usr/bin/env python3
"""Writes tests/fixtures/lora_kernel/: one linear layer with a LoRA adapter,
run by the `peft` package, which test_lora_kernel checks kern_lora against.

Each CASE.safetensors holds, for a torch Linear(IN, OUT, bias=False) wrapped
by PEFT's LoRA layer (lora_B given random values: PEFT initialises it to 0):
  x       (M, IN)   the input, f32 (bf16 values in the bf16 case)
  a       (R, IN)   lora_A.weight, as PEFT stores it (f32 or bf16)
  b       (OUT, R)  lora_B.weight
  scale   (1,)      PEFT's scaling: lora_alpha / r, or / sqrt(r) with rsLoRA
  base    (M, OUT)  the base layer's output, f32
  expect  (M, OUT)  PEFT's output, base + lora_B(lora_A(x)) * scaling, f32
Cases: f32 (r 8, alpha 16), rslora (f32, r 16, alpha 12, use_rslora), bf16
(the model and the adapter in bf16, autocast_adapter_dtype=False, so PEFT
computes the branch in bf16: lora_A's output rounded to bf16 as kern_lora's
bf16 mode rounds t; PEFT then also rounds lora_B's output, the product with
scaling and the sum to bf16, which kern_lora keeps in f32).
Deterministic (seeded): rerun to remake them.

    python3 tools/make_lora_kernel_fixture.py [OUT_DIR]
"""
import math
import os
import sys

import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file

M, IN, OUT = 5, 48, 40
CASES = [
    # name, r, alpha, rslora, dtype
    ("f32", 8, 16, False, torch.float32),
    ("rslora", 16, 12, True, torch.float32),
    ("bf16", 8, 16, False, torch.bfloat16),
]


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(IN, OUT, bias=False)

    def forward(self, x):
        return self.proj(x)


def make(name, r, alpha, rslora, dtype, out):
    torch.manual_seed(40 + r)
    base = Layer().to(dtype)
    x = torch.empty(M, IN).uniform_(-2, 2).to(dtype)
    with torch.no_grad():
        base_out = base(x)
    cfg = LoraConfig(r=r, lora_alpha=alpha, use_rslora=rslora, target_modules=["proj"],
                     lora_dropout=0.0)
    model = get_peft_model(base, cfg, autocast_adapter_dtype=False).eval()
    lora = model.base_model.model.proj
    with torch.no_grad():
        lora.lora_B["default"].weight.uniform_(-1, 1)
        got = model(x)
    a = lora.lora_A["default"].weight.detach().contiguous()
    b = lora.lora_B["default"].weight.detach().contiguous()
    scaling = lora.scaling["default"]
    want = alpha / math.sqrt(r) if rslora else alpha / r
    assert abs(scaling - want) < 1e-12, (scaling, want)
    assert a.dtype == dtype and b.dtype == dtype
    save_file({
        "x": x.float().contiguous(),
        "a": a,
        "b": b,
        "scale": torch.tensor([scaling], dtype=torch.float32),
        "base": base_out.float().contiguous(),
        "expect": got.float().contiguous(),
    }, os.path.join(out, name + ".safetensors"))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "fixtures", "lora_kernel")
    os.makedirs(out, exist_ok=True)
    for case in CASES:
        make(*case, out)


if __name__ == "__main__":
    main()
