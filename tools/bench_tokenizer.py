#!/usr/bin/env python3
"""Encode speed of shardswap's tokenizer against Hugging Face tokenizers, per family.

Writes one text file (documents separated by blank lines: this repository's
docs and C sources, and seeded multilingual strings from
tools/make_tokenizer_families_corpus.py), then for each tokenizer directory
runs on that same file, in the same run:

  ours         `shardswap bench tokenize --model DIR --text FILE --json`:
               bpe_encode per document, one thread, best of 5 passes
  hf encode    tokenizers' Tokenizer.encode(doc, add_special_tokens=False) per
               document from Python (one thread; includes the Python call)
  hf batch/1   Tokenizer.encode_batch(docs) with RAYON_RS_NUM_CPUS=1 and
               TOKENIZERS_PARALLELISM=false (one thread, no per-call Python)

and prints a table of MB/s with the ratios ours / hf (and --json lines).
The id counts of ours and HF's must agree, or the script says so.

    python3 tools/bench_tokenizer.py [--binary build/shardswap] [--mb 4] [DIR ...]
"""

import argparse
import glob
import json
import os
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_DIRS = [os.path.join(ROOT, "data", "tokenizer", f) for f in
                ["llama3", "qwen2", "llama2", "phi3"]]

HF_CHILD = r"""
import json, sys, time
from tokenizers import Tokenizer
path, text_path, mode = sys.argv[1:4]
tok = Tokenizer.from_file(path)
docs = open(text_path, encoding="utf-8", newline="").read().split("\n\n")
docs = [d + "\n\n" for d in docs[:-1]] + [docs[-1]]
docs = [d for d in docs if d]
best, n_ids = 1e30, 0
for _ in range(5):
    t0 = time.perf_counter()
    if mode == "batch":
        n = sum(len(e.ids) for e in tok.encode_batch(docs, add_special_tokens=False))
    else:
        n = sum(len(tok.encode(d, add_special_tokens=False).ids) for d in docs)
    best = min(best, time.perf_counter() - t0)
    n_ids = n
print(json.dumps({"seconds": best, "ids": n_ids}))
"""


def make_text(mb, path):
    parts = []
    for pat in ["docs/*.md", "src/*/*.c", "src/*/*.h", "README.md", "tools/*.py"]:
        for f in sorted(glob.glob(os.path.join(ROOT, pat))):
            with open(f, encoding="utf-8", errors="replace") as fh:
                parts.append(fh.read())
    sys.path.insert(0, HERE)
    import make_tokenizer_families_corpus as corpus
    rng = random.Random(19)
    multi = [corpus.short_text(rng) for _ in range(4000)]
    base = "\n\n".join(parts) + "\n\n" + "\n\n".join(multi)
    out = []
    size = 0
    while size < mb * 1e6:
        out.append(base)
        size += len(base.encode("utf-8"))
    text = "\n\n".join(out)
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
    return len(text.encode("utf-8"))


def run_hf(tokenizer_json, text_path, mode):
    env = dict(os.environ, RAYON_RS_NUM_CPUS="1", RAYON_NUM_THREADS="1",
               TOKENIZERS_PARALLELISM="false")
    r = subprocess.run([sys.executable, "-c", HF_CHILD, tokenizer_json, text_path, mode],
                       env=env, capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*", default=DEFAULT_DIRS)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "shardswap"))
    ap.add_argument("--mb", type=float, default=4.0, help="text size in MB (default 4)")
    ap.add_argument("--json", action="store_true", help="also print one JSON object per family")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        text_path = os.path.join(tmp, "text.txt")
        nbytes = make_text(args.mb, text_path)
        print(f"text: {nbytes / 1e6:.2f} MB (repository docs and sources, multilingual strings); "
              f"every number is one thread, best of 5 passes, each document encoded whole")
        print(f"{'tokenizer':10} {'ids':>9} {'ours MB/s':>10} {'hf encode':>10} {'hf batch/1':>11}"
              f" {'ours/encode':>12} {'ours/batch':>11}")
        for d in args.dirs:
            name = os.path.basename(os.path.normpath(d))
            r = subprocess.run([args.binary, "bench", "tokenize", "--model", d, "--text",
                                text_path, "--json"], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"{name}: {r.stderr.strip()}")
            ours = json.loads(r.stdout)
            hf_enc = run_hf(os.path.join(d, "tokenizer.json"), text_path, "encode")
            hf_bat = run_hf(os.path.join(d, "tokenizer.json"), text_path, "batch")
            mb = nbytes / 1e6
            o, e, b = ours["encode_mb_s"], mb / hf_enc["seconds"], mb / hf_bat["seconds"]
            note = "" if ours["ids"] == hf_enc["ids"] == hf_bat["ids"] else \
                f"  (ids differ: ours {ours['ids']}, hf {hf_enc['ids']})"
            print(f"{name:10} {ours['ids']:9d} {o:10.2f} {e:10.2f} {b:11.2f} {o / e:12.2f} "
                  f"{o / b:11.2f}{note}")
            if args.json:
                print(json.dumps({"bench": "tokenize_vs_hf", "tokenizer": name, "bytes": nbytes,
                                  "ids": ours["ids"], "ours_mb_s": o, "hf_encode_mb_s": round(e, 2),
                                  "hf_batch1_mb_s": round(b, 2), "ratio_encode": round(o / e, 2),
                                  "ratio_batch1": round(o / b, 2)}))


if __name__ == "__main__":
    main()
