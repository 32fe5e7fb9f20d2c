#!/usr/bin/env bash
# Runs the whole test suite twice: on the Release build (warnings as errors;
# with CUDA when nvcc is found) and on an AddressSanitizer +
# UndefinedBehaviorSanitizer build without CUDA; then the fuzz targets for a
# bounded time. Prints each phase's wall time (docs/testing.md has them).
#
# The machine's cores are kept busy: the next tree compiles in the
# background at the lowest priority (nice 19) while a suite runs, so it takes
# only what the tests leave idle (their waits, sleeps and single-threaded
# stretches) and never their CPU time; when the suite ends, what is left of
# that build is finished at normal priority in the foreground, which also
# prints its errors if it fails.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
t0=$SECONDS
phase() { # NAME START: the phase's wall time
  echo "test.sh: $1: $((SECONDS - $2)) s"
}

# A background build runs in its own session (setsid): a process group to
# stop as a whole (only these groups are ever signalled) and, where the
# kernel groups processes by session (sched_autogroup), its own scheduling
# group, whose nice is raised as well: there the kernel shares the CPU between
# sessions before it looks at a process's nice.
declare -A bg_running=()
stop_bg() { # PID: stop that background build (make deletes a half-written object)
  [ -n "${bg_running[$1]:-}" ] || return 0
  if jobs -rp | grep -qx "$1"; then kill -TERM -- "-$1" 2>/dev/null || true; fi
  wait "$1" 2>/dev/null || true
  unset "bg_running[$1]"
}
stop_all_bg() {
  local p
  for p in "${!bg_running[@]}"; do stop_bg "$p"; done
}
trap stop_all_bg EXIT
bg_build() { # LOG COMMAND...: start COMMAND at nice 19 in the background; sets bg_pid
  local log=$1
  shift
  setsid sh -c 'echo 19 >/proc/self/autogroup 2>/dev/null; exec nice -n 19 "$@"' sh "$@" >"$log" 2>&1 &
  bg_pid=$!
  bg_running[$bg_pid]=1
}

# The server's tests (tests/server/) use the `openai` client from .venv:
# made in the background while the Release tree builds (it only downloads).
venv_pid=""
mkdir -p build
if [ ! -x .venv/bin/python3 ] || ! .venv/bin/python3 -c 'import openai' 2>/dev/null; then
  (python3 -m venv .venv && .venv/bin/pip install -q 'openai>=1,<4') >build/venv.log 2>&1 &
  venv_pid=$!
fi
# Both trees run the server tests with it (SHARDSWAP_PYTHON; the default
# looks for .venv when CMake configures, which may be before it exists).
py="-DSHARDSWAP_PYTHON=$PWD/.venv/bin/python3"

# build/ is tools/setup.sh's: with the CUDA backend when nvcc is found
# (SHARDSWAP_CUDA=AUTO; on a machine without a GPU its tests skip), so the
# CPU suite runs against a CUDA build; the sanitizer build is the one without
# CUDA (the CUDA runtime and ASan do not share an address space without
# special options), so both builds run the whole CPU suite.
t=$SECONDS
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSHARDSWAP_WERROR=ON "$py" >/dev/null
cmake --build build -j"$jobs"
phase "Release build" "$t"

t=$SECONDS
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSHARDSWAP_WERROR=ON -DSHARDSWAP_SANITIZE=ON \
  -DSHARDSWAP_CUDA=OFF "$py" >/dev/null
bg_build build-asan/background-build.log cmake --build build-asan -j"$jobs"
asan_pid=$bg_pid
if [ -n "$venv_pid" ]; then
  wait "$venv_pid" || { cat build/venv.log; echo "test.sh: could not make .venv with the openai client" >&2; exit 1; }
fi
phase "ASan+UBSan configure, .venv ready" "$t"

t=$SECONDS
ctest --test-dir build --output-on-failure -j"$jobs"
phase "Release suite" "$t"

t=$SECONDS
stop_bg "$asan_pid"
cmake --build build-asan -j"$jobs"
phase "ASan+UBSan build (rest of it)" "$t"

# The fuzz targets' tree compiles beside the sanitizer suite the same way.
t=$SECONDS
bash tools/fuzz.sh --configure
bg_build build-fuzz/background-build.log bash tools/fuzz.sh --build
fuzz_pid=$bg_pid
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs"
phase "ASan+UBSan suite" "$t"

# The fuzz targets (clang's libFuzzer with ASan+UBSan) from their seed
# corpora, two at a time: every seed, then mutations for 15 s or 100000
# inputs each; `bash tools/fuzz.sh 600` runs them for 10 minutes each.
t=$SECONDS
stop_bg "$fuzz_pid"
SHARDSWAP_FUZZ_RUNS=100000 bash tools/fuzz.sh 15
phase "fuzz build (rest of it) and runs" "$t"
phase "total" "$t0"
