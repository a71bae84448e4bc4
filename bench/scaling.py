#!/usr/bin/python3
"""bench/scaling.py: requests/s as workers are added (issue 31's multi-core scaling), accelnet
beside HAProxy, on this machine; never a test: nothing here gates CI.

Issue 31 asks for requests/s with 1, 2, 4 and 8 workers on the device machine (16 cores) when
one is lent, otherwise on this machine with the load generator pinned apart. This machine has
two cores, so here the load generator (`wrk`, 64 keep-alive connections, 2 KiB answers) and the
origin (nginx, one worker) share CPU 0, and the proxy has CPU 1 alone at every worker count:
what the figures show is what added workers cost on one core (more threads, more event loops,
shared state between workers), not more cores. Contestants: accelnet with `workers: N`, HAProxy
with `nbthread N`. The order flips each round; medians. CPU µs per request is the proxy's user +
system time over the run divided by the requests wrk counted; the load CPU's use (wrk and the
origin together, % of CPU 0) says whether the load side was the limit.

Usage: bench/run --only scaling [--workers 1,2,4,8] [--rounds 4] [--seconds 4] [--json OUT]
"""

import argparse
import datetime
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--conns", type=int, default=64)
    ap.add_argument("--json")
    a = ap.parse_args()
    bench.raise_nofile()
    run = bench.Run()
    counts = [int(n) for n in a.workers.split(",")]
    res = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H-%M-%SZ"),
           "versions": bench.versions(), "load_avg": os.getloadavg()[0], "rounds": a.rounds,
           "seconds": a.seconds, "conns": a.conns, "results": {}}
    try:
        origin = bench.start_small_origin(run, cpu=bench.LOAD_CPU)
        origin_pid = run.procs[-1].pid
        for n in counts:
            procs = {"accelnet": bench.start_accelnet(run, [origin], workers=n),
                     "haproxy": bench.start_haproxy(run, [origin], threads=n)}
            for p, port in procs.values():
                bench.wrk(port, "/small", 1, a.conns)  # warm
            got = {name: [] for name in procs}
            for r in range(a.rounds):
                for name in (list(procs) if r % 2 == 0 else list(reversed(procs))):
                    p, port = procs[name]
                    c0, o0 = bench.proc_cpu_s(p.pid), bench.proc_cpu_s(origin_pid)
                    w = bench.wrk(port, "/small", a.seconds, a.conns)
                    c1, o1 = bench.proc_cpu_s(p.pid), bench.proc_cpu_s(origin_pid)
                    secs = w["duration_us"] / 1e6
                    w["rps"] = w["requests"] / secs
                    w["cpu_us_per_req"] = (c1 - c0) * 1e6 / max(w["requests"], 1)
                    w["origin_cpu"] = (o1 - o0) / secs
                    got[name].append(w)
            for p, port in procs.values():
                run.stop(p)
            res["results"][str(n)] = got
    finally:
        run.cleanup()
    rows = []
    for n, got in res["results"].items():
        for name, ws in got.items():
            med = lambda k: statistics.median(w[k] for w in ws)  # noqa: E731
            ha = got["haproxy"]
            ratio = statistics.median(w["rps"] / h["rps"] for w, h in zip(ws, ha))
            cpu_ratio = statistics.median(w["cpu_us_per_req"] / h["cpu_us_per_req"]
                                          for w, h in zip(ws, ha))
            rows.append([n, name, f"{med('rps'):,.0f}", f"{ratio:.2f}",
                         f"{med('cpu_us_per_req'):.1f}", f"{cpu_ratio:.2f}",
                         f"{med('p99_ms'):.2f}", f"{med('origin_cpu') * 100:.0f} %"])
    text = "\n".join([
        f"# Workers on one core {res['date']} (load average {res['load_avg']:.1f} before; "
        f"{a.rounds} rounds of {a.seconds} s, median)", "",
        bench.table(["workers", "proxy", "req/s", "÷ HAProxy", "CPU µs/req", "÷ HAProxy",
                     "p99 ms", "origin's CPU (of CPU 0, beside wrk)"], rows), ""])
    bench.emit(text, res, a.json)


if __name__ == "__main__":
    main()
