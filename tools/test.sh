#!/usr/bin/env bash
# Runs the whole test suite twice: on the Release build (warnings as errors;
# with CUDA when nvcc is found) and on an AddressSanitizer +
# UndefinedBehaviorSanitizer build without CUDA; then the fuzz targets for a
# bounded time.
set -euo pipefail
cd "$(dirname "$0")/.."
# The server's tests (tests/server/) use the `openai` client from .venv;
# configuring again lets the builds find it (SHARDSWAP_PYTHON).
if [ ! -x .venv/bin/python3 ] || ! .venv/bin/python3 -c 'import openai' 2>/dev/null; then
  python3 -m venv .venv
  .venv/bin/pip install -q 'openai>=1,<4'
fi
# build/ is tools/setup.sh's: with the CUDA backend when nvcc is found
# (SHARDSWAP_CUDA=AUTO; on a machine without a GPU its tests skip), so the
# CPU suite runs against a CUDA build; the sanitizer build is the one without
# CUDA (the CUDA runtime and ASan do not share an address space without
# special options), so both builds run the whole CPU suite.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSHARDSWAP_WERROR=ON >/dev/null
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j2
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSHARDSWAP_WERROR=ON -DSHARDSWAP_SANITIZE=ON \
  -DSHARDSWAP_CUDA=OFF >/dev/null
cmake --build build-asan -j"$(nproc)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j2
# The fuzz targets (clang's libFuzzer with ASan+UBSan), a minute each from
# their seed corpora; `bash tools/fuzz.sh 600` runs them for 10 minutes each.
bash tools/fuzz.sh 60
