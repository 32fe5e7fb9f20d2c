#!/usr/bin/env bash
# The main job, as a service, on built-in defaults, nothing downloaded:
# 1. three random-weight OPT checkpoints in Hugging Face layout (opt-125m's
#    shape cut to 2 layers, f16, 0.11 GB each; cached in models/) with the
#    real OPT tokenizer from data/tokenizer/opt: random weights, real tokens;
# 2. `shardswap serve` on them, one CPU device with room for two of the three
#    (its budget computed from the checkpoints' size), host copies held to
#    1 GB/s so a swap costs what it costs on GPUs; /health, then one streamed
#    completion with curl;
# 3. per scheduling policy (Computron's, then ours): a fresh server with that
#    policy, Computron's skewed workload (config 6: rates 10,10,1 req/s, CV
#    0.25) replayed over HTTP in real time by `bench serve` (same seed, so the
#    same arrivals), the server stopped with SIGTERM (it must exit 0);
# 4. the two runs side by side, a /metrics excerpt, the latency-CDF plot;
# 5. chat: a Llama-3-shaped model (random weights, the test preset
#    llama-3-tiny) with the real Llama 3 tokenizer and Llama 3.1's chat
#    template, one /v1/chat/completions request with curl.
# About a minute on a 2-core machine (DEMO_DURATION=S: seconds of arrivals, default 30).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=./build/shardswap
out=bench-out
config=computron:6
tag=computron-6
duration=${DEMO_DURATION:-30}
mkdir -p models "$out"
command -v curl >/dev/null || { echo "demo: needs curl (apt-get install curl)" >&2; exit 1; }

pid=
cleanup() {
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT INT TERM

models=()
for s in 0 1 2; do
  dir=models/opt-125m-l2-tok-s$s
  if [ ! -f "$dir/config.json" ]; then
    "$bin" gen-model --preset opt-125m --layers 2 --dtype f16 --seed "$s" \
      --tokenizer-from data/tokenizer/opt --out "$dir"
  fi
  models+=(--model "m$s=$dir")
done
# Room for two of the three: two models' weights plus 48 MiB for their
# batches (a batch of 8 of these requests takes a few MiB); a third model
# needs another 109 MB.
weights=$(stat -c %s models/opt-125m-l2-tok-s0/model.safetensors)
budget=$((2 * weights + 48 * 1024 * 1024))

# start_server POLICY [serve flags...]: a server in the background on a free
# port (the three OPT models unless flags are given); sets $pid, $log and
# $url once /health answers.
start_server() {
  local name=$1
  shift
  local portfile="$out/serve-$name.port"
  log="$out/serve-$name.log"
  rm -f "$portfile"
  if [ $# -eq 0 ]; then
    set -- "${models[@]}" --devices 1 --device-budget "$budget" --policy "$name" --max-batch 8 \
      --link-gbps 1
  fi
  "$bin" serve "$@" --port 0 --port-file "$portfile" --log-level warn 2>"$log" &
  pid=$!
  for _ in $(seq 1 100); do
    if [ -s "$portfile" ]; then
      url="http://127.0.0.1:$(cat "$portfile")"
      if curl -sf "$url/health" >/dev/null; then return 0; fi
    fi
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    sleep 0.1
  done
  echo "demo: the server ($name) did not come up; its log:" >&2
  cat "$log" >&2
  exit 1
}

# stop_server: SIGTERM, and it must exit 0.
stop_server() {
  kill -TERM "$pid"
  local rc=0
  wait "$pid" || rc=$?
  pid=
  if [ "$rc" -ne 0 ]; then
    echo "demo: the server exited $rc after SIGTERM; its log:" >&2
    tail -5 "$log" >&2
    exit 1
  fi
  echo "server stopped by SIGTERM, exit status 0"
}

echo "--- shardswap serve: 3 models (m0, m1, m2), one CPU device with room for two ($budget bytes)"
start_server swapwise
echo "$url/health: $(curl -s "$url/health")"
echo "--- one streamed completion (curl -N, \"stream\": true)"
curl -sN "$url/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model": "m0", "prompt": "A photo of a cat", "max_tokens": 12, "temperature": 0.9, "top_p": 0.95, "seed": 1, "stream": true}' |
  sed -n 's/^data: //p' | head -3
echo "    ... (random weights: random but real tokens)"
# The machine must compute well below the arrival rate (21 req/s, batches
# of up to 8): one request on a resident model over HTTP, best of 7 after
# the first (bench serve's warm latency, with no workload after it).
warm_s=$("$bin" bench serve --url "$url" --config custom --rates 0 --warm-requests 8 \
  --label warm --out-dir "$out" --json 2>/dev/null | grep -o '"warm_latency_s": [0-9.]*' | cut -d' ' -f2)
warm_ms=$(awk -v w="$warm_s" 'BEGIN { printf "%.1f", w * 1000 }')
# one SLO for both runs: 5x the warm latency, as bench workload sets it
slo=$(awk -v w="$warm_s" 'BEGIN { printf "%.4f", 5 * w }')
echo "warm latency over HTTP: $warm_ms ms (one request on a resident model); SLO $slo s"
if awk -v w="$warm_ms" 'BEGIN { exit !(w > 30) }'; then
  echo "demo: WARNING: this machine is loaded (a warm request takes $warm_ms ms, > 30 ms):" \
    "$config's 21 req/s will queue, and the latencies below say more about the load than" \
    "about the policies" >&2
fi
stop_server

runs=()
for policy in computron swapwise; do
  echo "--- $config over HTTP, policy $policy (${duration} s of arrivals, seed 1)"
  start_server "$policy"
  "$bin" bench serve --url "$url" --config "$config" --duration "$duration" --seed 1 \
    --slo "$slo" --label "$policy" --out-dir "$out" --json >"$out/serve-$policy.json"
  if [ "$policy" = swapwise ]; then
    echo "--- $url/metrics (excerpt)"
    curl -s "$url/metrics" |
      grep -E '^shardswap_(swaps_total|evictions_total|requests_total\{[^}]*outcome="ok"|request_duration_seconds_(sum|count)|device_bytes_(used|budget))' |
      head -14
  fi
  stop_server
  runs+=("$out/serve-$policy.json")
done

echo "--- side by side: the same arrivals through each policy's server"
"$bin" bench serve --compare "$(IFS=,; echo "${runs[*]}")" --plot "$out/serve-$tag-cdf.svg" |
  sed "s/^plot /latency CDF plot: /"

echo "--- chat: /v1/chat/completions on a Llama-3-shaped model with Llama 3.1's chat template"
chat=models/llama-3-tiny-chat
if [ ! -f "$chat/config.json" ]; then
  "$bin" gen-model --preset llama-3-tiny --dtype f16 --tokenizer-from data/tokenizer/llama3 \
    --chat-template tests/fixtures/chat_templates/templates/meta-llama-Llama-3.1-8B-Instruct.jinja \
    --out "$chat" 2>/dev/null
fi
start_server chat --model "llama3=$chat"
echo '{"messages": [{"role": "user", "content": "Hello!"}], "add_generation_prompt": true}' |
  "$bin" chat-template --model "$chat" | sed 's/^/    prompt| /'
echo
curl -s "$url/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model": "llama3", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 8, "temperature": 0}'
echo
echo "    (random weights: real Llama 3 tokens, no meaning)"
stop_server
