"""DDoS limits (issue 12): each test plays its attack against the real binary -- too many
header fields, a connection flood from one address, a client that does not read its
response, a flood of slow connections past the buffer budget."""

SERIAL = True  # load, timing or fixed ports: run alone under run.py -j

import re
import socket
import threading

from harness import read_all, request, status, wait_until


def _metric(admin, name, **labels):
    """The value of Prometheus series <name>{labels} (0 when absent)."""
    _, _, text = request(admin, "GET", "/metrics")
    for line in text.decode().splitlines():
        m = re.match(r"^(\w+)(\{[^}]*\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    return 0.0


def _inflight(px):
    return status(px.admin)["pools"][0]["backends"][0]["inflight"]


def _connect_from(port, source):
    """A connection to the proxy from loopback address <source> (its own client key)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(15)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def test_too_many_header_fields_get_431(env):
    sim = env.sim("s", latency_ms=0, token_ms=0, tokens=1)
    px = env.proxy("pools:\n  - name: p\n    backends:\n"
                   f"      - {{address: 127.0.0.1:{sim.port}}}\n",
                   extra="limits: {max_headers: 10}\n")
    fields = "".join(f"X-F{i}: v\r\n" for i in range(9))  # with Host: 10 fields
    st = raw_status(px.port, f"GET / HTTP/1.1\r\nHost: x\r\n{fields}\r\n")
    assert st == b"HTTP/1.1 200 OK", st
    fields = "".join(f"X-F{i}: v\r\n" for i in range(10))  # 11 fields
    s = socket.create_connection(("127.0.0.1", px.port), timeout=15)
    s.sendall(f"GET / HTTP/1.1\r\nHost: x\r\n{fields}\r\n".encode())
    out = read_all(s)
    s.close()
    assert out.startswith(b"HTTP/1.1 431 "), out[:80]
    assert b"Connection: close" in out


def raw_status(port, text):
    s = socket.create_connection(("127.0.0.1", port), timeout=15)
    try:
        s.sendall(text.encode())
        got = b""
        while b"\r\n" not in got:
            b = s.recv(65536)
            assert b, got
            got += b
        return got.split(b"\r\n")[0]
    finally:
        s.close()


def test_accept_rate_per_ip_closes_a_connection_flood(env):
    sim = env.sim("s", latency_ms=0, token_ms=0, tokens=1)
    px = env.proxy("pools:\n  - name: p\n    backends:\n"
                   f"      - {{address: 127.0.0.1:{sim.port}}}\n",
                   extra="limits: {accept_rate_per_ip: 2/h}\n")
    # 2/h: a burst of one, then one per half hour. The harness's readiness probe came from
    # 127.0.0.1; the flood comes from 127.0.0.2, a client address of its own.
    s = _connect_from(px.port, "127.0.0.2")
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert read_all(s).startswith(b"HTTP/1.1 200 OK")
    s.close()
    for _ in range(5):
        s = _connect_from(px.port, "127.0.0.2")
        try:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert read_all(s) == b""  # closed as accepted, without an answer
        s.close()
    shed = _metric(px.admin, "accelnet_listener_shed_total", limit="accept_rate_per_ip")
    assert shed == 5, shed
    # another address is not held back by that one's flood
    s = _connect_from(px.port, "127.0.0.3")
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert read_all(s).startswith(b"HTTP/1.1 200 OK")
    s.close()


def test_slow_reader_is_cut_after_send_ms_and_frees_its_slot(env):
    # one slot; a response of about 10 MB, far more than the proxy and the sockets buffer
    sim = env.sim("s", latency_ms=0, token_ms=0, tokens=1000000, slots=1)
    req = b'{"prompt": "hi"}'
    px = env.proxy("pools:\n  - name: p\n    backends:\n"
                   f"      - {{address: 127.0.0.1:{sim.port}, max_concurrency: 1}}\n"
                   "    queue: {max: 10, timeout_ms: 60000}\n",
                   extra="timeouts: {send_ms: 1000, between_bytes_ms: 600000}\n")
    slow = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.settimeout(30)
    slow.connect(("127.0.0.1", px.port))
    slow.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                 % (len(req), req))  # and never read
    wait_until(lambda: _inflight(px) == 1, "the slow reader's request to take the slot")
    second = {}

    def other():
        second["r"] = request(px.port, "POST", "/v1/completions", body=req, timeout=60)

    t = threading.Thread(target=other)
    t.start()
    t.join(60)
    assert not t.is_alive()
    st, hdrs, body = second["r"]
    assert st == 200, st
    assert len(body) == int(hdrs["content-length"][0]) > 9_000_000
    got = read_all(slow)  # the proxy closed it: what the sockets held, then the end
    slow.close()
    assert len(got) < len(body), len(got)
    wait_until(lambda: _inflight(px) == 0, "the slot to be free")


def test_buffer_budget_sheds_new_connections_and_old_ones_complete(env):
    sim = env.sim("s", latency_ms=0, token_ms=0, tokens=1)
    # buffers of max_header_bytes + 1 KiB (33 KiB, 36 KiB in pages): three pass 100 KiB
    px = env.proxy("pools:\n  - name: p\n    backends:\n"
                   f"      - {{address: 127.0.0.1:{sim.port}}}\n",
                   workers=1, extra="limits: {max_buffer_memory: 100KiB}\n"
                   "timeouts: {header_ms: 120000}\n")  # held heads outlive a slow run
    # the harness's readiness probe may still hold a buffer for a moment: a baseline taken
    # then would drop as the next connection's buffer is lent, and never be passed
    wait_until(lambda: _metric(px.admin, "accelnet_buffer_bytes") == 0, "no buffer lent")
    held, shed = [], None
    for i in range(20):
        lent = _metric(px.admin, "accelnet_buffer_bytes")
        s = socket.create_connection(("127.0.0.1", px.port), timeout=15)
        try:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # a head that does not end (yet)
        except (BrokenPipeError, ConnectionResetError):
            pass

        def settled():  # read into a buffer (lent grew), or shed
            return (_metric(px.admin, "accelnet_buffer_bytes") > lent or
                    _metric(px.admin, "accelnet_listener_shed_total",
                            limit="max_buffer_memory") > 0)
        wait_until(settled, "the connection to be read or shed")
        if _metric(px.admin, "accelnet_listener_shed_total", limit="max_buffer_memory"):
            shed = s
            break
        held.append(s)
    assert shed is not None, "no connection was shed"
    assert len(held) >= 2, len(held)
    assert read_all(shed) == b""  # closed without an answer
    shed.close()
    # the connections already in carry on and are served
    for s in held:
        s.sendall(b"\r\n")
        out = _read_response(s)
        assert out.startswith(b"HTTP/1.1 200 OK"), out[:80]
        s.close()
    # with their buffers back, new clients are let in again
    wait_until(lambda: _metric(px.admin, "accelnet_buffer_bytes") == 0, "buffers back")
    st, _, _ = request(px.port, "GET", "/")
    assert st == 200


def _read_response(s):
    got = b""
    while b"\r\n\r\n" not in got:
        b = s.recv(65536)
        assert b, got
        got += b
    return got
