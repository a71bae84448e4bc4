"""bench/h2load.py: HTTP/2 from clients, accelnet against HAProxy and nginx, in one run.

h2load (Debian's nghttp2-client) drives each proxy over HTTP/2 two ways: TLS with ALPN `h2`
(every proxy terminates TLS 1.3 with the same self-signed ECDSA P-256 certificate) and h2c with
prior knowledge on a plain listener. Each proxy runs one worker (nginx one worker process,
HAProxy one thread) and proxies HTTP/1.1 over kept-alive connections to the same origin: an
nginx serving two static files, a small one (12 bytes) and a large one (1 MiB). h2load keeps
CONNS connections with 100 streams each (`-m 100`) for SECONDS per measurement.

Figures per (transport, size, proxy): requests/s (h2load's succeeded requests over the
measurement) and the proxy's CPU time per request (utime + stime from /proc/PID/stat over the
measurement, divided by the requests). Contestants are interleaved over rounds, the order
flipping each round; figures are medians over rounds, and ratios are medians of same-round
ratios to HAProxy. The load generator runs on CPU 0, the proxies and the origin on CPU 1 (as
bench.py does). Nothing here asserts a timing: this measures, it does not test.

Usage: bench/run --only h2load [--quick] [--rounds N] [--seconds S] [--conns C]
                               [--sizes small,large] [--transports tls,h2c]
                               [--before OTHER-ACCELNET] [--report results.json]
"""

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the run, the ports, the CPU figures)
from bench import ACCELNET, HAPROXY_MAXCONN, LOAD_CPU, NOFILE, free_port, proc_cpu_s  # noqa: E402
from tls import make_cert  # noqa: E402

SIZES = {"small": ("s", 12), "large": ("l", 1 << 20)}
STREAMS = 100


def start_origin(run):
    """nginx serving /s (12 bytes) and /l (1 MiB) over HTTP/1.1 keep-alive."""
    port = free_port()
    d = os.path.join(run.dir, f"origin-{port}")
    os.makedirs(d)
    for path, size in SIZES.values():
        with open(os.path.join(d, path), "wb") as f:
            f.write((b"hello world\n" * ((size + 11) // 12))[:size])
    cfg = f"""daemon off; master_process off; worker_processes 1;
worker_rlimit_nofile {NOFILE};
error_log {d}/error.log crit; pid {d}/nginx.pid;
events {{ worker_connections {NOFILE - 50}; }}
http {{
    access_log off; sendfile on; tcp_nopush on;
    client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};
    uwsgi_temp_path {d}; scgi_temp_path {d};
    keepalive_requests 10000000; keepalive_timeout 300s;
    server {{ listen 127.0.0.1:{port} backlog=65535; root {d}; default_type text/plain; }}
}}
"""
    run.start(["nginx", "-c", run.write(f"origin-{port}.conf", cfg), "-e", f"{d}/error.log"],
              port, name="origin")
    return port


def start_accelnet(run, origin, cert, binary=ACCELNET):
    crt, key, _ = cert
    tls_port, plain_port = free_port(), free_port()
    cfg = (f"workers: 1\n"
           f"listen:\n  - address: 127.0.0.1:{tls_port}\n"
           f"    tls: {{cert: {crt}, key: {key}, min_version: \"1.3\"}}\n"
           f"  - address: 127.0.0.1:{plain_port}\n"
           "timeouts: {first_byte_ms: 300000, between_bytes_ms: 300000, idle_ms: 300000}\n"
           "limits: {max_connections: 200000}\n"
           f"pools:\n  - name: b\n    backends:\n      - {{address: 127.0.0.1:{origin}}}\n")
    p = run.start([binary, "proxy", "-c", run.write(f"accelnet-{tls_port}.yaml", cfg),
                   "--log-level", "error"], tls_port, name="accelnet")
    bench.wait_port(plain_port, p)
    return p, tls_port, plain_port


def start_nginx(run, origin, cert):
    crt, key, _ = cert
    tls_port, plain_port = free_port(), free_port()
    d = os.path.join(run.dir, f"nginx-{tls_port}")
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
    http2_max_requests 10000000; http2_max_concurrent_streams {STREAMS};
    upstream b {{ server 127.0.0.1:{origin}; keepalive 256; keepalive_requests 10000000; }}
    server {{
        listen 127.0.0.1:{tls_port} ssl http2 backlog=65535;
        listen 127.0.0.1:{plain_port} http2 backlog=65535;
        ssl_certificate {crt}; ssl_certificate_key {key};
        ssl_protocols TLSv1.3;
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
    p = run.start(["nginx", "-c", run.write(f"nginx-{tls_port}.conf", cfg), "-e",
                   f"{d}/error.log"], tls_port, name="nginx")
    bench.wait_port(plain_port, p)
    return p, tls_port, plain_port


def start_haproxy(run, origin, cert):
    _, _, pem = cert
    tls_port, plain_port = free_port(), free_port()
    cfg = f"""global
    nbthread 1
    maxconn {HAPROXY_MAXCONN}
    ssl-default-bind-options ssl-min-ver TLSv1.3
    tune.h2.max-concurrent-streams {STREAMS}
defaults
    mode http
    timeout connect 5s
    timeout client 300s
    timeout server 300s
    timeout http-keep-alive 300s
    option http-keep-alive
    http-reuse always
frontend f
    bind 127.0.0.1:{tls_port} ssl crt {pem} alpn h2,http/1.1
    bind 127.0.0.1:{plain_port} proto h2
    default_backend b
backend b
    server s0 127.0.0.1:{origin}
"""
    p = run.start(["haproxy", "-db", "-f", run.write(f"haproxy-{tls_port}.cfg", cfg)], tls_port,
                  name="haproxy")
    bench.wait_port(plain_port, p)
    return p, tls_port, plain_port


PROXIES = {"accelnet": start_accelnet, "haproxy": start_haproxy, "nginx": start_nginx}


def h2load(url, conns, seconds):
    """h2load for <seconds>, connections made inside them; (succeeded, failed, seconds)."""
    out = subprocess.run(["taskset", "-c", LOAD_CPU, "h2load", "-c", str(conns), "-t", "1",
                          "-m", str(STREAMS), "-D", str(seconds), url],
                         capture_output=True, text=True, timeout=seconds + 60,
                         preexec_fn=bench.raise_nofile)
    m = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed",
                  out.stdout)
    t = re.search(r"finished in ([\d.]+)s", out.stdout)
    if not m or not t:
        raise RuntimeError(f"h2load gave no result: {out.stdout} {out.stderr}")
    return int(m.group(1)), int(m.group(2)), float(t.group(1))


def measure(pid, url, conns, seconds):
    cpu0 = proc_cpu_s(pid)
    ok, failed, took = h2load(url, conns, seconds)
    cpu = proc_cpu_s(pid) - cpu0
    return {"requests_per_s": round(ok / seconds), "failed": failed,
            "cpu_us_per_request": round(cpu * 1e6 / ok, 2) if ok else None,
            "h2load_s": took}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--only-proxies", default=",".join(PROXIES))
    ap.add_argument("--sizes", default=",".join(SIZES),
                    help="the responses to measure (small: 12 bytes, large: 1 MiB)")
    ap.add_argument("--transports", default="tls,h2c")
    ap.add_argument("--before", metavar="BIN",
                    help="another accelnet binary (a build before a change), run beside as "
                         "'accelnet before'")
    ap.add_argument("--report")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.seconds = 2, 2
    for tool in ("h2load", "haproxy", "nginx"):
        if not shutil.which(tool):
            sys.exit(f"bench/h2load.py needs {tool} (scripts/deps.sh installs it)")
    names = a.only_proxies.split(",")
    starts = dict(PROXIES)
    if a.before:
        starts["accelnet before"] = lambda r, o, c: start_accelnet(r, o, c, binary=a.before)
        names.append("accelnet before")
    run = bench.Run()
    versions = {"haproxy": subprocess.run(["haproxy", "-v"], capture_output=True,
                                          text=True).stdout.splitlines()[0],
                "nginx": subprocess.run(["nginx", "-v"], capture_output=True,
                                        text=True).stderr.strip(),
                "h2load": subprocess.run(["h2load", "--version"], capture_output=True,
                                         text=True).stdout.strip()}
    results = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
               "rounds": a.rounds, "seconds": a.seconds, "conns": a.conns, "streams": STREAMS,
               "sizes": a.sizes, "transports": a.transports,
               "versions": versions, "load_before": os.getloadavg(), "rows": {}}
    try:
        origin = start_origin(run)
        cert = make_cert(run, "ecdsa")
        procs = {n: starts[n](run, origin, cert) for n in names}
        rows = {}
        for r in range(a.rounds):
            for transport in a.transports.split(","):
                for size in a.sizes.split(","):
                    path = SIZES[size][0]
                    key = f"{transport} {size}"
                    for n in (names if r % 2 == 0 else names[::-1]):
                        p, tls_port, plain_port = procs[n]
                        url = (f"https://127.0.0.1:{tls_port}/{path}" if transport == "tls"
                               else f"http://127.0.0.1:{plain_port}/{path}")
                        rows.setdefault(key, {}).setdefault(n, []).append(
                            measure(p.pid, url, a.conns, a.seconds))
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
        for key, by in rows.items():
            out = {}
            for n, rs in by.items():
                out[n] = {k: statistics.median(x[k] for x in rs if x[k] is not None)
                          for k in ("requests_per_s", "cpu_us_per_request")}
                out[n]["failed"] = sum(x["failed"] for x in rs)
                if n != "haproxy" and "haproxy" in by:
                    pairs = [(x, h) for x, h in zip(rs, by["haproxy"]) if h["requests_per_s"]]
                    out[n]["rps_vs_haproxy"] = round(statistics.median(
                        x["requests_per_s"] / h["requests_per_s"] for x, h in pairs), 3)
                    out[n]["cpu_vs_haproxy"] = round(statistics.median(
                        x["cpu_us_per_request"] / h["cpu_us_per_request"] for x, h in pairs
                        if x["cpu_us_per_request"] and h["cpu_us_per_request"]), 3)
            results["rows"][key] = out
        results["raw"] = rows
        results["load_after"] = os.getloadavg()
    finally:
        run.cleanup()
    print(json.dumps(results, indent=2))
    if a.report:
        with open(a.report, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
