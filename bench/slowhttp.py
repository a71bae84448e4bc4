#!/usr/bin/python3
"""bench/slowhttp.py - slow-client attacks against accelnet, beside ordinary clients (issue 12).

slowhttptest (Debian) plays slowloris (-H: heads trickled in), slow body (-B: R-U-Dead-Yet,
bodies trickled in) and slow read (-X: responses read a few bytes at a time through a tiny
TCP window), CONNS connections each, against accelnet (one worker, default limits) in front of
`accelnet sim` with SLOTS slots, the pool's backend capped at max_concurrency SLOTS. Beside
each attack, an ordinary open-loop client (build/loadgen) asks RATE completions a second for
SECONDS; each attack run comes straight after a quiet run of the same client, and is reported
as a ratio to it (the machine is shared and noisy).

What "the attack never holds a slot" means here: once slowhttptest has its connections up
and the attack's own complete requests have been served (slow read sends real requests, each
served like any other, taking a slot for its service time), the backend's in-flight count
(admin /status) and the simulator's busy slots (/sim/stats) are sampled every 50 ms for
HOLD_S seconds before the ordinary client starts, and again while it runs. A slot is *held*
when the proxy counts it in flight while the simulator works on nothing for it; the figure
is the most held at any sample (slowhttptest's own probe requests are real work and show as
in flight, not held). While ordinary requests flow, a request that ends between the two
looks shows as held for one sample; the quiet run is sampled the same way, for comparison.

Nothing here gates CI: it prints figures (and a JSON line), it does not assert.
Usage: bench/slowhttp.py [--conns N] [--seconds S] [--rate R] [--modes HBX] [--proxy-bin PATH]
"""

import argparse
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACCELNET = os.path.join(ROOT, "build", "accelnet")
LOADGEN = os.path.join(ROOT, "build", "loadgen")
SLOTS = 4
HOLD_S = 3.0
BODY = json.dumps({"prompt": "hello"})

MODES = {
    # slowloris: a GET head, one more header line every 10 s
    "H": ["-H", "-i", "10", "-t", "GET"],
    # slow body: POST with Content-Length 8192, 32 more bytes every 10 s
    "B": ["-B", "-i", "10", "-s", "8192"],
    # slow read: two pipelined GET completions (32 KB each: the sim answers a GET on its
    # completion paths), window 1-512 bytes, 32 bytes read a second
    "X": ["-X", "-k", "2", "-n", "1", "-w", "1", "-y", "512", "-z", "32"],
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=10):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def get_json(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return json.loads(r.read())


def get_text(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.read().decode()


def loadgen(port, rate, seconds):
    out = subprocess.run([LOADGEN, "open", "--target", f"127.0.0.1:{port}", "--path",
                          "/v1/completions", "--body", BODY, "--rate", str(rate), "--duration",
                          str(seconds), "--timeout-s", "30"],
                         capture_output=True, text=True, timeout=seconds + 120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def errors_of(g):
    st = g.get("status", {})
    return g["errors"] + g["no_conn"] + g["timeouts"] + st.get("3xx", 0) + st.get("4xx", 0) + \
        st.get("5xx", 0)


def inflight(admin):
    return get_json(admin, "/status")["pools"][0]["backends"][0]["inflight"]


class Sampler(threading.Thread):
    """Polls the proxy's in-flight count and the simulator's busy slots. A slot is held (not
    used) when the proxy counts it in flight while the accelerator works on nothing for it:
    held = in flight (the lower of two looks around the simulator's) - busy slots."""

    def __init__(self, admin, sim):
        super().__init__(daemon=True)
        self.admin, self.sim = admin, sim
        self.max_inflight = self.max_held = self.samples = 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            try:
                a = inflight(self.admin)
                active = get_json(self.sim, "/sim/stats")["active"]
                b = inflight(self.admin)
                self.max_inflight = max(self.max_inflight, a, b)
                self.max_held = max(self.max_held, min(a, b) - active)
                self.samples += 1
            except OSError:
                pass
            time.sleep(0.05)


def settle(admin, sim, timeout=180):
    """Wait until the attack's own complete requests (slow read sends real ones) are served:
    nothing queued in the proxy, nothing busy or waiting in the simulator. Seconds taken."""
    t0 = time.monotonic()
    while time.monotonic() < t0 + timeout:
        q = get_json(admin, "/status")["pools"][0]["queue"]["length"]
        st = get_json(sim, "/sim/stats")
        if q == 0 and st["active"] == 0 and st["waiting"] == 0:
            break
        time.sleep(0.2)
    return time.monotonic() - t0


def shed_counts(admin):
    text = get_text(admin, "/metrics")
    return {m.group(1): int(float(m.group(2))) for m in re.finditer(
        r'accelnet_listener_shed_total\{[^}]*limit="(\w+)"\} (\S+)', text)}


def attack(mode, port, conns, length, logpath):
    url = f"http://127.0.0.1:{port}/v1/completions"
    argv = ["stdbuf", "-oL", "slowhttptest", *MODES[mode], "-c", str(conns), "-r", "500", "-l",
            str(length), "-p", "5", "-u", url]
    with open(logpath, "w") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True), " ".join(argv[2:])


def status_text(logpath):
    with open(logpath, errors="replace") as f:
        return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", f.read())


def ended_line(logpath):
    """'ended on the Nth second: <why>' once slowhttptest has stopped by itself."""
    text = status_text(logpath)
    m = re.search(r"Test ended on (\d+)\w* second\s+Exit status: ([^\n]*)", text)
    return f"ended on second {m.group(1)}: {m.group(2).strip()}" if m else ""


def wait_peak(logpath, conns, p, timeout=30):
    """Until (nearly) all connections are up, the count falls from its peak (the proxy has
    begun closing them; slowhttptest does not reconnect), or slowhttptest has ended."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and p.poll() is None:
        now, peak = connected(logpath), connected(logpath, peak=True)
        if now >= conns * 0.95 or (peak and now < peak):
            return
        time.sleep(0.2)


def stop_attack(p):
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGINT)
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def connected(logpath, peak=False):
    """slowhttptest's latest (or highest) 'connected' count, from its status lines."""
    text = status_text(logpath)
    got = [int(n) for n in re.findall(r"connected:\s+(\d+)", text)]
    if not got:
        return 0
    return max(got) if peak else got[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conns", type=int, default=2000)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--rate", type=float, default=50)
    ap.add_argument("--modes", default="HBX")
    ap.add_argument("--proxy-bin", default=ACCELNET,
                    help="the accelnet that runs the proxy (another build, to compare)")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # children inherit it
    tmp = tempfile.mkdtemp(prefix="slowhttp.")
    procs = []
    try:
        simport, port, admin = free_port(), free_port(), free_port()
        sim_argv = [ACCELNET, "sim", "--listen", f"127.0.0.1:{simport}", "--slots", str(SLOTS),
                    "--latency-ms", "50", "--tokens", "4096", "--token-ms", "0"]
        procs.append(subprocess.Popen(sim_argv, stdout=subprocess.DEVNULL,
                                      stderr=open(os.path.join(tmp, "sim.log"), "w")))
        wait_port(simport)
        conf = os.path.join(tmp, "proxy.yaml")
        with open(conf, "w") as f:
            f.write(f"workers: 1\nlisten:\n  - address: 127.0.0.1:{port}\n"
                    f"admin:\n  address: 127.0.0.1:{admin}\n"
                    "pools:\n  - name: gpu\n    backends:\n"
                    f"      - {{address: 127.0.0.1:{simport}, max_concurrency: {SLOTS}}}\n"
                    "    queue: {max: 1000, timeout_ms: 5000}\n")
        procs.append(subprocess.Popen([args.proxy_bin, "proxy", "-c", conf],
                                      stdout=subprocess.DEVNULL,
                                      stderr=open(os.path.join(tmp, "proxy.log"), "w")))
        wait_port(port)
        print(f"sim: {' '.join(sim_argv[1:])}\nproxy: workers 1, default limits, backend "
              f"max_concurrency {SLOTS}\nordinary client: loadgen open, {args.rate:g}/s for "
              f"{args.seconds} s, POST /v1/completions\n", flush=True)
        loadgen(port, args.rate, 3)  # warm-up
        results = []
        for mode in args.modes:
            # 1. quiet: the ordinary client alone
            calm = Sampler(admin, simport)
            calm.start()
            quiet = loadgen(port, args.rate, args.seconds)
            calm.stop.set()
            calm.join()
            # 2. the attack alone: at its peak, once its own requests are served, no slot
            # may be held
            alone_log = os.path.join(tmp, f"slowhttptest-{mode}-alone.log")
            p, cmd = attack(mode, port, args.conns, args.seconds + 40, alone_log)
            wait_peak(alone_log, args.conns, p)
            alone_up = connected(alone_log)
            settle_s = settle(admin, simport)
            hold = Sampler(admin, simport)
            hold.start()
            time.sleep(HOLD_S)
            hold.stop.set()
            hold.join()
            stop_attack(p)
            time.sleep(3)  # the proxy closes what the attack left
            # 3. the attack with the ordinary client beside it. Slowloris and slow body send
            # no complete request: the load starts with the attack and runs through its whole
            # life. Slow read sends complete requests (real work, a request flood of its own):
            # the load starts once they are served, while the slow reads go on.
            shed0 = shed_counts(admin)
            log = os.path.join(tmp, f"slowhttptest-{mode}.log")
            p, _ = attack(mode, port, args.conns, args.seconds + 40, log)
            if mode == "X":
                wait_peak(log, args.conns, p)
                settle(admin, simport)
            else:
                time.sleep(1)
            up = connected(log)
            during = Sampler(admin, simport)
            during.start()
            loud = loadgen(port, args.rate, args.seconds)
            during.stop.set()
            during.join()
            stop_attack(p)
            peak, ended = connected(log, peak=True), ended_line(log)
            shed1 = shed_counts(admin)
            r = {
                "mode": mode, "slowhttptest": cmd,
                "alone_connected": alone_up, "settle_s": round(settle_s, 1),
                "alone_max_inflight": hold.max_inflight, "alone_max_held": hold.max_held,
                "alone_samples": hold.samples,
                "connected_when_load_began": up, "connected_peak": peak, "attack_end": ended,
                "quiet_p99_ms": quiet["latency_ms"]["p99"],
                "attack_p99_ms": loud["latency_ms"]["p99"],
                "p99_ratio": loud["latency_ms"]["p99"] / max(quiet["latency_ms"]["p99"], 1e-9),
                "quiet_p50_ms": quiet["latency_ms"]["p50"],
                "attack_p50_ms": loud["latency_ms"]["p50"],
                "quiet_ok": quiet["ok"], "quiet_errors": errors_of(quiet),
                "attack_ok": loud["ok"], "attack_errors": errors_of(loud),
                "with_load_max_held": during.max_held, "quiet_max_held": calm.max_held,
                "with_load_max_inflight": during.max_inflight,
                "shed": {k: shed1.get(k, 0) - shed0.get(k, 0) for k in shed1},
            }
            results.append(r)
            print(f"{mode}: attack alone: {alone_up} connections, in flight max "
                  f"{hold.max_inflight}, held idle max {hold.max_held} over {hold.samples} "
                  f"samples (after {r['settle_s']} s for its own requests). With the load: "
                  f"{up} attack connections when it began, peak {peak}, {ended or 'ran on'}; "
                  f"ordinary {loud['ok']} ok, {r['attack_errors']} errors (quiet: {quiet['ok']} "
                  f"ok, {r['quiet_errors']} errors); p99 {r['attack_p99_ms']:.1f} ms vs quiet "
                  f"{r['quiet_p99_ms']:.1f} ms = {r['p99_ratio']:.2f}x; held idle max "
                  f"{during.max_held} (quiet run, same sampling: {calm.max_held}); shed "
                  f"{r['shed']}", flush=True)
            time.sleep(3)
        print("JSON " + json.dumps(results))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        print(f"logs in {tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
