#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang with ASan+UBSan) into build-fuzz/
# and runs each for SECONDS (default 10) from its committed seed corpus
# (fuzz/corpus/<name>/, copied: new inputs go to build-fuzz/corpus/). A crash,
# leak, sanitizer report or timeout fails the run; its input is kept in
# build-fuzz/artifacts/ (turn it into a regression test).
#   bash tools/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-10}"
shift || true
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DSHARDSWAP_FUZZ=ON -DSHARDSWAP_CUDA=OFF \
  -DSHARDSWAP_WERROR=ON >/dev/null
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(config safetensors gguf tokenizer_gguf index tokenizer_files encode oai serve_config template proto adapter_config ct)
for t in "${targets[@]}"; do
  cmake --build build-fuzz -j"$(nproc)" --target "fuzz_$t" >/dev/null
done
mkdir -p build-fuzz/artifacts
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t"
  cp -n "fuzz/corpus/$t"/* "build-fuzz/corpus/$t/" 2>/dev/null || true
  echo "fuzz_$t: ${secs} s"
  log="build-fuzz/fuzz_$t.log"
  rc=0
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "build-fuzz/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/$t-" \
    "build-fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  grep -E "^(stat::number_of_executed_units|SUMMARY)|runtime error|ERROR: " "$log" || true
  [ "$rc" -eq 0 ] || { echo "fuzz_$t failed (exit $rc): $log, input in build-fuzz/artifacts/"; exit 1; }
done
