#!/usr/bin/env python3
"""Build the committed Llama-family reference fixtures under tests/fixtures/models/.

Regenerate (from the repository root, CPU only, no network needed):

    pip install -r tools/requirements.txt && python3 tools/make_llama_fixtures.py

Options: --out DIR (default tests/fixtures/models; only this script's directories are
written), --check (build into a temporary directory and compare with the committed files,
changing nothing: see `check_against` for what "the same" means).

The companion of tools/make_fixtures.py (the OPT fixtures), in the same style and with the
same output format per fixture directory, so the C tests read both with the same helpers
(tests/fixture_expect.h). Per fixture: build a tiny random `LlamaForCausalLM`,
`MistralForCausalLM` or `Qwen2ForCausalLM` from its config class (no download: weights are
random), re-initialise the weights with a larger std than transformers' 0.02 so logits are
well spread, cast to the storage dtype, write the checkpoint with
`save_pretrained(dir, safe_serialization=True)` (config.json, generation_config.json,
model.safetensors), optionally rewrite config.json into the older Hub spelling (below), load
it back from disk in float32 and record:

  expected.json                 prompts, padded batch, greedy continuations, notes
  expected_logits.safetensors   "logits" [3, T, vocab] F32 for the left-padded batch,
                                "logits_greedy0" [len0, vocab] F32 for prompt 0 alone
                                (prompt 0 is NOT the longest prompt, so in the batch it is
                                left-padded: comparing the two checks padding invariance)

and, for fixtures stored in bfloat16, what tools/make_bf16_expect.py writes for the OPT
fixtures (transformers run in bfloat16: weights and activations bf16):

  expected_bf16.json                greedy continuations under bf16 with per-step margins,
                                    margin_min, tolerance
  expected_logits_bf16.safetensors  "logits" and "logits_greedy0" as above (bf16 widened)

Padding and positions (the C engine left-pads): every prompt starts with the BOS id, as Llama
tokenizers add it. The batch is left-padded to the longest prompt with the pad id
(config.json's pad_token_id, or the first EOS id where it is null, as generate() does), and
transformers is called exactly the way `generate()` prepares a padded batch
(GenerationMixin._prepare_position_ids_for_generation):

    attention_mask = 1 for real tokens, 0 for pads
    position_ids   = cumsum(attention_mask, -1) - 1, then 0 where attention_mask == 0

so the first real token of every row has position 0 however much padding precedes it (pads
get 0 as well; what a pad row computes is never compared). LlamaModel does NOT derive
positions from the mask: called without position_ids it uses 0..T-1 for every row. The batch
forward is model(input_ids, attention_mask=mask, position_ids=position_ids); both are stored
in expected.json's "batch". The script asserts that prompt 0 padded in the batch gives the
logits of prompt 0 alone within 1e-5 relative, and that batched left-padded generate() gives
the same greedy ids as each prompt alone.

Config spelling: transformers 5 writes RoPE settings as "rope_parameters" {rope_type,
rope_theta, ...}; the checkpoints on the Hub (Llama 3.1, Mistral, Qwen2.5) spell them
"rope_theta" at top level plus "rope_scaling" (a dict, or null). Fixtures marked
config_style "hub" have config.json rewritten into that older spelling (and, where noted,
head_dim omitted or a disabled sliding window stated); the script checks that transformers
reads the rewritten file to the same rope_parameters and bit-identical logits, so the C side
must read both spellings.

Every reference is computed a second way by an independent float64 numpy re-implementation
of the Llama forward that reads model.safetensors and config.json (`np_forward` below: it
documents the exact math: RMSNorm, rotary embedding with each rope type incl. llama3's
frequency rule, grouped-query attention, SwiGLU, biases, tied head), and the script asserts
agreement to 1e-5 relative (max|a-b| / max|b|) plus identical greedy ids.

Seeds are fixed (torch.manual_seed, numpy Generator) and torch runs single-threaded. For
every fixture the script tries seeds base, base+1, ... until the model is well conditioned:
all logits finite and of moderate size, no greedy continuation produces any EOS id (of
config.json or generation_config.json), and at every greedy step the top-1 minus top-2
logit margin exceeds 2e-3 * max|logit of that step|, so a correct float32 implementation
cannot flip a near-tie, and every continuation has at least 6 distinct ids (not one token
repeated, which would make a wrong KV cache hard to see); for bf16 fixtures also no bf16 greedy step is an exact tie and no
bf16 continuation produces EOS. It prints a summary and the total size of these fixtures,
which must stay under 2 MB.
"""

import argparse
import json
import math
import os
import re
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import (GenerationConfig, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# the helpers both generators share (JSON layout, file modes, seed search,
# the float64 weights, the error measure)
from make_fixtures import (Rejected, build_seeded, chmod_files, dir_size,  # noqa: E402
                           np_load_weights, rel_err, write_json)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "tests", "fixtures", "models")

PAD, BOS = 0, 1                 # EOS ids per fixture, all in 2..4; prompt tokens from FIRST_TOKEN
FIRST_TOKEN = 5
PROMPT_LENS = [5, 9, 1]         # incl. BOS; prompt 0 is shorter than the longest: padded in the batch
MAX_NEW_TOKENS = 12
TOLERANCE = 1e-4                # what the C side must meet: max|ours-ref| / max|ref|
SELF_CHECK_TOL = 1e-5           # HF float32 vs numpy float64 inside this script
MARGIN_REL = 2e-3               # greedy top1-top2 margin / max|logit| at each step
BF16_TOLERANCE = 3e-2           # as tools/make_bf16_expect.py
BF16_MARGIN_MIN = 1e-9          # as tools/make_bf16_expect.py
BF16_DECIDED = 2.0 ** -7        # a bf16 greedy margin below one bf16 step of the largest logit
                                # (2^-8..2^-7 of it) is the rounding's choice: such seeds are refused
SIZE_BUDGET = 2_000_000         # bytes, all directories of this script together
MIN_DISTINCT = 6                # distinct ids in every 12-token greedy continuation (no long loops)

ARCH = {
    "llama": (LlamaConfig, LlamaForCausalLM),
    "mistral": (MistralConfig, MistralForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
}

COMMON = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=64,
    hidden_act="silu",
    bos_token_id=BOS,
)

# name -> architecture, config overrides, generation_config eos (None: as config.json),
# storage dtype, base seed, config.json spelling, what it covers
FIXTURES = [
    dict(name="llama_gqa_f32", arch="llama", storage="float32", seed=6000, style="hub",
         cfg=dict(num_key_value_heads=2, tie_word_embeddings=False, rms_norm_eps=1e-5,
                  pad_token_id=None, eos_token_id=2,
                  rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0,
                                       low_freq_factor=1.0, high_freq_factor=4.0,
                                       original_max_position_embeddings=56)),
         gen_eos=[2, 3, 4],
         covers="LlamaForCausalLM, Llama-3.1-like: GQA (4 query heads, 2 KV heads: query head h "
                "uses KV head h // 2), head_dim 16 = hidden/heads and NOT written in config.json "
                "(as Llama 3.1 8B ships), untied lm_head.weight, rope_theta 500000 with rope_scaling "
                "llama3 (factor 8, low_freq_factor 1, high_freq_factor 4, "
                "original_max_position_embeddings 56 < max_position_embeddings 64; with head_dim 16 "
                "the 8 frequencies fall in all three bands of the llama3 rule: 1 kept, 1 smoothed, "
                "6 divided by 8), rms_norm_eps 1e-5, pad_token_id null (the batch pads with the "
                "first EOS id), config.json eos_token_id 2 but generation_config.json eos_token_id "
                "[2, 3, 4] (as Llama 3.1 ships 128001 vs [128001, 128008, 128009]), Hub-style "
                "config.json (rope_theta + rope_scaling), f32 storage"),
    dict(name="llama_mha_tied_f16", arch="llama", storage="float16", seed=7000, style="native",
         cfg=dict(num_key_value_heads=4, tie_word_embeddings=True, attention_bias=True,
                  mlp_bias=True, rms_norm_eps=1e-6, pad_token_id=PAD, eos_token_id=2,
                  rope_parameters=dict(rope_type="linear", rope_theta=10000.0, factor=2.0)),
         gen_eos=None,
         covers="LlamaForCausalLM: MHA (num_key_value_heads == num_attention_heads == 4), tied "
                "embeddings (tie_word_embeddings true: no lm_head.weight in the file), attention_bias "
                "true (q/k/v/o_proj biases) and mlp_bias true (gate/up/down_proj biases), rope "
                "linear factor 2 (theta 10000), config.json as transformers 5 writes it "
                "(rope_parameters), f16 storage; reference in f32 on the f16-rounded weights"),
    dict(name="llama_mqa_bf16", arch="llama", storage="bfloat16", seed=8000, style="hub",
         bf16=True,
         cfg=dict(num_key_value_heads=1, tie_word_embeddings=False, rms_norm_eps=1e-5,
                  pad_token_id=PAD, eos_token_id=2,
                  rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
         gen_eos=[2, 3],
         covers="LlamaForCausalLM: MQA (1 KV head shared by all 4 query heads), untied lm_head, "
                "plain RoPE (theta 10000; Hub-style config.json with \"rope_scaling\": null, as "
                "Llama 2 ships; head_dim omitted), generation_config.json eos_token_id [2, 3], bf16 "
                "storage: expected.json is f32 on the bf16-rounded weights, expected_bf16.json is "
                "transformers run in bfloat16"),
    dict(name="mistral_headdim_f32", arch="mistral", storage="float32", seed=9000, style="hub",
         cfg=dict(num_key_value_heads=2, head_dim=32, tie_word_embeddings=False, rms_norm_eps=1e-5,
                  pad_token_id=None, eos_token_id=2, sliding_window=None,
                  rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
         gen_eos=None,
         covers="MistralForCausalLM: GQA (4 query heads, 2 KV heads), explicit head_dim 32 != "
                "hidden/heads = 16 (q_proj [128, 64], k/v_proj [64, 64], o_proj [64, 128]; scaling "
                "head_dim**-0.5 with head_dim 32), sliding_window null (full causal attention: "
                "Mistral applies a window only when it is an integer), rope_theta 1e6 at top level "
                "with no rope_scaling key (Hub style, as Mistral ships), pad_token_id null, untied, "
                "f32 storage"),
    dict(name="qwen2_bias_f32", arch="qwen2", storage="float32", seed=10000, style="hub",
         cfg=dict(num_key_value_heads=2, tie_word_embeddings=True, rms_norm_eps=1e-6,
                  pad_token_id=PAD, eos_token_id=2, use_sliding_window=False,
                  rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
         gen_eos=[2, 4],
         covers="Qwen2ForCausalLM: q/k/v_proj biases always (Qwen2 has no attention_bias switch), "
                "none on o_proj, no MLP biases, GQA (4 query heads, 2 KV heads), tied embeddings, "
                "rope_theta 1e6, generation_config.json eos_token_id [2, 4], f32 storage; Hub-style "
                "config.json as Qwen2.5 ships: rope_theta at top level, \"rope_scaling\": null, "
                "\"use_sliding_window\": false next to \"sliding_window\": 4 and "
                "\"max_window_layers\": 1 (a window that must be IGNORED: transformers sets "
                "sliding_window to None unless use_sliding_window is true, and applying it to layer 1 "
                "would change the logits), no layer_types"),
]

COMMON_NOTES = [
    "Reference = transformers {cls} (default attn implementation 'sdpa', eval mode, float32) loaded "
    "back from this directory with dtype=float32; cross-checked against an independent float64 numpy "
    "forward (tools/make_llama_fixtures.py:np_forward) to 1e-5 relative, greedy ids identical.",
    "Batch: left-padded to the longest prompt; attention_mask 1 for real tokens; position_ids = "
    "cumsum(attention_mask, -1) - 1 with 0 written where attention_mask == 0 (exactly what generate() "
    "passes for a padded batch), stored in batch.position_ids; the first real token of every row has "
    "position 0. LlamaModel called without position_ids would use 0..T-1 for every row. Since RoPE "
    "scores depend only on position differences, a constant offset per row changes the logits only "
    "by rounding (see self_check.padded_arange_positions), but the references use the convention above.",
    "Fully-masked query rows (left-pad positions: the causal window holds only pads) are "
    "implementation-defined in HF (sdpa vs eager differ there): compare only where attention_mask == 1.",
    "Decoder: h = embed_tokens[ids] (no scaling, no position table); per layer: "
    "h += o_proj(attn(input_layernorm(h))); h += down_proj(silu(gate_proj(x)) * up_proj(x)) with "
    "x = post_attention_layernorm(h); then h = norm(h) (model.norm); logits = lm_head(h), no bias. "
    "silu(x) = x * sigmoid(x). Tied models (tie_word_embeddings true) store no lm_head.weight: "
    "lm_head = model.embed_tokens.weight.",
    "RMSNorm (LlamaRMSNorm): y = weight * (x / sqrt(mean(x^2 over hidden) + rms_norm_eps)); no mean "
    "subtraction, no bias; rms_norm_eps from config.json. HF computes the normalisation in float32 and "
    "casts to the activation dtype BEFORE multiplying by weight (matters only in bf16 mode).",
    "Attention: q = q_proj(x), k = k_proj(x), v = v_proj(x) (biases where stored), split into heads of "
    "head_dim (config.json's head_dim, else hidden_size / num_attention_heads): q has "
    "num_attention_heads heads, k and v num_key_value_heads; query head h uses KV head "
    "h // (num_attention_heads / num_key_value_heads) (repeat_kv). RoPE on q and k (not v), then "
    "scores = q.k * head_dim**-0.5, softmax over keys allowed by causal AND key attention_mask, "
    "out = softmax @ v, heads concatenated (width num_attention_heads*head_dim), o_proj.",
    "RoPE (rotate_half convention, NOT interleaved pairs): inv_freq[i] = 1 / rope_theta^(2i/head_dim) "
    "for i < head_dim/2, adjusted by the rope type (below); angle[p, i] = p * inv_freq[i]; with "
    "cos = cos(angle), sin = sin(angle) repeated twice to head_dim: out[j] = x[j]*cos[j] - "
    "x[j+hd/2]*sin[j] for j < hd/2, out[j] = x[j]*cos[j] + x[j-hd/2]*sin[j] for j >= hd/2. "
    "HF computes inv_freq, the angles, cos and sin in float32 (cast to the activation dtype in bf16 mode).",
    "rope types: 'default' as above; 'linear': inv_freq / factor; 'llama3': with "
    "wavelen = 2*pi/inv_freq, low_freq_wavelen = original_max_position_embeddings / low_freq_factor, "
    "high_freq_wavelen = original_max_position_embeddings / high_freq_factor: wavelen < high_freq_wavelen "
    "-> inv_freq unchanged; wavelen > low_freq_wavelen -> inv_freq / factor; otherwise smooth = "
    "(original_max_position_embeddings / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor) "
    "and inv_freq = (1 - smooth) * inv_freq / factor + smooth * inv_freq. The rule is static: it does "
    "not depend on the sequence length. attention_scaling is 1 for all three.",
    "config.json spellings: transformers 5 writes \"rope_parameters\": {rope_type, rope_theta, ...}; "
    "Hub checkpoints write \"rope_theta\" at top level and \"rope_scaling\": {rope_type (older: 'type'), "
    "factor, ...} or null; rope_theta defaults to 10000 when absent. config.json records the storage "
    "dtype as \"dtype\" (older versions: \"torch_dtype\").",
    "EOS: generate() stops on any id of generation_config.json's eos_token_id (an int or a list), which "
    "may list more ids than config.json's; eos_token_ids here is that list. Seeds were chosen so no "
    "greedy step produces any of them.",
    "Greedy: model.generate(prompt, attention_mask=ones, do_sample=False, max_new_tokens=12) on each "
    "prompt alone; 'output' holds the generated ids only; every step's top1-top2 margin exceeds "
    "2e-3 * max|logit| (see min_greedy_margin_rel). Batched left-padded generate() gives the same ids.",
]


# ---------------------------------------------------------------------------------------------
# independent numpy float64 reference
# ---------------------------------------------------------------------------------------------

def np_rope_spelling(cfg):
    """config.json's RoPE settings in either spelling -> dict(rope_type, ...): transformers 5's
    rope_parameters, else the Hub's rope_scaling (older key 'type') with a top-level rope_theta."""
    if cfg.get("rope_parameters"):
        rp = dict(cfg["rope_parameters"])
    else:
        rp = dict(cfg.get("rope_scaling") or {})
        rp.setdefault("rope_theta", cfg.get("rope_theta", 10000.0))
    rp["rope_type"] = rp.get("rope_type", rp.get("type", "default"))
    return rp


def np_rope_params(cfg):
    """RoPE settings from config.json in either spelling -> dict(rope_type, rope_theta, ...)."""
    rp = np_rope_spelling(cfg)
    rp.setdefault("rope_theta", 10000.0)
    assert rp.get("partial_rotary_factor", 1.0) == 1.0
    return rp


def np_head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def np_inv_freq(cfg):
    """[head_dim/2] float64 inverse frequencies after the rope type's adjustment."""
    rp = np_rope_params(cfg)
    hd = np_head_dim(cfg)
    inv = 1.0 / rp["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    t = rp["rope_type"]
    if t == "default":
        return inv
    if t == "linear":
        return inv / rp["factor"]
    if t == "llama3":
        factor, lo, hi = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
        old = rp["original_max_position_embeddings"]
        low_wl, high_wl = old / lo, old / hi
        wl = 2 * math.pi / inv
        out = np.empty_like(inv)
        for i in range(len(inv)):
            if wl[i] < high_wl:
                out[i] = inv[i]
            elif wl[i] > low_wl:
                out[i] = inv[i] / factor
            else:
                s = (old / wl[i] - lo) / (hi - lo)
                out[i] = (1 - s) * inv[i] / factor + s * inv[i]
        return out
    raise ValueError(f"rope_type {t}")


def np_llama3_bands(cfg):
    """How many frequencies fall in each band of the llama3 rule (kept, smoothed, divided)."""
    rp = np_rope_params(cfg)
    hd = np_head_dim(cfg)
    inv = 1.0 / rp["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    wl = 2 * math.pi / inv
    old = rp["original_max_position_embeddings"]
    hi_wl, lo_wl = old / rp["high_freq_factor"], old / rp["low_freq_factor"]
    return (int((wl < hi_wl).sum()), int(((wl >= hi_wl) & (wl <= lo_wl)).sum()), int((wl > lo_wl).sum()))


def np_sliding_window(cfg):
    """The sliding window transformers applies, or None (Qwen2: only if use_sliding_window)."""
    if cfg["model_type"] == "qwen2" and not cfg.get("use_sliding_window", False):
        return None
    return cfg.get("sliding_window")


def np_positions(mask):
    """generate()'s position_ids for a left-padded batch: cumsum(mask)-1, 0 at pads."""
    mask = np.asarray(mask)
    pos = np.cumsum(mask, axis=1) - 1
    return np.where(mask == 0, 0, pos)


def np_rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def np_silu(x):
    return x / (1.0 + np.exp(-x))


def np_rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def np_forward(W, cfg, ids, mask):
    """Llama/Mistral/Qwen2 forward in float64. ids, mask: int arrays [B, T] (left padding allowed;
    positions as generate() makes them, np_positions). Returns logits [B, T, vocab]; rows at pad
    positions use a zero attention output for fully-masked query rows and are not meaningful."""
    ids = np.asarray(ids)
    mask = np.asarray(mask)
    B, T = ids.shape
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads") or H
    hd = np_head_dim(cfg)
    eps = cfg["rms_norm_eps"]
    assert cfg.get("hidden_act", "silu") == "silu"
    assert np_sliding_window(cfg) is None, "sliding window attention is not implemented here"

    def lin(x, name):
        y = x @ W[name + ".weight"].T
        b = W.get(name + ".bias")
        return y if b is None else y + b

    pos = np_positions(mask).astype(np.float64)                       # [B, T]
    ang = pos[..., None] * np_inv_freq(cfg)[None, None, :]            # [B, T, hd/2]
    ang = np.concatenate([ang, ang], axis=-1)                         # [B, T, hd]
    cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]             # [B, 1, T, hd]

    causal = np.tril(np.ones((T, T), dtype=bool))
    allowed = causal[None, :, :] & (mask[:, None, :] == 1)            # [B, Tq, Tk]
    any_allowed = allowed.any(-1)                                     # [B, Tq]

    def attn(x, L):
        q = lin(x, L + "self_attn.q_proj").reshape(B, T, H, hd).transpose(0, 2, 1, 3)
        k = lin(x, L + "self_attn.k_proj").reshape(B, T, KV, hd).transpose(0, 2, 1, 3)
        v = lin(x, L + "self_attn.v_proj").reshape(B, T, KV, hd).transpose(0, 2, 1, 3)
        q = q * cos + np_rotate_half(q) * sin
        k = k * cos + np_rotate_half(k) * sin
        return lin(np_attend(q, k, v, allowed, any_allowed), L + "self_attn.o_proj")

    def mlp(x, L):
        return lin(np_silu(lin(x, L + "mlp.gate_proj")) * lin(x, L + "mlp.up_proj"), L + "mlp.down_proj")

    return np_decoder(W, cfg, ids, attn, mlp, eps)


def np_attend(q, k, v, allowed, any_allowed):
    """Softmax attention after RoPE: q [B, H, T, hd], k and v [B, KV, T, hd] (query head h uses
    KV head h // (H / KV)), allowed [B, Tq, Tk] the keys each query may see, any_allowed [B, Tq].
    Returns [B, T, H*hd], zero at query rows that see no key."""
    B, H, T, hd = q.shape
    group = H // k.shape[1]
    kv_of = np.arange(H) // group                                     # query head -> KV head
    k, v = k[:, kv_of], v[:, kv_of]
    s = (q @ k.transpose(0, 1, 3, 2)) * hd ** -0.5                    # [B, H, Tq, Tk]
    s = np.where(allowed[:, None], s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    den = e.sum(-1, keepdims=True)
    pr = np.divide(e, den, out=np.zeros_like(e), where=den > 0)
    o = (pr @ v).transpose(0, 2, 1, 3).reshape(B, T, H * hd)
    return np.where(any_allowed[..., None], o, 0.0)


def np_decoder(W, cfg, ids, attn, mlp, eps):
    """The pre-norm decoder around attn(x, L) and mlp(x, L) (L = "layers.i."): embed, per layer
    h += attn(input_layernorm(h)), h += mlp(post_attention_layernorm(h)), final norm, lm_head (the
    embedding when tied). Returns the logits."""
    h = W["embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        L = f"layers.{i}."
        h = h + attn(np_rms_norm(h, W[L + "input_layernorm.weight"], eps), L)
        h = h + mlp(np_rms_norm(h, W[L + "post_attention_layernorm.weight"], eps), L)
    h = np_rms_norm(h, W["norm.weight"], eps)
    lm = W["lm_head.weight"] if "lm_head.weight" in W else W["embed_tokens.weight"]
    return h @ lm.T


def np_greedy(W, cfg, prompt, n, eos):
    seq = list(prompt)
    out = []
    for _ in range(n):
        lg = np_forward(W, cfg, np.array([seq]), np.ones((1, len(seq)), dtype=np.int64))
        t = int(np.argmax(lg[0, -1]))
        out.append(t)
        seq.append(t)
        if t in eos:
            break
    return out


# ---------------------------------------------------------------------------------------------
# building
# ---------------------------------------------------------------------------------------------

def reinit_(model):
    """Larger-std init so tiny models give well-spread logits (needs torch.manual_seed first)."""
    with torch.no_grad():
        for name, prm in model.named_parameters():   # a tied lm_head appears once (as embed_tokens)
            if "norm" in name:                       # input/post_attention_layernorm, model.norm
                prm.copy_(1.0 + 0.1 * torch.randn_like(prm))
            elif name.endswith(".bias"):
                prm.copy_(0.1 * torch.randn_like(prm))
            elif "embed_tokens" in name or name.startswith("lm_head"):
                prm.copy_(0.3 * torch.randn_like(prm))
            else:                                    # q/k/v/o_proj, gate/up/down_proj
                prm.copy_(0.15 * torch.randn_like(prm))


def fresh_model(cfg_cls, model_cls, common, spec):
    """A model_cls of common's settings updated by spec["cfg"] (with its own copy of
    rope_parameters), in eval mode with reinit_'s weights: (config, model)."""
    cfg_kw = dict(common)
    cfg_kw.update(spec["cfg"])
    cfg_kw["rope_parameters"] = dict(cfg_kw["rope_parameters"])
    config = cfg_cls(**cfg_kw)
    model = model_cls(config).eval()
    reinit_(model)
    return config, model


def make_prompts(rng, vocab):
    return [[BOS] + [int(t) for t in rng.integers(FIRST_TOKEN, vocab, size=n - 1)] for n in PROMPT_LENS]


def pad_left(prompts, pad):
    T = max(len(p) for p in prompts)
    ids = [[pad] * (T - len(p)) + p for p in prompts]
    mask = [[0] * (T - len(p)) + [1] * len(p) for p in prompts]
    return ids, mask


def as_list(x):
    if x is None:
        return []
    return list(x) if isinstance(x, (list, tuple)) else [x]


def hub_style(cfg, spec):
    """config.json as transformers 5 wrote it -> the spelling of the Hub checkpoints."""
    cfg = dict(cfg)
    rp = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rp.pop("rope_theta")
    rtype = rp.get("rope_type", "default")
    if spec["arch"] == "mistral":
        assert rtype == "default" and set(rp) == {"rope_type"}
        # Mistral's config.json has no rope_scaling key at all
    elif rtype == "default" and set(rp) == {"rope_type"}:
        cfg["rope_scaling"] = None
    else:
        cfg["rope_scaling"] = rp
    if spec["arch"] == "llama" and cfg["head_dim"] == cfg["hidden_size"] // cfg["num_attention_heads"]:
        del cfg["head_dim"]
    if spec["arch"] == "qwen2":
        assert cfg["use_sliding_window"] is False
        del cfg["layer_types"]
        cfg["sliding_window"] = 4          # present but disabled: must be ignored
        cfg["max_window_layers"] = 1
    return cfg


def write_config(path, cfg):
    with open(path, "w") as f:             # as PreTrainedConfig.to_json_file writes it
        f.write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def batch_logits(model, ids, mask, pos):
    with torch.inference_mode():
        return model(torch.tensor(ids), attention_mask=torch.tensor(mask),
                     position_ids=torch.tensor(pos)).logits.float()


def greedy_run(model, prompts, eos):
    """Greedy continuations of each prompt alone: (list of dicts, min margin, any EOS)."""
    greedy, min_margin, hit_eos = [], float("inf"), False
    for p in prompts:
        with torch.inference_mode():
            g = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                               do_sample=False, max_new_tokens=MAX_NEW_TOKENS,
                               return_dict_in_generate=True, output_logits=True)
        new = [int(t) for t in g.sequences[0, len(p):]]
        margins = []
        for step_logits, tok in zip(g.logits, new):
            row = step_logits[0].float()
            top2 = torch.topk(row, 2).values
            assert int(torch.argmax(row)) == tok
            margins.append(float(top2[0] - top2[1]) / float(row.abs().max()))
        hit_eos = hit_eos or any(t in eos for t in new) or len(new) != MAX_NEW_TOKENS
        min_margin = min(min_margin, min(margins))
        greedy.append(dict(prompt=p, max_new_tokens=MAX_NEW_TOKENS, output=new, margins=margins))
    return greedy, min_margin, hit_eos


def logits_in_range(logits, valid):
    """The logits at real positions and their largest magnitude; Rejected (try another seed)
    when any is not finite or the magnitude is outside [2, 60], where greedy ids are neither
    ties nor saturated."""
    if not torch.isfinite(logits).all():
        raise Rejected("non-finite logits")
    vl = logits[valid]
    maxabs = float(vl.abs().max())
    if not (2.0 <= maxabs <= 60.0):
        raise Rejected(f"max|logit| {maxabs:.3g} out of range")
    return vl, maxabs


def save_fresh(model, storage, out_dir):
    """model converted to storage (a torch dtype's name) and saved as safetensors into out_dir,
    which is emptied first."""
    model = model.to(getattr(torch, storage))
    if os.path.exists(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    model.save_pretrained(out_dir, safe_serialization=True)


def reload_hub_style(model_cls, out_dir, to_hub):
    """The checkpoint saved in out_dir loaded in float32 with the config.json transformers
    wrote (native_ref), then config.json rewritten as to_hub(its dict) gives it and the
    checkpoint loaded again (ref): (native_ref, ref, config.json's dict, generation_config.json's)."""
    cfg_path = os.path.join(out_dir, "config.json")
    with open(cfg_path) as f:
        native_cfg = json.load(f)
    native_ref = model_cls.from_pretrained(out_dir, dtype=torch.float32).eval()
    write_config(cfg_path, to_hub(native_cfg))
    ref = model_cls.from_pretrained(out_dir, dtype=torch.float32).eval()
    with open(cfg_path) as f:
        cfg = json.load(f)
    with open(os.path.join(out_dir, "generation_config.json")) as f:
        gen_cfg = json.load(f)
    return native_ref, ref, cfg, gen_cfg


def greedy_checked(model, prompts, eos, min_distinct=MIN_DISTINCT):
    """greedy_run, Rejected (try another seed) when a continuation hits EOS, a step's margin is
    at most MARGIN_REL or a continuation has fewer than min_distinct ids: (greedy, min margin)."""
    greedy, min_margin, hit_eos = greedy_run(model, prompts, eos)
    if hit_eos:
        raise Rejected("greedy hits EOS")
    if min_margin <= MARGIN_REL:
        raise Rejected(f"greedy margin {min_margin:.2e} too small")
    distinct = min(len(set(g["output"])) for g in greedy)
    if distinct < min_distinct:
        raise Rejected(f"a greedy continuation has only {distinct} distinct ids")
    return greedy, min_margin


def bf16_run(model_cls, out_dir, prompts, eos, ids, mask, pos, valid, vl, **load_kw):
    """The checkpoint in out_dir loaded with dtype=torch.bfloat16 (and load_kw): its batch
    logits, prompt 0's logits alone, its greedy continuations, their smallest margin and the
    relative error of its batch logits against the f32 ones (vl, at valid); Rejected when a
    greedy continuation hits EOS or a margin is within one bf16 step (a near-tie)."""
    m16 = model_cls.from_pretrained(out_dir, dtype=torch.bfloat16, **load_kw).eval()
    lg16 = batch_logits(m16, ids, mask, pos)
    with torch.inference_mode():
        lg16_0 = m16(torch.tensor([prompts[0]])).logits[0].float()
    g16, mm16, eos16 = greedy_run(m16, prompts, eos)
    del m16
    if eos16:
        raise Rejected("bf16 greedy hits EOS")
    if mm16 < BF16_DECIDED:
        raise Rejected(f"bf16 greedy margin {mm16:.2e} is within one bf16 step (a near-tie)")
    return dict(logits=lg16, logits0=lg16_0, greedy=g16, min_margin=mm16, err=rel_err(lg16[valid], vl))


def write_bf16_expect(out_dir, notes, bf16, greedy, ids, mask, pos):
    """expected_logits_bf16.safetensors and expected_bf16.json from bf16_run's result and the
    f32 greedy continuations."""
    save_file({"logits": bf16["logits"].contiguous(), "logits_greedy0": bf16["logits0"].contiguous()},
              os.path.join(out_dir, "expected_logits_bf16.safetensors"), metadata={"format": "pt"})
    write_json(os.path.join(out_dir, "expected_bf16.json"), dict(
        notes=notes,
        batch=dict(input_ids=ids, attention_mask=mask, position_ids=pos),
        tolerance=BF16_TOLERANCE,
        margin_min=BF16_MARGIN_MIN,
        min_greedy_margin=bf16["min_margin"],
        greedy=[dict(prompt=g["prompt"], max_new_tokens=g["max_new_tokens"], output=g["output"],
                     margins=[round(x, 6) for x in g["margins"]], same_as_f32=g["output"] == f["output"])
                for g, f in zip(bf16["greedy"], greedy)],
        bf16_vs_f32_logits=float(f"{bf16['err']:.3e}")))


def try_build(spec, seed, out_dir):
    """Build one fixture into out_dir with the given seed. Raises Rejected if ill-conditioned."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    cfg_cls, model_cls = ARCH[spec["arch"]]
    config, model = fresh_model(cfg_cls, model_cls, COMMON, spec)
    if config.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    if spec["gen_eos"] is not None:
        model.generation_config = GenerationConfig(bos_token_id=BOS, eos_token_id=spec["gen_eos"],
                                                   pad_token_id=config.pad_token_id)
    save_fresh(model, spec["storage"], out_dir)
    del model

    cfg_path = os.path.join(out_dir, "config.json")
    with open(cfg_path) as f:
        native_cfg = json.load(f)
    assert native_cfg.get("dtype") == spec["storage"], native_cfg.get("dtype")
    native_ref = None
    if spec["style"] == "hub":
        native_ref = model_cls.from_pretrained(out_dir, dtype=torch.float32).eval()
        write_config(cfg_path, hub_style(native_cfg, spec))

    # reference: load what is on disk, compute in float32
    ref = model_cls.from_pretrained(out_dir, dtype=torch.float32).eval()
    with open(cfg_path) as f:
        cfg = json.load(f)
    with open(os.path.join(out_dir, "generation_config.json")) as f:
        gen_cfg = json.load(f)
    want_rp = dict(spec["cfg"]["rope_parameters"])
    assert ref.config.rope_parameters == want_rp, (ref.config.rope_parameters, want_rp)
    assert np_rope_params(cfg) == want_rp, (np_rope_params(cfg), want_rp)
    hd = np_head_dim(cfg)
    assert ref.model.layers[0].self_attn.head_dim == hd
    assert getattr(ref.config, "sliding_window", None) is None and np_sliding_window(cfg) is None
    if spec["arch"] == "qwen2":
        assert all(t == "full_attention" for t in ref.config.layer_types)
        assert all(layer.self_attn.sliding_window is None for layer in ref.model.layers)
    inv_hf = ref.model.rotary_emb.inv_freq.double().numpy()
    e_inv = rel_err(inv_hf, np_inv_freq(cfg))
    assert e_inv < 1e-6, f"inv_freq HF vs numpy {e_inv}"
    bands = np_llama3_bands(cfg) if want_rp["rope_type"] == "llama3" else None
    if bands is not None:
        assert all(n > 0 for n in bands), f"llama3 bands {bands}: not all three rules exercised"

    with safe_open(os.path.join(out_dir, "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert all(f.get_slice(k).get_dtype() == {"float32": "F32", "float16": "F16",
                                                   "bfloat16": "BF16"}[spec["storage"]] for k in keys)
    assert ("lm_head.weight" in keys) == (not cfg["tie_word_embeddings"])
    has_qkv_bias = "model.layers.0.self_attn.q_proj.bias" in keys
    has_o_bias = "model.layers.0.self_attn.o_proj.bias" in keys
    has_mlp_bias = "model.layers.0.mlp.gate_proj.bias" in keys
    if spec["arch"] == "qwen2":
        assert has_qkv_bias and "model.layers.0.self_attn.k_proj.bias" in keys and not has_o_bias
        assert not has_mlp_bias
    else:
        assert has_qkv_bias == has_o_bias == cfg.get("attention_bias", False)
        assert has_mlp_bias == cfg.get("mlp_bias", False)
    kv = cfg["num_key_value_heads"]
    assert ref.model.layers[0].self_attn.q_proj.weight.shape == (cfg["num_attention_heads"] * hd,
                                                                 cfg["hidden_size"])
    assert ref.model.layers[0].self_attn.k_proj.weight.shape == (kv * hd, cfg["hidden_size"])
    assert ref.model.layers[0].self_attn.o_proj.weight.shape == (cfg["hidden_size"],
                                                                 cfg["num_attention_heads"] * hd)

    eos = sorted(set(as_list(cfg.get("eos_token_id")) + as_list(gen_cfg.get("eos_token_id"))))
    gen_eos = as_list(gen_cfg.get("eos_token_id"))
    assert gen_eos and set(as_list(ref.generation_config.eos_token_id)) == set(gen_eos)
    assert gen_cfg.get("bos_token_id") == BOS == cfg["bos_token_id"]
    pad = cfg["pad_token_id"] if cfg.get("pad_token_id") is not None else gen_eos[0]

    vocab = cfg["vocab_size"]
    prompts = make_prompts(rng, vocab)
    ids, mask = pad_left(prompts, pad)
    pos = np_positions(mask).tolist()
    valid = torch.tensor(mask).bool()
    L0 = len(prompts[0])

    logits = batch_logits(ref, ids, mask, pos)
    with torch.inference_mode():
        logits0 = ref(torch.tensor([prompts[0]])).logits[0].float()
        logits_arange = ref(torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.float()
    ref.set_attn_implementation("eager")
    logits_eager = batch_logits(ref, ids, mask, pos)
    ref.set_attn_implementation("sdpa")
    if native_ref is not None:
        assert torch.equal(batch_logits(native_ref, ids, mask, pos), logits), \
            "Hub-style config.json reads differently from transformers' own"
        del native_ref
    e_window = None
    if spec["arch"] == "qwen2" and cfg.get("sliding_window"):
        # the stated but disabled window would matter: enabling it changes the logits
        sw_cfg = cfg_cls.from_dict(dict(cfg, use_sliding_window=True))
        m_sw = model_cls.from_pretrained(out_dir, config=sw_cfg, dtype=torch.float32).eval()
        assert m_sw.model.layers[0].self_attn.sliding_window is None
        assert m_sw.model.layers[1].self_attn.sliding_window == cfg["sliding_window"]
        e_window = rel_err(batch_logits(m_sw, ids, mask, pos)[valid], logits[valid])
        assert e_window > 1e-2, f"the disabled sliding window would not matter ({e_window})"
        del m_sw
    vl, maxabs = logits_in_range(logits, valid)
    e_pad = rel_err(logits[0, -L0:], logits0)
    e_eager = rel_err(logits_eager[valid], vl)
    e_arange = rel_err(logits_arange[valid], vl)
    assert e_pad < SELF_CHECK_TOL, e_pad
    assert e_eager < SELF_CHECK_TOL, e_eager
    assert e_arange < SELF_CHECK_TOL, e_arange     # RoPE: only position differences matter

    greedy, min_margin = greedy_checked(ref, prompts, eos)

    # batched left-padded generate (positions made by generate itself) gives the same ids
    with torch.inference_mode():
        gb = ref.generate(torch.tensor(ids), attention_mask=torch.tensor(mask), do_sample=False,
                          max_new_tokens=MAX_NEW_TOKENS)
    for row, g in zip(gb[:, len(ids[0]):].tolist(), greedy):
        assert row == g["output"], "batched left-padded generate differs from one prompt alone"

    # second way: numpy float64 from the safetensors file and config.json
    W = np_load_weights(out_dir)
    np_logits = np_forward(W, cfg, np.array(ids), np.array(mask))
    e_np = rel_err(vl.numpy(), np_logits[np.array(mask) == 1])
    e_np0 = rel_err(logits0.numpy(),
                    np_forward(W, cfg, np.array([prompts[0]]), np.ones((1, L0), dtype=np.int64))[0])
    assert e_np < SELF_CHECK_TOL, f"HF vs numpy: {e_np}"
    assert e_np0 < SELF_CHECK_TOL, f"HF vs numpy (prompt 0): {e_np0}"
    for gi, p in zip(greedy, prompts):
        assert np_greedy(W, cfg, p, MAX_NEW_TOKENS, eos) == gi["output"], "numpy greedy differs"
    # the greedy continuation recomputed without cache gives the same ids
    for gi, p in zip(greedy, prompts):
        with torch.inference_mode():
            full = ref(torch.tensor([p + gi["output"]])).logits[0]
        assert full[len(p) - 1:-1].argmax(-1).tolist() == gi["output"], "no-cache argmax differs"
    del ref

    # bf16 mode references (transformers run in bfloat16), as tools/make_bf16_expect.py
    bf16 = None
    if spec.get("bf16"):
        bf16 = bf16_run(model_cls, out_dir, prompts, eos, ids, mask, pos, valid, vl)
        assert bf16["err"] < BF16_TOLERANCE, f"bf16 vs f32 {bf16['err']}"

    # write the references
    save_file({"logits": logits.contiguous(), "logits_greedy0": logits0.contiguous()},
              os.path.join(out_dir, "expected_logits.safetensors"), metadata={"format": "pt"})
    notes = [n.replace("{cls}", model_cls.__name__) for n in COMMON_NOTES]
    notes.insert(0, "Covers: " + spec["covers"] + ".")
    if bands is not None:
        notes.append(f"llama3 bands for this head_dim and rope_theta: {bands[0]} frequencies kept, "
                     f"{bands[1]} smoothed, {bands[2]} divided by factor.")
    if spec["storage"] != "float32":
        notes.append(f"Weights are stored as {spec['storage']}; the reference converts each stored value "
                     "exactly to float32 and computes everything in float32 (from_pretrained(dtype=float32)).")
    notes.append(f"Prompt lengths {PROMPT_LENS} (each starts with BOS id {BOS}); batch is left-padded with "
                 f"id {pad}; logits_greedy0 is prompt 0 alone and must equal batch row 0 at its valid (last "
                 "len0) positions.")
    expected = dict(
        notes=notes,
        transformers_version=transformers.__version__,
        torch_version=torch.__version__.split("+")[0],
        seed=seed,
        architecture=model_cls.__name__,
        storage_dtype=spec["storage"],
        reference_dtype="float32",
        bos_token_id=BOS,
        eos_token_ids=gen_eos,
        pad_token_id_used=pad,
        batch=dict(input_ids=ids, attention_mask=mask, position_ids=pos),
        greedy=[dict(prompt=g["prompt"], max_new_tokens=g["max_new_tokens"], output=g["output"],
                     stopped_at_eos=False) for g in greedy],
        tolerance=TOLERANCE,
        max_abs_logit=round(maxabs, 4),
        min_greedy_margin_rel=round(min_margin, 6),
        self_check=dict(hf_vs_numpy_f64=float(f"{max(e_np, e_np0):.3e}"),
                        sdpa_vs_eager=float(f"{e_eager:.3e}"),
                        padded_vs_unpadded=float(f"{e_pad:.3e}"),
                        padded_arange_positions=float(f"{e_arange:.3e}"),
                        inv_freq_f32_vs_f64=float(f"{e_inv:.3e}")),
    )
    if e_window is not None:
        expected["self_check"]["if_sliding_window_were_applied"] = float(f"{e_window:.3e}")
    write_json(os.path.join(out_dir, "expected.json"), expected)
    if bf16:
        write_bf16_expect(out_dir, [
            f"transformers {model_cls.__name__} loaded with dtype=torch.bfloat16 (activations bf16 "
            "between every op; RMSNorm normalises in f32, rounds to bf16, then multiplies by the bf16 "
            "weight; cos/sin computed in f32 and rounded to bf16), sdpa attention, eval mode; the "
            "padded batch with the same attention_mask and position_ids as expected.json; logits "
            "widened to f32. Made by tools/make_llama_fixtures.py the way tools/make_bf16_expect.py "
            "makes the OPT ones.",
            "margins: each greedy step's (top1 - top2) / max|logit| in transformers' bf16 logits; "
            "min_greedy_margin the smallest. A margin below margin_min is a tie that transformers "
            "breaks by the lower token id; the seed was chosen so that none occurs here.",
        ], bf16, greedy, ids, mask, pos)
    chmod_files(out_dir)
    return dict(name=spec["name"], seed=seed, min_margin=min_margin, maxabs=maxabs,
                err=max(e_np, e_np0), e_pad=e_pad, e_eager=e_eager, e_arange=e_arange, vocab=vocab,
                bf16=None if not bf16 else dict(min_margin=bf16["min_margin"], err=bf16["err"],
                                                same=[g["output"] == f["output"]
                                                      for g, f in zip(bf16["greedy"], greedy)]))


def check_against(new_root, old_root):
    """Differences between a fresh build and the committed files. Checkpoints, configs and the
    token ids must be identical; logits may differ by float rounding across CPUs/BLAS builds
    (1e-5 relative f32, 1e-2 bf16) and the recorded self-check numbers by their rounding."""
    bad, notes = [], []
    for spec in FIXTURES:
        n = spec["name"]
        a, b = os.path.join(new_root, n), os.path.join(old_root, n)
        fa = sorted(os.listdir(a))
        fb = sorted(os.listdir(b)) if os.path.isdir(b) else []
        bad += [f"{n}/{f} (missing)" for f in fa if f not in fb]
        bad += [f"{n}/{f} (extra)" for f in fb if f not in fa]
        for f in fa:
            if f not in fb:
                continue
            pa, pb = os.path.join(a, f), os.path.join(b, f)
            with open(pa, "rb") as x, open(pb, "rb") as y:
                if x.read() == y.read():
                    continue
            if f.startswith("expected_logits"):
                tol = 1e-2 if "bf16" in f else 1e-5
                la, lb = load_file(pa), load_file(pb)
                if set(la) != set(lb) or any(la[k].shape != lb[k].shape for k in la):
                    bad.append(f"{n}/{f} (tensors)")
                    continue
                e = max(rel_err(la[k].numpy(), lb[k].numpy()) for k in la)
                (bad if e > tol else notes).append(f"{n}/{f} (max rel diff {e:.2e})")
            elif f.startswith("expected"):
                ja, jb = json.load(open(pa)), json.load(open(pb))
                loose = {"self_check", "max_abs_logit", "min_greedy_margin_rel", "min_greedy_margin",
                         "bf16_vs_f32_logits"}
                ga = [(g["prompt"], g["output"]) for g in ja["greedy"]]
                gb = [(g["prompt"], g["output"]) for g in jb["greedy"]]
                same = ga == gb and set(ja) == set(jb) and all(
                    ja[k] == jb[k] for k in ja if k not in loose | {"greedy"})
                (notes if same else bad).append(f"{n}/{f} ({'only recorded measurements differ' if same else 'differs'})")
            else:
                bad.append(f"{n}/{f}")
    return bad, notes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true",
                    help="rebuild in a temp dir and compare with --out (see check_against)")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    transformers.logging.set_verbosity_error()
    try:
        from transformers.utils import logging as hf_logging
        hf_logging.disable_progress_bar()
    except Exception:
        pass

    target = tempfile.mkdtemp(prefix="shardswap_llama_fixtures_") if args.check else args.out
    rows = build_seeded(FIXTURES, try_build, target)

    print(f"transformers {transformers.__version__}, torch {torch.__version__}, numpy {np.__version__}")
    print(f"{'fixture':20s} {'seed':>5s} {'vocab':>5s} {'max|logit|':>10s} {'min margin':>10s} "
          f"{'hf-vs-np64':>10s} {'pad-vs-1':>9s} {'sdpa-eager':>10s} {'bytes':>8s}")
    for r in rows:
        print(f"{r['name']:20s} {r['seed']:5d} {r['vocab']:5d} {r['maxabs']:10.3f} {r['min_margin']:10.2e} "
              f"{r['err']:10.2e} {r['e_pad']:9.2e} {r['e_eager']:10.2e} "
              f"{dir_size(os.path.join(target, r['name'])):8d}")
        if r["bf16"]:
            print(f"{'':20s} bf16: min margin {r['bf16']['min_margin']:.2e}, logits vs f32 "
                  f"{r['bf16']['err']:.2e}, greedy same as f32 {r['bf16']['same']}")
    total = sum(dir_size(os.path.join(target, s["name"])) for s in FIXTURES)
    print(f"smallest greedy margin (top1-top2)/max|logit|: {min(r['min_margin'] for r in rows):.3e}")
    print(f"largest HF-f32 vs numpy-f64 rel err: {max(r['err'] for r in rows):.3e}")
    print(f"total size of these fixtures: {total} bytes ({total / 1048576:.3f} MiB), budget {SIZE_BUDGET}")
    assert total < SIZE_BUDGET, "fixtures exceed the 2 MB budget"

    if args.check:
        bad, notes = check_against(target, args.out)
        shutil.rmtree(target)
        for n in notes:
            print("within rounding: " + n)
        if bad:
            print("differs from committed fixtures: " + ", ".join(bad))
            sys.exit(1)
        print("committed fixtures are up to date")


if __name__ == "__main__":
    main()
