#!/usr/bin/env python3
"""Build the committed mixture-of-experts reference fixtures under tests/fixtures/models/.

Regenerate (from the repository root, CPU only, no network needed):

    pip install -r tools/requirements.txt && python3 tools/make_moe_fixtures.py

Options: --out DIR (default tests/fixtures/models; only this script's directories are written),
--only NAME (one fixture).

The companion of tools/make_llama_fixtures.py and tools/make_qwen3_phi3_fixtures.py, with the same
output format per directory (expected.json, expected_logits.safetensors and, for bf16 storage,
expected_bf16.json and expected_logits_bf16.safetensors), the same prompts, padding, positions,
seed search and conditioning rules (imported from there). Per fixture: a tiny random
MixtralForCausalLM or Qwen3MoeForCausalLM from its config class, re-initialised with a larger std,
cast to the storage dtype, saved with save_pretrained(safe_serialization=True) (transformers 5
holds the experts fused in memory, mlp.experts.gate_up_proj, and saves them one tensor per expert
as the published checkpoints have them: Mixtral's block_sparse_moe.experts.E.w1/w2/w3, Qwen3-MoE's
mlp.experts.E.gate_proj/up_proj/down_proj), config.json rewritten into the Hub spelling (rope_theta
at top level, Qwen3-MoE's num_experts), loaded back in float32, and its logits and greedy
continuations recorded. Every reference is recomputed by an independent float64 numpy forward
(np_forward below: the router's softmax, top-k, renormalisation and the experts per token, from
the saved per-expert tensors) and must agree to 1e-5 relative.

Routing is a discrete choice: a seed is rejected when any token's k-th and (k+1)-th router
logits (the last chosen expert and the first not chosen), in any layer, at any position of the
batch or of a greedy continuation, are closer than ROUTE_GAP (f32) or ROUTE_GAP_BF16 (fixtures
with bf16 references), so the f32 implementations, and bf16 rounding, choose the same experts.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import (GenerationConfig, MixtralConfig, MixtralForCausalLM, Qwen2MoeConfig,
                          Qwen2MoeForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import (Rejected, build_seeded, chmod_files, dir_size,  # noqa: E402
                           np_load_weights, rel_err, write_json)
from make_llama_fixtures import (BF16_TOLERANCE, BOS, MAX_NEW_TOKENS, PAD, SELF_CHECK_TOL,  # noqa: E402
                                 TOLERANCE, as_list, batch_logits, bf16_run, fresh_model, greedy_checked,
                                 logits_in_range, make_prompts, np_attend, np_decoder, np_head_dim,
                                 np_positions, np_rms_norm, np_rotate_half, np_silu, pad_left,
                                 reload_hub_style, save_fresh, write_bf16_expect)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "tests", "fixtures", "models")
SIZE_BUDGET = 1_000_000
ROUTE_GAP = 1e-3          # router logit between the last chosen expert and the next
ROUTE_GAP_BF16 = 1e-2

ARCH = {"mixtral": (MixtralConfig, MixtralForCausalLM),
        "qwen3_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM),
        "qwen2_moe": (Qwen2MoeConfig, Qwen2MoeForCausalLM)}

COMMON = dict(vocab_size=256, hidden_size=32, num_attention_heads=4, max_position_embeddings=64,
              hidden_act="silu", bos_token_id=BOS, pad_token_id=PAD, eos_token_id=2,
              tie_word_embeddings=False)

FIXTURES = [
    dict(name="mixtral_moe_f32", arch="mixtral", storage="float32", seed=21000,
         cfg=dict(intermediate_size=16, num_hidden_layers=2, num_key_value_heads=2,
                  num_local_experts=4, num_experts_per_tok=2, rms_norm_eps=1e-5,
                  sliding_window=None, rope_parameters=dict(rope_type="default", rope_theta=1e6)),
         gen_eos=[2, 3],
         covers="MixtralForCausalLM: every layer a sparse mixture of 4 gated-MLP experts "
                "(block_sparse_moe.gate [4, 32], experts.E.w1 (gate) and w3 (up) [16, 32], w2 "
                "(down) [32, 16]), top 2 per token renormalised, GQA (4 query heads, 2 KV heads), "
                "untied head, Hub-style config.json (num_local_experts, rope_theta at top level), "
                "f32"),
    dict(name="qwen3_moe_bf16", arch="qwen3_moe", storage="bfloat16", seed=22000, bf16=True,
         cfg=dict(intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=3,
                  num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=3,
                  norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[1],
                  rms_norm_eps=1e-6, use_sliding_window=False,
                  rope_parameters=dict(rope_type="default", rope_theta=1e6)),
         gen_eos=[2, 3],
         covers="Qwen3MoeForCausalLM: layers 0 and 2 a sparse mixture of 8 experts (mlp.gate "
                "[8, 32], mlp.experts.E.gate_proj / up_proj [16, 32], down_proj [32, 16]), top 3 "
                "per token NOT renormalised (norm_topk_prob false), layer 1 dense (mlp_only_layers "
                "[1], intermediate_size 48), Qwen3's per-head q/k RMSNorms, head_dim 16 != "
                "hidden/heads 8, GQA (2 KV heads), untied, Hub-style config.json (num_experts, "
                "rope_theta at top level), bf16 storage with bf16-mode references"),
    dict(name="qwen2_moe_f32", arch="qwen2_moe", storage="float32", seed=23000,
         cfg=dict(intermediate_size=48, moe_intermediate_size=16, shared_expert_intermediate_size=24,
                  num_hidden_layers=2, num_key_value_heads=2, num_experts=6, num_experts_per_tok=2,
                  norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], qkv_bias=True,
                  rms_norm_eps=1e-6, use_sliding_window=False,
                  rope_parameters=dict(rope_type="default", rope_theta=1e6)),
         gen_eos=[2, 3],
         covers="Qwen2MoeForCausalLM: every layer 6 experts (mlp.gate [6, 32], "
                "mlp.experts.E.gate_proj / up_proj [16, 32], down_proj [32, 16]), top 2 "
                "renormalised (norm_topk_prob true), and a shared expert every token takes "
                "(mlp.shared_expert.gate_proj / up_proj [24, 32], down_proj [32, 24]) weighted by "
                "sigmoid(mlp.shared_expert_gate [1, 32]), added after the routed experts; q/k/v "
                "biases (qkv_bias), GQA (2 KV heads), untied, Hub-style config.json (num_experts, "
                "rope_theta at top level); f32"),
]

NOTES = [
    "Reference = transformers {cls} (sdpa, eval, float32) loaded back from this directory; "
    "cross-checked against an independent float64 numpy forward "
    "(tools/make_moe_fixtures.py:np_forward) to 1e-5 relative.",
    "Batch, positions, greedy, tolerance and file layout as tools/make_llama_fixtures.py's fixtures "
    "(see its notes): left-padded batch, position_ids = cumsum(mask) - 1 (0 at pads), compare only "
    "where attention_mask == 1; greedy = generate() on each prompt alone, 12 new tokens.",
    "Sparse layer: logits = gate(h) (n_experts); p = softmax(logits) in float32; the top "
    "num_experts_per_tok experts of p, their p renormalised to sum 1 (Mixtral always, Qwen3-MoE "
    "and Qwen2-MoE when norm_topk_prob); out = sum over the chosen experts e of p_e * "
    "down_e(silu(gate_e(h)) * up_e(h)), then (Qwen2-MoE) + sigmoid(shared_expert_gate(h)) * "
    "shared_expert(h). Padding tokens are routed too (their rows are not compared).",
    "Routing margins: min_route_gap is the smallest difference between a token's last chosen and "
    "first unchosen router logit over every layer and position checked (batch and greedy).",
]


# ---------------------------------------------------------------------------------------------
# independent numpy float64 reference
# ---------------------------------------------------------------------------------------------

def np_sparse(cfg, layer):
    if cfg["model_type"] == "mixtral":
        return True
    step = cfg.get("decoder_sparse_step", 1)
    return layer not in (cfg.get("mlp_only_layers") or []) and (layer + 1) % step == 0


def np_forward(W, cfg, ids, mask, gaps=None):
    """Mixtral / Qwen3-MoE forward in float64; gaps (a list) gets each routed token's margin."""
    ids, mask = np.asarray(ids), np.asarray(mask)
    B, T = ids.shape
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads") or H
    hd = np_head_dim(cfg)
    eps = cfg["rms_norm_eps"]
    mixtral = cfg["model_type"] == "mixtral"
    E = cfg.get("num_local_experts") or cfg["num_experts"]
    K = cfg["num_experts_per_tok"]
    renorm = mixtral or cfg.get("norm_topk_prob", False)

    def lin(x, name):
        y = x @ W[name + ".weight"].T
        return y + W[name + ".bias"] if name + ".bias" in W else y

    pos = np_positions(mask).astype(np.float64)
    inv = 1.0 / cfg["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = pos[:, :, None] * inv[None, None, :]
    ang = np.concatenate([ang, ang], axis=-1)[:, None]
    cos, sin = np.cos(ang), np.sin(ang)
    causal = np.tril(np.ones((T, T), dtype=bool))
    allowed = causal[None] & (mask[:, None, :] == 1)
    any_allowed = allowed.any(-1)

    def attn(x, L):
        q, k, v = (lin(x, L + "self_attn." + n) for n in ("q_proj", "k_proj", "v_proj"))
        q = q.reshape(B, T, H, hd)
        k = k.reshape(B, T, KV, hd)
        v = v.reshape(B, T, KV, hd).transpose(0, 2, 1, 3)
        if cfg["model_type"] == "qwen3_moe":
            q = np_rms_norm(q, W[L + "self_attn.q_norm.weight"], eps)
            k = np_rms_norm(k, W[L + "self_attn.k_norm.weight"], eps)
        q, k = q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3)
        q = q * cos + np_rotate_half(q) * sin
        k = k * cos + np_rotate_half(k) * sin
        return lin(np_attend(q, k, v, allowed, any_allowed), L + "self_attn.o_proj")

    def mlp(x, L):
        layer = int(L.split(".")[1])
        if not np_sparse(cfg, layer):
            return lin(np_silu(lin(x, L + "mlp.gate_proj")) * lin(x, L + "mlp.up_proj"),
                       L + "mlp.down_proj")
        moe = L + ("block_sparse_moe." if mixtral else "mlp.")
        names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
        flat = x.reshape(-1, x.shape[-1])
        logits = lin(flat, moe + "gate")
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out = np.zeros_like(flat)
        real = mask.reshape(-1) == 1
        for i in range(flat.shape[0]):
            order = np.argsort(-p[i], kind="stable")
            top = order[:K]
            if gaps is not None and real[i] and K < E:
                gaps.append(logits[i, order[K - 1]] - logits[i, order[K]])
            w = p[i, top] / (p[i, top].sum() if renorm else 1.0)
            for e, we in zip(top, w):
                X = moe + f"experts.{e}."
                h = np_silu(lin(flat[i], X + names[0])) * lin(flat[i], X + names[1])
                out[i] += we * lin(h, X + names[2])
        if cfg.get("shared_expert_intermediate_size"):     # Qwen2-MoE: after the routed experts
            X = moe + "shared_expert."
            sh = lin(np_silu(lin(flat, X + "gate_proj")) * lin(flat, X + "up_proj"), X + "down_proj")
            out = out + sh / (1.0 + np.exp(-lin(flat, moe + "shared_expert_gate")))
        return out.reshape(x.shape)

    return np_decoder(W, cfg, ids, attn, mlp, eps)


def np_greedy(W, cfg, prompt, n, gaps):
    seq, out = list(prompt), []
    for _ in range(n):
        lg = np_forward(W, cfg, np.array([seq]), np.ones((1, len(seq)), np.int64), gaps)
        t = int(np.argmax(lg[0, -1]))
        out.append(t)
        seq.append(t)
    return out


# ---------------------------------------------------------------------------------------------
# building
# ---------------------------------------------------------------------------------------------

def hub_style(cfg, spec):
    """config.json as transformers 5 wrote it -> the spelling of the Hub checkpoints."""
    cfg = dict(cfg)
    rp = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rp.pop("rope_theta")
    assert rp.pop("rope_type", "default") == "default" and not rp, rp
    cfg["rope_scaling"] = None
    if spec["arch"] != "mixtral" and "num_local_experts" in cfg:
        cfg["num_experts"] = cfg.pop("num_local_experts")
    cfg.pop("layer_types", None)
    return cfg


def try_build(spec, seed, out_dir):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    cfg_cls, model_cls = ARCH[spec["arch"]]
    config, model = fresh_model(cfg_cls, model_cls, COMMON, spec)
    with torch.no_grad():      # routers sharp enough that choices are clear; q/k norms as Qwen3's
        for name, prm in model.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                prm.copy_(1.5 + 0.3 * torch.randn_like(prm))
            elif name.endswith((".gate.weight", "shared_expert_gate.weight")):
                prm.copy_(0.5 * torch.randn_like(prm))
    model.generation_config = GenerationConfig(bos_token_id=BOS, eos_token_id=spec["gen_eos"],
                                               pad_token_id=config.pad_token_id)
    save_fresh(model, spec["storage"], out_dir)
    del model

    native_ref, ref, cfg, gen_cfg = reload_hub_style(model_cls, out_dir, lambda c: hub_style(c, spec))
    with safe_open(os.path.join(out_dir, "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    per_expert = ("model.layers.0.block_sparse_moe.experts.0.w1.weight" if spec["arch"] == "mixtral"
                  else "model.layers.0.mlp.experts.0.gate_proj.weight")
    if spec["arch"] == "qwen2_moe":
        assert "model.layers.0.mlp.shared_expert_gate.weight" in keys
        assert "model.layers.0.self_attn.q_proj.bias" in keys
    assert per_expert in keys, sorted(keys)[:40]
    assert not any("gate_up_proj" in k for k in keys)

    gen_eos = as_list(gen_cfg.get("eos_token_id"))
    eos = sorted(set(as_list(cfg.get("eos_token_id")) + gen_eos))
    pad = cfg["pad_token_id"]
    prompts = make_prompts(rng, cfg["vocab_size"])
    ids, mask = pad_left(prompts, pad)
    pos = np_positions(mask).tolist()
    valid = torch.tensor(mask).bool()
    L0 = len(prompts[0])

    logits = batch_logits(ref, ids, mask, pos)
    assert torch.equal(batch_logits(native_ref, ids, mask, pos), logits), \
        "Hub-style config.json reads differently from transformers' own"
    del native_ref
    with torch.inference_mode():
        logits0 = ref(torch.tensor([prompts[0]])).logits[0].float()
    vl, maxabs = logits_in_range(logits, valid)
    e_pad = rel_err(logits[0, -L0:], logits0)
    assert e_pad < SELF_CHECK_TOL, e_pad

    greedy, min_margin = greedy_checked(ref, prompts, eos)

    W = np_load_weights(out_dir)
    gaps = []
    np_logits = np_forward(W, cfg, np.array(ids), np.array(mask), gaps)
    e_np = rel_err(vl.numpy(), np_logits[np.array(mask) == 1])
    e_np0 = rel_err(logits0.numpy(), np_forward(W, cfg, np.array([prompts[0]]),
                                                np.ones((1, L0), np.int64))[0])
    assert e_np < SELF_CHECK_TOL and e_np0 < SELF_CHECK_TOL, (e_np, e_np0)
    for g, p in zip(greedy, prompts):
        assert np_greedy(W, cfg, p, MAX_NEW_TOKENS, gaps) == g["output"], "numpy greedy differs"
    min_gap = float(min(gaps))
    need = ROUTE_GAP_BF16 if spec.get("bf16") else ROUTE_GAP
    if min_gap < need:
        raise Rejected(f"a routing choice within {min_gap:.2e}")

    bf16 = None
    if spec.get("bf16"):
        bf16 = bf16_run(model_cls, out_dir, prompts, eos, ids, mask, pos, valid, vl)
        e16 = bf16["err"]
        if e16 > BF16_TOLERANCE / 2:
            raise Rejected(f"bf16 vs f32 {e16:.2e} is over half the bf16 tolerance")
    del ref

    save_file({"logits": logits.contiguous(), "logits_greedy0": logits0.contiguous()},
              os.path.join(out_dir, "expected_logits.safetensors"), metadata={"format": "pt"})
    notes = ["Covers: " + spec["covers"] + "."] + [n.replace("{cls}", model_cls.__name__) for n in NOTES]
    write_json(os.path.join(out_dir, "expected.json"), dict(
        notes=notes, transformers_version=transformers.__version__,
        torch_version=torch.__version__.split("+")[0], seed=seed, architecture=model_cls.__name__,
        storage_dtype=spec["storage"], reference_dtype="float32", bos_token_id=BOS,
        eos_token_ids=gen_eos, pad_token_id_used=pad,
        batch=dict(input_ids=ids, attention_mask=mask, position_ids=pos),
        greedy=[dict(prompt=g["prompt"], max_new_tokens=g["max_new_tokens"], output=g["output"],
                     stopped_at_eos=False) for g in greedy],
        tolerance=TOLERANCE, max_abs_logit=round(maxabs, 4),
        min_greedy_margin_rel=round(min_margin, 6), min_route_gap=float(f"{min_gap:.3e}"),
        self_check=dict(hf_vs_numpy_f64=float(f"{max(e_np, e_np0):.3e}"),
                        padded_vs_unpadded=float(f"{e_pad:.3e}"))))
    if bf16:
        write_bf16_expect(out_dir, [f"transformers {model_cls.__name__} loaded with dtype=torch.bfloat16, as "
                                    "tools/make_llama_fixtures.py makes its bf16 references (see there); "
                                    "Qwen3-MoE's routing weights rounded to bf16 there, kept in f32 here."],
                          bf16, greedy, ids, mask, pos)
    chmod_files(out_dir)
    return dict(name=spec["name"], seed=seed, min_margin=min_margin, maxabs=maxabs,
                err=max(e_np, e_np0), gap=min_gap)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--only", help="build only this fixture (its name)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    todo = [s for s in FIXTURES if args.only in (None, s["name"])]
    rows = build_seeded(todo, try_build, args.out)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    for r in rows:
        print(f"{r['name']:20s} seed {r['seed']} max|logit| {r['maxabs']:.3f} min margin "
              f"{r['min_margin']:.2e} route gap {r['gap']:.2e} hf-vs-np64 {r['err']:.2e} "
              f"bytes {dir_size(os.path.join(args.out, r['name']))}")
    total = sum(dir_size(os.path.join(args.out, s["name"])) for s in todo)
    print(f"total size of these fixtures: {total} bytes, budget {SIZE_BUDGET}")
    assert total < SIZE_BUDGET


if __name__ == "__main__":
    main()
