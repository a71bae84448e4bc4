"""TLS on listeners (issue 12): real clients (Python's ssl, curl, openssl s_client) against a
listener with an ECDSA and an RSA certificate for one name and a second name chosen by SNI.
Certificates are made per test with the openssl command."""

import http.client
import os
import socket
import ssl
import subprocess
import time

from harness import (BIN, ScriptedBackend, echo_backend, free_port, pool_yaml, port_open,
                     read_all, wait_until)


def _cert(env, name, cn, kind="ec"):
    key, pem = os.path.join(env.dir, name + ".key"), os.path.join(env.dir, name + ".pem")
    alg = (["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"] if kind == "ec"
           else ["-newkey", "rsa:2048"])
    subprocess.run(["openssl", "req", "-x509", *alg, "-nodes", "-keyout", key, "-out", pem,
                    "-days", "2", "-subj", "/CN=" + cn,
                    "-addext", f"subjectAltName=DNS:{cn},IP:127.0.0.1"],
                   check=True, capture_output=True)
    return pem, key


def _tls_proxy(env, backend_port, tls_extra="", extra=""):
    """A proxy with a TLS listener (ECDSA + RSA for 'localhost', and 'other.test') and a
    plain one. Returns (proxy, tls_port, certs)."""
    ec, rsa, other = (_cert(env, "ec", "localhost"), _cert(env, "rsa", "localhost", "rsa"),
                      _cert(env, "other", "other.test"))
    tls_port, port = free_port(), free_port()
    text = (f"workers: 2\nlisten:\n"
            f"  - address: 127.0.0.1:{tls_port}\n"
            f"    tls:\n      cert: {ec[0]}\n      key: {ec[1]}\n"
            f"      certificates:\n"
            f"        - {{cert: {rsa[0]}, key: {rsa[1]}}}\n"
            f"        - {{cert: {other[0]}, key: {other[1]}}}\n" + tls_extra +
            f"  - address: 127.0.0.1:{port}\n" + extra +
            "pools:\n" + pool_yaml("p", [backend_port]))
    path = env.write("proxy.yaml", text)
    p = env.start([BIN, "proxy", "-c", path], "proxy", wait_port=tls_port)
    wait_until(lambda: port_open(port), "plain port")
    p.port = port
    return p, tls_port, {"ec": ec, "rsa": rsa, "other": other}


def _ctx(cafile, maxv=None, minv=None, ciphers=None):
    c = ssl.create_default_context(cafile=cafile)
    if maxv:
        c.maximum_version = maxv
    if minv:
        c.minimum_version = minv
    if ciphers:
        c.set_ciphers(ciphers)
    return c


def _get(port, ctx, host="localhost", path="/", headers=None):
    c = http.client.HTTPSConnection(host, port, context=ctx, timeout=10)
    if host != "localhost":
        # connect to 127.0.0.1 while naming <host> in SNI and Host
        c._create_connection = lambda addr, *a, **k: socket.create_connection(
            ("127.0.0.1", port), *a, **k)
    c.request("GET", path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    return c, r.status, body


def test_https_request_reaches_the_backend_as_https(env):
    be = echo_backend(env)
    p, tport, certs = _tls_proxy(env, be.port)
    c, st, body = _get(tport, _ctx(certs["ec"][0]), headers={"X-Forwarded-Proto": "http"})
    assert st == 200
    assert b"X-Forwarded-Proto: https\r\n" in body and b"Proto: http\r\n" not in body, body
    info = c.sock.version(), c.sock.selected_alpn_protocol()
    assert info[0] == "TLSv1.3", info
    # keep-alive over TLS: a second request on the same connection
    c.request("GET", "/again")
    r = c.getresponse()
    assert r.status == 200 and b"GET /again" in r.read()
    # the plain listener says http
    import http.client as hc
    pc = hc.HTTPConnection("127.0.0.1", p.port, timeout=10)
    pc.request("GET", "/")
    assert b"X-Forwarded-Proto: http\r\n" in pc.getresponse().read()


def test_certificate_by_key_type_and_sni(env):
    be = echo_backend(env)
    p, tport, certs = _tls_proxy(env, be.port)
    # TLS 1.2 with an RSA-only suite: the RSA certificate answers
    ctx = _ctx(certs["rsa"][0], maxv=ssl.TLSVersion.TLSv1_2, ciphers="ECDHE-RSA-AES128-GCM-SHA256")
    c, st, _ = _get(tport, ctx)
    assert st == 200 and c.sock.version() == "TLSv1.2"
    # an ECDSA-only suite: the ECDSA certificate
    ctx = _ctx(certs["ec"][0], maxv=ssl.TLSVersion.TLSv1_2,
               ciphers="ECDHE-ECDSA-AES128-GCM-SHA256")
    assert _get(tport, ctx)[1] == 200
    # SNI other.test: its own certificate (verification against its CA proves which)
    assert _get(tport, _ctx(certs["other"][0]), host="other.test")[1] == 200
    # an unknown name gets the default certificate (ECDSA for localhost)
    ctx = _ctx(certs["ec"][0])
    ctx.check_hostname = False
    assert _get(tport, ctx, host="unknown.test")[1] == 200


def test_old_protocols_and_weak_ciphers_are_refused(env):
    be = echo_backend(env)
    p, tport, certs = _tls_proxy(env, be.port)
    for flag in ("-tls1", "-tls1_1"):
        r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{tport}", flag],
                           input=b"", capture_output=True, timeout=15)
        assert b"Cipher is (NONE)" in r.stdout or r.returncode != 0, (flag, r.stdout[-400:])
    # TLS 1.2 without forward secrecy (RSA key exchange) or with CBC: no shared cipher
    for weak in ("AES128-GCM-SHA256", "ECDHE-RSA-AES128-SHA"):
        r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{tport}", "-tls1_2",
                            "-cipher", weak], input=b"", capture_output=True, timeout=15)
        assert b"Cipher is (NONE)" in r.stdout or r.returncode != 0, (weak, r.stdout[-400:])
    # the proxy is still there
    assert _get(tport, _ctx(certs["ec"][0]))[1] == 200


def test_session_resumption(env):
    be = echo_backend(env)
    p, tport, certs = _tls_proxy(env, be.port)
    for maxv in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        ctx = _ctx(certs["ec"][0], maxv=maxv)
        c, st, _ = _get(tport, ctx)
        assert st == 200
        session = c.sock.session
        c.close()
        # another connection, maybe on the other worker: the ticket works there too
        for _ in range(4):
            s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", tport), timeout=10),
                                server_hostname="localhost", session=session)
            s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            data = read_all(s)
            assert data.startswith(b"HTTP/1.1 200"), data[:80]
            assert s.session_reused, maxv
            s.close()


def test_resumed_connections_get_a_fresh_ticket(env):
    """TLS 1.3 clients use a ticket once (RFC 8446 C.4; OpenSSL's client marks a used session
    not resumable): each resumed connection must hand out a new ticket, or a client that
    always offers its latest session resumes only every other connection."""
    be = echo_backend(env)
    p, tport, certs = _tls_proxy(env, be.port)
    ctx = _ctx(certs["ec"][0], minv=ssl.TLSVersion.TLSv1_3)
    c, st, _ = _get(tport, ctx)
    assert st == 200
    session = c.sock.session
    c.close()
    for i in range(4):
        s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", tport), timeout=10),
                            server_hostname="localhost", session=session)
        s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        data = read_all(s)
        assert data.startswith(b"HTTP/1.1 200"), data[:80]
        assert s.session_reused, i
        assert s.session.id != session.id, f"connection {i} resumed but got no new ticket"
        session = s.session
        s.close()


def test_pipelined_requests_in_separate_records_are_all_answered(env):
    """The listener reads ahead (one read for a record's header and body, and whatever
    follows): requests whose records arrived together must all be answered, the later ones
    from what OpenSSL already holds, with no new readiness event to come."""
    be = echo_backend(env)
    p, tport, certs = _tls_proxy(env, be.port)
    ctx = _ctx(certs["ec"][0])
    for n in (2, 3, 8):
        s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", tport), timeout=10),
                            server_hostname="localhost")
        reqs = [f"GET /r{i} HTTP/1.1\r\nHost: localhost\r\n".encode() +
                (b"Connection: close\r\n" if i == n - 1 else b"") + b"\r\n"
                for i in range(n)]
        s.sendall(b"".join(reqs[:-1]))  # one record with all but the last request
        s.sendall(reqs[-1])               # and the last in a record of its own
        data = read_all(s)
        s.close()
        assert data.count(b"HTTP/1.1 200") == n, (n, data[:300])
        for i in range(n):
            assert f"/r{i}".encode() in data, (i, data[:300])


def test_garbage_and_plain_http_on_the_tls_port(env):
    be = echo_backend(env)
    p, tport, certs = _tls_proxy(env, be.port)
    hostile = [
        b"get / HTTP/1.1\r\nHost: x\r\n\r\n",                     # no method (lower case)
        b"\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00",              # a truncated ClientHello
        b"\x16\x03\x01\xff\xff" + b"\x01" * 200,                  # a length past the data
        b"\x16\x03\x03\x00\x30" + os.urandom(48),                 # random handshake bytes
        b"\x80\x80\x01\x03\x01" + os.urandom(64),                 # an SSLv2 hello
    ]
    for data in hostile:
        s = socket.create_connection(("127.0.0.1", tport), timeout=10)
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            got = read_all(s)
        except OSError:  # refused at once (an oversized hello): reset, never answered
            got = b""
        assert not got.startswith(b"HTTP/"), got[:40]  # TLS alerts at most, never HTTP
        s.close()
    # plain HTTP is told so (test_plain_http_on_the_tls_port_is_answered_400_in_plain_text)
    assert _get(tport, _ctx(certs["ec"][0]))[1] == 200
    assert p.poll() is None
    # a ClientHello that declares 1 MiB is refused before anything of it is buffered
    s = socket.create_connection(("127.0.0.1", tport), timeout=10)
    s.sendall(b"\x16\x03\x01\x40\x00\x01\x10\x00\x00" + b"\x00" * 4000)
    assert read_all(s) == b""  # closed without a word (no alert, no HTTP)
    assert _get(tport, _ctx(certs["ec"][0]))[1] == 200


def test_stalled_handshakes_time_out_and_block_nobody(env):
    be = echo_backend(env)
    p, tport, certs = _tls_proxy(env, be.port, extra="timeouts: {header_ms: 1000}\n")
    idle = [socket.create_connection(("127.0.0.1", tport), timeout=10) for _ in range(20)]
    half = socket.create_connection(("127.0.0.1", tport), timeout=10)
    half.sendall(b"\x16\x03\x01\x00\xc8\x01")  # the start of a ClientHello, then nothing
    # meanwhile full handshakes go through at once
    for _ in range(5):
        assert _get(tport, _ctx(certs["ec"][0]))[1] == 200
    # and the stalled ones are closed once header_ms has passed
    for s in idle + [half]:
        s.settimeout(10)
        assert read_all(s) == b""  # closed by the proxy, well inside the 10 s timeout
        s.close()
    assert p.poll() is None


def test_sse_stream_over_tls(env):
    sim = env.sim("s", latency_ms=0, token_ms=5, tokens=20, jitter=0)
    p, tport, certs = _tls_proxy(env, sim.port)
    c = http.client.HTTPSConnection("localhost", tport, context=_ctx(certs["ec"][0]), timeout=10)
    c.request("POST", "/v1/completions", body=b'{"prompt":"hi","stream":true}',
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200 and r.getheader("Content-Type").startswith("text/event-stream")
    events = [ln for ln in r.read().split(b"\n") if ln.startswith(b"data: ")]
    assert len(events) == 21 and events[-1] == b"data: [DONE]", events[-2:]


def test_bad_tls_config_is_refused_with_its_place(env):
    be_port = free_port()
    pem, key = _cert(env, "a", "localhost")
    other_pem, _ = _cert(env, "b", "localhost")
    cases = [
        ([f"cert: {pem}", f"key: {env.dir}/missing.key"], "cannot load the TLS key"),
        ([f"cert: {pem}", f"key: {key}", "min_version: \"1.1\""], "min_version"),
        ([f"cert: {other_pem}", f"key: {key}"], "does not match"),
        ([f"cert: {pem}", f"key: {key}", "ciphers: NOPE"], "ciphers"),
        ([f"cert: {pem}"], "go together"),
        ([f"cert: {pem}", f"key: {key}", f"client_ca: {key}"], "cannot load client_ca"),
        ([f"cert: {pem}", f"key: {key}", "client_auth: optional"], "need client_ca"),
        ([f"cert: {pem}", f"key: {key}", f"client_ca: {pem}", f"client_crl: {pem}"],
         "client_crl: no CRL"),
        ([f"cert: {pem}", f"key: {key}", f"client_ca: {pem}", "verify_depth: 11"],
         ":7:21: 11 is out of range"),
    ]
    for lines, want in cases:
        tls = "\n".join("      " + ln for ln in lines)
        path = env.write("bad.yaml", f"listen:\n  - address: 127.0.0.1:1\n    tls:\n{tls}\n"
                         "pools:\n" + pool_yaml("p", [be_port]))
        r = subprocess.run([BIN, "check", "-c", path], capture_output=True, text=True)
        assert r.returncode == 2, (lines, r.stdout, r.stderr)
        msg = r.stdout + r.stderr
        assert want in msg and f"{path}:" in msg, (want, msg)


def test_large_bodies_over_tls_arrive_whole(env):
    """A response much larger than one TLS record streams at once (a short TLS write must mean
    a full socket, or an edge-triggered loop waits forever), and so does a large upload."""
    body = os.urandom(3 << 20)

    def script(n, req):
        return (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body, False)
    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    p, tport, certs = _tls_proxy(env, be.port, extra="timeouts: {between_bytes_ms: 60000}\n")
    c = http.client.HTTPSConnection("localhost", tport, context=_ctx(certs["ec"][0]), timeout=20)
    c.request("GET", "/big")  # a stall would outlast the client's 20 s timeout
    r = c.getresponse()
    got = r.read()
    assert r.status == 200 and got == body, (r.status, len(got))
    # an upload larger than a record, echoed in size by a sim
    sim = env.sim("s", latency_ms=0, token_ms=0, tokens=1)
    p2, tport2, certs2 = _tls_proxy(env, sim.port)
    c2 = http.client.HTTPSConnection("localhost", tport2, context=_ctx(certs2["ec"][0]),
                                     timeout=20)
    c2.request("POST", "/up", body=os.urandom(1 << 20))
    r2 = c2.getresponse()
    assert r2.status == 200 and b"(1048576 body bytes)" in r2.read()


def _plain_answer(port, data, after=None):
    """Send <data> in plain text to the TLS port (then <after>, once the answer began), read
    until the proxy closes: (status line, headers dict, body)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    with s:
        s.sendall(data)
        got = s.recv(65536)
        if after:
            try:
                s.sendall(after)
            except OSError:
                pass
        got = read_all(s, got)
    head, _, body = got.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    h = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        h.setdefault(k.strip().lower(), []).append(v.strip())
    return lines[0], h, body


def test_plain_http_on_the_tls_port_is_answered_400_in_plain_text(env):
    """Plain HTTP sent to a TLS listener (issue 26): 400 in plain text saying so, as nginx
    does, then the connection is closed; nothing reaches the backend; TLS clients and the
    plain listener are served as before. The answer does not wait for the whole request (a
    first byte that begins a method is enough), does not depend on what follows, and stays
    plain text even where every route is api: openai."""
    be = echo_backend(env)
    p, tport, certs = _tls_proxy(env, be.port,
                                 extra="routes:\n  - {match: {path_prefix: /}, pool: p, "
                                       "api: openai}\n")
    for data, after in ((b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", None),
                        (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5"
                         b"\r\n\r\nhello", None),
                        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\n\r\n", None),
                        (b"G", b"ET / HTTP/1.1\r\nHost: x\r\n\r\n")):
        line, h, body = _plain_answer(tport, data, after)
        assert line == "HTTP/1.1 400 Bad Request", (data, line)
        assert h["content-type"] == ["text/plain"] and h["connection"] == ["close"], h
        assert b"plain HTTP request was sent to an HTTPS port" in body, body
        assert len(body) == int(h["content-length"][0]), (h, body)
    assert be.count == 0
    c, st, _ = _get(tport, _ctx(certs["ec"][0]))
    assert st == 200 and be.count == 1
    c.close()
    assert http_get_plain(p.port) == 200
    assert p.poll() is None


def http_get_plain(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", "/")
        return c.getresponse().status
    finally:
        c.close()
