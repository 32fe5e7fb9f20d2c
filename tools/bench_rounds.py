#!/usr/bin/env python3
"""Decode (and prefill) of shardswap against llama.cpp on the same weights, in
interleaved rounds, judged per round against the read limit measured in that
round: the comparison that holds on a shared machine whose memory speed drifts
by tens of percent within minutes.

    python3 tools/bench_rounds.py --models M [M ...] [--rounds 4] [--threads 2] \
        [--prompt-len 16] [--gen 64] [--repeat 3] [--step-batches 8] [--baseline-bin OLD] [--json] [--json-out FILE]

Each M is a Hugging Face checkpoint directory (ours with --compute bf16,
llama.cpp on its bf16 GGUF, converted and cached as tools/bench_compare.py
does) or a .gguf file (both run that file; ours in bf16 mode, x quantized per
block as llama.cpp does). A round runs a read sample (`bench read`), then
ours (`bench forward --batch 1 --repeat R`), llama-bench's decode (`-p 0 -n
GEN -d PROMPT -r R`) and prefill (`-p PROMPT -n 0`), and with --baseline-bin
the old binary's `bench forward`, in an order that rotates by one each round
(ours first in round 1, llama.cpp in round 2, ...: a phase of the machine
favours no program by its place; the JSON's "order" says which), then with
--step-batches B[,B...] batch B timed beside batch 1 in one process (`bench
forward --step-batch B`: the median of its runs' step-time ratios, which the
machine's drift between processes does not move): the first B in ours' run of
the round, any other B in a run of its own after the round's programs.
Every figure is the best of its R repetitions. A round's read limit is the
largest of the read samples around it (the one before it and the one before
the next round), `bench forward`'s own samples in that round, and llama.cpp's
GGUF bytes x its decode steps/s in that round, so the limit is never below
what the peer streamed. The table gives each round and the medians: ours /
llama.cpp per round (its median is the comparison), ours' weight GB/s / the
round's limit, ours' `decode / read, paired` (`bench forward`: each of its
runs against the read samples just before and just after it, the median over
the runs, which a read rate drifting between phases moves less), and with
--baseline-bin new / old per round.
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_compare as bc  # noqa: E402  (same folder: its llama.cpp and read helpers)


def ours(binary, m, a, step_batch=0):
    """bench forward at batch 1 (with step_batch, batch step_batch timed beside it in the
    same process: its JSON's step_ratio)"""
    out = bc.run_peer([binary, "bench", "forward", "--model", m, "--compute", "bf16",
                       "--batch", "1", "--prompt-len", str(a.prompt_len), "--gen", str(a.gen),
                       "--threads", str(a.threads), "--repeat", str(a.repeat), "--json"]
                      + (["--step-batch", str(step_batch)] if step_batch else []),
                      f"{binary} bench forward")
    return json.loads(out.strip().splitlines()[-1])


def one_model(m, a, bench):
    gguf = m if m.endswith(".gguf") else bc.gguf_path(m, "bf16")
    rounds, reads = [], [bc.read_sample(a)]
    # the runs of a round in a rotating order: a machine whose read rate
    # moves in phases of a minute or so (AMD EPYC Zen 4, 2026-12-07: ours,
    # first in every round, in the slow phase three rounds running) should
    # not favour one program by its place in the round
    first = a.step_batches[0] if a.step_batches else 0
    runs = [("ours", lambda: ours(a.bin, m, a, first)),
            ("llamacpp", lambda: bc.llamacpp_bench_file(a, bench, gguf, os.path.basename(gguf)))]
    if a.baseline_bin:
        runs.append(("baseline", lambda: ours(a.baseline_bin, m, a)))
    for i in range(a.rounds):
        r = {"round": i + 1, "loadavg": os.getloadavg()[0]}
        order = runs[i % len(runs):] + runs[:i % len(runs)]
        r["order"] = [name for name, _ in order]
        for name, run in order:
            r[name] = run()
            if name == "llamacpp" and "error" in r["llamacpp"]:
                raise bc.PeerError(r["llamacpp"]["error"])
        r["steps"] = {b: r["ours"] if b == first else ours(a.bin, m, a, b)
                      for b in a.step_batches}
        reads.append(bc.read_sample(a))
        rounds.append(r)
    for i, r in enumerate(rounds):
        o, ll = r["ours"], r["llamacpp"]
        ll_gbs = (ll["model_size"] or 0) * ll["decode_tok_s"] / 1e9
        # the samples on either side of the round and bench forward's own in it
        r["read_gb_s"] = max(bc.read_figures(o, reads[i:i + 2])[0],
                             bc.read_figures(r.get("baseline", {}), [])[0])
        r["limit_gb_s"] = max(r["read_gb_s"], ll_gbs)
        r["limit_source"] = "read" if r["limit_gb_s"] == r["read_gb_s"] else "llama.cpp"
        r["llamacpp"]["gb_s"] = ll_gbs
        r["decode_ratio"] = o["decode_tok_s"] / ll["decode_tok_s"]
        r["prefill_ratio"] = o["prefill_tok_s"] / ll["prefill_tok_s"]
        r["ours_of_limit"] = o["decode_weight_gb_s"] / r["limit_gb_s"]
        r["llamacpp_of_limit"] = ll_gbs / r["limit_gb_s"]
        # each of our runs against the read samples just before and after it
        r["ours_paired"] = o["decode_vs_read_paired"]
        if a.baseline_bin:
            r["new_over_old"] = o["decode_tok_s"] / r["baseline"]["decode_tok_s"]
        for b, sb in r["steps"].items():
            r[f"step_b{b}_over_b1"] = sb["step_ratio"]
    keys = (("decode_ratio", "prefill_ratio", "ours_of_limit", "llamacpp_of_limit", "limit_gb_s",
             "ours_paired")
            + (("new_over_old",) if a.baseline_bin else ())
            + tuple(f"step_b{b}_over_b1" for b in a.step_batches))
    med = {k: statistics.median(r[k] for r in rounds) for k in keys}
    return {"model": m, "gguf": gguf, "cpu": cpu_name(), "rounds": rounds, "median": med}


def cpu_name():
    """The CPU's model name, family and model number, as /proc/cpuinfo gives them (AMD
    family 25 is Zen 3/4, 26 Zen 5): machines of one kind can differ."""
    info = {}
    try:
        with open("/proc/cpuinfo") as fh:
            for ln in fh:
                k, _, v = ln.partition(":")
                info.setdefault(k.strip(), v.strip())
    except OSError:
        return "unknown CPU"
    return (f"{info.get('model name', '?')}, family {info.get('cpu family', '?')} "
            f"model {info.get('model', '?')}")


def print_table(res, a):
    print(cpu_name())
    print(f"batch 1, prompt {a.prompt_len}, gen {a.gen}, {a.threads} threads, best of {a.repeat} "
          f"per run, {a.rounds} interleaved rounds; tok/s")
    old = (" | old decode | new / old" if a.baseline_bin else "") + "".join(
        f" | b{b} step / b1" for b in a.step_batches)
    print("| model | round | load | decode ours / llama.cpp | ratio | prefill ours / llama.cpp "
          "| ratio | ours GB/s | llama.cpp GB/s | limit GB/s | ours / limit | llama.cpp / limit"
          " | ours / read, paired" + old + " |")
    print("|---" * (13 + (2 if a.baseline_bin else 0) + len(a.step_batches)) + "|")
    for x in res:
        name = os.path.basename(x["model"].rstrip("/"))
        for r in x["rounds"]:
            o, ll = r["ours"], r["llamacpp"]
            src = "" if r["limit_source"] == "read" else " (llama.cpp)"
            tail = (f" | {r['baseline']['decode_tok_s']:.1f} | {r['new_over_old']:.2f}x"
                    if a.baseline_bin else "") + "".join(
                f" | {r[f'step_b{b}_over_b1']:.2f}x" for b in a.step_batches)
            print(f"| {name} | {r['round']} | {r['loadavg']:.1f} "
                  f"| {o['decode_tok_s']:.1f} / {ll['decode_tok_s']:.1f} | {r['decode_ratio']:.2f}x "
                  f"| {o['prefill_tok_s']:.0f} / {ll['prefill_tok_s']:.0f} | {r['prefill_ratio']:.2f}x "
                  f"| {o['decode_weight_gb_s']:.1f} | {ll['gb_s']:.1f} | {r['limit_gb_s']:.1f}{src} "
                  f"| {r['ours_of_limit']:.2f} | {r['llamacpp_of_limit']:.2f} "
                  f"| {r['ours_paired']:.2f}{tail} |")
        md = x["median"]
        tail = (f" | | {md['new_over_old']:.2f}x" if a.baseline_bin else "") + "".join(
            f" | **{md[f'step_b{b}_over_b1']:.2f}x**" for b in a.step_batches)
        print(f"| {name} | median | | | **{md['decode_ratio']:.2f}x** | | **{md['prefill_ratio']:.2f}x** "
              f"| | | {md['limit_gb_s']:.1f} | **{md['ours_of_limit']:.2f}** "
              f"| {md['llamacpp_of_limit']:.2f} | **{md['ours_paired']:.2f}**{tail} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", required=True,
                    help="checkpoint directories or .gguf files")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--bin", default=bc.BIN)
    ap.add_argument("--llamacpp-args", default="",
                    help="more llama-bench flags, e.g. '--repack 0'")
    ap.add_argument("--step-batches", default="",
                    help="batch B timed beside batch 1 in one process, per round "
                    "(B[,B...]): the step cost of B over 1")
    ap.add_argument("--baseline-bin", help="an older shardswap binary, run in every round too")
    ap.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    ap.add_argument("--json-out", help="also write the JSON to this file")
    a = ap.parse_args()
    try:
        a.step_batches = [int(b) for b in a.step_batches.split(",") if b]
    except ValueError:
        sys.exit(f"--step-batches: '{a.step_batches}' is not a comma list of batch sizes")
    if a.rounds < 1 or a.repeat < 1 or a.gen < 1 or a.prompt_len < 1:
        sys.exit("--rounds, --repeat, --gen and --prompt-len must be at least 1")
    for m in a.models:
        if not os.path.exists(m):
            sys.exit(f"--models: {m}: no such file or directory")
    try:
        bench, _ = bc.llamacpp_build()
        res = [one_model(m, a, bench) for m in a.models]
    except bc.PeerError as e:
        sys.exit(f"bench_rounds: {e}")
    if a.json_out:
        with open(a.json_out, "w") as fh:
            json.dump(res, fh, indent=1)
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        print_table(res, a)


if __name__ == "__main__":
    main()
