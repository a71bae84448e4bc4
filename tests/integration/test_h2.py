"""HTTP/2 from clients (issue 29): h2c with prior knowledge on a plain listener, each stream
an exchange through the same stages to HTTP/1.1 backends; flow control that holds the backend
back rather than buffering (not yet shown by a test); RST_STREAM cancelling the upstream attempt; GOAWAY on drain.
Clients: curl --http2-prior-knowledge and Python's h2 (python3-h2)."""

import json
import os
import re
import signal
import socket
import subprocess
import threading

import h2.config
import h2.connection
import h2.events
import h2.settings

from harness import (BIN, free_port, lenient_backend, metrics_text, pool_yaml, prom_samples,
                     request, wait_until)


def _sim_proxy(env, extra="", **sim_opts):
    sim_opts.setdefault("latency_ms", 0)
    sim_opts.setdefault("token_ms", 0)
    sim = env.sim("s", **sim_opts)
    px = env.proxy("pools:\n" + pool_yaml("p", [sim.port]), extra=extra)
    return sim, px


def _curl(port, *args, path="/v1/completions"):
    out = subprocess.run(["curl", "-s", "--http2-prior-knowledge", "-w",
                          "\n%{http_code} %{http_version}", *args,
                          f"http://127.0.0.1:{port}{path}"],
                         capture_output=True, timeout=30)
    body, _, tail = out.stdout.rpartition(b"\n")
    code, version = tail.decode().split()
    return int(code), version, body


class H2Client:
    """One HTTP/2 connection (Python h2) to the proxy: requests on streams of their own, and
    the events read back, per stream."""

    def __init__(self, port, window=None, timeout=20):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        if window is not None:
            self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.flush()
        self.status, self.headers, self.body = {}, {}, {}
        self.fields = {}  # stream id: its response head's fields, in order, repeats kept
        self.ended, self.reset, self.goaway = set(), {}, None
        self.trailers = {}
        self.interim = {}  # stream id: the heads of its informational (1xx) responses
        self.auto_ack = window is None

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def send(self, method, path, body=None, headers=(), end=True):
        sid = self.conn.get_next_available_stream_id()
        hs = [(":method", method), (":path", path), (":authority", "test"),
              (":scheme", "http")] + list(headers)
        self.conn.send_headers(sid, hs, end_stream=body is None and end)
        if body is not None:
            self.send_body(sid, body, end)
        self.flush()
        return sid

    def send_body(self, sid, body, end=True):
        while body:
            room = min(self.conn.local_flow_control_window(sid),
                       self.conn.max_outbound_frame_size)
            if room <= 0:
                self.pump()
                continue
            self.conn.send_data(sid, body[:room])
            body = body[room:]
            self.flush()
        if end:
            self.conn.end_stream(sid)
        self.flush()

    def pump(self):
        """Read once; record the events."""
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the proxy closed the connection")
        for e in self.conn.receive_data(data):
            if isinstance(e, h2.events.InformationalResponseReceived):
                self.interim.setdefault(e.stream_id, []).append(
                    {k.decode(): v.decode() for k, v in e.headers})
            elif isinstance(e, h2.events.ResponseReceived):
                hs = {k.decode(): v.decode() for k, v in e.headers}
                self.status[e.stream_id] = int(hs[":status"])
                self.headers[e.stream_id] = hs
                self.fields[e.stream_id] = [(k.decode(), v.decode()) for k, v in e.headers]
            elif isinstance(e, h2.events.DataReceived):
                self.body[e.stream_id] = self.body.get(e.stream_id, b"") + e.data
                if self.auto_ack:
                    self.conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
            elif isinstance(e, h2.events.TrailersReceived):
                self.trailers[e.stream_id] = {k.decode(): v.decode() for k, v in e.headers}
            elif isinstance(e, h2.events.StreamEnded):
                self.ended.add(e.stream_id)
            elif isinstance(e, h2.events.StreamReset):
                self.reset[e.stream_id] = e.error_code
            elif isinstance(e, h2.events.ConnectionTerminated):
                self.goaway = e
        self.flush()

    def wait(self, pred):
        while not pred():
            self.pump()

    def close(self):
        self.sock.close()


def test_h2c_prior_knowledge_with_curl(env):
    _, px = _sim_proxy(env)
    code, version, body = _curl(px.port, "-d", '{"prompt":"hi","max_tokens":3}')
    assert (code, version) == (200, "2"), (code, version, body)
    assert json.loads(body)["usage"]["completion_tokens"] == 3, body
    code, version, body = _curl(px.port, path="/plain/get")
    assert (code, version) == (200, "2") and b"GET /plain/get" in body, body
    # the same listener still speaks HTTP/1.1 to everyone else
    st, _, body = request(px.port, "POST", "/v1/completions",
                          body='{"prompt":"hi","max_tokens":2}')
    assert st == 200 and json.loads(body)["usage"]["completion_tokens"] == 2


def test_h2c_streams_carry_their_own_requests(env):
    be = lenient_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]))
    c = H2Client(px.port)
    sids = {}
    for i in range(100):  # as many streams at once as the proxy allows by default
        body = json.dumps({"model": f"m{i}", "max_tokens": i + 1}).encode()
        sids[c.send("POST", f"/v1/completions?n={i}", body=body,
                    headers=[("content-type", "application/json"),
                             ("content-length", str(len(body))),
                             ("cookie", "a=1"), ("cookie", "b=2")])] = i
    c.wait(lambda: len(c.ended) == len(sids))
    assert not c.reset, c.reset
    for sid, i in sids.items():
        assert c.status[sid] == 200, (sid, c.status[sid], c.body.get(sid))
        seen = json.loads(c.body[sid])
        assert seen["target"] == f"/v1/completions?n={i}", seen
        assert (seen["model"], seen["max_tokens"]) == (f"m{i}", i + 1), seen
        # cookie crumbs joined into one field, as HTTP/1.1 carries them
        assert seen["headers"]["cookie"] == ["a=1; b=2"], seen["headers"]
        assert seen["headers"]["host"] == ["test"], seen["headers"]
        assert c.headers[sid].get("x-request-id"), c.headers[sid]
    c.close()


def test_h2c_response_head_follows_the_http1_rules(env):
    """The fields an HTTP/2 client gets are those an HTTP/1.1 client gets from the same
    route, in the same order, but the connection-specific ones: the backend's hop-by-hop
    fields (and those its Connection names) dropped, its X-Request-Id and X-Accelnet-Llm
    replaced or dropped, response_headers applied (a configured value's padding gone as
    HTTP/1.1 readers drop it), repeated fields kept apart; a HEAD declares the length."""
    from harness import ScriptedBackend

    def script(n, req):
        body = b"" if req.startswith(b"HEAD ") else b"ok"
        return (b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Hop\r\nX-Hop: secret\r\n"
                b"Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\n"
                b"X-Request-Id: backend-id\r\nX-Accelnet-Llm: forged\r\n"
                b"X-Internal: secret\r\nServer: upstream\r\nSet-Cookie: a=1\r\n"
                b"Set-Cookie: b=2\r\nContent-Length: 2\r\n\r\n" + body, False)
    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    px = env.proxy(
        f"pools:\n  - name: p\n    backends: [{{address: 127.0.0.1:{be.port}}}]\n"
        "routes:\n  - match: {path_prefix: /}\n    pool: p\n"
        "    response_headers:\n"
        "      set: {Server: accelnet}\n"
        "      add: {X-Served-By: '%{backend}', X-Padded: '  padded value  '}\n"
        "      remove: [X-Internal]\n")
    c = H2Client(px.port)
    get, head = c.send("GET", "/x"), c.send("HEAD", "/x")
    c.wait(lambda: {get, head} <= c.ended)
    st, h1, data = request(px.port, "GET", "/x")
    assert st == 200 and data == b"ok", (st, data)
    for sid in (get, head):
        f = c.fields[sid]
        assert f[0] == (":status", "200"), f
        rid = [v for k, v in f if k == "x-request-id"]
        assert len(rid) == 1 and rid[0] != "backend-id", f
        assert [k for k, _ in f[1:]] == ["set-cookie", "set-cookie", "server", "x-served-by",
                                         "x-padded", "content-length", "x-request-id"], f
        assert f[1:6] == [("set-cookie", "a=1"), ("set-cookie", "b=2"), ("server", "accelnet"),
                          ("x-served-by", f"127.0.0.1:{be.port}"),
                          ("x-padded", "padded value")], f
        assert ("content-length", "2") in f, f
        # what the HTTP/1.1 client got, but Connection and the request id
        seen = {(k, v.strip()) for k, vs in h1.items() for v in vs
                if k not in ("connection", "keep-alive", "x-request-id")}
        assert seen == {(k, v) for k, v in f[1:] if k != "x-request-id"}, (seen, f)
    assert c.body.get(get) == b"ok" and not c.body.get(head), c.body
    c.close()


def test_h2c_heads_reset_before_they_went(env):
    """Response heads submitted while the client reads nothing (the proxy's writes blocked
    behind a large body), their streams then reset by the client before their HEADERS went,
    then new streams: each new stream gets its own head whole (the heads' fields lie in a
    buffer nghttp2 reads without copying, given back only once no HEADERS of it waits), and a
    second connection closed outright with such heads waiting leaves the proxy serving. Under
    ASan pooled buffers are poisoned while free (core/buf.c), so a read of a given-back head
    is reported there."""
    from harness import ScriptedBackend
    big = 16 << 20

    def script(n, req):
        path = req.split(b" ", 2)[1]
        if path == b"/big":
            return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % big + b"x" * big, False
        fields = b"".join(b"X-F%d: %s-%d\r\n" % (k, path, k) for k in range(40))
        return b"HTTP/1.1 200 OK\r\n" + fields + b"Content-Length: 2\r\n\r\nok", False
    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    px = env.proxy(f"pools:\n  - name: p\n    backends: [{{address: 127.0.0.1:{be.port}}}]\n"
                   "routes:\n  - match: {path_prefix: /}\n    pool: p\n")

    def blocked():
        """A connection whose client reads nothing while a large body fills every buffer."""
        c = H2Client(px.port, window=2**31 - 1)
        c.conn.increment_flow_control_window(2**30)
        c.flush()
        c.send("GET", "/big")
        wait_until(lambda: be.count >= 1, "the large body requested")
        return c

    c = blocked()
    first = be.count
    reset = [c.send("GET", f"/r{i}") for i in range(8)]
    wait_until(lambda: be.count >= first + len(reset), "the backend answered every stream")
    for sid in reset:
        c.conn.reset_stream(sid, error_code=8)  # CANCEL
    c.flush()
    fresh = {c.send("GET", f"/n{i}"): i for i in range(8)}
    c.auto_ack = True  # read everything now
    c.wait(lambda: set(fresh) <= c.ended)
    for sid, i in fresh.items():
        assert c.status[sid] == 200 and c.body.get(sid) == b"ok", (sid, c.status.get(sid))
        got = {k: v for k, v in c.fields[sid] if k.startswith("x-f")}
        assert got == {f"x-f{k}": f"/n{i}-{k}" for k in range(40)}, (i, got)
    c.close()
    # heads waiting when the client goes away
    c = blocked()
    first = be.count
    for i in range(8):
        c.send("GET", f"/g{i}")
    wait_until(lambda: be.count >= first + 8, "the backend answered every stream")
    c.sock.close()
    st, _, data = request(px.port, "GET", "/after")
    assert st == 200 and data == b"ok", (st, data)


def test_h2c_bodies_both_ways_past_every_window(env):
    # 64 KiB read before admission, the rest streamed under the stream's window
    sim, px = _sim_proxy(env, extra="limits:\n  body_buffer_bytes: 64KiB\n")
    c = H2Client(px.port)
    big = b"x" * 1000000  # the simulator takes 1 MiB at most
    # a declared length, and none (sent to the backend chunked)
    a = c.send("POST", "/upload", body=big, headers=[("content-length", str(len(big)))])
    b = c.send("POST", "/upload", body=big)
    c.wait(lambda: {a, b} <= c.ended)
    for sid in (a, b):
        assert c.status[sid] == 200, c.body.get(sid)
        assert b"(%d body bytes)" % len(big) in c.body[sid], c.body[sid][:200]
    c.close()


def test_h2c_proxy_answers_and_limits(env):
    _, px = _sim_proxy(env, extra="limits:\n  max_body_bytes: 1000\n")
    c = H2Client(px.port)
    big = c.send("POST", "/v1/completions", body=b"y" * 2000,
                 headers=[("content-length", "2000")])
    c.wait(lambda: big in c.ended or big in c.reset)
    assert c.status.get(big) == 413, (c.status, c.reset)
    assert c.headers[big].get("x-request-id"), c.headers[big]
    assert "connection" not in c.headers[big], c.headers[big]
    # the connection carries on after the proxy's own answer
    ok = c.send("GET", "/after")
    c.wait(lambda: ok in c.ended)
    assert c.status[ok] == 200, c.body.get(ok)
    c.close()


def test_h2c_off_by_config(env):
    sim = env.sim("s", latency_ms=0, token_ms=0)
    port = free_port()
    path = env.write("off.yaml", f"listen:\n  - address: 127.0.0.1:{port}\n    http2: false\n"
                     "pools:\n" + pool_yaml("p", [sim.port]))
    env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port)
    code, version, _ = _curl(port, path="/")
    assert version != "2", (code, version)
    st, _, _ = request(port, "GET", "/")
    assert st == 200


def one_shot_backend(env, answer):
    """A backend taking one connection: once a request head has come, answer(conn) (in its
    own thread) does what the test needs. Returns its port."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    env.on_cleanup.append(srv.close)

    def serve():
        conn, _ = srv.accept()
        req = b""
        while b"\r\n\r\n" not in req:
            req += conn.recv(65536)
        answer(conn)

    threading.Thread(target=serve, daemon=True).start()
    return srv.getsockname()[1]


def test_h2c_reset_stream_cancels_the_upstream_attempt(env):
    state = {"closed": threading.Event(), "got": threading.Event()}

    def answer(conn):
        state["got"].set()
        conn.settimeout(30)
        try:
            rest = conn.recv(65536)  # the answer never comes: an engine still working
        except OSError:
            rest = b"timeout"
        if rest == b"":
            state["closed"].set()
        conn.close()

    px = env.proxy("pools:\n" + pool_yaml("p", [one_shot_backend(env, answer)]))
    c = H2Client(px.port)
    sid = c.send("POST", "/v1/completions", body=b'{"prompt":"x"}')
    wait_until(state["got"].is_set, "the request at the backend")
    c.conn.reset_stream(sid)
    c.flush()
    wait_until(state["closed"].is_set, "the backend connection closed by the reset")
    # the connection lives on for its other streams
    c2 = H2Client(px.port)
    c2.close()
    c.close()


def test_h2c_goaway_on_reload_finishes_streams(env):
    sim, px = _sim_proxy(env, token_ms=20)
    idle = H2Client(px.port)
    ping = idle.send("GET", "/first")
    idle.wait(lambda: ping in idle.ended)
    # a stream under way when the reload comes (curl: Python's h2 stops at a GOAWAY)
    curl = subprocess.Popen(["curl", "-s", "-N", "--http2-prior-knowledge", "-w",
                             "\n%{http_code} %{http_version}", "-d",
                             '{"prompt":"x","max_tokens":40,"stream":true}',
                             f"http://127.0.0.1:{px.port}/v1/completions"],
                            stdout=subprocess.PIPE)
    # the first event is through: the stream is under way. Read unbuffered: communicate()
    # below reads the descriptor itself, and what a buffered read had taken past these 6
    # bytes would be lost to it (under load two events came in one read, and the count failed)
    first = b""
    while len(first) < 6:
        got = os.read(curl.stdout.fileno(), 6 - len(first))
        assert got, first
        first += got
    assert first == b"data: ", first
    os.kill(px.pid, signal.SIGHUP)
    idle.wait(lambda: idle.goaway is not None)
    assert idle.goaway.error_code == 0 and idle.goaway.last_stream_id == ping, idle.goaway
    rest, _ = curl.communicate(timeout=30)
    body, _, tail = (first + rest).rpartition(b"\n")
    assert tail == b"200 2" and curl.returncode == 0, (tail, curl.returncode)
    toks = [int(t) for t in re.findall(rb'"text":"tok(\d+) "', body)]
    # 40 tokens and [DONE], each once and in order (the message shows which were not)
    assert body.count(b"data: ") == 41 and toks == list(range(40)), \
        (body.count(b"data: "), [t for t in range(40) if toks.count(t) != 1], body[-300:])
    idle.close()


def test_h2c_idle_connections_hold_no_buffer(env):
    """An HTTP/2 connection whose streams are all answered, and that sends nothing more, holds
    no buffer of the worker's: it kept the one its last read took (33 KiB of address space, the
    pages its frames touched), as many as there were idle connections."""
    sim, px = _sim_proxy(env)
    clients = []
    for _ in range(8):
        c = H2Client(px.port)
        sid = c.send("GET", "/v1/models")
        c.wait(lambda: sid in c.ended)
        assert c.status[sid] == 200
        clients.append(c)

    def lent():
        return prom_samples(metrics_text(px.admin))[("accelnet_buffer_bytes", ())]

    try:
        wait_until(lambda: lent() == 0, "no buffer lent while the connections are idle")
    finally:
        print(f"{len(clients)} idle HTTP/2 connections: {lent():.0f} bytes of buffers lent")
    for c in clients:
        c.close()
