#!/usr/bin/python3
"""bench/instructions.py OLD_ACCELNET NEW_ACCELNET: user-space instructions per request of two
accelnet builds, counted by valgrind's callgrind (deterministic, unlike CPU time on a shared
machine): 2 KiB and 1 MiB responses from nginx, and 200-token SSE streams from accelnet sim,
over one keep-alive connection, after a warm-up. Needs nginx and valgrind
(scripts/deps.sh nginx valgrind). ACCELNET_IR_KEEP=DIR keeps each scenario's callgrind file
there (DIR/TAG.SCENARIO.out), for callgrind_annotate. ACCELNET_IR_ONLY=small,1m,sse runs only
the scenarios named (the 2 KiB one alone takes a fifth of the time). ACCELNET_IR_LLM=1 makes
the sim's pool `balance: llm` (the 2 KiB and 1 MiB routes still go to nginx's plain pool).

bench/instructions.py --access-log ACCELNET: one build without ("old") and with ("new") the
access log (JSON lines to a file), all of its threads counted: the log writer's too."""
import glob
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
ALOG = len(sys.argv) == 3 and sys.argv[1] == "--access-log"
if ALOG:
    sys.argv = [sys.argv[0], sys.argv[2], sys.argv[2]]
D = tempfile.mkdtemp(prefix="accelnet-ir-")
LLM = "    balance: llm\n" if os.environ.get("ACCELNET_IR_LLM") else ""
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
def wait_port(p, t=60):
    end = time.time() + t
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", p), 0.2).close(); return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"port {p} never opened")
www = f"{D}/www"; os.makedirs(www, exist_ok=True)
open(f"{www}/small", "wb").write(os.urandom(2048)); open(f"{www}/1m", "wb").write(os.urandom(1 << 20))
op = free_port()
open(f"{D}/nginx.conf", "w").write(f"""daemon off; master_process off; worker_processes 1; error_log {D}/err crit; pid {D}/nginx.pid;
events {{ worker_connections 1024; }}
http {{ access_log off; keepalive_requests 1000000; server {{ listen 127.0.0.1:{op}; root {www}; }} }}
""")
ng = subprocess.Popen(["nginx", "-c", f"{D}/nginx.conf"]); wait_port(op)
sp = free_port()
sim = subprocess.Popen([sys.argv[1], "sim", "--listen", f"127.0.0.1:{sp}", "--slots", "64", "--latency-ms", "0",
                        "--jitter", "0", "--tokens", "200", "--token-ms", "1"]); wait_port(sp)
def run(binary, tag):
    pp = free_port()
    cfg = f"{D}/{tag}.yaml"
    open(cfg, "w").write(f"""workers: 1
listen: [127.0.0.1:{pp}]
pools:
  - name: web
    backends: [{{address: 127.0.0.1:{op}}}]
  - name: llm
    backends: [{{address: 127.0.0.1:{sp}}}]
{LLM}routes:
  - match: {{path_prefix: /v1/}}
    pool: llm
  - match: {{path_prefix: /}}
    pool: web
""" + (f"access_log: {{path: {D}/access-{tag}.log, format: json}}\n" if ALOG and tag == "new" else ""))
    for f in glob.glob(f"{D}/cg.{tag}.*"): os.remove(f)
    p = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={D}/cg.{tag}.%p",
                          binary, "proxy", "-c", cfg, "--log-level", "error"], stderr=subprocess.DEVNULL)
    wait_port(pp)
    c = http.client.HTTPConnection("127.0.0.1", pp, timeout=60)
    def get(path, n):
        for _ in range(n):
            c.request("GET", path); r = c.getresponse(); r.read(); assert r.status == 200
    def sse(n):
        for _ in range(n):
            c.request("POST", "/v1/completions", body=json.dumps({"prompt": "hi", "stream": True}),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse(); r.read(); assert r.status == 200
    out = {}
    for name, fn, n in (("small", lambda n: get("/small", n), 2000), ("1m", lambda n: get("/1m", n), 100),
                        ("sse", sse, 20)):
        if os.environ.get("ACCELNET_IR_ONLY") and name not in os.environ["ACCELNET_IR_ONLY"].split(","):
            continue
        fn(20)  # warm
        subprocess.run(["callgrind_control", "-z", str(p.pid)], capture_output=True)
        fn(n)
        subprocess.run(["callgrind_control", "-d", str(p.pid)], capture_output=True)
        time.sleep(0.5)
        tot = 0
        for f in glob.glob(f"{D}/cg.{tag}.{p.pid}*"):
            for line in open(f):
                if line.startswith("summary:") or line.startswith("totals:"):
                    tot += int(line.split()[1]); break
        for f in glob.glob(f"{D}/cg.{tag}.{p.pid}*"):
            keep = os.environ.get("ACCELNET_IR_KEEP")
            if keep and not f.endswith(f".{p.pid}"):
                os.makedirs(keep, exist_ok=True)
                os.replace(f, f"{keep}/{tag}.{name}.out")
            else:
                os.remove(f)
        out[name] = tot / n
    p.terminate(); p.wait(30)
    return out
try:
    res = {tag: run(b, tag) for tag, b in (("old", sys.argv[1]), ("new", sys.argv[2]))}
    for k in res["old"]:
        print(f"{k}: old {res['old'][k]:.0f} new {res['new'][k]:.0f} instructions per request, "
              f"new/old {res['new'][k] / res['old'][k]:.3f}")
finally:
    ng.terminate(); sim.terminate()
    subprocess.run(["rm", "-rf", D])
