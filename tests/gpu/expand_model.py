#!/usr/bin/env python3
"""Makes an N-layer checkpoint (OPT, Llama family: any whose layer tensors are named
`...layers.I....`) out of a shorter one by repeating its layers.

    python3 tests/gpu/expand_model.py --src DIR --layers N --out DIR

`shardswap gen-model` draws every weight on one thread (about 90 MB/s), so a
9 GB opt-13b-wide model would take most of the GPU check's 8 minutes. The check
generates one layer with gen-model instead and lets this script write layer i as
a copy of the source's layer i % L (in-kernel file copies, GB/s). Every byte
still moves, so swap and forward timings are those of a real N-layer model;
only the values repeat (they are random either way).

SRC holds config.json (num_hidden_layers = L) and one model.safetensors (as
gen-model writes models under 5 GB); every other file of SRC is copied as is.
OUT, which must not exist, gets config.json with num_hidden_layers = N and one
model.safetensors: the source's tensors before its first layer, layers 0..N-1,
then the rest, back to back after an 8-byte-aligned header (safetensors layout:
u64 little-endian header length, JSON header, data). OUT is written beside
itself as OUT.partial and renamed when complete. Needs only the standard library.
"""

import argparse
import json
import os
import re
import shutil
import struct
import sys

LAYER = re.compile(r"^(.*\.layers\.)(\d+)(\..+)$")


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return 8 + n, header


def copy_range(src, dst, offset, length):
    """Appends length bytes of src from offset to dst (both open files)."""
    while length > 0:
        try:
            done = os.copy_file_range(src.fileno(), dst.fileno(), length, offset)
        except (AttributeError, OSError):
            src.seek(offset)
            done = dst.write(src.read(min(length, 64 << 20)))
            dst.flush()
        if done <= 0:
            raise OSError(f"short copy at offset {offset}")
        offset += done
        length -= done


def main():
    ap = argparse.ArgumentParser(description="repeat a checkpoint's layers to N")
    ap.add_argument("--src", required=True, help="checkpoint directory with one model.safetensors")
    ap.add_argument("--layers", type=int, required=True, help="layers of the output")
    ap.add_argument("--out", required=True, help="output directory (must not exist)")
    args = ap.parse_args()
    if args.layers < 1:
        sys.exit("expand_model: --layers must be >= 1")
    if os.path.exists(args.out):
        sys.exit(f"expand_model: {args.out} exists")
    st_path = os.path.join(args.src, "model.safetensors")
    if not os.path.isfile(st_path):
        sys.exit(f"expand_model: {st_path}: expected one model.safetensors (no sharded sources)")
    with open(os.path.join(args.src, "config.json")) as f:
        cfg = json.load(f)
    src_layers = int(cfg["num_hidden_layers"])

    data_start, header = read_header(st_path)
    meta = header.pop("__metadata__", {"format": "pt"})
    tensors = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    layer_of = {name: LAYER.match(name) for name, _ in tensors}
    seen = sorted({int(m.group(2)) for m in layer_of.values() if m})
    if seen != list(range(src_layers)):
        sys.exit(f"expand_model: {st_path} has layers {seen}, config says {src_layers}")
    first = next(i for i, (name, _) in enumerate(tensors) if layer_of[name])
    pre = [t for t in tensors[:first] if not layer_of[t[0]]]
    post = [t for t in tensors[first:] if not layer_of[t[0]]]
    by_layer = {i: [t for t in tensors if layer_of[t[0]] and int(layer_of[t[0]].group(2)) == i]
                for i in range(src_layers)}

    # (output name, info, source offset) in output order
    plan = [(name, info) for name, info in pre]
    for i in range(args.layers):
        for name, info in by_layer[i % src_layers]:
            m = layer_of[name]
            plan.append((f"{m.group(1)}{i}{m.group(3)}", info))
    plan += post

    out_header, offset = {"__metadata__": meta}, 0
    for name, info in plan:
        begin, end = info["data_offsets"]
        out_header[name] = {"dtype": info["dtype"], "shape": info["shape"],
                            "data_offsets": [offset, offset + end - begin]}
        offset += end - begin
    blob = json.dumps(out_header, separators=(",", ":")).encode()
    blob += b" " * (-(8 + len(blob)) % 8)

    partial = args.out.rstrip("/") + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    for entry in os.listdir(args.src):
        if entry not in ("model.safetensors", "config.json"):
            shutil.copy2(os.path.join(args.src, entry), partial)
    cfg["num_hidden_layers"] = args.layers
    with open(os.path.join(partial, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(st_path, "rb") as src, open(os.path.join(partial, "model.safetensors"), "wb") as dst:
        dst.write(struct.pack("<Q", len(blob)) + blob)
        dst.flush()
        for _, info in plan:
            begin, end = info["data_offsets"]
            copy_range(src, dst, data_start + begin, end - begin)
    os.rename(partial, args.out)
    print(f"expand_model: {args.out}: {args.layers} layers, {offset / 1e9:.3f} GB of weights")


if __name__ == "__main__":
    main()
