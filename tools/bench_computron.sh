#!/usr/bin/env bash
# Runs Computron's 19 workload configs and the round-robin case through
# `shardswap bench workload` (both policies on the same arrivals each time),
# one JSON line per config into $OUT/results.jsonl, then prints the
# side-by-side table. About a minute per config on 2 cores.
#   bash tools/bench_computron.sh [OUT_DIR] [extra bench workload flags...]
# SHARDSWAP=path runs another build of the binary (default ./build/shardswap).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench-out}
shift || true
mkdir -p "$out"
: > "$out/results.jsonl"
for k in $(seq 0 18) round-robin; do
  cfg=$k
  [ "$k" = round-robin ] || cfg=computron:$k
  echo "== $cfg" >&2
  "${SHARDSWAP:-./build/shardswap}" bench workload --config "$cfg" --out-dir "$out" --json "$@" >> "$out/results.jsonl"
done
python3 tools/computron_table.py "$out/results.jsonl"
