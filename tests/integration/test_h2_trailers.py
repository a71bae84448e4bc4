"""Trailers across the HTTP/2 client codec (docs/http2.md): a client's request trailers reach
an HTTP/1.1 backend in its chunked body's trailer section, a chunked response's trailer
section reaches the HTTP/2 client as trailers; fields that frame, route or authenticate a
message never cross."""

import socket
import threading

from harness import pool_yaml, wait_until
from test_h2 import H2Client


def _read_chunked(conn, buf):
    """Read one chunked body from conn (buf: what came after the head). Returns (payload,
    trailer section)."""
    payload = b""
    while True:
        while b"\r\n" not in buf:
            buf += conn.recv(65536)
        line, buf = buf.split(b"\r\n", 1)
        size = int(line.split(b";")[0], 16)
        if size == 0:
            break
        while len(buf) < size + 2:
            buf += conn.recv(65536)
        payload += buf[:size]
        buf = buf[size + 2:]
    while not (buf.startswith(b"\r\n") or b"\r\n\r\n" in buf):
        buf += conn.recv(65536)
    trailer = b"" if buf.startswith(b"\r\n") else buf.split(b"\r\n\r\n", 1)[0]
    return payload, trailer


def _backend(env, answer):
    """An HTTP/1.1 backend: for each request, answer(head, payload, trailer) gives the raw
    response written back. Returns its port."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    env.on_cleanup.append(srv.close)

    def serve_one(conn):
        with conn:
            buf = b""
            while b"\r\n\r\n" not in buf:
                got = conn.recv(65536)
                if not got:
                    return
                buf += got
            head, rest = buf.split(b"\r\n\r\n", 1)
            payload, trailer = b"", b""
            if b"transfer-encoding: chunked" in head.lower():
                payload, trailer = _read_chunked(conn, rest)
            conn.sendall(answer(head, payload, trailer))
            conn.recv(1)  # the proxy closes, or keeps it idle until the test ends

    def serve():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return srv.getsockname()[1]


def test_h2_request_trailers_reach_a_chunked_backend(env):
    seen = {}

    def answer(head, payload, trailer):
        seen["payload"], seen["trailer"] = payload, trailer
        return b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

    px = env.proxy("pools:\n" + pool_yaml("p", [_backend(env, answer)]))
    c = H2Client(px.port)
    sid = c.send("POST", "/v1/completions", body=b'{"prompt":"x"}', end=False)
    c.conn.send_headers(sid, [("x-checksum", "abc123"), ("x-forwarded-for", "10.6.6.6"),
                              ("authorization", "Bearer stolen"), ("x-request-id", "forged")],
                        end_stream=True)
    c.flush()
    c.wait(lambda: sid in c.ended or sid in c.reset)
    c.close()
    assert c.status[sid] == 200 and c.body[sid] == b"ok"
    assert seen["payload"] == b'{"prompt":"x"}'
    fields = seen["trailer"].lower().split(b"\r\n")
    assert b"x-checksum: abc123" in fields
    # what frames, routes or authenticates a request never comes as a trailer
    assert not any(f.split(b":")[0] in (b"x-forwarded-for", b"authorization", b"x-request-id")
                   for f in fields), fields


def test_h2_response_trailers_reach_the_h2_client(env):
    def answer(head, payload, trailer):
        return (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n"
                b"5\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum:  42 \r\nGrpc-Status: 0\r\n"
                b"Set-Cookie: a=b\r\nContent-Length: 9\r\n\r\n")

    px = env.proxy("pools:\n" + pool_yaml("p", [_backend(env, answer)]))
    c = H2Client(px.port)
    sid = c.send("GET", "/v1/models/x")
    c.wait(lambda: sid in c.ended or sid in c.reset)
    c.close()
    assert c.status[sid] == 200 and c.body[sid] == b"hello world"
    assert c.trailers[sid] == {"x-sum": "42", "grpc-status": "0"}


def test_h2_response_without_trailers_ends_with_its_body(env):
    def answer(head, payload, trailer):
        return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"

    px = env.proxy("pools:\n" + pool_yaml("p", [_backend(env, answer)]))
    c = H2Client(px.port)
    sid = c.send("GET", "/x")
    c.wait(lambda: sid in c.ended or sid in c.reset)
    c.close()
    assert c.body[sid] == b"hi" and sid not in c.trailers
