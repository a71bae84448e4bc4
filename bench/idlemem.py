#!/usr/bin/python3
"""bench/idlemem.py: memory per idle keep-alive client connection, accelnet beside HAProxy and
nginx (issue 31's must-show; never a test: nothing here gates CI).

Each proxy in front of one nginx origin (a 2 KiB file), one worker each. For each of two
counts (default 5,000 and 10,000): a fresh proxy, one request to warm it, then `loadgen idle`
opens that many keep-alive connections at once, makes one request on each and holds them; the
proxy's VmRSS is read once every answer is in, and again once it has settled (unchanged for a
second: what the burst of requests took given back). The figures are the settled ones; the
first reading is kept in the JSON (rss_answered_kb, answered_per_conn). Reported per proxy:

- growth per connection: (RSS at the larger count - RSS at the smaller) / the difference in
  connections: what one more idle connection costs, without the fixed costs (free lists,
  pools, the upstream connections kept for reuse) that fill once and stay;
- held per connection at each count: (RSS held - RSS before) / connections, as scenario 4 of
  bench/bench.py reports it, fixed costs included.

The connections are to 127.0.0.1 from one load generator; the descriptor limit (ulimit -Hn)
bounds the counts (two descriptors a connection for a proxy).

--tls: the same over TLS, each proxy configured as bench/tls.py has them (TLS 1.3,
TLS_AES_128_GCM_SHA256, X25519, an ECDSA P-256 certificate; session tickets and caches as
there), the connections opened by `tlsload --mode idle` (a full handshake, one request, then
idle): what an idle TLS client costs, the TLS library's state for the connection included.

Usage: bench/run --only idlemem [--counts 5000,10000] [--tls] [--json OUT]
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import tls  # noqa: E402  (its proxies' TLS configurations and certificates)


def warm(port, cert):
    """One request, so that what the first request sets up is in the base."""
    if not cert:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/small", timeout=10).read()
        return
    out = subprocess.run([tls.TLSLOAD, "--target", f"127.0.0.1:{port}", "--mode", "idle",
                          "--conns", "1", "--duration", "10"], input="", capture_output=True,
                         text=True, timeout=30)
    if json.loads(out.stdout)["ok"] != 1:
        raise RuntimeError(f"no answer over TLS: {out.stdout} {out.stderr}")


def settled_rss(pid, step_s=0.25, still_s=1.0, most_s=20.0):
    """VmRSS once it has stopped moving: the connections are idle, but a proxy may still be
    giving back what the burst of their requests took (free lists trimmed on a timer, sends
    and receives still in flight on io_uring). Read every <step_s> until unchanged for
    <still_s>, at most <most_s>: (kB, seconds it took)."""
    t0 = time.monotonic()
    last, since = bench.proc_kb(pid, "VmRSS"), t0
    while time.monotonic() - t0 < most_s:
        time.sleep(step_s)
        now = bench.proc_kb(pid, "VmRSS")
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= still_s:
            break
    return last, round(since - t0, 2)


def one(run, start, origin, conns, cert=None):
    p, port = start(run, origin, cert) if cert else start(run, [origin])
    try:
        warm(port, cert)
        base = bench.proc_kb(p.pid, "VmRSS")
        gen = ([tls.TLSLOAD, "--mode", "idle", "--duration", "120"] if cert else
               [bench.LOADGEN, "idle", "--path", "/small", "--timeout-s", "120"])
        g = subprocess.Popen(["taskset", "-c", bench.LOAD_CPU, *gen, "--target",
                              f"127.0.0.1:{port}", "--conns", str(conns)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, preexec_fn=bench.raise_nofile)
        run.procs.append(g)
        report = json.loads(g.stdout.readline())
        answered = bench.proc_kb(p.pid, "VmRSS")
        held, settle_s = settled_rss(p.pid)
        g.stdin.close()
        g.wait(30)
        return {"conns": conns, "ok": report["ok"], "errors": report["errors"],
                "rss_base_kb": base, "rss_answered_kb": answered, "rss_held_kb": held,
                "settle_s": settle_s,
                "held_per_conn": (held - base) * 1024 / max(report["ok"], 1),
                "answered_per_conn": (answered - base) * 1024 / max(report["ok"], 1)}
    finally:
        run.stop(p)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--counts", default=f"{bench.IDLE_CONNS // 2},{bench.IDLE_CONNS}")
    ap.add_argument("--tls", action="store_true", help="TLS connections (see above)")
    ap.add_argument("--json")
    a = ap.parse_args()
    counts = [int(c) for c in a.counts.split(",")]
    bench.raise_nofile()
    run = bench.Run()
    res = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H-%M-%SZ"),
           "versions": bench.versions(), "counts": counts, "tls": a.tls, "results": {}}
    try:
        origin = bench.start_small_origin(run)
        cert = tls.make_cert(run, "ecdsa") if a.tls else None
        for name, start in (tls.PROXIES if a.tls else bench.PROXIES).items():
            res["results"][name] = [one(run, start, origin, n, cert) for n in counts]
    finally:
        run.cleanup()
    rows = []
    for name, rs in list(res["results"].items()):
        lo, hi = rs[0], rs[-1]
        slope = ((hi["rss_held_kb"] - lo["rss_held_kb"]) * 1024 / (hi["ok"] - lo["ok"])
                 if hi["ok"] > lo["ok"] else float("nan"))
        res.setdefault("growth_per_conn", {})[name] = slope
        rows.append([name, f"{slope:.0f}"] + [f"{r['held_per_conn']:.0f} ({r['ok']} held, "
                                              f"{r['errors']} errors)" for r in rs])
    text = "\n".join([f"# idle keep-alive {'TLS ' if a.tls else ''}connections {res['date']}", "",
                      bench.table(["proxy", "growth per connection B"]
                                  + [f"held per connection at {n} B" for n in counts], rows), ""])
    bench.emit(text, res, a.json)


if __name__ == "__main__":
    main()
