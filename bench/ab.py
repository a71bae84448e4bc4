"""Two accelnet builds alone, side by side: scenario 1 of bench.py (2 KiB responses over
keep-alive, 64 connections, wrk on CPU 0, the proxies and one nginx origin on CPU 1), the two
interleaved over rounds with the order flipped each round, and nothing else measured.

On a busy machine a run of four contestants (bench.py --baseline) spreads each round over
minutes of changing load; two builds alone, a few seconds apart, see nearly the same machine.
CPU per request is the proxy's task-clock over the round (perf stat on its pid; the
/proc/PID/stat figure, in clock ticks, is printed beside) divided by the requests wrk counted.
System calls per request are counted in the same perf stat (raw_syscalls:sys_enter, every
thread). It prints B's figures over A's as the median of same-round ratios [min-max], then the
raw rounds as JSON. Nothing here asserts a timing.

--env-a / --env-b NAME=VALUE (repeatable) start that build with those in its environment: one
binary on two event loops is `ab.py B B --env-a ACCELNET_IO=epoll --env-b ACCELNET_IO=io_uring`.

Usage: /usr/bin/python3 bench/ab.py A_BIN B_BIN [--rounds 8] [--seconds 3] [--workers 1]
       [--env-a NAME=VALUE]... [--env-b NAME=VALUE]...
"""

import argparse
import json
import os
import shlex
import signal
import shutil
import statistics
import subprocess
import sys
import time

import bench as B


EVENTS = ("task-clock", "raw_syscalls:sys_enter")


def perf_start(pid):
    """perf stat of EVENTS on every thread of <pid>, until perf_stop(); None without perf."""
    if not shutil.which("perf"):
        return None
    p = subprocess.Popen(["perf", "stat", "-x,", "-e", ",".join(EVENTS), "-p", str(pid)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(0.2)  # attached before the load starts
    return p if p.poll() is None else None


def perf_stop(p):
    """{event: count} (task-clock in milliseconds of CPU); counts perf could not take absent."""
    out = {}
    if p is None:
        return out
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    for line in err.splitlines():
        f = line.split(",")
        for ev in EVENTS:
            if len(f) > 2 and ev in line:
                try:
                    out[ev] = float(f[0])
                except ValueError:
                    pass
    return out


def with_env(run, binary, pairs, name):
    """<binary>, or a script that starts it with <pairs> (NAME=VALUE) in its environment
    (exec: the pid measured is the binary's)."""
    if not pairs:
        return binary
    path = run.write(f"{name}.sh", "#!/bin/sh\nexec env " + " ".join(shlex.quote(x) for x in pairs)
                     + " " + shlex.quote(os.path.abspath(binary)) + ' "$@"\n')
    os.chmod(path, 0o755)
    return path



def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--env-a", action="append", default=[])
    ap.add_argument("--env-b", action="append", default=[])
    a = ap.parse_args()
    B.raise_nofile()
    run = B.Run()
    fig = {"A": [], "B": []}
    try:
        origin = B.start_small_origin(run)
        bins = {"A": with_env(run, a.a, a.env_a, "a"), "B": with_env(run, a.b, a.env_b, "b")}
        procs = {k: B.start_accelnet(run, [origin], binary=v, workers=a.workers)
                 for k, v in bins.items()}
        for p, port in procs.values():  # warm-up: connections, caches, page faults
            B.wrk(port, "/small", 1, 64)
        for r in range(a.rounds):
            for name in ("A", "B") if r % 2 == 0 else ("B", "A"):
                p, port = procs[name]
                pc = perf_start(p.pid)
                c0 = B.proc_cpu_s(p.pid)
                w = B.wrk(port, "/small", a.seconds, 64)
                c1 = B.proc_cpu_s(p.pid)
                counts = perf_stop(pc)
                ms = counts.get("task-clock")
                calls = counts.get("raw_syscalls:sys_enter")
                req = max(w["requests"], 1)
                fig[name].append({"round": r, "rps": w["requests"] / (w["duration_us"] / 1e6),
                                  "p99_ms": w["p99_ms"], "stat_us": (c1 - c0) * 1e6 / req,
                                  "task_clock_us": ms * 1e3 / req if ms else None,
                                  "syscalls": calls / req if calls else None})
                print(name, json.dumps(fig[name][-1]), file=sys.stderr, flush=True)
    finally:
        run.cleanup()
    print(f"B = {a.b} {' '.join(a.env_b)}\nA = {a.a} {' '.join(a.env_a)}\n{a.rounds} rounds of {a.seconds} s, {a.workers} worker(s)")
    for key in ("task_clock_us", "stat_us", "syscalls", "rps", "p99_ms"):
        pairs = [(x[key], y[key]) for x, y in zip(fig["A"], fig["B"]) if x[key] and y[key]]
        if not pairs:
            continue
        ratio = [y / x for x, y in pairs]
        print(f"B/A {key:>13}: {statistics.median(ratio):.3f} [{min(ratio):.3f}-{max(ratio):.3f}]"
              f"   A {statistics.median(x for x, _ in pairs):.2f}"
              f"   B {statistics.median(y for _, y in pairs):.2f}")
    print(json.dumps(fig))


if __name__ == "__main__":
    main()
