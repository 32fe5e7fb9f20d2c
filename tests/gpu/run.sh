#!/usr/bin/env bash
# The one-shot GPU check: on a GPU machine with no network, builds shardswap
# with CUDA, runs the CUDA backend's tests, and measures swaps, forward passes
# and a Computron workload against PyTorch/transformers in the same run.
#
#   bash tests/gpu/run.sh OUTDIR
#
# It must end within 8 minutes, unattended. Every step runs under `timeout`
# with at most what is left of SHARDSWAP_GPU_BUDGET_S; a step that fails or
# runs out of time is recorded and the next one runs (only a failed build
# stops the rest, which needs it); the tables (tests/gpu/report.py) print
# last, with n/a for whatever did not work.
#
# Environment:
#   SHARDSWAP_GPU_DEPS         what tools/gpu_deps.sh gathered (default .gpu-deps). Its .debs
#                              are unpacked into a private prefix (never into /) when the
#                              system lacks a build dependency (SHARDSWAP_GPU_FORCE_DEPS=1:
#                              even when it has them); its wheels are installed into a private
#                              folder put first on PYTHONPATH, for the transformers run only,
#                              when python3 cannot import transformers. (Not a venv: python3
#                              is often itself a venv, and a venv made from it with
#                              --system-site-packages would see the base interpreter's
#                              packages, not PyTorch.)
#   SHARDSWAP_GPU_BUDGET_S     seconds for all the steps (default 440; the report and the
#                              clean-up take a few more)
#   SHARDSWAP_GPU_BUILD, SHARDSWAP_GPU_CUDA  the build folder (default build-gpu) and
#                              -DSHARDSWAP_CUDA (default ON): for a dry run of this script
#                              where there is no GPU (OFF: every CUDA step fails, recorded)
#   SHARDSWAP_GPU_CMAKE_ARGS   more configure flags, split on spaces (e.g.
#                              -DCMAKE_CUDA_ARCHITECTURES=90 to build for the H200 alone, faster)
#   SHARDSWAP_GPU_PREBUILT     1: skip configure and build, use the build folder's shardswap
#                              (to try this script's later steps)
#   SHARDSWAP_GPU_FEW_FILES    1: leave only report.txt and results.tar.gz in OUTDIR (for a
#                              transfer that brings back few files)
#   SHARDSWAP_GPU_KEEP_MODELS  1: keep the generated models (OUTDIR/models, about 30 GB);
#                              by default they are removed at the end
#
# OUTDIR receives report.txt (the tables), build.log, ctest-backend.log,
# ctest-quant.log, ctest-cpu.log, results.tar.gz (all of these and logs/, for transfers that take
# few files) and logs/: steps.tsv (step, status, seconds, note), env.txt
# (commit, nvidia-smi, nvcc --version, torch, transformers), one NAME.log per
# step, and the JSONs (swap.json, torch-swap.json, forward-b1.json, hf-b1.json,
# ..., llama-forward-b1.json, llama-hf-b1.json, llama-swap.json, q4km-swap.json, gemv-quant.json,
# gemv-ct-bf16.json, gemv-ct-f32.json,
# workload-tp1.json, ...). Generated models are cached in OUTDIR/models
# while it runs.
#
# The steps, in order of what matters most (later ones get what time is left):
#   deps, configure, build      build-gpu/ (Release, CUDA on, portable: SHARDSWAP_NATIVE=OFF)
#   ctest-backend               the CUDA backend's tests (kernels vs CPU, device, NCCL, model:
#                               every fixture, OPT and the Llama family, against transformers;
#                               expert residency: MoE experts trimmed, loaded on demand, bitwise)
#   ctest-quant, gguf-forward   GGUF block-type weights: the kernels vs CPU, the quantized
#                               fixtures as models, the CLI's forward on cuda:0 vs cpu:0
#   ct-forward                  compressed-tensors fixtures: the CLI's forward on cuda:0 vs
#                               cpu:0 in both modes (their kernels are in ctest-quant)
#   gemv-quant                  bench gemv --devices cuda:0: decode's linear layer per type
#                               (bf16, Q8_0, Q4_K, Q5_K, Q6_K) against a device copy
#   gemv-ct-bf16, gemv-ct-f32   the same for CT_I8, CT_I4, CT_F8 in each mode
#   swap-model, swap            bench swap on an opt-13b-wide model of 14 layers (9.3 GB, f16)
#   torch-swap                  tools/bench_torch_swap.py on the same checkpoint
#   fwd-model, forward-bB, hf-bB  bench forward vs tools/bench_hf.py (opt-1.3b shape, B = 1, 8)
#   llama-fwd-model, llama-forward-b1, llama-hf-b1  the same on the llama-3.2-1b shape (16 layers,
#                               bf16; transformers in bf16), batch 1
#   lora-models, llama-forward-lora8  8 random rank-16 PEFT adapters of that shape
#                               (tools/make_random_lora.py): bench forward, a batch of 8 over the
#                               8 adapters against the same batch on the base alone
#   llama-swap-model, llama-swap  bench swap on llama-3.1-8b with 8 layers (5.6 GB, bf16) against
#                               the pinned link, and a rank-16 adapter's swap over it
#   q4km-swap-model, q4km-swap  the same shape in Q4_K_M (GGUF, 1.8 GB), against the pinned link
#   workload-tp1, workload-tp2  bench workload --config computron:6, both policies
#   workload-chat               bench workload --config chat:8:0.5 (multi-token), five policies
#   ctest-cpu                   the rest of the suite, if time is left
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo" || exit 1
if [ $# -ne 1 ]; then
  echo "usage: bash tests/gpu/run.sh OUTDIR" >&2
  exit 2
fi
mkdir -p "$1" || exit 1
out=$(cd "$1" && pwd)
logs=$out/logs
rm -rf "$logs" && mkdir -p "$logs" || exit 1 # no result of an earlier run may pass for this one's
models=$out/models
build=${SHARDSWAP_GPU_BUILD:-$repo/build-gpu}
deps=${SHARDSWAP_GPU_DEPS:-$repo/.gpu-deps}
[ ! -d "$deps" ] || deps=$(cd "$deps" && pwd)
budget=${SHARDSWAP_GPU_BUDGET_S:-440}
start=$(date +%s)
jobs=$(nproc 2>/dev/null || echo 4)
ss=$build/shardswap
: >"$logs/steps.tsv"

# --- step bookkeeping ---------------------------------------------------------

left() { echo $((start + budget - $(date +%s))); }

# record NAME STATUS SECONDS NOTE: one line in steps.tsv and on stdout
record() {
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$logs/steps.tsv"
  printf '[%4ds] %-16s %-8s %4ss  %s\n' $(($(date +%s) - start)) "$1" "$2" "$3" "$4"
}

# step NAME MAX_SECONDS [--stdout FILE] CMD...: runs CMD under timeout (MAX_SECONDS, or
# what is left if less), stderr (and stdout unless --stdout) appended to logs/NAME.log.
# Returns CMD's status; 99 when too little time is left to start it.
step() {
  local name=$1 want=$2 so="" l t t0 rc
  shift 2
  if [ "$1" = "--stdout" ]; then
    so=$2
    shift 2
  fi
  l=$(left)
  if [ "$l" -lt 10 ]; then
    record "$name" skipped 0 "out of time"
    return 99
  fi
  t=$want
  [ "$t" -le "$l" ] || t=$l
  t0=$(date +%s)
  echo "+ $*" >>"$logs/$name.log"
  if [ -n "$so" ]; then
    timeout -k 5 "$t" "$@" >"$so" 2>>"$logs/$name.log"
  else
    timeout -k 5 "$t" "$@" >>"$logs/$name.log" 2>&1
  fi
  rc=$?
  case $rc in
  0) record "$name" ok $(($(date +%s) - t0)) "" ;;
  124 | 137) record "$name" timeout $(($(date +%s) - t0)) "killed after ${t}s (logs/$name.log)" ;;
  *) record "$name" failed $(($(date +%s) - t0)) "exit $rc: $(tail -n 1 "$logs/$name.log" | cut -c1-150)" ;;
  esac
  return $rc
}

# has_flag "bench swap" devices: whether that command's --help lists --devices
has_flag() {
  # shellcheck disable=SC2086 # the command is words
  timeout 10 "${run_env[@]}" "$ss" $1 --help 2>&1 | grep -q -- "--$2"
}

# expand_preset NAME SECONDS PRESET DTYPE LAYERS OUT: a PRESET-shaped checkpoint of
# LAYERS layers at OUT, unless it is there: one layer drawn by gen-model (~90 MB/s on
# one thread), repeated by expand_model.py; as step NAME within SECONDS
expand_preset() {
  local one="$models/$3-l1-$4"
  [ -d "$6" ] && return 0
  rm -rf "$one"
  step "$1" "$2" "${run_env[@]}" bash -c "'$ss' gen-model --preset $3 --layers 1 --dtype $4 --out '$one' &&
    python3 '$repo/tests/gpu/expand_model.py' --src '$one' --layers $5 --out '$6'"
}

# --- the machine ---------------------------------------------------------------

nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
{
  echo "date: $(date -u)"
  if git -C "$repo" rev-parse HEAD >/dev/null 2>&1; then
    echo "commit: $(git -C "$repo" rev-parse HEAD) ($(git -C "$repo" status --short | wc -l) paths changed)"
  else
    echo "commit: n/a (no .git); src/ digest $(find src -type f | LC_ALL=C sort | xargs sha1sum | sha1sum | cut -c1-12)"
  fi
  echo "host: $(uname -srm), $jobs CPUs, $(free -g 2>/dev/null | awk '/^Mem:/{print $2 " GiB RAM"}')"
  df -h "$out" | tail -n 1
  echo
  timeout 20 nvidia-smi || echo "nvidia-smi: failed or absent"
  timeout 10 nvidia-smi -L
  timeout 10 "$nvcc_bin" --version || echo "nvcc: not found"
  timeout 10 cmake --version | head -n 1
  echo "python3: $(command -v python3) $(python3 --version 2>&1)"
  timeout 30 python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())' 2>&1 | tail -n 1
  timeout 30 python3 -c 'import transformers; print("transformers", transformers.__version__)' 2>&1 | tail -n 1
} >"$logs/env.txt" 2>&1
n_gpu=$(timeout 10 nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ "$n_gpu" -ge 1 ] 2>/dev/null || n_gpu=1
if [ "$n_gpu" -ge 2 ]; then
  devs2=cuda:0,cuda:1
else
  devs2=cuda:0,cuda:0 # two partitions of the one GPU
fi
record env ok $(($(date +%s) - start)) "$n_gpu GPU(s), two devices: $devs2; see logs/env.txt"

# --- the build dependencies: from the system, or unpacked from $deps --------

run_env=(env)            # how shardswap and the tests are run (LD_LIBRARY_PATH only if DT_RPATH fails)
lib_path=""
cmake_extra=()           # configure flags for the unpacked prefix
deps_missing=""
for m in jansson libpcre2-8 openblas libmicrohttpd yaml-0.1 libcurl; do
  pkg-config --exists "$m" 2>/dev/null || deps_missing="$deps_missing $m"
done
[ -f /usr/include/oneapi/dnnl/dnnl.h ] || [ -f /usr/local/include/oneapi/dnnl/dnnl.h ] ||
  deps_missing="$deps_missing dnnl"
[ "${SHARDSWAP_GPU_FORCE_DEPS:-0}" != 1 ] || deps_missing="$deps_missing (forced)"

# unpack_deps PREFIX: every .deb of $deps/debs into PREFIX, the .pc files and
# absolute symbolic links pointed into PREFIX, and a pkg-config that runs there
unpack_deps() {
  local prefix=$1 deb tmp link target d
  for deb in "$deps"/debs/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$prefix" || return 1
    else # ar + tar: data.tar.xz, .zst or .gz
      tmp=$(mktemp -d) || return 1
      (cd "$tmp" && ar x "$deb") || return 1
      case $(ls "$tmp"/data.tar.*) in
      *.zst) zstd -dc "$tmp"/data.tar.zst | tar -x -C "$prefix" || return 1 ;;
      *) tar -xf "$tmp"/data.tar.* -C "$prefix" || return 1 ;;
      esac
      rm -rf "$tmp"
    fi
  done
  # .pc files name /usr (prefix=/usr, or openblas's libdir=/usr/lib/...): point them here
  find "$prefix" -name '*.pc' -type f -exec sed -i -e "s|=/usr|=$prefix/usr|g" \
    -e "s|-I/usr/|-I$prefix/usr/|g" -e "s|-L/usr/|-L$prefix/usr/|g" {} + || return 1
  # libmicrohttpd.pc requires gnutls.pc for static links only; gpu_deps.sh leaves
  # gnutls's -dev packages out (the library itself is there)
  find "$prefix" -name libmicrohttpd.pc -type f -exec sed -i '/^Requires.private:/d' {} + || return 1
  find "$prefix" -type l | while read -r link; do
    target=$(readlink "$link")
    case $target in /*) ln -sfn "$prefix$target" "$link" ;; esac
  done
  # Debian's alternatives (not run by an unpack) would link openblas's .pc and
  # libopenblas.so.0 into the main directories; the openblas-pthread ones are used directly
  mkdir -p "$prefix/bin"
  # shellcheck disable=SC2016 # the $ are the wrapper's
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' \
    "$prefix/usr/lib/x86_64-linux-gnu" "$prefix/usr/bin/pkgconf" >"$prefix/bin/pkg-config"
  chmod +x "$prefix/bin/pkg-config"
  for d in "$prefix"/usr/lib/x86_64-linux-gnu/pkgconfig "$prefix"/usr/lib/x86_64-linux-gnu/openblas-pthread/pkgconfig \
    "$prefix"/usr/share/pkgconfig "$prefix"/usr/lib/pkgconfig; do
    [ -d "$d" ] && pc_path="$pc_path${pc_path:+:}$d"
  done
  lib_path=$(find "$prefix" \( -name '*.so' -o -name '*.so.*' \) -printf '%h\n' | sort -u | paste -sd:)
}

if [ -n "$deps_missing" ]; then
  t0=$(date +%s)
  if ! ls "$deps"/debs/*.deb >/dev/null 2>&1; then
    record deps failed 0 "missing:$deps_missing, and no .debs in $deps (run tools/gpu_deps.sh where apt works)"
  else
    prefix=$(mktemp -d "${TMPDIR:-/tmp}/shardswap-gpu-prefix.XXXXXX")
    pc_path="" lib_path=""
    if unpack_deps "$prefix" >"$logs/deps.log" 2>&1; then
      export PKG_CONFIG_PATH="$pc_path${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
      export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
      export PATH="$prefix/bin:$PATH"
      # The binaries find the prefix's libraries, and theirs, by DT_RPATH (which, unlike
      # RUNPATH, also serves the libraries' own dependencies): nothing else is run with them.
      cmake_extra=(-DPKG_CONFIG_EXECUTABLE="$prefix/bin/pkg-config"
        "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags -Wl,-rpath,$lib_path -Wl,-rpath-link,$lib_path")
      {
        echo "prefix $prefix"
        echo "PKG_CONFIG_PATH=$PKG_CONFIG_PATH"
        echo "libraries: $lib_path"
        for m in jansson libpcre2-8 openblas libmicrohttpd yaml-0.1 libcurl; do
          echo "$m: $(pkg-config --cflags --libs "$m" 2>&1)"
        done
      } >>"$logs/deps.log" 2>&1
      debs=("$deps"/debs/*.deb)
      record deps ok $(($(date +%s) - t0)) "missing:$deps_missing; unpacked ${#debs[@]} .debs into $prefix"
    else
      record deps failed $(($(date +%s) - t0)) "unpacking into $prefix failed (logs/deps.log)"
    fi
  fi
else
  record deps ok 0 "all found on the system"
fi

# --- build ---------------------------------------------------------------------

built=0
read -r -a user_args <<<"${SHARDSWAP_GPU_CMAKE_ARGS:-}"
if [ "${SHARDSWAP_GPU_PREBUILT:-0}" = 1 ] && [ -x "$ss" ]; then
  record build ok 0 "SHARDSWAP_GPU_PREBUILT=1: $ss as it is"
  built=1
elif step configure 90 cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSHARDSWAP_CUDA="${SHARDSWAP_GPU_CUDA:-ON}" \
  -DSHARDSWAP_NATIVE=OFF "${cmake_extra[@]}" "${user_args[@]}" &&
  step build 270 cmake --build "$build" -j"$jobs"; then
  built=1
  ldd "$ss" >"$logs/ldd.txt" 2>&1
  if grep -q 'not found' "$logs/ldd.txt"; then
    record ldd failed 0 "unresolved: $(grep 'not found' "$logs/ldd.txt" | awk '{print $1}' | paste -sd' ')"
    if [ -n "$lib_path" ]; then # the prefix by LD_LIBRARY_PATH then, for our programs only
      run_env=(env "LD_LIBRARY_PATH=$lib_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
    fi
  fi
fi
cat "$logs/configure.log" "$logs/build.log" >"$out/build.log" 2>/dev/null
if [ "$built" -ne 1 ]; then
  echo "=== the build failed: its first errors, then the last 40 lines of $out/build.log"
  grep -n -m 15 -E 'error:|undefined reference|CMake Error|Error [0-9]' "$out/build.log"
  echo "..."
  tail -n 40 "$out/build.log"
fi

# --- tests and benchmarks ----------------------------------------------------------

if [ "$built" -eq 1 ]; then
  backend_tests='^(backend_ops|cuda_device|cuda_comm|cuda_model)\.'
  quant_tests='^(backend_ops\.(linear_quant|linear_ct|embed_quant)|cuda_model\.(gguf_quant|ct_models))$'
  step ctest-backend 120 "${run_env[@]}" ctest --test-dir "$build" --output-on-failure --timeout 60 \
    --no-tests=error -R "$backend_tests" -E "$quant_tests"
  cp "$logs/ctest-backend.log" "$out/ctest-backend.log" 2>/dev/null

  # GGUF block-type weights on the GPU: every type's GEMV, GEMM and embedding against the
  # CPU (backend_ops.*_quant), the quantized fixtures as models against transformers,
  # llama.cpp and the CPU (cuda_model.gguf_quant), then the CLI's forward of the Q4_K_M
  # fixture on cuda:0 against cpu:0 in bf16 mode: 8 ids (the integer GEMV, the CPU's
  # arithmetic: 1e-4) and 12 (dequantized blocks and cuBLAS in bf16: 6e-2)
  step ctest-quant 60 "${run_env[@]}" ctest --test-dir "$build" --output-on-failure --timeout 50 \
    --no-tests=error -R "$quant_tests"
  cp "$logs/ctest-quant.log" "$out/ctest-quant.log" 2>/dev/null
  step gguf-forward 40 "${run_env[@]}" bash "$repo/tests/gpu/gguf_forward.sh" "$ss" \
    "$repo/tests/fixtures/gguf/llama_quant/model-q4_k_m.gguf" 256 cuda:0 "$logs"
  # compressed-tensors fixtures (int8, int4 symmetric and asymmetric, FP8 blocks) on cuda:0
  # against cpu:0: the same values in another order, f32 mode 1e-4, bf16 mode 3e-2
  step ct-forward 60 "${run_env[@]}" bash "$repo/tests/gpu/ct_forward.sh" "$ss" \
    "$repo/tests/fixtures/ctensors" cuda:0 "$logs"
  # decode's linear layer at bandwidth: an 8B model's 4096 x 14336 down projection in bf16
  # and the block types of Q8_0, Q4_K_M and Q5_K_M, bf16 mode, 1..8 rows, against a
  # device-to-device copy in the same run
  if has_flag "bench gemv" devices; then
    step gemv-quant 60 --stdout "$logs/gemv-quant.json" "${run_env[@]}" "$ss" bench gemv \
      --devices cuda:0 --rows 4096 --cols 14336 --types bf16,q8_0,q4_k,q5_k,q6_k --compute bf16 \
      --max-m 8 --footprint-mb 1024 --json
  else
    record gemv-quant skipped 0 "bench gemv has no --devices in this tree: CPU only"
  fi
  # the same shape in compressed-tensors' types (int8 37, int4 21, FP8 36 bytes per 32
  # weights), both modes: their GEMV dequantizes in registers
  if has_flag "bench gemv" devices; then
    for cm in bf16 f32; do
      step "gemv-ct-$cm" 40 --stdout "$logs/gemv-ct-$cm.json" "${run_env[@]}" "$ss" bench gemv \
        --devices cuda:0 --rows 4096 --cols 14336 --types bf16,ct_i8,ct_i4,ct_f8 --compute "$cm" \
        --max-m 8 --footprint-mb 1024 --json
    done
  else
    for cm in bf16 f32; do
      record "gemv-ct-$cm" skipped 0 "bench gemv has no --devices in this tree: CPU only"
    done
  fi

  # the swap benchmark: opt-13b wide, 14 layers, f16 (9.3 GB): one layer drawn by
  # gen-model, repeated by expand_model.py (gen-model draws ~90 MB/s on one thread)
  mkdir -p "$models"
  big=$models/opt-13b-l14-f16
  expand_preset swap-model 120 opt-13b f16 14 "$big"
  if [ -d "$big" ]; then
    if has_flag "bench swap" devices; then
      layouts=1x1,2x1
      step swap 120 --stdout "$logs/swap.json" "${run_env[@]}" "$ss" bench swap --devices "$devs2" \
        --model "$big" --layouts "$layouts" --json
    else
      record swap skipped 0 "bench swap has no --devices in this tree: it would measure CPU devices"
    fi
    step torch-swap 120 python3 "$repo/tools/bench_torch_swap.py" --model "$big" --device cuda:0 \
      --json "$logs/torch-swap.json"
  fi

  # the forward benchmark, and the workload's models: opt-1.3b shape, 24 layers,
  # f16, seeds 0..2 named as bench workload's cache names them (cli/model_cache.c),
  # so that it finds them instead of drawing 7.8 GB on one thread
  small=$models/opt-1.3b-l1-f16
  if [ ! -d "$models/opt-1.3b-l24-F16-s0" ]; then
    rm -rf "$small"
    step fwd-model 90 "${run_env[@]}" bash -c "'$ss' gen-model --preset opt-1.3b --layers 1 --dtype f16 --out '$small' &&
      for s in 0 1 2; do python3 '$repo/tests/gpu/expand_model.py' --src '$small' --layers 24 \
        --out '$models/opt-1.3b-l24-F16-s'\$s || exit 1; done"
  fi
  fwd=$models/opt-1.3b-l24-F16-s0
  # the forward benchmarks' device flag, and transformers: the system's, else the carried wheels
  fwd_dev=()
  if has_flag "bench forward" devices; then
    fwd_dev=(--devices cuda:0)
  else
    record forward skipped 0 "bench forward has no --devices in this tree: CPU only, not run"
  fi
  hf_py=()
  if timeout 60 python3 -c 'import transformers' >/dev/null 2>&1; then
    hf_py=(python3)
  elif ls "$deps"/wheels/*.whl >/dev/null 2>&1; then
    site=${TMPDIR:-/tmp}/shardswap-gpu-site
    rm -rf "$site"
    if step hf-wheels 90 bash -c "python3 -m pip install -q --no-index --no-deps --no-compile \
      --target '$site' '$deps'/wheels/*.whl && PYTHONPATH='$site' python3 -c 'import transformers'"; then
      hf_py=(env "PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}" python3)
    fi
  fi
  if [ ${#hf_py[@]} -eq 0 ]; then
    record hf skipped 0 "transformers not importable (and no wheels worked): no comparison"
  fi
  if [ -d "$fwd" ]; then
    for b in 1 8; do
      if [ ${#fwd_dev[@]} -gt 0 ]; then
        step "forward-b$b" 60 --stdout "$logs/forward-b$b.json" "${run_env[@]}" "$ss" bench forward \
          "${fwd_dev[@]}" --model "$fwd" --batch "$b" --prompt-len 128 --gen 32 --compute bf16 --json
      fi
      if [ ${#hf_py[@]} -gt 0 ]; then
        step "hf-b$b" 75 --stdout "$logs/hf-b$b.json" "${hf_py[@]}" "$repo/tools/bench_hf.py" --device cuda \
          --model "$fwd" --batch "$b" --prompt-len 128 --gen 32 --dtype f16 --json
      fi
    done
  fi

  # the Llama family: llama-3.2-1b shape, all 16 layers, bf16 as it ships (2.5 GB: one
  # layer from gen-model, the rest by expand_model.py), bench forward against
  # transformers in bf16 at batch 1 (the CUDA RMSNorm, rotary, SwiGLU and GQA kernels,
  # whose numbers ctest-backend checked, at speed)
  lfwd=$models/llama-3.2-1b-l16-bf16
  expand_preset llama-fwd-model 60 llama-3.2-1b bf16 16 "$lfwd"
  if [ -d "$lfwd" ]; then
    if [ ${#fwd_dev[@]} -gt 0 ]; then
      step llama-forward-b1 60 --stdout "$logs/llama-forward-b1.json" "${run_env[@]}" "$ss" bench forward \
        "${fwd_dev[@]}" --model "$lfwd" --batch 1 --prompt-len 128 --gen 32 --compute bf16 --json
    fi
    if [ ${#hf_py[@]} -gt 0 ]; then
      step llama-hf-b1 75 --stdout "$logs/llama-hf-b1.json" "${hf_py[@]}" "$repo/tools/bench_hf.py" --device cuda \
        --model "$lfwd" --batch 1 --prompt-len 128 --gen 32 --dtype bf16 --json
    fi
  fi

  # LoRA: 8 random rank-16 adapters of every projection (numpy and safetensors, as the HF
  # bench's python has them), a batch of 8 sequences over the 8 against the base alone
  # (the LoRA cost: its decode_ratio), and one over the 8B shape for bench swap below
  lora=$models/lora
  if [ -d "$lfwd" ] && [ ${#hf_py[@]} -gt 0 ] && [ ! -d "$lora/1b/adapter_7" ]; then
    step lora-models 60 "${hf_py[@]}" "$repo/tools/make_random_lora.py" "$lfwd" "$lora/1b" --count 8 --rank 16
  fi
  if [ -d "$lora/1b/adapter_7" ] && [ ${#fwd_dev[@]} -gt 0 ]; then
    step llama-forward-lora8 90 --stdout "$logs/llama-forward-lora8.json" "${run_env[@]}" "$ss" bench forward \
      "${fwd_dev[@]}" --model "$lfwd" --adapters "$(ls -d "$lora"/1b/adapter_* | paste -sd,)" --batch 8 \
      --prompt-len 128 --gen 32 --compute bf16 --json
  fi

  # bench swap of an 8B-shaped Llama (llama-3.1-8b, 8 of its 32 layers, bf16: 5.6 GB,
  # of which 2.1 GB the untied 128k-vocabulary embedding and head) against the pinned link,
  # as for OPT above
  lbig=$models/llama-3.1-8b-l8-bf16
  expand_preset llama-swap-model 90 llama-3.1-8b bf16 8 "$lbig"
  if [ -d "$lbig" ]; then
    if has_flag "bench swap" devices; then
      lbig_lora=()
      if [ ${#hf_py[@]} -gt 0 ] && { [ -d "$lora/8b/adapter_0" ] ||
        step lora-8b-model 60 "${hf_py[@]}" "$repo/tools/make_random_lora.py" "$lbig" "$lora/8b" --count 1 --rank 16; }; then
        lbig_lora=(--adapter "$lora/8b/adapter_0")
      fi
      step llama-swap 90 --stdout "$logs/llama-swap.json" "${run_env[@]}" "$ss" bench swap --devices "$devs2" \
        --model "$lbig" --layouts 1x1,2x1 ${lbig_lora[@]+"${lbig_lora[@]}"} --json
    else
      record llama-swap skipped 0 "bench swap has no --devices in this tree: it would measure CPU devices"
    fi
  fi

  # the same 8B shape in llama-quantize's Q4_K_M mix (8 layers: 1.8 GB, 3.2x fewer bytes than
  # bf16; random blocks written by make_quant_gguf.py), against the pinned link: a swap moves
  # the quantized bytes as they are, so its load time should track the bytes ratio
  qbig=$models/llama-3.1-8b-l8-q4_k_m.gguf
  if [ ! -f "$qbig" ]; then
    step q4km-swap-model 60 python3 "$repo/tests/gpu/make_quant_gguf.py" --preset llama-3.1-8b \
      --layers 8 --out "$qbig"
  fi
  if [ -f "$qbig" ]; then
    if has_flag "bench swap" devices; then
      step q4km-swap 90 --stdout "$logs/q4km-swap.json" "${run_env[@]}" "$ss" bench swap --devices "$devs2" \
        --model "$qbig" --layouts 1x1,2x1 --json
    else
      record q4km-swap skipped 0 "bench swap has no --devices in this tree: it would measure CPU devices"
    fi
  fi

  # Computron's workload 6 (3 models, rates 10/10/1, CV 0.25, 2 fit), both policies,
  # TP 1 on cuda:0 and TP 2 on $devs2; no emulated link. 20 s of arrivals when the
  # time allows, less when it is short (each policy replays them once)
  if has_flag "bench workload" devices; then
    for tp in 1 2; do
      if [ "$tp" -eq 1 ]; then d=cuda:0; else d=$devs2; fi
      l=$(left)
      dur=$(((l - 40) / 2 / (3 - tp))) # share what is left with the runs still to come
      [ "$dur" -le 20 ] || dur=20
      if [ "$dur" -lt 5 ]; then
        record "workload-tp$tp" skipped 0 "out of time"
        continue
      fi
      step "workload-tp$tp" $((2 * dur + 60)) --stdout "$logs/workload-tp$tp.json" "${run_env[@]}" "$ss" \
        bench workload --devices "$d" --config computron:6 --tp "$tp" --preset opt-1.3b --layers 24 \
        --dtype f16 --compute bf16 --duration "$dur" --cache "$models" --out-dir "$logs/workload-tp$tp" --json
    done
    # chat traffic (issue 23): 8 models, Zipf popularity, 0.5 requests/s with
    # ShareGPT-like prompt and output lengths (hundreds of tokens each way),
    # every policy on the same arrivals, TP 1 on cuda:0: TTFT, TPOT, token
    # SLO attainment and goodput
    l=$(left)
    dur=$(((l - 60) / 6)) # five policies, and some time left for the suite
    [ "$dur" -le 30 ] || dur=30
    if [ "$dur" -lt 10 ]; then
      record workload-chat skipped 0 "out of time"
    else
      step workload-chat $((5 * dur + 120)) --stdout "$logs/workload-chat.json" "${run_env[@]}" "$ss" \
        bench workload --devices cuda:0 --config chat:8:0.5 --tp 1 --preset opt-1.3b --layers 24 \
        --dtype f16 --compute bf16 --max-loaded 2 --duration "$dur" --policy swapwise,swapwise-preempt,computron,lru,fifo \
        --cache "$models" --out-dir "$logs/workload-chat" --json
    fi
  else
    record workload skipped 0 "bench workload has no --devices in this tree: CPU only, not run"
  fi

  # the rest of the suite, with what time is left
  if [ "$(left)" -ge 40 ]; then
    step ctest-cpu 240 "${run_env[@]}" ctest --test-dir "$build" -j"$jobs" --timeout 60 --no-tests=error \
      -E "server_load|$backend_tests"
    cp "$logs/ctest-cpu.log" "$out/ctest-cpu.log" 2>/dev/null
  else
    record ctest-cpu skipped 0 "out of time"
  fi
fi

# --- the tables ----------------------------------------------------------------------

timeout 30 python3 "$repo/tests/gpu/report.py" "$logs" >"$out/report.txt" 2>"$logs/report.log" ||
  echo "report.py failed: $(tail -n 3 "$logs/report.log")" >>"$out/report.txt"
if [ "${SHARDSWAP_GPU_KEEP_MODELS:-0}" != 1 ]; then # only what this script names
  for m in opt-13b-l14-f16 opt-13b-l1-f16 opt-1.3b-l1-f16 opt-1.3b-l24-F16-s0 opt-1.3b-l24-F16-s1 \
    opt-1.3b-l24-F16-s2 llama-3.2-1b-l1-bf16 llama-3.2-1b-l16-bf16 llama-3.1-8b-l1-bf16 llama-3.1-8b-l8-bf16 \
    llama-3.1-8b-l8-q4_k_m.gguf; do
    rm -rf "${models:?}/$m" "$models/$m.partial"
  done
  rmdir "$models" 2>/dev/null
fi
tar -czf "$out/results.tar.gz" -C "$out" logs build.log report.txt 2>/dev/null
if [ "${SHARDSWAP_GPU_FEW_FILES:-0}" = 1 ] && [ -s "$out/results.tar.gz" ]; then
  rm -rf "$logs" "$out/build.log" "$out"/ctest-*.log # all in the tarball
fi
echo
cat "$out/report.txt"
echo "(everything: $out; $(($(date +%s) - start)) s)"
[ "$built" -eq 1 ]
