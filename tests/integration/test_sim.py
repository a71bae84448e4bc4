"""The simulated accelerator's contract (docs/sim.md), talked to directly."""

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
    import time
    socks = [socket.create_connection(("127.0.0.1", sim.port), timeout=15) for _ in range(3)]
    try:
        t0 = time.monotonic()
        for s in socks:
            s.sendall(req)
        outs = [read_all(s) for s in socks]
        took_ms = (time.monotonic() - t0) * 1000
    finally:
        for s in socks:
            s.close()
    assert all(o.startswith(b"HTTP/1.1 200 ") for o in outs), outs
    waits = sorted(int(re.search(rb"\r\nX-Sim-Wait-Ms: (\d+)\r\n", o, re.I).group(1))
                   for o in outs)
    # one slot: the three were served one after another (600 ms in all, less a millisecond
    # of clock truncation per service; two slots would take 400), each waiting for those
    # before it, the third for most of two services (its wait counts from when the sim read
    # it: under ASan on a loaded machine that was 4 ms after the first, [0, 196, 396])
    assert took_ms >= 597, took_ms
    assert waits[0] < waits[1] < waits[2] and waits[2] >= 300, waits
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


# ---- the block-level prefix cache (--cache-blocks), its KV events, models, /metrics ----

def _blocks(port, body, path="/v1/completions"):
    """(X-Prefix-Cache, cached blocks, prompt blocks, planned service ms) of one completion."""
    st, h, _ = complete(port, json.dumps(body), path=path)
    assert st == 200, (st, h)
    return (h["x-prefix-cache"][0], int(h["x-sim-cached-blocks"][0]),
            int(h["x-sim-prompt-blocks"][0]), int(h["x-sim-service-ms"][0]))


def test_sim_block_cache_shared_prefix(env):
    # 16-byte blocks, 1 ms per uncached block, no fixed part: the planned time to the first
    # token is the uncached blocks, a last partial block counted
    sim = env.sim("kv", cache_blocks=256, block_bytes=16, prefill_us_per_block=1000,
                  latency_ms=0, jitter=0, token_ms=0, tokens=1)
    system = "S" * 100  # 6 whole blocks and 4 bytes of a 7th
    word, cached, total, ms = _blocks(sim.port, {"prompt": system + "a" * 60})
    assert (word, cached, total, ms) == ("miss", 0, 10, 10)  # 160 bytes: 10 whole blocks
    # the same system prompt, another question: its 6 whole blocks hit, block 7 differs
    word, cached, total, ms = _blocks(sim.port, {"prompt": system + "b" * 61})
    assert (word, cached, total, ms) == ("partial", 6, 10, 5)  # 4 new + a partial 11th
    # the same prompt again: every whole block hits, the partial one is computed again
    word, cached, total, ms = _blocks(sim.port, {"prompt": system + "b" * 61})
    assert (word, cached, total, ms) == ("hit", 10, 10, 1)
    st = sim_stats(sim.port)
    assert (st["blocks_hit"], st["blocks_missed"]) == (16, 16), st
    assert (st["cache_hits"], st["cache_partials"], st["cache_misses"]) == (1, 1, 1), st
    assert st["cache_blocks_used"] == 14 and st["cache_blocks"] == 256, st


def test_sim_block_cache_conversation_grows(env):
    sim = env.sim("kv", cache_blocks=4096, block_bytes=16, latency_ms=0, jitter=0,
                  token_ms=0, tokens=1)
    messages = [{"role": "system", "content": "You are a careful assistant. " * 8}]
    seen = []
    for turn in range(5):
        messages.append({"role": "user", "content": f"question {turn}: " + "why? " * 12})
        for path in ("/v1/chat/completions",):
            seen.append(_blocks(sim.port, {"model": "m", "messages": messages}, path=path))
        messages.append({"role": "assistant", "content": f"answer {turn} " * 10})
    # each turn finds the whole blocks of the turn before it in the cache, and adds more
    assert seen[0][0] == "miss" and seen[0][1] == 0, seen
    for before, now in zip(seen, seen[1:]):
        assert now[0] == "partial" and now[1] == before[2] and now[2] > before[2], seen


def test_sim_block_cache_evicts_least_recent(env):
    # 8 blocks of 16 bytes; prompts of exactly 4 blocks each
    sim = env.sim("kv", cache_blocks=8, block_bytes=16, latency_ms=0, jitter=0, token_ms=0,
                  tokens=1)
    a, b, c = ({"prompt": ch * 64} for ch in "ABC")
    assert _blocks(sim.port, a)[:2] == ("miss", 0)
    assert _blocks(sim.port, b)[:2] == ("miss", 0)  # full now
    assert _blocks(sim.port, a)[:2] == ("hit", 4)  # A most recent, B least
    assert _blocks(sim.port, c)[:2] == ("miss", 0)  # B goes, not A
    assert sim_stats(sim.port)["cache_blocks_used"] == 8
    assert _blocks(sim.port, a)[:2] == ("hit", 4)
    assert _blocks(sim.port, b)[:2] == ("miss", 0)  # it was evicted; now C went
    assert _blocks(sim.port, c)[:2] == ("miss", 0)


def test_sim_cache_flags_refused(env):
    import subprocess
    from harness import BIN
    for extra, says in ((["--prefix-cache", "4", "--cache-blocks", "8"], "pick one"),
                        (["--kv-events", "tcp://127.0.0.1:1"], "needs --cache-blocks"),
                        (["--block-bytes", "8", "--cache-blocks", "8"], "--block-bytes"),
                        (["--models", "a,,b"], "--models"),
                        (["--kv-events-format", "json"], "map, array or sglang")):
        r = subprocess.run([BIN, "sim", "--listen", "127.0.0.1:1"] + extra,
                           capture_output=True, timeout=15, check=False)
        assert r.returncode == 2 and says in r.stderr.decode(), (extra, r.stderr)


def _kv_subscriber(sim, topic=b""):
    """A ZeroMQ subscriber on the sim's KV events, past ZeroMQ's slow-joiner window: warm-up
    requests until one batch arrives, then every batch published so far read (by sequence
    number). Returns (socket, next expected sequence number)."""
    import zmq
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, topic)
    endpoint = sim_stats(sim.port)["kv_events_endpoint"]
    assert endpoint.startswith("tcp://127.0.0.1:"), endpoint
    sub.connect(endpoint)
    for i in range(300):
        complete(sim.port, json.dumps({"prompt": f"warm-up {i:04d} " * 3}))
        if sub.poll(50):
            break
    else:
        raise AssertionError("no KV event batch reached the subscriber")
    last = sim_stats(sim.port)["kv_events_batches"] - 1
    while True:
        assert sub.poll(15000), "a batch announced in /sim/stats never came"
        frames = sub.recv_multipart()
        if int.from_bytes(frames[1], "big") == last:
            return sub, last + 1


def _kv_batch(sub, seq, topic=b"", sglang=False):
    """The next batch: checked frames and envelope ([ts, events, rank], SGLang's [ts,
    events]), returns its events."""
    import msgpack
    assert sub.poll(15000), f"no KV event batch {seq}"
    frames = sub.recv_multipart()
    assert len(frames) == 3 and frames[0] == topic and len(frames[1]) == 8, frames
    assert int.from_bytes(frames[1], "big") == seq
    batch = msgpack.unpackb(frames[2], raw=False)
    assert isinstance(batch, list) and len(batch) == (2 if sglang else 3), batch
    ts, events, rank = batch if not sglang else batch + [0]
    assert isinstance(ts, float) and ts > 1.6e9 and rank == 0, batch
    return events


def test_sim_kv_events_follow_the_cache(env):
    sim = env.sim("kv", cache_blocks=4, block_bytes=16, latency_ms=0, jitter=0, token_ms=0,
                  tokens=1, kv_events="tcp://127.0.0.1:*", kv_events_topic="kv-events")
    sub, seq = _kv_subscriber(sim, b"kv-events")
    try:
        # P1: 4 blocks; whatever the warm-ups left (2 blocks each) is evicted, then one
        # store of the chain
        left = sim_stats(sim.port)["cache_blocks_used"]
        p1 = "0123456789abcdef" * 4
        complete(sim.port, json.dumps({"prompt": p1}))
        events = _kv_batch(sub, seq, b"kv-events")
        assert left >= 2 and [e["type"] for e in events] == ["BlockRemoved", "BlockStored"]
        removed, stored = events
        assert removed == {"type": "BlockRemoved", "block_hashes": removed["block_hashes"],
                           "medium": "GPU"} and len(removed["block_hashes"]) == left, removed
        assert stored == {"type": "BlockStored", "block_hashes": stored["block_hashes"],
                          "parent_block_hash": None, "token_ids": [], "block_size": 16,
                          "lora_id": None, "medium": "GPU", "lora_name": None}, stored
        h = stored["block_hashes"]
        assert len(h) == 4 and len(set(h)) == 4 and all(0 <= x < 2**64 for x in h), h
        # P2 shares P1's first 2 blocks: P1's two deepest go (deepest first), two new
        # blocks are stored after P1's second
        complete(sim.port, json.dumps({"prompt": p1[:32] + "X" * 32}))
        events = _kv_batch(sub, seq + 1, b"kv-events")
        assert [e["type"] for e in events] == ["BlockRemoved", "BlockStored"], events
        assert events[0]["block_hashes"] == [h[3], h[2]], events
        assert events[1]["parent_block_hash"] == h[1], events
        q = events[1]["block_hashes"]
        assert len(q) == 2 and not set(q) & set(h), events
        # P1 again: its first 2 hit, P2's two go (deepest first), P1's come back as they were
        complete(sim.port, json.dumps({"prompt": p1}))
        events = _kv_batch(sub, seq + 2, b"kv-events")
        assert [e["type"] for e in events] == ["BlockRemoved", "BlockStored"], events
        assert events[0]["block_hashes"] == [q[1], q[0]], events
        assert events[1]["block_hashes"] == h[2:] and events[1]["parent_block_hash"] == h[1]
        st = sim_stats(sim.port)
        assert st["kv_events_batches"] == seq + 3 and st["kv_events_dropped"] == 0, st
    finally:
        sub.close()


def test_sim_kv_events_as_arrays(env):
    sim = env.sim("kv", cache_blocks=64, block_bytes=32, latency_ms=0, jitter=0, token_ms=0,
                  tokens=1, kv_events="tcp://127.0.0.1:*", kv_events_format="array")
    sub, seq = _kv_subscriber(sim)
    try:
        complete(sim.port, json.dumps({"prompt": "z" * 64}))
        events = _kv_batch(sub, seq)
        assert len(events) == 1 and events[0][0] == "BlockStored", events
        tag, hashes, parent, tokens, size, lora_id, medium, lora_name = events[0]
        assert len(hashes) == 2 and parent is None and tokens == [] and size == 32
        assert (lora_id, medium, lora_name) == (None, "GPU", None)
    finally:
        sub.close()


def test_sim_kv_events_as_sglang_sends_them(env):
    """SGLang's KVEventBatch (sglang/srt/disaggregation/kv_events.py): [ts, events], each
    event a tagged array without medium or lora_name, hashes signed (Python's hash())."""
    sim = env.sim("kv", cache_blocks=4096, block_bytes=32, latency_ms=0, jitter=0, token_ms=0,
                  tokens=1, kv_events="tcp://127.0.0.1:*", kv_events_format="sglang")
    sub, seq = _kv_subscriber(sim)
    try:
        signed = []
        for k in range(40):  # until a hash with the top bit set has come, as a negative int
            complete(sim.port, json.dumps({"prompt": f"{k:02d}" * 32}))
            events = _kv_batch(sub, seq + k, sglang=True)
            assert len(events) == 1 and events[0][0] == "BlockStored", events
            tag, hashes, parent, tokens, size, lora_id = events[0]
            assert len(hashes) == 2 and parent is None and tokens == [] and size == 32
            assert lora_id is None and all(-2**63 <= h < 2**63 for h in hashes), events
            signed += [h for h in hashes if h < 0]
            if signed:
                break
        assert signed, "40 prompts and no hash over 2^63"
        request(sim.port, "POST", "/reset_prefix_cache")
        assert _kv_batch(sub, seq + k + 1, sglang=True) == [["AllBlocksCleared"]]
    finally:
        sub.close()


def test_sim_models(env):
    sim = env.sim("acc0", models="llama-3-8b,qwen-7b", latency_ms=0, token_ms=0, tokens=1)
    st, h, body = complete(sim.port, json.dumps({"model": "gpt-x", "prompt": "hi"}))
    assert st == 404 and h["x-sim-model"] == ["gpt-x"], (st, h)
    assert json.loads(body) == {"error": {"message": "The model `gpt-x` does not exist.",
                                          "type": "NotFoundError", "param": None,
                                          "code": 404}}
    st, h, body = complete(sim.port, json.dumps({"model": "qwen-7b", "messages": []}),
                           path="/v1/chat/completions")
    assert st == 200 and h["x-sim-model"] == ["qwen-7b"]
    assert json.loads(body)["model"] == "qwen-7b"
    st, h, body = complete(sim.port, json.dumps({"prompt": "no model named"}))
    assert st == 200 and "x-sim-model" not in h and json.loads(body)["model"] == "llama-3-8b"
    # read as the proxy reads it: the top-level field, escapes decoded
    st, h, body = complete(sim.port, '{"model": "qwen\\u002d7b", "prompt": "x"}')
    assert st == 200 and h["x-sim-model"] == ["qwen-7b"], (st, h)
    st, h, body = complete(sim.port, json.dumps(
        {"messages": [{"role": "user", "content": "x", "model": "gpt-x"}]}),
        path="/v1/chat/completions")
    assert st == 200 and "x-sim-model" not in h, (st, h)
    st, h, body = request(sim.port, "GET", "/v1/models")
    doc = json.loads(body)
    assert st == 200 and doc["object"] == "list", doc
    assert [(m["id"], m["object"]) for m in doc["data"]] == [("llama-3-8b", "model"),
                                                            ("qwen-7b", "model")]
    assert sim_stats(sim.port)["unknown_model"] == 1


def test_sim_metrics_and_extra_load(env):
    import shutil
    import subprocess
    from harness import prom_samples
    # one slot, one phantom request from another client always in the queue or the slot
    sim = env.sim("acc0", models="m1", slots=1, extra_load=1, latency_ms=20, jitter=0,
                  token_ms=0, tokens=1, cache_blocks=10, block_bytes=16)
    st, h, _ = complete(sim.port, json.dumps({"prompt": "q" * 40}))
    # while this one was served, the phantom waited
    assert st == 200 and h["x-queue-depth"] == ["1"], h
    st, h, body = request(sim.port, "GET", "/metrics")
    text = body.decode()
    assert st == 200 and h["content-type"][0].startswith("text/plain"), h
    # promtool parses it; its only lint is vLLM's own: the colon of the vllm: names
    assert shutil.which("promtool"), "no promtool: scripts/deps.sh installs Debian prometheus"
    r = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True,
                       timeout=30, check=False)
    lint = (r.stdout + r.stderr).decode().splitlines()
    assert lint and all(line.endswith("metric names should not contain ':'") for line in lint), lint
    got = prom_samples(text)
    labels = (("engine", "0"), ("model_name", "m1"))
    # the phantom holds the slot or waits for it: 1 running, nothing waiting
    assert got[("vllm:num_requests_running", labels)] == 1, got
    assert got[("vllm:num_requests_waiting", labels)] == 0, got
    assert got[("vllm:kv_cache_usage_perc", labels)] == 0.2, got  # 2 blocks of 10
    assert got[("vllm:gpu_cache_usage_perc", labels)] == 0.2, got
    for name in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc",
                 "gpu_cache_usage_perc"):
        assert f"# TYPE vllm:{name} gauge\n" in text and f"# HELP vllm:{name} " in text
    st = sim_stats(sim.port)
    assert st["phantom_runs"] >= 1 and st["completions"] == 1 and st["extra_load"] == 1, st


def test_sim_flags_documented(env):
    """Every flag of `accelnet sim --help` has its row in docs/sim.md, and every row a flag."""
    import os
    import re
    import subprocess
    from harness import BIN
    out = subprocess.run([BIN, "sim", "--help"], capture_output=True, timeout=15,
                         check=True).stdout.decode()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    with open(os.path.join(root, "docs", "sim.md")) as f:
        rows = [line for line in f if line.startswith("| `--")]
    documented = set(re.findall(r"--[a-z-]+", "".join(r.split("|")[1] for r in rows)))
    assert set(re.findall(r"--[a-z][a-z-]+", out)) - {"--help"} == documented, (out, documented)
