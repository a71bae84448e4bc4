"""Descriptor exhaustion (issue 10, item 4): a connection flood against a proxy with a small
descriptor limit must not be blamed on the backends, and clients that waited in the accept
backlog are answered once the flood goes away. The proxy runs under prlimit(1), so its limit
is what a `ulimit -n` in its start script would give."""

SERIAL = True  # load, timing or fixed ports: run alone under run.py -j

import http.client
import os
import socket

from harness import (BIN, ScriptedBackend, free_port, pool_yaml, port_open, read_until, request,
                     sim_stats, status, wait_until)


def _proxy_limited(env, body, nofile, workers=1):
    """Start the proxy with RLIMIT_NOFILE <nofile> ("SOFT:HARD" or one number for both)."""
    port, admin_port = free_port(), free_port()
    text = (f"workers: {workers}\nlisten:\n  - address: 127.0.0.1:{port}\n"
            f"admin:\n  address: 127.0.0.1:{admin_port}\n" + body)
    path = env.write("proxy.yaml", text)
    p = env.start(["prlimit", f"--nofile={nofile}", BIN, "proxy", "-c", path], "proxy",
                  wait_port=port)
    p.port, p.admin = port, admin_port
    wait_until(lambda: port_open(admin_port), "admin port")
    return p


def _closing_backend():
    """A backend that closes after every response, so each request needs a new connect."""
    def script(n, req):
        return (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", True)
    return ScriptedBackend(script)


def _backends(admin_port):
    return [b for pool in status(admin_port)["pools"] for b in pool["backends"]]



def _free_and_check(px, socks, late):
    """Close <socks> (what held the descriptors); then <late>, a client that waited in the
    backlog, is answered 200, and no backend was blamed."""
    for s in socks:
        s.close()
    socks.clear()
    got = read_until(late, lambda b: b"\r\n\r\n" in b)
    assert got.startswith(b"HTTP/1.1 200"), got
    for b in _backends(px.admin):
        assert b["up"] is True and b["connect_failures"] == 0, b

def test_flood_past_the_descriptor_limit_is_not_blamed_on_backends(env):
    sim = env.sim("a")
    closing = _closing_backend()
    env.on_cleanup.append(closing.close)
    # one failed check takes a backend down, and nothing brings it back during the test
    health = "{path: /health, interval_ms: 100, fall: 1, rise: 1000}"
    px = _proxy_limited(env, "pools:\n" + pool_yaml("sim", [sim.port], health=health) +
                        pool_yaml("close", [closing.port], health=health) +
                        "routes:\n  - match: {path_prefix: /close/}\n    pool: close\n"
                        "  - pool: sim\n", nofile=256)
    # a client that was there before the flood, on a kept-alive connection
    before = http.client.HTTPConnection("127.0.0.1", px.port, timeout=15)
    env.on_cleanup.append(before.close)
    for path in ("/", "/close/warm"):
        before.request("GET", path)
        r = before.getresponse()
        r.read()
        assert r.status == 200, (path, r.status)

    flood = []
    env.on_cleanup.append(lambda: [s.close() for s in flood])
    for _ in range(600):
        flood.append(socket.create_connection(("127.0.0.1", px.port), timeout=15))
    # a client that arrives during the flood: it waits in the accept backlog
    late = socket.create_connection(("127.0.0.1", px.port), timeout=15)
    env.on_cleanup.append(late.close)
    late.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")

    # the proxy has stopped accepting (at its connection cap, or out of descriptors) ...
    wait_until(lambda: "connection limit reached" in env.log(px) or
               "Too many open files" in env.log(px), "the proxy to stop accepting")
    # ... and health checks have run since (or taken a backend down)
    seen = sim_stats(sim.port)["requests"]
    wait_until(lambda: "is DOWN" in env.log(px) or sim_stats(sim.port)["requests"] >= seen + 3,
               "health checks during the flood")

    # the client from before is still served, by a kept-alive and by a new backend connection
    for path in ("/", "/close/during"):
        before.request("GET", path)
        r = before.getresponse()
        r.read()
        assert r.status == 200, (path, r.status, env.log(px)[-2000:])

    # the client that waited in the backlog is answered without anyone else connecting
    _free_and_check(px, flood, late)
    st, _, _ = request(px.port, "GET", "/close/after")
    assert st == 200
    # the config asked for more connections than 256 descriptors carry: said once, at start
    assert "limits.max_connections" in env.log(px), env.log(px)[-2000:]


def test_soft_descriptor_limit_is_raised_to_the_hard_limit(env):
    sim = env.sim("a")
    px = _proxy_limited(env, "pools:\n" + pool_yaml("sim", [sim.port]), nofile="256:4096")
    with open(f"/proc/{px.pid}/limits") as f:
        line = next(ln for ln in f if ln.startswith("Max open files"))
    assert line.split()[3:5] == ["4096", "4096"], line
    # so 600 clients at once are all served
    socks = []
    env.on_cleanup.append(lambda: [s.close() for s in socks])
    for _ in range(600):
        s = socket.create_connection(("127.0.0.1", px.port), timeout=15)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        socks.append(s)
    for s in socks:
        got = read_until(s, lambda b: b"\r\n\r\n" in b)
        assert got.startswith(b"HTTP/1.1 200"), got
    assert "Too many open files" not in env.log(px)


def test_clients_in_the_backlog_are_answered_after_descriptors_run_out(env):
    """Descriptors can run out under the connection cap (here a flood on the admin port takes
    them): accepting pauses and resumes on its own once descriptors free, and health checks
    that could not run do not take the backend down."""
    sim = env.sim("a")
    health = "{path: /health, interval_ms: 100, fall: 1, rise: 1000}"
    px = _proxy_limited(env, "pools:\n" + pool_yaml("sim", [sim.port], health=health),
                        nofile=256)
    hog = []
    env.on_cleanup.append(lambda: [s.close() for s in hog])
    for _ in range(300):
        hog.append(socket.create_connection(("127.0.0.1", px.admin), timeout=15))
    wait_until(lambda: len(os.listdir(f"/proc/{px.pid}/fd")) >= 250, "descriptors to run out")
    late = socket.create_connection(("127.0.0.1", px.port), timeout=15)
    env.on_cleanup.append(late.close)
    late.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    wait_until(lambda: "accept: Too many open files" in env.log(px), "accept to run out")
    wait_until(lambda: "skipped" in env.log(px) or "is DOWN" in env.log(px),
               "a health check while out of descriptors")
    _free_and_check(px, hog, late)


def test_a_request_that_finds_no_descriptor_waits_for_one(env):
    """A client accepted with one of the last descriptors asks for something that needs a new
    backend connection after the rest have run out (the race the backlog test above can
    lose): its request waits for a descriptor, up to timeouts.connect_ms, and is served once
    one frees; it is not answered 503, and the backend is not blamed."""
    closing = _closing_backend()
    env.on_cleanup.append(closing.close)
    px = _proxy_limited(env, "timeouts: {connect_ms: 60000}\npools:\n" +
                        pool_yaml("close", [closing.port]) + "routes:\n  - pool: close\n",
                        nofile=256)
    client = socket.create_connection(("127.0.0.1", px.port), timeout=60)
    env.on_cleanup.append(client.close)
    client.sendall(b"GET /before HTTP/1.1\r\nHost: x\r\n\r\n")
    got = read_until(client, lambda b: b"\r\n\r\nok" in b)
    assert got.startswith(b"HTTP/1.1 200"), got
    seen = closing.connections  # the backend closed that connection: the next request connects anew

    hog = []
    env.on_cleanup.append(lambda: [s.close() for s in hog])
    for _ in range(300):
        hog.append(socket.create_connection(("127.0.0.1", px.admin), timeout=15))
    wait_until(lambda: "accept: Too many open files" in env.log(px), "descriptors to run out")
    client.sendall(b"GET /during HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    wait_until(lambda: "the request waits for one to free" in env.log(px),
               "the request to wait for a descriptor")
    assert closing.connections == seen
    for s in hog:
        s.close()
    hog.clear()
    got = read_until(client, lambda b: b"\r\n\r\nok" in b)
    assert got.startswith(b"HTTP/1.1 200"), got
    assert closing.connections == seen + 1
    for b in _backends(px.admin):
        assert b["up"] is True and b["connect_failures"] == 0, b
