"""Cancellation reaches the engine (issue 28): a client that closes its connection while its
request waits on the backend makes the proxy close the upstream connection at once, for a
non-streamed request as for a stream (an engine aborts a request whose connection closed).
A client that only half-closes (shutdown of its writing side after the request) has not
left: it still gets its answer (HAProxy's default; docs/security.md)."""

import json
import socket
import threading
import time

from harness import metrics_text, prom_samples, wait_until

BODY = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 4}).encode()


class AbortRecorder:
    """A backend that reads each request and never answers until the test lets it (answer
    is set): it notices when the proxy closes the connection before the answer, and records
    the time (self.aborts, time.monotonic() values). self.got counts the requests read."""

    def __init__(self, stream=False):
        self.stream = stream
        self.got = 0
        self.got_at = []
        self.aborts = []
        self.answer = threading.Event()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._conn, args=(conn,), daemon=True).start()

    def _conn(self, conn):
        buf = b""
        with conn:
            while b"\r\n\r\n" not in buf:
                d = conn.recv(65536)
                if not d:
                    return
                buf += d
            head, body = buf.split(b"\r\n\r\n", 1)
            n = 0
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    n = int(v)
            while len(body) < n:
                body += conn.recv(65536)
            self.got += 1
            self.got_at.append(time.monotonic())
            if self.stream:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
            conn.settimeout(0.05)
            while not self.answer.is_set():
                try:
                    d = conn.recv(1)
                except socket.timeout:
                    continue
                except OSError:
                    d = b""
                if not d:
                    self.aborts.append(time.monotonic())
                    return
            out = b'{"choices":[{"text":"ok"}]}'
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(out), out))

    def close(self):
        self.answer.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def _setup(env, stream=False):
    be = AbortRecorder(stream)
    env.on_cleanup.append(be.close)
    px = env.proxy("pools:\n  - name: p\n    backends:\n"
                   f"      - {{address: 127.0.0.1:{be.port}}}\nroutes:\n  - pool: p\n")
    return be, px


def _send(port, stream=False):
    body = json.loads(BODY)
    body["stream"] = stream
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
    return s


def _client_leaves(env, stream):
    be, px = _setup(env, stream)
    s = _send(px.port, stream)
    wait_until(lambda: be.got == 1, "the request at the backend")
    left = time.monotonic()
    s.close()
    wait_until(lambda: be.aborts, "the backend to see its connection closed", timeout=5)
    took = be.aborts[0] - left
    assert took < 1.0, f"the upstream connection closed {took:.2f} s after the client left"


def test_cancel_non_streamed_reaches_the_backend(env):
    _client_leaves(env, stream=False)


def test_cancel_streamed_reaches_the_backend(env):
    _client_leaves(env, stream=True)


def test_cancel_half_close_is_not_leaving(env):
    """A client that shuts its writing side after its request still gets the answer: the
    upstream connection stays open (no abort) and the answer comes back."""
    be, px = _setup(env)
    s = _send(px.port)
    wait_until(lambda: be.got == 1, "the request at the backend")
    s.shutdown(socket.SHUT_WR)
    # the proxy has seen the half-close when a second request on another connection, sent
    # after it, has reached the backend too: by then a proxy that took it for leaving has
    # closed the first upstream connection
    s2 = _send(px.port)
    wait_until(lambda: be.got == 2, "the second request at the backend")
    s2.close()
    wait_until(lambda: len(be.aborts) == 1, "the second request's abort", timeout=5)
    be.answer.set()
    s.settimeout(10)
    got = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        got += d
        if got.endswith(b"}]}"):
            break
    s.close()
    # (the proxy asked whether it had left with an interim 100 Continue: a 1.1 client reads
    # past interims)
    while got.startswith(b"HTTP/1.1 1"):
        got = got.split(b"\r\n\r\n", 1)[1]
    assert got.startswith(b"HTTP/1.1 200"), got
    assert len(be.aborts) == 1, be.aborts


def _pool_metric(px, name):
    got = prom_samples(metrics_text(px.admin))
    return sum(v for k, v in got.items() if k[0] == name)


def _queued(px):
    return _pool_metric(px, "accelnet_pool_queue_length")


def _withdrawn(px):
    return _pool_metric(px, "accelnet_pool_queue_withdrawn_total")


def test_cancel_while_queued(env):
    """Queued behind a full backend (max_concurrency: 1): a client that closes leaves the
    queue (its request never reaches the backend); one that half-closes stays in line and
    gets its answer."""
    be = AbortRecorder()
    env.on_cleanup.append(be.close)
    px = env.proxy("pools:\n  - name: p\n    backends:\n"
                   f"      - {{address: 127.0.0.1:{be.port}, max_concurrency: 1}}\n"
                   "routes:\n  - pool: p\n")
    first = _send(px.port)
    wait_until(lambda: be.got == 1, "the first request at the backend")
    gone, half = _send(px.port), _send(px.port)
    wait_until(lambda: _queued(px) == 2, "two requests in the queue")
    gone.close()
    half.shutdown(socket.SHUT_WR)
    wait_until(lambda: _withdrawn(px) == 1, "the closed client's request out of the queue")
    assert _queued(px) == 1
    # the first request's client leaves too: the backend's slot frees, the queue moves on
    first.close()
    wait_until(lambda: be.got == 2, "the half-closed client's request at the backend")
    be.answer.set()
    half.settimeout(10)
    got = b""
    while not got.endswith(b"}]}"):
        d = half.recv(65536)
        if not d:
            break
        got += d
    half.close()
    while got.startswith(b"HTTP/1.1 1"):
        got = got.split(b"\r\n\r\n", 1)[1]
    assert got.startswith(b"HTTP/1.1 200"), got
    assert be.got == 2, be.got
