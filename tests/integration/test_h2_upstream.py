"""HTTP/2 to backends (pools[].protocol: h2c, h2; docs/http2.md): many requests multiplexed
over few connections with the same answers as over HTTP/1.1, from HTTP/1.1 and HTTP/2
clients alike; a backend that dies mid-stream, sends GOAWAY, resets a stream or takes one
stream at a time."""

import concurrent.futures
import http.server
import json
import socket
import ssl
import threading

import h2.config
import h2.connection
import h2.events
import h2.settings

from harness import HttpBackend, backend_state, pool_yaml, read_all, request, wait_until
from test_h2 import H2Client


class H2Backend:
    """A threaded HTTP/2 server (Python h2): each stream answered with JSON naming what it
    saw (method, path, body, a few headers) once its request ended. Counts its accepted
    connections. <behave>(backend, conn, sid, request) may answer instead (return True)."""

    def __init__(self, env, max_streams=None, behave=None, tls=None):
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(64)
        self.port = self.srv.getsockname()[1]
        self.max_streams, self.behave, self.tls = max_streams, behave, tls
        self.accepted, self.requests, self.lock = 0, 0, threading.Lock()
        self.most_at_once, self.resets = 0, 0
        env.on_cleanup.append(self.srv.close)
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                sock, _ = self.srv.accept()
            except OSError:
                return
            with self.lock:
                self.accepted += 1
            threading.Thread(target=self.serve_conn, args=(sock,), daemon=True).start()

    def serve_conn(self, sock):
        if self.tls:
            try:
                sock = self.tls.wrap_socket(sock, server_side=True)
            except (OSError, ssl.SSLError):
                return
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        conn.lock = threading.RLock()  # a <behave> thread that writes too takes it
        conn.initiate_connection()
        if self.max_streams:
            conn.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS:
                                  self.max_streams})
        try:
            sock.sendall(conn.data_to_send())
        except (OSError, ssl.SSLError):
            return  # the proxy gave up on the connection (a test that makes it)
        reqs, open_now = {}, set()
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    return
                conn.lock.acquire()
                for e in conn.receive_data(data):
                    if isinstance(e, h2.events.RequestReceived):
                        reqs[e.stream_id] = {"headers": dict((k.decode(), v.decode())
                                                             for k, v in e.headers),
                                             "body": b"", "trailers": {}}
                        open_now.add(e.stream_id)
                        self.most_at_once = max(self.most_at_once, len(open_now))
                    elif isinstance(e, h2.events.DataReceived):
                        reqs[e.stream_id]["body"] += e.data
                        conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                    elif isinstance(e, h2.events.TrailersReceived):
                        reqs[e.stream_id]["trailers"] = dict((k.decode(), v.decode())
                                                             for k, v in e.headers)
                    elif isinstance(e, h2.events.StreamEnded):
                        with self.lock:
                            self.requests += 1
                        req = reqs.pop(e.stream_id)
                        open_now.discard(e.stream_id)
                        if not (self.behave and self.behave(self, conn, sock, e.stream_id, req)):
                            self.answer(conn, e.stream_id, req)
                    elif isinstance(e, h2.events.StreamReset):
                        open_now.discard(e.stream_id)
                        with self.lock:
                            self.resets += 1
                out = conn.data_to_send()
                if out:
                    sock.sendall(out)
                conn.lock.release()
        except (OSError, h2.exceptions.ProtocolError):
            return
        finally:
            sock.close()

    @staticmethod
    def answer(conn, sid, req, extra=()):
        h = req["headers"]
        body = json.dumps({"method": h[":method"], "path": h[":path"],
                           "authority": h.get(":authority"), "te": h.get("te"),
                           "body": req["body"].decode(), "trailers": req["trailers"],
                           "xff": h.get("x-forwarded-for")}).encode()
        conn.send_headers(sid, [(":status", "200"), ("content-type", "application/json"),
                                ("x-backend", "h2")] + list(extra))
        conn.send_data(sid, body, end_stream=True)


def _proxy(env, backend, protocol="h2c", extra_pool="", workers=2):
    extra = f"    protocol: {protocol}" + (f"\n    {extra_pool}" if extra_pool else "")
    return env.proxy("pools:\n" + pool_yaml("p", [backend.port], extra=extra), workers=workers)


def test_h2_upstream_http1_client_gets_the_answer(env):
    be = H2Backend(env)
    px = _proxy(env, be)
    status, headers, body = request(px.port, "POST", "/v1/completions", b'{"prompt":"hi"}',
                                    headers={"Content-Type": "application/json"})
    assert status == 200, body
    got = json.loads(body)
    assert got["method"] == "POST" and got["path"] == "/v1/completions"
    assert got["body"] == '{"prompt":"hi"}' and got["xff"] == "127.0.0.1"
    assert {k.lower(): v for k, v in headers.items()}.get("x-backend") == ["h2"]
    # a GET, and a body of no declared length (chunked from the client) with trailers
    status, _, body = request(px.port, "GET", "/v1/models/x?q=1")
    assert status == 200 and json.loads(body)["path"] == "/v1/models/x?q=1"
    c = H2Client(px.port)
    sid = c.send("POST", "/echo", body=b"abc", end=False)
    c.conn.send_headers(sid, [("x-checksum", "77")], end_stream=True)
    c.flush()
    c.wait(lambda: sid in c.ended or sid in c.reset)
    c.close()
    got = json.loads(c.body[sid])
    assert got["body"] == "abc" and got["trailers"] == {"x-checksum": "77"}, got


class _H1Twin(http.server.BaseHTTPRequestHandler):
    """The H2Backend's answer, over HTTP/1.1: what the same requests get from an HTTP/1.1
    pool."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        out = json.dumps({"method": "POST", "path": self.path, "authority": None, "te": None,
                          "body": body.decode(), "trailers": {},
                          "xff": self.headers.get("X-Forwarded-For")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


def test_h2_upstream_multiplexes_many_requests_over_few_connections(env):
    be, twin = H2Backend(env), HttpBackend(_H1Twin)
    env.on_cleanup.append(twin.close)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port], extra="    protocol: h2c\n"
                                          "    http2_connections: 2") +
                   pool_yaml("h1", [twin.port]) +
                   "routes:\n  - match: {path_prefix: /h1/}\n    pool: h1\n"
                   "  - match: {path_prefix: /}\n    pool: p\n", workers=2)
    # 1,000 requests at once: 10 HTTP/2 client connections of 100 streams each (the
    # client side's limit per connection), all sent before any answer is read
    clients, sent = [H2Client(px.port) for _ in range(10)], []
    for i in range(1000):
        c = clients[i // 100]
        sent.append((c, c.send("POST", f"/v1/completions?i={i}", body=json.dumps({"i": i})
                               .encode())))
    for c in clients:
        c.wait(lambda c=c: all(sid in c.ended or sid in c.reset
                               for cc, sid in sent if cc is c))
    answers = []
    for i, (c, sid) in enumerate(sent):
        assert c.status[sid] == 200, (i, c.reset.get(sid))
        got = json.loads(c.body[sid])
        assert got["path"] == f"/v1/completions?i={i}" and json.loads(got["body"]) == {"i": i}
        answers.append(got)
    for c in clients:
        c.close()
    # 2 workers, 2 connections each at most
    assert be.accepted <= 4, be.accepted
    assert be.requests == 1000
    # the same answers as an HTTP/1.1 backend gives (what HTTP/2 adds aside)
    for i in range(0, 1000, 97):
        status, _, body = request(px.port, "POST", f"/h1/v1/completions?i={i}",
                                  json.dumps({"i": i}).encode())
        twin_got = json.loads(body)
        twin_got["path"] = twin_got["path"][3:]
        mine = dict(answers[i], authority=None, te=None)
        assert status == 200 and twin_got == mine, (twin_got, mine)


def test_h2_upstream_one_stream_at_a_time(env):
    be = H2Backend(env, max_streams=1)
    px = _proxy(env, be, workers=1)
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(lambda i: request(px.port, "GET", f"/a?{i}"), range(40)))
    assert all(a[0] == 200 for a in answers)
    assert be.most_at_once == 1 and be.accepted == 1


def test_h2_upstream_reset_stream_and_goaway(env):
    def behave(backend, conn, sock, sid, req):
        path = req["headers"][":path"]
        if path == "/reset":
            conn.reset_stream(sid, error_code=2)
            return True
        if path == "/goaway":
            # this stream is answered; the connection takes no more
            HRespond = H2Backend.answer
            HRespond(conn, sid, req)
            conn.close_connection(last_stream_id=sid)
            return True
        return False

    be = H2Backend(env, behave=behave)
    px = _proxy(env, be, workers=1)
    status, _, _ = request(px.port, "GET", "/reset")
    assert status == 502
    status, _, body = request(px.port, "GET", "/goaway")
    assert status == 200 and json.loads(body)["path"] == "/goaway"
    # the next request goes on a new connection
    status, _, body = request(px.port, "GET", "/after")
    assert status == 200 and json.loads(body)["path"] == "/after"
    wait_until(lambda: be.accepted >= 2, "a new connection after GOAWAY")


def test_h2_upstream_backend_dies_mid_stream(env):
    def behave(backend, conn, sock, sid, req):
        if req["headers"][":path"] != "/die":
            return False
        conn.send_headers(sid, [(":status", "200")])
        conn.send_data(sid, b"partial")
        sock.sendall(conn.data_to_send())
        sock.shutdown(socket.SHUT_RDWR)
        return True

    be = H2Backend(env, behave=behave)
    px = _proxy(env, be, workers=1)
    c = H2Client(px.port)
    sid = c.send("GET", "/die")
    c.wait(lambda: sid in c.ended or sid in c.reset)
    assert c.status[sid] == 200 and sid in c.reset  # cut, never ended as whole
    c.close()
    # the proxy goes on: a new connection for the next request
    status, _, body = request(px.port, "GET", "/after")
    assert status == 200 and json.loads(body)["path"] == "/after"


def test_h2_upstream_refused_connection_is_retried(env):
    good = H2Backend(env)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    px = env.proxy("pools:\n" + pool_yaml("p", [dead, good.port], extra="    protocol: h2c"),
                   workers=1)
    for _ in range(4):
        status, _, body = request(px.port, "GET", "/x")
        assert status == 200, body


def test_h2_upstream_config_checks(env):
    import subprocess
    from harness import BIN
    cfg = env.write("bad.yaml", "listen:\n  - 127.0.0.1:1\npools:\n  - name: p\n    protocol: h3\n"
                    "    backends: [127.0.0.1:2]\n")
    out = subprocess.run([BIN, "check", "-c", cfg], capture_output=True, text=True)
    assert out.returncode != 0 and "protocol" in out.stderr + out.stdout
    cfg = env.write("bad2.yaml", "listen:\n  - 127.0.0.1:1\npools:\n  - name: p\n    protocol: h2\n"
                    "    backends: [127.0.0.1:2]\n")
    out = subprocess.run([BIN, "check", "-c", cfg], capture_output=True, text=True)
    assert out.returncode != 0 and "tls" in out.stderr + out.stdout
    cfg = env.write("ok.yaml", "listen:\n  - 127.0.0.1:1\npools:\n  - name: p\n    protocol: h2c\n"
                    "    http2_connections: 4\n    backends:\n"
                    "      - {address: 127.0.0.1:2, protocol: http1}\n      - 127.0.0.1:3\n")
    out = subprocess.run([BIN, "check", "-c", cfg], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def _tls_backend_ctx(env, alpn):
    import os
    import subprocess
    key, pem = os.path.join(env.dir, "be.key"), os.path.join(env.dir, "be.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", pem, "-days",
                    "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pem, key)
    ctx.set_alpn_protocols(alpn)
    return ctx, pem


def test_h2_upstream_over_tls_with_alpn(env):
    ctx, pem = _tls_backend_ctx(env, ["h2"])
    be = H2Backend(env, tls=ctx)
    px = _proxy(env, be, protocol="h2", extra_pool=f"tls: {{ca: {pem}}}", workers=1)
    for i in range(3):
        status, _, body = request(px.port, "POST", f"/v1/x{i}", b"hello")
        assert status == 200, body
        got = json.loads(body)
        assert got["path"] == f"/v1/x{i}" and got["body"] == "hello"
    assert be.accepted == 1


def test_h2_upstream_tls_without_h2_alpn_fails_the_connect(env):
    ctx, pem = _tls_backend_ctx(env, ["http/1.1"])
    be = H2Backend(env, tls=ctx)
    px = _proxy(env, be, protocol="h2", extra_pool=f"tls: {{ca: {pem}}}", workers=1)
    status, _, _ = request(px.port, "GET", "/x")
    assert status == 502


def test_h2_upstream_health_checks_speak_http2(env):
    state = {"health": "200"}

    def behave(backend, conn, sock, sid, req):
        if req["headers"][":path"] != "/health":
            return False
        conn.send_headers(sid, [(":status", state["health"])], end_stream=True)
        return True

    be = H2Backend(env, behave=behave)
    px = _proxy(env, be, workers=1,
                extra_pool="health: {path: /health, interval_ms: 50, fall: 1, rise: 1}")
    ready = lambda: request(px.admin, "GET", "/readyz")[0]  # noqa: E731
    wait_until(lambda: ready() == 200, "the h2c backend up by its HTTP/2 health check")
    state["health"] = "503"
    wait_until(lambda: ready() == 503, "the backend down: its check answered 503")
    state["health"] = "204"
    wait_until(lambda: ready() == 200, "the backend up again")


def _send_as_windows_allow(conn, sock, sid, headers, body, frame, pause_s):
    """A test backend's answer on stream <sid>: <headers>, then <body> as the stream's window
    allows, in frames of <frame> bytes (None: as large as the peer takes), each window's worth
    sent at once, under the connection's lock (one writer); then the stream's end."""
    import time
    with conn.lock:
        conn.send_headers(sid, headers)
    sent = 0
    while sent < len(body):
        with conn.lock:
            room = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size,
                       len(body) - sent)
            step = frame or room
            for i in range(sent, sent + max(room, 0), max(step, 1)):
                conn.send_data(sid, body[i:min(i + step, sent + room)])
            sent += max(room, 0)
            sock.sendall(conn.data_to_send())
        if room <= 0:
            time.sleep(pause_s)
    with conn.lock:
        conn.end_stream(sid)
        sock.sendall(conn.data_to_send())


def test_h2_upstream_large_response_to_slow_clients(env):
    """A response many buffers long, to an HTTP/1.1 client and an HTTP/2 one that read in
    small pieces: it arrives whole, the backend's stream held to the client's pace (its
    window given back only as the client takes the bytes)."""
    import time
    big = bytes(range(256)) * 4096  # 1 MiB

    def behave(backend, conn, sock, sid, req):
        if req["headers"][":path"] != "/big":
            return False

        def send():
            _send_as_windows_allow(conn, sock, sid, [(":status", "200")], big, None, 0.005)
        threading.Thread(target=send, daemon=True).start()
        return True

    be = H2Backend(env, behave=behave)
    px = _proxy(env, be, workers=1)
    s = socket.create_connection(("127.0.0.1", px.port), timeout=20)
    s.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
    got = b""
    while b"\r\n\r\n" not in got:
        got += s.recv(65536)
    head, body = got.split(b"\r\n\r\n", 1)
    want = len(big)
    # chunked: read to the last chunk, a little at a time
    while not body.endswith(b"0\r\n\r\n"):
        body += s.recv(4096)
    s.close()
    payload, rest = b"", body
    while True:
        size_line, rest = rest.split(b"\r\n", 1)
        n = int(size_line, 16)
        if not n:
            break
        payload += rest[:n]
        rest = rest[n + 2:]
    assert len(payload) == want and payload == big
    c = H2Client(px.port)
    sid = c.send("GET", "/big")
    c.wait(lambda: sid in c.ended or sid in c.reset)
    c.close()
    assert c.body[sid] == big


def _keepalive_gets(port, path, count, threads=8):
    """<count> GETs of <path>, over <threads> kept-alive HTTP/1.1 connections: their statuses
    and body lengths."""
    import http.client

    def run(k):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        got = []
        for _ in range(k):
            c.request("GET", path)
            r = c.getresponse()
            got.append((r.status, len(r.read())))
        c.close()
        return got

    per = [count // threads + (i < count % threads) for i in range(threads)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as pool:
        return [g for part in pool.map(run, per) for g in part]


def test_h2_upstream_connection_window_comes_back(env):
    """The connection's credit for every DATA byte goes back to the backend, also for the
    bytes read with the END_STREAM that closed the stream (a response's last frame, or all of
    a short one): else the connection's window (16 MiB) shrinks by them for good, and after
    some thousands of responses the backend can send no byte on that connection, every
    stream on it stalled. 12 MiB of 4 KiB answers, then the backend's view of the window."""
    seen = {}

    def behave(backend, conn, sock, sid, req):
        if req["headers"][":path"] == "/window":
            seen["window"] = conn.outbound_flow_control_window
            return False
        n = min(conn.local_flow_control_window(sid), 4096)
        conn.send_headers(sid, [(":status", "200"), ("content-length", str(n))])
        conn.send_data(sid, b"x" * n, end_stream=True)
        return True

    be = H2Backend(env, behave=behave)
    px = _proxy(env, be, workers=1)
    got = _keepalive_gets(px.port, "/tail", 3072)
    assert all(g == (200, 4096) for g in got), [g for g in got if g != (200, 4096)][:3]
    status, _, _ = request(px.port, "GET", "/window")
    assert status == 200
    # the proxy sends its WINDOW_UPDATE once half the window (8 MiB) is consumed: it came
    assert seen["window"] > 8 << 20, seen
    assert be.accepted == 1


def test_h2_upstream_tiny_data_frames(env):
    """A backend that sends its body a byte a DATA frame, a window's worth at a time: as
    HTTP/1.1 each frame was a chunk of its own (a size line and a CRLF: six bytes a byte), more
    than the stream's buffer holds of a window's worth, so the stream failed and the client
    was cut off mid-body. The frames join one chunk: the body arrives whole."""
    import http.client
    import time
    text = bytes(range(97, 123)) * 2520  # 64 KiB and more, a byte a frame

    def behave(backend, conn, sock, sid, req):
        if req["headers"][":path"] != "/tiny":
            return False

        def send():
            _send_as_windows_allow(conn, sock, sid, [(":status", "200"),
                                                     ("content-type", "text/plain")],
                                   text, 1, 0.002)
        threading.Thread(target=send, daemon=True).start()
        return True

    be = H2Backend(env, behave=behave)
    px = _proxy(env, be, workers=1)
    for _ in range(2):
        c = http.client.HTTPConnection("127.0.0.1", px.port, timeout=30)
        c.request("GET", "/tiny")
        r = c.getresponse()
        assert r.status == 200
        assert r.read() == text
        c.close()


def test_h2_upstream_data_past_content_length(env):
    """A backend whose DATA runs past its content-length: nghttp2 refuses the frame that
    crosses it (the stream reset), so no byte past the declared length reaches the client:
    the declared body whole when it came in a frame of its own, else the head and a cut."""
    def behave(backend, conn, sock, sid, req):
        conn.send_headers(sid, [(":status", "200"), ("content-length", "5")])
        if req["headers"][":path"] == "/apart":
            conn.send_data(sid, b"hello")
            conn.send_data(sid, b" world", end_stream=True)
        else:
            conn.send_data(sid, b"hello world", end_stream=True)
        return True

    be = H2Backend(env, behave=behave)
    px = _proxy(env, be, workers=1)
    status, _, body = request(px.port, "GET", "/apart")
    assert status == 200 and body == b"hello"
    s = socket.create_connection(("127.0.0.1", px.port), timeout=10)
    s.sendall(b"GET /across HTTP/1.1\r\nHost: x\r\n\r\n")
    got = read_all(s)
    s.close()
    assert b"hello" not in got, got
    # the proxy goes on
    status, _, body = request(px.port, "GET", "/apart")
    assert status == 200 and body == b"hello"


def test_h2_upstream_hedging_resets_the_losing_stream(env):
    # as test_sched's HTTP/1.1 hedging test, over h2c: the stuck backend's stream is reset
    # (CANCEL) once the copy on the quick one answered, and its connection goes on
    stuck = H2Backend(env, behave=lambda backend, conn, sock, sid, req: True)  # answers nothing
    quick = H2Backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [stuck.port, quick.port], extra=
                                          "    protocol: h2c\n    hedge_after_ms: 100"),
                   workers=1)
    for _ in range(2):  # round robin (the copy takes a turn): each starts on the stuck one
        status, h, body = request(px.port, "GET", "/slow")
        assert status == 200 and json.loads(body)["path"] == "/slow", (status, body)
    wait_until(lambda: stuck.resets == 2, "the losing streams reset")
    s = backend_state(px.admin, f"127.0.0.1:{stuck.port}")
    q = backend_state(px.admin, f"127.0.0.1:{quick.port}")
    assert s["hedged"] == 2 and q["hedge_wins"] == 2 and s["inflight"] == 0, (s, q)
    assert stuck.accepted == 1  # one connection, kept: the resets were the streams'
    # an HTTP/2 client's stream is hedged the same way
    c = H2Client(px.port)
    env.on_cleanup.append(c.close)
    sid = c.send("GET", "/slow2")
    c.wait(lambda: sid in c.ended or sid in c.reset)
    assert c.status[sid] == 200 and json.loads(c.body[sid])["path"] == "/slow2", c.status
    wait_until(lambda: stuck.resets == 3, "the losing stream reset")
