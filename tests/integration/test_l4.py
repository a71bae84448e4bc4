"""L4 mode (issue 31, listen[].mode: tcp): raw TCP relayed to a pool's backends, whatever
the protocol: an echo server and a real Redis through the listener, balancing, a dead backend
skipped, half-close both ways, the idle timeout, a drain that lets an open connection finish,
and configs `accelnet check` refuses."""

import os
import shutil
import signal
import socket
import subprocess
import threading

from harness import (BIN, Skip, free_port, metrics_text, port_open, prom_samples, read_all,
                     read_until, wait_until)


class TcpServer:
    """A TCP server in a thread; each connection runs handler(conn) in a thread of its own.
    .accepted counts connections, .open those not yet closed."""

    def __init__(self, handler):
        self.port = free_port()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", self.port))
        self.sock.listen(128)
        self.handler = handler
        self.accepted = 0
        self.open = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self.open += 1
            threading.Thread(target=self._conn, args=(conn,), daemon=True).start()

    def _conn(self, conn):
        try:
            self.handler(conn)
        except OSError:
            pass
        finally:
            conn.close()
            self.open -= 1

    def close(self):
        self.sock.close()


def echo(conn):
    """Echo every byte; at the client's end, end our side too (a half-close passed on)."""
    while True:
        data = conn.recv(65536)
        if not data:
            break
        conn.sendall(data)
    conn.shutdown(socket.SHUT_WR)


def named(name):
    """Say <name> and end our side; then read to the client's end."""
    def handler(conn):
        conn.sendall(name.encode())
        conn.shutdown(socket.SHUT_WR)
        while conn.recv(4096):
            pass
    return handler


def pools_yaml(name, ports, balance="round-robin", extra=""):
    lines = [f"  - name: {name}", f"    balance: {balance}", "    backends:"]
    lines += [f"      - {{address: 127.0.0.1:{p}}}" for p in ports]
    return "\n".join(lines) + "\n" + extra


def l4_config(env, pools, listen_extra="", pool="db", workers=2, top=""):
    port, admin = free_port(), free_port()
    text = (f"workers: {workers}\nlisten:\n  - address: 127.0.0.1:{port}\n    mode: tcp\n"
            f"    pool: {pool}\n{listen_extra}admin:\n  address: 127.0.0.1:{admin}\n"
            f"{top}pools:\n{pools}")
    return env.write("l4.yaml", text), port, admin


def l4_proxy(env, pools, **kw):
    path, port, admin = l4_config(env, pools, **kw)
    p = env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port)
    p.port, p.admin, p.path = port, admin, path
    wait_until(lambda: port_open(admin), "admin port")
    return p


def metric(admin, name, **labels):
    """The sum of <name>'s samples whose labels include <labels>."""
    return sum(v for (n, k), v in prom_samples(metrics_text(admin)).items()
               if n == name and all(dict(k).get(a) == b for a, b in labels.items()))


def connect(port, timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.settimeout(timeout)
    return s


def test_l4_echo_bytes_both_ways_and_counted(env):
    be = TcpServer(echo)
    px = l4_proxy(env, pools_yaml("db", [be.port]))
    payload = os.urandom(3 << 20)  # more than any pipe or socket buffer holds
    s = connect(px.port)
    got = []
    reader = threading.Thread(target=lambda: got.append(read_all(s)))
    reader.start()
    s.sendall(payload)
    s.shutdown(socket.SHUT_WR)
    reader.join(30)
    assert got and got[0] == payload, len(got[0]) if got else None
    s.close()
    be_name = f"127.0.0.1:{be.port}"

    def counted():
        conns = metric(px.admin, "accelnet_backend_l4_connections_total", backend=be_name)
        sent = metric(px.admin, "accelnet_backend_l4_bytes_total", backend=be_name,
                      direction="to_backend")
        back = metric(px.admin, "accelnet_backend_l4_bytes_total", backend=be_name,
                      direction="to_client")
        # (the start-up's check that the port is open was a connection too, without bytes)
        return conns >= 1 and (sent, back) == (len(payload), len(payload))
    wait_until(counted, "the connection and its bytes counted per backend")


def test_l4_redis_through_the_listener(env):
    redis = shutil.which("redis-server")
    if not redis:
        raise Skip("redis-server not installed")
    rport = free_port()
    env.start([redis, "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no"], "redis", wait_port=rport)
    px = l4_proxy(env, pools_yaml("db", [rport]))
    s = connect(px.port)
    value = "x" * 100000
    s.sendall(f"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n${len(value)}\r\n{value}\r\n".encode())
    assert s.recv(16) == b"+OK\r\n"
    s.sendall(b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n")
    want = f"${len(value)}\r\n{value}\r\n".encode()
    got = b""
    while len(got) < len(want):
        chunk = s.recv(65536)
        assert chunk, got[:40]
        got += chunk
    assert got == want
    s.close()
    cli = shutil.which("redis-cli")
    if cli:
        out = subprocess.run([cli, "-p", str(px.port), "INCR", "n"], capture_output=True,
                             timeout=10)
        assert out.stdout.strip() == b"1", out


def test_l4_balances_across_two_backends(env):
    a, b = TcpServer(named("a")), TcpServer(named("b"))
    px = l4_proxy(env, pools_yaml("db", [a.port, b.port]), workers=1)
    seen = []
    for _ in range(6):
        s = connect(px.port)
        seen.append(read_all(s))
        s.close()
    assert sorted(seen) == [b"a"] * 3 + [b"b"] * 3, seen


def test_l4_hash_on_the_client_address(env):
    a, b = TcpServer(named("a")), TcpServer(named("b"))
    px = l4_proxy(env, pools_yaml("db", [a.port, b.port], balance="consistent-hash"))
    seen = set()
    for _ in range(6):
        # the last one ended at both backends first: the bound on load (two in flight at
        # least) would let a key move while connections linger
        wait_until(lambda: a.open + b.open == 0, "no connection open")
        s = connect(px.port)
        seen.add(read_all(s))
        s.close()
    assert len(seen) == 1, seen  # one client address: always the same backend


def test_l4_dead_backend_skipped(env):
    dead = free_port()  # nothing listens there: refused
    b = TcpServer(named("b"))
    px = l4_proxy(env, pools_yaml("db", [dead, b.port]), workers=1)
    for _ in range(4):
        s = connect(px.port)
        assert read_all(s) == b"b"
        s.close()


def test_l4_health_check_is_a_tcp_connect(env):
    a = TcpServer(named("a"))
    down = free_port()
    px = l4_proxy(env, pools_yaml("db", [a.port, down],
                                  extra="    health: {interval_ms: 50, fall: 1, rise: 1}\n"))
    # the backend speaks no HTTP, yet passes; the one that refuses is down
    def up(port):
        return metric(px.admin, "accelnet_backend_up", backend=f"127.0.0.1:{port}")
    wait_until(lambda: (up(a.port), up(down)) == (1, 0), "the listening one up, the other down")


def test_l4_half_close_both_ways(env):
    got_at_backend = []

    def reply_after_end(conn):
        data = b""
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
        got_at_backend.append(data)
        conn.sendall(b"after your end: " + data)  # the client's end came through first
        conn.shutdown(socket.SHUT_WR)
    be = TcpServer(reply_after_end)
    px = l4_proxy(env, pools_yaml("db", [be.port]))
    s = connect(px.port)
    s.sendall(b"hello")
    s.shutdown(socket.SHUT_WR)
    assert read_all(s) == b"after your end: hello"  # and the backend's end came back
    s.close()
    assert b"hello" in got_at_backend  # (besides the start-up's check that the port is open)


def test_l4_silent_client_hits_the_idle_timeout(env):
    be = TcpServer(echo)
    px = l4_proxy(env, pools_yaml("db", [be.port]), listen_extra="    idle_ms: 300\n")
    s = connect(px.port)
    s.sendall(b"ping")
    assert s.recv(16) == b"ping"
    assert read_all(s) == b""  # nothing more: closed by the proxy after idle_ms
    wait_until(lambda: be.open == 0, "the backend connection closed too")
    s.close()


def test_l4_drain_lets_an_open_connection_finish(env):
    be = TcpServer(echo)
    px = l4_proxy(env, pools_yaml("db", [be.port]), workers=1)
    s = connect(px.port)
    s.sendall(b"one")
    assert s.recv(16) == b"one"
    px.send_signal(signal.SIGHUP)  # a reload: the old workers drain
    wait_until(lambda: "generation 1" in env.log(px), "the reload done")
    # the open connection still carries bytes both ways after the reload ...
    s.sendall(b"two")
    assert s.recv(16) == b"two"
    # ... and a new connection goes to the new configuration
    t = connect(px.port)
    t.sendall(b"three")
    assert t.recv(16) == b"three"
    t.close()
    s.sendall(b"four")
    assert s.recv(16) == b"four"
    s.shutdown(socket.SHUT_WR)
    assert read_all(s) == b""
    s.close()


def test_l4_drain_time_is_bounded(env):
    be = TcpServer(echo)
    px = l4_proxy(env, pools_yaml("db", [be.port]), workers=1,
                  listen_extra="    drain_ms: 200\n")
    s = connect(px.port)
    s.sendall(b"one")
    assert s.recv(16) == b"one"
    px.send_signal(signal.SIGTERM)
    assert read_all(s) == b""  # closed listen[].drain_ms after the drain began
    px.wait(10)
    assert px.returncode == 0


def check(env, text):
    path = env.write("bad.yaml", text)
    return subprocess.run([BIN, "check", "-c", path], capture_output=True, text=True), path


def test_l4_bad_configs_refused_with_their_place(env):
    pools = "pools:\n  - name: db\n    backends: [{address: 127.0.0.1:6379}]\n"
    cases = [
        ("listen:\n  - address: 127.0.0.1:7000\n    mode: tcp\n" + pools,
         ":3:", "needs 'pool'"),
        ("listen:\n  - address: 127.0.0.1:7000\n    mode: tcp\n    pool: nope\n" + pools,
         ":4:11", "no pool named 'nope'"),
        ("listen:\n  - address: 127.0.0.1:7000\n    mode: udp\n    pool: db\n" + pools,
         ":3:11", "mode"),
        ("listen:\n  - address: 127.0.0.1:7000\n    pool: db\n" + pools,
         ":3:11", "is for 'mode: tcp'"),
        ("listen:\n  - address: 127.0.0.1:7000\n    mode: tcp\n    pool: db\n"
         "    tls: {cert: c.pem, key: k.pem}\n" + pools, ":", "tls"),
        ("listen:\n  - address: 127.0.0.1:7000\n    mode: tcp\n    pool: db\n"
         "  - 127.0.0.1:7001\n" + pools
         + "routes:\n  - match: {path_prefix: /}\n    pool: db\n", ":11:11",
         "a pool serves either routes or tcp listeners"),
        ("listen:\n  - address: 127.0.0.1:7000\n    mode: tcp\n    pool: db\n"
         "pools:\n  - name: db\n    balance: peak-ewma\n"
         "    backends: [{address: 127.0.0.1:6379}]\n", ":7:14", "balance 'peak-ewma'"),
        ("listen:\n  - address: 127.0.0.1:7000\n    sni: [{name: a.example, pool: db}]\n"
         + pools, ":3:10", "'sni' is for 'mode: tcp'"),
        ("listen:\n  - address: 127.0.0.1:7000\n    mode: tcp\n"
         "    sni: [{name: a.example, pool: nope}]\n" + pools, ":4:35", "sni: no pool named"),
        ("listen:\n  - address: 127.0.0.1:7000\n    mode: tcp\n"
         "    sni: [{name: 'a b', pool: db}]\n" + pools, ":4:18", "no server name"),
    ]
    for text, where, words in cases:
        out, path = check(env, text)
        assert out.returncode != 0, text
        msg = out.stderr + out.stdout
        assert path + where in msg and words in msg, (text, msg)
    ok, _ = check(env, "listen:\n  - address: 127.0.0.1:7000\n    mode: tcp\n    pool: db\n"
                  "    idle_ms: 5s\n" + pools)
    assert ok.returncode == 0, ok.stderr


def test_l4_max_concurrency_caps_open_connections(env):
    a, b = TcpServer(echo), TcpServer(echo)
    pools = ("  - name: db\n    backends:\n"
             f"      - {{address: 127.0.0.1:{a.port}, max_concurrency: 1}}\n"
             f"      - {{address: 127.0.0.1:{b.port}, max_concurrency: 1}}\n")
    px = l4_proxy(env, pools, workers=1)
    # the start-up's check that the port is open was a connection too: wait for it to end
    wait_until(lambda: metric(px.admin, "accelnet_backend_l4_connections_total") == 1 and
               metric(px.admin, "accelnet_backend_inflight", pool="db") == 0,
               "the start-up's port check gone")
    held = []
    for word in (b"one", b"two"):
        s = connect(px.port)
        s.sendall(word)
        assert s.recv(16) == word
        held.append(s)
    assert a.open == 1 and b.open == 1  # one each
    # every backend holds its one slot: the third client is closed, and counted
    s = connect(px.port)
    assert read_all(s) == b""
    assert metric(px.admin, "accelnet_pool_unavailable_total", pool="db") == 1
    # a slot freed takes the next one
    held[0].close()
    wait_until(lambda: metric(px.admin, "accelnet_backend_inflight", pool="db") == 1,
               "the first connection's slot back")
    t = connect(px.port)
    t.sendall(b"three")
    assert t.recv(16) == b"three"
    for s in held[1:] + [t]:
        s.close()


def test_l4_descriptors_come_back(env):
    """Hostile review: many connections that move bytes, some cut by a reset, some ended
    half-way by the client: when they are gone, so are their sockets and pipes (beyond the
    worker's few spares)."""
    be = TcpServer(echo)
    px = l4_proxy(env, pools_yaml("db", [be.port]), workers=1)
    wait_until(lambda: metric(px.admin, "accelnet_backend_inflight", pool="db") == 0, "idle")
    base = metric(px.admin, "process_open_fds")
    socks = []
    for i in range(40):
        s = connect(px.port)
        s.sendall(os.urandom(100000))
        socks.append(s)
    for i, s in enumerate(socks):
        if i % 2 == 0:  # a clean end: ours, then the whole echo and the backend's end
            s.shutdown(socket.SHUT_WR)
            assert len(read_all(s)) == 100000
        s.close()  # the odd ones with their echo unread: a reset
    wait_until(lambda: metric(px.admin, "accelnet_backend_inflight", pool="db") == 0,
               "every connection ended")
    # the worker keeps at most 8 spare pipes (2 descriptors each)
    wait_until(lambda: metric(px.admin, "process_open_fds") <= base + 16, "descriptors back")


def proxy_header_echo(conn):
    """Read a PROXY protocol header (v1 line or v2 block), send it back, then echo."""
    got = b""
    while True:
        chunk = conn.recv(1)
        assert chunk, got
        got += chunk
        if got.startswith(b"PROXY ") and got.endswith(b"\r\n"):
            break
        if len(got) >= 16 and got.startswith(b"\r\n\r\n\0\r\nQUIT\n"):
            need = 16 + int.from_bytes(got[14:16], "big")
            while len(got) < need:
                got += conn.recv(need - len(got))
            break
    conn.sendall(got)
    echo(conn)


def test_l4_proxy_protocol_v1_and_v2(env):
    be1, be2 = TcpServer(proxy_header_echo), TcpServer(proxy_header_echo)
    pools = (pools_yaml("db", [be1.port], extra="    proxy_protocol: v1\n")
             + pools_yaml("db2", [be2.port], extra="    proxy_protocol: v2\n"))
    port2 = free_port()
    px = l4_proxy(env, pools, listen_extra=(f"  - address: 127.0.0.1:{port2}\n    mode: tcp\n"
                                            "    pool: db2\n"))
    s = connect(px.port)
    s.sendall(b"data")
    sport = s.getsockname()[1]
    want = f"PROXY TCP4 127.0.0.1 127.0.0.1 {sport} {px.port}\r\n".encode()
    assert read_until(s, lambda g: len(g) >= len(want) + 4) == want + b"data"
    s.close()
    wait_until(lambda: port_open(port2), "the second listener")
    s = connect(port2)
    s.sendall(b"data")
    sport = s.getsockname()[1]
    want = (b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c" + bytes([127, 0, 0, 1, 127, 0, 0, 1])
            + sport.to_bytes(2, "big") + port2.to_bytes(2, "big"))
    assert read_until(s, lambda g: len(g) >= len(want) + 4) == want + b"data"
    s.close()


def test_l4_proxy_protocol_only_on_l4_pools(env):
    out, path = check(env, "listen: [127.0.0.1:7000]\npools:\n  - name: web\n"
                      "    backends: [{address: 127.0.0.1:8000}]\n    proxy_protocol: v2\n")
    assert out.returncode != 0
    msg = out.stderr + out.stdout
    assert path + ":5:21" in msg and "proxy_protocol is for pools" in msg, msg


def hello_taker(seen):
    """A backend that keeps the first bytes it gets (a ClientHello passed through) and ends."""
    def handler(conn):
        seen.append(conn.recv(65536))
        conn.close()
    return handler


def send_hello(port, server_name):
    """Start a TLS handshake naming <server_name> (None: no SNI) through the proxy; the
    backends here answer no TLS, so it ends with an error, after the hello went out."""
    import ssl
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with connect(port) as s:
        try:
            with ctx.wrap_socket(s, server_hostname=server_name):
                pass
        except (ssl.SSLError, OSError):
            pass


def test_l4_tls_passthrough_by_sni(env):
    a, b, d = [], [], []
    ba, bb, bd = TcpServer(hello_taker(a)), TcpServer(hello_taker(b)), TcpServer(hello_taker(d))
    pools = (pools_yaml("tls-a", [ba.port]) + pools_yaml("tls-b", [bb.port])
             + pools_yaml("db", [bd.port]))
    px = l4_proxy(env, pools, listen_extra=("    sni:\n      - {name: A.Example, pool: tls-a}\n"
                                            "      - {name: '*.b.example', pool: tls-b}\n"))
    # (the start-up's check that the port is open sent no hello: closed, no backend saw it)
    send_hello(px.port, "a.example")
    wait_until(lambda: a, "a's hello")
    assert b"a.example" in a[0] and a[0][0] == 0x16  # the hello itself, untouched
    send_hello(px.port, "api.B.example")
    wait_until(lambda: b, "b's hello")
    assert b"api.B.example" in b[0]
    send_hello(px.port, "x.y.b.example")  # two labels under *.b.example: not its
    send_hello(px.port, None)  # no server name: listen.pool
    wait_until(lambda: len(d) == 2, "the default pool's two hellos")
    assert len(a) == 1 and len(b) == 1


def test_l4_sni_without_default_refuses_the_rest(env):
    a = []
    ba = TcpServer(hello_taker(a))
    port, admin = free_port(), free_port()
    path = env.write("l4.yaml", f"listen:\n  - address: 127.0.0.1:{port}\n    mode: tcp\n"
                     "    sni: [{name: a.example, pool: tls-a}]\n"
                     f"admin: {{address: 127.0.0.1:{admin}}}\n"
                     "pools:\n" + pools_yaml("tls-a", [ba.port]))
    px = env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port)
    wait_until(lambda: port_open(admin), "admin port")
    send_hello(port, "b.example")  # named by no item, and no listen.pool: closed
    s = connect(port)
    s.sendall(b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n")  # no TLS at all: closed
    assert read_all(s) == b""
    s.close()
    send_hello(port, "a.example")
    wait_until(lambda: a, "a's hello")
    assert len(a) == 1 and b"a.example" in a[0]
    assert px.poll() is None


def client_hello(server_name):
    """The bytes of a real ClientHello naming <server_name>, from Python's ssl."""
    import ssl
    ctx = ssl.create_default_context()
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname=server_name)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


def test_l4_sni_hello_in_pieces(env):
    """Hostile review: a hello that comes a few bytes at a time (the record's header split,
    then its body in two) is still read whole, and passes on byte for byte."""
    import time
    a = []
    ba = TcpServer(hello_taker(a))

    def whole(conn):
        got = b""
        while len(got) < len(hello):
            chunk = conn.recv(65536)
            if not chunk:
                break
            got += chunk
        a.append(got)
    ba.handler = whole
    hello = client_hello("a.example")
    px = l4_proxy(env, pools_yaml("tls-a", [ba.port]), pool="tls-a",
                  listen_extra="    sni: [{name: a.example, pool: tls-a}]\n")
    s = connect(px.port)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for piece in (hello[:2], hello[2:5], hello[5:100], hello[100:]):
        s.sendall(piece)
        time.sleep(0.05)  # each piece its own segment: nothing the proxy shows to wait on
    wait_until(lambda: a, "the hello at the backend")
    assert a[0] == hello
    s.close()


def _cert(env, name):
    key, pem = os.path.join(env.dir, name + ".key"), os.path.join(env.dir, name + ".pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", pem, "-days",
                    "2", "-subj", "/CN=" + name, "-addext", f"subjectAltName=DNS:{name}"],
                   check=True, capture_output=True)
    return pem, key


def tls_echo(pem, key, tag):
    """A TLS server (the backend terminates TLS): answers each read with <tag> + the bytes."""
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pem, key)

    def handler(conn):
        with ctx.wrap_socket(conn, server_side=True) as t:
            while True:
                data = t.recv(65536)
                if not data:
                    break
                t.sendall(tag + data)
    return handler


def test_l4_tls_passthrough_to_two_backends_end_to_end(env):
    """Each backend terminates TLS with its own certificate; the client verifies the one it
    asked for by name, through the proxy, which holds no certificate at all."""
    import ssl
    certs = {n: _cert(env, n) for n in ("a.example", "b.example")}
    ba = TcpServer(tls_echo(*certs["a.example"], b"a:"))
    bb = TcpServer(tls_echo(*certs["b.example"], b"b:"))
    pools = pools_yaml("tls-a", [ba.port]) + pools_yaml("tls-b", [bb.port])
    port, admin = free_port(), free_port()
    path = env.write("l4.yaml", f"listen:\n  - address: 127.0.0.1:{port}\n    mode: tcp\n"
                     "    sni:\n      - {name: a.example, pool: tls-a}\n"
                     "      - {name: b.example, pool: tls-b}\n"
                     f"admin: {{address: 127.0.0.1:{admin}}}\npools:\n" + pools)
    env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port)
    for name, tag in (("a.example", b"a:"), ("b.example", b"b:"), ("a.example", b"a:")):
        ctx = ssl.create_default_context(cafile=certs[name][0])  # verified, by name
        with ctx.wrap_socket(connect(port), server_hostname=name) as t:
            t.sendall(b"hello")
            assert read_until(t, lambda g: len(g) >= 7) == tag + b"hello"
            assert t.getpeercert()["subject"] == ((("commonName", name),),)
