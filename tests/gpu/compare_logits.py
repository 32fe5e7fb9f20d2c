#!/usr/bin/env python3
"""Compares two logits files of `shardswap forward` (float32 little-endian,
[n_ids, vocab] row-major): the worst relative error per position (max |a - b|
/ max |b| over the row), printed; exit 1 when it is above the tolerance or the
shapes differ. Standard library only (the GPU machine may lack numpy).

    python3 tests/gpu/compare_logits.py A.bin B.bin VOCAB TOL
"""
import array
import sys


def load(path):
    a = array.array("f")
    with open(path, "rb") as fh:
        a.frombytes(fh.read())
    if sys.byteorder != "little":
        a.byteswap()
    return a


def main():
    if len(sys.argv) != 5:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    a, b = load(sys.argv[1]), load(sys.argv[2])
    vocab, tol = int(sys.argv[3]), float(sys.argv[4])
    if len(a) != len(b) or vocab <= 0 or len(a) % vocab:
        print(f"shapes differ: {len(a)} and {len(b)} floats, vocab {vocab}")
        return 1
    worst = 0.0
    for p in range(len(a) // vocab):
        ra, rb = a[p * vocab:(p + 1) * vocab], b[p * vocab:(p + 1) * vocab]
        mb = max(abs(v) for v in rb)
        md = max(abs(x - y) for x, y in zip(ra, rb))
        if md != md:
            worst = float("inf")
            break
        worst = max(worst, md / mb if mb > 0 else md)
    verdict = "ok" if worst <= tol else "ABOVE"
    print(f"{len(a) // vocab} positions: worst rel err {worst:.3e} ({verdict} tolerance {tol:.0e})")
    return 0 if worst <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
