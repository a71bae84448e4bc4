"""Spend budgets (issue 28, Spend): per-model prices, per-tenant budgets per window reserved
before dispatch and settled from the backend's usage (or the streamed events counted when a
stream has none), 429 insufficient_quota once spent, the spend in /metrics and the access
log; bad prices and budgets refused with their place; a window that turns gives the budget
back; a client cannot move its spend onto another tenant's budget."""

import http.client
import json
import os
import subprocess
import threading

from harness import BIN, ScriptedBackend, metrics_text, pool_yaml, prom_samples, request, \
    wait_until

KEYS = {"a": "key-of-tenant-a-0123456789", "b": "key-of-tenant-b-0123456789"}
# dollars per million tokens; high, so that a $1 budget lasts a dozen small requests
PRICES = {"m": {"input": 1000, "cached_input": 250, "output": 4000}}
MAX_TOKENS = 16


def _micros(dollars):
    return round(dollars * 1_000_000)


def _cost(model, prompt, completion, cached=0):
    """What the proxy charges, in micro-units: rounded up, as docs/config.md says."""
    p = PRICES[model]
    fine = (prompt - cached) * _micros(p["input"]) + cached * _micros(p["cached_input"]) + \
        completion * _micros(p["output"])
    return -(-fine // 1_000_000)


def _proxy(env, port, budget="{per_tenant: 1.00, window: 1d}", extra=""):
    keys = env.write("keys", "".join(f"{t} {k}\n" for t, k in KEYS.items()))
    prices = "prices:\n" + "".join(
        f"  {m}: {{input: {p['input']}, cached_input: {p['cached_input']}, "
        f"output: {p['output']}}}\n" for m, p in PRICES.items())
    return env.proxy("pools:\n" + pool_yaml("p", [port]) + prices +
                     "routes:\n  - pool: p\n    api: openai\n"
                     f"    auth: {{api_keys_file: {keys}}}\n"
                     f"    budget: {budget}\n", extra=extra)


def _headers(tenant, more=None):
    return dict({"Content-Type": "application/json",
                 "Authorization": f"Bearer {KEYS[tenant]}"}, **(more or {}))


def _post(port, tenant, body, more=None):
    st, h, text = request(port, "POST", "/v1/completions", body=json.dumps(body),
                          headers=_headers(tenant, more))
    return st, h, text


def _stream(port, tenant, body):
    """(status, the SSE data lines) of a streamed completion."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("POST", "/v1/completions", body=json.dumps(body), headers=_headers(tenant))
        r = c.getresponse()
        data = r.read().decode()
        return r.status, [ln[5:].strip() for ln in data.split("\n") if ln.startswith("data:")]
    finally:
        c.close()


def _spend(px, **labels):
    got = prom_samples(metrics_text(px.admin))
    name = "accelnet_tenant_spend_micros_total" if "tenant" in labels else \
        "accelnet_model_spend_micros_total" if "model" in labels else \
        "accelnet_route_spend_micros_total"
    return got.get((name, tuple(sorted(labels.items()))), 0)


def _one(px, tenant, i):
    """The i-th request of a mixed run: (status, what the sim says it cost, streamed?,
    the 429's body). Every third is a JSON completion, every third a stream with its usage,
    every third a stream without (its completion counted from the events, its prompt the
    proxy's estimate, which is what the sim reports: body bytes / 4)."""
    body = {"model": "m", "prompt": f"tell me about spend {i}", "max_tokens": MAX_TOKENS}
    kind = i % 3
    if kind == 0:
        st, _, text = _post(px.port, tenant, body)
        if st != 200:
            return st, 0, False, text
        u = json.loads(text)["usage"]
        return st, _cost("m", u["prompt_tokens"], u["completion_tokens"]), False, None
    body["stream"] = True
    if kind == 1:
        body["stream_options"] = {"include_usage": True}
    st, events = _stream(px.port, tenant, body)
    if st != 200:
        return st, 0, True, None
    assert events[-1] == "[DONE]", events
    if kind == 1:
        u = json.loads(events[-2])["usage"]  # the sim reports usage when asked, in streams too
        return st, _cost("m", u["prompt_tokens"], u["completion_tokens"]), True, None
    texts = [e for e in events[:-1] if json.loads(e)["choices"][0].get("text")]
    assert texts, events
    return st, _cost("m", len(json.dumps(body)) // 4, len(texts)), True, None


def test_two_tenants_spend_as_the_usage_says_and_nothing_passes_once_spent(env):
    sim = env.sim("a", latency_ms=0, token_ms=0, tokens=MAX_TOKENS)
    log = os.path.join(env.dir, "access.log")
    px = _proxy(env, sim.port, extra=f"access_log: {{path: {log}}}\n")
    expected = {"a": 0, "b": 0}
    passed = {"a": 0, "b": 0}
    refusals = {"a": 0, "b": 0}
    streamed = 0
    i = 0
    # interleaved, until each has been refused three times
    while min(refusals.values()) < 3:
        for t in ("a", "b"):
            st, cost, stream, text = _one(px, t, i)
            i += 1
            if st == 200:
                assert not refusals[t], f"{t} passed after its budget was spent"
                expected[t] += cost
                passed[t] += 1
                streamed += stream
            else:
                assert st == 429, (st, text)
                refusals[t] += 1
                if text is not None:
                    err = json.loads(text)["error"]
                    assert err["type"] == "insufficient_quota", err
                    assert err["code"] == "insufficient_quota", err
                    assert "budget" in err["message"], err
        assert i < 200
    for t in ("a", "b"):
        assert passed[t] >= 9, passed  # a dozen fit in $1 at these prices
        # every request that passed was within the budget ...
        assert expected[t] <= 1_000_000, expected
        # ... and the next would not have fit (each costs about 79,000 micro-units)
        assert expected[t] > 1_000_000 - 2 * 80_000, expected
        # the recorded spend is the sim's usage at the prices, within 1%
        got = _spend(px, tenant=t)
        assert abs(got - expected[t]) <= expected[t] / 100, (t, got, expected[t])
    assert _spend(px, route="0") == _spend(px, tenant="a") + _spend(px, tenant="b")
    assert _spend(px, model="m") == _spend(px, route="0")
    # the access log's cost: every request that passed has one, none of them zero, and they
    # add up to the spend
    def lines():
        with open(log) as f:
            return [json.loads(ln) for ln in f if ln.strip()]
    wait_until(lambda: len(lines()) >= i, "the access log's lines")
    costs = [r["cost"] for r in lines() if r["status"] == 200]
    assert len(costs) == passed["a"] + passed["b"] and all(c > 0 for c in costs), costs
    # the streams among them (their events counted: "tokens"), a third without usage, each
    # recorded at more than zero
    streams = [r for r in lines() if r["status"] == 200 and r.get("tokens")]
    assert len(streams) == streamed >= 6 and all(r["cost"] > 0 for r in streams), streams
    total = round(sum(costs) * 1_000_000)
    assert abs(total - expected["a"] - expected["b"]) <= 1, (total, expected)


def test_concurrent_requests_never_spend_past_the_budget(env):
    # many workers reserve at once: each reservation is checked against the word it
    # replaces, so the requests that pass together still fit in the budget
    sim = env.sim("a", latency_ms=20, token_ms=0, tokens=MAX_TOKENS, slots=64)
    px = _proxy(env, sim.port)
    body = {"model": "m", "prompt": "the same prompt for all", "max_tokens": MAX_TOKENS}
    one = _cost("m", len(json.dumps(body)) // 4, MAX_TOKENS)
    got = []

    def run():
        for _ in range(3):
            got.append(_post(px.port, "a", body)[0])

    threads = [threading.Thread(target=run) for _ in range(12)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert set(got) == {200, 429}, got
    assert got.count(200) == 1_000_000 // one, (got.count(200), one)
    assert _spend(px, tenant="a") == got.count(200) * one <= 1_000_000


def test_a_client_cannot_spend_another_tenants_budget(env):
    sim = env.sim("a", latency_ms=0, token_ms=0, tokens=MAX_TOKENS)
    px = _proxy(env, sim.port, budget="{per_tenant: 0.1, window: 1d}")
    body = {"model": "m", "prompt": "x", "max_tokens": MAX_TOKENS}
    assert _post(px.port, "a", body)[0] == 200
    st, _, text = _post(px.port, "a", body)
    assert st == 429 and json.loads(text)["error"]["type"] == "insufficient_quota", text
    # headers that name a tenant elsewhere, a body that names a user or a budget: still a
    for more, extra in (({"X-Tenant": "b"}, {}), ({"X-Accelnet-Tenant": "b"}, {}),
                        ({}, {"user": "b"}), ({}, {"budget": 1000, "tenant": "b"})):
        st, _, text = _post(px.port, "a", dict(body, **extra), more)
        assert st == 429, (more, extra, st, text)
    # a body that names its model twice (a cheap one for the proxy, a dear one for a
    # backend that takes the last) is refused, never priced as either
    raw = b'{"model": "m", "model": "dear", "prompt": "x", "max_tokens": 1}'
    st, _, text = request(px.port, "POST", "/v1/completions", body=raw, headers=_headers("b"))
    assert st == 400, (st, text)
    # and b's budget was not touched by any of it
    assert _spend(px, tenant="b") == 0
    assert _post(px.port, "b", body)[0] == 200
    # an unpriced model is refused, never served for free
    st, _, text = _post(px.port, "b", dict(body, model="not-priced"))
    assert st == 403 and b"no price" in text, (st, text)
    st, _, text = _post(px.port, "b", {"prompt": "no model at all"})
    assert st == 403, (st, text)


def test_the_window_turns_and_the_budget_comes_back(env):
    sim = env.sim("a", latency_ms=0, token_ms=0, tokens=MAX_TOKENS)
    # one request spends it; windows of 2 s start at even Unix seconds
    px = _proxy(env, sim.port, budget="{per_tenant: 0.1, window: 2s}")
    body = {"model": "m", "prompt": "x", "max_tokens": MAX_TOKENS}
    wait_until(lambda: _post(px.port, "a", body)[0] == 200, "a first request")
    st, h, _ = _post(px.port, "a", body)
    if st == 429:  # the window had not turned between the two
        assert 1 <= int(h["retry-after"][0]) <= 2, h
    wait_until(lambda: _post(px.port, "a", body)[0] == 200, "the next window", timeout=10)


def test_cached_prompt_tokens_cost_the_cached_price(env):
    usage = {"prompt_tokens": 1000, "completion_tokens": 10, "total_tokens": 1010,
             "prompt_tokens_details": {"cached_tokens": 800}}
    answer = json.dumps({"choices": [{"text": "hi"}], "usage": usage}).encode()

    def script(n, req):
        return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(answer), answer), False)

    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    px = _proxy(env, be.port)
    st, _, _ = _post(px.port, "a", {"model": "m", "prompt": "x", "max_tokens": 10})
    assert st == 200
    assert _spend(px, tenant="a") == _cost("m", 1000, 10, cached=800)
    assert _cost("m", 1000, 10, cached=800) < _cost("m", 1000, 10)


BAD = [
    ("prices:\n  m: {input: -1, output: 1}\n", "prices: m: input: expected a decimal"),
    ("prices:\n  m: {input: 1e3, output: 1}\n", "expected a decimal"),
    ("prices:\n  m: {input: 0.0000001, output: 1}\n", "at most six digits"),
    ("prices:\n  m: {input: 1}\n", "give both input and output"),
    ("prices:\n  m: {input: 1, output: 1, extra: 2}\n", "unknown key 'extra'"),
    ("prices:\n  m: {input: 2000000, output: 1}\n", "at most 1000000"),
    ("prices: [1]\n", "expected a mapping of model names"),
]
BAD_BUDGET = [
    ("{per_tenant: 0, window: 1d}", "must be more than 0"),
    ("{per_tenant: 1, window: 1w}", "window: expected a whole number of s, m, h or d"),
    ("{per_tenant: 1, window: 0d}", "window: expected"),
    ("{per_tenant: 1, window: 9999d}", "window: expected"),
    ("{window: 1d}", "give per_tenant"),
    ("{per_tenant: abc}", "per_tenant: expected a decimal"),
]


def _check(env, text):
    path = env.write("bad.yaml", text)
    r = subprocess.run([BIN, "check", "-c", path], capture_output=True, text=True, timeout=30)
    return r.returncode, r.stdout + r.stderr, path


def test_bad_prices_and_budgets_are_refused_with_their_place(env):
    keys = env.write("keys", "a key-of-tenant-a-0123456789\n")
    head = "listen: [{address: 127.0.0.1:1}]\npools:\n  - name: p\n" \
        "    backends: [{address: 127.0.0.1:1}]\n"
    route = f"routes:\n  - pool: p\n    auth: {{api_keys_file: {keys}}}\n"
    good = "prices:\n  m: {input: 0.15, output: 0.6}\n"
    rc, out, _ = _check(env, head + good + route + "    budget: {per_tenant: 1, window: 30d}\n")
    assert rc == 0, out
    for prices, want in BAD:
        rc, out, path = _check(env, head + prices + route)
        assert rc != 0 and want in out and f"{path}:" in out, (prices, out)
        assert f"{path}:5:" in out or f"{path}:6:" in out, (prices, out)  # FILE:LINE:COL
    for budget, want in BAD_BUDGET:
        rc, out, path = _check(env, head + good + route + f"    budget: {budget}\n")
        assert rc != 0 and want in out and f"{path}:10:" in out, (budget, out)
    # a budget needs authenticated tenants and prices to charge by
    rc, out, path = _check(env, head + good + "routes:\n  - pool: p\n    budget: {per_tenant: 1}\n")
    assert rc != 0 and "budget: needs auth" in out and f"{path}:9:" in out, out
    rc, out, path = _check(env, head + route + "    budget: {per_tenant: 1}\n")
    assert rc != 0 and "needs the top-level prices" in out, out
    # a tunnel would carry unpriced traffic past the budget
    rc, out, path = _check(env, head + good + route + "    websocket: true\n"
                           "    budget: {per_tenant: 1}\n")
    assert rc != 0 and "not with websocket" in out, out


def test_a_budget_spent_on_one_instance_is_spent_on_the_others(env):
    from test_cluster import _cluster, _instances, _redis
    redis = _redis(env)
    sim = env.sim("a", latency_ms=0, token_ms=0, tokens=MAX_TOKENS)
    keys = env.write("keys", "".join(f"{t} {k}\n" for t, k in KEYS.items()))
    body = "pools:\n" + pool_yaml("p", [sim.port]) + \
        "prices:\n  m: {input: 1000, cached_input: 250, output: 4000}\n" + \
        "routes:\n  - name: chat\n    pool: p\n    api: openai\n" \
        f"    auth: {{api_keys_file: {keys}}}\n    budget: {{per_tenant: 1.00, window: 1d}}\n"
    one, two = _instances(env, redis.port, body, n=2)
    req = {"model": "m", "prompt": "spent across instances", "max_tokens": MAX_TOKENS}
    cost = _cost("m", len(json.dumps(req)) // 4, MAX_TOKENS)
    def synced():  # two syncs of each instance from now: what each sent, each has heard
        start = [_cluster(p)["accelnet_cluster_syncs_total"] for p in (one, two)]
        wait_until(lambda: all(_cluster(p)["accelnet_cluster_syncs_total"] >= n + 2
                               for p, n in zip((one, two), start)), "two syncs each")

    # a spends a request on each (each instance hears of a tenant once it has served it);
    # then the rest on one
    assert _post(two.port, "a", req)[0] == 200 and _post(one.port, "a", req)[0] == 200
    synced()
    passed = 2
    while _post(one.port, "a", req)[0] == 200:
        passed += 1
        assert passed < 100
    # all of it fit in the budget, counted together on both
    assert passed == 1_000_000 // cost, (passed, cost)
    # two hears of one's spend within a sync, and refuses a from then on
    synced()
    st, _, text = _post(two.port, "a", req)
    assert st == 429 and json.loads(text)["error"]["type"] == "insufficient_quota", text
    # b is another tenant, with its budget whole on both
    assert _post(two.port, "b", req)[0] == 200 and _post(one.port, "b", req)[0] == 200
    # Redis holds the total, in micro-units, per route, window and tenant
    total = _spend(one, tenant="a") + _spend(two, tenant="a")
    assert total == passed * cost <= 1_000_000, total


def _sse_backend(env, events, chunked=False):
    """A backend answering every request with the event stream of <events> (dicts, each one
    data line), then [DONE]: no usage in it."""
    data = b"".join(b"data: %s\n\n" % json.dumps(e).encode() for e in events) + \
        b"data: [DONE]\n\n"

    def script(n, req):
        return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(data), data), False)

    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    return be


def _chat(delta):
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}


# F2: every carrier of generated tokens in the OpenAI stream shapes, none of them "content"
# (but one) or "text": reasoning, tool calls, refusals, the Responses API's deltas
GENERATED = [_chat({"role": "assistant", "content": ""})] + \
    [_chat({"reasoning_content": f"think {i}"}) for i in range(20)] + \
    [_chat({"reasoning": "more thought"}) for _ in range(5)] + \
    [_chat({"content": None, "tool_calls": [{"index": 0, "function": {"arguments": "{\"a\""}}]})
     for _ in range(7)] + \
    [_chat({"function_call": {"arguments": "1}"}})] + \
    [_chat({"refusal": "I can't"}) for _ in range(3)] + \
    [_chat({"content": "ok"})] + \
    [{"type": "response.reasoning_summary_text.delta", "delta": "why"} for _ in range(4)] + \
    [{"type": "response.function_call_arguments.delta", "delta": "{}"} for _ in range(2)] + \
    [{"type": "response.output_text.delta", "delta": "hi"} for _ in range(6)]
GENERATED_TOKENS = 20 + 5 + 7 + 1 + 3 + 1 + 4 + 2 + 6


def test_a_stream_of_reasoning_and_tool_calls_without_usage_is_charged_its_tokens(env):
    be = _sse_backend(env, GENERATED)
    px = _proxy(env, be.port)
    body = {"model": "m", "prompt": "think hard", "max_tokens": 100, "stream": True}
    st, events = _stream(px.port, "a", body)
    assert st == 200 and events[-1] == "[DONE]", (st, events)
    want = _cost("m", len(json.dumps(body)) // 4, GENERATED_TOKENS)
    assert _spend(px, tenant="a") == want, (_spend(px, tenant="a"), want)
    # a stream that only thinks is not free either
    be2 = _sse_backend(env, [_chat({"reasoning_content": "hmm"}) for _ in range(40)])
    px2 = _proxy(env, be2.port)
    st, events = _stream(px2.port, "a", body)
    assert st == 200
    want = _cost("m", len(json.dumps(body)) // 4, 40)
    assert _spend(px2, tenant="a") == want, (_spend(px2, tenant="a"), want)


def test_a_client_that_leaves_before_the_answer_pays_for_its_prompt(env):
    # F4: the backend has the request (its prefill is done or under way) when the client
    # leaves: the prompt is charged, at least
    got, release = threading.Event(), threading.Event()

    def script(n, req):
        got.set()
        release.wait(30)
        return (b"", True)

    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    env.on_cleanup.append(release.set)
    px = _proxy(env, be.port)
    body = {"model": "m", "prompt": "a long prompt " * 200, "max_tokens": 16}
    raw = json.dumps(body).encode()
    c = http.client.HTTPConnection("127.0.0.1", px.port, timeout=30)
    c.request("POST", "/v1/completions", body=raw, headers=_headers("a"))
    assert got.wait(10), "the backend never got the request"
    c.close()
    want = _cost("m", len(raw) // 4, 0)
    wait_until(lambda: _spend(px, tenant="a") > 0, "the prompt charged")
    assert _spend(px, tenant="a") == want, (_spend(px, tenant="a"), want)


def test_concurrent_long_streams_never_spend_past_the_budget(env):
    # F3: requests naming no max_tokens reserve routes.budget.default_max_tokens (256), but
    # the sim streams 2000 tokens to each: 8 at once would spend 8 x $8 of a $10 budget if
    # settled only at the end. Charged as they go, their holds grow within the budget and
    # no further: a stream the budget cannot cover any more is ended (before the bytes that
    # passed its hold reach the client) and charged what it held. The bound: the spend never
    # passes the budget, not even by one reservation.
    sim = env.sim("a", latency_ms=0, token_ms=1, tokens=2000, slots=16)
    log = os.path.join(env.dir, "access.log")
    px = _proxy(env, sim.port, budget="{per_tenant: 10.00, window: 1d}",
                extra=f"access_log: {{path: {log}}}\n")
    body = {"model": "m", "prompt": "go on and on", "stream": True}
    reservation = _cost("m", len(json.dumps(body)) // 4, 256)
    full = _cost("m", len(json.dumps(body)) // 4, 2000)
    results = []

    def run():
        c = http.client.HTTPConnection("127.0.0.1", px.port, timeout=60)
        try:
            c.request("POST", "/v1/completions", body=json.dumps(body), headers=_headers("a"))
            r = c.getresponse()
            try:
                data = r.read()
                results.append((r.status, data.count(b"data: {"), data.endswith(b"[DONE]\n\n")))
            except http.client.IncompleteRead as e:
                results.append((r.status, e.partial.count(b"data: {"), False))
        finally:
            c.close()

    threads = [threading.Thread(target=run) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(results) == 8 and all(st == 200 for st, _, _ in results), results
    assert 8 * reservation <= 10_000_000 < 8 * full  # all reserve; not all could finish
    spent = _spend(px, tenant="a")
    assert spent <= 10_000_000, (spent, results)
    # and the budget was used, not refused early: what was cut was cut near its end
    assert spent > 10_000_000 - 8 * reservation, (spent, results)
    cut = [n for _, n, done in results if not done]
    assert cut and all(n < 2000 for n in cut), results
    got = prom_samples(metrics_text(px.admin))
    assert got.get(("accelnet_route_budget_cut_total", (("route", "0"),)), 0) == len(cut), got
    # every token a client got was paid for: the spend covers what reached the clients
    delivered = sum(n for _, n, _ in results)
    assert spent >= _cost("m", 0, delivered), (spent, delivered)
    # the access log says why each was cut, and what each cost adds up to the spend
    def lines():
        with open(log) as f:
            return [json.loads(ln) for ln in f if ln.strip()]
    wait_until(lambda: len(lines()) >= 8, "the access log's lines")
    cut_lines = [r for r in lines() if "cut" in r]
    assert len(cut_lines) == len(cut), lines()
    assert all("budget" in r["cut"] and r["cost"] > 0 for r in cut_lines), cut_lines
    assert round(sum(r["cost"] for r in lines()) * 1_000_000) == spent, lines()
    # nothing more passes: the budget is spent
    assert _post(px.port, "a", {"model": "m", "prompt": "x", "max_tokens": 1})[0] == 429


def test_a_full_budget_table_refuses_rather_than_shares(env):
    # F6: a table of 16 places and 24 tenants spending in one window: 16 get a place of
    # their own and spend within their own budget; the rest are refused 503 (and counted),
    # never put on another's budget, where one's spend would block the other (or let one
    # through on another's spent budget)
    sim = env.sim("a", latency_ms=0, token_ms=0, tokens=MAX_TOKENS)
    keys = {f"t{i}": f"key-of-tenant-{i:02d}-0123456789" for i in range(24)}
    path = env.write("many-keys", "".join(f"{t} {k}\n" for t, k in keys.items()))
    px = env.proxy("pools:\n" + pool_yaml("p", [sim.port]) +
                   "prices:\n  m: {input: 1000, cached_input: 250, output: 4000}\n"
                   "routes:\n  - pool: p\n    api: openai\n"
                   f"    auth: {{api_keys_file: {path}}}\n"
                   "    budget: {per_tenant: 0.1, window: 1d, tenants: 16}\n")
    body = json.dumps({"model": "m", "prompt": "x", "max_tokens": MAX_TOKENS})
    one = _cost("m", len(body) // 4, MAX_TOKENS)
    assert one <= 100_000 < 2 * one  # one request each spends a budget

    def post(t):
        return request(px.port, "POST", "/v1/completions", body=body,
                       headers={"Content-Type": "application/json",
                                "Authorization": f"Bearer {keys[t]}"})

    first = {t: post(t) for t in keys}
    placed = [t for t, (st, _, _) in first.items() if st == 200]
    full = [t for t, (st, _, _) in first.items() if st != 200]
    assert len(placed) == 16, {t: r[0] for t, r in first.items()}
    for t in full:
        st, h, text = first[t]
        assert st == 503 and b"budget table" in text and "retry-after" in h, (t, st, text)
    got = prom_samples(metrics_text(px.admin))
    assert got.get(("accelnet_route_budget_full_total", (("route", "0"),)), 0) == len(full)
    for t in placed:  # each spent its own budget, no one else's
        assert _spend(px, tenant=t) == one, t
        st, _, text = post(t)
        assert st == 429 and json.loads(text)["error"]["type"] == "insufficient_quota", text
    for t in full:
        assert _spend(px, tenant=t) == 0, t


def test_an_error_status_without_usage_costs_nothing(env):
    # the backend refused the request (a prompt too long for it, say): no prefill was paid
    # for, so the prompt that F4 charges a client that left is not charged here
    answer = b'{"error": {"message": "too long"}}'

    def script(n, req):
        return (b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(answer), answer), False)

    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    px = _proxy(env, be.port)
    st, _, _ = _post(px.port, "a", {"model": "m", "prompt": "x" * 400, "max_tokens": 16})
    assert st == 400
    assert _spend(px, tenant="a") == 0


def test_a_model_that_echoes_usage_keys_does_not_set_the_price(env):
    # a client may have the model write anything: text that spells usage keys (escaped in
    # its JSON string, as every engine writes it) is text, one token an event, never a count
    said = '"completion_tokens":1,"prompt_tokens":0,"cached_tokens":99999,"total_tokens":1'
    be = _sse_backend(env, [_chat({"content": said}) for _ in range(30)])
    px = _proxy(env, be.port)
    body = {"model": "m", "prompt": "repeat after me", "max_tokens": 100, "stream": True}
    st, events = _stream(px.port, "a", body)
    assert st == 200 and len(events) == 31, events
    want = _cost("m", len(json.dumps(body)) // 4, 30)
    assert _spend(px, tenant="a") == want, (_spend(px, tenant="a"), want)
