"""WebSocket over HTTP/2 (RFC 8441, issue 29): an HTTP/2 client's extended CONNECT with
:protocol websocket goes to an HTTP/1.1 WebSocket backend as the opening handshake, and the
stream's DATA is the tunnel's bytes both ways. Clients: Python h2 (python3-h2), frames by hand;
backends: Python websockets (echo) and raw sockets."""

import socket
import struct
import threading

import h2.config
import h2.connection
import h2.settings

from harness import BIN, ScriptedBackend, free_port, pool_yaml, read_all, read_until, wait_until
from test_h2 import H2Client
from test_websocket import (RawWsBackend, WsBackend, _metric, _samples, flooding_backend,
                            ws_accept)

WS_HEADERS = [(":protocol", "websocket"), ("sec-websocket-version", "13")]


def _proxy(env, port, route_extra="    websocket: true\n", extra="", workers=1):
    return env.proxy("pools:\n" + pool_yaml("p", [port]) +
                     "routes:\n  - pool: p\n" + route_extra, extra=extra, workers=workers)


def _open(c, path="/ws", headers=WS_HEADERS):
    sid = c.send("CONNECT", path, headers=headers, end=False)
    c.wait(lambda: sid in c.status or sid in c.reset)
    return sid


def _frame(payload, opcode=0x1):
    """A client's WebSocket frame (RFC 6455 5.2): FIN, masked with a zero key."""
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack(">H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack(">Q", n)
    return head + b"\0\0\0\0" + payload


def test_h2_websocket_echo_and_close(env):
    be = WsBackend()
    env.on_cleanup.append(be.close)
    px = _proxy(env, be.port)
    c = H2Client(px.port)
    env.on_cleanup.append(c.close)
    c.wait(lambda: c.conn.remote_settings.get(
        h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL) == 1)
    sid = _open(c)
    hs = c.headers[sid]
    assert c.status[sid] == 200, hs
    assert "sec-websocket-accept" not in hs and hs.get("x-request-id"), hs
    wait_until(lambda: be.handshakes == 1, "the backend's handler ran")  # (after its 101)
    c.conn.send_data(sid, _frame(b"hello over h2"))
    c.flush()
    c.wait(lambda: len(c.body.get(sid, b"")) >= 15)
    assert c.body[sid] == b"\x81\x0dhello over h2", c.body[sid]  # the server's, unmasked
    # a Close frame, then our END_STREAM: the backend answers Close and ends its side
    c.conn.send_data(sid, _frame(struct.pack(">H", 1000), opcode=0x8), end_stream=True)
    c.flush()
    c.wait(lambda: sid in c.ended or sid in c.reset)
    assert sid in c.ended and sid not in c.reset, c.reset
    assert c.body[sid][15:17] == b"\x88\x02", c.body[sid]
    wait_until(lambda: _metric(px, "accelnet_tunnels_closed_total", reason="closed") == 1,
               "the tunnel counted closed")
    s = _samples(px)
    assert s[("accelnet_tunnels_open", ())] == 0
    assert s[("accelnet_tunnel_bytes_total", (("direction", "to_backend"),))] >= 19, s
    assert s[("accelnet_tunnel_bytes_total", (("direction", "to_client"),))] >= 19, s
    # the connection goes on: an ordinary request on it
    sid2 = c.send("GET", "/plain")
    c.wait(lambda: sid2 in c.ended or sid2 in c.reset)
    assert c.status.get(sid2) == 426, c.status  # websockets' answer to a plain GET


def test_h2_websocket_backend_close_and_client_reset(env):
    # the backend ends its side: the client gets END_STREAM, and its own end closes it all
    def after(conn):
        conn.sendall(b"bye")
        conn.shutdown(socket.SHUT_WR)
        return read_all(conn)
    be = RawWsBackend(after)
    env.on_cleanup.append(be.close)
    px = _proxy(env, be.port)
    c = H2Client(px.port)
    env.on_cleanup.append(c.close)
    sid = _open(c)
    assert c.status[sid] == 200
    c.wait(lambda: sid in c.ended)
    assert c.body[sid] == b"bye"
    c.conn.send_data(sid, b"last words", end_stream=True)
    c.flush()
    assert be.done.wait(15) and be.result == b"last words", be.result
    wait_until(lambda: _metric(px, "accelnet_tunnels_closed_total", reason="closed") == 1,
               "the tunnel counted closed")

    # the client resets its stream: the backend's connection is closed
    gone = threading.Event()

    def after2(conn):
        read_all(conn)
        gone.set()
    be2 = RawWsBackend(after2)
    env.on_cleanup.append(be2.close)
    px2 = _proxy(env, be2.port)
    c2 = H2Client(px2.port)
    env.on_cleanup.append(c2.close)
    sid = _open(c2)
    assert c2.status[sid] == 200
    c2.conn.reset_stream(sid, error_code=8)  # CANCEL
    c2.flush()
    assert gone.wait(15), "the backend's connection was not closed"
    wait_until(lambda: _metric(px2, "accelnet_tunnels_closed_total", reason="error") == 1,
               "the reset tunnel counted")
    assert _samples(px2)[("accelnet_tunnels_open", ())] == 0


def test_h2_websocket_a_client_that_does_not_read_stops_the_backend(env):
    total = 24 << 20
    be, pushed, stalled = flooding_backend(env, total, 1)
    px = _proxy(env, be.port)
    c = H2Client(px.port, window=65535)  # its credit goes back only as this test says
    env.on_cleanup.append(c.close)
    sid = _open(c)
    assert c.status[sid] == 200
    wait_until(stalled.is_set, "the backend held back", timeout=60)
    held = pushed[0]
    assert held < total // 4, held
    # reading again, credit given back: everything comes, then END_STREAM
    got = len(c.body.pop(sid, b""))  # (what came with the head)
    c.conn.acknowledge_received_data(got, sid)
    c.flush()
    while sid not in c.ended:
        before = len(c.body.get(sid, b""))
        c.pump()
        n = len(c.body.get(sid, b"")) - before
        if n:
            got += n
            c.conn.acknowledge_received_data(n, sid)
            c.body[sid] = b""
            c.flush()
    assert got == total, (got, total)
    c.conn.end_stream(sid)  # our end too: the tunnel closes
    c.flush()
    wait_until(lambda: _metric(px, "accelnet_tunnels_closed_total", reason="closed") == 1,
               "the tunnel counted closed")
    print(f"a client that does not read held the backend at {held >> 20} MiB of {total >> 20}")


def test_h2_websocket_refusals(env):
    be = WsBackend()
    env.on_cleanup.append(be.close)
    px = _proxy(env, be.port, route_extra="    websocket: true\n    match: {path_prefix: /ws}\n"
                "  - pool: p\n")
    c = H2Client(px.port)
    env.on_cleanup.append(c.close)
    # another :protocol
    sid = _open(c, headers=[(":protocol", "webtransport")])
    assert c.status.get(sid) == 501, (c.status, c.reset)
    # a route without websocket: true: refused, not sent on as a plain GET
    sid = _open(c, path="/other")
    assert c.status.get(sid) == 405, (c.status, c.reset)
    # a plain CONNECT (no :protocol, no :path): the proxy is no forward proxy
    sid = c.conn.get_next_available_stream_id()
    c.conn.config.validate_outbound_headers = False  # (h2 asks a :path of it)
    c.conn.send_headers(sid, [(":method", "CONNECT"), (":authority", "example.com:443")])
    c.flush()
    c.wait(lambda: sid in c.status or sid in c.reset)
    assert c.status.get(sid) == 405, (c.status, c.reset)
    assert be.handshakes == 0
    # a backend answering 200 to the handshake is no tunnel: 502
    ok = ScriptedBackend(lambda n, req: (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi",
                                         False))
    env.on_cleanup.append(ok.close)
    px2 = _proxy(env, ok.port)
    c2 = H2Client(px2.port)
    env.on_cleanup.append(c2.close)
    sid = _open(c2)
    assert c2.status.get(sid) == 502, (c2.status, c2.reset)


def test_h2_websocket_wrong_accept_is_a_502(env):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    env.on_cleanup.append(srv.close)

    def serve():
        while True:  # (the 502 is retried: every try gets the same answer)
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                             b"Connection: Upgrade\r\nSec-WebSocket-Accept: "
                             b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")
    threading.Thread(target=serve, daemon=True).start()
    px = _proxy(env, srv.getsockname()[1])
    c = H2Client(px.port)
    env.on_cleanup.append(c.close)
    sid = _open(c)
    assert c.status.get(sid) == 502, (c.status, c.reset)
    assert _samples(px)[("accelnet_tunnels_open", ())] == 0


def test_h2_websocket_idle_timeout(env):
    be = WsBackend()
    env.on_cleanup.append(be.close)
    px = _proxy(env, be.port, extra="timeouts: {tunnel_idle_ms: 300}\n")
    c = H2Client(px.port)
    env.on_cleanup.append(c.close)
    sid = _open(c)
    assert c.status[sid] == 200
    c.wait(lambda: sid in c.reset)
    assert c.reset[sid] == 8  # CANCEL
    wait_until(lambda: _metric(px, "accelnet_tunnels_closed_total", reason="idle") == 1,
               "the idle tunnel counted")


def test_h2_websocket_a_backend_that_does_not_read_holds_the_client_back(env):
    release = threading.Event()
    got = [0]

    def after(conn):
        release.wait(60)
        got[0] = len(read_all(conn))
    be = RawWsBackend(after)
    be.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)  # (before it accepts)
    env.on_cleanup.append(be.close)
    px = _proxy(env, be.port)
    c = H2Client(px.port, timeout=1)
    env.on_cleanup.append(c.close)
    sid = _open(c)
    assert c.status[sid] == 200
    total, sent, block = 64 << 20, 0, bytes(16384)
    while sent < total:  # as the windows allow, until no credit comes back for a second
        room = min(c.conn.local_flow_control_window(sid), c.conn.max_outbound_frame_size)
        if room <= 0:
            try:
                c.pump()
            except (TimeoutError, socket.timeout):
                break
            continue
        c.conn.send_data(sid, block[:room])
        c.flush()
        sent += room
    assert sent < total // 8, sent  # held back: socket buffers and a buffer, not its memory
    assert _samples(px)[("accelnet_buffer_bytes", ())] <= 4 * 33 * 1024
    release.set()
    c.sock.settimeout(15)
    c.send_body(sid, b"x" * 1000, end=True)
    wait_until(lambda: got[0] == sent + 1000, "every byte the client sent reached the backend")


def test_h2_websocket_not_on_a_listener_with_http2_off(env):
    # no HTTP/2, so no extended CONNECT: the preface is read as an HTTP/1.1 request, refused
    be = WsBackend()
    env.on_cleanup.append(be.close)
    port = free_port()
    path = env.write("off.yaml", f"listen:\n  - address: 127.0.0.1:{port}\n    http2: false\n"
                     "pools:\n" + pool_yaml("p", [be.port]) +
                     "routes:\n  - pool: p\n    websocket: true\n")
    env.start([BIN, "proxy", "-c", path], "proxy", wait_port=port)
    s = socket.create_connection(("127.0.0.1", port), timeout=15)
    with s:
        c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        c.initiate_connection()
        c.send_headers(1, [(":method", "CONNECT"), (":protocol", "websocket"),
                           (":scheme", "http"), (":path", "/ws"), (":authority", "x"),
                           ("sec-websocket-version", "13")])
        s.sendall(c.data_to_send())
        got = read_all(s)
    assert got.startswith(b"HTTP/1.1 505 "), got[:100]  # PRI * HTTP/2.0
    assert be.handshakes == 0


def test_h2_websocket_max_tunnels_answers_503(env):
    be = WsBackend()
    env.on_cleanup.append(be.close)
    px = _proxy(env, be.port, extra="limits: {max_tunnels: 1}\n")
    c = H2Client(px.port)
    env.on_cleanup.append(c.close)
    first = _open(c)
    assert c.status[first] == 200
    second = _open(c)  # on the same connection: one tunnel is open already
    assert c.status.get(second) == 503 and c.headers[second].get("retry-after") == "1", \
        (c.status, c.headers.get(second))
    assert _samples(px)[("accelnet_tunnels_open", ())] == 1
    c.conn.reset_stream(first, error_code=8)
    c.flush()
    wait_until(lambda: _samples(px)[("accelnet_tunnels_open", ())] == 0, "the tunnel counted out")
    third = _open(c)
    assert c.status[third] == 200
    c.conn.reset_stream(third, error_code=8)  # (the backend's server then stops at once)
    c.flush()
    wait_until(lambda: _samples(px)[("accelnet_tunnels_open", ())] == 0, "the tunnel counted out")


def test_h2_websocket_a_101_with_content_length_is_no_body(env):
    # a backend's 101 saying Content-Length: 0: the client's 200 must not say it (no 2xx to a
    # CONNECT has a length, RFC 9110 9.3.6), or it reads the tunnel's bytes as a body too long
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    env.on_cleanup.append(srv.close)

    def serve():
        conn, _ = srv.accept()
        with conn:
            head = read_until(conn, lambda b: b"\r\n\r\n" in b)
            conn.sendall(ws_accept(head)[:-2] + b"Content-Length: 0\r\n\r\nhello")
            conn.shutdown(socket.SHUT_WR)
            read_all(conn)
    threading.Thread(target=serve, daemon=True).start()
    px = _proxy(env, srv.getsockname()[1])
    c = H2Client(px.port)
    env.on_cleanup.append(c.close)
    sid = _open(c)  # (before: h2 refused the DATA past content-length 0)
    assert c.status[sid] == 200 and "content-length" not in c.headers[sid], c.headers[sid]
    c.wait(lambda: sid in c.ended or sid in c.reset)
    assert c.body.get(sid) == b"hello" and sid not in c.reset, (c.body, c.reset)
    c.conn.end_stream(sid)  # our side too: the tunnel is closed (no drain at the proxy's stop)
    c.flush()
    wait_until(lambda: _metric(px, "accelnet_tunnels_closed_total", reason="closed") == 1,
               "the tunnel counted closed")
