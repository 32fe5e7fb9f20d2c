#!/usr/bin/env bash
# What HTTP costs: the same workload, on the same arrivals (config and seed),
# replayed in process by `bench workload` and over HTTP by `bench serve`
# against `shardswap serve` built like bench workload's rig (its devices,
# budgets from its --json, policy, batch size and queue bound), round after
# round, then all runs side by side (p50/p99 ratios against the first).
# The rig is bench workload --tp 1 on opt-125m's shape cut to 2 layers (one
# core computing: on a 2-core machine shared with other work, TP 2's
# all-reduce makes every run hostage to the other processes).
#
#   tools/bench_http_overhead.sh [CONFIG [DURATION [ROUNDS]]]   (default computron:6 20 3)
#   tools/bench_http_overhead.sh round-robin                    closed loop, 200 requests, 1 model
set -euo pipefail
cd "$(dirname "$0")/.."
bin=./build/shardswap
config=${1:-computron:6}
duration=${2:-20}
rounds=${3:-3}
policy=computron
out=bench-out/http-overhead
mkdir -p models "$out"
command -v curl >/dev/null || { echo "bench_http_overhead: needs curl" >&2; exit 1; }

# the server's checkpoints: bench workload's models (same preset, layers,
# dtype and seeds, so the same weights) with the tokenizer the server wants
for s in 0 1 2; do
  dir=models/opt-125m-l2-tok-s$s
  [ -f "$dir/config.json" ] || "$bin" gen-model --preset opt-125m --layers 2 --dtype f16 --seed "$s" \
    --tokenizer-from data/tokenizer/opt --out "$dir" >/dev/null
done
if [ "$config" = round-robin ]; then
  wl_flags=(--config round-robin --models 1 --requests 200)
  sv_flags=(--config round-robin --n-models 1 --requests 200)
else
  wl_flags=(--config "$config" --duration "$duration" --seed 1)
  sv_flags=(--config "$config" --duration "$duration" --seed 1)
fi

pid=
cleanup() { if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" || true; fi; }
trap cleanup EXIT INT TERM

files=()
for r in $(seq 1 "$rounds"); do
  echo "--- round $r: bench workload (in process), then bench serve (HTTP)" >&2
  wl=$out/r$r-workload.json sv=$out/r$r-serve.json
  "$bin" bench workload "${wl_flags[@]}" --policy "$policy" --preset opt-125m --layers 2 --tp 1 \
    --slo 0.1 --out-dir "$out/r$r" --json >"$wl"
  field() { grep -o "\"$1\": [0-9]*" "$wl" | head -1 | cut -d' ' -f2; }
  budget=$(field device_budget_bytes) host=$(field host_budget_bytes)
  batch=$(field max_batch)
  rm -f "$out/port"
  "$bin" serve --model m0=models/opt-125m-l2-tok-s0 --model m1=models/opt-125m-l2-tok-s1 \
    --model m2=models/opt-125m-l2-tok-s2 --devices 1 --device-budget "$budget" --host-budget "$host" \
    --policy "$policy" --max-batch "$batch" --queue-cap 1048576 --port 0 --port-file "$out/port" \
    --log-level warn 2>"$out/serve.log" &
  pid=$!
  while [ ! -s "$out/port" ]; do kill -0 "$pid"; sleep 0.1; done
  "$bin" bench serve --url "http://127.0.0.1:$(cat "$out/port")" "${sv_flags[@]}" --slo 0.1 --prime \
    --label "http-r$r" --out-dir "$out/r$r" --json >"$sv"
  kill -TERM "$pid"
  wait "$pid"
  pid=
  files+=("$wl" "$sv")
done
"$bin" bench serve --compare "$(IFS=,; echo "${files[*]}")" --plot "$out/cdf.svg"
for f in "${files[@]}"; do
  printf '%-40s warm latency %s s\n' "$f" "$(grep -o '"warm_latency_s": [0-9.]*' "$f" | cut -d' ' -f2)"
done
