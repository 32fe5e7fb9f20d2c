#!/usr/bin/env python3
"""Converts a Hugging Face OPT checkpoint stored as pytorch_model*.bin into
safetensors, which is what shardswap reads:

    pip install -r tools/requirements.txt
    python3 tools/to_safetensors.py --model SRC_DIR --out DST_DIR

The weights keep their stored dtype; tokenizer files are copied along.
"""
import argparse
import os
import shutil

import torch
from transformers import OPTForCausalLM

TOKENIZER_FILES = ["vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "added_tokens.json"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="directory with config.json and *.bin weights")
    ap.add_argument("--out", required=True, help="output directory")
    a = ap.parse_args()
    model = OPTForCausalLM.from_pretrained(a.model, torch_dtype="auto")
    model.save_pretrained(a.out, safe_serialization=True)
    for f in TOKENIZER_FILES:
        src = os.path.join(a.model, f)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(a.out, f))
    print(f"wrote {a.out} ({next(model.parameters()).dtype}, torch {torch.__version__})")


if __name__ == "__main__":
    main()
