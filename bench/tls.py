"""TLS termination: accelnet, HAProxy and nginx side by side, in one run, on one machine.

Each proxy runs one worker, terminates TLS with the same certificate (ECDSA P-256, then
RSA-2048, made here with openssl) and proxies plain HTTP to the same nginx origin over
upstream keep-alive. All three are configured to negotiate only TLS 1.3 with
TLS_AES_128_GCM_SHA256 and X25519, and to resume sessions (tickets; nginx and HAProxy also
keep their session caches on). build/tlsload drives them from CPU 0 (servers on CPU 1):

  keep-alive  64 connections, one request after another: HTTPS requests/s and CPU/request
  full        32 clients, a new connection with a full handshake per request
  resume      32 clients, a new connection per request offering the slot's last session;
              the share of handshakes resumed is counted (SSL_session_reused in the client)

CPU per request is utime+stime of the proxy process over the measurement divided by the
requests tlsload counted. Contestants are interleaved over rounds (alternating order) and
figures are median [min-max] over rounds, ratios the median of same-round ratios to HAProxy.
The load average (`uptime`) is recorded before and after every scenario: the machine is
shared. Nothing here asserts a timing.

On two cores the client limits the connection rates (a client handshake costs about as much
as a server one). --server-cpu F holds every contestant to F of one CPU with a cgroup CPU
quota (the same for all three), so that with the load generator's whole core to spare the
server's own capacity sets the rate: new connections per second at an equal CPU budget.

Usage: bench/tls [--quick] [--rounds N] [--seconds S] [--keys ecdsa,rsa] [--out DIR]
                 [--server-cpu F]
       bench/tls --report results.json
"""

import argparse
import datetime
import functools
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the shared helpers: processes, ports, /proc figures)
from bench import (ACCELNET, HAPROXY_MAXCONN, LOAD_CPU, NOFILE, ROOT, Run, free_port,  # noqa: E402
                   med, proc_cpu_s, proc_kb, raise_nofile, spread, table)

TLSLOAD = os.path.join(ROOT, "build", "tlsload")
SUITE, GROUP = "TLS_AES_128_GCM_SHA256", "X25519"
SCENARIOS = [("keepalive", "keep-alive HTTPS requests, 64 connections", 64),
             ("full", "new connections, full handshakes, 32 clients", 32),
             ("resume", "new connections, resumed sessions, 32 clients", 32)]


def make_cert(run, kind):
    """A self-signed certificate for bench.test: kind "ecdsa" (P-256) or "rsa" (2048)."""
    key = os.path.join(run.dir, f"{kind}.key")
    crt = os.path.join(run.dir, f"{kind}.crt")
    newkey = (["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"] if kind == "ecdsa"
              else ["-newkey", "rsa:2048"])
    subprocess.run(["openssl", "req", "-x509", *newkey, "-nodes", "-keyout", key, "-out", crt,
                    "-days", "2", "-subj", "/CN=bench.test", "-addext",
                    "subjectAltName=DNS:bench.test"], check=True, capture_output=True)
    pem = os.path.join(run.dir, f"{kind}.pem")  # HAProxy wants both in one file
    with open(pem, "w") as f:
        f.write(open(crt).read() + open(key).read())
    return crt, key, pem


def start_accelnet(run, origin, cert, binary=None, wrap=()):
    crt, key, _ = cert
    port = free_port()
    cfg = (f"workers: 1\n"
           f"listen:\n  - address: 127.0.0.1:{port}\n"
           f"    tls: {{cert: {crt}, key: {key}, min_version: \"1.3\", "
           f"ciphersuites: {SUITE}, groups: {GROUP}}}\n"
           "timeouts: {first_byte_ms: 300000, between_bytes_ms: 300000, idle_ms: 300000}\n"
           "limits: {max_connections: 200000}\n"
           f"pools:\n  - name: b\n    backends:\n      - {{address: 127.0.0.1:{origin}}}\n")
    p = run.start([*wrap, binary or ACCELNET, "proxy", "-c",
                   run.write(f"accelnet-{port}.yaml", cfg), "--log-level", "error"], port,
                  name="accelnet")
    return p, port


def start_nginx(run, origin, cert, wrap=()):
    crt, key, _ = cert
    port = free_port()
    d = os.path.join(run.dir, f"nginx-{port}")
    os.makedirs(d)
    cfg = f"""daemon off; master_process off; worker_processes 1;
worker_rlimit_nofile {NOFILE};
error_log {d}/error.log crit; pid {d}/nginx.pid;
events {{ worker_connections {NOFILE - 50}; }}
http {{
    access_log off;
    client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};
    uwsgi_temp_path {d}; scgi_temp_path {d};
    keepalive_requests 10000000; keepalive_timeout 300s;
    upstream b {{ server 127.0.0.1:{origin}; keepalive 256; keepalive_requests 10000000; }}
    server {{
        listen 127.0.0.1:{port} ssl backlog=65535;
        ssl_certificate {crt}; ssl_certificate_key {key};
        ssl_protocols TLSv1.3;
        ssl_conf_command Ciphersuites {SUITE};
        ssl_ecdh_curve {GROUP};
        ssl_session_cache shared:SSL:10m; ssl_session_tickets on; ssl_session_timeout 1h;
        location / {{
            proxy_pass http://b;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering on; proxy_buffer_size 16k; proxy_buffers 8 16k;
            proxy_busy_buffers_size 32k; proxy_max_temp_file_size 0;
        }}
    }}
}}
"""
    p = run.start([*wrap, "nginx", "-c", run.write(f"nginx-{port}.conf", cfg), "-e",
                   f"{d}/error.log"], port, name="nginx")
    return p, port


def start_haproxy(run, origin, cert, wrap=()):
    _, _, pem = cert
    port = free_port()
    cfg = f"""global
    nbthread 1
    maxconn {HAPROXY_MAXCONN}
    ssl-default-bind-options ssl-min-ver TLSv1.3
    ssl-default-bind-ciphersuites {SUITE}
defaults
    mode http
    timeout connect 5s
    timeout client 300s
    timeout server 300s
    timeout http-keep-alive 300s
    option http-keep-alive
    http-reuse always
frontend f
    bind 127.0.0.1:{port} ssl crt {pem} curves {GROUP} alpn http/1.1
    default_backend b
backend b
    server s0 127.0.0.1:{origin}
"""
    p = run.start([*wrap, "haproxy", "-db", "-f", run.write(f"haproxy-{port}.cfg", cfg)], port,
                  name="haproxy")
    return p, port


PROXIES = {"accelnet": start_accelnet, "nginx": start_nginx, "haproxy": start_haproxy}


def tlsload(port, mode, conns, seconds):
    out = subprocess.run(["taskset", "-c", LOAD_CPU, TLSLOAD, "--target", f"127.0.0.1:{port}",
                          "--mode", mode, "--conns", str(conns), "--duration", str(seconds),
                          "--suite", SUITE, "--groups", GROUP],
                         capture_output=True, text=True, timeout=seconds + 60,
                         preexec_fn=raise_nofile)
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise RuntimeError(f"tlsload gave no result: {out.stdout} {out.stderr}")


class CpuCap:
    """A cgroup (v1 cpu, or v2 with the cpu controller) holding the processes put in it to
    <fraction> of one CPU; removed on close."""

    def __init__(self, fraction):
        period = 100000
        quota = max(1000, int(fraction * period))
        name = f"accelnet-bench-{os.getpid()}"
        if os.path.isdir("/sys/fs/cgroup/cpu") and os.path.exists("/sys/fs/cgroup/cpu/tasks"):
            self.dir = os.path.join("/sys/fs/cgroup/cpu", name)
            os.mkdir(self.dir)
            self._write("cpu.cfs_period_us", str(period))
            self._write("cpu.cfs_quota_us", str(quota))
        else:
            self.dir = os.path.join("/sys/fs/cgroup", name)
            os.mkdir(self.dir)
            self._write("cpu.max", f"{quota} {period}")
        self.parent = os.path.dirname(self.dir)

    def _write(self, name, text):
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(text)

    def add(self, pid):
        self._write("cgroup.procs", str(pid))  # the whole process, every thread

    def close(self):
        with open(os.path.join(self.dir, "cgroup.procs")) as f:
            pids = f.read().split()
        for pid in pids:  # anything left goes back to the parent group
            with open(os.path.join(self.parent, "cgroup.procs"), "w") as f:
                f.write(pid)
        os.rmdir(self.dir)


CAP = None  # a CpuCap when --server-cpu is given


def load_avg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def scenario(run, res, origin, kind, cert, mode, title, conns, seconds, rounds):
    key = f"{kind} {mode}"
    figures = {name: [] for name in PROXIES}
    load_before = load_avg()
    procs = {name: start(run, origin, cert) for name, start in PROXIES.items()}
    if CAP:
        for p, _ in procs.values():
            CAP.add(p.pid)
    for name, (p, port) in procs.items():  # warm-up: connections, caches, page faults
        tlsload(port, mode, conns, 1)
    for r in range(rounds):
        order = list(PROXIES) if r % 2 == 0 else list(reversed(PROXIES))
        for name in order:
            p, port = procs[name]
            c0 = proc_cpu_s(p.pid)
            w = tlsload(port, mode, conns, seconds)
            c1 = proc_cpu_s(p.pid)
            w["cpu_us_per_req"] = (c1 - c0) * 1e6 / max(w["requests"], 1)
            w["round"] = r
            figures[name].append(w)
    for name, (p, port) in procs.items():
        for w in figures[name]:
            w["peak_rss_kb"] = proc_kb(p.pid, "VmHWM")
        run.stop(p)
    res["scenarios"][key] = {"title": f"{kind.upper()}: {title}", "mode": mode, "conns": conns,
                             "seconds": seconds, "load_before": load_before,
                             "load_after": load_avg(), "rounds": figures}
    print(f"{key}: " + ", ".join(f"{n} {med([w['rps'] for w in f]):.0f}/s "
                                 f"{med([w['cpu_us_per_req'] for w in f]):.1f} us"
                                 for n, f in figures.items()), file=sys.stderr, flush=True)


def summarize(sc):
    ha = sc["rounds"]["haproxy"]
    rows = []
    for name, rounds in sc["rounds"].items():
        rps_r = [w["rps"] / h["rps"] for w, h in zip(rounds, ha) if h["rps"]]
        cpu_r = [w["cpu_us_per_req"] / h["cpu_us_per_req"] for w, h in zip(rounds, ha)
                 if h["cpu_us_per_req"]]
        hs = sum(w["handshakes"] for w in rounds)
        last = rounds[-1]
        rows.append([name, spread([w["rps"] for w in rounds], "{:.0f}"), f"{med(rps_r):.2f}",
                     spread([w["cpu_us_per_req"] for w in rounds], "{:.1f}"), f"{med(cpu_r):.2f}",
                     str(sum(w["errors"] for w in rounds)),
                     f"{100 * sum(w['resumed'] for w in rounds) / max(hs, 1):.0f} %",
                     f"{last['protocol']} {last['suite']} {last['group']}",
                     f"{last['peak_rss_kb'] / 1024:.1f}"])
    return (["contestant", "req/s", "÷ HAProxy", "CPU µs/req", "÷ HAProxy", "errors", "resumed",
             "negotiated", "peak RSS MiB"], rows)


def render(res, outdir):
    v = res["versions"]
    md = [f"# accelnet TLS bench {res['date']}{' (quick)' if res['quick'] else ''}", "",
          f"{v['cpu']}, {v['cpus']} CPUs, kernel {v['kernel']}; {v['accelnet']}, {v['nginx']}, "
          f"{v['haproxy'].split(' - ')[0]}, {v['openssl']}; {res['placement']}; kTLS: "
          f"{res['ktls']}; {res['elapsed_s']:.0f} s.", ""]
    for key, sc in res["scenarios"].items():
        md += [f"## {sc['title']}", "",
               f"load average before {sc['load_before']}, after {sc['load_after']}; "
               f"{len(sc['rounds']['haproxy'])} rounds of {sc['seconds']} s", "",
               table(*summarize(sc)), ""]
    for kind, by in res.get("instructions", {}).items():
        md += [f"## {kind.upper()}: instructions (callgrind, one connection at a time)", "",
               table(*summarize_instructions(by)), ""]
    md += [f"Raw figures: {os.path.join(outdir, 'results.json')}"]
    text = "\n".join(md) + "\n"
    with open(os.path.join(outdir, "summary.md"), "w") as f:
        f.write(text)
    return text


# --- instructions: valgrind's callgrind counts, deterministic on a shared machine ---------

def callgrind_ir(run, pid, tag):
    """Instructions the process ran since the last zeroing (callgrind_control -z)."""
    subprocess.run(["callgrind_control", "-d", str(pid)], capture_output=True, timeout=120)
    total = 0
    for f in os.listdir(run.dir):
        if f.startswith(f"cg.{tag}."):
            path = os.path.join(run.dir, f)
            with open(path) as fh:
                for line in fh:
                    if line.startswith(("summary:", "totals:")):
                        total += int(line.split()[1])
                        break
            os.remove(path)
    return total


def instructions(run, res, origin, kind, cert, seconds):
    """Per proxy under callgrind, one client connection at a time: instructions per
    keep-alive request, per new connection with a full handshake (and its one request), and
    per resumed one. The keep-alive figure has its one handshake taken out."""
    bench.wait_port = functools.partial(wait_port_slow, timeout=180)
    out = {}
    for name, start in PROXIES.items():
        tag = name.replace("-", "")
        wrap = ("valgrind", "--tool=callgrind", f"--callgrind-out-file={run.dir}/cg.{tag}.%p")
        p, port = start(run, origin, cert, wrap=wrap)
        fig = {}
        for mode in ("full", "resume", "keepalive"):
            tlsload(port, mode, 1, 2)  # warm-up, and a session to resume
            subprocess.run(["callgrind_control", "-z", str(p.pid)], capture_output=True,
                           timeout=120)
            w = tlsload(port, mode, 1, seconds)
            fig[mode] = {"ir": callgrind_ir(run, p.pid, tag), "requests": w["requests"],
                         "handshakes": w["handshakes"], "resumed": w["resumed"],
                         "tickets": w["tickets"]}
        per_conn = fig["full"]["ir"] / max(fig["full"]["requests"], 1)
        ka = fig["keepalive"]
        fig["per_request"] = (ka["ir"] - ka["handshakes"] * per_conn) / max(
            ka["requests"] - ka["handshakes"], 1)
        fig["per_full"] = per_conn
        rs = fig["resume"]  # its first connection had no session to offer
        fig["per_resumed"] = (rs["ir"] - (rs["handshakes"] - rs["resumed"]) * per_conn) / max(
            rs["resumed"], 1)
        out[name] = fig
        run.stop(p)
        print(f"{kind} instructions {name}: {fig['per_request']:.0f}/request, "
              f"{fig['per_full']:.0f}/full, {fig['per_resumed']:.0f}/resumed", file=sys.stderr,
              flush=True)
    bench.wait_port = wait_port_slow
    res["instructions"][kind] = out


def wait_port_slow(port, proc, timeout=15):
    return WAIT_PORT(port, proc, timeout)


WAIT_PORT = bench.wait_port


def summarize_instructions(by):
    ha = by["haproxy"]
    rows = []
    for name, f in by.items():
        row = [name]
        for k in ("per_request", "per_full", "per_resumed"):
            row += [f"{f[k] / 1000:.1f}", f"{f[k] / ha[k]:.2f}" if ha[k] else "-"]
        hs = f["full"]["handshakes"]
        row += [f"{f['full']['tickets'] / max(hs, 1):.1f}",
                f"{100 * f['resume']['resumed'] / max(f['resume']['handshakes'], 1):.0f} %"]
        rows.append(row)
    return (["contestant", "k instr./keep-alive request", "÷ HAProxy", "k instr./full handshake",
             "÷ HAProxy", "k instr./resumed", "÷ HAProxy", "tickets/handshake", "resumed"],
            rows)


def ktls_state():
    if os.path.exists("/proc/net/tls_stat"):
        return "the kernel's tls module is loaded (/proc/net/tls_stat exists)"
    return "not available (no /proc/net/tls_stat: the kernel's tls module is not loaded)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 round of 2 s")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--keys", default="ecdsa,rsa")
    ap.add_argument("--modes", default="keepalive,full,resume")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out"))
    ap.add_argument("--instructions", action="store_true",
                    help="also count instructions per request and handshake under callgrind")
    ap.add_argument("--instructions-only", action="store_true",
                    help="only the callgrind counts (no timed scenarios)")
    ap.add_argument("--baseline", metavar="ACCELNET_BIN",
                    help="also run this (older) accelnet binary as 'accelnet-base'")
    ap.add_argument("--report", metavar="RESULTS_JSON", help="only render summary.md again")
    ap.add_argument("--server-cpu", type=float, metavar="F",
                    help="hold each contestant to F (0-1] of one CPU (cgroup CPU quota), so "
                         "the servers, not the client, limit connection rates")
    a = ap.parse_args()
    if a.report:
        with open(a.report) as f:
            print(render(json.load(f), os.path.dirname(os.path.abspath(a.report))))
        return
    if a.baseline:
        base = os.path.abspath(a.baseline)
        PROXIES["accelnet-base"] = lambda run, o, c, wrap=(): start_accelnet(run, o, c,
                                                                           binary=base,
                                                                           wrap=wrap)
    rounds, secs = (1, 2) if a.quick else (a.rounds, a.seconds)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H-%M-%SZ")
    outdir = os.path.join(a.out, "tls-" + stamp + ("-quick" if a.quick else ""))
    os.makedirs(outdir, exist_ok=True)
    raise_nofile()
    versions = bench.versions()
    versions["openssl"] = subprocess.run(["openssl", "version"], capture_output=True,
                                         text=True).stdout.strip()
    res = {"date": stamp, "quick": a.quick, "versions": versions, "ktls": ktls_state(),
           "placement": f"load generator on CPU {LOAD_CPU}, servers on CPU {bench.SERVER_CPU}",
           "suite": SUITE, "group": GROUP, "scenarios": {}, "instructions": {}}
    global CAP
    if a.server_cpu:
        if not 0 < a.server_cpu <= 1:
            sys.exit("--server-cpu: a fraction of one CPU, 0 < F <= 1")
        CAP = CpuCap(a.server_cpu)
        res["placement"] += (f", each server held to {a.server_cpu:g} of a CPU by a cgroup CPU "
                             "quota")
        res["server_cpu"] = a.server_cpu
    run = Run()
    t0 = time.monotonic()
    try:
        www = os.path.join(run.dir, "www")
        os.makedirs(www)
        with open(os.path.join(www, "small"), "wb") as f:
            f.write(os.urandom(2048))
        oport = free_port()
        ocfg = run.write("origin.conf", f"""daemon off; master_process off; worker_processes 1;
worker_rlimit_nofile {NOFILE}; error_log {run.dir}/origin.err crit; pid {run.dir}/origin.pid;
events {{ worker_connections {NOFILE - 50}; }}
http {{ access_log off; keepalive_requests 10000000; keepalive_timeout 300s;
  server {{ listen 127.0.0.1:{oport} backlog=65535; root {www}; }} }}
""")
        run.start(["nginx", "-c", ocfg, "-e", f"{run.dir}/origin.err"], oport, name="origin")
        modes = a.modes.split(",")
        for kind in a.keys.split(","):
            cert = make_cert(run, kind)
            for mode, title, conns in SCENARIOS:
                if mode in modes and not a.instructions_only:
                    scenario(run, res, oport, kind, cert, mode, title, conns, secs, rounds)
            if a.instructions or a.instructions_only:
                instructions(run, res, oport, kind, cert, 3 if a.quick else 10)
    finally:
        run.cleanup()
        if CAP:
            CAP.close()
    res["elapsed_s"] = time.monotonic() - t0
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(render(res, outdir))


if __name__ == "__main__":
    main()
