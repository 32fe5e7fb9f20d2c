#!/usr/bin/env python3
"""Writes the bf16-mode references of every committed fixture model: what
transformers computes when it runs the checkpoint in bfloat16 (weights and
activations bf16, as `from_pretrained(..., dtype=torch.bfloat16)` serves a bf16
model), for shardswap's `--compute bf16` test (tests/test_opt.c).

    python3 tools/make_bf16_expect.py [--fixtures tests/fixtures/models]

For each OPT fixture directory (config.json's model_type "opt"; the
Llama-family fixtures get theirs from tools/make_llama_fixtures.py) with its
own expected.json (not "same_as"), it
reads the prompts and the padded batch from expected.json and writes
  expected_bf16.json                  greedy continuations under bf16, the
                                      smallest top-2 margin seen, the tolerance
  expected_logits_bf16.safetensors    "logits" [3, T, vocab] and
                                      "logits_greedy0" [len0, vocab], F32
                                      (the bf16 logits widened)
Needs the pinned versions of tools/requirements.txt.
"""
import argparse
import json
import os

import torch
from safetensors.torch import save_file
from transformers import OPTForCausalLM

# max |ours - ref| / max |ref| the test allows between shardswap's bf16 mode
# and transformers in bf16: both round the matmul inputs to bf16, but
# transformers also rounds every intermediate (residual stream, LayerNorm and
# softmax outputs) to bf16 and shardswap keeps them in f32, so each differs
# from the f32 result by its own rounding, a few bf16 ulps (2^-8) of the
# logits' scale.
TOLERANCE = 3e-2
# a greedy step whose bf16 margin is below this is a tie: transformers took
# the lower token id, and shardswap's logits (not rounded to bf16) need not tie
MARGIN_MIN = 1e-9


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--fixtures", default=os.path.join(here, "..", "tests", "fixtures", "models"))
    a = ap.parse_args()
    torch.manual_seed(0)
    for name in sorted(os.listdir(a.fixtures)):
        d = os.path.join(a.fixtures, name)
        with open(os.path.join(d, "config.json")) as f:
            if json.load(f).get("model_type") != "opt":
                continue
        with open(os.path.join(d, "expected.json")) as f:
            exp = json.load(f)
        if "same_as" in exp:
            with open(os.path.join(d, "expected_bf16.json"), "w") as f:
                json.dump({"same_as": exp["same_as"]}, f, indent=1)
                f.write("\n")
            continue
        model = OPTForCausalLM.from_pretrained(d, dtype=torch.bfloat16).eval()
        ids = torch.tensor(exp["batch"]["input_ids"])
        mask = torch.tensor(exp["batch"]["attention_mask"])
        p0 = exp["greedy"][0]["prompt"]
        greedy, min_margin = [], float("inf")
        with torch.inference_mode():
            logits = model(ids, attention_mask=mask).logits.float()
            logits0 = model(torch.tensor([p0])).logits[0].float()
            for g in exp["greedy"]:
                p = g["prompt"]
                out = model.generate(torch.tensor([p]),
                                     attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                     do_sample=False, max_new_tokens=g["max_new_tokens"],
                                     return_dict_in_generate=True, output_logits=True)
                new = [int(t) for t in out.sequences[0, len(p):]]
                margins = []
                for row in out.logits:
                    top2 = torch.topk(row[0].float(), 2).values
                    margins.append(float(top2[0] - top2[1]) / float(row[0].float().abs().max()))
                min_margin = min(min_margin, min(margins))
                greedy.append(dict(prompt=p, max_new_tokens=g["max_new_tokens"], output=new,
                                   margins=[round(x, 6) for x in margins],
                                   same_as_f32=new == g["output"]))
        save_file({"logits": logits.contiguous(), "logits_greedy0": logits0.contiguous()},
                  os.path.join(d, "expected_logits_bf16.safetensors"), metadata={"format": "pt"})
        doc = {
            "notes": [
                "transformers OPTForCausalLM loaded with dtype=torch.bfloat16 (weights rounded to "
                "bf16 where stored wider; activations bf16 between every op), sdpa attention, "
                "eval mode; logits widened to f32. Made by tools/make_bf16_expect.py.",
                "margins: each greedy step's (top1 - top2) / max|logit| in transformers' bf16 "
                "logits; min_greedy_margin the smallest. bf16 logits are coarse (8 bits): a "
                "margin of 0 is a tie that transformers breaks by the lower token id: from the "
                "first step whose margin is below margin_min, the continuation is the "
                "rounding's choice, not the model's, and the test compares ids up to there.",
            ],
            "batch": exp["batch"],
            "tolerance": TOLERANCE,
            "margin_min": MARGIN_MIN,
            "min_greedy_margin": min_margin,
            "greedy": greedy,
        }
        with open(os.path.join(d, "expected_bf16.json"), "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print(f"{name}: greedy same as f32: {[g['same_as_f32'] for g in greedy]}, "
              f"min margin {min_margin:.3g}")


if __name__ == "__main__":
    main()
