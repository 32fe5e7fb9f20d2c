#!/usr/bin/env bash
# The main job on built-in defaults, nothing downloaded:
# 1. a random-weight OPT-125m checkpoint in Hugging Face layout (cached in
#    models/), generated from; random weights give random text;
# 2. Computron's skewed workload (config 6: rates 10,10,1 req/s, CV 0.25) on
#    three generated models sharing two CPU devices with room for two of them,
#    with each device's copies held to 1 GB/s so a swap costs what it costs on
#    GPUs, replayed in real time under Computron's scheduling and ours; prints
#    the side-by-side table and the latency-CDF plot's path.
set -euo pipefail
cd "$(dirname "$0")/.."
model=models/opt-125m-random
# The real OPT tokenizer files committed in data/tokenizer/opt: random weights
# then print random but real tokens.
if [ ! -f "$model/config.json" ]; then
  mkdir -p models
  ./build/shardswap gen-model --preset opt-125m --dtype f16 --seed 0 \
    --tokenizer-from data/tokenizer/opt --out "$model"
fi
echo "--- generate (temperature 0.9, top-k 50, top-p 0.95, seed 1)"
./build/shardswap generate --model "$model" --prompt "A photo of a cat" --max-tokens 24 \
  --temperature 0.9 --top-k 50 --top-p 0.95 --seed 1
echo "--- bench workload: Computron's config 6, both policies on the same arrivals"
./build/shardswap bench workload --config computron:6 --link-gbps 1
