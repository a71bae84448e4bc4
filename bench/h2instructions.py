#!/usr/bin/python3
"""bench/h2instructions.py ACCELNET [ACCELNET ...] [--haproxy] [--requests N]: user-space
instructions per HTTP/2 request, counted by valgrind's callgrind (deterministic, unlike CPU
time on a shared machine), for each accelnet build named and, with --haproxy, for HAProxy.

Each proxy runs one worker (HAProxy one thread) on a plain listener taking h2c with prior
knowledge and proxies to an nginx serving a 12-byte file over HTTP/1.1 keep-alive, as
bench/h2load.py's "h2c small" row. h2load (-c 4 -m 100: 400 streams in flight) warms it with
4,000 requests, then callgrind's instrumentation is switched on for N more (20,000 unless
told): the figure is what the proxy executed for those, divided by N. The kernel's work (the
socket calls, the same number for accelnet and HAProxy: one send and one receive to the
backend a request) is not counted. ACCELNET_IR_KEEP=DIR keeps each callgrind file there
(DIR/NAME.out), for callgrind_annotate. Needs valgrind, nginx, h2load (nghttp2-client) and,
with --haproxy, haproxy (scripts/deps.sh)."""
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

D = tempfile.mkdtemp(prefix="accelnet-h2ir-")
WARM = 4000


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(p, t=120):
    end = time.time() + t
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", p), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    sys.exit(f"bench/h2instructions.py: nothing listens on {p}")


def origin():
    port, d = free_port(), os.path.join(D, "origin")
    os.makedirs(d)
    with open(os.path.join(d, "s"), "wb") as f:
        f.write(b"hello world\n")
    cfg = os.path.join(D, "origin.conf")
    with open(cfg, "w") as f:
        f.write(f"""daemon off; master_process off; worker_processes 1;
error_log {d}/error.log crit; pid {d}/nginx.pid;
events {{ worker_connections 4000; }}
http {{
    access_log off; client_body_temp_path {d}; proxy_temp_path {d};
    fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};
    keepalive_requests 10000000; keepalive_timeout 300s;
    server {{ listen 127.0.0.1:{port}; root {d}; default_type text/plain; }}
}}
""")
    p = subprocess.Popen(["nginx", "-c", cfg, "-e", f"{d}/error.log"])
    wait_port(port)
    return p, port


def proxy_argv(name, binary, backend, port):
    if name == "haproxy":
        cfg = os.path.join(D, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write(f"""global
    nbthread 1
    maxconn 4000
    tune.h2.max-concurrent-streams 100
defaults
    mode http
    timeout connect 5s
    timeout client 300s
    timeout server 300s
    timeout http-keep-alive 300s
    option http-keep-alive
    http-reuse always
frontend f
    bind 127.0.0.1:{port} proto h2
    default_backend b
backend b
    server s0 127.0.0.1:{backend}
""")
        return ["haproxy", "-db", "-f", cfg]
    cfg = os.path.join(D, f"{name}.yaml")
    with open(cfg, "w") as f:
        f.write(f"workers: 1\nlisten:\n  - address: 127.0.0.1:{port}\n"
                "timeouts: {first_byte_ms: 300000, between_bytes_ms: 300000, "
                "idle_ms: 300000}\n"
                f"pools:\n  - name: b\n    backends:\n      - {{address: 127.0.0.1:{backend}}}\n")
    return [binary, "proxy", "-c", cfg, "--log-level", "error"]


def h2load(port, n):
    out = subprocess.run(["h2load", "-c", "4", "-m", "100", "-n", str(n),
                          f"http://127.0.0.1:{port}/s"], capture_output=True, text=True,
                         timeout=1200).stdout
    if f"{n} succeeded" not in out:
        sys.exit(f"bench/h2instructions.py: not every request succeeded:\n{out}")


def count(name, binary, backend, requests):
    port = free_port()
    out = os.path.join(D, f"{name}.%p.out")
    p = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                          f"--callgrind-out-file={out}",
                          *proxy_argv(name, binary, backend, port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        h2load(port, WARM)
        subprocess.run(["callgrind_control", "-i", "on", str(p.pid)], check=True,
                       capture_output=True)
        h2load(port, requests)
        subprocess.run(["callgrind_control", "-d", str(p.pid)], check=True,
                       capture_output=True)
        time.sleep(1)
    finally:
        p.terminate()
        p.wait()
    total = 0
    for f in glob.glob(os.path.join(D, f"{name}.{p.pid}.out*")):
        with open(f) as fh:
            for line in fh:
                if line.startswith(("summary:", "totals:")):
                    total = max(total, int(line.split()[1]))
                    break
        keep = os.environ.get("ACCELNET_IR_KEEP")
        if keep and f.endswith(".1"):
            os.makedirs(keep, exist_ok=True)
            shutil.copy(f, os.path.join(keep, f"{name}.out"))
    return total / requests


def main():
    args, requests, names = sys.argv[1:], 20000, []
    while args:
        a = args.pop(0)
        if a == "--requests":
            requests = int(args.pop(0))
        elif a == "--haproxy":
            names.append(("haproxy", None))
        else:
            names.append((f"accelnet{len(names) + 1}", a))
    if not names:
        sys.exit(__doc__)
    for tool in ("valgrind", "callgrind_control", "nginx", "h2load"):
        if not shutil.which(tool):
            sys.exit(f"bench/h2instructions.py needs {tool} (scripts/deps.sh)")
    ng, backend = origin()
    try:
        for name, binary in names:
            ir = count(name, binary, backend, requests)
            print(f"{name:10s} {binary or shutil.which('haproxy')}: {ir:,.0f} instructions a "
                  f"request ({requests:,} h2c requests, 12 B answers, after {WARM:,})")
    finally:
        ng.terminate()
        ng.wait()
        shutil.rmtree(D, ignore_errors=True)


if __name__ == "__main__":
    main()
