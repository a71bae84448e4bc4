"""The response cache (docs/cache.md) for HTTP/2 clients: a response stored from one is
replayed to others as over HTTP/1.1 (Cache-Status, Age, the stored fields), HEAD, a
conditional's 304 and a Range's 206 answered from the object, and a client waiting on a
fill under way reads the body as it fills. Before, the cache was never consulted for
HTTP/2 requests: every one went to the origin."""

import json
import os
import select
import socket
import threading
import time
import urllib.request

from test_cache import Origin, Reply, cached, get, start
from test_h2 import H2Client
from harness import wait_until


def _get(c, path, method="GET", headers=()):
    sid = c.send(method, path, headers=list(headers))
    c.wait(lambda: sid in c.ended or sid in c.reset)
    assert sid not in c.reset, c.reset
    return c.status[sid], c.headers[sid], c.body.get(sid, b"")


def test_h2_miss_then_hits_head_304_and_range(env):
    o = Origin(env)
    body = bytes(range(256)) * 40
    o.paths["/a"] = cached(body, ("ETag", '"a1"'), ("Content-Type", "text/plain"))
    px = start(env, o)
    c = H2Client(px.port)
    st, h, b = _get(c, "/a")
    assert st == 200 and b == body and h["cache-status"] == "accelnet; fwd=miss; stored", h
    for _ in range(3):
        st, h, b = _get(c, "/a")
        assert st == 200 and b == body, (st, len(b))
        assert h["cache-status"].startswith("accelnet; hit"), h
        assert h["etag"] == '"a1"' and h["content-length"] == str(len(body)), h
        assert h["age"].isdigit() and h["x-request-id"], h
        assert "connection" not in h and "transfer-encoding" not in h, h
    st, h, b = _get(c, "/a", "HEAD")
    assert st == 200 and b == b"" and h["content-length"] == str(len(body)), h
    st, h, b = _get(c, "/a", headers=[("if-none-match", '"a1"')])
    assert st == 304 and b == b"" and h["cache-status"].startswith("accelnet; hit"), h
    st, h, b = _get(c, "/a", headers=[("range", "bytes=10-19")])
    assert st == 206 and b == body[10:20] and h["content-range"] == f"bytes 10-19/{len(body)}"
    st, h, b = _get(c, "/a", headers=[("range", "bytes=99999-")])
    assert st == 416 and b == b"", h
    c.close()
    assert o.count("/a") == 1 and o.count("/a", "HEAD") == 0


def test_h2_waiters_follow_a_fill_as_it_is_generated(env):
    o = Origin(env)
    gate = threading.Event()
    env.on_cleanup.append(gate.set)
    events = [b"data: %d\n\n" % i for i in range(20)]
    o.paths["/gen"] = lambda req: Reply(headers=[("Cache-Control", "max-age=60"),
                                                 ("Content-Type", "text/event-stream")],
                                        chunks=events, mid_gate=gate)
    px = start(env, o, workers=2)
    c = H2Client(px.port)
    first = c.send("GET", "/gen")
    c.wait(lambda: b"data: 0\n\n" in c.body.get(first, b""))
    # a second client and a second stream wait on the fill, and see its first event
    d = H2Client(px.port)
    waiters = [c.send("GET", "/gen"), d.send("GET", "/gen")]
    c.wait(lambda: b"data: 0\n\n" in c.body.get(waiters[0], b""))
    d.wait(lambda: b"data: 0\n\n" in d.body.get(waiters[1], b""))
    assert o.count("/gen") == 1
    gate.set()
    for cl, sid in ((c, first), (c, waiters[0]), (d, waiters[1])):
        cl.wait(lambda: sid in cl.ended or sid in cl.reset)
        assert sid not in cl.reset and cl.body[sid] == b"".join(events), cl.body[sid][-40:]
    st, h, b = _get(d, "/gen")
    assert st == 200 and b == b"".join(events) and h["cache-status"].startswith("accelnet; hit")
    c.close()
    d.close()
    assert o.count("/gen") == 1


def test_h2_herd_held_before_the_head_makes_one_origin_request(env):
    o = Origin(env)
    gate = threading.Event()
    env.on_cleanup.append(gate.set)
    o.paths["/slow"] = lambda req: Reply(headers=[("Cache-Control", "max-age=60")],
                                         body=b"s" * 70000, gate=gate)
    px = start(env, o, workers=2)
    clients = [H2Client(px.port) for _ in range(3)]
    sids = [(c, c.send("GET", "/slow")) for c in clients for _ in range(3)]
    from harness import wait_until
    wait_until(lambda: o.count("/slow") == 1, "the first request at the origin")
    gate.set()
    # every client reads as its bytes come, as a real one does: waiting on one client at a time
    # left the others' windows shut, and the one whose stream made the fill then held it back
    # for everyone until timeouts.send_ms cut it (seen under load: the waiters reset)
    done = lambda: all(sid in c.ended or sid in c.reset for c, sid in sids)  # noqa: E731
    deadline = time.monotonic() + 60
    while not done() and time.monotonic() < deadline:
        readable, _, _ = select.select([c.sock for c in clients], [], [], 1)
        for c in clients:
            if c.sock in readable:
                c.pump()
    for c, sid in sids:
        assert sid not in c.reset and c.status.get(sid) == 200, (c.status, c.reset)
        assert c.body[sid] == b"s" * 70000, len(c.body[sid])
    for c in clients:
        c.close()
    assert o.count("/slow") == 1


def _in_flight(px):
    return json.loads(urllib.request.urlopen(
        f"http://127.0.0.1:{px.admin}/debug/requests").read())["in_flight_count"]


def _cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def test_h2_streaming_waiter_on_a_fill_does_not_spin(env):
    """A streaming GET (routes.sse_heartbeat_ms, Accept: text/event-stream) waiting on another's
    fill for the cached head: its heartbeat came due, deadline_fire() saw the wait first and
    put nothing off, and the worker's timer fired at once, again and again, until the fill's
    head came (a core busy per waiter: about half a second of CPU a second on a busy machine,
    against none). Now no heartbeat is due while it waits (the wait is routes.cache.wait_ms at
    most), and it gets the cache's answer. HTTP/1.1 waiters spun the same way."""
    o = Origin(env)
    gate = threading.Event()
    env.on_cleanup.append(gate.set)
    events = [b"data: %d\n\n" % i for i in range(3)]
    o.paths["/ev"] = lambda req: Reply(headers=[("Cache-Control", "max-age=60"),
                                                ("Content-Type", "text/event-stream")],
                                       chunks=events, gate=gate)
    px = start(env, o, route_cache="true, sse_heartbeat_ms: 20")
    c = H2Client(px.port)
    accept = [("accept", "text/event-stream")]
    first = c.send("GET", "/ev", headers=accept)
    c.wait(lambda: b": waiting" in c.body.get(first, b""))  # the fill waits on its origin
    waiter = c.send("GET", "/ev", headers=accept)
    h1 = socket.create_connection(("127.0.0.1", px.port), timeout=20)
    h1.sendall(b"GET /ev HTTP/1.1\r\nHost: test\r\nAccept: text/event-stream\r\n\r\n")
    wait_until(lambda: _in_flight(px) == 3, "two waiters on the fill")
    before = _cpu_s(px.pid)
    time.sleep(1.5)  # the waiters wait; the proxy has nothing to do meanwhile
    spent = _cpu_s(px.pid) - before
    gate.set()
    assert spent < 0.25, f"the proxy spent {spent:.2f}s of CPU while its waiters waited"
    for sid in (first, waiter):
        c.wait(lambda: sid in c.ended or sid in c.reset)
        assert sid not in c.reset, c.reset
    assert c.body[waiter] == b"".join(events) and c.status[waiter] == 200, c.body[waiter]
    assert c.headers[waiter]["cache-status"].startswith("accelnet;"), c.headers[waiter]
    got = b""
    while b"data: 2\n\n" not in got:
        got += h1.recv(65536)
    assert got.startswith(b"HTTP/1.1 200") and b"Cache-Status" in got, got[:300]
    c.close()
    h1.close()
    assert o.count("/ev") == 1


def test_h2_hit_logs_the_bytes_sent_as_a_miss_does(env):
    """The access log's bytes_out of an HTTP/2 answer is its body (the head goes as HPACK,
    counted by no one): a hit counted the HTTP/1.1 head it was written as too (194 bytes more
    than the same answer relayed, and than were sent)."""
    o = Origin(env)
    body = b"b" * 1000
    o.paths["/l"] = cached(body)
    log = os.path.join(env.dir, "access.log")
    px = start(env, o, extra=f"access_log: {{path: {log}, format: json}}\n")
    c = H2Client(px.port)
    for _ in range(2):
        st, _, b = _get(c, "/l")
        assert st == 200 and b == body
    c.close()

    def lines():
        with open(log) as f:
            return [json.loads(ln) for ln in f if ln.strip()]
    wait_until(lambda: len(lines()) == 2, "two lines in the access log")
    got = [(r["cache"], r["bytes_out"]) for r in lines()]
    assert got == [("miss", len(body)), ("hit", len(body))], got


def test_h2_stale_if_error_after_heartbeats_continues_the_event_stream(env):
    """A streaming GET given heartbeats (the proxy's own event-stream head) while its origin
    thinks, then answered from the cache in the origin's place (stale-if-error on a 503):
    the cached head was submitted on the stream as a second HEADERS, a protocol error that
    ended the client's connection (Python h2: "Trailers must have END_STREAM set"). Now the
    cached event stream's body continues the stream the proxy began."""
    o = Origin(env)
    o.paths["/sie"] = cached(b"data: stale\n\n", ("Age", "100"),
                             ("Content-Type", "text/event-stream"),
                             cc="max-age=10, stale-if-error=600")
    px = start(env, o, route_cache="true, sse_heartbeat_ms: 20")
    assert get(px, "/sie", headers={"Host": "test"})[0] == 200
    gate = threading.Event()
    env.on_cleanup.append(gate.set)
    o.paths["/sie"] = lambda req: Reply(503, [("Content-Type", "text/plain")], b"down", gate=gate)
    c = H2Client(px.port)
    sid = c.send("GET", "/sie", headers=[("accept", "text/event-stream")])
    c.wait(lambda: b": waiting" in c.body.get(sid, b""))
    gate.set()
    c.wait(lambda: sid in c.ended or sid in c.reset)
    assert sid not in c.reset and c.status[sid] == 200, (c.status, c.reset)
    assert c.body[sid].endswith(b": waiting\n\ndata: stale\n\n"), c.body[sid]
    c.close()


def test_h2_stale_if_error_when_the_origin_is_gone(env):
    """stale-if-error when the proxy itself answers 5xx (the origin refuses connections): the
    HTTP/2 codec's own answers never asked the cache, so an HTTP/2 client got 502 where an
    HTTP/1.1 client got the stale copy."""
    o = Origin(env)
    o.paths["/sie"] = cached(b"stale but there", ("Age", "100"),
                             cc="max-age=10, stale-if-error=600")
    px = start(env, o)
    assert get(px, "/sie", headers={"Host": "test"})[2] == b"stale but there"
    o.close()  # the origin gone entirely: connections refused
    c = H2Client(px.port)
    st, h, b = _get(c, "/sie")
    assert st == 200 and b == b"stale but there", (st, b)
    assert h["cache-status"].endswith("; detail=stale-if-error"), h
    c.close()
