"""Model routing, seen from a client: routes[].match.model picks the pool by the request body's
"model", backends[].models picks the backends in a pool (an unknown model is 404, as OpenAI
answers it), a queued request waits for a backend that serves its model, and GET /v1/models
is answered by accelnet from the config."""

import collections
import concurrent.futures
import json
import os
import socket
import subprocess

from harness import (BIN, backend_state, complete, read_until, request, served_by, status,
                     wait_until)


def _yaml_pool(name, backends):
    """backends: list of (port, models or None, max_concurrency or None)."""
    text = f"  - name: {name}\n    backends:\n"
    for port, models, cap in backends:
        text += f"      - address: 127.0.0.1:{port}\n"
        if models is not None:
            text += "        models: [" + ", ".join(json.dumps(m) for m in models) + "]\n"
        if cap:
            text += f"        max_concurrency: {cap}\n"
    return text


def _post(port, body, path="/v1/chat/completions", headers=None):
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    return request(port, "POST", path, body=body, headers=h)


def test_model_routes_match_patterns_in_order(env):
    sims = {n: env.sim(n, latency_ms=0, token_ms=0) for n in ("llama", "small", "any", "rest")}
    px = env.proxy("pools:\n"
                   + "".join(_yaml_pool(n, [(s.port, None, None)]) for n, s in sims.items())
                   + "routes:\n"
                   "  - {match: {path_prefix: /v1/, model: \"llama-3-*\"}, pool: llama}\n"
                   "  - {match: {model: \"llama-?\"}, pool: small}\n"
                   "  - {match: {path_prefix: /v1/, model: \"*\"}, pool: any}\n"
                   "  - {match: {path_prefix: /}, pool: rest}\n")
    cases = [
        ('{"model":"llama-3-8b","messages":[]}', "llama"),
        ('{"model":"llama-3-","prompt":"x"}', "llama"),
        ('{"model":"llama-2","prompt":"x"}', "small"),
        ('{"model":"llama-22","prompt":"x"}', "any"),   # '?' is one byte
        ('{"model":"Llama-3-8b"}', "any"),              # case counts
        ('{"model":""}', "any"),
        # the model after the messages, with whitespace, and a "model" inside them first
        ('{\n  "messages": [{"role": "user", "content": "{\\"model\\": \\"llama-3-x\\"}",'
         ' "model": "llama-3-inner"}],\n  "model"  :\t"llama-2" ,"stream":false}', "small"),
        # escapes in the value are decoded before matching
        ('{"prompt":"x","model":"llama\\u002d3\\u002d70b"}', "llama"),
        ('{"model":"llama-\\u0033"}', "small"),
        # no model: the model routes are passed over
        ('{"prompt":"llama-3-8b"}', "rest"),
        ('{"model":5}', "rest"),
        ('{"meta":{"model":"llama-3-8b"}}', "rest"),
        ('["model","llama-3-8b"]', "rest"),
    ]
    for body, want in cases:
        st, h, data = _post(px.port, body)
        assert st == 200 and served_by(h) == want, (body, st, served_by(h), data)
    # a body that is not JSON is not read as naming none (a form's "model" is a backend's
    # too): refused, as the model routes must be decided on what the backend reads
    for body in ('model=llama-3-8b', '{"model":"llama-2","model":"llama-3-8b"}'):
        st, h, data = _post(px.port, body)
        assert st == 400, (body, st, data)
    # a streamed answer comes as an event stream from the model's pool
    st, h, data = _post(px.port, '{"stream": true, "prompt": "x", "model": "llama-3-8b"}',
                        path="/v1/completions")
    assert st == 200 and served_by(h) == "llama", (st, h)
    assert h["content-type"][0].startswith("text/event-stream") and b"data: [DONE]" in data
    st, h, _ = request(px.port, "GET", "/v1/chat/completions")
    assert st == 200 and served_by(h) == "rest"
    st, h, _ = request(px.port, "POST", "/v1/chat/completions", body=b"")
    assert st == 200 and served_by(h) == "rest"


def _raw_exchange(port, head, parts, wait_continue=False):
    """Send <head>, then each of <parts> (after '100 Continue' first when asked); returns the
    response bytes up to the end of its head and Content-Length body."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
        s.sendall(head)
        got = b""
        if wait_continue:
            got = read_until(s, lambda b: b"\r\n\r\n" in b)
            assert got.startswith(b"HTTP/1.1 100 Continue\r\n"), got
            got = got[got.index(b"\r\n\r\n") + 4:]
        for p in parts:
            s.sendall(p)
        got = read_until(s, lambda b: b"\r\n\r\n" in b, got)
        head_end = got.index(b"\r\n\r\n") + 4
        n = int([l for l in got[:head_end].split(b"\r\n")
                 if l.lower().startswith(b"content-length:")][0].split(b":")[1])
        return read_until(s, lambda b: len(b) >= head_end + n, got)


def _served(resp):
    for line in resp.split(b"\r\n"):
        if line.lower().startswith(b"x-served-by:"):
            return line.split(b":", 1)[1].strip().decode()
    return None


def test_model_read_from_a_body_that_comes_late_in_pieces_or_large(env):
    llama = env.sim("llama", latency_ms=0, token_ms=0)
    rest = env.sim("rest", latency_ms=0, token_ms=0)
    px = env.proxy("pools:\n" + _yaml_pool("llama", [(llama.port, None, None)])
                   + _yaml_pool("rest", [(rest.port, None, None)])
                   + "routes:\n"
                   "  - {match: {model: \"llama-*\"}, pool: llama}\n"
                   "  - {match: {path_prefix: /}, pool: rest}\n",
                   extra="limits: {body_buffer_bytes: 256KiB}\n")
    body = json.dumps({"messages": [{"role": "user", "content": "x" * 200000}],
                       "model": "llama-3"}).encode()

    def head(extra=b""):
        return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n" + extra + b"\r\n")

    # Expect: 100-continue: the proxy answers it to read the model, the body follows
    resp = _raw_exchange(px.port, head(b"Expect: 100-continue\r\n"), [body], wait_continue=True)
    assert resp.startswith(b"HTTP/1.1 200") and _served(resp) == "llama", resp[:300]
    # the head alone first, then the body in pieces, the model in the last one
    resp = _raw_exchange(px.port, head(), [body[:10], body[10:150000], body[150000:]])
    assert resp.startswith(b"HTTP/1.1 200") and _served(resp) == "llama", resp[:300]
    # a body longer than limits.body_buffer_bytes cannot be read whole for its model (a
    # model, or a second one, may come later): refused, not routed on a guess
    for big in (json.dumps({"messages": [{"role": "user", "content": "x" * 600000}],
                            "model": "llama-3"}),
                json.dumps({"model": "llama-3", "prompt": "x" * 600000})):
        st, h, data = _post(px.port, big)
        assert st == 413 and b"body_buffer_bytes" in data, (st, h, data)
    # nor a chunked one: 411, Length Required
    resp = _raw_exchange(
        px.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
        [b"13\r\n{\"model\":\"llama-3\"}\r\n0\r\n\r\n"])
    assert resp.startswith(b"HTTP/1.1 411"), resp[:300]


def test_backend_model_lists_choose_backends(env):
    a = env.sim("a", latency_ms=0, token_ms=0)
    b = env.sim("b", latency_ms=0, token_ms=0)
    c = env.sim("c", latency_ms=0, token_ms=0)
    px = env.proxy("pools:\n"
                   + _yaml_pool("gpu", [(a.port, ["base", "lora-a"], None),
                                        (b.port, ["base"], None), (c.port, None, None)])
                   + "routes:\n  - {match: {path_prefix: /}, pool: gpu, api: openai}\n")

    def served(model, n=12):
        got = collections.Counter()
        for _ in range(n):
            body = json.dumps({"prompt": "hi", "model": model} if model else {"prompt": "hi"})
            st, h, data = complete(px.port, body)
            assert st == 200, (model, st, data)
            got[served_by(h)] += 1
        return got

    assert served("lora-a") == {"a": 12}           # the adapter is on one backend only
    assert set(served("base")) == {"a", "b"}        # those that list it, not the catch-all
    assert served("other") == {"c": 12}             # listed by none: the one listing nothing
    assert set(served(None)) == {"a", "b", "c"}     # no model: any backend

    # a pool where every backend lists its models: an unknown model is not found
    px2 = env.proxy("pools:\n" + _yaml_pool("gpu", [(a.port, ["base"], None)])
                    + "routes:\n  - {match: {path_prefix: /v1/}, pool: gpu, api: openai}\n"
                    "  - {match: {path_prefix: /}, pool: gpu}\n")
    st, h, data = complete(px2.port, json.dumps({"model": "gpt-9", "prompt": "x"}))
    assert st == 404, (st, data)
    assert h["content-type"] == ["application/json"]
    err = json.loads(data)["error"]
    assert err["message"] == "model 'gpt-9' not found", err
    assert err["type"] == "invalid_request_error" and err["code"] == "model_not_found", err
    assert json.loads(data)["request_id"] == h["x-request-id"][0]
    st, h, data = complete(px2.port, json.dumps({"model": "gpt-9"}), path="/other")
    assert st == 404 and h["content-type"] == ["text/plain"], (st, h, data)
    assert b"model 'gpt-9' not found" in data
    st, h, _ = complete(px2.port, json.dumps({"model": "base"}))
    assert st == 200 and served_by(h) == "a"


def test_queued_requests_get_a_backend_serving_their_model(env):
    a = env.sim("a", latency_ms=150, jitter=0, token_ms=0)
    b = env.sim("b", latency_ms=150, jitter=0, token_ms=0)
    px = env.proxy("pools:\n"
                   + _yaml_pool("gpu", [(a.port, ["m-a"], 1), (b.port, ["m-b"], 1)])
                   + "    queue: {max: 100, timeout_ms: 20000}\n"
                   "routes:\n  - {match: {path_prefix: /}, pool: gpu, api: openai}\n")
    models = ["m-a"] * 6 + ["m-b"] * 2

    def one(model):
        st, h, data = complete(px.port, json.dumps({"model": model, "prompt": "x"}))
        return model, st, served_by(h)

    with concurrent.futures.ThreadPoolExecutor(len(models)) as ex:
        results = list(ex.map(one, models))
    for model, st, who in results:
        assert st == 200 and who == model[2:], results
    # some of them waited in the queue for their backend's one slot
    stats = json.loads(request(px.admin, "GET", "/status")[2])
    pool = [p for p in stats["pools"] if p["name"] == "gpu"][0]
    assert pool["queue"]["granted"] >= 4, pool


def test_a_slot_goes_past_a_head_of_line_waiting_for_another_model(env):
    slow = env.sim("slow", latency_ms=2500, jitter=0, token_ms=0)
    # the fast backend's one request must still be running when the fourth is queued behind
    # the head of the line: 1 s, not 300 ms, for a loaded machine (it finished first once)
    fast = env.sim("fast", latency_ms=1000, jitter=0, token_ms=0)
    px = env.proxy("pools:\n"
                   + _yaml_pool("gpu", [(slow.port, ["m-slow"], 1), (fast.port, ["m-fast"], 1)])
                   + "    queue: {max: 100, timeout_ms: 20000, discipline: fifo}\n"
                   "routes:\n  - {match: {path_prefix: /}, pool: gpu, api: openai}\n")
    done = []

    def one(model):
        st, h, _ = complete(px.port, json.dumps({"model": model, "prompt": "x"}))
        done.append((model, st, served_by(h)))

    def queued():
        return status(px.admin)["pools"][0]["queue"]["length"]

    ex = concurrent.futures.ThreadPoolExecutor(4)
    try:
        futs = [ex.submit(one, "m-slow")]
        wait_until(lambda: backend_state(px.admin, f"127.0.0.1:{slow.port}")["inflight"] == 1,
                   "the slow backend busy")
        futs.append(ex.submit(one, "m-fast"))
        wait_until(lambda: backend_state(px.admin, f"127.0.0.1:{fast.port}")["inflight"] == 1,
                   "the fast backend busy")
        futs.append(ex.submit(one, "m-slow"))  # the head of the line, for the slow backend
        wait_until(lambda: queued() == 1, "one queued")
        futs.append(ex.submit(one, "m-fast"))  # behind it: the fast backend's next slot
        wait_until(lambda: queued() == 2, "two queued")
        for f in futs:
            f.result()
    finally:
        ex.shutdown()
    assert all(st == 200 and who == model[2:] for model, st, who in done), done
    # the second m-fast request did not wait for the slow head of the line to be served
    assert [m for m, _, _ in done][:3] == ["m-fast", "m-fast", "m-slow"], done


def test_v1_models_answered_from_the_config(env):
    a = env.sim("a", latency_ms=0, token_ms=0)
    b = env.sim("b", latency_ms=0, token_ms=0)
    c = env.sim("c", latency_ms=0, token_ms=0)
    px = env.proxy("pools:\n"
                   + _yaml_pool("gpu", [(a.port, ["zeta", "org/alpha"], None),
                                        (b.port, ["zeta", "beta"], None)])
                   + _yaml_pool("spill", [(b.port, ["gamma"], None)])
                   + _yaml_pool("web", [(c.port, ["hidden"], None)])
                   + "routes:\n"
                   "  - {match: {path_prefix: /v1/}, pool: gpu, api: openai,"
                   " spillover: {pool: spill}}\n"
                   "  - {match: {path_prefix: /}, pool: web}\n")
    st, h, data = request(px.port, "GET", "/v1/models")
    assert st == 200 and h["content-type"] == ["application/json"], (st, h, data)
    assert len(h["x-request-id"][0]) == 32 and "x-served-by" not in h
    got = json.loads(data)
    assert got["object"] == "list"
    assert [m["id"] for m in got["data"]] == ["beta", "gamma", "org/alpha", "zeta"], got
    assert all(m == {"id": m["id"], "object": "model", "created": 0, "owned_by": "accelnet"}
               for m in got["data"]), got
    st, h, data = request(px.port, "GET", "/v1/models?limit=5")
    assert st == 200 and json.loads(data) == got
    for path in ("/v1/models/org/alpha", "/v1/models/org/%61lpha"):
        st, h, data = request(px.port, "GET", path)
        assert st == 200 and json.loads(data) == {"id": "org/alpha", "object": "model",
                                                  "created": 0, "owned_by": "accelnet"}, data
    # an encoded / is refused before any route (limits.path, issue 24)
    assert request(px.port, "GET", "/v1/models/org%2Falpha")[0] == 400
    st, h, data = request(px.port, "GET", "/v1/models/hidden")
    assert st == 404 and json.loads(data)["error"]["code"] == "model_not_found", data
    assert json.loads(data)["error"]["message"] == "model 'hidden' not found"
    # not GET, or not an api: openai route: the backend answers
    st, h, _ = request(px.port, "POST", "/v1/models", body=b"{}")
    assert st == 200 and served_by(h) in ("a", "b")
    st, h, _ = request(px.port, "GET", "/models")
    assert st == 200 and served_by(h) == "c"

    # no backend lists a model: the request goes through, so a real server answers
    px2 = env.proxy("pools:\n" + _yaml_pool("gpu", [(a.port, None, None)])
                    + "routes:\n  - {match: {path_prefix: /}, pool: gpu, api: openai}\n")
    st, h, _ = request(px2.port, "GET", "/v1/models")
    assert st == 200 and served_by(h) == "a"


def test_v1_models_only_for_clients_the_route_admits(env):
    a = env.sim("a", latency_ms=0, token_ms=0)
    keys = env.write("keys.txt", "acme sk-acme-0123456789abcdef\n")
    px = env.proxy("pools:\n" + _yaml_pool("gpu", [(a.port, ["m"], None)])
                   + "routes:\n  - match: {path_prefix: /v1/}\n    pool: gpu\n    api: openai\n"
                   f"    auth: {{api_keys_file: {keys}}}\n")
    st, h, data = request(px.port, "GET", "/v1/models")
    assert st == 401 and json.loads(data)["error"]["code"] == "invalid_api_key", (st, data)
    st, h, data = request(px.port, "GET", "/v1/models",
                          headers={"Authorization": "Bearer sk-acme-0123456789abcdef"})
    assert st == 200 and [m["id"] for m in json.loads(data)["data"]] == ["m"], (st, data)


def _check(env, text):
    path = env.write("m.yaml", "listen: [127.0.0.1:8080]\n" + text)
    r = subprocess.run([BIN, "check", "-c", path], capture_output=True, text=True, timeout=20)
    return path, r


def test_model_config_errors_have_their_place(env):
    pools = "pools:\n  - name: gpu\n    backends:\n      - address: 127.0.0.1:9101\n"
    cases = [
        ("routes:\n  - {match: {model: \"\"}, pool: gpu}\n", "7:21", "match.model: '' is empty"),
        ("routes:\n  - {match: {model: \"llama-[23]\"}, pool: gpu}\n", "7:21",
         "match.model: 'llama-[23]' holds '[', ']' or '\\'"),
        ("routes:\n  - {match: {model: [a, b]}, pool: gpu}\n", "7:21",
         "match.model: expected a model name, found a list"),
        ("        models: [a, b, a]\n", "6:24", "backends: models: 'a' is listed twice"),
        ("        models: [\"lora-*\"]\n", "6:18", "backends: models: 'lora-*' holds '*' or '?'"),
        ("        models: base\n", "6:17", "backends: models: expected a list"),
        ("        models: [{name: a}]\n", "6:18", "backends: models: expected a model name"),
        ("        models: [\"" + "m" * 256 + "\"]\n", "6:18", "is longer than 255 bytes"),
    ]
    for extra, place, msg in cases:
        path, r = _check(env, pools + extra)
        assert r.returncode == 2, (extra, r.stdout, r.stderr)
        assert r.stderr.startswith(f"{path}:{place}: ") and msg in r.stderr, (extra, r.stderr)
    path, r = _check(env, pools + "        models: [llama-3-8b, lora-a]\nroutes:\n"
                     "  - {match: {path_prefix: /v1/, model: \"llama-3-*\"}, pool: gpu}\n")
    assert r.returncode == 0, r.stderr
