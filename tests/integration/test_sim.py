"""The simulated accelerator's contract (DESIGN.md), talked to directly."""

import json

from harness import complete, raw, request, sim_stats


def test_sim_answers_every_path_with_served_by(env):
    sim = env.sim("acc0", latency_ms=0, token_ms=0)
    st, h, body = request(sim.port, "GET", "/health")
    assert st == 200 and h["x-served-by"] == ["acc0"]
    st, h, body = request(sim.port, "PUT", "/any/thing", body=b"12345")
    assert st == 200 and h["x-served-by"] == ["acc0"] and b"(5 body bytes)" in body


def test_sim_completions_and_chat(env):
    sim = env.sim("acc0", latency_ms=0, token_ms=0, tokens=4)
    st, h, body = complete(sim.port)
    doc = json.loads(body)
    assert st == 200 and doc["object"] == "text_completion"
    assert doc["choices"][0]["text"] == "tok0 tok1 tok2 tok3 "
    assert doc["usage"]["completion_tokens"] == 4
    st, h, body = complete(sim.port, json.dumps({"messages": [], "max_tokens": 2}),
                           path="/v1/chat/completions")
    doc = json.loads(body)
    assert doc["object"] == "chat.completion"
    assert doc["choices"][0]["message"]["content"] == "tok0 tok1 "


def test_sim_streams_sse(env):
    sim = env.sim("acc0", latency_ms=0, token_ms=1, tokens=3)
    out = raw(sim.port, b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n'
              b'Content-Length: 16\r\n\r\n{"stream": true}')
    assert b"Content-Type: text/event-stream" in out
    events = [line for line in out.split(b"\n") if line.startswith(b"data: ")]
    assert len(events) == 4 and events[-1] == b"data: [DONE]", events
    assert json.loads(events[0][6:])["choices"][0]["text"] == "tok0 "


def test_sim_queues_beyond_its_slots(env):
    sim = env.sim("acc0", slots=1, latency_ms=200, jitter=0, token_ms=0, tokens=1)
    import re
    import socket
    from harness import read_all
    # connected first, then the three requests sent back to back from one thread, so that
    # they arrive within a millisecond even on a loaded machine (threads could be ms apart)
    req = (b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n'
           b'Content-Length: 16\r\n\r\n{"prompt": "hi"}')
    socks = [socket.create_connection(("127.0.0.1", sim.port), timeout=15) for _ in range(3)]
    try:
        for s in socks:
            s.sendall(req)
        outs = [read_all(s) for s in socks]
    finally:
        for s in socks:
            s.close()
    assert all(o.startswith(b"HTTP/1.1 200 ") for o in outs), outs
    waits = sorted(int(re.search(rb"\r\nX-Sim-Wait-Ms: (\d+)\r\n", o, re.I).group(1))
                   for o in outs)
    # one slot: each request waited for those before it; the third for two full services
    # of 200 ms (less a millisecond of clock truncation per service)
    assert waits[0] < waits[1] < waits[2] and waits[2] >= 398, waits
    st = sim_stats(sim.port)
    assert st["max_waiting"] >= 2 and st["completions"] == 3, st


def test_sim_fail_rate(env):
    sim = env.sim("acc0", fail_rate=1, latency_ms=0)
    st, h, body = complete(sim.port)
    assert st == 500 and json.loads(body)["error"]["type"] == "server_error"
    sim = env.sim("acc1", fail_rate=0, latency_ms=0, token_ms=0)
    assert all(complete(sim.port)[0] == 200 for _ in range(20))


def test_sim_stalls_freeze_service(env):
    import threading
    from harness import wait_until
    # frozen from 1 s to 60 s of every minute: a request made while frozen stays in service
    sim = env.sim("staller", latency_ms=0, token_ms=0, tokens=1, stall_ms=59000,
                  stall_every_ms=60000)
    wait_until(lambda: sim_stats(sim.port)["stalled"], "the stall to begin")
    def held():  # never answered: the sim is stopped under it when the test ends
        try:
            complete(sim.port)
        except OSError:
            pass
    t = threading.Thread(target=held, daemon=True)
    t.start()
    wait_until(lambda: sim_stats(sim.port)["active"] == 1, "the request to be in service")
    st = sim_stats(sim.port)
    assert st["completions"] == 0 and st["stalled"], st


def test_sim_prefix_cache(env):
    sim = env.sim("kv", latency_ms=50, cache_hit_ms=1, prefix_cache=2, jitter=0, token_ms=0,
                  tokens=1)
    def cache(prompt):
        st, h, _ = complete(sim.port, json.dumps({"prompt": prompt}))
        assert st == 200
        return h["x-prefix-cache"][0]
    a, b, c = "system A " * 40, "system B " * 40, "system C " * 40
    # the same first 256 bytes of the prompt: a hit (first token after --cache-hit-ms)
    assert [cache(a + "q1"), cache(a + "q2")] == ["miss", "hit"]
    assert [cache(b + "q"), cache(c + "q")] == ["miss", "miss"]  # C pushes A out
    assert cache(a + "q3") == "miss"
    st = sim_stats(sim.port)
    assert st["cache_hits"] == 1 and st["cache_misses"] == 4, st


def test_sim_request_bodies(env):
    """Request bodies reach the sim's handler whole however they arrive; bad ones are refused."""
    import socket
    import time
    from harness import read_all, read_until
    sim = env.sim("acc0", latency_ms=0, token_ms=0)
    # a chunked body in pieces that split its size lines and CRLFs, a request pipelined after
    pieces = [b"PUT /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r",
              b"\nhel", b"lo\r\n6;ext=1\r\n wor", b"ld\r\n0\r\nTrailer-A: 1\r\n",
              b"\r\nGET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"]
    with socket.create_connection(("127.0.0.1", sim.port), timeout=15) as s:
        for p in pieces:
            s.sendall(p)
            time.sleep(0.02)
        out = read_all(s)
    assert out.count(b"HTTP/1.1 200 OK") == 2, out
    assert b"acc0: PUT /up (11 body bytes)" in out, out
    # Expect: 100-continue is answered before the body is sent
    with socket.create_connection(("127.0.0.1", sim.port), timeout=15) as s:
        s.sendall(b"PUT /c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n"
                  b"Connection: close\r\n\r\n")
        got = read_until(s, lambda b: b"\r\n\r\n" in b)
        assert got.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), got
        s.sendall(b"hello")
        out = read_all(s, got)
    assert b"(5 body bytes)" in out, out
    # over the sim's 1 MiB: refused before a byte of the body is sent, at the head or at the
    # chunk size line that passes the limit
    for head in (b"Content-Length: 2000000\r\n\r\n",
                 b"Transfer-Encoding: chunked\r\n\r\n200000\r\n"):
        out = raw(sim.port, b"PUT /big HTTP/1.1\r\nHost: x\r\n" + head)
        assert out.startswith(b"HTTP/1.1 413 "), out
    out = raw(sim.port, b"PUT /bad HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
              b"3\r\nabcX\r\n0\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400 "), out
