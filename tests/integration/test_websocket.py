"""WebSocket tunnelling (issue 25, routes.websocket): a real client library (Python
websockets) through the proxy to a real websockets server started here as the backend."""

import asyncio
import base64
import hashlib
import json
import os
import re
import resource
import signal
import socket
import ssl
import subprocess
import threading

import websockets

from harness import rss_kib
from harness import (BIN, ScriptedBackend, Skip, free_port, metrics_text, pool_yaml, prom_samples,
                     raw, read_all, read_until, wait_until)

KEYS = "acme sk-acme-0123456789abcdef\n"


class WsBackend:
    """A websockets server in a thread of its own: echoes every message, and counts the
    bytes (and their hash) it received. .handshakes: opening handshakes it accepted."""

    def __init__(self):
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.handshakes = 0
        self.received = 0
        self.digest = hashlib.sha256()
        self.open = 0
        ready = threading.Event()

        async def handler(ws, path=None):
            self.handshakes += 1
            self.open += 1
            try:
                async for msg in ws:
                    data = msg.encode() if isinstance(msg, str) else msg
                    self.received += len(data)
                    self.digest.update(data)
                    await ws.send(msg)
            except websockets.ConnectionClosed:
                pass
            finally:
                self.open -= 1

        async def main():
            self.server = await websockets.serve(handler, "127.0.0.1", self.port,
                                                 max_size=None, ping_interval=None,
                                                 max_queue=None)
            ready.set()

        self.thread = threading.Thread(target=lambda: (self.loop.run_until_complete(main()),
                                                       self.loop.run_forever()), daemon=True)
        self.thread.start()
        ready.wait(10)

    def close(self):
        async def stop():
            self.server.close()
            await self.server.wait_closed()
        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def _backend(env):
    be = WsBackend()
    env.on_cleanup.append(be.close)
    return be


def _proxy(env, be, route_extra="    websocket: true\n", extra="", workers=2):
    return env.proxy("pools:\n" + pool_yaml("p", [be.port]) +
                     "routes:\n  - pool: p\n" + route_extra, extra=extra, workers=workers)


def _connect(port, path="/ws", **kw):
    kw.setdefault("ping_interval", None)
    kw.setdefault("max_size", None)
    kw.setdefault("compression", None)  # the bytes counted are the bytes sent
    return websockets.connect(f"ws://127.0.0.1:{port}{path}", **kw)


def _samples(px):
    return prom_samples(metrics_text(px.admin))


def _metric(px, name, **labels):
    return _samples(px).get((name, tuple(sorted(labels.items()))), 0)


WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def ws_accept(head):
    """A backend's 101 accepting the WebSocket handshake <head> (RFC 6455 4.2.2)."""
    key = re.search(rb"(?i)sec-websocket-key: *(\S+)", head).group(1)
    return (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: " + base64.b64encode(hashlib.sha1(key + WS_GUID).digest()) +
            b"\r\n\r\n")


async def _closed_by_the_proxy(ws, secs, what):
    """Wait up to <secs> for the proxy to close tunnel <ws>; a message meanwhile is <what>."""
    try:
        await asyncio.wait_for(ws.recv(), secs)
        raise AssertionError(what)
    except websockets.ConnectionClosed:
        pass


def test_websocket_echo_through_the_proxy(env):
    be = _backend(env)
    px = _proxy(env, be, extra="access_log: {path: %s}\n" % os.path.join(env.dir, "access.log"))

    async def run():
        async with _connect(px.port) as ws:
            assert ws.response_headers.get("X-Request-Id")
            for text in ("hello", "ünïcode", "x" * 70000):
                await ws.send(text)
                assert await ws.recv() == text
            await ws.send(b"\x00\xffbinary")
            assert await ws.recv() == b"\x00\xffbinary"
            assert _metric(px, "accelnet_tunnels_open") == 1
    asyncio.run(run())
    assert be.handshakes == 1
    wait_until(lambda: _metric(px, "accelnet_tunnels_closed_total", reason="closed") == 1,
               "the tunnel counted closed")
    assert _metric(px, "accelnet_tunnels_open") == 0
    assert _metric(px, "accelnet_route_requests_total", route="0", **{"class": "1xx"}) == 1
    to_be = _metric(px, "accelnet_tunnel_bytes_total", direction="to_backend")
    to_cl = _metric(px, "accelnet_tunnel_bytes_total", direction="to_client")
    assert to_be > 70000 and to_cl > 70000, (to_be, to_cl)
    # one access log line when the tunnel ended: status 101 and its bytes
    log = os.path.join(env.dir, "access.log")
    wait_until(lambda: os.path.exists(log) and b'"status":101' in open(log, "rb").read(),
               "the tunnel's access log line")
    line = [ln for ln in open(log, "rb").read().splitlines() if b'"status":101' in ln][0]
    rec = json.loads(line)
    assert rec["bytes_out"] > 70000 and rec["bytes_in"] > 70000, rec


def test_websocket_100mb_each_way_intact(env):
    be = _backend(env)
    px = _proxy(env, be)
    chunk, total = 1 << 20, 100
    sent, got = hashlib.sha256(), hashlib.sha256()

    async def run():
        async with _connect(px.port, max_queue=None) as ws:
            async def send():
                for i in range(total):
                    block = hashlib.sha256(str(i).encode()).digest() * (chunk // 32)
                    sent.update(block)
                    await ws.send(block)

            async def recv():
                n = 0
                while n < total * chunk:
                    msg = await ws.recv()
                    got.update(msg)
                    n += len(msg)
            await asyncio.gather(send(), recv())
    asyncio.run(run())
    assert be.received == total * chunk
    assert be.digest.hexdigest() == sent.hexdigest(), "client -> backend corrupted"
    assert got.hexdigest() == sent.hexdigest(), "backend -> client corrupted"


def test_a_thousand_idle_tunnels(env):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 8192:
        raise Skip(f"RLIMIT_NOFILE hard limit {hard}: 1,000 tunnels need about 4,000")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    env.on_cleanup.append(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)))
    be = _backend(env)
    px = _proxy(env, be)
    n = 1000

    async def run():
        # warm: one tunnel opened and closed, so the worker's first buffers are counted
        async with _connect(px.port) as ws:
            await ws.send("warm")
            await ws.recv()
        before = rss_kib(px.pid)
        conns = []
        for i in range(0, n, 50):
            conns += await asyncio.gather(*(_connect(px.port) for _ in range(50)))
        for ws in conns[::97]:  # each one works
            await ws.send("ping")
            assert await ws.recv() == "ping"
        s = _samples(px)
        after = rss_kib(px.pid)
        assert s[("accelnet_tunnels_open", ())] == n
        buffers = s[("accelnet_buffer_bytes", ())]
        await asyncio.gather(*(ws.close() for ws in conns))
        return before, after, buffers
    before, after, buffers = asyncio.run(run())
    per = (after - before) * 1024 / n
    print(f"1,000 idle tunnels: RSS {before} KiB -> {after} KiB, {per:.0f} bytes per tunnel; "
          f"buffers lent {buffers:.0f} bytes")
    # an idle tunnel holds no connection buffer (each is max_header_bytes + 1 KiB = 33 KiB):
    # what it costs is its records and descriptors, well under one buffer
    assert buffers < 16 * 33 * 1024, buffers
    assert per < 16 * 1024, per
    wait_until(lambda: _metric(px, "accelnet_tunnels_open") == 0, "every tunnel closed")


def test_drain_on_reload_keeps_tunnels_until_tunnel_drain_ms(env):
    be = _backend(env)
    px = _proxy(env, be, extra="timeouts: {tunnel_drain_ms: 3000}\n")
    path = os.path.join(env.dir, "proxy.yaml")

    async def run():
        async with _connect(px.port) as ws:
            await ws.send("before")
            assert await ws.recv() == "before"
            os.utime(path)
            px.send_signal(signal.SIGHUP)
            wait_until(lambda: "accelnet_config_generation 1" in metrics_text(px.admin),
                       "the reload")
            # the old generation drains: its tunnel still carries messages ...
            await ws.send("during")
            assert await ws.recv() == "during"
            # ... and a new tunnel opens on the new generation
            async with _connect(px.port) as ws2:
                await ws2.send("new")
                assert await ws2.recv() == "new"
            # ... until tunnel_drain_ms, when the proxy closes it
            loop = asyncio.get_running_loop()
            start = loop.time()
            await _closed_by_the_proxy(ws, 20, "a message came on a drained tunnel")
            return loop.time() - start
    waited = asyncio.run(run())
    assert waited < 15, waited
    # the old generation's last connection ended: it is released
    wait_until(lambda: "its last request has ended" in env.log(px), "generation 0 released")


def test_handshake_passes_auth_and_rate_limits(env):
    be = _backend(env)
    keys = env.write("keys.txt", KEYS)
    px = _proxy(env, be, route_extra=(f"    websocket: true\n"
                                      f"    auth: {{api_keys_file: {keys}}}\n"
                                      "    rate_limit: {per_tenant: 1/m, burst: 2}\n"))

    async def status_of(**kw):
        try:
            async with _connect(px.port, **kw) as ws:
                await ws.send("hi")
                assert await ws.recv() == "hi"
                return 101
        except websockets.InvalidStatusCode as e:
            return e.status_code
    assert asyncio.run(status_of()) == 401
    assert be.handshakes == 0
    key = {"extra_headers": {"Authorization": "Bearer sk-acme-0123456789abcdef"}}
    got = [asyncio.run(status_of(**key)) for _ in range(4)]
    assert got[0] == 101 and 429 in got, got
    assert be.handshakes == got.count(101)


def test_route_without_websocket_forwards_a_plain_get(env):
    be = _backend(env)
    px = _proxy(env, be, route_extra="")

    async def run():
        try:
            async with _connect(px.port):
                raise AssertionError("a tunnel on a route without websocket: true")
        except websockets.InvalidStatusCode as e:
            return e.status_code
    # the backend saw no Upgrade (dropped as hop-by-hop) and said it needs one
    assert asyncio.run(run()) == 426
    assert be.handshakes == 0


def test_a_101_the_client_did_not_ask_for_is_a_502(env):
    hostile = ScriptedBackend(lambda n, req: (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"\r\nsmuggled bytes", True))
    env.on_cleanup.append(hostile.close)
    px = env.proxy("pools:\n" + pool_yaml("p", [hostile.port]) +
                   "routes:\n  - pool: p\n    websocket: true\n")
    out = raw(px.port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 502") and b"smuggled" not in out, out
    # a handshake answered 101 for another protocol: not a tunnel either
    other = ScriptedBackend(lambda n, req: (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
        True))
    env.on_cleanup.append(other.close)
    px2 = env.proxy("pools:\n" + pool_yaml("p", [other.port]) +
                    "routes:\n  - pool: p\n    websocket: true\n")
    out = raw(px2.port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, close\r\n"
              b"Upgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
              b"Sec-WebSocket-Version: 13\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 502"), out


def test_a_wrong_accept_is_passed_for_the_client_to_judge(env):
    wrong = ScriptedBackend(lambda n, req: (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: bm90IHRoZSByaWdodCBvbmU=\r\n\r\n", False))
    env.on_cleanup.append(wrong.close)
    px = env.proxy("pools:\n" + pool_yaml("p", [wrong.port]) +
                   "routes:\n  - pool: p\n    websocket: true\n")

    async def run():
        try:
            async with _connect(px.port):
                raise AssertionError("the client took a wrong Sec-WebSocket-Accept")
        except websockets.InvalidHeaderValue as e:
            return str(e)
    assert "Sec-WebSocket-Accept" in asyncio.run(run())


def test_idle_timeout_closes_a_silent_tunnel(env):
    be = _backend(env)
    px = _proxy(env, be, extra="timeouts: {tunnel_idle_ms: 500}\n")

    async def run():
        async with _connect(px.port) as ws:
            await ws.send("once")
            assert await ws.recv() == "once"
            await _closed_by_the_proxy(ws, 20, "a message on a silent tunnel")
    asyncio.run(run())
    wait_until(lambda: _metric(px, "accelnet_tunnels_closed_total", reason="idle") == 1,
               "the idle close counted")
    assert _metric(px, "accelnet_tunnels_open") == 0


def test_max_tunnels_answers_503(env):
    be = _backend(env)
    px = _proxy(env, be, extra="limits: {max_tunnels: 2}\n")

    async def run():
        a = await _connect(px.port)
        b = await _connect(px.port)
        try:
            await _connect(px.port)
            raise AssertionError("a third tunnel past limits.max_tunnels: 2")
        except websockets.InvalidStatusCode as e:
            assert e.status_code == 503
        await a.close()
        wait_until(lambda: _metric(px, "accelnet_tunnels_open") == 1, "one tunnel closed")
        c = await _connect(px.port)
        await c.send("room again")
        assert await c.recv() == "room again"
        await b.close()
        await c.close()
    asyncio.run(run())


def test_websocket_over_a_tls_listener(env):
    be = _backend(env)
    key, pem = os.path.join(env.dir, "k.key"), os.path.join(env.dir, "c.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", pem, "-days",
                    "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    port = free_port()
    text = (f"workers: 2\nlisten:\n  - address: 127.0.0.1:{port}\n"
            f"    tls: {{cert: {pem}, key: {key}}}\n"
            "pools:\n" + pool_yaml("p", [be.port]) + "routes:\n  - pool: p\n    websocket: true\n")
    env.start([BIN, "proxy", "-c", env.write("tls.yaml", text)], "proxy", wait_port=port)
    ctx = ssl.create_default_context(cafile=pem)

    async def run():
        async with websockets.connect(f"wss://127.0.0.1:{port}/ws", ssl=ctx,
                                      ping_interval=None, max_size=None) as ws:
            for i in range(20):
                msg = os.urandom(1 << 16)
                await ws.send(msg)
                assert await ws.recv() == msg
    asyncio.run(run())
    assert be.handshakes == 1


class RawWsBackend:
    """A backend that accepts one WebSocket handshake by hand (a right Sec-WebSocket-Accept)
    and then runs <after>(sock) on the raw connection: for what a library hides (half-close,
    a peer that does not read)."""

    def __init__(self, after, first=b""):
        self.first = first  # bytes sent in the same write as the 101
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.after = after
        self.result = None
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        conn, _ = self.sock.accept()
        with conn:
            head = read_until(conn, lambda b: b"\r\n\r\n" in b)
            self.behind = head[head.index(b"\r\n\r\n") + 4:]
            conn.sendall(ws_accept(head) + self.first)
            try:
                self.result = self.after(conn)
            finally:
                self.done.set()

    def close(self):
        self.sock.close()



def _raw_handshake(port, behind=b""):
    s = socket.create_connection(("127.0.0.1", port), timeout=15)
    s.sendall(b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
              b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n" +
              behind)
    head = read_until(s, lambda b: b"\r\n\r\n" in b)
    assert head.startswith(b"HTTP/1.1 101 "), head
    assert b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" in head, head  # the backend's, passed on
    return s, head[head.index(b"\r\n\r\n") + 4:]


def test_half_close_is_passed_on_and_the_other_way_stays_open(env):
    def after(conn):
        got = read_all(conn)  # until the client's end reaches us
        conn.sendall(b"got %d bytes" % len(got))
        return got
    be = RawWsBackend(after)
    env.on_cleanup.append(be.close)
    px = _proxy(env, be)
    s, early = _raw_handshake(px.port)
    with s:
        s.sendall(b"x" * 100000)
        s.shutdown(socket.SHUT_WR)  # our end: the backend must see it ...
        rest = read_all(s, early)   # ... and still answer, then end its side too
    assert be.done.wait(15) and be.result == b"x" * 100000
    assert rest == b"got 100000 bytes", rest[:100]
    wait_until(lambda: _metric(px, "accelnet_tunnels_closed_total", reason="closed") == 1,
               "the tunnel closed when both sides had ended")


def flooding_backend(env, total, stall_s):
    """A tunnel backend that sends <total> random bytes as fast as they are taken, then ends
    its side: (backend, [bytes pushed so far], an Event set once no byte was taken for
    <stall_s> seconds, the pipe full)."""
    pushed = [0]
    stalled = threading.Event()

    def after(conn):
        block = memoryview(os.urandom(1 << 16))
        conn.settimeout(stall_s)
        while pushed[0] < total:
            try:
                pushed[0] += conn.send(block[:min(len(block), total - pushed[0])])
            except socket.timeout:
                if stalled.is_set():
                    raise
                stalled.set()
                conn.settimeout(60)  # the client reads again: the rest goes
        conn.shutdown(socket.SHUT_WR)
    be = RawWsBackend(after)
    env.on_cleanup.append(be.close)
    return be, pushed, stalled


def test_backpressure_a_client_that_does_not_read_stops_the_backend(env):
    total = 200 << 20
    be, pushed, stalled = flooding_backend(env, total, 3)
    px = _proxy(env, be)
    s, early = _raw_handshake(px.port)
    with s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
        # not reading: the proxy stops reading the backend once its buffer to us is full
        wait_until(stalled.is_set, "the backend held back", timeout=60)
        held = pushed[0]
        assert held < total // 4, held
        assert _samples(px)[("accelnet_buffer_bytes", ())] <= 4 * 33 * 1024
        n = len(early)
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            n += len(chunk)
    assert be.done.wait(15)
    assert n == total, (n, total)
    print(f"a client that does not read held the backend at {held >> 20} MiB of {total >> 20}")


def test_bytes_right_behind_either_head_go_through(env):
    # a client that sends its first frame in the same write as its handshake, and a backend
    # that sends its first frame in the same write as its 101: neither is lost or reordered
    def after(conn):
        got = be.behind
        while len(got) < 9:
            got += conn.recv(100)
        conn.sendall(b" second")
        return got
    be = RawWsBackend(after, first=b"first")
    env.on_cleanup.append(be.close)
    px = _proxy(env, be)
    s, early = _raw_handshake(px.port, behind=b"pipelined")
    with s:
        got = read_until(s, lambda b: b.endswith(b"second"), early)
    assert got == b"first second", got
    assert be.done.wait(15) and be.result == b"pipelined", be.result


def test_sigterm_closes_tunnels_after_tunnel_drain_ms_and_exits(env):
    be = _backend(env)
    px = _proxy(env, be, extra="timeouts: {tunnel_drain_ms: 500, shutdown_ms: 60000}\n")

    async def run():
        async with _connect(px.port) as ws:
            await ws.send("hi")
            assert await ws.recv() == "hi"
            px.send_signal(signal.SIGTERM)
            await _closed_by_the_proxy(ws, 30, "a message on a tunnel of a stopping proxy")
    asyncio.run(run())
    # its last connection gone, the proxy exits at once, long before shutdown_ms
    assert px.wait(30) == 0, env.log(px)
    assert "every connection finished" in env.log(px), env.log(px)
