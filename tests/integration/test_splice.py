"""Response bodies relayed by splice(2) (issue 25, tune.splice): a Content-Length body that no
feature reads goes from the backend's socket to the client's through a pipe, never through
the proxy's buffers; accelnet_spliced_bytes_total counts those bytes. A body some feature
reads (the cache's fill, the token tally of an OpenAI route), or one with TLS on either side,
is copied as before. Each test checks what the client gets (sha256 of the body) and what
the metric says moved by splice.

The proxies run on the event loop the pass asks for (ACCELNET_IO); on io_uring, where plain
connections receive and send through the ring, a spliced body takes the backend's connection
off the ring's receives while it is relayed, and the cases below on io_uring (whatever the
pass) check that the body is spliced, whole, and that both connections carry the next
requests."""

import hashlib
import http.client
import json
import os
import random
import socket
import time

from harness import (BIN, ScriptedBackend, Skip, free_port, prom_samples, metrics_text,
                     pool_yaml, read_all, read_until, request, rss_kib, wait_until)

MiB = 1 << 20
_bodies = {}
URING = {"ACCELNET_IO": "auto"}


def _on_io_uring(px):
    """Skip unless <px> runs on io_uring (auto falls back to epoll where the kernel refuses)."""
    samples = prom_samples(metrics_text(px.admin))
    if samples.get(("accelnet_event_loop", (("backend", "io_uring"),))) != 1:
        raise Skip("this kernel refuses io_uring")


def _body(size):
    """<size> bytes that do not compress or repeat (the same bytes for the same size)."""
    if size not in _bodies:
        _bodies[size] = random.Random(size).randbytes(size)
    return _bodies[size]


def _sized_backend(env, cut_at=None, extra_head=b""):
    """A backend answering GET /N with N bytes of _body(N), framed by Content-Length (with
    <cut_at>: it sends that many and closes)."""
    def script(n, req):
        target = req.split(b" ", 2)[1].decode()
        size = int(target.rsplit("/", 1)[1] or 0)
        body = _body(size)
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n" % (size, extra_head)
        if cut_at is not None:
            return head + body[:cut_at], True
        return head + body, False
    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    return be


def _spliced(px):
    return prom_samples(metrics_text(px.admin)).get(("accelnet_spliced_bytes_total", ()), 0)


def _wait_stalled(px):
    """Until accelnet_spliced_bytes_total, above 0, holds still for 0.2 s: a client that does
    not read has stopped the relay."""
    last = [-1]

    def stalled():
        now = _spliced(px)
        same = now == last[0] and now > 0
        last[0] = now
        return same
    wait_until(lambda: time.sleep(0.2) or stalled(), "the relay to stall")


def _small_window(port, rcvbuf=64 * 1024, timeout=60):
    """A client connection with a small receive buffer, set before it connects (set after,
    the window already offered is larger than the buffer and the kernel prunes)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    return s


def _get(port, size, timeout=60):
    """GET /<size> through the proxy: the body (status 200 asserted)."""
    st, hdrs, data = request(port, "GET", f"/{size}", timeout=timeout)
    assert st == 200, (st, data[:200])
    return data


def _intact(data, size):
    assert len(data) == size, (len(data), size)
    assert hashlib.sha256(data).digest() == hashlib.sha256(_body(size)).digest()


# what a spliced body still copies: the bytes read with the head (one buffer at most:
# limits.max_header_bytes + 1 KiB)
COPIED_MAX = 33 * 1024 + 1024


def test_splice_carries_large_bodies_intact(env):
    be = _sized_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]), workers=1)
    _intact(_get(px.port, 1024), 1024)  # short: copied
    _intact(_get(px.port, 256 * 1024), 256 * 1024)  # below SPLICE_MIN_BYTES: copied
    assert _spliced(px) == 0
    _intact(_get(px.port, MiB), MiB)
    one = _spliced(px)
    assert MiB - COPIED_MAX <= one <= MiB, one
    _intact(_get(px.port, 100 * MiB, timeout=120), 100 * MiB)
    hundred = _spliced(px) - one
    assert 100 * MiB - COPIED_MAX <= hundred <= 100 * MiB, hundred


def _get_each(port, sizes):
    """GET /SIZE for each of <sizes> in turn on one kept-alive client connection, each body
    checked whole."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        for size in sizes:
            c.request("GET", f"/{size}")
            r = c.getresponse()
            assert r.status == 200
            _intact(r.read(), size)
    finally:
        c.close()


def test_splice_on_io_uring(env):
    """On io_uring a body large enough is spliced too, and both connections go back to the
    ring for the small requests after it (one client connection, one backend connection)."""
    be = _sized_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]), workers=1, environ=URING)
    _on_io_uring(px)
    _get_each(px.port, (100, MiB, 100, 2000, 8 * MiB, 100))
    assert _spliced(px) >= 9 * MiB - 2 * COPIED_MAX, _spliced(px)
    assert be.count == 6 and be.connections == 1, (be.count, be.connections)


def test_splice_on_io_uring_bytes_past_the_body_never_answer_the_next_request(env):
    """As the case below on epoll, with the extra response sent with the body: on io_uring the
    bytes the ring held when the splice began go into the pipe first, no further than the
    body's end."""
    def script(n, req):
        size = int(req.split(b" ", 2)[1].decode().rsplit("/", 1)[1])
        out = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (size, _body(size))
        if n == 1:
            out += b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nEVIL!"
        return out, False
    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]), workers=1, environ=URING)
    _on_io_uring(px)
    _intact(_get(px.port, MiB), MiB)
    for _ in range(3):
        _intact(_get(px.port, 100), 100)
    assert _spliced(px) > 0
    assert be.connections == 2, be.connections  # the first one was closed, not reused


def test_splice_access_log_counts_spliced_bytes(env):
    be = _sized_backend(env)
    log = os.path.join(env.dir, "access.log")
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]), workers=1,
                   extra=f"access_log: {{path: {log}}}\n")
    _intact(_get(px.port, 3 * MiB), 3 * MiB)
    assert _spliced(px) > 2 * MiB

    def line():
        try:
            with open(log) as f:
                lines = [json.loads(x) for x in f if x.strip()]
        except FileNotFoundError:
            return None
        return lines[-1] if lines else None
    wait_until(lambda: line() is not None, "the access log line")
    rec = line()
    assert rec["status"] == 200 and rec["bytes_out"] == 3 * MiB, rec


def test_splice_keep_alive_reuse_after_a_spliced_body(env):
    be = _sized_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]), workers=1)
    _get_each(px.port, (MiB, 2 * MiB, 100, MiB))
    assert _spliced(px) > 2 * MiB
    # one client connection carried all four, and one backend connection too
    assert be.count == 4 and be.connections == 1, (be.count, be.connections)


def test_splice_off_copies(env):
    be = _sized_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]), workers=1,
                   extra="tune: {splice: false}\n")
    _intact(_get(px.port, MiB), MiB)
    assert _spliced(px) == 0


def test_splice_not_when_the_cache_fills(env):
    be = _sized_backend(env, extra_head=b"Cache-Control: max-age=60\r\n")
    px = env.proxy("cache: {max_object: 4MiB}\npools:\n" + pool_yaml("p", [be.port])
                   + "routes:\n  - {match: {path_prefix: /}, pool: p, cache: true}\n",
                   workers=1)
    _intact(_get(px.port, MiB), MiB)  # filled: every byte went through the fill
    assert _spliced(px) == 0
    st, hdrs, data = request(px.port, "GET", f"/{MiB}")  # from the cache
    assert st == 200 and "hit" in hdrs.get("cache-status", [""])[0], hdrs
    _intact(data, MiB)
    assert be.count == 1 and _spliced(px) == 0


def test_splice_not_on_a_tallied_openai_route(env):
    be = _sized_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port])
                   + "routes:\n  - {match: {path_prefix: /}, pool: p, api: openai}\n",
                   workers=1)
    _intact(_get(px.port, MiB), MiB)
    assert _spliced(px) == 0


def test_splice_not_on_a_tls_listener(env):
    import ssl
    import subprocess
    key, pem = os.path.join(env.dir, "l.key"), os.path.join(env.dir, "l.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", pem, "-days",
                    "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    be = _sized_backend(env)
    tport, port, admin = free_port(), free_port(), free_port()
    path = env.write("proxy.yaml", f"workers: 1\nlisten:\n  - address: 127.0.0.1:{port}\n"
                     f"  - address: 127.0.0.1:{tport}\n    tls: {{cert: {pem}, key: {key}}}\n"
                     f"admin:\n  address: 127.0.0.1:{admin}\npools:\n"
                     + pool_yaml("p", [be.port]))
    px = env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port)
    px.port, px.admin = port, admin
    wait_until(lambda: _port_up(tport) and _port_up(admin), "the TLS listener")
    ctx = ssl.create_default_context(cafile=pem)
    c = http.client.HTTPSConnection("127.0.0.1", tport, context=ctx, timeout=60)
    try:
        c.request("GET", f"/{MiB}")
        r = c.getresponse()
        assert r.status == 200
        _intact(r.read(), MiB)
    finally:
        c.close()
    assert _spliced(px) == 0
    _intact(_get(px.port, MiB), MiB)  # the plain listener beside it splices
    assert _spliced(px) > MiB - COPIED_MAX


def _port_up(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def test_splice_not_with_tls_to_the_backend(env):
    from test_upstream_tls import _CA, _nginx_tls
    ca = _CA(env, "splice")
    ng = _nginx_tls(env, ca.issue("srv", "localhost", "DNS:localhost"))
    with open(os.path.join(ng.root, "big"), "wb") as f:
        f.write(_body(MiB))
    px = env.proxy("pools:\n  - name: secure\n    backends:\n"
                   f"      - {{address: localhost:{ng.port}}}\n    tls: {{ca: {ca.pem}}}\n",
                   workers=1)
    st, _, data = request(px.port, "GET", "/big", timeout=60)
    assert st == 200
    _intact(data, MiB)
    assert _spliced(px) == 0


def test_splice_backend_closing_mid_body_cuts_the_client(env):
    be = _sized_backend(env, cut_at=300 * 1024)
    ok = _sized_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]) + pool_yaml("ok", [ok.port])
                   + "routes:\n  - {match: {path_prefix: /ok/}, pool: ok}\n"
                   "  - {match: {path_prefix: /}, pool: p}\n", workers=1)
    with socket.create_connection(("127.0.0.1", px.port), timeout=30) as s:
        s.sendall(b"GET /%d HTTP/1.1\r\nHost: x\r\n\r\n" % MiB)
        got = read_all(s)  # the proxy closes: no hang
    head, _, body = got.partition(b"\r\n\r\n")
    assert b" 200 " in head and b"Content-Length: %d" % MiB in head, head
    assert len(body) == 300 * 1024 and body == _body(MiB)[:300 * 1024], len(body)
    assert _spliced(px) > 0
    # the proxy carries on: another backend's body through the same worker, whole
    _intact(_get(px.port, f"ok/{MiB}"), MiB)
    assert ok.count == 1


def test_splice_slow_reader_gets_it_all_and_memory_stays_bounded(env):
    be = _sized_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]), workers=1)
    _intact(_get(px.port, MiB), MiB)  # warm: buffers and a pipe made
    rss0 = rss_kib(px.pid)
    size = 64 * MiB
    with _small_window(px.port, 64 * 1024, timeout=60) as s:
        s.sendall(b"GET /%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % size)
        # the client reads nothing: the backend's bytes fill the sockets and the pipe, then
        # stop (the proxy reads no more while the pipe is full)
        _wait_stalled(px)
        grew = rss_kib(px.pid) - rss0
        assert grew < 8 * 1024, f"proxy RSS grew {grew} KiB while the client did not read"
        assert _spliced(px) < 16 * MiB  # nowhere near the body: held back, not read ahead
        data = read_all(s)
    head, _, body = data.partition(b"\r\n\r\n")
    assert b" 200 " in head, head
    _intact(body, size)


def test_splice_between_bytes_timeout_still_applies(env):
    def script(n, req):
        return (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % MiB
                + _body(MiB)[:200 * 1024], False)  # then silence, the connection open
    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]), workers=1,
                   extra="timeouts: {between_bytes_ms: 500}\n")
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", px.port), timeout=30) as s:
        s.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
        got = read_all(s)
    assert time.monotonic() - t0 < 20
    head, _, body = got.partition(b"\r\n\r\n")
    assert b" 200 " in head and len(body) == 200 * 1024, (head, len(body))
    assert _spliced(px) > 0


def test_splice_backend_bytes_past_the_body_never_answer_the_next_request(env):
    """A backend that sends a second response after the spliced body, unasked (response
    smuggling): the proxy reads exactly Content-Length by splice, so those bytes stay in the
    socket; the connection must not go back to the idle list with them, where they would
    answer the next client's request."""
    def script(n, req):
        target = req.split(b" ", 2)[1].decode()
        size = int(target.rsplit("/", 1)[1])
        out = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (size, _body(size))
        if n == 1:
            out += b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nEVIL!"
        return out, False
    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]), workers=1)
    size = 4 * MiB
    # a client that reads late: the backend's bytes, the extra response too, wait in the
    # proxy's socket before it reads the body's last ones
    with _small_window(px.port, timeout=30) as s:
        s.sendall(b"GET /%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % size)
        _wait_stalled(px)
        head, _, body = read_all(s).partition(b"\r\n\r\n")
    assert b" 200 " in head
    _intact(body, size)
    for _ in range(3):
        _intact(_get(px.port, 100), 100)
    assert be.connections == 2, be.connections  # the first one was closed, not reused


def test_splice_head_request_has_no_body(env):
    def script(n, req):
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % MiB
        return (head if req.startswith(b"HEAD ") else head + _body(MiB)), False
    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]), workers=1)
    c = http.client.HTTPConnection("127.0.0.1", px.port, timeout=30)
    try:
        for method in ("HEAD", "GET", "HEAD"):
            c.request(method, "/x")
            r = c.getresponse()
            data = r.read()
            assert r.status == 200 and r.getheader("Content-Length") == str(MiB)
            assert data == (b"" if method == "HEAD" else _body(MiB)), (method, len(data))
    finally:
        c.close()


def test_splice_client_leaving_mid_body_leaks_no_pipe(env):
    """Clients that read the head and go: each exchange is cut, its pipe (bytes still in it)
    closed, and the proxy's descriptors come back to what they were."""
    be = _sized_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]), workers=1)
    _intact(_get(px.port, MiB), MiB)  # warm: one spare pipe kept

    def fds():
        return len(os.listdir(f"/proc/{px.pid}/fd"))
    before = fds()
    for _ in range(20):
        with _small_window(px.port, 16 * 1024, timeout=30) as s:
            s.sendall(b"GET /%d HTTP/1.1\r\nHost: x\r\n\r\n" % (8 * MiB))
            read_until(s, lambda got: b"\r\n\r\n" in got)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    wait_until(lambda: fds() <= before, f"the proxy's descriptors back to {before}")
    _intact(_get(px.port, MiB), MiB)
    assert _spliced(px) > 2 * MiB


def test_splice_seventy_slow_clients_at_once(env):
    """70 clients on one worker ask for 1 MiB each and read nothing until every request has
    reached the backend: each gets its body whole. (The kernel's send buffers take most of
    a body, so exchanges end and give their pipes back before the worker's 64
    (SPLICE_PIPES_MAX) are all lent: the cap itself is tests/unit/test_net_splice.c's.)"""
    be = _sized_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]), workers=1)
    socks = []
    try:
        for _ in range(70):
            s = _small_window(px.port, 16 * 1024)
            s.sendall(b"GET /%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % MiB)
            socks.append(s)
        wait_until(lambda: be.count == 70, "70 requests at the backend")
        _wait_stalled(px)
        for s in socks:
            head, _, body = read_all(s).partition(b"\r\n\r\n")
            assert b" 200 " in head, head
            _intact(body, MiB)
    finally:
        for s in socks:
            s.close()
    assert _spliced(px) >= 64 * (MiB - COPIED_MAX)
