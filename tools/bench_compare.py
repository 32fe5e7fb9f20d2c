#!/usr/bin/env python3
"""Runs `shardswap bench forward` and tools/bench_hf.py (transformers on the
CPU, same thread count, same shapes) on each checkpoint and prints one
markdown table of ours/theirs ratios.

    python3 tools/bench_compare.py --models DIR [DIR ...] [--batch 1] \
        [--prompt-len 128] [--gen 32] [--threads 2] [--repeat 3] [--json]

transformers always computes in float32 (the checkpoint is widened on load);
shardswap keeps the checkpoint's dtype in memory and widens on the fly, so an
f16 checkpoint streams half the bytes per decode step.
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
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    shape = ["--batch", str(a.batch), "--prompt-len", str(a.prompt_len), "--gen", str(a.gen),
             "--threads", str(a.threads), "--repeat", str(a.repeat), "--json"]
    rows = []
    for m in a.models:
        ours = run_json([BIN, "bench", "forward", "--model", m] + shape)
        theirs = run_json([sys.executable, os.path.join(HERE, "bench_hf.py"), "--model", m] + shape)
        rows.append({"model": m, "shardswap": ours, "transformers": theirs})
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"batch {a.batch}, prompt {a.prompt_len}, gen {a.gen}, {a.threads} threads, best of {a.repeat}")
    print("| checkpoint | weights | prefill tok/s ours / HF | ratio | decode tok/s ours / HF | ratio "
          "| decode GB/s | memcpy GB/s | decode / memcpy |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        o, t = r["shardswap"], r["transformers"]
        print(f"| {os.path.basename(r['model'].rstrip('/'))} | {o['weight_dtype']} {o['weight_bytes']/1e9:.2f} GB "
              f"| {o['prefill_tok_s']:.0f} / {t['prefill_tok_s']:.0f} | {o['prefill_tok_s']/t['prefill_tok_s']:.2f}x "
              f"| {o['decode_tok_s']:.1f} / {t['decode_tok_s']:.1f} | {o['decode_tok_s']/t['decode_tok_s']:.2f}x "
              f"| {o['decode_weight_gb_s']:.1f} | {o['memcpy_gb_s']:.1f} | {o['decode_vs_memcpy']:.2f} |")


if __name__ == "__main__":
    main()
