#!/usr/bin/env bash
# The CLI's forward of a quantized GGUF file on a device against cpu:0, in bf16 mode:
# 8 ids (the GPU's integer GEMV, the CPU's arithmetic: within 1e-4) and 12 (above the
# GEMV: dequantized blocks and cuBLAS in bf16 against the CPU's quantized x: 6e-2).
#
#   bash tests/gpu/gguf_forward.sh SHARDSWAP MODEL.gguf VOCAB DEVICE WORKDIR
set -euo pipefail
if [ $# -ne 5 ]; then
  echo "usage: bash tests/gpu/gguf_forward.sh SHARDSWAP MODEL.gguf VOCAB DEVICE WORKDIR" >&2
  exit 2
fi
ss=$1 model=$2 vocab=$3 dev=$4 work=$5
here=$(cd "$(dirname "$0")" && pwd)
for case in 1,17,42,99,200,5,63,128:1e-4 1,17,42,99,200,5,63,128,250,3,77,9:6e-2; do
  ids=${case%%:*} tol=${case##*:}
  "$ss" forward --model "$model" --compute bf16 --devices "$dev" --ids "$ids" --out "$work/gguf-forward-dev.bin"
  "$ss" forward --model "$model" --compute bf16 --devices cpu:0 --ids "$ids" --out "$work/gguf-forward-cpu.bin"
  echo -n "$dev vs cpu:0, $(echo "$ids" | tr ',' '\n' | wc -l) ids: "
  python3 "$here/compare_logits.py" "$work/gguf-forward-dev.bin" "$work/gguf-forward-cpu.bin" "$vocab" "$tol"
done
rm -f "$work/gguf-forward-dev.bin" "$work/gguf-forward-cpu.bin"
