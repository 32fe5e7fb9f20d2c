#!/usr/bin/env python3
"""Runs `shardswap bench forward` and tools/bench_hf.py (transformers on the
CPU, same thread count, same shapes) on each checkpoint, in f32 and in bf16,
and prints one markdown table of ours/theirs ratios. Any family both load:
OPT, Llama, Mistral, Qwen2 (bench_hf.py loads AutoModelForCausalLM and
refuses a checkpoint with missing or unexpected tensors).

    python3 tools/bench_compare.py --models DIR [DIR ...] [--batch 1] \
        [--prompt-len 128] [--gen 32] [--threads 2] [--repeat 3] \
        [--precisions f32,bf16] [--step-batches 8] [--python PY] [--json] [--json-out FILE]

Each precision runs both sides the same way: f32 is shardswap's
`--compute f32` (weights widened on the fly, kept at the checkpoint's dtype
in memory) against transformers loaded in float32; bf16 is `--compute bf16`
against transformers loaded in bfloat16. "best HF" is transformers' faster
precision, the issue's yardstick: prefill >= 1.0x and decode >= 1.5x of it.
--step-batches B[,B...] also runs our side alone at those batch sizes (same
prompt and steps, --repeat 2) and prints its decode step cost against batch
--batch's: what a batch of B sequences costs over one.
--python names the interpreter that has torch and transformers (default:
this one).
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.join(HERE, "..", "build", "shardswap")


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--precisions", default="f32,bf16")
    ap.add_argument("--step-batches", default="", help="our decode step cost at these batches too")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--bin", default=BIN)
    ap.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    ap.add_argument("--json-out", help="also write the JSON to this file")
    a = ap.parse_args()
    precs = [p for p in a.precisions.split(",") if p]
    step_batches = [int(b) for b in a.step_batches.split(",") if b]
    for p in precs:
        if p not in ("f32", "bf16"):
            sys.exit(f"--precisions: '{p}' is not f32 or bf16")
    shape = ["--batch", str(a.batch), "--prompt-len", str(a.prompt_len), "--gen", str(a.gen),
             "--threads", str(a.threads), "--repeat", str(a.repeat), "--json"]
    rows = []
    for m in a.models:
        row = {"model": m, "shardswap": {}, "transformers": {}, "steps": {}}
        for p in precs:
            row["shardswap"][p] = run_json([a.bin, "bench", "forward", "--model", m,
                                            "--compute", p] + shape)
            row["transformers"][p] = run_json([a.python, os.path.join(HERE, "bench_hf.py"),
                                               "--model", m, "--dtype", p] + shape)
            row["steps"][p] = {}
            for b in step_batches:
                sh = list(shape)
                sh[sh.index("--batch") + 1] = str(b)
                sh[sh.index("--repeat") + 1] = str(min(a.repeat, 2))
                row["steps"][p][b] = run_json([a.bin, "bench", "forward", "--model", m,
                                               "--compute", p] + sh)
        rows.append(row)
    if a.json_out:
        with open(a.json_out, "w") as fh:
            json.dump(rows, fh, indent=1)
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"batch {a.batch}, prompt {a.prompt_len}, gen {a.gen}, {a.threads} threads, "
          f"best of {a.repeat}; tok/s")
    steps_h = "".join(f" | decode ms/step b{a.batch} / b{b} (ratio)" for b in step_batches)
    print("| checkpoint | weights | compute | prefill ours / HF | ratio | vs best HF "
          "| decode ours / HF | ratio | vs best HF | decode GB/s | read GB/s | decode / read"
          + steps_h + " |")
    print("|---" * (12 + len(step_batches)) + "|")
    for r in rows:
        best_pf = max(t["prefill_tok_s"] for t in r["transformers"].values())
        best_dc = max(t["decode_tok_s"] for t in r["transformers"].values())
        for p in precs:
            o, t = r["shardswap"][p], r["transformers"][p]
            read = o.get("read_gb_s") or o.get("memcpy_gb_s") or 0
            print(f"| {os.path.basename(r['model'].rstrip('/'))} "
                  f"| {o['weight_dtype']} {o['weight_bytes'] / 1e9:.2f} GB | {p} "
                  f"| {o['prefill_tok_s']:.0f} / {t['prefill_tok_s']:.0f} "
                  f"| {o['prefill_tok_s'] / t['prefill_tok_s']:.2f}x "
                  f"| {o['prefill_tok_s'] / best_pf:.2f}x "
                  f"| {o['decode_tok_s']:.1f} / {t['decode_tok_s']:.1f} "
                  f"| {o['decode_tok_s'] / t['decode_tok_s']:.2f}x "
                  f"| {o['decode_tok_s'] / best_dc:.2f}x "
                  f"| {o['decode_weight_gb_s']:.1f} | {read:.1f} "
                  f"| {o['decode_weight_gb_s'] / read if read else 0:.2f} "
                  + "".join(f"| {o['decode_ms_per_step']:.1f} / {sb['decode_ms_per_step']:.1f} "
                            f"({sb['decode_ms_per_step'] / o['decode_ms_per_step']:.2f}x) "
                            for sb in (r["steps"][p][b] for b in step_batches))
                  + "|")


if __name__ == "__main__":
    main()
