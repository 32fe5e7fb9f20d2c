#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang with ASan+UBSan) into build-fuzz/
# and runs each from its committed seed corpus (fuzz/corpus/<name>/, copied:
# new inputs go to build-fuzz/corpus/): every seed, then mutations until
# SECONDS (default 10) have passed or RUNS inputs have run, whichever comes
# first. JOBS targets run at once (each is one process). A crash, leak,
# sanitizer report or timeout fails the run; its input is kept in
# build-fuzz/artifacts/ (turn it into a regression test).
#   bash tools/fuzz.sh [SECONDS] [TARGET...]
#   SHARDSWAP_FUZZ_RUNS=N (default: no limit)  SHARDSWAP_FUZZ_JOBS=J (default: nproc)
#   bash tools/fuzz.sh --configure    only configure build-fuzz/
#   bash tools/fuzz.sh --build [TARGET...]   only build them (configured first if it is not)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=run
case "${1:-}" in
  --configure | --build) mode=${1#--}; shift ;;
esac
secs=10
if [ "$mode" = run ]; then
  secs="${1:-10}"
  shift || true
fi
runs="${SHARDSWAP_FUZZ_RUNS:--1}"
jobs="${SHARDSWAP_FUZZ_JOBS:-$(nproc)}"
[[ "$secs" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: SECONDS is '$secs': expected a positive whole number" >&2; exit 2; }
[[ "$runs" =~ ^(-1|[1-9][0-9]*)$ ]] || { echo "fuzz.sh: SHARDSWAP_FUZZ_RUNS is '$runs': expected a positive whole number" >&2; exit 2; }
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: SHARDSWAP_FUZZ_JOBS is '$jobs': expected a positive whole number" >&2; exit 2; }
if [ "$mode" != build ] || [ ! -f build-fuzz/CMakeCache.txt ]; then
  CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DSHARDSWAP_FUZZ=ON -DSHARDSWAP_CUDA=OFF \
    -DSHARDSWAP_WERROR=ON >/dev/null
fi
[ "$mode" != configure ] || exit 0
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(config safetensors gguf tokenizer_gguf index tokenizer_files encode oai serve_config template proto adapter_config ct)
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]/#/fuzz_}" >/dev/null
[ "$mode" != build ] || exit 0
mkdir -p build-fuzz/artifacts
# one target: its exit status goes to build-fuzz/fuzz_T.rc (the loop below reads them in order)
fuzz_one() {
  local t=$1 rc=0
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "build-fuzz/fuzz/fuzz_$t" -max_total_time="$secs" -runs="$runs" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/$t-" \
    "build-fuzz/corpus/$t" >"build-fuzz/fuzz_$t.log" 2>&1 || rc=$?
  echo "$rc" >"build-fuzz/fuzz_$t.rc"
}
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t"
  cp -n "fuzz/corpus/$t"/* "build-fuzz/corpus/$t/" 2>/dev/null || true
  rm -f "build-fuzz/fuzz_$t.rc"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  fuzz_one "$t" &
done
wait
limit="${secs} s"
[ "$runs" = -1 ] || limit="${secs} s or $runs runs"
failed=0
for t in "${targets[@]}"; do
  log="build-fuzz/fuzz_$t.log"
  rc=$(cat "build-fuzz/fuzz_$t.rc" 2>/dev/null || echo "none")
  echo "fuzz_$t: $limit"
  grep -E "^(stat::number_of_executed_units|SUMMARY)|runtime error|ERROR: " "$log" || true
  [ "$rc" = 0 ] || { echo "fuzz_$t failed (exit $rc): $log, input in build-fuzz/artifacts/"; failed=1; }
done
exit "$failed"
