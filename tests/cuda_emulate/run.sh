#!/usr/bin/env bash
# The CUDA block-type kernels' decoding checked on the CPU, where no GPU is:
# src/backend/cuda/quant.cuh (qdeq, q_lane, q_lane_dot, q_apply) compiled as
# host C++ against stubs of the CUDA intrinsics it uses (cuda_common.cuh here:
# __fmul_rn and friends as single f32 operations, __dp4a as four byte
# products), driven as qgemv.cu's warps drive them (quant_emulate.cpp), and
# compared bit for bit with the CPU backend: every element against
# quant_dequantize, x's Q8_0/Q8_K blocks against qlinear.c's quantizers, every
# row's bf16-mode dot product against qdot_rows_scalar. Then the same for
# compressed-tensors' types (ct_emulate.cpp: quant_ct.cuh's qdeq and lane
# shares against quant_ct_dequantize bit for bit, ctgemv.cu's warp order
# against the exact product within 1e-5 sum |w x|). What this cannot see:
# the launches, the shuffles' hardware semantics, the cuBLAS path.
#
#   bash tests/cuda_emulate/run.sh SOURCE_DIR   (exit 77: no C++ compiler)
set -euo pipefail
src=${1:?usage: run.sh SOURCE_DIR}/src
here=$(cd "$(dirname "$0")" && pwd)
cxx=${CXX:-$(command -v g++ || command -v clang++ || true)}
cc=${CC:-$(command -v gcc || command -v clang || true)}
if [ -z "$cxx" ] || [ -z "$cc" ]; then
  echo "SKIP: no C/C++ compiler to build the emulation"
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/shardswap_cuda_emulate_XXXXXX")
trap 'rm -rf "$work"' EXIT
# quant.cuh's #include "cuda_common.cuh" finds the stubs beside its copy
cp "$src/backend/cuda/quant.cuh" "$src/backend/cuda/quant_ct.cuh" "$here/cuda_common.cuh" "$work/"
for f in core/quant.c core/quant_ct.c core/dtype.c core/error.c backend/cpu/qdot_scalar.c; do
  "$cc" -std=c11 -O2 -D_GNU_SOURCE -I"$src" -c "$src/$f" -o "$work/$(basename "$f" .c).o"
done
"$cxx" -std=c++17 -O2 -ffp-contract=off -D_Static_assert=static_assert -I"$work" -I"$src" \
  "$here/quant_emulate.cpp" "$work"/*.o -o "$work/quant_emulate" -lm
"$work/quant_emulate"
"$cxx" -std=c++17 -O2 -ffp-contract=off -D_Static_assert=static_assert -I"$work" -I"$src" \
  "$here/ct_emulate.cpp" "$work"/*.o -o "$work/ct_emulate" -lm
"$work/ct_emulate"
# route.cuh's kernels, each CUDA thread a host thread, against cpu_route_topk
cp "$src/backend/cuda/route.cuh" "$work/"
"$cc" -std=c11 -O2 -D_GNU_SOURCE -I"$src" -c "$src/backend/cpu/route.c" -o "$work/route_c.o"
"$cxx" -std=c++17 -O2 -ffp-contract=off -pthread -D_Static_assert=static_assert -I"$work" -I"$src" \
  "$here/route_emulate.cpp" "$work/route_c.o" -o "$work/route_emulate" -lm
"$work/route_emulate"
