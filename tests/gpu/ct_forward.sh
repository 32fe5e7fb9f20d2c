#!/usr/bin/env bash
# The CLI's forward of compressed-tensors fixtures (int8 per channel, int4 grouped, FP8 in
# 128x128 blocks) on a device against cpu:0, in both modes: 8 ids (the GPU's CT GEMV) and
# 12 (dequantized blocks and cuBLAS). Both backends compute the same values (weights
# dequantized exactly; in bf16 mode weights and x rounded to bf16) in different orders:
# f32 mode within 1e-4, bf16 mode within 3e-2 (test_ct_model's bf16 tolerance: a
# one-ulp difference can flip an activation's bf16 rounding downstream).
#
#   bash tests/gpu/ct_forward.sh SHARDSWAP FIXTURES_DIR DEVICE WORKDIR
set -euo pipefail
if [ $# -ne 4 ]; then
  echo "usage: bash tests/gpu/ct_forward.sh SHARDSWAP FIXTURES_DIR DEVICE WORKDIR" >&2
  exit 2
fi
ss=$1 fix=$2 dev=$3 work=$4
here=$(cd "$(dirname "$0")" && pwd)
vocab=128 # every fixture's (tools/make_ct_fixtures.py)
for model in llama_w8_channel llama_w4_group qwen2_w4_group_asym llama_fp8_block; do
  for mode in f32:1e-4 bf16:3e-2; do
    compute=${mode%%:*} tol=${mode##*:}
    for ids in 1,17,42,99,120,5,63,100 1,17,42,99,120,5,63,100,110,3,77,9; do
      "$ss" forward --model "$fix/$model" --compute "$compute" --devices "$dev" --ids "$ids" \
        --out "$work/ct-forward-dev.bin"
      "$ss" forward --model "$fix/$model" --compute "$compute" --devices cpu:0 --ids "$ids" \
        --out "$work/ct-forward-cpu.bin"
      echo -n "$model $compute, $dev vs cpu:0, $(echo "$ids" | tr ',' '\n' | wc -l) ids: "
      python3 "$here/compare_logits.py" "$work/ct-forward-dev.bin" "$work/ct-forward-cpu.bin" \
        "$vocab" "$tol"
    done
  done
done
rm -f "$work/ct-forward-dev.bin" "$work/ct-forward-cpu.bin"
