#!/usr/bin/env python3
"""A process of the job dies (SIGKILL) while the others wait for it in an
all-reduce: mpirun must end the job within --limit seconds, exit non-zero
and name the dead process's rank (OpenMPI's default: a dead rank aborts the
job). Fails on a hang, a zero exit or a message that names no rank.

    killed_rank.py MPIRUN_ARGS... -- PROGRAM
"""
import re
import subprocess
import sys
import time

def main():
    argv = sys.argv[1:]
    limit = 60.0
    if argv[:1] == ["--limit"]:
        limit, argv = float(argv[1]), argv[2:]
    cmd = argv
    n = int(cmd[cmd.index("-n") + 1])
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=limit)
    except subprocess.TimeoutExpired:
        print(f"FAIL: the job still ran {limit:.0f} s after a process died (a hang)")
        return 1
    took = time.monotonic() - t0
    out = p.stdout.decode(errors="replace")
    dead = n - 1
    named = re.search(rf"rank {dead}\b", out) is not None
    print(out[-2000:])
    print(f"exit {p.returncode} after {took:.1f} s; names rank {dead}: {named}")
    if p.returncode == 0:
        print("FAIL: the job exited 0 though a process died")
        return 1
    if not named:
        print(f"FAIL: nothing names rank {dead}")
        return 1
    print("ok")
    return 0

if __name__ == "__main__":
    sys.exit(main())
