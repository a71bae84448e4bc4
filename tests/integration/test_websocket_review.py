"""WebSocket tunnels (routes.websocket) attacked as a hostile client and a hostile backend
(issue 25's review): raw sockets on both sides, for what a WebSocket library never sends."""

import socket
import threading

import h2.settings

from test_websocket import ws_accept
from harness import ScriptedBackend, metrics_text, pool_yaml, prom_samples, raw, read_all, \
    read_until, wait_until
from test_h2 import H2Client
from test_h2_websocket import WS_HEADERS

RESET = b"\x01\x00\x00\x00\x00\x00\x00\x00"  # SO_LINGER on, 0 s: close() sends a RST
HANDSHAKE = (b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
             b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n")


class RawServers:
    """Listeners on <n> ports sharing one handler(index, conn, head), each connection in a
    thread of its own; index counts the connections across all ports, from 0."""

    def __init__(self, n, handler):
        self.handler = handler
        self.accepted = 0
        self.lock = threading.Lock()
        self.socks = []
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen(16)
            self.socks.append(s)
            threading.Thread(target=self._serve, args=(s,), daemon=True).start()
        self.ports = [s.getsockname()[1] for s in self.socks]

    def _serve(self, sock):
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            with self.lock:
                i = self.accepted
                self.accepted += 1
            threading.Thread(target=self._conn, args=(i, conn), daemon=True).start()

    def _conn(self, i, conn):
        with conn:
            conn.settimeout(60)
            try:
                head = read_until(conn, lambda b: b"\r\n\r\n" in b)
                self.handler(i, conn, head)
            except (OSError, AssertionError):
                pass

    def close(self):
        for s in self.socks:
            s.close()


def _open(px):
    return prom_samples(metrics_text(px.admin)).get(("accelnet_tunnels_open", ()), 0)


def _never_hedged(env, over_h2):
    # pools.hedge_after_ms sends a slow GET again to a second backend. A WebSocket handshake
    # is a GET without a body too, but a copy would open a second session on another backend
    # and then cut it, which the application there sees; no user wants that, so a handshake
    # (HTTP/1.1 Upgrade, or HTTP/2's extended CONNECT) is never hedged (it was until issue
    # 29: this test asserted the copy). The first backend holds its 101 while a plain GET,
    # sent after the handshake on the same worker, is hedged (so the handshake's own hedge
    # time has passed too); then it answers, and only one handshake ever reached a backend
    go = threading.Event()
    heads, lock = [], threading.Lock()

    def handler(i, conn, head):
        with lock:
            heads.append(head)
            gets = sum(1 for h in heads if h.startswith(b"GET /plain "))
        if b"websocket" in head.lower():
            go.wait(30)
            conn.sendall(ws_accept(head))
            while True:  # echo
                b = conn.recv(65536)
                if not b:
                    return
                conn.sendall(b)
        elif gets == 1:
            conn.recv(1)  # the plain GET's first try never answers: the copy does
        else:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            read_all(conn)
    be = RawServers(2, handler)
    env.on_cleanup.append(be.close)
    px = env.proxy("pools:\n" + pool_yaml("p", be.ports, extra="    hedge_after_ms: 50") +
                   "routes:\n  - pool: p\n    websocket: true\n", workers=1)

    def handshakes():
        with lock:
            return sum(1 for h in heads if b"websocket" in h.lower())
    if over_h2:
        c = H2Client(px.port)
        env.on_cleanup.append(c.close)
        c.wait(lambda: c.conn.remote_settings.get(
            h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL) == 1)
        sid = c.send("CONNECT", "/ws", headers=WS_HEADERS, end=False)
    else:
        s = socket.create_connection(("127.0.0.1", px.port), timeout=15)
        env.on_cleanup.append(s.close)
        s.sendall(HANDSHAKE + b"\r\n")
    wait_until(lambda: handshakes() == 1, "the handshake reached a backend")
    plain = raw(px.port, b"GET /plain HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert plain.startswith(b"HTTP/1.1 200 ") and plain.endswith(b"ok"), plain
    go.set()
    if over_h2:
        c.wait(lambda: sid in c.status or sid in c.reset)
        assert c.status.get(sid) == 200, (c.status, c.reset)
    else:
        head = read_until(s, lambda b: b"\r\n\r\n" in b)
        assert head.startswith(b"HTTP/1.1 101 "), head
        rest = head[head.index(b"\r\n\r\n") + 4:]
        s.sendall(b"ping")
        assert read_until(s, lambda b: b.endswith(b"ping"), rest) == b"ping"
    assert handshakes() == 1, heads
    st = prom_samples(metrics_text(px.admin))
    hedged = {k: v for k, v in st.items() if k[0] == "accelnet_backend_hedged_total"}
    assert sum(hedged.values()) == 1, hedged  # the plain GET's
    (c if over_h2 else s).close()  # the tunnel ends now, not in the proxy's drain
    wait_until(lambda: _open(px) == 0, "the tunnel closed")


def test_a_websocket_handshake_is_never_hedged(env):
    _never_hedged(env, over_h2=False)


def test_an_h2_websocket_handshake_is_never_hedged(env):
    _never_hedged(env, over_h2=True)


def test_every_end_of_a_handshake_or_tunnel_gives_its_count_back(env):
    # limits.max_tunnels: 1. Each way a handshake is refused or a tunnel ends must give the
    # one place back, or the next handshake gets a 503 for ever
    def handler(i, conn, head):
        path = head.split(b" ")[1]
        if path == b"/refuse":
            conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 2\r\n\r\nno")
        elif path == b"/rst":
            conn.sendall(ws_accept(head))
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET)
        elif path == b"/garbage":
            conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n")
        else:
            conn.sendall(ws_accept(head))
            read_all(conn)
    be = RawServers(1, handler)
    env.on_cleanup.append(be.close)
    px = env.proxy("pools:\n" + pool_yaml("p", be.ports) +
                   "routes:\n  - pool: p\n    websocket: true\n",
                   extra="limits: {max_tunnels: 1}\n", workers=2)

    def handshake(path, extra=b""):
        s = socket.create_connection(("127.0.0.1", px.port), timeout=15)
        s.sendall(HANDSHAKE.replace(b"/ws", path) + extra + b"\r\n")
        return s, read_until(s, lambda b: b"\r\n\r\n" in b)

    def still_one_place():
        wait_until(lambda: _open(px) == 0, "the tunnel's place given back")
        s, head = handshake(b"/ok")
        with s:
            assert head.startswith(b"HTTP/1.1 101 "), head
            assert _open(px) == 1
        wait_until(lambda: _open(px) == 0, "the client's close gave the place back")

    s, head = handshake(b"/refuse")  # the backend says no
    s.close()
    assert head.startswith(b"HTTP/1.1 403"), head
    still_one_place()
    s, head = handshake(b"/garbage")  # a 101 without Connection: upgrade
    s.close()
    assert head.startswith(b"HTTP/1.1 502"), head
    still_one_place()
    s, head = handshake(b"/rst")  # the backend resets the tunnel
    with s:
        assert head.startswith(b"HTTP/1.1 101 "), head
        read_all(s)
    still_one_place()
    s, head = handshake(b"/ok")  # the client resets it
    assert head.startswith(b"HTTP/1.1 101 "), head
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET)
    s.close()
    still_one_place()
    # a second handshake while one is open: 503, and the open one keeps its place
    s, head = handshake(b"/ok")
    with s:
        t, head2 = handshake(b"/ok")
        t.close()
        assert head2.startswith(b"HTTP/1.1 503"), head2
        assert _open(px) == 1
    still_one_place()


def test_smuggling_through_a_refused_or_odd_handshake_is_not_a_tunnel(env):
    # each answered as HTTP, and the request behind it is read as the next request (seen by
    # the backend as its own request, never as bytes of a tunnel)
    seen = []

    def script(n, req):
        if req.startswith(b"GET "):  # not a chunked body's last chunk, read as a request
            seen.append(req)
            return b"HTTP/1.1 426 Upgrade Required\r\nContent-Length: 4\r\n\r\nnope", False
        return b"", False
    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]) +
                   "routes:\n  - pool: p\n    websocket: true\n")
    behind = b"GET /second HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    for odd in (b"", b"Content-Length: 5\r\n", b"Transfer-Encoding: chunked\r\n",
                b"Upgrade: h2c\r\n"):
        seen.clear()
        body = b"hello" if b"Content-Length" in odd else b"0\r\n\r\n" if b"chunked" in odd \
            else b""
        out = raw(px.port, HANDSHAKE + odd + b"\r\n" + body + behind)
        assert out.count(b"HTTP/1.1 426") == 2, (odd, out)
        assert b"101" not in out.split(b"\r\n")[0]
        assert len(seen) == 2 and seen[1].startswith(b"GET /second "), (odd, seen)
        if odd:  # not a WebSocket handshake: the backend never sees an Upgrade
            assert b"upgrade" not in seen[0].split(b"\r\n\r\n")[0].lower(), seen[0]


def test_a_backend_that_never_reads_holds_the_client_back(env):
    # the other way of test_backpressure_...: a client pushing into a backend that takes
    # nothing may cost the proxy a buffer, not its memory
    release = threading.Event()
    got = [0]

    def handler(i, conn, head):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
        conn.sendall(ws_accept(head))
        release.wait(60)
        got[0] = len(read_all(conn))
    be = RawServers(1, handler)
    env.on_cleanup.append(be.close)
    px = env.proxy("pools:\n" + pool_yaml("p", be.ports) +
                   "routes:\n  - pool: p\n    websocket: true\n", workers=1)
    total = 200 << 20
    with socket.create_connection(("127.0.0.1", px.port), timeout=15) as s:
        s.sendall(HANDSHAKE + b"\r\n")
        head = read_until(s, lambda b: b"\r\n\r\n" in b)
        assert head.startswith(b"HTTP/1.1 101 "), head
        s.settimeout(3)
        block = memoryview(bytes(1 << 16))
        sent = 0
        while sent < total:
            try:
                sent += s.send(block)
            except socket.timeout:
                break
        assert sent < total // 4, sent
        st = prom_samples(metrics_text(px.admin))
        held = st[("accelnet_buffer_bytes", ())]
        assert held <= 4 * 33 * 1024, held
        release.set()
        s.settimeout(60)
        s.shutdown(socket.SHUT_WR)
        read_all(s)
    wait_until(lambda: got[0] == sent, "every byte the client sent reached the backend")


def test_a_101_to_a_post_or_a_plain_get_is_a_502_and_no_tunnel(env):
    def handler(i, conn, head):
        conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                     b"Connection: Upgrade\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n"
                     b"smuggled")
        read_all(conn)
    be = RawServers(1, handler)
    env.on_cleanup.append(be.close)
    px = env.proxy("pools:\n" + pool_yaml("p", be.ports) +
                   "routes:\n  - pool: p\n    websocket: true\n")
    for req in (b"POST /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, close\r\n"
                b"Upgrade: websocket\r\nContent-Length: 2\r\n\r\nhi",
                b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                HANDSHAKE.replace(b"HTTP/1.1", b"HTTP/1.0") + b"\r\n",
                HANDSHAKE + b"Upgrade: websocket\r\n\r\n"):  # two Upgrade fields
        out = raw(px.port, req.replace(b"Upgrade\r\n", b"Upgrade, close\r\n", 1))
        assert out.startswith(b"HTTP/1.1 502 "), (req, out)
        assert b"smuggled" not in out, out
    assert _open(px) == 0


def _accept_then_hold(i, conn, head):
    """A backend that accepts every handshake and holds the tunnel until the proxy closes it;
    on /rst it resets the connection instead."""
    conn.sendall(ws_accept(head))
    if head.split(b" ")[1] == b"/rst":
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET)
        return
    read_all(conn)


def test_every_end_of_a_tunnel_gives_its_backend_slot_back(env):
    # max_concurrency: 1. A tunnel holds the backend's one slot; each way it ends (either
    # side closes, resets, idles out) must free it for the next handshake, which waits in
    # the queue meanwhile and then opens
    be = RawServers(1, _accept_then_hold)
    env.on_cleanup.append(be.close)
    pool = pool_yaml("p", be.ports).replace("}", ", max_concurrency: 1}")
    px = env.proxy("pools:\n" + pool + "routes:\n  - pool: p\n    websocket: true\n",
                   extra="timeouts: {tunnel_idle_ms: 300}\n", workers=2)

    def handshake(path=b"/ws"):
        s = socket.create_connection(("127.0.0.1", px.port), timeout=15)
        s.sendall(HANDSHAKE.replace(b"/ws", path) + b"\r\n")
        head = read_until(s, lambda b: b"\r\n\r\n" in b)
        assert head.startswith(b"HTTP/1.1 101 "), head
        return s

    s = handshake()
    s.shutdown(socket.SHUT_WR)  # the client ends; the backend then ends too
    read_all(s)
    s.close()
    s = handshake(b"/rst")  # the backend resets
    read_all(s)
    s.close()
    s = handshake()  # the client resets
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET)
    s.close()
    s = handshake()  # nobody says anything: idle
    read_all(s)
    s.close()
    with handshake() as s:  # held: the next one waits for the slot ...
        t = socket.create_connection(("127.0.0.1", px.port), timeout=15)
        t.sendall(HANDSHAKE + b"\r\n")
        wait_until(lambda: prom_samples(metrics_text(px.admin)).get(
            ("accelnet_pool_queue_length", (("pool", "p"),))) == 1, "the second handshake queued")
    with t:  # ... and gets it once the first ends
        head = read_until(t, lambda b: b"\r\n\r\n" in b)
        assert head.startswith(b"HTTP/1.1 101 "), head
    wait_until(lambda: _open(px) == 0, "all tunnels closed")
    st = prom_samples(metrics_text(px.admin))
    assert sum(v for k, v in st.items() if k[0] == "accelnet_backend_inflight") == 0


def test_a_tls_client_ending_its_tunnel_gives_everything_back(env):
    # the backend sends 4 MiB and ends its side; the TLS client reads it all to the proxy's
    # close_notify, then closes: the tunnel ends, counted, its place given back
    import os
    import ssl
    import subprocess
    from harness import BIN, free_port

    def handler(i, conn, head):
        conn.sendall(ws_accept(head))
        conn.sendall(b"y" * (4 << 20))
        conn.shutdown(socket.SHUT_WR)
        read_all(conn)
    be = RawServers(1, handler)
    env.on_cleanup.append(be.close)
    key, pem = os.path.join(env.dir, "k.key"), os.path.join(env.dir, "c.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", pem, "-days",
                    "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    port, admin = free_port(), free_port()
    text = (f"workers: 2\nlisten:\n  - address: 127.0.0.1:{port}\n"
            f"    tls: {{cert: {pem}, key: {key}}}\nadmin: {{address: 127.0.0.1:{admin}}}\n"
            "pools:\n" + pool_yaml("p", be.ports) + "routes:\n  - pool: p\n    websocket: true\n")
    env.start([BIN, "proxy", "-c", env.write("tls.yaml", text)], "proxy", wait_port=port)
    ctx = ssl.create_default_context(cafile=pem)
    with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=15),
                         server_hostname="127.0.0.1") as s:
        s.sendall(HANDSHAKE + b"\r\n")
        head = read_until(s, lambda b: b"\r\n\r\n" in b)
        assert head.startswith(b"HTTP/1.1 101 "), head
        got = read_all(s, head[head.index(b"\r\n\r\n") + 4:])
        assert got == b"y" * (4 << 20), len(got)
        s.unwrap()  # our close_notify: a clean end, not a truncation

    def samples():
        return prom_samples(metrics_text(admin))
    wait_until(lambda: samples().get(("accelnet_tunnels_closed_total",
                                      (("reason", "closed"),))) == 1, "the tunnel closed")
    assert samples()[("accelnet_tunnels_open", ())] == 0


def test_rate_limit_concurrency_counts_a_tunnel_until_it_ends_however_it_ends(env):
    # rate_limit.concurrency: 1 counts the tenant's open tunnel; a second is 429 meanwhile,
    # and every end (client close, backend reset, idle) frees it for the next
    be = RawServers(1, _accept_then_hold)
    env.on_cleanup.append(be.close)
    px = env.proxy("pools:\n" + pool_yaml("p", be.ports) +
                   "routes:\n  - pool: p\n    websocket: true\n"
                   "    rate_limit: {concurrency: 1}\n",
                   extra="timeouts: {tunnel_idle_ms: 300}\n")

    def handshake(path=b"/ws"):
        s = socket.create_connection(("127.0.0.1", px.port), timeout=15)
        s.sendall(HANDSHAKE.replace(b"/ws", path) + b"\r\n")
        return s, read_until(s, lambda b: b"\r\n\r\n" in b)

    def open_when_free(path=b"/ws"):
        # the proxy sees an end a moment after the client's close: try until it opens
        got = []

        def opens():
            s, head = handshake(path)
            if head.startswith(b"HTTP/1.1 101 "):
                got.append(s)
                return True
            assert head.startswith(b"HTTP/1.1 429 "), head
            s.close()
            return False
        wait_until(opens, "the tenant's place given back")
        return got[0]

    with open_when_free() as s:
        t, head2 = handshake()
        t.close()
        assert head2.startswith(b"HTTP/1.1 429 "), head2
    with open_when_free(b"/rst") as s:  # the backend resets it
        read_all(s)
    with open_when_free() as s:  # idle: the proxy closes it
        read_all(s)
    open_when_free().close()


def test_a_101_before_the_whole_handshake_went_is_no_tunnel(env):
    # a backend that answers 101 having read only the start of the handshake, on a connection
    # that cannot take the whole head yet (small segments, a small window): were that a
    # tunnel, the rest of the proxy's head (X-Forwarded-For, the identity it authenticated)
    # would never go, and the client's first bytes would end the head the backend reads
    seen, decided = [], threading.Event()
    lst = socket.socket()  # segments of 536 bytes, a 4 KiB window: the head goes slowly
    lst.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    lst.bind(("127.0.0.1", 0))
    lst.listen(8)
    env.on_cleanup.append(lst.close)

    def serve():
        while True:
            try:
                conn, _ = lst.accept()
            except OSError:
                return
            with conn:
                got = conn.recv(100)  # the request line, and no more: then the 101
                conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                             b"Connection: Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n")
                # read no more until the client has its answer: reading now would let the
                # rest of the head go before the proxy looks at the 101 (then it is a
                # tunnel opened after the whole handshake, as it should be)
                decided.wait(15)
                conn.settimeout(5)
                try:
                    while b"INJECTED" not in got:
                        b = conn.recv(65536)
                        if not b:
                            break
                        got += b
                except OSError:
                    pass
                seen.append(got)
    threading.Thread(target=serve, daemon=True).start()
    px = env.proxy("pools:\n" + pool_yaml("p", [lst.getsockname()[1]]) +
                   "routes:\n  - pool: p\n    websocket: true\n",
                   extra="limits: {max_header_bytes: 300000}\n")
    with socket.create_connection(("127.0.0.1", px.port), timeout=15) as s:
        s.sendall(HANDSHAKE + b"X-Pad: " + b"p" * 200000 + b"\r\n\r\n")
        head = read_until(s, lambda b: b"\r\n\r\n" in b)
        if head.startswith(b"HTTP/1.1 101 "):
            s.sendall(b"\r\nX-Identity: admin\r\n\r\nINJECTED")
        decided.set()
        wait_until(lambda: seen, "the backend's read")
        assert head.startswith(b"HTTP/1.1 502 "), (head[:200], [g[-60:] for g in seen])
    assert not any(b"INJECTED" in got for got in seen)
