"""An idle connection gives its read buffer back (h1.c run_head, h2.c h2_read): clients that
send in pieces, with pauses between and inside requests, on plain, TLS and HTTP/2 connections,
so that the buffer is given back and taken again many times in one connection's life. Nothing
sent may be lost, reordered or answered twice, and once they all sit idle no buffer is lent."""

import random
import socket
import ssl
import threading
import time

from harness import (echo_backend, metrics_text, pool_yaml, prom_samples, read_until,
                     wait_until)
from test_h2 import H2Client
from test_tls import _tls_proxy

CONNS = 12
ROUNDS = 6


def _lent(admin):
    return prom_samples(metrics_text(admin))[("accelnet_buffer_bytes", ())]


def _responses(s, n, got=b""):
    """Read <n> responses (each with a Content-Length) from <s>: their bodies, and what is left."""
    bodies = []
    while len(bodies) < n:
        got = read_until(s, lambda b: b"\r\n\r\n" in b, got)
        head, rest = got.split(b"\r\n\r\n", 1)
        if head.startswith(b"HTTP/1.1 100"):
            got = rest
            continue
        length = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v)
        assert head.startswith(b"HTTP/1.1 200"), head
        got = read_until(s, lambda b: len(b) >= length, rest)
        bodies.append(got[:length])
        got = got[length:]
    return bodies, got


def _send_in_pieces(s, data, rnd):
    """<data> in 1 to 4 pieces, with short pauses between (the proxy reads each alone)."""
    cuts = sorted(rnd.sample(range(1, len(data)), min(len(data) - 1, rnd.randint(0, 3))))
    last = 0
    for c in cuts + [len(data)]:
        s.sendall(data[last:c])
        last = c
        time.sleep(rnd.choice((0, 0.005, 0.03)))


def _h1_client(sock_fn, seed, errors):
    rnd = random.Random(seed)
    try:
        s = sock_fn()
        with s:
            for r in range(ROUNDS):
                reqs, tags = [], []
                for k in range(rnd.randint(1, 3)):  # pipelined
                    tag = f"/c{seed}-r{r}-k{k}"
                    if rnd.random() < 0.4:
                        body = (tag * rnd.randint(1, 40)).encode()
                        expect = b"Expect: 100-continue\r\n" if rnd.random() < 0.5 else b""
                        reqs.append(b"POST %s HTTP/1.1\r\nHost: t\r\n%sContent-Length: %d\r\n\r\n%s"
                                    % (tag.encode(), expect, len(body), body))
                    else:
                        reqs.append(b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % tag.encode())
                    tags.append(tag.encode())
                _send_in_pieces(s, b"".join(reqs), rnd)
                bodies, left = _responses(s, len(reqs))
                assert not left, left
                for tag, body in zip(tags, bodies):
                    line = body.split(b"\r\n", 1)[0]
                    assert b" " + tag + b" " in line, (tag, line)
                time.sleep(rnd.choice((0, 0.02, 0.15)))  # idle: the buffer goes back
    except Exception as e:  # noqa: BLE001 - reported by the test's thread
        errors.append(f"client {seed}: {e!r}")


def _run_clients(sock_fn):
    errors = []
    ts = [threading.Thread(target=_h1_client, args=(sock_fn, i, errors)) for i in range(CONNS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors, errors


def _hold_idle(sock_fn, n=4):
    """<n> connections that each had one request answered, left open and idle."""
    held = []
    for i in range(n):
        s = sock_fn()
        s.sendall(b"GET /idle%d HTTP/1.1\r\nHost: t\r\n\r\n" % i)
        _responses(s, 1)
        held.append(s)
    return held


def test_h1_pieces_pipelining_and_pauses_lose_nothing(env):
    be = echo_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]))

    def plain():
        return socket.create_connection(("127.0.0.1", px.port), timeout=20)

    _run_clients(plain)
    held = _hold_idle(plain)
    wait_until(lambda: _lent(px.admin) == 0, "no buffer lent while the connections are idle")
    for s in held:
        s.close()


def test_tls_pieces_pipelining_and_pauses_lose_nothing(env):
    be = echo_backend(env)
    p, tport, certs = _tls_proxy(env, be.port)
    ctx = ssl.create_default_context(cafile=certs["ec"][0])

    def tls():
        raw = socket.create_connection(("127.0.0.1", tport), timeout=20)
        return ctx.wrap_socket(raw, server_hostname="localhost")

    _run_clients(tls)


def _h2_client(port, seed, errors):
    rnd = random.Random(seed)
    try:
        c = H2Client(port)
        try:
            for r in range(ROUNDS):
                sids = []
                for k in range(rnd.randint(1, 3)):
                    sid = c.conn.get_next_available_stream_id()
                    body = b"x" * rnd.choice((0, 10, 5000))
                    c.conn.send_headers(sid, [(":method", "POST" if body else "GET"),
                                              (":path", f"/c{seed}-r{r}-k{k}"),
                                              (":authority", "t"), (":scheme", "http")],
                                        end_stream=not body)
                    if body:
                        c.conn.send_data(sid, body, end_stream=True)
                    sids.append(sid)
                data = c.conn.data_to_send()
                # frames cut anywhere, even a byte at a time at the start of a round
                if rnd.random() < 0.3:
                    for i in range(min(len(data), 24)):
                        c.sock.sendall(data[i:i + 1])
                        time.sleep(0.002)
                    data = data[24:]
                if data:
                    _send_in_pieces(c.sock, data, rnd)
                c.wait(lambda: all(x in c.ended or x in c.reset for x in sids))
                for sid in sids:
                    assert c.status.get(sid) == 200, (sid, c.status.get(sid), c.reset.get(sid))
                    line = c.body.get(sid, b"").split(b"\r\n", 1)[0]
                    assert f"/c{seed}-r{r}-k{sids.index(sid)} ".encode() in line, line
                time.sleep(rnd.choice((0, 0.02, 0.15)))
        finally:
            c.close()
    except Exception as e:  # noqa: BLE001
        errors.append(f"h2 client {seed}: {e!r}")


def test_h2c_frames_in_pieces_and_pauses_lose_nothing(env):
    be = echo_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]))
    errors = []
    ts = [threading.Thread(target=_h2_client, args=(px.port, i, errors)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors, errors
    wait_until(lambda: _lent(px.admin) == 0, "no buffer lent once the clients are gone")
