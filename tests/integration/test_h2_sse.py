"""routes.sse_heartbeat_ms over HTTP/2: a streaming request waiting for a slot or its first
token gets the proxy's own event-stream head and SSE comments as DATA, then the backend's
events on the same stream; a queue timeout or a backend's error after that head ends the
stream with an SSE error event, as over HTTP/1.1 (test_sched's heartbeat tests)."""

import concurrent.futures
import json

from harness import ScriptedBackend, complete, status, wait_until
from test_h2 import H2Client
from test_sched import waited_then_tokens


def _inflight(px):
    return sum(b["inflight"] for p in status(px.admin)["pools"] for b in p["backends"])


def _proxy(env, port, cap=1, extra=""):
    return env.proxy("pools:\n  - name: gpu\n    balance: round-robin\n    backends:\n"
                     f"      - {{address: 127.0.0.1:{port}, max_concurrency: {cap}}}\n" + extra +
                     "routes:\n  - pool: gpu\n    sse_heartbeat_ms: 50\n")


def _stream(c, body=b'{"prompt": "hi", "stream": true}'):
    return c.send("POST", "/v1/completions", body,
                  headers=[("content-type", "application/json"),
                           ("content-length", str(len(body)))])


def test_h2_sse_heartbeats_while_queued_then_tokens(env):
    sim = env.sim("acc", latency_ms=500, jitter=0, token_ms=5, tokens=3, slots=64)
    px = _proxy(env, sim.port)
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        first = ex.submit(complete, px.port)  # holds the one slot for 500 ms
        wait_until(lambda: _inflight(px) == 1, "the first request in service")
        c = H2Client(px.port)
        sid = _stream(c)
        c.wait(lambda: sid in c.ended or sid in c.reset)
        c.close()
        assert first.result()[0] == 200
    assert sid not in c.reset, c.reset
    assert c.status[sid] == 200 and c.headers[sid]["content-type"] == "text/event-stream"
    assert c.headers[sid]["x-request-id"], c.headers[sid]
    waited_then_tokens(c.body[sid], 3)


def test_h2_sse_heartbeat_then_queue_timeout_is_an_error_event(env):
    sim = env.sim("acc", latency_ms=1000, jitter=0, token_ms=0, slots=64)
    px = _proxy(env, sim.port, extra="    queue: {timeout_ms: 300}\n")
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        ex.submit(complete, px.port)
        wait_until(lambda: _inflight(px) == 1, "the first request in service")
        c = H2Client(px.port)
        sid = _stream(c)
        c.wait(lambda: sid in c.ended or sid in c.reset)
        c.close()
    assert sid not in c.reset and c.status[sid] == 200, (c.reset, c.status)
    body = c.body[sid]
    assert body.startswith(b": waiting\n\n"), body
    assert b'event: error\ndata: {"error":{"status":503' in body, body
    event = body[body.index(b"event: error"):]
    assert json.loads(event.split(b"data: ", 1)[1])["request_id"] == c.headers[sid]["x-request-id"]


def test_h2_sse_backend_answers_after_the_head(env):
    """A backend's event stream (here with a Content-Length) continues the stream the proxy
    began; a backend's 429 ends it with an error event; a request that is no stream gets the
    backend's own answer, no early head."""
    import threading
    release = threading.Event()
    answers = {"n": 0}

    def backend(n, req):
        release.wait(20)
        if b'"stream": true' not in req:
            return b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", False
        answers["n"] += 1
        if answers["n"] == 1:
            ev = b"data: one\n\n"
            return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(ev), ev)), False
        return (b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
                b"Content-Length: 2\r\n\r\n{}"), False
    be = ScriptedBackend(backend)
    env.on_cleanup.append(be.close)
    env.on_cleanup.append(release.set)
    px = _proxy(env, be.port, cap=0)
    c = H2Client(px.port)
    plain = c.send("POST", "/v1/completions", b'{"prompt": "hi"}')
    wait_until(lambda: be.count == 1, "the plain request at the backend")
    release.set()
    c.wait(lambda: plain in c.ended)
    assert c.status[plain] == 200 and c.body[plain] == b"ok", (c.status, c.body)
    assert "text/event-stream" not in c.headers[plain].get("content-type", "")
    for want in (b"data: one\n\n", b'event: error\ndata: {"error":{"status":429'):
        release.clear()
        sid = _stream(c)
        c.wait(lambda: b": waiting" in c.body.get(sid, b""))
        release.set()
        c.wait(lambda: sid in c.ended or sid in c.reset)
        assert sid not in c.reset and c.status[sid] == 200, (c.reset, c.status)
        assert want in c.body[sid], c.body[sid]
    c.close()
