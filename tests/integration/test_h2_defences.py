"""HTTP/2 defences (issue 29): each attack as a client would make it, what the proxy does
(docs/http2.md, docs/security.md) and the counter it leaves,
accelnet_http2_defences_total{defence=...}. Rapid reset (CVE-2023-44487), CONTINUATION flood
(CVE-2024-27316), an HPACK bomb, SETTINGS and PING floods, a zero-window client, stream ids
running out."""

import socket
import threading
import time

import hpack

import hyperframe.frame

from harness import lenient_backend, metrics_text, pool_yaml, prom_samples, request, status, \
    wait_until
from test_h2 import H2Client, one_shot_backend
from test_h2_hostile import _hf, _raw

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
REQ = [(":method", "GET"), (":path", "/"), (":authority", "t"), (":scheme", "http")]
ENHANCE_YOUR_CALM = 11


def _defences(px, which):
    return prom_samples(metrics_text(px.admin)).get(
        ("accelnet_http2_defences_total", (("defence", which),)), 0)


def _goaway(s, timeout=10, dec=None, until=None, data=None):
    """Read frames until a GOAWAY (its error code and last stream id) or the connection ends
    (None). Statuses seen on the way are returned too: (goaway, {sid: status}). <dec>: the
    connection's HPACK decoder, kept across calls; <until>: return once that stream's status
    came; <data>: a bytearray kept across calls, holding what was read past the frame that
    ended the call (a response's HEADERS may come in the same read as the GOAWAY)."""
    dec, seen = dec or hpack.Decoder(), {}
    data = bytearray() if data is None else data
    s.settimeout(timeout)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        while len(data) >= 9:
            f, length = hyperframe.frame.Frame.parse_frame_header(memoryview(bytes(data[:9])))
            if len(data) < 9 + length:
                break
            f.parse_body(memoryview(bytes(data[9:9 + length])))
            del data[:9 + length]
            if isinstance(f, hyperframe.frame.HeadersFrame):
                seen[f.stream_id] = dict(dec.decode(bytes(f.data))).get(":status")
                if f.stream_id == until:
                    return None, seen
            if isinstance(f, hyperframe.frame.GoAwayFrame):
                return (f.error_code, f.last_stream_id), seen
        try:
            d = s.recv(65536)
        except (socket.timeout, OSError):
            return None, seen
        if not d:
            return None, seen
        data += d
    return None, seen


def _resets_or_goaway(s, n, timeout=10):
    """Read frames until <n> RST_STREAMs came (None) or a GOAWAY (its code and last id)."""
    data, resets = b"", 0
    s.settimeout(timeout)
    while resets < n:
        while len(data) >= 9:
            f, length = hyperframe.frame.Frame.parse_frame_header(memoryview(data[:9]))
            if len(data) < 9 + length:
                break
            f.parse_body(memoryview(data[9:9 + length]))
            data = data[9 + length:]
            if isinstance(f, hyperframe.frame.RstStreamFrame):
                resets += 1
            if isinstance(f, hyperframe.frame.GoAwayFrame):
                return (f.error_code, f.last_stream_id)
        if resets >= n:
            break
        try:
            d = s.recv(65536)
        except OSError:
            return None
        if not d:
            return None
        data += d
    return None


def _closed(s, timeout=10):
    s.settimeout(timeout)
    try:
        while s.recv(65536):
            pass
        return True
    except socket.timeout:
        return False
    except OSError:
        return True


def test_h2_rapid_reset_is_calmed_and_costs_the_backend_nothing(env):
    """CVE-2023-44487: streams opened and reset at once, over and over. Past
    limits.http2_max_resets a second (200) the connection gets GOAWAY ENHANCE_YOUR_CALM and closes;
    the backend sees (next to) none of those requests; others are served. (Before: nghttp2's
    own limit, 1000 resets, then GOAWAY INTERNAL_ERROR, uncounted.)"""
    be = lenient_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]))  # 200 a second by default
    s, enc = _raw(px.port)
    env.on_cleanup.append(s.close)
    burst = b"".join(_hf(enc, sid, REQ) +
                     hyperframe.frame.RstStreamFrame(sid, error_code=8).serialize()
                     for sid in range(1, 2001, 2))
    try:
        s.sendall(burst)
    except OSError:
        pass
    goaway, _ = _goaway(s)
    assert goaway is not None and goaway[0] == ENHANCE_YOUR_CALM, goaway
    assert _closed(s), "the connection stayed open after its GOAWAY"
    assert len(be.seen) <= 5, len(be.seen)
    wait_until(lambda: _defences(px, "rapid_reset") == 1, "rapid_reset counted")
    assert status(px.admin)["process"][0]["http2_defences"]["rapid_reset"] == 1
    c = H2Client(px.port, timeout=5)
    ok = c.send("GET", "/after")
    c.wait(lambda: ok in c.ended)
    assert c.status[ok] == 200
    c.close()


def test_h2_streams_the_client_makes_the_proxy_reset_count_as_resets(env):
    """The "made you reset" variant: no RST_STREAM from the client, but streams malformed so
    that the proxy resets each (an upper-case field name: PROTOCOL_ERROR). They draw on the
    same limit: past it, GOAWAY ENHANCE_YOUR_CALM. (Before: reset one by one for good.)"""
    be = lenient_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]))
    s, enc = _raw(px.port)
    env.on_cleanup.append(s.close)
    bad = REQ + [("X-Upper", "1")]
    goaway, sid = None, 1
    for _ in range(10):  # 50 at a time, within the stream limit, each reset read back
        try:
            s.sendall(b"".join(_hf(enc, sid + 2 * i, bad) for i in range(50)))
        except OSError:
            break
        sid += 100
        goaway = _resets_or_goaway(s, 50)
        if goaway is not None:
            break
    assert goaway is not None and goaway[0] == ENHANCE_YOUR_CALM, goaway
    assert not be.seen
    wait_until(lambda: _defences(px, "rapid_reset") == 1, "counted")


def test_h2_resets_below_the_rate_are_fine(env):
    """A client that cancels a few streams now and then is not the attack: it keeps its
    connection (a guard for the defence above)."""
    be = lenient_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]))
    c = H2Client(px.port, timeout=5)
    for _ in range(40):
        sid = c.send("GET", "/x", end=False)
        c.conn.reset_stream(sid)
        c.flush()
    ok = c.send("GET", "/after")
    c.wait(lambda: ok in c.ended)
    assert c.status[ok] == 200 and c.goaway is None
    assert _defences(px, "rapid_reset") == 0
    c.close()


def test_h2_continuation_flood_is_calmed(env):
    """CVE-2024-27316: a HEADERS without END_HEADERS and CONTINUATION frames without end. The
    proxy holds a bounded header block (nghttp2: 8 CONTINUATION frames), then GOAWAY
    ENHANCE_YOUR_CALM and closes; counted. (Before: closed without a GOAWAY, uncounted.)"""
    be = lenient_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]))
    s, enc = _raw(px.port)
    env.on_cleanup.append(s.close)
    s.sendall(_hf(enc, 1, REQ, flags=("END_STREAM",)))
    try:
        for i in range(2000):
            blk = enc.encoder.encode([("x-%d" % i, "v" * 50)])
            s.sendall(hyperframe.frame.ContinuationFrame(1, data=blk).serialize())
    except OSError:
        pass
    goaway, _ = _goaway(s)
    assert goaway is not None and goaway[0] == ENHANCE_YOUR_CALM, goaway
    wait_until(lambda: _defences(px, "continuation_flood") == 1, "counted")
    assert not be.seen
    assert request(px.port, "GET", "/after")[0] == 200


def _named_again(env, times):
    """A proxy with limits.http2_max_header_list 8 KiB and one raw connection to it, on which
    stream 1's header block puts a 4 KiB field in the dynamic table (after indexed names from
    the static table) and names it again by its one-byte index (62) <times> times: about 5 KiB
    sent for 1,000. (backend, proxy, socket, encoder)."""
    be = lenient_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]),
                   extra="limits:\n  http2_max_header_list: 8KiB\n")
    s, enc = _raw(px.port)
    env.on_cleanup.append(s.close)
    block = enc.encoder.encode(REQ + [("x-bomb", "b" * 4000)]) + b"\xbe" * times
    assert len(block) < 6000
    s.sendall(hyperframe.frame.HeadersFrame(1, data=block,
                                            flags=["END_HEADERS", "END_STREAM"]).serialize())
    return be, px, s, enc


def test_h2_long_header_list_is_refused_and_the_connection_goes_on(env):
    """A header list past limits.http2_max_header_list (8 KiB here): one 4 KiB field put in
    the dynamic table, then named again by its index 4 times (about 20 KiB decoded). Refused
    431, counted; the backend sees nothing and the connection goes on (its HPACK table
    intact). (Before: no such key; the proxy refused to start.)"""
    be, px, s, enc = _named_again(env, 4)
    dec = hpack.Decoder()
    goaway, seen = _goaway(s, timeout=10, dec=dec, until=1)
    assert seen.get(1) == "431", (seen, goaway)
    assert goaway is None, goaway
    assert not be.seen
    wait_until(lambda: _defences(px, "header_list") == 1, "counted")
    s.sendall(_hf(enc, 3, REQ))
    _, seen = _goaway(s, timeout=10, dec=dec, until=3)
    assert seen.get(3) == "200", seen


def test_h2_hpack_bomb_ends_the_connection(env):
    """An HPACK bomb: one 4 KiB field put in the dynamic table, then named again by its
    one-byte index 1000 times: a block of about 5 KiB that decodes to 4 MiB. Past 16 times
    limits.http2_max_header_list the connection gets GOAWAY ENHANCE_YOUR_CALM, counted, and
    nothing reaches the backend. (Before: 431 and the connection went on, so one client
    sending such streams as fast as it could kept a worker busy checking every decoded value:
    bench/h2attack.py --modes hpack-bomb, the other clients' p99 43-97 times higher.)"""
    be, px, s, enc = _named_again(env, 1000)
    goaway, seen = _goaway(s, timeout=10)
    assert goaway is not None and goaway[0] == ENHANCE_YOUR_CALM, (goaway, seen)
    assert seen.get(1) != "200", seen
    assert not be.seen
    wait_until(lambda: _defences(px, "header_list") >= 1, "counted")
    assert request(px.port, "GET", "/after")[0] == 200  # the proxy serves on


def test_h2_header_list_within_the_limit_is_served(env):
    be = lenient_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]),
                   extra="limits:\n  http2_max_header_list: 8KiB\n")
    c = H2Client(px.port, timeout=5)
    sid = c.send("GET", "/", headers=[("x-a", "v" * 6000)])
    c.wait(lambda: sid in c.ended)
    assert c.status[sid] == 200
    assert _defences(px, "header_list") == 0
    c.close()


def test_h2_settings_and_ping_floods_are_calmed(env):
    """SETTINGS and PING frames, each asking for an acknowledgement, as fast as a client can
    send them (it reads every ACK): past limits.http2_max_control_frames a second (100), GOAWAY
    ENHANCE_YOUR_CALM. (Before: answered for as long as the client went on.)"""
    be = lenient_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]))  # 100 a second by default
    for frame in (hyperframe.frame.SettingsFrame(0).serialize(),
                  hyperframe.frame.PingFrame(0, opaque_data=b"12345678").serialize()):
        s, _ = _raw(px.port)
        env.on_cleanup.append(s.close)
        stop = threading.Event()

        def flood():
            try:
                while not stop.is_set():
                    s.sendall(frame * 100)
            except OSError:
                pass

        t = threading.Thread(target=flood, daemon=True)
        t.start()
        goaway, _ = _goaway(s)
        stop.set()
        assert goaway is not None and goaway[0] == ENHANCE_YOUR_CALM, goaway
        t.join(10)
    wait_until(lambda: _defences(px, "control_flood") == 2, "both counted")
    assert request(px.port, "GET", "/after")[0] == 200


def test_h2_zero_window_client_frees_its_backend_after_send_ms(env):
    """A client that opens its window to nothing (SETTINGS_INITIAL_WINDOW_SIZE 0) and asks for
    a large response: the backend is read no further than one buffer; after
    timeouts.send_ms with nothing taken the stream is reset and the backend connection closed,
    well before timeouts.between_bytes_ms; counted. (Before: held until between_bytes_ms.)"""
    state = {"closed": threading.Event()}

    def answer(conn):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\n")
        conn.settimeout(60)
        try:
            while True:
                conn.sendall(b"z" * 65536)
        except OSError:
            pass
        state["closed"].set()
        conn.close()

    px = env.proxy("pools:\n" + pool_yaml("p", [one_shot_backend(env, answer)]),
                   extra="timeouts:\n  send_ms: 1000\n  between_bytes_ms: 60000\n")
    c = H2Client(px.port, window=0, timeout=20)
    sid = c.send("GET", "/big")
    t0 = time.monotonic()
    c.wait(lambda: sid in c.reset or sid in c.ended)
    took = time.monotonic() - t0
    assert sid in c.reset and took < 30, (c.reset, took)
    wait_until(state["closed"].is_set, "the backend connection closed", timeout=15)
    wait_until(lambda: _defences(px, "slow_reader") == 1, "counted")
    c.close()


def test_h2_stream_ids_running_out_get_goaway(env):
    """A client whose stream ids near their end (2^31 - 1): its stream is served and the
    proxy sends GOAWAY (NO_ERROR, that stream the last), so it moves to a new connection
    instead of finding no id left; counted. (Before: no GOAWAY until idle_ms.)"""
    be = lenient_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]))
    s, enc = _raw(px.port)
    env.on_cleanup.append(s.close)
    last = 2 ** 31 - 1
    s.sendall(_hf(enc, last, REQ))
    dec, data = hpack.Decoder(), bytearray()
    goaway, seen = _goaway(s, dec=dec, data=data)
    assert goaway == (0, last), goaway
    if last not in seen:
        _, more = _goaway(s, timeout=10, dec=dec, until=last, data=data)
        seen.update(more)
    assert seen.get(last) == "200", seen
    wait_until(lambda: _defences(px, "stream_ids") == 1, "counted")


def test_h2_flood_from_a_client_that_never_reads_is_closed(env):
    """A PING flood from a client that reads nothing (its receive buffer small): the
    acknowledgements pile up unsent, the defence's GOAWAY cannot be written either, and the
    connection is closed at once rather than kept (and run) until it drains; counted."""
    be = lenient_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]))
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(10)
    s.connect(("127.0.0.1", px.port))
    env.on_cleanup.append(s.close)
    ping = hyperframe.frame.PingFrame(0, opaque_data=b"12345678").serialize()
    s.sendall(PREFACE + hyperframe.frame.SettingsFrame(0).serialize())
    closed = False
    try:
        for _ in range(2000):
            s.sendall(ping * 500)
    except OSError:
        closed = True
    assert closed or _closed(s), "the flooding connection stayed open"
    wait_until(lambda: _defences(px, "control_flood") == 1, "counted")
    assert request(px.port, "GET", "/after")[0] == 200
