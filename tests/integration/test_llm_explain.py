"""balance: llm's decisions, as an operator sees them: the simulator reports its cached prompt
tokens as vLLM does (prompt_tokens_details.cached_tokens, in an answer and in a stream's usage
chunk); /debug/requests shows each decision's candidates, the reason, and predicted against
measured time to first token and hit blocks; the X-Accelnet-Llm header appears only where the
operator set llm.explain (no client header turns it on, no backend's passes), a request spilled
there from a plain pool's route included; the
accelnet_llm_predict_* metrics move."""

import concurrent.futures
import json
import re

from harness import (ScriptedBackend, free_port, metrics_text, prom_samples, request,
                     served_by, wait_until)

BLOCK = 64  # the proxy's llm.block_bytes and the sims' --block-bytes: one notion of a block
REASONS = {"none", "least", "tie-load", "tie-draw", "rendezvous", "wait", "max-wait", "no-prompt",
           "home", "session", "other"}


def _sims(env, n, **opts):
    args = dict(latency_ms=5, jitter=0, tokens=2, token_ms=1, cache_blocks=4096,
                block_bytes=BLOCK, prefill_us_per_block=200)
    args.update(opts)
    return [env.sim(f"s{i}", **args) for i in range(n)]


def _pool(name, ports, explain=None, cap=4):
    keys = f"block_bytes: {BLOCK}" + ("" if explain is None else f", explain: {explain}")
    lines = [f"  - name: {name}", "    balance: llm", f"    llm: {{{keys}}}", "    backends:"]
    lines += [f"      - {{address: 127.0.0.1:{p}, max_concurrency: {cap}}}" for p in ports]
    return "\n".join(lines) + "\n"


def _proxy(env, pools, routes):
    text = "pools:\n" + "".join(pools) + "routes:\n"
    for prefix, pool in routes:
        text += f"  - match: {{path_prefix: {prefix}}}\n    pool: {pool}\n"
    return env.proxy(text, workers=1)


def _chat(system, question, stream=False, usage=False):
    body = {"model": "m", "max_tokens": 2,
            "messages": [{"role": "system", "content": system},
                         {"role": "user", "content": question}]}
    if stream:
        body["stream"] = True
        if usage:
            body["stream_options"] = {"include_usage": True}
    return json.dumps(body)


def _post(port, body, path="/v1/chat/completions", headers=None):
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    return request(port, "POST", path, body=body, headers=h)


def _system(k):
    return f"System prompt {k}: " + f"you are assistant number {k}, answer with care. " * 20


def _debug(px):
    st, _, body = request(px.admin, "GET", "/debug/requests")
    assert st == 200
    return json.loads(body)


def _ended(px, reqid):
    """The /debug/requests entry of the ended request <reqid> (the slowest recent ones: a
    worker keeps 8 a minute, so a test's few requests are all there)."""
    found = []

    def there():
        found[:] = [r for r in _debug(px)["slowest"] if r["request_id"] == reqid]
        return found
    wait_until(there, f"request {reqid} in /debug/requests")
    return found[0]


def _usage_chunk(body):
    """The usage of a stream's last data chunk that has one, else None."""
    usage = None
    for line in body.decode().splitlines():
        if line.startswith("data: {"):
            usage = json.loads(line[6:]).get("usage") or usage
    return usage


def test_sim_reports_cached_tokens_in_answers_and_streams(env):
    sim, = _sims(env, 1)
    body = _chat(_system(1), "the same question")
    st, hdrs, first = _post(sim.port, body)
    assert st == 200
    usage = json.loads(first)["usage"]
    assert usage["prompt_tokens_details"] == {"cached_tokens": 0}
    st, hdrs, again = _post(sim.port, body)
    usage = json.loads(again)["usage"]
    cached = int(hdrs["x-sim-cached-blocks"][0])
    assert cached > 0 and cached == int(hdrs["x-sim-prompt-blocks"][0])
    # a block stands for block_bytes / 4 tokens, as prompt_tokens counts 4 bytes a token
    assert usage["prompt_tokens_details"]["cached_tokens"] == cached * BLOCK // 4
    assert usage["prompt_tokens_details"]["cached_tokens"] <= usage["prompt_tokens"]
    # a stream: the usage chunk only when asked for, with the cached tokens
    st, hdrs, streamed = _post(sim.port, _chat(_system(1), "the same question", True, True))
    assert st == 200
    usage = _usage_chunk(streamed)
    assert usage["prompt_tokens_details"]["cached_tokens"] == \
        int(hdrs["x-sim-cached-blocks"][0]) * BLOCK // 4 > 0
    st, _, plain = _post(sim.port, _chat(_system(1), "the same question", True, False))
    assert st == 200 and _usage_chunk(plain) is None and b"[DONE]" in plain


def test_debug_requests_show_the_decision_and_a_repeat_predicts_its_hits(env):
    sims = _sims(env, 3)
    px = _proxy(env, [_pool("gpu", [s.port for s in sims])], [("/", "gpu")])
    body = _chat(_system(7), "what is in the cache?")
    st, hdrs, _ = _post(px.port, body)
    assert st == 200 and "x-accelnet-llm" not in hdrs  # llm.explain is off by default
    first = _ended(px, hdrs["x-request-id"][0])["llm"]
    assert first["reason"] in REASONS and first["reason"] in {"least", "rendezvous", "tie-load",
                                                              "tie-draw"}, first
    assert first["candidates_up"] == 3 and len(first["candidates"]) == 3
    names = {c["backend"] for c in first["candidates"]}
    assert names == {f"127.0.0.1:{s.port}" for s in sims}
    assert first["pick"] == first["candidates"][0]["backend"] == first["answered_by"]
    assert first["predicted_hit_blocks"] == 0 and first["reported_hit_blocks"] == 0
    assert first["prompt_blocks"] > 0 and first["measured_ttft_ms"] > 0
    for c in first["candidates"]:
        assert c["ttft_ms"] >= c["base_ms"] and c["hit_blocks"] == 0
    # the same prompt again: predicted to hit where it went, and the engine agrees
    st, hdrs, again = _post(px.port, body)
    assert st == 200
    rec = _ended(px, hdrs["x-request-id"][0])["llm"]
    home = {f"s{i}": f"127.0.0.1:{s.port}" for i, s in enumerate(sims)}[served_by(hdrs)]
    assert rec["pick"] == rec["answered_by"] == first["pick"] == home
    assert rec["reason"] == "least"
    assert rec["predicted_hit_blocks"] == rec["prompt_blocks"] > 0
    cached = int(hdrs["x-sim-cached-blocks"][0])
    assert rec["reported_cached_tokens"] == json.loads(again)["usage"][
        "prompt_tokens_details"]["cached_tokens"] == cached * BLOCK // 4
    assert rec["reported_hit_blocks"] == cached == rec["predicted_hit_blocks"]
    # the pick expected less of the home than of the others: it holds the prompt
    others = [c for c in rec["candidates"] if c["backend"] != rec["pick"]]
    assert all(c["ttft_ms"] > rec["predicted_ttft_ms"] for c in others), rec
    # a request without a body, and one without a prompt: decided on the wait alone
    for method, body in (("GET", None), ("POST", json.dumps({"model": "m"}))):
        st, hdrs, _ = request(px.port, method, "/v1/completions", body=body)
        assert st == 200
        rec = _ended(px, hdrs["x-request-id"][0])["llm"]
        assert rec["reason"] == "no-prompt" and rec["prompt_blocks"] == 0, (method, rec)
        assert rec["pick"] == rec["answered_by"] and len(rec["candidates"]) == 3
    # read from the usage without counting it: a JSON answer on a route without api: openai
    # adds no tokens to the route's figures, as before
    tokens = [v for (n, _), v in prom_samples(metrics_text(px.admin)).items()
              if n == "accelnet_route_tokens_total"]
    assert tokens and not any(tokens), tokens


def test_explain_header_only_where_configured_and_never_from_a_client(env):
    sims = _sims(env, 2)
    ports = [s.port for s in sims]
    px = _proxy(env, [_pool("on", ports, explain="true"), _pool("off", ports)],
                [("/on/", "on"), ("/", "off")])
    name_of = {f"127.0.0.1:{s.port}": f"s{i}" for i, s in enumerate(sims)}
    sneaky = {"X-Accelnet-Llm": "on", "X-Accelnet-Explain": "true",
              "X-Accelnet-Timing": "1", "Accelnet-Llm-Explain": "true"}
    for k in range(3):
        st, hdrs, _ = _post(px.port, _chat(_system(k), "q"), "/on/v1/chat/completions")
        assert st == 200
        value = hdrs["x-accelnet-llm"]
        assert len(value) == 1, value
        m = re.match(r'pick="([^"]+)";reason=([a-z-]+);blocks=(\d+)', value[0])
        assert m, value
        # it names the backend that answered, and each candidate's estimate
        assert name_of[m[1]] == served_by(hdrs), (value, served_by(hdrs))
        assert m[2] in REASONS and int(m[3]) > 0
        cands = value[0].split(", ")[1:]
        assert len(cands) == 2, value
        for c in cands:
            assert re.fullmatch(r'"127\.0\.0\.1:\d+";hit=\d+;wait=[\d.]+;base=[\d.]+;'
                                r'per_block=[\d.]+;ttft=[\d.]+(;busy)?', c), c
        # the pool without llm.explain: no header, whatever the client sends
        st, hdrs, _ = _post(px.port, _chat(_system(k), "q"), headers=sneaky)
        assert st == 200 and "x-accelnet-llm" not in hdrs, hdrs


def test_a_spill_to_an_explaining_pool_is_explained(env):
    """A route whose own pool is a plain one (its backend down) spills to a balance: llm pool
    with llm.explain: the request there carries the header, its decision recorded from the
    first pick on (the exchange took the record for its spillover pool too)."""
    sims = _sims(env, 2)
    px = env.proxy("pools:\n  - name: plain\n    backends: [{address: 127.0.0.1:%d}]\n"
                   % free_port() + _pool("gpu", [s.port for s in sims], explain="true")
                   + "routes:\n  - pool: plain\n    spillover: {pool: gpu}\n", workers=1)
    name_of = {f"127.0.0.1:{s.port}": f"s{i}" for i, s in enumerate(sims)}
    st, hdrs, _ = _post(px.port, _chat(_system(1), "q"))
    assert st == 200, (st, hdrs)
    m = re.match(r'pick="([^"]+)";reason=([a-z-]+)', hdrs["x-accelnet-llm"][0])
    assert m and name_of[m[1]] == served_by(hdrs), (hdrs, served_by(hdrs))


def test_a_sessions_placement_is_explained_as_session(env):
    """F8: a request its conversation's remembered backend took (pools[].session) carries the
    X-Accelnet-Llm header and the /debug/requests llm object like any other, reason
    "session", the pick the backend that answered."""
    sims = _sims(env, 3)
    px = env.proxy("pools:\n" + _pool("gpu", [s.port for s in sims], explain="true")
                   + "    session: {header: X-Session-Id}\n"
                   + "routes:\n  - match: {path_prefix: /}\n    pool: gpu\n", workers=1)
    name_of = {f"127.0.0.1:{s.port}": f"s{i}" for i, s in enumerate(sims)}
    conv = {"X-Session-Id": "conv-1"}
    st, hdrs, _ = _post(px.port, _chat(_system(1), "first"), headers=conv)
    assert st == 200
    first = re.match(r'pick="([^"]+)";reason=([a-z-]+)', hdrs["x-accelnet-llm"][0])
    assert first and first[2] != "session", hdrs["x-accelnet-llm"]  # a new conversation
    for q in ("second", "third"):
        # another prompt: the conversation's backend takes it, as the header says
        st, hdrs, _ = _post(px.port, _chat(_system(2), q), headers=conv)
        assert st == 200 and len(hdrs.get("x-accelnet-llm", [])) == 1, hdrs
        m = re.match(r'pick="([^"]+)";reason=session;blocks=(\d+), "([^"]+)";hit=\d+',
                     hdrs["x-accelnet-llm"][0])
        assert m, hdrs["x-accelnet-llm"]
        assert m[1] == m[3] == first[1] and name_of[m[1]] == served_by(hdrs), hdrs
        rec = _ended(px, hdrs["x-request-id"][0])["llm"]
        assert rec["reason"] == "session" and rec["pick"] == rec["answered_by"] == first[1]
        assert rec["candidates"][0]["backend"] == first[1] and rec["candidates_up"] == 3
        assert rec["prompt_blocks"] == int(m[2]) > 0 and rec["measured_ttft_ms"] > 0, rec


def test_a_backends_own_header_never_passes(env):
    def script(n, req):
        body = b'{"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}'
        return (b"HTTP/1.1 200 OK\r\nX-Accelnet-Llm: pick=\"evil\"\r\nContent-Length: %d\r\n"
                b"\r\n%s" % (len(body), body), False)
    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    px = _proxy(env, [_pool("off", [be.port])], [("/", "off")])
    st, hdrs, _ = _post(px.port, _chat(_system(1), "q"))
    assert st == 200 and "x-accelnet-llm" not in hdrs, hdrs  # the field is the proxy's
    env.stop(px)
    px = _proxy(env, [_pool("on", [be.port], explain="true")], [("/", "on")])
    st, hdrs, _ = _post(px.port, _chat(_system(1), "q"))
    assert st == 200 and hdrs["x-accelnet-llm"] == [hdrs["x-accelnet-llm"][0]]
    assert hdrs["x-accelnet-llm"][0].startswith(f'pick="127.0.0.1:{be.port}";'), hdrs


def test_prediction_metrics_move(env):
    sims = _sims(env, 2)
    px = _proxy(env, [_pool("gpu", [s.port for s in sims])], [("/", "gpu")])
    for k in range(2):
        for q in range(3):
            stream = q == 2
            st, _, _ = _post(px.port, _chat(_system(k), "q", stream, stream))
            assert st == 200

    def samples():
        return prom_samples(metrics_text(px.admin))

    def total(got, name):
        return sum(v for (n, _), v in got.items() if n == name)
    wait_until(lambda: total(samples(), "accelnet_llm_predict_decisions_total") == 6,
               "6 decisions counted")
    got = samples()
    assert total(got, "accelnet_llm_predict_ttft_seconds_count") == 6
    assert total(got, "accelnet_llm_predict_measured_ttft_seconds_count") == 6
    assert total(got, "accelnet_llm_predict_ttft_error_seconds_count") == 6
    assert total(got, "accelnet_llm_predict_measured_ttft_seconds_sum") > 0
    assert total(got, "accelnet_llm_predict_reports_total") == 6  # stream usage too
    predicted = total(got, "accelnet_llm_predict_hit_blocks_total")
    reported = total(got, "accelnet_llm_predict_reported_hit_blocks_total")
    assert predicted > 0 and predicted == reported  # 2 repeats of each prompt, both hit
    reasons = {dict(k)["reason"] for (n, k), v in got.items()
               if n == "accelnet_llm_predict_decisions_total" and v}
    assert reasons <= REASONS and "least" in reasons, reasons


def test_a_request_that_waited_for_its_home_says_so(env):
    """The decision that finally placed a queued request is the one shown (a grant made on
    whichever worker freed the slot), marked as having waited for the backend that holds its
    prompt."""
    sims = [env.sim(f"s{i}", latency_ms=1500, cache_hit_ms=300, prefix_cache=16, jitter=0,
                    tokens=1, token_ms=0) for i in range(2)]
    px = env.proxy("pools:\n" + _pool("gpu", [s.port for s in sims], explain="true", cap=1)
                   + "routes:\n  - match: {path_prefix: /}\n    pool: gpu\n", workers=2)
    body = _chat("a long shared system prompt, " * 60, "the same question")
    home = served_by(_post(px.port, body)[1])  # the pool learns what a miss costs
    assert served_by(_post(px.port, body)[1]) == home
    _post(px.port, _chat("another system prompt, " * 70, "q"))
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        first = ex.submit(_post, px.port, body)
        wait_until(lambda: sum(b["inflight"] for b in _status(px)["backends"]) == 1,
                   "the home busy")
        second = ex.submit(_post, px.port, body)
        wait_until(lambda: _status(px)["queue"]["length"] == 1, "the second queued")
        got = [first.result(), second.result()]
    assert [g[0] for g in got] == [200, 200]
    hdrs = got[1][1]
    assert served_by(hdrs) == home
    m = re.match(r'pick="([^"]+)";reason=([a-z-]+);blocks=\d+;waited, ', hdrs["x-accelnet-llm"][0])
    assert m and m[2] in {"least", "home"}, hdrs["x-accelnet-llm"]
    rec = _ended(px, hdrs["x-request-id"][0])["llm"]
    assert rec["waited_for_affinity"] and rec["reason"] == m[2] and rec["pick"] == m[1]
    assert rec["queued_ms"] > 0 and rec["predicted_hit_blocks"] == rec["prompt_blocks"] > 0
    assert rec["answered_by"] == rec["pick"]


def _status(px):
    st, _, body = request(px.admin, "GET", "/status")
    assert st == 200
    return json.loads(body)["pools"][0]
