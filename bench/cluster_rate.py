#!/usr/bin/python3
"""bench/cluster_rate.py: issue 16's must-show, measured (never a test: nothing here gates CI).

Three accelnet instances share one Redis (cluster: {sync_ms: 100}) in front of one
simulator; one tenant's requests are sent through all three at once, far faster than its
per_tenant rate, for --seconds (60). Redis is stopped (SIGKILL) at --stop-at (30 s; 0: never).
Reported per second and per phase: requests passed (200) against the configured rate, and
what each instance's accelnet_cluster_redis_up said. Expected: with Redis, rate x T + burst
within the overshoot bound (docs/operations.md, Many instances); without, each instance at
1/3 of the rate, still about one rate together, and every request answered (200 or 429).

Usage: bench/cluster_rate.py [--seconds S] [--stop-at S] [--rate R] [--json OUT]
"""

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACCELNET = os.path.join(ROOT, "build", "accelnet")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what):
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{what} did not start")


def cluster_up(admin):
    c = http.client.HTTPConnection("127.0.0.1", admin, timeout=5)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    for line in text.splitlines():
        if line.startswith("accelnet_cluster_redis_up "):
            return int(float(line.split()[1]))
    return -1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--stop-at", type=float, default=30)
    ap.add_argument("--rate", type=int, default=20)
    ap.add_argument("--burst", type=int, default=20)
    ap.add_argument("--json")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="accelnet-cluster-bench-")
    procs = []

    def start(argv, name, port):
        p = subprocess.Popen(argv, stdout=open(os.path.join(tmp, name + ".log"), "wb"),
                             stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(p)
        wait_port(port, p, name)
        return p

    try:
        rport, sport = free_port(), free_port()
        redis = start([shutil.which("redis-server") or "/usr/bin/redis-server", "--port",
                       str(rport), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                       "--dir", tmp], "redis", rport)
        start([ACCELNET, "sim", "--listen", f"127.0.0.1:{sport}", "--name", "a",
               "--latency-ms", "0", "--token-ms", "0"], "sim", sport)
        inst = []
        for i in range(3):
            port, admin = free_port(), free_port()
            path = os.path.join(tmp, f"p{i}.yaml")
            with open(path, "w") as f:
                f.write(f"workers: 2\nlisten: [127.0.0.1:{port}]\n"
                        f"admin: {{address: 127.0.0.1:{admin}}}\n"
                        f"cluster: {{redis: 127.0.0.1:{rport}, sync_ms: 100}}\n"
                        f"pools:\n  - name: p\n    backends: [{{address: 127.0.0.1:{sport}}}]\n"
                        f"routes:\n  - pool: p\n    tenant_header: X-Tenant\n"
                        f"    rate_limit: {{per_tenant: {a.rate}/s, burst: {a.burst}}}\n")
            start([ACCELNET, "proxy", "-c", path], f"proxy{i}", port)
            inst.append((port, admin))
        deadline = time.monotonic() + 15
        while not all(cluster_up(ad) == 1 for _, ad in inst):
            if time.monotonic() > deadline:
                sys.exit("the instances did not reach Redis")
            time.sleep(0.05)

        secs = int(a.seconds)
        passed = [[0] * secs for _ in inst]
        asked = [[0] * secs for _ in inst]
        other = [0]
        barrier = threading.Barrier(len(inst) + 1)
        t0 = [0.0]

        def client(i, port):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            barrier.wait()
            while True:
                now = time.monotonic() - t0[0]
                if now >= a.seconds:
                    break
                c.request("GET", "/x", headers={"X-Tenant": "t1"})
                r = c.getresponse()
                r.read()
                s = min(int(now), secs - 1)
                asked[i][s] += 1
                if r.status == 200:
                    passed[i][s] += 1
                elif r.status != 429:
                    other[0] += 1
                time.sleep(0.002)

        ts = [threading.Thread(target=client, args=(i, p)) for i, (p, _) in enumerate(inst)]
        for t in ts:
            t.start()
        t0[0] = time.monotonic()
        barrier.wait()
        up_seen = []
        stopped = False
        while any(t.is_alive() for t in ts):
            el = time.monotonic() - t0[0]
            if a.stop_at and not stopped and el >= a.stop_at:
                redis.send_signal(signal.SIGKILL)
                stopped = True
            if int(el) % 5 == 0 and (not up_seen or up_seen[-1][0] != int(el)):
                up_seen.append((int(el), [cluster_up(ad) for _, ad in inst]))
            time.sleep(0.05)
        for t in ts:
            t.join()

        per_s = [sum(passed[i][s] for i in range(len(inst))) for s in range(secs)]
        stop = int(a.stop_at) if a.stop_at else secs
        with_redis = sum(per_s[:stop])
        without = sum(per_s[stop:])
        res = {
            "rate": a.rate, "burst": a.burst, "instances": len(inst), "seconds": secs,
            "stop_at": a.stop_at,
            "asked": sum(map(sum, asked)), "other_status": other[0],
            "passed_per_second": per_s,
            "passed_per_instance": [sum(p) for p in passed],
            "with_redis": {"passed": with_redis, "allowed": a.rate * stop + a.burst,
                           "ratio": round(with_redis / (a.rate * stop + a.burst), 4)},
            "redis_up_seen": up_seen,
        }
        if a.stop_at:
            res["without_redis"] = {"passed": without, "rate_x_t": a.rate * (secs - stop),
                                    "ratio": round(without / (a.rate * (secs - stop)), 4)}
        res["whole_run"] = {"passed": sum(per_s), "rate_x_t_plus_burst": a.rate * secs + a.burst,
                            "ratio": round(sum(per_s) / (a.rate * secs + a.burst), 4)}
        print(json.dumps(res, indent=1))
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
