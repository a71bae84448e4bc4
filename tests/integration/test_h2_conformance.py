"""HTTP/2 conformance of the client side (issue 29), case by case from RFC 9113 and RFC 7541.

These cases were written from the RFCs themselves, one for each MUST a server has to honour,
laid out and named as h2spec lays out its own ("9113 6.5/2", "7541 5.2/1"), by someone other
than the codec's author, when no independent suite could be had here. h2spec itself (a Go
program) is now run by bench/h2spec.sh, built from its source with Debian's Go; it is no
test of CI (the test command installs no Go), and these cases stay the cheap guard that
does run there.
Frames are built byte by byte (and header blocks by hand, HPACK literals without indexing) so
that a malformed one is exactly as the case says; the assertions are about what the proxy
sends back: GOAWAY with the right error code (or the connection closed), RST_STREAM with the
right code, or a proper answer. A malformed request may be answered with a 4xx instead of a
reset (RFC 9113 8.1.1: "a server MAY send an HTTP response prior to closing or resetting the
stream"), and none of them reaches the backend.

One proxy and one backend for the whole module, a fresh connection per case: a case that
fails is named with what came back, and the module fails listing them all.
docs/benchmarks.md ("HTTP/2 conformance", and "HTTP/2 conformance: h2spec" for h2spec's run)
keeps the list of sections and what is allowed."""

import socket
import struct

import hpack

from harness import lenient_backend, pool_yaml, read_all

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST, SETTINGS, PUSH, PING, GOAWAY, WU, CONT = range(10)
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIO = 0x4, 0x8, 0x20
NO_ERROR, PROTOCOL, INTERNAL, FLOW, TIMEOUT_, STREAM_CLOSED, FRAME_SIZE = range(7)
REFUSED, CANCEL, COMPRESSION = 7, 8, 9
NAMES = {v: k for k, v in dict(NO_ERROR=0, PROTOCOL_ERROR=1, INTERNAL_ERROR=2,
                               FLOW_CONTROL_ERROR=3, STREAM_CLOSED=5, FRAME_SIZE_ERROR=6,
                               REFUSED_STREAM=7, CANCEL=8, COMPRESSION_ERROR=9,
                               ENHANCE_YOUR_CALM=11).items()}
WAIT_S = 5


class Bad(Exception):
    """A case's finding: what the proxy did instead."""


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(
        ">I", sid) + payload


def hint(value, prefix_bits, first=0):
    """An HPACK integer (RFC 7541 5.1) in a <prefix_bits> prefix, high bits <first>."""
    top = (1 << prefix_bits) - 1
    if value < top:
        return bytes([first | value])
    out = [first | top]
    value -= top
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    return bytes(out + [value])


def block(fields):
    """A header block of literals without indexing, new names (RFC 7541 6.2.2): exactly the
    bytes given, upper case and all."""
    out = b""
    for name, value in fields:
        name = name.encode() if isinstance(name, str) else name
        value = value.encode() if isinstance(value, str) else value
        out += b"\x00" + hint(len(name), 7) + name + hint(len(value), 7) + value
    return out


def req(path="/", method="GET", extra=(), drop=()):
    fields = [(":method", method), (":scheme", "http"), (":path", path),
              (":authority", "conformance.test")]
    return block([f for f in fields if f[0] not in drop] + list(extra))


def setting(ident, value):
    return struct.pack(">HI", ident, value)


class Conn:
    """A raw HTTP/2 connection to the proxy: frames sent as bytes, read back as tuples."""

    def __init__(self, port, settings=b""):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
        self.buf = b""
        self.dec = hpack.Decoder()
        self.s.sendall(PREFACE + frame(SETTINGS, 0, 0, settings))
        first = self.next()
        if not first or first[0] != SETTINGS or first[1] & ACK:
            raise Bad(f"the server's preface is not a SETTINGS frame: {show(first)}")
        self.send(frame(SETTINGS, ACK, 0))

    def send(self, *frames):
        try:
            self.s.sendall(b"".join(frames))
        except OSError:
            pass  # closed: what the case reads next says so

    def next(self):
        """The next frame (type, flags, stream, payload, fields), or None once closed."""
        while True:
            if len(self.buf) >= 9:
                n = int.from_bytes(self.buf[:3], "big")
                if len(self.buf) >= 9 + n:
                    t, fl = self.buf[3], self.buf[4]
                    sid = int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
                    payload, self.buf = self.buf[9:9 + n], self.buf[9 + n:]
                    fields = None
                    if t == HEADERS:  # the proxy's blocks end in one frame
                        frag = payload
                        if fl & PADDED:
                            frag = frag[1:len(frag) - frag[0]]
                        if fl & PRIO:
                            frag = frag[5:]
                        fields = dict(self.dec.decode(frag, raw=False))
                    return t, fl, sid, payload, fields
            try:
                got = self.s.recv(65536)
            except socket.timeout:
                raise Bad("nothing came back in time")
            except OSError:
                got = b""
            if not got:
                return None
            self.buf += got

    def close(self):
        self.s.close()


def show(f):
    if f is None:
        return "the connection closed"
    t, fl, sid, payload, fields = f
    kind = ["DATA", "HEADERS", "PRIORITY", "RST_STREAM", "SETTINGS", "PUSH_PROMISE", "PING",
            "GOAWAY", "WINDOW_UPDATE", "CONTINUATION"][t] if t < 10 else f"type {t}"
    if t == GOAWAY:
        return f"GOAWAY {NAMES.get(int.from_bytes(payload[4:8], 'big'), payload[4:8])}"
    if t == RST:
        return f"RST_STREAM {sid} {NAMES.get(int.from_bytes(payload, 'big'), payload)}"
    if t == HEADERS:
        return f"HEADERS {sid} {fields}"
    return f"{kind} stream {sid} flags {fl:#x} length {len(payload)}"


# --- what a case expects ----------------------------------------------------------------

def conn_error(c, code):
    """A connection error of <code>: GOAWAY with it (then the connection closed), or the
    connection closed (RFC 9113 5.4.1: GOAWAY is a SHOULD)."""
    while True:
        f = c.next()
        if f is None:
            return
        if f[0] == GOAWAY:
            got = int.from_bytes(f[3][4:8], "big")
            if got != code:
                raise Bad(f"GOAWAY {NAMES.get(got, got)}, not {NAMES[code]}")
            if c.next() is not None and c.next() is not None:
                raise Bad("GOAWAY came, but the connection stayed open")
            return
        if f[0] in (HEADERS, DATA):
            raise Bad(f"{show(f)} where a connection error {NAMES[code]} was due")


def ended_with(f, sid, code):
    """Is <f> the RST_STREAM of <sid> or a GOAWAY? Then its error code must be <code>."""
    if f[0] == RST and f[2] == sid:
        what, got = "RST_STREAM", int.from_bytes(f[3], "big")
    elif f[0] == GOAWAY:
        what, got = "GOAWAY", int.from_bytes(f[3][4:8], "big")
    else:
        return False
    if got != code:
        raise Bad(f"{what} {NAMES.get(got, got)}, not {NAMES[code]}")
    return True


def stream_error(c, sid, code):
    """A stream error of <code> on <sid>: RST_STREAM with it; a connection error of the same
    code is also allowed (RFC 9113 5.4.1: an endpoint may treat any error as one)."""
    while True:
        f = c.next()
        if f is None or ended_with(f, sid, code):
            return
        if f[0] in (HEADERS, DATA) and f[2] == sid:
            raise Bad(f"{show(f)} where a stream error {NAMES[code]} was due")


def malformed(c, sid):
    """A malformed request (RFC 9113 8.1.1): a stream error PROTOCOL_ERROR, or a 4xx answer
    (a server MAY answer before resetting); never a 2xx, never the backend."""
    while True:
        f = c.next()
        if f is None or ended_with(f, sid, PROTOCOL):
            return
        if f[0] == HEADERS and f[2] == sid:
            status = f[4].get(":status", "")
            if not status.startswith("4"):
                raise Bad(f"answered {status} to a malformed request")
            return


def alive(c, then=b"", flags=0):
    """The connection goes on (what came before was ignored, as the RFC says): a PING (with
    <flags>) is answered with its own payload."""
    c.send(then + frame(PING, flags, 0, b"h2conf!!"))
    while True:
        f = c.next()
        if f is None or f[0] == GOAWAY:
            raise Bad(f"{show(f)} where the frame was to be ignored")
        if f[0] == RST:
            raise Bad(f"{show(f)} where the frame was to be ignored")
        if f[0] == PING and f[1] & ACK:
            if f[3] != b"h2conf!!":
                raise Bad(f"PING ACK with payload {f[3]!r}")
            return


def answer(c, sid):
    """A proper answer on <sid>: HEADERS with a 2xx :status; its DATA frames' payloads."""
    status, data = None, []
    while True:
        f = c.next()
        if f is None or f[0] in (GOAWAY, RST):
            raise Bad(f"{show(f)} where an answer was due")
        if f[2] != sid:
            continue
        if f[0] == HEADERS and status is None:
            status = f[4].get(":status")
            if not status or not status.startswith("2"):
                raise Bad(f"answered {status}")
        if f[0] == DATA:
            data.append(f[3])
        if f[0] in (HEADERS, DATA) and f[1] & END_STREAM:
            return status, data


# --- the cases: (id, what, run(port) raising Bad) ----------------------------------------

def case(cid, what, settings=b""):
    def wrap(fn):
        CASES.append((cid, what, settings, fn))
        return fn
    return wrap


CASES = []
BACKEND = []  # the module's backend, for the cases that look at what it got
H = req()  # a GET's header block
GET1 = frame(HEADERS, END_HEADERS | END_STREAM, 1, H)
OPEN1 = frame(HEADERS, END_HEADERS, 1, req("/", "POST"))  # stream 1 open, a body to come


@case("9113 3.4/1", "the server's preface is a SETTINGS frame, and it ACKs the client's")
def _(c):
    while True:
        f = c.next()
        if f is None or f[0] == GOAWAY:
            raise Bad(f"{show(f)} before the SETTINGS ACK")
        if f[0] == SETTINGS and f[1] & ACK:
            return


@case("9113 3.4/2", "an invalid connection preface: a connection error")
def _(c):
    raise AssertionError("run by its own function")


@case("9113 4.1/1", "a frame of an unknown type is ignored")
def _(c):
    alive(c, frame(0x16, 0, 0, b"?" * 8))


@case("9113 4.1/2", "undefined flags on a PING are ignored")
def _(c):
    alive(c, flags=0x16)  # not ACK (0x1): answered as any PING


@case("9113 4.1/3", "the reserved bit of a stream id is ignored")
def _(c):
    c.send(frame(HEADERS, END_HEADERS | END_STREAM, 0x80000001, H))
    answer(c, 1)


@case("9113 4.2/1", "a DATA frame past SETTINGS_MAX_FRAME_SIZE: FRAME_SIZE_ERROR")
def _(c):
    c.send(OPEN1, frame(DATA, 0, 1, b"x" * 16385))
    stream_error(c, 1, FRAME_SIZE)


@case("9113 4.2/2", "a HEADERS frame past SETTINGS_MAX_FRAME_SIZE: connection FRAME_SIZE_ERROR")
def _(c):
    c.send(frame(HEADERS, END_HEADERS | END_STREAM, 1,
                 req(extra=[("x-big", "y" * 16400)])))
    conn_error(c, FRAME_SIZE)


@case("9113 4.3/1", "a header block that fails to decode: COMPRESSION_ERROR")
def _(c):
    c.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, b"\xff\xff\xff\xff\x0f"))
    conn_error(c, COMPRESSION)


@case("9113 4.3/2", "a PRIORITY frame inside a header block: PROTOCOL_ERROR")
def _(c):
    c.send(frame(HEADERS, END_STREAM, 1, H), frame(PRIORITY, 0, 1, b"\0\0\0\0\x10"),
           frame(CONT, END_HEADERS, 1, b""))
    conn_error(c, PROTOCOL)


@case("9113 4.3/3", "a HEADERS frame of another stream inside a header block: PROTOCOL_ERROR")
def _(c):
    c.send(frame(HEADERS, END_STREAM, 1, H), frame(HEADERS, END_HEADERS | END_STREAM, 3, H))
    conn_error(c, PROTOCOL)


@case("9113 5.1/1", "idle: a DATA frame: PROTOCOL_ERROR")
def _(c):
    c.send(frame(DATA, END_STREAM, 1, b"x"))
    conn_error(c, PROTOCOL)


@case("9113 5.1/2", "idle: a RST_STREAM frame: PROTOCOL_ERROR")
def _(c):
    c.send(frame(RST, 0, 1, struct.pack(">I", CANCEL)))
    conn_error(c, PROTOCOL)


@case("9113 5.1/3", "idle: a WINDOW_UPDATE frame: PROTOCOL_ERROR")
def _(c):
    c.send(frame(WU, 0, 1, struct.pack(">I", 100)))
    conn_error(c, PROTOCOL)


@case("9113 5.1/4", "idle: a CONTINUATION frame: PROTOCOL_ERROR")
def _(c):
    c.send(frame(CONT, END_HEADERS, 1, H))
    conn_error(c, PROTOCOL)


@case("9113 5.1/5", "half-closed (remote): a DATA frame: STREAM_CLOSED")
def _(c):
    c.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, req("/hold")), frame(DATA, 0, 1, b"x"))
    stream_error(c, 1, STREAM_CLOSED)


@case("9113 5.1/6", "half-closed (remote): a HEADERS frame: STREAM_CLOSED")
def _(c):
    c.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, req("/hold")),
           frame(HEADERS, END_HEADERS | END_STREAM, 1, H))
    stream_error(c, 1, STREAM_CLOSED)


@case("9113 5.1/7", "half-closed (remote): a CONTINUATION frame: PROTOCOL_ERROR")
def _(c):
    c.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, req("/hold")),
           frame(CONT, END_HEADERS, 1, H))
    conn_error(c, PROTOCOL)


@case("9113 5.1/8", "closed by the client's RST_STREAM: a DATA frame: STREAM_CLOSED")
def _(c):
    c.send(OPEN1, frame(RST, 0, 1, struct.pack(">I", CANCEL)), frame(DATA, 0, 1, b"x"))
    stream_error(c, 1, STREAM_CLOSED)


@case("9113 5.1/9", "closed by the client's RST_STREAM: a HEADERS frame: STREAM_CLOSED")
def _(c):
    c.send(OPEN1, frame(RST, 0, 1, struct.pack(">I", CANCEL)),
           frame(HEADERS, END_HEADERS | END_STREAM, 1, H))
    stream_error(c, 1, STREAM_CLOSED)


@case("9113 5.1/10", "closed (both ends): a DATA frame: STREAM_CLOSED")
def _(c):
    c.send(GET1)
    answer(c, 1)
    c.send(frame(DATA, 0, 1, b"x"))
    stream_error(c, 1, STREAM_CLOSED)


@case("9113 5.1/11", "closed (both ends): a HEADERS frame: STREAM_CLOSED")
def _(c):
    c.send(GET1)
    answer(c, 1)
    c.send(GET1)
    stream_error(c, 1, STREAM_CLOSED)


@case("9113 5.1/12", "closed (both ends): a CONTINUATION frame: PROTOCOL_ERROR")
def _(c):
    c.send(GET1)
    answer(c, 1)
    c.send(frame(CONT, END_HEADERS, 1, H))
    conn_error(c, PROTOCOL)


@case("9113 5.1.1/1", "an even stream id from a client: PROTOCOL_ERROR")
def _(c):
    c.send(frame(HEADERS, END_HEADERS | END_STREAM, 2, H))
    conn_error(c, PROTOCOL)


@case("9113 5.1.1/2", "a stream id below one already used: PROTOCOL_ERROR")
def _(c):
    c.send(frame(HEADERS, END_HEADERS | END_STREAM, 5, H))
    answer(c, 5)
    c.send(frame(HEADERS, END_HEADERS | END_STREAM, 3, H))
    conn_error(c, PROTOCOL)


@case("9113 5.1.2/1", "past SETTINGS_MAX_CONCURRENT_STREAMS: PROTOCOL_ERROR or REFUSED_STREAM")
def _(c):
    c.send(*[frame(HEADERS, END_HEADERS, 2 * i + 1, req("/", "POST")) for i in range(101)])
    sid = 201
    while True:
        f = c.next()
        if f is None:
            return
        if f[0] == RST and f[2] == sid or f[0] == GOAWAY:
            code = int.from_bytes(f[3][-4:] if f[0] == RST else f[3][4:8], "big")
            if code not in (PROTOCOL, REFUSED):
                raise Bad(show(f))
            return
        if f[0] == RST:
            raise Bad(f"{show(f)}: a stream within the limit was reset")


@case("9113 5.3.1/1", "a HEADERS frame that depends on its own stream: PROTOCOL_ERROR")
def _(c):
    c.send(frame(HEADERS, END_HEADERS | END_STREAM | PRIO, 1, b"\0\0\0\x01\x10" + H))
    stream_error(c, 1, PROTOCOL)


@case("9113 5.3.1/2", "a PRIORITY frame that depends on its own stream: PROTOCOL_ERROR")
def _(c):
    c.send(frame(PRIORITY, 0, 1, b"\0\0\0\x01\x10"))
    stream_error(c, 1, PROTOCOL)


@case("9113 5.4.1/1", "after a connection error, GOAWAY and the connection closed")
def _(c):
    c.send(frame(DATA, 0, 0, b"x"))
    saw = False
    while True:
        f = c.next()
        if f is None:
            if not saw:
                raise Bad("closed without a GOAWAY")
            return
        if f[0] == GOAWAY:
            saw = True


@case("9113 5.5/1", "an unknown extension frame is ignored")
def _(c):
    alive(c, frame(0xEE, 0xFF, 1, b"extension"))


@case("9113 5.5/2", "an unknown extension frame inside a header block: PROTOCOL_ERROR")
def _(c):
    c.send(frame(HEADERS, END_STREAM, 1, H), frame(0xEE, 0, 1, b"x"),
           frame(CONT, END_HEADERS, 1, b""))
    conn_error(c, PROTOCOL)


@case("9113 6.1/1", "a DATA frame on stream 0: PROTOCOL_ERROR")
def _(c):
    c.send(frame(DATA, END_STREAM, 0, b"x"))
    conn_error(c, PROTOCOL)


@case("9113 6.1/2", "a DATA frame whose pad length is its length or more: PROTOCOL_ERROR")
def _(c):
    c.send(OPEN1, frame(DATA, PADDED | END_STREAM, 1, b"\x05abc"))
    conn_error(c, PROTOCOL)


@case("9113 6.2/1", "a HEADERS frame without END_HEADERS, then DATA: PROTOCOL_ERROR")
def _(c):
    c.send(frame(HEADERS, 0, 1, H), frame(DATA, END_STREAM, 1, b"x"))
    conn_error(c, PROTOCOL)


@case("9113 6.2/2", "a HEADERS frame on stream 0: PROTOCOL_ERROR")
def _(c):
    c.send(frame(HEADERS, END_HEADERS | END_STREAM, 0, H))
    conn_error(c, PROTOCOL)


@case("9113 6.2/3", "a HEADERS frame whose pad length is its length or more: PROTOCOL_ERROR")
def _(c):
    c.send(frame(HEADERS, END_HEADERS | END_STREAM | PADDED, 1, bytes([len(H) + 1]) + H))
    conn_error(c, PROTOCOL)


@case("9113 6.3/1", "a PRIORITY frame on stream 0: PROTOCOL_ERROR")
def _(c):
    c.send(frame(PRIORITY, 0, 0, b"\0\0\0\x03\x10"))
    conn_error(c, PROTOCOL)


@case("9113 6.3/2", "a PRIORITY frame of length 4: FRAME_SIZE_ERROR")
def _(c):
    c.send(OPEN1, frame(PRIORITY, 0, 1, b"\0\0\0\x03"))
    stream_error(c, 1, FRAME_SIZE)


@case("9113 6.3/3", "a PRIORITY frame on an idle stream is taken, the connection goes on")
def _(c):
    alive(c, frame(PRIORITY, 0, 9, b"\0\0\0\x00\x10"))


@case("9113 6.4/1", "a RST_STREAM frame on stream 0: PROTOCOL_ERROR")
def _(c):
    c.send(frame(RST, 0, 0, struct.pack(">I", CANCEL)))
    conn_error(c, PROTOCOL)


@case("9113 6.4/2", "a RST_STREAM frame of length 3: FRAME_SIZE_ERROR")
def _(c):
    c.send(OPEN1, frame(RST, 0, 1, b"\0\0\x08"))
    conn_error(c, FRAME_SIZE)


@case("9113 6.5/1", "a SETTINGS ACK with a payload: FRAME_SIZE_ERROR")
def _(c):
    c.send(frame(SETTINGS, ACK, 0, b"\0"))
    conn_error(c, FRAME_SIZE)


@case("9113 6.5/2", "a SETTINGS frame on stream 1: PROTOCOL_ERROR")
def _(c):
    c.send(frame(SETTINGS, 0, 1, setting(3, 100)))
    conn_error(c, PROTOCOL)


@case("9113 6.5/3", "a SETTINGS frame of length 3: FRAME_SIZE_ERROR")
def _(c):
    c.send(frame(SETTINGS, 0, 0, b"\0\x03\0"))
    conn_error(c, FRAME_SIZE)


@case("9113 6.5.2/1", "SETTINGS_ENABLE_PUSH 2: PROTOCOL_ERROR")
def _(c):
    c.send(frame(SETTINGS, 0, 0, setting(2, 2)))
    conn_error(c, PROTOCOL)


@case("9113 6.5.2/2", "SETTINGS_INITIAL_WINDOW_SIZE past 2^31-1: FLOW_CONTROL_ERROR")
def _(c):
    c.send(frame(SETTINGS, 0, 0, setting(4, 1 << 31)))
    conn_error(c, FLOW)


@case("9113 6.5.2/3", "SETTINGS_MAX_FRAME_SIZE below 16384: PROTOCOL_ERROR")
def _(c):
    c.send(frame(SETTINGS, 0, 0, setting(5, 16383)))
    conn_error(c, PROTOCOL)


@case("9113 6.5.2/4", "SETTINGS_MAX_FRAME_SIZE past 2^24-1: PROTOCOL_ERROR")
def _(c):
    c.send(frame(SETTINGS, 0, 0, setting(5, 1 << 24)))
    conn_error(c, PROTOCOL)


@case("9113 6.5.2/5", "an unknown setting is ignored")
def _(c):
    alive(c, frame(SETTINGS, 0, 0, setting(0xFF, 1)))


@case("9113 6.5.3/1", "a SETTINGS frame is acknowledged")
def _(c):
    c.send(frame(SETTINGS, 0, 0, setting(3, 50)))
    while True:
        f = c.next()
        if f is None or f[0] == GOAWAY:
            raise Bad(f"{show(f)} before the SETTINGS ACK")
        if f[0] == SETTINGS and f[1] & ACK:
            return


@case("9113 6.7/1", "a PING is answered with an ACK carrying its payload")
def _(c):
    alive(c)


@case("9113 6.7/2", "a PING ACK is not answered")
def _(c):
    c.send(frame(PING, ACK, 0, b"unsolict"))
    alive(c)  # the first PING ACK back must be for the PING alive() sends


@case("9113 6.7/3", "a PING on stream 1: PROTOCOL_ERROR")
def _(c):
    c.send(frame(PING, 0, 1, b"x" * 8))
    conn_error(c, PROTOCOL)


@case("9113 6.7/4", "a PING of length 6: FRAME_SIZE_ERROR")
def _(c):
    c.send(frame(PING, 0, 0, b"x" * 6))
    conn_error(c, FRAME_SIZE)


@case("9113 6.8/1", "a GOAWAY on stream 1: PROTOCOL_ERROR")
def _(c):
    c.send(frame(GOAWAY, 0, 1, struct.pack(">II", 0, 0)))
    conn_error(c, PROTOCOL)


@case("9113 6.9/1", "a WINDOW_UPDATE of 0 on the connection: PROTOCOL_ERROR")
def _(c):
    c.send(frame(WU, 0, 0, struct.pack(">I", 0)))
    conn_error(c, PROTOCOL)


@case("9113 6.9/2", "a WINDOW_UPDATE of 0 on a stream: PROTOCOL_ERROR")
def _(c):
    c.send(OPEN1, frame(WU, 0, 1, struct.pack(">I", 0)))
    stream_error(c, 1, PROTOCOL)


@case("9113 6.9/3", "a WINDOW_UPDATE of length 3: FRAME_SIZE_ERROR")
def _(c):
    c.send(frame(WU, 0, 0, b"\0\0\x01"))
    conn_error(c, FRAME_SIZE)


@case("9113 6.9.1/1", "with SETTINGS_INITIAL_WINDOW_SIZE 1 a response comes 1 byte at a time",
      settings=setting(4, 1))
def _(c):
    c.send(GET1)
    while True:
        f = c.next()
        if f is None or f[0] in (GOAWAY, RST):
            raise Bad(show(f))
        if f[0] == DATA and f[2] == 1:
            if len(f[3]) != 1:
                raise Bad(f"a DATA frame of {len(f[3])} bytes through a window of 1")
            return


@case("9113 6.9.1/2", "a connection window past 2^31-1: FLOW_CONTROL_ERROR")
def _(c):
    c.send(frame(WU, 0, 0, struct.pack(">I", 0x7FFFFFFF)))
    conn_error(c, FLOW)


@case("9113 6.9.1/3", "a stream window past 2^31-1: FLOW_CONTROL_ERROR")
def _(c):
    c.send(OPEN1, frame(WU, 0, 1, struct.pack(">I", 0x7FFFFFFF)))
    stream_error(c, 1, FLOW)


@case("9113 6.9.2/1", "SETTINGS_INITIAL_WINDOW_SIZE that takes a stream window past 2^31-1: "
      "FLOW_CONTROL_ERROR")
def _(c):
    c.send(OPEN1, frame(WU, 0, 1, struct.pack(">I", 0x7FFFFFFF - 65535)),
           frame(SETTINGS, 0, 0, setting(4, 65536)))
    conn_error(c, FLOW)


@case("9113 6.10/1", "a header block in HEADERS and CONTINUATION frames is answered")
def _(c):
    c.send(frame(HEADERS, END_STREAM, 1, H[:5]), frame(CONT, 0, 1, H[5:20]),
           frame(CONT, END_HEADERS, 1, H[20:]))
    answer(c, 1)


@case("9113 6.10/2", "a CONTINUATION then another frame before END_HEADERS: PROTOCOL_ERROR")
def _(c):
    c.send(frame(HEADERS, END_STREAM, 1, H[:5]), frame(CONT, 0, 1, H[5:]),
           frame(DATA, 0, 1, b"x"))
    conn_error(c, PROTOCOL)


@case("9113 6.10/3", "a CONTINUATION frame on stream 0: PROTOCOL_ERROR")
def _(c):
    c.send(frame(HEADERS, END_STREAM, 1, H[:5]), frame(CONT, END_HEADERS, 0, H[5:]))
    conn_error(c, PROTOCOL)


@case("9113 6.10/4", "a CONTINUATION after a HEADERS with END_HEADERS: PROTOCOL_ERROR")
def _(c):
    c.send(frame(HEADERS, END_HEADERS, 1, req("/", "POST")), frame(CONT, END_HEADERS, 1, H))
    conn_error(c, PROTOCOL)


@case("9113 6.10/5", "a CONTINUATION of another stream: PROTOCOL_ERROR")
def _(c):
    c.send(frame(HEADERS, END_STREAM, 1, H[:5]), frame(CONT, END_HEADERS, 3, H[5:]))
    conn_error(c, PROTOCOL)


@case("9113 6.10/6", "a CONTINUATION after a DATA frame: PROTOCOL_ERROR")
def _(c):
    c.send(OPEN1, frame(DATA, 0, 1, b"x"), frame(CONT, END_HEADERS, 1, H))
    conn_error(c, PROTOCOL)


def _malformed(cid, what, hdrs):
    @case(cid, what)
    def _(c):
        before = len(BACKEND[0].seen)
        c.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, hdrs))
        malformed(c, 1)
        if len(BACKEND[0].seen) != before:
            raise Bad(f"the backend got it: {BACKEND[0].seen[-1]}")


_malformed("9113 8.1/1", "a field name in upper case: malformed",
           req(extra=[("X-Upper", "1")]))
_malformed("9113 8.2.1/1", "a field value with a CR LF: malformed",
           req(extra=[("x-a", "b\r\nx-c: d")]))
_malformed("9113 8.2.1/2", "a field value with a NUL: malformed",
           req(extra=[("x-a", "b\0c")]))
_malformed("9113 8.2.1/3", "a field name with a space: malformed",
           req(extra=[("x a", "b")]))
_malformed("9113 8.2.2/1", "a connection-specific field (connection): malformed",
           req(extra=[("connection", "keep-alive")]))
_malformed("9113 8.2.2/2", "te other than trailers: malformed",
           req(extra=[("te", "trailers, deflate")]))
_malformed("9113 8.2.2/3", "a connection-specific field (transfer-encoding): malformed",
           req(extra=[("transfer-encoding", "chunked")]))
_malformed("9113 8.3/1", "an unknown pseudo-header: malformed",
           req(extra=[(":foo", "bar")]))
_malformed("9113 8.3/2", "a response pseudo-header in a request: malformed",
           req(extra=[(":status", "200")]))
_malformed("9113 8.3/3", "a pseudo-header after a regular field: malformed",
           block([(":method", "GET"), (":scheme", "http"), ("x-a", "b"), (":path", "/"),
                  (":authority", "conformance.test")]))
_malformed("9113 8.3.1/1", "no :method: malformed", req(drop=(":method",)))
_malformed("9113 8.3.1/2", "no :scheme: malformed", req(drop=(":scheme",)))
_malformed("9113 8.3.1/3", "no :path: malformed", req(drop=(":path",)))
_malformed("9113 8.3.1/4", "an empty :path: malformed", req(path=""))
_malformed("9113 8.3.1/5", "two :method fields: malformed",
           req(extra=[(":method", "POST")]))
_malformed("9113 8.3.1/6", "two :path fields: malformed", req(extra=[(":path", "/")]))
_malformed("9113 8.3.1/7", "two :scheme fields: malformed", req(extra=[(":scheme", "http")]))


@case("9113 8.1/2", "trailers without END_STREAM: malformed")
def _(c):
    c.send(OPEN1, frame(DATA, 0, 1, b"x"), frame(HEADERS, END_HEADERS, 1, block([("x-t", "1")])))
    malformed(c, 1)


@case("9113 8.1/3", "a pseudo-header in trailers: malformed")
def _(c):
    c.send(OPEN1, frame(DATA, 0, 1, b"x"),
           frame(HEADERS, END_HEADERS | END_STREAM, 1, block([(":path", "/")])))
    malformed(c, 1)


@case("9113 8.1.1/1", "DATA longer than content-length: malformed")
def _(c):
    c.send(frame(HEADERS, END_HEADERS, 1, req("/", "POST", extra=[("content-length", "1")])),
           frame(DATA, END_STREAM, 1, b"xy"))
    malformed(c, 1)


@case("9113 8.1.1/2", "DATA shorter than content-length: malformed")
def _(c):
    c.send(frame(HEADERS, END_HEADERS, 1, req("/", "POST", extra=[("content-length", "3")])),
           frame(DATA, END_STREAM, 1, b"xy"))
    malformed(c, 1)


@case("9113 8.1/4", "a GET is answered, with :status")
def _(c):
    c.send(GET1)
    answer(c, 1)


def _hpack(cid, what, blk):
    @case(cid, what)
    def _(c):
        c.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, blk))
        conn_error(c, COMPRESSION)


_hpack("7541 2.3.3/1", "an index past both tables: COMPRESSION_ERROR", b"\xc6" + H)
_hpack("7541 4.2/1", "a table size update past SETTINGS_HEADER_TABLE_SIZE: COMPRESSION_ERROR",
       hint(4097, 5, 0x20) + H)
_hpack("7541 5.2/1", "a Huffman string with the EOS symbol: COMPRESSION_ERROR",
       H + b"\x00\x01a\x84\xff\xff\xff\xff")
_hpack("7541 5.2/2", "Huffman padding longer than 7 bits: COMPRESSION_ERROR",
       H + b"\x00\x01a\x82\x1f\xff")
_hpack("7541 5.2/3", "Huffman padding that is not the EOS prefix: COMPRESSION_ERROR",
       H + b"\x00\x01a\x81\x18")
_hpack("7541 6.1/1", "an indexed field of index 0: COMPRESSION_ERROR", b"\x80" + H)
_hpack("7541 6.3/1", "a table size update after a field: COMPRESSION_ERROR",
       b"\x82" + b"\x20" + H)


def preface_case(port):
    """9113 3.4/2: a preface that is not the one: the connection is closed, with no HTTP/2
    answer on it. On a plain listener, which takes HTTP/1.1 too, such bytes read as an
    HTTP/1.1 request and get an HTTP/1.1 error first: a PRI request of another version
    (505), or h2spec's "INVALID CONNECTION PREFACE" line (400; h2spec, which reads that answer
    as a frame, counts it a failure: docs/benchmarks.md lists it as allowed)."""
    for preface, status in ((b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n" + frame(SETTINGS, 0, 0), b"505"),
                            (b"INVALID CONNECTION PREFACE\r\n\r\n", b"400")):
        s = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
        s.sendall(preface)
        try:
            got = read_all(s)
        except socket.timeout:
            raise Bad(f"the connection stayed open after {preface[:20]!r}")
        finally:
            s.close()
        if got[3:4] == bytes([SETTINGS]):
            raise Bad(f"answered {preface[:20]!r} as HTTP/2")
        if not got.startswith(b"HTTP/1.1 " + status):
            raise Bad(f"answered {preface[:20]!r} with {got[:40]!r}, not an HTTP/1.1 {status}")


def test_rfc9113_and_rfc7541_cases(env):
    be = lenient_backend(env)
    BACKEND[:] = [be]
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]), workers=1)
    failed = []
    for cid, what, settings, fn in CASES:
        try:
            if cid == "9113 3.4/2":
                preface_case(px.port)
                continue
            c = Conn(px.port, settings)
            try:
                fn(c)
            finally:
                c.close()
        except Bad as e:
            failed.append(f"{cid} {what}: {e}")
    assert not failed, f"{len(failed)} of {len(CASES)} cases:\n" + "\n".join(failed)
