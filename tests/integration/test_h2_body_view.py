"""An HTTP/2 request body sent without content-length (RFC 9113 allows it; Python h2, gRPC
and some SDKs do it) is read by the same strict view as one sent with it: the model that
picks the backends, balance: llm's prompt, a stream's heartbeats."""

import json

import h2.events

from harness import echo_backend, pool_yaml, request, status
from test_h2 import H2Client


def _send(c, body, length):
    hs = [("content-type", "application/json")]
    if length:
        hs.append(("content-length", str(len(body))))
    return c.send("POST", "/v1/chat/completions", body, headers=hs)


def test_h2_body_without_content_length_is_read_for_the_prompt(env):
    sims = [env.sim(f"s{i}", latency_ms=200, cache_hit_ms=5, prefix_cache=16, jitter=0,
                    tokens=1, token_ms=0) for i in range(2)]
    px = env.proxy("pools:\n  - name: gpu\n    balance: llm\n    llm: {block_bytes: 64, explain: true}\n"
                   "    backends:\n" +
                   "".join(f"      - {{address: 127.0.0.1:{s.port}, max_concurrency: 4}}\n"
                           for s in sims))
    system = "a long shared system prompt, " * 40
    body = json.dumps({"model": "m", "max_tokens": 2,
                       "messages": [{"role": "system", "content": system},
                                    {"role": "user", "content": "hi"}]}).encode()
    c = H2Client(px.port)
    served = []
    for length in (True,) + (False,) * 4:  # its home learnt, then four without a length
        sid = _send(c, body, length)
        c.wait(lambda: sid in c.ended)
        assert c.status[sid] == 200, c.status
        served.append(c.headers[sid]["x-served-by"])
        # llm.explain's header crosses to HTTP/2 clients too (it named the pick)
        assert f'pick="127.0.0.1:' in c.headers[sid]["x-accelnet-llm"], c.headers[sid]
    c.close()
    # the prompt was read every time: every one went to the backend that holds it
    assert len(set(served)) == 1, served
    blocks = [b["llm_index_blocks"] for b in status(px.admin)["pools"][0]["backends"]]
    assert sorted(blocks)[0] == 0 and sorted(blocks)[1] > 0, blocks


def test_h2_body_without_content_length_matches_a_model_route(env):
    """A route that matches on the body's model answered 411 (Length Required) to an HTTP/2
    request whose body came whole but without content-length: the body is waited for (what
    is read before admission) and framed by its length."""
    a, b = env.sim("a", latency_ms=0, token_ms=0), env.sim("b", latency_ms=0, token_ms=0)
    px = env.proxy(f"pools:\n  - name: pa\n    backends: [{{address: 127.0.0.1:{a.port}}}]\n"
                   f"  - name: pb\n    backends: [{{address: 127.0.0.1:{b.port}}}]\n"
                   "routes:\n  - match: {model: 'llama-*'}\n    pool: pa\n  - pool: pb\n")
    c = H2Client(px.port)
    got = []
    for model in ("llama-3", "other"):
        body = json.dumps({"model": model, "prompt": "hi", "max_tokens": 1}).encode()
        sid = _send(c, body, False)
        c.wait(lambda: sid in c.ended)
        got.append((c.status[sid], c.headers[sid].get("x-served-by")))
    assert got == [(200, "a"), (200, "b")], got
    # the head alone first, the body in later frames: waited for, and read
    sid = c.conn.get_next_available_stream_id()
    c.conn.send_headers(sid, [(":method", "POST"), (":path", "/v1/completions"),
                              (":authority", "test"), (":scheme", "http")])
    c.flush()
    body = json.dumps({"model": "llama-3", "prompt": "x" * 40000, "max_tokens": 1}).encode()
    c.send_body(sid, body)
    c.wait(lambda: sid in c.ended or sid in c.reset)
    assert c.status[sid] == 200 and c.headers[sid].get("x-served-by") == "a", c.headers[sid]
    # a body longer than what is read before admission (a quarter of limits.body_buffer_bytes)
    # cannot be waited for: it goes chunked, and a chunked body names no model here: 411, as
    # over HTTP/1.1 (docs/config.md, routes.match.model)
    sid = c.conn.get_next_available_stream_id()
    c.conn.send_headers(sid, [(":method", "POST"), (":path", "/v1/completions"),
                              (":authority", "test"), (":scheme", "http")])
    c.flush()
    body = json.dumps({"model": "llama-3", "prompt": "x" * 400000}).encode()
    c.send_body(sid, body)
    c.wait(lambda: sid in c.ended or sid in c.reset)
    assert c.status[sid] == 411, (c.status[sid], c.body.get(sid))
    c.close()


def test_h2_one_connection_cannot_take_every_body_buffer(env):
    """Bodies a client sends slowly hold body buffers (limits.body_buffer_bytes) while they are
    read, at most 64 a worker. One HTTP/2 connection's streams each took one: sent without
    content-length and never ended, each was held (waiting for its end) in a body buffer for
    timeouts.header_ms, and then read on; 64 of them left none to anyone else, and an
    HTTP/1.1 client's body waited for as long. Now one connection's streams share a few."""
    be = echo_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]), workers=1,
                   extra="timeouts: {header_ms: 60000}\n")
    c = H2Client(px.port)
    sids = [c.send("POST", f"/slow/{i}", body=b"x" * 12000, end=False) for i in range(80)]
    c.conn.ping(b"12345678")  # its answer comes after every stream's DATA was read
    c.flush()
    acked = []
    while not acked:
        data = c.sock.recv(65536)
        assert data, "the proxy closed the connection"
        acked = [e for e in c.conn.receive_data(data) if isinstance(e, h2.events.PingAckReceived)]
        c.flush()
    st, _, body = request(px.port, "POST", "/victim", body=b"y" * 200000, timeout=10)
    assert st == 200 and len(body) > 200000, (st, len(body))
    assert not c.reset, c.reset
    c.close()


def test_h2_many_bodies_on_one_connection_each_keep_their_length(env):
    """Twelve 200 KB bodies at once on one connection, half without content-length: each
    reaches the backend whole, framed by its length. The connection's streams share a few
    body buffers: a held body (no content-length) whose window closed waits for one, as a
    body with a length does, rather than going chunked because others held them; and one
    waiting for a buffer looks again every BODY_BUF_WAIT_MS (it waited for the body-rate
    window, seconds, before)."""
    be = echo_backend(env)
    px = env.proxy("pools:\n" + pool_yaml("p", [be.port]), workers=1)
    c = H2Client(px.port)
    bodies = {}
    for i in range(12):
        body = bytes([65 + i]) * 200000
        hs = [("content-length", str(len(body)))] if i % 2 else []
        bodies[c.send("POST", f"/b{i}", headers=hs, end=False)] = body
    pending = dict(bodies)
    while pending:  # each stream's body as its window allows, interleaved
        sent = False
        for sid, body in list(pending.items()):
            room = min(c.conn.local_flow_control_window(sid), c.conn.max_outbound_frame_size,
                       len(body))
            if room > 0:
                c.conn.send_data(sid, body[:room], end_stream=room == len(body))
                pending[sid] = body[room:]
                sent = True
                if not pending[sid]:
                    del pending[sid]
        c.flush()
        if not sent:
            c.pump()
    for sid, body in bodies.items():
        c.wait(lambda: sid in c.ended or sid in c.reset)
        got = c.body.get(sid, b"")
        assert sid not in c.reset and c.status[sid] == 200, (c.status, c.reset)
        assert b"Content-Length: 200000\r\n" in got and got.endswith(body), got[:300]
    c.close()
