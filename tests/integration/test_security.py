"""The proxy under attack: each test plays a hostile client or backend from the security review
(issue 10) against the real binary and checks that the attack is refused and nobody else is
hurt. Raw sockets where a well-behaved client library would not send the bytes."""

import concurrent.futures
import http.client
import os
import socket
import subprocess
import threading
import time

from harness import (BIN, ScriptedBackend, complete, echo_backend, gated_backend, headers_seen,
                     pool_yaml, raw,
                     read_all, read_until, request, status, wait_until)


def _proxy_to(env, port, extra="", pool_extra="", routes=""):
    return env.proxy("pools:\n" + pool_yaml("p", [port], extra=pool_extra) + routes, extra=extra)


def _echo_proxy(env, extra=""):
    """A proxy in front of an echo backend: (backend, proxy)."""
    be = echo_backend(env)
    return be, _proxy_to(env, be.port, extra=extra)


def _status_line(data):
    return data.split(b"\r\n", 1)[0]


# --- 1. request smuggling through Connection ---------------------------------------------

def test_connection_naming_content_length_is_refused(env):
    be, px = _echo_proxy(env)
    smuggled = b"GET /SMUGGLED HTTP/1.1\r\nHost: x\r\n\r\n"
    smuggled += b"x" * (40 - len(smuggled))
    for token in (b"content-length", b"Content-Length", b"keep-alive, content-length"):
        out = raw(px.port, b"POST /front HTTP/1.1\r\nHost: x\r\nConnection: " + token +
                  b"\r\nContent-Length: 40\r\n\r\n" + smuggled +
                  b"GET /victim HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret\r\n\r\n")
        assert _status_line(out) == b"HTTP/1.1 400 Bad Request", out
    assert be.count == 0  # nothing reached the backend, smuggled or not


def test_connection_naming_transfer_encoding_or_host_is_refused(env):
    be, px = _echo_proxy(env)
    inner = b"GET /SMUGGLED HTTP/1.1\r\nHost: x\r\n\r\n"
    out = raw(px.port, b"POST /front HTTP/1.1\r\nHost: x\r\nConnection: transfer-encoding\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(inner), inner))
    assert _status_line(out) == b"HTTP/1.1 400 Bad Request", out
    out = raw(px.port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: host\r\n\r\n")
    assert _status_line(out) == b"HTTP/1.1 400 Bad Request", out
    # a second Connection field counts as much as the first
    out = raw(px.port, b"POST /front HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n"
              b"Connection: content-length\r\nContent-Length: 4\r\n\r\nabcd")
    assert _status_line(out) == b"HTTP/1.1 400 Bad Request", out
    assert be.count == 0


def test_forwarded_framing_is_regenerated(env):
    """What the backend reads is framed by what the proxy parsed, with one framing field."""
    be, px = _echo_proxy(env)
    st, _, body = request(px.port, "POST", "/a", body=b"0123456789",
                          headers={"Connection": "x-drop-me", "X-Drop-Me": "1"})
    assert st == 200
    head = body.split(b"\r\n\r\n", 1)[0].lower()
    assert head.count(b"content-length: 10") == 1 and b"x-drop-me" not in head, body
    # hop-by-hop names from every Connection field are dropped
    out = raw(px.port, b"GET /b HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n"
              b"Connection: x-one\r\nX-One: 1\r\nX-Two: 2\r\nConnection: close\r\n\r\n")
    assert b" 200 " in _status_line(out)
    assert b"x-one" not in out.lower() and b"X-Two: 2" in out, out


def test_backend_connection_token_cannot_unframe_the_response(env):
    def script(n, req):
        if n % 2:
            return (b"HTTP/1.1 200 OK\r\nConnection: content-length\r\nContent-Length: 5\r\n"
                    b"\r\nhello", False)
        return (b"HTTP/1.1 200 OK\r\nConnection: transfer-encoding, keep-alive\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n5\r\nworld\r\n0\r\n\r\n", False)
    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    px = _proxy_to(env, be.port)
    with socket.create_connection(("127.0.0.1", px.port), timeout=10) as s:
        s.sendall(b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\n")
        got = read_until(s, lambda b: b"hello" in b)
        assert b"Content-Length: 5\r\n" in got, got
        s.sendall(b"GET /2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        rest = read_all(s)
    assert b"Transfer-Encoding: chunked\r\n" in rest and rest.endswith(b"5\r\nworld\r\n0\r\n\r\n"), rest


# --- 2. a backend must not be able to abort the proxy --------------------------------------

def _raw_backend(handler):
    """A one-shot backend: accepts connections and runs handler(conn) for each in a thread."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    done = threading.Event()

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            def run(c=c):
                with c:
                    try:
                        handler(c)
                    except OSError:
                        pass
                done.set()
            threading.Thread(target=run, daemon=True).start()
    threading.Thread(target=serve, daemon=True).start()

    class Backend:
        port = srv.getsockname()[1]
        close = srv.close
    Backend.done = done
    return Backend


def test_interim_response_flood_is_bounded(env):
    hint = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\n\r\n"

    def flood(c):
        c.recv(65536)
        c.settimeout(10)
        for _ in range(300):  # 21 MB: more than every buffer on the way holds
            c.sendall(hint * 1000)
        # then it hangs up without a final response: the proxy owes the client a 502
    be = _raw_backend(flood)
    env.on_cleanup.append(be.close)
    good = env.sim("good", latency_ms=0, token_ms=0)
    px = env.proxy("pools:\n" + pool_yaml("evil", [be.port]) + pool_yaml("good", [good.port]) +
                   "routes:\n  - {match: {path_prefix: /evil}, pool: evil}\n"
                   "  - {pool: good}\n", workers=1)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(15)
    s.connect(("127.0.0.1", px.port))
    s.sendall(b"GET /evil HTTP/1.1\r\nHost: x\r\n\r\n")
    # the client reads nothing until the backend is finished with the proxy
    wait_until(be.done.is_set, "the backend to finish its flood", timeout=60)
    got = read_until(s, lambda b: b"HTTP/1.1 502 " in b and b.endswith(b"\n"))
    s.close()
    assert px.poll() is None, "the proxy died"
    hints = got.count(b" 103 ")
    assert hints <= 16 and b"HTTP/1.1 502 " in got, (hints, got[-300:])
    assert complete(px.port)[0] == 200  # the proxy serves others as before


# --- 3. slow request bodies must not pin accelerator slots -------------------------------

def _slow_body_clients(port, n, declared=100):
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n{"
                  % declared)
        socks.append(s)
    return socks


def test_slow_bodies_do_not_hold_slots(env):
    sim = env.sim("acc", latency_ms=0, token_ms=0, slots=64)
    px = env.proxy("pools:\n  - name: gpu\n    backends:\n"
                   f"      - {{address: 127.0.0.1:{sim.port}, max_concurrency: 4}}\n"
                   "    queue: {max: 100, timeout_ms: 3000}\n")
    socks = _slow_body_clients(px.port, 4)
    try:
        wait_until(lambda: sum(1 for _ in socks) == 4, "clients")
        # each sent one body byte; a slot taken by any of them would show in /status
        for _ in range(8):
            st, h, _ = complete(px.port)
            assert st == 200, st
        b = status(px.admin)["pools"][0]["backends"][0]
        assert b["inflight"] == 0, b
    finally:
        for s in socks:
            s.close()


def test_body_deadline_answers_408_and_frees_the_slot(env):
    sim = env.sim("acc", latency_ms=0, token_ms=0, slots=64)
    px = env.proxy("pools:\n  - name: gpu\n    backends:\n"
                   f"      - {{address: 127.0.0.1:{sim.port}, max_concurrency: 1}}\n",
                   extra="timeouts: {body_ms: 1500}\nlimits: {body_buffer_bytes: 4096}\n")
    # a body within the buffer that never completes: 408, and no slot was ever taken
    s = _slow_body_clients(px.port, 1)[0]
    out = read_all(s)
    s.close()
    assert _status_line(out) == b"HTTP/1.1 408 Request Timeout", out
    # a body beyond the buffer: the slot is taken once 4 KiB arrived, then the deadline
    # frees it
    s = _slow_body_clients(px.port, 1, declared=100000)[0]
    s.sendall(b"x" * 8192)
    wait_until(lambda: status(px.admin)["pools"][0]["backends"][0]["inflight"] == 1,
               "the large body to take the slot")
    out = read_all(s)
    s.close()
    assert b"408" in _status_line(out) or out == b"", out
    wait_until(lambda: status(px.admin)["pools"][0]["backends"][0]["inflight"] == 0,
               "the slot to be freed")
    assert complete(px.port)[0] == 200


def test_trickled_body_below_min_rate_is_cut_off(env):
    sim = env.sim("acc", latency_ms=0, token_ms=0, slots=64)
    px = env.proxy("pools:\n  - name: gpu\n    backends:\n"
                   f"      - {{address: 127.0.0.1:{sim.port}, max_concurrency: 1}}\n",
                   extra="timeouts: {body_ms: 600000, between_bytes_ms: 600000}\n"
                   "limits: {min_body_rate: 1000, body_buffer_bytes: 1024}\n")
    s = _slow_body_clients(px.port, 1, declared=1000000)[0]
    s.sendall(b"x" * 2048)  # past the buffer: streamed, so it holds the one slot
    got = []

    def reader():
        got.append(read_all(s))
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    # one byte every 0.3 s: each byte restarts between_bytes_ms, but the rate stays far
    # below 1000 B/s, so the proxy must end it (the loop is bounded by the test's own limit)
    for _ in range(200):
        if not t.is_alive():
            break
        try:
            s.sendall(b"x")
        except OSError:
            break
        t.join(0.3)
    t.join(5)
    s.close()
    assert got and (got[0] == b"" or b" 408 " in _status_line(got[0])), got
    wait_until(lambda: status(px.admin)["pools"][0]["backends"][0]["inflight"] == 0,
               "the slot to be freed")
    assert complete(px.port)[0] == 200


def test_large_body_at_a_good_rate_still_streams(env):
    sim = env.sim("acc", latency_ms=0, token_ms=0)
    px = env.proxy("pools:\n" + pool_yaml("p", [sim.port]),
                   extra="limits: {body_buffer_bytes: 65536, min_body_rate: 1024}\n")
    body = b"y" * (1000 * 1000)  # past the buffer: streamed (the simulator takes up to 1 MiB)
    st, _, data = request(px.port, "POST", "/big", body=body)
    assert st == 200 and b"(1000000 body bytes)" in data, (st, data)
    # and a chunked one
    c = http.client.HTTPConnection("127.0.0.1", px.port, timeout=10)
    c.request("POST", "/chunked", body=iter([b"z" * 300000] * 3), encode_chunked=True,
              headers={"Transfer-Encoding": "chunked"})
    r = c.getresponse()
    assert r.status == 200 and b"(900000 body bytes)" in r.read()
    c.close()


# --- 6. the smaller holes ------------------------------------------------------------------

def test_repeated_content_length_is_refused(env):
    be, px = _echo_proxy(env)
    for head in (b"Content-Length: 2, 2\r\n", b"Content-Length: 2\r\nContent-Length: 2\r\n"):
        out = raw(px.port, b"POST / HTTP/1.1\r\nHost: x\r\n" + head + b"\r\nab")
        assert _status_line(out) == b"HTTP/1.1 400 Bad Request", out
    assert be.count == 0


def test_unknown_http1_minor_versions_get_505(env):
    be, px = _echo_proxy(env)
    for v in (b"1.2", b"1.9"):
        out = raw(px.port, b"GET / HTTP/" + v + b"\r\nHost: x\r\n\r\n")
        assert _status_line(out).startswith(b"HTTP/1.1 505 "), out
    assert be.count == 0


def test_many_connection_tokens_are_refused(env):
    be, px = _echo_proxy(env)
    tokens = b",".join(b"x-%d" % i for i in range(4000))
    out = raw(px.port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: " + tokens + b"\r\n\r\n")
    assert _status_line(out) == b"HTTP/1.1 400 Bad Request", out
    out = raw(px.port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close, x-a, x-b\r\n\r\n")
    assert b" 200 " in _status_line(out), out


def test_health_path_is_validated(env):
    for path, what in (('"/ok\\r\\nX-Evil: 1"', "CR"), ('"/' + "a" * 5000 + '"', "long")):
        conf = env.write("bad.yaml", "listen:\n  - address: 127.0.0.1:1\npools:\n"
                         "  - name: p\n    backends:\n      - {address: 127.0.0.1:2}\n"
                         f"    health: {{path: {path}}}\n")
        out = subprocess.run([BIN, "check", "-c", conf], capture_output=True, text=True)
        assert out.returncode == 2 and "bad.yaml:7:" in out.stderr + out.stdout, (what, out)


def test_forwarding_headers_from_untrusted_clients_are_replaced(env):
    be, px = _echo_proxy(env)
    posing = {"X-Real-IP": "203.0.113.9", "Forwarded": "for=203.0.113.9",
              "X-Forwarded-Host": "admin.internal", "X-Forwarded-Port": "443",
              "X-Forwarded-Prefix": "/admin", "True-Client-IP": "203.0.113.9",
              "X-Client-IP": "203.0.113.9", "CF-Connecting-IP": "203.0.113.9"}
    st, _, body = request(px.port, "GET", "/", headers={
        "X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https", **posing})
    seen = headers_seen(body)
    assert seen.get("x-forwarded-for") == ["127.0.0.1"], seen
    assert not any(k.lower() in seen for k in posing), seen
    assert seen.get("x-forwarded-proto") == ["http"], seen


def test_forwarding_headers_from_trusted_proxies_are_kept(env):
    be, px = _echo_proxy(env, extra="trusted_proxies: [10.0.0.0/8, 127.0.0.0/8]\n")
    st, _, body = request(px.port, "GET", "/", headers={
        "X-Forwarded-For": "203.0.113.9", "X-Real-IP": "203.0.113.9",
        "Forwarded": "for=203.0.113.9"})
    seen = headers_seen(body)
    assert seen.get("x-forwarded-for") == ["203.0.113.9, 127.0.0.1"], seen
    assert seen.get("x-real-ip") == ["203.0.113.9"], seen
    assert seen.get("forwarded") == ["for=203.0.113.9"], seen


def _post_from(src_ip, port, headers, body=b'{"prompt":"x"}'):
    s = socket.socket()
    s.settimeout(60)
    s.bind((src_ip, 0))
    s.connect(("127.0.0.1", port))
    hdr = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in headers.items())
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + hdr +
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    out = read_all(s)
    s.close()
    return out


def test_invented_tenant_values_do_not_buy_extra_lanes(env):
    """One client rotating X-API-Key values is one tenant until authentication exists: a
    second client (another address) is served within the next two turns."""
    acc = gated_backend(env)  # holds the slot until every request waits
    px = env.proxy("pools:\n  - name: gpu\n    backends:\n"
                   f"      - {{address: 127.0.0.1:{acc.port}, max_concurrency: 1}}\n")
    with concurrent.futures.ThreadPoolExecutor(13) as ex:
        futs = [ex.submit(_post_from, "127.0.0.1", px.port,
                          {"X-API-Key": f"key-{i}", "X-Tag": "flood"}) for i in range(12)]
        wait_until(lambda: status(px.admin)["pools"][0]["queue"]["length"] == 11,
                   "the flood to queue")
        futs.append(ex.submit(_post_from, "127.0.0.2", px.port,
                              {"X-API-Key": "light", "X-Tag": "light"}))
        wait_until(lambda: status(px.admin)["pools"][0]["queue"]["length"] == 12,
                   "the light request to queue")
        acc.gate.set()
        lines = [_status_line(f.result()) for f in futs]
    assert all(b" 200 " in line for line in lines), lines
    # in the order the backend served them: the one in service, the flooder's next turn,
    # then the light client
    assert acc.order.index("light") + 1 <= 3, acc.order


# --- found by the review of the fixes above -------------------------------------------------

def test_head_request_gets_no_heartbeat_body(env):
    def slow(n, req):
        time.sleep(0.3)  # the backend takes its time: heartbeats would be due
        return (b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n"
                if req.startswith(b"HEAD") else
                b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nGET /next", False)
    be = ScriptedBackend(slow)
    env.on_cleanup.append(be.close)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]) +
                   "routes:\n  - {pool: p, sse_heartbeat_ms: 20}\n")
    with socket.create_connection(("127.0.0.1", px.port), timeout=10) as s:
        s.sendall(b"HEAD /v1/x HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n"
                  b"GET /next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        out = read_all(s)
    # the HEAD answer is a head alone; the very next bytes are the GET's answer
    first, rest = out.split(b"\r\n\r\n", 1)
    assert first.startswith(b"HTTP/1.1 200 ") and rest.startswith(b"HTTP/1.1 200 "), out[:400]
    assert b"GET /next" in rest


def test_no_transfer_encoding_on_a_204(env):
    be = ScriptedBackend(lambda n, req: (b"HTTP/1.1 204 No Content\r\n"
                                         b"Transfer-Encoding: chunked\r\n\r\n", False))
    env.on_cleanup.append(be.close)
    px = _proxy_to(env, be.port)
    with socket.create_connection(("127.0.0.1", px.port), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        out = read_all(s)
    assert out.startswith(b"HTTP/1.1 204 ") and b"transfer-encoding" not in out.lower(), out


def test_chunked_trailer_and_size_tricks_are_refused(env):
    be, px = _echo_proxy(env, extra="limits: {max_body_bytes: 1MiB}\n")
    for body in (b"5\r\nhello\r\n0\r\nGET /smuggled HTTP/1.1\r\nX: y\r\n\r\n",
                 b"5;\x80\x80=\"a\r\nhello\r\n0\r\n\r\n",
                 b"100000005\r\nhello"):
        out = raw(px.port, b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                  + body)
        assert _status_line(out) in (b"HTTP/1.1 400 Bad Request",
                                     b"HTTP/1.1 413 Content Too Large"), (body, out)
    assert be.count == 0
    # a trailer that is a field passes
    out = raw(px.port, b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
              b"Connection: close\r\n\r\n5\r\nhello\r\n0\r\nX-Check: 1\r\n\r\n")
    assert b" 200 " in _status_line(out), out


def test_a_burst_does_not_buy_a_slot_for_long(env):
    """A client that sends a burst and then stalls is cut off at the end of the next rate
    window, not after bytes/min_body_rate seconds."""
    sim = env.sim("acc", latency_ms=0, token_ms=0, slots=64)
    px = env.proxy("pools:\n  - name: gpu\n    backends:\n"
                   f"      - {{address: 127.0.0.1:{sim.port}, max_concurrency: 1}}\n",
                   extra="timeouts: {body_ms: 600000, between_bytes_ms: 600000}\n"
                   "limits: {body_buffer_bytes: 65536}\n")
    s = _slow_body_clients(px.port, 1, declared=900000)[0]  # the simulator takes <= 1 MiB
    s.sendall(b"x" * 105000)  # at 1024 B/s this would have paid for 100 s
    wait_until(lambda: status(px.admin)["pools"][0]["backends"][0]["inflight"] == 1,
               "the burst to take the slot")
    wait_until(lambda: status(px.admin)["pools"][0]["backends"][0]["inflight"] == 0,
               "the stalled body to lose its slot", timeout=30)
    out = read_all(s)
    s.close()
    assert out == b"" or b" 408 " in _status_line(out), out
    assert complete(px.port)[0] == 200


def test_body_buffers_running_out_never_admit_a_slow_body(env):
    """More slow large bodies than one worker lends body buffers for (64): the ones left
    without a buffer wait for one, they are not admitted half-sent."""
    sim = env.sim("acc", latency_ms=0, token_ms=0, slots=64)
    px = env.proxy("pools:\n  - name: gpu\n    backends:\n"
                   f"      - {{address: 127.0.0.1:{sim.port}, max_concurrency: 1}}\n"
                   "    queue: {timeout_ms: 2000}\n", workers=1)
    socks = _slow_body_clients(px.port, 70, declared=900000)
    try:
        for s in socks:
            s.sendall(b"x" * 40000)  # more than a plain buffer, less than a body buffer
        for _ in range(5):
            assert complete(px.port)[0] == 200
        assert status(px.admin)["pools"][0]["backends"][0]["inflight"] == 0
    finally:
        for s in socks:
            s.close()
