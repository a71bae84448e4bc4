"""Token-level figures of LLM routes (issue 13): per route and per tenant request counts by
class, prompt and completion tokens equal to what the backend reported in its usage (or the
events it streamed, without one), time to first token once per stream and one token gap per
event after the first, the tenant cap folding the rest into `other`, /status's routes and
tenants, `promtool check metrics` clean, and a stream of CR-ended lines in one-byte chunks
read as any other."""

import http.client
import json
import socket
import subprocess

from harness import (ScriptedBackend, free_port, metrics_text, pool_yaml, prom_samples,
                     promtool_clean, read_until, request, status, wait_until)

TENANTS = {"acme": "sk-acme-0123456789abcdef", "beta": "sk-beta-0123456789abcdef",
           "gamma": "sk-gamma-0123456789abcdef", "delta": "sk-delta-0123456789abcdef"}
CLASSES = ["aborted", "1xx", "2xx", "3xx", "4xx", "5xx"]


def _proxy(env, sim, max_tenants=None):
    keys = env.write("keys.txt", "".join(f"{t} {k}\n" for t, k in TENANTS.items()))
    extra = f"metrics: {{max_tenants: {max_tenants}}}\n" if max_tenants else ""
    return env.proxy("pools:\n" + pool_yaml("gpu", [sim.port]) +
                     "routes:\n"
                     "  - name: chat\n"
                     "    match: {path_prefix: /v1/chat/}\n    pool: gpu\n    api: openai\n"
                     f"    auth: {{api_keys_file: {keys}}}\n"
                     "  - match: {path_prefix: /v1/}\n    pool: gpu\n    api: openai\n"
                     f"    auth: {{api_keys_file: {keys}}}\n", extra=extra)


def _complete(port, tenant, path, stream, max_tokens, usage=False):
    """One completion as <tenant>: (status, the usage the backend reported or None, events
    with text)."""
    body = {"prompt": "x" * (40 + max_tokens), "max_tokens": max_tokens, "stream": stream}
    if path.endswith("/chat/completions"):
        body = {"messages": [{"role": "user", "content": "x" * 40}], "max_tokens": max_tokens,
                "stream": stream}
    if usage:
        body["stream_options"] = {"include_usage": True}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("POST", path, body=json.dumps(body),
                  headers={"Content-Type": "application/json",
                           "Authorization": f"Bearer {TENANTS[tenant]}"} if tenant else
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read().decode()
    finally:
        c.close()
    if r.status != 200:
        return r.status, None, 0
    if not stream:
        return 200, json.loads(data)["usage"], 0
    got, events = None, 0
    for line in data.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("usage"):
            got = ev["usage"]
        if ev["choices"]:
            events += 1
    return 200, got, events


def _count(got, name, **labels):
    return got.get((name, tuple(sorted(labels.items()))), 0)


def test_route_and_tenant_figures_match_what_the_backend_reported(env):
    sim = env.sim("gpu", latency_ms=5, jitter=0, token_ms=5, slots=8)
    px = _proxy(env, sim)
    want = {}  # (route, tenant): [requests 2xx, prompt, completion, streams, events]

    def run(tenant, route, path, stream, n, usage=False):
        st, u, events = _complete(px.port, tenant, path, stream, n, usage)
        assert st == 200
        w = want.setdefault((route, tenant), [0, 0, 0, 0, 0])
        w[0] += 1
        if u:
            w[1] += u["prompt_tokens"]
            w[2] += u["completion_tokens"]
        else:
            w[2] += events  # no usage: the completion is the events counted
        if stream:
            assert events == n
            w[3] += 1
            w[4] += events

    run("acme", "1", "/v1/completions", True, 6, usage=True)
    run("acme", "1", "/v1/completions", True, 4, usage=True)
    run("acme", "1", "/v1/completions", False, 7)
    run("beta", "chat", "/v1/chat/completions", True, 5)  # no usage in the stream
    run("beta", "chat", "/v1/chat/completions", False, 3)
    run("acme", "chat", "/v1/chat/completions", True, 2, usage=True)
    assert _complete(px.port, None, "/v1/chat/completions", False, 1)[0] == 401

    def settled():
        got = prom_samples(metrics_text(px.admin))
        return sum(_count(got, "accelnet_route_requests_total", route=r, **{"class": c})
                   for r in ("chat", "1") for c in CLASSES) == 7
    wait_until(settled, "7 requests counted")
    text = metrics_text(px.admin)
    promtool_clean(text)
    got = prom_samples(text)
    routes = {r for r, _ in want}
    for r in routes:
        rows = [w for (rr, _), w in want.items() if rr == r]
        assert _count(got, "accelnet_route_requests_total", route=r, **{"class": "2xx"}) == \
            sum(w[0] for w in rows)
        assert _count(got, "accelnet_route_tokens_total", route=r, kind="prompt") == \
            sum(w[1] for w in rows), r
        assert _count(got, "accelnet_route_tokens_total", route=r, kind="completion") == \
            sum(w[2] for w in rows), r
        assert _count(got, "accelnet_route_ttft_seconds_count", route=r) == sum(w[3] for w in rows)
        assert _count(got, "accelnet_route_token_gap_seconds_count", route=r) == \
            sum(w[4] - w[3] for w in rows)  # one gap per event after each stream's first
        assert _count(got, "accelnet_route_request_duration_seconds_count", route=r) == \
            sum(w[0] for w in rows) + (r == "chat")
    assert _count(got, "accelnet_route_requests_total", route="chat", **{"class": "4xx"}) == 1
    for t in ("acme", "beta"):
        rows = [w for (_, tt), w in want.items() if tt == t]
        assert _count(got, "accelnet_tenant_requests_total", tenant=t, **{"class": "2xx"}) == \
            sum(w[0] for w in rows)
        assert _count(got, "accelnet_tenant_tokens_total", tenant=t, kind="prompt") == \
            sum(w[1] for w in rows)
        assert _count(got, "accelnet_tenant_tokens_total", tenant=t, kind="completion") == \
            sum(w[2] for w in rows)
    # tenants that sent nothing have no series at all; nor does "other" under the cap
    assert {dict(k[1])["tenant"] for k in got if k[0] == "accelnet_tenant_requests_total"} == \
        {"acme", "beta"}
    be = (("backend", f"127.0.0.1:{sim.port}"), ("pool", "gpu"))
    assert got[("accelnet_backend_ttft_seconds_count", be)] == sum(w[3] for w in want.values())
    assert got[("accelnet_backend_token_gap_seconds_count", be)] == \
        sum(w[4] - w[3] for w in want.values())

    # /status: the same figures, routes in config order, tenants as first met
    st = status(px.admin)
    assert [r["name"] for r in st["routes"]] == ["chat", "1"]
    for r in st["routes"]:
        assert list(r) == ["name", "requests", "duration_ms", "ttft_ms", "token_gap_ms",
                           "tokens", "cache"], list(r)
        lab = (("route", r["name"]),)
        for c in CLASSES:
            assert r["requests"][c] == got.get(("accelnet_route_requests_total",
                                                tuple(sorted(lab + (("class", c),)))), 0)
        assert r["ttft_ms"]["count"] == got[("accelnet_route_ttft_seconds_count", lab)]
        assert r["tokens"]["completion"] == \
            got[("accelnet_route_tokens_total", tuple(sorted(lab + (("kind", "completion"),))))]
    assert [t["name"] for t in st["tenants"]] == ["acme", "beta"]
    for t in st["tenants"]:
        assert list(t) == ["name", "requests", "tokens"]
        assert t["tokens"]["prompt"] == _count(got, "accelnet_tenant_tokens_total",
                                               tenant=t["name"], kind="prompt")
    ttft = st["pools"][0]["backends"][0]["ttft_ms"]
    assert ttft["count"] == sum(w[3] for w in want.values()) and ttft["p50"] > 0


def test_a_stream_cut_by_its_client_counts_as_aborted(env):
    sim = env.sim("gpu", latency_ms=1, jitter=0, token_ms=200, tokens=50)
    px = _proxy(env, sim)
    body = json.dumps({"prompt": "hi", "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", px.port), timeout=15) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                  b"application/json\r\nAuthorization: Bearer " + TENANTS["acme"].encode() +
                  b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        read_until(s, lambda b: b.count(b"data: ") >= 2)

    def cut():
        got = prom_samples(metrics_text(px.admin))
        return _count(got, "accelnet_route_requests_total", route="1",
                      **{"class": "aborted"}) == 1
    wait_until(cut, "the cut stream counted")
    got = prom_samples(metrics_text(px.admin))
    assert _count(got, "accelnet_tenant_requests_total", tenant="acme", **{"class": "aborted"}) == 1
    assert _count(got, "accelnet_route_ttft_seconds_count", route="1") == 1
    assert _count(got, "accelnet_route_tokens_total", route="1", kind="completion") >= 2


def test_tenants_past_the_cap_fold_into_other(env):
    sim = env.sim("gpu", latency_ms=1, jitter=0, token_ms=0)
    px = _proxy(env, sim, max_tenants=2)
    for t in ("acme", "beta", "gamma", "delta", "gamma"):
        assert _complete(px.port, t, "/v1/completions", False, 3)[0] == 200

    def settled():
        got = prom_samples(metrics_text(px.admin))
        return _count(got, "accelnet_route_requests_total", route="1", **{"class": "2xx"}) == 5
    wait_until(settled, "5 requests counted")
    text = metrics_text(px.admin)
    promtool_clean(text)
    got = prom_samples(text)
    per = {dict(k[1])["tenant"]: v for k, v in got.items()
           if k[0] == "accelnet_tenant_requests_total" and dict(k[1])["class"] == "2xx"}
    assert per == {"acme": 1, "beta": 1, "other": 3}, per
    assert _count(got, "accelnet_tenant_tokens_total", tenant="other", kind="completion") == 9
    assert [t["name"] for t in status(px.admin)["tenants"]] == ["acme", "beta", "other"]


def test_route_names_are_checked_at_load(env):
    from harness import BIN
    port = free_port()
    for name, why in (("chat", "already route 0's"), ("9lives", "expected a letter"),
                      ("a b", "expected a letter"), ("x" * 65, "at most 64")):
        path = env.write("bad.yaml", f"listen:\n  - address: 127.0.0.1:{port}\n"
                         "pools:\n  - name: p\n    backends:\n      - {address: 127.0.0.1:1}\n"
                         "routes:\n  - name: chat\n    pool: p\n"
                         f"  - name: '{name}'\n    pool: p\n")
        r = subprocess.run([BIN, "check", "-c", path], capture_output=True, timeout=30,
                           check=False)
        assert r.returncode == 2, r
        assert f"{path}:10:11: routes: name" in r.stderr.decode() + r.stdout.decode(), r
        assert why in r.stderr.decode() + r.stdout.decode(), r


def test_max_tenants_is_checked_at_load(env):
    from harness import BIN
    port = free_port()
    for value, where, why in (("0", "8:16", "0 is out of range: expected 1 to 10000"),
                              ("10001", "8:16", "10001 is out of range: expected 1 to 10000"),
                              ("many", "8:16", "expected a number, found 'many'"),
                              (None, "8:3", "metrics: unknown key 'max_tenant'")):
        key = f"max_tenants: {value}" if value else "max_tenant: 5"
        path = env.write("bad.yaml", f"listen:\n  - address: 127.0.0.1:{port}\n"
                         "pools:\n  - name: p\n    backends:\n      - {address: 127.0.0.1:1}\n"
                         f"metrics:\n  {key}\n")
        r = subprocess.run([BIN, "check", "-c", path], capture_output=True, timeout=30,
                           check=False)
        out = r.stderr.decode() + r.stdout.decode()
        assert r.returncode == 2 and f"{path}:{where}: {why}" in out, out


def test_event_streams_are_read_on_any_route_json_only_with_api_openai(env):
    sim = env.sim("gpu", latency_ms=1, jitter=0, token_ms=2)
    px = env.proxy("pools:\n" + pool_yaml("gpu", [sim.port]) +
                   "routes:\n  - name: plain\n    pool: gpu\n")
    assert _complete(px.port, None, "/v1/completions", True, 4)[0] == 200
    assert _complete(px.port, None, "/v1/completions", False, 5)[0] == 200

    def settled():
        got = prom_samples(metrics_text(px.admin))
        return _count(got, "accelnet_route_requests_total", route="plain", **{"class": "2xx"}) == 2
    wait_until(settled, "2 requests counted")
    got = prom_samples(metrics_text(px.admin))
    assert _count(got, "accelnet_route_ttft_seconds_count", route="plain") == 1
    assert _count(got, "accelnet_route_token_gap_seconds_count", route="plain") == 3
    # the stream's 4 events; the JSON answer is not read without api: openai
    assert _count(got, "accelnet_route_tokens_total", route="plain", kind="completion") == 4
    assert _count(got, "accelnet_route_tokens_total", route="plain", kind="prompt") == 0


def test_a_stream_of_cr_lines_in_one_byte_chunks_counts_its_tokens(env):
    """An event stream whose lines end with a CR alone (the format allows CR, LF or CRLF),
    framed into chunks of one byte with extensions: its 3 text events are 3 tokens, one time to
    first token and 2 gaps. A comment, an empty text, [DONE] and a usage key quoted inside a
    text count nothing."""
    events = (b": hello\r\r"
              b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\r\r"
              b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r\r"
              b"data:{\"choices\":[{\"delta\":{\"content\":\"{\\\"prompt_tokens\\\":9}\"}}]}\r\r"
              b"data: {\"choices\":[{\"text\":\"c\"}]}\r\rdata: [DONE]\r\r")
    body = b"".join(b"1;ext=1\r\n%c\r\n" % c for c in events) + b"0\r\n\r\n"

    def script(n, req):
        return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n" + body, False)
    be = ScriptedBackend(script)
    env.on_cleanup.append(be.close)
    px = env.proxy("pools:\n" + pool_yaml("gpu", [be.port]) +
                   "routes:\n  - name: llm\n    pool: gpu\n    api: openai\n")
    st, _, got_body = request(px.port, "POST", "/v1/chat/completions", body=b"{}")
    assert st == 200 and got_body == events

    def settled():
        got = prom_samples(metrics_text(px.admin))
        return _count(got, "accelnet_route_requests_total", route="llm", **{"class": "2xx"}) == 1
    wait_until(settled, "the stream counted")
    got = prom_samples(metrics_text(px.admin))
    assert _count(got, "accelnet_route_tokens_total", route="llm", kind="completion") == 3
    assert _count(got, "accelnet_route_tokens_total", route="llm", kind="prompt") == 0
    assert _count(got, "accelnet_route_ttft_seconds_count", route="llm") == 1
    assert _count(got, "accelnet_route_token_gap_seconds_count", route="llm") == 2
