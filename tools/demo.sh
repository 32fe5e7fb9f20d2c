#!/usr/bin/env bash
# The main job on a built-in default: make a random-weight OPT-125m checkpoint
# (Hugging Face layout, cached in models/) and generate from it. Random weights
# give random text: this shows the pipeline, not language.
set -euo pipefail
cd "$(dirname "$0")/.."
model=models/opt-125m-random
# The real OPT tokenizer files when ../shared/data has them (random weights
# then print random but real tokens), else gen-model's minimal byte tokenizer.
tok=()
[ -f ../shared/data/opt-tokenizer/vocab.json ] && tok=(--tokenizer-from ../shared/data/opt-tokenizer)
if [ ! -f "$model/config.json" ]; then
  mkdir -p models
  ./build/shardswap gen-model --preset opt-125m --dtype f16 --seed 0 "${tok[@]}" --out "$model"
fi
./build/shardswap inspect --model "$model" | head -14
echo "--- generate (greedy, 24 tokens)"
./build/shardswap generate --model "$model" --prompt "A photo of a cat" --max-tokens 24
echo "--- generate (temperature 0.9, top-k 50, top-p 0.95, seed 1)"
./build/shardswap generate --model "$model" --prompt "A photo of a cat" --max-tokens 24 \
  --temperature 0.9 --top-k 50 --top-p 0.95 --seed 1
echo "--- bench forward"
./build/shardswap bench forward --model "$model" --batch 1 --prompt-len 64 --gen 16 --repeat 2
