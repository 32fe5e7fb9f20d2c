#!/usr/bin/env python3
"""Build the committed LoRA adapter fixtures under tests/fixtures/lora/.

Regenerate (from the repository root, CPU only, no network needed):

    pip install -r tools/requirements.txt && python3 tools/make_lora_fixtures.py

Each adapter is made with the `peft` package on one of the committed tiny random bases of
tests/fixtures/models/ (their prompts and padded batch are reused from the base's
expected.json): a LoraConfig (rank, alpha, rsLoRA, target modules as a list or a regular
expression, rank_pattern / alpha_pattern, layers_to_transform), get_peft_model with
init_lora_weights=False (A and B random, so the adapter changes the logits), B scaled so the
update is of the base's size, then PeftModel.save_pretrained (adapter_config.json,
adapter_model.safetensors, float32). The references come from the saved adapter loaded back
with PeftModel.from_pretrained on the base loaded from disk, as a user runs it:

  expected.json                  base (fixture name), batch (the base's input_ids,
                                 attention_mask, position_ids where the family takes them),
                                 greedy (each prompt alone, 12 new tokens, do_sample False),
                                 tolerance 1e-4 (max|ours - ref| / max|ref| over real
                                 positions), seed, versions, min_greedy_margin_rel
  expected_logits.safetensors    "logits" [3, T, vocab] F32 for the left-padded batch

For a base stored in bfloat16 also what the base's own bf16 references hold, with the base
loaded in bfloat16 (PEFT keeps the adapter's weights in float32 and adds the float32 update
to the bf16 output, its default autocast_adapter_dtype):

  expected_bf16.json             greedy under bf16 with per-step margins, margin_min,
                                 tolerance 3e-2
  expected_logits_bf16.safetensors  "logits" for the batch (bf16 widened)

Seeds are fixed; for each adapter the script tries seeds until every greedy step's top-1
minus top-2 margin exceeds 2e-3 * max|logit| (in bf16: the first 3 steps of each continuation 3e-2, the steps the test compares being those before the first below that), no continuation produces EOS
and the adapter moves the logits by at least 5% of max|logit|. --only NAME rebuilds one.
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch
from safetensors.torch import save_file

import peft
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")
TOL = 1e-4
TOL_BF16 = 3e-2
N_NEW = 12

LLAMA_ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

# name, base, seed, LoraConfig kwargs
ADAPTERS = [
    ("llama_r8_qv", "llama_gqa_f32", 100,
     dict(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"])),
    ("llama_r16_all_rslora", "llama_gqa_f32", 200,
     dict(r=16, lora_alpha=32, use_rslora=True, target_modules=LLAMA_ALL)),
    ("llama_r4_regex_patterns", "llama_gqa_f32", 300,
     dict(r=4, lora_alpha=8, target_modules=r".*\.(k_proj|o_proj|down_proj)",
          rank_pattern={"down_proj": 12}, alpha_pattern={"o_proj": 3})),
    ("llama_r32_mlp_layer1", "llama_gqa_f32", 400,
     dict(r=32, lora_alpha=16, target_modules=["gate_proj", "up_proj", "o_proj"],
          layers_to_transform=[1])),
    ("qwen2_r64_mlp", "qwen2_bias_f32", 500,
     dict(r=64, lora_alpha=64, target_modules=["gate_proj", "down_proj"],
          layers_to_transform=[1])),
    ("opt_r8_all", "pre_ln_f32", 600,
     dict(r=8, lora_alpha=8,
          target_modules=["q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"])),
    ("mistral_headdim_r8", "mistral_headdim_f32", 800,
     dict(r=8, lora_alpha=24, target_modules=["q_proj", "k_proj", "o_proj", "down_proj"])),
    ("qwen3_qknorm_r8", "qwen3_qknorm_bf16", 900,
     dict(r=8, lora_alpha=16, use_rslora=True, target_modules=["q_proj", "k_proj", "v_proj",
                                                                "gate_proj"])),
    ("llama_bf16_r16", "llama_mqa_bf16", 700,
     dict(r=16, lora_alpha=16, target_modules=["q_proj", "v_proj", "o_proj", "up_proj",
                                               "down_proj"])),
]


def load_base(base, dtype=torch.float32):
    return AutoModelForCausalLM.from_pretrained(os.path.join(MODELS, base), dtype=dtype).eval()


def base_expect(base):
    with open(os.path.join(MODELS, base, "expected.json")) as f:
        return json.load(f)


def scale_b_(model, gain):
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.mul_(gain)


def batch_logits(model, batch):
    ids = torch.tensor(batch["input_ids"])
    mask = torch.tensor(batch["attention_mask"])
    kw = {"attention_mask": mask}
    if "position_ids" in batch:
        kw["position_ids"] = torch.tensor(batch["position_ids"])
    with torch.no_grad():
        return model(input_ids=ids, **kw).logits.float()


def greedy(model, prompts, eos):
    out, margins = [], []
    for p in prompts:
        ids = torch.tensor([p])
        steps = []
        with torch.no_grad():
            for _ in range(N_NEW):
                logits = model(input_ids=ids).logits[0, -1].float()
                top = torch.topk(logits, 2)
                steps.append(float((top.values[0] - top.values[1]) / logits.abs().max()))
                ids = torch.cat([ids, top.indices[:1].view(1, 1)], dim=1)
        new = ids[0, len(p):].tolist()
        out.append({"prompt": p, "max_new_tokens": N_NEW, "output": new,
                    "stopped_at_eos": False})
        margins.append(steps)
        if any(t in eos for t in new):
            return None, None
    return out, margins


def rel_err(a, b, mask):
    m = mask.bool()
    return float((a - b)[m].abs().max() / b[m].abs().max())


def try_build(name, base, seed, kw, out_dir):
    ex = base_expect(base)
    prompts = [g["prompt"] for g in ex["greedy"]]
    eos = set(ex.get("eos_token_ids", [])) | {2}
    torch.manual_seed(seed)
    model = get_peft_model(load_base(base), LoraConfig(init_lora_weights=False, **kw))
    scale_b_(model, 4.0)
    shutil.rmtree(out_dir, ignore_errors=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    # what a user runs: the saved adapter on the base loaded from disk
    cfg_path = os.path.join(out_dir, "adapter_config.json")
    with open(cfg_path) as f:
        acfg = json.load(f)
    acfg["base_model_name_or_path"] = base
    with open(cfg_path, "w") as f:
        json.dump(acfg, f, indent=2, sort_keys=True)
    ref = PeftModel.from_pretrained(load_base(base), out_dir).eval()
    logits = batch_logits(ref, ex["batch"])
    mask = torch.tensor(ex["batch"]["attention_mask"])
    base_logits = batch_logits(load_base(base), ex["batch"])
    effect = rel_err(logits, base_logits, mask)
    g, margins = greedy(ref, prompts, eos)
    if g is None or effect < 0.05:
        return None
    min_margin = min(min(s) for s in margins)
    if min_margin < 2e-3:
        return None
    # prompt 0 alone equals its padded row
    alone = ref(input_ids=torch.tensor([prompts[0]])).logits[0].float()
    row = logits[0][mask[0].bool()]
    assert rel_err(alone, row, torch.ones(alone.shape[0])) < 1e-5, name
    expect = {
        "notes": "PeftModel.from_pretrained(base, this directory) in float32; logits of the "
                 "base's left-padded batch; greedy of each prompt alone",
        "base": base,
        "peft_version": peft.__version__,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "seed": seed,
        "batch": ex["batch"],
        "greedy": g,
        "tolerance": TOL,
        "adapter_effect_rel": effect,
        "min_greedy_margin_rel": min_margin,
    }
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expect, f, indent=1)
    save_file({"logits": logits.contiguous()}, os.path.join(out_dir, "expected_logits.safetensors"))
    if ex.get("storage_dtype") == "bfloat16":
        refb = PeftModel.from_pretrained(load_base(base, torch.bfloat16), out_dir).eval()
        lb = batch_logits(refb, ex["batch"])
        gb, mb = greedy(refb, prompts, eos)
        # two bf16 implementations' logits differ by up to ~3e-2 of max|logit|: a
        # greedy step closer than that (margin_min) could go either way, and the
        # test compares each continuation up to its first such step; make that at
        # least 3 steps
        if gb is None or min(min(m[:3]) for m in mb) < TOL_BF16:
            return None
        for e, m in zip(gb, mb):
            e["margins"] = m
        with open(os.path.join(out_dir, "expected_bf16.json"), "w") as f:
            json.dump({"notes": "the base in bfloat16, the adapter's weights float32 (PEFT's "
                                "autocast_adapter_dtype)", "batch": ex["batch"], "greedy": gb,
                       "tolerance": TOL_BF16, "margin_min": TOL_BF16,
                       "bf16_vs_f32_logits": rel_err(lb, logits, mask)}, f, indent=1)
        save_file({"logits": lb.contiguous()},
                  os.path.join(out_dir, "expected_logits_bf16.safetensors"))
    return min_margin


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "lora"))
    ap.add_argument("--only", help="build this adapter only")
    args = ap.parse_args()
    torch.set_num_threads(1)
    total = 0
    for name, base, seed0, kw in ADAPTERS:
        if args.only and name != args.only:
            continue
        out_dir = os.path.join(args.out, name)
        for seed in range(seed0, seed0 + 50):
            m = try_build(name, base, seed, kw, out_dir)
            if m is not None:
                break
        else:
            sys.exit(f"{name}: no seed in [{seed0}, {seed0 + 50}) is well conditioned")
        for fn in os.listdir(out_dir):
            if fn == "README.md":
                os.remove(os.path.join(out_dir, fn))
        size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
        total += size
        print(f"{name}: base {base}, seed {seed}, min margin {m:.4f}, {size} bytes")
    print(f"total {total} bytes")


if __name__ == "__main__":
    main()
