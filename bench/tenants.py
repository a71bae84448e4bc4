#!/usr/bin/python3
"""bench/tenants.py: issue 12's fairness must-show, measured (never a test: nothing here
gates CI).

Part 1, a flooding tenant and a light one on one pool: one simulated accelerator behind a
pool with max_concurrency SLOTS (the proxy's fair queue is the queue), every request
holding a slot for SERVICE ms. The light tenant sends Poisson arrivals at LIGHT req/s, first
alone, then beside a flooder sending 10x its share (half the pool's capacity) open loop.
Reported for the light tenant: p50/p99 queue wait (its latency less the service floor, the
least latency it saw alone) and p99 latency, alone and flooded, and its 503s.

Part 2, token limits: two tenants each kept at their tokens_per_minute by eight closed-loop
clients (a 429 retries after 50 ms), a mix of JSON and streamed completions with and without
max_tokens and with and without stream_options.include_usage; after a warm-up that spends
the bucket, the tokens served per tenant in a 60 s window, counted from the client side the
way the sim counts them (prompt = body bytes / 4, plus the completion: the usage when the
response has one, else the streamed text events), against tokens_per_minute.

Usage: bench/tenants.py [--seconds S] [--window S] [--json OUT]
"""

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACCELNET = os.path.join(ROOT, "build", "accelnet")

SLOTS, FIRST_MS, TOKENS, TOKEN_MS = 4, 100, 5, 20  # a slot is held 100 + 5 x 20 = 200 ms
SERVICE_MS = FIRST_MS + TOKENS * TOKEN_MS
CAPACITY = SLOTS * 1000 / SERVICE_MS  # 20 req/s
LIGHT = 4.0  # req/s: 40% of its share
FLOOD = 10 * CAPACITY / 2  # 10x its share: 100 req/s
TPM = 12000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc):
    for _ in range(300):
        if proc.poll() is not None:
            sys.exit(f"exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"nothing on port {port}")


class Procs:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="accelnet-tenants-")
        self.procs = []

    def start(self, argv, port):
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
        self.procs.append(p)
        wait_port(port, p)
        return p

    def sim(self, **opts):
        port = free_port()
        argv = [ACCELNET, "sim", "--listen", f"127.0.0.1:{port}"]
        for k, v in opts.items():
            argv += ["--" + k.replace("_", "-"), str(v)]
        self.start(argv, port)
        return port

    def proxy(self, body):
        port = free_port()
        path = os.path.join(self.dir, f"proxy-{port}.yaml")
        with open(path, "w") as f:
            f.write(f"workers: 2\nlisten: [127.0.0.1:{port}]\n"
                    "limits: {max_connections: 20000}\n" + body)
        self.start([ACCELNET, "proxy", "-c", path, "--log-level", "error"], port)
        return port

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        self.procs = []


async def post(port, body, tenant, stream=False):
    """One request on a new connection: (status, latency s, body text); the sim's planned
    service time, when it says, in post.service_ms."""
    t0 = time.monotonic()
    data = json.dumps(body).encode()
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return 0, time.monotonic() - t0, "", None
    try:
        w.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"X-Tenant: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                % (tenant.encode(), len(data), data))
        await w.drain()
        raw = await r.read()
    except OSError:
        return 0, time.monotonic() - t0, "", None
    finally:
        w.close()
    head, _, rest = raw.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0, time.monotonic() - t0, "", None
    lat = time.monotonic() - t0
    post.service_ms = None
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"x-sim-service-ms:"):
            post.service_ms = int(line.split(b":")[1])
    if b"chunked" in head.lower():
        out, i = b"", 0
        while True:
            j = rest.find(b"\r\n", i)
            if j < 0:
                break
            n = int(rest[i:j].split(b";")[0] or b"0", 16)
            if n == 0:
                break
            out += rest[j + 2:j + 2 + n]
            i = j + 2 + n + 2
        rest = out
    return status, lat, rest.decode(errors="replace"), post.service_ms


def pct(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


# --- part 1: a flooder and a light tenant ----------------------------------------------------

async def open_loop(port, tenant, rate, seconds, seed, out):
    rnd = random.Random(seed)
    tasks = []
    t_end = time.monotonic() + seconds
    due = time.monotonic()
    while due < t_end:
        due += rnd.expovariate(rate)
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

        async def one():
            st, lat, _, svc = await post(port, {"prompt": "hello", "max_tokens": TOKENS},
                                         tenant)
            out.append((st, lat, svc))
        tasks.append(asyncio.ensure_future(one()))
    await asyncio.gather(*tasks)


def fairness_run(port, seconds, flood):
    """The light tenant from this process; the flooder, if any, from another (its event loop
    would otherwise delay the light tenant's own reads and skew its latencies)."""
    light, heavy = [], []
    child = None
    if flood:
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--flooder",
                                  str(port), str(seconds)], stdout=subprocess.PIPE)
        time.sleep(1)  # the flood is under way before the light tenant starts
    asyncio.run(open_loop(port, "light", LIGHT, seconds - 2 if flood else seconds, 1, light))
    if child:
        heavy = [tuple(r) for r in json.loads(child.communicate()[0])]
    return light, heavy


def flooder_main(port, seconds):
    out = []
    asyncio.run(open_loop(port, "flood", FLOOD, seconds, 2, out))
    print(json.dumps(out))


def part_fairness(seconds):
    """The light tenant alone, beside the flooder, and beside the flooder with each tenant
    capped at its share of the slots (routes.rate_limit.concurrency)."""
    def summary(rows):
        lat = [lat * 1000 for st, lat, _ in rows if st == 200]
        # queue wait: the latency less the time the accelerator spent on it (the proxy's
        # and the sockets' own overhead, about a millisecond, stays in)
        wait = [lat * 1000 - svc for st, lat, svc in rows if st == 200 and svc is not None]
        return {"requests": len(rows), "ok": len(lat),
                "503": sum(1 for r in rows if r[0] == 503),
                "other": sum(1 for r in rows if r[0] not in (200, 503)),
                "p50_wait_ms": pct(wait, 50), "p99_wait_ms": pct(wait, 99),
                "p99_latency_ms": pct(lat, 99)}

    res = {}
    for name, flood, cap in (("alone", False, ""), ("flooded", True, ""),
                             ("flooded, concurrency cap", True,
                              f"    rate_limit: {{concurrency: {SLOTS // 2}}}\n")):
        ps = Procs()
        try:
            # jitter: each service is 200 ms +-10% (100 ms +-20% to the first token, then 5
            # tokens of 20 ms), so the slots do not free in step
            sim = ps.sim(slots=64, latency_ms=FIRST_MS, tokens=TOKENS, token_ms=TOKEN_MS,
                         jitter=0.2)
            port = ps.proxy(
                "pools:\n  - name: gpu\n    backends:\n"
                f"      - {{address: 127.0.0.1:{sim}, max_concurrency: {SLOTS}}}\n"
                "    queue: {max: 64, timeout_ms: 5000}\n"
                "routes:\n  - pool: gpu\n    tenant_header: X-Tenant\n" + cap)
            light, heavy = fairness_run(port, seconds, flood)
        finally:
            ps.stop()
        res[name] = summary(light)
        if flood:
            res[name]["flooder"] = {"requests": len(heavy),
                                    "ok": sum(1 for r in heavy if r[0] == 200),
                                    "503": sum(1 for r in heavy if r[0] == 503),
                                    "429": sum(1 for r in heavy if r[0] == 429)}
    return res


# --- part 2: tokens per minute ---------------------------------------------------------------

PROMPT = "Summarise the following text in a few words. " * 4
MIX = [  # (body, stream)
    ({"prompt": PROMPT, "max_tokens": 100}, False),
    ({"prompt": PROMPT}, False),  # default_max_tokens reserved, the sim's 64 used
    ({"prompt": PROMPT, "max_tokens": 80, "stream": True,
      "stream_options": {"include_usage": True}}, True),
    ({"prompt": PROMPT, "max_tokens": 60, "stream": True}, True),  # counted events only
]


def tokens_of(body, text, stream):
    """What the response cost, as the sim counts it."""
    prompt = len(json.dumps(body)) // 4
    if not stream:
        return json.loads(text)["usage"]["total_tokens"]
    events = [ln[5:].strip() for ln in text.split("\n") if ln.startswith("data:")]
    for e in events:
        if e != "[DONE]" and '"usage"' in e:
            return json.loads(e)["usage"]["total_tokens"]
    return prompt + sum(1 for e in events if e != "[DONE]")


async def token_client(port, tenant, t_end, seed, done):
    rnd = random.Random(seed)
    while time.monotonic() < t_end:
        body, stream = MIX[rnd.randrange(len(MIX))]
        st, _, text, _ = await post(port, body, tenant, stream)
        if st == 200:
            done.append((time.monotonic(), tokens_of(body, text, stream)))
        else:
            done.append((time.monotonic(), -st))
            await asyncio.sleep(0.05)


async def tokens_run(port, warm, window):
    t_start = time.monotonic()
    t0 = t_start + warm
    t_end = t0 + window
    done = {"t1": [], "t2": []}
    await asyncio.gather(*[token_client(port, t, t_end + 2, 10 * i + k, done[t])
                           for i, t in enumerate(done) for k in range(8)])
    out = {}
    for t, rows in done.items():
        served = sum(n for at, n in rows if t0 <= at < t_end and n > 0)
        first = sum(n for at, n in rows if t_start <= at < t_start + window and n > 0)
        out[t] = {"tokens_in_window": served, "ratio": served / (TPM * window / 60),
                  "tokens_first_window_from_cold": first,
                  "first_ratio": first / (TPM * window / 60),
                  "ok": sum(1 for at, n in rows if n > 0),
                  "429": sum(1 for at, n in rows if n == -429),
                  "other": sum(1 for at, n in rows if n < 0 and n != -429)}
    return out


def part_tokens(warm, window):
    ps = Procs()
    try:
        sim = ps.sim(slots=256, latency_ms=0, tokens=64, token_ms=5)
        port = ps.proxy(
            "pools:\n  - name: gpu\n    backends:\n"
            f"      - {{address: 127.0.0.1:{sim}}}\n"
            "routes:\n  - pool: gpu\n    tenant_header: X-Tenant\n"
            f"    rate_limit: {{tokens_per_minute: {TPM}, default_max_tokens: 256}}\n")
        return asyncio.run(tokens_run(port, warm, window))
    finally:
        ps.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30, help="each fairness run")
    ap.add_argument("--warm", type=float, default=15, help="token warm-up")
    ap.add_argument("--window", type=float, default=60, help="token window")
    ap.add_argument("--json")
    ap.add_argument("--only", choices=["fair", "tokens"])
    ap.add_argument("--flooder", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.flooder:
        return flooder_main(int(a.flooder[0]), float(a.flooder[1]))
    res = {}
    if a.only != "tokens":
        res["fairness"] = f = part_fairness(a.seconds)
        al = f["alone"]
        print(f"fairness: {SLOTS} slots x {SERVICE_MS} ms, light {LIGHT} req/s, flooder "
              f"{FLOOD:.0f} req/s (10x its share), {a.seconds:.0f} s each")
        print("| light tenant | requests | 503 | p50 wait ms | p99 wait ms | p99 latency ms | "
              "p99 latency ÷ alone | flooder: sent, served, 503, 429 |")
        print("|---|---|---|---|---|---|---|---|")
        for name, s in f.items():
            fl = s.get("flooder")
            print(f"| {name} | {s['requests']} | {s['503']} | {s['p50_wait_ms']:.1f} | "
                  f"{s['p99_wait_ms']:.1f} | {s['p99_latency_ms']:.1f} | "
                  f"{s['p99_latency_ms'] / al['p99_latency_ms']:.2f} | "
                  + (f"{fl['requests']}, {fl['ok']}, {fl['503']}, {fl['429']} |" if fl else "|"))
    if a.only != "fair":
        res["tokens"] = t = part_tokens(a.warm, a.window)
        print(f"tokens: tokens_per_minute {TPM}, token_burst {TPM // 6}, window {a.window:.0f} s "
              f"after {a.warm:.0f} s")
        print("| tenant | tokens in window | ÷ limit | first window from cold | ÷ limit | "
              "served | 429 | other |")
        print("|---|---|---|---|---|---|---|---|")
        for name, s in t.items():
            print(f"| {name} | {s['tokens_in_window']} | {s['ratio']:.3f} | "
                  f"{s['tokens_first_window_from_cold']} | {s['first_ratio']:.3f} | "
                  f"{s['ok']} | {s['429']} | {s['other']} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
