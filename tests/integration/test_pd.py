"""Prefill/decode disaggregation seen from a client: a fleet of prefill and decode sims behind
one accelnet, in vLLM's protocol (kv_transfer_params) and SGLang's (bootstrap rooms). Every
answer is the decode side's and correct, the decode sims saw valid transfer params every time
(their own counts), a prefill sim killed mid-run costs no request, a short prompt decodes in
place, a client may not set the transfer params, a client that leaves cancels both sides,
a bad disaggregation is refused with FILE:LINE:COL, and the decode pool's /metrics count
prefills, their failures by reason, retries, fallbacks, skips and the parameters forwarded,
while the access log and /debug/requests name the prefill backend beside the decode one."""

import concurrent.futures
import json
import os
import signal
import socket
import subprocess

from harness import BIN, metrics_text, prom_samples, request, sim_stats, wait_until

PROMPT = "Summarise the following passage about accelerators and their networks. " * 6


def _fleet(env, nprefill=2, ndecode=2, prefill_latency=20, decode_opts=None, prefill_opts=None):
    pre = [env.sim(f"p{i}", role="prefill", latency_ms=prefill_latency, jitter=0, tokens=4,
                   token_ms=1, pd_secret="s3cret", **(prefill_opts or {}))
           for i in range(nprefill)]
    dec = [env.sim(f"d{i}", role="decode", latency_ms=20, jitter=0, tokens=4, token_ms=2,
                   pd_secret="s3cret", **(decode_opts or {}))
           for i in range(ndecode)]
    return pre, dec


def _yaml(pre, dec, protocol, extra="", prefill_extra="", prefill_balance="round-robin"):
    lines = ["pools:", "  - name: decode", "    balance: least-connections", "    backends:"]
    lines += [f"      - {{address: 127.0.0.1:{s.port}}}" for s in dec]
    lines += [f"    disaggregation: {{prefill_pool: prefill, protocol: {protocol}{extra}}}",
              "  - name: prefill", f"    balance: {prefill_balance}", "    backends:"]
    lines += [f"      - {{address: 127.0.0.1:{s.port}}}" for s in pre]
    if prefill_extra:
        lines.append(prefill_extra)
    return "\n".join(lines) + "\n"


def _ask(port, i, stream, chat=False, prompt=PROMPT):
    """One request; returns (status, the answer's text, who served it)."""
    n = 3 + i % 5
    body = {"model": "m", "max_tokens": n, "stream": stream}
    if chat:
        body["messages"] = [{"role": "user", "content": f"{prompt} ({i})"}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = f"{prompt} ({i})"
        path = "/v1/completions"
    if stream:
        body["stream_options"] = {"include_usage": True}
    st, hdrs, data = request(port, "POST", path, body=json.dumps(body),
                             headers={"Content-Type": "application/json"}, timeout=30)
    who = hdrs.get("x-served-by", ["?"])[0]
    if st != 200:
        return st, data.decode(errors="replace"), who
    if stream:
        events = [e[len("data: "):] for e in data.decode().split("\n\n") if e.startswith("data: ")]
        assert events[-1] == "[DONE]", data
        chunks = [json.loads(e) for e in events[:-1]]
        text = "".join(c["choices"][0]["text"] if not chat else
                       c["choices"][0].get("delta", {}).get("content", "")
                       for c in chunks if c["choices"])
        usage = [c["usage"] for c in chunks if c.get("usage")]
        assert usage and usage[-1]["completion_tokens"] == n, data
    else:
        doc = json.loads(data)
        c = doc["choices"][0]
        text = c["message"]["content"] if chat else c["text"]
        assert doc["usage"]["completion_tokens"] == n, doc
        assert "kv_transfer_params" not in doc, doc  # the decode's answer, not the prefill's
    want = "".join(f"tok{k} " for k in range(n))
    assert text == want, (text, want, i, stream, chat)
    return st, text, who


def _run_many(port, count, workers=8, chat_every=3):
    with concurrent.futures.ThreadPoolExecutor(workers) as ex:
        futs = [ex.submit(_ask, port, i, i % 2 == 1, i % chat_every == 0) for i in range(count)]
        return [f.result() for f in futs]


def _sum(sims, key):
    return sum(sim_stats(s.port)[key] for s in sims)


def _check_fleet(env, protocol):
    pre, dec = _fleet(env)
    px = env.proxy(_yaml(pre, dec, protocol))
    n = 40
    results = _run_many(px.port, n)
    assert all(st == 200 for st, _, _ in results), [r for r in results if r[0] != 200]
    decode_names = {"d0", "d1"}
    assert all(who in decode_names for _, _, who in results), results
    # every decode request came with transfer params a prefill sim issued for its prompt
    assert _sum(dec, "pd_valid") == n
    assert _sum(dec, "pd_refused") == 0 and _sum(dec, "pd_local") == 0
    if protocol == "vllm":
        assert _sum(pre, "pd_issued") == n
    else:
        assert _sum(pre, "pd_rooms") == n
    assert _sum(pre, "requests") >= n  # each had its prefill (plus the stats asked here)
    for s in pre + dec:  # the work spread over both of each side
        assert sim_stats(s.port)["completions"] > 0, sim_stats(s.port)


def test_pd_vllm_fleet_every_answer_from_decode_with_valid_params(env):
    _check_fleet(env, "vllm")


def test_pd_sglang_fleet_every_answer_from_decode_with_valid_room(env):
    _check_fleet(env, "sglang")


def test_pd_prefill_killed_mid_run_loses_no_request(env):
    pre, dec = _fleet(env, nprefill=3, prefill_latency=60)
    px = env.proxy(_yaml(pre, dec, "vllm", prefill_extra="    retry_budget_pct: 100"))
    n = 60
    with concurrent.futures.ThreadPoolExecutor(12) as ex:
        futs = [ex.submit(_ask, px.port, i, i % 2 == 1) for i in range(n)]
        # once prefills are under way on every prefill sim, one of them dies with its work
        wait_until(lambda: sim_stats(pre[0].port)["active"] > 0, "prefills on p0")
        pre[0].send_signal(signal.SIGKILL)
        pre[0].wait()
        results = [f.result() for f in futs]
    failed = [r for r in results if r[0] != 200]
    assert not failed, failed
    assert _sum(dec, "pd_valid") == n and _sum(dec, "pd_refused") == 0
    assert _sum(pre[1:], "pd_issued") >= n - 20  # the survivors took over


def test_pd_short_prompt_decodes_in_place(env):
    pre, dec = _fleet(env, 1, 1, decode_opts={"pd_allow_local": 1})
    px = env.proxy(_yaml(pre, dec, "vllm", extra=", min_prompt_bytes: 300"))
    st, _, who = _ask(px.port, 0, False, prompt="short")
    assert st == 200 and who == "d0"
    assert _sum(pre, "requests") == 0 + 1  # only the stats request just made
    assert _sum(dec, "pd_local") == 1 and _sum(dec, "pd_valid") == 0
    st, _, _ = _ask(px.port, 1, True)  # a long one is prefilled
    assert st == 200
    assert _sum(dec, "pd_valid") == 1 and _sum(pre, "pd_issued") == 1


def test_pd_decode_sim_refuses_missing_or_forged_params(env):
    pre, dec = _fleet(env, 1, 1)
    body = {"model": "m", "prompt": PROMPT, "max_tokens": 2}
    st, _, data = request(dec[0].port, "POST", "/v1/completions", body=json.dumps(body))
    assert st == 400 and b"kv_transfer_params" in data, data
    forged = dict(body, kv_transfer_params={"do_remote_prefill": True, "remote_engine_id": "x",
                                            "remote_block_ids": [1, 2, 3],
                                            "remote_host": "127.0.0.1", "remote_port": 1})
    st, _, data = request(dec[0].port, "POST", "/v1/completions", body=json.dumps(forged))
    assert st == 400 and b"not issued" in data, data
    room = dict(body, bootstrap_host="127.0.0.1", bootstrap_port=pre[0].port,
                bootstrap_room=12345)
    # a room the prefill sim bootstrapped (its prefill done): the decode takes it at once
    st, _, data = request(pre[0].port, "POST", "/v1/completions", body=json.dumps(room))
    assert st == 200
    st, _, data = request(dec[0].port, "POST", "/v1/completions", body=json.dumps(room))
    assert st == 200, data
    assert sim_stats(dec[0].port)["pd_refused"] == 2 and sim_stats(dec[0].port)["pd_valid"] == 1


def test_pd_client_may_not_set_transfer_params(env):
    pre, dec = _fleet(env, 1, 1)
    px = env.proxy(_yaml(pre, dec, "vllm"))
    for field, value in [("kv_transfer_params", {"remote_block_ids": [1]}),
                         ("bootstrap_room", 7), ("bootstrap_host", "10.0.0.1")]:
        body = {"model": "m", "prompt": PROMPT, "max_tokens": 2, field: value}
        st, _, data = request(px.port, "POST", "/v1/completions", body=json.dumps(body))
        assert st == 400 and b"set by the proxy" in data, (field, st, data)
    assert _sum(pre, "requests") == 1 and _sum(dec, "requests") == 1  # the stats alone


def test_pd_a_body_it_cannot_check_never_passes(env):
    """The fields only the proxy sets, in a body the proxy could not read whole as JSON (a
    chunked body, one longer than a body buffer): refused, never passed to a decode engine
    (which would pull KV from where the client said). Found by a hostile review."""
    pre, dec = _fleet(env, 1, 1)
    for proto in ("vllm", "sglang"):
        px = env.proxy(_yaml(pre, dec, proto), extra="limits: {body_buffer_bytes: 4096}\n")
        inj = {"model": "m", "prompt": PROMPT, "max_tokens": 2,
               "kv_transfer_params": {"do_remote_prefill": True, "remote_host": "evil.example",
                                      "remote_port": 6666},
               "bootstrap_host": "10.9.9.9", "bootstrap_port": 6666, "bootstrap_room": 42}
        data = json.dumps(inj).encode()
        s = socket.create_connection(("127.0.0.1", px.port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nTransfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(data) + data +
                  b"\r\n0\r\n\r\n")
        s.settimeout(10)
        got = b""
        while b"\r\n\r\n" not in got:
            d = s.recv(65536)
            if not d:
                break
            got += d
        s.close()
        assert got.startswith(b"HTTP/1.1 411"), (proto, got[:200])
        big = dict(inj, prompt=PROMPT + " pad" * 2000)  # longer than the 4 KiB body buffer
        st, _, text = request(px.port, "POST", "/v1/completions", body=json.dumps(big))
        assert st == 400 and (b"reads whole" in text or b"set by the proxy" in text), \
            (proto, st, text[:200])
        env.stop(px)
    # neither engine heard a word of them (the sims' stats: the requests they served)
    assert _sum(pre, "requests") == 1 and _sum(dec, "requests") == 1  # the stats alone


def test_pd_half_closed_client_gets_its_answer(env):
    """A client that shuts its writing side after its request (HAProxy's default: it has not
    left) during the prefill still gets its answer, as on an ordinary pool. Found by a
    hostile review: the prefill's wait took any FIN for a client gone."""
    pre, dec = _fleet(env, 1, 1, prefill_latency=600)
    px = env.proxy(_yaml(pre, dec, "vllm"))
    body = json.dumps({"model": "m", "prompt": PROMPT, "max_tokens": 2})
    s = socket.create_connection(("127.0.0.1", px.port))
    s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
    wait_until(lambda: sim_stats(pre[0].port)["active"] == 1, "the prefill under way")
    s.shutdown(socket.SHUT_WR)
    s.settimeout(10)
    got = b""
    while b"tok1" not in got:
        d = s.recv(65536)
        if not d:
            break
        got += d
    s.close()
    assert b"HTTP/1.1 200" in got and b"tok1" in got, got[:300]


def test_pd_failed_prefill_decode_only_or_502(env):
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    dead_port = dead.getsockname()[1]
    dec = [env.sim("d0", role="decode", latency_ms=5, jitter=0, tokens=3, token_ms=1,
                   pd_allow_local=1)]

    class Dead:
        port = dead_port
    text = _yaml([Dead], dec, "vllm", extra=", on_prefill_failure: decode_only")
    px = env.proxy(text)
    st, _, who = _ask(px.port, 0, False)
    assert st == 200 and who == "d0"
    assert _sum(dec, "pd_local") == 1
    env.stop(px)
    px = env.proxy(_yaml([Dead], dec, "vllm"))
    st, text, _ = _ask(px.port, 1, False)
    assert st == 502 and "prefill failed" in text, (st, text)
    dead.close()


def test_pd_client_leaving_cancels_both(env):
    pre, dec = _fleet(env, 1, 1, prefill_latency=3000)
    px = env.proxy(_yaml(pre, dec, "sglang"))
    body = json.dumps({"model": "m", "prompt": PROMPT, "max_tokens": 4})
    s = socket.create_connection(("127.0.0.1", px.port))
    s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
    # both sides hold the request: the prefill computing, the decode waiting for its room
    wait_until(lambda: sim_stats(pre[0].port)["active"] == 1, "the prefill under way")
    wait_until(lambda: sim_stats(dec[0].port)["requests"] >= 1, "the decode under way")
    s.close()
    wait_until(lambda: sim_stats(pre[0].port)["aborted"] == 1, "the prefill cancelled")
    wait_until(lambda: sim_stats(dec[0].port)["aborted"] == 1, "the decode cancelled")
    assert sim_stats(dec[0].port)["completions"] == 0


def test_pd_client_leaving_during_vllm_prefill_cancels_it(env):
    pre, dec = _fleet(env, 1, 1, prefill_latency=3000)
    px = env.proxy(_yaml(pre, dec, "vllm"))
    body = json.dumps({"model": "m", "prompt": PROMPT, "max_tokens": 4})
    s = socket.create_connection(("127.0.0.1", px.port))
    s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
    wait_until(lambda: sim_stats(pre[0].port)["active"] == 1, "the prefill under way")
    s.close()
    wait_until(lambda: sim_stats(pre[0].port)["aborted"] == 1, "the prefill cancelled")
    assert sim_stats(dec[0].port)["requests"] == 1  # the stats alone: no decode began


def _check(env, text):
    path = env.write("pd.yaml", "listen: [127.0.0.1:8080]\n" + text)
    r = subprocess.run([BIN, "check", "-c", path], capture_output=True, text=True, timeout=20)
    return path, r


def test_pd_bad_config_refused_with_file_line_col(env):
    base = ("pools:\n  - name: d\n    backends: [127.0.0.1:9101]\n"
            "    disaggregation: {{prefill_pool: {pp}, protocol: {proto}}}\n"
            "  - name: p\n    backends: [127.0.0.1:9102]\n{more}")
    cases = [
        (dict(pp="nope", proto="vllm", more=""), ":5:36: ", "no pool named 'nope'"),
        (dict(pp="d", proto="vllm", more=""), ":5:36: ", "cannot prefill for itself"),
        (dict(pp="p", proto="nixl", more=""), ":5:49: ", "expected vllm or sglang"),
        (dict(pp="p", proto="vllm",
              more="    disaggregation: {prefill_pool: d, protocol: vllm}\n"),
         ":5:36: ", "has a disaggregation of its own"),
        # the prefill goes over HTTP/1.1 on the connection: an HTTP/2 prefill pool failed
        # every prefill (and marked its backends failed)
        (dict(pp="p", proto="vllm", more="    protocol: h2c\n"), ":5:36: ",
         "prefill pool 'p': backend 127.0.0.1:9102 speaks HTTP/2"),
    ]
    for fill, where, what in cases:
        path, r = _check(env, base.format(**fill))
        assert r.returncode == 2, (fill, r)
        assert r.stderr.startswith(path + where), (fill, r.stderr)
        assert what in r.stderr, (fill, r.stderr)
    path, r = _check(env, "pools:\n  - name: d\n    backends: [127.0.0.1:9101]\n"
                          "    disaggregation: {protocol: vllm}\n")
    assert r.returncode == 2 and "'prefill_pool' is required" in r.stderr, r.stderr
    path, r = _check(env, base.format(pp="p", proto="sglang", more=""))
    assert r.returncode == 0, r.stderr


def test_pd_hung_prefill_backend_times_out_and_retries(env):
    slow = env.sim("p0", role="prefill", latency_ms=60000, jitter=0, tokens=4, token_ms=1,
                   pd_secret="s3cret")
    fast = env.sim("p1", role="prefill", latency_ms=10, jitter=0, tokens=4, token_ms=1,
                   pd_secret="s3cret")
    dec = [env.sim("d0", role="decode", latency_ms=5, jitter=0, tokens=4, token_ms=1,
                   pd_secret="s3cret")]
    px = env.proxy(_yaml([slow, fast], dec, "vllm", prefill_extra="    retry_budget_pct: 100"),
                   extra="timeouts: {first_byte_ms: 300}\n")
    results = [_ask(px.port, i, i % 2 == 1) for i in range(4)]
    assert all(st == 200 for st, _, _ in results), results
    assert _sum(dec, "pd_valid") == 4
    # the hung one got its share and each was cancelled there (its connection closed)
    wait_until(lambda: sim_stats(slow.port)["aborted"] >= 1, "the hung prefills cancelled")
    assert sim_stats(slow.port)["completions"] == 0


def test_pd_prefill_pool_llm_keeps_a_prompt_on_one_prefill_backend(env):
    # the prefill pool balances by its prefix index (balance: llm), the decode pool by load
    # (prefill sims with a block cache: a prompt they hold is quicker there, as on an engine)
    pre, dec = _fleet(env, nprefill=3, prefill_latency=5,
                      prefill_opts={"cache_blocks": 4096, "prefill_us_per_block": 3000})
    px = env.proxy(_yaml(pre, dec, "vllm", prefill_balance="llm",
                         prefill_extra="    llm: {block_bytes: 64}"))
    # a fleet that has served: each prefill backend's time-to-first-token fit learns its own
    # line from prompts of several sizes (new prompts, spread by the rendezvous), so that one
    # first miss measured late on a loaded machine (a cold fit puts what the prior's slope does
    # not explain into the fixed part: its hits then look dearer than a miss elsewhere) does
    # not decide where the prompt's next turns go
    for i in range(15):
        st, _, _ = _ask(px.port, i, False, prompt=f"warm{i} " * (20 + 40 * (i % 5)))
        assert st == 200
    issued = []
    for k, prompt in enumerate(["Alpha " * 200, "Beta " * 200, "Gamma " * 200]):
        before = [sim_stats(s.port)["pd_issued"] for s in pre]
        for i in range(4):
            st, _, _ = _ask(px.port, i, i % 2 == 1, prompt=prompt)
            assert st == 200
        after = [sim_stats(s.port)["pd_issued"] for s in pre]
        issued.append([a - b for a, b in zip(after, before)])
    for d in issued:  # each prompt's four prefills on one prefill backend
        assert sorted(d) == [0, 0, 4], issued
    assert _sum(dec, "pd_valid") == 15 + 12


def test_pd_keep_alive_client_several_requests_on_one_connection(env):
    import http.client
    pre, dec = _fleet(env, 1, 1)
    px = env.proxy(_yaml(pre, dec, "vllm"))
    c = http.client.HTTPConnection("127.0.0.1", px.port, timeout=15)
    try:
        for i in range(4):
            body = {"model": "m", "prompt": f"{PROMPT} {i}", "max_tokens": 3, "stream": i % 2 == 1}
            c.request("POST", "/v1/completions", body=json.dumps(body),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read().decode()
            assert r.status == 200, data
            assert "tok0 " in data and "tok2 " in data and "tok3" not in data, data
            if i == 0:
                first = sim_stats(pre[0].port)["connections"]
    finally:
        c.close()
    assert _sum(dec, "pd_valid") == 4 and _sum(pre, "pd_issued") == 4
    # the prefill side's connection was kept alive too: no new one after the first request
    # but the two stats requests' own (pd_issued above, and this one)
    now = sim_stats(pre[0].port)["connections"]
    assert now == first + 2, (first, now)


def _pd_counts(px, pool="decode"):
    """The decode pool's P/D counters from /metrics: {name: value}, failures by reason."""
    got = {}
    for (name, labels), v in prom_samples(metrics_text(px.admin)).items():
        lab = dict(labels)
        if not name.startswith("accelnet_pool_pd_") or lab.get("pool") != pool:
            continue
        key = name[len("accelnet_pool_pd_"):-len("_total")]
        got[key + ("." + lab["reason"] if "reason" in lab else "")] = v
    return got


def _failures(c):
    return {k.split(".", 1)[1]: v for k, v in c.items() if k.startswith("prefill_failures.") and v}


def test_pd_metrics_count_prefills_skips_and_params(env):
    pre, dec = _fleet(env, decode_opts={"pd_allow_local": 1})
    for proto in ("vllm", "sglang"):
        px = env.proxy(_yaml(pre, dec, proto, extra=", min_prompt_bytes: 300"))
        before = _pd_counts(px)
        assert before["prefills"] == 0 and not _failures(before), before
        for i in range(6):
            assert _ask(px.port, i, i % 2 == 1)[0] == 200
        for i in range(2):
            assert _ask(px.port, i, i == 1, prompt="short")[0] == 200
        c = _pd_counts(px)
        assert c["prefills"] == 6 and c["kv_params"] == 6 and c["skipped"] == 2, (proto, c)
        assert c["retries"] == 0 and c["fallbacks"] == 0 and not _failures(c), (proto, c)
        # /status shows the same counts in the pool's "pd" object
        st, _, body = request(px.admin, "GET", "/status")
        pool = [p for p in json.loads(body)["pools"] if p["name"] == "decode"][0]
        assert pool["pd"]["prefills"] == 6 and pool["pd"]["skipped"] == 2, pool["pd"]
        assert pool["pd"]["prefill_failures"]["connect"] == 0, pool["pd"]
        env.stop(px)


def test_pd_metrics_count_failures_retries_and_fallbacks(env):
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    pre, dec = _fleet(env, 1, 1, decode_opts={"pd_allow_local": 1})

    class Dead:
        port = dead.getsockname()[1]
    # a dead prefill backend beside a live one: a prefill sent to it fails and is retried
    # on the live one; every request is prefilled in the end
    px = env.proxy(_yaml([Dead, pre[0]], dec, "vllm",
                         prefill_extra="    retry_budget_pct: 100"))
    for i in range(6):
        assert _ask(px.port, i, i % 2 == 1)[0] == 200
    c = _pd_counts(px)
    fails = _failures(c)
    assert fails and set(fails) <= {"connect"}, c
    assert c["retries"] == sum(fails.values()) and c["prefills"] == 6 + c["retries"], c
    assert c["kv_params"] == 6 and c["fallbacks"] == 0, c
    assert _sum(dec, "pd_valid") == 6
    env.stop(px)
    # no live prefill backend: decode_only decodes each in place (a fallback), retry says 502
    px = env.proxy(_yaml([Dead], dec, "vllm", extra=", on_prefill_failure: decode_only"))
    for i in range(3):
        assert _ask(px.port, i, i % 2 == 1)[0] == 200
    c = _pd_counts(px)
    assert c["fallbacks"] == 3 and c["kv_params"] == 0, c
    assert sum(_failures(c).values()) >= 3 and set(_failures(c)) <= {"connect", "no_backend"}, c
    env.stop(px)
    px = env.proxy(_yaml([Dead], dec, "vllm"))
    assert _ask(px.port, 0, False)[0] == 502
    c = _pd_counts(px)
    assert c["fallbacks"] == 0 and sum(_failures(c).values()) == 1, c
    dead.close()


def test_pd_metrics_count_a_prefill_that_answers_no_200(env):
    # a prefill backend that fails every request (500): counted as "status", retried
    bad = env.sim("pbad", role="prefill", latency_ms=1, jitter=0, tokens=1, token_ms=1,
                  pd_secret="s3cret", fail_rate=1)
    pre, dec = _fleet(env, 1, 1)
    px = env.proxy(_yaml([bad, pre[0]], dec, "vllm", prefill_extra="    retry_budget_pct: 100"))
    for i in range(4):
        assert _ask(px.port, i, False)[0] == 200
    c = _pd_counts(px)
    assert _failures(c).get("status", 0) >= 1 and set(_failures(c)) == {"status"}, c
    assert c["retries"] == c["prefill_failures.status"], c


def test_pd_access_log_and_debug_requests_name_the_prefill_backend(env):
    pre, dec = _fleet(env, 1, 1)
    log = os.path.join(env.dir, "access.log")
    for fmt in ("json", "combined"):
        px = env.proxy(_yaml(pre, dec, "vllm"),
                       extra=f"access_log: {{path: {log}.{fmt}, format: {fmt}}}\n")
        st, hdrs, _ = request(px.port, "POST", "/v1/completions",
                              body=json.dumps({"model": "m", "prompt": PROMPT, "max_tokens": 2}),
                              headers={"Content-Type": "application/json"})
        assert st == 200
        reqid = hdrs["x-request-id"][0]
        p_addr, d_addr = f"127.0.0.1:{pre[0].port}", f"127.0.0.1:{dec[0].port}"

        def line():
            try:
                with open(f"{log}.{fmt}") as f:
                    return [x for x in f.read().splitlines() if reqid in x]
            except FileNotFoundError:
                return []
        wait_until(line, "the access log line")
        if fmt == "json":
            rec = json.loads(line()[0])
            assert rec["backend"] == d_addr and rec["prefill_backend"] == p_addr, rec
        else:
            assert f" backend={d_addr} prefill={p_addr} " in line()[0], line()
        found = []

        def ended():
            st, _, body = request(px.admin, "GET", "/debug/requests")
            found[:] = [r for r in json.loads(body)["slowest"] if r["request_id"] == reqid]
            return found
        wait_until(ended, "the request in /debug/requests")
        assert found[0]["backend"] == d_addr and found[0]["prefill_backend"] == p_addr, found
        env.stop(px)
    # a pool without disaggregation logs no prefill_backend
    px = env.proxy("pools:\n  - name: plain\n    backends:\n"
                   f"      - {{address: 127.0.0.1:{dec[0].port}}}\n",
                   extra=f"access_log: {{path: {log}.plain, format: json}}\n")
    request(px.port, "GET", "/sim/stats")
    env.stop(px)
    with open(f"{log}.plain") as f:
        rec = json.loads(f.read().splitlines()[0])
    assert rec["backend"] and "prefill_backend" not in rec, rec


def test_sim_prefill_stalls_decode_only_when_asked(env):
    """accelnet sim --prefill-stalls-decode 1 (the bench's aggregated fleet): a prefill that
    starts while a stream decodes holds that stream's tokens until it ends; off (the
    default), nothing waits."""
    for on in (1, 0):
        s = env.sim(f"agg{on}", latency_ms=200, jitter=0, tokens=30, token_ms=10,
                    prefill_stalls_decode=on)
        body = json.dumps({"prompt": "first", "max_tokens": 30, "stream": True})
        c = socket.create_connection(("127.0.0.1", s.port))
        c.settimeout(15)
        c.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}"
                  f"\r\n\r\n{body}".encode())
        got = b""
        while b"tok0" not in got:  # it decodes now
            got += c.recv(65536)
        st, _, _ = request(s.port, "POST", "/v1/completions",
                           body=json.dumps({"prompt": "second", "max_tokens": 2}))
        assert st == 200
        while b"[DONE]" not in got:
            d = c.recv(65536)
            assert d, got
            got += d
        c.close()
        assert b"tok29" in got
        got = sim_stats(s.port)
        if on:
            assert got["decode_stalls"] >= 1 and got["decode_stall_ms"] > 0, got
        else:
            assert got["decode_stalls"] == 0 and got["decode_stall_ms"] == 0, got
