"""HTTP/2 from a hostile client (review of issue 29's step 1): what a client that holds
credit back, never finishes a header block, resets streams or sends odd frames can make the
proxy do. Each test says what a user would see."""

import socket
import threading
import time

import h2.config
import h2.connection
import hyperframe.frame

from harness import lenient_backend, pool_yaml, request
from test_h2 import H2Client, one_shot_backend

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def _closed(sock, timeout):
    """Does the proxy close <sock> within <timeout> seconds (reading whatever comes)?"""
    sock.settimeout(timeout)
    end = time.monotonic() + timeout
    try:
        while time.monotonic() < end:
            if not sock.recv(65536):
                return True
    except socket.timeout:
        return False
    except OSError:
        return True
    return False


def _big_backend(env, total, state):
    """A backend answering one request with <total> bytes (content-length), counting in
    state["sent"] what its socket took."""
    def answer(conn):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % total)
        conn.settimeout(60)
        chunk = b"z" * 65536
        try:
            while state["sent"] < total:
                state["sent"] += conn.send(chunk[:total - state["sent"]])
        except OSError:
            pass
        conn.close()

    return one_shot_backend(env, answer)


def test_h2c_slow_reader_gets_the_rest_once_credit_comes_back(env):
    """A client that reads one window, then stops giving credit back: the backend is held
    back (one buffer, the sockets), and once credit comes back the whole response arrives at
    once. (A stall seen here before was the test client's: H2Client keeps a body by joining
    bytes, quadratic over 64 MiB; here only its length is kept once credit is back.)"""
    total = 64 << 20
    state = {"sent": 0}
    port = _big_backend(env, total, state)
    px = env.proxy("pools:\n" + pool_yaml("p", [port]))
    c = H2Client(px.port, window=65535, timeout=10)  # reads, but gives no credit back
    sid = c.send("GET", "/big")
    c.wait(lambda: len(c.body.get(sid, b"")) >= 65535)
    sent = -1
    while sent != state["sent"]:  # the backend stops: its socket is full
        sent = state["sent"]
        time.sleep(0.5)
    assert sent < total // 2, sent
    class Length:
        def __init__(self, n):
            self.n = n

        def __add__(self, data):
            self.n += len(data)
            return self

    c.body[sid] = Length(len(c.body[sid]))
    c.auto_ack = True
    c.conn.acknowledge_received_data(c.body[sid].n, sid)
    c.flush()
    c.wait(lambda: sid in c.ended)
    assert c.body[sid].n == total, c.body[sid].n
    c.close()


SHORT = ("timeouts:\n  idle_ms: 500\n  header_ms: 500\n  send_ms: 500\n"
         "  between_bytes_ms: 500\n")


def test_h2c_a_client_that_takes_none_of_the_proxys_answers_is_closed(env):
    """The proxy's own answers (a 414 here) to a client whose window is shut (it never takes
    a byte of them): each stream holds a buffer and no exchange, so no deadline of an exchange
    ends it; a client that takes none of what waits for it is closed after timeouts.send_ms,
    as an HTTP/1.1 one is. (Before: the connection and its 100 buffers stayed for good.)"""
    be = lenient_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]),
                   extra=SHORT + "limits:\n  max_uri_bytes: 64\n")
    c = H2Client(px.port, window=0)
    for _ in range(100):
        c.send("GET", "/" + "a" * 100)
    c.wait(lambda: len(c.status) == 100)  # the heads came (HEADERS need no credit)
    assert set(c.status.values()) == {414}, c.status
    assert _closed(c.sock, 10), "the proxy kept a client that takes nothing"


def test_h2c_a_header_block_never_finished_is_closed(env):
    """HEADERS without END_HEADERS and no CONTINUATION after it: the connection waits for
    nothing else (RFC 9113 6.10), so timeouts.header_ms ends it, as a request head that never
    ends does over HTTP/1.1. (Before: kept open for good.)"""
    be = lenient_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]), extra=SHORT)
    s = socket.create_connection(("127.0.0.1", px.port))
    env.on_cleanup.append(s.close)
    enc = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    block = enc.encoder.encode([(":method", "GET"), (":path", "/"), (":authority", "t"),
                                (":scheme", "http"), ("x-a", "b")])
    hf = hyperframe.frame.HeadersFrame(1, data=block, flags=["END_STREAM"])  # no END_HEADERS
    s.sendall(PREFACE + hyperframe.frame.SettingsFrame(0).serialize() + hf.serialize())
    assert _closed(s, 10), "a header block left unfinished kept the connection open"


def _raw(port):
    """A raw client connection after its preface: (socket, an h2 encoder for header blocks)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    enc = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    s.sendall(PREFACE + hyperframe.frame.SettingsFrame(0).serialize())
    return s, enc


def _hf(enc, sid, headers, flags=("END_HEADERS", "END_STREAM")):
    return hyperframe.frame.HeadersFrame(sid, data=enc.encoder.encode(headers),
                                         flags=list(flags)).serialize()


REQ = [(":method", "GET"), (":path", "/"), (":authority", "t"), (":scheme", "http")]


def _answer(s, sid=1):
    """Frames from the proxy until stream <sid> is answered (a HEADERS with its status), reset,
    or the connection ends: ("status", N), ("reset", CODE) or ("closed", None)."""
    import hpack
    dec, data = hpack.Decoder(), b""
    s.settimeout(10)
    while True:
        while len(data) >= 9:
            f, length = hyperframe.frame.Frame.parse_frame_header(memoryview(data[:9]))
            if len(data) < 9 + length:
                break
            f.parse_body(memoryview(data[9:9 + length]))
            data = data[9 + length:]
            if isinstance(f, hyperframe.frame.HeadersFrame) and f.stream_id == sid:
                return ("status", int(dict(dec.decode(bytes(f.data)))[":status"]))
            if isinstance(f, hyperframe.frame.RstStreamFrame) and f.stream_id == sid:
                return ("reset", f.error_code)
            if isinstance(f, hyperframe.frame.GoAwayFrame):
                return ("closed", f.error_code)
        d = s.recv(65536)
        if not d:
            return ("closed", None)
        data += d


def test_h2c_header_tricks_never_reach_the_backend(env):
    """Fields an HTTP/1.1 head could be split or smuggled by: each is refused (the stream
    reset, or 400) before anything reaches the backend. A guard (passes on the merge too):
    nghttp2's checks, the head writer's own, then the HTTP/1.1 parser."""
    seen = []
    be = lenient_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]))
    auth = [(":authority", "t"), (":scheme", "http")]
    cases = {
        "CR LF in a value": REQ + [("x-a", "a\r\nx-b: c")],
        "NUL in a value": REQ + [("x-a", "a\x00b")],
        "CR LF in a cookie crumb": REQ + [("cookie", "a=1"), ("cookie", "b\r\n=2")],
        "upper case name": REQ + [("X-A", "b")],
        "colon in a name": REQ + [("x:a", "b")],
        "connection": REQ + [("connection", "close")],
        "te other than trailers": REQ + [("te", "gzip")],
        "transfer-encoding": REQ + [("transfer-encoding", "chunked")],
        "upgrade": REQ + [("upgrade", "websocket")],
        "space in :path": [(":method", "GET"), (":path", "/a b")] + auth,
        "space in :method": [(":method", "GET /x"), (":path", "/")] + auth,
        "empty :path": [(":method", "GET"), (":path", "")] + auth,
        "# in :path": [(":method", "GET"), (":path", "/a#b")] + auth,
        "* for GET": [(":method", "GET"), (":path", "*"), (":authority", "t"),
                      (":scheme", "foo")],
        "two hosts": [(":method", "GET"), (":path", "/"), (":scheme", "http"), ("host", "a"),
                      ("host", "b")],
        "CONNECT": [(":method", "CONNECT"), (":authority", "evil:443")],
        ":protocol": REQ + [(":protocol", "websocket")],
    }
    for name, hs in cases.items():
        s, enc = _raw(px.port)
        s.sendall(_hf(enc, 1, hs))
        got = _answer(s)
        s.close()
        # (a plain CONNECT: 405, the proxy is no forward proxy; test_h2_websocket.py)
        assert got[0] == "reset" or got == ("status", 405 if name == "CONNECT" else 400), \
            (name, got)
        seen.append(name)
    # a body longer than its content-length: the stream is reset, nothing relayed
    c = H2Client(px.port, timeout=5)
    sid = c.send("POST", "/s", body=b"0123456789", headers=[("content-length", "5")])
    c.wait(lambda: sid in c.reset or sid in c.ended)
    assert sid in c.reset and sid not in c.status, (c.status, c.reset)
    c.close()
    st, _, _ = request(px.port, "GET", "/after")
    assert st == 200 and len(seen) == len(cases)


def test_h2c_floods_end_the_connection_and_others_are_served(env):
    """Rapid reset (HEADERS then RST_STREAM, over and over) and a CONTINUATION flood: the
    connection is ended (libnghttp2's limits, Debian's security updates), the proxy lives on
    for everyone else. A guard (passes on the merge too)."""
    be = lenient_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]))
    s, enc = _raw(px.port)
    closed = False
    try:
        for sid in range(1, 40001, 2):
            s.sendall(_hf(enc, sid, REQ) +
                      hyperframe.frame.RstStreamFrame(sid, error_code=8).serialize())
    except OSError:
        closed = True
    assert closed or _closed(s, 10), "20000 resets on one connection went on"
    s.close()
    s, enc = _raw(px.port)
    s.sendall(_hf(enc, 1, REQ, flags=("END_STREAM",)))
    closed = False
    try:
        for i in range(20000):
            blk = enc.encoder.encode([("x-%d" % i, "v" * 50)])
            s.sendall(hyperframe.frame.ContinuationFrame(1, data=blk).serialize())
    except OSError:
        closed = True
    assert closed or _closed(s, 10), "20000 CONTINUATION frames went on"
    s.close()
    c = H2Client(px.port, timeout=5)
    big = c.send("GET", "/", headers=[("x-h%d" % i, "v" * 100) for i in range(1000)])
    c.wait(lambda: big in c.ended or big in c.reset)
    assert c.status.get(big) == 431, (c.status, c.reset)
    c.close()
    assert request(px.port, "GET", "/after")[0] == 200


def test_h2_preface_inside_tls_gets_http1(env):
    """docs/http2.md: over TLS, HTTP/2 is chosen by ALPN "h2" alone. A TLS client that offered
    no ALPN and sends the preface anyway is answered as HTTP/1.1, never taken into HTTP/2
    without ALPN. (Before: it got an HTTP/2 connection.)"""
    import os
    import ssl
    import subprocess
    from harness import BIN, free_port
    key, cert = os.path.join(env.dir, "k.pem"), os.path.join(env.dir, "c.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", cert, "-days",
                    "2", "-subj", "/CN=t"], check=True, capture_output=True)
    be = lenient_backend(env)
    port = free_port()
    path = env.write("tls.yaml", f"listen:\n  - address: 127.0.0.1:{port}\n"
                     f"    tls: {{cert: {cert}, key: {key}}}\npools:\n" +
                     pool_yaml("p", [be.port]))
    env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5))
    env.on_cleanup.append(s.close)
    s.sendall(PREFACE + hyperframe.frame.SettingsFrame(0).serialize())
    got = b""
    try:
        while len(got) < 12:
            d = s.recv(4096)
            if not d:
                break
            got += d
    except (socket.timeout, ssl.SSLError):
        pass
    assert got.startswith(b"HTTP/1.1 "), got[:40]


def test_h2c_a_stream_whose_backend_never_answers_gets_504_while_others_go_on(env):
    """One stream's backend takes the request and never answers; the connection's other
    streams are answered meanwhile, one after another, each a run of the connection that
    ends with its next deadline worked out again. The silent one is still answered 504 once
    timeouts.first_byte_ms has passed, on the same connection, which goes on serving. (The
    connection keeps each stream's next deadline between the runs that move it; one kept from
    an earlier phase, the connect's timeouts.connect_ms, long here, would hold it past the
    client's patience.)"""
    got = threading.Event()

    def answer(conn):
        got.set()
        conn.settimeout(30)
        try:
            conn.recv(65536)  # never answers: the proxy's 504 closes this connection
        except OSError:
            pass

    silent = one_shot_backend(env, answer)
    be = lenient_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("silent", [silent]) + pool_yaml("p", [be.port]) +
                   "routes:\n  - match: {path_prefix: /silent}\n    pool: silent\n"
                   "  - pool: p\n",
                   extra="timeouts:\n  first_byte_ms: 800\n  connect_ms: 60000\n")
    c = H2Client(px.port)
    slow = c.send("GET", "/silent")
    assert got.wait(10), "the request never reached its backend"
    answered = 0
    while slow not in c.status:
        sid = c.send("GET", f"/fast?{answered}")
        c.wait(lambda: sid in c.ended)
        assert c.status[sid] == 200, c.status[sid]
        answered += 1
    c.wait(lambda: slow in c.ended)
    assert c.status[slow] == 504, c.status[slow]
    sid = c.send("GET", "/fast/after")
    c.wait(lambda: sid in c.ended)
    assert c.status[sid] == 200, c.status[sid]
    c.close()
