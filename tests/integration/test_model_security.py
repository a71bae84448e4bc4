"""What a client or a hostile backend can do through model routing, the engine scrapes and the
KV-event subscription (found in review, issue 14): each attack reproduced."""

import http.server
import json
import os
import socket
import time

from harness import HttpBackend, backend_state, request, served_by, wait_until
from test_engine import Engine, Publisher, vllm


class JsonEngine:
    """A backend that reads the body as Python's json (as vLLM/FastAPI does: the last of
    duplicate keys wins) and answers with the model it would serve."""

    def __init__(self):
        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                model = json.loads(self.rfile.read(n)).get("model", "")
                body = model.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = HttpBackend(H)
        self.port = self.server.port
        self.close = self.server.close


def _premium_proxy(env, extra=""):
    """A JSON-reading engine behind two routes to one pool: "premium-*" models need a key,
    everything else under /v1/ does not."""
    eng = JsonEngine()
    env.on_cleanup.append(eng.close)
    keys = env.write("keys.txt", "acme sk-acme-0123456789abcdef\n")
    return env.proxy(
        "pools:\n  - name: gpu\n    backends:\n"
        f"      - {{address: 127.0.0.1:{eng.port}}}\n"
        "routes:\n"
        f"  - match: {{path_prefix: /v1/, model: \"premium-*\"}}\n    pool: gpu\n"
        f"    auth: {{api_keys_file: {keys}}}\n"
        "  - {match: {path_prefix: /v1/}, pool: gpu}\n", workers=1, extra=extra)


def test_model_route_auth_bypassed_by_a_second_model_key(env):
    """routes[].match.model takes the FIRST top-level "model"; json.loads (vLLM) the LAST,
    and an escaped key ("mod\\u0065l") is not seen by the proxy at all."""
    px = _premium_proxy(env)
    h = {"Content-Type": "application/json"}
    st, _, _ = request(px.port, "POST", "/v1/chat/completions",
                       body='{"model":"premium-70b","messages":[]}', headers=h)
    assert st == 401  # the route needs a key
    results = []
    for body in ('{"model":"free","model":"premium-70b","messages":[]}',
                 '{"model":"free","mod\\u0065l":"premium-70b","messages":[]}'):
        st, _, data = request(px.port, "POST", "/v1/chat/completions", body=body, headers=h)
        results.append((st, data))
    print("served without a key:", results)
    assert all(st in (400, 401) for st, _ in results), results
    # one "model" only, at any place, still routes by it
    st, _, _ = request(px.port, "POST", "/v1/chat/completions",
                       body='{"messages":[{"model":"x"}],"model":"premium-70b"}', headers=h)
    assert st == 401, st


def test_engine_queue_past_uint32_attracts_peak_ewma(env):
    """A /metrics page saying 2^32 or more requests wait: reported_load saturates at
    UINT32_MAX, pool_pick adds our in-flight count to it (unsigned), and peak-ewma's
    inflight + 1 wraps to 0: the backend that says it is the most loaded costs nothing."""
    huge = Engine("huge", lambda e: (
        "vllm:num_requests_waiting 1e12\nvllm:num_requests_running 0\n").encode())
    idle = Engine("idle", lambda e: vllm(0))
    env.on_cleanup += [huge.close, idle.close]
    px = env.proxy(
        "pools:\n  - name: gpu\n    balance: peak-ewma\n    backends:\n"
        f"      - {{address: 127.0.0.1:{huge.port}}}\n"
        f"      - {{address: 127.0.0.1:{idle.port}}}\n"
        "    engine_metrics: {interval_ms: 100, timeout_ms: 80}\n", workers=1)
    addr = f"127.0.0.1:{huge.port}"
    wait_until(lambda: backend_state(px.admin, addr)["reported_load"] >= 2**32 - 1,
               "the huge queue scraped")
    seen = [served_by(request(px.port, "GET", "/v1/x")[1]) for _ in range(20)]
    print("picks:", seen.count("huge"), "huge of 20")
    assert seen.count("huge") == 0, seen


def _admin_ms(px):
    t = time.monotonic()
    request(px.admin, "GET", "/status")
    return (time.monotonic() - t) * 1000


def test_kv_clear_events_stall_the_main_loop(env):
    """4096 AllBlocksCleared events fit a 74 KB message; each is a full sweep of the
    backend's prefix index (65536 blocks: 32768 sets x 4 ways) on the main loop, which also
    serves the admin endpoint, the health checks and the scrapes."""
    import msgpack
    pub = Publisher()
    env.on_cleanup.append(pub.close)
    eng = Engine("e")
    env.on_cleanup.append(eng.close)
    px = env.proxy(
        "pools:\n  - name: gpu\n    balance: least-connections\n    backends:\n"
        f"      - {{address: 127.0.0.1:{eng.port}, kv_events: 'tcp://127.0.0.1:{pub.port}'}}\n",
        workers=1)
    addr = f"127.0.0.1:{eng.port}"
    pub.wait_subscriber()
    base = max(_admin_ms(px) for _ in range(5))
    payload = msgpack.packb([time.time(), [["AllBlocksCleared"]] * 4096, 0])
    n = int(os.environ.get("RV2_MSGS", "40"))
    t0 = time.monotonic()
    for _ in range(n):
        pub.send(None, payload=payload)
    time.sleep(0.2)
    worst = _admin_ms(px)
    wait_until(lambda: backend_state(px.admin, addr)["kv_events"]["applied"]["cleared"]
               == n * 4096, "every clear applied", timeout=300)
    took = time.monotonic() - t0
    print(f"{n} messages of {len(payload)} bytes: {took:.1f} s of main loop; "
          f"/status {base:.1f} ms before, {worst:.0f} ms during")
    assert worst < 500, worst


def test_model_peek_rescans_the_whole_body_on_every_read(env):
    """Stage 'model' (before auth) parses the buffered body from its first byte after each
    read: a body trickled a byte per packet costs a full scan per packet."""
    eng = Engine("e")
    env.on_cleanup.append(eng.close)
    px = env.proxy(
        "pools:\n  - name: gpu\n    backends:\n"
        f"      - {{address: 127.0.0.1:{eng.port}}}\n"
        "routes:\n  - {match: {path_prefix: /v1/, model: \"m*\"}, pool: gpu}\n"
        "  - {match: {path_prefix: /}, pool: gpu}\n", workers=1)

    def cpu():
        with open(f"/proc/{px.pid}/stat") as f:
            v = f.read().rsplit(")", 1)[1].split()
        return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")

    def trickle(path, secs):
        prefix = b'{"messages":[' + b"0," * 400000
        s = socket.create_connection(("127.0.0.1", px.port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n"
                  "Content-Type: application/json\r\n\r\n".encode() + prefix)
        time.sleep(0.5)
        c0, t0, sent = cpu(), time.monotonic(), 0
        while time.monotonic() - t0 < secs:
            s.send(b"0")
            sent += 1
            time.sleep(0.0005)
        used = cpu() - c0
        s.close()
        return used, sent

    used, sent = trickle("/v1/chat/completions", 5)
    print(f"model route: {sent} one-byte packets in 5 s cost the proxy {used:.2f} s of CPU")
    used2, sent2 = trickle("/other", 5)
    print(f"plain route: {sent2} one-byte packets in 5 s cost the proxy {used2:.2f} s of CPU")
    assert used < 1.0, (used, used2)


def test_model_route_refuses_a_body_whose_model_it_cannot_read(env):
    """A model route's auth is not skipped by a body whose model the proxy cannot read: a
    chunked one (411), or one whose model comes after limits.body_buffer_bytes (413); such
    a request is refused, never served by the next route."""
    px = _premium_proxy(env, extra="limits: {body_buffer_bytes: 64KiB}\n")
    body = b'{"model":"premium-70b","messages":[]}'
    s = socket.create_connection(("127.0.0.1", px.port), timeout=5)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
              b"Connection: close\r\n\r\n" + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
    resp = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        resp += d
    s.close()
    assert resp.startswith(b"HTTP/1.1 411 "), resp[:80]
    big = json.dumps({"messages": [{"role": "user", "content": "x" * 100000}],
                      "model": "premium-70b"})
    st, _, data = request(px.port, "POST", "/v1/chat/completions", body=big,
                          headers={"Content-Type": "application/json"})
    assert st == 413, (st, data[:80])
    # a body with no model at all, whole, still goes to the next route; a GET too
    st, _, data = request(px.port, "POST", "/v1/chat/completions", body='{"messages":[]}',
                          headers={"Content-Type": "application/json"})
    assert st == 200, (st, data)
