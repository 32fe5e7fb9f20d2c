#!/usr/bin/env python3
"""Build the committed Qwen3 and Phi-3 reference fixtures under tests/fixtures/models/.

Regenerate (from the repository root, CPU only, no network needed):

    pip install -r tools/requirements.txt && python3 tools/make_qwen3_phi3_fixtures.py

Options: --out DIR (default tests/fixtures/models; only this script's directories are written).

The companion of tools/make_llama_fixtures.py, with the same output format per directory
(expected.json, expected_logits.safetensors and, for bf16 storage, expected_bf16.json and
expected_logits_bf16.safetensors), the same prompts, padding, positions, seed search and
conditioning rules (imported from there). Per fixture: a tiny random Qwen3ForCausalLM or
Phi3ForCausalLM from its config class, re-initialised with a larger std, cast to the storage
dtype, saved with save_pretrained(safe_serialization=True), config.json optionally rewritten into
the Hub spelling (rope_theta and rope_scaling at top level), loaded back in float32, and its
logits and greedy continuations recorded. Every reference is recomputed by an independent
float64 numpy forward (np_forward below: per-head q/k RMSNorm, fused qkv_proj and gate_up_proj,
partial rotary, LongRoPE) and must agree to 1e-5 relative.

LongRoPE: transformers picks the short or the long factors per forward call by the largest
position in it (seq_len = max(position_ids) + 1 > original_max_position_embeddings: long), so in a
padded batch one long row switches every row to the long factors; shardswap picks them per
sequence (the same for a sequence alone, and a sequence's result does not depend on its batch),
so for a LongRoPE fixture the "batch" reference is each row run alone, left-padded as in the
batch (equal to the batched call here). When a sequence crosses original_max_position_embeddings
during generate(), Phi3ForCausalLM drops its cache and recomputes it with the long factors;
shardswap (as vLLM) keeps the keys cached with the short ones. The two LongRoPE fixtures therefore
never cross: phi3_longrope_f32 is long from its second token on (original 1; position 0 rotates
by 0 in both tables), phi3_longrope_short_f32 stays short (original 32).
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import GenerationConfig, Phi3Config, Phi3ForCausalLM, Qwen3Config, Qwen3ForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import (Rejected, build_seeded, chmod_files, dir_size,  # noqa: E402
                           np_load_weights, rel_err, write_json)
from make_llama_fixtures import (BF16_TOLERANCE, BOS, MAX_NEW_TOKENS, PAD, SELF_CHECK_TOL,  # noqa: E402
                                 TOLERANCE, as_list, batch_logits, bf16_run, fresh_model, greedy_checked,
                                 logits_in_range, make_prompts, np_attend, np_decoder, np_head_dim,
                                 np_positions, np_rms_norm, np_rope_spelling, np_rotate_half, np_silu,
                                 pad_left, reload_hub_style, save_fresh, write_bf16_expect)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "tests", "fixtures", "models")
SIZE_BUDGET = 2_000_000

ARCH = {"qwen3": (Qwen3Config, Qwen3ForCausalLM), "phi3": (Phi3Config, Phi3ForCausalLM)}

COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, max_position_embeddings=64, hidden_act="silu",
              bos_token_id=BOS)


def factors(seed, n, lo, hi):
    r = np.random.default_rng(seed)
    return [round(float(x), 4) for x in r.uniform(lo, hi, size=n)]


FIXTURES = [
    dict(name="qwen3_qknorm_bf16", arch="qwen3", storage="bfloat16", seed=11000, bf16=True,
         cfg=dict(num_key_value_heads=2, head_dim=32, tie_word_embeddings=True, rms_norm_eps=1e-6,
                  attention_bias=False, pad_token_id=PAD, eos_token_id=2, use_sliding_window=False,
                  rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
         gen_eos=[2, 3],
         covers="Qwen3ForCausalLM: q_norm and k_norm (RMSNorm over each head's head_dim, weights of "
                "size head_dim, eps rms_norm_eps) on q and k before the rotary, GQA (4 query heads, 2 "
                "KV heads), explicit head_dim 32 != hidden/heads 16 (q_proj [128, 64], o_proj [64, "
                "128]), no q/k/v/o biases (attention_bias false), tied embeddings, rope_theta 1e6, "
                "Hub-style config.json as Qwen3 ships (rope_theta at top level, \"rope_scaling\": "
                "null, use_sliding_window false, sliding_window null, max_window_layers), "
                "generation_config eos [2, 3], bf16 storage with bf16-mode references"),
    dict(name="phi3_partial_f32", arch="phi3", storage="float32", seed=12000,
         cfg=dict(num_key_value_heads=2, tie_word_embeddings=False, rms_norm_eps=1e-5,
                  pad_token_id=PAD, eos_token_id=2, sliding_window=None,
                  original_max_position_embeddings=64,
                  rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                       partial_rotary_factor=0.5)),
         gen_eos=[2, 4],
         covers="Phi3ForCausalLM (Phi-3 / Phi-4 layout): fused self_attn.qkv_proj [q 64 | k 32 | v 32 "
                "rows, 64] and mlp.gate_up_proj [gate 128 | up 128 rows, 64] (down(up * silu(gate))), "
                "GQA (4 query heads, 2 KV heads), partial_rotary_factor 0.5 (rotary on the first 8 of "
                "each head's 16 dims, rotate_half within them, the rest unrotated), untied lm_head, "
                "rope_theta 10000, no biases, Hub-style config.json (partial_rotary_factor and "
                "rope_theta at top level, \"rope_scaling\": null, sliding_window null), "
                "generation_config eos [2, 4], f32 storage"),
    dict(name="phi3_longrope_f32", arch="phi3", storage="float32", seed=13000, longrope="long",
         cfg=dict(num_key_value_heads=4, tie_word_embeddings=True, rms_norm_eps=1e-5,
                  pad_token_id=PAD, eos_token_id=2, sliding_window=None,
                  original_max_position_embeddings=1,
                  rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                                       partial_rotary_factor=0.75, attention_factor=1.25,
                                       short_factor=factors(1, 6, 1.0, 1.5),
                                       long_factor=factors(2, 6, 1.0, 20.0))),
         gen_eos=None,
         covers="Phi3ForCausalLM, Phi-4-mini-like, LongRoPE past original_max_position_embeddings: "
                "rope_scaling type longrope with 6 short and 6 long factors and attention_factor 1.25 "
                "(cos and sin scaled by it), original_max_position_embeddings 1 at top level, so every "
                "context of 2 tokens or more uses the long factors (a context of one token is at "
                "position 0, where both tables rotate by 0), partial_rotary_factor 0.75 (12 of 16 "
                "dims), MHA (4 KV heads), tied embeddings, fused qkv_proj and gate_up_proj; "
                "Hub-style config.json; f32"),
    dict(name="phi3_longrope_short_f32", arch="phi3", storage="float32", seed=14000,
         longrope="short",
         cfg=dict(num_key_value_heads=2, tie_word_embeddings=False, rms_norm_eps=1e-5,
                  pad_token_id=PAD, eos_token_id=2, sliding_window=None,
                  original_max_position_embeddings=32,
                  rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                                       short_factor=factors(3, 8, 1.0, 3.0),
                                       long_factor=factors(4, 8, 1.0, 20.0))),
         gen_eos=None,
         covers="Phi3ForCausalLM, Phi-3-mini-128k-like LongRoPE below original_max_position_embeddings "
                "(32 at top level; every context here is at most 21 tokens): the 8 short factors, "
                "no factor and no attention_factor in the file, so factor = max_position_embeddings / "
                "original = 2 and cos, sin are scaled by sqrt(1 + ln 2 / ln 32); full rotary, GQA "
                "(2 KV heads), untied; Hub-style config.json; f32"),
]

NOTES = [
    "Reference = transformers {cls} (sdpa, eval, float32) loaded back from this directory; "
    "cross-checked against an independent float64 numpy forward "
    "(tools/make_qwen3_phi3_fixtures.py:np_forward) to 1e-5 relative.",
    "Batch, positions, greedy, tolerance and file layout as tools/make_llama_fixtures.py's fixtures "
    "(see its notes): left-padded batch, position_ids = cumsum(mask) - 1 (0 at pads), compare only "
    "where attention_mask == 1; greedy = generate() on each prompt alone, 12 new tokens.",
    "Qwen3 attention: q = q_norm(q_proj(x) per head), k = k_norm(k_proj(x) per head), both RMSNorms "
    "over head_dim with rms_norm_eps, then RoPE, scores scaled by head_dim**-0.5.",
    "Phi-3: qkv = qkv_proj(x); q = qkv[:, :heads*hd], k = qkv[:, heads*hd : heads*hd + kv*hd], "
    "v = the rest; gate, up = gate_up_proj(x).chunk(2) (gate first); mlp = down_proj(up * silu(gate)). "
    "Partial rotary: inv_freq over rot = int(head_dim * partial_rotary_factor) dims, rotate_half on "
    "x[..., :rot], x[..., rot:] unchanged.",
    "LongRoPE: inv_freq[i] = 1 / (f[i] * rope_theta^(2i/rot)) with f = short_factor while "
    "max(position_ids) + 1 <= original_max_position_embeddings, else long_factor; cos and sin "
    "multiplied by attention_factor (default sqrt(1 + ln(factor)/ln(original)), factor = "
    "max_position_embeddings / original when not given).",
]


# ---------------------------------------------------------------------------------------------
# independent numpy float64 reference
# ---------------------------------------------------------------------------------------------

def np_rope(cfg):
    """(rope dict, rotary dims, attention factor) from config.json in either spelling."""
    rp = np_rope_spelling(cfg)
    partial = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    rot = int(np_head_dim(cfg) * partial)
    attn = 1.0
    if rp["rope_type"] == "longrope":
        orig = rp.get("original_max_position_embeddings", cfg.get("original_max_position_embeddings"))
        rp["original_max_position_embeddings"] = orig
        factor = rp.get("factor") or cfg["max_position_embeddings"] / orig
        attn = rp.get("attention_factor") or (1.0 if factor <= 1 else
                                              math.sqrt(1 + math.log(factor) / math.log(orig)))
    else:
        assert rp["rope_type"] == "default", rp
    return rp, rot, attn


def np_inv_freq(cfg, long_ctx):
    rp, rot, _ = np_rope(cfg)
    base = rp["rope_theta"] ** (np.arange(0, rot, 2, dtype=np.float64) / rot)
    if rp["rope_type"] == "longrope":
        f = np.array(rp["long_factor" if long_ctx else "short_factor"], dtype=np.float64)
        return 1.0 / (f * base)
    return 1.0 / base


def np_forward(W, cfg, ids, mask):
    """Qwen3 / Phi-3 forward in float64; LongRoPE's table per row (shardswap's choice)."""
    ids, mask = np.asarray(ids), np.asarray(mask)
    B, T = ids.shape
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads") or H
    hd = np_head_dim(cfg)
    eps = cfg["rms_norm_eps"]
    phi3 = cfg["model_type"] == "phi3"
    rp, rot, attn_factor = np_rope(cfg)

    def lin(x, name):
        return x @ W[name + ".weight"].T

    pos = np_positions(mask).astype(np.float64)
    cos = np.empty((B, 1, T, rot))
    sin = np.empty((B, 1, T, rot))
    for b in range(B):
        long_ctx = rp["rope_type"] == "longrope" and pos[b].max() + 1 > rp["original_max_position_embeddings"]
        ang = pos[b][:, None] * np_inv_freq(cfg, long_ctx)[None, :]
        ang = np.concatenate([ang, ang], axis=-1)
        cos[b, 0], sin[b, 0] = np.cos(ang) * attn_factor, np.sin(ang) * attn_factor

    def rope(x):
        r, p = x[..., :rot], x[..., rot:]
        return np.concatenate([r * cos + np_rotate_half(r) * sin, p], axis=-1)

    causal = np.tril(np.ones((T, T), dtype=bool))
    allowed = causal[None] & (mask[:, None, :] == 1)
    any_allowed = allowed.any(-1)

    def attn(x, L):
        if phi3:
            qkv = lin(x, L + "self_attn.qkv_proj")
            q, k, v = qkv[..., :H * hd], qkv[..., H * hd:(H + KV) * hd], qkv[..., (H + KV) * hd:]
        else:
            q, k, v = (lin(x, L + "self_attn." + n) for n in ("q_proj", "k_proj", "v_proj"))
        q = q.reshape(B, T, H, hd)
        k = k.reshape(B, T, KV, hd)
        v = v.reshape(B, T, KV, hd).transpose(0, 2, 1, 3)
        if not phi3:
            q = np_rms_norm(q, W[L + "self_attn.q_norm.weight"], eps)
            k = np_rms_norm(k, W[L + "self_attn.k_norm.weight"], eps)
        q, k = rope(q.transpose(0, 2, 1, 3)), rope(k.transpose(0, 2, 1, 3))
        return lin(np_attend(q, k, v, allowed, any_allowed), L + "self_attn.o_proj")

    def mlp(x, L):
        if phi3:
            gu = lin(x, L + "mlp.gate_up_proj")
            F = gu.shape[-1] // 2
            return lin(gu[..., F:] * np_silu(gu[..., :F]), L + "mlp.down_proj")
        return lin(np_silu(lin(x, L + "mlp.gate_proj")) * lin(x, L + "mlp.up_proj"), L + "mlp.down_proj")

    return np_decoder(W, cfg, ids, attn, mlp, eps)


def np_greedy(W, cfg, prompt, n):
    seq, out = list(prompt), []
    for _ in range(n):
        t = int(np.argmax(np_forward(W, cfg, np.array([seq]), np.ones((1, len(seq)), np.int64))[0, -1]))
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
    partial = rp.pop("partial_rotary_factor", None)
    if spec["arch"] == "phi3":
        cfg["partial_rotary_factor"] = partial
        orig = rp.pop("original_max_position_embeddings", None)
        if orig is not None:
            cfg["original_max_position_embeddings"] = orig
    rtype = rp.pop("rope_type", "default")
    if rtype == "default":
        assert not rp, rp
        cfg["rope_scaling"] = None
    else:
        for k in ("factor", "attention_factor"):     # derived by transformers, not in Phi-3's files
            if k not in spec["cfg"]["rope_parameters"]:
                rp.pop(k, None)
        cfg["rope_scaling"] = dict(type=rtype, **rp)
    cfg.pop("layer_types", None)
    return cfg


def row_logits(model, ids, mask, pos):
    """Each row of the batch run alone (LongRoPE's per-sequence choice)."""
    return torch.cat([batch_logits(model, [ids[b]], [mask[b]], [pos[b]]) for b in range(len(ids))])


def try_build(spec, seed, out_dir):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    cfg_cls, model_cls = ARCH[spec["arch"]]
    config, model = fresh_model(cfg_cls, model_cls, COMMON, spec)
    with torch.no_grad():      # sharper attention after the per-head norms (unit rms q and k)
        for name, prm in model.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                prm.copy_(1.5 + 0.3 * torch.randn_like(prm))
    if spec["gen_eos"] is not None:
        model.generation_config = GenerationConfig(bos_token_id=BOS, eos_token_id=spec["gen_eos"],
                                                   pad_token_id=config.pad_token_id)
    save_fresh(model, spec["storage"], out_dir)
    del model

    native_ref, ref, cfg, gen_cfg = reload_hub_style(model_cls, out_dir, lambda c: hub_style(c, spec))
    hd = np_head_dim(cfg)
    assert ref.model.layers[0].self_attn.head_dim == hd
    assert getattr(ref.config, "sliding_window", None) is None
    rp, rot, attn_factor = np_rope(cfg)
    assert abs(ref.model.rotary_emb.attention_scaling - attn_factor) < 1e-12, \
        (ref.model.rotary_emb.attention_scaling, attn_factor)
    e_inv = rel_err(ref.model.rotary_emb.inv_freq.double().numpy(), np_inv_freq(cfg, False))
    assert e_inv < 1e-6, f"inv_freq HF vs numpy {e_inv}"
    with safe_open(os.path.join(out_dir, "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert ("lm_head.weight" in keys) == (not cfg["tie_word_embeddings"])
    if spec["arch"] == "phi3":
        assert "model.layers.0.self_attn.qkv_proj.weight" in keys and "model.layers.0.mlp.gate_up_proj.weight" in keys
    else:
        assert "model.layers.0.self_attn.q_norm.weight" in keys and not any(k.endswith(".bias") for k in keys)

    gen_eos = as_list(gen_cfg.get("eos_token_id"))
    eos = sorted(set(as_list(cfg.get("eos_token_id")) + gen_eos))
    pad = cfg["pad_token_id"] if cfg.get("pad_token_id") is not None else gen_eos[0]
    prompts = make_prompts(rng, cfg["vocab_size"])
    ids, mask = pad_left(prompts, pad)
    pos = np_positions(mask).tolist()
    valid = torch.tensor(mask).bool()
    L0 = len(prompts[0])
    longrope = spec.get("longrope", False)

    batched = batch_logits(ref, ids, mask, pos)
    assert torch.equal(batch_logits(native_ref, ids, mask, pos), batched), \
        "Hub-style config.json reads differently from transformers' own"
    del native_ref
    logits = row_logits(ref, ids, mask, pos) if longrope else batched
    e_batch_call = rel_err(batched[valid], logits[valid])
    with torch.inference_mode():
        logits0 = ref(torch.tensor([prompts[0]])).logits[0].float()
    if longrope:
        orig = rp["original_max_position_embeddings"]
        longest = max(len(p) for p in prompts) + MAX_NEW_TOKENS
        # no sequence crosses original_max_position_embeddings after its first step: there
        # Phi3ForCausalLM.prepare_inputs_for_generation drops the cache and recomputes the whole
        # sequence with the long factors, which shardswap does not (see docs/models.md)
        assert (orig < 2) if longrope == "long" else (orig >= longest), (orig, longest)
        assert e_batch_call < SELF_CHECK_TOL, e_batch_call
    vl, maxabs = logits_in_range(logits, valid)
    e_pad = rel_err(logits[0, -L0:], logits0)
    assert e_pad < SELF_CHECK_TOL, e_pad

    greedy, min_margin = greedy_checked(ref, prompts, eos)

    W = np_load_weights(out_dir)
    np_logits = np_forward(W, cfg, np.array(ids), np.array(mask))
    e_np = rel_err(vl.numpy(), np_logits[np.array(mask) == 1])
    e_np0 = rel_err(logits0.numpy(), np_forward(W, cfg, np.array([prompts[0]]), np.ones((1, L0), np.int64))[0])
    assert e_np < SELF_CHECK_TOL and e_np0 < SELF_CHECK_TOL, (e_np, e_np0)
    if True:                   # no sequence crosses the LongRoPE switch (above)
        for g, p in zip(greedy, prompts):
            assert np_greedy(W, cfg, p, MAX_NEW_TOKENS) == g["output"], "numpy greedy differs"

    bf16 = None
    if spec.get("bf16"):
        bf16 = bf16_run(model_cls, out_dir, prompts, eos, ids, mask, pos, valid, vl)
        e16 = bf16["err"]
        # shardswap's bf16 mode rounds only the products' inputs, so it sits near f32: a seed
        # whose transformers bf16 logits are more than half the tolerance from f32 leaves no room
        if e16 > BF16_TOLERANCE / 2:
            raise Rejected(f"bf16 vs f32 {e16:.2e} is over half the bf16 tolerance")
    del ref

    save_file({"logits": logits.contiguous(), "logits_greedy0": logits0.contiguous()},
              os.path.join(out_dir, "expected_logits.safetensors"), metadata={"format": "pt"})
    notes = ["Covers: " + spec["covers"] + "."] + [n.replace("{cls}", model_cls.__name__) for n in NOTES]
    if longrope:
        notes.append("LongRoPE batch reference: each row run alone (see the script's docstring; "
                     "transformers' batched call gives the same here, self_check.transformers_batched_call).")
    self_check = dict(hf_vs_numpy_f64=float(f"{max(e_np, e_np0):.3e}"),
                      padded_vs_unpadded=float(f"{e_pad:.3e}"),
                      inv_freq_f32_vs_f64=float(f"{e_inv:.3e}"))
    if longrope:
        self_check["transformers_batched_call"] = float(f"{e_batch_call:.3e}")
    write_json(os.path.join(out_dir, "expected.json"), dict(
        notes=notes, transformers_version=transformers.__version__,
        torch_version=torch.__version__.split("+")[0], seed=seed, architecture=model_cls.__name__,
        storage_dtype=spec["storage"], reference_dtype="float32", bos_token_id=BOS,
        eos_token_ids=gen_eos, pad_token_id_used=pad,
        batch=dict(input_ids=ids, attention_mask=mask, position_ids=pos),
        greedy=[dict(prompt=g["prompt"], max_new_tokens=g["max_new_tokens"], output=g["output"],
                     stopped_at_eos=False) for g in greedy],
        tolerance=TOLERANCE, max_abs_logit=round(maxabs, 4),
        min_greedy_margin_rel=round(min_margin, 6), self_check=self_check))
    if bf16:
        write_bf16_expect(out_dir, [f"transformers {model_cls.__name__} loaded with dtype=torch.bfloat16, as "
                                    "tools/make_llama_fixtures.py makes its bf16 references (see there)."],
                          bf16, greedy, ids, mask, pos)
    chmod_files(out_dir)
    return dict(name=spec["name"], seed=seed, min_margin=min_margin, maxabs=maxabs, err=max(e_np, e_np0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    rows = build_seeded(FIXTURES, try_build, args.out)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    for r in rows:
        print(f"{r['name']:20s} seed {r['seed']} max|logit| {r['maxabs']:.3f} min margin "
              f"{r['min_margin']:.2e} hf-vs-np64 {r['err']:.2e} "
              f"bytes {dir_size(os.path.join(args.out, r['name']))}")
    total = sum(dir_size(os.path.join(args.out, s["name"])) for s in FIXTURES)
    print(f"total size of these fixtures: {total} bytes, budget {SIZE_BUDGET}")
    assert total < SIZE_BUDGET


if __name__ == "__main__":
    main()
