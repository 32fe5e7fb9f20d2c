#!/usr/bin/env python3
"""Build the committed Gemma and sliding-window reference fixtures under tests/fixtures/models/.

Regenerate (from the repository root, CPU only, no network needed):

    pip install -r tools/requirements.txt && python3 tools/make_window_fixtures.py

Options: --out DIR (default tests/fixtures/models; only this script's directories are written),
--only NAME[,NAME...] (those fixtures).

The companion of tools/make_llama_fixtures.py, with the same output format per fixture directory
(expected.json, expected_logits.safetensors, and for bf16 storage expected_bf16.json and
expected_logits_bf16.safetensors), so tests/test_opt.c and tests/test_sharded.c read them with
the same helpers. Per fixture: a tiny random model built from its config class (no download),
re-initialised with a larger std so logits are well spread (Gemma's norm weights w small, as
its norms scale by 1 + w), cast to the storage dtype, saved with save_pretrained, loaded back in
float32 with eager attention (Gemma 2's soft-capping has no sdpa path), and recorded: the
left-padded batch's logits (attention_mask, and position_ids = cumsum(mask) - 1 as generate()
makes them), prompt 0 alone, and each prompt's greedy continuation of 12 tokens.

Every fixture's sliding window (4 keys) is shorter than its contexts (prompts of 5 and 9
tokens, 12 generated), so the window decides the logits: the script asserts that the same
weights without the window give logits that differ by more than 1e-2 (self_check), and, for
Gemma 2, that the soft-capping matters likewise. Seeds are searched as the Llama script does
(no EOS in any greedy continuation, top1-top2 margin above 2e-3 of max|logit| at every step,
at least 6 distinct ids per continuation (3 for Gemma's tied heads, which favour repeating
the last token at this size); for bf16 no step within one bf16 rounding).

Unlike tools/make_llama_fixtures.py there is no second numpy implementation: the reference is
transformers alone (eager and sdpa agree where sdpa runs, checked here).
"""

import argparse
import copy
import json
import os
import sys

import numpy as np
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3Config,
                          Gemma3ForConditionalGeneration, Gemma3ForCausalLM, Gemma3TextConfig,
                          MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          SiglipVisionConfig)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import Rejected, build_seeded, chmod_files, dir_size, rel_err, write_json  # noqa: E402
from make_llama_fixtures import (BF16_TOLERANCE, MAX_NEW_TOKENS, MIN_DISTINCT, PROMPT_LENS,  # noqa: E402
                                 SELF_CHECK_TOL, TOLERANCE, as_list, batch_logits, bf16_run,
                                 greedy_checked, logits_in_range, np_positions, pad_left, save_fresh,
                                 write_bf16_expect)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "tests", "fixtures", "models")
PAD, BOS, EOS = 0, 1, 2
FIRST_TOKEN, LAST_TOKEN = 5, 250   # prompts avoid 250..255 (Gemma 3's image ids live there)
WINDOW = 4
SIZE_BUDGET = 3_500_000       # bytes, all five directories together

GEMMA_COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
                    rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh",
                    sliding_window=WINDOW, bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD)
LLAMA_COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=64, hidden_act="silu",
                    bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD, rms_norm_eps=1e-5,
                    tie_word_embeddings=False)

FIXTURES = [
    dict(name="gemma2_softcap_f32", kind="gemma2", storage="float32", seed=41000,
         cfg=dict(GEMMA_COMMON, num_hidden_layers=4, query_pre_attn_scalar=24,
                  attn_logit_softcapping=2.0, final_logit_softcapping=5.0),
         covers="Gemma2ForCausalLM: 4 layers alternating local (window 4) and global (layer_types "
                "as transformers 5 writes them), attention logit soft-capping 2 and final logit "
                "soft-capping 5 (both decide the logits here), query_pre_attn_scalar 24 (not "
                "head_dim 16), GQA 4 query / 2 KV heads, RMSNorm (1 + w) before and after "
                "attention and MLP, GeGLU (gelu_pytorch_tanh), embedding times sqrt(64), tied "
                "head, f32 storage"),
    dict(name="gemma3_qknorm_bf16", kind="gemma3", storage="bfloat16", seed=42000, bf16=True,
         hub=True,
         cfg=dict(GEMMA_COMMON, num_hidden_layers=4, num_key_value_heads=1,
                  query_pre_attn_scalar=16, sliding_window_pattern=3,
                  rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0,
                                                      "rope_theta": 1000000.0},
                                   "sliding_attention": {"rope_type": "default",
                                                         "rope_theta": 10000.0}}),
         covers="Gemma3ForCausalLM (model_type gemma3_text): per-head q_norm and k_norm (1 + w) "
                "before the rotary, local layers 0, 1, 3 (window 4, rope_local_base_freq 10000) "
                "and global layer 2 (rope_theta 1e6, linear rope_scaling factor 2), MQA (1 KV "
                "head), no soft-capping, tied head; config.json in the Hub's spelling "
                "(sliding_window_pattern 3, rope_theta, rope_local_base_freq, rope_scaling; no "
                "layer_types, no rope_parameters); bf16 storage with bf16 references"),
    dict(name="gemma3_mm_text_f32", kind="gemma3mm", storage="float32", seed=43000,
         cfg=dict(GEMMA_COMMON, num_hidden_layers=4, query_pre_attn_scalar=16,
                  layer_types=["sliding_attention", "full_attention"] * 2),
         covers="Gemma3ForConditionalGeneration (model_type gemma3): the text model alone, from "
                "text_config and the language_model.model.* tensors (the names transformers saves); a one-layer SigLIP vision "
                "tower and projector are in the checkpoint and never read; image_token_index "
                "252 (refused as input); layers 0 and 2 local (window 4), 1 and 3 global"),
    dict(name="mistral_window_f32", kind="mistral", storage="float32", seed=44000,
         cfg=dict(LLAMA_COMMON, num_hidden_layers=2, sliding_window=WINDOW),
         covers="MistralForCausalLM with sliding_window 4 (every layer), shorter than every "
                "context here; f32"),
    dict(name="qwen2_window_f32", kind="qwen2", storage="float32", seed=45000,
         cfg=dict(LLAMA_COMMON, num_hidden_layers=3, use_sliding_window=True,
                  sliding_window=WINDOW, max_window_layers=1),
         covers="Qwen2ForCausalLM with use_sliding_window true, sliding_window 4 and "
                "max_window_layers 1: layer 0 global, layers 1 and 2 within the window "
                "(layer_types as transformers 5 writes them); q/k/v biases; f32"),
]


def build_model(spec):
    kind, cfg = spec["kind"], copy.deepcopy(spec["cfg"])
    if kind == "gemma2":
        return Gemma2ForCausalLM(Gemma2Config(**cfg))
    if kind == "gemma3":
        return Gemma3ForCausalLM(Gemma3TextConfig(**cfg))
    if kind == "gemma3mm":
        vision = SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                    num_attention_heads=2, image_size=28, patch_size=14)
        config = Gemma3Config(text_config=Gemma3TextConfig(**cfg), vision_config=vision,
                              mm_tokens_per_image=4, boi_token_index=250, eoi_token_index=251,
                              image_token_index=252, bos_token_id=BOS, eos_token_id=EOS,
                              pad_token_id=PAD)
        return Gemma3ForConditionalGeneration(config)
    if kind == "mistral":
        return MistralForCausalLM(MistralConfig(**cfg))
    return Qwen2ForCausalLM(Qwen2Config(**cfg))


def model_class(kind):
    return dict(gemma2=Gemma2ForCausalLM, gemma3=Gemma3ForCausalLM,
                gemma3mm=Gemma3ForConditionalGeneration, mistral=MistralForCausalLM,
                qwen2=Qwen2ForCausalLM)[kind]


def reinit_(model):
    gemma = "Gemma" in type(model).__name__
    with torch.no_grad():
        for name, prm in model.named_parameters():
            if "vision" in name or "multi_modal" in name:
                prm.copy_(0.02 * torch.randn_like(prm))
            elif "norm" in name:
                prm.copy_((0.0 if gemma else 1.0) + (0.1 if gemma else 0.2) * torch.randn_like(prm))
            elif name.endswith(".bias"):
                prm.copy_(0.1 * torch.randn_like(prm))
            elif "embed_tokens" in name or name.startswith("lm_head"):
                prm.copy_((0.1 if gemma else 0.3) * torch.randn_like(prm))
            else:
                prm.copy_((0.5 if gemma else 0.15) * torch.randn_like(prm))


def hub_style(cfg):
    """Gemma 3's config.json as the Hub spells it."""
    cfg = dict(cfg)
    rp = cfg.pop("rope_parameters")
    cfg.pop("layer_types")
    cfg["sliding_window_pattern"] = 3
    cfg["rope_theta"] = rp["full_attention"]["rope_theta"]
    cfg["rope_local_base_freq"] = rp["sliding_attention"]["rope_theta"]
    cfg["rope_scaling"] = {"rope_type": "linear", "factor": rp["full_attention"]["factor"]}
    return cfg


def without_window(model_cls, out_dir, kind):
    """The same weights with no sliding window (and, for Gemma 2, no soft-capping)."""
    cfg = json.load(open(os.path.join(out_dir, "config.json")))
    variants = []
    t = cfg["text_config"] if kind == "gemma3mm" else cfg
    nw = copy.deepcopy(cfg)
    tw = nw["text_config"] if kind == "gemma3mm" else nw
    tw["sliding_window"] = 64  # longer than any context here
    variants.append(("if_no_sliding_window", nw))
    if kind == "gemma2":
        nc = copy.deepcopy(cfg)
        nc["attn_logit_softcapping"] = None
        variants.append(("if_no_attn_softcapping", nc))
        nf = copy.deepcopy(cfg)
        nf["final_logit_softcapping"] = None
        variants.append(("if_no_final_softcapping", nf))
    del t
    out = []
    for label, c in variants:
        conf = model_cls.config_class.from_dict(c)
        out.append((label, model_cls.from_pretrained(out_dir, config=conf, dtype=torch.float32,
                                                     attn_implementation="eager").eval()))
    return out


def try_build(spec, seed, out_dir):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    kind = spec["kind"]
    model_cls = model_class(kind)
    model = build_model(spec).eval()
    reinit_(model)
    save_fresh(model, spec["storage"], out_dir)
    del model
    cfg_path = os.path.join(out_dir, "config.json")
    native = model_cls.from_pretrained(out_dir, dtype=torch.float32,
                                       attn_implementation="eager").eval()
    if spec.get("hub"):
        cfg = json.load(open(cfg_path))
        with open(cfg_path, "w") as f:
            json.dump(hub_style(cfg), f, indent=2, sort_keys=True)
            f.write("\n")
    ref = model_cls.from_pretrained(out_dir, dtype=torch.float32,
                                    attn_implementation="eager").eval()
    tcfg = ref.config.get_text_config() if kind == "gemma3mm" else ref.config
    assert kind == "mistral" or "sliding_attention" in tcfg.layer_types
    if kind == "qwen2":
        assert tcfg.layer_types == ["full_attention", "sliding_attention", "sliding_attention"]
    with safe_open(os.path.join(out_dir, "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    if kind == "gemma3mm":
        # transformers saves the Hub's names: language_model.model.*, vision_tower.*
        assert "language_model.model.embed_tokens.weight" in keys
        assert any("vision_tower." in k for k in keys)
    assert "lm_head.weight" not in keys or not kind.startswith("gemma")

    prompts = [[BOS] + [int(t) for t in rng.integers(FIRST_TOKEN, LAST_TOKEN, size=n - 1)]
               for n in PROMPT_LENS]
    ids, mask = pad_left(prompts, PAD)
    pos = np_positions(mask).tolist()
    valid = torch.tensor(mask).bool()
    L0 = len(prompts[0])
    logits = batch_logits(ref, ids, mask, pos)
    if spec.get("hub"):
        assert torch.equal(batch_logits(native, ids, mask, pos), logits), \
            "the Hub-style config.json reads differently"
    del native
    with torch.inference_mode():
        logits0 = ref(torch.tensor([prompts[0]])).logits[0].float()
    vl, maxabs = logits_in_range(logits, valid)
    e_pad = rel_err(logits[0, -L0:], logits0)
    assert e_pad < SELF_CHECK_TOL, e_pad
    e_sdpa = None
    if kind != "gemma2":
        ref.set_attn_implementation("sdpa")
        e_sdpa = rel_err(batch_logits(ref, ids, mask, pos)[valid], vl)
        ref.set_attn_implementation("eager")
        assert e_sdpa < SELF_CHECK_TOL, e_sdpa

    # a tied head scaled by sqrt(hidden) favours repeating the last token in models this
    # small: Gemma's continuations need only 3 distinct ids
    greedy, min_margin = greedy_checked(ref, prompts, [EOS],
                                        3 if kind.startswith("gemma") else MIN_DISTINCT)
    # the window (and the caps) decide the logits of the longest greedy sequence
    checks = {}
    full_ids = torch.tensor([prompts[1] + greedy[1]["output"]])
    with torch.inference_mode():
        base = ref(full_ids).logits[0].float()
        assert base[len(prompts[1]) - 1:-1].argmax(-1).tolist() == greedy[1]["output"]
        for label, other in without_window(model_cls, out_dir, kind):
            checks[label] = rel_err(other(full_ids).logits[0].float(), base)
            if checks[label] <= 1e-2:
                raise Rejected(f"{label}: {checks[label]:.2e} (would not matter)")
    with torch.inference_mode():
        gb = ref.generate(torch.tensor(ids), attention_mask=torch.tensor(mask), do_sample=False,
                          max_new_tokens=MAX_NEW_TOKENS)
    batched_same = all(row == g["output"] for row, g in zip(gb[:, len(ids[0]):].tolist(), greedy))
    del ref

    bf16 = None
    if spec.get("bf16"):
        bf16 = bf16_run(model_cls, out_dir, prompts, [EOS], ids, mask, pos, valid, vl,
                        attn_implementation="eager")
        if bf16["err"] >= BF16_TOLERANCE:
            raise Rejected(f"bf16 vs f32 {bf16['err']}")

    save_file({"logits": logits.contiguous(), "logits_greedy0": logits0.contiguous()},
              os.path.join(out_dir, "expected_logits.safetensors"), metadata={"format": "pt"})
    notes = [
        "Covers: " + spec["covers"] + ".",
        f"Reference = transformers {model_cls.__name__} loaded back from this directory in float32, "
        "eager attention (sdpa agrees within 1e-5 where it runs: self_check), eval mode. Made by "
        "tools/make_window_fixtures.py.",
        f"Sliding window {WINDOW}: a query at cache position p sees the keys in (p - {WINDOW}, p] "
        "(transformers' sliding_window_overlay, on cache indices, so left pads count inside the "
        "window of a padded row); prompts of lengths " + str(PROMPT_LENS) + " plus 12 greedy "
        "tokens pass it. self_check.if_* says how much the logits of prompt 1 and its greedy "
        "continuation change without the window (and without each soft-cap).",
        "Batch: left-padded with id 0; attention_mask 1 for real tokens; position_ids = "
        "cumsum(attention_mask) - 1, 0 on pads (what generate() passes). Compare only where "
        "attention_mask == 1.",
        "Greedy: generate(prompt, do_sample=False, max_new_tokens=12) on each prompt alone; "
        "'output' holds the generated ids.",
    ]
    expected = dict(
        notes=notes, transformers_version=transformers.__version__,
        torch_version=torch.__version__.split("+")[0], seed=seed,
        architecture=model_cls.__name__, storage_dtype=spec["storage"], reference_dtype="float32",
        bos_token_id=BOS, eos_token_ids=[EOS], pad_token_id_used=PAD,
        batch=dict(input_ids=ids, attention_mask=mask, position_ids=pos),
        greedy=[dict(prompt=g["prompt"], max_new_tokens=g["max_new_tokens"], output=g["output"],
                     stopped_at_eos=False) for g in greedy],
        tolerance=TOLERANCE, max_abs_logit=round(maxabs, 4),
        min_greedy_margin_rel=round(min_margin, 6),
        self_check=dict(padded_vs_unpadded=float(f"{e_pad:.3e}"),
                        batched_generate_same=batched_same,
                        **({"sdpa_vs_eager": float(f"{e_sdpa:.3e}")} if e_sdpa is not None else {}),
                        **{k: float(f"{v:.3e}") for k, v in checks.items()}),
    )
    write_json(os.path.join(out_dir, "expected.json"), expected)
    if bf16:
        write_bf16_expect(out_dir, [f"transformers {model_cls.__name__} loaded with dtype=torch.bfloat16, "
                                    "eager attention; the batch of expected.json; logits widened to f32.",
                                    "margins: each greedy step's (top1 - top2) / max|logit|."],
                          bf16, greedy, ids, mask, pos)
    chmod_files(out_dir)
    return dict(name=spec["name"], seed=seed, min_margin=min_margin, maxabs=maxabs, checks=checks)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--only")
    args = ap.parse_args()
    torch.set_num_threads(1)
    specs = [s for s in FIXTURES if not args.only or s["name"] in args.only.split(",")]
    rows = build_seeded(specs, try_build, args.out)
    for r in rows:
        print(f"{r['name']}: seed {r['seed']} margin {r['min_margin']:.2e} max|logit| "
              f"{r['maxabs']:.2f} {r['checks']}")
    total = sum(dir_size(os.path.join(args.out, s["name"])) for s in specs)
    print(f"total {total} bytes")
    assert total <= SIZE_BUDGET, total


if __name__ == "__main__":
    main()
