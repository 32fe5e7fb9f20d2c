#!/usr/bin/env python3
"""The GPU check's tables, from what tests/gpu/run.sh left in its logs folder.

    python3 tests/gpu/report.py LOGS_DIR

Reads (each may be missing, empty, or not JSON: that row prints n/a, never a traceback):
  steps.tsv                       step, status, seconds, note (one line per step)
  env.txt                         commit, GPUs, nvcc, torch, transformers
  swap.json, torch-swap.json      shardswap bench swap --json; tools/bench_torch_swap.py --json
  forward-b1.json, hf-b1.json...  shardswap bench forward --json; tools/bench_hf.py --json
  llama-forward-b1.json, llama-hf-b1.json, llama-swap.json   the same on the Llama family
  llama-forward-lora8.json        bench forward --adapters: 8 sequences over 8 rank-16 adapters
                                  against the base alone; llama-swap.json's layouts[].adapter
  workload-tp1.json, -tp2.json    shardswap bench workload --json
  workload-chat.json              shardswap bench workload --config chat:8:0.5 --json
  ctest-backend.log, ctest-cpu.log

and prints the tables against the issue's targets: swap (load, offload, cold request; ours
against the pinned link and against PyTorch's module.to), forward (prefill and decode tok/s,
ours against transformers), the same two for the Llama family (an 8B-shaped swap against the
pinned link only; a llama-3.2-1b-shaped forward), workload (latency per policy), and the tests.
Standard library only.
"""

import json
import math
import os
import re
import sys

TARGET_LOAD_VS_LINK = 0.90  # swap-in at >= 90% of the pinned host-to-device link
TARGET_VS_PAGEABLE = 2.0  # >= 2x PyTorch's module.to('cuda') from pageable memory
TARGET_COLD = 0.75  # cold request with overlap <= 75% of load + warm
TARGET_DECODE_B1 = 1.5  # decode tok/s >= 1.5x transformers at batch 1


def load_json(path):
    """The file's JSON object, else the last line of it that is one, else None."""
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    try:
        v = json.loads(text)
        return v if isinstance(v, dict) else None
    except ValueError:
        pass
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                v = json.loads(line)
                return v if isinstance(v, dict) else None
            except ValueError:
                continue
    return None


def num(v):
    """v as a finite float, else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def get(d, *keys):
    """The first of keys that d holds as a number (d may be None)."""
    if not isinstance(d, dict):
        return None
    for k in keys:
        v = num(d.get(k))
        if v is not None:
            return v
    return None


def div(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def mul(a, b):
    return a * b if a is not None and b is not None else None


def f(v, spec=".2f", suffix=""):
    return "n/a" if v is None else format(v, spec) + suffix


def verdict(v, target, at_least=True):
    if v is None:
        return "n/a"
    ok = v >= target if at_least else v <= target
    return "PASS" if ok else "FAIL"


def table(header, rows, align=None):
    """Columns aligned by align ('l'/'r' each; default: the first left, the rest right)."""
    align = align or "l" + "r" * (len(header) - 1)
    cols = [header] + rows
    w = [max(len(str(r[i])) for r in cols) for i in range(len(header))]
    out = []
    for n, r in enumerate(cols):
        cells = [str(c).ljust(w[i]) if align[i] == "l" else str(c).rjust(w[i])
                 for i, c in enumerate(r)]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * x for x in w))
    return "\n".join(out)


def read_steps(logs):
    steps = {}
    try:
        with open(os.path.join(logs, "steps.tsv"), errors="replace") as fh:
            for line in fh:
                parts = line.rstrip("\n").split("\t")
                if parts and parts[0]:
                    parts += [""] * (4 - len(parts))
                    steps[parts[0]] = parts[1:4]
    except OSError:
        pass
    return steps


def why(steps, *names):
    """A short reason for a missing result: the first of these steps that did not succeed."""
    for n in names:
        if n in steps and steps[n][0] != "ok":
            note = steps[n][2]
            return f"{n} {steps[n][0]}" + (f": {note[:100]}" if note else "")
    for n in names:
        if n not in steps:
            return f"{n} did not run"
    return "no result"


def header(logs, steps):
    lines = ["shardswap GPU check"]
    try:
        with open(os.path.join(logs, "env.txt"), errors="replace") as fh:
            env = fh.read().splitlines()
    except OSError:
        env = []
    for line in env:
        if (line.startswith(("commit:", "date:", "host:", "GPU ", "torch ", "transformers "))
                or "release" in line and "Cuda compilation" in line):
            lines.append("  " + line.strip())
    lines.append("")
    rows = [[name, st[0], st[1], st[2][:110]] for name, st in steps.items()]
    lines.append(table(["step", "status", "s", "note"], rows, "llrl") if rows else "no steps recorded")
    return "\n".join(lines)


def swap_tables(logs, steps, prefix="", title="SWAP  (opt-13b wide, 14 layers, f16; GB/s = 1e9 bytes/s)",
                with_torch=True):
    """The swap tables of PREFIXswap.json (and torch-swap.json when with_torch): steps
    PREFIXswap-model and PREFIXswap."""
    ours = load_json(os.path.join(logs, f"{prefix}swap.json"))
    torch = load_json(os.path.join(logs, "torch-swap.json")) if with_torch else None
    layouts = ours.get("layouts") if isinstance(ours, dict) else None
    layouts = [l for l in layouts if isinstance(l, dict)] if isinstance(layouts, list) else []
    out = [title]
    if not layouts:
        out.append(f"  shardswap bench swap: n/a ({why(steps, f'{prefix}swap-model', f'{prefix}swap')})")
        layouts = [{}]
    if torch is None and with_torch:
        out.append(f"  PyTorch module.to: n/a ({why(steps, 'swap-model', 'torch-swap')})")
    t_page, t_pin = get(torch, "pageable_h2d_gb_s"), get(torch, "pinned_h2d_gb_s")
    t_off = get(torch, "offload_gb_s")

    def name(l):
        tp, pp = l.get("tp"), l.get("pp")
        return f"{tp}x{pp}" if tp is not None and pp is not None else "n/a"

    def link(l, key):
        """ours (the layout's, else the run's), else PyTorch's: (GB/s, whose)"""
        v = get(l, key)
        if v is None:
            v = get(ours, key)
        if v is not None:
            return v, ""
        v = get(torch, key)
        return v, ("*" if v is not None else "")

    rows_in, rows_off, rows_cold, checks = [], [], [], []
    starred = False
    for l in layouts:
        load = get(l, "load_gb_s")
        lk, star = link(l, "link_h2d_gb_s")
        starred |= bool(star)
        ratio = get(l, "load_vs_link")
        if ratio is None:
            ratio = div(load, lk)
        rows_in.append([name(l), f(load), f(lk) + star, f(ratio), f(t_page), f(t_pin),
                        f(div(load, t_page), ".2f", "x"), f(div(load, t_pin), ".2f", "x")])
        byts, off_s = get(l, "bytes"), get(l, "offload_s")
        off = get(l, "offload_gb_s")
        if off is None:
            off = div(div(byts, off_s), 1e9)
        dl, star = link(l, "link_d2h_gb_s")
        starred |= bool(star)
        rows_off.append([name(l), f(mul(off_s, 1e3), ".2f"), f(off), f(dl) + star, f(div(off, dl)),
                         f(t_off), f(div(off, t_off), ".2f", "x")])
        c_on, c_off = get(l, "cold_overlap_s"), get(l, "cold_serial_s")
        warm, load_s = get(l, "warm_s"), get(l, "load_s")
        lw = load_s + warm if load_s is not None and warm is not None else None
        cr = get(l, "cold_overlap_vs_load_plus_warm")
        if cr is None:
            cr = div(c_on, lw)
        rows_cold.append([name(l), f(mul(c_on, 1e3), ".1f"), f(mul(c_off, 1e3), ".1f"),
                          f(mul(warm, 1e3), ".1f"), f(mul(load_s, 1e3), ".1f"), f(mul(lw, 1e3), ".1f"),
                          f(cr)])
        checks.append(f"  {name(l)}: load >= {TARGET_LOAD_VS_LINK:.2f} x link: "
                      f"{verdict(ratio, TARGET_LOAD_VS_LINK)} ({f(ratio, '.3f')}); "
                      + (f">= {TARGET_VS_PAGEABLE:.0f}x pageable module.to: "
                         f"{verdict(div(load, t_page), TARGET_VS_PAGEABLE)} "
                         f"({f(div(load, t_page), '.2f', 'x')}); " if with_torch else "")
                      + f"cold overlap <= {TARGET_COLD:.2f} x (load + warm): "
                      f"{verdict(cr, TARGET_COLD, at_least=False)} ({f(cr, '.3f')})")
    h_in = ["layout", "load GB/s", "link GB/s", "load/link", "torch pageable", "torch pinned",
            "vs pageable", "vs pinned"]
    h_off = ["layout", "offload ms", "eff. GB/s", "link d2h GB/s", "/link", "torch .to(cpu)",
             "vs torch"]
    if not with_torch:  # ours against the link alone
        h_in, h_off = h_in[:4], h_off[:5]
        rows_in, rows_off = [r[:4] for r in rows_in], [r[:5] for r in rows_off]
    out.append("swap-in (host -> devices, every shard at once)")
    out.append(table(h_in, rows_in))
    out.append("\nswap-out (devices -> host)")
    out.append(table(h_off, rows_off))
    out.append("(shardswap copies back only what the host tier lacks: none here, the weights stay in "
               "host memory, so its swap-out frees the devices; eff. GB/s = bytes / that time."
               + (" PyTorch's module.to('cpu') copies every byte.)" if with_torch else ")"))
    out.append("\ncold request (not resident -> first token), ms")
    out.append(table(["layout", "overlap", "serial", "warm", "load", "load+warm", "overlap/(l+w)"],
                     rows_cold))
    if starred:
        out.append("* the link as PyTorch measured it (one pinned buffer, .to(cuda, non_blocking)): "
                   "bench swap gave none")
    if torch is not None:
        out.append(f"PyTorch {torch.get('torch', '?')} on {torch.get('device_name', '?')}: "
                   f"{f(div(get(torch, 'bytes'), 1e9), '.2f')} GB, pin_memory() "
                   f"{f(get(torch, 'pin_s'), '.2f')} s, link h2d {f(get(torch, 'link_h2d_gb_s'))} GB/s, "
                   f"d2h {f(get(torch, 'link_d2h_gb_s'))} GB/s")
    out.append("targets:")
    out.extend(checks)
    return "\n".join(out)


def forward_table(logs, steps, prefix="", batches=(1, 8),
                  title="FORWARD  (opt-1.3b shape, 24 layers, f16 weights; prompt 128, 32 decode steps; tok/s)"):
    """PREFIXforward-bB.json against PREFIXhf-bB.json for each batch B (steps PREFIXfwd-model
    or, for a prefix, PREFIXfwd-model, and PREFIXforward-bB, PREFIXhf-bB)."""
    out = [title]
    rows, check = [], None
    model_step = f"{prefix}fwd-model"
    for b in batches:
        ours = load_json(os.path.join(logs, f"{prefix}forward-b{b}.json"))
        hf = load_json(os.path.join(logs, f"{prefix}hf-b{b}.json"))
        op, hp = get(ours, "prefill_tok_s"), get(hf, "prefill_tok_s")
        od, hd = get(ours, "decode_tok_s"), get(hf, "decode_tok_s")
        rows.append([str(b), f(op, ".0f"), f(hp, ".0f"), f(div(op, hp), ".2f", "x"),
                     f(od, ".0f"), f(hd, ".0f"), f(div(od, hd), ".2f", "x")])
        if ours is None:
            out.append(f"  batch {b}, shardswap: n/a "
                       f"({why(steps, model_step, 'forward', f'{prefix}forward-b{b}')})")
        if hf is None:
            out.append(f"  batch {b}, transformers: n/a "
                       f"({why(steps, model_step, 'hf', 'hf-wheels', f'{prefix}hf-b{b}')})")
        if b == 1:
            check = div(od, hd)
        if hf is not None and b == 1:
            out.append(f"  transformers {hf.get('transformers', '?')}, torch {hf.get('torch', '?')}, "
                       f"{hf.get('dtype', '?')} on {hf.get('device_name', '?')}")
    out.append(table(["batch", "prefill ours", "prefill hf", "ratio", "decode ours", "decode hf",
                      "ratio"], rows))
    out.append(f"target: decode >= {TARGET_DECODE_B1}x transformers at batch 1: "
               f"{verdict(check, TARGET_DECODE_B1)} ({f(check, '.2f', 'x')})")
    return "\n".join(out)


TARGET_LORA_RATIO = 1.3


def lora_table(logs, steps):
    """llama-forward-lora8.json (a batch of 8 over 8 adapters against the base alone) and the
    rank-16 adapter's swap in llama-swap.json."""
    out = ["LORA  (llama-3.2-1b shape: a batch of 8 over 8 rank-16 adapters against the base alone; "
           "llama-3.1-8b shape, 8 layers: a rank-16 adapter's swap over the resident base)"]
    fw = load_json(os.path.join(logs, "llama-forward-lora8.json"))
    lo = fw.get("lora") if isinstance(fw, dict) else None
    if not isinstance(lo, dict):
        out.append(f"  forward: n/a ({why(steps, 'lora-models', 'llama-forward-lora8')})")
    else:
        out.append(table(["", "adapters tok/s", "base tok/s", "time ratio"],
                         [["prefill", f(get(fw, "prefill_tok_s"), ".0f"), f(get(lo, "base_prefill_tok_s"), ".0f"),
                           f(get(lo, "prefill_ratio"), ".3f", "x")],
                          ["decode", f(get(fw, "decode_tok_s"), ".0f"), f(get(lo, "base_decode_tok_s"), ".0f"),
                           f(get(lo, "decode_ratio"), ".3f", "x")]]))
        r = get(lo, "decode_ratio")
        out.append(f"target: decode time with 8 adapters <= {TARGET_LORA_RATIO}x the base's: "
                   f"{verdict(r, TARGET_LORA_RATIO, at_least=False)} ({f(r, '.3f', 'x')})")
    sw = load_json(os.path.join(logs, "llama-swap.json"))
    lays = sw.get("layouts") if isinstance(sw, dict) else None
    rows = []
    for l in lays if isinstance(lays, list) else []:
        a = l.get("adapter") if isinstance(l, dict) else None
        if isinstance(a, dict):
            rows.append([f"{l.get('tp')}x{l.get('pp')}", f(div(get(a, "bytes"), 1e6), ".1f"),
                         f(mul(get(a, "load_s"), 1e3), ".2f"), f(get(a, "load_gb_s"), ".2f"),
                         f(div(get(l, "bytes"), 1e6), ".0f"), f(mul(get(l, "load_s"), 1e3), ".1f"),
                         f(get(a, "bytes_vs_model"), ".4f"), f(get(a, "load_s_vs_model"), ".4f")])
    if rows:
        out.append(table(["layout", "adapter MB", "load ms", "GB/s", "model MB", "model ms", "bytes/m",
                          "time/m"], rows))
    else:
        out.append(f"  swap: n/a ({why(steps, 'lora-8b-model', 'llama-swap')})")
    return "\n".join(out)


def workload_table(logs, steps):
    out = ["WORKLOAD  (Computron config 6: 3 opt-1.3b models, rates 10/10/1, CV 0.25, 2 fit; seconds)"]
    rows = []
    for tp in (1, 2):
        w = load_json(os.path.join(logs, f"workload-tp{tp}.json"))
        pols = w.get("policies") if isinstance(w, dict) else None
        pols = [p for p in pols if isinstance(p, dict)] if isinstance(pols, list) else []
        if not pols:
            out.append(f"  TP {tp}: n/a ({why(steps, 'fwd-model', 'workload', f'workload-tp{tp}')})")
            rows.append([f"tp{tp}", "n/a"] + ["n/a"] * 8)
            continue
        for p in pols:
            rows.append([f"tp{tp}", str(p.get("policy", "?")), f(get(p, "requests"), ".0f"),
                         f(get(p, "failed"), ".0f"), f(get(p, "mean_s"), ".3f"), f(get(p, "p50_s"), ".3f"),
                         f(get(p, "p99_s"), ".3f"), f(get(p, "slo_attainment"), ".3f"),
                         f(get(p, "swaps"), ".0f"), f(get(p, "throughput_rps"), ".2f")])
    out.append(table(["tp", "policy", "requests", "failed", "mean", "p50", "p99", "slo att.", "swaps",
                      "req/s"], rows))
    return "\n".join(out)


def chat_table(logs, steps):
    out = ["WORKLOAD CHAT  (chat:8:0.5: 8 opt-1.3b models, Zipf popularity, ShareGPT-like lengths; "
           "TP 1; seconds)"]
    w = load_json(os.path.join(logs, "workload-chat.json"))
    pols = w.get("policies") if isinstance(w, dict) else None
    pols = [p for p in pols if isinstance(p, dict)] if isinstance(pols, list) else []
    if not pols:
        out.append(f"  n/a ({why(steps, 'fwd-model', 'workload-chat')})")
        return "\n".join(out)
    rows = []
    for p in pols:
        rows.append([str(p.get("policy", "?")), f(get(p, "requests"), ".0f"), f(get(p, "failed"), ".0f"),
                     f(get(p, "ttft_p50_s"), ".3f"), f(get(p, "ttft_p99_s"), ".3f"),
                     f(get(p, "tpot_p50_s"), ".4f"), f(get(p, "tpot_p99_s"), ".4f"),
                     f(get(p, "token_slo_attainment"), ".3f"), f(get(p, "goodput_rps"), ".3f"),
                     f(get(p, "swaps"), ".0f")])
    out.append(table(["policy", "requests", "failed", "ttft p50", "ttft p99", "tpot p50", "tpot p99",
                      "token slo", "goodput r/s", "swaps"], rows))
    return "\n".join(out)


def gemv_table(logs, steps, name="gemv-quant",
               title="QUANTIZED GEMV  (bench gemv on cuda:0, bf16 mode; GB/s = 1e9 weight bytes/s)"):
    """bench gemv --devices cuda:0 (NAME.json): decode's linear layer per weight type."""
    g = load_json(os.path.join(logs, f"{name}.json"))
    res = g.get("results") if isinstance(g, dict) else None
    res = [r for r in res if isinstance(r, dict)] if isinstance(res, list) else []
    if not res:
        return title + f"\n  n/a ({why(steps, name)})"
    out = [f"{title}\n  {f(get(g, 'rows'), '.0f')} x {f(get(g, 'cols'), '.0f')} weights; device copy "
           f"{f(get(g, 'copy_gb_s'), '.0f')} GB/s (read + write)"]
    rows = [[str(r.get("dtype", "?")), f(get(r, "m"), ".0f"), f(get(r, "ms_per_call"), ".4f"),
             f(get(r, "weight_gb_s"), ".1f"), f(get(r, "vs_copy"), ".2f"), f(get(r, "vs_m1"), ".2f")]
            for r in res]
    out.append(table(["dtype", "m", "ms/call", "GB/s", "/copy", "/m=1"], rows, "lrrrrr"))
    return "\n".join(out)


def ctest_summary(logs, steps, name):
    path = os.path.join(logs, f"{name}.log")
    try:
        with open(path, errors="replace") as fh:
            text = fh.read()
    except OSError:
        return f"  {name}: n/a ({why(steps, name)})"
    m = re.search(r"(\d+)% tests passed, (\d+) tests? failed out of (\d+)", text)
    status = steps.get(name, ["?"])[0]
    if not m:
        if "No tests were found" in text:
            return f"  {name}: no tests matched ({status})"
        return f"  {name}: {status}, no ctest summary (see logs/{name}.log)"
    failed, total = int(m.group(2)), int(m.group(3))
    skipped = re.findall(r"^\s*\d+ - (\S+) \(Skipped\)", text, re.M)
    bad = re.findall(r"^\s*\d+ - (\S+) \((Failed|Timeout|SEGFAULT|Subprocess aborted|Not Run|[^)]*)\)",
                     text, re.M)
    bad = [f"{t} ({why_})" for t, why_ in bad if why_ != "Skipped"]
    line = f"  {name}: {total - failed - len(skipped)} passed, {failed} failed, {len(skipped)} skipped of {total}"
    if status != "ok":
        line += f" [{status}]"
    if bad:
        line += "\n    failed: " + ", ".join(bad)
    if skipped:
        line += "\n    skipped (exit 77): " + ", ".join(skipped)
    return line


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: report.py LOGS_DIR")
    logs = sys.argv[1]
    steps = read_steps(logs)
    parts = [header(logs, steps), swap_tables(logs, steps), forward_table(logs, steps),
             forward_table(logs, steps, "llama-", (1,),
                           "LLAMA FORWARD  (llama-3.2-1b shape, 16 layers, bf16 weights, bf16 compute; "
                           "transformers in bf16; prompt 128, 32 decode steps; tok/s)"),
             swap_tables(logs, steps, "llama-",
                         "LLAMA SWAP  (llama-3.1-8b shape, 8 layers, bf16; against the pinned link; "
                         "GB/s = 1e9 bytes/s)", with_torch=False),
             swap_tables(logs, steps, "q4km-",
                         "Q4_K_M SWAP  (llama-3.1-8b shape, 8 layers, GGUF Q4_K_M: 3.2x fewer bytes than "
                         "the bf16 model above; against the pinned link; GB/s = 1e9 bytes/s)",
                         with_torch=False),
             lora_table(logs, steps),
             gemv_table(logs, steps),
             gemv_table(logs, steps, "gemv-ct-bf16",
                        "COMPRESSED-TENSORS GEMV  (bench gemv on cuda:0, bf16 mode; GB/s = 1e9 weight "
                        "bytes/s)"),
             gemv_table(logs, steps, "gemv-ct-f32",
                        "COMPRESSED-TENSORS GEMV  (bench gemv on cuda:0, f32 mode; GB/s = 1e9 weight "
                        "bytes/s)"),
             workload_table(logs, steps),
             chat_table(logs, steps),
             "TESTS\n" + "\n".join(ctest_summary(logs, steps, n) for n in ("ctest-backend", "ctest-quant", "ctest-cpu"))]
    print("\n\n".join(parts))


if __name__ == "__main__":
    main()
