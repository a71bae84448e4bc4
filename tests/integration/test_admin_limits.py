"""The admin endpoint under abuse (issue 10, item 5): pipelined requests whose answers are
never read, requests never finished, idle connections, too many connections, and an admin
address reachable from other hosts. Raw sockets where a polite client would not behave so."""

import socket
import subprocess

from harness import rss_kib
from harness import (BIN, free_port, pool_yaml, port_open, raw, read_all, read_until, request,
                     status, wait_until)


def _proxy(env, admin_block, extra=""):
    """A proxy in front of one simulator, with the admin section written by the test."""
    sim = env.sim("a")
    port, admin_port = free_port(), free_port()
    text = (f"workers: 1\nlisten:\n  - address: 127.0.0.1:{port}\n" +
            admin_block.format(port=admin_port) + extra + "pools:\n" +
            pool_yaml("p", [sim.port]))
    path = env.write("proxy.yaml", text)
    p = env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port)
    p.port, p.admin = port, admin_port
    wait_until(lambda: port_open(admin_port), "admin port")
    return p


LOOPBACK_ADMIN = "admin:\n  address: 127.0.0.1:{port}\n"


def test_pipelined_requests_never_read_keep_memory_bounded(env):
    px = _proxy(env, LOOPBACK_ADMIN)
    st, _, body = request(px.admin, "GET", "/metrics")
    assert st == 200 and len(body) > 1000
    start = rss_kib(px.pid)
    s = socket.socket()
    env.on_cleanup.append(s.close)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", px.admin))
    s.settimeout(5)
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 20000)
    except socket.timeout:
        pass  # the proxy stopped reading: that is the point
    # the admin loop has gone round since (it serves one thread), and still answers others
    assert status(px.admin)["pools"]
    grown = rss_kib(px.pid)
    assert grown < 2 * start + 20 * 1024, (start, grown)
    # the client that reads gets its answers, in order
    got = read_until(s, lambda b: b.count(b"HTTP/1.1 200 OK") >= 3)
    assert got.startswith(b"HTTP/1.1 200 OK"), got[:200]
    # a pipeline whose answers exceed what is queued at once is answered whole when read
    with socket.create_connection(("127.0.0.1", px.admin), timeout=15) as p:
        p.sendall(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 499 +
                  b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        got = read_all(p)
    assert got.count(b"HTTP/1.1 200 OK\r\n") == 500 and got.endswith(b"]}\n"), got[-200:]


def test_a_request_never_finished_is_closed(env):
    px = _proxy(env, LOOPBACK_ADMIN, extra="timeouts: {header_ms: 500, idle_ms: 60000}\n")
    half = socket.create_connection(("127.0.0.1", px.admin), timeout=15)
    env.on_cleanup.append(half.close)
    half.sendall(b"GET /status HTTP/1.1\r\nHo")
    silent = socket.create_connection(("127.0.0.1", px.admin), timeout=15)
    env.on_cleanup.append(silent.close)
    got = read_all(half)  # socket.timeout (a failure) if the proxy never closes it
    assert got == b"" or got.startswith(b"HTTP/1.1 408"), got
    got = read_all(silent)
    assert got == b"" or got.startswith(b"HTTP/1.1 408"), got
    assert status(px.admin)["pools"]


def test_an_idle_keep_alive_connection_is_closed(env):
    px = _proxy(env, LOOPBACK_ADMIN, extra="timeouts: {header_ms: 10000, idle_ms: 500}\n")
    s = socket.create_connection(("127.0.0.1", px.admin), timeout=15)
    env.on_cleanup.append(s.close)
    s.sendall(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    got = read_all(s)  # the answer, then the close once idle_ms has passed
    assert got.startswith(b"HTTP/1.1 200 OK") and got.endswith(b"}\n"), got[-200:]


def test_connections_past_the_cap_are_turned_away(env):
    px = _proxy(env, LOOPBACK_ADMIN)
    socks = []
    env.on_cleanup.append(lambda: [s.close() for s in socks])
    for _ in range(300):
        socks.append(socket.create_connection(("127.0.0.1", px.admin), timeout=15))
    answers = []
    for s in socks:
        try:
            s.sendall(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answers.append(read_until(s, lambda b: b"\r\n\r\n" in b).split(b"\r\n", 1)[0])
        except (OSError, AssertionError):
            answers.append(b"closed")
    served = answers.count(b"HTTP/1.1 200 OK")
    assert 0 < served <= 256, (served, set(answers))
    assert set(answers) <= {b"HTTP/1.1 200 OK", b"HTTP/1.1 503 Service Unavailable", b"closed"}
    for s in socks:
        s.close()
    socks.clear()
    wait_until(lambda: request(px.admin, "GET", "/status")[0] == 200, "admin to answer again")


def _check(env, admin_block):
    text = ("listen:\n  - address: 127.0.0.1:8080\n" + admin_block +
            "pools:\n  - name: p\n    backends:\n      - address: 127.0.0.1:9001\n")
    path = env.write("check.yaml", text)
    r = subprocess.run([BIN, "check", "-c", path], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr, path


def test_a_non_loopback_admin_address_needs_a_token(env):
    token = env.write("admin.token", "s3cret-admin-token\n")
    for addr in ("0.0.0.0:9090", '"*:9090"', "'[::]:9090'", "192.0.2.1:9090"):
        rc, out, path = _check(env, f"admin:\n  address: {addr}\n")
        assert rc == 2 and out.startswith(f"{path}:4:12:") and "token_file" in out, (addr, out)
        rc, out, _ = _check(env, f"admin:\n  address: {addr}\n  token_file: {token}\n")
        assert rc == 0, (addr, out)
    for addr in ("127.0.0.1:9090", "127.0.0.2:9090", "'[::1]:9090'", "localhost:9090"):
        rc, out, _ = _check(env, f"admin:\n  address: {addr}\n")
        assert rc == 0, (addr, out)
    rc, out, path = _check(env, "admin:\n  address: 127.0.0.1:9090\n  token_file: nowhere\n")
    assert rc == 2 and out.startswith(f"{path}:5:15:") and "nowhere" in out, out


def test_with_a_token_every_admin_request_needs_it(env):
    secret = "s3cret-admin-token"
    token = env.write("admin.token", secret + "\n")
    px = _proxy(env, "admin:\n  address: 0.0.0.0:{port}\n  token_file: " + token + "\n")
    for path in ("/status", "/metrics", "/nowhere"):
        st, hdrs, _ = request(px.admin, "GET", path)
        assert st == 401 and hdrs["www-authenticate"] == ["Bearer"], (path, st, hdrs)
        st, _, _ = request(px.admin, "GET", path, headers={"Authorization": "Bearer wrong"})
        assert st == 401
        st, _, _ = request(px.admin, "GET", path, headers={"Authorization": secret})
        assert st == 401
        st, _, _ = request(px.admin, "GET", path,
                           headers={"Authorization": "Bearer " + secret + "x"})
        assert st == 401
    # a 401 ends the connection: no second guess on it, no admin slot held
    out = raw(px.admin, b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer a\r\n\r\n"
              b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer b\r\n\r\n")
    assert out.count(b"HTTP/1.1 401") == 1 and b"Connection: close" in out, out
    st, _, body = request(px.admin, "GET", "/status",
                          headers={"Authorization": "Bearer " + secret})
    assert st == 200 and b'"pools"' in body
    st, _, body = request(px.admin, "GET", "/metrics",
                          headers={"Authorization": "Bearer " + secret})
    assert st == 200 and b"accelnet_backend_up" in body
    env.stop(px)
    assert secret not in env.log(px)
