#!/usr/bin/env python3
"""Runs `shardswap bench forward` and tools/bench_hf.py (transformers on the
CPU, same thread count, same shapes) on each checkpoint, in f32 and in bf16,
and prints one markdown table of ours/theirs ratios. Any family both load:
OPT, Llama, Mistral, Qwen2, Qwen3, Gemma 2/3, Phi-3, Mixtral, Qwen3-MoE
(bench_hf.py loads AutoModelForCausalLM and
refuses a checkpoint with missing or unexpected tensors).

    python3 tools/bench_compare.py --models DIR [DIR ...] [--batch 1] \
        [--prompt-len 128] [--gen 32] [--threads 2] [--repeat 3] \
        [--precisions f32,bf16] [--step-batches 8] [--python PY] [--json] [--json-out FILE] \
        [--peers hf,llamacpp] [--llamacpp-f32 f16|f32] [--llamacpp-ref q8_0] [--llamacpp-args ARGS]

Each precision runs both sides the same way: f32 is shardswap's
`--compute f32` (weights widened on the fly, kept at the checkpoint's dtype
in memory) against transformers loaded in float32; bf16 is `--compute bf16`
against transformers loaded in bfloat16. "best HF" is transformers' faster
precision, the issue's yardstick: prefill >= 1.0x and decode >= 1.5x of it.
--step-batches B[,B...] also runs our side alone at those batch sizes (same
prompt and steps, --repeat 2) and prints its decode step cost against batch
--batch's: what a batch of B sequences costs over one.
--python names the interpreter that has torch and transformers (default:
this one).

llama.cpp (--peers hf,llamacpp, the default; drop either) runs as a second
peer: tools/llamacpp.sh builds its llama-bench (CPU, GGML_NATIVE) and
converts each checkpoint to GGUF with llama.cpp's own convert_hf_to_gguf.py,
cached under ~/.cache/shardswap/llamacpp/. llama-bench runs one sequence at
the same threads and repetitions: prefill is `-p PROMPT -n 0`, decode is
`-p 0 -n GEN -d PROMPT` (GEN steps with PROMPT tokens already in the KV
cache, as ours and transformers' decode), best of the repetitions' tok/s.
Pairing, stated in the table's header: our bf16 row against a bf16 GGUF
(same 2-byte weights; ggml rounds activations to bf16 for its dot
products); our f32 row (2-byte weights widened, f32 arithmetic) against an
f16 GGUF by default, the GGUF that reads as many weight bytes and keeps f32
accumulation (ggml rounds activations to f16), or against an f32 GGUF
(4-byte weights, all-f32 arithmetic, as transformers' f32) with
--llamacpp-f32 f32. A Q8_0 GGUF (--llamacpp-ref, empty for none) is a
reference line in a second table: what llama.cpp is usually run as. A peer
that fails to build, convert (llama.cpp has no OPT converter) or run shows
as `n/a (reason)` in the table and as {"error": reason} in the JSON.
--batch other than 1 leaves llama.cpp out (n/a): llama-bench runs one
sequence. llama-bench keeps its defaults otherwise (f16 KV cache, flash
attention auto, weight repacking on, AMX for Q8_0 where the CPU has it);
--llamacpp-args passes more flags, e.g. '--repack 0'. ggml's threads spin
at each node's barrier (OpenMP), so llama.cpp at -t = every core collapses
when anything else runs: read its columns with the load average the header
prints. A GGUF whose
llama-bench is killed by a signal (seen: Q8_0 prefill through ggml's AMX
repacked weights, SIGSEGV) is rerun once with --repack 0, and its GGUF cell
says so ("q8_0 (--repack 0 after ...)", "retried" in the JSON).

A mixture of experts (Mixtral, Qwen3-MoE) gets a third table: decode over the bytes
a step touches (every weight but the experts, plus each expert that some token of
the step routed to, counted from the router in the run), its ratio to the read
limit, and the peers' decode over the same bytes.

The read limit is measured in the same run, around every peer: `shardswap
bench read` (the best of every way of reading, core/membw.h through
cli/read_limit.h, one sample of 2 rounds) before our run, before
transformers' and before and after llama.cpp's, beside the samples `bench
forward` takes between its own repetitions. "read GB/s" is the best of all of
a checkpoint's samples, with the slowest in brackets (the machine's drift
over that checkpoint's runs). "peer GB/s" is what each peer's decode streamed
on the same machine: llama.cpp's GGUF bytes (for a mixture, the share a step
touches) times its decode steps per second, transformers' weight bytes (ours
per step, twice that when it computes in float32 from 2-byte weights) times
its steps per second. "limit
GB/s" is the largest of these, marked with where it came from, so the limit
is never below what a peer achieves and "decode / limit" does not flatter us.
"""
import argparse
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.join(HERE, "..", "build", "shardswap")
LLAMACPP = os.path.join(HERE, "llamacpp.sh")
GGUF_DIR = os.path.join(os.path.expanduser("~"), ".cache", "shardswap", "llamacpp", "gguf")


class PeerError(Exception):
    """A peer that could not build, convert or run; str() is the table's reason."""


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_peer(cmd, what):
    """Runs cmd; returns its stdout, or raises PeerError naming what failed and the
    last error line it printed."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise PeerError(f"{what}: {e}")
    if p.returncode < 0:
        raise PeerError(f"{what}: killed by {signal.Signals(-p.returncode).name}")
    if p.returncode != 0:
        lines = [ln.strip() for ln in (p.stderr + p.stdout).splitlines() if ln.strip()]
        errs = [ln for ln in lines if "ERROR" in ln or "error" in ln] or lines or ["no output"]
        raise PeerError(f"{what}: {errs[-1][:160]}".replace("|", "/"))
    return p.stdout


def read_sample(a):
    """One sample of the machine's read limit on a.threads threads (shardswap bench
    read --json), or {"error": reason}."""
    try:
        return run_json([a.bin, "bench", "read", "--threads", str(a.threads), "--samples", "1",
                         "--rounds", "2", "--json"])
    except (subprocess.CalledProcessError, ValueError, IndexError) as e:
        return {"error": f"bench read: {e}"}


def read_figures(o, samples):
    """(best, slowest) GB/s over bench forward's own samples (its JSON o) and the
    bench read samples taken around the peers."""
    vals = [s["gb_s"] for s in samples if "error" not in s and s.get("gb_s")]
    rl = o.get("read_limit") or {}
    vals += [s["gb_s"] for s in rl.get("samples", []) if s.get("gb_s")]
    if not vals and o.get("read_gb_s"):
        vals = [o["read_gb_s"]]
    return (max(vals), min(vals)) if vals else (0, 0)


def peer_gbs(o, p, t, ll):
    """GB/s each peer's decode streamed: llama.cpp's GGUF bytes x its steps/s, and
    transformers' weight bytes (ours per step; x2 when it computes in float32 from
    2-byte weights) x its steps/s; 0 where a peer did not run."""
    llb = (ll_step_bytes(o, ll) * ll["decode_tok_s"] / 1e9
           if "error" not in ll and ll.get("model_size") else 0)
    hfb = 0
    if "error" not in t and t.get("decode_tok_s") and o.get("decode_weight_bytes_per_step"):
        widen = 2 if p == "f32" and o["weight_dtype"] in ("BF16", "F16") else 1
        steps = t["decode_tok_s"] / max(1, t.get("batch", 1))
        hfb = o["decode_weight_bytes_per_step"] * widen * steps / 1e9
    return llb, hfb


def hf_bench(a, m, p, shape):
    try:
        return json.loads(run_peer([a.python, os.path.join(HERE, "bench_hf.py"), "--model", m,
                                    "--dtype", p] + shape, "bench_hf").strip().splitlines()[-1])
    except (PeerError, ValueError, IndexError) as e:
        return {"error": str(e)}


def llamacpp_build():
    """Builds (or finds) llama-bench; returns (path, version dict) or raises PeerError."""
    path = run_peer(["bash", LLAMACPP, "build"], "llama.cpp build").strip().splitlines()[-1]
    ver = json.loads(run_peer(["bash", LLAMACPP, "version"], "llama.cpp version")
                     .strip().splitlines()[-1])
    return path, ver


def gguf_path(m, gtype):
    """The cached GGUF of checkpoint m: one per absolute path and type, remade when any
    file in m is newer than it."""
    m = os.path.abspath(m)
    tag = hashlib.sha1(m.encode()).hexdigest()[:8]
    out = os.path.join(GGUF_DIR, f"{os.path.basename(m.rstrip('/'))}-{tag}.{gtype}.gguf")
    newest = max(os.path.getmtime(os.path.join(m, f)) for f in os.listdir(m))
    if not os.path.exists(out) or os.path.getmtime(out) < newest:
        run_peer(["bash", LLAMACPP, "convert", m, gtype, out], f"convert {gtype}")
    return out


def llamacpp_bench(a, bench, m, gtype):
    """llama-bench on m's GGUF of gtype (llamacpp_bench_file); {"error": reason} when it
    cannot convert or run."""
    try:
        g = gguf_path(m, gtype)
    except PeerError as e:
        return {"error": str(e)}
    return llamacpp_bench_file(a, bench, g, gtype)


def llamacpp_bench_file(a, bench, g, gtype):
    """llama-bench on the GGUF file g: prefill (-p L -n 0) and decode at depth L
    (-p 0 -n N -d L), best of -r repetitions; {"error": reason} when it cannot."""
    extra, retried = shlex.split(a.llamacpp_args), None
    try:
        while True:
            common = ([bench, "-m", g, "-t", str(a.threads), "-r", str(a.repeat), "-o", "json"]
                      + extra)
            try:
                pp = json.loads(run_peer(common + ["-p", str(a.prompt_len), "-n", "0"],
                                         f"llama-bench {gtype}"))[0]
                tg = json.loads(run_peer(common + ["-p", "0", "-n", str(a.gen),
                                                   "-d", str(a.prompt_len)],
                                         f"llama-bench {gtype}"))[0]
                break
            except PeerError as e:
                # Seen here: Q8_0 prefill through ggml's AMX repacked weights dies with
                # SIGSEGV. Once, and said in the table: rerun without repacked buffers.
                if "killed by" not in str(e) or "--repack" in extra:
                    raise
                extra, retried = extra + ["--repack", "0"], f"--repack 0 after {e}"
    except PeerError as e:
        return {"error": str(e)}
    except (ValueError, IndexError, KeyError) as e:
        return {"error": f"llama-bench {gtype}: unreadable JSON ({e})"}
    return {"gguf": g, "gguf_type": gtype, "retried": retried, "model_size": pp.get("model_size"),
            "model_type": pp.get("model_type"),
            "prefill_tok_s": max(pp["samples_ts"]), "decode_tok_s": max(tg["samples_ts"]),
            "prefill_avg_tok_s": pp["avg_ts"], "decode_avg_tok_s": tg["avg_ts"],
            "cpu_info": pp.get("cpu_info"), "backends": pp.get("backends"),
            "build_commit": pp.get("build_commit"), "n_threads": pp.get("n_threads")}


def gguf_label(gtype, ll):
    """The GGUF's type, and how llama-bench had to be rerun for it, if it was."""
    return f"{gtype} ({ll['retried']})" if ll.get("retried") else gtype


def ll_step_bytes(o, ll):
    """The bytes llama.cpp's decode step reads on the paired GGUF: the whole file for a
    dense model; for a mixture, the file less the experts no token of the step routed to,
    in our share (same shapes, same routing at batch 1: top-k experts per layer); 0 when
    unknown."""
    size = ll.get("model_size") or 0
    if o.get("expert_bytes") and o.get("weight_bytes"):
        size *= o["decode_weight_bytes_per_step"] / o["weight_bytes"]
    return size


def moe_table(rows, precs, pair, ll_err):
    """Mixtures of experts: decode judged on the bytes a step touches (every weight but
    the experts, plus each expert some token of the step routed to), not the checkpoint."""
    moe = [(r, p) for r in rows for p in precs if r["shardswap"][p].get("expert_bytes")]
    if not moe:
        return
    print()
    print("mixtures of experts: decode over the bytes a step touches (dense weights, head, and "
          "the distinct experts the step routed to, per layer)")
    print("| checkpoint | compute | all weights GB | touched MB/step | of which experts MB "
          "| experts/step | touched GB/s | read limit GB/s | touched / read limit "
          "| llama.cpp touched GB/s | HF touched GB/s |")
    print("|---" * 11 + "|")
    for r, p in moe:
        o = r["shardswap"][p]
        ll = r["llamacpp"].get(pair[p], {"error": ll_err or "not run"})
        t = r["transformers"][p]
        step = o["decode_weight_bytes_per_step"]
        read, _ = read_figures(o, r["read_samples"])
        ll_bw, hf_bw = peer_gbs(o, p, t, ll)
        limit = max(read, ll_bw, hf_bw)
        hf = f"{hf_bw:.1f}" if hf_bw else "n/a"
        print(f"| {os.path.basename(r['model'].rstrip('/'))} | {p} | {o['weight_bytes'] / 1e9:.2f} "
              f"| {step / 1e6:.0f} | {o.get('decode_expert_bytes_per_step', 0) / 1e6:.0f} "
              f"| {o['expert_reads_per_step']:.1f} | {o['decode_weight_gb_s']:.1f} "
              f"| {limit:.1f}{'' if limit == read else ' (llama.cpp)' if limit == ll_bw else ' (HF)'} "
              f"| {o['decode_weight_gb_s'] / limit if limit else 0:.2f} "
              f"| {f'{ll_bw:.1f}' if ll_bw else 'n/a'} | {hf} |")


def cell_ratio(ours, theirs, key, fmt):
    """'ours / theirs | ratio' cells, or n/a with theirs' reason."""
    if "error" in theirs:
        return f"| n/a ({theirs['error']}) | n/a "
    return f"| {ours[key]:{fmt}} / {theirs[key]:{fmt}} | {ours[key] / theirs[key]:.2f}x "


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--precisions", default="f32,bf16")
    ap.add_argument("--step-batches", default="", help="our decode step cost at these batches too")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--peers", default="hf,llamacpp", help="peers to run: hf, llamacpp (comma list)")
    ap.add_argument("--llamacpp-f32", default="f16", choices=("f16", "f32"),
                    help="GGUF type paired with our f32 row (default f16: same weight bytes)")
    ap.add_argument("--llamacpp-ref", default="q8_0",
                    help="extra GGUF types for llama.cpp's reference table (default q8_0; '' none)")
    ap.add_argument("--llamacpp-args", default="",
                    help="more llama-bench flags, e.g. '--repack 0' (shown in the header)")
    ap.add_argument("--bin", default=BIN)
    ap.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    ap.add_argument("--json-out", help="also write the JSON to this file (after each checkpoint)")
    a = ap.parse_args()
    precs = [p for p in a.precisions.split(",") if p]
    step_batches = [int(b) for b in a.step_batches.split(",") if b]
    for p in precs:
        if p not in ("f32", "bf16"):
            sys.exit(f"--precisions: '{p}' is not f32 or bf16")
    peers = [p for p in a.peers.split(",") if p]
    for p in peers:
        if p not in ("hf", "llamacpp"):
            sys.exit(f"--peers: '{p}' is not hf or llamacpp")
    pair = {"f32": a.llamacpp_f32, "bf16": "bf16"}
    ref_types = [t for t in a.llamacpp_ref.split(",") if t]
    ll_types = list(dict.fromkeys([pair[p] for p in precs] + ref_types))
    ll_err, ll_bench, ll_ver = None, None, {}
    if "llamacpp" not in peers:
        ll_err = "skipped: --peers"
    elif a.batch != 1:
        ll_err = "llama-bench runs one sequence: --batch 1 only"
    else:
        try:
            ll_bench, ll_ver = llamacpp_build()
        except (PeerError, ValueError, IndexError) as e:
            ll_err = str(e)
    shape = ["--batch", str(a.batch), "--prompt-len", str(a.prompt_len), "--gen", str(a.gen),
             "--threads", str(a.threads), "--repeat", str(a.repeat), "--json"]
    rows = []
    for m in a.models:
        row = {"model": m, "shardswap": {}, "transformers": {}, "steps": {}, "llamacpp": {},
               "loadavg": os.getloadavg(), "read_samples": []}
        for p in precs:
            row["read_samples"].append(read_sample(a))
            row["shardswap"][p] = run_json([a.bin, "bench", "forward", "--model", m,
                                            "--compute", p] + shape)
            if "hf" in peers:
                row["read_samples"].append(read_sample(a))
            row["transformers"][p] = (hf_bench(a, m, p, shape) if "hf" in peers
                                      else {"error": "skipped: --peers"})
            row["steps"][p] = {}
            for b in step_batches:
                sh = list(shape)
                sh[sh.index("--batch") + 1] = str(b)
                sh[sh.index("--repeat") + 1] = str(min(a.repeat, 2))
                row["steps"][p][b] = run_json([a.bin, "bench", "forward", "--model", m,
                                               "--compute", p] + sh)
        if not ll_err:
            row["read_samples"].append(read_sample(a))
        for t in ll_types:
            row["llamacpp"][t] = ({"error": ll_err} if ll_err else llamacpp_bench(a, ll_bench, m, t))
            if "error" in row["llamacpp"][t] and row["llamacpp"][t]["error"].startswith("convert"):
                for t2 in ll_types:  # one converter, one answer: do not retry each type
                    row["llamacpp"].setdefault(t2, row["llamacpp"][t])
                break
        if not ll_err:
            row["read_samples"].append(read_sample(a))
        row["llamacpp_version"] = ll_ver or {"error": ll_err}
        rows.append(row)
        if a.json_out:  # after every checkpoint: a long run interrupted keeps what it measured
            with open(a.json_out, "w") as fh:
                json.dump(rows, fh, indent=1)
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"batch {a.batch}, prompt {a.prompt_len}, gen {a.gen}, {a.threads} threads, "
          f"best of {a.repeat}; tok/s")
    print("load average at start of each checkpoint (%d CPUs): " % os.cpu_count()
          + ", ".join("%.1f" % r["loadavg"][0] for r in rows))
    if ll_ver:
        print(f"llama.cpp {ll_ver.get('llama_cpp_commit')} (from llama-cpp-python "
              f"{ll_ver.get('llama_cpp_python')}), llama-bench on GGUF from its convert_hf_to_gguf.py; "
              f"pairing: our f32 row vs {a.llamacpp_f32} GGUF, bf16 vs bf16 GGUF; "
              f"decode at depth {a.prompt_len}"
              + (f"; llama-bench {a.llamacpp_args}" if a.llamacpp_args else "")
              + f"; ggml-cpu -march=native: {ll_ver.get('march_native', '?')}")
    else:
        print(f"llama.cpp: n/a ({ll_err})")
    steps_h = "".join(f" | decode ms/step b{a.batch} / b{b} (ratio)" for b in step_batches)
    print("| checkpoint | weights | compute | prefill ours / HF | ratio | vs best HF "
          "| decode ours / HF | ratio | vs best HF | decode GB/s | read GB/s best (slowest) "
          "| peer GB/s llama.cpp / HF | limit GB/s | decode / limit"
          + steps_h + " | llama.cpp GGUF | prefill ours / llama.cpp | ratio "
          "| decode ours / llama.cpp | ratio |")
    print("|---" * (19 + len(step_batches)) + "|")
    for r in rows:
        hf_ok = [t for t in r["transformers"].values() if "error" not in t]
        best_pf = max((t["prefill_tok_s"] for t in hf_ok), default=0)
        best_dc = max((t["decode_tok_s"] for t in hf_ok), default=0)
        for p in precs:
            o, t = r["shardswap"][p], r["transformers"][p]
            ll = r["llamacpp"].get(pair[p], {"error": ll_err or "not run"})
            read, read_min = read_figures(o, r["read_samples"])
            # the limit is never below what a peer streams on the same machine in this run
            ll_bw, hf_bw = peer_gbs(o, p, t, ll)
            limit = max(read, ll_bw, hf_bw)
            src = ("" if limit == read else " (llama.cpp)" if limit == ll_bw else " (HF)")
            peer_cell = " / ".join(f"{v:.1f}" if v else "n/a" for v in (ll_bw, hf_bw))
            best = (lambda key, b: f"| {o[key] / b:.2f}x " if b else "| n/a ")
            print(f"| {os.path.basename(r['model'].rstrip('/'))} "
                  f"| {o['weight_dtype']} {o['weight_bytes'] / 1e9:.2f} GB | {p} "
                  + cell_ratio(o, t, "prefill_tok_s", ".0f") + best("prefill_tok_s", best_pf)
                  + cell_ratio(o, t, "decode_tok_s", ".1f") + best("decode_tok_s", best_dc)
                  + f"| {o['decode_weight_gb_s']:.1f} | {read:.1f} ({read_min:.1f}) | {peer_cell} "
                  f"| {limit:.1f}{src} "
                  f"| {o['decode_weight_gb_s'] / limit if limit else 0:.2f} "
                  + "".join(f"| {o['decode_ms_per_step']:.1f} / {sb['decode_ms_per_step']:.1f} "
                            f"({sb['decode_ms_per_step'] / o['decode_ms_per_step']:.2f}x) "
                            for sb in (r["steps"][p][b] for b in step_batches))
                  + (f"| n/a ({ll['error']}) | n/a | n/a | n/a | n/a " if "error" in ll
                     else f"| {gguf_label(pair[p], ll)} " + cell_ratio(o, ll, "prefill_tok_s", ".0f")
                     + cell_ratio(o, ll, "decode_tok_s", ".1f")) + "|")
    moe_table(rows, precs, pair, ll_err)
    if not ll_types or not rows or "llamacpp" not in peers:
        return
    # llama.cpp's own rows: every GGUF it ran, the reference types too, against our bf16
    # row (or our only row), so Q8_0 reads as "what llama.cpp is usually run as".
    op = "bf16" if "bf16" in precs else precs[0]
    print()
    print(f"llama.cpp alone (tok/s, best of {a.repeat}); ours = our {op} row")
    print("| checkpoint | GGUF | size | prefill llama.cpp | decode llama.cpp "
          "| prefill ours / llama.cpp | ratio | decode ours / llama.cpp | ratio |")
    print("|---" * 9 + "|")
    for r in rows:
        o = r["shardswap"][op]
        for gt in ll_types:
            ll = r["llamacpp"].get(gt, {"error": ll_err or "not run"})
            name = os.path.basename(r["model"].rstrip("/"))
            if "error" in ll:
                print(f"| {name} | {gt} | n/a ({ll['error']}) | n/a | n/a | n/a | n/a | n/a | n/a |")
                continue
            print(f"| {name} | {gguf_label(gt, ll)} | {ll['model_size'] / 1e9:.2f} GB | {ll['prefill_tok_s']:.0f} "
                  f"| {ll['decode_tok_s']:.1f} " + cell_ratio(o, ll, "prefill_tok_s", ".0f")
                  + cell_ratio(o, ll, "decode_tok_s", ".1f") + "|")

if __name__ == "__main__":
    main()
