#!/usr/bin/env python3
"""Peer benchmark of `shardswap bench swap`: PyTorch's way of moving a model onto a GPU and off it.

    python3 tools/bench_torch_swap.py --model DIR [--device cuda:0] [--repeat R] [--json OUT]

Reads every tensor of DIR's safetensors (model.safetensors, or the shards its
model.safetensors.index.json names) into an nn.Module that holds one frozen nn.Parameter per
tensor, in pageable host memory: the same bytes as the checkpoint, no transformers needed.
Then times, each the median of R runs after one untimed warm-up, with torch.cuda.synchronize()
before every start and at every stop, and the GPU copy freed (PyTorch's caching allocator
emptied) between runs, so that every run allocates as a cold swap does:

  pageable_h2d  module.to(device) from pageable memory (a plain model.to('cuda'))
  offload       module.to('cpu') from the GPU, into new pageable tensors (a plain offload)
  pin           pin_memory() of every tensor, once (reported; not part of a swap)
  pinned_h2d    module.to(device, non_blocking=True) from the pinned copies, then synchronize
                (Computron's swap-in: models rest pinned)
  link_h2d      one pinned uint8 tensor of the same total bytes copied into a preallocated
                device tensor (copy_, non_blocking=True), as one cudaMemcpyAsync: the
                host-to-device link as PyTorch reaches it, the reference for the others
  link_d2h      those bytes back into a preallocated pinned tensor (copy_, non_blocking)

GB/s = bytes / seconds, 1 GB = 1e9 bytes. Prints a table, and with --json OUT writes one JSON
object to OUT (keys: bytes, tensors, <step>_s and <step>_gb_s for each step above).
--device cpu runs the same steps without a GPU (a smoke test of this script: its "copies" are
no-ops and pinning is skipped, so its numbers mean nothing).
"""

import argparse
import json
import mmap
import os
import statistics
import struct
import sys
import time

import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def shard_files(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as f:
            return sorted(set(json.load(f)["weight_map"].values()))
    if os.path.isfile(os.path.join(model_dir, "model.safetensors")):
        return ["model.safetensors"]
    sys.exit(f"bench_torch_swap: {model_dir}: no model.safetensors or model.safetensors.index.json")


def read_tensors(model_dir):
    """name -> tensor in pageable host memory (owned copies; the files are closed after)."""
    out = {}
    for name in shard_files(model_dir):
        path = os.path.join(model_dir, name)
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        try:
            for key, info in header.items():
                if key == "__metadata__":
                    continue
                if info["dtype"] not in DTYPES:
                    sys.exit(f"bench_torch_swap: {path}: tensor {key}: dtype {info['dtype']} unsupported")
                begin, end = info["data_offsets"]
                if end == begin:
                    raw = torch.empty(0, dtype=torch.uint8)
                else:
                    raw = torch.frombuffer(mm, dtype=torch.uint8, count=end - begin,
                                           offset=8 + n + begin).clone()
                out[key] = raw.view(DTYPES[info["dtype"]]).reshape(info["shape"])
        finally:
            mm.close()  # every tensor above is a copy: no view of the mapping outlives it
    return out


class Holder(torch.nn.Module):
    """One frozen parameter per checkpoint tensor ('.' in names becomes '__')."""

    def __init__(self, tensors):
        super().__init__()
        for name, t in tensors.items():
            self.register_parameter(name.replace(".", "__"), torch.nn.Parameter(t, requires_grad=False))

    def point_at(self, tensors):
        """Makes the parameters refer to these host tensors again (drops any device copy)."""
        for name, t in tensors.items():
            getattr(self, name.replace(".", "__")).data = t


def main():
    ap = argparse.ArgumentParser(description="PyTorch module.to() swap benchmark on a checkpoint")
    ap.add_argument("--model", required=True, help="checkpoint directory (safetensors)")
    ap.add_argument("--device", default="cuda:0", help="cuda:N (default cuda:0), or cpu for a smoke test")
    ap.add_argument("--repeat", type=int, default=3, help="median of R runs (default 3)")
    ap.add_argument("--json", metavar="OUT", help="also write one JSON object to OUT")
    args = ap.parse_args()
    if args.repeat < 1:
        sys.exit("bench_torch_swap: --repeat must be >= 1")
    dev = torch.device(args.device)
    gpu = dev.type == "cuda"
    if gpu and not torch.cuda.is_available():
        sys.exit(f"bench_torch_swap: --device {args.device}: PyTorch sees no CUDA GPU")

    def sync():
        if gpu:
            torch.cuda.synchronize(dev)

    def free():
        if gpu:
            torch.cuda.synchronize(dev)
            torch.cuda.empty_cache()

    def timed(setup, run, teardown):
        """Median seconds of run() over R runs after a warm-up; setup/teardown untimed."""
        times = []
        for i in range(args.repeat + 1):
            setup()
            sync()
            t0 = time.perf_counter()
            run()
            sync()
            t = time.perf_counter() - t0
            teardown()
            free()
            if i > 0:
                times.append(t)
        return statistics.median(times)

    t0 = time.perf_counter()
    pageable = read_tensors(args.model)
    read_s = time.perf_counter() - t0
    total = sum(t.numel() * t.element_size() for t in pageable.values())
    module = Holder(pageable)
    res = {"impl": "torch", "torch": torch.__version__, "device": str(dev),
           "device_name": torch.cuda.get_device_name(dev) if gpu else "cpu",
           "model": os.path.abspath(args.model), "tensors": len(pageable), "bytes": total,
           "repeat": args.repeat, "read_s": read_s,
           "allocator": "caching allocator emptied between runs"}

    # pageable host memory -> device, and back
    res["pageable_h2d_s"] = timed(lambda: module.point_at(pageable), lambda: module.to(dev),
                                  lambda: module.point_at(pageable))
    res["offload_s"] = timed(lambda: module.to(dev), lambda: module.to("cpu"),
                             lambda: module.point_at(pageable))

    # pinned host memory -> device (pinning itself timed once)
    t0 = time.perf_counter()
    pinned = {k: t.pin_memory() for k, t in pageable.items()} if gpu else pageable
    res["pin_s"] = time.perf_counter() - t0
    res["pinned"] = gpu
    res["pinned_h2d_s"] = timed(lambda: module.point_at(pinned),
                                lambda: module.to(dev, non_blocking=True),
                                lambda: module.point_at(pageable))
    del pinned
    module.point_at(pageable)
    if gpu and hasattr(torch._C, "_host_emptyCache"):
        torch._C._host_emptyCache()  # give the pinned copies back before the link's buffers

    # the link: one pinned buffer of the same bytes, each way
    host = torch.empty(total, dtype=torch.uint8, pin_memory=gpu)
    host.fill_(1)
    back = torch.empty(total, dtype=torch.uint8, pin_memory=gpu)
    on_dev = {}

    def alloc(fill):
        on_dev["t"] = torch.empty(total, dtype=torch.uint8, device=dev)
        if fill:
            on_dev["t"].copy_(host)

    # copies between preallocated buffers, as cudaMemcpyAsync: no allocation timed
    res["link_h2d_s"] = timed(lambda: alloc(False), lambda: on_dev["t"].copy_(host, non_blocking=True),
                              lambda: on_dev.clear())
    res["link_d2h_s"] = timed(lambda: alloc(True), lambda: back.copy_(on_dev["t"], non_blocking=True),
                              lambda: on_dev.clear())
    del host, back

    for step in ("pageable_h2d", "offload", "pinned_h2d", "link_h2d", "link_d2h"):
        res[f"{step}_gb_s"] = total / max(res[f"{step}_s"], 1e-9) / 1e9
    res["pin_gb_s"] = total / max(res["pin_s"], 1e-9) / 1e9

    print(f"torch {res['torch']}, {res['device_name']}: {args.model}, {len(pageable)} tensors, "
          f"{total / 1e9:.3f} GB, median of {args.repeat}")
    print(f"{'step':14s} {'seconds':>9s} {'GB/s':>8s} {'/link':>7s}")
    for step in ("pageable_h2d", "pinned_h2d", "link_h2d", "offload", "link_d2h", "pin"):
        link = res["link_d2h_gb_s"] if step in ("offload", "link_d2h") else res["link_h2d_gb_s"]
        print(f"{step:14s} {res[step + '_s']:9.3f} {res[step + '_gb_s']:8.2f} "
              f"{res[step + '_gb_s'] / link:7.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
