#!/usr/bin/env python3
"""Peer benchmark: Hugging Face transformers on CPU or a GPU (prefill + greedy decode) of any
causal LM it loads with AutoModelForCausalLM (OPT, Llama, Mistral, Qwen2, ...).

    python3 tools/bench_hf.py --model DIR [--device cpu|cuda|cuda:N] [--batch B] [--prompt-len L]
                              [--gen N] [--threads T] [--dtype f32|bf16|f16|checkpoint] [--json]
                              [--repeat R]

DIR is a Hugging Face checkpoint directory (config.json + *.safetensors); a checkpoint whose
weights do not match the model class exactly (a missing or unexpected tensor, which transformers
would fill with random values or drop) is refused, so both sides run the same weights. Weights are loaded
as float32 by default (shardswap's f32 mode); --dtype bf16 runs the model in bfloat16 (weights
and activations, as transformers serves a bf16 model; shardswap's bf16 mode); --dtype f16 in
float16 (as OPT is served on GPUs); --dtype checkpoint keeps the stored dtype.
--device cuda (default cpu) runs it on a GPU: the model and the prompts are moved there once,
before any timing, and every timed phase ends with torch.cuda.synchronize(), so the times are
the GPU's work and not its queueing (--threads then only sizes PyTorch's CPU pool).
Prompts are random ids (seeded), shape [B, L], no padding. Under torch.inference_mode():

  prefill = one forward over [B, L] with use_cache=True; one untimed warm-up, then timed.
  decode  = N single-token steps feeding the returned KV cache, greedy argmax token each
            step; timed in total, after an untimed prefill.

Each of R repeats times one prefill and one N-step decode; the best (smallest) time of each
is reported: prefill tok/s = B*L / t_prefill, decode tok/s = B*N / t_decode, and ms per
decode step = 1000 * t_decode / N. Needs: pip install -r tools/requirements.txt
"""

import argparse
import inspect
import json
import os
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM


def load(model_dir, dtype):
    d = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}.get(dtype, "auto")
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    model, info = AutoModelForCausalLM.from_pretrained(model_dir, output_loading_info=True,
                                                       **{key: d})
    bad = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys")
           and v}
    if bad:
        sys.exit(f"{model_dir}: transformers' {type(model).__name__} does not match the checkpoint: "
                 + "; ".join(f"{k} {sorted(map(str, v))[:5]}" for k, v in bad.items()))
    return model.eval()


def main():
    ap = argparse.ArgumentParser(description="transformers causal LM benchmark (prefill + decode)")
    ap.add_argument("--model", required=True, help="checkpoint directory")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen", type=int, default=32, help="decode steps")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--dtype", choices=["f32", "bf16", "f16", "checkpoint"], default="f32")
    ap.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    B, L, N, R = args.batch, args.prompt_len, args.gen, args.repeat
    if min(B, L, N, R, args.threads) < 1:
        sys.exit("batch, prompt-len, gen, repeat and threads must be >= 1")

    device = torch.device(args.device)
    if device.type not in ("cpu", "cuda"):
        sys.exit(f"--device {args.device}: expected cpu, cuda or cuda:N")
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit(f"--device {args.device}: PyTorch sees no CUDA GPU")

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    model = load(args.model, args.dtype).to(device)
    cfg = model.config
    if L + N > cfg.max_position_embeddings:
        sys.exit(f"prompt-len + gen = {L + N} > max_position_embeddings {cfg.max_position_embeddings}")

    # transformers >= 5 calls the KV cache argument/output "cache", older ones "past_key_values"
    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def get_cache(out):
        return getattr(out, "cache", None) if cache_kw == "cache" else out.past_key_values

    g = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(4, cfg.vocab_size, (B, L), generator=g).to(device)

    def prefill():
        return model(ids, use_cache=True)

    def decode(out, steps):
        cache = get_cache(out)
        tok = out.logits[:, -1, :].argmax(-1, keepdim=True)
        for _ in range(steps):
            out = model(tok, use_cache=True, **{cache_kw: cache})
            cache = get_cache(out)
            tok = out.logits[:, -1, :].argmax(-1, keepdim=True)
        return tok

    t_prefill = t_decode = float("inf")
    with torch.inference_mode():
        decode(prefill(), min(N, 2))                 # warm-up (prefill and a couple of steps)
        sync()
        for _ in range(R):
            t0 = time.perf_counter()
            out = prefill()
            sync()
            t_prefill = min(t_prefill, time.perf_counter() - t0)

            out = prefill()                          # untimed: fresh cache for the decode run
            sync()
            t0 = time.perf_counter()
            decode(out, N)
            sync()
            t_decode = min(t_decode, time.perf_counter() - t0)

    res = {
        "impl": "transformers",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "model": os.path.abspath(args.model),
        "model_class": type(model).__name__,
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "threads": args.threads,
        "batch": B,
        "prompt_len": L,
        "gen": N,
        "repeat": R,
        "prefill_s": t_prefill,
        "prefill_tok_s": B * L / t_prefill,
        "decode_s": t_decode,
        "decode_tok_s": B * N / t_decode,
        "decode_ms_per_step": 1000.0 * t_decode / N,
    }
    if args.json:
        print(json.dumps(res))
        return
    print(f"transformers {res['transformers']}, torch {res['torch']}, {res['dtype']}, "
          f"{res['device_name']}, threads {args.threads}, best of {R}")
    print(f"model {res['model']}: batch {B}, prompt_len {L}, gen {N}")
    print(f"{'phase':8s} {'seconds':>10s} {'tokens/s':>12s} {'ms/step':>10s}")
    print(f"{'prefill':8s} {t_prefill:10.4f} {res['prefill_tok_s']:12.1f} {'':>10s}")
    print(f"{'decode':8s} {t_decode:10.4f} {res['decode_tok_s']:12.1f} {res['decode_ms_per_step']:10.3f}")


if __name__ == "__main__":
    main()
