"""bench/l4.py: L4 mode (issue 31, listen.mode: tcp) against HAProxy `mode tcp`, side by side.

Two workloads, each through accelnet (one worker) and HAProxy (one thread), and directly to
the backend for reference, in interleaved rounds (the order of the proxies flips each round):

HAProxy runs twice: as configured by default, and with `option splice-auto` (it then splices
too, where its heuristics say it pays).

- "echo": bench/l4echo.c's echo server behind the proxy; its client keeps CONNS connections
  each writing BLOCK bytes and reading them back before the next (two settings: bulk blocks,
  where throughput counts, and small ones, where each round trip's cost does). Figures: bytes
  echoed per second (each byte crosses the proxy twice, once each way) and the proxy's CPU
  time (user + system, /proc/PID/stat) per MiB echoed.
- "redis": redis-server behind the proxy, `redis-benchmark -t set,get` through it. Figures:
  requests per second (the two tests' mean) and the proxy's CPU time per request.

The load generators run on CPU 0, the servers (backend and proxy) on CPU 1, as bench.py does.
Medians over the rounds. Nothing here asserts a timing: this measures, it does not test.

Usage: bench/run --only l4 [--quick] [--rounds N] [--seconds S] [--report results.json]
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the run, the ports, the CPU figures)

L4ECHO = os.path.join(bench.ROOT, "build", "l4echo")
ECHO = {"bulk": dict(conns=8, block=256 << 10), "small": dict(conns=32, block=128)}
REDIS_CONNS = 50


def start_accelnet(run, backend):
    port = bench.free_port()
    cfg = (f"workers: 1\nlisten:\n  - address: 127.0.0.1:{port}\n    mode: tcp\n"
           "    pool: b\nlimits: {max_connections: 20000}\n"
           f"pools:\n  - name: b\n    backends: [{{address: 127.0.0.1:{backend}}}]\n")
    p = run.start([bench.ACCELNET, "proxy", "-c", run.write(f"accelnet-{port}.yaml", cfg),
                   "--log-level", "error"], port, name="accelnet")
    return p, port


def start_haproxy(run, backend, splice=False):
    """HAProxy as set up for TCP; <splice>: with `option splice-auto` (off by default), so it
    splices as accelnet does where it judges it pays (its pipes take descriptors too: a
    quarter of maxconn by default, so maxconn is lower to stay within the limit)."""
    port = bench.free_port()
    cfg = f"""global
    nbthread 1
    maxconn {bench.HAPROXY_MAXCONN * 3 // 4 if splice else bench.HAPROXY_MAXCONN}
defaults
    mode tcp
    timeout connect 5s
    timeout client 300s
    timeout server 300s
{"    option splice-auto" if splice else ""}
frontend f
    bind 127.0.0.1:{port}
    default_backend b
backend b
    server s0 127.0.0.1:{backend}
"""
    p = run.start(["haproxy", "-db", "-f", run.write(f"haproxy-{port}.cfg", cfg)], port,
                  name="haproxy")
    return p, port


def load(argv):
    return subprocess.run(["taskset", "-c", bench.LOAD_CPU, *argv], capture_output=True,
                          text=True, check=True).stdout


def echo_once(port, pid, setting, seconds):
    cpu0 = bench.proc_cpu_s(pid) if pid else 0
    out = json.loads(load([L4ECHO, "client", str(port), str(setting["conns"]), str(seconds),
                           str(setting["block"])]))
    cpu = bench.proc_cpu_s(pid) - cpu0 if pid else 0
    mib = out["bytes"] / (1 << 20)
    return {"mib_per_s": round(mib / seconds, 1), "round_trips_per_s": round(
        out["round_trips"] / seconds), "cpu_ms_per_mib": round(cpu * 1000 / mib, 3) if mib else 0}


def redis_once(port, pid, n):
    cpu0 = bench.proc_cpu_s(pid) if pid else 0
    out = load(["redis-benchmark", "-p", str(port), "-t", "set,get", "-n", str(n), "-c",
                str(REDIS_CONNS), "-q", "--csv"])
    cpu = bench.proc_cpu_s(pid) - cpu0 if pid else 0
    rps = [float(line.split(",")[1].strip('"')) for line in out.splitlines()[1:] if line]
    return {"requests_per_s": round(statistics.mean(rps)),
            "cpu_us_per_request": round(cpu * 1e6 / (2 * n), 2) if pid else 0}


def medians(rows):
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=200000)
    ap.add_argument("--report")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.seconds, a.requests = 2, 2, 50000
    if not shutil.which("redis-server") or not shutil.which("haproxy"):
        sys.exit("bench/l4.py needs redis-server and haproxy (scripts/deps.sh installs them)")
    run = bench.Run()
    results = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
               "rounds": a.rounds, "seconds": a.seconds, "echo": {}, "redis": {}}
    try:
        eport = bench.free_port()
        run.start([L4ECHO, "server", str(eport)], eport, name="echo")
        rport = bench.free_port()
        run.start(["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no"], rport, name="redis")
        proxies = {}
        for name, start in (("accelnet", start_accelnet), ("haproxy", start_haproxy),
                            ("haproxy splice-auto",
                             lambda r, b: start_haproxy(r, b, splice=True))):
            pe, pe_port = start(run, eport)
            pr, pr_port = start(run, rport)
            proxies[name] = dict(echo=(pe_port, pe.pid), redis=(pr_port, pr.pid))
        proxies["direct"] = dict(echo=(eport, None), redis=(rport, None))
        rows = {w: {n: [] for n in proxies} for w in [*ECHO, "redis"]}
        order = list(proxies)
        for r in range(a.rounds):
            for name in (order if r % 2 == 0 else order[::-1]):
                port, pid = proxies[name]["echo"]
                for w, setting in ECHO.items():
                    rows[w][name].append(echo_once(port, pid, setting, a.seconds))
                port, pid = proxies[name]["redis"]
                rows["redis"][name].append(redis_once(port, pid, a.requests))
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
        for w in ECHO:
            results["echo"][w] = {"setting": ECHO[w],
                                  **{n: medians(rows[w][n]) for n in proxies}}
        results["redis"] = {"conns": REDIS_CONNS, "requests": a.requests,
                            **{n: medians(rows["redis"][n]) for n in proxies}}
    finally:
        run.cleanup()
    print(json.dumps(results, indent=2))
    if a.report:
        with open(a.report, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
