"""A cache fill goes at the origin's pace, not its first client's (docs/cache.md, "Coalescing"):
the response being stored is read into the object whatever the client whose request made the
fill does, and that client reads the object as the waiters do. A filler client that stops
reading holds no waiter (before: every waiter followed it, and timeouts.send_ms then cut them
all); one that leaves mid-body leaves the fill to finish without it, stored (before: the fill
failed and every waiter that had begun was cut). A response that turns out larger than
cache.max_object mid-way still reaches its own client whole. Over HTTP/1.1 and HTTP/2.

Where the filler stops reading, the body (8 MiB) is larger than what the sockets between the
origin and a client that does not read held (the kernel's buffers on both connections: 3 MiB
went before the origin stopped, over HTTP/1.1), so before the change the origin could not finish
while the filler's client read nothing."""

import selectors
import socket
import threading

import h2.events

from harness import wait_until
from test_cache import Origin, Reply, host, is_hit, parse_response, start
from test_h2 import H2Client
from test_h2_cache import _in_flight

BIG = (bytes(range(251)) * (8 * 1024 * 1024 // 251 + 1))[:8 * 1024 * 1024]  # i % 251 at i
SMALL = BIG[:400000]  # where the filler leaves: held by the origin, no size needed
CACHE = "{memory: 128MiB, shards: 2, max_object: 32MiB}"
# a client that does not read is never cut in these tests: what the others get is all that
# matters
SLOW_OK = "timeouts: {send_ms: 600000, between_bytes_ms: 600000}\n"


class Reader(H2Client):
    """An HTTP/2 client whose bodies grow in place (a 16 MiB body added frame by frame to a
    bytes object would copy it all again each time)."""

    def pump(self):
        data = self.sock.recv(1 << 20)
        if not data:
            raise ConnectionError("the proxy closed the connection")
        for e in self.conn.receive_data(data):
            if isinstance(e, h2.events.ResponseReceived):
                hs = {k.decode(): v.decode() for k, v in e.headers}
                self.status[e.stream_id] = int(hs[":status"])
                self.headers[e.stream_id] = hs
            elif isinstance(e, h2.events.DataReceived):
                self.body.setdefault(e.stream_id, bytearray()).extend(e.data)
                self.conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
            elif isinstance(e, h2.events.StreamEnded):
                self.ended.add(e.stream_id)
            elif isinstance(e, h2.events.StreamReset):
                self.reset[e.stream_id] = e.error_code
        self.flush()


def _get1(px, path, timeout=20):
    """One HTTP/1.1 request on a connection of its own, sent: the socket."""
    s = socket.create_connection(("127.0.0.1", px.port), timeout=timeout)
    s.sendall(b"GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path, host(px)))
    return s


def _read_to_close(s):
    out = bytearray()
    while True:
        b = s.recv(1 << 20)
        if not b:
            return bytes(out)
        out += b


def _read_all_at_once(socks):
    """Read every socket to its close as its bytes come; what each read."""
    sel = selectors.DefaultSelector()
    got = [bytearray() for _ in socks]
    for i, s in enumerate(socks):
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
    left = len(socks)
    while left:
        events = sel.select(20)
        assert events, f"{left} answers unfinished"
        for key, _ in events:
            d = key.fileobj.recv(1 << 20)
            if d:
                got[key.data] += d
            else:
                sel.unregister(key.fileobj)
                key.fileobj.close()
                left -= 1
    sel.close()
    return [bytes(g) for g in got]


def _h2_done(c, sid):
    c.wait(lambda: sid in c.ended or sid in c.reset)
    assert sid not in c.reset, c.reset
    return c.status[sid], c.headers[sid], bytes(c.body.get(sid, b""))


def _held_origin(env, body=BIG, **reply):
    o = Origin(env)
    gate = threading.Event()
    env.on_cleanup.append(gate.set)
    o.paths["/big"] = lambda req: Reply(headers=[("Cache-Control", "max-age=600")], body=body,
                                        **{k: gate for k in reply.get("gates", ("gate",))},
                                        mid_at=reply.get("mid_at", 0))
    return o, gate


def test_http11_filler_that_stops_reading_holds_no_waiter(env):
    o, gate = _held_origin(env)
    px = start(env, o, cache=CACHE, extra=SLOW_OK)
    filler = socket.socket()
    filler.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # and it never reads
    filler.settimeout(20)
    filler.connect(("127.0.0.1", px.port))
    filler.sendall(b"GET /big HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host(px))
    wait_until(lambda: o.count("/big") == 1, "the filler's request at the origin")
    waiters = [_get1(px, b"/big") for _ in range(5)]
    wait_until(lambda: _in_flight(px) == 6, "five waiters on the fill")
    gate.set()
    for s in waiters:  # each whole while the filler has read nothing
        st, h, b = parse_response(_read_to_close(s))
        assert st == 200 and b == BIG and "collapsed" in h["cache-status"][0], h
        s.close()
    st, h, b = parse_response(_read_to_close(filler))  # and the filler's own is whole too
    assert st == 200 and b == BIG and h["cache-status"] == ["accelnet; fwd=miss; stored"], h
    assert o.count("/big") == 1


def test_http11_filler_that_stops_reading_is_cut_alone(env):
    o, gate = _held_origin(env)
    px = start(env, o, cache=CACHE, extra="timeouts: {send_ms: 2000}\n")
    filler = socket.socket()
    filler.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    filler.settimeout(20)
    filler.connect(("127.0.0.1", px.port))
    filler.sendall(b"GET /big HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host(px))
    wait_until(lambda: o.count("/big") == 1, "the filler's request at the origin")
    waiters = [_get1(px, b"/big") for _ in range(3)]
    wait_until(lambda: _in_flight(px) == 4, "three waiters on the fill")
    gate.set()
    for g in _read_all_at_once(waiters):  # the others, read as their bytes come: whole
        st, h, b = parse_response(g)
        assert st == 200 and b == BIG, (st, len(b))
    wait_until(lambda: _in_flight(px) == 0, "the filler cut (timeouts.send_ms)")
    try:
        got = _read_to_close(filler)
    except ConnectionResetError:
        got = b""
    assert len(got) < len(BIG), len(got)  # the filler itself was cut
    st, h, b = parse_response(_read_to_close(_get1(px, b"/big")))
    assert st == 200 and b == BIG and is_hit(h), h
    assert o.count("/big") == 1


def test_http11_filler_that_leaves_mid_body_leaves_the_fill_to_finish(env):
    o, gate = _held_origin(env, body=SMALL, gates=("mid_gate",), mid_at=100000)
    px = start(env, o, cache=CACHE)
    filler = _get1(px, b"/big")
    head = b""
    while b"\r\n\r\n" not in head:
        head += filler.recv(65536)
    waiters = [_get1(px, b"/big") for _ in range(5)]
    wait_until(lambda: _in_flight(px) == 6, "five waiters on the fill")
    filler.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    filler.close()  # a reset, while the origin holds the rest of the body
    wait_until(lambda: _in_flight(px) < 6, "the filler's exchange to end")
    gate.set()
    for s in waiters:
        st, h, b = parse_response(_read_to_close(s))
        assert st == 200 and b == SMALL, (st, len(b))
        s.close()
    s = _get1(px, b"/big")
    st, h, b = parse_response(_read_to_close(s))
    assert st == 200 and b == SMALL and is_hit(h), h
    assert o.count("/big") == 1


def test_h2_filler_that_stops_reading_holds_no_waiter(env):
    o, gate = _held_origin(env)
    px = start(env, o, cache=CACHE, extra=SLOW_OK)
    filler = H2Client(px.port, window=65535)  # never acknowledges: its window shuts at 64 KiB
    filler.send("GET", "/big")
    wait_until(lambda: o.count("/big") == 1, "the filler's request at the origin")
    waiters = Reader(px.port)
    sids = [waiters.send("GET", "/big") for _ in range(5)]
    wait_until(lambda: _in_flight(px) == 6, "five waiters on the fill")
    gate.set()
    for sid in sids:
        st, h, b = _h2_done(waiters, sid)
        assert st == 200 and b == BIG and "collapsed" in h["cache-status"], (st, len(b), h)
    waiters.close()
    filler.close()
    assert o.count("/big") == 1


def test_h2_filler_that_leaves_mid_body_leaves_the_fill_to_finish(env):
    o, gate = _held_origin(env, body=SMALL, gates=("mid_gate",), mid_at=100000)
    px = start(env, o, cache=CACHE)
    filler = Reader(px.port)
    first = filler.send("GET", "/big")
    filler.wait(lambda: len(filler.body.get(first, b"")) > 0)
    waiters = Reader(px.port)
    sids = [waiters.send("GET", "/big") for _ in range(5)]
    wait_until(lambda: _in_flight(px) == 6, "five waiters on the fill")
    filler.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                           b"\x01\x00\x00\x00\x00\x00\x00\x00")
    filler.close()
    wait_until(lambda: _in_flight(px) < 6, "the filler's exchange to end")
    gate.set()
    for sid in sids:
        st, h, b = _h2_done(waiters, sid)
        assert st == 200 and b == SMALL, (st, len(b))
    st, h, b = _h2_done(waiters, waiters.send("GET", "/big"))
    assert st == 200 and b == SMALL and h["cache-status"].startswith("accelnet; hit"), h
    waiters.close()
    assert o.count("/big") == 1


def _over_max_object(env):
    """An origin whose chunked answer passes cache.max_object (64 KiB) in its second chunk,
    each chunk a write of its own: the fill stops mid-body, mid-chunk."""
    o = Origin(env)
    chunks = [b"a" * 40000, b"b" * 30001, b"c" * 70000, b"d" * 5]
    o.paths["/over"] = lambda req: Reply(headers=[("Cache-Control", "max-age=60")],
                                         chunks=chunks)
    return o, b"".join(chunks), start(env, o, cache="{memory: 4MiB, max_object: 64KiB}")


def test_http11_filler_of_a_response_past_max_object_gets_every_byte(env):
    o, body, px = _over_max_object(env)
    for _ in range(2):  # never stored: the second is a fill that stops too
        st, h, b = parse_response(_read_to_close(_get1(px, b"/over")))
        assert st == 200 and b == body, (st, len(b), b[-10:])
        assert h["transfer-encoding"] == ["chunked"] and 'detail="too large"' not in h, h
    assert o.count("/over") == 2


def test_h2_filler_of_a_response_past_max_object_gets_every_byte(env):
    o, body, px = _over_max_object(env)
    c = Reader(px.port)
    for _ in range(2):
        st, h, b = _h2_done(c, c.send("GET", "/over"))
        assert st == 200 and b == body, (st, len(b), b[-10:])
    c.close()
    assert o.count("/over") == 2


def test_a_stalled_origin_is_not_handed_on_to_finish_the_fill(env):
    """The origin sends the head and the body's start, then nothing: the filler's exchange is
    cut at timeouts.between_bytes_ms for the origin's stall, and its fill fails there, so that
    the next request goes to the origin afresh. Before, the stalled connection was handed on
    to finish the fill without a client (as for a filler that left), holding the backend's
    slot another between_bytes_ms, and the next request collapsed onto that doomed fill, cut
    off in its turn with the same few bytes (the origin never asked again)."""
    o, gate = _held_origin(env, body=SMALL, gates=("mid_gate",), mid_at=1000)
    px = start(env, o, cache=CACHE, extra="timeouts: {between_bytes_ms: 1000}\n")
    first = _read_to_close(_get1(px, b"/big"))
    assert first.endswith(SMALL[:1000]), first[-100:]  # cut after the start
    second = _get1(px, b"/big")
    wait_until(lambda: o.count("/big") == 2, "the next request at the origin")
    second.close()
    gate.set()
