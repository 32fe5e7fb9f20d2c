#!/usr/bin/env python3
"""Writes tests/fixtures/quant/: random blocks of GGUF's quantized types and
their dequantization by the `gguf` Python package, which test_quant checks
core/quant.c's dequantization against.

For each TYPE of Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K: TYPE.bin holds the raw blocks
(every byte random, then each f16 scale set to a finite value of a few
magnitudes, both signs), TYPE.f32 the dequantized elements as little-endian
float32. Deterministic (seeded): rerun to remake them.

    python3 tools/quant_fixture.py [OUT_DIR]
"""
import os
import sys

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf.quants import dequantize

# blocks per type: 8 of 32 elements, 4 of 256
BLOCKS = {T.Q8_0: 8, T.Q4_0: 8, T.Q5_0: 8, T.Q5_1: 8, T.Q4_K: 4, T.Q5_K: 4, T.Q6_K: 4}
# byte offsets of each block's f16 scales (Q6_K's d is last)
SCALES = {T.Q8_0: [0], T.Q4_0: [0], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q4_K: [0, 2], T.Q5_K: [0, 2],
          T.Q6_K: [208]}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "fixtures", "quant")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(39)
    for t, n in BLOCKS.items():
        qk, size = GGML_QUANT_SIZES[t]
        raw = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
        for b in range(n):
            for off in SCALES[t]:
                mag = 2.0 ** rng.integers(-14, 2) * rng.uniform(1, 2)
                v = np.float16(mag * (1 if rng.integers(0, 2) else -1))
                raw[b, off:off + 2] = np.frombuffer(v.tobytes(), dtype=np.uint8)
        vals = dequantize(raw.reshape(-1), t).astype("<f4").reshape(-1)
        assert vals.size == n * qk and np.all(np.isfinite(vals))
        with open(os.path.join(out, t.name + ".bin"), "wb") as f:
            f.write(raw.tobytes())
        with open(os.path.join(out, t.name + ".f32"), "wb") as f:
            f.write(vals.tobytes())
        print(f"{t.name}: {n} blocks, {vals.size} elements")


if __name__ == "__main__":
    main()
