"""balance: llm seen from a client: a prompt stays on the backend whose prefix cache holds
it, a busy home is waited for while that is quicker (and no longer than llm.max_wait_ms),
requests without a prompt spread, and the llm keys are checked with FILE:LINE:COL."""

import concurrent.futures
import json
import socket
import subprocess

from harness import (BIN, complete, free_port, metrics_text, served_by, sim_stats, status,
                     wait_until)


def _pool(ports, cap, extra=""):
    lines = ["  - name: gpu", "    balance: llm", "    llm: {block_bytes: 64" + extra + "}",
             "    backends:"]
    lines += [f"      - {{address: 127.0.0.1:{p}, max_concurrency: {cap}}}" for p in ports]
    return "pools:\n" + "\n".join(lines) + "\n"


def _chat(system, question, order=0):
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    if order:  # the same conversation, written another way: fields of each message swapped
        msgs = [{"content": m["content"], "role": m["role"]} for m in msgs]
        return json.dumps({"stream": False, "messages": msgs, "model": "m"})
    return json.dumps({"model": "m", "messages": msgs, "max_tokens": 4})


def _system(k):
    return f"System prompt {k}: " + f"you are assistant number {k}, answer with care. " * 12


def _inflight(px):
    return sum(b["inflight"] for b in status(px.admin)["pools"][0]["backends"])


def _queue(px):
    return status(px.admin)["pools"][0]["queue"]


def test_llm_keeps_each_conversation_on_the_backend_that_holds_it(env):
    sims = [env.sim(f"s{i}", latency_ms=200, cache_hit_ms=5, prefix_cache=16, jitter=0,
                    tokens=1, token_ms=0) for i in range(3)]
    px = env.proxy(_pool([s.port for s in sims], 4))
    homes = {}
    for k in range(8):  # (all eight on one of three by the rendezvous: 1 in 2,187)
        got = {served_by(complete(px.port, _chat(_system(k), f"question {q}", q % 2),
                                  "/v1/chat/completions")[1]) for q in range(4)}
        # one system prompt, one backend, whatever order each message's fields come in
        assert len(got) == 1, (k, got)
        homes[k] = got.pop()
    assert len(set(homes.values())) >= 2, homes  # different prompts spread over the pool
    hits = sum(sim_stats(s.port)["cache_hits"] for s in sims)
    assert hits >= 6, hits  # the sims' own caches saw the repeats (same-order bodies)
    # a body without a prompt is served too
    assert complete(px.port, json.dumps({"model": "m"}))[0] == 200


def _fit(px):
    """{backend: (base, per block)} in seconds, as /metrics shows balance: llm's fits"""
    fit = {}
    for line in metrics_text(px.admin).splitlines():
        for name, i in (("accelnet_backend_llm_ttft_base_seconds", 0),
                        ("accelnet_backend_llm_ttft_per_block_seconds", 1)):
            if line.startswith(name + "{"):
                be = line.split('backend="')[1].split('"')[0]
                fit.setdefault(be, [0.0, 0.0])[i] = float(line.rsplit(" ", 1)[1])
    return fit


def test_llm_learns_from_streams_whose_head_comes_before_the_first_token(env):
    """vLLM, SGLang and TGI send a stream's head at once and its first event after the
    prefill (the sim's --early-headers): the time to first token is the first body bytes,
    not the head. Timed at the head, every answer took ~0 ms, the fit learnt no cost per
    missed block, and llm forgot which backend held which conversation."""
    sims = [env.sim(f"s{i}", latency_ms=40, cache_blocks=4096, block_bytes=64,
                    prefill_us_per_block=2000, jitter=0, tokens=2, token_ms=1,
                    early_headers=True) for i in range(2)]
    px = env.proxy(_pool([s.port for s in sims], 4))

    def ask(prompt):
        body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": 2, "stream": True})
        code, headers, text = complete(px.port, body, "/v1/completions")
        assert code == 200 and b"data:" in text, (code, text[:200])
        return served_by(headers)

    # prompts of 2 to 60 blocks, each new: what the fits learn from
    for k in range(12):
        ask(f"warm-up {k} " + "x" * (128 + 320 * k))
    fit = _fit(px)
    assert len(fit) == 2, fit
    for be, (base, per_block) in fit.items():
        # the sims: 40 ms + 2 ms per missed block; a fit timed at the head says ~0 and 0
        assert per_block >= 0.001 and base >= 0.02, fit
    # five conversations of four turns, each turn the whole conversation so far: each stays
    # on one backend (the one whose cache holds it), where a balancer blind to the cache
    # would toss a coin per turn
    for c in range(5):
        convo = f"conversation {c}: " + "a long shared history. " * 100
        got = set()
        for turn in range(4):
            convo += f" turn {turn} " + "more words. " * 20
            got.add(ask(convo))
        assert len(got) == 1, (c, got)
    hit = sum(sim_stats(s.port)["blocks_hit"] for s in sims)
    assert hit >= 5 * 3 * 40, hit  # each later turn found its history cached


def _arrived(px):
    """Requests the pool has taken: sent to a backend (a count that only grows) or queued."""
    pool = status(px.admin)["pools"][0]
    return sum(b["requests"] for b in pool["backends"]) + pool["queue"]["length"]


def _three_at_once(px, body, queued_expected):
    """Three requests with one prompt, each sent once the one before has reached the pool
    (counted where it cannot be missed: a poll that saw in service + queued == n needed
    the moment before the first answer, which a loaded machine could let pass)."""
    base = _arrived(px)
    with concurrent.futures.ThreadPoolExecutor(3) as ex:
        futs = []
        for n in range(1, 4):
            futs.append(ex.submit(complete, px.port, body, "/v1/chat/completions"))
            wait_until(lambda n=n: _arrived(px) >= base + n, f"{n} requests taken")
        got = [f.result() for f in futs]
    assert [g[0] for g in got] == [200] * 3
    return [served_by(g[1]) for g in got]


def test_llm_waits_for_the_busy_backend_that_holds_the_prompt(env):
    sims = [env.sim(f"s{i}", latency_ms=3000, cache_hit_ms=600, prefix_cache=16, jitter=0,
                    tokens=1, token_ms=0) for i in range(2)]
    px = env.proxy(_pool([s.port for s in sims], 1))
    body = _chat("a long shared system prompt, " * 60, "the same question")
    # the pool learns what a miss costs here: 3 s for 27 blocks, 0.6 s for none (a hit long
    # enough that the next two requests arrive while it is served, however loaded the machine)
    home = served_by(complete(px.port, body, "/v1/chat/completions")[1])
    assert served_by(complete(px.port, body, "/v1/chat/completions")[1]) == home
    complete(px.port, _chat("another system prompt, " * 70, "q"), "/v1/chat/completions")
    seen = _three_at_once(px, body, 2)
    # one slot on the home, busy with a 0.6 s hit; recomputing the prompt on the idle
    # backend (3 s) costs more than waiting for it: all three on the home, two of them
    # through the queue
    assert seen == [home] * 3, (home, seen)
    q = _queue(px)
    assert q["enqueued"] == 2 and q["granted"] == 2, q


def test_llm_max_wait_zero_takes_the_free_slot(env):
    sims = [env.sim(f"s{i}", latency_ms=1500, cache_hit_ms=300, prefix_cache=16, jitter=0,
                    tokens=1, token_ms=0) for i in range(2)]
    px = env.proxy(_pool([s.port for s in sims], 1, ", max_wait_ms: 0"))
    body = _chat("a long shared system prompt, " * 60, "the same question")
    seen = _three_at_once(px, body, 1)
    assert len(set(seen)) == 2, seen  # never waits while a slot is free elsewhere


def test_llm_without_a_prompt_spreads_by_load(env):
    sims = [env.sim(f"s{i}", latency_ms=300, jitter=0, tokens=1, token_ms=0)
            for i in range(2)]
    px = env.proxy(_pool([s.port for s in sims], 4))
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        got = list(ex.map(lambda _: complete(px.port, json.dumps({"model": "m"})), range(8)))
    assert [g[0] for g in got] == [200] * 8
    seen = [served_by(g[1]) for g in got]
    assert len(set(seen)) == 2, seen


def test_llm_keys_are_checked(env):
    bad = [
        ("    balance: llm\n    llm: {block_bytes: 8}\n", "5:24", "16 to 4096"),
        ("    balance: llm\n    llm: {cache_blocks: 0}\n", "5:25", "16 to 16777216"),
        ("    balance: p2c\n    llm: {block_bytes: 64}\n", "3:5", "llm.block_bytes is for llm"),
    ]
    for pool, where, word in bad:
        path = env.write("bad.yaml", "listen: [{address: 127.0.0.1:1}]\npools:\n"
                         "  - name: gpu\n" + pool +
                         "    backends: [{address: 127.0.0.1:2}]\n"
                         "routes: [{match: {path_prefix: /}, pool: gpu}]\n")
        r = subprocess.run([BIN, "check", "-c", path], capture_output=True, text=True)
        assert r.returncode != 0, pool
        assert f"bad.yaml:{where}" in r.stderr and word in r.stderr, (pool, r.stderr)


def test_llm_max_wait_is_kept_without_another_event(env):
    """REVIEW: the home is held by a long request and nothing else happens: a queued
    request that chose to wait for it must take the idle backend once max_wait_ms has
    passed, not sit until queue.timeout_ms (nobody re-runs the pick at max_wait_ms)."""
    import time
    sims = [env.sim(f"s{i}", latency_ms=1500, cache_hit_ms=300, prefix_cache=16, jitter=0,
                    tokens=1, token_ms=100) for i in range(2)]
    px = env.proxy(_pool([s.port for s in sims], 1, ", max_wait_ms: 300")
                   .replace("    backends:", "    queue: {max: 10, timeout_ms: 4000}\n    backends:"))
    body = _chat("a long shared system prompt, " * 60, "the same question")
    home = served_by(complete(px.port, body, "/v1/chat/completions")[1])
    assert served_by(complete(px.port, body, "/v1/chat/completions")[1]) == home
    complete(px.port, _chat("another system prompt, " * 70, "q"), "/v1/chat/completions")
    long_body = json.loads(body)
    long_body["max_tokens"] = 70  # 7 s on the home
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        f_long = ex.submit(complete, px.port, json.dumps(long_body), "/v1/chat/completions")
        wait_until(lambda: _inflight(px) == 1, "the long request in service")
        t0 = time.monotonic()
        st, hdrs = complete(px.port, body, "/v1/chat/completions")[:2]
        took = time.monotonic() - t0
        f_long.result()
    # sitting until queue.timeout_ms (4 s, before the long request's 7 s end) answers 503;
    # served by the idle backend, it was let go at max_wait_ms (no time limit asserted)
    assert st == 200, (st, took, _queue(px))
    assert served_by(hdrs) != home, (took, served_by(hdrs), home)


def test_llm_time_in_a_full_line_is_not_max_wait(env):
    """max_wait_ms counts from the first free slot a request passes up for its home, not
    from when it joined a line where no slot was free: a request that queued 1.5 s behind
    two busy backends still goes home when its home frees 0.5 s after the other one (counting
    its line, it took the first slot that freed, and a long line so lost every cache's
    conversations at once: bench/fleets.py's independent shape collapsed at 1.37x)."""
    sims = [env.sim(f"s{i}", latency_ms=1500, cache_hit_ms=300, prefix_cache=16, jitter=0,
                    tokens=1, token_ms=100) for i in range(2)]
    px = env.proxy(_pool([s.port for s in sims], 1, ", max_wait_ms: 1000")
                   .replace("    backends:", "    queue: {max: 10, timeout_ms: 8000}\n    backends:"))
    mine = _chat("a long shared system prompt, " * 60, "the same question")
    home = served_by(complete(px.port, mine, "/v1/chat/completions")[1])
    # a new prompt goes to the idle backend its rendezvous hash ranks first (either, by the
    # prompt and the ports): another prompt is taken until one lands on the other backend
    for k in range(12):
        other = _chat(f"another system prompt {k}, " * 70, "q")
        elsewhere = served_by(complete(px.port, other, "/v1/chat/completions")[1])
        if elsewhere != home:
            break
    assert home != elsewhere, "twelve new prompts all went to one of two idle backends"
    assert served_by(complete(px.port, mine, "/v1/chat/completions")[1]) == home

    def lasting(body, tokens):  # a cache hit: 300 ms, then 100 ms a token
        b = json.loads(body)
        b["max_tokens"] = tokens
        return json.dumps(b)
    with concurrent.futures.ThreadPoolExecutor(3) as ex:
        f_home = ex.submit(complete, px.port, lasting(mine, 17), "/v1/chat/completions")
        f_other = ex.submit(complete, px.port, lasting(other, 12), "/v1/chat/completions")
        wait_until(lambda: _inflight(px) == 2, "both backends busy")  # home 2.0 s, other 1.5 s
        got = complete(px.port, mine, "/v1/chat/completions")
        assert [f_home.result()[0], f_other.result()[0], got[0]] == [200, 200, 200]
    assert served_by(f_home.result()[1]) == home and served_by(f_other.result()[1]) == elsewhere
    assert served_by(got[1]) == home, (served_by(got[1]), home, _queue(px))


def test_llm_work_returns_to_zero(env):
    """REVIEW guard: every llm_picked() is matched by one llm_done(): after queued, abandoned
    and retried requests, no backend carries expected work."""
    import socket
    sims = [env.sim(f"s{i}", latency_ms=3, cache_hit_ms=1, prefix_cache=16, jitter=0,
                    tokens=1, token_ms=0) for i in range(2)]
    px = env.proxy(_pool([s.port for s in sims] + [1], 1))  # port 1: refused, retried
    body = _chat("a long shared system prompt, " * 60, "q")
    def abandon(k):
        s = socket.create_connection(("127.0.0.1", px.port))
        b = body.encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                  b"application/json\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
        s.settimeout(0.001 * (k % 13))
        try:
            s.recv(10)
        except OSError:
            pass
        s.close()
    with concurrent.futures.ThreadPoolExecutor(12) as ex:
        list(ex.map(abandon, range(1500)))
        list(ex.map(lambda _: complete(px.port, body, "/v1/chat/completions"), range(12)))
    wait_until(lambda: _inflight(px) == 0 and _queue(px)["length"] == 0, "all done")
    works = [b["llm_work_ms"] for b in status(px.admin)["pools"][0]["backends"]]
    assert all(w == 0 for w in works), works


def _index_blocks(px):
    """{port: blocks balance: llm believes each backend holds}"""
    return {int(b["address"].rsplit(":", 1)[1]): b["llm_index_blocks"]
            for b in status(px.admin)["pools"][0]["backends"]}


def test_llm_a_prompt_close_behind_its_twin_goes_where_that_one_is_prefilling(env):
    """An engine takes a prompt in as it arrives: a request with the same prefix sent while
    the first is still in prefill finds it there. The index learns the prompt at the pick, so
    the second goes to the first one's backend; learning it only at the first token (as
    before), the second saw no home and went to the other backend, a second copy of the
    prefix in another cache (on scenario 9, 57 % of blocks hit instead of 83 %)."""
    sims = [env.sim(f"s{i}", latency_ms=20, cache_blocks=4096, block_bytes=64,
                    prefill_us_per_block=5000, jitter=0, tokens=1, token_ms=0)
            for i in range(2)]
    px = env.proxy(_pool([s.port for s in sims], 4), workers=1)
    system = _system(7)  # about 100 blocks: half a second of prefill on a miss
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        first = ex.submit(complete, px.port, _chat(system, "the first question"),
                          "/v1/chat/completions")
        wait_until(lambda: _inflight(px) == 1, "the first request to be sent")
        st, h, _ = complete(px.port, _chat(system, "a second question"), "/v1/chat/completions")
        st1, h1, _ = first.result()
    assert st == st1 == 200, (st, st1)
    assert served_by(h) == served_by(h1), (served_by(h1), served_by(h))
    # and the engine found the prefix there: the second computed only its own blocks
    home = sims[0] if served_by(h1) == "s0" else sims[1]
    assert sim_stats(home.port)["blocks_hit"] > 0, sim_stats(home.port)


def test_llm_a_prompt_that_got_no_answer_leaves_no_trace(env):
    """The prompt learnt at the pick is taken back when the backend answers with an error or
    never answers: a client's refused requests cannot make the index believe a backend holds
    what it does not (and draw that prompt's requests there)."""
    failing = env.sim("bad", latency_ms=5, cache_blocks=4096, block_bytes=64, fail_rate=1,
                      jitter=0, tokens=1, token_ms=0)
    dead = free_port()
    px = env.proxy(_pool([failing.port, dead], 4), workers=1)
    for q in range(4):
        st, _, _ = complete(px.port, _chat(_system(8), f"question {q}"), "/v1/chat/completions")
        assert st >= 500, st
    assert sim_stats(failing.port)["requests"] >= 1  # the failing one was tried
    assert _index_blocks(px) == {failing.port: 0, dead: 0}, _index_blocks(px)


def test_llm_prompts_that_got_no_answer_push_nothing_out_of_the_index(env):
    """A prompt taken back (no answer: here its client left while it was prefilled) goes with
    the index clock's ticks it took at the pick: it ages nothing. Taken out without them, a
    client whose long prompts were all cancelled or refused made the index forget what the
    engine still held, everyone's prefixes, a prompt's blocks (up to 1,024) per request."""
    sim = env.sim("s0", latency_ms=5, cache_blocks=4096, block_bytes=64, jitter=0, tokens=1,
                  token_ms=0, prefill_us_per_block=20000)
    px = env.proxy(_pool([sim.port], 4, ", cache_blocks: 256"), workers=1)
    st, _, _ = complete(px.port, _chat(_system(3), "a question"), "/v1/chat/completions")
    assert st == 200, st
    held = _index_blocks(px)[sim.port]
    assert 0 < held < 40, held
    for k in range(3):  # about 150 blocks each: 450 ticks of a clock of 256
        body = _chat(f"Garbage {k}: " + "".join(f"{k}-{i:05d} " for i in range(1100)),
                     "q").encode()
        s = socket.create_connection(("127.0.0.1", px.port))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(body), body))
        wait_until(lambda: _inflight(px) == 1, "the long prompt sent")
        s.close()  # gone before its answer
        wait_until(lambda: _inflight(px) == 0, "the attempt to end")
    assert _index_blocks(px) == {sim.port: held}, (_index_blocks(px), held)


def _pool_index_blocks(px, name):
    """{port: blocks balance: llm believes each backend of pool <name> holds}"""
    pool = next(p for p in status(px.admin)["pools"] if p["name"] == name)
    return {int(b["address"].rsplit(":", 1)[1]): b["llm_index_blocks"] for b in pool["backends"]}


def test_llm_a_failed_prefill_leaves_no_trace_in_the_prefill_pool(env):
    """Disaggregation with a balance: llm prefill pool: the prompt its pick put in the prefill
    backend's index goes again when the prefill never answers (a connect refused here; a
    reset, a timeout or a client gone end it the same way). Before, only a refusal (400 and
    up) took it back: the prefill backend kept a prompt it never saw."""
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    env.on_cleanup.append(dead.close)
    dead_port = dead.getsockname()[1]
    dec = env.sim("d0", role="decode", latency_ms=5, jitter=0, tokens=3, token_ms=1,
                  pd_allow_local=1)
    text = ("pools:\n  - name: decode\n    balance: least-connections\n    backends:\n"
            f"      - {{address: 127.0.0.1:{dec.port}}}\n"
            "    disaggregation: {prefill_pool: prefill, protocol: vllm, "
            "on_prefill_failure: decode_only}\n"
            "  - name: prefill\n    balance: llm\n    llm: {block_bytes: 64}\n    backends:\n"
            f"      - {{address: 127.0.0.1:{dead_port}}}\n")
    px = env.proxy(text, workers=1)
    st, _, body = complete(px.port, _chat(_system(8), "a question"), "/v1/chat/completions")
    assert st == 200, (st, body)
    assert sim_stats(dec.port)["pd_local"] == 1  # decoded in place: the prefill failed
    assert _pool_index_blocks(px, "prefill") == {dead_port: 0}, _pool_index_blocks(px, "prefill")
