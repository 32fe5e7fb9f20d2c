#!/usr/bin/env python3
"""Writes a random-weight Llama GGUF in llama-quantize's Q4_K_M mix, of a given shape, for the
GPU check's swap of a quantized model (its bytes against the bf16 model's).

    python3 tests/gpu/make_quant_gguf.py --preset llama-3.1-8b --layers 8 --out FILE.gguf
    python3 tests/gpu/make_quant_gguf.py --hidden 256 --ffn 512 --heads 4 --kv-heads 2 \\
        --vocab 1000 --layers 2 --out FILE.gguf

Q4_K_M as llama-quantize makes it: Q4_K everywhere except the output head (Q6_K), attn_v and
ffn_down in Q6_K in the first, the last and every third layer between (its use_more_bits),
Q4_K elsewhere; norms F32. The values are random: each block's bytes drawn once into a pool
and repeated, with finite f16 scales (about 2^-8) so that a forward stays finite; a swap moves
the bytes either way, so its timings are those of a real model of the shape. No tokenizer
(the model takes token ids). GGUF v3 (ggml's gguf.h): "GGUF", version, tensor count,
metadata count, the key/value pairs, the tensor infos (name, dimensions fastest first, ggml
type, offset), the data aligned to 32 bytes. Written beside OUT as OUT.partial and renamed
when complete; needs only the standard library.
"""

import argparse
import os
import random
import struct
import sys

PRESETS = {  # hidden, ffn, heads, kv heads, vocab, layers, rope base, context
    "llama-3.1-8b": (4096, 14336, 32, 8, 128256, 32, 500000.0, 131072),
    "llama-3.2-1b": (2048, 8192, 32, 8, 128256, 16, 500000.0, 131072),
}
F32, Q4_K, Q6_K = 0, 12, 14
BLOCK = {Q4_K: (256, 144), Q6_K: (256, 210)}  # elements, bytes
ALIGN = 32
T_U32, T_F32, T_STR = 4, 6, 8


def s_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, value):
    out = s_str(key) + struct.pack("<I", vtype)
    if vtype == T_U32:
        return out + struct.pack("<I", value)
    if vtype == T_F32:
        return out + struct.pack("<f", value)
    return out + s_str(value)


def block_pool(qtype, n, rng):
    """n random blocks of qtype, f16 scales finite (about 2^-8)"""
    _, bb = BLOCK[qtype]
    out = bytearray(rng.getrandbits(8) for _ in range(n * bb))
    for b in range(n):
        o = b * bb
        scales = [208] if qtype == Q6_K else [0, 2]
        for at in scales:
            struct.pack_into("<H", out, o + at, 0x1c00 | rng.getrandbits(8))
    return bytes(out)


def tensors(hidden, ffn, heads, kv_heads, vocab, layers):
    """(name, rows, cols, type) in file order, as llama.cpp names them"""
    head_dim = hidden // heads
    out = [("token_embd.weight", vocab, hidden, Q4_K)]
    for i in range(layers):
        more = i < layers // 8 or i >= 7 * layers // 8 or (i - layers // 8) % 3 == 2
        p = f"blk.{i}."
        out += [(p + "attn_norm.weight", 1, hidden, F32),
                (p + "attn_q.weight", hidden, hidden, Q4_K),
                (p + "attn_k.weight", kv_heads * head_dim, hidden, Q4_K),
                (p + "attn_v.weight", kv_heads * head_dim, hidden, Q6_K if more else Q4_K),
                (p + "attn_output.weight", hidden, hidden, Q4_K),
                (p + "ffn_norm.weight", 1, hidden, F32),
                (p + "ffn_gate.weight", ffn, hidden, Q4_K),
                (p + "ffn_up.weight", ffn, hidden, Q4_K),
                (p + "ffn_down.weight", hidden, ffn, Q6_K if more else Q4_K)]
    out += [("output_norm.weight", 1, hidden, F32), ("output.weight", vocab, hidden, Q6_K)]
    return out


def nbytes(rows, cols, qtype):
    if qtype == F32:
        return rows * cols * 4
    qk, bb = BLOCK[qtype]
    return rows * (cols // qk) * bb


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS))
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--ffn", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--kv-heads", type=int)
    ap.add_argument("--vocab", type=int)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    hidden, ffn, heads, kv_heads, vocab, layers, rope, ctx = (
        PRESETS[a.preset] if a.preset else (None, None, None, None, None, None, 500000.0, 8192))
    hidden, ffn = a.hidden or hidden, a.ffn or ffn
    heads, kv_heads = a.heads or heads, a.kv_heads or kv_heads
    vocab, layers = a.vocab or vocab, a.layers or layers
    if None in (hidden, ffn, heads, kv_heads, vocab, layers):
        sys.exit("make_quant_gguf.py: give --preset or every one of --hidden --ffn --heads "
                 "--kv-heads --vocab --layers")
    if hidden % 256 or ffn % 256 or hidden % heads or heads % kv_heads:
        sys.exit(f"make_quant_gguf.py: hidden {hidden} and ffn {ffn} must be multiples of 256 "
                 f"(K-quant blocks), hidden of heads {heads}, heads of kv heads {kv_heads}")
    meta = [kv("general.architecture", T_STR, "llama"),
            kv("general.name", T_STR, f"random {a.preset or 'llama'} Q4_K_M"),
            kv("general.file_type", T_U32, 15),  # LLAMA_FTYPE_MOSTLY_Q4_K_M
            kv("llama.context_length", T_U32, ctx),
            kv("llama.embedding_length", T_U32, hidden),
            kv("llama.feed_forward_length", T_U32, ffn),
            kv("llama.block_count", T_U32, layers),
            kv("llama.attention.head_count", T_U32, heads),
            kv("llama.attention.head_count_kv", T_U32, kv_heads),
            kv("llama.attention.layer_norm_rms_epsilon", T_F32, 1e-5),
            kv("llama.rope.freq_base", T_F32, rope),
            kv("llama.vocab_size", T_U32, vocab)]
    ts = tensors(hidden, ffn, heads, kv_heads, vocab, layers)
    infos, off = [], 0
    for name, rows, cols, qt in ts:
        dims = [cols] if rows == 1 else [cols, rows]
        infos.append(s_str(name) + struct.pack("<I", len(dims)) +
                     b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", qt, off))
        off += (nbytes(rows, cols, qt) + ALIGN - 1) // ALIGN * ALIGN
    head = b"GGUF" + struct.pack("<IQQ", 3, len(ts), len(meta)) + b"".join(meta) + b"".join(infos)
    rng = random.Random(a.seed)
    pools = {qt: block_pool(qt, 2048, rng) for qt in BLOCK}
    norm = struct.pack("<f", 1.0) * hidden
    tmp = a.out + ".partial"
    with open(tmp, "wb") as f:
        f.write(head + b"\0" * ((-len(head)) % ALIGN))
        for name, rows, cols, qt in ts:
            n = nbytes(rows, cols, qt)
            if qt == F32:
                f.write(norm)
            else:
                left = n
                while left:
                    chunk = pools[qt][:min(left, len(pools[qt]))]
                    f.write(chunk)
                    left -= len(chunk)
            f.write(b"\0" * ((-n) % ALIGN))
    os.replace(tmp, a.out)
    print(f"{a.out}: {len(ts)} tensors, {off / 1e9:.2f} GB of data, {layers} layers")


if __name__ == "__main__":
    main()
