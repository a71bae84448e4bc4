"""routes.rate_limit beyond request rates (issue 12): X-RateLimit-* headers on a 429, a rate
for the whole route, tokens per minute per tenant (reserved before a slot is taken, settled
with the usage or the streamed tokens, never overdrawn by a stream), and the cap on a
tenant's requests in flight."""

import http.client
import json
import socket
import threading
import time

from harness import (ScriptedBackend, pool_yaml, read_until, request, sim_stats, status,
                     wait_until)


def _post(port, body, tenant="a", path="/v1/completions"):
    return request(port, "POST", path, body=json.dumps(body),
                   headers={"Content-Type": "application/json", "X-Tenant": tenant})


def _stream(port, body, tenant="a"):
    """A streamed completion: (status, headers, the SSE data lines)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("POST", "/v1/completions", body=json.dumps(dict(body, stream=True)),
                  headers={"Content-Type": "application/json", "X-Tenant": tenant})
        r = c.getresponse()
        data = r.read().decode()
        return r.status, dict((k.lower(), v) for k, v in r.getheaders()), \
            [ln[5:].strip() for ln in data.split("\n") if ln.startswith("data:")]
    finally:
        c.close()


def test_429_carries_ratelimit_headers_and_per_route_counts_everyone(env):
    sim = env.sim("a", latency_ms=0, token_ms=0)
    p = env.proxy("pools:\n" + pool_yaml("p", [sim.port]) +
                  "routes:\n"
                  "  - match: {path_prefix: /r/}\n    pool: p\n    tenant_header: X-Tenant\n"
                  "    rate_limit: {per_route: 3/m, burst: 3}\n"
                  "  - match: {path_prefix: /}\n    pool: p\n")
    # three different tenants spend the route's burst together; the fourth is refused
    got = [request(p.port, "GET", "/r/x", headers={"X-Tenant": t})[:2] for t in "abcd"]
    assert [g[0] for g in got] == [200, 200, 200, 429], [g[0] for g in got]
    h = got[3][1]
    assert h["retry-after"] == ["20"], h  # one request every 20 s
    assert h["x-ratelimit-limit"] == ["3"], h
    assert h["x-ratelimit-remaining"] == ["0"], h
    assert 40 <= int(h["x-ratelimit-reset"][0]) <= 60, h  # until the bucket is full again
    assert "x-ratelimit-limit" not in got[0][1]  # passed responses carry none (docs)
    # other routes are not limited
    assert request(p.port, "GET", "/open")[0] == 200


def _est(body):
    """The proxy's prompt estimate (and the sim's prompt_tokens): body bytes / 4."""
    return len(json.dumps(body)) // 4


def test_token_limit_refuses_before_a_slot_and_settles_with_usage(env):
    sim = env.sim("a", latency_ms=0, token_ms=0, tokens=16)
    # one token a second: the test's own time hardly refills the bucket
    p = env.proxy("pools:\n" + pool_yaml("p", [sim.port]) +
                  "routes:\n  - pool: p\n    tenant_header: X-Tenant\n"
                  "    rate_limit: {tokens_per_minute: 60, token_burst: 250, "
                  "default_max_tokens: 150}\n")
    body = {"prompt": "hello there", "max_tokens": 100}
    need = _est(body) + 100  # reserved, and used: the sim honours max_tokens
    assert _post(p.port, body)[0] == 200
    assert _post(p.port, body)[0] == 200
    left = 250 - 2 * need
    before = sim_stats(sim.port)["requests"]
    st, h, text = _post(p.port, body)
    assert st == 429, (st, text)
    assert b"tokens_per_minute" in text
    assert h["x-ratelimit-limit"] == ["250"], h
    assert int(h["x-ratelimit-remaining"][0]) in (left, left + 1), h
    assert int(h["retry-after"][0]) in (need - left, need - left - 1), h  # at 1 a second
    # refused before it took a slot: the sim saw only the stats request since
    assert sim_stats(sim.port)["requests"] == before + 1
    # another tenant has its own budget
    assert _post(p.port, body, tenant="b")[0] == 200

    # no max_tokens: default_max_tokens is reserved, and the unused part comes back once
    # the response says what it cost (16 tokens and the prompt): several fit in a row where
    # without the refunds only one would
    def predict(body, cost, n=4):
        left, out = 250, []
        for _ in range(n):
            ok = _est(body) + 150 <= left
            left -= cost if ok else 0
            out.append(200 if ok else 429)
        return out

    small = {"prompt": "x"}
    want = predict(small, _est(small) + 16)
    assert want.count(200) > 1
    assert [_post(p.port, small, tenant="c")[0] for _ in want] == want
    # a stream settles with its counted tokens (no usage chunk asked for)
    events = None
    got = []
    for _ in range(4):
        st, _, events = _stream(p.port, small, tenant="d")
        got.append(st)
    assert got == predict(dict(small, stream=True), _est(dict(small, stream=True)) + 16)
    # ... and with stream_options.include_usage, with the usage of its last chunk
    u = dict(small, stream_options={"include_usage": True}, stream=True)
    got = []
    for _ in range(4):
        st, _, events = _stream(p.port, u, tenant="e")
        got.append(st)
        if st == 200:
            assert json.loads(events[-2])["usage"]["completion_tokens"] == 16, events
    want = predict(u, _est(u) + 16)
    assert got == want and want.count(200) > 1 and 429 in want, (got, want)


def test_a_stream_past_its_reservation_is_charged(env):
    # a backend that ignores max_tokens: 40 events, whatever was asked
    def script(n, req):
        ev = b"".join(b'data: {"choices":[{"text":"t%d"}]}\n\n' % i for i in range(40))
        ev += b"data: [DONE]\n\n"
        return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(ev), ev), False)
    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    p = env.proxy("pools:\n" + pool_yaml("p", [be.port]) +
                  "routes:\n  - pool: p\n    tenant_header: X-Tenant\n"
                  "    rate_limit: {tokens_per_minute: 60, token_burst: 100}\n")
    body = {"prompt": "", "max_tokens": 5}
    st, _, events = _stream(p.port, body)
    assert st == 200 and len(events) == 41
    # charged the prompt and 40 tokens, not the 5 reserved
    left = 100 - _est(dict(body, stream=True)) - 40
    fits = max(m for m in range(left + 1) if _est({"prompt": "", "max_tokens": m}) + m <= left)
    small = {"prompt": ""}
    st, h, _ = _post(p.port, dict(small, max_tokens=fits + 3))
    assert st == 429 and int(h["x-ratelimit-remaining"][0]) in (left, left + 1), (st, h, left)
    assert _post(p.port, dict(small, max_tokens=fits))[0] == 200


def test_concurrency_cap_per_tenant(env):
    # each request holds a sim slot for ~16 x 60 ms; the sim has slots to spare
    sim = env.sim("a", slots=16, latency_ms=0, token_ms=60, tokens=16)
    p = env.proxy("pools:\n" + pool_yaml("p", [sim.port]) +
                  "routes:\n  - pool: p\n    tenant_header: X-Tenant\n"
                  "    rate_limit: {concurrency: 2}\n")
    results = []

    def one(tenant):
        st, h, _ = _post(p.port, {"prompt": "hi"}, tenant=tenant)
        results.append((tenant, st, h))

    threads = [threading.Thread(target=one, args=("a",)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(st for _, st, _ in results)
    assert codes.count(200) >= 2 and codes.count(429) >= 1, codes
    refused = [h for _, st, h in results if st == 429]
    assert refused[0]["x-ratelimit-limit"] == ["2"] and refused[0]["retry-after"] == ["1"]
    assert sim_stats(sim.port)["max_active"] == 2  # the tenant never held more than 2
    # two tenants at once: each gets its own two
    threads = [threading.Thread(target=one, args=(t,)) for t in "bbbccc"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sim_stats(sim.port)["max_active"] <= 4


class _Backend:
    """A backend for the concurrency leak test, by path: /ok answers, /fail closes without
    an answer, /hold answers once release is set, /stream sends chunks until the client is
    gone, /big sends 64 MiB (and notes when the proxy stops taking it), /gate answers once
    `gate` requests are open at once (or after 10 s, saying so)."""

    def __init__(self, gate):
        self.gate, self.open_gate, self.holding = gate, 0, 0
        self.lock = threading.Condition()
        self.release = threading.Event()
        self.big_cut = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._conn, args=(c,), daemon=True).start()

    def _conn(self, c):
        buf = b""
        with c:
            while True:
                while b"\r\n\r\n" not in buf:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                head, buf = buf.split(b"\r\n\r\n", 1)
                n = 0
                for ln in head.split(b"\r\n")[1:]:
                    k, _, v = ln.partition(b":")
                    if k.strip().lower() == b"content-length":
                        n = int(v)
                while len(buf) < n:
                    buf += c.recv(65536)
                buf = buf[n:]
                path = head.split(b" ")[1].decode()
                try:
                    if not self._answer(c, path):
                        return
                except OSError:
                    if path == "/big":
                        self.big_cut.set()
                    return

    def _answer(self, c, path):
        body = b"ok"
        if path == "/fail":
            return False
        if path == "/hold":
            with self.lock:
                self.holding += 1
                self.lock.notify_all()
            self.release.wait(30)
        if path == "/stream":
            c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for _ in range(600):
                c.sendall(b"8\r\ndata: x\n\r\n")
                time.sleep(0.05)
            return False
        if path == "/big":
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (64 << 20))
            chunk = b"x" * (1 << 20)
            for _ in range(64):
                c.sendall(chunk)
            return True
        if path == "/gate":
            with self.lock:
                self.open_gate += 1
                self.lock.notify_all()
                together = self.lock.wait_for(lambda: self.open_gate >= self.gate, 10)
            body = b"together" if together else b"alone"
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        return True


def test_no_exit_path_leaks_a_tenants_concurrency(env):
    """Every way an exchange can end (answered on a kept-alive connection, a backend that
    fails, a client gone mid-stream, a slow reader cut by send_ms, a client leaving the
    queue, a queue timeout, a full queue) gives its count back: afterwards the tenant still
    has all of its 3 requests in flight at once."""
    be = _Backend(3)
    p = env.proxy("pools:\n  - name: p\n    backends:\n"
                  f"      - {{address: 127.0.0.1:{be.port}, max_concurrency: 3}}\n"
                  "    queue: {max: 1, timeout_ms: 400}\n"
                  "routes:\n  - pool: p\n    tenant_header: X-Tenant\n"
                  "    rate_limit: {concurrency: 3, tokens_per_minute: 6000000, "
                  "default_max_tokens: 10}\n",
                  extra="timeouts: {send_ms: 500}\n")
    hdr = {"X-Tenant": "a"}
    c = http.client.HTTPConnection("127.0.0.1", p.port, timeout=15)  # kept alive
    for _ in range(4):
        c.request("GET", "/ok", headers=hdr)
        r = c.getresponse()
        assert (r.status, r.read()) == (200, b"ok")
    c.close()
    assert request(p.port, "GET", "/fail", headers=hdr)[0] == 502
    # gone mid-stream
    s = socket.create_connection(("127.0.0.1", p.port))
    s.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\nX-Tenant: a\r\n\r\n")
    assert b"data: x" in read_until(s, lambda g: b"data: x" in g)
    s.close()
    # a reader that never reads is cut by send_ms
    s = socket.create_connection(("127.0.0.1", p.port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\nX-Tenant: a\r\n\r\n")
    assert be.big_cut.wait(20), "the slow reader was not cut"
    s.close()
    # another tenant takes every slot: tenant a's requests queue
    holders = [threading.Thread(target=request, args=(p.port, "GET", "/hold"),
                                kwargs={"headers": {"X-Tenant": "z"}, "timeout": 30})
               for _ in range(3)]
    for t in holders:
        t.start()
    with be.lock:
        assert be.lock.wait_for(lambda: be.holding == 3, 15)

    def qlen():
        return status(p.admin)["pools"][0]["queue"]["length"]

    s = socket.create_connection(("127.0.0.1", p.port))
    s.sendall(b"GET /ok HTTP/1.1\r\nHost: x\r\nX-Tenant: a\r\n\r\n")
    wait_until(lambda: qlen() == 1, "a request to queue")
    s.close()  # leaves the queue
    wait_until(lambda: qlen() == 0, "the queue to let it go")
    assert request(p.port, "GET", "/ok", headers=hdr)[0] == 503  # queue.timeout_ms
    queued = []
    t = threading.Thread(target=lambda: queued.append(
        request(p.port, "GET", "/ok", headers=hdr)[0]))
    t.start()
    wait_until(lambda: qlen() == 1, "a request to queue")
    full = request(p.port, "GET", "/ok", headers=hdr)[0]  # the queue is full
    be.release.set()
    t.join(15)
    for h in holders:
        h.join(15)
    assert sorted(queued + [full]) in ([200, 503], [503, 503]), (queued, full)
    # all three of the tenant's requests in flight at once
    got = []
    gate = [threading.Thread(target=lambda: got.append(
        request(p.port, "GET", "/gate", headers=hdr)[::2])) for _ in range(3)]
    for t in gate:
        t.start()
    for t in gate:
        t.join(20)
    assert got == [(200, b"together")] * 3, got
