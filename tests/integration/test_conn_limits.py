"""Connection-level limits against abuse (issue 12): request-target length, requests per
connection, connections per client address."""

import socket

from harness import free_port, pool_yaml, read_all, request, sim_stats, wait_until


def _proxy(env, limits):
    sim = env.sim("s", latency_ms=0, token_ms=0, tokens=1)
    return env.proxy("pools:\n" + pool_yaml("p", [sim.port]), extra=f"limits: {limits}\n")


def test_long_request_targets_get_414(env):
    p = _proxy(env, "{max_uri_bytes: 2048}")
    st, _, _ = request(p.port, "GET", "/" + "a" * 2000)
    assert st == 200
    s = socket.create_connection(("127.0.0.1", p.port), timeout=10)
    s.sendall(b"GET /" + b"a" * 3000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    got = read_all(s)
    assert got.startswith(b"HTTP/1.1 414 "), got[:60]
    assert b"Connection: close" in got


def test_requests_per_connection_are_capped(env):
    p = _proxy(env, "{max_requests_per_connection: 3}")
    s = socket.create_connection(("127.0.0.1", p.port), timeout=10)
    # three pipelined requests and a fourth: the third answer closes the connection
    s.sendall(b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\n" * 4)
    got = read_all(s)
    assert got.count(b"HTTP/1.1 200 OK") == 3, got.count(b"HTTP/1.1 200 OK")
    heads = [h for h in got.split(b"HTTP/1.1 200 OK")[1:]]
    assert b"Connection: close" not in heads[0].split(b"\r\n\r\n")[0]
    assert b"Connection: close" in heads[2].split(b"\r\n\r\n")[0]


def test_connections_per_address_are_capped(env):
    p = _proxy(env, "{max_connections_per_ip: 3}")
    held = []

    def hold_three():  # the harness's own readiness probe may still be counted at first
        for s in held:
            s.close()
        held[:] = [socket.create_connection(("127.0.0.1", p.port), timeout=10) for _ in range(3)]
        try:
            for s in held:  # each is really accepted: it is answered
                s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                if not s.recv(65536).startswith(b"HTTP/1.1 200"):
                    return False
        except ConnectionError:
            return False
        return True
    wait_until(hold_three, "three connections from one address")
    extra = socket.create_connection(("127.0.0.1", p.port), timeout=10)
    extra.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert read_all(extra) == b""  # refused: closed without an answer
    held[0].close()
    # once one closes, the address may connect again
    def again():
        s = socket.create_connection(("127.0.0.1", p.port), timeout=10)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        ok = read_all(s).startswith(b"HTTP/1.1 200")
        s.close()
        return ok
    wait_until(again, "a connection after one closed")
