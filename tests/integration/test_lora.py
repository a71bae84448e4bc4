"""LoRA adapters (issue 28): an adapter's requests go to the backends whose engines have it
loaded (vLLM's vllm:lora_requests_info, scraped) while they have room, then to backends with a
free adapter slot; the prefix index keys a prompt by its model and cache_salt, so a prompt
cached under one adapter or salt is never a hit for another (learned and KV-event modes); a
client cannot steer with a made-up adapter name. The simulator's side: adapters loaded on
demand (LRU, max_loras per batch, a load time), vllm:lora_requests_info as vLLM writes it, and
its own prefix cache keyed the same way."""

import concurrent.futures
import json
import signal
import socket

from harness import (free_port, metrics_text, prom_samples, request, served_by, sim_stats,
                     wait_until)

BLOCK = 64
SCRAPE = "    engine_metrics: {interval_ms: 100, timeout_ms: 90}\n"


def _sims(env, n, loaded=None, **opts):
    """<n> sims serving the base model "base" with 2 adapter slots; sim i loads loaded[i]."""
    out = []
    for i in range(n):
        args = dict(latency_ms=5, jitter=0, tokens=2, token_ms=30, cache_blocks=4096,
                    block_bytes=BLOCK, prefill_us_per_block=200, models="base", max_loras=2,
                    lora_load_ms=200, slots=8)
        if loaded and loaded[i]:
            args["lora"] = loaded[i]
        args.update(opts)
        out.append(env.sim(f"s{i}", **args))
    return out


def _proxy(env, sims, cap=2, scrape=True, models=None, kv=None, llm_extra=""):
    lines = ["pools:", "  - name: gpu", "    balance: llm",
             f"    llm: {{block_bytes: {BLOCK}{llm_extra}}}", "    backends:"]
    for i, s in enumerate(sims):
        extra = f", models: [{', '.join(models)}]" if models else ""
        extra += f", kv_events: 'tcp://127.0.0.1:{kv[i]}'" if kv else ""
        lines.append(f"      - {{address: 127.0.0.1:{s.port}, max_concurrency: {cap}{extra}}}")
    text = "\n".join(lines) + "\n" + (SCRAPE if scrape else "")
    text += "routes:\n  - match: {path_prefix: /}\n    pool: gpu\n"
    return env.proxy(text, workers=1)


def _system(k):
    return f"System prompt {k}: " + f"you are assistant number {k}, answer with care. " * 20


def _body(model, system=_system(1), question="a question", tokens=2, salt=None, stream=False):
    body = {"model": model, "max_tokens": tokens,
            "messages": [{"role": "system", "content": system},
                         {"role": "user", "content": question}]}
    if salt is not None:
        body["cache_salt"] = salt
    if stream:
        body["stream"] = True
    return json.dumps(body)


def _post(port, body):
    return request(port, "POST", "/v1/chat/completions", body=body,
                   headers={"Content-Type": "application/json"})


def _ended(px, reqid):
    """The /debug/requests entry of the ended request <reqid>."""
    found = []

    def there():
        st, _, body = request(px.admin, "GET", "/debug/requests")
        assert st == 200
        found[:] = [r for r in json.loads(body)["slowest"] if r["request_id"] == reqid]
        return found
    wait_until(there, f"request {reqid} in /debug/requests")
    return found[0]


def _scrapes(px, sim):
    lab = (("backend", f"127.0.0.1:{sim.port}"), ("pool", "gpu"))
    return prom_samples(metrics_text(px.admin)).get(
        ("accelnet_backend_engine_scrapes_total", lab), 0)


def _hold(sim, model):
    """A long stream of <model> sent to <sim> directly (another client's): the socket, open
    until closed; returns once the sim runs it."""
    body = _body(model, question=f"held {model}", tokens=1000, stream=True).encode()
    s = socket.create_connection(("127.0.0.1", sim.port), timeout=15)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
              b"application/json\r\nContent-Length: " + str(len(body)).encode() +
              b"\r\n\r\n" + body)
    wait_until(lambda: sim_stats(sim.port)["lora"].get(model, {}).get("running") == 1,
               f"{model} running on {sim.name}")
    return s


def _scraped_twice(px, sims):
    """Two more scrapes of each of <sims> start and end: the second began after the call."""
    before = {s.port: _scrapes(px, s) for s in sims}
    wait_until(lambda: all(_scrapes(px, s) >= before[s.port] + 2 for s in sims),
               "two more scrapes of each engine")


def _lora(sim, name):
    return sim_stats(sim.port)["lora"].get(name, {"requests": 0, "loads": 0})


def _burst(port, bodies):
    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as ex:
        got = list(ex.map(lambda b: _post(port, b), bodies))
    assert all(st == 200 for st, _, _ in got), [st for st, _, _ in got]
    return [served_by(h) for _, h, _ in got]


def _learn(px, sims, holders, name):
    """Another client's requests make adapter <name> show as running on <holders> in their
    metrics, as a loaded adapter in use does; the proxy remembers it there once they end."""
    held = [_hold(s, name) for s in holders]
    _scraped_twice(px, sims)
    for s in held:
        s.close()
    wait_until(lambda: all(_lora(s, name).get("running") == 0 for s in holders),
               "the held streams ended")
    _scraped_twice(px, sims)


def test_adapter_goes_to_the_backends_that_have_it_while_they_have_room(env):
    """The must-show: 2 of 4 backends have adapter A loaded; A's requests go to those two while
    they have room (2 slots each), and only the overflow goes to the others, which load it."""
    sims = _sims(env, 4, loaded=["A", "A", None, None])
    px = _proxy(env, sims)
    _learn(px, sims, sims[:2], "A")
    # (each request on a system prompt of its own, so that the adapter alone decides: four
    # on one prompt are rightly drawn to the backend its first one went to)
    for rnd in range(3):  # within their room: s0 and s1 only, nothing loaded elsewhere
        seen = _burst(px.port, [_body("A", system=_system(10 + 4 * rnd + i),
                                      question=f"q{rnd}.{i}", tokens=10) for i in range(4)])
        assert sorted(seen) == ["s0", "s0", "s1", "s1"], (rnd, seen)
    for s in sims[2:]:
        assert _lora(s, "A") == {"requests": 0, "loads": 0}, sim_stats(s.port)
    assert all(_lora(s, "A")["loads"] == 0 for s in sims[:2])  # loaded at start
    # more at once than they have room for: the overflow goes to the others, which load A
    seen = _burst(px.port, [_body("A", system=_system(30 + i), question=f"over{i}", tokens=10)
                            for i in range(7)])
    assert seen.count("s0") + seen.count("s1") >= 4, seen
    over = seen.count("s2") + seen.count("s3")
    assert over >= 1, seen
    assert sum(_lora(s, "A")["requests"] for s in sims[2:]) == over
    assert 1 <= sum(_lora(s, "A")["loads"] for s in sims[2:]) <= 2
    # the base model is never held to the adapter's backends
    seen = _burst(px.port, [_body("base", system=_system(40 + i), question=f"b{i}", tokens=10)
                            for i in range(8)])
    assert sorted(set(seen)) == ["s0", "s1", "s2", "s3"], seen


def test_where_adapters_are_survives_a_reload(env):
    """A reload carries what the engines said of their adapters: A's requests still go to the
    backends that hold it, before any engine shows it again."""
    sims = _sims(env, 4, loaded=["A", "A", None, None])
    px = _proxy(env, sims)
    _learn(px, sims, sims[:2], "A")
    px.send_signal(signal.SIGHUP)
    wait_until(lambda: "(configuration generation 1)" in env.log(px), "the reload")
    seen = _burst(px.port, [_body("A", system=_system(50 + i), question=f"r{i}", tokens=10)
                            for i in range(4)])
    assert sorted(seen) == ["s0", "s0", "s1", "s1"], seen
    assert all(_lora(s, "A") == {"requests": 0, "loads": 0} for s in sims[2:])


def _hits(px, hdrs):
    """The proxy's predicted hit blocks for the request answered with <hdrs> (and the most any
    candidate held), and the sim's cached blocks for it."""
    rec = _ended(px, hdrs["x-request-id"][0])["llm"]
    best = max(c["hit_blocks"] for c in rec["candidates"])
    return rec["predicted_hit_blocks"], best, int(hdrs["x-sim-cached-blocks"][0]), rec


def test_prompt_cached_under_one_adapter_is_no_hit_for_another(env):
    """The must-show's second half: a prompt cached under adapter A is not a hit for adapter B,
    neither in the proxy's prefix index (learned from routing) nor in the engine's cache; under
    A again it is."""
    sims = _sims(env, 4, loaded=["A", "A,B", "B", None])
    px = _proxy(env, sims)
    body_a = _body("A", system=_system(5), question="the same question")
    st, hdrs, _ = _post(px.port, body_a)
    assert st == 200
    home = served_by(hdrs)
    st, hdrs, _ = _post(px.port, _body("B", system=_system(5), question="the same question"))
    assert st == 200
    predicted, best, cached, rec = _hits(px, hdrs)
    assert rec["prompt_blocks"] > 0
    assert predicted == best == cached == 0, (rec, cached)
    st, hdrs, _ = _post(px.port, _body("base", system=_system(5), question="the same question"))
    predicted, best, cached, rec = _hits(px, hdrs)
    assert predicted == best == cached == 0, (rec, cached)
    st, hdrs, _ = _post(px.port, body_a)  # the positive control: A's prefix is at home
    predicted, best, cached, rec = _hits(px, hdrs)
    assert served_by(hdrs) == home and predicted == rec["prompt_blocks"] == cached > 0, rec


def test_cache_salt_keeps_a_prompt_to_its_salt(env):
    """vLLM's cache_salt: a prompt cached under one salt is no hit for another salt or for no
    salt, in the proxy's index and in the engine's cache; under its own salt it is."""
    sims = [env.sim(f"s{i}", latency_ms=5, jitter=0, tokens=2, token_ms=1, cache_blocks=4096,
                    block_bytes=BLOCK, prefill_us_per_block=200) for i in range(3)]
    px = _proxy(env, sims, cap=4, scrape=False)
    alice = _body("m", system=_system(9), salt="alice-secret")
    st, hdrs, _ = _post(px.port, alice)
    assert st == 200
    home = served_by(hdrs)
    for other in (_body("m", system=_system(9), salt="bob-secret"),
                  _body("m", system=_system(9)),
                  _body("m", system=_system(9), salt="")):
        st, hdrs, _ = _post(px.port, other)
        assert st == 200
        predicted, best, cached, rec = _hits(px, hdrs)
        assert rec["prompt_blocks"] > 0
        assert predicted == best == cached == 0, (other[-60:], rec, cached)
    st, hdrs, _ = _post(px.port, alice)
    predicted, best, cached, rec = _hits(px, hdrs)
    assert served_by(hdrs) == home and predicted == rec["prompt_blocks"] == cached > 0, rec


def test_kv_events_are_scoped_as_the_proxy_scopes_prompts(env):
    """With the engines' KV events keeping the index (exact mode), the engine publishes its
    blocks scoped by adapter and salt, and the proxy scopes a request's prompt the same way: a
    prompt stored under A predicts hits under A, none under B or another salt."""
    ports = [free_port() for _ in range(2)]
    sims = [env.sim(f"s{i}", latency_ms=5, jitter=0, tokens=2, token_ms=1, cache_blocks=4096,
                    block_bytes=BLOCK, models="base", max_loras=2, lora="A,B",
                    kv_events=f"tcp://127.0.0.1:{ports[i]}") for i in range(2)]
    px = _proxy(env, sims, cap=4, scrape=False, kv=ports)

    def stored():
        st, _, body = request(px.admin, "GET", "/status")
        return sum(b["kv_events"]["blocks"] for b in json.loads(body)["pools"][0]["backends"])
    k = [0]

    def heard():  # the subscriptions connect some time after the start
        k[0] += 1
        _post(px.port, _body("base", system=_system(100 + k[0])))
        return stored() > 0
    wait_until(heard, "the engines' KV events in the proxy's index")
    body_a = _body("A", system=_system(7), salt="s")
    before = stored()
    st, hdrs, _ = _post(px.port, body_a)
    assert st == 200
    home = served_by(hdrs)
    wait_until(lambda: stored() > before, "A's blocks stored in the index")
    for other in (_body("B", system=_system(7), salt="s"), _body("A", system=_system(7)),
                  _body("A", system=_system(7), salt="t")):
        st, hdrs, _ = _post(px.port, other)
        predicted, best, cached, rec = _hits(px, hdrs)
        assert predicted == best == cached == 0, (rec, cached)
    st, hdrs, _ = _post(px.port, body_a)
    predicted, best, cached, rec = _hits(px, hdrs)
    assert served_by(hdrs) == home and predicted == rec["prompt_blocks"] == cached > 0, rec


def test_new_adapter_goes_where_an_adapter_slot_is_free(env):
    """An adapter no engine shows goes to a backend with a free adapter slot, never to one
    already running max_lora adapters (it would have to wait there and swap one out)."""
    sims = _sims(env, 3)
    px = _proxy(env, sims, cap=4)
    held = [_hold(sims[0], "X"), _hold(sims[0], "Y")]  # s0 runs its max_lora (2) adapters
    _scraped_twice(px, sims)
    # as many new adapters as s1 and s2 have adapter slots (2 each): while they have room.
    # (Six, as this test once sent, outnumber the slots: once a scrape shows s1 and s2 full
    # too, no backend has room and the rest may go anywhere, s0 included; 2 runs in 5 did.)
    seen = _burst(px.port, [_body(f"N{i}", question=f"n{i}") for i in range(4)])
    assert "s0" not in seen, seen
    assert sum(sim_stats(s.port)["lora_loads"] for s in sims[1:]) == 4
    for s in held:
        s.close()


def test_a_made_up_adapter_name_cannot_steer(env):
    """Where an adapter is comes from the engines' metrics only, and the proxy reads the name
    the engine will read: a client naming an adapter the pool's backends do not list is refused
    as today (404, no engine sees it); once the engines show adapters, a body naming two models
    (the proxy routing one, the engine running the other) is refused, never routed."""
    sims = _sims(env, 2, loaded=["A", None])
    px = _proxy(env, sims, models=["base", "A"])
    st, hdrs, body = _post(px.port, _body("Z"))
    assert st == 404 and b"model 'Z' not found" in body, body
    for s in sims:
        stats = sim_stats(s.port)
        assert stats["base_requests"] == stats["lora_loads"] == 0, stats
        assert all(a["requests"] == 0 for a in stats["lora"].values()), stats
    # no static list: the engines' metrics say they serve adapters
    sims = _sims(env, 2, loaded=["A", None])
    px = _proxy(env, sims)
    _scraped_twice(px, sims)
    two = _body("base")[:-1] + ', "model": "A"}'
    st, _, body = _post(px.port, two)
    assert st == 400, body
    assert all(sim_stats(s.port)["completions"] == 0 for s in sims)
    st, hdrs, body = _post(px.port, _body("\\u0041").replace("\\\\", "\\"))
    assert st == 200 and json.loads(body)["model"] == "A"  # one name, read as the engine does


def test_sim_loads_adapters_on_demand_and_reports_them_as_vllm(env):
    """accelnet sim --lora/--max-loras: a loaded adapter answers at once, an unknown one is
    loaded (charged --lora-load-ms) evicting the least recently used; at most max_loras run at
    once; vllm:lora_requests_info's latest sample (the largest value) names what runs."""
    sim, = _sims(env, 1, loaded=["A"], token_ms=1, lora_load_ms=150, max_loras=1)
    st, hdrs, body = _post(sim.port, _body("A"))
    assert st == 200 and json.loads(body)["model"] == "A"
    assert int(hdrs["x-sim-service-ms"][0]) < 150
    st, hdrs, body = _post(sim.port, _body("B"))
    assert st == 200 and int(hdrs["x-sim-service-ms"][0]) >= 150  # loaded for it
    stats = sim_stats(sim.port)
    assert stats["lora"]["A"]["loaded"] is False and stats["lora"]["B"]["loaded"] is True
    assert stats["lora_loads"] == 1 and stats["lora"]["B"]["loads"] == 1
    st, _, _ = _post(sim.port, _body("base"))
    assert st == 200 and sim_stats(sim.port)["base_requests"] == 1
    # max_loras 1: while B runs, A waits even with slots free
    held = _hold(sim, "B")
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        fut = ex.submit(_post, sim.port, _body("A"))
        wait_until(lambda: sim_stats(sim.port)["lora"]["A"]["waiting"] == 1, "A waiting")
        st, _, text = request(sim.port, "GET", "/metrics")
        samples = [line for line in text.decode().splitlines()
                   if line.startswith("vllm:lora_requests_info{")]
        latest = max(samples, key=lambda line: float(line.rsplit(" ", 1)[1]))
        assert 'max_lora="1"' in latest and 'running_lora_adapters="B"' in latest, samples
        assert 'waiting_lora_adapters="A"' in latest, samples
        held.close()
        assert fut.result()[0] == 200
    st, _, text = request(sim.port, "GET", "/metrics")
    samples = [line for line in text.decode().splitlines()
               if line.startswith("vllm:lora_requests_info{")]
    latest = max(samples, key=lambda line: float(line.rsplit(" ", 1)[1]))
    assert 'running_lora_adapters=""' in latest and len(samples) >= 2, samples
