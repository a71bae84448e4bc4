"""Request ids, trace context and debugging (issue 13): only a client in trusted_proxies
chooses its request id or continues its trace; anyone else's are replaced (a client spoofing
an id to poison logs or backends gets nowhere); malformed ids and traceparents are refused;
the one id is in the response headers, the error bodies, the log line and what the backend
saw; X-Accelnet-Timing answers trusted clients only; GET /debug/requests shows what is in
flight and the slowest recent exchanges, behind the admin token; a request refused before it
became an exchange still gets its log line."""

import json
import os
import re
import socket
import threading

from harness import (ScriptedBackend, echo_backend, free_port, headers_seen, pool_yaml, port_open,
                     raw, read_all, request, wait_until)

TRUSTED = "127.0.0.2"  # the only address in trusted_proxies
UNTRUSTED = "127.0.0.1"
TOKEN = "debug-token-0123456789"
TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
HEX32 = re.compile(r"[0-9a-f]{32}")
TP_RE = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def _req(port, src, method="GET", path="/", headers=None, body=None):
    """One request from source address <src>: (status, headers as a dict of lists, body)."""
    return request(port, method, path, body=body, headers=headers, timeout=30, source=src)


def _raw(port, src, data):
    return raw(port, data, timeout=30, source=src)


def _log(path, n):
    def lines():
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return f.read().splitlines()
    wait_until(lambda: len(lines()) >= n, f"{n} lines in the access log")
    return [json.loads(x) for x in lines()]


def _proxy(env, be_port, routes="", extra="", fmt="json"):
    """A proxy trusting TRUSTED, logging JSON lines (or <fmt>), with a dead pool on /dead/ and
    /ai/dead/ (api: openai) and <routes> before the catch-all: (proxy, access log path)."""
    log = os.path.join(env.dir, "access.log")
    pools = "pools:\n" + pool_yaml("p", [be_port]) + pool_yaml("dead", [free_port()])
    px = env.proxy(pools + "routes:\n"
                   "  - match: {path_prefix: /dead/}\n    pool: dead\n"
                   "  - match: {path_prefix: /ai/dead/}\n    pool: dead\n    api: openai\n"
                   + routes +
                   "  - match: {path_prefix: /}\n    pool: p\n",
                   extra=f"trusted_proxies: [{TRUSTED}/32]\n"
                         f"access_log: {{path: {log}, format: {fmt}}}\n" + extra)
    return px, log


def _token_proxy(env, be_port, routes="", extra=""):
    """A proxy whose admin endpoint needs the token: (proxy, admin port, access log)."""
    log = os.path.join(env.dir, "access.log")
    tok = env.write("admin.token", TOKEN + "\n")
    os.chmod(tok, 0o600)
    admin_port = free_port()
    pools = "pools:\n" + pool_yaml("p", [be_port])
    px = env.proxy(pools + "routes:\n" + routes + "  - match: {path_prefix: /}\n    pool: p\n",
                   admin=False,
                   extra=f"admin: {{address: 127.0.0.1:{admin_port}, token_file: {tok}}}\n"
                         f"trusted_proxies: [{TRUSTED}/32]\n"
                         f"access_log: {{path: {log}, format: json}}\n" + extra)
    wait_until(lambda: port_open(admin_port), "admin port")
    return px, admin_port, log


def _debug(admin_port, token=TOKEN):
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return _req(admin_port, UNTRUSTED, "GET", "/debug/requests", headers=headers)


# --- request ids ---------------------------------------------------------------------------

def test_trusted_client_keeps_its_id_untrusted_one_is_replaced(env):
    be = echo_backend(env)
    px, log = _proxy(env, be.port)
    st, h, body = _req(px.port, TRUSTED, headers={"X-Request-Id": "edge-42"})
    assert st == 200 and h["x-request-id"] == ["edge-42"], h
    assert headers_seen(body)["x-request-id"] == ["edge-42"], body
    # the attack: a client poses as the edge to poison the logs and the backend with an id
    # of its choosing (another request's, or one a log reader would trust)
    st, h, body = _req(px.port, UNTRUSTED, headers={"X-Request-Id": "edge-42"})
    rid = h["x-request-id"][0]
    assert st == 200 and rid != "edge-42" and HEX32.fullmatch(rid), h
    assert headers_seen(body)["x-request-id"] == [rid], body  # the backend saw only the proxy's
    assert b"edge-42" not in body
    recs = _log(log, 2)
    by_client = {r["client"]: r for r in recs}
    assert by_client[TRUSTED]["request_id"] == "edge-42", recs
    assert by_client[UNTRUSTED]["request_id"] == rid, recs


def test_malformed_ids_are_replaced_even_from_trusted_clients(env):
    be = echo_backend(env)
    px, log = _proxy(env, be.port)
    bad = ["a" * 65, "has space", 'quote"d', "<script>", "semi;colon", "caf\u00e9"]
    for value in bad:
        head = (b"GET / HTTP/1.1\r\nHost: x\r\nX-Request-Id: " + value.encode() +
                b"\r\nConnection: close\r\n\r\n")
        out = _raw(px.port, TRUSTED, head)
        assert out.startswith(b"HTTP/1.1 200"), out
        rid = re.search(rb"\r\nX-Request-Id: ([^\r]*)\r\n", out).group(1).decode()
        assert HEX32.fullmatch(rid), (value, rid)
        assert out.count(b"X-Request-Id: " + rid.encode()) == 2, out  # response + echo
    # two ids: neither is believed
    out = _raw(px.port, TRUSTED, b"GET / HTTP/1.1\r\nHost: x\r\nX-Request-Id: one\r\n"
               b"X-Request-Id: two\r\nConnection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200") and b"one" not in out and b"two" not in out, out
    # an id smuggling a header (CR LF inside) splits into a field of its own, or is refused;
    # either way no id of the client's choosing comes back or reaches the backend
    for inj in (b"abc\r\nX-Injected: 1", b"abc\nX-Injected: 1", b"abc\rX-Injected: 1"):
        out = _raw(px.port, TRUSTED, b"GET / HTTP/1.1\r\nHost: x\r\nX-Request-Id: " + inj +
                   b"\r\nConnection: close\r\n\r\n")
        assert re.search(rb"X-Request-Id: abc\r\nX-Injected", out) is None, out
        if out.startswith(b"HTTP/1.1 400"):
            assert re.search(rb"\r\nX-Request-Id: [0-9a-f]{32}\r\n", out), out
    assert be.count >= len(bad)


# --- trace context -------------------------------------------------------------------------

def test_traceparent_continued_for_trusted_started_for_others(env):
    be = echo_backend(env)
    px, log = _proxy(env, be.port)
    # a trusted client's trace goes on: same trace id, the proxy's span as parent, flags kept
    st, h, body = _req(px.port, TRUSTED, headers={"traceparent": TP, "tracestate": "vendor=a1,x=2",
                                                  "X-Request-Id": "t-continued"})
    seen = headers_seen(body)
    m = TP_RE.fullmatch(seen["traceparent"][0])
    assert m and m.group(1) == "0af7651916cd43dd8448eb211c80319c", seen
    assert m.group(2) != "b7ad6b7169203331" and m.group(3) == "01", seen
    assert len(seen["traceparent"]) == 1 and seen["tracestate"] == ["vendor=a1,x=2"], seen
    span = m.group(2)
    # none sent: the proxy starts one (sampled)
    st, h, body = _req(px.port, TRUSTED, headers={"X-Request-Id": "t-started"})
    seen = headers_seen(body)
    started = TP_RE.fullmatch(seen["traceparent"][0])
    assert started and started.group(1) != "0" * 32 and started.group(3) == "01", seen
    # an untrusted client's trace is not continued, and its tracestate does not pass
    st, h, body = _req(px.port, UNTRUSTED, headers={"traceparent": TP, "tracestate": "vendor=a1"})
    seen = headers_seen(body)
    other = TP_RE.fullmatch(seen["traceparent"][0])
    assert other and other.group(1) != "0af7651916cd43dd8448eb211c80319c", seen
    assert "tracestate" not in seen and "vendor=a1" not in body.decode("latin-1"), seen
    recs = {r["request_id"]: r for r in _log(log, 3)}
    assert recs["t-continued"]["trace_id"] == "0af7651916cd43dd8448eb211c80319c", recs
    assert recs["t-continued"]["span_id"] == span, recs
    assert recs["t-started"]["trace_id"] == started.group(1), recs
    untrusted = next(r for r in recs.values() if r["client"] == UNTRUSTED)
    assert untrusted["trace_id"] == other.group(1), recs


def test_malformed_traceparents_start_a_new_trace(env):
    be = echo_backend(env)
    px, _ = _proxy(env, be.port)
    bad = [
        "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",  # upper case
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # zero trace id
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # zero parent id
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # a version not ours
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # forbidden version
        TP + "-00",                                                 # overlong
        TP[:-1],                                                    # short
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01 ,x",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b71692033zz-01",  # not hex
        "0" * 4000,
    ]
    for value in bad:
        out = _raw(px.port, TRUSTED, b"GET / HTTP/1.1\r\nHost: x\r\ntraceparent: " +
                   value.encode() + b"\r\ntracestate: evil=1\r\nConnection: close\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 200"), (value, out[:200])
        seen = headers_seen(out.split(b"\r\n\r\n", 1)[1])
        m = TP_RE.fullmatch(seen["traceparent"][0])
        assert m and len(seen["traceparent"]) == 1, (value, seen)
        assert m.group(1) != "0af7651916cd43dd8448eb211c80319c", (value, seen)
        assert "tracestate" not in seen, (value, seen)  # only along a valid traceparent
    # two traceparents: neither is continued
    out = _raw(px.port, TRUSTED, b"GET / HTTP/1.1\r\nHost: x\r\ntraceparent: " + TP.encode() +
               b"\r\ntraceparent: " + TP.encode() + b"\r\nConnection: close\r\n\r\n")
    seen = headers_seen(out.split(b"\r\n\r\n", 1)[1])
    assert len(seen["traceparent"]) == 1 and "0af7651916" not in seen["traceparent"][0], seen
    # a header smuggled after a traceparent is a header of its own, never part of the value
    out = _raw(px.port, TRUSTED, b"GET / HTTP/1.1\r\nHost: x\r\ntraceparent: " + TP.encode() +
               b"\r\nX-Evil: 1\r\nConnection: close\r\n\r\n")
    seen = headers_seen(out.split(b"\r\n\r\n", 1)[1])
    assert TP_RE.fullmatch(seen["traceparent"][0]), seen


# --- the id everywhere ---------------------------------------------------------------------

def test_id_in_error_bodies_headers_and_log(env):
    be = echo_backend(env)
    px, log = _proxy(env, be.port)
    st, h, body = _req(px.port, UNTRUSTED, path="/dead/x")
    rid = h["x-request-id"][0]
    assert st == 502 and body.decode().endswith(f"(request id {rid})\n"), (st, body)
    st, h, body = _req(px.port, UNTRUSTED, path="/ai/dead/x")
    ai_status, doc = st, json.loads(body)
    assert st in (502, 503) and doc["request_id"] == h["x-request-id"][0], doc
    assert set(doc["error"]) == {"message", "type", "param", "code"}, doc  # OpenAI's shape
    # a trusted client's id is the one in the error body too
    st, h, body = _req(px.port, TRUSTED, path="/dead/y", headers={"X-Request-Id": "edge-7"})
    assert st in (502, 503) and h["x-request-id"] == ["edge-7"], (st, h)
    assert b"(request id edge-7)" in body, body
    recs = {r["request_id"]: r for r in _log(log, 3)}
    assert recs[rid]["status"] == 502 and recs[doc["request_id"]]["status"] == ai_status, recs
    assert recs["edge-7"]["path"] == "/dead/y", recs


def test_backend_own_request_id_is_replaced(env):
    def script(n, req):
        body = b"ok"
        return (b"HTTP/1.1 200 OK\r\nX-Request-Id: backend-own\r\nX-Accelnet-Timing: forged\r\n"
                b"Content-Length: 2\r\n\r\n" + body, False)
    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    px, log = _proxy(env, be.port)
    st, h, body = _req(px.port, UNTRUSTED)
    assert st == 200 and len(h["x-request-id"]) == 1 and h["x-request-id"][0] != "backend-own"
    assert "x-accelnet-timing" not in h, h
    assert _log(log, 1)[0]["request_id"] == h["x-request-id"][0]


def test_sse_error_event_carries_the_id(env):
    release = threading.Event()
    arrived = threading.Event()

    def script(n, req):
        arrived.set()
        release.wait(30)
        return (b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\nboom", False)
    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    env.on_cleanup.append(release.set)
    px, log = _proxy(env, be.port, routes="  - match: {path_prefix: /v1/}\n    pool: p\n"
                                          "    sse_heartbeat_ms: 50\n")
    with socket.create_connection(("127.0.0.1", px.port), timeout=30) as s:
        body = b'{"prompt":"x","stream":true}'
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        got = b""
        while b": waiting" not in got:  # the proxy's own event-stream head, then life
            got += s.recv(65536)
        assert arrived.wait(30)
        release.set()
        while not got.endswith(b"0\r\n\r\n"):
            d = s.recv(65536)
            assert d, got
            got += d
    rid = re.search(rb"\r\nX-Request-Id: ([0-9a-f]{32})\r\n", got).group(1).decode()
    data = re.search(rb"event: error\ndata: (.*)\n", got).group(1)
    ev = json.loads(data)
    assert ev["request_id"] == rid and ev["error"]["type"] == "proxy_error", ev
    assert _log(log, 1)[0]["request_id"] == rid


def test_refused_before_an_exchange_still_logged(env):
    be = echo_backend(env)
    px, log = _proxy(env, be.port, extra="limits: {max_header_bytes: 1024}\n"
                                          "timeouts: {header_ms: 300}\n")
    out = _raw(px.port, UNTRUSTED, b"GET /bad\x01path HTTP/1.1\r\nHost: x\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400"), out
    rid400 = re.search(rb"\r\nX-Request-Id: ([0-9a-f]{32})\r\n", out).group(1).decode()
    assert out.decode("latin-1").endswith(f"(request id {rid400})\n"), out
    out = _raw(px.port, UNTRUSTED, b"GET /big HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 2000 +
               b"\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 431"), out
    rid431 = re.search(rb"\r\nX-Request-Id: ([0-9a-f]{32})\r\n", out).group(1).decode()
    # a head that never ends: 408 when timeouts.header_ms runs out (the server's answer is
    # what the test waits for)
    out = _raw(px.port, UNTRUSTED, b"POST /slowloris HTTP/1.1\r\nHost: x\r\n")
    assert out.startswith(b"HTTP/1.1 408"), out
    rid408 = re.search(rb"\r\nX-Request-Id: ([0-9a-f]{32})\r\n", out).group(1).decode()
    recs = {r["request_id"]: r for r in _log(log, 3)}
    r400, r431, r408 = recs[rid400], recs[rid431], recs[rid408]
    assert r408["status"] == 408 and r408["path"] == "/slowloris", r408
    assert r400["status"] == 400 and r400["client"] == UNTRUSTED and r400["route"] is None
    assert r400["bytes_out"] > 0 and r400["total_ms"] is None, r400  # its answer, untimed
    assert r400["method"] is None and r400["path"] is None, r400  # no request line to show
    assert r431["status"] == 431 and r431["method"] == "GET" and r431["path"] == "/big", r431
    assert r431["bytes_in"] > 1024 and r431["trace_id"] is None, r431
    assert be.count == 0


# --- X-Accelnet-Timing ---------------------------------------------------------------------

def test_timing_header_only_for_trusted_clients(env):
    be = echo_backend(env)
    px, _ = _proxy(env, be.port)
    st, h, body = _req(px.port, TRUSTED, headers={"X-Accelnet-Timing": "1"})
    timing = h["x-accelnet-timing"][0]
    assert st == 200 and re.fullmatch(r"queue;dur=\d+\.\d{3}, connect;dur=\d+\.\d{3}, "
                                      r"backend;dur=\d+\.\d{3}, ttfb;dur=\d+\.\d{3}", timing), h
    assert "x-accelnet-timing" not in headers_seen(body), body  # the question is the proxy's
    st, h, body = _req(px.port, TRUSTED)  # not asked: not given
    assert "x-accelnet-timing" not in h, h
    st, h, body = _req(px.port, UNTRUSTED, headers={"X-Accelnet-Timing": "1"})
    assert st == 200 and "x-accelnet-timing" not in h, h  # untrusted: never
    assert "x-accelnet-timing" not in headers_seen(body), body
    # the proxy's own answer is whole when its head goes: its total is known
    st, h, _ = _req(px.port, TRUSTED, path="/dead/x", headers={"X-Accelnet-Timing": "1"})
    assert st == 502 and re.search(r"total;dur=\d+\.\d{3}$", h["x-accelnet-timing"][0]), h


# --- GET /debug/requests -------------------------------------------------------------------

def _held_backend(env):
    """A backend that holds every response until released; .arrived counts requests in."""
    release = threading.Event()
    lock = threading.Lock()
    state = {"n": 0}

    def script(n, req):
        with lock:
            state["n"] += 1
        release.wait(60)
        return (b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nslow", False)
    be = ScriptedBackend(script)
    be.release = release
    be.arrived = lambda: state["n"]
    env.on_cleanup.append(be.close)
    env.on_cleanup.append(release.set)
    return be


def test_debug_requests_shows_in_flight_and_slowest(env):
    be = _held_backend(env)
    px, admin, log = _token_proxy(env, be.port)
    # the token is required: none, or a wrong one, is refused
    assert _debug(admin, token=None)[0] == 401
    assert _debug(admin, token="wrong")[0] == 401
    result = {}

    def client():
        result["resp"] = _req(px.port, TRUSTED, "POST", "/v1/slow?q=1", body=b"12345",
                              headers={"X-Request-Id": "held-1"})
    t = threading.Thread(target=client)
    t.start()
    wait_until(lambda: be.arrived() == 1, "the request at the backend")
    st, h, body = _debug(admin)
    assert st == 200 and h["content-type"] == ["application/json"], (st, h, body)
    doc = json.loads(body)
    assert doc["silent_workers"] == [] and doc["in_flight_count"] == 1, doc
    x, = doc["in_flight"]
    assert x["request_id"] == "held-1" and x["state"] == "waiting for backend", x
    assert x["method"] == "POST" and x["path"] == "/v1/slow?q=1" and x["route"] == 0, x
    assert x["pool"] == "p" and x["backend"] == f"127.0.0.1:{be.port}", x
    assert x["client"] == TRUSTED and x["bytes_in"] > 5 and x["bytes_out"] == 0, x
    assert x["age_ms"] >= 0 and x["ttfb_ms"] is None and x["connect_ms"] is not None, x
    assert HEX32.fullmatch(x["trace_id"]), x
    be.release.set()
    t.join(30)
    assert result["resp"][0] == 200
    wait_until(lambda: json.loads(_debug(admin)[2])["in_flight_count"] == 0, "the exchange ended")
    doc = json.loads(_debug(admin)[2])
    slow = next(r for r in doc["slowest"] if r["request_id"] == "held-1")
    assert slow["status"] == 200 and slow["bytes_out"] == 4 and "state" not in slow, slow
    assert slow["total_ms"] >= slow["ttfb_ms"] >= 0 and slow["queue_ms"] == 0, slow
    assert slow["ended_ms_ago"] >= 0 and doc["slowest_window_s"] == 120, doc


def test_debug_requests_is_bounded(env):
    be = _held_backend(env)
    px, admin, _ = _token_proxy(env, be.port)
    n = 70
    socks = []
    try:
        for i in range(n):
            s = socket.create_connection(("127.0.0.1", px.port), timeout=30)
            s.sendall(b"GET /held/%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % i)
            socks.append(s)
        wait_until(lambda: be.arrived() == n, f"{n} requests at the backend", timeout=30)
        doc = json.loads(_debug(admin)[2])
        assert doc["in_flight_count"] == n, doc["in_flight_count"]
        shown = doc["in_flight"]
        assert 0 < len(shown) <= 64, len(shown)
        ages = [x["age_ms"] for x in shown]
        assert ages == sorted(ages, reverse=True), ages  # the oldest first
        be.release.set()
        for s in socks:
            assert read_all(s).startswith(b"HTTP/1.1 200")
    finally:
        for s in socks:
            s.close()
    doc = json.loads(_debug(admin)[2])
    assert len(doc["slowest"]) <= 16, len(doc["slowest"])


# --- review: what a hostile client, backend or log reader tries ----------------------------

def test_id_and_timing_fields_in_any_case_or_spacing(env):
    be = echo_backend(env)
    px, log = _proxy(env, be.port)
    # a trusted client's id is found whatever the case of its name and the spaces around it
    out = _raw(px.port, TRUSTED, b"GET / HTTP/1.1\r\nHost: x\r\nx-REQUEST-id: \t edge-9 \t\r\n"
               b"x-accelnet-TIMING: 1\r\nConnection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200") and b"\r\nX-Request-Id: edge-9\r\n" in out, out
    assert b"\r\nX-Accelnet-Timing: queue;dur=" in out, out
    # two of them under different cases are two: neither is believed
    out = _raw(px.port, TRUSTED, b"GET / HTTP/1.1\r\nHost: x\r\nX-REQUEST-ID: one\r\n"
               b"x-request-id: two\r\nConnection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200") and b"one" not in out and b"two" not in out, out
    # an untrusted client naming a trusted address in X-Forwarded-For is still untrusted
    st, h, body = _req(px.port, UNTRUSTED, headers={"X-Forwarded-For": TRUSTED,
                                                     "X-Real-IP": TRUSTED,
                                                     "X-REQUEST-ID": "spoofed",
                                                     "TraceParent": TP,
                                                     "X-ACCELNET-TIMING": "1"})
    seen = headers_seen(body)
    assert st == 200 and h["x-request-id"] != ["spoofed"] and "x-accelnet-timing" not in h, h
    assert seen["x-request-id"] == h["x-request-id"] and b"spoofed" not in body, seen
    assert "0af7651916cd43dd8448eb211c80319c" not in seen["traceparent"][0], seen
    assert "x-accelnet-timing" not in seen, seen
    # obs-fold would glue a second line to the id: refused whole, under an id of the proxy's
    out = _raw(px.port, TRUSTED, b"GET / HTTP/1.1\r\nHost: x\r\nX-Request-Id: edge-1\r\n"
               b" X-Injected: 1\r\nConnection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400") and b"edge-1" not in out, out
    assert re.search(rb"\r\nX-Request-Id: [0-9a-f]{32}\r\n", out), out
    # a NUL in the id: refused, never cut short to a prefix of the client's choosing
    out = _raw(px.port, TRUSTED, b"GET / HTTP/1.1\r\nHost: x\r\nX-Request-Id: edge-2\x00x\r\n"
               b"Connection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400") and b"edge-2" not in out, out


def test_backend_cannot_set_the_id_or_timing_in_interim_responses(env):
    # a hostile backend answers first with 1xx heads carrying its own id and timing: the
    # client must see neither, there any more than in the final head
    def script(n, req):
        return (b"HTTP/1.1 103 Early Hints\r\nX-Request-Id: backend-own\r\n"
                b"Link: </style.css>; rel=preload\r\nx-accelnet-timing: forged;dur=0\r\n\r\n"
                b"HTTP/1.1 200 OK\r\nX-Request-Id: backend-own\r\nContent-Length: 2\r\n\r\nok",
                False)
    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    px, log = _proxy(env, be.port)
    out = _raw(px.port, TRUSTED, b"GET / HTTP/1.1\r\nHost: x\r\nX-Request-Id: edge-5\r\n"
               b"X-Accelnet-Timing: 1\r\nConnection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 103") and b"rel=preload" in out, out
    assert b"backend-own" not in out and b"forged" not in out, out
    assert out.count(b"X-Request-Id: edge-5\r\n") == 1, out  # the final head's only
    assert b"HTTP/1.1 200 OK\r\n" in out and out.endswith(b"\r\n\r\nok"), out


def test_refusal_lines_in_the_combined_format(env):
    be = echo_backend(env)
    px, log = _proxy(env, be.port, fmt="combined")
    # a request line a log reader could be fooled by: quotes, backslashes, bytes not UTF-8
    out = _raw(px.port, UNTRUSTED, b'GET /a"b\\c\xff HTTP/1.1\r\nHost: x\r\n\r\n')
    assert out.startswith(b"HTTP/1.1 400"), out
    out = _raw(px.port, UNTRUSTED, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 junk\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400"), out

    def lines():
        with open(log, "rb") as f:
            return f.read().splitlines()
    wait_until(lambda: os.path.exists(log) and len(lines()) >= 2, "2 lines in the access log")
    first, second = sorted(lines(), key=lambda line: b"GET" not in line)  # workers' order
    for line in (first, second):
        assert all(0x20 <= c < 0x7f for c in line), line  # one line each, ASCII
        assert re.fullmatch(rb'127\.0\.0\.1 - - \[[^\]]+\] "(\\.|[^"\\])*" 400 [1-9]\d* "-" "" '
                            rb"rt=- rid=[0-9a-f]{32} pool=- backend=- trace=-", line), line
    assert b'] "GET /a\\"b\\\\c\\xff HTTP/1.1" 400 ' in first, first
    assert b'] "-" 400 ' in second, second  # no request line to show


def test_a_queue_timeout_says_how_long_it_queued(env):
    # the one slot held, a trusted client's request waits out queue.timeout_ms: its 503 says
    # it queued that long (not "no queue"), and so do its log line and /debug/requests
    be = _held_backend(env)
    log = os.path.join(env.dir, "access.log")
    tok = env.write("admin.token", TOKEN + "\n")
    os.chmod(tok, 0o600)
    admin_port = free_port()
    px = env.proxy("pools:\n  - name: p\n    backends:\n"
                   f"      - {{address: 127.0.0.1:{be.port}, max_concurrency: 1}}\n"
                   "    queue: {timeout_ms: 200}\n", admin=False,
                   extra=f"admin: {{address: 127.0.0.1:{admin_port}, token_file: {tok}}}\n"
                         f"trusted_proxies: [{TRUSTED}/32]\n"
                         f"access_log: {{path: {log}, format: json}}\n")
    wait_until(lambda: port_open(admin_port), "admin port")
    holder = threading.Thread(target=lambda: _req(px.port, UNTRUSTED, path="/hold"))
    holder.start()
    wait_until(lambda: be.arrived() == 1, "the slot taken")
    st, h, body = _req(px.port, TRUSTED, path="/queued",
                       headers={"X-Request-Id": "queued-1", "X-Accelnet-Timing": "1"})
    assert st == 503 and b"queue.timeout_ms" in body, (st, body)
    m = re.match(r"queue;dur=(\d+\.\d{3}), total;dur=\d+\.\d{3}$", h["x-accelnet-timing"][0])
    assert m and float(m.group(1)) >= 200, h
    slow = next(r for r in json.loads(_debug(admin_port)[2])["slowest"]
                if r["request_id"] == "queued-1")
    assert slow["status"] == 503 and slow["queue_ms"] >= 200, slow
    be.release.set()
    holder.join(30)
    rec = next(r for r in _log(log, 2) if r["request_id"] == "queued-1")
    assert rec["status"] == 503 and rec["queue_ms"] >= 200, rec
