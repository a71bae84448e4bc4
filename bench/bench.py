"""accelnet, nginx and HAProxy side by side, in one run, on one machine.

Every contestant gets the equivalent configuration (one worker process or thread, upstream
keep-alive reused across clients, no logging, streaming relay) in front of the same backend.
Load generators run on CPU 0, servers (backends and the proxy under test) on CPU 1.
Contestants are interleaved over rounds, alternating the order, and figures are reported as
median [min-max] over rounds and as ratios to HAProxy in the same round. Nothing here asserts
a timing: this measures, it does not test.

Scenarios 10 and 11 (the response cache against nginx proxy_cache, HAProxy's cache and
Varnish) live in bench/cache.py; `--only cache` runs both.

Usage: bench/run [--quick] [--only 1,2,...|cache] [--io] [--obs-rounds N] [--rounds N] [--seconds S] [--out DIR]
                 [--report results.json]
"""

import argparse
import functools
import datetime
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACCELNET = os.path.join(ROOT, "build", "accelnet")
LOADGEN = os.path.join(ROOT, "build", "loadgen")
WRK_LUA = os.path.join(ROOT, "bench", "wrk_report.lua")
LOAD_CPU, SERVER_CPU = "0", "1"
# Every process may hold at most this many descriptors (the hard limit here is 20,000 and
# root cannot raise it). HAProxy reserves two per connection, so its maxconn is about half;
# scenario 4 holds IDLE_CONNS connections, fewer than the 10,000 planned, for that reason.
NOFILE = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
HAPROXY_MAXCONN = max(1000, NOFILE // 2 - 100)
IDLE_CONNS = min(10000, HAPROXY_MAXCONN - 100)
TCK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            why = ""
            if getattr(proc, "log_path", None):
                with open(proc.log_path, errors="replace") as f:
                    lines = f.read().strip().splitlines()
                why = f": {lines[0]}" if lines else ""
            raise RuntimeError(f"{proc.args[3:5]} exited with {proc.returncode}{why}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"port {port} never opened")


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _child_setup():
    """In a started process before it runs: the stop signals Run.start held back taken again
    (a signal mask survives exec), the descriptor limit raised."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    raise_nofile()


class Run:
    """Processes and scratch files of the whole benchmark; everything dies with it."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="accelnet-bench-")
        self.procs = []

    def start(self, argv, port=None, cpu=SERVER_CPU, name="proc"):
        log = open(os.path.join(self.dir, f"{name}-{len(self.procs)}.log"), "wb")
        # a stop (Ctrl-C, SIGTERM) that came while Popen forked raised out of it with the child
        # started and not yet in self.procs, so nothing stopped it: an nginx left running
        # (test_bench, under load). The stop waits until the child is counted.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            p = subprocess.Popen(["taskset", "-c", cpu, *argv], stdout=log,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True, preexec_fn=_child_setup)
            p.log_path = log.name
            self.procs.append(p)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        if port:
            wait_port(port, p)
        return p

    def stop(self, p):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def cleanup(self):
        """Kill every process started, with what it started in its session (a server that
        forked, a leader that exited first), then remove the scratch files."""
        for p in self.procs:
            if p.returncode is not None:  # reaped (stopped): its pid may be another's now
                continue
            try:  # not reaped, so the pid, and the group it leads, are still its own
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:  # it leads no group (the idle load generator)
                p.kill()
            p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
        for d in getattr(self, "shm_dirs", []):  # nginx's cache directories (bench/cache.py)
            shutil.rmtree(d, ignore_errors=True)


def start_small_origin(run, access_log=None, cpu=SERVER_CPU):
    """nginx, one worker, serving /small (2 KiB of random bytes) over keep-alive; with
    <access_log> (a path) every request is logged there. Its port."""
    www = os.path.join(run.dir, "www")
    os.makedirs(www, exist_ok=True)
    with open(os.path.join(www, "small"), "wb") as f:
        f.write(os.urandom(2048))
    port = free_port()
    cfg = run.write(f"origin-{port}.conf", f"""daemon off; master_process off; worker_processes 1;
worker_rlimit_nofile {NOFILE}; error_log {run.dir}/origin.err crit; pid {run.dir}/origin-{port}.pid;
events {{ worker_connections {NOFILE - 50}; }}
http {{ access_log {access_log or "off"}; keepalive_requests 10000000; keepalive_timeout 300s;
  server {{ listen 127.0.0.1:{port} backlog=65535; root {www}; }} }}
""")
    run.start(["nginx", "-c", cfg, "-e", f"{run.dir}/origin.err"], port, cpu=cpu, name="origin")
    return port


def proc_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TCK


def proc_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


# --- contestants ------------------------------------------------------------------------

def start_accelnet(run, backends, balance="round-robin", weights=None, cap=None, extra="",
                   binary=None, cpu=SERVER_CPU, workers=1):
    port = free_port()
    lines = [f"      - {{address: 127.0.0.1:{b}" + (f", weight: {weights[i]}" if weights else "")
             + (f", max_concurrency: {cap}" if cap else "") + "}"
             for i, b in enumerate(backends)]
    cfg = (f"workers: {workers}\nlisten: [127.0.0.1:{port}]\n"
           "timeouts: {first_byte_ms: 300000, between_bytes_ms: 300000, idle_ms: 300000}\n"
           "limits: {max_connections: 200000}\n"
           f"pools:\n  - name: b\n    balance: {balance}\n    backends:\n" + "\n".join(lines) + "\n"
           + extra)
    p = run.start([binary or ACCELNET, "proxy", "-c", run.write(f"accelnet-{port}.yaml", cfg),
                   "--log-level", "error"], port, cpu=cpu, name="accelnet")
    return p, port


def start_nginx(run, backends, balance=None, streaming=False, body_buffer=None):
    """nginx as its operator would set it up: buffering on (16 KiB buffers, no temp files)
    for ordinary responses; proxy_buffering off for token streams, which otherwise arrive
    in bursts (see shared/research/anchors-measured.md, part D). <body_buffer>: its
    client_body_buffer_size, for request bodies larger than the default 16 KiB that would
    otherwise go through a temporary file."""
    port = free_port()
    d = os.path.join(run.dir, f"nginx-{port}")
    os.makedirs(d)
    servers = "\n".join(f"        server 127.0.0.1:{b};" for b in backends)
    cfg = f"""daemon off; master_process off; worker_processes 1;
worker_rlimit_nofile {NOFILE};
error_log {d}/error.log crit; pid {d}/nginx.pid;
events {{ worker_connections {NOFILE - 50}; }}
http {{
    access_log off;
    client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};
    uwsgi_temp_path {d}; scgi_temp_path {d};
    keepalive_requests 10000000; keepalive_timeout 300s;
    upstream b {{
        {balance + ";" if balance else ""}
{servers}
        keepalive 256; keepalive_requests 10000000;
    }}
    server {{
        listen 127.0.0.1:{port} backlog=65535;
        location / {{
            proxy_pass http://b;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            {"proxy_buffering off;" if streaming else
             "proxy_buffering on; proxy_buffer_size 16k; proxy_buffers 8 16k; "
             "proxy_busy_buffers_size 32k; proxy_max_temp_file_size 0;"}
            proxy_read_timeout 300s;
            client_max_body_size 0;
            {f"client_body_buffer_size {body_buffer};" if body_buffer else ""}
        }}
    }}
}}
"""
    p = run.start(["nginx", "-c", run.write(f"nginx-{port}.conf", cfg), "-e", f"{d}/error.log"],
                  port, name="nginx")
    return p, port


def start_haproxy(run, backends, balance="roundrobin", maxconn=None, streaming=False, extra="",
                  glob="", defaults="", threads=1):
    """HAProxy with its defaults, plus `option http-no-delay` for token streams: without it
    every send carries MSG_MORE and events wait up to 200 ms (research part D)."""
    port = free_port()
    servers = "\n".join(f"    server s{i} 127.0.0.1:{b}" + (f" maxconn {maxconn}" if maxconn else "")
                        for i, b in enumerate(backends))
    cfg = f"""global
    nbthread {threads}
    maxconn {HAPROXY_MAXCONN}
{glob}defaults
    mode http
{defaults}    timeout connect 5s
    timeout client 300s
    timeout server 300s
    timeout queue 300s
    timeout http-keep-alive 300s
    option http-keep-alive
    http-reuse always
{"    option http-no-delay" if streaming else ""}
frontend f
    bind 127.0.0.1:{port}
    default_backend b
backend b
    balance {balance}
{extra}{servers}
"""
    p = run.start(["haproxy", "-db", "-f", run.write(f"haproxy-{port}.cfg", cfg)], port,
                  name="haproxy")
    return p, port


PROXIES = {
    "accelnet": start_accelnet,
    "nginx": start_nginx,
    "haproxy": start_haproxy,
}


# --- load -------------------------------------------------------------------------------

def wrk(port, path, seconds, conns, extra=()):
    out = subprocess.run(["taskset", "-c", LOAD_CPU, "wrk", "-t1", f"-c{conns}", f"-d{seconds}s",
                          "-s", WRK_LUA, *extra, f"http://127.0.0.1:{port}{path}"],
                         capture_output=True, text=True, timeout=seconds + 60)
    for line in out.stdout.splitlines():
        if line.startswith("WRKJSON "):
            return json.loads(line[8:])
    raise RuntimeError(f"wrk gave no result: {out.stdout} {out.stderr}")


def loadgen(mode, port, *args, timeout=600):
    out = subprocess.run(["taskset", "-c", LOAD_CPU, LOADGEN, mode, "--target",
                          f"127.0.0.1:{port}", *args], capture_output=True, text=True,
                         timeout=timeout, preexec_fn=raise_nofile)
    return json.loads(out.stdout.strip().splitlines()[-1])


def med(values):
    return statistics.median(values) if values else 0.0


def spread(values, fmt="{:.1f}"):
    if not values:
        return "-"
    return f"{fmt.format(med(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


# --- scenarios 1-3: closed loop with wrk against an nginx origin ---------------------------

def perf_count_start(pid, event):
    """Count <event> over every thread of <pid> with `perf stat`, counted in the kernel, until
    perf_count_stop(); None where perf cannot (no perf, no tracefs, perf_event_paranoid)."""
    if not shutil.which("perf"):
        return None
    p = subprocess.Popen(["perf", "stat", "-x,", "-e", event, "-p", str(pid)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(0.2)  # attached before the load starts
    return p if p.poll() is None else None


def perf_count_stop(p, event):
    """The count perf_count_start() took (a float: task-clock counts milliseconds), or None."""
    if p is None:
        return None
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    for line in err.splitlines():
        f = line.split(",")
        if len(f) > 2 and event in line:
            try:
                return float(f[0])
            except ValueError:
                return None
    return None


def syscalls_start(pid):
    """Count the system calls of every thread of <pid> (perf's raw_syscalls:sys_enter
    tracepoint: no per-call stop as strace has) until syscalls_stop()."""
    return perf_count_start(pid, "raw_syscalls:sys_enter")


def syscalls_stop(p):
    n = perf_count_stop(p, "raw_syscalls:sys_enter")
    return None if n is None else int(n)


def scenario_wrk(run, res, key, title, path, conns, seconds, rounds, extra=()):
    origin = res["origin"]
    figures = {name: [] for name in PROXIES}
    procs = {name: start(run, [origin]) for name, start in PROXIES.items()}
    for name, (p, port) in procs.items():  # warm-up: connections, caches, page faults
        wrk(port, path, 1, conns, extra)
    for r in range(rounds):
        order = list(PROXIES) if r % 2 == 0 else list(reversed(PROXIES))
        for name in order:
            p, port = procs[name]
            sc = syscalls_start(p.pid)
            c0 = proc_cpu_s(p.pid)
            w = wrk(port, path, seconds, conns, extra)
            c1 = proc_cpu_s(p.pid)
            calls = syscalls_stop(sc)
            w["rps"] = w["requests"] / (w["duration_us"] / 1e6)
            w["cpu_us_per_req"] = (c1 - c0) * 1e6 / max(w["requests"], 1)
            if calls is not None:  # perf's window starts 0.2 s before and ends after wrk's
                w["syscalls_per_req"] = calls / max(w["requests"], 1)
            w["round"] = r
            figures[name].append(w)
    for name, (p, port) in procs.items():
        for w in figures[name]:
            w["peak_rss_kb"] = proc_kb(p.pid, "VmHWM")
        run.stop(p)
    res["scenarios"][key] = {"title": title, "kind": "wrk", "conns": conns, "seconds": seconds,
                             "rounds": figures}


def summarize_wrk(sc):
    rows = []
    ha = sc["rounds"]["haproxy"]
    for name, rounds in sc["rounds"].items():
        ratio = [w["rps"] / h["rps"] for w, h in zip(rounds, ha) if h["rps"]]
        cpu_ratio = [w["cpu_us_per_req"] / h["cpu_us_per_req"] for w, h in zip(rounds, ha)
                     if h["cpu_us_per_req"]]
        rows.append([name, spread([w["rps"] for w in rounds], "{:.0f}"), f"{med(ratio):.2f}",
                     spread([w["p50_ms"] for w in rounds], "{:.2f}"),
                     spread([w["p99_ms"] for w in rounds], "{:.2f}"),
                     spread([w["p999_ms"] for w in rounds], "{:.2f}"),
                     str(sum(w["errors"] + w["non2xx"] for w in rounds)),
                     spread([w["cpu_us_per_req"] for w in rounds], "{:.1f}"), f"{med(cpu_ratio):.2f}",
                     spread([w["syscalls_per_req"] for w in rounds if "syscalls_per_req" in w],
                            "{:.2f}"),
                     f"{rounds[-1]['peak_rss_kb'] / 1024:.1f}"])
    return (["contestant", "req/s", "÷ HAProxy", "p50 ms", "p99 ms", "p99.9 ms", "errors",
             "CPU µs/req", "÷ HAProxy", "syscalls/req", "peak RSS MiB"], rows)


def ratio_row(rounds, ha, getters):
    """Median over rounds of (figure / HAProxy's figure in the same round), per getter."""
    out = []
    for get in getters:
        r = [get(a) / get(b) for a, b in zip(rounds, ha) if get(b)]
        out.append(f"{med(r):.2f}" if r else "-")
    return out


def ratios_wrk(sc):
    ha = sc["rounds"]["haproxy"]
    getters = [lambda w: w["rps"], lambda w: w["p50_ms"], lambda w: w["p99_ms"],
               lambda w: w["p999_ms"], lambda w: w["cpu_us_per_req"], lambda w: w["peak_rss_kb"]]
    rows = [[n] + ratio_row(r, ha, getters) for n, r in sc["rounds"].items()]
    return (["÷ HAProxy", "req/s", "p50", "p99", "p99.9", "CPU/req", "peak RSS"], rows)


# --- scenario 4: idle keep-alive connections -----------------------------------------------

def scenario_idle(run, res, conns):
    out = {}
    for name, start in PROXIES.items():
        p, port = start(run, [res["origin"]])
        base = proc_kb(p.pid, "VmRSS")
        g = subprocess.Popen(["taskset", "-c", LOAD_CPU, LOADGEN, "idle", "--target",
                              f"127.0.0.1:{port}", "--conns", str(conns), "--path", "/small",
                              "--timeout-s", "120"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, preexec_fn=raise_nofile)
        run.procs.append(g)  # killed by run.cleanup() if the bench is stopped meanwhile
        report = json.loads(g.stdout.readline())
        held = proc_kb(p.pid, "VmRSS")
        g.stdin.close()
        g.wait(30)
        out[name] = {"conns": conns, "ok": report["ok"], "errors": report["errors"],
                     "rss_base_kb": base, "rss_held_kb": held,
                     "bytes_per_conn": (held - base) * 1024 / max(report["ok"], 1)}
        run.stop(p)
    res["scenarios"]["4"] = {"title": f"{conns} idle keep-alive connections", "kind": "idle",
                             "results": out}


def summarize_idle(sc):
    ha = sc["results"]["haproxy"]["bytes_per_conn"]
    rows = [[n, str(r["ok"]), str(r["errors"]), f"{r['rss_base_kb'] / 1024:.1f}",
             f"{r['rss_held_kb'] / 1024:.1f}", f"{r['bytes_per_conn']:.0f}",
             f"{r['bytes_per_conn'] / ha:.2f}" if ha else "-"]
            for n, r in sc["results"].items()]
    return (["contestant", "held", "errors", "RSS before MiB", "RSS held MiB", "bytes/conn",
             "÷ HAProxy"], rows)


# --- scenario 5: SSE streams ---------------------------------------------------------------

def scenario_sse(run, res, streams, tokens, token_ms, rounds):
    sim_port = free_port()
    sim = run.start([ACCELNET, "sim", "--listen", f"127.0.0.1:{sim_port}", "--name", "sse",
                     "--slots", str(streams * 2), "--latency-ms", "0", "--jitter", "0",
                     "--tokens", str(tokens), "--token-ms", str(token_ms)], sim_port, name="sim")
    targets = {"direct": (sim, sim_port),
               "accelnet": start_accelnet(run, [sim_port]),
               "nginx": start_nginx(run, [sim_port], streaming=True),
               "haproxy": start_haproxy(run, [sim_port], streaming=True)}
    if "accelnet-base" in PROXIES:
        targets["accelnet-base"] = PROXIES["accelnet-base"](run, [sim_port])
    body = json.dumps({"stream": True, "prompt": "hi"})
    figures = {name: [] for name in targets}
    for r in range(rounds):
        order = list(targets) if r % 2 == 0 else list(reversed(targets))
        for name in order:
            p, port = targets[name]
            c0 = proc_cpu_s(p.pid)
            g = loadgen("sse", port, "--streams", str(streams), "--body", body, "--timeout-s",
                        str(tokens * token_ms / 1000 * 4 + 30))
            g["cpu_s"] = proc_cpu_s(p.pid) - c0
            figures[name].append(g)
    for name, (p, port) in targets.items():
        if name != "direct":
            for g in figures[name]:
                g["peak_rss_kb"] = proc_kb(p.pid, "VmHWM")
            run.stop(p)
    run.stop(sim)
    res["scenarios"]["5"] = {"title": f"SSE: {streams} streams x {tokens} tokens, one every "
                                      f"{token_ms} ms", "kind": "sse", "rounds": figures}


def summarize_sse(sc):
    rows = []
    direct = sc["rounds"]["direct"]
    ha = sc["rounds"]["haproxy"]
    for name, rounds in sc["rounds"].items():
        d = [g["token_delay_ms"] for g in rounds]
        added50 = [g["token_delay_ms"]["p50"] - x["token_delay_ms"]["p50"]
                   for g, x in zip(rounds, direct)]
        added99 = [g["token_delay_ms"]["p99"] - x["token_delay_ms"]["p99"]
                   for g, x in zip(rounds, direct)]
        ratio = [g["token_delay_ms"]["p99"] / h["token_delay_ms"]["p99"] for g, h in zip(rounds, ha)
                 if h["token_delay_ms"]["p99"]]
        tokens = sum(x["n"] for x in d)
        cpu = [g["cpu_s"] * 1e6 / max(g["token_delay_ms"]["n"], 1) for g in rounds]
        rows.append([name, str(sum(g["ok"] for g in rounds)), str(sum(g["errors"] for g in rounds)),
                     str(tokens), spread([x["p50"] for x in d], "{:.3f}"),
                     spread([x["p99"] for x in d], "{:.3f}"), spread([x["p999"] for x in d], "{:.3f}"),
                     "-" if name == "direct" else f"{med(added50):.3f} / {med(added99):.3f}",
                     f"{med(ratio):.2f}",
                     "-" if name == "direct" else spread(cpu, "{:.2f}")])
    return (["contestant", "streams ok", "errors", "tokens", "delay p50 ms", "p99 ms", "p99.9 ms",
             "added p50 / p99 ms", "p99 ÷ HAProxy", "CPU µs/token"], rows)


# --- scenario 8: the cost of observability (issue 13) -----------------------------------

OBS_KEY = "sk-bench-0123456789abcdef"


def start_accelnet_obs(run, origin, on):
    """accelnet as scenario 1 has it, behind a named route that authenticates (each request
    has a route and a tenant, so the accelnet_route_* and accelnet_tenant_* series count it),
    with an admin listener; <on> adds the access log, JSON lines to a file. (Scraping /metrics
    is the caller's.)"""
    keys = run.write("obs-keys.txt", f"bench {OBS_KEY}\n")
    admin = free_port()
    log = os.path.join(run.dir, f"obs-access-{admin}.log")
    extra = (f"admin: {{address: 127.0.0.1:{admin}}}\n"
             "routes:\n  - name: bench\n    match: {path_prefix: /}\n    pool: b\n"
             f"    auth: {{api_keys_file: {keys}}}\n")
    if on:
        extra += f"access_log: {{path: {log}, format: json}}\n"
    p, port = start_accelnet(run, [origin], extra=extra)
    p.admin, p.access_log = admin, log if on else None
    return p, port


def start_haproxy_obs(run, origin, on):
    """HAProxy as scenario 1 has it; <on>: `option httplog` lines written to its stdout, which
    the bench sends to a file (`log stdout`, as in a container: one write(2) per line, no
    syslog daemon in between, the cheapest file-writing setup HAProxy has)."""
    p, port = start_haproxy(run, [origin],
                            glob="    log stdout format raw local0\n" if on else "",
                            defaults="    log global\n    option httplog\n" if on else "")
    p.access_log = p.log_path if on else None
    return p, port


class Scraper:
    """GET /metrics every <every_s> seconds in a thread, as Prometheus would, while running."""

    def __init__(self, port, every_s=1.0):
        import threading
        self.port, self.every_s, self.n, self.last = port, every_s, 0, ""
        self.stop_ = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)
        self.th.start()

    def _run(self):
        while not self.stop_.is_set():
            self.last = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics",
                                               timeout=5).read().decode()
            self.n += 1
            self.stop_.wait(self.every_s)

    def stop(self):
        self.stop_.set()
        self.th.join()
        return self


def count_lines(path):
    if not path or not os.path.exists(path):
        return 0
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def scenario_obs(run, res, seconds, rounds, conns=64):
    """accelnet with the access log off and /metrics not scraped, against the access log on
    (JSON to a file) with /metrics scraped every second; HAProxy with its log off and on.
    All four in front of the origin at once, interleaved over rounds (the order turned each
    round), scenario 1's load: 2 KiB responses, keep-alive."""
    origin = res["origin"]
    targets = {"accelnet off": start_accelnet_obs(run, origin, False),
               "accelnet on": start_accelnet_obs(run, origin, True),
               "haproxy off": start_haproxy_obs(run, origin, False),
               "haproxy on": start_haproxy_obs(run, origin, True)}
    hdr = ("-H", f"Authorization: Bearer {OBS_KEY}")
    for name, (p, port) in targets.items():  # warm-up
        wrk(port, "/small", 1, conns, hdr)
    time.sleep(1)  # the warm-up's lines written out before they are counted
    base = {name: count_lines(p.access_log) for name, (p, _) in targets.items()}
    figures = {name: [] for name in targets}
    scrapes = 0
    for r in range(rounds):
        order = list(targets) if r % 2 == 0 else list(reversed(targets))
        for name in order:
            p, port = targets[name]
            scraper = Scraper(p.admin) if name == "accelnet on" else None
            c0 = proc_cpu_s(p.pid)
            w = wrk(port, "/small", seconds, conns, hdr)
            c1 = proc_cpu_s(p.pid)
            if scraper:
                scrapes += scraper.stop().n
            w["rps"] = w["requests"] / (w["duration_us"] / 1e6)
            w["cpu_us_per_req"] = (c1 - c0) * 1e6 / max(w["requests"], 1)
            w["round"] = r
            figures[name].append(w)
    logged = {}
    for name, (p, port) in targets.items():
        dropped = None
        if name == "accelnet on":
            text = urllib.request.urlopen(f"http://127.0.0.1:{p.admin}/metrics",
                                          timeout=5).read().decode()
            m = re.search(r"^accelnet_access_log_dropped_total (\d+)$", text, re.M)
            dropped = int(m.group(1)) if m else None
        run.stop(p)  # accelnet writes what its rings hold before it exits
        if p.access_log:
            logged[name] = {"lines": count_lines(p.access_log) - base[name],
                            "requests": sum(w["requests"] for w in figures[name]),
                            "dropped": dropped}
    res["scenarios"]["8"] = {
        "title": "the cost of the access log and metrics: 2 KiB responses, keep-alive, "
                 f"{conns} connections", "kind": "obs", "conns": conns, "seconds": seconds,
        "rounds": figures, "logged": logged, "scrapes": scrapes}


def summarize_obs(sc):
    rows = []
    for name, rounds in sc["rounds"].items():
        lg = sc["logged"].get(name)
        rows.append([name, spread([w["rps"] for w in rounds], "{:.0f}"),
                     spread([w["p50_ms"] for w in rounds], "{:.2f}"),
                     spread([w["p99_ms"] for w in rounds], "{:.2f}"),
                     str(sum(w["errors"] + w["non2xx"] for w in rounds)),
                     spread([w["cpu_us_per_req"] for w in rounds], "{:.1f}"),
                     f"{lg['lines']} / {lg['requests']}" if lg else "-",
                     "-" if not lg or lg["dropped"] is None else str(lg["dropped"])])
    return (["contestant", "req/s", "p50 ms", "p99 ms", "errors", "CPU µs/req",
             "log lines / requests", "dropped"], rows)


def ratio3(rounds, base, get):
    r = [get(a) / get(b) for a, b in zip(rounds, base) if get(b)]
    return f"{med(r):.3f}" if r else "-"


def ratios_obs(sc):
    """On ÷ off for each server, median of same-round ratios."""
    rows = []
    for who in ("accelnet", "haproxy"):
        on, off = sc["rounds"][f"{who} on"], sc["rounds"][f"{who} off"]
        rps = ratio3(on, off, lambda w: w["rps"])
        cpu = ratio3(on, off, lambda w: w["cpu_us_per_req"])
        rows.append([f"{who} on ÷ off", rps, cpu,
                     f"{(1 - float(rps)) * 100:.1f}%" if rps != "-" else "-",
                     f"{(float(cpu) - 1) * 100:.1f}%" if cpu != "-" else "-"])
    return (["", "req/s", "CPU/req", "throughput lost", "CPU/req added"], rows)


# --- scenario 6: accelerator fleet, open loop -------------------------------------------

FLEET = [  # name, slots, latency ms, tokens, token ms, stall
    ("fast-1", 4, 40, 10, 6, None),
    ("fast-2", 4, 40, 10, 6, None),
    ("slow-3x", 4, 120, 10, 18, None),
    ("staller", 4, 40, 10, 6, (2000, 20000)),
]


def fleet_capacity():
    cap = 0.0
    for _, slots, lat, tokens, tms, stall in FLEET:
        per = slots / ((lat + tokens * tms) / 1000)
        if stall:
            per *= 1 - stall[0] / stall[1]
        cap += per
    return cap


FLEET_CONTESTANTS = {
    "accelnet round-robin": lambda run, b: start_accelnet(run, b, "round-robin"),
    "accelnet least-connections": lambda run, b: start_accelnet(run, b, "least-connections"),
    "accelnet p2c": lambda run, b: start_accelnet(run, b, "p2c"),
    # weights in proportion to each backend's capacity, as an operator who knows it would set
    "accelnet weighted-round-robin 3:3:1:3":
        lambda run, b: start_accelnet(run, b, "weighted-round-robin", [3, 3, 1, 3]),
    # max_concurrency = the simulators' slots: the rest wait in accelnet's queue, as in HAProxy's
    "accelnet least-connections max_concurrency 4":
        lambda run, b: start_accelnet(run, b, "least-connections", cap=4),
    "accelnet p2c max_concurrency 4": lambda run, b: start_accelnet(run, b, "p2c", cap=4),
    "accelnet peak-ewma max_concurrency 4":
        lambda run, b: start_accelnet(run, b, "peak-ewma", cap=4),
    "accelnet peak-ewma max_concurrency 4 wait_for_faster":
        lambda run, b: start_accelnet(run, b, "peak-ewma", cap=4,
                                      extra="    wait_for_faster: true\n"),
    # issue 14's balancer: these requests carry no prompt worth a block, so it is its
    # work-conserving side that runs here (must not be worse than HAProxy at any load)
    "accelnet llm max_concurrency 4": lambda run, b: start_accelnet(run, b, "llm", cap=4),
    "nginx least_conn": lambda run, b: start_nginx(run, b, "least_conn"),
    "haproxy leastconn maxconn 4": lambda run, b: start_haproxy(run, b, "leastconn", maxconn=4),
}


def start_fleet(run):
    ports, procs = [], []
    for name, slots, lat, tokens, tms, stall in FLEET:
        port = free_port()
        argv = [ACCELNET, "sim", "--listen", f"127.0.0.1:{port}", "--name", name, "--slots",
                str(slots), "--latency-ms", str(lat), "--tokens", str(tokens), "--token-ms",
                str(tms), "--jitter", "0.1"]
        if stall:
            argv += ["--stall-ms", str(stall[0]), "--stall-every-ms", str(stall[1])]
        procs.append(run.start(argv, port, name=name))
        ports.append(port)
    return ports, procs


def scenario_fleet(run, res, loads, seconds, pick=None):
    cap = fleet_capacity()
    results = {}
    for load in loads:
        rate = cap * load
        names = [n for n in FLEET_CONTESTANTS if not pick or re.search(pick, n)]
        for name in names:
            ports, sims = start_fleet(run)  # fresh fleet: every contestant meets the same stalls
            p, port = FLEET_CONTESTANTS[name](run, ports)
            g = loadgen("open", port, "--rate", f"{rate:.2f}", "--duration", str(seconds),
                        "--body", json.dumps({"prompt": "hi"}), "--timeout-s", "60")
            results.setdefault(f"{int(load * 100)}%", {})[name] = g
            run.stop(p)
            for s in sims:
                run.stop(s)
    res["scenarios"]["6"] = {"title": f"accelerator fleet, open loop, capacity {cap:.0f} req/s",
                             "kind": "fleet", "capacity": cap, "seconds": seconds,
                             "results": results}


# --- scenario 7: prompts that share prefixes, backends with a KV prefix cache ------------

PREFIX_FLEET = dict(n=4, slots=4, miss_ms=200, hit_ms=20, tokens=10, token_ms=6, cache=8,
                    prefixes=32)


def prefix_capacity():
    """Requests per second the fleet serves when every request misses the cache."""
    f = PREFIX_FLEET
    return f["n"] * f["slots"] / ((f["miss_ms"] + f["tokens"] * f["token_ms"]) / 1000)


PREFIX_CONTESTANTS = {
    "accelnet prefix-affinity max_concurrency 4":
        lambda run, b: start_accelnet(run, b, "prefix-affinity", cap=4),
    # each simulator keeps 8 prompt prefixes; a prompt here is about 6 blocks of 64 bytes
    "accelnet llm max_concurrency 4":
        lambda run, b: start_accelnet(run, b, "llm", cap=4,
                                      extra="    llm: {block_bytes: 64, cache_blocks: 48}\n"),
    "accelnet least-connections max_concurrency 4":
        lambda run, b: start_accelnet(run, b, "least-connections", cap=4),
    "nginx least_conn": lambda run, b: start_nginx(run, b, "least_conn"),
    "haproxy leastconn maxconn 4": lambda run, b: start_haproxy(run, b, "leastconn", maxconn=4),
    # the best an HAProxy operator can do without parsing JSON: hash the body's first bytes
    # (works here because every client writes the prompt at the same offset)
    "haproxy hash body prefix maxconn 4": lambda run, b: start_haproxy(
        run, b, "hash req.body,bytes(0,256)", maxconn=4,
        extra="    option http-buffer-request\n    hash-type consistent\n"
              "    hash-balance-factor 125\n"),
}


def scenario_prefix(run, res, loads, seconds):
    f = PREFIX_FLEET
    cap = prefix_capacity()
    results = {}
    for load in loads:
        for name, start in PREFIX_CONTESTANTS.items():
            ports, sims = [], []
            for i in range(f["n"]):
                port = free_port()
                sims.append(run.start([ACCELNET, "sim", "--listen", f"127.0.0.1:{port}",
                                       "--name", f"kv{i}", "--slots", str(f["slots"]),
                                       "--latency-ms", str(f["miss_ms"]), "--cache-hit-ms",
                                       str(f["hit_ms"]), "--prefix-cache", str(f["cache"]),
                                       "--tokens", str(f["tokens"]), "--token-ms",
                                       str(f["token_ms"]), "--jitter", "0.1"], port,
                                      name=f"kv{i}"))
                ports.append(port)
            p, port = start(run, ports)
            g = loadgen("open", port, "--rate", f"{cap * load:.2f}", "--duration", str(seconds),
                        "--prefixes", str(f["prefixes"]), "--timeout-s", "60")
            hits = misses = 0
            for sp in ports:
                st = json.loads(urllib.request.urlopen(
                    f"http://127.0.0.1:{sp}/sim/stats", timeout=5).read())
                hits += st["cache_hits"]
                misses += st["cache_misses"]
            g["cache_hit_rate"] = hits / (hits + misses) if hits + misses else 0
            results.setdefault(f"{int(load * 100)}%", {})[name] = g
            run.stop(p)
            for s_ in sims:
                run.stop(s_)
    res["scenarios"]["7"] = {
        "title": f"prompts sharing {f['prefixes']} prefixes, backends with a prefix cache "
                 f"(all-miss capacity {cap:.0f} req/s)",
        "kind": "prefix", "capacity": cap, "seconds": seconds, "results": results}


def summarize_prefix(sc):
    header, rows = summarize_fleet(sc)
    for row in rows:
        row.insert(4, f"{sc['results'][row[0]][row[1]]['cache_hit_rate'] * 100:.0f}%")
    header.insert(4, "cache hits")
    return header, rows


def summarize_fleet(sc):
    rows = []
    for load, by in sc["results"].items():
        ha = by.get("haproxy leastconn maxconn 4", {}).get("latency_ms", {}).get("p99", 0)
        ng = by.get("nginx least_conn", {}).get("latency_ms", {}).get("p99", 0)
        best_anchor = min(ha, ng) if ha and ng else max(ha, ng)
        for name, g in by.items():
            lat = g["latency_ms"]
            rows.append([load, name, f"{g['goodput']:.1f}", str(g["errors"]),
                         f"{lat['p50']:.0f}", f"{lat['p99']:.0f}", f"{lat['p999']:.0f}",
                         f"{lat['p99'] / ha:.2f}" if ha else "-",
                         f"{lat['p99'] / best_anchor:.2f}" if best_anchor else "-"])
    return (["load", "contestant", "goodput req/s", "errors", "p50 ms", "p99 ms", "p99.9 ms",
             "p99 ÷ HAProxy", "p99 ÷ best anchor"], rows)


# --- scenario 9: chat traffic on shared system prompts, block-level prefix caches ---------
#
# The arithmetic (bench/chattrace.py has the trace's; docs/benchmarks.md, scenario 9):
# 8 simulators x 4 slots, each with a prefix cache of 544 blocks of 64 bytes (LRU). The 16
# system prompts hold 3,072 blocks: 70.6 % of the fleet's 4,352 and 5.6x one backend's 544.
# A request holds a slot for 20 ms + 1 ms per prompt block not cached + max_tokens (16 on
# average) x 5 ms. The mean prompt is 199 blocks, so a request that misses everything holds a
# slot 299 ms and the fleet serves 32 / 0.299 = 107 req/s when nothing is cached (the
# all-miss capacity, computed from the trace by chattrace.all_miss_ms); one that finds its
# system prompt and history cached holds it about 108 ms (2.8x fewer), and gets its first
# token after about 28 ms instead of 219 ms.

CHAT_FLEET = dict(n=8, slots=4, cache_blocks=544, block_bytes=64, latency_ms=20,
                  us_per_block=1000, token_ms=5, jitter=0.1)
CHAT_SLO_MS = 1000


def chat_capacity():
    import chattrace
    f = CHAT_FLEET
    ms, blocks = chattrace.all_miss_ms(f["latency_ms"], f["us_per_block"], f["token_ms"])
    return f["n"] * f["slots"] * 1000 / ms, ms, blocks


CHAT_CONTESTANTS = {
    "nginx least_conn": lambda run, b: start_nginx(run, b, "least_conn", streaming=True,
                                                   body_buffer="1m"),
    "haproxy leastconn maxconn 4": lambda run, b: start_haproxy(run, b, "leastconn", maxconn=4,
                                                                streaming=True),
    # as in scenario 7, bounded load (125 %): here the body's first 256 bytes start with
    # whichever top-level field the client wrote first
    "haproxy hash body prefix maxconn 4": lambda run, b: start_haproxy(
        run, b, "hash req.body,bytes(0,256)", maxconn=4, streaming=True,
        extra="    option http-buffer-request\n    hash-type consistent\n"
              "    hash-balance-factor 125\n"),
    "accelnet least-connections max_concurrency 4":
        lambda run, b: start_accelnet(run, b, "least-connections", cap=4),
    "accelnet prefix-affinity max_concurrency 4":
        lambda run, b: start_accelnet(run, b, "prefix-affinity", cap=4),
    # the simulators' block size and cache size, as an operator knows the engine's
    "accelnet llm max_concurrency 4":
        lambda run, b: start_accelnet(run, b, "llm", cap=4,
                                      extra=f"    llm: {{block_bytes: {CHAT_FLEET['block_bytes']}, "
                                            f"cache_blocks: {CHAT_FLEET['cache_blocks']}}}\n"),
}
CHAT_LLM = "accelnet llm max_concurrency 4"
CHAT_ANCHORS = ("nginx least_conn", "haproxy leastconn maxconn 4")
CHAT_HASH = "haproxy hash body prefix maxconn 4"
CHAT_HA = "haproxy leastconn maxconn 4"


def start_block_sims(run, sims, block_bytes, jitter, prefix, extra=()):
    """One `accelnet sim` with a block prefix cache per dict of <sims> (slots, cache_blocks,
    latency_ms, us_per_block, token_ms), named PREFIX0, PREFIX1...: (ports, processes); all
    stopped again if one does not start."""
    ports, procs = [], []
    for i, f in enumerate(sims):
        port = free_port()
        argv = [ACCELNET, "sim", "--listen", f"127.0.0.1:{port}", "--name", f"{prefix}{i}",
                "--slots", str(f["slots"]), "--cache-blocks", str(f["cache_blocks"]),
                "--block-bytes", str(block_bytes), "--latency-ms", str(f["latency_ms"]),
                "--prefill-us-per-block", str(f["us_per_block"]), "--tokens", "16",
                "--token-ms", str(f["token_ms"]), "--jitter", str(jitter), *extra]
        try:
            procs.append(run.start(argv, port, name=f"{prefix}{i}"))
        except RuntimeError:
            for p in procs:
                run.stop(p)
            raise
        ports.append(port)
    return ports, procs


def start_chat_fleet(run):
    f = CHAT_FLEET
    return start_block_sims(run, [f] * f["n"], f["block_bytes"], f["jitter"], "chat")


def chat_run(run, name, rate, seconds, trace, timeout_s):
    """One contestant at one rate on a fresh, cold fleet: the loadgen's figures, plus the
    simulators' block counts; {"failed": why} when the contestant (or a simulator: one
    without --cache-blocks) does not start."""
    return fleet_run(run, start_chat_fleet, CHAT_CONTESTANTS[name], rate, seconds, trace,
                     timeout_s, CHAT_SLO_MS)


def fleet_run(run, start_sims, start_proxy, rate, seconds, trace, timeout_s, slo_ms,
              loadgen_args=(), after=None):
    """chat_run's work for any fleet (bench/fleets.py too): start_sims(run) -> (ports,
    procs), start_proxy(run, ports) -> (proc, port); <loadgen_args> go to `loadgen open`
    (bench/fleets.py: --at), and after(g), when given, runs once the load is done, before
    the proxy stops (bench/fleets.py scrapes the proxy's /metrics there)."""
    try:
        ports, sims = start_sims(run)
    except RuntimeError as e:
        return {"failed": f"simulator: {e}"}
    p = None
    try:
        try:
            p, port = start_proxy(run, ports)
        except RuntimeError as e:
            return {"failed": str(e)}
        load_avg = os.getloadavg()[0]
        c0 = [proc_cpu_s(x.pid) for x in [p] + sims]
        g = loadgen("open", port, "--rate", f"{rate:.2f}", "--duration", str(seconds),
                    "--path", "/v1/chat/completions", "--bodies", trace, "--slo-ms",
                    str(slo_ms), "--timeout-s", str(timeout_s), *loadgen_args,
                    timeout=seconds + timeout_s + 120)
        c1 = [proc_cpu_s(x.pid) for x in [p] + sims]
        # CPU seconds the proxy and the simulators used (all on SERVER_CPU), and the load
        # average before the run: a busy machine shows here
        g["proxy_cpu_s"], g["sims_cpu_s"] = c1[0] - c0[0], sum(c1[1:]) - sum(c0[1:])
        g["load_avg"] = load_avg
        hit = missed = 0
        served = []
        for sp in ports:
            st = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{sp}/sim/stats",
                                                   timeout=5).read())
            hit += st.get("blocks_hit", 0)
            missed += st.get("blocks_missed", 0)
            served.append(st["requests"])
        g["blocks_hit"], g["blocks_missed"], g["served"] = hit, missed, served
        g["hit_share"] = hit / (hit + missed) if hit + missed else 0.0
        if after:
            after(g)
        return g
    finally:
        if p:
            run.stop(p)
        for s_ in sims:
            run.stop(s_)


def scenario_chat(run, res, loads, seconds, control_loads, pick=None, timeout_s=10,
                  control_all=True):
    import chattrace
    cap, miss_ms, blocks = chat_capacity()
    names = [n for n in CHAT_CONTESTANTS if not pick or re.search(pick, n)]
    results = {"shared": {}, "control": {}}
    plan = [("shared", load, names) for load in loads]
    # the control: every contestant at 1.6x (unless <control_all> is off), the anchor and
    # the new balancer at the other loads
    plan += [("control", load, [n for n in names if (control_all and load == 1.6)
                                or n in (CHAT_HA, CHAT_LLM)]) for load in control_loads]
    for variant, load, who in plan:
        rate = cap * load
        trace = os.path.join(run.dir, f"chat-{variant}-{load}.jsonl")
        n = chattrace.write_trace(trace, rate, seconds, shared=variant == "shared")
        blocks = chattrace.trace_blocks(rate, seconds)
        for name in who:
            t = time.monotonic()
            g = chat_run(run, name, rate, seconds, trace, timeout_s)
            g["requests_in_trace"], g["blocks_in_trace"] = n, blocks
            results[variant].setdefault(f"{load:.1f}x", {})[name] = g
            print(f"  9 {variant} {load:.1f}x {name}: "
                  + (f"failed ({g['failed'][-160:]})" if "failed" in g else
                     f"goodput@SLO {g['goodput_slo']:.1f}/s, TTFT p90 "
                     f"{fmt_ttft(g['ttft_ms']['p90'])} ms, hits {g['hit_share'] * 100:.0f}%")
                  + f" ({time.monotonic() - t:.0f} s)", file=sys.stderr, flush=True)
        os.unlink(trace)
    f = CHAT_FLEET
    res["scenarios"]["9"] = {
        "title": f"chat traffic on shared system prompts: {f['n']} backends with block prefix "
                 f"caches (all-miss capacity {cap:.0f} req/s)",
        "kind": "chat", "capacity": cap, "all_miss_ms": miss_ms, "mean_prompt_blocks": blocks,
        "fleet": f, "slo_ms": CHAT_SLO_MS, "seconds": seconds, "results": results}


NEVER_MS = 1e8  # the loadgen counts a request that never got its first token as 1e9 ms


def fmt_ttft(v):
    return "never" if v >= NEVER_MS else f"{v:.0f}"


def chat_rows(by_load):
    rows = []
    for load, by in by_load.items():
        for name, g in by.items():
            if "failed" in g:
                rows.append([load, name] + ["-"] * 9 + ["did not start"])
                continue
            t = g["ttft_ms"]
            served = g["served"]
            rows.append([load, name, f"{g['rate']:.0f}", f"{g['goodput_slo']:.1f}",
                         f"{g['goodput']:.1f}", str(g["errors"]),
                         fmt_ttft(t["p50"]), fmt_ttft(t["p90"]), fmt_ttft(t["p99"]),
                         f"{g['hit_share'] * 100:.0f}%",
                         f"{max(served) / (sum(served) / len(served)):.2f}"
                         if sum(served) else "-",
                         f"{(g['proxy_cpu_s'] + g['sims_cpu_s']) / g['elapsed_s'] * 100:.0f}%"
                         if "proxy_cpu_s" in g else "-"])
    return (["load", "contestant", "offered req/s", "goodput ≤ SLO req/s", "answered req/s",
             "errors", "TTFT p50 ms", "p90 ms", "p99 ms", "cache hit share",
             "busiest ÷ mean backend", "server CPU"], rows)


def summarize_chat(sc):
    return chat_rows(sc["results"]["shared"])


def summarize_chat_control(sc):
    return chat_rows(sc["results"]["control"])


def _fig(g, key):
    if not g or "failed" in g:
        return None
    if key == "goodput":
        return g["goodput_slo"]
    v = g["ttft_ms"][key]
    return float("inf") if v >= NEVER_MS else v


def _ratio(a, b):
    if a is None or b is None:
        return None
    if b == 0 or b == float("inf"):
        return 1.0 if a == b else (0.0 if b == float("inf") else float("inf"))
    return a / b


def chat_checks(sc, who=CHAT_LLM):
    """Issue 14's must-show for <who> at 1.6x the all-miss load, each a ratio, pass or miss."""
    rows = []
    shared = sc["results"]["shared"].get("1.6x", {})
    control = sc["results"]["control"].get("1.6x", {})
    me, ctl = shared.get(who), control.get(who)
    anchors = [shared.get(n) for n in CHAT_ANCHORS]
    anchors = [a for a in anchors if a and "failed" not in a]

    def best(key, better):
        vals = [_fig(a, key) for a in anchors]
        return better(vals) if vals else None

    def line(what, target, r, ok):
        if r is None:
            rows.append([what, target, "-", "not run"])
        else:
            rows.append([what, target, "∞" if r == float("inf") else f"{r:.2f}",
                         "pass" if ok(r) else "MISS"])

    line("goodput ≤ SLO ÷ the better of nginx least_conn, HAProxy leastconn", "≥ 1.6",
         _ratio(_fig(me, "goodput"), best("goodput", max)), lambda r: r >= 1.6)
    line("TTFT p90 ÷ the better of nginx least_conn, HAProxy leastconn", "≤ 0.25",
         _ratio(_fig(me, "p90"), best("p90", min)), lambda r: r <= 0.25)
    line("goodput ≤ SLO ÷ HAProxy body hash", "≥ 1.2",
         _ratio(_fig(me, "goodput"), _fig(shared.get(CHAT_HASH), "goodput")),
         lambda r: r >= 1.2)
    line("TTFT p90 ÷ HAProxy body hash", "≤ 0.5",
         _ratio(_fig(me, "p90"), _fig(shared.get(CHAT_HASH), "p90")), lambda r: r <= 0.5)
    ha = control.get(CHAT_HA)
    line("control: goodput ≤ SLO ÷ HAProxy leastconn", "≥ 0.95",
         _ratio(_fig(ctl, "goodput"), _fig(ha, "goodput")), lambda r: r >= 0.95)
    for k in ("p50", "p90", "p99"):
        line(f"control: TTFT {k} ÷ HAProxy leastconn", "≤ 1.05",
             _ratio(_fig(ctl, k), _fig(ha, k)), lambda r: r <= 1.05)
    return rows


def chat_check_table(sc):
    """The must-show for the new balancer, and the same lines for prefix-affinity (for
    reference: what the balancer before it does)."""
    mine = chat_checks(sc, CHAT_LLM)
    ref = chat_checks(sc, "accelnet prefix-affinity max_concurrency 4")
    rows = [m[:2] + m[2:] + r[2:] for m, r in zip(mine, ref)]
    return (["at 1.6x all-miss load", "target", "llm", "llm verdict", "prefix-affinity",
             "prefix-affinity verdict"], rows)


def ratios_chat(sc):
    rows = []
    for variant in ("shared", "control"):
        for load, by in sc["results"][variant].items():
            ha = by.get(CHAT_HA)
            if not ha or "failed" in ha:
                continue
            for name, g in by.items():
                if "failed" in g:
                    continue
                cells = []
                for key in ("goodput", "p50", "p90", "p99"):
                    r = _ratio(_fig(g, key), _fig(ha, key))
                    cells.append("-" if r is None else "∞" if r == float("inf")
                                 else f"{r:.2f}")
                rows.append([variant, load, name] + cells)
    return (["trace", "load", "÷ HAProxy leastconn maxconn 4", "goodput ≤ SLO", "TTFT p50",
             "p90", "p99"], rows)


# --- output -------------------------------------------------------------------------------

def emit(text, res, json_path=None):
    """Print a bench's report and, given <json_path>, write its raw figures there."""
    print(text)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(res, f, indent=1)


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def ratios_sse(sc):
    ha = sc["rounds"]["haproxy"]
    getters = [lambda g, k=k: g["token_delay_ms"][k] for k in ("p50", "p99", "p999")]
    getters += [lambda g: g["ttft_ms"]["p99"], lambda g: g.get("cpu_s", 0),
                lambda g: g.get("peak_rss_kb", 0)]
    rows = [[n] + ratio_row(r, ha, getters) for n, r in sc["rounds"].items() if n != "direct"]
    return (["÷ HAProxy", "delay p50", "delay p99", "delay p99.9", "first token p99", "CPU",
             "peak RSS"], rows)


def ratios_fleet(sc):
    rows = []
    for load, by in sc["results"].items():
        ha = by.get("haproxy leastconn maxconn 4")
        if not ha:
            continue
        for name, g in by.items():
            rows.append([load, name] + ratio_row([g], [ha], [
                lambda x: x["goodput"], lambda x: x["latency_ms"]["p50"],
                lambda x: x["latency_ms"]["p99"], lambda x: x["latency_ms"]["p999"]]))
    return (["load", "÷ HAProxy", "goodput", "p50", "p99", "p99.9"], rows)


SUMMARIZERS = {"wrk": summarize_wrk, "idle": summarize_idle, "sse": summarize_sse,
               "fleet": summarize_fleet, "prefix": summarize_prefix, "obs": summarize_obs,
               "chat": summarize_chat}
RATIOS = {"wrk": ratios_wrk, "sse": ratios_sse, "fleet": ratios_fleet, "prefix": ratios_fleet,
          "chat": ratios_chat}


def chart(res, outdir):
    """One PNG: latency percentiles per contestant, a panel per scenario (log scale)."""
    if not shutil.which("gnuplot"):
        return None
    panels = []
    for key, sc in sorted(res["scenarios"].items()):
        if sc["kind"] == "wrk":
            data = {n: (med([w["p50_ms"] for w in r]), med([w["p99_ms"] for w in r]),
                        med([w["p999_ms"] for w in r])) for n, r in sc["rounds"].items()}
            panels.append((f"{key}. {sc['title']}", data))
        elif sc["kind"] == "sse":
            data = {n: tuple(med([g["token_delay_ms"][k] for g in r]) for k in ("p50", "p99", "p999"))
                    for n, r in sc["rounds"].items()}
            panels.append((f"{key}. per-token delay", data))
        elif sc["kind"] in ("fleet", "prefix"):
            for load, by in sc["results"].items():
                data = {n.replace("accelnet ", "an ").replace(" maxconn 4", "+maxconn")
                        .replace("weighted-round-robin", "wrr")
                        .replace(" max_concurrency 4", "+cap").replace("least-connections", "lc"):
                        (g["latency_ms"]["p50"], g["latency_ms"]["p99"], g["latency_ms"]["p999"])
                        for n, g in by.items()}
                panels.append((f"{key}. {sc['kind']} at {load} load", data))
    if not panels:
        return None
    script = [f"set terminal pngcairo size 1400,{420 * ((len(panels) + 1) // 2)} font 'sans,9'",
              f"set output '{outdir}/latency.png'",
              f"set multiplot layout {(len(panels) + 1) // 2},2 title 'latency percentiles (ms, log "
              f"scale): p50 / p99 / p99.9 — {res['date']}'",
              "set style data histograms", "set style histogram clustered gap 1",
              "set style fill solid 0.8 border -1", "set logscale y", "set grid ytics",
              "set key top left", "set xtics rotate by -20 noenhanced", "set yrange [0.01:*]"]
    for i, (title, data) in enumerate(panels):
        dat = os.path.join(outdir, f"panel{i}.dat")
        with open(dat, "w") as f:
            for n, (a, b, c) in data.items():
                f.write(f"\"{n}\" {max(a, 0.001)} {max(b, 0.001)} {max(c, 0.001)}\n")
        script.append(f"set title \"{title}\" noenhanced")
        script.append(f"plot '{dat}' using 2:xtic(1) title 'p50', '' using 3 title 'p99', "
                      "'' using 4 title 'p99.9'")
    script.append("unset multiplot")
    path = os.path.join(outdir, "chart.gp")
    with open(path, "w") as f:
        f.write("\n".join(script) + "\n")
    subprocess.run(["gnuplot", path], check=False, capture_output=True)
    return os.path.join(outdir, "latency.png")


def versions():
    def first(cmd):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
            return (r.stdout + r.stderr).strip().splitlines()[0]
        except (OSError, IndexError):
            return "?"
    return {"accelnet": first([ACCELNET, "version"]), "nginx": first(["nginx", "-v"]),
            "haproxy": first(["haproxy", "-v"]), "wrk": first(["wrk", "-v"]),
            "varnish": first(["varnishd", "-V"]),
            "kernel": platform.release(), "cpus": os.cpu_count(),
            "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                         if l.startswith("model name")), "?")}


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"stopped by signal {signum}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smoke check in under 3 minutes")
    ap.add_argument("--only", default="1,2,3,4,5,6,7,8,9,10,11",
                    help="scenarios to run, e.g. 1,5; cache: 10,11")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out"))
    ap.add_argument("--fleet", metavar="REGEX",
                    help="scenario 6: only the contestants whose names match (for tuning; "
                    "the ratio columns need the anchors)")
    ap.add_argument("--fleet-seconds", type=int,
                    help="scenario 6: seconds per run (default 45; --quick: 2)")
    ap.add_argument("--fleet-loads", type=lambda v: [float(x) for x in v.split(",")],
                    help="scenario 6: loads, e.g. 0.8,0.95 (default 0.5,0.8,0.95; --quick: "
                    "0.95)")
    ap.add_argument("--rounds", type=int,
                    help="scenarios 1-3: interleaved rounds (default 5; --quick: 1)")
    ap.add_argument("--seconds", type=int,
                    help="scenarios 1-3: seconds of load per contestant and round (default 5)")
    ap.add_argument("--baseline", metavar="ACCELNET_BIN",
                    help="scenarios 1-5: also run this (older) accelnet binary as "
                    "'accelnet-base' and report this build's figures as ratios to it")
    ap.add_argument("--io", action="store_true",
                    help="scenarios 1-4: run accelnet on each event-loop back end, 'accelnet' "
                    "on io_uring and 'accelnet-epoll' (tune.io), and report the first as "
                    "ratios to the second")
    ap.add_argument("--haproxy-splice", action="store_true",
                    help="scenarios 1-5: also run HAProxy with `option splice-response` as "
                    "'haproxy-splice' (kernel splicing of response bodies, as accelnet's "
                    "tune.splice; the ratio columns stay against plain HAProxy)")
    ap.add_argument("--chat", metavar="REGEX",
                    help="scenario 9: only the contestants whose names match")
    ap.add_argument("--chat-seconds", type=int, help="scenario 9: seconds per run (default 30; "
                    "--quick: 2)")
    ap.add_argument("--chat-loads", type=lambda v: [float(x) for x in v.split(",")],
                    help="scenario 9: loads as multiples of the all-miss capacity (default "
                    "0.5,1.0,1.6,2.0; --quick: 1.6)")
    ap.add_argument("--chat-control-loads", type=lambda v: [float(x) for x in v.split(",") if x],
                    help="scenario 9: loads of the no-sharing control (default as "
                    "--chat-loads; every contestant at 1.6, HAProxy leastconn and accelnet llm "
                    "at the others; empty: none)")
    ap.add_argument("--caches", default="accelnet,nginx,haproxy,varnish",
                    help="scenarios 10-11: the caches to run (for tuning; the ratio rows "
                    "need accelnet)")
    ap.add_argument("--zipf-requests", type=int,
                    help="scenario 11: requests replayed (default 200000; --quick: 10000)")
    ap.add_argument("--obs-rounds", type=int,
                    help="scenario 8: rounds (default 7; --quick: 1)")
    ap.add_argument("--report", metavar="RESULTS_JSON",
                    help="only render summary.md and latency.png again from a results.json")
    a = ap.parse_args()
    if a.report:
        with open(a.report) as f:
            print(render(json.load(f), os.path.dirname(os.path.abspath(a.report))))
        return
    only = set(a.only.split(","))
    if "cache" in only:
        only |= {"10", "11"}
    q = a.quick
    if a.baseline:
        PROXIES["accelnet-base"] = functools.partial(start_accelnet,
                                                     binary=os.path.abspath(a.baseline))
    if a.io:
        PROXIES["accelnet"] = functools.partial(start_accelnet, extra="tune: {io: io_uring}\n")
        PROXIES["accelnet-epoll"] = functools.partial(start_accelnet, extra="tune: {io: epoll}\n")
    if a.haproxy_splice:
        # maxpipes: its default (maxconn / 4) asks for more descriptors than the limit gives
        PROXIES["haproxy-splice"] = functools.partial(start_haproxy, glob="    maxpipes 32\n",
                                                      defaults="    option splice-response\n")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H-%M-%SZ")
    outdir = os.path.join(a.out, stamp + ("-quick" if q else ""))
    os.makedirs(outdir, exist_ok=True)
    raise_nofile()
    res = {"date": stamp, "quick": q, "versions": versions(),
           "placement": f"load generators on CPU {LOAD_CPU}, servers on CPU {SERVER_CPU}",
           "scenarios": {}, "baseline": a.baseline}
    run = Run()
    # stopped (a CI job's limit, kill, a closed terminal) as by Ctrl-C: through the finally
    # below, which kills every server, origin and simulator started
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupted)
    t0 = time.monotonic()
    import cache  # noqa: E402  (scenarios 10-11; it imports this file's helpers)
    try:
        www = os.path.join(run.dir, "www")
        os.makedirs(www)
        with open(os.path.join(www, "small"), "wb") as f:
            f.write(os.urandom(2048))
        with open(os.path.join(www, "1m"), "wb") as f:
            f.write(os.urandom(1 << 20))
        oport = free_port()
        ocfg = run.write("origin.conf", f"""daemon off; master_process off; worker_processes 1;
worker_rlimit_nofile {NOFILE}; error_log {run.dir}/origin.err crit; pid {run.dir}/origin.pid;
events {{ worker_connections {NOFILE - 50}; }}
http {{ access_log off; keepalive_requests 10000000; keepalive_timeout 300s;
  server {{ listen 127.0.0.1:{oport} backlog=65535; root {www}; }} }}
""")
        run.start(["nginx", "-c", ocfg, "-e", f"{run.dir}/origin.err"], oport, name="origin")
        res["origin"] = oport
        rounds, secs = (1, 2) if q else (5, 5)
        rounds, secs = a.rounds or rounds, a.seconds or secs
        steps = [
            ("1", lambda: scenario_wrk(run, res, "1", "2 KiB responses, keep-alive, 64 connections",
                                       "/small", 64, secs, rounds)),
            ("2", lambda: scenario_wrk(run, res, "2", "1 MiB responses, keep-alive, 16 connections",
                                       "/1m", 16, secs, rounds)),
            ("3", lambda: scenario_wrk(run, res, "3", "a new connection per request, 32 clients",
                                       "/small", 32, secs, rounds, ("-H", "Connection: close"))),
            ("4", lambda: scenario_idle(run, res, 1000 if q else IDLE_CONNS)),
            ("5", lambda: scenario_sse(run, res, 50 if q else 500, 50 if q else 200, 20,
                                       1 if q else 3)),
            ("6", lambda: scenario_fleet(run, res, a.fleet_loads or ([0.95] if q else
                                                                     [0.5, 0.8, 0.95]),
                                         a.fleet_seconds or (2 if q else 45), a.fleet)),
            ("7", lambda: scenario_prefix(run, res, [0.8] if q else [0.5, 0.8, 1.2],
                                          2 if q else 30)),
            ("8", lambda: scenario_obs(run, res, secs, a.obs_rounds or (1 if q else 7))),
            ("9", lambda: scenario_chat(
                run, res, a.chat_loads or ([1.6] if q else [0.5, 1.0, 1.6, 2.0]),
                a.chat_seconds or (2 if q else 30),
                a.chat_control_loads if a.chat_control_loads is not None
                else ([1.6] if q else (a.chat_loads or [0.5, 1.0, 1.6, 2.0])),
                a.chat, 4 if q else 10, control_all=not q)),
            ("10", lambda: cache.scenario_hits(run, res, 1 if q else 3, 2 if q else 4,
                                               a.caches.split(","))),
            ("11", lambda: cache.scenario_zipf(run, res, a.zipf_requests or
                                               (10000 if q else None), a.caches.split(","))),
        ]
        for key, fn in steps:
            if key in only:
                t = time.monotonic()
                print(f"scenario {key} ...", file=sys.stderr, flush=True)
                fn()
                print(f"scenario {key} done in {time.monotonic() - t:.0f} s", file=sys.stderr,
                      flush=True)
    finally:
        run.cleanup()
    res["elapsed_s"] = time.monotonic() - t0
    res.pop("origin", None)
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(render(res, outdir))


def baseline_rows(sc):
    """accelnet's figures as ratios to the baseline build's, same round (--baseline)."""
    rounds = sc["rounds"]
    if "accelnet-base" not in rounds:
        return None
    if sc["kind"] == "wrk":
        getters = [("req/s", lambda w: w["rps"]), ("p50", lambda w: w["p50_ms"]),
                   ("p99", lambda w: w["p99_ms"]), ("CPU/req", lambda w: w["cpu_us_per_req"])]
    else:
        getters = [("token delay p50", lambda g: g["token_delay_ms"]["p50"]),
                   ("token delay p99", lambda g: g["token_delay_ms"]["p99"]),
                   ("CPU/token", lambda g: g["cpu_s"] / max(g["token_delay_ms"]["n"], 1))]
    row = ratio_row(rounds["accelnet"], rounds["accelnet-base"], [g for _, g in getters])
    return (["accelnet ÷ accelnet-base"] + [n for n, _ in getters], [["ratio"] + row])


def io_rows(sc):
    """accelnet on io_uring against accelnet on epoll (--io), same round."""
    rounds = sc["rounds"]
    if "accelnet-epoll" not in rounds or sc["kind"] != "wrk":
        return None
    getters = [("req/s", lambda w: w["rps"]), ("p50", lambda w: w["p50_ms"]),
               ("p99", lambda w: w["p99_ms"]), ("CPU/req", lambda w: w["cpu_us_per_req"]),
               ("syscalls/req", lambda w: w.get("syscalls_per_req", 0))]
    row = ratio_row(rounds["accelnet"], rounds["accelnet-epoll"], [g for _, g in getters])
    return (["accelnet (io_uring) ÷ accelnet-epoll"] + [n for n, _ in getters], [["ratio"] + row])


def render(res, outdir):
    """summary.md and latency.png from a results dict; returns the markdown."""
    import cache  # noqa: E402
    SUMMARIZERS.update(cache.SUMMARIZERS)
    RATIOS.update(cache.RATIOS)
    v = res["versions"]
    md = [f"# accelnet bench {res['date']}{' (quick)' if res['quick'] else ''}", "",
          f"{v['cpu']}, {v['cpus']} CPUs, kernel {v['kernel']}; {v['accelnet']}, {v['nginx']}, "
          f"{v['haproxy'].split(' - ')[0]}"
          + (", Varnish " + re.sub(r".*varnish-([0-9.]+).*", r"\1", v.get("varnish", "?"))
             if "10" in res["scenarios"]
             or "11" in res["scenarios"] else "")
          + f"; {res['placement']}; {res['elapsed_s']:.0f} s.", ""]
    for key, sc in sorted(res["scenarios"].items()):
        md += [f"## {key}. {sc['title']}", "", table(*SUMMARIZERS[sc["kind"]](sc)), ""]
        if sc["kind"] == "obs":
            md += ["Each server with its access log on (and, for accelnet, /metrics scraped "
                   f"every second: {sc['scrapes']} scrapes) against the same server with it off, "
                   "median of same-round ratios:", "", table(*ratios_obs(sc)), ""]
        if sc["kind"] == "chat":
            md += ["The control: the same generator, every conversation with a system prompt "
                   "of its own (nothing shared between conversations):", "",
                   table(*summarize_chat_control(sc)) if sc["results"]["control"]
                   else "(not run)", "",
                   f"Issue 14's must-show at 1.6x the all-miss load (goodput: requests answered "
                   f"with their first token within {sc['slo_ms']} ms, per second):", "",
                   table(*chat_check_table(sc)), ""]
        if sc["kind"] == "cachezipf":
            md += [cache.notes_zipf(sc), ""]
        if sc["kind"] in ("cachehit", "cachezipf"):
            if sc.get("skipped"):
                md += ["Not run: " + "; ".join(f"{n}: {w}" for n, w in sc["skipped"].items()), ""]
            md += ["accelnet's figures as ratios to each other cache's" + (
                   " (median of same-round ratios):" if sc["kind"] == "cachehit" else ":"), "",
                   table(*RATIOS[sc["kind"]](sc)), ""]
        elif sc["kind"] in RATIOS:
            md += ["Each figure as a ratio to HAProxy's (" + (
                   "same trace, same load):" if sc["kind"] == "chat" else
                   "median of same-round ratios):"), "",
                   table(*RATIOS[sc["kind"]](sc)), ""]
        if io_rows(sc):
            md += ["The event loops' back ends (tune.io), median of same-round ratios:", "",
                   table(*io_rows(sc)), ""]
        if sc["kind"] in ("wrk", "sse") and baseline_rows(sc):
            md += [f"This build against the baseline build ({res.get('baseline')}), median of "
                   "same-round ratios:", "", table(*baseline_rows(sc)), ""]
    png = chart(res, outdir)
    if png:
        md += [f"Chart: {png}", ""]
    md += [f"Raw figures: {os.path.join(outdir, 'results.json')}"]
    text = "\n".join(md) + "\n"
    with open(os.path.join(outdir, "summary.md"), "w") as f:
        f.write(text)
    return text


if __name__ == "__main__":
    main()
