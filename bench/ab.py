"""Two accelnet builds alone, side by side: scenario 1 of bench.py (2 KiB responses over
keep-alive, 64 connections, wrk on CPU 0, the proxies and one nginx origin on CPU 1), the two
interleaved over rounds with the order flipped each round, and nothing else measured.

On a busy machine a run of four contestants (bench.py --baseline) spreads each round over
minutes of changing load; two builds alone, a few seconds apart, see nearly the same machine.
CPU per request is the proxy's task-clock over the round (perf stat on its pid; the
/proc/PID/stat figure, in clock ticks, is printed beside) divided by the requests wrk counted.
It prints B's figures over A's as the median of same-round ratios [min-max], then the raw
rounds as JSON. Nothing here asserts a timing.

Usage: /usr/bin/python3 bench/ab.py A_BIN B_BIN [--rounds 8] [--seconds 3] [--workers 1]
"""

import argparse
import json
import statistics
import sys

import bench as B


def task_clock_start(pid):
    return B.perf_count_start(pid, "task-clock")


def task_clock_stop(p):
    """Milliseconds of CPU the pid's threads used, or None where perf could not count."""
    return B.perf_count_stop(p, "task-clock")



def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=1)
    a = ap.parse_args()
    B.raise_nofile()
    run = B.Run()
    fig = {"A": [], "B": []}
    try:
        origin = B.start_small_origin(run)
        procs = {"A": B.start_accelnet(run, [origin], binary=a.a, workers=a.workers),
                 "B": B.start_accelnet(run, [origin], binary=a.b, workers=a.workers)}
        for p, port in procs.values():  # warm-up: connections, caches, page faults
            B.wrk(port, "/small", 1, 64)
        for r in range(a.rounds):
            for name in ("A", "B") if r % 2 == 0 else ("B", "A"):
                p, port = procs[name]
                tc = task_clock_start(p.pid)
                c0 = B.proc_cpu_s(p.pid)
                w = B.wrk(port, "/small", a.seconds, 64)
                c1 = B.proc_cpu_s(p.pid)
                ms = task_clock_stop(tc)
                req = max(w["requests"], 1)
                fig[name].append({"round": r, "rps": w["requests"] / (w["duration_us"] / 1e6),
                                  "p99_ms": w["p99_ms"], "stat_us": (c1 - c0) * 1e6 / req,
                                  "task_clock_us": ms * 1e3 / req if ms else None})
                print(name, json.dumps(fig[name][-1]), file=sys.stderr, flush=True)
    finally:
        run.cleanup()
    print(f"B = {a.b}\nA = {a.a}\n{a.rounds} rounds of {a.seconds} s, {a.workers} worker(s)")
    for key in ("task_clock_us", "stat_us", "rps", "p99_ms"):
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
